"""What a finished run reports: the summary record, its table, the energy plot, and the
observables of ``quantax-lite measure`` (``observables.json`` and its plots)."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import re
import sys

import numpy as np

from quantax_lite.utils.validate import positive_int
from quantax_lite.geometry.brillouin import high_symmetry_points, zone_corners, zone_images
from quantax_lite.stats.estimates import zero_variance_from_log
from quantax_lite.hamiltonians import HAMILTONIAN_NAMES, SPIN_UNITS, hamiltonian_entry
from quantax_lite.geometry.lattice import parse_lattice
from quantax_lite.driver.run_folder import atomic_write, read_log

__all__ = ["summary_of", "format_table", "plot_energy", "write_json", "save_figure", "finish_run", "energy_unit", "running_mean", "zero_variance_of_run",
           "plot_structure_factor", "plot_correlations", "write_observables", "system_title", "readable_title",
           "lattice_description", "host_description", "timing_note", "correlation_signs"]


def write_json(path: str, obj: dict) -> None:
    """``obj`` to ``path`` atomically, as strict JSON (no NaN or infinity)."""
    text = json.dumps(obj, indent=2, allow_nan=False)  # raises before anything is written

    with atomic_write(path) as fh:
        fh.write(text)


def save_figure(fig, path: str) -> None:
    """``fig`` at ``path`` (120 dpi; the format of its extension, PNG without one), written
    whole or not at all (a failed or killed save leaves the old file; a read-only old file
    is replaced, not opened), then closed."""
    kind = os.path.splitext(os.fspath(path))[1].lstrip(".").lower() or "png"
    try:
        with atomic_write(path, "wb") as fh:
            fig.savefig(fh, dpi=120, format=kind)
    finally:
        _pyplot().close(fig)


def summary_of(stats, n_sites: int, exact: float | None) -> dict:
    """Energy, error, variance, relative error and V-score (N Var / E^2) of a final
    estimate (a :class:`~quantax_lite.stats.chains.Stats` of local energies); None entries where
    a value is not finite, and ``"diverged": True`` then."""
    energy, error, variance = float(stats.mean.real), float(stats.error_of_mean), float(stats.variance)
    if not all(math.isfinite(v) for v in (energy, error, variance)):
        return {"diverged": True, "non_finite": "final energy estimate"}
    r_hat = float(stats.r_hat)
    return {
        "diverged": False,
        "energy": energy,
        "energy_error": error,
        "energy_per_site": energy / n_sites,
        "variance": variance,
        "relative_error": None if exact is None else abs((energy - exact) / exact),
        "v_score": n_sites * variance / energy**2,
        "r_hat": r_hat if math.isfinite(r_hat) else None,
    }


def format_table(summary: dict) -> str:
    """The summary as an aligned two-column table."""
    def fmt(v, spec):
        return "n/a" if v is None else format(v, spec)

    rows = [
        ("system", f"{summary['hamiltonian']} on {summary['lattice']} ({summary['n_sites']} sites)"),
        ("symmetry", _symmetry_cell(summary)),
        ("parameters", f"{summary['n_params']}"),
        ("energy", f"{summary['energy']:.6f} ± {summary['energy_error']:.6f}"),
        ("energy per site", f"{summary['energy_per_site']:.8f}"),
        ("exact energy", fmt(summary["exact_energy"], ".6f")
         + (f" ({summary['exact_energy_source']})" if summary.get("exact_energy_source") else "")),
        ("relative error", fmt(summary["relative_error"], ".2e")),
        ("V-score", f"{summary['v_score']:.2e}"),
        ("E(σ²→0) fit", _extrapolation_cell(summary.get("zero_variance_extrapolation"))),
        ("S(π,π), m²", _order_cell(summary)),
        ("time", f"{summary['wall_time_s']:.1f} s ({_per_step_cell(summary.get('seconds_per_iteration'))}, "
                 f"{summary['device_count']} device(s), {summary['process_count']} process(es))"
                 + (f"; stopped at the time limit after {summary.get('iterations')} steps"
                    if summary.get("stopped_at_time_limit") else "")),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _per_step_cell(seconds: float | None) -> str:
    """The time per step, or that no step ran (a resumed run that had none left)."""
    return "no step taken" if seconds is None else f"{seconds * 1e3:.0f} ms/iteration"


def _symmetry_cell(summary: dict) -> str:
    """The group and, where set, its sector: momentum (m1, m2), spin parity, rotation parity."""
    parts = [str(summary.get("symmetry", "n/a"))]
    if summary.get("estimate_symmetry") not in (None, summary.get("symmetry")):  # staged: the final group
        parts[0] += f" (final estimate: {summary['estimate_symmetry']})"
    if summary.get("momentum") is not None:
        parts.append("momentum (" + ", ".join(str(m) for m in summary["momentum"]) + ")")
    for key, label in (("spin_parity", "spin parity"), ("rotation_parity", "rotation parity")):
        if summary.get(key) is not None:
            parts.append(f"{label} {summary[key]:+d}")
    return ", ".join(parts)


def _extrapolation_cell(fit: dict | None) -> str:
    if not fit:
        return "n/a"
    return f"{fit['energy']:.6f} ± {fit['error']:.6f} (extrapolated over {fit['n_points']} steps, not variational)"


def energy_unit(hamiltonian: str) -> str:
    """How a run's energies are measured, as its registered model says
    (:mod:`quantax_lite.hamiltonians`): 'units of J (S = σ/2)' for Heisenberg / J1-J2,
    'Pauli units (σ)' for the transverse-field Ising model; spin-1/2 units for a name not
    registered."""
    return hamiltonian_entry(hamiltonian).units if hamiltonian in HAMILTONIAN_NAMES else SPIN_UNITS


def running_mean(values, errors, window: int):
    """The mean of the last ``window`` steps at every step (fewer at the start) and its
    error ``sqrt(sum err^2) / n`` (the steps' samples are independent draws): two arrays."""

    v, e = np.asarray(values, float), np.asarray(errors, float)
    c1 = np.concatenate([[0.0], np.cumsum(v)])
    c2 = np.concatenate([[0.0], np.cumsum(e**2)])
    hi = np.arange(1, len(v) + 1)
    lo = np.maximum(0, hi - window)
    n = hi - lo
    return (c1[hi] - c1[lo]) / n, np.sqrt(c2[hi] - c2[lo]) / n


def _order_cell(summary: dict) -> str:
    """'S ± e, m² ± e (k samples)' of the summary, or n/a."""
    s, m2 = summary.get("s_pi_pi"), summary.get("staggered_magnetization_sq")
    if s is None or m2 is None:
        return "n/a"
    err = lambda k: "" if summary.get(k) is None else f" ± {summary[k]:.1e}"  # noqa: E731
    n = summary.get("n_observable_samples", "?")
    over = f"exact, {n} orbits" if summary.get("sampling") == "exact_sum" else f"{n} samples"
    return f"{s:.4f}{err('s_pi_pi_error')}, {m2:.5f}{err('staggered_magnetization_sq_error')} ({over})"


def plot_energy(path: str, log: list[dict], exact: float | None, title: str, *, n_sites: int | None = None,
                final: tuple[float, float] | None = None, unit: str = "units of J", note: str | None = None) -> None:
    """energy.png: the total energy per step (points with error bars) and its running mean
    over the last 5% of the steps (at least 5) with a ±1 error band; the exact energy as a
    dashed line and the final estimate ``final = (energy, error)`` (fresh samples) as a
    marker with its error bar at the last step. The energy axis spans the last 90% of the
    steps with their error bars (the first steps, far above, are counted in the legend, not
    squeezed in). Below, when the exact energy is known, the **signed** relative error
    ``(E − E_exact) / |E_exact|`` of the steps and of the running mean (with its band) on a
    symmetric-log axis, linear within about one error bar of zero: noise around the exact
    energy shows as noise, not as dips of a logarithm, and an energy below the exact one
    (not variational: a bug) stays visible below the zero line. Last, the V-score
    N Var(E) / E² (``n_sites`` given) or the variance on a log scale. ``unit`` names the
    energy unit on the axes (:func:`energy_unit`); an internal title such as
    ``"heisenberg 4x4"`` is drawn readable (:func:`readable_title`); ``note`` (e.g. the wall
    time and the host, :func:`timing_note`) is written under the figure."""
    plt = _pyplot()

    it = np.array([r["iteration"] for r in log])
    e = np.array([r["energy"] for r in log], float)
    err = np.array([np.nan if r.get("energy_error") is None else r["energy_error"] for r in log], float)
    var = np.array([np.nan if r.get("variance") is None else r["variance"] for r in log], float)
    err0 = np.nan_to_num(err)
    window = max(5, len(e) // 20)
    mean, mean_err = running_mean(e, err0, window)
    panels = ["energy"] + (["relative"] if exact is not None else []) + ["spread"]
    fig, axes = plt.subplots(len(panels), 1, figsize=(6.4, 2.2 + 2.0 * len(panels)), sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": [2] + [1] * (len(panels) - 1)})
    ax = axes[0, 0]
    ax.errorbar(it, e, yerr=err, fmt=".", ms=2, lw=0.4, color="0.6", label="each step")
    ax.plot(it, mean, color="C0", lw=1.2, label=f"running mean ({window} steps)")
    ax.fill_between(it, mean - mean_err, mean + mean_err, color="C0", alpha=0.3, lw=0)
    if exact is not None:
        ax.axhline(exact, color="k", lw=1, ls="--", label=f"exact {exact:.6f}")
    if final is not None:
        ax.errorbar([it[-1]], [final[0]], yerr=[final[1]], fmt="D", ms=5, color="C3", capsize=4, zorder=5,
                    label=f"final {final[0]:.6f} ± {final[1]:.6f}")
    # the last 90% of the steps, with their error bars, set the scale (the first ones are far above)
    first = len(e) // 10 if len(e) >= 10 else 0
    lo = float(np.min(e[first:] - err0[first:]))
    hi = float(np.max(e[first:] + err0[first:]))
    if exact is not None:
        lo, hi = min(lo, exact), max(hi, exact)
    if final is not None:
        lo, hi = min(lo, final[0] - final[1]), max(hi, final[0] + final[1])
    pad = max(0.05 * (hi - lo), 1e-3 * max(abs(lo), 1e-12))
    ax.set_ylim(lo - pad, hi + pad)
    above = int(np.sum(e + err0 > hi + pad))
    if above:  # say what the range leaves out
        ax.plot([], [], " ", label=f"{above} early step(s) above the range")
    ax.set_ylabel(f"total energy\n[{unit}]")
    ax.set_title(readable_title(title))
    ax.legend(fontsize=7)
    row = 1
    if exact is not None:
        ax = axes[row, 0]
        scale = abs(exact) if exact else 1.0
        rel, rel_mean, rel_band = (e - exact) / scale, (mean - exact) / scale, mean_err / scale
        linthresh = _linear_threshold(rel_band[-max(1, window):], rel_mean[-max(1, window):])
        ax.plot(it, rel, ".", ms=2, color="0.6", label="each step")
        ax.plot(it, rel_mean, color="C0", lw=1.2, label="running mean")
        ax.fill_between(it, rel_mean - rel_band, rel_mean + rel_band, color="C0", alpha=0.3, lw=0)
        ax.axhline(0.0, color="k", lw=1, ls="--")
        values = [rel, rel_mean - rel_band, rel_mean + rel_band]
        if final is not None:
            f_rel, f_err = (final[0] - exact) / scale, final[1] / scale
            ax.errorbar([it[-1]], [f_rel], yerr=[f_err], fmt="D", ms=5, color="C3", capsize=4, zorder=5,
                        label="final")
            values.append(np.array([f_rel - f_err, f_rel + f_err]))
        ax.set_yscale("symlog", linthresh=linthresh)
        every = np.concatenate([np.ravel(v) for v in values])
        every = every[np.isfinite(every)]
        top = max(float(every.max()), linthresh) * 2.0
        bottom = min(float(every.min()) * 2.0, -linthresh) if every.min() < 0 else -linthresh
        ax.set_ylim(bottom, top)
        ax.set_ylabel(f"(E − E_exact) / |E_exact|\n(linear within ±{linthresh:.0e})", fontsize=8)
        ax.legend(fontsize=6, loc="upper right")
        row += 1
    ax = axes[row, 0]
    if n_sites is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            spread = n_sites * var / e**2
        ax.set_ylabel("V-score N Var(E) / E²")
    else:
        spread = var
        ax.set_ylabel(f"Var(E) [{unit.split(',')[0]}]²")
    ok = np.isfinite(spread) & (spread > 0)
    if ok.any():
        ax.semilogy(it[ok], spread[ok], ".", ms=2, color="C2")
    axes[-1, 0].set_xlabel("iteration")
    if note:
        fig.text(0.01, 0.005, note, fontsize=7, color="0.3", va="bottom")
    fig.tight_layout(rect=(0, 0.025 if note else 0, 1, 1))
    save_figure(fig, path)


def _linear_threshold(bands, values) -> float:
    """The linear half-width of the symmetric-log axis of a signed relative error: the power
    of ten at or above twice the running mean's error bar at the end (sampled runs: the
    noise of the last steps lies in the linear part), else at or below the smallest nonzero
    |value| at the end (exact sums, no error bar); within [1e-15, 1e-1]."""

    bands = np.asarray(bands, float)
    bands = bands[np.isfinite(bands) & (bands > 0)]
    if len(bands):
        power = math.ceil(math.log10(2.0 * float(np.median(bands))))
    else:
        v = np.abs(np.asarray(values, float))
        v = v[np.isfinite(v) & (v > 0)]
        power = math.floor(math.log10(float(v.min()))) if len(v) else -15
    return float(min(max(10.0**power, 1e-15), 1e-1))


def zero_variance_of_run(out_dir: str, fraction: float = 0.25, after_iteration: int = 0) -> dict | None:
    """The zero-variance extrapolation (:mod:`quantax_lite.stats.estimates`) over the last
    ``fraction`` of the steps in ``out_dir/log.jsonl`` that come after ``after_iteration``
    (for a staged run the start of the symmetry stage its final estimate uses, so the fit
    describes that wavefunction, not the one of an earlier group), as a JSON-ready dict with
    ``fraction``, ``after_iteration`` and a ``note``; None when too few steps are usable.
    An extrapolation, reported beside the variational energy, never as it. ``after_iteration``
    not an int >= 0: ``TypeError`` / ``ValueError`` naming it."""

    after_iteration = positive_int(after_iteration, "after_iteration", minimum=0)
    records = read_log(os.path.join(out_dir, "log.jsonl"))
    if after_iteration:  # the log numbers a step by the iteration it ends at (1 for the first)
        records = [r for r in records if isinstance(r.get("iteration"), int) and r["iteration"] > after_iteration]
    fit = zero_variance_from_log(records, fraction)
    if fit is None or not all(math.isfinite(v) for v in (fit.energy, fit.error)):
        return None
    return dict(fit.to_dict(), fraction=fraction, after_iteration=after_iteration,
                note="intercept of E vs variance over the training steps; an extrapolation, not a variational energy")


def finish_run(out_dir: str, summary: dict, exact: float | None) -> None:
    """``summary.json`` and ``energy.png`` (of the finite steps of ``log.jsonl``) in ``out_dir``;
    the plot's title names the system (:func:`system_title`) and its footer the wall time
    and the host (:func:`timing_note`)."""

    write_json(os.path.join(out_dir, "summary.json"), summary)
    log = [r for r in read_log(os.path.join(out_dir, "log.jsonl")) if r.get("energy") is not None]
    if log:
        final = (summary["energy"], summary["energy_error"]) if summary.get("energy") is not None else None
        title = system_title(summary["hamiltonian"], summary["lattice"], J2=summary.get("J2"), h=summary.get("h"))
        plot_energy(os.path.join(out_dir, "energy.png"), log, exact, title,
                    n_sites=summary.get("n_sites"), final=final, unit=energy_unit(summary["hamiltonian"]),
                    note=timing_note(summary))


# ------------------------------------------------------------------ readable names
_TITLE = re.compile(r"^\s*(\S+)\s+(\S+)(.*)$", re.S)  # "<hamiltonian> <lattice name><rest>"


def _parse_lattice_name(name: str):
    """The :class:`~quantax_lite.geometry.lattice.Lattice` of a ``Lattice.name`` (``"4x4"``,
    ``"chain:20"``, ``"kagome:2x3"``, with ``":open"`` for open boundaries); None when the
    name is not one."""


    if not isinstance(name, str):
        return None
    open_ = name.endswith(":open")
    try:
        lattice = parse_lattice(name[: -len(":open")] if open_ else name)
    except ValueError:
        return None
    return dataclasses.replace(lattice, pbc=False) if open_ else lattice


def lattice_description(name: str) -> str:
    """``"4×4 square lattice, 16 sites"``, ``"chain of 20 sites"``, ``"kagome lattice, 2×3
    cells, 18 sites"`` (``", open boundaries"`` when open); the name itself when it is none."""
    lattice = _parse_lattice_name(name)
    if lattice is None:
        return str(name)
    grid = "×".join(str(L) for L in lattice.shape)
    if lattice.ndim == 1:
        text = f"chain of {lattice.n_sites} sites"
    elif lattice.is_hypercubic:
        text = f"{grid} square lattice, {lattice.n_sites} sites"
    elif lattice.n_basis == 1:
        text = f"{grid} {lattice.kind} lattice, {lattice.n_sites} sites"
    else:
        text = f"{lattice.kind} lattice, {grid} cells, {lattice.n_sites} sites"
    return text + ("" if lattice.pbc else ", open boundaries")


def system_title(hamiltonian: str, lattice: str, *, J2: float | None = None, h: float | None = None) -> str:
    """The system in words: ``"Heisenberg model, 4×4 square lattice, 16 sites"``, ``"J1-J2
    model (J2 = 0.5), ..."``, ``"transverse-field Ising model (h = 1), ..."`` (the registered
    model's words with its coupling, :meth:`~quantax_lite.hamiltonians.HamiltonianEntry.words`;
    a name not registered as it is)."""
    if hamiltonian not in HAMILTONIAN_NAMES:
        return f"{hamiltonian}, {lattice_description(lattice)}"
    entry = hamiltonian_entry(hamiltonian)
    model = entry.words({"J2": J2, "h": h}.get(entry.coupling))
    return f"{model}, {lattice_description(lattice)}"


def readable_title(title: str, obs: dict | None = None) -> str:
    """A title given as internal keys, ``"<hamiltonian> <lattice name><rest>"`` (e.g.
    ``"heisenberg 4x4, step 600"``), in words (:func:`system_title`, the couplings from
    ``obs["run"]["recipe"]`` where the observables carry them); any other title unchanged."""
    m = _TITLE.match(str(title))
    if not m or m.group(1) not in HAMILTONIAN_NAMES or _parse_lattice_name(m.group(2).rstrip(",")) is None:
        return str(title)
    recipe = ((obs or {}).get("run") or {}).get("recipe") or {}
    lattice = m.group(2).rstrip(",")
    rest = m.group(3) if not m.group(2).endswith(",") else "," + m.group(3)
    return system_title(m.group(1), lattice, J2=recipe.get("J2"), h=recipe.get("h")) + rest


def host_description() -> str:
    """The machine this process runs on, e.g. ``"2-core x86_64 CPU"``, with the accelerator
    when jax (already imported) uses one: ``"1 × TPU v5 lite, 13-core x86_64 CPU"``."""

    text = f"{os.cpu_count()}-core {platform.machine() or 'unknown'} CPU"
    jax = sys.modules.get("jax")
    if jax is not None:
        try:
            devices = jax.devices()
        except RuntimeError:  # no backend could start
            return text
        if devices and devices[0].platform != "cpu":
            text = f"{len(devices)} × {devices[0].device_kind}, " + text
    return text


def timing_note(summary: dict, host: str | None = None) -> str | None:
    """``"wall time 12.3 s (45 ms per step) on 2-core x86_64 CPU"`` of a summary (the host:
    ``summary["host"]``, else ``host``, else this machine's, :func:`host_description`);
    None without a wall time."""
    wall = summary.get("wall_time_s")
    if wall is None:
        return None
    per = summary.get("seconds_per_iteration")
    step = "" if per is None else f" ({per * 1e3:.0f} ms per step)"
    return f"wall time {wall:.1f} s{step} on {summary.get('host') or host or host_description()}"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# ------------------------------------------------------------------ observables' plots
def _lattice_of(obs: dict, lattice=None):
    """The lattice of a :func:`quantax_lite.observables.measure` dict (its ``"lattice"``
    record, by name) or ``lattice`` when given; None when neither says (no sublattice
    signs, no zone then). A lattice whose site count differs from ``obs["n_sites"]``:
    ValueError naming ``lattice``."""
    if lattice is None:
        info = obs.get("lattice") or {}
        lattice = _parse_lattice_name(info.get("name"))
        if lattice is not None and info.get("pbc") is False and lattice.pbc:

            lattice = dataclasses.replace(lattice, pbc=False)
    if lattice is not None and obs.get("n_sites") is not None and lattice.n_sites != obs["n_sites"]:
        raise ValueError(f"lattice: {lattice.name} has {lattice.n_sites} sites, the observables {obs['n_sites']}")
    return lattice


def correlation_signs(lattice, r) -> tuple[str, object]:
    """How the correlations ``C(r)`` at the displacements ``r`` ``(n_r, ndim)`` (minimum
    image, as :func:`quantax_lite.observables.correlation_vs_distance` gives them) may be
    read on ``lattice``:

    * ``("staggered", eps)``: a bipartite lattice (:attr:`Lattice.is_bipartite`: the square
      lattice and the chain with even periodic sides, the honeycomb lattice); ``eps[k]`` is
      ``+1`` when the pairs at ``r[k]`` join sites of one sublattice, ``-1`` when they join
      the two; ``eps C(r)`` tends to ``m²`` in a Néel state;
    * ``("sublattice", same)``: a lattice that is not bipartite but whose sublattice labels
      (:attr:`Lattice.sublattice`: the three of the 120-degree state on the triangular
      lattice, the basis sites of the kagome lattice) are the same for all pairs at each
      ``r``; ``same[k]`` says whether they are one sublattice. No sign is implied;
    * ``("none", None)``: no lattice, labels that mix at some ``r`` (e.g. a triangular
      cluster whose sides 3 does not divide), or an ``r`` that no pair of sites has.
    """

    if lattice is None:
        return "none", None
    r = np.asarray(r, float).reshape(len(r), -1)
    n = lattice.n_sites
    a, b = (x.reshape(-1) for x in np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))
    d = np.round(np.asarray(lattice.displacement(a, b), float), 6) + 0.0
    key = {tuple(v): k for k, v in enumerate(np.round(r, 6) + 0.0)}
    sub = np.asarray(lattice.sublattice)
    same = np.full(len(r), -1)
    for row, i, j in zip(d, a, b):
        k = key.get(tuple(row))
        if k is None:  # a displacement not drawn
            continue
        flag = int(sub[i] == sub[j])
        if same[k] not in (-1, flag):
            return "none", None
        same[k] = flag
    if np.any(same < 0):
        return "none", None
    if lattice.is_bipartite:
        return "staggered", np.where(same == 1, 1.0, -1.0)
    return "sublattice", same.astype(bool)


def _values(seq):

    return None if seq is None else np.array([np.nan if v is None else v for v in seq], float)


def _limits_with_bars(ax, y, err, axis="y", pad=0.08):
    """Axis limits that hold every point with its full error bar (never a clipped bar)."""

    y = np.asarray(y, float)
    e = np.zeros_like(y) if err is None else np.nan_to_num(np.asarray(err, float))
    lo, hi = np.nanmin(y - e), np.nanmax(y + e)
    span = max(hi - lo, 1e-12 * max(abs(lo), abs(hi), 1.0))
    (ax.set_ylim if axis == "y" else ax.set_xlim)(lo - pad * span, hi + pad * span)


def plot_structure_factor(path: str, obs: dict, title: str, *, lattice=None) -> None:
    """structure_factor.png: S(q) of a :func:`quantax_lite.observables.measure` dict.

    In 1D, S(q) with error bars against q, the zone centre Γ and edge X = π marked. In 2D,
    the first Brillouin zone of the lattice (from its reciprocal vectors,
    :mod:`quantax_lite.geometry.brillouin`) drawn with its high-symmetry points marked and named:
    Γ, X, M on the square lattice, Γ, K, M on the triangular, honeycomb and kagome lattices.
    On a lattice of one site per cell S(q) is periodic in the reciprocal lattice: every
    momentum is drawn at each of its images in the closed first zone (several for one on
    the zone's edge: q = π also at −π); on a lattice with a basis (honeycomb, kagome) S(q)
    is not periodic, and the momenta are drawn where measured. On the square lattice, a
    heat map (one cell per momentum, the outer cells ending on the zone's edges); on the
    others coloured points. The title names the system
    (:func:`readable_title`) and the largest S(q), with the high-symmetry point where it
    lies on one. ``lattice``: default the one ``obs`` names (``obs["lattice"]["name"]``)."""


    plt = _pyplot()
    lattice = _lattice_of(obs, lattice)
    title = readable_title(title, obs)
    sf = obs["structure_factor"]
    mean = _values(sf["mean"])
    q = np.asarray(sf["q"], float).reshape(len(mean), -1)
    error = _values(sf.get("error"))
    fig, ax = plt.subplots(figsize=(5.8, 5.0))
    one_d = q.shape[1] == 1 or np.allclose(q[:, 1:], q[:1, 1:])
    if one_d:
        order = np.argsort(q[:, 0])
        ax.errorbar(q[order, 0], mean[order], yerr=None if error is None else error[order], fmt="o-", ms=4,
                    capsize=3)
        _limits_with_bars(ax, mean[order], None if error is None else error[order])
        ax.set_xlabel("q (along the chain, 1 / lattice spacing)")
        ax.set_ylabel("S(q)")
        ax.set_xticks([-np.pi, -np.pi / 2, 0, np.pi / 2, np.pi], ["−π (X)", "−π/2", "0 (Γ)", "π/2", "π (X)"])
        ax.set_title(title, fontsize=9)
    else:
        points = {}
        if lattice is not None and lattice.ndim == 2:
            points = high_symmetry_points(lattice)
        if lattice is not None and lattice.ndim == 2 and lattice.n_basis == 1:
            # S(q + G) = S(q): every momentum at each of its images in the closed first zone
            images = zone_images(q, lattice)
            idx, shown = np.array([n for n, _ in images]), np.array([k for _, k in images])
        else:  # a basis: S(q) is not periodic in the reciprocal lattice; the momenta as measured
            idx, shown = np.arange(len(q)), q
        qx, qy = np.unique(np.round(shown[:, 0], 9)), np.unique(np.round(shown[:, 1], 9))
        if (lattice is None or lattice.is_hypercubic) and len(qx) * len(qy) == len(shown):
            grid = np.full((len(qy), len(qx)), np.nan)
            grid[np.searchsorted(qy, np.round(shown[:, 1], 9)), np.searchsorted(qx, np.round(shown[:, 0], 9))] = \
                mean[idx]
            # cells between the momenta, the outer ones ending on the zone's edges (q = ±π)
            bound = np.pi if lattice is not None else None

            def edges(v):
                if len(v) == 1:
                    return np.array([v[0] - np.pi, v[0] + np.pi])
                mid = (v[1:] + v[:-1]) / 2
                lo, hi = 2 * v[0] - mid[0], 2 * v[-1] - mid[-1]
                if bound is not None:
                    lo, hi = max(lo, -bound), min(hi, bound)
                return np.concatenate([[lo], mid, [hi]])

            im = ax.pcolormesh(edges(qx), edges(qy), grid, cmap="viridis", shading="flat")
        else:
            im = ax.scatter(shown[:, 0], shown[:, 1], c=mean[idx], s=110, cmap="viridis", edgecolors="k",
                            linewidths=0.3, zorder=3)
        fig.colorbar(im, ax=ax, label="S(q)")
        if points:
            corners = zone_corners(lattice)
            ring = np.concatenate([corners, corners[:1]])
            ax.plot(ring[:, 0], ring[:, 1], color="0.25", lw=1.0, ls="-", label="first Brillouin zone", zorder=4)
            for name, k in points.items():
                ax.plot(k[0], k[1], "+", color="r", ms=11, mew=1.8, zorder=5)
                ax.annotate(name, (k[0], k[1]), xytext=(5, 4), textcoords="offset points", color="r",
                            fontsize=11, fontweight="bold", zorder=6)
            ax.legend(fontsize=7, loc="lower left")
            span = np.concatenate([shown, corners])
            lo, hi = span.min(axis=0), span.max(axis=0)
            pad = 0.15 * (hi - lo).max()
            ax.set_xlim(lo[0] - pad, hi[0] + pad)
            ax.set_ylim(lo[1] - pad, hi[1] + pad)
        k = int(np.nanargmax(mean))
        err = "" if error is None or not np.isfinite(error[k]) else f" ± {error[k]:.3f}"
        at = _point_name(q[k], points, lattice)
        ax.set_title(f"{title}\nmax S(q) = {mean[k]:.3f}{err} at q = ({q[k, 0]:.3f}, {q[k, 1]:.3f}){at}",
                     fontsize=9)
        ax.set_xlabel("q_x (1 / nearest-neighbour distance)")
        ax.set_ylabel("q_y")
        ax.set_aspect("equal")
    fig.text(0.01, 0.01, "S(q) = (1/N) Σ_ij e^{iq·(r_i−r_j)} ⟨S_i·S_j⟩, spin-1/2 units", fontsize=7,
             color="0.4")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    save_figure(fig, path)


def _point_name(k, points: dict, lattice) -> str:
    """``" = M"`` when the momentum ``k`` is the high-symmetry point M (on a lattice of one
    site per cell also up to a reciprocal lattice vector), else ``""``."""

    if not points:
        return ""
    G = [np.zeros(2)]
    if lattice.n_basis == 1:
        b = lattice.reciprocal_vectors
        G = [m * b[0] + n * b[1] for m in range(-3, 4) for n in range(-3, 4)]
    for name, p in points.items():
        if any(np.linalg.norm(k - p - g) < 1e-6 for g in G):
            return f" = {name}"
    return ""


def plot_correlations(path: str, obs: dict, title: str, *, lattice=None) -> None:
    """correlations.png: C(r) = ⟨S_0·S_r⟩ (mean over the lattice's pairs at displacement
    r) against the distance |r|, with error bars (all inside the axes), read with the
    lattice's own rule (:func:`correlation_signs`):

    * bipartite lattice (square or chain with even sides, honeycomb): above, the staggered
      correlation ε(r) C(r), ε = +1 within a sublattice and −1 between the two, on a linear
      axis with m² (its plateau in a Néel state) as a line; below, C(r);
    * other lattices with a sublattice colouring (triangular, kagome): one panel of C(r),
      pairs within one sublattice and between different ones drawn apart, no sign implied;
    * otherwise (or no lattice known): C(r) alone.

    ``lattice``: default the one ``obs`` names (``obs["lattice"]["name"]``)."""

    plt = _pyplot()
    lattice = _lattice_of(obs, lattice)
    title = readable_title(title, obs)
    cr = obs["correlation_vs_distance"]
    mean = _values(cr["mean"])
    r = np.asarray(cr["r"], float).reshape(len(mean), -1)
    d = np.asarray(cr["distance"], float)
    error = _values(cr.get("error"))
    keep = d > 0  # C(0) = 3/4 is no correlation
    rule, signs = correlation_signs(lattice, r)
    bar = (lambda m: None) if error is None else (lambda m: error[m])  # noqa: E731
    if rule == "staggered":
        fig, (top, ax) = plt.subplots(2, 1, figsize=(6.4, 6.2), sharex=True, gridspec_kw={"height_ratios": [1, 1.3]})
        staggered = signs * mean
        top.errorbar(d[keep], staggered[keep], yerr=bar(keep), fmt="o", ms=4, capsize=2, label="ε(r) C(r)")
        top.axhline(0, color="0.7", lw=0.8)
        y_all, e_all = staggered[keep], bar(keep)
        m2 = (obs.get("staggered_magnetization_sq") or {}).get("mean")
        if m2 is not None:
            top.axhline(m2, color="C3", ls="--", lw=1, label=f"m² = {m2:.4f}")
            y_all, e_all = np.append(y_all, m2), None if e_all is None else np.append(e_all, 0.0)
        _limits_with_bars(top, y_all, e_all)
        top.legend(fontsize=8)
        top.set_ylabel("ε(r) C(r)\n(ε = ±1: same / other sublattice)", fontsize=8)
        top.set_title(title, fontsize=9)
        ax.errorbar(d[keep], mean[keep], yerr=bar(keep), fmt="o", ms=4, capsize=2)
        _limits_with_bars(ax, mean[keep], bar(keep))
    else:
        fig, ax = plt.subplots(figsize=(6.4, 4.6))
        if rule == "sublattice":
            for part, label, style in ((keep & signs, "same sublattice", "o"),
                                       (keep & ~signs, "different sublattices", "s")):
                if part.any():
                    ax.errorbar(d[part], mean[part], yerr=bar(part), fmt=style, ms=4, capsize=2, label=label,
                                mfc="none" if style == "s" else None)
            note = f"{lattice.kind} lattice: not bipartite, no staggered sign; sublattices of its own colouring"
        else:
            ax.errorbar(d[keep], mean[keep], yerr=bar(keep), fmt="o", ms=4, capsize=2, label="C(r)")
            note = "no sublattice rule: raw correlations"
        _limits_with_bars(ax, mean[keep], bar(keep))
        ax.legend(fontsize=8)
        ax.set_title(f"{title}\n{note}", fontsize=9)
    ax.axhline(0, color="0.7", lw=0.8)
    ax.set_xlabel("distance |r| (nearest-neighbour distances, minimum image)")
    ax.set_ylabel("C(r) = ⟨S_0·S_r⟩ (spin-1/2 units)")
    fig.tight_layout()
    save_figure(fig, path)


def write_observables(out_dir: str, obs: dict, title: str, *, lattice=None) -> list[str]:
    """``observables.json`` (strict JSON, written atomically: a value that is not finite
    raises before anything is written), ``structure_factor.png`` and ``correlations.png``
    in ``out_dir``; returns their paths. ``lattice``: as in :func:`plot_structure_factor`."""
    json.dumps(obs, allow_nan=False)  # nothing partial: refuse before writing any file
    lattice = _lattice_of(obs, lattice)
    paths = [os.path.join(out_dir, name) for name in ("observables.json", "structure_factor.png", "correlations.png")]
    write_json(paths[0], obs)
    plot_structure_factor(paths[1], obs, title, lattice=lattice)
    plot_correlations(paths[2], obs, title, lattice=lattice)
    return paths
