"""Symmetry groups of a lattice as permutation tables with characters.

An element ``g`` acts on a spin configuration ``s`` (``(..., n_sites)``, entries +-1) as

    (g s)[i] = flips[g] * s[perms[g, i]]

(a site permutation, optionally followed by global spin inversion). Applying ``h``
first and then ``g`` gives the element with ``perms = perms[h][perms[g]]`` and
``flips = flips[g] * flips[h]``.

Sector convention. A state in the sector with characters ``chi`` is the projection

    psi(s) = sum_g chi[g] * psi_0(g s),   hence   psi(g s) = psi(s) / chi[g],
    i.e.  log psi(g s) = log psi(s) - log chi[g],

which holds because ``chi`` is a one-dimensional representation,
``chi(g h) = chi(g) chi(h)``. Every :class:`Symmetry` is checked on construction: the
arrays by :func:`group_table` (each row of ``perms`` is a permutation, ``flips`` are +-1,
``characters`` finite; the one check of a table, also used by the models), then the
group axioms: the identity is an element, no element is repeated, the set is closed
under composition and ``characters`` is a 1-D representation. Violations raise
``ValueError``.

Momentum. ``translations(lattice, momentum=k)`` gives the translation ``T_r``
(``(T_r s)[x] = s[x + r]``) the character ``chi(T_r) = exp(+i k.r)``, so a state of the
sector satisfies ``psi(T_r s) = exp(-i k.r) psi(s)``: a single spin flip at ``x`` carries
the plane wave ``exp(+i k.x)`` (the usual meaning of "momentum k"). Translations move
whole unit cells (``r`` is the real-space cell displacement ``R = c @ lattice.vectors``
of the cell offset ``c``; every site keeps its place ``b`` in the cell). ``k`` is a
Cartesian wave vector (radians per unit length) on the reciprocal lattice of the
cluster, ``k = sum_d m_d b_d / shape[d]`` (:func:`allowed_momenta`); on chain and square
lattices that is a multiple of ``2 pi / L`` along every axis.

Point groups of lattices other than the chain and square tables are detected from the
site positions (:func:`point_group` with ``kind="full"``, :func:`point_group_kind`).

Spin inversion maps the sector of magnetization ``Sz`` to ``-Sz``; it is a symmetry of a
sector only for ``Sz = 0`` (or in the unconstrained space), so use :func:`spin_inversion`
only there.
"""
from __future__ import annotations

import dataclasses
import itertools
from functools import cached_property

import numpy as np

from quantax_lite.geometry.lattice import Lattice, site_coords

__all__ = [
    "Symmetry",
    "group_table",
    "identity",
    "translations",
    "allowed_momenta",
    "point_group",
    "point_group_kind",
    "spin_inversion",
    "product",
    "little_group",
    "rotation_characters",
    "full_symmetry",
]

_ATOL = 1e-10


def _element_key(perm: np.ndarray, flip: int) -> bytes:
    return np.ascontiguousarray(perm, dtype=np.int32).tobytes() + (b"+" if flip > 0 else b"-")


def _compose(perm_g, flip_g, perm_h, flip_h):
    """The element "apply h, then g"."""
    return perm_h[perm_g], flip_g * flip_h


def group_table(perms, flips=None, characters=None, n_sites: int | None = None):
    """Check the arrays of a table of group elements; return fresh normalized copies.

    Args:
      perms: ``(G, N)`` ints, ``G, N >= 1``, every row a permutation of ``range(N)``.
      flips: ``(G,)`` of +1/-1 (spin inversion); ``None``: all +1.
      characters: ``(G,)`` finite complex numbers, not all zero; ``None``: all 1.
      n_sites: the expected ``N`` (optional).

    Returns ``(perms int32 (G, N), flips int8 (G,), characters complex128 (G,))`` numpy
    arrays (new arrays, never the caller's). Raises ValueError/TypeError naming the
    array. The group axioms (identity, closure, a 1-D representation) are checked by
    :class:`Symmetry` only: a table of representatives with summed weights
    (``models.merge_translation_images``) passes this check.
    """
    perms = np.asarray(perms)
    if perms.ndim != 2 or perms.shape[0] == 0 or perms.shape[1] == 0:
        raise ValueError(f"perms: expected an int array of shape (n_elements, n_sites), got shape {perms.shape}")
    if not np.issubdtype(perms.dtype, np.integer):
        raise TypeError(f"perms: expected integers, got dtype {perms.dtype}")
    G, N = perms.shape
    if n_sites is not None and N != n_sites:
        raise ValueError(f"perms: expected {n_sites} sites per row (the lattice's), got {N}")
    if not np.array_equal(np.sort(perms, axis=1), np.broadcast_to(np.arange(N), (G, N))):
        raise ValueError(f"perms: every row must be a permutation of range({N})")
    flips = np.ones(G, np.int8) if flips is None else np.asarray(flips)
    if flips.shape != (G,) or not np.all((flips == 1) | (flips == -1)):
        raise ValueError(f"flips: expected shape ({G},) with entries +1 or -1, got {flips!r}")
    if characters is None:
        characters = np.ones(G, np.complex128)
    else:
        characters = np.array(characters, dtype=np.complex128, copy=True)
    if characters.shape != (G,) or not np.all(np.isfinite(characters)):
        raise ValueError(f"characters: expected {G} finite complex numbers, got shape {characters.shape}")
    if not np.any(characters != 0):
        raise ValueError("characters: all zero, the projected state would vanish")
    return perms.astype(np.int32), flips.astype(np.int8), characters


@dataclasses.dataclass(frozen=True, eq=False)
class Symmetry:
    """A finite group of site permutations (with optional spin inversion) and its characters.

    Attributes:
      perms: ``(G, n_sites)`` int32, ``(g s)[i] = flips[g] * s[perms[g, i]]``.
      flips: ``(G,)`` int8, +1 or -1 (global spin inversion).
      characters: ``(G,)`` complex128, a 1-D representation of the group.
      lattice: the :class:`~quantax_lite.geometry.lattice.Lattice` the group was built for (set by
        the builders of this module; ``None`` for a table given by hand). Functions that
        pair a group with a lattice (``make_conv_nqs``, ``make_rbm_nqs``,
        ``exact.ground_state``) reject a group of another lattice, and :func:`product`
        multiplies only groups of one lattice.

    Arrays are read-only; instances are hashable and compare by value (perms, flips,
    characters; not the lattice), so they can be attributes of flax modules or static
    arguments of ``jax.jit``.
    """

    perms: np.ndarray
    flips: np.ndarray
    characters: np.ndarray
    lattice: Lattice | None = None

    def __post_init__(self):
        perms, flips, chars = group_table(self.perms, self.flips, self.characters)
        n = perms.shape[1]
        if self.lattice is not None:
            if not isinstance(self.lattice, Lattice):
                raise TypeError(
                    "lattice: expected a quantax_lite.geometry.lattice.Lattice or None, "
                    f"got {type(self.lattice).__name__}"
                )
            if self.lattice.n_sites != n:
                raise ValueError(f"lattice: has {self.lattice.n_sites} sites, the group acts on {n}")

        for a in (perms, flips, chars):
            a.setflags(write=False)
        object.__setattr__(self, "perms", perms)
        object.__setattr__(self, "flips", flips)
        object.__setattr__(self, "characters", chars)
        self._validate_group()

    # ------------------------------------------------------------------ validation
    def _validate_group(self):
        G, n = self.perms.shape
        index = {}
        for g in range(G):
            key = _element_key(self.perms[g], self.flips[g])
            if key in index:
                raise ValueError(
                    f"perms/flips: elements {index[key]} and {g} are the same group element "
                    "(every element must appear once)"
                )
            index[key] = g
        e = _element_key(np.arange(n), 1)
        if e not in index:
            raise ValueError("perms/flips: the identity element is missing")
        if abs(self.characters[index[e]] - 1) > _ATOL:
            raise ValueError(
                f"characters: the identity must have character 1, got {self.characters[index[e]]}"
            )

        # Grow the generated subgroup from a greedy generating set; every product of an
        # element with a generator must lie in the set (closure) and respect the characters.
        generators: list[int] = []
        reached = {index[e]}
        for g in range(G):
            if g in reached:
                continue
            generators.append(g)
            reached = {index[e]}
            frontier = [index[e]]
            while frontier:
                new = []
                for x in frontier:
                    for a in generators:
                        p, f = _compose(self.perms[x], self.flips[x], self.perms[a], self.flips[a])
                        y = index.get(_element_key(p, f))
                        if y is None:
                            raise ValueError(
                                f"perms/flips: not closed under composition (element {a} "
                                f"applied before element {x} gives an element outside the group)"
                            )
                        expected = self.characters[x] * self.characters[a]
                        if abs(self.characters[y] - expected) > 1e-8:
                            raise ValueError(
                                "characters: not a one-dimensional representation "
                                f"(chi[{y}] = {self.characters[y]:.6g} but chi[{x}] * chi[{a}] "
                                f"= {expected:.6g}); the chosen sector does not fit this group"
                            )
                        if y not in reached:
                            reached.add(y)
                            new.append(y)
                frontier = new
        object.__setattr__(self, "_generators", tuple(generators))

    # ------------------------------------------------------------------ properties
    @property
    def n_elements(self) -> int:
        return int(self.perms.shape[0])

    @property
    def n_sites(self) -> int:
        return int(self.perms.shape[1])

    @property
    def generators(self) -> tuple[int, ...]:
        """Indices of a generating set of the group."""
        return self._generators

    @property
    def has_spin_inversion(self) -> bool:
        return bool(np.any(self.flips < 0))

    @property
    def is_trivial_sector(self) -> bool:
        """All characters equal 1 (the fully symmetric sector)."""
        return bool(np.allclose(self.characters, 1.0, atol=_ATOL))

    @cached_property
    def inverse(self) -> np.ndarray:
        """Index of the inverse of every element, ``(G,)`` int."""
        index = {_element_key(p, f): g for g, (p, f) in enumerate(zip(self.perms, self.flips))}
        inv = np.empty(self.n_elements, dtype=np.int64)
        for g in range(self.n_elements):
            inv[g] = index[_element_key(np.argsort(self.perms[g]), self.flips[g])]
        inv.setflags(write=False)
        return inv

    def sector_dimension(self, total_sz: float | None = 0) -> int:
        """How many independent states of the magnetization sector ``total_sz`` (spin-1/2
        units, ``sum(s) / 2``; None: all ``2**n_sites`` configurations) transform with these
        characters: the trace of the projector onto the group's sector, ``(1/G) sum_g
        chi_g fix(g)``, where ``fix(g)`` counts the configurations that ``g`` leaves
        unchanged (from its cycles: constant along each cycle without spin inversion,
        alternating along cycles of even length with it). 0 means that no wavefunction of
        this symmetry exists there. Exact while the counts stay below ``2**53`` (up to
        about 54 sites at Sz = 0); above, a float64 estimate of a very large number."""
        from quantax_lite.hilbert.configurations import n_up as up_spins

        n = self.n_sites
        n_up = up_spins(n, total_sz)  # ValueError naming total_sz for a sector that does not exist
        by_character, by_cycles = {}, {}  # exact integer counts, summed per distinct character
        for perm, flip, chi in zip(self.perms, self.flips, self.characters):
            cycles = tuple(sorted(_cycle_lengths(perm)))
            if (cycles, flip) in by_cycles:
                fixed = by_cycles[cycles, flip]
            elif flip < 0:  # s_perm[i] = -s_i: every cycle even and alternating; Sz = 0
                fixed = 2 ** len(cycles) if all(c % 2 == 0 for c in cycles) and n_up in (None, n // 2) else 0
            elif n_up is None:
                fixed = 2 ** len(cycles)
            else:  # subsets of the cycles holding n_up sites
                ways = [1] + [0] * n_up
                for c in cycles:
                    for k in range(n_up, c - 1, -1):
                        ways[k] += ways[k - c]
                fixed = ways[n_up]
            by_cycles[cycles, flip] = fixed
            key = (round(chi.real, 9), round(chi.imag, 9))
            by_character[key] = by_character.get(key, 0) + fixed
        trace = sum(complex(*chi) * float(count) for chi, count in by_character.items()) / self.n_elements
        return int(round(trace.real))

    # ------------------------------------------------------------------ action
    def apply(self, s):
        """All images ``g s``: ``s`` (..., n_sites) -> (..., G, n_sites), same array type and dtype.

        Works on numpy and jax arrays (also inside ``jax.jit``).
        """
        if s.shape[-1] != self.n_sites:
            raise ValueError(f"s: expected last axis of length {self.n_sites}, got shape {s.shape}")
        images = s[..., self.perms]
        if self.has_spin_inversion:
            images = images * self.flips.astype(images.dtype)[:, None]
        return images

    # ------------------------------------------------------------------ algebra
    def __mul__(self, other: "Symmetry") -> "Symmetry":
        return product(self, other)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Symmetry):
            return NotImplemented
        return (
            self.perms.shape == other.perms.shape
            and np.array_equal(self.perms, other.perms)
            and np.array_equal(self.flips, other.flips)
            and np.array_equal(self.characters, other.characters)
        )

    def __hash__(self) -> int:
        return hash(
            (self.perms.shape, self.perms.tobytes(), self.flips.tobytes(), self.characters.tobytes())
        )

    def __repr__(self) -> str:
        return (
            f"Symmetry(n_elements={self.n_elements}, n_sites={self.n_sites}, "
            f"spin_inversion={self.has_spin_inversion}, trivial_sector={self.is_trivial_sector}"
            + ("" if self.lattice is None else f", lattice={self.lattice.name}")
            + ")"
        )


# ---------------------------------------------------------------------- builders
def _cycle_lengths(perm: np.ndarray) -> list[int]:
    """Lengths of the cycles of the permutation ``perm`` (fixed points included)."""
    seen = np.zeros(len(perm), dtype=bool)
    lengths = []
    for start in range(len(perm)):
        if not seen[start]:
            length, i = 0, start
            while not seen[i]:
                seen[i], i, length = True, int(perm[i]), length + 1
            lengths.append(length)
    return lengths


def _from_elements(elements, n_sites: int, lattice: Lattice | None = None) -> Symmetry:
    """Build a Symmetry from ``(perm, flip, character)`` triples, merging repeated elements.

    Raises ValueError when one element appears with two different characters.
    """
    seen: dict[bytes, int] = {}
    perms, flips, chars = [], [], []
    for perm, flip, chi in elements:
        key = _element_key(perm, flip)
        if key in seen:
            j = seen[key]
            if abs(chars[j] - chi) > 1e-8:
                raise ValueError(
                    "characters: one group element is reached twice with different characters "
                    f"({chars[j]:.6g} and {chi:.6g}); the sector is not allowed for this lattice"
                )
            continue
        seen[key] = len(perms)
        perms.append(np.asarray(perm, dtype=np.int32))
        flips.append(int(flip))
        chi = complex(chi)
        # exp(i k r) leaves ~1e-16 rounding; snap it so that sectors compare exactly
        chi = complex(0.0 if abs(chi.real) < 1e-14 else chi.real, 0.0 if abs(chi.imag) < 1e-14 else chi.imag)
        chars.append(chi)
    return Symmetry(
        np.stack(perms).reshape(len(perms), n_sites),
        np.array(flips, dtype=np.int8),
        np.array(chars, dtype=np.complex128),
        lattice,
    )


def _check_lattice(lattice) -> Lattice:
    if not isinstance(lattice, Lattice):
        raise TypeError(f"lattice: expected a quantax_lite.geometry.lattice.Lattice, got {type(lattice).__name__}")
    return lattice


def identity(lattice: Lattice) -> Symmetry:
    """The trivial group (one element, character 1)."""
    lattice = _check_lattice(lattice)
    return _from_elements([(np.arange(lattice.n_sites), 1, 1.0)], lattice.n_sites, lattice)


def translations(lattice: Lattice, momentum=None) -> Symmetry:
    """All translations by whole cells of a periodic lattice, in the momentum sector ``momentum``.

    Args:
      lattice: a periodic :class:`Lattice` (``n_cells = prod(shape)`` translations).
      momentum: ``None`` (k = 0) or the wave vector ``k`` as ``ndim`` floats, in radians
        per unit length, in the Cartesian frame of ``lattice.positions``. The translation
        ``T_R`` by the cell displacement ``R = r @ lattice.vectors`` (``r`` integer) has
        ``chi(T_R) = exp(+i k.R)``. ``k`` must lie on the reciprocal lattice of the
        cluster: ``k = sum_d m_d b_d / shape[d]`` with integers ``m_d`` and the reciprocal
        vectors ``b_d`` (:attr:`Lattice.reciprocal_vectors`), i.e. ``k . a_d`` a multiple of
        ``2 pi / shape[d]`` (:func:`allowed_momenta` lists them); on a chain or square
        lattice ``a_d`` are the unit vectors, so every component is a multiple of
        ``2 pi / L``. Anything else raises ValueError naming ``momentum``.

    Element order: cells ``r`` in row-major order (the identity first), so element ``g``
    is the translation by ``site_coords(lattice.shape)[g]`` (``lattice.coords[g]`` on a
    lattice with one site per cell); it moves site ``b`` of cell ``c`` to site ``b`` of
    cell ``c + r``: ``perms[g, site(c, b)] = site(c + r, b)``.
    """
    lattice = _check_lattice(lattice)
    if not lattice.pbc:
        raise ValueError(
            f"lattice: translations need periodic boundaries, got the open lattice {lattice.name}"
        )
    if momentum is None:
        k = np.zeros(lattice.ndim)
    else:
        k = np.atleast_1d(np.asarray(momentum, dtype=np.float64))
        if k.shape != (lattice.ndim,) or not np.all(np.isfinite(k)):
            raise ValueError(
                f"momentum: expected {lattice.ndim} finite component(s) for lattice {lattice.name}, got {momentum!r}"
            )
        m = (lattice.vectors @ k) * np.asarray(lattice.shape) / (2 * np.pi)
        if lattice.is_hypercubic:
            for d, (kd, L) in enumerate(zip(k, lattice.shape)):
                if abs(m[d] - np.round(m[d])) > 1e-8:
                    raise ValueError(
                        f"momentum: component {d} = {float(kd)!r} is not allowed on an axis of length {L}; "
                        f"it must be a multiple of 2*pi/{L} (radians)"
                    )
        elif np.any(np.abs(m - np.round(m)) > 1e-8):
            raise ValueError(
                f"momentum: {momentum!r} is not on the reciprocal lattice of the cluster {lattice.name}: "
                f"k . a_d * shape[d] / (2 pi) = {np.round(m, 6).tolist()} must be integers "
                "(see symmetry.allowed_momenta)"
            )
    cells = site_coords(lattice.shape)
    sites = lattice.cell_coords
    b = lattice.basis_index
    elements = []
    for r in cells:
        perm = lattice.site_index(sites + r, b)
        R = r @ lattice.vectors
        elements.append((perm, 1, np.exp(1j * float(np.dot(k, R)))))
    return _from_elements(elements, lattice.n_sites, lattice)


def allowed_momenta(lattice: Lattice) -> np.ndarray:
    """Every momentum sector of the periodic ``lattice``: ``(n_cells, ndim)`` float64 wave
    vectors ``k = sum_d m_d b_d / shape[d]``, ``0 <= m_d < shape[d]`` in row-major order of
    ``m`` (the convention of :func:`translations`; ``k = 0`` first)."""
    lattice = _check_lattice(lattice)
    m = site_coords(lattice.shape).astype(np.float64)
    return (m / np.asarray(lattice.shape, dtype=np.float64)) @ lattice.reciprocal_vectors


def _site_map_perm(lattice: Lattice, f) -> np.ndarray:
    """The permutation ``perm[i] = index(f(coords[i]))`` for a lattice automorphism ``f``."""
    new = np.asarray(f(lattice.coords))
    return lattice.site_index(new)


# ------------------------------------------------------------- point groups
_N_ANGLES = 12  # candidate operations: rotations by k * 30 degrees, mirrors about axes at k * 15 degrees
_GEOM_TOL = 1e-6


def _candidate_operations(ndim: int):
    """``[(label, matrix)]``: the orthogonal maps tried by the detection, in element order.

    1-D: identity and ``x -> -x``. 2-D: rotations ``R_k`` by ``k * 30`` degrees
    (``k = 0..11``), then mirrors ``m_k = R_k diag(1, -1)`` about the axis at ``k * 15``
    degrees. Every point operation of a 2-D lattice is one of them.
    """
    if ndim == 1:
        return [("e", np.eye(1)), ("m0", -np.eye(1))]
    if ndim != 2:
        raise ValueError(f"lattice: point groups are defined for 1-D and 2-D lattices, got ndim={ndim}")
    out = []
    for k in range(_N_ANGLES):
        t = 2 * np.pi * k / _N_ANGLES
        out.append((f"R{k}", np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])))
    for k in range(_N_ANGLES):
        out.append((f"m{k}", out[k][1] @ np.diag([1.0, -1.0])))
    return out


def _locate(lattice: Lattice, x: np.ndarray) -> np.ndarray:
    """Site index of every real-space position ``x`` ``(..., ndim)`` (wrapped into the
    periodic cluster), -1 where no site sits there."""
    x = np.asarray(x, dtype=np.float64)
    inv = np.linalg.inv(lattice.vectors)
    shape = np.asarray(lattice.shape)
    out = np.full(x.shape[:-1], -1, dtype=np.int64)
    for b, offset in enumerate(lattice.basis):
        c = (x - offset) @ inv
        ci = np.round(c)
        ok = np.all(np.abs(c - ci) < _GEOM_TOL, axis=-1)
        ci = ci.astype(np.int64)
        if lattice.pbc:
            ci = np.mod(ci, shape)
        else:
            ok &= np.all((ci >= 0) & (ci < shape), axis=-1)
        ci = np.where(ok[..., None], ci, 0)
        idx = np.ravel_multi_index(tuple(np.moveaxis(ci, -1, 0)), lattice.shape) * lattice.n_basis + b
        out = np.where(ok & (out < 0), idx, out)
    return out


def _keeps_periods(lattice: Lattice, O: np.ndarray) -> bool:
    """``O`` maps the lattice of periods of the cluster (and the Bravais lattice) onto itself."""
    for P in (lattice.vectors,) + ((lattice.periods,) if lattice.pbc else ()):
        C = P @ O.T @ np.linalg.inv(P)
        if np.any(np.abs(C - np.round(C)) > _GEOM_TOL) or abs(abs(np.linalg.det(np.round(C))) - 1) > 0.5:
            return False
    return True


def _centres(lattice: Lattice) -> np.ndarray:
    """Candidate centres of point operations: sites first, then midpoints of pairs of sites
    (with one site in cell 0 and the minimum image under periodic boundaries)."""
    pos = lattice.positions
    if lattice.pbc:
        first = pos[: lattice.n_basis]
        d = lattice._min_image(pos[None, :, :] - first[:, None, :])
        mids = (first[:, None, :] + d / 2).reshape(-1, lattice.ndim)
        cands = np.concatenate([first, mids])
        # centres that differ by a Bravais vector give the same group (up to a translation)
        frac = cands @ np.linalg.inv(lattice.vectors)
        key_src = frac - np.floor(frac + _GEOM_TOL)
    else:
        i, j = np.triu_indices(lattice.n_sites, k=1)
        cands = np.concatenate([pos, (pos[i] + pos[j]) / 2])
        key_src = cands
    _, first_idx = np.unique(np.round(key_src / _GEOM_TOL / 100).astype(np.int64), axis=0, return_index=True)
    return cands[np.sort(first_idx)]


def _detected_operations(lattice: Lattice):
    """For every candidate centre, the point operations about it that map the cluster onto
    itself: ``[(centre, {label: perm})]`` in the order of :func:`_centres`."""
    cache = lattice.__dict__.setdefault("_point_operations", None)
    if cache is not None:
        return cache
    ops = [(lab, O) for lab, O in _candidate_operations(lattice.ndim) if _keeps_periods(lattice, O)]
    pos = lattice.positions
    out = []
    for p in _centres(lattice):
        found = {}
        for lab, O in ops:
            perm = _locate(lattice, (pos - p) @ O.T + p)
            if np.all(perm >= 0) and len(np.unique(perm)) == lattice.n_sites:
                found[lab] = perm
        out.append((p, found))
    lattice.__dict__["_point_operations"] = out
    return out


def _group_name(labels, ndim: int) -> str:
    n_rot = sum(1 for lab in labels if lab.startswith("R") or lab == "e")
    mirrors = any(lab.startswith("m") for lab in labels)
    if ndim == 1:
        return "reflection" if mirrors else "C1"
    if n_rot == 1:
        return "Cs" if mirrors else "C1"
    return f"C{n_rot}" + ("v" if mirrors else "")


def point_group_kind(lattice: Lattice) -> str:
    """Name of the largest point group of the cluster, detected from its geometry:
    ``"C6v"``, ``"C4v"``, ``"C3v"``, ``"C2v"``, ``"C6"``, ..., ``"Cs"``, ``"C1"`` (2-D),
    ``"reflection"`` (1-D). See :func:`point_group` with ``kind="full"``."""
    lattice = _check_lattice(lattice)
    best = max(_detected_operations(lattice), key=lambda c: len(c[1]))
    return _group_name(best[1], lattice.ndim)


def _parse_kind(kind: str):
    """``"C6v"`` -> (6, True); ``"C3"`` -> (3, False); ``"Cs"`` -> (1, True); else None."""
    if kind == "Cs":
        return 1, True
    if isinstance(kind, str) and len(kind) >= 2 and kind[0] == "C" and kind[1:].rstrip("v").isdigit():
        n = int(kind[1:].rstrip("v"))
        if n in (1, 2, 3, 4, 6) and kind[1:].count("v") <= 1:
            return n, kind.endswith("v")
    return None


def _select(found: dict, n: int, mirrors: bool, ndim: int):
    """The labels of the subgroup C_n (with mirrors: C_nv) of the operations ``found``, or None."""
    if ndim == 1:
        want = ["e"] + (["m0"] if mirrors else [])
        return want if all(w in found for w in want) and n == 1 else None
    if _N_ANGLES % n:
        return None
    step = _N_ANGLES // n
    rots = [f"R{step * j}" for j in range(n)]
    if not all(r in found for r in rots):
        return None
    if not mirrors:
        return rots
    for k in range(_N_ANGLES):  # the first mirror found; the others follow by rotation
        if f"m{k}" in found:
            return rots + [f"m{(k + step * j) % _N_ANGLES}" for j in range(n)]
    return None


def _with_characters(lattice: Lattice, perms, kind, characters) -> Symmetry:
    if characters is None:
        chars = np.ones(len(perms), dtype=np.complex128)
    else:
        chars = np.asarray(characters, dtype=np.complex128)
        if chars.shape != (len(perms),):
            raise ValueError(f"characters: expected {len(perms)} values for {kind}, got shape {chars.shape}")
    return _from_elements([(p, 1, chi) for p, chi in zip(perms, chars)], lattice.n_sites, lattice)


def _detected_point_group(lattice: Lattice, kind: str, characters) -> Symmetry:
    centres = _detected_operations(lattice)
    if kind == "full":
        p, found = max(centres, key=lambda c: len(c[1]))
        labels = list(found)
    else:
        parsed = _parse_kind(kind) if lattice.ndim == 2 else ((1, True) if kind == "reflection" else None)
        if parsed is None:
            raise ValueError(
                f"kind: expected None, 'full', 'reflection' (chain) or a 2-D point group such as 'C6v', "
                f"'C4v', 'C3v', 'C2v', 'C6', 'C3', 'C2', 'Cs', got {kind!r}"
            )
        labels = None
        for p, found in centres:
            labels = _select(found, parsed[0], parsed[1], lattice.ndim)
            if labels is not None:
                break
        if labels is None:
            raise ValueError(
                f"kind: the cluster {lattice.name} has no {kind} point group (its full point "
                f"group is {point_group_kind(lattice)}); use kind='full'"
            )
    return _with_characters(lattice, [found[lab] for lab in labels], kind, characters)


def point_group(lattice: Lattice, kind: str | None = None, characters=None) -> Symmetry:
    """The point group of the lattice (operations about one centre, so also for open boundaries).

    Args:
      lattice: a 1-D or 2-D :class:`Lattice`.
      kind: for a chain or square lattice, ``None`` picks the natural group:
        ``"reflection"`` (2 elements: x -> L-1-x) for a chain, ``"C4v"`` (8 elements:
        rotations by 90 degrees and reflections about the lattice's centre) for a square
        ``Lx == Ly`` lattice; ``"C2v"`` (4 elements: the two axis reflections) fits any
        rectangle; C4v on a rectangle raises ValueError. On any other lattice ``None`` is
        ``"full"``.
        ``"full"``: the largest point group of the cluster, detected from the geometry:
        every rotation (by a multiple of 30 degrees) and mirror (about an axis at a
        multiple of 15 degrees) about a centre (a site or the midpoint of two sites) that
        maps the Bravais lattice and the lattice of periods of the cluster onto
        themselves and the set of site positions onto itself (modulo the periods). The
        centre with the most operations wins (sites first). :func:`point_group_kind` names it.
        A named group (``"C6v"``, ``"C6"``, ``"C4"``, ``"C3v"``, ``"C3"``, ``"C2v"``, ``"C2"``,
        ``"Cs"``; ``"C4v"``/``"C2v"`` on a square lattice as above): the subgroup of the
        detected operations about the first centre that has it; a cluster without it
        raises ValueError naming ``kind`` (e.g. C6v on a triangular 4x3 cluster).
      characters: ``None`` (all 1, the symmetric sector) or one character per element, in
        the order listed below; must form a 1-D representation.

    Element order: chain ``[e, m]``; C2v (square) ``[e, mx, my, mx my]``; C4v (square)
    ``[e, R, R^2, R^3, m, R m, R^2 m, R^3 m]`` with ``R: (x, y) -> (y, L-1-x)`` and
    ``m: (x, y) -> (x, L-1-y)``. Detected groups: rotations by increasing angle (the
    identity first), then mirrors by increasing axis angle (for a named ``Cnv``: the
    first mirror found, then its images under the rotations). Elements that coincide on
    a tiny lattice are merged.
    """
    lattice = _check_lattice(lattice)
    if lattice.ndim not in (1, 2):
        raise ValueError(f"lattice: point groups are defined for 1-D and 2-D lattices, got ndim={lattice.ndim}")
    if lattice.is_hypercubic and kind in (None, "reflection", "C4v", "C2v") and (kind != "reflection" or lattice.ndim == 1):
        return _hypercubic_point_group(lattice, kind, characters)
    return _detected_point_group(lattice, "full" if kind is None else kind, characters)


def _hypercubic_point_group(lattice: Lattice, kind, characters) -> Symmetry:
    """The named groups of chain and square lattices (coordinate maps about the centre)."""
    lattice = _check_lattice(lattice)
    nd = lattice.ndim
    if kind is None:
        kind = "reflection" if nd == 1 else "C4v"
    if nd == 1:
        if kind != "reflection":
            raise ValueError(f"kind: a chain has only the 'reflection' point group, got {kind!r}")
        (L,) = lattice.shape
        maps = [lambda c: c, lambda c: (L - 1) - c]
    elif nd == 2:
        Lx, Ly = lattice.shape
        if kind == "C4v":
            if Lx != Ly:
                raise ValueError(
                    f"lattice: C4v needs a square lattice (Lx == Ly), got {lattice.name}; "
                    "use kind='C2v' for a rectangle"
                )
            L = Lx

            def rot(c, n):
                for _ in range(n):
                    c = np.stack([c[:, 1], (L - 1) - c[:, 0]], axis=1)
                return c

            def mirror(c):
                return np.stack([c[:, 0], (L - 1) - c[:, 1]], axis=1)

            maps = [(lambda c, n=n: rot(c, n)) for n in range(4)]
            maps += [(lambda c, n=n: rot(mirror(c), n)) for n in range(4)]
        elif kind == "C2v":
            maps = [
                lambda c: c,
                lambda c: np.stack([(Lx - 1) - c[:, 0], c[:, 1]], axis=1),
                lambda c: np.stack([c[:, 0], (Ly - 1) - c[:, 1]], axis=1),
                lambda c: np.stack([(Lx - 1) - c[:, 0], (Ly - 1) - c[:, 1]], axis=1),
            ]
        else:
            raise ValueError(f"kind: expected None, 'C4v' or 'C2v' for a 2-D lattice, got {kind!r}")
    else:
        raise ValueError(f"lattice: point groups are defined for 1-D and 2-D lattices, got ndim={nd}")

    perms = [_site_map_perm(lattice, f) for f in maps]
    return _with_characters(lattice, perms, kind, characters)


def spin_inversion(lattice: Lattice, parity: int = 1) -> Symmetry:
    """Z2 global spin flip ``s -> -s`` with character ``parity`` (+1 or -1).

    Only a symmetry of the total-Sz = 0 sector (or of the unconstrained space).
    """
    lattice = _check_lattice(lattice)
    if parity not in (1, -1):
        raise ValueError(f"parity: expected +1 or -1, got {parity!r}")
    e = np.arange(lattice.n_sites)
    return _from_elements([(e, 1, 1.0), (e, -1, float(parity))], lattice.n_sites, lattice)


def product(*groups: Symmetry) -> Symmetry:
    """The product group ``{g1 g2 ... : g_i in groups[i]}`` with characters multiplied.

    Element order: the first group's index varies slowest; elements reached twice are
    merged (ValueError if their characters differ), and the result is validated
    (ValueError if the set is not closed, e.g. the groups do not normalize each other).
    Groups built for different lattices raise ValueError (also with the same number of
    sites); the product knows the groups' common lattice (``None`` if none of them does).
    """
    if not groups:
        raise ValueError("groups: expected at least one Symmetry")
    for i, g in enumerate(groups):
        if not isinstance(g, Symmetry):
            raise TypeError(f"groups[{i}]: expected a Symmetry, got {type(g).__name__}")
    n = groups[0].n_sites
    for i, g in enumerate(groups):
        if g.n_sites != n:
            raise ValueError(f"groups[{i}]: acts on {g.n_sites} sites, groups[0] on {n}")
    lattice, first = None, None
    for i, g in enumerate(groups):
        if g.lattice is None:
            continue
        if lattice is None:
            lattice, first = g.lattice, i
        elif g.lattice != lattice:
            raise ValueError(
                f"groups[{i}]: built for the lattice {g.lattice.name}, groups[{first}] for "
                f"{lattice.name}; a product needs groups of one lattice"
            )
    if len(groups) == 1:
        return groups[0]

    def elements():
        for combo in itertools.product(*(range(g.n_elements) for g in groups)):
            perm = np.arange(n)
            flip = 1
            chi = 1.0 + 0j
            # the combined element applies the last group's element first
            for grp, idx in zip(groups, combo):
                perm, flip = _compose(perm, flip, grp.perms[idx], int(grp.flips[idx]))
                chi *= grp.characters[idx]
            yield perm, flip, chi

    return _from_elements(elements(), n, lattice)


def little_group(group: Symmetry, sector: Symmetry) -> Symmetry:
    """The elements of ``group`` that keep the characters of ``sector``: ``g`` with
    ``chi(g t g^-1) = chi(t)`` for every ``t`` of ``sector`` (usually the translations of
    a momentum ``k``: the point operations that map ``k`` onto itself modulo the
    reciprocal lattice, the little group of ``k``), with ``group``'s characters.

    Every conjugate ``g t g^-1`` must be an element of ``sector`` (``group`` normalizes it,
    as a point group normalizes the translations); ValueError naming ``group`` otherwise.
    ``product(sector, little_group(group, sector))`` is then a group whose characters
    form a 1-D representation.
    """
    for name, g in (("group", group), ("sector", sector)):
        if not isinstance(g, Symmetry):
            raise TypeError(f"{name}: expected a Symmetry, got {type(g).__name__}")
    if group.n_sites != sector.n_sites:
        raise ValueError(f"group: acts on {group.n_sites} sites, sector on {sector.n_sites}")
    index = {_element_key(p, f): t for t, (p, f) in enumerate(zip(sector.perms, sector.flips))}
    keep = []
    for g in range(group.n_elements):
        p, f = group.perms[g], int(group.flips[g])
        p_inv = np.argsort(p)
        ok = True
        for t in range(sector.n_elements):
            # apply g^-1, then t, then g
            q, h = _compose(sector.perms[t], int(sector.flips[t]), p_inv, f)
            q, h = _compose(p, f, q, h)
            u = index.get(_element_key(q, h))
            if u is None:
                raise ValueError(f"group: element {g} does not normalize the sector's group (g t g^-1 of "
                                 f"element {t} lies outside it)")
            if abs(sector.characters[u] - sector.characters[t]) > 1e-8:
                ok = False
                break
        if ok:
            keep.append(g)
    return _from_elements([(group.perms[g], int(group.flips[g]), group.characters[g]) for g in keep],
                          group.n_sites, group.lattice)


def rotation_characters(lattice: Lattice, rotation_parity: int = 1) -> np.ndarray:
    """Characters of the point group of :func:`full_symmetry` (in its element order) in the
    one-dimensional irrep where the rotation by the smallest angle has the character
    ``rotation_parity`` (+1 or -1) and every mirror that of its rotation part: ``R^j`` and
    ``R^j m`` get ``rotation_parity**j``, ``m`` the first mirror (C_nv with even ``n``: an
    irrep B; C2: odd under the rotation by pi). ``(G,)`` float64; all 1 for ``+1``.
    ValueError naming ``rotation_parity`` where the group has no rotation (a chain) or
    only rotations of odd order (C3, C3v: no such irrep)."""
    lattice = _check_lattice(lattice)
    if rotation_parity not in (1, -1):
        raise ValueError(f"rotation_parity: expected +1 or -1, got {rotation_parity!r}")
    if lattice.ndim == 1 or (lattice.is_hypercubic and lattice.ndim != 2):
        if rotation_parity == 1:
            return np.ones(2 if lattice.ndim == 1 else 1)
        raise ValueError(f"rotation_parity: the lattice {lattice.name} has no point-group rotation")
    if lattice.is_hypercubic:
        if lattice.shape[0] != lattice.shape[1]:  # C2v: [e, mx, my, mx my]; my = (mx my) mx
            powers = np.array([0, 0, 1, 1])
        else:  # C4v: [e, R, R^2, R^3, m, R m, R^2 m, R^3 m]
            powers = np.arange(8) % 4
    else:
        _, found = max(_detected_operations(lattice), key=lambda c: len(c[1]))
        labels = list(found)
        angles = [int(lab[1:]) for lab in labels if lab.startswith("R")]
        n_rot = len(angles)
        step = _N_ANGLES // n_rot
        mirrors = [int(lab[1:]) for lab in labels if lab.startswith("m")]
        first = mirrors[0] if mirrors else 0
        # R{k}: rotation by 30 k degrees = R^(k / step); m{k}: axis at 15 k degrees = R^((k - first) / step) m
        powers = np.array([int(lab[1:]) // step if lab.startswith("R") else (int(lab[1:]) - first) // step
                           for lab in labels])
        if rotation_parity == -1 and n_rot % 2:
            raise ValueError(f"rotation_parity: the point group of {lattice.name} ({point_group_kind(lattice)}) "
                             "has rotations of odd order only, no irrep odd under them")
    return np.where(powers % 2 == 1, float(rotation_parity), 1.0)


def full_symmetry(lattice: Lattice, momentum=None, spin_parity: int = 1, rotation_parity: int = 1) -> Symmetry:
    """Translations x point group x spin inversion; all characters 1 by default.

    Periodic lattices get all translations, open ones none. The point group is C4v on a
    square lattice, C2v on a rectangle, the reflection on a chain, and the largest point
    group of the cluster on any other lattice (``point_group(lattice, "full")``, e.g.
    C6v on triangular ``L x L``, honeycomb and kagome ``L x L`` clusters). Spin inversion
    makes this group appropriate for the total-Sz = 0 sector only. 4x4: 16 * 8 * 2 = 256
    elements; triangular 6x6: 36 * 12 * 2 = 864.

    momentum: ``None`` (k = 0) or a wave vector as in :func:`translations` (periodic
    lattices only; ValueError naming ``momentum`` on an open one). For ``k != 0`` the point
    group is cut to the little group of ``k`` (:func:`little_group`: the operations that
    map ``k`` onto itself modulo the reciprocal lattice), its characters 1.
    spin_parity: the character of spin inversion, +1 or -1 (ValueError naming ``spin_parity``).
    rotation_parity: the point group's characters (:func:`rotation_characters`): +1 all 1;
    -1 the irrep odd under the smallest rotation (restricted to the little group of ``k``).
    """
    lattice = _check_lattice(lattice)
    if spin_parity not in (1, -1):
        raise ValueError(f"spin_parity: expected +1 or -1, got {spin_parity!r}")
    parts = []
    if lattice.pbc:
        parts.append(translations(lattice, momentum))
    elif momentum is not None and np.any(np.asarray(momentum, dtype=np.float64) != 0):
        raise ValueError(f"momentum: the open lattice {lattice.name} has no translations, so no momentum "
                         f"sector; got {momentum!r}")
    chars = rotation_characters(lattice, rotation_parity)
    if not lattice.is_hypercubic:
        points = point_group(lattice, "full", characters=chars)
    elif lattice.ndim == 2 and lattice.shape[0] != lattice.shape[1]:
        points = point_group(lattice, "C2v", characters=chars)
    else:
        points = point_group(lattice, characters=chars)
    if parts and not parts[0].is_trivial_sector:
        points = little_group(points, parts[0])
    parts.append(points)
    parts.append(spin_inversion(lattice, spin_parity))
    return product(*parts)
