"""The TDVP equation from per-sample Jacobians and local energies.

With O[s, k] = d log psi(s) / d theta_k (``quantax_lite.jacobian``) and E_loc(s) the local
energies, every row s weighs w_s (1/N for N samples of |psi|^2, the exact probability
with exact sums). Centred and scaled,

    Ō_s = sqrt(w_s) (O_s - <O>),      ē_s = sqrt(w_s) (E_loc(s) - <E_loc>),

so S = Ō^H Ō = <O^† O> - <O^†><O> and F = Ō^H ē = <O^† E_loc> - <O^†><E_loc>. The
time-dependent variational principle asks Ō θ̇ ≈ ḡ with ḡ = -i ē (real time, hbar = 1)
or ḡ = -ē (imaginary time), i.e. S θ̇ = -i F or S θ̇ = -F. With real parameters (a real
network, possibly with a complex log psi) the motion is the real part, Re(S) θ̇ = Re(Ō^H ḡ)
(McLachlan's principle, as the literature does); with complex parameters (a holomorphic
log psi) the complex equation is solved.

Precision: every sum here is in :func:`quantax_lite.utils.tuning.wide_dtype` (float64 on CPUs,
float32 on accelerators) with the products at the tuning's precision; the Jacobian keeps
its own dtype until it is centred.
"""
from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp

from quantax_lite.utils import tuning

__all__ = ["TDVPEquation", "tdvp_equation", "s_norm", "residual"]


@partial(jax.tree_util.register_dataclass,
         data_fields=["rhs", "o_bar", "g_bar", "weights", "energy", "variance"],
         meta_fields=["real_params", "exact"])
@dataclasses.dataclass(frozen=True)
class TDVPEquation:
    """``S θ̇ = rhs`` with the centred rows it came from (a pytree).

    rhs: (P,) ``Ō^H ḡ`` (its real part for real parameters); ḡ = -i ē or -ē.
    o_bar: (N, P) Ō, the centred Jacobian scaled by sqrt(w), wide dtype.
    g_bar: (N,) ḡ, the centred local energies scaled by sqrt(w) times -i or -1.
    weights: (N,) w, the rows' weights (sum 1; 0 for padding rows).
    energy: the mean local energy <E_loc> (complex scalar, energy units).
    variance: <|E_loc - <E_loc>|^2> (real scalar, energy units squared).
    real_params: the parameters are real (static). exact: exact sums, not samples (static).

    S itself (:attr:`s`) is formed only where it is asked for: a solve through the rows'
    Gram matrix (fewer rows than parameters) never needs it.
    """

    rhs: jax.Array
    o_bar: jax.Array
    g_bar: jax.Array
    weights: jax.Array
    energy: jax.Array
    variance: jax.Array
    real_params: bool = True
    exact: bool = False

    def rows(self) -> tuple[jax.Array, jax.Array]:
        """``(A, b)`` with ``S = A^H A`` and ``rhs = A^H b`` (:func:`equation_rows`)."""
        return equation_rows(self.o_bar, self.g_bar, self.real_params)

    @property
    def s(self) -> jax.Array:
        """(P, P) S = A^H A (real symmetric for real parameters, Hermitian otherwise), wide
        dtype; formed on each access."""
        a = self.rows()[0]
        with tuning.matmul_precision():
            return jnp.conj(a).T @ a

    def metric(self) -> jax.Array:
        """What :func:`s_norm` needs of this equation, the smaller of S (P, P) and the rows
        A (R, P) with S = A^H A: the rows where there are fewer rows than parameters."""
        a = self.rows()[0]
        return a if a.shape[0] < a.shape[1] else self.s

    @property
    def per_row_rhs(self) -> jax.Array:
        """(N, P): row s's contribution ``conj(Ō_s) ḡ_s / w_s`` to ``rhs`` (its weighted mean
        is ``rhs``; real part for real parameters), 0 on rows of weight 0. The spread of
        these over the samples is the noise of ``rhs`` (the signal-to-noise cutoff)."""
        w = self.weights
        inv = jnp.where(w > 0, 1.0 / jnp.where(w > 0, w, 1.0), 0.0)
        q = jnp.conj(self.o_bar) * (self.g_bar * inv)[:, None]
        return q.real if self.real_params else q


def tdvp_equation(jac: jax.Array, e_loc: jax.Array, *, weights: jax.Array | None = None,
                  real_params: bool = True, imaginary: bool = False, exact: bool | None = None) -> TDVPEquation:
    """The TDVP equation of one batch (jittable).

    Args:
      jac: (N, P) raw per-sample Jacobian d log psi / d theta (real or complex), in the
        column order of ``ravel_pytree(params)``.
      e_loc: (N,) local energies (energy units).
      weights: None (N samples of |psi|^2, each weighing 1/N) or (N,) probabilities summing
        to 1 (exact sums, e.g. ``FullSumSampler.probabilities``, or the importance weights
        of samples of |psi|^(2a), :func:`~quantax_lite.stats.chains.importance_weights`).
      real_params: real parameters: solve the real part of the equation.
      imaginary: imaginary time (S θ̇ = -F) instead of real time (S θ̇ = -i F).
      exact: whether the rows are exact sums (no noise); default: whether ``weights`` is
        given (pass False for importance weights of samples).
    Returns:
      A :class:`TDVPEquation`; θ̇ has units of 1/time (energy, with hbar = 1).
    """
    if jnp.ndim(jac) != 2 or jnp.ndim(e_loc) != 1 or e_loc.shape[0] != jac.shape[0]:
        raise ValueError(f"jac: expected (N, P) with e_loc (N,), got {jnp.shape(jac)} and {jnp.shape(e_loc)}")
    n = jac.shape[0]
    wide = tuning.wide_dtype()
    cwide = tuning.wide_dtype(jnp.complex64)
    exact = weights is not None if exact is None else bool(exact)
    w = jnp.full((n,), 1.0 / n, wide) if weights is None else jnp.asarray(weights, wide)
    o = jac.astype(cwide if jnp.iscomplexobj(jac) else wide)
    e = e_loc.astype(cwide)
    with tuning.matmul_precision():
        o_mean = w @ o
        energy = jnp.sum(w * e)
        sqrt_w = jnp.sqrt(w)
        o_bar = (o - o_mean) * sqrt_w[:, None]
        e_bar = (e - energy) * sqrt_w
        g_bar = e_bar * (-1.0 if imaginary else -1.0j)
        a, b = equation_rows(o_bar, g_bar, bool(real_params))
        rhs = jnp.conj(a).T @ b
    variance = jnp.sum(jnp.abs(e_bar) ** 2)
    return TDVPEquation(rhs=rhs, o_bar=o_bar, g_bar=g_bar, weights=w, energy=energy, variance=variance,
                        real_params=bool(real_params), exact=exact)


def equation_rows(o_bar: jax.Array, g_bar: jax.Array, real_params: bool) -> tuple[jax.Array, jax.Array]:
    """``(A, b)`` with ``S = A^H A`` and ``rhs = A^H b``: ``(Ō, ḡ)`` for complex parameters; for
    real ones ``A = [Re Ō; Im Ō]`` (2N, P), ``b = [Re ḡ; Im ḡ]`` (real, and half the work of
    the complex product whose real part S is), or ``(Ō, Re ḡ)`` for a real Ō."""
    if not real_params:
        return o_bar, g_bar
    if jnp.iscomplexobj(o_bar):
        return jnp.concatenate([o_bar.real, o_bar.imag], axis=0), jnp.concatenate([g_bar.real, g_bar.imag])
    return o_bar, g_bar.real


def s_norm(s: jax.Array, delta: jax.Array) -> jax.Array:
    """``sqrt(Re delta^H S delta)`` for a (P,) parameter change and S (P, P) of a
    :class:`TDVPEquation` (or, where ``s`` is not square, its rows A (R, P) with S = A^H A:
    ``||A delta||``, :meth:`TDVPEquation.metric`): to first order the distance ``|| d psi ||``
    between the normalized states it moves between (gauge directions, the norm and the
    global phase, count 0)."""
    delta = delta.astype(jnp.result_type(s.dtype, delta.dtype))
    with tuning.matmul_precision():
        if s.shape[0] != s.shape[1]:
            return jnp.sqrt(jnp.sum(jnp.abs(s.astype(delta.dtype) @ delta) ** 2))
        quad = jnp.real(jnp.vdot(delta, s.astype(delta.dtype) @ delta))
    return jnp.sqrt(jnp.maximum(quad, 0.0))


def residual(equation: TDVPEquation, theta_dot: jax.Array) -> jax.Array:
    """The relative TDVP residual ``||Ō θ̇ - ḡ||^2 / ||ḡ||^2`` (0: the variational motion is
    the exact one; 1: it captures none of it), a real scalar."""
    with tuning.matmul_precision():
        moved = equation.o_bar @ theta_dot.astype(jnp.result_type(equation.o_bar.dtype, theta_dot.dtype))
    miss = jnp.sum(jnp.abs(moved - equation.g_bar) ** 2)
    total = jnp.sum(jnp.abs(equation.g_bar) ** 2)
    return miss / jnp.where(total > 0, total, 1.0)
