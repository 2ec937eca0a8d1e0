"""Estimates derived from a run's history, reported beside (never instead of) the
variational energy.

Zero-variance extrapolation: near an eigenstate the energy of a variational state is
linear in its energy variance, ``E(θ) ≈ E₀ + a σ²(θ)`` (both vanish together as the
state approaches the eigenstate). A weighted least-squares line through the (σ², E)
points of the last part of a training run and its intercept at σ² = 0 estimates E₀.
It is an *extrapolation*: it can lie below the ground-state energy, and its quoted
error covers only the scatter of the points about the line, not a wrong model (a
curved E(σ²), or points far from the eigenstate).

Units are the Hamiltonian's (total energy; σ² in energy squared).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from quantax_lite.utils.validate import finite_number

__all__ = ["ZeroVarianceFit", "zero_variance_extrapolation", "zero_variance_from_log", "MIN_FIT_POINTS"]

MIN_FIT_POINTS = 8


class ZeroVarianceFit(NamedTuple):
    """The line ``E = energy + slope * σ²`` fitted to ``n_points`` steps.

    ``energy`` and ``error``: the intercept at σ² = 0 and its standard error (from the
    points' energy errors; multiplied by ``sqrt(chi2_per_dof)`` where that exceeds 1, so
    a scatter larger than the errors claim widens it). ``slope``, ``slope_error``: in
    1 / energy. ``chi2_per_dof``: the fit's reduced chi-square against the given errors
    (None without them).
    """

    energy: float
    error: float
    slope: float
    slope_error: float
    chi2_per_dof: float | None
    n_points: int

    def to_dict(self) -> dict:
        return self._asdict()


def _column(values, name: str) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    if x.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence of numbers, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name}: expected finite numbers, got a non-finite entry")
    return x


def zero_variance_extrapolation(energies, variances, errors=None) -> ZeroVarianceFit:
    """Fit ``E_k = E₀ + a σ²_k`` and return the intercept E₀ with its error.

    Args:
      energies: ``(n,)`` energy estimates E_k (e.g. one per training step).
      variances: ``(n,)`` their energy variances σ²_k (same units squared).
      errors: ``(n,)`` standard errors of E_k (weights 1/err²), or None: equal weights,
        the error then taken from the scatter about the line.

    At least :data:`MIN_FIT_POINTS` points and two distinct variances are needed
    (ValueError naming the argument otherwise). The variances are taken as exact (their
    own noise is ignored).
    """
    e, v = _column(energies, "energies"), _column(variances, "variances")
    if v.shape != e.shape:
        raise ValueError(f"variances: expected {e.shape[0]} values (one per energy), got {v.shape[0]}")
    n = e.shape[0]
    if n < MIN_FIT_POINTS:
        raise ValueError(f"energies: expected at least {MIN_FIT_POINTS} points to fit a line, got {n}")
    if np.ptp(v) <= 1e-12 * max(np.max(np.abs(v)), 1e-300):
        raise ValueError("variances: all equal; a line through them has no intercept")
    if errors is None:
        w = np.ones(n)
    else:
        err = _column(errors, "errors")
        if err.shape != e.shape:
            raise ValueError(f"errors: expected {n} values (one per energy), got {err.shape[0]}")
        if np.any(err <= 0):
            raise ValueError("errors: expected positive standard errors")
        w = 1.0 / err**2
    # centre the variances for a well-conditioned 2x2 system
    v0 = np.average(v, weights=w)
    x = v - v0
    sw, sx, sxx = w.sum(), (w * x).sum(), (w * x * x).sum()
    sy, sxy = (w * e).sum(), (w * x * e).sum()
    det = sw * sxx - sx * sx
    slope = (sw * sxy - sx * sy) / det
    mean_at_v0 = (sy - slope * sx) / sw
    intercept = mean_at_v0 - slope * v0
    # covariance of (mean_at_v0, slope) for weights 1/err^2; intercept = mean_at_v0 - slope v0
    var_slope = sw / det
    var_mean = sxx / det
    cov = -sx / det
    var_intercept = var_mean + v0**2 * var_slope - 2 * v0 * cov
    chi2 = float((w * (e - intercept - slope * v) ** 2).sum())
    dof = n - 2
    if errors is None:
        scale = chi2 / dof  # unit weights: the residual variance is the error scale
        chi2_per_dof = None
    else:
        chi2_per_dof = chi2 / dof
        scale = max(1.0, chi2_per_dof)
    return ZeroVarianceFit(
        energy=float(intercept),
        error=float(math.sqrt(var_intercept * scale)),
        slope=float(slope),
        slope_error=float(math.sqrt(var_slope * scale)),
        chi2_per_dof=chi2_per_dof,
        n_points=n,
    )


def zero_variance_from_log(records, fraction: float = 0.25) -> ZeroVarianceFit | None:
    """The zero-variance fit over the last ``fraction`` of a run's log records.

    ``records``: ``log.jsonl`` lines (dicts with ``energy``, ``variance`` and
    ``energy_error``); records where any of them is missing or not finite are skipped.
    A run of exact sums (every ``energy_error`` 0) is fitted with equal weights, its error
    from the scatter about the line. Returns None when fewer than :data:`MIN_FIT_POINTS` usable records remain or their
    variances are all equal (nothing to extrapolate).
    """
    fraction = finite_number(fraction, "fraction", above=0)
    if fraction > 1:
        raise ValueError(f"fraction: expected a number in (0, 1], got {fraction!r}")
    keys = ("energy", "variance", "energy_error")
    usable = [r for r in records
              if all(isinstance(r.get(k), (int, float)) and math.isfinite(r[k]) for k in keys)
              and r["energy_error"] >= 0]
    exact = bool(usable) and all(r["energy_error"] == 0 for r in usable)
    usable = usable if exact else [r for r in usable if r["energy_error"] > 0]
    tail = usable[len(usable) - max(int(round(fraction * len(usable))), 0):] if usable else []
    if len(tail) < MIN_FIT_POINTS:
        return None
    columns = {k: [r[k] for r in tail] for k in keys}
    try:
        return zero_variance_extrapolation(columns["energy"], columns["variance"],
                                           None if exact else columns["energy_error"])
    except ValueError:  # equal variances: no line
        return None
