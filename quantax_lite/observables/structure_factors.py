"""The structure factor ``S(q)`` on the momenta of the cluster."""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from quantax_lite.geometry.lattice import Lattice
from .checks import lattice_of, shown
from .contract import Observable, Part
from .correlations import SpinCorrelations, corr_sites, pair_functional, pair_specs
from .json_values import mean_error, nested_list


class StructureFactor(NamedTuple):
    """``q`` ``(n_q, ndim)``, ``mean`` ``(n_q,)`` and ``error`` ``(n_q,)`` (None for a matrix input)."""

    q: np.ndarray
    mean: np.ndarray
    error: Any


def lattice_momenta(lattice: Lattice) -> np.ndarray:
    """Every momentum of the periodic cluster, ``q = sum_d (m_d / L_d) b_d`` (``b_d`` the
    reciprocal vectors, :attr:`Lattice.reciprocal_vectors`) with ``m_d`` in
    ``-(L_d - 1) // 2 .. L_d // 2``, row-major over the axes: ``(n_cells, ndim)``. On a
    chain or square lattice ``q_d = 2 pi m_d / L_d`` in ``(-pi, pi]``."""
    lattice = lattice_of(lattice)
    axes = [np.arange(-((L - 1) // 2), L // 2 + 1) / L for L in lattice.shape]
    grids = np.meshgrid(*axes, indexing="ij")
    frac = np.stack([g.reshape(-1) for g in grids], axis=1)
    q = frac @ lattice.reciprocal_vectors
    q[np.abs(q) < 1e-14] = 0.0
    return q


def _check_momenta(q, lattice: Lattice) -> np.ndarray:
    try:
        if np.iscomplexobj(q) or any(isinstance(x, complex) for x in np.ravel(np.asarray(q, dtype=object))):
            raise TypeError("complex")
        q = np.asarray(q, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"q: expected real momenta of shape (n_q, {lattice.ndim}) or ({lattice.ndim},), "
                         f"got {shown(q)}") from None
    if q.ndim == 1:
        q = q[None, :]
    if q.ndim != 2 or q.shape[1] != lattice.ndim:
        raise ValueError(f"q: expected momenta of shape (n_q, {lattice.ndim}), got {q.shape}")
    m = q @ lattice.periods.T / (2 * np.pi)  # q . (L_d a_d) / 2 pi must be an integer
    bad = np.any(np.abs(m - np.round(m)) > 1e-8, axis=1) | ~np.all(np.isfinite(q), axis=1)
    if np.any(bad):
        k = int(np.nonzero(bad)[0][0])
        raise ValueError(
            f"q: momentum {tuple(float(x) for x in q[k])} is not on the lattice {lattice.name} "
            f"(q . L_d a_d must be a multiple of 2 pi; on a chain or square lattice q_d = 2 pi m / L_d, "
            f"L = {lattice.shape})"
        )
    return q


def structure_factor(corr, lattice: Lattice, q=None) -> StructureFactor:
    """``S(q) = (1/N) sum_ij e^{i q . (r_i - r_j)} <S_i . S_j>`` (real: the sum is symmetric).

    ``corr``: a :class:`SpinCorrelations` (errors from the per-sample ``S(q)``, statistics
    incl. tau) or an ``(n, n)`` matrix (exact correlations; ``error`` None). ``q``: momenta
    ``(n_q, ndim)`` or one ``(ndim,)`` momentum on the lattice (``2 pi m / L`` per axis;
    ValueError naming ``q`` otherwise); None: every momentum, :func:`lattice_momenta`.
    ``r_i`` are the site positions (:attr:`Lattice.positions`; the coordinates on a chain
    or square lattice). ``S(0) = <S_tot^2> / N``.
    """
    if not isinstance(corr, SpinCorrelations):
        corr = _real_matrix(corr)
    n = corr_sites(corr)
    lattice = lattice_of(lattice, n)
    q, coef, const = sq_tables(lattice, q)
    mean, error = pair_functional(corr, coef, const)
    return StructureFactor(q, mean, error)


def _real_matrix(corr) -> np.ndarray:
    """``corr`` as a finite real float64 array (its shape checked by :func:`corr_sites`);
    ``TypeError`` / ``ValueError`` naming ``corr`` otherwise."""
    try:
        c = np.asarray(corr)
    except ValueError:  # a ragged nested list
        raise ValueError(f"corr: expected SpinCorrelations or an (n, n) matrix of real numbers, "
                         f"got {shown(corr)}") from None
    if c.dtype.kind not in "iuf":
        raise TypeError(f"corr: expected SpinCorrelations or an (n, n) matrix of real numbers, got dtype {c.dtype}")
    c = c.astype(np.float64)
    if not np.all(np.isfinite(c)):
        raise ValueError("corr: the correlation matrix holds NaN or infinity")
    return c


def sq_tables(lattice: Lattice, q=None):
    """``(q, coefficients (n_pairs, n_q), constant (n_q,))`` of S(q) as a pair functional."""
    n = lattice.n_sites
    q = lattice_momenta(lattice) if q is None else _check_momenta(q, lattice)
    i, j = np.triu_indices(n, k=1)
    dr = lattice.positions[i] - lattice.positions[j]  # (n_pairs, ndim)
    return q, 2.0 * np.cos(dr @ q.T) / n, np.full(len(q), 0.75)


def _evaluate(inputs, values) -> Part:
    q, coef, const = sq_tables(inputs.lattice)
    return Part(values[0] @ coef, q, const)


def _finish(inputs, stats, q) -> dict:
    return {"structure_factor": {"q": nested_list(q), **mean_error(stats.mean, stats.error)}}


STRUCTURE_FACTOR = Observable("structure_factor", _evaluate, _finish, pair_specs)
