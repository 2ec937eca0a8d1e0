"""Checks and device placement shared by the samplers (internal)."""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from quantax_lite.utils.validate import positive_int
from quantax_lite.hilbert.configurations import total_sz_of, validate_states


def check_n_samples(n_samples: Any, n_chains: int) -> int:
    """``n_samples`` as an int: positive and a multiple of ``n_chains`` (ValueError otherwise)."""
    n_samples = positive_int(n_samples, "n_samples")
    if n_samples % n_chains:
        raise ValueError(f"n_samples={n_samples} must be a multiple of n_chains={n_chains}")
    return n_samples


def validate_initial_states(states: Any, n_chains: int, n_sites: int, total_sz=None) -> jax.Array:
    """``states`` as int8 (n_chains, n_sites) of +-1, every chain in the sector ``total_sz``
    (None: any); values are checked for concrete arrays only."""
    if not hasattr(states, "shape") or not hasattr(states, "dtype"):
        states = np.asarray(states)
    if tuple(states.shape) != (n_chains, n_sites):
        raise ValueError(
            f"initial_states: expected shape (n_chains, n_sites) = {(n_chains, n_sites)}, "
            f"got {tuple(states.shape)}"
        )
    arr = validate_states(states, n_sites, name="initial_states")
    if total_sz is not None and not isinstance(arr, jax.core.Tracer):
        twice = int(round(2 * float(total_sz)))
        if isinstance(arr, jax.Array):  # one reduction on the devices; details only on failure
            if bool(jnp.all(jnp.sum(arr.astype(jnp.int32), axis=1) == twice)):
                return arr
            if not arr.is_fully_addressable:
                raise ValueError(
                    f"initial_states: some chains are outside the sampler's sector total_sz={total_sz:g}"
                )
        sz = total_sz_of(arr)
        wrong = np.nonzero(2 * sz != twice)[0]
        if wrong.size:
            c = int(wrong[0])
            raise ValueError(
                f"initial_states: chain {c} has total_sz={sz[c]:g}, the sampler's sector is "
                f"total_sz={total_sz:g} ({wrong.size} of {n_chains} chains outside it)"
            )
    return jnp.asarray(arr)


def onto_mesh(tree: Any, sharding) -> Any:
    """Move array leaves that live on other devices onto ``sharding``'s devices.

    jit refuses arguments committed to different device sets (e.g. params on device 0
    and chains on the mesh). Leaves already on the mesh are left as they are; in a
    multi-process run the caller must already pass global arrays.
    """
    if jax.process_count() > 1:
        return tree
    devices = sharding.device_set

    def move(x):
        if isinstance(x, jax.core.Tracer):  # inside jit: placement is the caller's
            return x
        if isinstance(x, jax.Array) and x.sharding.device_set != devices:
            return jax.device_put(x, sharding)
        return x

    return jax.tree_util.tree_map(move, tree)


def enumerated_sector(name: str, n_sites: int, total_sz, max_states: int):
    """``total_sz`` resolved for a sampler that enumerates its sector ("auto" and None: the
    whole space, as it knows no Hamiltonian); ``ValueError`` when the sector holds more than
    ``max_states`` configurations."""
    from quantax_lite.hilbert.configurations import resolve_total_sz, sector_size

    total_sz = resolve_total_sz(total_sz, n_sites, conserves_sz=False)
    n_states = sector_size(n_sites, total_sz)
    if n_states > max_states:
        raise ValueError(f"{name}: n_sites={n_sites}, total_sz={total_sz} has {n_states} configurations, more than "
                         f"max_states={max_states}")
    return total_sz
