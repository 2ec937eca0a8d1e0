"""Regularized solves of the TDVP equation ``S θ̇ = rhs`` (:mod:`.equation`).

S is singular (the norm and the global phase of psi are gauge directions) and, from
samples, noisy. Three ways to solve it, each a small frozen (hashable) record whose
``solve(equation) -> (θ̇, info)`` is jittable:

- :class:`Shift`: ``(S + eps I) θ̇ = rhs`` with ``eps = diag_shift + diag_scale *
  trace(S) / P``, by Cholesky (:func:`quantax_lite.optimizer.stochastic_reconfiguration.solve_psd`, the SR solve and its
  backend policy); with fewer rows than parameters the same solution through the rows'
  Gram matrix. Cheap; biases every direction with an eigenvalue near ``eps``.
- :class:`PseudoInverse`: S's eigendecomposition, eigenvalues below ``rcond`` times the
  largest dropped (a hard cutoff) or damped by ``1 / (1 + (rcond lambda_max /
  lambda)^6)`` (``smooth=True``); with fewer rows (samples) than parameters the same
  solution from the eigendecomposition of the rows' Gram matrix, the smaller one.
- :class:`SignalToNoise`: the pseudo-inverse with a smooth cutoff, and each eigen-direction
  k also damped by ``1 / (1 + (snr_cutoff / SNR_k)^6)``, where SNR_k = |rho_k| / (the
  Monte Carlo error of rho_k), rho = V^H rhs, the error from the spread of the rows'
  contributions to rho (Schmitt & Heyl, PRL 125, 100503 (2020); jVMC). With exact sums
  there is no noise and it is the smooth pseudo-inverse.

Precision: the eigendecomposition runs in the wide dtype on CPUs (float64); on an
accelerator (no float64 and no eigendecomposition in a device program, see
:mod:`quantax_lite.utils.tuning`) S and the pieces it needs go to the host, where numpy solves in
float64 (``jax.pure_callback``), and come back in float32.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from quantax_lite.utils import tuning
from quantax_lite.utils.validate import finite_number
from quantax_lite.optimizer.stochastic_reconfiguration import solve_psd
from .equation import TDVPEquation

__all__ = ["Shift", "PseudoInverse", "SignalToNoise", "Regularization", "hermitian_eigh"]


def hermitian_eigh(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(eigenvalues ascending (P,), eigenvectors (P, P)) of a Hermitian ``a``, where it is
    accurate: in the program on a backend whose tuning allows float64 on the device (CPUs),
    else on the host in float64 (numpy), returned in ``a``'s dtype."""
    if tuning.current().device_float64:
        return jnp.linalg.eigh(a)
    real = jnp.finfo(a.dtype).dtype

    def host(x):
        x = np.asarray(x)
        x = x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)
        w, v = np.linalg.eigh(x)
        return w.astype(real), v.astype(a.dtype)

    shapes = (jax.ShapeDtypeStruct(a.shape[:1], real), jax.ShapeDtypeStruct(a.shape, a.dtype))
    return jax.pure_callback(host, shapes, a)


def _soft(x: jax.Array, cutoff) -> jax.Array:
    """``1 / (1 + (cutoff / x)^6)`` for x >= 0 (0 at x = 0)."""
    ratio = cutoff / jnp.where(x > 0, x, 1.0)
    return jnp.where(x > 0, 1.0 / (1.0 + ratio**6), 0.0)


def _check_rcond(rcond) -> float:
    value = finite_number(rcond, "rcond", minimum=0)
    if value >= 1:
        raise ValueError(f"rcond: expected a number in [0, 1), got {rcond!r}")
    return value


@dataclasses.dataclass(frozen=True)
class Shift:
    """``(S + eps I) θ̇ = rhs``, ``eps = diag_shift + diag_scale * trace(S) / P`` (both >= 0,
    not both 0), Cholesky with the SR solve's fallback (:func:`quantax_lite.optimizer.stochastic_reconfiguration.solve_psd`)."""

    diag_shift: float = 1e-8
    diag_scale: float = 0.0

    def __post_init__(self):
        shift = finite_number(self.diag_shift, "diag_shift", minimum=0)
        scale = finite_number(self.diag_scale, "diag_scale", minimum=0)
        if shift == 0 and scale == 0:
            raise ValueError("diag_shift: expected diag_shift > 0 or diag_scale > 0 (S is singular), got both 0")
        object.__setattr__(self, "diag_shift", shift)
        object.__setattr__(self, "diag_scale", scale)

    def solve(self, equation: TDVPEquation) -> tuple[jax.Array, dict]:
        a, b = equation.rows()
        n_rows, n_par = a.shape
        choices = tuning.current()
        if n_rows < n_par:
            # fewer rows than parameters: (A^H A + eps I)^-1 A^H b = A^H (A A^H + eps I)^-1 b,
            # the smaller system; trace(S) = trace(A A^H)
            def shifted(gram, b):
                eps = self.diag_shift + self.diag_scale * jnp.real(jnp.trace(gram)) / n_par
                return solve_psd(gram + eps * jnp.eye(n_rows, dtype=gram.dtype), b.astype(jnp.result_type(gram, b)),
                                 solver=choices.sr_solve, refinement=choices.sr_refinement)

            x, fallback = _through_gram(a, b, shifted)
            return x.astype(equation.rhs.dtype), {"kept": jnp.asarray(n_par, jnp.int32), "fallback": fallback}
        s = equation.s
        eps = self.diag_shift + self.diag_scale * jnp.real(jnp.trace(s)) / n_par
        rhs = equation.rhs.astype(jnp.result_type(s, equation.rhs))
        x, fallback = solve_psd(s + eps * jnp.eye(n_par, dtype=s.dtype), rhs, solver=choices.sr_solve,
                                refinement=choices.sr_refinement)
        return x, {"kept": jnp.asarray(n_par, jnp.int32), "fallback": fallback}


@dataclasses.dataclass(frozen=True)
class PseudoInverse:
    """θ̇ = V diag(f(lambda) / lambda) V^H rhs with S = V diag(lambda) V^H: ``f`` 1 above
    ``rcond * lambda_max`` and 0 below (``smooth=False``), or ``1 / (1 + (rcond
    lambda_max / lambda)^6)`` (``smooth=True``)."""

    rcond: float = 1e-10
    smooth: bool = False

    def __post_init__(self):
        object.__setattr__(self, "rcond", _check_rcond(self.rcond))
        if not isinstance(self.smooth, (bool, np.bool_)):
            raise TypeError(f"smooth: expected a bool, got {self.smooth!r}")

    def filter(self, lam: jax.Array) -> jax.Array:
        """The factor f(lambda) (P,) of the eigenvalues ``lam``."""
        cut = self.rcond * jnp.max(jnp.abs(lam))
        if self.smooth:
            return _soft(lam, cut)
        return (lam > cut).astype(lam.dtype)

    def solve(self, equation: TDVPEquation) -> tuple[jax.Array, dict]:
        a, b = equation.rows()
        if a.shape[0] < a.shape[1]:
            # fewer rows than parameters: with S = A^H A, f(S) S^+ A^H b = A^H f(T) T^+ b for the
            # rows' Gram matrix T = A A^H (the same nonzero eigenvalues), a smaller eigenproblem
            def spectral(gram, b):
                lam, u = hermitian_eigh(gram)
                f = self.filter(lam)
                return _spectral_solve(lam, u, f, b), f

            x, f = _through_gram(a, b, spectral)
            return x.astype(equation.rhs.dtype), {"kept": jnp.sum(f > 0.5).astype(jnp.int32)}
        lam, v = hermitian_eigh(equation.s)
        f = self.filter(lam)
        return _spectral_solve(lam, v, f, equation.rhs), {"kept": jnp.sum(f > 0.5).astype(jnp.int32)}


@dataclasses.dataclass(frozen=True)
class SignalToNoise:
    """The smooth pseudo-inverse (cutoff ``rcond``), with each eigen-direction also damped by
    ``1 / (1 + (snr_cutoff / SNR_k)^6)``; SNR_k = |rho_k| sqrt(N) / std_s(Q_sk), rho = V^H
    rhs, Q_s = V^H q_s the rows' contributions (samples only; exact sums have no noise)."""

    snr_cutoff: float = 2.0
    rcond: float = 1e-10

    def __post_init__(self):
        object.__setattr__(self, "snr_cutoff", finite_number(self.snr_cutoff, "snr_cutoff", minimum=0))
        object.__setattr__(self, "rcond", _check_rcond(self.rcond))

    def solve(self, equation: TDVPEquation) -> tuple[jax.Array, dict]:
        lam, v = hermitian_eigh(equation.s)
        f = PseudoInverse(self.rcond, smooth=True).filter(lam)
        if not equation.exact:
            n = equation.weights.shape[0]
            with tuning.matmul_precision():
                rho = jnp.conj(v).T @ equation.rhs.astype(v.dtype)
                q = equation.per_row_rhs.astype(jnp.result_type(v.dtype, equation.rhs.dtype)) @ jnp.conj(v)
            spread = jnp.sqrt(jnp.mean(jnp.abs(q - rho) ** 2, axis=0))  # (P,), std over the samples
            snr = jnp.abs(rho) * np.sqrt(n) / jnp.where(spread > 0, spread, 1.0)
            snr = jnp.where(spread > 0, snr, jnp.inf)
            f = f * _soft(snr, self.snr_cutoff)
        return _spectral_solve(lam, v, f, equation.rhs), {"kept": jnp.sum(f > 0.5).astype(jnp.int32)}


def _through_gram(a, b, solve):
    """``(A^H y, aux)`` with ``(y, aux) = solve(A A^H, b)``: a solve of ``S = A^H A`` against
    ``rhs = A^H b`` through the rows' Gram matrix, for A (R, P) with fewer rows than columns."""
    with tuning.matmul_precision():
        gram = a @ jnp.conj(a).T
    y, aux = solve(gram, b)
    with tuning.matmul_precision():
        return jnp.conj(a).T @ y, aux


def _spectral_solve(lam, v, f, rhs):
    inv = jnp.where(f > 0, f / jnp.where(lam > 0, lam, 1.0), 0.0) * (lam > 0)
    with tuning.matmul_precision():
        rho = jnp.conj(v).T @ rhs.astype(v.dtype)
        x = v @ (inv * rho)
    return x.real if not jnp.iscomplexobj(rhs) else x


Regularization = Shift | PseudoInverse | SignalToNoise
