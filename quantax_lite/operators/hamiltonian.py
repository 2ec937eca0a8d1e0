"""Spin Hamiltonians: the Hamiltonian contract, bond Hamiltonians, local energies, sparse matrices.

The Hamiltonian contract
------------------------
A Hamiltonian is any subclass of :class:`SpinHamiltonian` that gives

* ``lattice`` (a :class:`~quantax_lite.geometry.lattice.Lattice`) or ``n_sites`` (an int);
* ``max_conn``: a static int, the number of connection slots per configuration;
* ``conserves_sz``: a bool, whether H commutes with the total ``S^z``;
* ``connected(s) -> (s_conn, mels)``, jittable: for configurations ``s``
  (``(..., n_sites)`` int8, +-1), ``s_conn`` (``(..., max_conn, n_sites)`` int8) and
  ``mels`` (``(..., max_conn)`` float) with ``H[s, s'] = sum of mels[k] over the slots k
  whose s_conn[k] is s'``, in a layout that depends only on the Hamiltonian:

  - slot 0 is ``s`` itself and carries the diagonal element ``H[s, s]``;
  - a padding slot has ``mels == 0`` (its ``s_conn`` any valid configuration, e.g. ``s``);
  - a configuration may fill several slots (their elements add up).

Nothing else is required (each piece may be a class attribute, a property, a dataclass
field or an instance attribute). From ``connected`` alone the base class gives
:meth:`~SpinHamiltonian.diagonal`, :meth:`~SpinHamiltonian.to_sparse` /
:meth:`~SpinHamiltonian.to_dense` (exact diagonalization, :mod:`quantax_lite.exact.diagonalization`) and
:attr:`~SpinHamiltonian.default_total_sz`; the local-energy engine
(:func:`local_energy`, :func:`make_local_energy`) reads only ``connected``, ``max_conn``
and ``n_sites``. One optional hint, ``mels_can_vanish`` (default True), tells the engine
whether off-diagonal elements can be 0 for some configurations, so that evaluating the
network only on the nonzero ones is worth it (False: every slot is evaluated).

Bond Hamiltonians
-----------------
:class:`BondHamiltonian` is a helper for Hamiltonians made of diagonal ``s_i s_j`` and
``s_i`` terms and off-diagonal "moves" that flip one site or a pair of sites: a subclass
describes them once as :class:`BondTerms` (numpy arrays) and gets a fast vectorized
``connected``, ``diagonal`` and ``to_sparse``. Its layout: slot 0 the diagonal, slot
``1 + m`` move ``m`` applied to ``s`` (the Heisenberg exchange on bond ``m`` of
:attr:`Heisenberg.bonds`, the Ising field on site ``m``) with its matrix element, or --
where that element vanishes (exchange on an aligned pair) -- padding (element 0, ``s``).
:class:`Heisenberg` and :class:`TransverseFieldIsing` are bond Hamiltonians.

Units. :class:`Heisenberg` is in spin-1/2 units, ``S = sigma / 2``:
``H = sum_<ij> J_ij (S^x_i S^x_j + S^y_i S^y_j + delta S^z_i S^z_j) - hz sum_i S^z_i``, i.e.
the diagonal element ``sum J delta s_i s_j / 4 - hz sum s_i / 2`` and the exchange element
``J / 2`` between configurations that differ by swapping an anti-aligned pair.
:class:`TransverseFieldIsing` is in Pauli units: ``H = -J sum_<ij> s^z_i s^z_j - h sum_i s^x_i``.

Writing a new Hamiltonian (``tests/test_new_hamiltonian.py`` has a complete one)::

    @dataclasses.dataclass(frozen=True)
    class StaggeredField(SpinHamiltonian):
        n_sites: int
        h: float
        conserves_sz = True
        max_conn = 1

        def connected(self, s):
            s = jnp.asarray(s, jnp.int8)
            sign = jnp.asarray([(-1) ** i for i in range(self.n_sites)], tuning.wide_dtype())
            diag = -0.5 * self.h * (s.astype(sign.dtype) @ sign)
            return s[..., None, :], diag[..., None]
"""
from __future__ import annotations

import dataclasses
import functools
from functools import cached_property
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from quantax_lite.utils import tuning
from quantax_lite.hilbert.configurations import check_spin_dtype, check_spin_values, states_to_codes, validate_states
from quantax_lite.geometry.lattice import Lattice
from quantax_lite.operators.sign_rules import check_marshall_rule, marshall_sign

__all__ = [
    "SpinHamiltonian",
    "BondHamiltonian",
    "BondTerms",
    "Heisenberg",
    "TransverseFieldIsing",
    "marshall_sign",
    "local_energy",
    "make_local_energy",
]

# configurations (times slots times sites) per block of the generic to_sparse
_SPARSE_BLOCK_ENTRIES = 2**24


def _check_coupling(value, name: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a real number, got {value!r}")
    if not np.isfinite(v):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    return v


def _check_configurations(s, n_sites: int, name: str = "s"):
    """``s`` (..., n_sites) of +-1 (values checked for concrete arrays only), as an array.

    Shape and dtype are checked also inside ``jax.jit`` (at trace time, no cost at run time).
    """
    if not hasattr(s, "shape") or not hasattr(s, "dtype"):
        s = np.asarray(s)
    if s.ndim < 1 or s.shape[-1] != n_sites:
        raise ValueError(
            f"{name}: expected configurations of shape (..., {n_sites}), got shape {tuple(s.shape)}"
        )
    check_spin_dtype(s, name)
    check_spin_values(s, name)
    return s


def check_samples(samples, n_sites: int, log_psi_samples=None):
    """The checks of a local-energy call: ``samples`` (batch, n_sites) of +-1 and the shape
    of ``log_psi_samples``. Values only for concrete arrays."""
    if not hasattr(samples, "shape") or not hasattr(samples, "dtype"):
        samples = np.asarray(samples)
    if samples.ndim != 2 or samples.shape[1] != n_sites:
        raise ValueError(f"samples: expected shape (batch, {n_sites}), got {tuple(samples.shape)}")
    check_spin_dtype(samples, "samples")
    check_spin_values(samples, "samples")
    if log_psi_samples is not None and jnp.shape(log_psi_samples) != (samples.shape[0],):
        raise ValueError(
            f"log_psi_samples: expected shape ({samples.shape[0]},), got {jnp.shape(log_psi_samples)}"
        )
    return samples


# -------------------------------------------------------------------- the contract
class _Required:
    """A piece of the contract a subclass gives (class attribute, property, dataclass field
    or instance attribute). Not visible on the class, so that a dataclass field of the same
    name gets no default from it; read on an instance that lacks it, an AttributeError that
    names it."""

    def __init__(self, what: str):
        self.what = what

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            raise AttributeError(self.name)
        raise AttributeError(
            f"{type(obj).__name__} does not give `{self.name}` ({self.what}); "
            "see the Hamiltonian contract in the SpinHamiltonian docstring"
        )


class _Lattice:
    """``lattice``: None unless a subclass or an instance gives one."""

    def __get__(self, obj, owner=None):
        if obj is None:
            raise AttributeError("lattice")
        return None


class _NSites:
    """``n_sites``: the lattice's, unless a subclass or an instance gives its own."""

    def __get__(self, obj, owner=None):
        if obj is None:
            raise AttributeError("n_sites")
        lattice = obj.lattice
        if lattice is None:
            raise AttributeError(
                f"{type(obj).__name__} gives neither `lattice` nor `n_sites`; "
                "see the Hamiltonian contract in the SpinHamiltonian docstring"
            )
        return lattice.n_sites


def hamiltonian_sizes(hamiltonian) -> tuple[int, int]:
    """``(n_sites, max_conn)`` of a Hamiltonian, checked (TypeError/ValueError naming it)."""
    if not isinstance(hamiltonian, SpinHamiltonian):
        raise TypeError(f"hamiltonian: expected a SpinHamiltonian, got {type(hamiltonian).__name__}")
    try:
        n_sites, max_conn = hamiltonian.n_sites, hamiltonian.max_conn
    except AttributeError as err:
        raise TypeError(f"hamiltonian: {err}") from None
    for name, value in (("n_sites", n_sites), ("max_conn", max_conn)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(
                f"hamiltonian: {type(hamiltonian).__name__}.{name} must be a positive int, got {value!r}"
            )
    return int(n_sites), int(max_conn)


def _check_connected(hamiltonian, batch_shape, s_conn, mels):
    """Shapes of what ``connected`` returned (at trace time inside jit)."""
    n_sites, max_conn = hamiltonian.n_sites, hamiltonian.max_conn
    want = tuple(batch_shape) + (max_conn, n_sites)
    if tuple(jnp.shape(s_conn)) != want or tuple(jnp.shape(mels)) != want[:-1]:
        raise ValueError(
            f"hamiltonian: {type(hamiltonian).__name__}.connected returned shapes "
            f"{tuple(jnp.shape(s_conn))} and {tuple(jnp.shape(mels))}, expected {want} and "
            f"{want[:-1]} (max_conn={max_conn})"
        )


def sparse_basis(states, n_sites: int):
    """A checked basis: ``(states int8 (n, n_sites), codes, order, sorted_codes)``."""
    states = validate_states(np.asarray(states), n_sites, name="states")
    if states.ndim != 2:
        raise ValueError(f"states: expected shape (n, {n_sites}), got {states.shape}")
    codes = states_to_codes(states)
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    if len(codes) > 1 and np.any(sorted_codes[1:] == sorted_codes[:-1]):
        raise ValueError("states: the basis contains repeated configurations")
    return states, codes, order, sorted_codes


def basis_columns(target, order, sorted_codes):
    """Basis rows of the configurations with codes ``target``; ValueError when one is absent."""
    n = len(sorted_codes)
    if len(target) == 0:
        return np.zeros(0, np.int64)
    pos = np.minimum(np.searchsorted(sorted_codes, target), n - 1)
    if n == 0 or not np.all(sorted_codes[pos] == target):
        raise ValueError(
            "states: the Hamiltonian connects the basis to configurations outside it "
            "(choose a sector the Hamiltonian conserves, e.g. total_sz=None)"
        )
    return order[pos]


def csr_from_blocks(rows, cols, vals, n) -> sp.csr_matrix:
    """The n x n sparse matrix (CSR) of lists of row, column and value blocks; duplicates summed."""
    vals = np.concatenate(vals) if vals else np.zeros(0)
    dtype = np.complex128 if np.iscomplexobj(vals) else np.float64
    H = sp.coo_matrix(
        (vals.astype(dtype), (np.concatenate(rows).astype(np.int64), np.concatenate(cols).astype(np.int64))),
        shape=(n, n),
    ).tocsr()
    H.sum_duplicates()
    return H


class SpinHamiltonian:
    """Base of every Hamiltonian, and the contract a new one fulfils.

    A subclass gives (each as a class attribute, a property, a dataclass field or an
    instance attribute):

    * ``lattice`` (a :class:`~quantax_lite.geometry.lattice.Lattice`; ``n_sites`` is then its
      number of sites) or ``n_sites`` (int; ``lattice`` is then None);
    * ``max_conn``: static int, connection slots per configuration;
    * ``conserves_sz``: bool, whether H commutes with the total ``S^z``;
    * ``connected(s) -> (s_conn, mels)``, jittable: ``s`` ``(..., n_sites)`` int8 (+-1) ->
      ``s_conn`` ``(..., max_conn, n_sites)`` int8, ``mels`` ``(..., max_conn)`` float;
      slot 0 is ``s`` itself with the diagonal element ``H[s, s]``; padding slots have
      ``mels == 0`` (``s_conn`` any valid configuration, e.g. ``s``); elements of slots
      that hold the same configuration add up. ``H`` must be real symmetric.

    Nothing else is required. The base class gives, from ``connected`` alone,
    :meth:`diagonal`, :meth:`to_sparse` / :meth:`to_dense` and :attr:`default_total_sz`,
    and :func:`make_local_energy` / :func:`local_energy` use only ``connected``,
    ``max_conn`` and ``n_sites``. Optional hint: ``mels_can_vanish`` (default True):
    False says every off-diagonal slot always has a nonzero element, so the local-energy
    engine evaluates every slot instead of packing the nonzero ones.

    :class:`BondHamiltonian` is a faster route for Hamiltonians of one- and two-site terms.
    """

    lattice = _Lattice()
    n_sites = _NSites()
    max_conn = _Required("a static int: connection slots per configuration")
    conserves_sz = _Required("a bool: whether H commutes with the total S^z")
    mels_can_vanish = True

    def connected(self, s):  # pragma: no cover - the contract
        """Connected configurations and matrix elements (see the class docstring)."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement connected(s); see the Hamiltonian "
            "contract in the SpinHamiltonian docstring"
        )

    @property
    def default_total_sz(self):
        """0 for Sz-conserving Hamiltonians on an even number of sites, else None."""
        return 0 if (self.conserves_sz and self.n_sites % 2 == 0) else None

    # ---------------------------------------------------------------- jax side
    def diagonal(self, s) -> jax.Array:
        """``H[s, s]`` for ``s`` (..., n_sites) -> (...,) float.

        Raises ValueError for a wrong last axis or (concrete arrays) entries other than
        +-1, TypeError for a bool or complex dtype.
        """
        return self._diagonal(jnp.asarray(_check_configurations(s, self.n_sites)))

    def _diagonal(self, s):
        return self.connected(s)[1][..., 0]

    # ---------------------------------------------------------------- numpy side
    def to_sparse(self, states) -> sp.csr_matrix:
        """The matrix ``H[a, b] = <states[a]| H |states[b]>`` as scipy CSR float64.

        ``states``: ``(n, n_sites)`` basis configurations (any order, no repeats), e.g.
        ``hilbert.all_states(n_sites, total_sz)``. Raises ValueError when H leads out of
        the basis (e.g. the Ising field in a fixed-Sz sector).

        Generic: ``connected`` (jitted) on blocks of the basis, every nonzero element
        mapped to its basis row by the configuration's code.
        """
        n_sites, max_conn = hamiltonian_sizes(self)
        states, codes, order, sorted_codes = sparse_basis(states, n_sites)
        n = len(states)
        block = max(1, min(n, _SPARSE_BLOCK_ENTRIES // (max_conn * n_sites)))
        connected = jax.jit(self.connected)
        rows, cols, vals = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], []
        for start in range(0, n, block):
            chunk = states[start : start + block]
            b = len(chunk)
            if b < block:  # one shape for every block: one compilation
                chunk = np.concatenate([chunk, np.broadcast_to(chunk[:1], (block - b, n_sites))])
            s_conn, mels = connected(jnp.asarray(chunk))
            _check_connected(self, (block,), s_conn, mels)
            s_conn, mels = np.asarray(s_conn)[:b], np.asarray(mels)[:b]
            r, k = np.nonzero(mels)
            rows.append(start + r)
            cols.append(basis_columns(states_to_codes(s_conn[r, k]), order, sorted_codes))
            vals.append(mels[r, k])
        return csr_from_blocks(rows, cols, vals, n)

    def to_dense(self, states) -> np.ndarray:
        """Dense ``(n, n)`` float64 matrix in the basis ``states``."""
        return self.to_sparse(states).toarray()


# -------------------------------------------------------------------- bond Hamiltonians
@dataclasses.dataclass(frozen=True, eq=False)
class BondTerms:
    """Numpy description of a :class:`BondHamiltonian`.

    Diagonal: ``H[s, s] = constant + sum_b zz_coef[b] s_i s_j + sum_i z_coef[i] s_i`` with
    ``(i, j) = zz_pairs[b]``.

    zz_pairs: ``(Bz, 2)`` int, zz_coef: ``(Bz,)`` float;
    constant: float;
    flip: ``(M, n_sites)`` of +-1: -1 on the sites move ``m`` flips, +1 elsewhere;
    cond_pairs ``(M, 2)`` int, amp_aligned, amp_anti ``(M,)`` float: move ``m`` has the
      element ``amp_aligned[m]`` if ``s_i == s_j`` for ``(i, j) = cond_pairs[m]``, else
      ``amp_anti[m]`` (a single-site move uses the pair ``(i, i)``, always aligned);
    z_coef: ``(n_sites,)`` float, or None for no linear term.

    Arrays are converted (int32 pairs, int8 flips, float64 coefficients); inconsistent
    shapes raise ValueError naming the field.
    """

    zz_pairs: np.ndarray
    zz_coef: np.ndarray
    constant: float
    flip: np.ndarray
    cond_pairs: np.ndarray
    amp_aligned: np.ndarray
    amp_anti: np.ndarray
    z_coef: np.ndarray | None = None

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        put("constant", _check_coupling(self.constant, "constant"))
        flip = np.asarray(self.flip)
        if flip.ndim != 2 or not np.all((flip == 1) | (flip == -1)):
            raise ValueError(f"flip: expected an (M, n_sites) array of +-1, got shape {flip.shape}")
        put("flip", flip.astype(np.int8))
        n_moves, n_sites = flip.shape
        for name, rows in (("zz_pairs", None), ("cond_pairs", n_moves)):
            pairs = np.asarray(getattr(self, name))
            if pairs.size == 0:
                pairs = pairs.reshape(0, 2)
            if pairs.ndim != 2 or pairs.shape[1] != 2 or (rows is not None and pairs.shape[0] != rows):
                want = f"({rows}, 2)" if rows is not None else "(Bz, 2)"
                raise ValueError(f"{name}: expected shape {want}, got {pairs.shape}")
            if pairs.size and (pairs.min() < 0 or pairs.max() >= n_sites):
                raise ValueError(f"{name}: site indices must lie in [0, {n_sites}), got {pairs.min()}..{pairs.max()}")
            put(name, pairs.astype(np.int32))
        for name, size in (
            ("zz_coef", self.zz_pairs.shape[0]), ("amp_aligned", n_moves), ("amp_anti", n_moves),
            ("z_coef", n_sites),
        ):
            value = getattr(self, name)
            if value is None and name == "z_coef":
                continue
            coef = np.asarray(value, dtype=np.float64)
            if coef.shape != (size,) or not np.all(np.isfinite(coef)):
                raise ValueError(f"{name}: expected {size} finite numbers, got shape {coef.shape}")
            put(name, coef)

    @property
    def n_sites(self) -> int:
        return int(self.flip.shape[1])

    @property
    def has_linear(self) -> bool:
        return self.z_coef is not None and bool(np.any(self.z_coef != 0))


class BondHamiltonian(SpinHamiltonian):
    """A Hamiltonian given by :class:`BondTerms`: one- and two-site diagonal terms and moves
    that flip one site or a pair of sites, with elements set by one pair's alignment.

    A subclass gives ``lattice`` (or ``n_sites``), ``conserves_sz`` and
    :meth:`build_terms` (called once; :attr:`terms` caches it) and gets ``max_conn = 1 +
    n_moves``, a vectorized ``connected`` (slot ``1 + m``: move ``m``, or padding where its
    element vanishes), ``diagonal``, ``mels_can_vanish`` (whether some move element is 0)
    and a vectorized ``to_sparse``.
    """

    def build_terms(self) -> BondTerms:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} does not implement build_terms()")

    @cached_property
    def terms(self) -> BondTerms:
        """The :class:`BondTerms` of :meth:`build_terms`, checked against ``n_sites``."""
        t = self.build_terms()
        if not isinstance(t, BondTerms):
            raise TypeError(f"build_terms: expected a BondTerms, got {type(t).__name__}")
        if t.n_sites != self.n_sites:
            raise ValueError(f"build_terms: the terms act on {t.n_sites} sites, the Hamiltonian on {self.n_sites}")
        return t

    @property
    def n_moves(self) -> int:
        return int(self.terms.flip.shape[0])

    @property
    def max_conn(self) -> int:
        """Connections per configuration: 1 (diagonal) + one per move."""
        return 1 + self.n_moves

    @property
    def mels_can_vanish(self) -> bool:
        t = self.terms
        return bool(np.any(t.amp_aligned == 0) or np.any(t.amp_anti == 0))

    # ---------------------------------------------------------------- jax side
    def _diagonal(self, s):
        t = self.terms
        ftype = tuning.wide_dtype()
        diag = jnp.full(s.shape[:-1], t.constant, dtype=ftype)
        if t.zz_pairs.shape[0]:
            zz = (s[..., t.zz_pairs[:, 0]] * s[..., t.zz_pairs[:, 1]]).astype(ftype)
            diag = zz @ jnp.asarray(t.zz_coef, ftype) + t.constant
        if t.has_linear:
            diag = diag + s.astype(ftype) @ jnp.asarray(t.z_coef, ftype)
        return diag

    def connected(self, s):
        """Connected configurations and matrix elements.

        Args:
          s: ``(..., n_sites)`` int8 configurations (+-1); jax or numpy.
        Returns:
          s_conn: ``(..., max_conn, n_sites)`` int8; mels: ``(..., max_conn)`` float
          (float64 under ``jax_enable_x64``). Layout: slot 0 the diagonal, slot ``1 + m``
          move ``m`` or padding (element 0, ``s``).
        Raises ValueError for a wrong last axis or (concrete arrays; not checked inside
        ``jax.jit``) entries other than +-1, TypeError for a bool or complex dtype.
        """
        s = jnp.asarray(_check_configurations(s, self.n_sites))
        t = self.terms
        s = s.astype(jnp.int8)
        ftype = tuning.wide_dtype()
        diag = self._diagonal(s)
        aligned = s[..., t.cond_pairs[:, 0]] == s[..., t.cond_pairs[:, 1]]
        mel_off = jnp.where(aligned, jnp.asarray(t.amp_aligned, ftype), jnp.asarray(t.amp_anti, ftype))
        s0 = s[..., None, :]
        s_moved = s0 * jnp.asarray(t.flip)
        s_off = jnp.where((mel_off != 0)[..., None], s_moved, s0)
        s_conn = jnp.concatenate([s0, s_off], axis=-2)
        mels = jnp.concatenate([diag[..., None], mel_off], axis=-1)
        return s_conn, mels

    # ---------------------------------------------------------------- numpy side
    def to_sparse(self, states) -> sp.csr_matrix:
        """The matrix ``H[a, b] = <states[a]| H |states[b]>`` as scipy CSR float64.

        ``states``: ``(n, n_sites)`` basis configurations (any order, no repeats), e.g.
        ``hilbert.all_states(n_sites, total_sz)``. Raises ValueError when H leads out of
        the basis (e.g. the Ising field in a fixed-Sz sector). Vectorized over the terms
        (same matrix as :meth:`SpinHamiltonian.to_sparse`).
        """
        states, codes, order, sorted_codes = sparse_basis(states, self.n_sites)
        t = self.terms
        n = states.shape[0]
        s64 = states.astype(np.int64)
        diag = t.constant + (s64[:, t.zz_pairs[:, 0]] * s64[:, t.zz_pairs[:, 1]]) @ t.zz_coef
        if t.has_linear:
            diag = diag + s64 @ t.z_coef
        rows = [np.arange(n)]
        cols = [np.arange(n)]
        vals = [np.broadcast_to(np.asarray(diag, np.float64), (n,))]
        if t.flip.shape[0]:
            masks = ((t.flip < 0).astype(np.int64) << np.arange(self.n_sites, dtype=np.int64)).sum(axis=1)
            aligned = states[:, t.cond_pairs[:, 0]] == states[:, t.cond_pairs[:, 1]]
            mel = np.where(aligned, t.amp_aligned, t.amp_anti)
            r, m = np.nonzero(mel)
            rows.append(r)
            cols.append(basis_columns(codes[r] ^ masks[m], order, sorted_codes))
            vals.append(mel[r, m])
        return csr_from_blocks(rows, cols, vals, n)

@dataclasses.dataclass(frozen=True)
class Heisenberg(BondHamiltonian):
    """J1-J2 XXZ Heisenberg model in spin-1/2 units, with an optional longitudinal field.

    ``H = sum_{order-1 bonds} J1 h_ij + sum_{order-2 bonds} J2 h_ij - hz sum_i S^z_i`` with
    ``h_ij = S^x_i S^x_j + S^y_i S^y_j + delta S^z_i S^z_j`` (J > 0 antiferromagnetic).
    Bonds with zero coupling are left out (J2 = 0: nearest neighbours only). The field
    ``hz`` adds ``-hz * sum_i s_i / 2`` to the diagonal; H still conserves Sz (in the
    sector ``total_sz`` the field shifts every energy by ``-hz * total_sz``).

    ``marshall_sign=True`` uses the rotated basis ``U H U`` with
    ``U = prod_{i: sublattice 1} sigma^z_i`` (``lattice.sublattice``: checkerboard parity of
    the coordinates on chain and square lattices, the A/B basis index on the honeycomb
    lattice): the exchange elements of bonds joining the two sublattices change sign. The
    spectrum is unchanged; on a bipartite lattice with J2 = 0 the ground state becomes
    positive (Marshall's rule); with J2 != 0 (or an odd extent) it remains a valid, but not
    sign-free, basis. Lattices without two sublattices (triangular, kagome) raise
    ValueError naming ``marshall_sign``.

    Bonds come from ``lattice.bonds(order)`` (distance shells in real space), so the same
    class is the J1-J2 / XXZ model on any :class:`~quantax_lite.geometry.lattice.Lattice`.

    ``max_conn = 1 + n_bonds`` (slot ``1 + b``: exchange on bond ``b`` of :attr:`bonds`).
    """

    lattice: Lattice
    J1: float = 1.0
    J2: float = 0.0
    delta: float = 1.0
    marshall_sign: bool = False
    hz: float = 0.0

    def __post_init__(self):
        if not isinstance(self.lattice, Lattice):
            raise TypeError(f"lattice: expected a quantax_lite.geometry.lattice.Lattice, got {type(self.lattice).__name__}")
        for name in ("J1", "J2", "delta", "hz"):
            object.__setattr__(self, name, _check_coupling(getattr(self, name), name))
        object.__setattr__(self, "marshall_sign", bool(self.marshall_sign))
        if self.marshall_sign:
            check_marshall_rule(self.lattice)

    def __repr__(self) -> str:
        # the field appears only when set, so a model without it prints as before it existed
        shown = [f.name for f in dataclasses.fields(self) if f.name != "hz" or self.hz != 0.0]
        return f"{type(self).__name__}(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in shown) + ")"

    @property
    def conserves_sz(self) -> bool:
        return True

    @cached_property
    def bonds(self) -> np.ndarray:
        """All bonds with nonzero coupling, ``(n_bonds, 2)`` int32: order-1 bonds first, then order-2."""
        return self._bond_table[0]

    @cached_property
    def couplings(self) -> np.ndarray:
        """Coupling of every bond, ``(n_bonds,)`` float64."""
        return self._bond_table[1]

    @cached_property
    def _bond_table(self):
        pairs, js = [], []
        for order, J in ((1, self.J1), (2, self.J2)):
            if J != 0.0:
                b = self.lattice.bonds(order)
                pairs.append(b)
                js.append(np.full(len(b), J))
        if not pairs:
            return np.zeros((0, 2), np.int32), np.zeros(0)
        return np.concatenate(pairs).astype(np.int32), np.concatenate(js)

    def build_terms(self) -> BondTerms:
        bonds, J = self.bonds, self.couplings
        n = self.n_sites
        flip = np.ones((len(bonds), n), dtype=np.int8)
        flip[np.arange(len(bonds)), bonds[:, 0]] = -1
        flip[np.arange(len(bonds)), bonds[:, 1]] = -1
        amp_anti = J / 2.0
        if self.marshall_sign:
            sub = self.lattice.sublattice
            amp_anti = np.where(sub[bonds[:, 0]] != sub[bonds[:, 1]], -amp_anti, amp_anti)
        return BondTerms(
            zz_pairs=bonds,
            zz_coef=J * self.delta / 4.0,
            constant=0.0,
            flip=flip,
            cond_pairs=bonds,
            amp_aligned=np.zeros(len(bonds)),
            amp_anti=np.asarray(amp_anti, dtype=np.float64),
            z_coef=np.full(n, -self.hz / 2.0) if self.hz != 0.0 else None,
        )


@dataclasses.dataclass(frozen=True)
class TransverseFieldIsing(BondHamiltonian):
    """Transverse-field Ising model in Pauli units: ``H = -J sum_<ij> s^z_i s^z_j - h sum_i s^x_i``.

    Nearest-neighbour (order-1) bonds. ``max_conn = 1 + n_sites`` (slot ``1 + i``: flip of
    site ``i``, element ``-h``).

    ``sign_rule=True`` uses the basis rotated by ``U = prod_i s^z_i`` when ``h < 0``:
    ``U H U`` has the field ``|h|`` (elements ``-|h|``), the same spectrum, and a positive
    ground state; its eigenvectors are those of ``H`` times ``(-1)^(number of down spins)``.
    For ``h >= 0`` it changes nothing (the model is already sign-free).
    """

    lattice: Lattice
    J: float = 1.0
    h: float = 1.0
    sign_rule: bool = False

    def __post_init__(self):
        if not isinstance(self.lattice, Lattice):
            raise TypeError(f"lattice: expected a quantax_lite.geometry.lattice.Lattice, got {type(self.lattice).__name__}")
        for name in ("J", "h"):
            object.__setattr__(self, name, _check_coupling(getattr(self, name), name))
        object.__setattr__(self, "sign_rule", bool(self.sign_rule))

    @property
    def conserves_sz(self) -> bool:
        return self.h == 0.0

    @property
    def field(self) -> float:
        """The field in the basis used: ``|h|`` with ``sign_rule``, else ``h``."""
        return abs(self.h) if self.sign_rule else self.h

    @cached_property
    def bonds(self) -> np.ndarray:
        return self.lattice.bonds(1)

    def build_terms(self) -> BondTerms:
        n = self.n_sites
        bonds = self.bonds
        flip = np.ones((n, n), dtype=np.int8)
        flip[np.arange(n), np.arange(n)] = -1
        site = np.arange(n, dtype=np.int32)
        return BondTerms(
            zz_pairs=bonds,
            zz_coef=np.full(len(bonds), -self.J),
            constant=0.0,
            flip=flip,
            cond_pairs=np.stack([site, site], axis=1),
            amp_aligned=np.full(n, -self.field),
            amp_anti=np.full(n, -self.field),
        )


# -------------------------------------------------------------------- local energies
def _check_log_psi_shape(lp, n):
    if lp.shape != (n,):
        raise ValueError(
            f"log_psi: expected output shape ({n},) for a batch of {n} configurations, got {lp.shape}"
        )
    return lp


def _connected_rows(hamiltonian, s):
    s_conn, mels = hamiltonian.connected(s)
    _check_connected(hamiltonian, s.shape[:1], s_conn, mels)
    return s_conn, mels


def _local_energy_rows(hamiltonian, log_psi, params, s, log_psi_s):
    """E_loc for a chunk of samples ``s`` (b, n), every connection slot evaluated."""
    s_conn, mels = _connected_rows(hamiltonian, s)
    b, m, n = s_conn.shape
    lp_conn = _check_log_psi_shape(log_psi(params, s_conn.reshape(b * m, n)), b * m).reshape(b, m)
    if log_psi_s is None:
        log_psi_s = lp_conn[:, 0]  # slot 0 is s itself
    nonzero = mels != 0
    # guard: a vanishing element must not turn exp(+-inf) or nan into nan
    delta = jnp.where(nonzero, lp_conn - log_psi_s[:, None], 0)
    ratio = jnp.where(nonzero, jnp.exp(delta), 0)
    return jnp.sum(mels * ratio, axis=-1)


def _local_energy_rows_packed(hamiltonian, log_psi, params, s, log_psi_s, fractions):
    """E_loc for a chunk, ``log_psi`` evaluated only where ``H[s, s'] != 0`` and ``s' != s``.

    The nonzero off-diagonal connections of the chunk (their number varies) are packed
    into the smallest of the sizes ``ceil(f * b * (m - 1))``, ``f`` in ``fractions``, that
    holds them (``lax.switch``; every size is compiled, one runs). The diagonal ratio is 1.
    """
    s_conn, mels = _connected_rows(hamiltonian, s)
    b, m, n = s_conn.shape
    if log_psi_s is None:
        log_psi_s = _check_log_psi_shape(log_psi(params, s), b)
    off_conn = s_conn[:, 1:].reshape(b * (m - 1), n)
    off_mels = mels[:, 1:].reshape(-1)
    nonzero = off_mels != 0
    count = jnp.sum(nonzero.astype(jnp.int32))
    sizes = sorted({max(1, int(np.ceil(f * b * (m - 1)))) for f in fractions} | {b * (m - 1)})

    def evaluate(size):
        def branch():
            (idx,) = jnp.nonzero(nonzero, size=size, fill_value=0)
            valid = jnp.arange(size) < count
            lp = _check_log_psi_shape(log_psi(params, off_conn[idx]), size)
            row = idx // (m - 1)
            delta = jnp.where(valid, lp - log_psi_s[row], 0)
            terms = jnp.where(valid, off_mels[idx] * jnp.exp(delta), 0)
            return jax.ops.segment_sum(terms, row, num_segments=b)
        return branch

    which = jnp.searchsorted(jnp.asarray(sizes), count, side="left")
    off = jax.lax.switch(which, [evaluate(size) for size in sizes])
    return mels[:, 0] + off


def make_local_energy(
    hamiltonian: SpinHamiltonian,
    log_psi: Callable,
    *,
    chunk_size: int | None = None,
    mesh=None,
    jit: bool = True,
) -> Callable:
    """Build ``f(params, samples, log_psi_samples=None) -> (batch,)`` local energies.

    ``hamiltonian``: any :class:`SpinHamiltonian` (only ``connected``, ``max_conn`` and
    ``n_sites`` are used). The samples are processed by ``quantax_lite.utils.chunk_map``
    (``use_scan=True``, ``shard_batch=True``: each device handles its own samples) with
    ``chunk_size`` samples per device per step, so ``log_psi`` sees at most
    ``chunk_size * max_conn`` configurations per device at a time. The result is jitted
    once (``jit=True``) and can be reused across steps without recompiling.

    How the slots are evaluated is a speed choice of :mod:`quantax_lite.utils.tuning`, read when
    the function is built (``tuning.override(pack_local_energy=False)`` around this call
    changes it): by default ``log_psi`` runs only on connected configurations with a
    nonzero matrix element other than ``s`` itself (e.g. Heisenberg exchange on
    anti-aligned bonds only: about 3/4 of the bonds near the 4x4 ground state, half for
    random states), packed per chunk into the smallest of a few fixed sizes
    (``tuning.current().packed_fractions`` of the off-diagonal slots) that holds them; the
    choice is made inside jit, and every size is compiled once. Otherwise, and for a
    Hamiltonian whose ``mels_can_vanish`` is False (the Ising field), every slot of
    ``connected`` is evaluated. Both give the same energies up to rounding.

    The returned function checks ``samples`` (shape ``(batch, n_sites)``, an integer or
    real dtype, ``log_psi_samples`` of shape ``(batch,)``) and, for concrete arrays, that
    every entry is +-1 (ValueError/TypeError naming the argument). With ``jit=True`` the
    value check runs before the compiled call (one reduction); traced samples (the
    function called inside an outer ``jax.jit``, e.g. with ``jit=False`` in the VMC step)
    get only the trace-time shape checks, so compiled code is unchanged.
    """
    from quantax_lite.utils import chunk_map

    n_sites, max_conn = hamiltonian_sizes(hamiltonian)
    choices = tuning.current()
    pack = bool(choices.pack_local_energy) and max_conn > 1 and bool(hamiltonian.mels_can_vanish)
    if pack:
        fractions = tuple(choices.packed_fractions)

        def rows(params, s, log_psi_s):
            return _local_energy_rows_packed(hamiltonian, log_psi, params, s, log_psi_s, fractions)
    else:
        def rows(params, s, log_psi_s):
            return _local_energy_rows(hamiltonian, log_psi, params, s, log_psi_s)

    def rows_no_lp(params, s):
        return rows(params, s, None)

    options = dict(chunk_size=chunk_size, use_scan=True, mesh=mesh, shard_batch=True)
    with_lp = chunk_map(rows, in_axes=(None, 0, 0), **options)
    without_lp = chunk_map(rows_no_lp, in_axes=(None, 0), **options)

    def energy(params, samples, log_psi_samples=None):
        # shapes (and, for concrete arrays, values) of the samples; inside jit at trace time only
        samples = check_samples(samples, n_sites, log_psi_samples)
        if log_psi_samples is None:
            return without_lp(params, samples)
        return with_lp(params, samples, log_psi_samples)

    if not jit:
        return energy
    compiled = jax.jit(energy)

    @functools.wraps(energy)
    def checked(params, samples, log_psi_samples=None):
        # the values of concrete samples are checked here, before the compiled call
        samples = check_samples(samples, n_sites, log_psi_samples)
        return compiled(params, samples, log_psi_samples)

    checked.lower = compiled.lower
    return checked


def local_energy(
    hamiltonian: SpinHamiltonian,
    log_psi: Callable,
    params,
    samples,
    *,
    chunk_size: int | None = None,
    log_psi_samples=None,
    mesh=None,
):
    """Local energies ``E_loc(s) = sum_s' H[s, s'] psi(s') / psi(s)``.

    Args:
      hamiltonian: any :class:`SpinHamiltonian` (the contract of its docstring).
      log_psi: ``log_psi(params, s) -> (batch,)`` log-amplitudes (real or complex).
      params: the parameter pytree.
      samples: ``(batch, n_sites)`` int8 configurations.
      chunk_size: samples per device per evaluation step (``None``: all at once); memory
        grows with ``chunk_size * max_conn``.
      log_psi_samples: ``(batch,)`` ``log_psi(params, samples)`` if already known (e.g. from
        the sampler); otherwise the diagonal slot of the connected configurations is used.
      mesh: device mesh for ``chunk_map`` (default: all devices).
    Returns:
      ``(batch,)`` local energies, complex if ``log_psi`` is complex. Connections with a
      zero matrix element contribute exactly 0 (no NaN from ``exp(-inf)`` or ``inf * 0``).

    Convenience wrapper: builds and compiles the computation on every call (with the
    speed choices of :func:`quantax_lite.utils.tuning.current`, see :func:`make_local_energy`);
    in a loop use :func:`make_local_energy` once and call its result.
    """
    n_sites, _ = hamiltonian_sizes(hamiltonian)
    samples = check_samples(samples, n_sites, log_psi_samples)
    if chunk_size is not None and (
        isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size <= 0
    ):
        raise ValueError(f"chunk_size: expected a positive int or None, got {chunk_size!r}")
    fn = make_local_energy(hamiltonian, log_psi, chunk_size=chunk_size, mesh=mesh, jit=True)
    return fn(params, jnp.asarray(samples), log_psi_samples)
