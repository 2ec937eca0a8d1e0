"""The total magnetization ``S^z_tot = sum_i s_i / 2``: ``<S^z_tot>`` and ``<(S^z_tot)^2>`` from the samples alone."""
from __future__ import annotations

import numpy as np

from quantax_lite.stats.chains import Stats
from .checks import chains, int8_samples, samples_host, two_dimensional, weights as checked_weights
from .column_stats import series_stats
from .contract import Observable, Part
from .json_values import number


def sz_moments(samples, *, n_chains: int | None = None, weights=None) -> tuple[Stats, Stats]:
    """``(<S^z_tot>, <(S^z_tot)^2>)`` with ``S^z_tot = sum_i s_i / 2``, from the samples alone."""
    samples = two_dimensional(samples)
    samples = int8_samples(samples, samples.shape[1])
    n_chains = chains(n_chains, samples.shape[0])
    w = checked_weights(weights, samples.shape[0])
    m = np.sum(samples_host(samples), axis=1) / 2
    return series_stats(m, n_chains, w), series_stats(m**2, n_chains, w)


def _evaluate(inputs, values) -> Part:
    m = np.sum(inputs.spins, axis=1) / 2
    return Part(np.stack([m, m**2], axis=1))


def _finish(inputs, stats, state) -> dict:
    (sz, sz2), (sz_err, sz2_err) = stats.mean, stats.error
    return {"sz": {"mean": number(sz), "error": number(sz_err)},
            "sz_squared": {"mean": number(sz2), "error": number(sz2_err)}}


SZ_MOMENTS = Observable("sz_moments", _evaluate, _finish)
