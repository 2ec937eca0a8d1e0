"""Lattices: a grid of unit cells with a basis of sites; coordinates, sublattices, bonds.

A lattice is ``shape`` unit cells (extent per Bravais direction) with ``n_basis`` sites
per cell. The cell with integer coordinates ``c`` sits at ``c @ vectors`` (rows of
``vectors`` are the Bravais vectors ``a_1, a_2, ...``), site ``b`` of the cell at
``c @ vectors + basis[b]``. Sites are numbered ``site = cell_index * n_basis + b`` with
``cell_index`` row-major over ``shape``: on the hypercubic lattices (``n_basis = 1``)
the site with coordinates ``(x, y)`` of an ``Lx x Ly`` lattice has index ``x * Ly + y``;
on a chain site ``x`` has index ``x``. Periodic boundaries (``pbc=True``) identify
positions that differ by ``shape[d] * vectors[d]``.

The lattices (nearest-neighbour distance 1 on every one of them):

* ``Chain(L)``: ``a_1 = (1)``; ``Square(Lx, Ly)``: ``a_1 = (1, 0)``, ``a_2 = (0, 1)``.
* ``Triangular(L1, L2)``: ``a_1 = (1, 0)``, ``a_2 = (1/2, sqrt(3)/2)`` (60 degrees), one
  site per cell.
* ``Honeycomb(L1, L2)``: ``a_1 = (sqrt(3), 0)``, ``a_2 = (sqrt(3)/2, 3/2)``, basis
  ``(0, 0)`` (sublattice A) and ``(a_1 + a_2) / 3 = (sqrt(3)/2, 1/2)`` (B).
* ``Kagome(L1, L2)``: ``a_1 = (2, 0)``, ``a_2 = (1, sqrt(3))``, basis ``(0, 0)``,
  ``a_1 / 2 = (1, 0)``, ``a_2 / 2 = (1/2, sqrt(3)/2)``.

Bonds of order ``k`` are the pairs of sites whose (minimum-image, under periodic
boundaries) Euclidean distance is the k-th smallest distance between two sites of the
infinite lattice: order 1 = nearest neighbours (distance 1), order 2 = next-nearest
neighbours (sqrt(2) on the square lattice, 2 on the chain, sqrt(3) on the triangular,
honeycomb and kagome lattices), and so on. Distances are compared with a relative
tolerance of 1e-8. Every pair appears **once**, with ``i < j``. Consequences on small
periodic lattices, where periodic images coincide:

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
import re
from functools import cached_property

import numpy as np

from quantax_lite.utils.validate import positive_int

__all__ = [
    "Lattice",
    "Chain",
    "Square",
    "Triangular",
    "Honeycomb",
    "Kagome",
    "site_coords",
    "periodic_site_index",
    "translation_perms",
    "parse_lattice",
    "CONSTRUCTORS",
]

_OPEN = ("open", "obc")
_PERIODIC = ("periodic", "pbc")
_RTOL = 1e-8  # relative tolerance of distance comparisons
_S3 = float(np.sqrt(3.0))


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
    """Integer coordinates of every cell of a grid of ``shape``, ``(n_cells, ndim)`` int64,
    in row-major order (the cell numbering of :class:`Lattice`; the site numbering of a
    lattice with one site per cell)."""
    shape = tuple(shape)
    return np.ascontiguousarray(np.indices(shape).reshape(len(shape), -1).T, dtype=np.int64)


def periodic_site_index(coords, shape) -> np.ndarray:
    """Cell index of integer ``coords`` ``(..., ndim)`` on a periodic grid of ``shape``.

    Every coordinate is wrapped modulo its axis length, then numbered row-major (as
    :class:`Lattice`): ``(x, y) -> (x mod Lx) * Ly + (y mod Ly)``. Returns ``(...)`` int64.
    This is the one shape-level form of "coordinates + offset -> site" (for one site per
    cell); e.g. the translation by ``r`` is ``periodic_site_index(site_coords(shape) + r, shape)``.
    """
    shape = tuple(int(L) for L in shape)
    coords = np.asarray(coords, dtype=np.int64)
    if coords.shape[-1:] != (len(shape),):
        raise ValueError(f"coords: expected last axis of length {len(shape)}, got shape {coords.shape}")
    coords = np.mod(coords, np.asarray(shape, dtype=np.int64))
    return np.ravel_multi_index(tuple(np.moveaxis(coords, -1, 0)), shape).astype(np.int64)


def translation_perms(shape, n_basis: int = 1, stride: int = 1) -> np.ndarray:
    """All translations by whole cells of a periodic grid of cells ``shape`` with ``n_basis``
    sites per cell (site ``c * n_basis + b``), ``(n_cells, n_sites)`` int32; with ``stride``
    k > 1 only those by multiples of k cells along every axis (k must divide every length),
    ``(n_cells / k^d, n_sites)``.

    Row ``r``: ``(T_r s)[i] = s[perms[r, i]]`` with ``perms[r, i]`` the site ``b`` of the
    cell at ``cell(i) + coords(r)`` (wrapped), ``b`` the basis index of ``i``, ``coords(r)``
    the r-th of the kept displacements in row-major order; row 0 is the identity.
    """
    shape = tuple(positive_int(L, f"shape[{d}]") for d, L in enumerate(shape))
    n_basis = positive_int(n_basis, "n_basis")
    stride = positive_int(stride, "stride")
    if any(length % stride for length in shape):
        raise ValueError(f"stride: {stride} must divide every length of the grid {shape}")
    coords = site_coords(shape)
    shifts = coords[np.all(coords % stride == 0, axis=1)]
    cells = periodic_site_index(coords[None, :, :] + shifts[:, None, :], shape)
    if n_basis == 1:
        return cells.astype(np.int32)
    return (cells[:, :, None] * n_basis + np.arange(n_basis)).reshape(len(cells), -1).astype(np.int32)


def _float_rows(value, name: str, ncols: int) -> tuple:
    """A 2-D float table as a tuple of tuples (hashable), checked finite with ``ncols`` columns."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != ncols or arr.shape[0] == 0 or not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: expected a finite float array of shape (n, {ncols}), got {value!r}")
    return tuple(tuple(float(x) for x in row) for row in arr)


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@dataclasses.dataclass(frozen=True)
class Lattice:
    """A lattice of ``shape`` unit cells with periodic (``pbc=True``) or open boundaries.

    Attributes:
      shape: extent in cells along every Bravais direction, ``(L,)`` for a chain or
        ``(L1, L2)``.
      pbc: periodic boundaries along every direction (``True``) or open ones (``False``).
      kind: ``"chain"``, ``"square"``, ``"hypercubic"`` (3-D and more), ``"triangular"``,
        ``"honeycomb"``, ``"kagome"`` or any other name of a lattice given by hand;
        ``None``: ``"chain"``/``"square"``/``"hypercubic"`` by ``ndim``.
      vectors: Bravais vectors as rows, ``(ndim, ndim)`` float64 (``a_1, a_2, ...``);
        ``None``: the identity.
      basis: positions of the sites of a cell, ``(n_basis, ndim)`` float64; ``None``: one
        site at the origin.

    Every extent must be a positive int (ValueError/TypeError naming ``shape[d]``) and
    the lattice must have at least 2 sites. ``vectors`` and ``basis`` are read-only
    float64 arrays; equality and hash compare shape, pbc, kind and their values (a
    lattice is hashable: usable as a static argument of ``jax.jit``).
    """

    shape: tuple[int, ...]
    pbc: bool = True
    kind: str | None = None
    vectors: np.ndarray | None = dataclasses.field(default=None, compare=False)
    basis: np.ndarray | None = dataclasses.field(default=None, compare=False)
    _geometry: tuple = dataclasses.field(default=(), init=False, repr=False)

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
        nd = len(shape)
        vectors = np.eye(nd) if self.vectors is None else self.vectors
        vectors = _float_rows(vectors, "vectors", nd)
        if len(vectors) != nd or abs(np.linalg.det(np.asarray(vectors))) < 1e-12:
            raise ValueError(f"vectors: expected {nd} linearly independent Bravais vectors, got {self.vectors!r}")
        basis = _float_rows(np.zeros((1, nd)) if self.basis is None else self.basis, "basis", nd)
        if int(np.prod(shape)) * len(basis) < 2:
            raise ValueError(f"shape: a lattice needs at least 2 sites, got shape {shape}")
        kind = self.kind
        if kind is None:
            kind = {1: "chain", 2: "square"}.get(nd, "hypercubic")
        if not isinstance(kind, str) or not kind:
            raise TypeError(f"kind: expected a lattice name (str), got {self.kind!r}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "pbc", _parse_boundary(self.pbc))
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "vectors", _readonly(np.array(vectors, dtype=np.float64)))
        object.__setattr__(self, "basis", _readonly(np.array(basis, dtype=np.float64)))
        object.__setattr__(self, "_geometry", (vectors, basis))  # hashable: equality and hash

    # ----------------------------------------------------------------- basic data
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def n_basis(self) -> int:
        """Sites per unit cell."""
        return int(self.basis.shape[0])

    @property
    def n_cells(self) -> int:
        return int(np.prod(self.shape))

    @property
    def n_sites(self) -> int:
        return self.n_cells * self.n_basis

    @property
    def is_hypercubic(self) -> bool:
        """One site per cell at the origin and orthonormal Bravais vectors (chain, square, ...)."""
        return self.n_basis == 1 and np.allclose(self.vectors, np.eye(self.ndim)) and not np.any(
            self.basis
        )

    @property
    def name(self) -> str:
        """E.g. ``"chain:20"``, ``"4x4"``, ``"4x6"``, ``"4x4x4"``, ``"triangular:6x6"``,
        ``"kagome:2x3"``; ``":open"`` appended for open boundaries. :func:`parse_lattice`
        reads the name of every lattice of :data:`CONSTRUCTORS` back (a lattice given by hand
        with another geometry has a name but no constructor)."""
        grid = "x".join(str(L) for L in self.shape)
        if self.kind == "chain" and self.ndim == 1:
            base = f"chain:{self.shape[0]}"
        elif self.kind in ("square", "hypercubic") and self.is_hypercubic:
            base = grid
        else:
            base = f"{self.kind}:{grid}"
        return base if self.pbc else base + ":open"

    @cached_property
    def cell_coords(self) -> np.ndarray:
        """Integer coordinates of the cell of every site, ``(n_sites, ndim)`` int64."""
        return _readonly(np.repeat(site_coords(self.shape), self.n_basis, axis=0))

    @cached_property
    def basis_index(self) -> np.ndarray:
        """Index ``b`` of every site within its cell, ``(n_sites,)`` int64."""
        return _readonly(np.tile(np.arange(self.n_basis, dtype=np.int64), self.n_cells))

    @property
    def coords(self) -> np.ndarray:
        """Integer coordinates of every site, ``(n_sites, ndim)`` int64, row-major order.

        The site coordinates of a hypercubic lattice; on a lattice with a basis the
        coordinates of each site's cell (:attr:`cell_coords`; sites of one cell share them).
        """
        return self.cell_coords

    @cached_property
    def positions(self) -> np.ndarray:
        """Real-space position of every site, ``(n_sites, ndim)`` float64:
        ``cell_coords @ vectors + basis[basis_index]`` (in the cluster, not wrapped)."""
        pos = self.cell_coords @ self.vectors + self.basis[self.basis_index]
        return _readonly(np.ascontiguousarray(pos))

    @property
    def periods(self) -> np.ndarray:
        """The vectors of the periodic cluster as rows, ``shape[d] * vectors[d]``, ``(ndim, ndim)``."""
        return np.asarray(self.shape, dtype=np.float64)[:, None] * self.vectors

    @property
    def reciprocal_vectors(self) -> np.ndarray:
        """Reciprocal vectors ``b_i`` as rows with ``a_i . b_j = 2 pi delta_ij``, ``(ndim, ndim)``."""
        return 2 * np.pi * np.linalg.inv(self.vectors).T

    def site_index(self, coords, basis_index=0) -> np.ndarray:
        """Site index of the site ``basis_index`` of the cell with integer ``coords``
        (``(..., ndim)``) -> ``(...)`` int64; wrapped when periodic (:func:`periodic_site_index`).

        Raises ValueError for coordinates outside an open lattice.
        """
        coords = np.asarray(coords, dtype=np.int64)
        if coords.shape[-1:] != (self.ndim,):
            raise ValueError(f"coords: expected last axis of length {self.ndim}, got shape {coords.shape}")
        if not self.pbc and np.any((coords < 0) | (coords >= np.asarray(self.shape))):
            raise ValueError("coords: outside the open lattice")
        b = np.asarray(basis_index, dtype=np.int64)
        if np.any((b < 0) | (b >= self.n_basis)):
            raise ValueError(f"basis_index: expected ints in [0, {self.n_basis}), got {basis_index!r}")
        return periodic_site_index(coords, self.shape) * self.n_basis + b

    @cached_property
    def sublattice(self) -> np.ndarray:
        """Sublattice label of every site, ``(n_sites,)`` int8.

        Hypercubic lattices: checkerboard parity (sum of coords mod 2). Honeycomb and
        kagome: the basis index (2 and 3 labels). Triangular: ``(c_1 - c_2) mod 3``, the
        three sublattices of the 120-degree state (a proper colouring of the periodic
        cluster when 3 divides both extents). Other lattices: the basis index.
        """
        if self.is_hypercubic:
            lab = self.coords.sum(axis=1) % 2
        elif self.kind == "triangular":
            lab = (self.cell_coords[:, 0] - self.cell_coords[:, 1]) % 3
        else:
            lab = self.basis_index
        return _readonly(np.asarray(lab, dtype=np.int8))

    @property
    def n_sublattices(self) -> int:
        """Number of sublattice labels: 2 (hypercubic, honeycomb), 3 (triangular, kagome), ..."""
        if self.is_hypercubic:
            return 2
        if self.kind == "triangular":
            return 3
        return self.n_basis

    @property
    def is_bipartite(self) -> bool:
        """True when the lattice has two sublattice labels and every nearest-neighbour bond
        joins them."""
        if self.n_sublattices != 2:
            return False
        b = self.bonds(1)
        return bool(np.all(self.sublattice[b[:, 0]] != self.sublattice[b[:, 1]]))

    @cached_property
    def frustrated(self) -> bool:
        """True when nearest-neighbour bonds of the infinite lattice close triangles
        (triangular, kagome): geometric frustration, a property of the lattice's geometry,
        not of the cluster's extent (a periodic chain of 3 sites is not frustrated)."""
        d2 = float(self.distance_shells(1)[0])
        cells = np.array(list(itertools.product(range(-2, 3), repeat=self.ndim)), dtype=np.float64)
        pos = (cells @ self.vectors)[:, None, :] + self.basis[None, :, :]  # (cells, n_basis, ndim)
        origin = int(np.flatnonzero(~cells.any(axis=1))[0]) * self.n_basis + np.arange(self.n_basis)
        pos = pos.reshape(-1, self.ndim)
        sq = ((pos[:, None, :] - pos[None, :, :]) ** 2).sum(axis=-1)
        near = np.abs(sq - d2) <= _RTOL * max(1.0, d2)
        for i in origin:
            ring = np.flatnonzero(near[i])
            if np.any(near[np.ix_(ring, ring)]):
                return True
        return False

    # ---------------------------------------------------------------------- bonds
    def displacement(self, i, j) -> np.ndarray:
        """Minimum-image displacement ``r_j - r_i``, ``(..., ndim)``.

        Hypercubic lattices: int64 cell displacements, each component folded into
        ``[-L/2, L/2]`` under periodic boundaries. Other lattices: float64 real-space
        vectors, the shortest over the periodic images (ties: the first image found).
        """
        i, j = np.asarray(i), np.asarray(j)
        if self.is_hypercubic:
            d = self.coords[j] - self.coords[i]
            if self.pbc:
                shape = np.asarray(self.shape)
                d = np.mod(d, shape)
                d = np.where(d > shape // 2, d - shape, d)
            return d
        return self._min_image(self.positions[j] - self.positions[i])

    def _min_image(self, d: np.ndarray) -> np.ndarray:
        """The shortest periodic image of real-space vectors ``d`` (``(..., ndim)``)."""
        d = np.asarray(d, dtype=np.float64)
        if not self.pbc:
            return d
        P = self.periods
        frac = d @ np.linalg.inv(P)
        d = (frac - np.round(frac)) @ P
        span = range(-2, 3)
        images = np.array(list(itertools.product(span, repeat=self.ndim)), dtype=np.float64) @ P
        cand = d[..., None, :] + images  # (..., n_images, ndim)
        best = np.argmin(np.round((cand**2).sum(axis=-1), 9), axis=-1)
        return np.take_along_axis(cand, best[..., None, None], axis=-2)[..., 0, :]

    def distance_shells(self, max_order: int) -> np.ndarray:
        """The ``max_order`` smallest nonzero squared distances between sites of the infinite
        lattice (int64 on hypercubic lattices, float64 otherwise)."""
        max_order = positive_int(max_order, "max_order")
        if self.is_hypercubic:
            # the k-th shell of Z^d has squared radius <= k**2, so |component| <= k
            vecs = np.array(list(itertools.product(range(max_order + 1), repeat=self.ndim)))
            sq = np.unique((vecs**2).sum(axis=1))
            return sq[1 : max_order + 1]
        V, B = self.vectors, self.basis
        # inscribed radius of the parallelepiped spanned by one cell (distance between faces)
        h = 1.0 / np.linalg.norm(np.linalg.inv(V), axis=0).max()
        M = max_order + 1
        while True:
            cells = np.array(list(itertools.product(range(-M, M + 1), repeat=self.ndim)), dtype=np.float64) @ V
            d = cells[:, None, None, :] + B[None, None, :, :] - B[None, :, None, :]
            sq = np.sort((d**2).sum(axis=-1).ravel())
            sq = sq[sq > 1e-12]
            shells = [sq[0]]
            for x in sq[1:]:
                if x - shells[-1] > _RTOL * max(1.0, x):
                    shells.append(x)
                    if len(shells) == max_order:
                        break
            # every vector shorter than (M - 1) h lies in the searched range of cells
            if len(shells) >= max_order and np.sqrt(shells[max_order - 1]) < (M - 1) * h - 2 * np.linalg.norm(B, axis=1).max():
                return np.array(shells[:max_order])
            M *= 2

    def bonds(self, order: int = 1) -> np.ndarray:
        """Pairs of sites at the ``order``-th neighbour distance, ``(n_bonds, 2)`` int32.

        Each pair once, ``i < j``, sorted lexicographically; minimum-image distances
        under periodic boundaries (see the module docstring for small lattices).
        """
        order = positive_int(order, "order")
        return self._bonds_cache(order)

    @cached_property
    def _pair_sq_distances(self):
        """``(i, j, |minimum-image r_j - r_i|^2)`` for all pairs ``i < j``."""
        i, j = np.triu_indices(self.n_sites, k=1)
        d = self.displacement(i, j)
        return i, j, (d**2).sum(axis=1)

    def _bonds_cache(self, order: int) -> np.ndarray:
        cache = self.__dict__.setdefault("_bond_tables", {})
        if order not in cache:
            target = self.distance_shells(order)[order - 1]
            i, j, sq = self._pair_sq_distances
            if self.is_hypercubic:
                keep = sq == target
            else:
                keep = np.abs(sq - target) <= _RTOL * max(1.0, float(target))
            pairs = np.stack([i[keep], j[keep]], axis=1).astype(np.int32)
            cache[order] = _readonly(pairs)
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
        if self.is_hypercubic and self.kind in ("chain", "square", "hypercubic"):
            return f"Lattice(shape={self.shape}, pbc={self.pbc})"
        return f"Lattice(shape={self.shape}, pbc={self.pbc}, kind={self.kind!r}, n_basis={self.n_basis})"


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


def _cells(L1, L2, kind: str, n_basis: int):
    L1 = positive_int(L1, "L1")
    L2 = L1 if L2 is None else positive_int(L2, "L2")
    if L1 * L2 * n_basis < 2:
        raise ValueError(f"L1, L2: a {kind} lattice needs at least 2 sites, got {L1}x{L2} cells")
    return L1, L2


def Triangular(L1: int, L2: int | None = None, pbc=True) -> Lattice:
    """A triangular lattice of ``L1 x L2`` sites (``L2=None``: ``L2 = L1``).

    ``a_1 = (1, 0)``, ``a_2 = (1/2, sqrt(3)/2)`` (60 degrees; nearest-neighbour distance 1);
    periodic: the torus spanned by ``L1 a_1`` and ``L2 a_2`` (``L x L``: the rhombic
    cluster with the full hexagonal symmetry). Site ``(c_1, c_2)`` is ``c_1 * L2 + c_2``.
    """
    L1, L2 = _cells(L1, L2, "triangular", 1)
    return Lattice((L1, L2), pbc, "triangular", ((1.0, 0.0), (0.5, _S3 / 2)), ((0.0, 0.0),))


def Honeycomb(L1: int, L2: int | None = None, pbc=True) -> Lattice:
    """A honeycomb lattice of ``L1 x L2`` cells, 2 sites each (``2 L1 L2`` sites).

    ``a_1 = (sqrt(3), 0)``, ``a_2 = (sqrt(3)/2, 3/2)``; basis ``(0, 0)`` (sublattice A,
    ``b = 0``) and ``(sqrt(3)/2, 1/2)`` (B, ``b = 1``): nearest-neighbour distance 1.
    Site ``b`` of cell ``(c_1, c_2)`` is ``2 (c_1 L2 + c_2) + b``.
    """
    L1, L2 = _cells(L1, L2, "honeycomb", 2)
    return Lattice(
        (L1, L2), pbc, "honeycomb", ((_S3, 0.0), (_S3 / 2, 1.5)), ((0.0, 0.0), (_S3 / 2, 0.5))
    )


def Kagome(L1: int, L2: int | None = None, pbc=True) -> Lattice:
    """A kagome lattice of ``L1 x L2`` cells, 3 sites each (``3 L1 L2`` sites).

    ``a_1 = (2, 0)``, ``a_2 = (1, sqrt(3))``; basis ``(0, 0)``, ``a_1 / 2 = (1, 0)`` and
    ``a_2 / 2 = (1/2, sqrt(3)/2)``: corner-sharing triangles, nearest-neighbour distance 1.
    Site ``b`` of cell ``(c_1, c_2)`` is ``3 (c_1 L2 + c_2) + b``.
    """
    L1, L2 = _cells(L1, L2, "kagome", 3)
    return Lattice(
        (L1, L2), pbc, "kagome", ((2.0, 0.0), (1.0, _S3)), ((0.0, 0.0), (1.0, 0.0), (0.5, _S3 / 2))
    )


# the lattices whose names parse back: kind -> constructor of shape (L1, L2) and pbc
CONSTRUCTORS = {"triangular": Triangular, "honeycomb": Honeycomb, "kagome": Kagome}
_BOUNDARY = r"(?:\s*:\s*(open|obc|periodic|pbc))?\s*"
_EXAMPLES = "'4x4', '6x4', 'chain:20', 'triangular:6x6', 'honeycomb:3x3', 'kagome:2x3' (':open' for open boundaries)"


def parse_lattice(text) -> Lattice:
    """A lattice from its name (:attr:`Lattice.name`): ``'Lx'x'Ly'`` -> :func:`Square`,
    ``'L1xL2x...'`` (3 or more axes) -> hypercubic, ``'chain:L'`` -> :func:`Chain`,
    ``'triangular:6x6'`` / ``'honeycomb:3x3'`` / ``'kagome:2x3'`` -> ``L1 x L2`` unit cells;
    ``':open'`` after any of them: open boundaries (default periodic). A
    :class:`Lattice` is returned as it is. ``ValueError`` naming ``lattice`` otherwise."""
    if isinstance(text, Lattice):
        return text
    if not isinstance(text, str):
        raise TypeError(f"lattice: expected a lattice name such as {_EXAMPLES} or a Lattice, got {text!r}")
    lower = text.lower()
    try:
        m = re.fullmatch(r"\s*(\d+(?:\s*x\s*\d+)+)" + _BOUNDARY, lower)
        if m:
            shape = tuple(int(x) for x in m.group(1).split("x"))
            pbc = m.group(2) in (None, "periodic", "pbc")
            return Square(*shape, pbc=pbc) if len(shape) == 2 else Lattice(shape, pbc)
        m = re.fullmatch(r"\s*chain\s*:\s*(\d+)" + _BOUNDARY, lower)
        if m:
            return Chain(int(m.group(1)), pbc=m.group(2) in (None, "periodic", "pbc"))
        m = re.fullmatch(r"\s*([a-z]+)\s*:\s*(\d+)\s*x\s*(\d+)" + _BOUNDARY, lower)
        if m and m.group(1) in CONSTRUCTORS:
            pbc = m.group(4) in (None, "periodic", "pbc")
            return CONSTRUCTORS[m.group(1)](int(m.group(2)), int(m.group(3)), pbc=pbc)
    except ValueError as err:
        raise ValueError(f"lattice: {text!r}: {err}") from None
    raise ValueError(f"lattice: cannot read {text!r}; expected e.g. {_EXAMPLES}.")
