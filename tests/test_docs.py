"""The code blocks of docs/*.md and README.md run as written."""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
PAGES = [p for p in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"] if BLOCK.search(p.read_text())]


# quickstart.md trains and resumes runs: slow
@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.slow) if p.name == "quickstart.md" else p
                                  for p in PAGES], ids=lambda p: p.name)
def test_code_blocks_run(page, tmp_path, monkeypatch):
    blocks = BLOCK.findall(page.read_text())
    monkeypatch.chdir(tmp_path)  # files a page writes land in a temporary folder
    namespace = {"__name__": f"docs_{page.stem}"}
    for i, code in enumerate(blocks):
        try:
            exec(compile(code, f"{page.name}[block {i}]", "exec"), namespace)
        except Exception as err:  # name the block that failed
            raise AssertionError(f"{page.name}, python block {i} failed: {err!r}\n{code}") from err


def _rows(name):
    import json

    data = json.loads((ROOT / "benchmarks" / "results" / name).read_text())
    return data["rows"] if isinstance(data, dict) else data


def test_quoted_figures_are_those_of_the_results():
    """Figures the README and docs/benchmarks.md quote come from benchmarks/results/*.json:
    rerunning a benchmark without updating the text (or editing the text alone) fails here."""
    readme, bench = (ROOT / "README.md").read_text(), (ROOT / "docs" / "benchmarks.md").read_text()
    ms = lambda seconds: f"{seconds * 1e3:.0f}"  # noqa: E731
    w1 = {(r["group"], r["precision"], r["output"]): r for r in _rows("vmc_step.json")}
    step = w1[("translations", "f32", "positive")]
    assert f"{ms(step['step_s'])} ms" in readme, "README: the W1 step of vmc_step.json"
    for r in w1.values():  # every row of the W1 table: step (median, min) and its parts
        cells = " | ".join(ms(r[k]) for k in ("step_min_s", "sampling_s", "local_energy_s", "jacobian_s", "solve_s"))
        assert f"{ms(r['step_s'])}** | {cells} |" in bench or f"| {ms(r['step_s'])} | {cells} |" in bench, r
    for r in _rows("vmc_scale.json"):  # the scale table: step and parts of every measured row
        if r["status"] == "skipped":
            continue
        cells = " | ".join(ms(r["parts"][k]["time_s"]) for k in ("sampling", "local_energy", "jacobian", "solve"))
        assert f"| {ms(r['step']['time_s'])} | {cells} |" in bench, (r["lattice"], r["hamiltonian"], r["symmetry"])
        if (r["lattice"], r["hamiltonian"], r["symmetry"]) == ("6x6", "j1j2", "translations"):
            assert f"{r['step']['time_s']:.1f} s" in readme, "README: the 6x6 J1-J2 step of vmc_scale.json"
    for r in _rows("accuracy.json"):  # "9.2e-4 ± 0.9e-4": the error bar in the value's exponent
        mantissa, exponent = f"{r['relative_error']:.1e}".split("e")
        e = int(exponent)
        quoted = f"{mantissa}e{e} ± {r['relative_error_bar'] / 10.0**e:.1f}e{e}"
        for page, text in (("README.md", readme), ("benchmarks.md", bench)):
            assert quoted in text, (page, r["system"], quoted)
        if r["system"] == "j1j2_4x4":
            assert quoted in (ROOT / "docs" / "physics.md").read_text(), ("physics.md", quoted)
            assert f"{r['wall_time_s'] / 60:.1f}" in text, (page, r["system"], "minutes")
