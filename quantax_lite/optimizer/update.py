"""The preconditioned update of a network: Jacobian, preconditioner, unravel.

:func:`natural_gradient` computes the per-sample Jacobian of ``log_psi``
(:mod:`quantax_lite.optimizer.log_derivatives`), applies a preconditioner
(:mod:`quantax_lite.optimizer.preconditioners`; by default SR / MinSR of :mod:`quantax_lite.optimizer.stochastic_reconfiguration`)
and returns the direction as a pytree shaped like the parameters, to hand to any
optax optimizer in place of a gradient. The steps run as one jitted program, cached
across eager calls.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from quantax_lite.utils import tuning
from quantax_lite.optimizer.log_derivatives import jacobian
from quantax_lite.optimizer.preconditioners import sr
from quantax_lite.optimizer.stochastic_reconfiguration import check_weights, unravel_like

__all__ = ["natural_gradient"]


def _is_traced_leaf(x) -> bool:
    """Leaves of a preconditioner pytree passed to the jitted program as traced values."""
    return isinstance(x, (jax.Array, np.ndarray, float, complex, np.floating, np.complexfloating))


def _split_preconditioner(preconditioner) -> tuple[tuple, list]:
    """(static, dynamic): the tree structure and non-array leaves, and the array leaves."""
    leaves, treedef = jax.tree.flatten(preconditioner)
    mask = tuple(_is_traced_leaf(x) for x in leaves)
    static = (treedef, mask, tuple(x for x, m in zip(leaves, mask) if not m))
    return static, [x for x, m in zip(leaves, mask) if m]


def _merge_preconditioner(static: tuple, dynamic: list):
    treedef, mask, fixed = static
    dyn, fix = iter(dynamic), iter(fixed)
    return jax.tree.unflatten(treedef, [next(dyn) if m else next(fix) for m in mask])


def _build_natural_gradient(log_psi, chunk_size, holomorphic, mesh, static_preconditioner, choices):
    """A jitted ``f(params, samples, e_loc, state, step, dynamic, weights) -> (update, info, state)``.

    ``choices`` (the tuning in force) is part of the cache key only: it is read again
    while tracing, inside the same context."""
    del choices

    @jax.jit
    def program(params, samples, e_loc, state, step, dynamic, weights):
        preconditioner = _merge_preconditioner(static_preconditioner, dynamic)
        jac = jacobian(log_psi, params, samples, chunk_size=chunk_size, mesh=mesh, holomorphic=holomorphic)
        exact = {} if weights is None else {"weights": weights}
        direction, state, info = preconditioner.update(jac, e_loc, state, step=step, mesh=mesh, **exact)
        if holomorphic and not jnp.iscomplexobj(direction):
            raise TypeError(
                "natural_gradient: holomorphic=True (complex parameters) but the preconditioner "
                "gave a real direction; use one with real_params=False, e.g. sr(real_params=False)."
            )
        return unravel_like(direction, params), info, state

    return program


# One compiled program per (log_psi, options, preconditioner structure, tuning) and input
# shapes, across eager calls. The cache holds a reference to each log_psi (and what it
# closes over) until evicted.
_cached_natural_gradient = lru_cache(maxsize=32)(_build_natural_gradient)


def _natural_gradient_fn(log_psi, *options):
    """The cached jitted program (built anew, uncached, for an unhashable key)."""
    try:
        return _cached_natural_gradient(log_psi, *options)
    except TypeError:  # unhashable key
        return _build_natural_gradient(log_psi, *options)


def natural_gradient(
    log_psi: Callable,
    params: Any,
    samples: jax.Array,
    e_loc: jax.Array,
    *,
    preconditioner=None,
    state: Any = None,
    step=0,
    chunk_size: int | None = None,
    holomorphic: bool = False,
    mesh: Mesh | None = None,
    return_info: bool = False,
    return_state: bool = False,
    weights: jax.Array | None = None,
):
    """A preconditioned update as a pytree shaped like ``params``, for any optax optimizer.

    Computes the Jacobian of ``log_psi`` on ``samples`` in chunks
    (:func:`quantax_lite.optimizer.log_derivatives.jacobian`), applies ``preconditioner.update`` and
    unravels the direction. The result is a descent direction used in place of a
    gradient::

        update = natural_gradient(log_psi, params, samples, e_loc, chunk_size=64)
        updates, opt_state = optimizer.update(update, opt_state, params)
        params = optax.apply_updates(params, updates)   # sgd: params - lr * dtheta

    With a stateful preconditioner (e.g. ``spring(sr(), 0.9)``) pass the state and the
    iteration and keep the new state::

        update, state = natural_gradient(..., preconditioner=p, state=state, step=i,
                                         return_state=True)

    The steps run as one jitted program, cached on ``log_psi`` (the same object: a new
    lambda per call recompiles), ``chunk_size``, ``holomorphic``, ``mesh``, the
    preconditioner's static parts (its functions, method, schedules) and the tuning in
    force, so such a loop compiles once per input shape. ``step``, the state and the
    number leaves of the preconditioner (e.g. ``sr(diag_shift=...)``'s numbers) are
    traced: changing them does not recompile.

    Args:
      log_psi: ``log_psi(params, s) -> (batch,)``.
      params: the parameters (pytree).
      samples: (N, n_sites) int8 configurations drawn from |psi|^2.
      e_loc: (N,) their local energies.
      preconditioner: a :class:`~quantax_lite.optimizer.preconditioners.Preconditioner`; default
        ``sr(real_params=not holomorphic)``.
      state: its state; default ``preconditioner.init(params)``.
      step: the iteration (int), passed to the update (schedules).
      chunk_size: per-device rows per Jacobian chunk (bounds memory).
      holomorphic: complex parameters and a holomorphic ``log_psi`` (the
        preconditioner must then give a complex direction: ``real_params=False``).
      mesh: device mesh; default every device.
      return_info: also return the preconditioner's info dict (jax scalars).
      return_state: also return the new preconditioner state.
      weights: None (``samples`` drawn from |psi|^2), or (N,) the rows' probabilities
        (exact sums, e.g. ``FullSumSampler.probabilities``), passed to the preconditioner.

    Returns:
      A pytree like ``params`` (same dtypes); with ``return_info`` and/or
      ``return_state`` a tuple ``(update, info, state)`` of the requested parts, in
      this order.

    Raises:
      ValueError / TypeError: as :func:`quantax_lite.optimizer.log_derivatives.jacobian` and the
      preconditioner; TypeError for a real direction with ``holomorphic=True``.
    """
    if preconditioner is None:
        preconditioner = sr(real_params=not holomorphic)
    if state is None:
        state = preconditioner.init(params)
    static, dynamic = _split_preconditioner(preconditioner)
    program = _natural_gradient_fn(log_psi, chunk_size, bool(holomorphic), mesh, static, tuning.current())
    if weights is not None:
        check_weights("natural_gradient", weights, np.shape(samples)[0])
        weights = jnp.asarray(weights, tuning.wide_dtype())
    update, info, state = program(params, samples, e_loc, state, jnp.asarray(step, jnp.int32), dynamic, weights)
    out = (update,) + ((info,) if return_info else ()) + ((state,) if return_state else ())
    return out[0] if len(out) == 1 else out
