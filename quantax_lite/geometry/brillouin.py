"""The first Brillouin zone of a lattice and its high-symmetry points, from the reciprocal
vectors the lattice provides (:attr:`quantax_lite.geometry.lattice.Lattice.reciprocal_vectors`).

The first zone is the Wigner-Seitz cell of the reciprocal lattice: the momenta nearer to
``0`` than to any other reciprocal lattice vector ``G``. Its corners and the centres of its
edges are the high-symmetry points, named as in the literature:

* square lattice: ``Γ = (0, 0)``, ``X = (π, 0)`` (edge centre), ``M = (π, π)`` (corner);
* rectangular cells: ``Γ``, ``X`` and ``Y`` (edge centres along ``b_1`` and ``b_2``), ``S`` (corner);
* triangular Bravais lattice (triangular, honeycomb, kagome): a hexagonal zone with ``Γ``,
  ``K`` (corner; for the triangular lattice of unit spacing ``(4π/3, 0)``) and ``M``
  (edge centre, ``b/2``);
* a chain: ``Γ = 0`` and ``X = π`` (in units of the inverse spacing).

Other cells: ``Γ`` and the corners and edge centres without names (``corner``, ``edge``).
Only one representative of each named point is returned (the one of smallest polar angle
in ``[0, 2π)``); the others are its images under the point group.
"""
from __future__ import annotations

import itertools

import numpy as np

__all__ = ["zone_corners", "high_symmetry_points", "fold_to_first_zone", "zone_images"]

_TOL = 1e-9


def _reciprocal(lattice_or_vectors) -> np.ndarray:
    b = getattr(lattice_or_vectors, "reciprocal_vectors", lattice_or_vectors)
    b = np.asarray(b, dtype=np.float64)
    if b.ndim != 2 or b.shape[0] != b.shape[1] or b.shape[0] not in (1, 2):
        raise ValueError(f"reciprocal vectors: expected a (1, 1) or (2, 2) array (a chain or a 2D lattice), "
                         f"got shape {b.shape}")
    return b


def _shells(b: np.ndarray, reach: int = 2) -> np.ndarray:
    """Every nonzero ``G = sum m_d b_d`` with ``|m_d| <= reach``, ``(n, ndim)``."""
    ms = [m for m in itertools.product(range(-reach, reach + 1), repeat=len(b)) if any(m)]
    return np.asarray(ms, dtype=np.float64) @ b


def _inside(k: np.ndarray, G: np.ndarray, scale: float) -> np.ndarray:
    """Whether each ``k`` ``(..., ndim)`` lies in the closed first zone (k . G <= |G|^2 / 2 for all G)."""
    return np.all(k @ G.T <= 0.5 * (G**2).sum(axis=1) + _TOL * scale, axis=-1)


def zone_corners(lattice_or_vectors) -> np.ndarray:
    """The corners of the first Brillouin zone, ``(n_corners, 2)``, counter-clockwise from
    the smallest polar angle in ``[0, 2π)``; ``(2, 1)`` ``[[-π/a], [π/a]]`` on a chain."""
    b = _reciprocal(lattice_or_vectors)
    if len(b) == 1:
        half = abs(b[0, 0]) / 2
        return np.array([[-half], [half]])
    G = _shells(b)
    scale = float(np.abs(b).max())
    rhs = 0.5 * (G**2).sum(axis=1)
    found = []
    for i, j in itertools.combinations(range(len(G)), 2):
        A = np.stack([G[i], G[j]])
        if abs(np.linalg.det(A)) < _TOL * scale**2:
            continue
        k = np.linalg.solve(A, rhs[[i, j]])
        if _inside(k, G, scale) and not any(np.linalg.norm(k - f) < 1e-7 * scale for f in found):
            found.append(k)
    corners = np.asarray(found)
    angle = np.round(np.mod(np.arctan2(corners[:, 1], corners[:, 0]), 2 * np.pi), 9)
    return corners[np.argsort(angle, kind="stable")]


def _edge_centres(b: np.ndarray) -> np.ndarray:
    """The centres of the zone's edges: the ``G / 2`` on its boundary that are no corners."""
    G = _shells(b)
    scale = float(np.abs(b).max())
    corners = zone_corners(b)
    half = G / 2
    keep = _inside(half, G, scale) & np.array([np.min(np.linalg.norm(corners - h, axis=1)) > 1e-7 * scale
                                               for h in half])
    out = half[keep]
    angle = np.round(np.mod(np.arctan2(out[:, 1], out[:, 0]), 2 * np.pi), 9)
    return out[np.argsort(angle, kind="stable")]


def high_symmetry_points(lattice_or_vectors) -> dict[str, np.ndarray]:
    """``{name: momentum}`` of the high-symmetry points of the first zone (module docstring),
    ``Γ`` first, then the edge centres, then the corners; computed from the reciprocal vectors
    of a lattice (or an array of them as rows)."""
    b = _reciprocal(lattice_or_vectors)
    if len(b) == 1:
        return {"Γ": np.zeros(1), "X": np.array([abs(b[0, 0]) / 2])}
    corners, edges = zone_corners(b), _edge_centres(b)
    out = {"Γ": np.zeros(2)}
    lengths = np.linalg.norm(b, axis=1)
    orthogonal = abs(b[0] @ b[1]) < _TOL * lengths.prod()
    if len(corners) == 4 and orthogonal:
        along = [edges[np.argmin(np.linalg.norm(edges - b[d] / 2, axis=1))] for d in range(2)]
        if abs(lengths[0] - lengths[1]) < _TOL * lengths.max():
            out.update(X=along[0], M=corners[0])
        else:
            out.update(X=along[0], Y=along[1], S=corners[0])
    elif len(corners) == 6 and np.ptp(np.linalg.norm(corners, axis=1)) < 1e-7 * lengths.max():
        out.update(K=corners[0], M=edges[0])  # a regular hexagon: the triangular Bravais lattice
    else:
        out.update(edge=edges[0], corner=corners[0])
    # the order of the docstring: Γ, edge centres, corners
    order = ["Γ", "X", "Y", "M", "S", "K", "edge", "corner"] if len(corners) != 6 else ["Γ", "M", "K", "edge",
                                                                                          "corner"]
    return {name: out[name] for name in order if name in out}


def zone_images(q, lattice_or_vectors) -> list[tuple[int, np.ndarray]]:
    """Every image ``q + G`` of the momenta ``q`` ``(n, ndim)`` that lies in the closed first
    zone, as ``(index of q, image)`` pairs: one per momentum inside the zone, several for a
    momentum on its boundary (a zone corner of the hexagon: three)."""
    b = _reciprocal(lattice_or_vectors)
    q = np.atleast_2d(np.asarray(q, dtype=np.float64))
    G = np.concatenate([np.zeros((1, len(b))), _shells(b, reach=3)])
    scale = float(np.abs(b).max())
    out = []
    for n, k in enumerate(q):
        cand = k[None, :] - G
        d = np.linalg.norm(cand, axis=1)
        for c in cand[d <= d.min() + 1e-7 * scale]:
            out.append((n, c + 0.0))
    return out


def fold_to_first_zone(q, lattice_or_vectors) -> np.ndarray:
    """The image of each momentum ``q`` ``(n, ndim)`` in the first zone (the nearest to 0 of
    ``q + G``; on the boundary the first found), ``(n, ndim)``."""
    q = np.atleast_2d(np.asarray(q, dtype=np.float64))
    images = zone_images(q, lattice_or_vectors)
    out = np.empty_like(q)
    seen = set()
    for n, k in images:
        if n not in seen:
            out[n] = k
            seen.add(n)
    return out
