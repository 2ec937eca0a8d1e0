"""Exact results for small systems: sparse ground states, symmetry sectors, exact expectations.

Bases are lists of configurations (``hilbert.all_states``); vectors are indexed like them.
Energies are in the Hamiltonian's own units (spin-1/2 units for Heisenberg, Pauli units
for the transverse-field Ising model).
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from quantax_lite.utils.validate import positive_int
from quantax_lite.hilbert.configurations import all_states, states_to_codes
from quantax_lite.hilbert.configurations import resolve_total_sz as _resolve_sector
from quantax_lite.operators.hamiltonian import SpinHamiltonian
from quantax_lite.exact.references import ENERGY_PER_SITE
from quantax_lite.geometry.symmetry import Symmetry

__all__ = [
    "resolve_total_sz",
    "symmetry_matrix",
    "sector_projector",
    "sector_basis",
    "ground_state",
    "ground_state_energy",
    "log_psi_on_states",
    "exact_probabilities",
    "exact_expectation",
    "REFERENCE_ENERGY_PER_SITE",
]

# the package's table of reference energies (one table: quantax_lite.exact.references), by its earlier name
REFERENCE_ENERGY_PER_SITE = ENERGY_PER_SITE

_DENSE_LIMIT = 300  # below this dimension, dense eigh is faster and exact


def resolve_total_sz(hamiltonian: SpinHamiltonian, total_sz):
    """The sector of ``hamiltonian`` to work in: :func:`quantax_lite.hilbert.configurations.resolve_total_sz`
    with the Hamiltonian's ``n_sites`` and ``conserves_sz``.

    ``"auto"``: 0 (even number of sites) or 1/2 (odd) when H conserves Sz, else ``None``
    (the whole space). A number must be a sector that exists and that H conserves
    (ValueError naming ``total_sz``); ``None`` is the whole space.
    """
    conserves = bool(hamiltonian.conserves_sz)
    sector = _resolve_sector(total_sz, hamiltonian.n_sites, conserves)
    if sector is not None and not conserves:
        raise ValueError(
            f"total_sz: {type(hamiltonian).__name__} does not conserve Sz; use total_sz=None"
        )
    return sector


def image_indices(perms: np.ndarray, flips: np.ndarray, states: np.ndarray) -> np.ndarray:
    """``(G, n)`` int: row index of ``g s_a`` in the basis, for every element and basis state."""
    states = np.asarray(states)
    n_sites = states.shape[1]
    codes = states_to_codes(states)
    order = np.argsort(codes)
    sorted_codes = codes[order]
    # code(g s) = sum_i [s_perm[i] > 0] 2**i = sum_j [s_j > 0] 2**(perm^-1[j]); flip: complement
    inv = np.argsort(perms, axis=1)  # (G, N)
    weights = np.ldexp(1.0, inv).T  # (N, G), exact powers of two
    bits = (states > 0).astype(np.float64)
    if n_sites <= 50:  # float64 sums of distinct powers of two below 2**53 are exact
        image_codes = (bits @ weights).astype(np.int64).T  # (G, n)
    else:
        image_codes = np.stack([states_to_codes(states[:, p]) for p in perms])
    full = np.int64(2**n_sites - 1)
    image_codes = np.where(np.asarray(flips)[:, None] < 0, full - image_codes, image_codes)
    pos = np.minimum(np.searchsorted(sorted_codes, image_codes), len(states) - 1)
    found = sorted_codes[pos] == image_codes
    if not np.all(found):
        g = int(np.nonzero(~found.all(axis=1))[0][0])
        raise ValueError(
            f"symmetry: element {g} maps the basis outside itself "
            "(spin inversion needs total_sz=0 or None)"
        )
    return order[pos]


def symmetry_matrix(symmetry: Symmetry, g: int, states) -> sp.csr_matrix:
    """Sparse ``E_g`` with ``(E_g psi)(s) = psi(g s)`` in the basis ``states`` (n, n_sites).

    Raises ValueError when ``g`` maps the basis outside itself (e.g. spin inversion in a
    sector with total_sz != 0).
    """
    states = np.asarray(states)
    if not 0 <= g < symmetry.n_elements:
        raise ValueError(f"g: expected an element index in [0, {symmetry.n_elements}), got {g}")
    idx = image_indices(symmetry.perms[g : g + 1], symmetry.flips[g : g + 1], states)[0]
    n = len(states)
    return sp.csr_matrix((np.ones(n), (np.arange(n), idx)), shape=(n, n))


def _projector_from_indices(characters: np.ndarray, idx: np.ndarray) -> sp.csr_matrix:
    G, n = idx.shape
    rows = np.broadcast_to(np.arange(n), (G, n)).ravel()
    vals = np.broadcast_to(characters[:, None] / G, (G, n)).ravel()
    P = sp.csr_matrix((vals, (rows, idx.ravel())), shape=(n, n))  # duplicates are summed
    P.sum_duplicates()
    P.data[np.abs(P.data) < 1e-14] = 0
    P.eliminate_zeros()
    return P


def sector_projector(symmetry: Symmetry, states) -> sp.csr_matrix:
    """Hermitian projector ``P = (1/G) sum_g chi_g E_g`` onto the symmetry sector (complex CSR).

    Its range holds exactly the states with ``psi(g s) = psi(s) / chi_g`` for every ``g``.
    """
    idx = image_indices(symmetry.perms, symmetry.flips, np.asarray(states))
    return _projector_from_indices(symmetry.characters, idx)


def sector_basis(symmetry: Symmetry, states) -> sp.csc_matrix:
    """Orthonormal basis of the symmetry sector, ``(n, m)`` sparse (complex128 CSC).

    Column ``c`` is the normalized projection ``P e_r`` of one representative ``r`` per
    orbit of the group (orbits whose projection vanishes are left out), so ``m`` is the
    sector dimension.
    """
    idx = image_indices(symmetry.perms, symmetry.flips, np.asarray(states))
    reps = np.unique(idx.min(axis=0))
    Q = _projector_from_indices(symmetry.characters, idx)[:, reps].tocsc()
    norms = np.sqrt(np.asarray(abs(Q).power(2).sum(axis=0)).ravel())
    keep = norms > 1e-10
    Q = Q[:, keep] @ sp.diags(1.0 / norms[keep])
    return Q.tocsc()


def ground_state(
    hamiltonian: SpinHamiltonian,
    total_sz="auto",
    k: int = 1,
    symmetry: Symmetry | None = None,
):
    """Lowest eigenpairs by sparse diagonalization (``scipy.sparse.linalg.eigsh``).

    Args:
      hamiltonian: a :class:`~quantax_lite.operators.hamiltonian.SpinHamiltonian`.
      total_sz: magnetization sector (``sum(s)/2``); ``None``: all ``2**n`` states;
        ``"auto"``: for Sz-conserving Hamiltonians 0 on an even number of sites, 1/2 on
        an odd one, else ``None`` (see :func:`resolve_total_sz`).
      k: number of eigenpairs.
      symmetry: optional group; restricts to its sector (``psi(g s) = psi(s) / chi_g``).
        A group built for another lattice than the Hamiltonian's raises ValueError.
    Returns:
      ``(energy, vector, basis_states)``: for ``k == 1`` a float and an ``(n,)`` unit
      vector (float64, or complex128 with a complex sector); for ``k > 1`` arrays
      ``(k,)`` and ``(n, k)``, ascending. ``basis_states``: ``(n, n_sites)`` int8.
    """
    if not isinstance(hamiltonian, SpinHamiltonian):
        raise TypeError(f"hamiltonian: expected a SpinHamiltonian, got {type(hamiltonian).__name__}")
    if symmetry is not None:
        if not isinstance(symmetry, Symmetry):
            raise TypeError(f"symmetry: expected a Symmetry, got {type(symmetry).__name__}")
        if symmetry.n_sites != hamiltonian.n_sites:
            raise ValueError(
                f"symmetry: acts on {symmetry.n_sites} sites, the Hamiltonian on {hamiltonian.n_sites}"
            )
        lattice = getattr(hamiltonian, "lattice", None)
        if symmetry.lattice is not None and lattice is not None and symmetry.lattice != lattice:
            raise ValueError(
                f"symmetry: built for the lattice {symmetry.lattice.name}, the Hamiltonian's "
                f"lattice is {lattice.name}; build the group from the same lattice"
            )
    total_sz = resolve_total_sz(hamiltonian, total_sz)
    states = all_states(hamiltonian.n_sites, total_sz)
    H = hamiltonian.to_sparse(states)
    n = H.shape[0]
    if positive_int(k, "k") > n:
        raise ValueError(f"k: expected an int in [1, {n}], got {k!r}")

    Q = None
    if symmetry is not None:
        Q = sector_basis(symmetry, states)
        if np.allclose(symmetry.characters.imag, 0):
            Q = Q.real.tocsc()
        if Q.shape[1] < k:
            raise ValueError(f"symmetry: the sector holds {Q.shape[1]} states, fewer than k={k}")
        H = (Q.conj().T @ (H @ Q)).tocsr()

    m = H.shape[0]
    if m <= _DENSE_LIMIT or k >= m - 1:
        w, v = scipy.linalg.eigh(H.toarray())
        w, v = w[:k], v[:, :k]
    else:
        v0 = np.random.default_rng(0).standard_normal(m).astype(H.dtype)
        w, v = spla.eigsh(H, k=k, which="SA", v0=v0, tol=0)
        order = np.argsort(w)
        w, v = w[order], v[:, order]
    if Q is not None:
        v = np.asarray(Q @ v)
        v = v / np.linalg.norm(v, axis=0, keepdims=True)
    if k == 1:
        return float(w[0]), v[:, 0], states
    return np.asarray(w, dtype=np.float64), v, states


def ground_state_energy(hamiltonian: SpinHamiltonian, total_sz="auto", symmetry=None) -> float:
    """Ground-state energy (float) of ``hamiltonian`` in a sector; see :func:`ground_state`."""
    return ground_state(hamiltonian, total_sz=total_sz, symmetry=symmetry)[0]


def log_psi_on_states(
    log_psi: Callable, params, states, block: int = 16384, jit: bool = True
) -> np.ndarray:
    """``log_psi(params, states)`` as a numpy array, in blocks of ``block`` states.

    ``jit=True`` compiles ``log_psi`` once (the last block is padded with the first state
    so that all blocks share one shape); ``jit=False`` for a non-jittable ``log_psi``.
    """
    states = np.asarray(states)
    n = len(states)
    if n == 0:
        return np.zeros(0)
    f = jax.jit(log_psi) if jit else log_psi
    if n <= block:
        return np.asarray(f(params, jnp.asarray(states)))
    out = []
    for i in range(0, n, block):
        chunk = states[i : i + block]
        m = len(chunk)
        if m < block:
            chunk = np.concatenate([chunk, np.broadcast_to(states[:1], (block - m, states.shape[1]))])
        out.append(np.asarray(f(params, jnp.asarray(chunk)))[:m])
    return np.concatenate(out)


def exact_probabilities(log_psi: Callable, params, states, *, jit: bool = True) -> np.ndarray:
    """Normalized ``|psi(s)|^2`` over ``states`` (n, n_sites) -> (n,) float64, summing to 1."""
    lp = log_psi_on_states(log_psi, params, states, jit=jit)
    logp = 2.0 * np.real(lp).astype(np.float64)
    logp = logp - np.max(logp)
    p = np.exp(logp)
    return p / p.sum()


def exact_expectation(
    hamiltonian: SpinHamiltonian, log_psi: Callable, params, total_sz="auto", *, jit: bool = True
) -> float:
    """``<psi|H|psi> / <psi|psi>`` by full enumeration of the sector (float).

    ``total_sz`` as in :func:`ground_state` (``"auto"``: Sz = 0 or 1/2 when H conserves
    Sz, the whole space otherwise). Overflow-safe (log psi is shifted by its maximum).
    """
    total_sz = resolve_total_sz(hamiltonian, total_sz)
    states = all_states(hamiltonian.n_sites, total_sz)
    lp = log_psi_on_states(log_psi, params, states, jit=jit).astype(np.complex128)
    lp = lp - np.max(lp.real)
    psi = np.exp(lp)
    H = hamiltonian.to_sparse(states)
    num = np.vdot(psi, H @ psi)
    return float(num.real / np.vdot(psi, psi).real)
