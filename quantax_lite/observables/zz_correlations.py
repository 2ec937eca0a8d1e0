"""``<S^z_i S^z_j>`` from the samples alone (diagonal: no network evaluations)."""
from __future__ import annotations

import numpy as np

from .checks import chains, int8_samples, samples_host, two_dimensional, weights as checked_weights
from .column_stats import stats_of_columns
from .contract import Observable, Part
from .json_values import mean_error


def pairs_to_matrix(values: np.ndarray, n: int, diagonal: float) -> np.ndarray:
    """The symmetric ``(n, n)`` matrix of per-pair values (``np.triu_indices`` order)."""
    out = np.full((n, n), diagonal, dtype=np.float64)
    i, j = np.triu_indices(n, k=1)
    out[i, j] = out[j, i] = values
    return out


def zz_values(spins: np.ndarray) -> np.ndarray:
    """Per sample, ``s_i s_j / 4`` for every pair ``i < j``: ``(n_samples, n_pairs)``."""
    i, j = np.triu_indices(spins.shape[1], k=1)
    return spins[:, i] * spins[:, j] / 4


def sz_correlations(samples, *, n_chains: int | None = None, weights=None) -> tuple[np.ndarray, np.ndarray]:
    """``<S^z_i S^z_j>`` from the samples alone (diagonal): ``(mean (n, n), error (n, n))``."""
    samples = two_dimensional(samples)
    n_sites = samples.shape[1]
    samples = int8_samples(samples, n_sites)
    n_chains = chains(n_chains, samples.shape[0])
    w = checked_weights(weights, samples.shape[0])
    mean, error, _ = stats_of_columns(zz_values(samples_host(samples)), n_chains, w)
    return pairs_to_matrix(mean, n_sites, 0.25), pairs_to_matrix(error, n_sites, 0.0)


def _finish(inputs, stats, state) -> dict:
    n = inputs.n_sites
    return {"sz_correlations": mean_error(pairs_to_matrix(stats.mean, n, 0.25), pairs_to_matrix(stats.error, n, 0.0))}


SZ_CORRELATIONS = Observable("sz_correlations", lambda inputs, values: Part(zz_values(inputs.spins)), _finish)
