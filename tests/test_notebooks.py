"""The tutorial notebooks run from top to bottom without an error, in their small setting.

Each notebook is copied to a temporary folder (its saved outputs stay untouched) and
executed there with nbclient in a fresh ``python3`` kernel, with ``QUANTAX_LITE_SMALL=1``
in the kernel's environment. A cell that raises fails the test and names the cell. Then
the numbers the notebook printed are checked (``CHECKS``, one function per notebook, on
the text of every cell's printed output): energies against the library's exact ground
state energies and the variational bound, the identities a notebook shows (all rows
processed once, zero all-gathers with shard_batch, equal Jacobians), so a notebook that
runs but computes the wrong thing fails: the structure factors of trained networks against
exact diagonalization (S(pi, pi) is the S.S structure factor in every notebook), the order
(Neel or stripe) a trained network shows at each J2, the symmetry sector the default recipe
picks on the triangular lattice. The same checks hold for the outputs saved in the
notebooks (``test_saved_outputs_pass_the_checks``, fast); those are full-setting runs, checked
with the full setting's tighter bounds.

A notebook's small run is in the default test selection only when listed in ``FAST``
(none is: the kernel's start, the imports and the compilations alone take 15-20 s, and the
default run is kept under 8 minutes); every notebook runs under ``pytest -m slow``.
"""
import functools
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


# the notebooks whose small run takes under about 40 s on 2 CPU cores (measured under pytest on
# a shared 2-core machine: 05 33 s; 01 40-60 s and 04 50-70 s stay slow)
FAST: set[str] = set()


def test_every_notebook_is_collected():
    names = {p.name for p in NOTEBOOKS}
    assert {"01_train_heisenberg.ipynb", "02_chunk_map.ipynb", "03_gspmd_vs_shard_map.ipynb",
            "04_j1j2_order.ipynb", "05_triangular_custom_operators.ipynb",
            "06_time_evolution.ipynb"} <= names


def _kernel_env() -> dict:
    env = dict(os.environ)
    env["QUANTAX_LITE_SMALL"] = "1"
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", [pytest.param(p, marks=[] if p.stem in FAST else [pytest.mark.slow])
                                  for p in NOTEBOOKS], ids=lambda p: p.stem)
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
    from quantax_lite.exact.diagonalization import ground_state_energy
    from quantax_lite.geometry.lattice import Square
    from quantax_lite.operators.hamiltonian import Heisenberg

    return float(ground_state_energy(Heisenberg(Square(4), J1=1.0, J2=J2, marshall_sign=marshall_sign)))


@functools.lru_cache(maxsize=None)
def exact_order(J2: float) -> tuple[float, float]:
    """(S(pi, pi), S(pi, 0)) of the 4x4 J1-J2 ground state, the S.S structure factor
    (S(pi, 0) averaged with S(0, pi)), from its vector and the library's S_i.S_j operators."""
    import numpy as np

    from quantax_lite.exact.diagonalization import ground_state
    from quantax_lite.geometry.lattice import Square
    from quantax_lite.observables import structure_factor
    from quantax_lite.operators.hamiltonian import Heisenberg
    from quantax_lite.operators.local_operators import spin_dot

    lattice = Square(4)
    n = lattice.n_sites
    _, vec, basis = ground_state(Heisenberg(lattice, J1=1.0, J2=J2))
    corr = np.full((n, n), 0.75)
    for i in range(n):
        for j in range(i + 1, n):
            corr[i, j] = corr[j, i] = float(np.real(np.vdot(vec, spin_dot(i, j, n).to_sparse(basis) @ vec)))
    s = lambda q: float(structure_factor(corr, lattice, np.array(q, float)).mean[0])  # noqa: E731
    return s((np.pi, np.pi)), (s((np.pi, 0)) + s((0, np.pi))) / 2


def check_train_heisenberg(text):
    """01: the printed exact energy is the library's; the final estimate is variational (3
    error bars), close to it (small setting: 60 steps of 256 samples) and agrees with the
    exact expectation of the trained network; the relative error printed is that of the
    printed energies. S(pi, pi) is the S.S structure factor (the exact value the library's,
    4.42, not the Sz part alone, 1.47), the estimate agrees with the trained network's exact
    value within its error bars and with the ground state's; the nearest-neighbour
    correlation of the ground state is E0 / 2N (2N bonds); S(pi, pi) is the staggered sum of
    the printed C(r)."""
    e0 = exact_energy(marshall_sign=True)
    small = "small setting" in text
    ((printed_e0,),) = numbers(rf"exact energy {NUM} ", text)
    assert printed_e0 == pytest.approx(e0, abs=1e-9)
    assert "Marshall basis: ground state of one sign -> True" in text
    ((e, err, per_site_e0),) = numbers(rf"\nper site +{NUM} ± {NUM} +\(exact {NUM}\)", text)
    n = 16
    e, err = n * e, n * err  # (printed per site with 6 decimals: the total to 1e-5)
    assert per_site_e0 == pytest.approx(e0 / n, abs=1e-8)
    assert e >= e0 - 3 * err - 1e-5, (e, err, e0)
    bound = 3e-2 if small else 1e-3
    assert abs(e - e0) / abs(e0) < bound, (e, e0)
    ((rel, _),) = numbers(rf"relative error {NUM}, +V-score {NUM}", text)
    assert rel == pytest.approx(abs(e - e0) / abs(e0), rel=0.01, abs=1e-6)
    ((vmc, vmc_err, trained, ground),) = numbers(rf"energy per site +{NUM} ± {NUM} +{NUM} +{NUM}", text)
    assert ground == pytest.approx(e0 / n, abs=1e-5)
    assert trained >= ground - 1e-5  # <psi|H|psi> of the trained network, summed exactly
    assert abs(vmc - trained) <= 4 * vmc_err + 2e-5, (vmc, vmc_err, trained)
    s_exact = exact_order(0.0)[0]
    ((s_vmc, s_err, s_trained, s_ground),) = numbers(rf"S\(pi, pi\) +{NUM} ± {NUM} +{NUM} +{NUM}", text)
    ((printed_s_exact,),) = numbers(rf"S\(pi,pi\) exact +{NUM}", text)
    assert printed_s_exact == pytest.approx(s_exact, abs=1e-5) and s_ground == pytest.approx(s_exact, abs=1e-4)
    assert abs(s_vmc - s_trained) <= 4 * s_err + 1e-3, (s_vmc, s_err, s_trained)
    assert abs(s_vmc - s_exact) < (0.3 if small else 0.1), (s_vmc, s_exact)
    ((c_vmc, c_err, c_trained, c_ground),) = numbers(rf"<S_0\.S_\(0,1\)> +{NUM} ± {NUM} +{NUM} +{NUM}", text)
    assert c_ground == pytest.approx(e0 / (2 * n), abs=1e-4)
    assert abs(c_vmc - c_trained) <= 4 * c_err + 1e-3
    ((stag, s_pipi),) = numbers(rf"sum_r eps_r C\(r\): {NUM} +vs S\(pi,pi\) {NUM}", text)
    assert stag == pytest.approx(s_pipi, abs=2e-6) and s_pipi == pytest.approx(s_vmc, abs=1e-4)


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
    """04: each exact energy and structure factor printed is the library's (ED, S.S); the
    trained networks' energies are variational (exact sums: to rounding) and close to ED;
    the networks show the order of the ground state: S(pi, pi) > S(pi, 0) at J2 = 0 (Neel),
    the reverse at 0.8 (stripe), and at every J2 where ED's order is clear the same one, with
    both structure factors near ED's; the orbit sums agree with the network's whole vector."""
    small = "small setting" in text
    exact = {j2: (e0, s_pipi, s_pi0) for j2, e0, _, s_pipi, s_pi0 in numbers(
        rf"J2 = {NUM}: E0 = {NUM} \({NUM} per site\), S\(pi,pi\) = {NUM}, S\(pi,0\) = {NUM}", text)}
    assert {0.0, 0.5, 0.8} <= set(exact)
    for j2, (e0, s_pipi, s_pi0) in exact.items():
        assert e0 == pytest.approx(exact_energy(j2), abs=1e-6), j2
        if j2 in (0.0, 0.5, 0.8):
            assert (s_pipi, s_pi0) == pytest.approx(exact_order(j2), abs=1e-4), j2
    assert exact[0.0][1] > 4 * exact[0.0][2] and exact[0.8][2] > 4 * exact[0.8][1]
    trained = numbers(rf"J2 = {NUM}: E = {NUM} \(exact {NUM}\), relative error {NUM}; S\(pi,pi\) = {NUM} "
                      rf"\(exact {NUM}\); S\(pi,0\) = {NUM} \(exact {NUM}\)", text)
    assert sorted(t[0] for t in trained) == sorted(exact)
    for j2, e, e0, rel, s_pipi, s_pipi_ed, s_pi0, s_pi0_ed in trained:
        assert (e0, s_pipi_ed, s_pi0_ed) == pytest.approx(exact[j2], abs=1e-4), j2
        assert math.isfinite(e) and e >= e0 - 1e-5, (j2, e, e0)  # exact sum: variational
        assert abs(e - e0) / abs(e0) < (3e-3 if small else 1e-3), (j2, e, e0)
        assert rel == pytest.approx(abs(e - e0) / abs(e0), rel=0.1, abs=2e-6)
        tolerance = 0.3 if small else 0.15
        assert abs(s_pipi - s_pipi_ed) < tolerance and abs(s_pi0 - s_pi0_ed) < tolerance, (j2, s_pipi, s_pi0)
        if abs(s_pipi_ed - s_pi0_ed) > 1.0:  # the order is clear in ED: the network shows the same
            assert (s_pipi > s_pi0) == (s_pipi_ed > s_pi0_ed), (j2, s_pipi, s_pi0)
    by_j2 = {t[0]: t for t in trained}
    assert by_j2[0.0][4] > 2 * by_j2[0.0][6]  # Neel at J2 = 0
    assert by_j2[0.8][6] > 2 * by_j2[0.8][4]  # stripes at J2 = 0.8
    ((_, s_full, s0_full, orbit_diff),) = numbers(
        rf"J2 = {NUM}, all 12870 configurations: S\(pi,pi\) = {NUM}, S\(pi,0\) = {NUM}; orbit sums differ by {NUM}", text)
    assert orbit_diff < 1e-4


def check_triangular_custom_operators(text):
    """05: the default recipe picks, by ED, a sector of nonzero momentum on triangular:4x3
    whose lowest energy is the whole space's ground state (the library's ED over all 2^12
    configurations, printed); the k = 0 sector lies higher; the trained network is
    variational, below the k = 0 sector's energy and close to E0; the hand-written
    Hamiltonian is the library's; the ground state is a singlet and the network nearly one."""
    small = "small setting" in text
    from quantax_lite.exact.diagonalization import ground_state_energy
    from quantax_lite.geometry.lattice import parse_lattice
    from quantax_lite.operators.hamiltonian import Heisenberg

    e0 = float(ground_state_energy(Heisenberg(parse_lattice("triangular:4x3")), total_sz=None))
    (m,) = re.findall(r"sector momentum \((\d+), (\d+)\), .*chosen by exact diagonalization", text)
    assert m != ("0", "0")
    ((e_sz0, e_sector),) = numbers(rf"whole Sz = 0 space: E0 = {NUM}; the chosen sector: {NUM}", text)
    ((e_k0,),) = numbers(rf"momentum fixed at k = 0: sector energy {NUM}", text)
    ((printed_e0, _),) = numbers(rf"whole space \(4096 configurations\): E0 = {NUM} \({NUM} per site\)", text)
    assert printed_e0 == pytest.approx(e0, abs=1e-5) and e_sz0 == pytest.approx(e0, abs=1e-5)
    assert e_sector == pytest.approx(e0, abs=1e-5) and e_k0 > e0 + 0.1
    ((e, e0_again, rel),) = numbers(rf"network: E = {NUM} \(whole-space E0 {NUM}\), relative error {NUM}", text)
    assert e0_again == pytest.approx(e0, abs=1e-5)
    assert e >= e0 - 1e-5 and e < e_k0, (e, e0, e_k0)  # below what the k = 0 sector can reach
    assert abs(e - e0) / abs(e0) < (5e-3 if small else 1e-3)
    ((diff,),) = numbers(rf"max \|H_mine - Heisenberg\| = {NUM}", text)
    assert diff < 1e-12
    ((e_mine, e_exact),) = numbers(rf"<H_mine> of the network: {NUM} \(the exact energy above {NUM}\)", text)
    assert e_mine == pytest.approx(e_exact, abs=1e-5) and e_exact == pytest.approx(e, abs=1e-5)
    ((s2_net, s2_ed),) = numbers(rf"S\^2: network {NUM}, ED ground state {NUM}", text)
    assert abs(s2_ed) < 1e-8 and -1e-6 < s2_net < (0.1 if small else 0.05)


def _sx_chain(t: float, n: int = 8, h: float = 3.04) -> float:
    """Site mean <σx>(t) on the periodic chain of ``n`` sites after the quench from +x to
    ``h`` (Pauli units), by dense exponentiation of the Hamiltonian written here afresh."""
    import numpy as np
    from scipy.linalg import expm

    x, z = np.array([[0.0, 1.0], [1.0, 0.0]]), np.diag([1.0, -1.0])

    def site(op, i):
        out = np.ones((1, 1))
        for j in range(n):
            out = np.kron(out, op if j == i else np.eye(2))
        return out

    H = -sum(site(z, i) @ site(z, (i + 1) % n) for i in range(n)) - h * sum(site(x, i) for i in range(n))
    psi = expm(-1j * t * H) @ np.full(2 ** n, 2 ** (-n / 2))
    return float(np.real(np.vdot(psi, sum(site(x, i) for i in range(n)) @ psi)) / n)


def check_time_evolution(text):
    """06: the quench from +x to h = 3.04 follows the exact <σx>(t) (the printed exact values:
    energy -h N at every time, <σx> 1 at t = 0 and, on chain:8, the dense propagator written
    here); imaginary time and SR both reach the Heisenberg ground energy (the library's ED)
    from the same start, imaginary time within the issue's 1e-3."""
    small = "small setting" in text
    from quantax_lite import Recipe, build

    n_sites = 8 if small else 16
    rows = numbers(rf"t = {NUM}: <σx> = {NUM} ± {NUM}, exact {NUM}; E = {NUM} ± {NUM}, exact {NUM}", text)
    assert len(rows) >= 5 and rows[0][0] == 0.0 and rows[0][3] == pytest.approx(1.0, abs=1e-4)
    for t, sx, err, sx_exact, e, e_err, e_exact in rows:
        assert e_exact == pytest.approx(-3.04 * n_sites, abs=2e-3)  # conserved: <+x|H|+x> = -h N
        if small:
            assert sx_exact == pytest.approx(_sx_chain(t), abs=1e-4), t
        assert abs(sx - sx_exact) < (0.02 if small else 0.1) + 3 * err, (t, sx, sx_exact)
    ((worst, _),) = numbers(rf"quench: max \|Δ<σx>\| = {NUM} up to t = {NUM}", text)
    assert worst < (0.02 if small else 0.1)  # the 2e-2 is not met on 4x4 (docs/benchmarks.md)
    r = build(Recipe(lattice="chain:8" if small else "4x4", sampling="exact_sum"))
    e0 = float(r.recipe.reference_energy(r.lattice, r.hamiltonian))
    ((e_imag, e0_printed, rel_imag, _),) = numbers(
        rf"imaginary time: E = {NUM}, exact {NUM}, relative error {NUM} \({NUM} steps", text)
    assert e0_printed == pytest.approx(e0, abs=1e-5)
    assert e_imag >= e0 - 1e-6 and (e_imag - e0) / abs(e0) < 1e-3
    taus = [e for _, e, _ in numbers(rf"tau = {NUM}: E = {NUM} \(relative error {NUM}\)", text)]
    assert all(b < a + 1e-6 for a, b in zip(taus, taus[1:])), taus  # imaginary time lowers the energy
    ((e_sr, _, _),) = numbers(rf"SR: E = {NUM}, relative error {NUM} \({NUM} steps", text)
    assert e_sr >= e0 - 1e-6 and (e_sr - e0) / abs(e0) < (5e-3 if small else 1e-3)


CHECKS = {
    "01_train_heisenberg": check_train_heisenberg,
    "02_chunk_map": check_chunk_map,
    "03_gspmd_vs_shard_map": check_gspmd_vs_shard_map,
    "04_j1j2_order": check_j1j2_order,
    "05_triangular_custom_operators": check_triangular_custom_operators,
    "06_time_evolution": check_time_evolution,
}


def test_every_notebook_has_checks():
    assert {p.stem for p in NOTEBOOKS} == set(CHECKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_saved_outputs_pass_the_checks(path):
    """The outputs saved in the notebook (a full or small run) satisfy its checks."""
    CHECKS[path.stem](printed(nbformat.read(path, as_version=4)))
