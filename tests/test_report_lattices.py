"""The plots of a run read on every lattice: sublattice signs only where the lattice is
bipartite, the Brillouin zone and its high-symmetry points from the reciprocal vectors,
readable titles, the host beside a timing, signed relative errors, unclipped error bars.
Each figure is inspected as drawn (matplotlib objects), against values computed here."""
import json
import math
import os

import numpy as np
import pytest

from quantax_lite.geometry.brillouin import fold_to_first_zone, high_symmetry_points, zone_corners, zone_images
from quantax_lite.geometry.lattice import Chain, Honeycomb, Kagome, Square, Triangular
from quantax_lite.observables import correlation_vs_distance, structure_factor
from quantax_lite.cli.report import (
    energy_unit, finish_run, host_description, lattice_description, plot_correlations, plot_energy,
    plot_structure_factor, readable_title, system_title,
)

S3 = math.sqrt(3.0)


def _correlations(lattice, K):
    """A correlation matrix ordered at wave vector K: C_ij = 0.3 cos(K.(r_i - r_j)) e^{-|r|/10}."""
    d = lattice.positions[:, None, :] - lattice.positions[None, :, :]
    C = 0.3 * np.cos(d @ np.asarray(K, float)) * np.exp(-0.1 * np.linalg.norm(d, axis=-1))
    np.fill_diagonal(C, 0.75)
    return C


def _obs(lattice, C, rng):
    cr, sf = correlation_vs_distance(C, lattice), structure_factor(C, lattice)
    return {"n_sites": lattice.n_sites,
            "lattice": {"shape": list(lattice.shape), "pbc": lattice.pbc, "name": lattice.name},
            "structure_factor": {"q": sf.q.tolist(), "mean": sf.mean.tolist(),
                                 "error": rng.uniform(0.01, 0.03, len(sf.mean)).tolist()},
            "correlation_vs_distance": {"r": np.asarray(cr.r).tolist(), "distance": cr.distance.tolist(),
                                        "mean": cr.mean.tolist(),
                                        "error": rng.uniform(0.005, 0.05, len(cr.mean)).tolist()},
            "staggered_magnetization_sq": {"mean": 0.1 if lattice.n_sublattices == 2 else None, "error": 0.01}}


def _bars(ax):
    """[(x, y, y error half-lengths or None, label)] of every errorbar container of ``ax``."""
    out = []
    for c in ax.containers:
        x, y = (np.asarray(v, float) for v in c.lines[0].get_data())
        half = None
        if c.lines[2]:
            half = np.array([abs(s[1][1] - s[0][1]) / 2 for s in c.lines[2][0].get_segments()])
        out.append((x, y, half, c.get_label()))
    return out


def _inside(ax):
    lo, hi = sorted(ax.get_ylim())
    for x, y, half, _ in _bars(ax):
        h = np.zeros_like(y) if half is None else half
        assert np.all(y - h >= lo) and np.all(y + h <= hi), (y, h, lo, hi)


# --------------------------------------------------------------------------- zone
@pytest.mark.parametrize("lattice, names, radii", [
    (Square(4, 4), ["Γ", "X", "M"], [0, math.pi, math.pi * math.sqrt(2)]),
    (Triangular(6, 6), ["Γ", "M", "K"], [0, 2 * math.pi / S3, 4 * math.pi / 3]),  # a = 1
    (Honeycomb(3, 3), ["Γ", "M", "K"], [0, 2 * math.pi / 3, 4 * math.pi / (3 * S3)]),  # a = sqrt(3)
    (Kagome(2, 3), ["Γ", "M", "K"], [0, math.pi / S3, 2 * math.pi / 3]),  # a = 2
])
def test_high_symmetry_points_from_the_reciprocal_vectors(lattice, names, radii):
    """|M| = 2π/(√3 a), |K| = 4π/(3a) on the hexagonal zones, X = (π, 0), M = (π, π) on the
    square one; the zone's corners all at the corner distance."""
    points = high_symmetry_points(lattice)
    assert list(points) == names
    for name, r in zip(names, radii):
        assert np.linalg.norm(points[name]) == pytest.approx(r, abs=1e-12), name
    corners = zone_corners(lattice)
    assert len(corners) == (4 if lattice.is_hypercubic else 6)
    np.testing.assert_allclose(np.linalg.norm(corners, axis=1), radii[-1], atol=1e-12)
    if lattice.is_hypercubic:
        np.testing.assert_allclose(points["X"], [math.pi, 0], atol=1e-12)
        np.testing.assert_allclose(points["M"], [math.pi, math.pi], atol=1e-12)
    # a K point is a momentum of the 6x6 triangular cluster, on three of the zone's corners
    if lattice.kind == "triangular":
        np.testing.assert_allclose(points["K"], [4 * math.pi / 3, 0], atol=1e-12)
        b = lattice.reciprocal_vectors
        k = (b[0] + 2 * b[1]) / 3
        assert len(zone_images([k], lattice)) == 3
        assert min(np.linalg.norm(corners - fold_to_first_zone([k], lattice)[0], axis=1)) < 1e-9
    assert list(high_symmetry_points(Chain(6))) == ["Γ", "X"]


# --------------------------------------------------------------------------- S(q)
def _zone_of(ax):
    line = next(ln for ln in ax.get_lines() if ln.get_label() == "first Brillouin zone")
    return np.stack([line.get_xdata(), line.get_ydata()], axis=1)


@pytest.mark.parametrize("lattice, K, top", [
    (Square(4, 4), (math.pi, math.pi), "M"),
    (Triangular(6, 6), (4 * math.pi / 3, 0.0), "K"),
    (Honeycomb(3, 3), (0.0, 0.0), None),
    (Kagome(2, 3), (0.0, 0.0), None),
])
def test_structure_factor_marks_the_zone_of_the_lattice(saved_figures, tmp_path, monkeypatch, rng, lattice, K, top):
    """The zone drawn is the lattice's (hexagon / square of the right size), its named points
    marked at their momenta; no (π, π) or (π, 0) label off the square lattice; every value
    drawn is S(q) at the momentum where it is drawn (one site per cell: every image in the
    zone, S computed again there; with a basis: the measured momenta only)."""
    saved = saved_figures
    C = _correlations(lattice, K)
    obs = _obs(lattice, C, rng)
    plot_structure_factor(str(tmp_path / "sf.png"), obs, f"heisenberg {lattice.name}, step 7")
    ax = saved[0][1].get_axes()[0]
    zone = _zone_of(ax)
    np.testing.assert_allclose(zone[:-1], zone_corners(lattice), atol=1e-12)
    labels = {t.get_text() for t in ax.texts}
    assert labels == set(high_symmetry_points(lattice)) and not any("π" in t for t in labels)
    for name, k in high_symmetry_points(lattice).items():
        ann = next(t for t in ax.texts if t.get_text() == name)
        np.testing.assert_allclose(ann.xy, k, atol=1e-12)
    assert ax.get_title().startswith(readable_title(f"heisenberg {lattice.name}, step 7"))
    assert "heisenberg" not in ax.get_title()
    if top is not None:
        assert ax.get_title().endswith(f" = {top}")
    shown = next(c for c in ax.collections if c.get_array() is not None)
    values = np.ravel(shown.get_array())
    if lattice.is_hypercubic:  # a heat map: the cell holding (π, π) and its images at the corners
        coords = np.asarray(shown.get_coordinates())
        grid = values.reshape(coords.shape[0] - 1, coords.shape[1] - 1)
        s_m = structure_factor(C, lattice, q=[math.pi, math.pi]).mean[0]
        assert grid[-1, -1] == pytest.approx(s_m) and grid[0, 0] == pytest.approx(s_m)
        return
    q = np.asarray(shown.get_offsets())
    expected = structure_factor(C, lattice, q=q).mean
    np.testing.assert_allclose(values, expected, atol=1e-12)
    if lattice.n_basis == 1:  # every point inside the closed zone, every measured momentum among them
        G = np.array([m * lattice.reciprocal_vectors[0] + n * lattice.reciprocal_vectors[1]
                      for m in (-1, 0, 1) for n in (-1, 0, 1) if m or n])
        assert np.all(q @ G.T <= 0.5 * (G**2).sum(axis=1) + 1e-9)
        assert len(q) > len(obs["structure_factor"]["q"])  # the boundary's images too
    else:
        np.testing.assert_allclose(q, obs["structure_factor"]["q"], atol=1e-12)


# --------------------------------------------------------------------------- C(r)
def _bravais(lattice, r):
    """Integer coordinates of r in the Bravais vectors, or None (r joins two basis sites)."""
    c = np.asarray(r, float) @ np.linalg.inv(lattice.vectors)
    return np.rint(c).astype(int) if np.allclose(c, np.rint(c), atol=1e-6) else None


@pytest.mark.parametrize("lattice", [Square(4, 4), Chain(6), Honeycomb(2, 3), Triangular(3, 3), Kagome(2, 2),
                                     Square(3, 4)])
def test_correlations_use_the_lattices_own_sublattices(saved_figures, tmp_path, monkeypatch, rng, lattice):
    """Bipartite (square and chain of even sides, honeycomb): the staggered panel with ε = +1
    for r a Bravais vector of even coordinate sum (hypercubic) / a Bravais vector (honeycomb,
    same sublattice), −1 otherwise. Triangular (3 | L) and kagome: one panel, pairs within one
    sublattice (triangular: r = m a1 + n a2 with m ≡ n mod 3; kagome: r a Bravais vector) drawn
    apart from the others, no staggered sign. A 3x4 square lattice: no rule at all. Every
    error bar inside its axes."""
    saved = saved_figures
    obs = _obs(lattice, _correlations(lattice, np.zeros(lattice.ndim)), rng)
    plot_correlations(str(tmp_path / "c.png"), obs, f"heisenberg {lattice.name}")
    fig = saved[0][1]
    cr = obs["correlation_vs_distance"]
    r, d = np.asarray(cr["r"], float).reshape(len(cr["mean"]), -1), np.asarray(cr["distance"])
    mean, err = np.asarray(cr["mean"]), np.asarray(cr["error"])
    keep = d > 0
    coords = [_bravais(lattice, v) for v in r]
    for ax in fig.get_axes():
        _inside(ax)
    if lattice.kind in ("square", "chain", "honeycomb") and lattice.is_bipartite:
        if lattice.is_hypercubic:
            eps = np.array([(-1.0) ** int(c.sum()) for c in coords])
        else:
            eps = np.array([1.0 if c is not None else -1.0 for c in coords])
        top, ax = fig.get_axes()
        ((x, y, half, _),) = _bars(top)
        np.testing.assert_allclose(x, d[keep])
        np.testing.assert_allclose(y, (eps * mean)[keep])
        np.testing.assert_allclose(half, err[keep])
        assert any(ln.get_label().startswith("m² = ") for ln in top.get_lines())
        return
    (ax,) = fig.get_axes()  # no staggered panel
    assert "heisenberg" not in ax.get_title() and lattice_description(lattice.name) in ax.get_title()
    drawn = {label: (x, y, half) for x, y, half, label in _bars(ax)}
    if lattice.kind == "square":  # 3 x 4: the checkerboard does not close; raw C(r)
        assert list(drawn) == ["C(r)"] and "no sublattice rule" in ax.get_title()
        np.testing.assert_allclose(drawn["C(r)"][1], mean[keep])
        return
    if lattice.kind == "triangular":
        same = np.array([c is not None and (c[0] - c[1]) % 3 == 0 for c in coords])
    else:
        same = np.array([c is not None for c in coords])
    assert set(drawn) == {"same sublattice", "different sublattices"} and "not bipartite" in ax.get_title()
    for label, part in (("same sublattice", same), ("different sublattices", ~same)):
        x, y, half = drawn[label]
        np.testing.assert_allclose(x, d[keep & part])
        np.testing.assert_allclose(y, mean[keep & part])
        np.testing.assert_allclose(half, err[keep & part])


# --------------------------------------------------------------------------- titles, energy
def test_titles_name_the_system_in_words():
    assert system_title("heisenberg", "4x4") == "Heisenberg model, 4×4 square lattice, 16 sites"
    assert system_title("j1j2", "6x6", J2=0.5) == "J1-J2 model (J2 = 0.5), 6×6 square lattice, 36 sites"
    assert system_title("tfim", "chain:20", h=1.0) == "transverse-field Ising model (h = 1), chain of 20 sites"
    assert lattice_description("kagome:2x3") == "kagome lattice, 2×3 cells, 18 sites"
    assert lattice_description("triangular:4x3") == "4×3 triangular lattice, 12 sites"
    assert lattice_description("4x4:open") == "4×4 square lattice, 16 sites, open boundaries"
    assert readable_title("heisenberg honeycomb:3x3, step 600") == (
        "Heisenberg model, honeycomb lattice, 3×3 cells, 18 sites, step 600")
    assert readable_title("j1j2 4x4", {"run": {"recipe": {"J2": 0.8}}}).startswith("J1-J2 model (J2 = 0.8), 4×4")
    assert readable_title("my own title") == "my own title"
    assert readable_title("heisenberg is nice") == "heisenberg is nice"  # not a lattice: left alone


def _energy_log(exact, n=200, seed=0):
    rng = np.random.default_rng(seed)
    return [{"iteration": k, "energy": exact + 3 * math.exp(-k / 15) + 0.01 * rng.normal(), "energy_error": 0.01,
             "variance": 0.05 + 1.0 / k} for k in range(1, n + 1)]


def test_energy_plot_draws_signed_relative_errors_and_whole_error_bars(saved_figures, tmp_path, monkeypatch):
    """The relative-error panel is (E − E_exact)/|E_exact| with its sign (noise below the
    exact energy stays below zero) on a symmetric-log axis linear over the last steps' error
    bars; the energy panel holds every error bar of the last 90% of the steps and the final
    estimate's; the note (time and host) is written on the figure."""
    saved = saved_figures
    exact = -10.0
    log = _energy_log(exact)
    note = f"wall time 3.0 s on {host_description()}"
    plot_energy(str(tmp_path / "e.png"), log, exact, "heisenberg 4x4", n_sites=16, final=(exact + 0.002, 0.003),
                unit=energy_unit("heisenberg"), note=note)
    fig = saved[0][1]
    top, rel_ax, _ = fig.get_axes()
    assert top.get_title() == "Heisenberg model, 4×4 square lattice, 16 sites"
    assert note in [t.get_text() for t in fig.texts]
    e = np.array([r["energy"] for r in log])
    from quantax_lite.cli.report import running_mean

    mean = running_mean(e, np.full(len(e), 0.01), 10)[0]
    line = next(ln for ln in rel_ax.get_lines() if ln.get_label() == "running mean")
    np.testing.assert_allclose(line.get_ydata(), (mean - exact) / abs(exact))
    steps = next(ln for ln in rel_ax.get_lines() if ln.get_label() == "each step")
    np.testing.assert_allclose(steps.get_ydata(), (e - exact) / abs(exact))
    assert np.any(steps.get_ydata() < 0)  # the noise below the exact energy is drawn below zero
    assert rel_ax.get_yscale() == "symlog"
    linthresh = rel_ax.yaxis.get_transform().linthresh
    assert linthresh >= 2 * (0.01 / math.sqrt(10)) / abs(exact)  # the end's noise lies in the linear part
    lo, hi = rel_ax.get_ylim()
    assert lo <= np.min(steps.get_ydata()) and hi >= np.max(steps.get_ydata())
    lo, hi = top.get_ylim()
    tail = e[len(e) // 10:]
    assert lo <= np.min(tail - 0.01) and hi >= np.max(tail + 0.01)
    assert lo <= exact + 0.002 - 0.003 and hi >= exact + 0.002 + 0.003
    assert any("early step(s) above the range" in t for t in top.get_legend_handles_labels()[1])


def test_finish_run_titles_the_system_and_names_the_host(saved_figures, tmp_path, monkeypatch):
    saved = saved_figures
    log = _energy_log(-11.2)
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    summary = dict(hamiltonian="j1j2", J2=0.5, lattice="4x4", n_sites=16, energy=-11.19, energy_error=0.01,
                   wall_time_s=12.5, seconds_per_iteration=0.0625)
    finish_run(str(tmp_path), summary, -11.2)
    fig = saved[0][1]
    assert fig.get_axes()[0].get_title() == "J1-J2 model (J2 = 0.5), 4×4 square lattice, 16 sites"
    assert f"wall time 12.5 s (62 ms per step) on {host_description()}" in [t.get_text() for t in fig.texts]
    assert os.path.exists(tmp_path / "energy.png") and json.loads((tmp_path / "summary.json").read_text()) == summary


def test_a_run_folders_figure_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """A save that fails half-way leaves the old energy.png as it was and no temporary file;
    a read-only old figure (as a run folder copied back from another machine has) is
    replaced, not opened for writing."""
    import matplotlib.figure

    log = _energy_log(-11.2)
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    summary = dict(hamiltonian="heisenberg", lattice="4x4", n_sites=16, energy=-11.19, energy_error=0.01)
    old = b"old figure"
    (tmp_path / "energy.png").write_bytes(old)
    real = matplotlib.figure.Figure.savefig

    def half_written(self, fh, **kw):
        fh.write(b"\x89PNG half")
        raise OSError("disk full")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", half_written)
    with pytest.raises(OSError, match="disk full"):
        finish_run(str(tmp_path), summary, -11.2)
    assert (tmp_path / "energy.png").read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["energy.png", "log.jsonl", "summary.json"]
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", real)
    os.chmod(tmp_path / "energy.png", 0o444)
    finish_run(str(tmp_path), summary, -11.2)
    assert (tmp_path / "energy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
