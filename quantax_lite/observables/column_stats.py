"""Statistics of per-sample values: every column of a ``(n_samples, k)`` matrix in one
compiled pass (chain-major, :func:`quantax_lite.stats.chains.statistics`), or exact weighted sums."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from quantax_lite.sampler import per_chain
from quantax_lite.stats.chains import Stats, statistics
from .checks import host


@functools.partial(jax.jit, static_argnums=1)
def _column_stats(values, n_chains: int):
    """(mean, error, variance, tau, r_hat) of every column of values (n_samples, k), chain-major."""
    x = values.reshape(n_chains, values.shape[0] // n_chains, values.shape[1])

    def one(col):
        st = statistics(col)
        return st.mean, st.error_of_mean, st.variance, st.tau, st.r_hat

    return jax.lax.map(one, jnp.moveaxis(x, -1, 0), batch_size=64)


def all_column_stats(values, n_chains: int, weights):
    """(mean, error, variance, tau, r_hat), each (k,) numpy, of per-sample values (n_samples, k).

    The columns are padded to a power of two (at least 8), so that few programs are compiled."""
    values = host(values)
    k = values.shape[1]
    if weights is not None:
        v = values
        mean = weights @ v
        variance = weights @ np.abs(v - mean) ** 2
        nan = np.full(mean.shape, np.nan)
        return mean, np.zeros(mean.shape), variance, nan, nan
    width = max(8, 1 << max(0, (k - 1).bit_length()))
    padded = np.pad(values, ((0, 0), (0, width - k)))
    return tuple(np.array(x)[:k] for x in _column_stats(jnp.asarray(padded), n_chains))


def stats_of_columns(values, n_chains: int, weights):
    """(mean (k,), error (k,), tau (k,)) as numpy of per-sample values (n_samples, k)."""
    mean, error, _, tau, _ = all_column_stats(values, n_chains, weights)
    return mean, error, tau


def series_stats(values, n_chains: int, weights) -> Stats:
    """Stats of one per-sample series (n_samples,)."""
    if weights is None and jnp.iscomplexobj(values):
        return statistics(per_chain(values, n_chains))
    values = host(values)
    mean, error, variance, tau, r_hat = (x[0] for x in all_column_stats(values[:, None], n_chains, weights))
    return Stats(jnp.asarray(mean), jnp.asarray(error), jnp.asarray(variance), jnp.asarray(tau),
                 jnp.asarray(r_hat), int(values.shape[0]))
