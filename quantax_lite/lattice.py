"""Hypercubic lattices (chains and square/rectangular lattices): sites, coordinates, bonds.

Sites are numbered row-major over ``shape``: on an ``Lx x Ly`` lattice the site with
coordinates ``(x, y)`` has index ``x * Ly + y``; on a chain site ``x`` has index ``x``.

Bonds of order ``k`` are the pairs of sites whose (minimum-image, under periodic
boundaries) Euclidean distance is the k-th smallest distance of the infinite lattice:
order 1 = nearest neighbours (distance 1), order 2 = next-nearest neighbours
(distance sqrt(2) on the square lattice, 2 on the chain), and so on. Every pair appears
**once**, with ``i < j``. Consequences on small periodic lattices, where periodic images
coincide:

* an axis of length 2: the bond ``x -> x+1`` and the wrapped bond ``x -> x-1`` join the
  same two sites; the pair is listed once (a single bond of strength J, not 2J);
* an axis of length 1 has no bonds along it (no self-bonds);
* a pair that is nearer through the boundary belongs to the lower order only (e.g. on a
  periodic chain of 3 sites the pair (0, 2) is a nearest-neighbour bond and there are
  no next-nearest-neighbour bonds).
"""
from __future__ import annotations

import dataclasses
import itertools
from functools import cached_property

import numpy as np

from ._validate import positive_int

__all__ = ["Lattice", "Chain", "Square", "site_coords", "periodic_site_index"]

_OPEN = ("open", "obc")
_PERIODIC = ("periodic", "pbc")


def _parse_boundary(pbc) -> bool:
    """``True``/``False`` or one of "periodic"/"pbc"/"open"/"obc" -> bool."""
    if isinstance(pbc, (bool, np.bool_)):
        return bool(pbc)
    if isinstance(pbc, str):
        key = pbc.strip().lower()
        if key in _PERIODIC:
            return True
        if key in _OPEN:
            return False
    raise ValueError(
        f"pbc: expected a bool or one of {_PERIODIC + _OPEN} (boundary conditions), "
        f"got {pbc!r}"
    )


def site_coords(shape) -> np.ndarray:
    """Integer coordinates of every site of a lattice of ``shape``, ``(n_sites, ndim)`` int64,
    in row-major site order (the numbering of :class:`Lattice`)."""
    shape = tuple(shape)
    return np.ascontiguousarray(np.indices(shape).reshape(len(shape), -1).T, dtype=np.int64)


def periodic_site_index(coords, shape) -> np.ndarray:
    """Site index of integer ``coords`` ``(..., ndim)`` on a periodic lattice of ``shape``.

    Every coordinate is wrapped modulo its axis length, then numbered row-major (as
    :class:`Lattice`): ``(x, y) -> (x mod Lx) * Ly + (y mod Ly)``. Returns ``(...)`` int64.
    This is the one shape-level form of "coordinates + offset -> site"; e.g. the
    translation by ``r`` is ``periodic_site_index(site_coords(shape) + r, shape)``.
    """
    shape = tuple(int(L) for L in shape)
    coords = np.asarray(coords, dtype=np.int64)
    if coords.shape[-1:] != (len(shape),):
        raise ValueError(f"coords: expected last axis of length {len(shape)}, got shape {coords.shape}")
    coords = np.mod(coords, np.asarray(shape, dtype=np.int64))
    return np.ravel_multi_index(tuple(np.moveaxis(coords, -1, 0)), shape).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class Lattice:
    """A hypercubic lattice of ``shape`` with periodic (``pbc=True``) or open boundaries.

    Attributes:
      shape: extent along every axis, ``(L,)`` for a chain or ``(Lx, Ly)``.
      pbc: periodic boundaries along every axis (``True``) or open ones (``False``).

    Every extent must be a positive int (ValueError/TypeError naming ``shape[d]``) and
    the lattice must have at least 2 sites. Hashable (usable as a static argument of
    ``jax.jit``).
    """

    shape: tuple[int, ...]
    pbc: bool = True

    def __post_init__(self):
        if isinstance(self.shape, (int, np.integer)) and not isinstance(self.shape, bool):
            shape = (self.shape,)
        else:
            try:
                shape = tuple(self.shape)
            except TypeError:
                raise TypeError(f"shape: expected a tuple of positive ints, got {self.shape!r}")
        if len(shape) == 0:
            raise ValueError("shape: expected at least one axis, got ()")
        shape = tuple(positive_int(L, f"shape[{d}]") for d, L in enumerate(shape))
        if int(np.prod(shape)) < 2:
            raise ValueError(f"shape: a lattice needs at least 2 sites, got shape {shape}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "pbc", _parse_boundary(self.pbc))

    # ----------------------------------------------------------------- basic data
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def n_sites(self) -> int:
        return int(np.prod(self.shape))

    @property
    def name(self) -> str:
        """E.g. ``"chain:20"``, ``"4x4"``, ``"4x6"``; ``":open"`` appended for open boundaries."""
        if self.ndim == 1:
            base = f"chain:{self.shape[0]}"
        else:
            base = "x".join(str(L) for L in self.shape)
        return base if self.pbc else base + ":open"

    @cached_property
    def coords(self) -> np.ndarray:
        """Integer coordinates of every site, ``(n_sites, ndim)`` int64, row-major order."""
        grids = site_coords(self.shape)
        grids.setflags(write=False)
        return grids

    def site_index(self, coords) -> np.ndarray:
        """Site index of integer ``coords`` (``(..., ndim)``) -> ``(...)`` int64; wrapped when
        periodic (:func:`periodic_site_index`).

        Raises ValueError for coordinates outside an open lattice.
        """
        coords = np.asarray(coords, dtype=np.int64)
        if coords.shape[-1:] != (self.ndim,):
            raise ValueError(f"coords: expected last axis of length {self.ndim}, got shape {coords.shape}")
        if not self.pbc and np.any((coords < 0) | (coords >= np.asarray(self.shape))):
            raise ValueError("coords: outside the open lattice")
        return periodic_site_index(coords, self.shape)

    @cached_property
    def sublattice(self) -> np.ndarray:
        """Checkerboard parity of every site, ``(n_sites,)`` int8 in {0, 1} (sum of coords mod 2)."""
        parity = (self.coords.sum(axis=1) % 2).astype(np.int8)
        parity.setflags(write=False)
        return parity

    @property
    def is_bipartite(self) -> bool:
        """True when every nearest-neighbour bond joins the two checkerboard sublattices."""
        b = self.bonds(1)
        return bool(np.all(self.sublattice[b[:, 0]] != self.sublattice[b[:, 1]]))

    # ---------------------------------------------------------------------- bonds
    def displacement(self, i, j) -> np.ndarray:
        """Minimum-image displacement ``r_j - r_i`` (int64, ``(..., ndim)``).

        Under periodic boundaries each component is folded into ``[-L/2, L/2]``.
        """
        d = self.coords[np.asarray(j)] - self.coords[np.asarray(i)]
        if self.pbc:
            shape = np.asarray(self.shape)
            d = np.mod(d, shape)
            d = np.where(d > shape // 2, d - shape, d)
        return d

    def distance_shells(self, max_order: int) -> np.ndarray:
        """The ``max_order`` smallest nonzero squared distances of the infinite lattice Z^ndim."""
        # the k-th shell has squared radius <= k**2 (k**2 on a chain), so |component| <= k
        vecs = np.array(list(itertools.product(range(max_order + 1), repeat=self.ndim)))
        sq = np.unique((vecs**2).sum(axis=1))
        return sq[1 : max_order + 1]

    def bonds(self, order: int = 1) -> np.ndarray:
        """Pairs of sites at the ``order``-th neighbour distance, ``(n_bonds, 2)`` int32.

        Each pair once, ``i < j``, sorted lexicographically; minimum-image distances
        under periodic boundaries (see the module docstring for small lattices).
        """
        order = positive_int(order, "order")
        return self._bonds_cache(order)

    def _bonds_cache(self, order: int) -> np.ndarray:
        cache = self.__dict__.setdefault("_bond_tables", {})
        if order not in cache:
            target = self.distance_shells(order)[order - 1]
            n = self.n_sites
            i, j = np.triu_indices(n, k=1)
            d = self.displacement(i, j)
            keep = (d**2).sum(axis=1) == target
            pairs = np.stack([i[keep], j[keep]], axis=1).astype(np.int32)
            pairs.setflags(write=False)
            cache[order] = pairs
        return cache[order]

    def neighbours(self, order: int = 1) -> list[np.ndarray]:
        """For every site, the sorted array of its ``order``-th neighbours."""
        b = self.bonds(order)
        out = [[] for _ in range(self.n_sites)]
        for i, j in b:
            out[i].append(j)
            out[j].append(i)
        return [np.array(sorted(x), dtype=np.int32) for x in out]

    def __repr__(self) -> str:
        return f"Lattice(shape={self.shape}, pbc={self.pbc})"


def Chain(L: int, pbc=True) -> Lattice:
    """A chain of ``L >= 2`` sites (``pbc``: True/"periodic" or False/"open")."""
    L = positive_int(L, "L")
    if L < 2:
        raise ValueError(f"L: expected an int >= 2 (a chain needs at least 2 sites), got {L}")
    return Lattice((L,), pbc)


def Square(Lx: int, Ly: int | None = None, pbc=True) -> Lattice:
    """A square ``Lx x Ly`` lattice (``Ly=None``: ``Ly = Lx``); site ``(x, y)`` is ``x * Ly + y``.

    Every extent must be a positive int and the lattice must have at least 2 sites.
    """
    Lx = positive_int(Lx, "Lx")
    Ly = Lx if Ly is None else positive_int(Ly, "Ly")
    if Lx * Ly < 2:
        raise ValueError(f"Lx, Ly: a square lattice needs at least 2 sites, got {Lx}x{Ly}")
    return Lattice((Lx, Ly), pbc)
