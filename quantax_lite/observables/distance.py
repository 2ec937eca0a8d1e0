"""The spin correlation ``C(r)`` by displacement and by distance."""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from quantax_lite.geometry.lattice import Lattice
from .checks import lattice_of
from .contract import Observable, Part
from .correlations import corr_sites, pair_functional, pair_specs
from .json_values import mean_error, nested_list


class CorrelationVsDistance(NamedTuple):
    """``C(r)`` per displacement ``r`` ``(n_r, ndim)`` (``distance`` ``(n_r,)``, ``mean``,
    ``error``) and per distance (``shell_distance``, ``shell_mean``, ``shell_error``)."""

    r: np.ndarray
    distance: np.ndarray
    mean: np.ndarray
    error: Any
    shell_distance: np.ndarray
    shell_mean: np.ndarray
    shell_error: Any


def correlation_vs_distance(corr, lattice: Lattice) -> CorrelationVsDistance:
    """``C(r) = mean over ordered pairs (i, j) with r_j - r_i = r of <S_i . S_j>``.

    ``r`` is the minimum-image displacement (:meth:`Lattice.displacement`) under periodic
    boundaries, where every ``r`` has ``N`` pairs and ``C(r) = (1/N) sum_i <S_i . S_{i+r}>``
    (``= <S_0 . S_r>`` in a translation-invariant state); the plain displacement on open
    lattices. ``C(0) = 3/4``. Shells: the mean over every pair at the same ``|r|``.
    Ordered by distance, then by ``r``.
    """
    n = corr_sites(corr)
    lattice = lattice_of(lattice, n)
    vecs, dist, shells, (coef, const), (shell_coef, shell_const) = cr_tables(lattice)
    mean, error = pair_functional(corr, coef, const)
    shell_mean, shell_error = pair_functional(corr, shell_coef, shell_const)
    return CorrelationVsDistance(vecs, dist, mean, error, shells, shell_mean, shell_error)


def displacement_shells(d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct displacements of ``d`` ``(m, ndim)``, ordered by length then
    lexicographically: ``(vectors (k, ndim), their lengths (k,), the index of each row of d
    among them (m,))``."""
    vecs, group = np.unique(d, axis=0, return_inverse=True)
    group = group.reshape(-1)
    dist = np.sqrt((vecs**2).sum(axis=1))
    order = np.lexsort(tuple(vecs.T[::-1]) + (np.round(dist, 9),))
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return vecs[order], dist[order], rank[group]


def cr_tables(lattice: Lattice):
    """``(r, distance, shell distances, (coef, const) per r, (coef, const) per shell)``."""
    n = lattice.n_sites
    a, b = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    a, b = a.reshape(-1), b.reshape(-1)
    d = np.round(lattice.displacement(a, b), 9) + 0.0  # + 0.0: no negative zeros
    vecs, dist, group = displacement_shells(d)
    if lattice.is_hypercubic:
        vecs = vecs.astype(np.int64)
    shells, shell_of = np.unique(np.round(dist, 9), return_inverse=True)
    shell_of = shell_of.reshape(-1)
    iu = np.full((n, n), -1)
    ti, tj = np.triu_indices(n, k=1)
    iu[ti, tj] = iu[tj, ti] = np.arange(len(ti))
    off = a != b

    def tables(group_of_pair, n_groups):
        counts = np.bincount(group_of_pair, minlength=n_groups).astype(np.float64)
        coef = np.zeros((len(ti), n_groups))
        np.add.at(coef, (iu[a[off], b[off]], group_of_pair[off]), 1.0)
        const = 0.75 * np.bincount(group_of_pair[~off], minlength=n_groups)
        return coef / counts, const / counts

    return vecs, dist, shells, tables(group, len(vecs)), tables(shell_of[group], len(shells))


def _evaluate(inputs, values) -> Part:
    r, dist, shells, (cr_coef, cr_const), (shell_coef, shell_const) = cr_tables(inputs.lattice)
    pairs = values[0]
    return Part(np.concatenate([pairs @ cr_coef, pairs @ shell_coef], axis=1), (r, dist, shells),
                np.concatenate([cr_const, shell_const]))


def _finish(inputs, stats, state) -> dict:
    r, dist, shells = state
    k = len(r)
    mean, error = stats.mean, stats.error
    return {"correlation_vs_distance": {
        "r": r.tolist(), "distance": nested_list(dist), **mean_error(mean[:k], error[:k]),
        "shells": {"distance": nested_list(shells), **mean_error(mean[k:], error[k:])},
    }}


CORRELATION_VS_DISTANCE = Observable("correlation_vs_distance", _evaluate, _finish, pair_specs)
