"""benchmarks/accuracy.py's rows: judged (met, not met, below exact), set against their
reference energy, named in words and printed as a table.

A row is the JSON record of one system (``accuracy.row_of``); everything here reads rows
only, from a fresh run or from ``benchmarks/results/accuracy*.json``.
"""
from __future__ import annotations

import math
import os
import shlex

import numpy as np

from _common import cpu_model

HOST_KEYS = ("host", "cpu_count", "cpu_model", "machine")


# what a window records of its final estimate (fresh samples of the state it reached)
ESTIMATE_KEYS = ("energy", "energy_error", "relative_error", "v_score", "estimate_symmetry")


# an energy below the exact one by more than BELOW_EXACT_SIGMAS error bars plus this much
# (relative: float32 rounding of a network's energy; the exact sums' rows have no error bar)
# is no variational energy
BELOW_EXACT_SIGMAS = 3.0


BELOW_EXACT_ROUNDING = 1e-7


BELOW_EXACT = "below exact: estimator bug"


def row_status(row: dict) -> str:
    """``"below exact: estimator bug"`` when ``row["energy"]`` is below ``row["exact_energy"]``
    by more than ``BELOW_EXACT_SIGMAS * energy_error`` plus ``BELOW_EXACT_ROUNDING * |exact|``;
    else ``"met"`` when the relative error is within ``target`` (a row without an exact
    energy: its energy per site at or below ``target_energy_per_site``) and ``wall_time_s``
    plus the warm start's ``warm_start_wall_s`` within ``minutes_budget`` (a row started from
    another run whose time is not known cannot be met); else ``"not met"``."""
    energy, exact = row.get("energy"), row.get("exact_energy")
    if energy is not None and exact is not None:
        slack = BELOW_EXACT_SIGMAS * (row.get("energy_error") or 0.0) + BELOW_EXACT_ROUNDING * abs(exact)
        if energy < exact - slack:
            return BELOW_EXACT
    budget = row.get("minutes_budget")
    # a warm-started row whose start's time was not recorded cannot show it kept its budget
    unknown_start = row.get("init_from") is not None and row.get("warm_start_wall_s") is None
    in_time = budget is None or (minutes_of(row) <= budget and not unknown_start)
    if row.get("target") is None and row.get("target_energy_per_site") is not None:  # no exact energy
        per_site = row.get("energy_per_site")
        return "met" if per_site is not None and per_site <= row["target_energy_per_site"] and in_time else "not met"
    rel, target = row.get("relative_error"), row.get("target")
    return "met" if rel is not None and target is not None and rel <= target and in_time else "not met"


def minutes_of(row: dict) -> float:
    """The minutes a row spent: its own wall time plus its warm start's (``warm_start_wall_s``)."""
    return (row["wall_time_s"] + (row.get("warm_start_wall_s") or 0.0)) / 60


def table(rows) -> str:
    """The printed table of the rows (status column: :func:`row_status`), with the published
    energies beside ours."""
    lines = [f"{'system':<26} {'rel. error':>20} {'V-score':>8} {'target':>8} {'budget':>7} {'minutes':>8}  status"]
    for r in rows:
        rel = "n/a" if r["relative_error"] is None else f"{r['relative_error']:.2e} ± {r['relative_error_bar']:.1e}"
        target = (f"{r['target']:.0e}" if r.get("target") is not None
                  else f"{r['target_energy_per_site']}/site" if r.get("target_energy_per_site") is not None else "n/a")
        lines.append(f"{r['system']:<26} {rel:>20} {r['v_score']:>8.1e} {target:>8} "
                     f"{r['minutes_budget']:>5} m {minutes_of(r):>8.1f}  {r['status']}")
        if r.get("init_from"):
            start = r.get("warm_start_wall_s")
            spent = "its time not recorded" if start is None else f"its {start / 60:.1f} min counted above"
            lines.append(f"    warm start: step {r['init_from'].get('iteration')} of a "
                         f"{r['init_from'].get('lattice')} run, {spent}")
        for p in r["published"]:
            lines.append(f"    beside: {p['energy_per_site']:.6f} per site ({p['source']}); ours "
                         f"{r['energy_per_site']:.6f} ± {r['energy_error'] / (r['energy'] / r['energy_per_site']):.1e}")
    return "\n".join(lines)


def convergence(log_records, reference):
    """``(wall time in s, relative error)`` of each training step's energy against
    ``reference`` (the exact energy, or :func:`reference_energy`; none: empty); steps
    without a finite energy are left out. A resumed run's clock starts again at its first
    step (each window of a row trained across windows): its times continue from the last
    step before it, so that the time axis counts the training of every window."""
    t, rel, offset, last = [], [], 0.0, 0.0
    for rec in log_records:
        if rec["wall_time_s"] < last:  # a resumed run's first step
            offset += last
        last = rec["wall_time_s"]
        e = rec.get("energy")
        if e is not None and math.isfinite(e) and reference:
            t.append(offset + rec["wall_time_s"])
            rel.append(abs(e - reference) / abs(reference))
    return np.asarray(t, float), np.asarray(rel, float)


def thinned(t, rel, n: int = 200) -> dict:
    """At most ``n`` points of a convergence curve, evenly spaced by step (the first and last
    kept), as the JSON row's ``convergence``: ``{"wall_time_s": [...], "relative_error": [...]}``."""
    idx = np.unique(np.linspace(0, len(t) - 1, min(n, len(t))).round().astype(int)) if len(t) else []
    return {"wall_time_s": [round(float(t[i]), 2) for i in idx],
            "relative_error": [float(f"{rel[i]:.4g}") for i in idx]}


def curves_of(rows):
    """``[(row, t, rel), ...]`` for :func:`plot_convergence` from JSON rows (a row without a
    stored curve, from before they were kept, is drawn in the final-energy panel only)."""
    out = []
    for row in rows:
        c = row.get("convergence") or {"wall_time_s": [], "relative_error": []}
        out.append((row, np.asarray(c["wall_time_s"], float), np.asarray(c["relative_error"], float)))
    return out


_MODELS = {"heisenberg": "Heisenberg", "j1j2": "J1-J2", "tfim": "transverse-field Ising"}


def _options(row: dict) -> dict:
    """``{"--lattice": "4x4", ...}`` of a row's recorded options (a flag alone maps to None)."""
    words, out = shlex.split(row.get("options") or ""), {}
    for i, w in enumerate(words):
        if w.startswith("--"):
            nxt = words[i + 1] if i + 1 < len(words) else None
            out[w] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def system_name(row: dict) -> str:
    """The system of a row in words, from its recorded options: ``"Heisenberg, 4×4 square
    lattice, 16 sites"``, ``"J1-J2 (J2 = 0.5), ..."``; the row's key when it has no options."""
    from quantax_lite.cli.report import lattice_description

    opts = _options(row)
    if "--lattice" not in opts:
        return row["system"]
    model = _MODELS.get(opts.get("--hamiltonian"), opts.get("--hamiltonian") or "Heisenberg")
    if opts.get("--J2") is not None:
        model += f" (J2 = {opts['--J2']})"
    return f"{model}, {lattice_description(opts['--lattice'])}"


def method_of(row: dict) -> str:
    """``"sampled, translations"``, ``"exact sum, full group"``, ``"sampled, translations → full"``
    (a staged symmetry), ``"sampled, translations (full not reached)"`` (a run that stopped
    before its next stage: its final estimate's group, ``estimate_symmetry``, is an earlier one)."""
    opts = _options(row)
    how = "exact sum" if opts.get("--sampling") == "exact_sum" else "sampled"
    stages = [s.split("@")[0] for s in (opts.get("--symmetry") or "translations").split(">")]
    reached = row.get("estimate_symmetry")
    if len(stages) > 1 and reached in stages[:-1]:
        return f"{how}, {reached} ({stages[-1]} not reached)"
    group = " → ".join("full" if g == "full" and len(stages) > 1 else "full group" if g == "full" else g
                       for g in stages)
    return f"{how}, {group}"


def host_label(row: dict) -> str:
    """The host a row was measured on (``host``, else ``cpu_count`` / ``cpu_model`` /
    ``machine``), or ``"host not recorded"`` for rows from before hosts were kept."""
    if row.get("host"):
        return row["host"]
    cores, model, machine = row.get("cpu_count"), row.get("cpu_model"), row.get("machine")
    if not (cores or model or machine):
        return "host not recorded"
    return " ".join(p for p in (f"{cores}-core" if cores else None, model, machine, "CPU") if p)


def reference_energy(row: dict) -> tuple[float, str | None] | None:
    """``(energy, source)`` a row's energies are set against: its exact energy (source None),
    else, for a system without one (10x10), the lowest of its published energies (its
    source); None when it has neither."""
    if row.get("exact_energy"):
        return row["exact_energy"], None
    if row.get("energy") is None or not row.get("energy_per_site") or not row.get("published"):
        return None
    sites = round(row["energy"] / row["energy_per_site"])
    best = min(row["published"], key=lambda p: p["energy_per_site"])
    return best["energy_per_site"] * sites, best["source"]


def signed_error(row: dict) -> float | None:
    """``(E − E_ref) / |E_ref|`` of the row's final energy (:func:`reference_energy`):
    negative below the exact energy (or below the lowest published one)."""
    ref = reference_energy(row)
    if row.get("energy") is None or ref is None:
        return None
    return (row["energy"] - ref[0]) / abs(ref[0])


def published_points(row: dict) -> list[tuple[str, float, float]]:
    """``[(source, signed relative error, half a unit of its last digit), ...]`` of the
    published energies of a row against its :func:`reference_energy`; the reference itself
    (an ``"exact ..."`` source, or the lowest published energy) is the zero line, not a point."""
    out = []
    ref = reference_energy(row)
    if ref is None or not row.get("energy_per_site"):
        return out
    sites = round(row["energy"] / row["energy_per_site"])
    for p in row.get("published") or []:
        if p["source"].lower().startswith("exact") or p["source"] == ref[1]:
            continue
        decimals = len(repr(abs(p["energy_per_site"])).partition(".")[2])
        doubt = 0.5 * 10.0**-decimals * sites / abs(ref[0])
        out.append((p["source"], (p["energy_per_site"] * sites - ref[0]) / abs(ref[0]), doubt))
    return out


def host_fields() -> dict:
    """The host of this run, kept in every new row: ``host`` (in words), ``cpu_count``,
    ``cpu_model`` (the harness's :func:`cpu_model`) and ``machine``."""
    import platform

    from quantax_lite.cli.report import host_description

    model = cpu_model()
    return {"host": host_description() + (f" ({model})" if model else ""), "cpu_count": os.cpu_count(),
            "cpu_model": model, "machine": platform.machine() or None}
