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
    # the README's accuracy table is generated (benchmarks/readme_table.py; tests/test_claims.py)
    for r in _rows("accuracy.json"):  # "9.2e-4 ± 0.9e-4": the error bar in the value's exponent
        mantissa, exponent = f"{r['relative_error']:.1e}".split("e")
        e = int(exponent)
        quoted = f"{mantissa}e{e} ± {r['relative_error_bar'] / 10.0**e:.1f}e{e}"
        for page, text in (("benchmarks.md", bench),):
            assert quoted in text, (page, r["system"], quoted)
        if r["system"] == "j1j2_4x4":
            assert quoted in (ROOT / "docs" / "physics.md").read_text(), ("physics.md", quoted)
            assert f"{r['wall_time_s'] / 60:.1f}" in text, (page, r["system"], "minutes")


# A command a reader copies: fenced shell blocks (not python ones) and inline code spans
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"(`+)(.+?)\1", re.S)
COMMAND = re.compile(r"(?:^|[;&|(]\s*|\$\s+)(?:quantax-lite|python3?|pytest)\b|^--[a-z]")
REDIRECT_WORD = re.compile(r"\d*&?")  # what may stand before a redirection: `>f`, `2>f`, `&>f`


def unquoted_redirects_in_words(command: str) -> list[str]:
    """The shell words of ``command`` holding a ``>`` outside quotes after other characters
    of the same word (``translations>full@600``: the shell reads ``translations`` and
    writes to a file ``full@600``); a redirection of its own (``> out``, ``2>&1``) is not one."""
    bad, word, quote, i = [], "", None, 0
    while i < len(command):
        c = command[i]
        if quote:
            if c == quote:
                quote = None
            elif c == "\\" and quote == '"':
                i += 1
        elif c in "'\"":
            quote = c
        elif c == "\\":
            i += 1
        elif c.isspace():
            word = ""
        elif c == ">" and not REDIRECT_WORD.fullmatch(word) and not word.endswith(">"):
            end = command.find(" ", i)
            bad.append(word + command[i:end if end >= 0 else len(command)])
        if not c.isspace():
            word += c
        i += 1
    return bad


def documented_commands(text: str):
    """``(kind, command)`` of every command line in fenced non-python blocks (continuation
    lines joined, a ``$`` prompt dropped) and every inline code span that is a command."""
    for lang, body in FENCE.findall(text):
        if lang.strip().lower() in ("python", "py", "pycon", "json", "text", "toml", "yaml"):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if COMMAND.search(line):
                yield "block", line
    prose = FENCE.sub("", text)
    for _, span in INLINE.findall(prose):
        span = span.strip()
        if COMMAND.search(span):
            yield "inline", span


def test_unquoted_redirect_finder():
    assert unquoted_redirects_in_words("quantax-lite train --symmetry translations>full@600") == [
        "translations>full@600"]
    assert unquoted_redirects_in_words("quantax-lite train --symmetry=translations>full@600 --iters 9")
    for ok in ("quantax-lite train --symmetry 'translations>full@600'",
               'quantax-lite train --symmetry "translations>full@600"',
               "python benchmarks/accuracy.py > out.txt 2>&1", "pytest >log", "python x.py &>log"):
        assert unquoted_redirects_in_words(ok) == [], ok
    found = list(documented_commands("```bash\nquantax-lite train \\\n  --symmetry a>b@3\n```\n"
                                     "and `--symmetry c>d@4` but `Recipe(symmetry=\"e>f@5\")`\n"))
    assert [k for k, _ in found] == ["block", "inline"]


def test_documented_commands_quote_a_greater_than():
    """An unquoted ``>`` inside an option value (``--symmetry translations>full@600``) would
    redirect the command's output to a file in every shell: every command of the README and
    docs/*.md quotes it (``--symmetry 'translations>full@600'``)."""
    bad = []
    for page in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]:
        for kind, command in documented_commands(page.read_text()):
            for word in unquoted_redirects_in_words(command):
                bad.append(f"{page.name} ({kind}): {word!r} in {command[:120]!r}")
    assert not bad, "quote these option values:\n" + "\n".join(bad)
