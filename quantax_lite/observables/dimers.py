"""Dimer-dimer correlations ``<D_i D_j>``, ``D_i = S_i . S_{i+e}``, on chains and square lattices."""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from quantax_lite.utils.validate import positive_int
from quantax_lite.geometry.lattice import Lattice
from .checks import host, lattice_of
from .column_stats import series_stats, stats_of_columns
from .contract import Observable, Part
from .distance import displacement_shells
from .json_values import nested_list, number
from .programs import sampled_inputs
from .ratios import moved_values


class DimerCorrelations(NamedTuple):
    """Dimer-dimer correlations along one axis, ``D_i = S_i . S_{i+e}``.

    ``r`` ``(n_r, ndim)`` bond displacements (from the first site of one bond to that of the
    other, minimum image), ``distance``; ``mean``/``error``: the plain correlation
    ``(1/N_r) sum_{pairs at r} Re <D_i D_j>``; ``connected_mean``/``connected_error``: the plain
    one minus ``<D>^2``; ``bond_mean``/``bond_error``: ``<D> = (1/N_b) sum_i <D_i>``.
    """

    axis: int
    r: np.ndarray
    distance: np.ndarray
    mean: np.ndarray
    error: np.ndarray
    connected_mean: np.ndarray
    connected_error: np.ndarray
    bond_mean: float
    bond_error: float


def _axis_bonds(lattice: Lattice, axis: int) -> np.ndarray:
    L = lattice.shape[axis]
    coords = lattice.coords
    keep = np.ones(lattice.n_sites, bool) if lattice.pbc else coords[:, axis] < L - 1
    start = np.nonzero(keep)[0]
    step = np.zeros(lattice.ndim, np.int64)
    step[axis] = 1
    end = lattice.site_index(coords[start] + step)
    return np.stack([start, end], axis=1).astype(np.int64)


def dimer_correlations(
    log_psi: Callable,
    params,
    samples,
    lattice: Lattice,
    axis: int = 0,
    *,
    n_chains: int | None = None,
    chunk_size: int | None = None,
    mesh=None,
    weights=None,
    log_psi_samples=None,
) -> DimerCorrelations:
    """Dimer-dimer correlations of the bonds ``(i, i + e_axis)`` (every site under periodic
    boundaries; axis of length >= 2).

    The local value of ``D_1 D_2`` (bonds ``b1``, ``b2``, overlapping ones included) needs
    ``psi`` at ``s`` with ``b2`` swapped, ``b1`` swapped and both: ``N_b + N_b^2``
    evaluations per sample. Its real part is averaged (``Re <D_1 D_2>``, the symmetrized
    product ``<{D_1, D_2}> / 2`` for bonds that share a site). The connected correlation
    ``C_D(r) - <D>^2`` gets its error from the linearized per-sample value
    ``DD_loc(s) - 2 <D> D_loc(s)`` (delta method).
    """
    lattice = lattice_of(lattice)
    if not lattice.is_hypercubic:
        raise ValueError(f"lattice: dimer correlations are defined on chains and square lattices, got {lattice.name}")
    axis = positive_int(axis, "axis", minimum=0)
    if axis >= lattice.ndim or lattice.shape[axis] < 2:
        raise ValueError(f"axis: expected an axis of length >= 2 of the lattice {lattice.name}, got {axis}")
    n_sites = lattice.n_sites
    samples, n_chains, w, lp = sampled_inputs(log_psi, params, samples, n_sites, n_chains, weights,
                                              log_psi_samples, chunk_size, mesh)
    spec, meta = dimer_spec(lattice, axis)
    (values,) = moved_values(log_psi, params, samples, lp, [spec], chunk_size, mesh)
    return _dimers_of(values, meta, n_chains, w)


def dimer_spec(lattice: Lattice, axis: int):
    """``(spec, meta)`` of the dimer correlations along ``axis``: the ratio table and
    ``(axis, n_bonds, r, distance, pairs per r)``."""
    bonds = _axis_bonds(lattice, axis)
    nb = len(bonds)
    d = lattice.displacement(np.repeat(bonds[:, 0], nb), np.tile(bonds[:, 0], nb))
    vecs, dist, group = displacement_shells(d)
    counts = np.bincount(group, minlength=len(vecs)).astype(np.float64)
    key = (lattice.n_sites, bonds.astype(np.int64).tobytes(), group.astype(np.int64).tobytes(), len(vecs))
    return ("dimers", key), (axis, nb, vecs, dist, counts)


def _dimers_of(values, meta, n_chains: int, w) -> DimerCorrelations:
    axis, nb, vecs, dist, counts = meta
    values = host(values)
    bond_local = np.mean(values[:, :nb], axis=1)
    plain = values[:, nb:] / counts
    mean, error, _ = stats_of_columns(plain, n_chains, w)
    b = series_stats(bond_local, n_chains, w)
    d_mean = float(b.mean)
    linear = plain - 2.0 * d_mean * bond_local[:, None]
    _, c_error, _ = stats_of_columns(linear, n_chains, w)
    return DimerCorrelations(axis, vecs, dist, mean, error, mean - d_mean**2, c_error, d_mean,
                             float(b.error_of_mean))


# ------------------------------------------------------------------- as an observable
def _axes(inputs) -> list:
    lattice = inputs.lattice
    if not (inputs.dimers and lattice.is_hypercubic):
        return []
    return [a for a in range(lattice.ndim) if lattice.shape[a] >= 2]


def _specs(inputs) -> tuple:
    return tuple(dimer_spec(inputs.lattice, axis)[0] for axis in _axes(inputs))


def _evaluate(inputs, values) -> Part:
    """Per axis: the bond value, the plain correlations and their linearized connected part."""
    w = inputs.weights
    columns, state = [np.zeros((inputs.n_samples, 0))], []
    for axis, v in zip(_axes(inputs), values):
        meta = dimer_spec(inputs.lattice, axis)[1]
        nb, counts = meta[1], meta[4]
        bond_local = np.mean(v[:, :nb], axis=1)
        plain = v[:, nb:] / counts
        d_mean = float(w @ bond_local) if w is not None else float(np.mean(bond_local))
        columns.append(np.concatenate([bond_local[:, None], plain, plain - 2.0 * d_mean * bond_local[:, None]], 1))
        state.append((axis, meta, d_mean, plain.shape[1]))
    return Part(np.concatenate(columns, axis=1), state)


def _finish(inputs, stats, state) -> dict:
    out, start = {}, 0
    for axis, meta, d_mean, k in state:
        mu, err = stats.mean[start : start + 1 + 2 * k], stats.error[start : start + 1 + 2 * k]
        start += 1 + 2 * k
        out["xyz"[axis]] = {
            "r": meta[2].tolist(), "distance": nested_list(meta[3]), "mean": nested_list(mu[1 : 1 + k]),
            "error": nested_list(err[1 : 1 + k]), "connected_mean": nested_list(mu[1 : 1 + k] - d_mean**2),
            "connected_error": nested_list(err[1 + k :]),
            "bond": {"mean": number(mu[0]), "error": number(err[0])},
        }
    return {"dimer_correlations": out}


DIMER_CORRELATIONS = Observable("dimer_correlations", _evaluate, _finish, _specs)
