"""``<S_i . S_j>`` for every pair, and the linear functionals of them (S(q), C(r), m^2)."""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from .checks import host, two_dimensional
from .column_stats import stats_of_columns
from .contract import Observable, Part
from .json_values import mean_error
from .programs import sampled_inputs
from .ratios import moved_values, pairs_spec
from .zz_correlations import pairs_to_matrix, sz_correlations


class SpinCorrelations(NamedTuple):
    """``<S_i . S_j>`` for every pair (numpy ``(n, n)``: ``mean``, ``error``, ``tau``) and
    ``<S^z_i S^z_j>`` (``zz_mean``, ``zz_error``); ``pair_values`` ``(n_samples, n_pairs)``
    the per-sample local values of ``S_i . S_j`` for ``i < j`` (``np.triu_indices`` order),
    from which :func:`structure_factor` and :func:`correlation_vs_distance` take their
    statistics; ``n_chains``; ``weights`` (exact mode) or None."""

    mean: np.ndarray
    error: np.ndarray
    tau: np.ndarray
    zz_mean: np.ndarray
    zz_error: np.ndarray
    pair_values: Any
    n_chains: int
    weights: Any

    @property
    def n_sites(self) -> int:
        return self.mean.shape[0]


def spin_correlations(
    log_psi: Callable,
    params,
    samples,
    *,
    n_chains: int | None = None,
    chunk_size: int | None = None,
    mesh=None,
    weights=None,
    log_psi_samples=None,
) -> SpinCorrelations:
    """``<S_i . S_j>`` for all pairs at once.

    Per sample, the local value of ``S_i . S_j = S^z_i S^z_j + (S+_i S-_j + S-_i S+_j) / 2``
    is ``s_i s_j / 4 + [s_i != s_j] Re psi(s with i, j swapped) / (2 psi(s))``: one
    network evaluation per pair and sample (``n (n - 1) / 2``), chunked by ``chunk_map``
    (``chunk_size`` samples per device per step; None: about
    ``tuning.current().local_energy_rows`` evaluations per step). Statistics per entry
    (:func:`quantax_lite.stats.chains.statistics`, tau included). ``pair_values`` holds
    ``n_samples * n (n - 1) / 2`` floats.
    """
    samples = two_dimensional(samples)
    n_sites = samples.shape[1]
    if n_sites < 2:
        raise ValueError(f"samples: expected at least 2 sites, got shape {tuple(samples.shape)}")
    samples, n_chains, w, lp = sampled_inputs(log_psi, params, samples, n_sites, n_chains, weights,
                                              log_psi_samples, chunk_size, mesh)
    (values,) = moved_values(log_psi, params, samples, lp, [pairs_spec(n_sites)], chunk_size, mesh)
    mean, error, tau = stats_of_columns(values, n_chains, w)
    zz_mean, zz_error = sz_correlations(samples, n_chains=n_chains, weights=w)
    return SpinCorrelations(
        mean=pairs_to_matrix(mean, n_sites, 0.75),
        error=pairs_to_matrix(error, n_sites, 0.0),
        tau=pairs_to_matrix(tau, n_sites, np.nan),
        zz_mean=zz_mean,
        zz_error=zz_error,
        pair_values=values,
        n_chains=n_chains,
        weights=w,
    )


def pair_functional(corr, coefficients: np.ndarray, constant: np.ndarray):
    """Linear functionals ``f_k = constant_k + sum_{i<j} coefficients[p, k] C_ij`` of the
    correlations: ``(mean (K,), error (K,) or None)``; per sample when ``corr`` is a
    :class:`SpinCorrelations`, on the matrix when it is an ``(n, n)`` array."""
    if isinstance(corr, SpinCorrelations):
        per_sample = host(corr.pair_values) @ coefficients
        mean, error, _ = stats_of_columns(per_sample, corr.n_chains, corr.weights)
        return mean + constant, error
    c = np.asarray(corr, dtype=np.float64)
    i, j = np.triu_indices(c.shape[0], k=1)
    return c[i, j] @ coefficients + constant, None


def corr_sites(corr) -> int:
    """The number of sites of a :class:`SpinCorrelations` or an ``(n, n)`` matrix (ValueError naming ``corr``)."""
    if isinstance(corr, SpinCorrelations):
        return corr.n_sites
    c = np.asarray(corr)
    if c.ndim != 2 or c.shape[0] != c.shape[1]:
        raise ValueError(f"corr: expected SpinCorrelations or an (n, n) matrix, got shape {c.shape}")
    return c.shape[0]


def pair_specs(inputs) -> tuple:
    """The ``specs`` of every observable built on the pair values ``S_i . S_j``."""
    return (pairs_spec(inputs.n_sites),)


def _finish(inputs, stats, state) -> dict:
    n = inputs.n_sites
    return {"spin_correlations": mean_error(pairs_to_matrix(stats.mean, n, 0.75), pairs_to_matrix(stats.error, n, 0.0))}


SPIN_CORRELATIONS = Observable("spin_correlations", lambda inputs, values: Part(values[0]), _finish, pair_specs)
