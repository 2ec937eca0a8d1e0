"""Preconditioners: from the Jacobian and local energies to a parameter direction.

In the spirit of optax's ``GradientTransformation``, a preconditioner is a pair of
pure functions (a :class:`Preconditioner`)::

    state = p.init(params)
    direction, state, info = p.update(jac, e_loc, state, step=step, mesh=mesh)

The protocol (what a new preconditioner provides):

* ``init(params) -> state``: ``state`` is a pytree (None when stateless); it is part of
  the driver's checkpointed state, so its leaves are arrays.
* ``update(jac, e_loc, state, *, step, mesh=None[, weights]) -> (direction, new_state, info)``,
  jittable, called inside the driver's jitted step:

  - ``jac``: (N, P) raw per-sample Jacobian d log psi / d theta (uncentred,
    float32/64 or complex64/128, sample-sharded over ``mesh``);
  - ``e_loc``: (N,) local energies (energy units);
  - ``state``: the state from ``init`` or the last ``update``;
  - ``step``: int32 scalar, the driver's iteration (traced: use it for schedules);
  - ``mesh``: a ``jax.sharding.Mesh`` or None (then ``make_mesh()``, every device);
  - ``weights`` (only passed with exact sums, :class:`~quantax_lite.sampler.FullSumSampler`;
    a preconditioner that does not take it cannot run on them): (N,) the rows'
    probabilities (sum 1) in place of the uniform 1 / N of samples;
  - ``direction``: (P,) in :func:`~quantax_lite.utils.tuning.wide_dtype` (float64 on CPUs,
    float32 on accelerators; complex for complex parameters), a *descent
    direction used like a gradient*: the driver applies ``params - lr * direction``
    with ``optax.sgd(lr)`` (any optax optimizer takes it in place of a gradient);
  - ``info``: a dict of jax scalars the driver logs. Key ``"sr_fallback"`` (bool:
    the SR solve fell back to the pseudo-inverse) is always present; :func:`sr` adds
    ``"sr_eps"`` (the diagonal shift added); other keys are free.

Writing one (a diagonally scaled gradient, ``F_k / (S_kk + eps)``)::

    import jax.numpy as jnp
    from quantax_lite.optimizer.preconditioners import Preconditioner, gradient

    def diagonal_gradient(eps=1e-3):
        def update(jac, e_loc, state, *, step, mesh=None):
            g, _, info = gradient().update(jac, e_loc, None, step=step, mesh=mesh)
            o = jac - jnp.mean(jac, axis=0)
            s_diag = jnp.mean(jnp.abs(o) ** 2, axis=0)  # diag of S, real parameters
            return g / (s_diag + eps), state, info

        return Preconditioner(init=lambda params: None, update=update)

Provided: :func:`sr` (SR / MinSR), :func:`spring` (a memory of the last direction
around another preconditioner) and :func:`gradient` (plain gradient descent).
Their hyperparameters are number leaves of the ``Preconditioner`` pytree (traced by
:func:`quantax_lite.optimizer.update.natural_gradient`) or schedules, callables of ``step``
evaluated inside jit (e.g. optax schedules): neither is baked into a compiled
program as a constant there, so changing it does not recompile.
"""
from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec

from quantax_lite.utils import tuning
from quantax_lite.optimizer._blocked import axis_name, block_rows, blocked_concat, blocked_sum
from quantax_lite.optimizer.stochastic_reconfiguration import METHODS, check_weights, sr_direction
from quantax_lite.utils.mesh import make_mesh, mesh_size

__all__ = ["Preconditioner", "SpringState", "gradient", "spring", "sr"]


class Preconditioner(NamedTuple):
    """A pair of pure functions (see the module docstring for the protocol).

    init: ``init(params) -> state`` (a pytree; may be None).
    update: ``update(jac, e_loc, state, *, step, mesh=None) -> (direction, new_state,
      info)``: direction (P,) in the wide dtype, info a dict of jax scalars with ``"sr_fallback"``.
    """

    init: Callable[[Any], Any]
    update: Callable[..., tuple]


def _no_state(params) -> None:
    return None


def _value(hyper, schedule, step):
    """The hyperparameter at ``step``: ``schedule(step)`` if given, else the number."""
    value = hyper if schedule is None else schedule(step)
    return jnp.asarray(value, tuning.wide_dtype())


def _check_hyper(name: str, value, *, below_one: bool = False):
    """(number, schedule): a finite number >= 0 (< 1 with ``below_one``) or a callable."""
    if callable(value):
        return 0.0, value
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    ok = ok and np.isfinite(value) and value >= 0 and (value < 1 or not below_one)
    if not ok:
        bound = "in [0, 1)" if below_one else "finite and >= 0"
        raise ValueError(f"{name}: expected a number {bound} or a schedule (a callable of the step), got {value!r}.")
    return float(value), None


def _wide(dtype):
    """The wide dtype of sums (:func:`quantax_lite.utils.tuning.wide_dtype`), complex for a complex dtype."""
    return tuning.wide_dtype(dtype)


def _over_rows(local, jac, vec, mesh, *, vec_rows: bool, out_rows: bool):
    """``local(jac_rows, vec)`` on each device's rows of the sample-sharded ``jac``.

    ``vec_rows``: ``vec`` is per sample (sharded like ``jac``), else replicated.
    ``out_rows``: the result is per sample, else a sum over devices (psum).
    Without a multi-device mesh that divides N, ``local`` runs on the whole array."""
    mesh = make_mesh() if mesh is None else mesh
    n_dev = mesh_size(mesh)
    if n_dev == 1 or jac.shape[0] % n_dev:
        return local(jac, vec)
    axis = axis_name(mesh)
    row, rep = PartitionSpec(axis), PartitionSpec()

    def kernel(j, v):
        out = local(j, v)
        return out if out_rows else lax.psum(out, axis)

    return jax.shard_map(
        kernel, mesh=mesh, in_specs=(row, row if vec_rows else rep),
        out_specs=row if out_rows else rep, check_vma=False,
    )(jac, vec)


def _jac_times(jac, v, mesh):
    """``jac @ v`` (N,), each block of rows converted to the wide dtype first."""
    cdt = _wide(jac.dtype)
    out_dt = jnp.result_type(cdt, v.dtype)
    block = block_rows(tuning.current().sr_block_bytes, jac.shape[1], np.dtype(cdt).itemsize)

    def local(j, v):
        def rows(start, size):
            return lax.dynamic_slice_in_dim(j, start, size, 0).astype(cdt) @ v.astype(out_dt)

        return blocked_concat(rows, j.shape[0], block, out_dt)

    return _over_rows(local, jac, v, mesh, vec_rows=False, out_rows=True)


def _jac_h_times(jac, u, mesh):
    """``jac^H @ u`` (P,) accumulated in the wide dtype, block by block of rows."""
    cdt = _wide(jac.dtype)
    out_dt = jnp.result_type(cdt, u.dtype)
    block = block_rows(tuning.current().sr_block_bytes, jac.shape[1], np.dtype(cdt).itemsize)

    def local(j, u):
        def rows(start, size):
            jb = lax.dynamic_slice_in_dim(j, start, size, 0).astype(cdt)
            return jb.conj().T @ lax.dynamic_slice_in_dim(u, start, size, 0).astype(out_dt)

        return blocked_sum(rows, j.shape[0], block)

    return _over_rows(local, jac, u, mesh, vec_rows=True, out_rows=False)


def _check_jac(name: str, jac, e_loc) -> None:
    if not hasattr(jac, "shape") or jnp.ndim(jac) != 2 or min(jac.shape) < 1:
        raise ValueError(f"{name}: `jac` must be a 2-D array (n_samples, n_params), got {getattr(jac, 'shape', jac)!r}.")
    if not hasattr(e_loc, "shape") or jnp.shape(e_loc) != (jac.shape[0],):
        raise ValueError(
            f"{name}: `e_loc` must have shape ({jac.shape[0]},) (one local energy per sample), got "
            f"{getattr(e_loc, 'shape', e_loc)!r}."
        )


# --------------------------------------------------------------------------------------
# SR / MinSR
# --------------------------------------------------------------------------------------


@partial(
    jax.tree_util.register_dataclass, data_fields=["diag_shift", "diag_scale"],
    meta_fields=["shift_schedule", "scale_schedule", "method", "real_params", "rcond"],
)
@dataclasses.dataclass(frozen=True)
class _SRUpdate:
    diag_shift: Any
    diag_scale: Any
    shift_schedule: Callable | None
    scale_schedule: Callable | None
    method: str
    real_params: bool
    rcond: float

    def __call__(self, jac, e_loc, state, *, step, mesh=None, weights=None):
        step = jnp.asarray(step, jnp.int32)
        x, info = sr_direction(
            jac, e_loc, diag_shift=_value(self.diag_shift, self.shift_schedule, step),
            diag_scale=_value(self.diag_scale, self.scale_schedule, step), method=self.method,
            real_params=self.real_params, rcond=self.rcond, mesh=mesh, return_info=True, weights=weights,
        )
        return x, state, {"sr_fallback": info.used_fallback, "sr_eps": info.eps}


def sr(diag_shift=1e-4, diag_scale=0.0, method: str = "auto", rcond: float = 1e-12, *,
       real_params: bool = True) -> Preconditioner:
    """SR / MinSR (:func:`quantax_lite.optimizer.stochastic_reconfiguration.sr_direction`) as a stateless preconditioner.

    Args:
      diag_shift: absolute diagonal shift (energy^0 units of S), a number >= 0 or a
        schedule ``step -> number`` (e.g. an optax schedule), evaluated inside jit.
      diag_scale: relative shift in units of trace(S) / P, a number >= 0 or a schedule.
        The shift added is ``diag_shift + diag_scale * trace(S) / P``.
      method: "auto" (the smaller system), "sr" (P x P) or "minsr" (N x N).
      rcond: pseudo-inverse cutoff of the fallback solve, in [0, 1).
      real_params: real parameters (the real formulation, a real direction); False for
        complex (holomorphic) parameters.

    State: None. Info: ``{"sr_fallback": bool, "sr_eps": the shift (wide dtype)}``.

    Raises:
      ValueError: an argument out of range (named).
    """
    shift, shift_schedule = _check_hyper("diag_shift", diag_shift)
    scale, scale_schedule = _check_hyper("diag_scale", diag_scale)
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}.")
    if isinstance(rcond, (bool, np.bool_)) or not isinstance(rcond, (int, float, np.integer, np.floating)) \
            or not 0 <= rcond < 1:
        raise ValueError(f"rcond: expected a number in [0, 1), got {rcond!r}.")
    update = _SRUpdate(shift, scale, shift_schedule, scale_schedule, method, bool(real_params), float(rcond))
    return Preconditioner(init=_no_state, update=update)


# --------------------------------------------------------------------------------------
# SPRING
# --------------------------------------------------------------------------------------


class SpringState(NamedTuple):
    """State of :func:`spring`: ``previous`` the last direction (P,) in the wide dtype
    (complex for complex parameters); ``inner`` the wrapped preconditioner's state."""

    previous: jax.Array
    inner: Any = None


@dataclasses.dataclass(frozen=True)
class _SpringInit:
    inner_init: Callable

    def __call__(self, params) -> SpringState:
        leaves = jax.tree.leaves(params)
        n_par = sum(int(np.size(x)) for x in leaves)
        dtype = tuning.wide_dtype(jnp.complex64 if any(jnp.iscomplexobj(x) for x in leaves) else None)
        return SpringState(jnp.zeros(n_par, dtype), self.inner_init(params))


@partial(jax.tree_util.register_dataclass, data_fields=["inner", "momentum"], meta_fields=["schedule"])
@dataclasses.dataclass(frozen=True)
class _SpringUpdate:
    inner: Any
    momentum: Any
    schedule: Callable | None

    def __call__(self, jac, e_loc, state, *, step, mesh=None, weights=None):
        _check_jac("spring", jac, e_loc)
        prev = state.previous
        if jnp.shape(prev) != (jac.shape[1],):
            raise ValueError(
                f"spring: the state's previous direction has shape {jnp.shape(prev)}, expected "
                f"({jac.shape[1]},) (the number of parameters)."
            )
        step = jnp.asarray(step, jnp.int32)
        mu = _value(self.momentum, self.schedule, step)
        # e - mu O prev: centring is linear (with weights too), so the inner solve sees ē - mu Ō prev
        e_mem = e_loc - mu * _jac_times(jac, prev, mesh)
        exact = {} if weights is None else {"weights": weights}
        d, inner_state, info = self.inner(jac, e_mem, state.inner, step=step, mesh=mesh, **exact)
        direction = d + (mu * prev).astype(d.dtype)
        return direction, SpringState(direction.astype(prev.dtype), inner_state), info


def spring(inner: Preconditioner, momentum) -> Preconditioner:
    """SPRING (Goldshlager, Abrahamsen and Lin, 2024): ``inner`` with a memory of the
    last direction.

    With ``prev`` the last direction and ``mu = momentum``::

        direction = inner(jac, e_loc - mu * jac @ prev) + mu * prev

    For ``inner = sr(eps)`` this is ``(S + eps)(direction - mu prev) = F - mu S prev``:
    the component of ``prev`` that this step's samples do not determine is kept,
    which averages MinSR's sampling noise over about ``1 / (1 - mu)`` steps.
    ``jac @ prev`` is accumulated in the wide dtype, block by block of rows (no wide
    copy of ``jac``).

    Args:
      inner: the preconditioner to wrap (usually :func:`sr`).
      momentum: ``mu``, a number in [0, 1) or a schedule ``step -> mu``.

    State: :class:`SpringState` ``(previous, inner_state)``, ``previous`` zeros (P,)
    (wide dtype) at ``init(params)``; one array leaf when the inner state is None (the
    layout of old checkpoints' ``sr_memory``). Info: the inner preconditioner's.
    """
    if not isinstance(inner, Preconditioner):
        raise TypeError(f"inner: expected a Preconditioner (e.g. sr()), got {type(inner).__name__}.")
    mu, schedule = _check_hyper("momentum", momentum, below_one=True)
    return Preconditioner(init=_SpringInit(inner.init), update=_SpringUpdate(inner.update, mu, schedule))


# --------------------------------------------------------------------------------------
# Plain gradient
# --------------------------------------------------------------------------------------


@partial(jax.tree_util.register_dataclass, data_fields=[], meta_fields=["real_params"])
@dataclasses.dataclass(frozen=True)
class _GradientUpdate:
    real_params: bool

    def __call__(self, jac, e_loc, state, *, step, mesh=None, weights=None):
        _check_jac("gradient", jac, e_loc)
        check_weights("gradient", weights, jac.shape[0])
        n = jac.shape[0]
        wide = tuning.wide_dtype()
        e_wide = e_loc.astype(tuning.wide_dtype(e_loc.dtype))
        if weights is None:
            e_c = e_wide - jnp.mean(e_wide)  # sum(e_c) = 0, so O's mean drops out of O^H e_c
            g = _jac_h_times(jac, e_c, mesh) / n
        else:  # sum_s p_s e_c = 0 likewise
            p = jnp.asarray(weights, wide)
            g = _jac_h_times(jac, p * (e_wide - jnp.sum(p * e_wide)), mesh)
        if self.real_params:
            g = jnp.real(g).astype(wide)
        return g, state, {"sr_fallback": jnp.asarray(False)}


def gradient(*, real_params: bool = True) -> Preconditioner:
    """Plain gradient descent: ``direction = F = Re(Ō^H ē)``.

    For real parameters ``F = (1/2) dE/dtheta`` (energy units per parameter unit), the
    sign convention of :func:`sr`: with ``optax.sgd(lr)`` the driver steps
    ``params - lr * F``. ``real_params=False``: ``Ō^H ē`` (complex parameters).
    Accumulated in the wide dtype block by block of rows. State: None. Info:
    ``{"sr_fallback": False}``.
    """
    return Preconditioner(init=_no_state, update=_GradientUpdate(bool(real_params)))
