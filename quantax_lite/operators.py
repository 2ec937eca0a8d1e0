"""Spin Hamiltonians: connected configurations, matrix elements, local energies, sparse matrices.

Every Hamiltonian here is a sum of diagonal ``s_i s_j`` terms and off-diagonal "moves"
that flip one site or a pair of sites. For a batch of configurations ``s``
(``(..., n_sites)`` int8, +-1) :meth:`SpinHamiltonian.connected` returns all
configurations ``s'`` with ``H[s, s'] != 0`` in a fixed layout of ``max_conn`` slots:

* slot 0: ``s`` itself with the diagonal element ``H[s, s]``;
* slot ``1 + m``: move ``m`` applied to ``s`` (the Heisenberg exchange on bond ``m`` of
  :attr:`SpinHamiltonian.bonds` order, or the flip of site ``m`` for the Ising field),
  with its matrix element, or -- where that element vanishes (e.g. exchange on an aligned
  pair) -- padding: matrix element 0 and ``s'`` = ``s``.

The layout depends only on the Hamiltonian, so ``connected`` is jittable.

Units. :class:`Heisenberg` is in spin-1/2 units, ``S = sigma / 2``:
``H = sum_<ij> J_ij (S^x_i S^x_j + S^y_i S^y_j + delta S^z_i S^z_j)``, i.e. the diagonal
element ``sum J delta s_i s_j / 4`` and the exchange element ``J / 2`` between
configurations that differ by swapping an anti-aligned pair.
:class:`TransverseFieldIsing` is in Pauli units: ``H = -J sum_<ij> s^z_i s^z_j - h sum_i s^x_i``.
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

from .hilbert import check_spin_dtype, check_spin_values, states_to_codes, validate_states
from .lattice import Lattice

__all__ = [
    "SpinHamiltonian",
    "Heisenberg",
    "TransverseFieldIsing",
    "marshall_sign",
    "local_energy",
    "make_local_energy",
]


@dataclasses.dataclass(frozen=True)
class _Terms:
    """Numpy description of a Hamiltonian (internal).

    zz_pairs (Bz, 2) int32, zz_coef (Bz,) float64: diagonal ``sum_b zz_coef[b] s_i s_j``;
    constant: added to the diagonal;
    flip (M, n_sites) int8: -1 on the sites move m flips, +1 elsewhere;
    cond_pairs (M, 2) int32: move m has element amp_aligned[m] if s_i == s_j else amp_anti[m]
    (a single-site move uses the pair (i, i), which is always aligned).
    """

    zz_pairs: np.ndarray
    zz_coef: np.ndarray
    constant: float
    flip: np.ndarray
    cond_pairs: np.ndarray
    amp_aligned: np.ndarray
    amp_anti: np.ndarray


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


def _check_samples(samples, n_sites: int, log_psi_samples=None):
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


class SpinHamiltonian:
    """Shared machinery; subclasses define :meth:`_build_terms` and set ``lattice``."""

    lattice: Lattice

    # ---------------------------------------------------------------- description
    def _build_terms(self) -> _Terms:  # pragma: no cover - abstract
        raise NotImplementedError

    @cached_property
    def _terms(self) -> _Terms:
        return self._build_terms()

    @property
    def n_sites(self) -> int:
        return self.lattice.n_sites

    @property
    def n_moves(self) -> int:
        return int(self._terms.flip.shape[0])

    @property
    def max_conn(self) -> int:
        """Connections per configuration: 1 (diagonal) + one per move."""
        return 1 + self.n_moves

    @property
    def conserves_sz(self) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

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
        t = self._terms
        if t.zz_pairs.shape[0] == 0:
            return jnp.full(s.shape[:-1], t.constant, dtype=jnp.result_type(float))
        zz = (s[..., t.zz_pairs[:, 0]] * s[..., t.zz_pairs[:, 1]]).astype(jnp.result_type(float))
        return zz @ jnp.asarray(t.zz_coef) + t.constant

    def connected(self, s):
        """Connected configurations and matrix elements.

        Args:
          s: ``(..., n_sites)`` int8 configurations (+-1); jax or numpy.
        Returns:
          s_conn: ``(..., max_conn, n_sites)`` int8; mels: ``(..., max_conn)`` float
          (float64 under ``jax_enable_x64``). Layout: see the module docstring.
        Raises ValueError for a wrong last axis or (concrete arrays; not checked inside
        ``jax.jit``) entries other than +-1, TypeError for a bool or complex dtype.
        """
        s = jnp.asarray(_check_configurations(s, self.n_sites))
        t = self._terms
        s = s.astype(jnp.int8)
        ftype = jnp.result_type(float)
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
        the basis (e.g. the Ising field in a fixed-Sz sector).
        """
        states = validate_states(np.asarray(states), self.n_sites, name="states")
        if states.ndim != 2:
            raise ValueError(f"states: expected shape (n, {self.n_sites}), got {states.shape}")
        t = self._terms
        n = states.shape[0]
        codes = states_to_codes(states)
        order = np.argsort(codes, kind="stable")
        sorted_codes = codes[order]
        if n > 1 and np.any(sorted_codes[1:] == sorted_codes[:-1]):
            raise ValueError("states: the basis contains repeated configurations")

        s64 = states.astype(np.int64)
        diag = t.constant + (s64[:, t.zz_pairs[:, 0]] * s64[:, t.zz_pairs[:, 1]]) @ t.zz_coef
        rows = [np.arange(n)]
        cols = [np.arange(n)]
        vals = [diag.astype(np.float64)]
        if t.flip.shape[0]:
            masks = ((t.flip < 0).astype(np.int64) << np.arange(self.n_sites, dtype=np.int64)).sum(axis=1)
            aligned = states[:, t.cond_pairs[:, 0]] == states[:, t.cond_pairs[:, 1]]
            mel = np.where(aligned, t.amp_aligned, t.amp_anti)
            r, m = np.nonzero(mel)
            target = codes[r] ^ masks[m]
            pos = np.searchsorted(sorted_codes, target)
            pos_c = np.minimum(pos, n - 1)
            ok = sorted_codes[pos_c] == target
            if not np.all(ok):
                raise ValueError(
                    "states: the Hamiltonian connects the basis to configurations outside it "
                    "(choose a sector the Hamiltonian conserves, e.g. total_sz=None)"
                )
            rows.append(r)
            cols.append(order[pos_c])
            vals.append(mel[r, m])
        H = sp.coo_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n)
        ).tocsr()
        H.sum_duplicates()
        return H

    def to_dense(self, states) -> np.ndarray:
        """Dense ``(n, n)`` float64 matrix in the basis ``states``."""
        return self.to_sparse(states).toarray()


@dataclasses.dataclass(frozen=True)
class Heisenberg(SpinHamiltonian):
    """J1-J2 XXZ Heisenberg model in spin-1/2 units.

    ``H = sum_{order-1 bonds} J1 h_ij + sum_{order-2 bonds} J2 h_ij`` with
    ``h_ij = S^x_i S^x_j + S^y_i S^y_j + delta S^z_i S^z_j`` (J > 0 antiferromagnetic).
    Bonds with zero coupling are left out (J2 = 0: nearest neighbours only).

    ``marshall_sign=True`` uses the rotated basis ``U H U`` with
    ``U = prod_{i: sublattice 1} sigma^z_i`` (checkerboard parity of the coordinates): the
    exchange elements of bonds joining the two sublattices change sign. The spectrum is
    unchanged; on a bipartite lattice with J2 = 0 the ground state becomes positive
    (Marshall's rule); with J2 != 0 it remains a valid, but not sign-free, basis.

    ``max_conn = 1 + n_bonds`` (slot ``1 + b``: exchange on bond ``b`` of :attr:`bonds`).
    """

    lattice: Lattice
    J1: float = 1.0
    J2: float = 0.0
    delta: float = 1.0
    marshall_sign: bool = False

    def __post_init__(self):
        if not isinstance(self.lattice, Lattice):
            raise TypeError(f"lattice: expected a quantax_lite.lattice.Lattice, got {type(self.lattice).__name__}")
        for name in ("J1", "J2", "delta"):
            object.__setattr__(self, name, _check_coupling(getattr(self, name), name))
        object.__setattr__(self, "marshall_sign", bool(self.marshall_sign))

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

    def _build_terms(self) -> _Terms:
        bonds, J = self.bonds, self.couplings
        n = self.n_sites
        flip = np.ones((len(bonds), n), dtype=np.int8)
        flip[np.arange(len(bonds)), bonds[:, 0]] = -1
        flip[np.arange(len(bonds)), bonds[:, 1]] = -1
        amp_anti = J / 2.0
        if self.marshall_sign:
            sub = self.lattice.sublattice
            amp_anti = np.where(sub[bonds[:, 0]] != sub[bonds[:, 1]], -amp_anti, amp_anti)
        return _Terms(
            zz_pairs=bonds,
            zz_coef=J * self.delta / 4.0,
            constant=0.0,
            flip=flip,
            cond_pairs=bonds,
            amp_aligned=np.zeros(len(bonds)),
            amp_anti=np.asarray(amp_anti, dtype=np.float64),
        )


@dataclasses.dataclass(frozen=True)
class TransverseFieldIsing(SpinHamiltonian):
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
            raise TypeError(f"lattice: expected a quantax_lite.lattice.Lattice, got {type(self.lattice).__name__}")
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

    def _build_terms(self) -> _Terms:
        n = self.n_sites
        bonds = self.bonds
        flip = np.ones((n, n), dtype=np.int8)
        flip[np.arange(n), np.arange(n)] = -1
        site = np.arange(n, dtype=np.int32)
        return _Terms(
            zz_pairs=bonds,
            zz_coef=np.full(len(bonds), -self.J),
            constant=0.0,
            flip=flip,
            cond_pairs=np.stack([site, site], axis=1),
            amp_aligned=np.full(n, -self.field),
            amp_anti=np.full(n, -self.field),
        )


def marshall_sign(lattice: Lattice, states):
    """Marshall sign ``u(s) = prod_{i: sublattice 1} s_i`` (int8 +-1, shape ``(...,)``).

    ``Heisenberg(..., marshall_sign=True)`` is ``U H U`` with ``U = diag(u)``, so its
    eigenvectors are ``u(s) psi(s)`` for eigenvectors ``psi`` of the plain Hamiltonian.
    """
    if not isinstance(lattice, Lattice):
        raise TypeError(f"lattice: expected a quantax_lite.lattice.Lattice, got {type(lattice).__name__}")
    states = np.asarray(_check_configurations(np.asarray(states), lattice.n_sites, "states"))
    sub = lattice.sublattice.astype(bool)
    return np.prod(states[..., sub].astype(np.int64), axis=-1).astype(np.int8)


# -------------------------------------------------------------------- local energies
# Sizes (fractions of a chunk's off-diagonal slots) into which the connections with a
# nonzero matrix element are packed; the smallest that holds them is evaluated.
PACKED_FRACTIONS = (0.25, 0.5, 0.625, 0.6875, 0.75, 0.8125, 0.875, 1.0)


def _check_log_psi_shape(lp, n):
    if lp.shape != (n,):
        raise ValueError(
            f"log_psi: expected output shape ({n},) for a batch of {n} configurations, got {lp.shape}"
        )
    return lp


def _local_energy_rows(hamiltonian, log_psi, params, s, log_psi_s):
    """E_loc for a chunk of samples ``s`` (b, n), every connection slot evaluated."""
    s_conn, mels = hamiltonian.connected(s)
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
    s_conn, mels = hamiltonian.connected(s)
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
    pack: bool = True,
) -> Callable:
    """Build ``f(params, samples, log_psi_samples=None) -> (batch,)`` local energies.

    The samples are processed by ``quantax_lite.utils.chunk_map`` (``use_scan=True``,
    ``shard_batch=True``: each device handles its own samples) with ``chunk_size``
    samples per device per step, so ``log_psi`` sees at most ``chunk_size * max_conn``
    configurations per device at a time. The result is jitted once (``jit=True``) and
    can be reused across steps without recompiling.

    ``pack=True`` (default): ``log_psi`` is evaluated only on connected configurations
    with a nonzero matrix element other than ``s`` itself (e.g. Heisenberg exchange on
    anti-aligned bonds only: about 3/4 of the bonds near the 4x4 ground state, half for
    random states). They are packed per chunk into the smallest of a few fixed sizes
    (:data:`PACKED_FRACTIONS` of the off-diagonal slots) that holds them; the choice is
    made inside jit, and every size is compiled once. ``pack=False``: every slot of
    :meth:`SpinHamiltonian.connected` is evaluated. Both give the same energies up to
    rounding. Hamiltonians whose off-diagonal elements never vanish (the Ising field)
    are never packed.

    The returned function checks ``samples`` (shape ``(batch, n_sites)``, an integer or
    real dtype, ``log_psi_samples`` of shape ``(batch,)``) and, for concrete arrays, that
    every entry is +-1 (ValueError/TypeError naming the argument). With ``jit=True`` the
    value check runs before the compiled call (one reduction); traced samples (the
    function called inside an outer ``jax.jit``, e.g. with ``jit=False`` in the VMC step)
    get only the trace-time shape checks, so compiled code is unchanged.
    """
    from .utils import chunk_map

    t = hamiltonian._terms
    can_vanish = bool(np.any(t.amp_aligned == 0) or np.any(t.amp_anti == 0))
    if pack and can_vanish and hamiltonian.n_moves > 0:
        def rows(params, s, log_psi_s):
            return _local_energy_rows_packed(hamiltonian, log_psi, params, s, log_psi_s, PACKED_FRACTIONS)
    else:
        def rows(params, s, log_psi_s):
            return _local_energy_rows(hamiltonian, log_psi, params, s, log_psi_s)

    def rows_no_lp(params, s):
        return rows(params, s, None)

    options = dict(chunk_size=chunk_size, use_scan=True, mesh=mesh, shard_batch=True)
    with_lp = chunk_map(rows, in_axes=(None, 0, 0), **options)
    without_lp = chunk_map(rows_no_lp, in_axes=(None, 0), **options)

    n_sites = hamiltonian.n_sites

    def energy(params, samples, log_psi_samples=None):
        # shapes (and, for concrete arrays, values) of the samples; inside jit at trace time only
        samples = _check_samples(samples, n_sites, log_psi_samples)
        if log_psi_samples is None:
            return without_lp(params, samples)
        return with_lp(params, samples, log_psi_samples)

    if not jit:
        return energy
    compiled = jax.jit(energy)

    @functools.wraps(energy)
    def checked(params, samples, log_psi_samples=None):
        # the values of concrete samples are checked here, before the compiled call
        samples = _check_samples(samples, n_sites, log_psi_samples)
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
    pack: bool = True,
):
    """Local energies ``E_loc(s) = sum_s' H[s, s'] psi(s') / psi(s)``.

    Args:
      hamiltonian: a :class:`SpinHamiltonian`.
      log_psi: ``log_psi(params, s) -> (batch,)`` log-amplitudes (real or complex).
      params: the parameter pytree.
      samples: ``(batch, n_sites)`` int8 configurations.
      chunk_size: samples per device per evaluation step (``None``: all at once); memory
        grows with ``chunk_size * max_conn``.
      log_psi_samples: ``(batch,)`` ``log_psi(params, samples)`` if already known (e.g. from
        the sampler); otherwise the diagonal slot of the connected configurations is used.
      mesh: device mesh for ``chunk_map`` (default: all devices).
      pack: evaluate only the connections with a nonzero element (see :func:`make_local_energy`).
    Returns:
      ``(batch,)`` local energies, complex if ``log_psi`` is complex. Connections with a
      zero matrix element contribute exactly 0 (no NaN from ``exp(-inf)`` or ``inf * 0``).

    Convenience wrapper: builds and compiles the computation on every call; in a loop use
    :func:`make_local_energy` once and call its result.
    """
    if not isinstance(hamiltonian, SpinHamiltonian):
        raise TypeError(f"hamiltonian: expected a SpinHamiltonian, got {type(hamiltonian).__name__}")
    samples = _check_samples(samples, hamiltonian.n_sites, log_psi_samples)
    if chunk_size is not None and (
        isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size <= 0
    ):
        raise ValueError(f"chunk_size: expected a positive int or None, got {chunk_size!r}")
    fn = make_local_energy(hamiltonian, log_psi, chunk_size=chunk_size, mesh=mesh, jit=True, pack=pack)
    return fn(params, jnp.asarray(samples), log_psi_samples)
