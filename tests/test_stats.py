"""Tests of quantax_lite.stats against exact formulas and processes with known tau."""
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.signal import lfilter

from quantax_lite.stats import Stats, autocorrelation, split_r_hat, statistics
from quantax_lite.utils import batch_sharding, make_mesh


def ar1(rng, phi, n_chains, n_steps):
    """Stationary AR(1) chains x_t = phi x_{t-1} + e_t, e ~ N(0, 1): tau = (1+phi)/(1-phi)."""
    noise = rng.normal(size=(n_chains, n_steps))
    noise[:, 0] /= math.sqrt(1.0 - phi**2)  # start in the stationary distribution
    return lfilter([1.0], [1.0, -phi], noise, axis=1)


def test_iid_normal_error_and_tau(rng):
    sigma, n_chains, n_per_chain = 2.5, 16, 5000
    x = 1.0 + sigma * rng.normal(size=(n_chains, n_per_chain))
    s = statistics(x)
    n = n_chains * n_per_chain
    assert s.n_samples == n
    np.testing.assert_allclose(float(s.mean), x.mean(), rtol=1e-12)
    np.testing.assert_allclose(float(s.variance), np.mean((x - x.mean()) ** 2), rtol=1e-12)
    assert abs(float(s.error_of_mean) / (sigma / math.sqrt(n)) - 1.0) < 0.10
    assert abs(float(s.tau) - 1.0) < 0.1  # convention tau = 1 + 2 sum rho_t
    assert abs(float(s.r_hat) - 1.0) < 0.01


@pytest.mark.parametrize("phi", [0.5, 0.9])
def test_ar1_tau_and_error(rng, phi):
    n_chains, n_per_chain = 32, 20000
    x = ar1(rng, phi, n_chains, n_per_chain)
    s = statistics(x)
    tau_exact = (1.0 + phi) / (1.0 - phi)
    assert abs(float(s.tau) / tau_exact - 1.0) < 0.15
    # Exact error of the mean for long chains: sigma_x sqrt(tau / N).
    sigma2 = 1.0 / (1.0 - phi**2)
    exact_error = math.sqrt(sigma2 * tau_exact / x.size)
    assert abs(float(s.error_of_mean) / exact_error - 1.0) < 0.10


def test_complex_ar1(rng):
    """Complex data: variance of |x - mean|^2, tau of the (common) correlation."""
    phi = 0.8
    x = ar1(rng, phi, 16, 20000) + 1j * ar1(rng, phi, 16, 20000) + (0.5 - 2.0j)
    s = statistics(x)
    assert jnp.iscomplexobj(s.mean)
    np.testing.assert_allclose(complex(s.mean), x.mean(), rtol=1e-12)
    np.testing.assert_allclose(float(s.variance), np.mean(np.abs(x - x.mean()) ** 2), rtol=1e-12)
    assert abs(float(s.tau) / ((1 + phi) / (1 - phi)) - 1.0) < 0.15
    assert "j ±" in repr(s)


def test_r_hat_flags_stuck_chains(rng):
    x = 0.1 * rng.normal(size=(8, 1000)) + np.arange(8)[:, None]
    s = statistics(x)
    assert float(s.r_hat) > 1.1
    # Stuck chains must not give an optimistic error: it is at least the scatter of
    # the chain means over sqrt(n_chains) (up to the Sokal-window truncation).
    assert float(s.error_of_mean) > 0.5 * np.std(x.mean(axis=1)) / math.sqrt(8)
    # A drifting single chain is caught by the split.
    drift = np.linspace(0.0, 5.0, 2000) + 0.1 * rng.normal(size=2000)
    assert float(split_r_hat(drift)) > 1.1


def test_autocorrelation_matches_explicit_loops(rng):
    n_chains, n = 3, 40
    x = rng.normal(size=(n_chains, n)) + 1j * rng.normal(size=(n_chains, n))
    x[1] += 0.7  # different chain means enter through the between-chain variance
    mean = x.mean()
    total_var = np.mean(np.abs(x - mean) ** 2)
    c = np.zeros(n)
    for chain in x:
        d = chain - chain.mean()
        for t in range(n):
            c[t] += sum((np.conj(d[i]) * d[i + t]).real for i in range(n - t)) / n
    c /= n_chains
    expected = 1.0 - (c[0] - c) / total_var
    np.testing.assert_allclose(np.asarray(autocorrelation(x)), expected, rtol=1e-10, atol=1e-12)


def test_split_r_hat_matches_explicit_formula(rng):
    x = rng.normal(size=(4, 21)) + np.array([0.0, 0.3, -0.2, 0.5])[:, None]
    half = 10
    halves = [x[c, :half] for c in range(4)] + [x[c, -half:] for c in range(4)]
    w = np.mean([np.var(h, ddof=1) for h in halves])
    b_over_n = np.var([h.mean() for h in halves], ddof=1)
    expected = math.sqrt(((half - 1) / half * w + b_over_n) / w)
    np.testing.assert_allclose(float(split_r_hat(x)), expected, rtol=1e-12)
    assert math.isnan(float(split_r_hat(x[:, :3])))


def test_sharded_input_and_repr(rng):
    x = rng.normal(size=(8, 256))
    mesh = make_mesh()
    xs = jax.device_put(jnp.asarray(x), batch_sharding(mesh, 2))
    a, b = statistics(x), statistics(xs)
    for fa, fb in zip(a, b):
        np.testing.assert_allclose(np.asarray(fa), np.asarray(fb), rtol=1e-12)

    s = Stats(mean=-11.22814, error_of_mean=0.00123, variance=0.00431, tau=1.31, r_hat=1.0021,
              n_samples=4096)
    assert repr(s) == "-11.2281 ± 0.0012 [σ²=0.0043, R̂=1.002, τ=1.3]"
    d = statistics(x).to_dict()
    assert set(d) == {"mean", "error_of_mean", "variance", "tau", "r_hat", "n_samples"}
    assert re.fullmatch(r"-?\d+\.\d+ ± \d+\.\d+ \[σ²=\S+, R̂=\d\.\d{3}, τ=\d+\.\d\]", repr(statistics(x)))


def test_bad_shapes():
    with pytest.raises(ValueError, match="n_chains, n_per_chain"):
        statistics(np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match="at least one sample"):
        statistics(np.zeros((2, 0)))
