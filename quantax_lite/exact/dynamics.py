"""Exact dynamics for small systems: real- and imaginary-time evolution by the sparse
propagator, and observables along it.

Vectors are indexed like ``all_states(n_sites, total_sz)``; times in units of 1/J (the
Hamiltonian's own energy unit).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from quantax_lite.exact.diagonalization import resolve_total_sz
from quantax_lite.hilbert.configurations import all_states
from quantax_lite.operators.hamiltonian import SpinHamiltonian

__all__ = ["exact_evolution", "exact_observables"]


def _check_times(times) -> np.ndarray:
    """``times`` as a float64 (T,) array: finite, >= 0, non-decreasing (ValueError naming it)."""
    if isinstance(times, (bool, np.bool_)) or isinstance(times, (str, bytes)):
        raise TypeError(f"times: expected a 1-D array of numbers, got {times!r}")
    try:
        arr = np.asarray(times, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"times: expected a 1-D array of numbers, got {times!r}") from None
    if arr.ndim == 0:
        arr = arr[None]
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"times: expected a non-empty 1-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"times: expected finite times >= 0, got {arr.tolist()[:6]}")
    if np.any(np.diff(arr) < 0):
        raise ValueError(f"times: expected non-decreasing times, got {arr.tolist()[:6]}")
    return arr


def exact_evolution(
    hamiltonian: SpinHamiltonian,
    psi0,
    times,
    *,
    total_sz="auto",
    imaginary: bool = False,
):
    """Exact (real- or imaginary-) time evolution of a vector by the sparse propagator.

    ``psi(t) = exp(-i t H) psi0`` (real time, ``hbar = 1``, t in inverse units of H) or
    ``psi(tau) = exp(-tau H) psi0 / ||...||`` (``imaginary=True``), from
    ``scipy.sparse.linalg.expm_multiply`` applied from one time to the next, so any
    non-decreasing times work (evenly spaced or not). Up to ~24 sites in a sector.

    Args:
      hamiltonian: a :class:`~quantax_lite.operators.hamiltonian.SpinHamiltonian`.
      psi0: ``(n,)`` initial vector in the basis ``all_states(n_sites, total_sz)``
        (normalized here; it need not be).
      times: ``(T,)`` non-decreasing times >= 0 (a scalar is one time), measured from
        ``psi0`` at t = 0.
      total_sz: the sector, as in :func:`ground_state` (``"auto"``: Sz = 0 or 1/2 when H
        conserves Sz, the whole space otherwise).
      imaginary: imaginary-time evolution (each state normalized).
    Returns:
      ``(vectors, basis_states)``: ``(T, n)`` complex128 unit vectors and the basis
      ``(n, n_sites)`` int8.
    """
    if not isinstance(hamiltonian, SpinHamiltonian):
        raise TypeError(f"hamiltonian: expected a SpinHamiltonian, got {type(hamiltonian).__name__}")
    if not isinstance(imaginary, (bool, np.bool_)):
        raise TypeError(f"imaginary: expected a bool, got {imaginary!r}")
    times = _check_times(times)
    total_sz = resolve_total_sz(hamiltonian, total_sz)
    states = all_states(hamiltonian.n_sites, total_sz)
    psi = np.asarray(psi0)
    if psi.shape != (len(states),):
        raise ValueError(f"psi0: expected shape ({len(states)},) (the basis of total_sz={total_sz}), "
                         f"got {psi.shape}")
    psi = psi.astype(np.complex128)
    norm = np.linalg.norm(psi)
    if not np.isfinite(norm) or norm == 0:
        raise ValueError("psi0: expected a finite, nonzero vector")
    psi = psi / norm
    H = hamiltonian.to_sparse(states).tocsr()
    if imaginary:
        # exp(-tau (H - E_ref)): the shift keeps the norm near 1 over long times
        e_ref = float(np.vdot(psi, H @ psi).real)
        generator = -(H - e_ref * sp.identity(H.shape[0], format="csr"))
    else:
        generator = -1j * H
    out = np.empty((len(times), len(psi)), np.complex128)
    t_now = 0.0
    for k, t in enumerate(times):
        if t > t_now:
            psi = spla.expm_multiply((t - t_now) * generator, psi)
            if imaginary:
                psi = psi / np.linalg.norm(psi)
            t_now = t
        out[k] = psi
    return out, states


def _observable_matrix(name: str, observable, states: np.ndarray):
    """A sparse or dense matrix (or a diagonal as a vector) of ``observable`` on ``states``."""
    n = len(states)
    if isinstance(observable, SpinHamiltonian):
        return observable.to_sparse(states)
    if sp.issparse(observable):
        if observable.shape != (n, n):
            raise ValueError(f"observables[{name!r}]: expected a ({n}, {n}) matrix, got {observable.shape}")
        return observable.tocsr()
    if callable(observable):
        diag = np.asarray(observable(states))
        if diag.shape != (n,):
            raise ValueError(f"observables[{name!r}]: a function of the states (n, n_sites) must return "
                             f"their diagonal values ({n},), got shape {diag.shape}")
        return diag
    arr = np.asarray(observable)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise TypeError(f"observables[{name!r}]: expected a SpinHamiltonian, a sparse or dense matrix, a "
                        f"diagonal vector or a function of the states, got {type(observable).__name__}")
    if arr.shape not in ((n,), (n, n)):
        raise ValueError(f"observables[{name!r}]: expected a diagonal ({n},) or a matrix ({n}, {n}), "
                         f"got shape {arr.shape}")
    return arr


def exact_observables(observables: dict, vectors, basis_states) -> dict:
    """Expectation values ``<psi(t)| A |psi(t)>`` along a trajectory of unit vectors.

    Args:
      observables: ``{name: A}`` with ``A`` a :class:`~quantax_lite.operators.hamiltonian.SpinHamiltonian`
        (a Hamiltonian, a :class:`~quantax_lite.operators.local_operators.LocalOperator`), a scipy
        sparse or dense ``(n, n)`` matrix, a diagonal ``(n,)``, or a function
        ``f(basis_states) -> (n,)`` of diagonal values (e.g. a magnetization).
      vectors: ``(T, n)`` unit vectors (:func:`exact_evolution`'s) or one ``(n,)``.
      basis_states: ``(n, n_sites)``, the basis of the vectors.
    Returns:
      ``{name: (T,) array}``: float64 for a Hermitian ``A`` (the real part), complex128
      otherwise.
    """
    if not isinstance(observables, dict):
        raise TypeError(f"observables: expected a dict {{name: operator}}, got {type(observables).__name__}")
    states = np.asarray(basis_states)
    if states.ndim != 2:
        raise ValueError(f"basis_states: expected shape (n, n_sites), got {states.shape}")
    psi = np.asarray(vectors)
    if psi.ndim == 1:
        psi = psi[None]
    if psi.ndim != 2 or psi.shape[1] != len(states):
        raise ValueError(f"vectors: expected shape (T, {len(states)}), got {np.shape(vectors)}")
    out = {}
    for name, observable in observables.items():
        a = _observable_matrix(name, observable, states)
        if np.ndim(a) == 1:
            values = (np.abs(psi) ** 2) @ a
            hermitian = not np.iscomplexobj(a) or np.allclose(np.imag(a), 0)
        else:
            values = np.einsum("tn,tn->t", psi.conj(), np.asarray((a @ psi.T)).T)
            diff = a - a.conj().T
            scale = max(abs(a).max(), 1e-300)
            hermitian = (abs(diff).max() if diff.size else 0.0) <= 1e-12 * scale
        out[name] = np.real(values).astype(np.float64) if hermitian else values.astype(np.complex128)
    return out
