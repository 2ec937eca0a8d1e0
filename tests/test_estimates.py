"""Zero-variance extrapolation: exact on lines, equal to a dense weighted least-squares
solve, and its error bar covers the true intercept at the stated rate."""
import math

import numpy as np
import pytest

from quantax_lite.stats.estimates import MIN_FIT_POINTS, zero_variance_extrapolation, zero_variance_from_log


def _dense_fit(e, v, err):
    """Weighted least squares by the normal equations of the 2-column design matrix."""
    A = np.stack([np.ones_like(v), v], axis=1)
    W = np.diag(1.0 / err**2)
    cov = np.linalg.inv(A.T @ W @ A)
    coef = cov @ A.T @ W @ e
    chi2 = float(((e - A @ coef) ** 2 / err**2).sum())
    return coef, cov, chi2 / (len(e) - 2)


def test_a_noise_free_line_gives_its_intercept_and_slope(rng):
    e0, a = rng.normal(), rng.uniform(0.1, 3.0)
    v = rng.uniform(0.01, 0.5, size=12)
    fit = zero_variance_extrapolation(e0 + a * v, v)
    assert fit.energy == pytest.approx(e0, abs=1e-12)
    assert fit.slope == pytest.approx(a, rel=1e-10)
    assert fit.error < 1e-10 and fit.chi2_per_dof is None and fit.n_points == 12


def test_the_fit_equals_the_dense_weighted_least_squares_solve(rng):
    n = 30
    v = rng.uniform(0.02, 0.3, size=n)
    err = rng.uniform(0.5e-3, 2e-3, size=n)
    e = -11.2 + 0.4 * v + rng.normal(size=n) * err * rng.uniform(0.5, 3.0)
    coef, cov, chi2_dof = _dense_fit(e, v, err)
    fit = zero_variance_extrapolation(e, v, err)
    scale = max(1.0, chi2_dof)
    assert fit.energy == pytest.approx(coef[0], rel=1e-12)
    assert fit.slope == pytest.approx(coef[1], rel=1e-9)
    assert fit.chi2_per_dof == pytest.approx(chi2_dof, rel=1e-9)
    assert fit.error == pytest.approx(math.sqrt(cov[0, 0] * scale), rel=1e-9)
    assert fit.slope_error == pytest.approx(math.sqrt(cov[1, 1] * scale), rel=1e-9)


@pytest.mark.parametrize("with_errors", [True, False])
def test_the_error_bar_covers_the_true_intercept_at_the_stated_rate(with_errors):
    """2000 noisy data sets: the one-sigma interval holds the true E0 in about 68% of
    them (a little more with given errors: the interval is widened when chi2/dof > 1)."""
    rng = np.random.default_rng(20261204 + with_errors)
    e0, a, n, reps = -8.4579, 0.35, 40, 2000
    hits = []
    for _ in range(reps):
        v = rng.uniform(0.01, 0.12, size=n)
        err = 2e-3 * rng.uniform(0.5, 1.5, size=n)
        e = e0 + a * v + rng.normal(size=n) * err
        fit = zero_variance_extrapolation(e, v, err if with_errors else None)
        hits.append(abs(fit.energy - e0) <= fit.error)
    coverage = float(np.mean(hits))
    lo, hi = (0.655, 0.745) if with_errors else (0.64, 0.72)
    assert lo <= coverage <= hi, coverage


def test_from_log_uses_the_last_fraction_of_finite_records(rng):
    v = np.linspace(0.5, 0.05, 40)
    records = [{"iteration": k, "energy": -3.0 + 0.2 * x, "variance": x, "energy_error": 1e-3}
               for k, x in enumerate(v)]
    records[35]["energy"] = None  # a step logged as null is skipped
    records[5]["variance"] = float("nan")
    fit = zero_variance_from_log(records, fraction=0.5)
    assert fit.n_points == 19  # half of the 38 usable records
    assert fit.energy == pytest.approx(-3.0, abs=1e-10)
    assert zero_variance_from_log(records[:MIN_FIT_POINTS - 1], fraction=1.0) is None
    flat = [dict(r, variance=0.1) for r in records if r["energy"] is not None]
    assert zero_variance_from_log(flat) is None  # no spread in the variances: no line


@pytest.mark.parametrize("args, kwargs, match", [
    (([1.0] * 5, [0.1, 0.2, 0.3, 0.4, 0.5]), {}, "energies: expected at least"),
    (([1.0] * 9, [0.1] * 8), {}, "variances: expected 9"),
    (([1.0] * 9, [0.1] * 9), {}, "variances: all equal"),
    (([1.0] * 8 + [float("nan")], list(np.linspace(0.1, 1, 9))), {}, "energies: expected finite"),
    (([1.0] * 9, list(np.linspace(0.1, 1, 9)), [0.1] * 8 + [0.0]), {}, "errors: expected positive"),
])
def test_bad_input_names_the_argument(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        zero_variance_extrapolation(*args, **kwargs)
    with pytest.raises(ValueError, match="fraction"):
        zero_variance_from_log([], fraction=1.5)
