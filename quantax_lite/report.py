"""What a finished run reports: the summary record, its table, the energy plot, and the
observables of ``quantax-lite measure`` (``observables.json`` and its plots)."""
from __future__ import annotations

import json
import math
import os

__all__ = ["summary_of", "format_table", "plot_energy", "write_json", "finish_run", "energy_unit", "running_mean", "zero_variance_of_run",
           "plot_structure_factor", "plot_correlations", "write_observables"]


def write_json(path: str, obj: dict) -> None:
    """``obj`` to ``path`` atomically, as strict JSON (no NaN or infinity)."""
    text = json.dumps(obj, indent=2, allow_nan=False)  # raises before anything is written
    from .run_folder import atomic_write

    with atomic_write(path) as fh:
        fh.write(text)


def summary_of(stats, n_sites: int, exact: float | None) -> dict:
    """Energy, error, variance, relative error and V-score (N Var / E^2) of a final
    estimate (a :class:`~quantax_lite.stats.Stats` of local energies); None entries where
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
        ("time", f"{summary['wall_time_s']:.1f} s ({summary['seconds_per_iteration'] * 1e3:.0f} ms/iteration, "
                 f"{summary['device_count']} device(s), {summary['process_count']} process(es))"
                 + (f"; stopped at the time limit after {summary.get('iterations')} steps"
                    if summary.get("stopped_at_time_limit") else "")),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


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
    """How a run's energies are measured: 'units of J (S = σ/2)' for Heisenberg / J1-J2,
    'Pauli units (σ)' for the transverse-field Ising model."""
    return "Pauli units (σ), J = 1" if hamiltonian == "tfim" else "units of J, spin-1/2 (S = σ/2)"


def running_mean(values, errors, window: int):
    """The mean of the last ``window`` steps at every step (fewer at the start) and its
    error ``sqrt(sum err^2) / n`` (the steps' samples are independent draws): two arrays."""
    import numpy as np

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
                final: tuple[float, float] | None = None, unit: str = "units of J") -> None:
    """energy.png: the total energy per step (points with error bars) and its running mean
    over the last 5% of the steps (at least 5) with a ±1 error band; the exact energy as a
    dashed line and the final estimate ``final = (energy, error)`` (fresh samples) as a
    marker with its error bar at the last step; below, the relative error to the exact
    energy (when known) and the V-score N Var(E) / E² (``n_sites`` given) or the variance,
    both on log scales. ``unit`` names the energy unit on the axes (:func:`energy_unit`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    it = np.array([r["iteration"] for r in log])
    e = np.array([r["energy"] for r in log], float)
    err = np.array([np.nan if r.get("energy_error") is None else r["energy_error"] for r in log], float)
    var = np.array([np.nan if r.get("variance") is None else r["variance"] for r in log], float)
    window = max(5, len(e) // 20)
    mean, mean_err = running_mean(e, np.nan_to_num(err), window)
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
    # the last 90% of the steps set the scale (the first ones are far above)
    tail = e[len(e) // 10:] if len(e) >= 10 else e
    lo, hi = float(np.min(tail)), float(np.max(tail))
    if exact is not None:
        lo = min(lo, exact)
    pad = max(0.05 * (hi - lo), 1e-3 * max(abs(lo), 1e-12))
    ax.set_ylim(lo - pad, hi + pad)
    ax.set_ylabel(f"total energy\n[{unit}]")
    ax.set_title(title)
    ax.legend(fontsize=7)
    row = 1
    if exact is not None:
        rel = np.maximum(np.abs((e - exact) / exact), 1e-16)  # log scale: no zeros
        axes[row, 0].semilogy(it, rel, ".", ms=2, color="0.6")
        axes[row, 0].semilogy(it, np.maximum(np.abs((mean - exact) / exact), 1e-16), color="C0", lw=1.2)
        if final is not None:
            axes[row, 0].semilogy([it[-1]], [max(abs((final[0] - exact) / exact), 1e-16)], "D", ms=5, color="C3")
        axes[row, 0].set_ylabel("|E − E_exact| / |E_exact|")
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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def zero_variance_of_run(out_dir: str, fraction: float = 0.25, after_iteration: int = 0) -> dict | None:
    """The zero-variance extrapolation (:mod:`quantax_lite.estimates`) over the last
    ``fraction`` of the steps in ``out_dir/log.jsonl`` that come after ``after_iteration``
    (for a staged run the start of the symmetry stage its final estimate uses, so the fit
    describes that wavefunction, not the one of an earlier group), as a JSON-ready dict with
    ``fraction``, ``after_iteration`` and a ``note``; None when too few steps are usable.
    An extrapolation, reported beside the variational energy, never as it. ``after_iteration``
    not an int >= 0: ``TypeError`` / ``ValueError`` naming it."""
    from ._validate import positive_int
    from .estimates import zero_variance_from_log
    from .run_folder import read_log

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
    """``summary.json`` and ``energy.png`` (of the finite steps of ``log.jsonl``) in ``out_dir``."""
    from .run_folder import read_log

    write_json(os.path.join(out_dir, "summary.json"), summary)
    log = [r for r in read_log(os.path.join(out_dir, "log.jsonl")) if r.get("energy") is not None]
    if log:
        final = (summary["energy"], summary["energy_error"]) if summary.get("energy") is not None else None
        plot_energy(os.path.join(out_dir, "energy.png"), log, exact, f"{summary['hamiltonian']} {summary['lattice']}",
                    n_sites=summary.get("n_sites"), final=final, unit=energy_unit(summary["hamiltonian"]))


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_structure_factor(path: str, obs: dict, title: str) -> None:
    """structure_factor.png: S(q) of a :func:`quantax_lite.observables.measure` dict. On a
    2D lattice whose momenta form a grid, a heat map over the Brillouin zone (one cell per
    momentum of the cluster, q in (-π, π]) with (π, π) and (π, 0) marked and the largest
    value named; other momentum sets as coloured points; in 1D, S(q) with error bars."""
    import numpy as np

    plt = _pyplot()
    sf = obs["structure_factor"]
    q = np.asarray(sf["q"], float).reshape(len(sf["mean"]), -1)
    mean = np.array([np.nan if v is None else v for v in sf["mean"]], float)
    error = None if sf.get("error") is None else np.array([np.nan if v is None else v for v in sf["error"]])
    fig, ax = plt.subplots(figsize=(5.6, 4.6))
    if q.shape[1] == 1 or np.allclose(q[:, 1:], q[:1, 1:]):
        order = np.argsort(q[:, 0])
        ax.errorbar(q[order, 0], mean[order], yerr=None if error is None else error[order], fmt="o-", ms=4,
                    capsize=3)
        ax.set_xlabel("q (along the chain)")
        ax.set_ylabel("S(q)")
        ax.set_xticks([-np.pi, -np.pi / 2, 0, np.pi / 2, np.pi], ["−π", "−π/2", "0", "π/2", "π"])
    else:
        qx, qy = np.unique(np.round(q[:, 0], 9)), np.unique(np.round(q[:, 1], 9))
        if len(qx) * len(qy) == len(q):
            grid = np.full((len(qy), len(qx)), np.nan)
            grid[np.searchsorted(qy, np.round(q[:, 1], 9)), np.searchsorted(qx, np.round(q[:, 0], 9))] = mean

            def edges(v):
                if len(v) == 1:
                    return np.array([v[0] - np.pi, v[0] + np.pi])
                mid = (v[1:] + v[:-1]) / 2
                return np.concatenate([[2 * v[0] - mid[0]], mid, [2 * v[-1] - mid[-1]]])

            im = ax.pcolormesh(edges(qx), edges(qy), grid, cmap="viridis", shading="flat")
        else:
            im = ax.scatter(q[:, 0], q[:, 1], c=mean, s=120, cmap="viridis", edgecolors="k", linewidths=0.3)
        fig.colorbar(im, ax=ax, label="S(q)")
        for point, label in (((np.pi, np.pi), "(π,π)"), ((np.pi, 0.0), "(π,0)")):
            ax.plot(*point, "w+", ms=10, mew=1.5)
            ax.annotate(label, point, xytext=(-28, -14), textcoords="offset points", color="w", fontsize=8)
        k = int(np.nanargmax(mean))
        err = "" if error is None or not np.isfinite(error[k]) else f" ± {error[k]:.3f}"
        ax.set_title(f"{title}\nmax S(q) = {mean[k]:.3f}{err} at q = ({q[k, 0]:.3f}, {q[k, 1]:.3f})", fontsize=9)
        ax.set_xlabel("q_x")
        ax.set_ylabel("q_y")
        ax.set_aspect("equal")
    if q.shape[1] == 1 or np.allclose(q[:, 1:], q[:1, 1:]):
        ax.set_title(title)
    fig.text(0.01, 0.01, "S(q) = (1/N) Σ_ij e^{iq·(r_i−r_j)} ⟨S_i·S_j⟩, spin-1/2 units", fontsize=7,
             color="0.4")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_correlations(path: str, obs: dict, title: str) -> None:
    """correlations.png: C(r) = ⟨S_0·S_r⟩ (mean over the lattice's pairs at displacement
    r) against the distance |r|, with error bars; above, the staggered C(r) (−1)^(r_x+r_y)
    on a log scale where it is positive (long-range order: a plateau at m²)."""
    import numpy as np

    plt = _pyplot()
    cr = obs["correlation_vs_distance"]
    r = np.asarray(cr["r"], float).reshape(len(cr["mean"]), -1)
    d = np.asarray(cr["distance"], float)
    mean = np.array([np.nan if v is None else v for v in cr["mean"]], float)
    error = None if cr.get("error") is None else np.array([np.nan if v is None else v for v in cr["error"]])
    keep = d > 0  # C(0) = 3/4 is no correlation
    sign = np.where(np.round(r.sum(axis=1)) % 2 == 0, 1.0, -1.0)
    fig, (top, ax) = plt.subplots(2, 1, figsize=(6.4, 6.0), sharex=True, gridspec_kw={"height_ratios": [1, 1.3]})
    staggered = sign * mean
    pos = keep & (staggered > 0)
    top.errorbar(d[pos], staggered[pos], yerr=None if error is None else error[pos], fmt="o", ms=4, capsize=2)
    top.set_yscale("log")
    m2 = obs.get("staggered_magnetization_sq", {}).get("mean")
    if m2 is not None and m2 > 0:
        top.axhline(m2, color="C3", ls="--", lw=1, label=f"m² = {m2:.4f}")
        top.legend(fontsize=8)
    top.set_ylabel("(−1)^(r_x+r_y) C(r)")
    top.set_title(title)
    ax.errorbar(d[keep], mean[keep], yerr=None if error is None else error[keep], fmt="o", ms=4, capsize=2)
    ax.axhline(0, color="0.7", lw=0.8)
    ax.set_xlabel("distance |r| (lattice spacings, minimum image)")
    ax.set_ylabel("C(r) = ⟨S_0·S_r⟩ (spin-1/2 units)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_observables(out_dir: str, obs: dict, title: str) -> list[str]:
    """``observables.json`` (strict JSON, written atomically: a value that is not finite
    raises before anything is written), ``structure_factor.png`` and ``correlations.png``
    in ``out_dir``; returns their paths."""
    json.dumps(obs, allow_nan=False)  # nothing partial: refuse before writing any file
    paths = [os.path.join(out_dir, name) for name in ("observables.json", "structure_factor.png", "correlations.png")]
    write_json(paths[0], obs)
    plot_structure_factor(paths[1], obs, title)
    plot_correlations(paths[2], obs, title)
    return paths
