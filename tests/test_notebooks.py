"""The tutorial notebooks run from top to bottom without an error, in their small setting.

Each notebook is copied to a temporary folder (its saved outputs stay untouched) and
executed there with nbclient in a fresh ``python3`` kernel, with ``QUANTAX_LITE_SMALL=1``
in the kernel's environment. A cell that raises fails the test and names the cell. Then
the numbers the notebook printed are checked (``CHECKS``, one function per notebook, on
the text of every cell's printed output): energies against the library's exact ground
state energies and the variational bound, the identities a notebook shows (all rows
processed once, zero all-gathers with shard_batch, equal Jacobians), so a notebook that
runs but computes the wrong thing fails. The same checks hold for the outputs saved in
the notebooks (``test_saved_outputs_pass_the_checks``, fast).
"""
import math
import os
import pathlib
import re
import shutil

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 300


def test_every_notebook_is_collected():
    names = {p.name for p in NOTEBOOKS}
    assert {"01_train_heisenberg.ipynb", "02_chunk_map.ipynb", "03_gspmd_vs_shard_map.ipynb"} <= names


def _kernel_env() -> dict:
    env = dict(os.environ)
    env["QUANTAX_LITE_SMALL"] = "1"
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path):
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    nb = nbformat.read(copy, as_version=4)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    client = nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(tmp_path)}},  # the kernel's working directory
    )
    try:
        client.execute(env=_kernel_env())
    except nbclient.exceptions.CellExecutionError as err:
        pytest.fail(f"{path.name}: a cell raised:\n{err}")
    except nbclient.exceptions.CellTimeoutError as err:
        pytest.fail(f"{path.name}: a cell ran longer than {CELL_TIMEOUT_S} s:\n{err}")
    errors = [o for cell in nb.cells if cell.cell_type == "code"
              for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: error outputs {errors}"
    # the small setting really ran (the first code cell reads the variable)
    first_code = next(cell for cell in nb.cells if cell.cell_type == "code")
    assert "QUANTAX_LITE_SMALL" in first_code.source
    assert nb.cells[0].cell_type == "markdown"
    text = printed(nb)
    assert "small setting" in text
    CHECKS[path.stem](text)


# --------------------------------------------------------------------------- #
# what the notebooks print                                                     #
# --------------------------------------------------------------------------- #

NUM = r"(-?\d+(?:\.\d*)?(?:e[-+]?\d+)?)"


def printed(nb) -> str:
    """Everything the code cells wrote to stdout, in order."""
    return "".join(o.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                   for o in cell.get("outputs", []) if o.get("output_type") == "stream" and o.get("name") == "stdout")


def numbers(pattern: str, text: str) -> list[tuple[float, ...]]:
    """Every match of ``pattern`` (``NUM`` groups) as floats; at least one."""
    found = [tuple(float(g) for g in m) if isinstance(m, tuple) else (float(m),)
             for m in re.findall(pattern, text)]
    assert found, f"nothing printed matches {pattern!r}"
    return found


def exact_energy(J2: float = 0.0, marshall_sign: bool = False) -> float:
    """The library's reference: the 4x4 J1-J2 ground-state energy by exact diagonalization."""
    from quantax_lite.exact import ground_state_energy
    from quantax_lite.lattice import Square
    from quantax_lite.operators import Heisenberg

    return float(ground_state_energy(Heisenberg(Square(4), J1=1.0, J2=J2, marshall_sign=marshall_sign)))


def check_train_heisenberg(text):
    """01: the printed exact energy is the library's; the final estimate is variational (3
    error bars), close to it (small setting: 60 steps of 256 samples) and agrees with the
    exact expectation of the trained network; the relative error printed is that of the
    printed energies; S(pi, pi) is the staggered sum of the printed C(r)."""
    e0 = exact_energy(marshall_sign=True)
    ((printed_e0,),) = numbers(rf"exact energy {NUM} ", text)
    assert printed_e0 == pytest.approx(e0, abs=1e-9)
    assert "Marshall basis: ground state of one sign -> True" in text
    ((e, err, per_site_e0),) = numbers(rf"\nper site +{NUM} ± {NUM} +\(exact {NUM}\)", text)
    n = 16
    e, err = n * e, n * err  # (printed per site with 6 decimals: the total to 1e-5)
    assert per_site_e0 == pytest.approx(e0 / n, abs=1e-8)
    assert e >= e0 - 3 * err - 1e-5, (e, err, e0)
    bound = 3e-2 if "small setting" in text else 1e-3
    assert abs(e - e0) / abs(e0) < bound, (e, e0)
    ((rel, _),) = numbers(rf"relative error {NUM}, +V-score {NUM}", text)
    assert rel == pytest.approx(abs(e - e0) / abs(e0), rel=0.01, abs=1e-6)
    ((vmc, vmc_err, trained, ground),) = numbers(rf"energy per site +{NUM} ± {NUM} +{NUM} +{NUM}", text)
    assert ground == pytest.approx(e0 / n, abs=1e-5)
    assert trained >= ground - 1e-5  # <psi|H|psi> of the trained network, summed exactly
    assert abs(vmc - trained) <= 4 * vmc_err + 2e-5, (vmc, vmc_err, trained)
    ((stag, s_pipi),) = numbers(rf"sum_r eps_r C\(r\): {NUM} +vs S\(pi,pi\) {NUM}", text)
    assert stag == pytest.approx(s_pipi, abs=2e-6)


def _calls_values(text, header):
    """The values of the 'call k: ...; values [...]' lines right after ``header``."""
    lines = text.split(header + "\n", 1)[1].splitlines()
    block = "\n".join(line for line in lines[:next((i for i, ln in enumerate(lines)
                                                    if not ln.startswith("  call ")), len(lines))])
    return [int(v) for m in re.findall(r"values \[([^\]]*)\]", block) for v in m.split(",")]


def check_chunk_map(text):
    """02: F equals f; every row is processed exactly once (the rest is zero padding), on 8
    devices and on 2; the scan is one loop; shard_batch compiles no all-gather where GSPMD
    does, and both give the reference Jacobian."""
    ((diff,),) = numbers(rf"max \|F - f\| = {NUM}", text)
    assert diff < 1e-12
    values = _calls_values(text, "B = 77, chunk_size = 4, 8 devices:")
    assert sorted(v for v in values if v) == list(range(1, 78)) and len(values) == 3 * 32
    values = _calls_values(text, "24 rows on a 2-device mesh, chunk_size = 4:")
    assert sorted(values) == list(range(1, 25))
    assert "1/x on the padded zero rows is inf, but the output is clean: True" in text
    assert numbers(rf"stablehlo.while loops in the lowered program: {NUM}", text) == [(1.0,)]
    table = text.split("max |J - J_ref|\n", 1)[1]
    rows = re.findall(rf"^ +{NUM} +{NUM} +(True|False) +{NUM} +{NUM} +{NUM} +{NUM} +{NUM}$", table, re.MULTILINE)
    assert {r[2] for r in rows} == {"True", "False"} and len({float(r[0]) * float(r[1]) for r in rows}) == 1
    for chunk, steps, shard_batch, gathers, *_, max_diff in rows:  # (chunk x steps: the rows per device)
        assert (float(gathers) == 0) if shard_batch == "True" else (float(gathers) > 0), (chunk, shard_batch)
        assert float(max_diff) < 1e-12


def check_gspmd_vs_shard_map(text):
    """03: with shard_batch no all-gather on any device count; GSPMD gathers on the lax
    conv form once D > 1, the gathered bytes per device grow with D on the compile-only
    meshes; the two forms' Jacobians agree to rounding."""
    rows = re.findall(r"^ +cpu +(lax|gather) +(\d+) +(\d+) +(True|False) +(\d+) .* (\S+)$", text, re.MULTILINE)
    assert rows
    for conv, D, chunk, sb, ag, rel in rows:
        if sb == "True" or int(D) == 1 or conv == "gather":
            assert int(ag) == 0, (conv, D, chunk, sb, ag)
        else:
            assert int(ag) > 0, (conv, D, chunk, sb, ag)
        assert float(rel) < 1e-12
    assert any(conv == "lax" and int(D) > 1 and sb == "False" for conv, D, _, sb, _, _ in rows)
    precompiled = numbers(rf"D = +{NUM}, shard_batch=(?:True|False) *: {NUM} all-gathers, {NUM} MiB", text)
    gspmd = [(n, ag, mib) for (n, ag, mib) in precompiled[::2]]
    assert all(ag == 0 and mib == 0 for _, ag, mib in precompiled[1::2])  # shard_batch=True
    assert all(ag > 0 for _, ag, _ in gspmd)
    per_device = {mib / n for n, _, mib in gspmd}
    assert max(per_device) == pytest.approx(min(per_device), rel=1e-3)  # gathered bytes proportional to D


def check_j1j2_order(text):
    """04: each exact energy printed is the library's; each network energy is variational
    (3 error bars); the exact structure factors show Neel order at J2 = 0 and stripes at 0.8."""
    exact = {j2: (e0, s_pipi, s_pi0) for j2, e0, _, s_pipi, s_pi0 in numbers(
        rf"J2 = {NUM}: E0 = {NUM} \({NUM} per site\), S\(pi,pi\) = {NUM}, S\(pi,0\) = {NUM}", text)}
    assert set(exact) == {0.0, 0.5, 0.8}
    for j2, (e0, _, _) in exact.items():
        assert e0 == pytest.approx(exact_energy(j2), abs=1e-6), j2
    assert exact[0.0][1] > 4 * exact[0.0][2] and exact[0.8][2] > 4 * exact[0.8][1]
    trained = numbers(rf"J2 = {NUM}: E = {NUM} ± {NUM} \(exact {NUM}\)", text)
    assert sorted(t[0] for t in trained) == [0.0, 0.5, 0.8]
    for j2, e, err, e0 in trained:
        assert e0 == pytest.approx(exact[j2][0], abs=1e-4)
        assert e >= e0 - 3 * err - 1e-4 and math.isfinite(e), (j2, e, err, e0)


CHECKS = {
    "01_train_heisenberg": check_train_heisenberg,
    "02_chunk_map": check_chunk_map,
    "03_gspmd_vs_shard_map": check_gspmd_vs_shard_map,
    "04_j1j2_order": check_j1j2_order,
}


def test_every_notebook_has_checks():
    assert {p.stem for p in NOTEBOOKS} == set(CHECKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_saved_outputs_pass_the_checks(path):
    """The outputs saved in the notebook (a full or small run) satisfy its checks."""
    CHECKS[path.stem](printed(nbformat.read(path, as_version=4)))
