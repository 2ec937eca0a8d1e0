"""Per-sample Jacobians O[s, k] = d log psi(s) / d theta_k, in chunks, over every device.

The per-sample gradient is ``jax.vmap`` of ``jax.grad`` over the samples, run
through :func:`quantax_lite.utils.chunk_map` with ``shard_batch=True``: each
device computes, chunk by chunk, the rows of its own samples inside one
``jax.shard_map``. The conv weight-gradient of a symmetry-vmapped network thus
stays device-local (GSPMD partitioning of the same program all-gathers the
batch: see ``chunk_map.md``), and the compiled program has no all-gather.

Complex amplitudes. With real parameters and a complex ``log_psi`` (the usual
case: a real network whose output is a complex log-amplitude),
``O = d Re(log psi) / d theta + i d Im(log psi) / d theta``; a real ``log_psi``
gives a real ``O``; with ``holomorphic=True`` (complex parameters, holomorphic
``log_psi``) ``O`` is the complex derivative. The dtype of ``O`` follows the
network: float32 parameters give float32 / complex64 rows.

Parameter order is that of ``jax.flatten_util.ravel_pytree(params)``.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.flatten_util import ravel_pytree
from jax.sharding import Mesh

from quantax_lite.utils import tuning
from quantax_lite.utils import chunk_map

__all__ = ["jacobian", "jacobian_pytree", "make_jacobian", "per_sample_grad"]


def _check(log_psi, params, samples, holomorphic):
    if not callable(log_psi):
        raise TypeError(f"jacobian: `log_psi` must be callable (params, s) -> (batch,), got {type(log_psi).__name__}.")
    if not hasattr(samples, "shape") or np.ndim(samples) != 2:
        raise ValueError(
            "jacobian: `samples` must be a 2-D array (n_samples, n_sites), got shape "
            f"{getattr(samples, 'shape', type(samples))}."
        )
    leaves = jax.tree.leaves(params)
    if not leaves:
        raise ValueError("jacobian: `params` has no array leaves.")
    kinds = {bool(jnp.iscomplexobj(p)) for p in leaves}
    if holomorphic and kinds != {True}:
        raise TypeError("jacobian: holomorphic=True needs every parameter to be complex.")
    if not holomorphic and True in kinds:
        raise TypeError(
            "jacobian: complex parameters need holomorphic=True (a holomorphic log_psi); for "
            "a non-holomorphic one, store the real and imaginary parts as real parameters."
        )


def per_sample_grad(log_psi: Callable, *, holomorphic: bool = False, flatten: bool = True) -> Callable:
    """``g(params, s) -> O(s)`` for one configuration ``s`` of shape (n_sites,).

    Returns the flat (P,) row (``flatten=True``) or a pytree like ``params``.
    One forward pass of ``log_psi``. Complex ``log_psi`` with real parameters: grad
    of the real part + 1j * grad of the imaginary part, from one batched reverse pass
    with the cotangents 1 and -1j (JAX's vjp of a complex output z is
    ``Re(ct * dz)``, so ``ct = 1`` gives d Re z and ``ct = -1j`` gives d Im z).
    """

    def one(params, s):
        out, vjp = jax.vjp(lambda p: log_psi(p, s[None])[0], params)
        if out.shape != ():
            raise ValueError(
                "jacobian: `log_psi(params, s)` must return shape (batch,), got per-sample "
                f"shape {out.shape}."
            )
        if holomorphic or not jnp.iscomplexobj(out):
            (g,) = vjp(jnp.ones((), out.dtype))
        else:
            (parts,) = jax.vmap(vjp)(jnp.asarray([1.0, -1.0j], out.dtype))
            g = jax.tree.map(lambda x: lax.complex(x[0], x[1]), parts)
        return ravel_pytree(g)[0] if flatten else g

    return one


def _postprocess(o, n, center, normalize):
    if center:
        o = o - jnp.mean(o, axis=0, keepdims=True)
    if normalize:
        o = o / np.sqrt(n).astype(o.real.dtype)
    return o


def _build_jacobian(log_psi, chunk_size, center, normalize, mesh, holomorphic, flatten, choices):
    """A jitted ``jac(params, samples)``: (N, P) (``flatten``) or a pytree of (N, *shape),
    traced with the speed choices ``choices`` (a :class:`~quantax_lite.utils.tuning.Tuning`)."""
    rows = jax.vmap(per_sample_grad(log_psi, holomorphic=holomorphic, flatten=flatten), in_axes=(None, 0))
    chunked = chunk_map(
        rows, in_axes=(None, 0), chunk_size=chunk_size, use_scan=True, shard_batch=choices.jacobian_shard_batch,
        mesh=mesh,
    )

    @jax.jit
    def jac(params, samples):
        n = samples.shape[0]
        with tuning.using(choices):
            return jax.tree.map(lambda o: _postprocess(o, n, center, normalize), chunked(params, samples))

    return jac


# One compiled program per (log_psi, options) and input shapes, across eager calls. The
# cache holds a reference to each log_psi (and what it closes over) until evicted.
_cached_jacobian = functools.lru_cache(maxsize=32)(_build_jacobian)


def _jacobian_fn(log_psi, *options):
    """The cached jitted Jacobian for ``log_psi`` and ``options`` (built anew, uncached,
    for an unhashable ``log_psi`` or mesh)."""
    options = options + (tuning.current(),)
    try:
        return _cached_jacobian(log_psi, *options)
    except TypeError:  # unhashable key
        return _build_jacobian(log_psi, *options)


def jacobian(
    log_psi: Callable,
    params: Any,
    samples: jax.Array,
    *,
    chunk_size: int | None = None,
    center: bool = False,
    normalize: bool = False,
    mesh: Mesh | None = None,
    holomorphic: bool = False,
) -> jax.Array:
    """Dense per-sample Jacobian O[s, k] = d log psi(samples[s]) / d theta_k.

    Args:
      log_psi: ``log_psi(params, s) -> (batch,)`` log-amplitudes.
      params: the parameters (pytree); the column order is that of
        ``jax.flatten_util.ravel_pytree(params)``.
      samples: (N, n_sites) configurations, ideally sample-sharded over the mesh.
      chunk_size: samples per device per chunk (bounds the scratch memory); None:
        each device does its samples at once.
      center: subtract the sample mean of every column.
      normalize: divide by sqrt(N).
      mesh: device mesh; default every device (``make_mesh()``).
      holomorphic: complex parameters, holomorphic ``log_psi``.

    Returns:
      (N, P) array sharded by samples over the mesh: real for a real ``log_psi``,
      complex otherwise, in the precision of the parameters.

    Eager calls with the same ``log_psi`` object, options and input shapes reuse one
    compiled program (a small cache of jitted Jacobians keyed on them).
    """
    _check(log_psi, params, samples, holomorphic)
    jac = _jacobian_fn(log_psi, chunk_size, center, normalize, mesh, holomorphic, True)
    return jac(params, samples)


def jacobian_pytree(
    log_psi: Callable,
    params: Any,
    samples: jax.Array,
    *,
    chunk_size: int | None = None,
    center: bool = False,
    normalize: bool = False,
    mesh: Mesh | None = None,
    holomorphic: bool = False,
) -> Any:
    """As :func:`jacobian`, but a pytree like ``params`` whose leaves have a leading
    sample axis: leaf shape (N, *param.shape)."""
    _check(log_psi, params, samples, holomorphic)
    jac = _jacobian_fn(log_psi, chunk_size, center, normalize, mesh, holomorphic, False)
    return jac(params, samples)


def make_jacobian(
    log_psi: Callable,
    *,
    chunk_size: int | None = None,
    center: bool = False,
    normalize: bool = False,
    mesh: Mesh | None = None,
    holomorphic: bool = False,
) -> Callable[[Any, jax.Array], jax.Array]:
    """A jitted ``jac(params, samples) -> (N, P)``: :func:`jacobian` with fixed options,
    compiled once per input shape."""

    @jax.jit
    def jac(params, samples):
        return jacobian(
            log_psi, params, samples, chunk_size=chunk_size, center=center,
            normalize=normalize, mesh=mesh, holomorphic=holomorphic,
        )

    return jac
