"""Blocked loops and mesh axis names shared by :mod:`quantax_lite.optimizer.stochastic_reconfiguration` and
:mod:`quantax_lite.optimizer.preconditioners` (package-internal).

A loop over blocks of rows keeps the wide (float64) copy of a Jacobian to one block at
a time: full blocks run in a ``lax.fori_loop`` (one traced body), the remainder once.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh

__all__ = ["axis_name", "block_rows", "blocked_concat", "blocked_sum", "tree_add"]


def tree_add(a, b):
    """Leafwise sum of two pytrees of the same structure."""
    return jax.tree.map(jnp.add, a, b)


def blocked_sum(fn: Callable[[Any, int], Any], n: int, block: int):
    """sum over blocks of fn(start, size): full blocks in a fori_loop, a static remainder."""
    n_full, rem = divmod(n, block)
    if n_full == 0:
        return fn(0, rem)
    if n_full == 1:
        acc = fn(0, block)
    else:
        acc = lax.fori_loop(
            1, n_full, lambda i, a: tree_add(a, fn(i * block, block)), fn(0, block)
        )
    if rem:
        acc = tree_add(acc, fn(n_full * block, rem))
    return acc


def blocked_concat(fn: Callable[[Any, int], jax.Array], n: int, block: int, dtype) -> jax.Array:
    """concatenate fn(start, size) (1-D, length size) over blocks of [0, n)."""
    n_full, rem = divmod(n, block)
    if n_full == 0 or (n_full == 1 and rem == 0):
        return fn(0, n)
    out = jnp.zeros((n,), dtype)

    def body(i, buf):
        return lax.dynamic_update_slice_in_dim(buf, fn(i * block, block), i * block, 0)

    out = lax.fori_loop(0, n_full, body, out)
    if rem:
        out = lax.dynamic_update_slice_in_dim(out, fn(n_full * block, rem), n_full * block, 0)
    return out


def block_rows(block_bytes: int, other_dim: int, itemsize: int) -> int:
    """Rows (or columns) of ``other_dim`` entries of ``itemsize`` bytes in ``block_bytes``."""
    return int(max(1, block_bytes // max(1, other_dim * itemsize)))


def axis_name(mesh: Mesh):
    """The mesh's axis name (one axis) or tuple of names: what collectives over all of it take."""
    names = tuple(mesh.axis_names)
    return names[0] if len(names) == 1 else names
