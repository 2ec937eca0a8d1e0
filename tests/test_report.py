"""What a run reports (quantax_lite.cli.report): the running mean, the energy plot, the table,
and the observables' JSON and plots (no training here)."""
import json
import math
import os

import numpy as np
import pytest

from quantax_lite.cli.report import (
    energy_unit, format_table, plot_correlations, plot_energy, plot_structure_factor, running_mean, write_json,
    write_observables, zero_variance_of_run,
)


def test_running_mean_is_the_mean_of_the_last_steps(rng):
    n, window = int(rng.integers(5, 40)), int(rng.integers(1, 9))
    v, e = rng.normal(size=n), rng.uniform(0.1, 1.0, size=n)
    mean, err = running_mean(v, e, window)
    for k in range(n):
        part = slice(max(0, k + 1 - window), k + 1)
        assert mean[k] == pytest.approx(np.mean(v[part]), abs=1e-12)
        assert err[k] == pytest.approx(np.sqrt(np.sum(e[part] ** 2)) / len(v[part]), abs=1e-12)


def _log(rng, n=60, exact=-10.0):
    return [{"iteration": k, "energy": exact + 2 * math.exp(-k / 10) + 0.05 * rng.normal(),
             "energy_error": 0.05, "variance": 1.0 / k, "r_hat": None} for k in range(1, n + 1)]


@pytest.mark.parametrize("exact", [-10.0, None])
def test_energy_plot_has_a_panel_per_quantity(tmp_path, rng, exact, saved_figures):
    """energy, relative error (with an exact energy) and V-score panels; the axes name the
    unit; the running mean and the final estimate are drawn."""
    log = _log(rng)
    plot_energy(str(tmp_path / "e.png"), log, exact, "t", n_sites=16, final=(-9.99, 0.01),
                unit=energy_unit("tfim"))
    ((name, fig),) = saved_figures
    assert name == "e.png"
    axes = fig.get_axes()
    assert len(axes) == (3 if exact is not None else 2)
    assert "Pauli units" in axes[0].get_ylabel() and "total energy" in axes[0].get_ylabel()
    assert "V-score" in axes[-1].get_ylabel()
    labels = axes[0].get_legend_handles_labels()[1]
    assert any("running mean" in lab for lab in labels) and any("final -9.990000" in lab for lab in labels)
    # the running mean drawn is the one of the last max(5, n/20) steps
    line = next(ln for ln in axes[0].get_lines() if ln.get_label().startswith("running mean"))
    e = np.array([r["energy"] for r in log])
    np.testing.assert_allclose(line.get_ydata(), running_mean(e, np.full(len(e), 0.05), 5)[0])
    vs = axes[-1].get_lines()[0].get_ydata()
    np.testing.assert_allclose(vs, 16 * np.array([r["variance"] for r in log]) / e**2)


def test_energy_units():
    assert "Pauli" in energy_unit("tfim")
    assert "S = σ/2" in energy_unit("heisenberg") and "S = σ/2" in energy_unit("j1j2")


def test_table_has_the_order_parameter():
    summary = dict(hamiltonian="heisenberg", lattice="4x4", n_sites=16, n_params=100, energy=-11.2,
                   energy_error=0.01, energy_per_site=-0.7, exact_energy=None, relative_error=None, v_score=1e-3,
                   wall_time_s=3.0, seconds_per_iteration=0.01, device_count=1, process_count=1,
                   s_pi_pi=3.2512, s_pi_pi_error=0.011, staggered_magnetization_sq=0.2032,
                   staggered_magnetization_sq_error=0.0007, n_observable_samples=512)
    table = format_table(summary)
    assert "3.2512 ± 1.1e-02, 0.20320 ± 7.0e-04 (512 samples)" in table
    assert len(table.splitlines()) == 11
    assert "n/a" in format_table({**summary, "s_pi_pi": None})


def test_table_names_the_symmetry_sector():
    summary = dict(hamiltonian="heisenberg", lattice="kagome:2x3", n_sites=18, n_params=100, energy=-8.0,
                   energy_error=0.01, energy_per_site=-0.44, exact_energy=None, relative_error=None, v_score=1e-3,
                   wall_time_s=3.0, seconds_per_iteration=0.01, device_count=1, process_count=1, s_pi_pi=None,
                   symmetry="full", momentum=[1, 0], spin_parity=-1, rotation_parity=None)
    def cell(s):
        return [line.split(None, 1)[1] for line in format_table(s).splitlines() if line.startswith("symmetry")]

    assert cell(summary) == ["full, momentum (1, 0), spin parity -1"]
    assert cell({**summary, "momentum": None, "spin_parity": None, "rotation_parity": -1}) == [
        "full, rotation parity -1"]


def test_zero_variance_extrapolation_of_a_run_folder(tmp_path, rng):
    """The summary's extrapolation is the line through the last quarter of log.jsonl's
    steps (null steps skipped), and the table labels it as an extrapolation."""
    import json

    e0, slope = -8.4579, 0.3
    variances = np.linspace(2.0, 0.05, 80)
    records = [{"iteration": k, "energy": e0 + slope * v, "variance": v, "energy_error": 1e-3}
               for k, v in enumerate(variances)]
    records[70]["energy"] = None  # a non-finite step is logged as null
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    fit = zero_variance_of_run(str(tmp_path))
    assert fit["n_points"] == 20 and fit["fraction"] == 0.25  # a quarter of the 79 usable steps
    assert fit["energy"] == pytest.approx(e0, abs=1e-9) and fit["slope"] == pytest.approx(slope, rel=1e-9)
    json.dumps(fit, allow_nan=False)
    summary = dict(hamiltonian="j1j2", lattice="4x4", n_sites=16, n_params=100, energy=-8.45, energy_error=0.01,
                   energy_per_site=-0.53, exact_energy=None, relative_error=None, v_score=1e-3, wall_time_s=3.0,
                   seconds_per_iteration=0.01, device_count=1, process_count=1, s_pi_pi=None,
                   zero_variance_extrapolation=fit)
    assert f"{e0:.6f} ± " in format_table(summary) and "not variational" in format_table(summary)
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records[:20]))
    assert zero_variance_of_run(str(tmp_path)) is None  # 5 steps in the last quarter: too few for a line


def test_zero_variance_extrapolation_fits_the_last_stage_only(tmp_path, rng):
    """A staged run's extrapolation uses the steps after the last stage began
    (``after_iteration``): the steps of the earlier group, on another line, are left out,
    and a fit over every step would miss the last stage's intercept."""
    import json

    before = [(-8.30, 0.8, v) for v in np.linspace(3.0, 1.0, 60)]  # (intercept, slope, variance)
    after = [(-8.45, 0.3, v) for v in np.linspace(0.9, 0.1, 40)]
    records = [{"iteration": k + 1, "energy": e0 + a * v + 1e-4 * rng.standard_normal(), "variance": v,
                "energy_error": 1e-4} for k, (e0, a, v) in enumerate(before + after)]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    staged = zero_variance_of_run(str(tmp_path), fraction=1.0, after_iteration=60)
    assert staged["n_points"] == 40 and staged["after_iteration"] == 60
    assert abs(staged["energy"] + 8.45) < 4 * staged["error"] and staged["error"] < 1e-3
    mixed = zero_variance_of_run(str(tmp_path), fraction=1.0)
    assert mixed["n_points"] == 100 and abs(mixed["energy"] + 8.45) > 0.05
    with pytest.raises(ValueError, match="^after_iteration: expected an int >= 0"):
        zero_variance_of_run(str(tmp_path), after_iteration=-1)
    for bad in (2.5, True):  # not an int: TypeError, as the project's other int checks
        with pytest.raises(TypeError, match="^after_iteration: expected an int >= 0"):
            zero_variance_of_run(str(tmp_path), after_iteration=bad)
    assert zero_variance_of_run(str(tmp_path), after_iteration=95) is None  # 5 steps: too few for a line


def _observables(q, mean, error, r, distance, c_mean, lattice=None):
    obs = {"schema": "quantax_lite.observables/1",
           "structure_factor": {"q": q, "mean": mean, "error": error},
           "correlation_vs_distance": {"r": r, "distance": distance, "mean": c_mean, "error": [0.01] * len(c_mean)},
           "staggered_magnetization_sq": {"mean": 0.1, "error": 0.01}}
    if lattice is not None:
        obs["lattice"] = {"shape": list(lattice.shape), "pbc": lattice.pbc, "name": lattice.name}
        obs["n_sites"] = lattice.n_sites
    return obs


def _errorbar_data(ax):
    """(x, y, half-lengths of the y error bars) of the one errorbar plot on ``ax``."""
    (c,) = ax.containers
    x, y = (np.asarray(v, float) for v in c.lines[0].get_data())
    (bars,) = c.lines[2]
    half = np.array([abs(seg[1][1] - seg[0][1]) / 2 for seg in bars.get_segments()])
    return x, y, half


def _assert_bars_inside(ax):
    """Every error bar and point of ``ax`` lies inside its axes' limits (nothing clipped)."""
    lo, hi = sorted(ax.get_ylim())
    for c in ax.containers:
        y = np.asarray(c.lines[0].get_ydata(), float)
        assert np.all((lo <= y) & (y <= hi)), (y, lo, hi)
        for bars in c.lines[2]:
            seg = np.concatenate([np.asarray(s)[:, 1] for s in bars.get_segments()]) if bars.get_segments() else []
            assert np.all((lo <= np.asarray(seg)) & (np.asarray(seg) <= hi)), (seg, lo, hi)


def _check_correlations(fig, obs, title):
    """correlations.png of a bipartite lattice of one site per cell: C(r) against |r|
    (r != 0) below and the staggered (−1)^(r_x+r_y) C(r), all of it, on a linear axis above,
    with m² as a line; every error bar inside its axes."""
    cr = obs["correlation_vs_distance"]
    d, mean, err = (np.asarray(cr[k], float) for k in ("distance", "mean", "error"))
    sign = np.array([(-1.0) ** int(round(sum(np.atleast_1d(r)))) for r in cr["r"]])
    top, ax = fig.get_axes()
    x, y, half = _errorbar_data(ax)
    keep = d > 0
    np.testing.assert_allclose(x, d[keep])
    np.testing.assert_allclose(y, mean[keep])
    np.testing.assert_allclose(half, err[keep])
    x, y, half = _errorbar_data(top)
    np.testing.assert_allclose(x, d[keep])
    np.testing.assert_allclose(y, (sign * mean)[keep])
    np.testing.assert_allclose(half, err[keep])
    assert top.get_yscale() == "linear" and top.get_title() == title
    m2 = obs["staggered_magnetization_sq"]["mean"]
    (line,) = [ln for ln in top.get_lines() if ln.get_label().startswith("m²")]
    np.testing.assert_allclose(line.get_ydata(), [m2, m2])
    assert line.get_label() == f"m² = {m2:.4f}"
    assert ax.get_xlabel().startswith("distance |r|") and ax.get_ylabel().startswith("C(r) = ⟨S_0·S_r⟩")
    assert top.get_ylabel().startswith("ε(r) C(r)")
    _assert_bars_inside(top)
    _assert_bars_inside(ax)


def test_write_observables_strict_json_and_plots(saved_figures, tmp_path, rng, monkeypatch):
    """observables.json is the dict; the plots draw its values: S(q) as a heat map over a
    grid of momenta, a curve along a chain, points elsewhere; C(r) against the distance."""
    from quantax_lite.geometry.lattice import Chain, Square

    saved = saved_figures
    # a 4x4 grid of momenta, a chain (given out of order), and momenta that form no grid (no lattice known)
    ks = 2 * np.pi * np.arange(-1, 3) / 4
    grid = [[float(a), float(b)] for a in ks for b in ks]
    cases = [("grid", grid, Square(4, 4), [[0, 1], [1, 0], [1, 1], [0, 2], [2, 2]], [1.0, 1.0, 1.414, 2.0, 2.828]),
             ("chain", [[float(k)] for k in ks[[2, 0, 3, 1]]], Chain(4), [[1], [2], [-1]], [1.0, 2.0, 1.0]),
             ("points", [[0.0, 0.0], [1.0, 0.5], [2.0, 1.5]], None, [[0, 1], [1, 0]], [1.0, 1.0])]
    for kind, q, lattice, r, dist in cases:
        out = tmp_path / kind
        out.mkdir()
        nq = len(q)
        mean, error = rng.uniform(0, 2, nq), rng.uniform(0.01, 0.05, nq)
        c_mean = list(rng.uniform(-0.4, 0.3, len(r)))
        obs = _observables(q, list(mean), list(error), r, dist, c_mean, lattice)
        saved.clear()
        paths = write_observables(str(out), obs, "t")
        assert [os.path.basename(p) for p in paths] == ["observables.json", "structure_factor.png",
                                                         "correlations.png"]
        assert json.loads((out / "observables.json").read_text()) == obs
        assert all(open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n" for p in paths[1:])
        assert [name for name, _ in saved] == ["structure_factor.png", "correlations.png"]
        sf, corr = saved[0][1], saved[1][1]
        if lattice is not None:  # chain and square lattice of even sides: bipartite, (-1)^(r_x + r_y)
            _check_correlations(corr, obs, "t")
        else:  # no lattice: no sign rule, C(r) alone
            (ax,) = corr.get_axes()
            np.testing.assert_allclose(_errorbar_data(ax)[1], c_mean)
            assert "no sublattice rule" in ax.get_title()
        ax = sf.get_axes()[0]
        q = np.asarray(q)
        if kind == "chain":  # S(q) with error bars, in the order of q
            order = np.argsort(q[:, 0])
            x, y, half = _errorbar_data(ax)
            np.testing.assert_allclose(x, q[order, 0])
            np.testing.assert_allclose(y, mean[order])
            np.testing.assert_allclose(half, error[order])
            assert ax.get_title() == "t" and ax.get_xlabel().startswith("q (along the chain")
            assert ax.get_ylabel() == "S(q)"
            _assert_bars_inside(ax)
            continue
        k = int(np.argmax(mean))
        assert ax.get_title().startswith(f"t\nmax S(q) = {mean[k]:.3f} ± {error[k]:.3f} at q = "
                                         f"({q[k, 0]:.3f}, {q[k, 1]:.3f})")
        assert ax.get_xlabel().startswith("q_x") and ax.get_ylabel() == "q_y"
        assert sf.get_axes()[1].get_ylabel() == "S(q)"  # the colour bar
        (shown,) = [c for c in ax.collections if c.get_array() is not None]
        if kind == "grid":  # every momentum and its image on the zone's far edge (q = π also at −π): 5 x 5 cells
            values = np.ravel(shown.get_array())
            assert len(values) == 25 and set(np.round(values, 12)) == set(np.round(mean, 12))
        else:  # one point per momentum, at its q, coloured by its S(q)
            np.testing.assert_allclose(shown.get_offsets(), q)
            np.testing.assert_allclose(shown.get_array(), mean)
    # a non-finite value: nothing written
    out = tmp_path / "bad"
    out.mkdir()
    with pytest.raises(ValueError):
        write_observables(str(out), _observables(grid, [float("nan")] * 16, None, [[0, 1]], [1], [0]), "t")
    assert os.listdir(out) == []


def test_structure_factor_heat_map_puts_each_value_on_its_momentum(saved_figures, tmp_path, monkeypatch, rng):
    """A 4x6 square lattice: each momentum's value in the cell that holds it, and in the
    cell of its image on the zone's far edge; the cells end on the zone's edges (±π)."""
    from quantax_lite.geometry.lattice import Square

    saved = saved_figures
    kx = 2 * np.pi * np.arange(-1, 3) / 4
    ky = 2 * np.pi * np.arange(-2, 4) / 6  # a 4x6 lattice
    q = [[float(a), float(b)] for a in kx for b in ky]
    mean = rng.uniform(0, 3, len(q))
    plot_structure_factor(str(tmp_path / "x.png"), _observables(q, list(mean), None, [[0, 1]], [1.0], [0.1],
                                                                Square(4, 6)), "t")
    ax = saved[0][1].get_axes()[0]
    mesh = next(c for c in ax.collections if c.get_array() is not None)
    coords = np.asarray(mesh.get_coordinates())  # (ny + 1, nx + 1, 2) cell corners
    xs, ys = coords[0, :, 0], coords[:, 0, 1]
    assert xs[0] == pytest.approx(-np.pi) and xs[-1] == pytest.approx(np.pi)
    assert ys[0] == pytest.approx(-np.pi) and ys[-1] == pytest.approx(np.pi)
    grid = np.asarray(mesh.get_array()).reshape(len(ys) - 1, len(xs) - 1)

    def cell(a, b):
        return grid[np.searchsorted(ys, b) - 1 if b > -np.pi + 1e-9 else 0,
                    np.searchsorted(xs, a) - 1 if a > -np.pi + 1e-9 else 0]

    for (a, b), v in zip(q, mean):
        assert cell(a, b) == pytest.approx(v)
        for image in ([a - 2 * np.pi, b] if np.isclose(a, np.pi) else None,
                      [a, b - 2 * np.pi] if np.isclose(b, np.pi) else None):
            if image is not None:
                assert cell(*image) == pytest.approx(v)


def test_write_json_refuses_non_finite(tmp_path):
    path = str(tmp_path / "x.json")
    write_json(path, {"a": 1.0})
    with pytest.raises(ValueError):
        write_json(path, {"a": float("inf")})
    assert json.loads(open(path).read()) == {"a": 1.0} and os.listdir(tmp_path) == ["x.json"]


def test_correlation_plot(saved_figures, tmp_path, monkeypatch):
    """A chain: C(0) left out, the staggered values drawn on a linear axis, all of them
    (r = 3 is negative there), with their error bars inside the axes."""
    from quantax_lite.geometry.lattice import Chain

    saved = saved_figures
    obs = _observables([[0.0]], [0.0], [0.0], [[0], [1], [2], [3]], [0.0, 1.0, 2.0, 3.0], [0.75, -0.4, 0.2, 0.1],
                       Chain(6))
    plot_correlations(str(tmp_path / "c.png"), obs, "chain")
    ((name, fig),) = saved
    assert name == "c.png" and (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _check_correlations(fig, obs, "chain")
    top = fig.get_axes()[0]
    np.testing.assert_allclose(_errorbar_data(top)[1], [0.4, 0.2, -0.1])
    assert top.get_yscale() == "linear"
