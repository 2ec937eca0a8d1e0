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
  effective sample size is n_samples / tau. The autocorrelation rho_t is the
  chain-averaged autocovariance at lag t, combined with the between-chain variance
  as in split-R-hat diagnostics: rho_t = 1 - (W - C_t) / sigma^2, with C_t the mean
  over chains of each chain's autocovariance (about its own mean, normalized by the
  chain length), W = C_0 and sigma^2 the total variance. Chains stuck at different
  means therefore show long correlations. The sum is cut at Sokal's automatic
  window: the smallest M with M >= 5 tau(M) (the last lag if none).
- ``error_of_mean``: sqrt(sigma^2 tau / n_samples).
- ``r_hat``: split-R-hat (each chain cut in two halves):
  sqrt(((n - 1) / n W + B / n) / W) with W the mean within-half variance and B / n
  the variance of the half means (both with Bessel correction), n the half length.
  NaN when the halves are shorter than 2 samples or W = 0.

Everything is computed with jax.numpy (so sharded arrays work as they are); the
fields of :class:`Stats` are jax scalars, and its repr reads e.g.
``-11.2281 ± 0.0012 [σ²=0.0043, R̂=1.002, τ=1.3]``.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["Stats", "statistics", "autocorrelation", "integrated_time", "split_r_hat"]

SOKAL_WINDOW_C = 5.0


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
        x = x.astype(jnp.result_type(float))
    return x


def _abs2(z):
    return jnp.real(z * jnp.conj(z))


def _chain_autocovariance(x: jax.Array) -> jax.Array:
    """Mean over chains of each chain's autocovariance C_t, t = 0 .. n-1 (real, (n,))."""
    n = x.shape[1]
    dev = x - jnp.mean(x, axis=1, keepdims=True)
    size = 1 << (2 * n - 1).bit_length()  # zero padding: no circular wrap-around
    f = jnp.fft.fft(dev, n=size, axis=1)
    acov = jnp.fft.ifft(f * jnp.conj(f), axis=1)[:, :n]
    return jnp.mean(jnp.real(acov), axis=0) / n


def autocorrelation(x: Any) -> jax.Array:
    """rho_t, t = 0 .. n_per_chain - 1, of x (n_chains, n_per_chain) (module conventions)."""
    x = _as_chains(x)
    c = _chain_autocovariance(x)
    variance = jnp.mean(_abs2(x - jnp.mean(x)))
    rho = 1.0 - (c[0] - c) / jnp.where(variance > 0, variance, 1.0)
    # Constant data: no correlation beyond lag 0.
    return jnp.where(variance > 0, rho, (jnp.arange(c.shape[0]) == 0).astype(rho.dtype))


def integrated_time(rho: jax.Array, c: float = SOKAL_WINDOW_C) -> jax.Array:
    """tau = 1 + 2 sum_{t=1}^{M} rho_t with Sokal's window: smallest M >= c tau(M)."""
    rho = jnp.asarray(rho)
    if rho.shape[0] < 2:
        return jnp.ones((), rho.dtype)
    tau_m = 1.0 + 2.0 * jnp.cumsum(rho[1:])
    lags = jnp.arange(1, rho.shape[0])
    ok = lags >= c * tau_m
    window = jnp.where(jnp.any(ok), jnp.argmax(ok), rho.shape[0] - 2)
    return jnp.maximum(tau_m[window], 0.0)


def split_r_hat(x: Any) -> jax.Array:
    """Split-R-hat of x (n_chains, n_per_chain); NaN if the halves are shorter than 2."""
    x = _as_chains(x)
    n_half = x.shape[1] // 2
    if n_half < 2:
        return jnp.asarray(jnp.nan)
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


@jax.jit
def _statistics(x):
    n_total = x.shape[0] * x.shape[1]
    mean = jnp.mean(x)
    variance = jnp.mean(_abs2(x - mean))
    tau = integrated_time(autocorrelation(x))
    error = jnp.sqrt(variance * tau / n_total)
    return mean, error, variance, tau, split_r_hat(x)
