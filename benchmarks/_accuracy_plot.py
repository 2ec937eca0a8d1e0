"""benchmarks/accuracy.py's figure: every row's final energy against its reference, and the
kept training curves (:func:`plot_convergence`)."""
from __future__ import annotations

import math

import numpy as np

from _accuracy_rows import (BELOW_EXACT, _options, host_label, method_of, minutes_of, published_points,
                            reference_energy, signed_error, system_name)

def running_mean(values, window: int) -> np.ndarray:
    """The mean of the last ``window`` values at every point (fewer at the start)."""
    v = np.asarray(values, float)
    c = np.concatenate([[0.0], np.cumsum(v)])
    hi = np.arange(1, len(v) + 1)
    lo = np.maximum(0, hi - window)
    return (c[hi] - c[lo]) / (hi - lo)


def plot_convergence(curves, path):
    """The accuracy figure. Left: one line per system (named in words, with its method,
    parameters, steps and wall time, a warm start's included), the signed relative error
    ``(E − E_ref) / |E_ref|`` of its final energy with the full error bar, on a symmetric-log
    axis linear near zero (an energy below the exact one, a bug, is drawn left of the zero
    line and named), and the published energies of the same cluster (the JSON's
    ``published``; the reference itself left out) against the same reference, with half a
    unit of their last digit as the bar. ``E_ref`` is the exact energy, or for a system
    without one the lowest published energy, which its label names
    (:func:`reference_energy`). Right, for the rows that kept their training curve: the
    running mean of the training energies' relative error against wall time (log scale;
    means, not single noisy steps). The footer names the host(s) the wall times come from.
    ``curves``: ``[(row, t, rel), ...]`` (:func:`curves_of`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row, _, _ in curves]
    with_curves = [(row, t, rel) for row, t, rel in curves if len(t) > 1]
    n = max(1, len(rows))
    fig = plt.figure(figsize=(15 if with_curves else 10, 2.6 + 0.62 * n))
    grid = fig.add_gridspec(1, 2 if with_curves else 1, width_ratios=[1.25, 1] if with_curves else [1])
    ax = fig.add_subplot(grid[0, 0])
    y = np.arange(len(rows))[::-1].astype(float)
    xs = []  # every x an error bar or marker reaches: the limits hold them all
    markers = {}
    for k, row in enumerate(rows):
        rel = signed_error(row)
        if rel is None:
            continue
        bar = row.get("relative_error_bar") or 0.0
        bug = row.get("status") == BELOW_EXACT
        exact_sum = _options(row).get("--sampling") == "exact_sum"
        style = dict(fmt="X", color="C3", ms=8) if bug else (dict(fmt="s", color="C2", ms=6) if exact_sum
                                                             else dict(fmt="o", color="C0", ms=6))
        label = ("below exact: estimator bug" if bug else
                 "ours, exact sum (no error bar)" if exact_sum else "ours, sampled (±1 error bar)")
        h = ax.errorbar([rel], [y[k]], xerr=[bar] if bar else None, capsize=3, zorder=4, **style)
        markers.setdefault(label, h)
        xs += [rel - bar, rel + bar]
        if bug:
            ax.annotate("below exact: estimator bug", (rel, y[k]), xytext=(0, 8), textcoords="offset points",
                        color="C3", fontsize=7, ha="center")
        for j, (source, p_rel, doubt) in enumerate(published_points(row)):
            short = source.split(" (")[0]
            if doubt > abs(p_rel) / 2:  # its last digit leaves more doubt than half the value: a bound
                h = ax.plot([p_rel + doubt], [y[k] - 0.22], marker="<", mfc="none", ls="", color=f"C{4 + j}",
                            ms=7, zorder=3)[0]
                markers.setdefault(f"published: {short} (upper bound: its last digit)", h)
                xs.append(p_rel + doubt)
                continue
            h = ax.errorbar([p_rel], [y[k] - 0.22], xerr=[doubt], fmt="D", mfc="none", color=f"C{4 + j}",
                            ms=6, capsize=3, zorder=3)
            markers.setdefault(f"published: {short}", h)
            xs += [p_rel - doubt, p_rel + doubt]
    xs = np.asarray([x for x in xs if np.isfinite(x)] or [1e-6])
    positive = np.abs(xs[xs != 0])
    linthresh = 10.0 ** math.floor(math.log10(positive.min())) if len(positive) else 1e-9
    ax.set_xscale("symlog", linthresh=linthresh)
    left = 3.0 * xs.min() if xs.min() < 0 else -linthresh
    right = 3.0 * max(xs.max(), linthresh)
    ax.set_xlim(left, right)
    ax.axvspan(left, 0, color="C3", alpha=0.07, lw=0)
    ax.axvline(0, color="k", lw=1, ls="--")
    by_published = any((reference_energy(r) or (None, None))[1] for r in rows)
    markers["reference: exact ground-state energy" + (" (else the lowest published)" if by_published else "")] = \
        ax.lines[-1]
    ax.set_ylim(-0.7, len(rows) - 0.4)
    labels = []
    for row in rows:
        sites_steps = f"{row.get('n_params', '?')} params, {row.get('iterations', '?')} steps"
        start = " incl. warm start" if row.get("warm_start_wall_s") else ""
        ref = reference_energy(row)
        against = f"\nagainst the lowest published energy ({ref[1].split(' (')[0]})" if ref and ref[1] else ""
        labels.append(f"{system_name(row)}\n{method_of(row)}; {sites_steps}, {minutes_of(row):.1f} min{start}"
                      + against)
    ax.set_yticks(y, labels, fontsize=7)
    e_ref = "E_ref" if by_published else "E_exact"
    ax.set_xlabel(f"(E − {e_ref}) / |{e_ref}| of the final energy (symmetric log: linear within ±{linthresh:.0e}; "
                  "left of 0: below the exact energy, a bug" + (", or below the lowest published" if by_published
                                                                 else "") + ")", fontsize=8)
    ax.set_title("Final energies against the exact ground-state energy"
                 + (" (or the lowest published one)" if by_published else ""), fontsize=10)
    # below the x label at any height of the axes (a table of one row is short)
    below_label = matplotlib.transforms.offset_copy(ax.transAxes, fig=fig, y=-36, units="points")
    ax.legend(list(markers.values()), list(markers), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0),
              bbox_transform=below_label, ncol=2)
    ax.grid(axis="x", color="0.9", lw=0.5)
    if with_curves:
        cx = fig.add_subplot(grid[0, 1])
        for k, (row, t, rel) in enumerate(with_curves):
            window = max(3, len(rel) // 20)
            ref = reference_energy(row)
            against = " (against lowest published)" if ref and ref[1] else ""
            cx.plot(t / 60, running_mean(rel, window), lw=1.2, color=f"C{k}",
                    label=f"{system_name(row)}; {method_of(row)}{against}")
        cx.set_yscale("log")
        cx.set_xlabel("wall time (min)")
        cx.set_ylabel(f"running mean of |E − {e_ref}| / |{e_ref}|\n(training energies, 5% of the recorded steps)",
                      fontsize=8)
        cx.set_title("Training convergence", fontsize=10)
        under = matplotlib.transforms.offset_copy(cx.transAxes, fig=fig, y=-36, units="points")
        cx.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, 0), bbox_transform=under)  # off the curves
    hosts = sorted({host_label(r) for r in rows})
    fig.text(0.01, 0.01, "Wall times (training and final estimate) on: " + "; ".join(hosts)
             + ". Energies in units of J, spin-1/2 (S = σ/2).", fontsize=7, color="0.3")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
