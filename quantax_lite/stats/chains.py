"""Monte Carlo statistics of Markov-chain sample series.

:func:`statistics` takes ``x`` of shape **(n_chains, n_per_chain)**: row c is the time
series of chain c (a 1-D array is one chain). For samples from
:class:`quantax_lite.sampler.MetropolisSampler` use
``statistics(per_chain(values, sampler.n_chains))``.

Conventions (x may be real or complex; complex data use |.|^2 for every variance):

- ``mean``: the mean over all samples (complex for complex data).
- ``variance``: sigma^2 = mean |x - mean|^2 over all samples (no Bessel correction).
- ``tau``: the integrated autocorrelation time in the convention
  ``tau = 1 + 2 sum_{t>=1} rho_t``, so independent samples give tau = 1 and the
  effective sample size is about n_samples / tau.
- ``error_of_mean``: sqrt(Var(mean)), see *Estimator* below (= sqrt(sigma^2 tau / N) for n >> tau).
- ``r_hat``: split-R-hat (each chain cut in two halves):
  sqrt(((n - 1) / n W + B / n) / W) with W the mean within-half variance and B / n
  the variance of the half means (both with Bessel correction), n the half length.
  NaN when the halves are shorter than 2 samples or W = 0.

Estimator (m chains of n samples, N = m n). The autocovariance is taken about the
*grand* mean and averaged over all m (n - t) pairs at lag t,
``gamma_t = sum_c sum_i (x_ci - mean)^* (x_c,i+t - mean) / (m (n - t))`` (real part),
and ``rho_t = gamma_t / gamma_0`` (:func:`autocorrelation`). About the grand mean a
chain's offset is a genuine long-lag correlation, and there is none of the O(1/n) bias
of deviations from each chain's own mean. The window M is Sokal's, the smallest
M >= 5 tau(M); chains too short to reach it use every lag, M = n - 1 (one chain:
(n - 1) // 4). Then

    Var(mean) = sum_{|t|<=M} (1 - |t|/n) gamma_t / (N - K_M),  K_M = sum_{|t|<=M} (1 - |t|/n),

the triangular weights give the exact variance of the mean of finite chains, and
N - K_M removes, to first order, the bias E gamma_t = gamma_t - Var(mean) of the
grand-mean deviations. With M = n - 1 this is exactly the between-chain (batch-means)
estimate ``var(chain means, ddof=1) / m``; with one sample per chain it is
``var(x, ddof=1) / N``. The reported ``tau`` sums the same corrected autocovariances
without the triangular weights, ``tau = sum_{|t|<=M} (gamma_t + Var(mean)) /
(gamma_0 + Var(mean))``: an estimate of the asymptotic tau when n >> tau (a lower one
for chains shorter than the window). Chains stuck at different means therefore show
long correlations and an error that is the scatter of the chain means.

Everything is computed with jax.numpy (so sharded arrays work as they are); the
fields of :class:`Stats` are jax scalars, and its repr reads e.g.
``-11.2281 ± 0.0012 [σ²=0.0043, R̂=1.002, τ=1.3]``.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from quantax_lite.utils import tuning
from quantax_lite.sampler.base import per_chain

__all__ = ["Stats", "statistics", "exact_statistics", "weighted_statistics", "importance_weights", "sample_statistics",
           "autocorrelation", "integrated_time", "split_r_hat"]

SOKAL_WINDOW_C = 5.0
# Chains up to this length get their lagged products from one matrix product, longer ones by FFT.
_DIRECT_MAX_LAG = 64


class Stats(NamedTuple):
    """Summary of a Monte Carlo estimate (see the module docstring for conventions).

    mean: scalar (complex for complex data); error_of_mean, variance, tau, r_hat:
    real scalars; n_samples: int, the total number of samples.
    """

    mean: Any
    error_of_mean: Any
    variance: Any
    tau: Any
    r_hat: Any
    n_samples: int

    def __repr__(self) -> str:
        err = float(self.error_of_mean)
        if math.isfinite(err) and err > 0:
            decimals = max(0, 1 - math.floor(math.log10(err)))
        else:
            decimals = 6
        mean = complex(self.mean)
        if jnp.iscomplexobj(self.mean):
            mean_str = f"{mean.real:.{decimals}f}{mean.imag:+.{decimals}f}j"
        else:
            mean_str = f"{mean.real:.{decimals}f}"
        err_str = f"{err:.{decimals}f}" if math.isfinite(err) else "nan"
        return (
            f"{mean_str} ± {err_str} [σ²={float(self.variance):.2g}, "
            f"R̂={float(self.r_hat):.3f}, τ={float(self.tau):.1f}]"
        )

    def to_dict(self) -> dict:
        """Plain Python numbers, for logs and JSON (a complex mean adds ``mean_imag``)."""
        out = {"mean": float(jnp.real(self.mean))}
        if jnp.iscomplexobj(self.mean):
            out["mean_imag"] = float(jnp.imag(self.mean))
        out.update(
            error_of_mean=float(self.error_of_mean),
            variance=float(self.variance),
            tau=float(self.tau),
            r_hat=float(self.r_hat),
            n_samples=int(self.n_samples),
        )
        return out


def _as_chains(x: Any, name: str = "x") -> jax.Array:
    x = jnp.asarray(x)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise ValueError(
            f"{name} must have shape (n_chains, n_per_chain) or (n_per_chain,), got {x.shape}"
        )
    if x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"{name} must hold at least one sample, got shape {x.shape}")
    if not (jnp.issubdtype(x.dtype, jnp.floating) or jnp.issubdtype(x.dtype, jnp.complexfloating)):
        x = x.astype(tuning.wide_dtype())
    return x


def _abs2(z):
    return jnp.real(z * jnp.conj(z))


def _lagged_sums(dev: jax.Array) -> jax.Array:
    """s_t = sum_c sum_i Re(conj(dev[c, i]) dev[c, i + t]), t = 0 .. n - 1, of dev (m, n)."""
    n = dev.shape[1]
    if n <= _DIRECT_MAX_LAG:  # short chains (VMC): one (n, m) @ (m, n) product, no FFT
        g = jnp.real(dev.conj().T @ dev)
        g = jnp.pad(g, ((0, 0), (0, n)))
        idx = jnp.arange(n)[:, None] + jnp.arange(n)[None, :]
        return jnp.sum(jnp.take_along_axis(g, idx, axis=1), axis=0)
    size = 1 << (2 * n - 1).bit_length()  # zero padding: no circular wrap-around
    if jnp.iscomplexobj(dev):
        power = jnp.sum(_abs2(jnp.fft.fft(dev, n=size, axis=1)), axis=0)
        return jnp.real(jnp.fft.ifft(power))[:n]
    power = jnp.sum(_abs2(jnp.fft.rfft(dev, n=size, axis=1)), axis=0)
    return jnp.fft.irfft(power, n=size)[:n]


def _autocovariance(x: jax.Array) -> jax.Array:
    """gamma_t, t = 0 .. n - 1, of x (m, n): the autocovariance about the grand mean,
    summed over chains and normalised by the number of pairs m (n - t). Real, (n,)."""
    m, n = x.shape
    return _lagged_sums(x - jnp.mean(x)) / (m * (n - jnp.arange(n, dtype=jnp.real(x).dtype)))


def autocorrelation(x: Any) -> jax.Array:
    """rho_t = gamma_t / gamma_0, t = 0 .. n_per_chain - 1, of x (n_chains, n_per_chain)
    (module conventions; constant data give rho_t = [t == 0])."""
    return _rho(_autocovariance(_as_chains(x)))


def _rho(gamma: jax.Array) -> jax.Array:
    g0 = gamma[0]
    rho = gamma / jnp.where(g0 > 0, g0, 1.0)
    return jnp.where(g0 > 0, rho, (jnp.arange(gamma.shape[0]) == 0).astype(rho.dtype))


def _window(rho: jax.Array, c: float, max_lag: int) -> jax.Array:
    """Sokal's window: the smallest M in 1 .. max_lag with M >= c tau(M), else max_lag
    (int scalar; 0 if max_lag is 0). rho: (n,) with n > max_lag."""
    if max_lag < 1:
        return jnp.zeros((), jnp.int32)
    tau_m = 1.0 + 2.0 * jnp.cumsum(rho[1 : max_lag + 1])
    lags = jnp.arange(1, max_lag + 1)
    ok = lags >= c * tau_m
    return jnp.where(jnp.any(ok), jnp.argmax(ok) + 1, max_lag).astype(jnp.int32)


def integrated_time(rho: jax.Array, c: float = SOKAL_WINDOW_C) -> jax.Array:
    """tau = 1 + 2 sum_{t=1}^{M} rho_t, M Sokal's window (smallest M >= c tau(M), else the
    last lag), of rho (n,); no bias correction (see :func:`statistics`)."""
    rho = jnp.asarray(rho)
    window = _window(rho, c, rho.shape[0] - 1)
    lags = jnp.arange(rho.shape[0], dtype=rho.dtype)
    return jnp.sum(jnp.where(lags <= window, (2.0 - (lags == 0).astype(lags.dtype)) * rho, 0.0))


def _max_lag(n_chains: int, n_per_chain: int) -> int:
    """The longest window: every lag with several chains (the full sum is then the
    between-chain estimate), a quarter of the chain for one chain (the full sum about the
    chain's own mean is 0)."""
    return n_per_chain - 1 if n_chains > 1 else (n_per_chain - 1) // 4


def _mean_error_and_tau(gamma: jax.Array, n_chains: int, c: float = SOKAL_WINDOW_C):
    """(error_of_mean, tau) from gamma (n,) of n_chains chains (module docstring)."""
    n = gamma.shape[0]
    n_total = n_chains * n
    window = _window(_rho(gamma), c, _max_lag(n_chains, n))
    lags = jnp.arange(n, dtype=gamma.dtype)
    two_sided = jnp.where(lags <= window, 2.0 - (lags == 0).astype(lags.dtype), jnp.zeros_like(lags))
    bartlett = two_sided * (1.0 - lags / n)
    k_window = jnp.sum(bartlett)
    var_mean = jnp.maximum(jnp.sum(bartlett * gamma), 0.0) / (n_total - k_window)
    sigma2 = gamma[0] + var_mean  # E gamma_t = true gamma_t - Var(mean), to first order
    one = jnp.ones_like(sigma2)  # (a Python 1.0 in jnp.where would be a float64 constant under x64)
    tau = jnp.sum(two_sided * (gamma + var_mean)) / jnp.where(sigma2 > 0, sigma2, one)
    return jnp.sqrt(var_mean), jnp.where(sigma2 > 0, tau, one)


def split_r_hat(x: Any) -> jax.Array:
    """Split-R-hat of x (n_chains, n_per_chain); NaN if the halves are shorter than 2."""
    x = _as_chains(x)
    n_half = x.shape[1] // 2
    if n_half < 2:
        return jnp.asarray(jnp.nan, jnp.real(x).dtype)
    halves = jnp.concatenate([x[:, :n_half], x[:, x.shape[1] - n_half :]], axis=0)
    means = jnp.mean(halves, axis=1)
    within = jnp.mean(jnp.sum(_abs2(halves - means[:, None]), axis=1) / (n_half - 1))
    between_over_n = jnp.sum(_abs2(means - jnp.mean(means))) / (halves.shape[0] - 1)
    var_plus = (n_half - 1) / n_half * within + between_over_n
    return jnp.where(within > 0, jnp.sqrt(var_plus / jnp.where(within > 0, within, 1.0)), jnp.nan)


def statistics(x: Any) -> Stats:
    """Mean, error of the mean, variance, tau and split-R-hat of x.

    x: (n_chains, n_per_chain) real or complex (or (n_per_chain,) for one chain).
    """
    x = _as_chains(x)
    mean, error, variance, tau, r_hat = _statistics(x)
    return Stats(mean, error, variance, tau, r_hat, int(x.shape[0] * x.shape[1]))


def exact_statistics(x: Any, weights: Any) -> Stats:
    """The exact mean and variance of x (n,) under the probabilities ``weights`` (n,),
    nonnegative with sum 1 (exact sums over configurations, e.g. the rows of
    :class:`~quantax_lite.sampler.FullSumSampler`): error_of_mean 0; tau and r_hat NaN
    (no chains); n_samples the number of rows."""
    x = jnp.asarray(x)
    w = jnp.asarray(weights, tuning.wide_dtype())
    if x.ndim != 1 or w.shape != x.shape:
        raise ValueError(f"exact_statistics: expected x and weights of one shape (n,), got {x.shape} and {w.shape}")
    mean = jnp.sum(w * x)
    variance = jnp.sum(w * _abs2(x - mean))
    nan = jnp.asarray(jnp.nan, variance.dtype)
    return Stats(mean, jnp.zeros_like(variance), variance, nan, nan, int(x.shape[0]))


def weighted_statistics(x: Any, weights: Any) -> Stats:
    """Mean, error of the mean and variance of x under importance weights (self-normalized:
    sum w x / sum w), from samples of another distribution than the one averaged over.

    x, weights: (n_chains, n_per_chain), weights nonnegative (any normalization). The
    error treats each chain as one independent block (the ratio estimator linearized:
    the spread over chains of sum_c w (x - mean) / mean_c sum w), so it needs two chains or
    more (NaN with one) and holds whatever the chains' autocorrelation. tau and r_hat are
    those of the unweighted x: diagnostics of how the chains mix.
    """
    x = _as_chains(x)
    w = _as_chains(weights, "weights")
    if w.shape != x.shape:
        raise ValueError(f"weighted_statistics: expected x and weights of one shape, got {x.shape} and {w.shape}")
    mean, error, variance, tau, r_hat = _weighted_statistics(x, w.astype(jnp.result_type(jnp.real(x).dtype, w.dtype)))
    return Stats(mean, error, variance, tau, r_hat, int(x.shape[0] * x.shape[1]))


def importance_weights(log_psi: Any, power: float) -> jax.Array:
    """Weights (n,) summing to 1 of samples of |psi|^(2 power) for averages over |psi|^2:
    proportional to |psi|^(2 - 2 power), from ``log_psi`` (n,) without overflow."""
    log_w = (2.0 - 2.0 * power) * jnp.real(log_psi).astype(tuning.wide_dtype())
    w = jnp.exp(log_w - jnp.max(log_w))
    return w / jnp.sum(w)


def sample_statistics(x: Any, n_chains: int, weights: Any = None, exact: bool = False) -> Stats:
    """The statistics of one step's local energies x (n,), chain-major over ``n_chains``:
    exact sums (``exact``, ``weights`` the rows' probabilities), importance-weighted
    samples (``weights`` given) or plain samples of |psi|^2 (``weights`` None)."""
    if exact:
        return exact_statistics(x, weights)
    if weights is not None:
        return weighted_statistics(per_chain(x, n_chains), per_chain(weights, n_chains))
    return statistics(per_chain(x, n_chains))


@jax.jit
def _weighted_statistics(x, w):
    w = w / jnp.sum(w)
    mean = jnp.sum(w * x)
    variance = jnp.sum(w * _abs2(x - mean))
    n_chains = x.shape[0]
    # per chain: its share of the linearized estimator, n_chains * sum_c w (x - mean) (mean 0)
    z = n_chains * jnp.sum(w * (x - mean), axis=1)
    error = jnp.sqrt(jnp.sum(_abs2(z)) / (n_chains * max(n_chains - 1, 1))) if n_chains > 1 else jnp.nan
    gamma = _autocovariance(x)
    _, tau = _mean_error_and_tau(gamma, n_chains)
    return mean, jnp.asarray(error, variance.dtype), variance, tau, split_r_hat(x)


@jax.jit
def _statistics(x):
    gamma = _autocovariance(x)
    error, tau = _mean_error_and_tau(gamma, x.shape[0])
    return jnp.mean(x), error, gamma[0], tau, split_r_hat(x)
