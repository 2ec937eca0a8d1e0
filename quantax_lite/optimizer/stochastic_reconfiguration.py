"""Stochastic reconfiguration (SR) and MinSR: the natural-gradient direction.

Notation. ``jac`` is the per-sample Jacobian O[s, k] = d log psi(s) / d theta_k of
``N`` samples drawn from |psi|^2 (shape ``(N, P)``), ``e_loc`` the local energies
(shape ``(N,)``). With the centered, normalized quantities

    Ō = (O - <O>) / sqrt(N),      ē = (E_loc - <E_loc>) / sqrt(N),

SR solves the ``P x P`` system

    (S + eps I) dtheta = F,       S = Ō^H Ō,   F = Ō^H ē,

and MinSR (for ``N < P``) the ``N x N`` one, through the push-through identity

    dtheta = Ō^H (T + eps I)^-1 ē,   T = Ō Ō^H,

which gives the same ``dtheta`` as SR for the same ``eps``.

Exact sums. With ``weights`` p (one probability per row, summing to 1) in place of
samples, every mean above is ``sum_s p_s x_s`` and the rows are scaled by
``sqrt(p_s)`` instead of ``1 / sqrt(N)``: Ō = sqrt(p) (O - <O>), ē = sqrt(p) (E_loc -
<E>). The rows are then configurations (or orbit representatives) of a sector with
their exact weights, and S, F are exact (:class:`quantax_lite.sampler.FullSumSampler`).

Real parameters (the default, ``real_params=True``) with a complex ``jac`` use
the real formulation: the rows of Ō and ē are stacked as ``[Re; Im]``, so
S = Re(Ō^H Ō), F = Re(Ō^H ē) and T is ``2N x 2N``; the update is real. With
``real_params=False`` (holomorphic networks with complex parameters) the
complex formulation is solved and the update is complex.

Sign convention. ``F`` is half the energy gradient (for real parameters,
dE/dtheta = 2 F), and ``dtheta`` is a *descent direction*, used like a gradient:

    params_new = params - lr * dtheta        (imaginary-time evolution)

so ``optax.sgd(lr)`` (whose update is ``-lr * grads``) applied to
``grads = dtheta`` performs exactly this step (see :func:`quantax_lite.optimizer.update.natural_gradient`).

Regularization. ``eps = diag_shift + diag_scale * trace(S) / P``: an absolute
shift plus a shift relative to the mean diagonal of S. ``trace(S) = trace(T)``,
so SR and MinSR use the same ``eps`` and agree.

Solver. A Cholesky solve; if the factor or the solution is not finite, or the
factor shows the matrix to be numerically singular (smallest pivot^2 below
``rcond`` times the largest), an eigendecomposition pseudo-inverse that drops
eigenvalues below ``rcond`` times the largest is used instead (decided inside
jit with ``lax.cond``).

Precision. The system is shifted and solved in the wide dtype of
:func:`quantax_lite.utils.tuning.wide_dtype`: float64 (complex128) on CPUs with
``jax_enable_x64`` on, even when ``jac`` is float32/complex64; float32 (complex64) on
accelerators, which have no fast float64, or with ``jax_enable_x64`` off. There the
matrix products run at "highest" precision and the solve is a Cholesky with iterative
refinement and no eigendecomposition (``tuning.current().sr_solve``, see
:func:`solve_psd`). ``jac`` is converted to the wide dtype block by block (about
``tuning.current().sr_block_bytes`` at a time), so no wide copy of the whole Jacobian
is made. The matrix S or T is formed as ``tuning.current().gram_precision`` says (a
speed choice, see :mod:`quantax_lite.utils.tuning`): ``"jacobian"`` (default) in the
Jacobian's own precision from Ō centred in the wide dtype and then rounded (a large
column mean costs no digits); ``"float64"`` in the wide dtype. The right-hand side and
the final ``Ō^H y`` are in the wide dtype either way. All of these are read when
:func:`sr_direction` is called (traced, for a call inside jit).

Several devices. ``jac`` is sample-sharded over the mesh (as returned by
:func:`quantax_lite.optimizer.log_derivatives.jacobian`). The solve runs in one ``jax.shard_map``:

* SR: each device forms its rows' contribution to S and F, then ``psum``
  (all-reduce of ``P x P`` and ``P``); ``jac`` never leaves its device.
* MinSR: every entry of T couples two samples that may live on different
  devices, so some data of ``jac`` must move. It is re-sharded from samples to
  parameters with one ``all_to_all``: each device then holds all samples for
  ``P / D`` parameters (the same per-device memory as before, never the whole
  ``jac``), forms its parameters' contribution to T, and the ``N x N`` sum is an
  all-reduce; each device computes its ``P / D`` entries of ``dtheta``, which are
  then all-gathered (a ``P``-vector). Per device the all-to-all sends and receives
  ``(D - 1) N P / D^2`` entries; all-gathering ``jac`` instead would receive
  ``(D - 1) N P / D`` entries (D times more) and hold all ``N x P`` of them on
  every device. With ``N`` close to ``P / D`` or above, the all-reduce of the
  ``N x N`` float64 T is the larger transfer: the price of solving the small
  system whole on every device. The local energies (``N`` numbers) are
  all-gathered too. When ``P`` is not a multiple of the device count, ``jac`` is
  padded with zero columns first (one local copy).

The small ``N x N`` (or ``P x P``) system itself is solved redundantly on every
device.

Preconditioners (SR, SPRING, plain gradient) as composable ``init`` / ``update``
pairs are in :mod:`quantax_lite.optimizer.preconditioners`; :func:`quantax_lite.optimizer.update.natural_gradient` applies
one to the Jacobian of a network.
"""
from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec

from quantax_lite.utils import tuning
from quantax_lite.optimizer._blocked import axis_name, block_rows, blocked_concat, blocked_sum
from quantax_lite.utils.mesh import make_mesh, mesh_size

__all__ = [
    "SRInfo",
    "choose_method",
    "solve_psd",
    "sr_direction",
    "unravel_like",
]

# The ``method`` values of :func:`sr_direction` (also checked by ``preconditioners.sr``).
METHODS = ("auto", "sr", "minsr")


@partial(jax.tree_util.register_dataclass, data_fields=["eps", "used_fallback"], meta_fields=["method"])
@dataclasses.dataclass(frozen=True)
class SRInfo:
    """Diagnostics of one SR / MinSR solve (a pytree: can leave a jitted function).

    method: "sr" or "minsr", the path taken (static).
    eps: the diagonal shift actually added (a scalar of the solve's dtype).
    used_fallback: True where the eigendecomposition pseudo-inverse replaced
      the Cholesky solve (bool scalar).
    """

    method: str
    eps: jax.Array
    used_fallback: jax.Array


# --------------------------------------------------------------------------------------
# Dense solver
# --------------------------------------------------------------------------------------


def _pinv_solve(a: jax.Array, b: jax.Array, rcond: float) -> jax.Array:
    """x = A^+ b for a Hermitian PSD A via eigh, eigenvalues < rcond * max dropped."""
    w, v = jnp.linalg.eigh(a)
    w_max = jnp.max(jnp.abs(w))
    keep = w > rcond * w_max
    w_inv = jnp.where(keep, 1.0 / jnp.where(keep, w, 1.0), 0.0)
    return v @ (w_inv * (v.conj().T @ b))


def _cholesky_solve(a: jax.Array, b: jax.Array, refinement: int) -> tuple[jax.Array, jax.Array]:
    """(x, pivots^2): a Cholesky solve of A x = b, then ``refinement`` steps of iterative
    refinement (x += A^-1 (b - A x), the residual formed with the matrix itself)."""
    l_factor = jnp.linalg.cholesky(a)
    x = jax.scipy.linalg.cho_solve((l_factor, True), b)
    for _ in range(refinement):
        x = x + jax.scipy.linalg.cho_solve((l_factor, True), b - a @ x)
    return x, jnp.abs(jnp.diagonal(l_factor)) ** 2


def _factor_ok(x: jax.Array, pivots2: jax.Array, rcond: float) -> jax.Array:
    """The solution is finite and the smallest squared pivot exceeds ``rcond`` times the
    largest (a non-finite entry of the factor reaches the solution: NaN * 0 is NaN)."""
    return jnp.all(jnp.isfinite(x)) & (jnp.min(pivots2) > rcond * jnp.max(pivots2))


def solve_psd(a: jax.Array, b: jax.Array, *, rcond: float = 1e-12, solver: str = "cholesky_eigh",
              refinement: int = 2) -> tuple[jax.Array, jax.Array]:
    """Solve A x = b for a Hermitian positive (semi-)definite A.

    ``solver="cholesky_eigh"`` (float64 on CPUs): Cholesky first; falls back to an
    eigendecomposition pseudo-inverse (cutoff ``rcond`` relative to the largest
    eigenvalue) when the solution is not finite or the smallest squared pivot is below
    ``rcond`` times the largest (numerically singular A).

    ``solver="cholesky_refine"`` (float32 on accelerators, where an eigendecomposition is
    slow to compile): Cholesky with ``refinement`` steps of iterative refinement; where
    that fails as above (``rcond`` raised to the dtype's epsilon), the same on
    ``A + delta I`` with ``delta = n * epsilon * max_i A_ii`` (a stronger shift instead of
    a pseudo-inverse). The program holds no eigendecomposition. Jittable.

    Args:
      a: (n, n) Hermitian matrix.
      b: (n,) right-hand side.
      rcond: relative cutoff, a float in [0, 1).
      solver: "cholesky_eigh" or "cholesky_refine".
      refinement: refinement steps of "cholesky_refine" (>= 0).

    Returns:
      (x, used_fallback): x of shape (n,), used_fallback a bool scalar.
    """
    if solver == "cholesky_eigh":
        x_chol, pivots2 = _cholesky_solve(a, b, 0)
        ok = _factor_ok(x_chol, pivots2, rcond)
        x = lax.cond(ok, lambda: x_chol, lambda: _pinv_solve(a, b, rcond))
        return x, jnp.logical_not(ok)
    if solver != "cholesky_refine":
        raise ValueError(f"solver: expected 'cholesky_eigh' or 'cholesky_refine', got {solver!r}.")
    n = a.shape[0]
    epsilon = float(jnp.finfo(a.dtype).eps)
    cutoff = max(rcond, epsilon)
    x_chol, pivots2 = _cholesky_solve(a, b, refinement)
    ok = _factor_ok(x_chol, pivots2, cutoff)

    def shifted():
        delta = n * epsilon * jnp.max(jnp.abs(jnp.diagonal(a)))
        return _cholesky_solve(a + delta * jnp.eye(n, dtype=a.dtype), b, refinement)[0]

    x = lax.cond(ok, lambda: x_chol, shifted)
    return x, jnp.logical_not(ok)


# --------------------------------------------------------------------------------------
# Blocked, float64 formation of S, F, T (the loops are in quantax_lite.optimizer._blocked)
# --------------------------------------------------------------------------------------


def _gram(a: jax.Array) -> jax.Array:
    """``a @ a^H`` for ``a`` (m, k), computing only the upper block triangle.

    The rows are split into up to 4 panels of at least 256 rows; the products of panel
    pairs (i <= j) are formed and the lower blocks mirrored: about 5/8 of the
    multiply-adds of the plain product for 4 panels.
    """
    m = a.shape[0]
    n_panels = int(min(4, m // 256))
    if n_panels < 2:
        return a @ a.conj().T
    edges = [m * i // n_panels for i in range(n_panels + 1)]
    panels = [a[edges[i] : edges[i + 1]] for i in range(n_panels)]
    blocks = [[None] * n_panels for _ in range(n_panels)]
    for i in range(n_panels):
        for j in range(i, n_panels):
            blocks[i][j] = panels[i] @ panels[j].conj().T
            if j != i:
                blocks[j][i] = blocks[i][j].conj().T
    return jnp.block(blocks)


def _stack_real(x: jax.Array, axis: int = 0) -> jax.Array:
    """[Re x; Im x] along ``axis`` (x itself if x is real)."""
    if not jnp.iscomplexobj(x):
        return x
    return jnp.concatenate([x.real, x.imag], axis=axis)


def _real_or_complex(x: jax.Array, dtype) -> Any:
    """``dtype``'s precision with the kind (real / complex) of ``x``."""
    real_dt = jnp.finfo(dtype).dtype
    return jnp.result_type(real_dt, jnp.complex64) if jnp.iscomplexobj(x) else real_dt


def _row_weights(n_loc, n, axis, dtype):
    """1.0 for this device's real rows, 0.0 for padding rows (global index >= n)."""
    start = lax.axis_index(axis) * n_loc
    return ((start + jnp.arange(n_loc)) < n).astype(dtype)


def _wide_kinds(numerics) -> tuple:
    """(real, complex) dtypes of the solve: float64 / complex128 or float32 / complex64."""
    real_dt = np.dtype(numerics[0])
    return real_dt, np.dtype(np.complex128 if real_dt == np.float64 else np.complex64)


def _sr_kernel(jac, e, p, *, n, real, weighted, eps_args, rcond, block, axis, gram_precision, numerics):
    """SR on one device's rows (jac (n_loc, P), e (n_loc,)); psum over ``axis``. ``p``
    (n_loc,): the rows' probabilities when ``weighted`` (exact sums), else unused (each of
    the n samples weighs 1 / n).

    S is formed in ``jac.dtype`` with ``gram_precision="jacobian"``, F always in the wide
    dtype of ``numerics`` (float64 on CPUs)."""
    wide_r, wide_c = _wide_kinds(numerics)
    cdt = wide_c if jnp.iscomplexobj(jac) else wide_r
    if real or not (jnp.iscomplexobj(jac) or jnp.iscomplexobj(e)):
        out_dt = wide_r
    else:
        out_dt = wide_c
    n_loc, n_par = jac.shape
    if weighted:
        # Ō = sqrt(p) (O - sum_s p O), ē = sqrt(p) (E - sum_s p E)
        o_mean = lax.psum(jnp.einsum("s,sk->k", p, jac.astype(cdt)), axis)
        e_mean = lax.psum(jnp.sum(p * e), axis)
        w = jnp.sqrt(p)
        e_c = (e - e_mean) * w
        row_scale = lambda wb: wb  # noqa: E731
    else:
        w = _row_weights(n_loc, n, axis, wide_r)
        # global means (the convert fuses into the reduction: no float64 copy of jac)
        o_mean = lax.psum(jnp.einsum("s,sk->k", w, jac.astype(cdt)), axis) / n
        e_mean = lax.psum(jnp.sum(w * e), axis) / n
        e_c = (e - e_mean) * w / float(np.sqrt(n))
        row_scale = lambda wb: wb / float(np.sqrt(n))  # noqa: E731

    def block_terms(start, size):
        ob = lax.dynamic_slice_in_dim(jac, start, size, 0).astype(cdt)
        wb = lax.dynamic_slice_in_dim(w, start, size, 0)
        ob = (ob - o_mean) * row_scale(wb)[:, None]
        eb = lax.dynamic_slice_in_dim(e_c, start, size, 0)
        og = ob.astype(jac.dtype) if gram_precision == "jacobian" else ob
        # S's block is a Gram matrix of the columns: _gram forms its upper block triangle only
        if real:
            if jnp.iscomplexobj(ob):
                eb_i = eb.imag if jnp.iscomplexobj(eb) else jnp.zeros_like(eb)
                s = _gram(_stack_real(og, axis=0).T)
                f = ob.real.T @ eb.real + ob.imag.T @ eb_i
            else:
                s = _gram(og.T)
                f = ob.T @ (eb.real if jnp.iscomplexobj(eb) else eb)
        else:
            s = _gram(og.conj().T)
            f = ob.conj().T @ eb
        return s.astype(out_dt), f.astype(out_dt)

    s, f = blocked_sum(block_terms, n_loc, block)
    s = lax.psum(s, axis)
    f = lax.psum(f, axis)
    diag_shift, diag_scale = eps_args
    eps = diag_shift + diag_scale * jnp.real(jnp.trace(s)) / n_par
    x, fallback = solve_psd(s + eps * jnp.eye(n_par, dtype=s.dtype), f, rcond=rcond, solver=numerics[2],
                            refinement=numerics[3])
    return x, eps, fallback


def _minsr_kernel(jac, e, p, *, n, n_par, real, weighted, eps_args, rcond, block, axis, gram_precision, numerics):
    """MinSR: jac (n_loc, P_pad) sample-sharded -> all_to_all -> (N_pad, P_pad / D).
    ``p`` (n_loc,): the rows' probabilities when ``weighted`` (exact sums), else unused.

    T is formed in ``jac.dtype`` with ``gram_precision="jacobian"``, everything else in
    the wide dtype of ``numerics`` (float64 on CPUs)."""
    wide_r, wide_c = _wide_kinds(numerics)
    cdt = wide_c if jnp.iscomplexobj(jac) else wide_r
    jac_p = lax.all_to_all(jac, axis, split_axis=1, concat_axis=0, tiled=True)
    e = lax.all_gather(e, axis, tiled=True)
    n_rows, p_loc = jac_p.shape
    if weighted:
        mean_w = lax.all_gather(p, axis, tiled=True)  # sum_s p_s x_s is the mean
        scale = jnp.sqrt(mean_w)
        e_c = (e - jnp.sum(mean_w * e)) * scale
    else:
        w = (jnp.arange(n_rows) < n).astype(wide_r)
        e_c = (e - jnp.sum(w * e) / n) * w / float(np.sqrt(n))
    if real:
        # a real e_loc with a complex jac: the imaginary rows of the stacked rhs are 0
        rhs = _stack_real(e_c.astype(wide_c)) if jnp.iscomplexobj(jac) else e_c.real
        rhs = rhs.astype(wide_r)
    else:
        rhs = e_c.astype(wide_c if (jnp.iscomplexobj(jac) or jnp.iscomplexobj(e)) else wide_r)

    def centered_block(start, size):
        """Columns [start, start + size) of Ō in float64 (complex128), (rows, size)."""
        ob = lax.dynamic_slice_in_dim(jac_p, start, size, 1).astype(cdt)
        if weighted:
            ob = (ob - jnp.einsum("s,sk->k", mean_w, ob)) * scale[:, None]
        else:
            mean = jnp.einsum("s,sk->k", w, ob) / n
            ob = (ob - mean) * (w / float(np.sqrt(n)))[:, None]
        if real:
            ob = _stack_real(ob, axis=0)
        return ob

    def gram_block(start, size):
        # centred in float64 first, then rounded: a large column mean does not cost the
        # lower-precision Gram matrix its digits (the product itself stays in jac.dtype)
        ob = centered_block(start, size)
        if gram_precision == "jacobian":
            ob = ob.astype(_real_or_complex(ob, jac.dtype))
        return _gram(ob).astype(wide_r if real else cdt)

    t = lax.psum(blocked_sum(gram_block, p_loc, block), axis)
    diag_shift, diag_scale = eps_args
    eps = diag_shift + diag_scale * jnp.real(jnp.trace(t)) / n_par
    dt = jnp.result_type(t, rhs)
    t = t.astype(dt)
    y, fallback = solve_psd(t + eps * jnp.eye(t.shape[0], dtype=dt), rhs.astype(dt), rcond=rcond,
                            solver=numerics[2], refinement=numerics[3])
    x = blocked_concat(
        lambda start, size: centered_block(start, size).conj().T @ y, p_loc, block, t.dtype
    )
    # every device holds its P / D entries; gather the P-vector (small) so the update
    # leaves replicated and can be split into the parameter pytree locally
    return lax.all_gather(x, axis, tiled=True), eps, fallback


def _check_inputs(jac, e_loc, diag_shift, diag_scale, method, rcond):
    if not hasattr(jac, "shape") or jnp.ndim(jac) != 2:
        raise ValueError(
            f"sr_direction: `jac` must be a 2-D array (n_samples, n_params), got shape "
            f"{getattr(jac, 'shape', type(jac))}."
        )
    if not hasattr(e_loc, "shape") or jnp.ndim(e_loc) != 1 or e_loc.shape[0] != jac.shape[0]:
        raise ValueError(
            f"sr_direction: `e_loc` must be a 1-D array of length n_samples = {jac.shape[0]}, "
            f"got shape {getattr(e_loc, 'shape', type(e_loc))}."
        )
    if jac.shape[0] < 1 or jac.shape[1] < 1:
        raise ValueError(f"sr_direction: `jac` has an empty dimension: shape {jac.shape}.")
    for name, val in (("diag_shift", diag_shift), ("diag_scale", diag_scale)):
        if not isinstance(val, jax.Array) and (not np.isscalar(val) or not val >= 0):
            raise ValueError(f"sr_direction: `{name}` must be a number >= 0, got {val!r}.")
    if method not in METHODS:
        raise ValueError(f"sr_direction: `method` must be one of {METHODS}, got {method!r}.")
    if not (0 <= rcond < 1):
        raise ValueError(f"sr_direction: `rcond` must be in [0, 1), got {rcond!r}.")


def check_weights(name: str, weights, n: int) -> None:
    """``ValueError`` naming ``weights`` unless it is None or a real (n,) array (the rows'
    probabilities: nonnegative, summing to 1, which the caller guarantees inside jit)."""
    if weights is None:
        return
    if not hasattr(weights, "shape") or jnp.shape(weights) != (n,) or jnp.iscomplexobj(weights):
        raise ValueError(f"{name}: `weights` must be a real array of shape ({n},) (one probability per row), "
                         f"got {getattr(weights, 'shape', weights)!r}.")


def choose_method(n_samples: int, n_params: int, *, complex_jac: bool, real_params: bool = True) -> str:
    """"minsr" when the sample-space system is smaller than the parameter-space one.

    The sample-space dimension is ``2 n_samples`` in the real formulation of a
    complex Jacobian with real parameters, ``n_samples`` otherwise.
    """
    rows = 2 * n_samples if (complex_jac and real_params) else n_samples
    return "minsr" if rows < n_params else "sr"


def sr_direction(
    jac: jax.Array,
    e_loc: jax.Array,
    *,
    diag_shift: float = 1e-4,
    diag_scale: float = 0.0,
    method: str = "auto",
    real_params: bool = True,
    rcond: float = 1e-12,
    mesh: Mesh | None = None,
    return_info: bool = False,
    weights: jax.Array | None = None,
):
    """The SR / MinSR update direction dtheta (descent: params - lr * dtheta).

    Args:
      jac: (N, P) raw (uncentered, unnormalized) Jacobian d log psi / d theta,
        float32/64 or complex64/128, ideally sample-sharded over ``mesh``.
      e_loc: (N,) local energies (real or complex), in energy units.
      diag_shift: absolute diagonal shift (>= 0; a number or a traced scalar).
      diag_scale: relative shift, in units of the mean diagonal trace(S)/P (>= 0).
        The shift added is ``diag_shift + diag_scale * trace(S) / P``.
      method: "sr" (P x P system), "minsr" (N x N, or 2N x 2N real-stacked), or
        "auto" (the smaller; see :func:`choose_method`).
      real_params: the parameters are real: solve the real formulation
        (update real). False: complex (holomorphic) parameters, complex update.
      rcond: relative eigenvalue cutoff of the pseudo-inverse fallback, and the
        pivot threshold that triggers it.
      mesh: device mesh; default ``make_mesh()`` over every device.
      return_info: also return an :class:`SRInfo`.
      weights: None (samples from |psi|^2, each weighing 1 / N), or (N,) the rows'
        probabilities (nonnegative, sum 1): exact sums over configurations, where
        S = sum_s p_s (O_s - <O>)^H (O_s - <O>) with <O> = sum_s p_s O_s (and F alike).

    The precision of S or T and the conversion block size are speed choices read
    from :func:`quantax_lite.utils.tuning.current` at the call (see the module docstring).
    SPRING (a memory of the last direction) is
    :func:`quantax_lite.optimizer.preconditioners.spring`.

    Returns:
      dtheta of shape (P,), in the wide dtype (float64 on CPUs, float32 on
      accelerators; complex with ``real_params=False`` and a complex ``jac`` or
      ``e_loc``), in units of 1 / (the parameters' units) times energy; with
      ``return_info``, ``(dtheta, info)``.

    Raises:
      ValueError: bad shapes or options.
    """
    _check_inputs(jac, e_loc, diag_shift, diag_scale, method, rcond)
    check_weights("sr_direction", weights, jac.shape[0])
    mesh = make_mesh() if mesh is None else mesh
    n, n_par = jac.shape
    real = bool(real_params)
    if method == "auto":
        method = choose_method(n, n_par, complex_jac=jnp.iscomplexobj(jac), real_params=real)
    choices = tuning.current()
    wide = tuning.wide_dtype()
    numerics = (wide.name, choices.matmul_precision, choices.sr_solve, choices.sr_refinement)
    eps_args = (jnp.asarray(diag_shift, wide), jnp.asarray(diag_scale, wide))
    weighted = weights is not None
    p = jnp.asarray(weights, wide) if weighted else jnp.zeros(e_loc.shape, wide)
    x, eps, fallback = _solve(
        jac, e_loc, p, eps_args, method=method, weighted=weighted, real=real, rcond=float(rcond), mesh=mesh,
        gram_precision=choices.gram_precision, block_bytes=choices.sr_block_bytes, numerics=numerics,
    )
    if return_info:
        return x, SRInfo(method=method, eps=eps, used_fallback=fallback)
    return x


def _block_size(method: str, n: int, n_par: int, *, complex_jac: bool, real: bool, n_dev: int,
                block_bytes: int) -> int:
    """Rows (SR) or columns (MinSR) of ``jac`` converted to float64 at a time."""
    if method == "sr":
        return block_rows(block_bytes, n_par, 16 if complex_jac else 8)
    n_pad = -(-n // n_dev) * n_dev
    rows = (2 if complex_jac and real else 1) * n_pad
    return block_rows(block_bytes, rows, 8)


@partial(jax.jit, static_argnames=("method", "weighted", "real", "rcond", "mesh", "gram_precision", "block_bytes",
                                   "numerics"))
def _solve(jac, e_loc, p, eps_args, *, method, weighted, real, rcond, mesh, gram_precision, block_bytes, numerics):
    """The jitted solve: pad to the mesh, one shard_map over it, unpad. ``numerics``: (wide
    dtype name, matmul precision, solver, refinement steps), from the tuning in force."""
    n_dev = mesh_size(mesh)
    axis = axis_name(mesh)
    n, n_par = jac.shape
    complex_jac = jnp.iscomplexobj(jac)
    block = _block_size(method, n, n_par, complex_jac=complex_jac, real=real, n_dev=n_dev,
                        block_bytes=block_bytes)
    # pad samples to a multiple of the device count; padded rows get weight 0
    n_pad = -(-n // n_dev) * n_dev
    if n_pad != n:
        jac = jnp.pad(jac, ((0, n_pad - n), (0, 0)))
        e_loc = jnp.pad(e_loc, (0, n_pad - n))
        p = jnp.pad(p, (0, n_pad - n))
    row = PartitionSpec(axis)
    rep = PartitionSpec()
    options = dict(real=real, weighted=weighted, rcond=rcond, block=block, axis=axis, gram_precision=gram_precision,
                   numerics=numerics)
    if method == "sr":
        kernel = partial(_sr_kernel, n=n, **options)
        p_pad = n_par
    else:
        p_pad = -(-n_par // n_dev) * n_dev
        if p_pad != n_par:
            jac = jnp.pad(jac, ((0, 0), (0, p_pad - n_par)))
        kernel = partial(_minsr_kernel, n=n, n_par=n_par, **options)

    mapped = jax.shard_map(
        lambda j, e, w, ea: kernel(j, e, w, eps_args=ea), mesh=mesh,
        in_specs=(row, row, row, (rep, rep)), out_specs=(rep, rep, rep), check_vma=False,
    )
    with jax.default_matmul_precision(numerics[1]):
        x, eps, fallback = mapped(jac, e_loc, p, eps_args)
    if p_pad != n_par:
        x = x[:n_par]
    return x, eps, fallback


# --------------------------------------------------------------------------------------
# optax-style use
# --------------------------------------------------------------------------------------


def unravel_like(flat: jax.Array, params: Any) -> Any:
    """Split a flat (P,) vector into the pytree structure of ``params``.

    Leaf order is that of ``jax.flatten_util.ravel_pytree(params)`` (the column
    order of :func:`quantax_lite.optimizer.log_derivatives.jacobian`); each leaf is cast to the
    dtype of the matching parameter (a float64 update of float32 parameters
    becomes float32). A complex update for all-real parameters is a TypeError.
    """
    leaves, treedef = jax.tree.flatten(params)
    sizes = [int(np.size(p)) for p in leaves]
    if jnp.ndim(flat) != 1 or flat.shape[0] != sum(sizes):
        raise ValueError(
            f"unravel_like: `flat` has shape {jnp.shape(flat)}, expected ({sum(sizes)},) "
            "(the number of parameters)."
        )
    if jnp.iscomplexobj(flat) and not any(jnp.iscomplexobj(p) for p in leaves):
        raise TypeError(
            "unravel_like: a complex update for real parameters; solve with real_params=True."
        )
    pieces, start = [], 0
    for p, size in zip(leaves, sizes):
        piece = flat[start : start + size].reshape(np.shape(p))
        if not jnp.iscomplexobj(p):
            piece = jnp.real(piece)
        pieces.append(piece.astype(jnp.result_type(p)))
        start += size
    return jax.tree.unflatten(treedef, pieces)
