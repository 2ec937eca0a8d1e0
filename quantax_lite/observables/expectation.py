"""``<O>`` of any Hamiltonian-contract operator from samples, with Monte Carlo errors."""
from __future__ import annotations

from typing import Callable

import jax.numpy as jnp

from quantax_lite.operators.hamiltonian import SpinHamiltonian, hamiltonian_sizes
from quantax_lite.stats.chains import Stats
from .checks import chains, int8_samples, weights as checked_weights
from .column_stats import series_stats
from .programs import local_values


def expect(
    log_psi: Callable,
    params,
    samples,
    operator: SpinHamiltonian,
    *,
    n_chains: int | None = None,
    chunk_size: int | None = None,
    mesh=None,
    weights=None,
    log_psi_samples=None,
    real: bool = False,
) -> Stats:
    """``<O>`` from samples: the statistics of ``O_loc(s) = sum_s' O[s, s'] psi(s')/psi(s)``.

    ``operator``: any Hamiltonian-contract operator (a
    :class:`~quantax_lite.operators.local_operators.LocalOperator`, a ``Heisenberg``, ...);
    ``samples`` ``(n_samples, n_sites)`` int8, chain-major with ``n_chains`` chains (None:
    one chain). The local values come from the local-energy engine
    (:func:`~quantax_lite.operators.hamiltonian.make_local_energy`, chunked by ``chunk_size`` samples
    per device, built once per operator and wavefunction); the result is
    ``statistics(per_chain(O_loc, n_chains))``, complex when ``O_loc`` is. ``weights``:
    exact mode (package docstring). ``log_psi_samples``: ``log_psi(params, samples)`` if known.
    ``real=True``: the statistics of ``Re O_loc`` -- for a Hermitian ``O`` the same
    expectation, with the error bar of the real part (the complex one also counts the
    fluctuations of ``Im O_loc``, whose mean is 0, and so covers the exact value more often
    than 68% of the time).
    """
    n_sites, _ = hamiltonian_sizes(operator)
    samples = int8_samples(samples, n_sites)
    n = samples.shape[0]
    n_chains = chains(n_chains, n)
    w = checked_weights(weights, n)
    values = local_values(log_psi, params, samples, operator, chunk_size, mesh, log_psi_samples)
    return series_stats(jnp.real(values) if real else values, n_chains, w)
