"""What a finished run reports: the summary record, its table, and the energy plot."""
from __future__ import annotations

import json
import math
import os

__all__ = ["summary_of", "format_table", "plot_energy", "write_json", "finish_run"]


def write_json(path: str, obj: dict) -> None:
    """``obj`` to ``path`` atomically, as strict JSON (no NaN or infinity)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=2, allow_nan=False)
    os.replace(tmp, path)


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
        ("parameters", f"{summary['n_params']}"),
        ("energy", f"{summary['energy']:.6f} ± {summary['energy_error']:.6f}"),
        ("energy per site", f"{summary['energy_per_site']:.8f}"),
        ("exact energy", fmt(summary["exact_energy"], ".6f")),
        ("relative error", fmt(summary["relative_error"], ".2e")),
        ("V-score", f"{summary['v_score']:.2e}"),
        ("time", f"{summary['wall_time_s']:.1f} s ({summary['seconds_per_iteration'] * 1e3:.0f} ms/iteration, "
                 f"{summary['device_count']} device(s), {summary['process_count']} process(es))"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def plot_energy(path: str, log: list[dict], exact: float | None, title: str) -> None:
    """energy.png: energy vs iteration (with error bars), the exact energy as a line, and
    the relative error on a log scale when the exact energy is known."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    it = [r["iteration"] for r in log]
    e = [r["energy"] for r in log]
    err = [r["energy_error"] for r in log]
    n_panels = 2 if exact is not None else 1
    fig, axes = plt.subplots(n_panels, 1, figsize=(6.4, 3.0 * n_panels), sharex=True, squeeze=False)
    ax = axes[0, 0]
    ax.errorbar(it, e, yerr=err, fmt=".", ms=2, lw=0.5, label="VMC")
    if exact is not None:
        ax.axhline(exact, color="k", lw=1, ls="--", label=f"exact {exact:.6f}")
        lo = min(e[len(e) // 10:] or e)
        ax.set_ylim(lo - 0.02 * abs(exact), exact + 0.1 * abs(exact) if e[0] > exact + 0.1 * abs(exact) else max(e) + 0.01)
        rel = [max(abs((x - exact) / exact), 1e-16) for x in e]  # log scale: no zeros
        axes[1, 0].semilogy(it, rel, ".", ms=2)
        axes[1, 0].set_ylabel("|E - E_exact| / |E_exact|")
    ax.set_ylabel("energy")
    ax.set_title(title)
    ax.legend()
    axes[-1, 0].set_xlabel("iteration")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def finish_run(out_dir: str, summary: dict, exact: float | None) -> None:
    """``summary.json`` and ``energy.png`` (of the finite steps of ``log.jsonl``) in ``out_dir``."""
    from .run_folder import read_log

    write_json(os.path.join(out_dir, "summary.json"), summary)
    log = [r for r in read_log(os.path.join(out_dir, "log.jsonl")) if r.get("energy") is not None]
    if log:
        plot_energy(os.path.join(out_dir, "energy.png"), log, exact, f"{summary['hamiltonian']} {summary['lattice']}")
