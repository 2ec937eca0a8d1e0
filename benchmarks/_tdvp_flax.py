"""The network of ``tdvp_peers.py``'s NetKet row written in flax, and the full group of the
periodic 4x4 square lattice it is projected on with ``--symmetry full``.

Imports nothing of quantax_lite: the NetKet row runs it under NetKet's interpreter.
"""
from __future__ import annotations

L = 4  # the 4x4 lattice, site x * L + y at (x, y) (NetKet's ``Square`` order, and ours)
SYMMETRIES = ("translations", "full")


def full_group() -> tuple:
    """``(perms (256, 16) int, flips (256,) ±1)``: every translation x point-group operation
    (C4v) of the periodic 4x4 lattice, each with and without the inversion of every spin;
    image g of a configuration s is ``flips[g] * s[perms[g]]``."""
    import numpy as np

    x, y = np.divmod(np.arange(L * L), L)
    points = [(a, b, swap) for a in (1, -1) for b in (1, -1) for swap in (False, True)]  # the 8 of C4v
    perms = []
    for a, b, swap in points:
        u, v = (a * y, b * x) if swap else (a * x, b * y)
        for dx in range(L):
            for dy in range(L):
                perms.append(((u + dx) % L) * L + (v + dy) % L)
    perms = np.asarray(perms)
    perms, flips = np.concatenate([perms, perms]), np.repeat([1, -1], len(perms))
    if len({tuple(p) for p in perms[:128]}) != 128:
        raise RuntimeError("the space group of the 4x4 lattice should have 128 distinct elements")
    return perms, flips


def orbits(states) -> tuple:
    """``(representatives (R, 16), inverse (M,))`` of configurations ``states`` (M, 16) ±1
    under :func:`full_group`: the first of ``states`` in each orbit (orbits told apart by
    the least binary code of their images), and ``representatives[inverse]`` in the orbit of
    each state, so a function invariant under the group is known on ``states`` from its R
    values on the representatives."""
    import numpy as np

    perms, flips = full_group()
    states = np.asarray(states)
    weights = 1 << np.arange(states.shape[1], dtype=np.int64)
    codes = np.full(len(states), np.iinfo(np.int64).max)
    for perm, flip in zip(perms, flips):
        codes = np.minimum(codes, ((flip * states[:, perm]) < 0) @ weights)
    unique, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    return states[first], inverse


def flax_module(channels: int, depth: int, symmetry: str = "translations"):
    """The recipe's conv net in flax (parameters as ``tdvp_peers.initial_layers`` names them):
    spins (batch, 16) on the 4x4 grid, periodic 3x3 convs by wrap padding, a complex log psi
    summed over the sites (translation invariant as it is). ``symmetry="full"``: projected on
    :func:`full_group`, ``log sum_g psi_0(g s)`` over all 256 images (how a NetKet user
    symmetrizes a network: every image evaluated)."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np

    if symmetry not in SYMMETRIES:
        raise ValueError(f"symmetry: expected one of {SYMMETRIES}, got {symmetry!r}")
    perms, flips = full_group() if symmetry == "full" else (np.arange(L * L)[None], np.ones(1, np.int64))

    class ConvComplex(nn.Module):
        @nn.compact
        def __call__(self, s):
            s = jnp.asarray(s, jnp.float32)
            batch = s.shape[:-1]
            images = s.reshape(-1, L * L)[:, perms] * jnp.asarray(flips, jnp.float32)[None, :, None]
            x = images.reshape(-1, L, L, 1)

            def conv(h, name):
                h = jnp.pad(h, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="wrap")
                return nn.Conv(channels, (3, 3), padding="VALID", dtype=jnp.float32, param_dtype=jnp.float32,
                               name=name)(h)

            x = conv(x, "input_conv")
            for b in range(depth):
                h = conv(nn.gelu(x), f"blocks_{b}_conv1")
                x = x + conv(nn.gelu(h), f"blocks_{b}_conv2")
            out = nn.Dense(2, use_bias=False, dtype=jnp.float32, param_dtype=jnp.float32, name="readout")(nn.gelu(x))
            out = out.reshape(out.shape[0], -1, 2).sum(axis=1)
            logs = jax.lax.complex(out[:, 0], out[:, 1]).reshape(-1, len(flips))  # (batch, images)
            if logs.shape[1] == 1:
                return logs[:, 0].reshape(batch)
            top = jnp.max(logs.real, axis=1, keepdims=True)
            return (top[:, 0] + jnp.log(jnp.sum(jnp.exp(logs - top), axis=1))).reshape(batch)

    return ConvComplex()
