"""Compiled programs of a wavefunction, memoized on (operator, wavefunction, chunking,
mesh, speed choices): ``log_psi`` over the samples and the local values of an operator."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from quantax_lite.utils import tuning
from quantax_lite.utils.validate import positive_int
from quantax_lite.operators.hamiltonian import make_local_energy
from quantax_lite.utils import chunk_map
from .checks import chains, int8_samples, weights as checked_weights


def cached(build):
    """``build(*key)`` memoized on its (hashable) arguments, so that repeated calls with the
    same operator and wavefunction reuse one compiled program; unhashable keys build anew."""
    memo = functools.lru_cache(maxsize=16)(build)

    @functools.wraps(build)
    def get(*key):
        try:
            hash(key)
        except TypeError:
            return build(*key)
        return memo(*key)

    return get


def chunked_fn(f, chunk_size, mesh, choices):
    """``f(params, x)`` jitted and chunked over the rows of ``x`` by chunk_map, built under the
    speed ``choices`` (not memoized: callers keep it, e.g. through :func:`cached`)."""
    with tuning.using(choices):
        g = chunk_map(f, in_axes=(None, 0), chunk_size=chunk_size, use_scan=True, shard_batch=True, mesh=mesh)
    return jax.jit(g)


@cached
def log_psi_fn(log_psi, chunk_size, mesh, choices):
    """A jitted, chunked ``(params, samples) -> log_psi(params, samples)``."""
    return chunked_fn(log_psi, chunk_size, mesh, choices)


@cached
def local_values_fn(operator, log_psi, chunk_size, mesh, choices):
    """The local-energy engine of ``operator`` (:func:`~quantax_lite.operators.hamiltonian.make_local_energy`)."""
    with tuning.using(choices):
        return make_local_energy(operator, log_psi, chunk_size=chunk_size, mesh=mesh)


def log_psi_samples(log_psi, params, samples, given, chunk_size=None, mesh=None):
    """``log_psi(params, samples)`` (compiled once per wavefunction, chunked), or ``given`` checked
    (ValueError naming ``log_psi_samples``)."""
    if given is None:
        return log_psi_fn(log_psi, chunk_size, mesh, tuning.current())(params, samples)
    lp = jnp.asarray(given)
    if lp.shape != (samples.shape[0],):
        raise ValueError(f"log_psi_samples: expected shape ({samples.shape[0]},), got {lp.shape}")
    return lp


def sampled_inputs(log_psi, params, samples, n_sites: int, n_chains, weights, given_log_psi, chunk_size=None,
                   mesh=None):
    """What an observable of samples starts from, checked: ``(samples, n_chains, weights,
    log_psi)`` with the samples ``(n_samples, n_sites)`` int8, the chain count (None: 1),
    the normalized exact weights or None, and ``log psi`` of every sample
    (:func:`log_psi_samples`)."""
    samples = int8_samples(samples, n_sites)
    n = samples.shape[0]
    n_chains = chains(n_chains, n)
    w = checked_weights(weights, n)
    return samples, n_chains, w, log_psi_samples(log_psi, params, samples, given_log_psi, chunk_size, mesh)


def local_values(log_psi, params, samples, operator, chunk_size, mesh, given_log_psi):
    """``O_loc(s)`` of every sample (complex when the operator or the wavefunction is)."""
    if chunk_size is not None:
        chunk_size = positive_int(chunk_size, "chunk_size")
    fn = local_values_fn(operator, log_psi, chunk_size, mesh, tuning.current())
    if given_log_psi is not None:
        given_log_psi = log_psi_samples(log_psi, params, samples, given_log_psi)
    return fn(params, samples, given_log_psi)
