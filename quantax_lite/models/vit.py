"""A Vision Transformer on patches of the lattice, with factored (relative-position) attention.

The grid of unit cells ``lattice_shape`` is cut into patches of ``patch`` cells along
every axis; each patch (its ``patch**d * n_basis`` spins) is one token, embedded by one
linear map into ``dim`` features. ``depth`` blocks follow, each

    x = x + Attention(LayerNorm(x)),     x = x + MLP(LayerNorm(x)),

where the attention of each of ``heads`` heads is *factored*: its weights depend only on
the periodic displacement between the two patches, ``A[t, u] = a[(t - u) mod grid]``
(learned, one table per head and block), and mix the tokens' values ``V x``. The network
is therefore equivariant under translations by whole patches (periodic grid), and its
cost is a few large matrix products (what accelerators are built for). The output is the
sum over tokens of a linear readout of the final features: one real number per token
(``complex_output=False``) or two (real and imaginary part of log psi0).

Projected on a symmetry group by :class:`~quantax_lite.models.Symmetrized` (every
translation that is not a whole patch, point group, spin flip), as the conv net is:
:func:`make_vit_nqs`.

Shapes: call ``s`` ``(batch, n_sites)`` int8 +-1 -> ``(batch,)`` log psi0 (complex64 /
complex128, or real). Parameters: embedding ``(patch**d n_basis + 1) dim``, per block
two LayerNorms ``4 dim``, values and output ``2 dim**2 + 2 dim``, attention tables
``heads * n_tokens``, MLP ``2 mlp_ratio dim**2 + (mlp_ratio + 1) dim``; readout
``n_out (dim + 1)`` and a final LayerNorm ``2 dim`` (:func:`vit_param_count`).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
from jax import lax

from quantax_lite.utils import tuning
from ._checks import complex_dtype, lattice_shape, positive_int, real_dtype, spin_batch
from .registry import register_network

__all__ = ["ViT", "ViTOptions", "ViTTrunk", "patch_tokens", "vit_param_count"]


def patch_tokens(lattice_shape: tuple, n_basis: int, patch: int) -> np.ndarray:
    """``(n_tokens, patch**d * n_basis)`` site indices of each patch's spins.

    Sites are numbered ``cell * n_basis + b`` with cells in C order over
    ``lattice_shape``; tokens in C order over the grid of patches."""
    shape = tuple(int(x) for x in lattice_shape)
    if any(length % patch for length in shape):
        raise ValueError(f"patch: {patch} must divide every lattice length {shape}")
    cells = np.arange(int(np.prod(shape))).reshape(shape)
    grid = tuple(length // patch for length in shape)
    tokens = []
    for t in np.ndindex(*grid):
        block = cells[tuple(slice(i * patch, (i + 1) * patch) for i in t)].reshape(-1)
        tokens.append((block[:, None] * n_basis + np.arange(n_basis)[None, :]).reshape(-1))
    return np.asarray(tokens, np.int32)


def _displacement_index(grid: tuple) -> np.ndarray:
    """``(T, T)``: the index (C order over ``grid``) of the periodic displacement t - u."""
    coords = np.array(list(np.ndindex(*grid)))
    diff = (coords[:, None, :] - coords[None, :, :]) % np.asarray(grid)
    return np.ravel_multi_index(tuple(np.moveaxis(diff, -1, 0)), grid).astype(np.int32)


def vit_param_count(lattice_shape, n_basis: int = 1, patch: int = 2, dim: int = 32, depth: int = 2, heads: int = 4,
                    mlp_ratio: int = 2, complex_output: bool = True) -> int:
    """The number of real parameters of :class:`ViT` (the module docstring's formula)."""
    shape = tuple(lattice_shape)
    n_tokens = int(np.prod([length // patch for length in shape]))
    token = patch ** len(shape) * n_basis
    n_out = 2 if complex_output else 1
    block = 4 * dim + 2 * dim * dim + 2 * dim + heads * n_tokens + 2 * mlp_ratio * dim * dim + (mlp_ratio + 1) * dim
    return (token + 1) * dim + depth * block + 2 * dim + n_out * (dim + 1)


def _check_options(module) -> None:
    """The options a ViT module shares, checked (ValueError / TypeError naming the option);
    ``lattice_shape`` normalized in place."""
    object.__setattr__(module, "lattice_shape", lattice_shape(module.lattice_shape))
    for name in ("n_basis", "patch", "dim", "depth", "heads", "mlp_ratio"):
        positive_int(getattr(module, name), name)
    if module.dim % module.heads:
        raise ValueError(f"heads: {module.heads} must divide dim = {module.dim}")
    patch_tokens(module.lattice_shape, module.n_basis, module.patch)  # checks that patch divides the lengths
    real_dtype(module.dtype)


class ViTTrunk(nn.Module):
    """The Vision Transformer's backbone (the ``"vit"`` network of the registry): spins
    ``(batch, n_sites)`` -> token features ``(batch, n_tokens, dim)`` after the final
    LayerNorm (embedding, ``depth`` blocks; see the module docstring). Equivariant under
    translations by whole patches: by whole cells when ``patch == 1``
    (``equivariance = "cells"``), else ``"none"`` with ``translation_stride = patch`` (the
    projection evaluates one image per class of group elements that differ by whole patches).
    Attributes as :class:`ViT`'s."""

    lattice_shape: tuple
    n_basis: int = 1
    patch: int = 2
    dim: int = 32
    depth: int = 2
    heads: int = 4
    mlp_ratio: int = 2
    dtype: Any = jnp.float32

    def __post_init__(self):
        _check_options(self)
        super().__post_init__()

    @property
    def equivariance(self) -> str:
        return "cells" if self.patch == 1 else "none"

    @property
    def translation_stride(self) -> int | None:
        """Features summed over tokens are invariant under translations by whole patches
        (``patch`` cells along every axis): the projection merges the images they relate."""
        return self.patch if self.patch > 1 else None

    @property
    def grid(self) -> tuple:
        return tuple(length // self.patch for length in self.lattice_shape)

    @nn.compact
    def __call__(self, s):
        dtype = real_dtype(self.dtype)
        n_sites = int(np.prod(self.lattice_shape)) * self.n_basis
        s = spin_batch(s, n_sites)
        tokens = patch_tokens(self.lattice_shape, self.n_basis, self.patch)
        n_tokens = tokens.shape[0]
        x = s.astype(dtype)[:, tokens]  # (batch, T, token)
        x = nn.Dense(self.dim, dtype=dtype, param_dtype=dtype, name="embed")(x)
        displacement = _displacement_index(self.grid)
        head_dim = self.dim // self.heads
        for i in range(self.depth):
            h = nn.LayerNorm(dtype=dtype, param_dtype=dtype, name=f"norm_attention_{i}")(x)
            values = nn.Dense(self.dim, dtype=dtype, param_dtype=dtype, name=f"values_{i}")(h)
            values = values.reshape(*values.shape[:2], self.heads, head_dim)
            table = self.param(f"attention_{i}", nn.initializers.normal(1.0 / n_tokens), (self.heads, n_tokens), dtype)
            weights = table[:, displacement]  # (heads, T, T): a function of t - u only
            mixed = jnp.einsum("htu,buhd->bthd", weights, values).reshape(*x.shape[:2], self.dim)
            x = x + nn.Dense(self.dim, dtype=dtype, param_dtype=dtype, name=f"attention_out_{i}")(mixed)
            h = nn.LayerNorm(dtype=dtype, param_dtype=dtype, name=f"norm_mlp_{i}")(x)
            h = nn.Dense(self.mlp_ratio * self.dim, dtype=dtype, param_dtype=dtype, name=f"mlp_in_{i}")(h)
            x = x + nn.Dense(self.dim, dtype=dtype, param_dtype=dtype, name=f"mlp_out_{i}")(nn.gelu(h))
        return nn.LayerNorm(dtype=dtype, param_dtype=dtype, name="final_norm")(x)


class ViT(nn.Module):
    """log psi0 of a Vision Transformer on lattice patches (see the module docstring):
    :class:`ViTTrunk` and a readout ``dim -> 1 or 2`` with bias, summed over tokens.

    Attributes:
      lattice_shape: the grid of unit cells, ``(L,)`` or ``(Lx, Ly)``.
      n_basis: sites per unit cell.
      patch: cells per patch along every axis (divides every length).
      dim: token features; heads: attention heads (dividing ``dim``); depth: blocks;
      mlp_ratio: hidden width of the MLP in units of ``dim``.
      dtype: float32 or float64 (parameters and compute).
      complex_output: complex log psi0 (two readouts per token) or real.
      final_scale: standard deviation of the readout's initial weights (a nearly
        uniform state at the start).
    """

    lattice_shape: tuple
    n_basis: int = 1
    patch: int = 2
    dim: int = 32
    depth: int = 2
    heads: int = 4
    mlp_ratio: int = 2
    dtype: Any = jnp.float32
    complex_output: bool = True
    final_scale: float = 1e-2

    def __post_init__(self):
        _check_options(self)
        super().__post_init__()

    @property
    def grid(self) -> tuple:
        return tuple(length // self.patch for length in self.lattice_shape)

    def setup(self):
        dtype = real_dtype(self.dtype)
        self.trunk = ViTTrunk(self.lattice_shape, self.n_basis, self.patch, self.dim, self.depth, self.heads,
                              self.mlp_ratio, self.dtype)
        nn.share_scope(self, self.trunk)
        self.readout = nn.Dense(2 if self.complex_output else 1, dtype=dtype, param_dtype=dtype,
                                kernel_init=nn.initializers.normal(self.final_scale))

    @tuning.at_matmul_precision
    def __call__(self, s):
        out = self.readout(self.trunk(s)).sum(axis=1)  # (batch, n_out)
        if not self.complex_output:
            return out[:, 0]
        return lax.complex(out[:, 0], out[:, 1]).astype(complex_dtype(self.dtype))


@dataclasses.dataclass(frozen=True)
class ViTOptions:
    """Options of the ``"vit"`` network (:class:`ViTTrunk`): ``patch`` (cells per patch along
    every axis; must divide every extent), ``dim``, ``depth``, ``heads`` (divides ``dim``),
    ``mlp_ratio``."""

    patch: int = 2
    dim: int = 32
    depth: int = 2
    heads: int = 4
    mlp_ratio: int = 2

    def __post_init__(self):
        for name in ("patch", "dim", "depth", "heads", "mlp_ratio"):
            positive_int(getattr(self, name), name)
        if self.dim % self.heads:
            raise ValueError(f"heads: {self.heads} must divide dim = {self.dim}")


@register_network("vit", options=ViTOptions)
def vit_network(lattice, options: ViTOptions, dtype) -> ViTTrunk:
    """The :class:`ViTTrunk` of ``lattice``'s grid of cells."""
    return ViTTrunk(tuple(lattice.shape), int(lattice.n_basis), dtype=dtype, **dataclasses.asdict(options))
