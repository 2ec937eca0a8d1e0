"""Periodic convolutions and the convolutional residual network (flax linen).

Feature maps are ``(batch, *lattice_shape, channels)`` arrays over the grid of unit cells
of a lattice; position ``(x, y)`` of a map is cell ``x * Ly + y`` (row-major, as
everywhere in quantax_lite). On a Bravais lattice with one site per cell (chains, square,
triangular) cells are sites; with ``n_basis`` sites per cell (honeycomb 2, kagome 3) the
spins of a cell are the input channels of :class:`ConvResNet` (site ``cell * n_basis + b``
is channel ``b`` of its cell), so every layer is a convolution on the cell grid and the
network is equivariant under translations by whole cells.

A periodic convolution with a kernel of size ``k`` along every axis maps

    out[r, o] = bias[o] + sum_{a, c} kernel[a, c, o] * in[(r + a - k // 2) mod L, c]

for the ``k**d`` offsets ``a`` in ``{0 .. k-1}**d``; parameters ``kernel``
``(k,)*d + (c_in, c_out)`` and ``bias`` ``(c_out,)``.

:class:`PeriodicConv` is one layer with one set of values and derivatives. How it is
computed is the library's choice (:func:`quantax_lite.utils.tuning.conv_form`, by size,
precision and backend), among implementations of the same function:

* ``"dense"``: one ``(N * c_in, N * c_out)`` block-circulant matrix built from the kernel
  (:func:`periodic_conv_matrix`) and one matrix product, on channel-major maps
  ``(batch, channels, n_sites)`` inside :class:`ConvResNet`;
* ``"lax"``: ``jax.lax.conv_general_dilated`` on the circularly padded maps;
* ``"lax_patch"``: the same forward pass, kernel derivatives in the patch form;
* ``"lax_gather"``: the same forward pass, the derivatives of the gather form;
* ``"gather"``: im2col with a periodic neighbour table and one matrix product;
* ``"banded"``: on a 2-D grid, the ``k`` circularly shifted rows of each map stacked
  side by side, times one ``(k * Ly * c_in, Ly * c_out)`` matrix of circulant bands
  built from the kernel (:func:`row_band_matrix`): ``Ly / k`` times the multiply-adds
  of the convolution, in one large matrix product (``N / k**2`` times for ``"dense"``);
  on a chain it is the dense form.

The forms with a custom JVP take kernel derivatives as the patches (or gathered
neighbours) of the input contracted with the kernel tangent, so per-sample Jacobians
are batched matrix products rather than grouped convolutions. Figures in
``docs/benchmarks.md``.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from quantax_lite.utils import autotune
from quantax_lite.utils import tuning
from quantax_lite.geometry.lattice import periodic_site_index, site_coords
from ._checks import lattice_shape, positive_int, real_dtype, spin_batch
from .heads import READOUTS, Head, add_phase_rule, angles
from .registry import register_network

__all__ = [
    "periodic_neighbour_table",
    "kernel_reach",
    "periodic_conv_matrix",
    "PeriodicConv",
    "ResidualBlock",
    "ConvTrunk",
    "ConvResNet",
    "ConvOptions",
    "default_conv_architecture",
]

NORMS = ("layer", "none")


def kernel_offsets(kernel_size: int, ndim: int) -> np.ndarray:
    """The ``(kernel_size**ndim, ndim)`` int64 displacements a kernel covers, row-major.

    Offsets run from ``-(k // 2)`` to ``k - 1 - k // 2`` along every axis, in the order
    of the kernel's flattened spatial axes.
    """
    k = positive_int(kernel_size, "kernel_size")
    grid = np.array(list(itertools.product(range(k), repeat=ndim)), dtype=np.int64).reshape(-1, ndim)
    return grid - k // 2


def periodic_neighbour_table(shape, kernel_size: int) -> np.ndarray:
    """Periodic neighbour table of a kernel on a lattice, ``(n_sites, kernel_size**ndim)`` int32.

    ``table[i, j]`` is the site at ``coords(i) + kernel_offsets(k, ndim)[j]`` (wrapped), with
    sites numbered row-major over ``shape``.
    """
    shape = lattice_shape(shape, "shape")
    offsets = kernel_offsets(kernel_size, len(shape))
    return periodic_site_index(site_coords(shape)[:, None, :] + offsets[None], shape).astype(np.int32)


def kernel_reach(lattice, kernel_size: int, max_order: int = 3) -> tuple[float, ...]:
    """Which neighbour shells of ``lattice`` one ``kernel_size`` kernel on its cell grid reaches.

    Returns, for ``order = 1 .. max_order``, the fraction of the bonds ``(i, j)`` of that
    order (``lattice.bonds(order)``) for which the kernel centred on the cell of ``i``
    covers the cell of ``j`` and the kernel centred on the cell of ``j`` covers the cell
    of ``i`` (periodic wrapping of the cell grid included): 1.0 where one layer couples
    every pair of the shell, NaN where the cluster has no bond of that order. On a large
    enough cluster this is the geometry of the lattice's unit cell and Bravais vectors
    (``docs/api.md`` has the table for the lattices of :mod:`quantax_lite.geometry.lattice`).
    """
    max_order = positive_int(max_order, "max_order")
    shape = lattice_shape(lattice.shape, "lattice.shape")
    n_basis = int(getattr(lattice, "n_basis", 1))
    n_cells = int(np.prod(shape))
    table = periodic_neighbour_table(shape, kernel_size)
    covers = np.zeros((n_cells, n_cells), bool)
    covers[np.arange(n_cells)[:, None], table] = True  # covers[c, c']: the kernel at c reads c'
    cell = np.arange(lattice.n_sites) // n_basis
    fractions = []
    for order in range(1, max_order + 1):
        bonds = np.asarray(lattice.bonds(order)).reshape(-1, 2)
        ci, cj = cell[bonds[:, 0]], cell[bonds[:, 1]]
        fractions.append(float(np.mean(covers[ci, cj] & covers[cj, ci])) if len(bonds) else float("nan"))
    return tuple(fractions)


class PeriodicConv(nn.Module):
    """Periodic (circular) convolution on a lattice.

    Attributes:
      features: output channels.
      kernel_size: kernel extent along every lattice axis.
      lattice_shape: ``(L,)`` or ``(Lx, Ly)``.
      use_bias: add a per-channel bias.
      dtype: parameter and compute dtype (float32 or float64).

    Call: ``x`` ``(batch, *lattice_shape, c_in)`` -> ``(batch, *lattice_shape, features)``;
    with ``channel_major=True``, maps stored channel by channel, ``(batch, c_in, n_sites)``
    -> ``(batch, features, n_sites)`` (the layout :class:`ConvResNet` keeps when the
    dense form is used).
    """

    features: int
    kernel_size: int
    lattice_shape: tuple[int, ...]
    use_bias: bool = True
    dtype: Any = jnp.float64
    kernel_init: Callable = nn.initializers.lecun_normal()

    @nn.compact
    def __call__(self, x, channel_major: bool = False):
        shape = tuple(self.lattice_shape)
        n_sites = int(np.prod(shape))
        ndim, k = len(shape), self.kernel_size
        dtype = real_dtype(self.dtype)
        if channel_major:
            if x.ndim != 3 or x.shape[2] != n_sites:
                raise ValueError(f"x: expected channel-major maps (batch, channels, {n_sites}), got {x.shape}")
            c_in = x.shape[1]
        else:
            c_in = x.shape[-1]
            if tuple(x.shape[1:-1]) != shape:
                raise ValueError(f"x: expected feature maps of shape (batch, *{shape}, channels), got {x.shape}")
        kernel = self.param("kernel", self.kernel_init, (k,) * ndim + (c_in, self.features), dtype)
        bias = self.param("bias", nn.initializers.zeros_init(), (self.features,), dtype) if self.use_bias else None
        x = x.astype(dtype)
        form = conv_form_for(shape, k, self.features, dtype)
        if channel_major and form == "dense":
            y = _dense_conv_flat(x, kernel, shape, k, True)
            return y if bias is None else y + bias[:, None]
        if channel_major:  # another form on channel-major maps: through the channels-last layout
            maps = jnp.swapaxes(x, 1, 2).reshape(x.shape[0], *shape, c_in)
            y = _CONVS[form](maps, kernel, shape, k)
            y = y if bias is None else y + bias
            return jnp.swapaxes(y.reshape(x.shape[0], n_sites, -1), 1, 2)
        y = _CONVS[form](x, kernel, shape, k)
        return y if bias is None else y + bias


_TIMED_FORMS = ("dense", "lax_gather", "gather", "banded")
_TIMING_BATCH = 512


def conv_form_for(shape: tuple, kernel_size: int, channels: int, dtype) -> str:
    """The convolution form of a layer of ``channels`` on the periodic grid ``shape``.

    :func:`quantax_lite.utils.tuning.conv_form` (a fixed rule by width) unless the tuning in
    force has ``autotune`` on and no fixed form: then the fastest of the candidate forms
    for this shape, timed once per machine and library version
    (:func:`quantax_lite.utils.autotune.pick`; a forward pass and a gradient of one layer on
    ``_TIMING_BATCH`` maps), the rule's form being the default when timing is turned off.
    Every form computes the same function (to rounding)."""
    n_sites = int(np.prod(shape))
    rule = tuning.conv_form(n_sites, channels, dtype)
    choices = tuning.current()
    if choices.conv_form != "auto" or not choices.autotune:
        return rule
    forms = [f for f in _TIMED_FORMS if f != "banded" or len(shape) == 2]
    key = (tuple(int(x) for x in shape), int(kernel_size), int(channels), np.dtype(dtype).name, choices.backend)
    candidates = {f: functools.partial(_timed_layer, f, tuple(shape), int(kernel_size), int(channels),
                                       np.dtype(dtype)) for f in forms}
    return autotune.pick("conv_form", key, candidates, default=rule)


def _timed_layer(form: str, shape: tuple, kernel_size: int, channels: int, dtype):
    """A runner of one layer in ``form`` (forward pass and gradient, compiled here)."""
    with tuning.override(conv_form=form):
        layer = PeriodicConv(channels, kernel_size, shape, dtype=dtype)
        channel_major = form == "dense"
        n_sites = int(np.prod(shape))
        x_shape = (_TIMING_BATCH, channels, n_sites) if channel_major else (_TIMING_BATCH, *shape, channels)
        x = jnp.ones(x_shape, dtype)
        params = layer.init(jax.random.key(0), x, channel_major)

        def work(p, x):
            y, pull = jax.vjp(lambda q: layer.apply(q, x, channel_major), p)
            return y, pull(y)

        compiled = jax.jit(work).lower(params, x).compile()
    return lambda: jax.block_until_ready(compiled(params, x))


def _gather_conv(x, kernel, shape, k):
    """im2col with a periodic neighbour table, then one matmul."""
    batch, c_in = x.shape[0], x.shape[-1]
    n_sites = int(np.prod(shape))
    table = periodic_neighbour_table(shape, k)  # (N, K), a trace-time constant
    flat = x.reshape(batch, n_sites, c_in)
    patches = flat[:, table, :].reshape(batch, n_sites, table.shape[1] * c_in)  # (B, N, K*C)
    y = patches @ kernel.reshape(table.shape[1] * c_in, -1)
    return y.reshape(batch, *shape, -1)


def periodic_conv_matrix(kernel, shape, kernel_size: int, channel_major: bool = False):
    """The periodic convolution as one ``(N * c_in, N * c_out)`` matrix (block circulant).

    ``kernel``: ``(k,)*d + (c_in, c_out)``. Row ``j * c_in + c``, column ``i * c_out + o``
    holds the sum of ``kernel[a, c, o]`` over the offsets ``a`` that bring site ``i`` onto
    site ``j``, so ``flat_in @ matrix`` (site-major, channels last) is the convolution.
    ``channel_major=True``: row ``c * N + j``, column ``o * N + i``, for flat maps
    ``(batch, c_in * N)`` stored channel by channel. Linear in ``kernel``; built inside
    the traced function (differentiable).
    """
    hits = jnp.asarray(_neighbour_hits(tuple(shape), kernel_size), kernel.dtype)
    n_off, n_sites = hits.shape[:2]
    c_in, c_out = kernel.shape[-2:]
    layout = "aji,aco->cjoi" if channel_major else "aji,aco->jcio"
    matrix = jnp.einsum(layout, hits, kernel.reshape(n_off, c_in, c_out))
    return matrix.reshape(n_sites * c_in, n_sites * c_out)


@functools.lru_cache(maxsize=None)
def _neighbour_hits(shape, kernel_size: int) -> np.ndarray:
    """``(K, N, N)`` 0/1 float64: ``hits[a, j, i] = 1`` where ``table[i, a] == j``."""
    table = periodic_neighbour_table(shape, kernel_size)
    n_sites, n_off = table.shape
    hits = np.zeros((n_off, n_sites, n_sites), np.float64)
    np.add.at(hits, (np.arange(n_off)[None, :], table, np.arange(n_sites)[:, None]), 1.0)
    hits.setflags(write=False)
    return hits


def _dense_conv(x, kernel, shape, k):
    """The convolution as one dense matmul with the block-circulant matrix.

    Derivatives with respect to the kernel are taken in the gather form (the patches of
    ``x`` contracted with the kernel tangent), ``K*C_in*C_out`` multiply-adds per site
    instead of the dense matrix's ``N*C_in*C_out`` and without a scatter, so per-sample
    Jacobians stay cheap (forward and reverse mode).
    """
    batch = x.shape[0]
    n_sites = int(np.prod(shape))
    y = _dense_conv_flat(x.reshape(batch, n_sites, x.shape[-1]), kernel, tuple(shape), k, False)
    return y.reshape(batch, *shape, -1)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4))
def _dense_conv_flat(x, kernel, shape, k, channel_major):
    """``x`` ``(B, N, C_in)`` -> ``(B, N, C_out)``; channel-major ``(B, C_in, N)`` -> ``(B, C_out, N)``."""
    batch = x.shape[0]
    y = x.reshape(batch, -1) @ periodic_conv_matrix(kernel, shape, k, channel_major)
    return y.reshape((batch, -1, x.shape[2]) if channel_major else (batch, x.shape[1], -1))


@_dense_conv_flat.defjvp
def _dense_conv_jvp(shape, k, channel_major, primals, tangents):
    x, kernel = primals
    dx, dkernel = tangents
    y = _dense_conv_flat(x, kernel, shape, k, channel_major)
    # the patches of the primal, so the tangent map is a matmul
    patches = _periodic_patches(jnp.swapaxes(x, 1, 2) if channel_major else x, shape, k)  # (B, N, K, C_in)
    dy = _dense_conv_flat(dx, kernel, shape, k, channel_major) + jnp.einsum(
        "bnac,aco->bon" if channel_major else "bnac,aco->bno",
        patches, dkernel.reshape(patches.shape[2], *kernel.shape[-2:]),
    )
    return y, dy


def _periodic_patches(x, shape, k):
    """``(B, N, C)`` -> ``(B, N, K, C)``: ``patches[:, i, a] = x[:, table[i, a]]``.

    Built from static slices of the circularly padded maps (on CPUs a gather with the
    neighbour table, or a product with the 0/1 neighbour tensor, is slower).
    """
    batch, n_sites, c = x.shape
    ndim = len(shape)
    maps = _wrap_pad(x.reshape(batch, *shape, c), k)
    views = [
        maps[(slice(None),) + tuple(slice(o, o + length) for o, length in zip(offset, shape))]
        for offset in itertools.product(range(k), repeat=ndim)
    ]
    return jnp.stack(views, axis=-2).reshape(batch, n_sites, k**ndim, c)


def _wrap_pad(maps, k):
    """Circular padding of ``(batch, *shape, c)`` maps for a kernel of size ``k``:
    ``k // 2`` sites before and ``k - 1 - k // 2`` after, along every lattice axis."""
    ndim = maps.ndim - 2
    pad = [(0, 0)] + [(k // 2, k - 1 - k // 2)] * ndim + [(0, 0)]
    return jnp.pad(maps, pad, mode="wrap")


def _lax_conv(x, kernel, shape, k):
    """Circular padding, then a VALID ``lax.conv_general_dilated``."""
    ndim = len(shape)
    x = _wrap_pad(x, k)
    spatial = "HWD"[:ndim]
    numbers = ("N" + spatial + "C", spatial + "IO", "N" + spatial + "C")
    return lax.conv_general_dilated(x, kernel, (1,) * ndim, "VALID", dimension_numbers=numbers)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def _lax_patch_conv(x, kernel, shape, k):
    """:func:`_lax_conv`, with the kernel derivative taken in the patch form."""
    return _lax_conv(x, kernel, shape, k)


def _patch_kernel_tangent(x, dkernel, shape, k):
    """The convolution of channels-last maps ``x`` ``(B, *shape, C_in)`` with the kernel
    tangent ``dkernel``, in the patch form (the patches of ``x`` times ``dkernel``: a batched
    matrix product, no scatter in its transpose) -> ``(B, *shape, C_out)``."""
    batch, c_in = x.shape[0], x.shape[-1]
    patches = _periodic_patches(x.reshape(batch, -1, c_in), shape, k)  # (B, N, K, C_in)
    dy = jnp.einsum("bnac,aco->bno", patches, dkernel.reshape(patches.shape[2], c_in, dkernel.shape[-1]))
    return dy.reshape(batch, *shape, -1)


@_lax_patch_conv.defjvp
def _lax_patch_conv_jvp(shape, k, primals, tangents):
    x, kernel = primals
    dx, dkernel = tangents
    y = _lax_conv(x, kernel, shape, k)
    return y, _lax_conv(dx, kernel, shape, k) + _patch_kernel_tangent(x, dkernel, shape, k)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def _lax_gather_conv(x, kernel, shape, k):
    """:func:`_lax_conv`, with the derivatives of the gather form."""
    return _lax_conv(x, kernel, shape, k)


@_lax_gather_conv.defjvp
def _lax_gather_conv_jvp(shape, k, primals, tangents):
    x, kernel = primals
    dx, dkernel = tangents
    # bilinear: the tangent is the gather form applied to (dx, kernel) and (x, dkernel)
    return _lax_conv(x, kernel, shape, k), _gather_conv(dx, kernel, shape, k) + _gather_conv(x, dkernel, shape, k)


@functools.lru_cache(maxsize=None)
def _row_hits(length: int, kernel_size: int) -> np.ndarray:
    """``(k, L, L)`` 0/1 float64: ``hits[b, j, i] = 1`` where ``j == (i + b - k // 2) mod L``."""
    hits = np.zeros((kernel_size, length, length), np.float64)
    for b in range(kernel_size):
        np.add.at(hits[b], ((np.arange(length) + b - kernel_size // 2) % length, np.arange(length)), 1.0)
    hits.setflags(write=False)
    return hits


def row_band_matrix(kernel, length: int, kernel_size: int):
    """The convolution along the last axis of a 2-D grid as ``k`` circulant bands.

    ``kernel`` ``(k, k, c_in, c_out)`` -> ``(k * L * c_in, L * c_out)``: row
    ``(a * L + j) * c_in + c``, column ``i * c_out + o`` holds the sum of
    ``kernel[a, b, c, o]`` over the offsets ``b`` that bring position ``i`` of a row onto
    position ``j`` (``L`` = ``length``, the last axis). Linear in ``kernel``.
    """
    hits = jnp.asarray(_row_hits(length, kernel_size), kernel.dtype)
    c_in, c_out = kernel.shape[-2:]
    band = jnp.einsum("bji,abco->ajcio", hits, kernel)
    return band.reshape(kernel_size * length * c_in, length * c_out)


def _banded_forward(x, kernel, shape, k):
    batch, c_in = x.shape[0], x.shape[-1]
    lx, ly = shape
    rows = x.reshape(batch, lx, ly * c_in)
    padded = jnp.pad(rows, [(0, 0), (k // 2, k - 1 - k // 2), (0, 0)], mode="wrap")
    stacked = jnp.concatenate([padded[:, a:a + lx] for a in range(k)], axis=-1)  # (B, Lx, k * Ly * C_in)
    y = stacked.reshape(batch * lx, k * ly * c_in) @ row_band_matrix(kernel, ly, k)
    return y.reshape(batch, lx, ly, -1)


def _banded_conv(x, kernel, shape, k):
    """The row-banded form on a 2-D grid (see the module docstring), the dense form on a chain."""
    if len(shape) != 2:
        return _dense_conv(x, kernel, shape, k)
    return _banded_conv_2d(x, kernel, tuple(shape), k)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def _banded_conv_2d(x, kernel, shape, k):
    return _banded_forward(x, kernel, shape, k)


@_banded_conv_2d.defjvp
def _banded_conv_jvp(shape, k, primals, tangents):
    x, kernel = primals
    dx, dkernel = tangents
    y = _banded_conv_2d(x, kernel, shape, k)
    return y, _banded_conv_2d(dx, kernel, shape, k) + _patch_kernel_tangent(x, dkernel, shape, k)


# channels-last implementations: (batch, *shape, c_in) -> (batch, *shape, c_out)
_CONVS = {"dense": _dense_conv, "lax": _lax_conv, "lax_patch": _lax_patch_conv, "lax_gather": _lax_gather_conv,
          "gather": _gather_conv, "banded": _banded_conv}


def _channel_norm(norm: str, dtype, channel_major: bool = False, name: str | None = None):
    """The normalization before an activation: a LayerNorm over the channels at each
    position (learned scale and bias) for ``"layer"``, the identity for ``"none"``.
    ``channel_major``: the channels are axis 1 (else the last axis)."""
    if norm == "layer":
        axis = 1 if channel_major else -1
        return nn.LayerNorm(dtype=dtype, param_dtype=dtype, epsilon=1e-5, reduction_axes=axis, feature_axes=axis,
                            name=name)
    return lambda x: x


class ResidualBlock(nn.Module):
    """Pre-activation residual block: ``x + conv(act(norm(conv(act(norm(x))))))``.

    ``norm="layer"``: a LayerNorm over the channels at each position (learned scale and
    bias); ``"none"``: no normalization. Either way the block is translation-equivariant.
    Call: ``x`` ``(batch, *shape, channels)``, or ``(batch, channels, n_sites)`` with
    ``channel_major=True`` (see :class:`PeriodicConv`).
    """

    channels: int
    kernel_size: int
    lattice_shape: tuple[int, ...]
    dtype: Any = jnp.float64
    activation: Callable = nn.gelu
    norm: str = "none"

    @nn.compact
    def __call__(self, x, channel_major: bool = False):
        dtype = real_dtype(self.dtype)
        conv = dict(features=self.channels, kernel_size=self.kernel_size,
                    lattice_shape=tuple(self.lattice_shape), dtype=dtype)
        h = _channel_norm(self.norm, dtype, channel_major, name="norm1")(x)
        h = PeriodicConv(**conv, name="conv1")(self.activation(h), channel_major)
        h = _channel_norm(self.norm, dtype, channel_major, name="norm2")(h)
        h = PeriodicConv(**conv, name="conv2")(self.activation(h), channel_major)
        return x + h


class _CellGrid:
    """``n_cells`` and ``n_sites`` of a module with ``lattice_shape`` and ``n_basis``."""

    @property
    def n_cells(self) -> int:
        return int(np.prod(self.lattice_shape))

    @property
    def n_sites(self) -> int:
        return self.n_cells * self.n_basis


class ConvTrunk(_CellGrid, nn.Module):
    """The convolutional backbone: spins ``(batch, n_sites)`` -> features ``(batch, n_cells,
    channels)``, equivariant under translations by whole cells (the ``"conv"`` network of
    the registry; :class:`ConvResNet` is this trunk with a head).

    Input periodic conv ``n_basis -> channels`` with bias (the spins of a cell are its
    input channels), ``depth`` :class:`ResidualBlock` s, a final normalization (``norm``)
    and ``activation``. Parameters ``input_conv``, ``blocks_<i>``, ``final_norm`` (with
    ``norm="layer"``).
    """

    lattice_shape: tuple[int, ...]
    channels: int = 8
    depth: int = 2
    kernel_size: int = 3
    dtype: Any = jnp.float64
    activation: Callable = nn.gelu
    norm: str = "none"
    n_basis: int = 1

    equivariance = "cells"

    def __post_init__(self):
        object.__setattr__(self, "lattice_shape", lattice_shape(self.lattice_shape))
        positive_int(self.n_basis, "n_basis")
        positive_int(self.channels, "channels")
        positive_int(self.depth, "depth", minimum=0)
        positive_int(self.kernel_size, "kernel_size")
        real_dtype(self.dtype)
        if self.norm not in NORMS:
            raise ValueError(f"norm: expected one of {NORMS}, got {self.norm!r}")
        super().__post_init__()

    def setup(self):
        dtype = real_dtype(self.dtype)
        shape = tuple(self.lattice_shape)
        self.input_conv = PeriodicConv(self.channels, self.kernel_size, shape, dtype=dtype)
        self.blocks = [
            ResidualBlock(self.channels, self.kernel_size, shape, dtype, self.activation, self.norm)
            for _ in range(self.depth)
        ]
        self.final_norm = _channel_norm(self.norm, dtype, self._channel_major)

    @property
    def _channel_major(self) -> bool:
        # the dense form runs on channel-major maps (see PeriodicConv); the others channels-last
        return conv_form_for(tuple(self.lattice_shape), self.kernel_size, self.channels, real_dtype(self.dtype)) == "dense"

    def _maps(self, s):
        """Trunk maps before the final norm, in the internal layout: ``(batch, channels,
        n_cells)`` for the dense form, else ``(batch, *lattice_shape, channels)``."""
        s = spin_batch(s, self.n_sites)
        x = s.astype(real_dtype(self.dtype))
        if self.n_basis > 1 and self._channel_major:  # (batch, n_basis, n_cells)
            x = jnp.swapaxes(x.reshape(s.shape[0], self.n_cells, self.n_basis), 1, 2)
        elif self._channel_major:
            x = x.reshape(s.shape[0], 1, self.n_sites)
        else:
            x = x.reshape(s.shape[0], *self.lattice_shape, self.n_basis)
        x = self.input_conv(x, self._channel_major)
        for block in self.blocks:
            x = block(x, self._channel_major)
        return x

    def _channels_last(self, x):
        """Internal-layout maps -> ``(batch, n_cells, channels)``."""
        if self._channel_major:
            return jnp.swapaxes(x, 1, 2)
        return x.reshape(x.shape[0], self.n_cells, x.shape[-1])

    def maps(self, s):
        """Trunk feature maps ``(batch, *lattice_shape, channels)`` (before the final norm)."""
        x = self._channels_last(self._maps(s))
        return x.reshape(x.shape[0], *self.lattice_shape, x.shape[-1])

    def __call__(self, s):
        return self._channels_last(self.activation(self.final_norm(self._maps(s))))


class ConvResNet(_CellGrid, nn.Module):

    """Periodic-convolution residual network giving a complex log-amplitude ``log psi_0(s)``.

    Architecture (``d = len(lattice_shape)``, ``K = kernel_size**d``, ``C = channels``,
    ``B = n_basis``): input periodic conv ``B -> C`` with bias (the ``B`` spins of a unit
    cell are its input channels); ``depth`` :class:`ResidualBlock` s; a final
    normalization (``norm``) and activation; a per-position (per-cell) linear readout
    ``C -> 2`` without bias, whose two outputs are the real and imaginary part of the
    position's log-amplitude contribution ``f_r(s)``. Parameter count
    ``K*B*C + C + depth*(2*K*C**2 + 2*C) + R*C``, ``R`` the readout outputs (2; 1 for a real
    network, 4 for ``"plane_wave"``) (:func:`~quantax_lite.models.conv_param_count`;
    ``norm="layer"`` adds ``2*C`` per LayerNorm, ``2*depth + 1`` of them).

    The trunk is equivariant under translations by whole cells, so ``f_r(s) = f_0(T_r s)``
    for the translation ``T_r`` that brings cell ``r`` to the origin. Readouts:

    * ``"sum"``: ``log psi_0(s) = sum_r f_r(s)``, a translation-invariant amplitude (only
      zero-momentum sectors survive translation symmetrization);
    * ``"origin"``: ``log psi_0(s) = f_0(s)``, not translation-invariant; symmetrized over
      translations it gives ``psi(s) = sum_r chi_r exp(f_r(s))``, any momentum, but the
      log-amplitude is no longer a sum over the lattice (one cell's output decides it);
    * ``"plane_wave"``: two complex outputs per cell, ``a_r`` and ``b_r`` (readout
      ``C -> 4``), and ``log psi_0(s) = sum_r a_r(s) + log sum_r exp(i phi_r + b_r(s))``
      with the fixed angles ``phi_r = cell_phases[r]``. With ``phi_r = k . R_r`` (``R_r``
      the position of cell ``r``) every translation multiplies ``psi_0`` by a phase: a
      momentum eigenstate by construction whose log-amplitude stays a sum over the
      lattice, for sectors of nonzero momentum (see ``make_conv_nqs``).

    The readout weights start at ``final_scale / sqrt(C)`` standard deviation, so the
    initial state is close to uniform.

    Attributes:
      lattice_shape: ``(L,)`` or ``(L1, L2)``, the grid of unit cells; cells row-major.
      channels, depth, kernel_size: architecture (``depth`` may be 0).
      dtype: parameter and compute dtype, ``jnp.float32`` or ``jnp.float64`` (outputs
        complex64 / complex128).
      readout: ``"sum"``, ``"origin"`` or ``"plane_wave"``.
      cell_phases: with ``readout="plane_wave"``, one angle (radians) per cell (default: all
        0); not allowed with the other readouts.
      activation: elementwise nonlinearity (default GELU).
      norm: ``"none"`` (default) or ``"layer"``: a LayerNorm over the channels before
        every activation. On CPUs the LayerNorm costs about as much as the rest of a
        forward pass of a small network; trained without it, the W1 network reaches the
        4x4 Heisenberg ground state at least as well (``docs/benchmarks.md``).
      final_scale: scale of the readout initialization.
      complex_output: True (default): complex log-amplitudes (a sign or phase structure
        can be represented; readout ``C -> 2``). False: real log-amplitudes, i.e. a
        positive wavefunction (readout ``C -> 1``, ``C`` fewer parameters), enough for a
        sign-free ground state such as the Heisenberg model in the Marshall basis; its
        Jacobian is real, which halves the SR work.
      signed: with ``complex_output=True``, a real wavefunction with a learned sign
        instead of a free phase: the two readout outputs are a log-amplitude ``a_r`` and
        a sign term ``g_r``, and ``psi_0 = exp(sum_r a_r) * (1 + sum_r g_r)`` (``"sum"``)
        or ``exp(a_0) * (1 + g_0)`` (``"origin"``). ``log psi_0`` is complex with
        imaginary part 0 or pi, piecewise constant, so its parameter derivatives are
        those of its real part (a real Jacobian). Meant for real Hamiltonians whose
        ground state has signs beyond a known rule (J1-J2): the sign changes where
        ``1 + sum g`` crosses zero, a path that a phase started at 0 does not take (a
        real ``psi`` is a stationary point of the energy in the phase directions).

      n_basis: sites per unit cell (default 1: cells are sites); site ``c * n_basis + b``
        is channel ``b`` of cell ``c`` (the numbering of :class:`~quantax_lite.geometry.lattice.Lattice`).
      site_phases: None (default) or one fixed angle ``theta_i`` (radians) per site: a
        phase rule, ``log psi_0(s)`` gains ``i * sum_{i: s_i = -1} theta_i`` (e.g. the
        120-degree rule of :func:`~quantax_lite.models.sublattice_phases`). The network
        then learns the amplitude in the rotated frame, where the ordered state the rule
        describes is uniform. Complex networks only (not ``signed``, not
        ``complex_output=False``); not part of :meth:`position_log_amplitudes`.

    Call: ``s`` ``(batch, n_sites)`` of +1/-1 (any numeric dtype), ``n_sites =
    prod(lattice_shape) * n_basis`` -> ``(batch,)`` complex (real with ``complex_output=False``).
    """

    lattice_shape: tuple[int, ...]
    channels: int = 8
    depth: int = 2
    kernel_size: int = 3
    dtype: Any = jnp.float64
    readout: str = "sum"
    activation: Callable = nn.gelu
    final_scale: float = 1e-2
    complex_output: bool = True
    signed: bool = False
    norm: str = "none"
    n_basis: int = 1
    site_phases: Any = None
    cell_phases: Any = None

    def __post_init__(self):
        object.__setattr__(self, "lattice_shape", lattice_shape(self.lattice_shape))
        positive_int(self.n_basis, "n_basis")
        positive_int(self.channels, "channels")
        positive_int(self.depth, "depth", minimum=0)
        positive_int(self.kernel_size, "kernel_size")
        if self.readout not in READOUTS:
            raise ValueError(f"readout: expected one of {READOUTS}, got {self.readout!r}")
        real_dtype(self.dtype)
        if self.norm not in NORMS:
            raise ValueError(f"norm: expected one of {NORMS}, got {self.norm!r}")
        if self.signed and not self.complex_output:
            raise ValueError("signed: needs complex_output=True (log psi of a negative psi is complex)")
        if self.readout == "plane_wave":
            if self.signed or not self.complex_output:
                raise ValueError("readout: 'plane_wave' needs a complex network (complex_output=True, signed=False)")
            phases = np.zeros(self.n_cells) if self.cell_phases is None else self.cell_phases
            object.__setattr__(self, "cell_phases", angles(phases, self.n_cells, "cell_phases", "cell"))
        elif self.cell_phases is not None:
            raise ValueError(f"cell_phases: only the 'plane_wave' readout has cell phases, not {self.readout!r}")
        if self.site_phases is not None:
            object.__setattr__(self, "site_phases", angles(self.site_phases, self.n_sites))
            if self.signed or not self.complex_output:
                raise ValueError("site_phases: a phase rule needs a complex network (complex_output=True, "
                                 "signed=False)")
        super().__post_init__()

    @property
    def kind(self) -> str:
        """The head: ``"positive"``, ``"signed"`` or ``"complex"``."""
        return "signed" if self.signed else "complex" if self.complex_output else "positive"

    @property
    def real_jacobian(self) -> bool:
        """A signed network: complex log psi (phase 0 or pi) with real parameter derivatives."""
        return self.signed

    def setup(self):
        self.trunk = ConvTrunk(self.lattice_shape, self.channels, self.depth, self.kernel_size, self.dtype,
                               self.activation, self.norm, self.n_basis)
        self.head = Head(self.kind, self.readout, self.final_scale, self.cell_phases, self.dtype)
        nn.share_scope(self, self.trunk)
        nn.share_scope(self, self.head)

    def features(self, s):
        """Trunk feature maps ``(batch, *lattice_shape, channels)`` (before the final norm)."""
        return self.trunk.maps(s)

    def position_outputs(self, s):
        """Readout outputs per position (cell), ``(batch, n_cells, 2)`` real (``(batch, n_cells)``
        with ``complex_output=False``, ``(batch, n_cells, 4)`` with ``readout="plane_wave"``)."""
        return self.head.outputs(self.trunk(s))

    def position_log_amplitudes(self, s):
        """Per-position (per-cell) log-amplitude contributions ``f_r(s)``, ``(batch, n_cells)`` complex
        (real with ``complex_output=False``). Not defined for ``signed`` networks."""
        if self.signed or self.readout == "plane_wave":
            raise ValueError(f"position_log_amplitudes: a {'signed' if self.signed else 'plane_wave'} network has "
                             "no per-position log-amplitudes")
        return self.head.log_amplitudes(self.trunk(s))

    @tuning.at_matmul_precision
    def __call__(self, s):
        log_psi = self.head(self.trunk(s))
        return log_psi if self.site_phases is None else add_phase_rule(log_psi, s, self.site_phases)


def default_conv_architecture(lattice) -> dict:
    """Default ``channels``, ``depth``, ``kernel_size`` for a lattice.

    Square lattices: up to 20 sites (e.g. 4x4) ``C=8, depth=2, k=3`` (2432 parameters);
    larger (e.g. 6x6) ``C=16, depth=4, k=3`` (18752 parameters). Chains use ``k=5`` (a
    wider receptive field per layer along the single axis). Lattices without
    nearest-neighbour triangles (honeycomb too) follow the square lattice's rule by number
    of sites; frustrated ones (``lattice.frustrated``: triangular, kagome; a learned sign
    structure) get ``C=16, depth=4, k=3`` at every size. A ``3 x 3`` kernel on the cell
    grid reaches every nearest-neighbour pair of all of them, and the 2nd and 3rd shells
    too on the honeycomb and kagome lattices (:func:`kernel_reach`).
    """
    if getattr(lattice, "frustrated", False):
        return dict(channels=16, depth=4, kernel_size=3)
    small = lattice.n_sites <= 20
    return dict(
        channels=8 if small else 16,
        depth=2 if small else 4,
        kernel_size=3 if len(lattice.shape) > 1 else 5,
    )


@dataclasses.dataclass(frozen=True)
class ConvOptions:
    """Options of the ``"conv"`` network: ``channels``, ``depth`` (residual blocks, may be 0),
    ``kernel_size`` (on the grid of cells; None: :func:`default_conv_architecture`),
    ``norm`` (``"none"`` or ``"layer"``: a LayerNorm over the channels before every
    activation)."""

    channels: int | None = None
    depth: int | None = None
    kernel_size: int | None = None
    norm: str = "none"

    def __post_init__(self):
        for name in ("channels", "kernel_size"):
            if getattr(self, name) is not None:
                positive_int(getattr(self, name), name)
        if self.depth is not None:
            positive_int(self.depth, "depth", minimum=0)
        if self.norm not in NORMS:
            raise ValueError(f"norm: expected one of {NORMS}, got {self.norm!r}")

    def architecture(self, lattice) -> dict:
        """``channels``, ``depth``, ``kernel_size`` for ``lattice``: the given ones, the
        lattice's defaults for the others."""
        arch = default_conv_architecture(lattice)
        arch.update({k: v for k, v in dict(channels=self.channels, depth=self.depth,
                                           kernel_size=self.kernel_size).items() if v is not None})
        return arch


@register_network("conv", options=ConvOptions)
def conv_network(lattice, options: ConvOptions, dtype) -> ConvTrunk:
    """The :class:`ConvTrunk` of ``lattice`` (periodic; its cells' sites as input channels)."""
    if not getattr(lattice, "pbc", True):
        raise ValueError("lattice: periodic convolutions need periodic boundaries (pbc=True)")
    return ConvTrunk(tuple(lattice.shape), dtype=dtype, norm=options.norm, n_basis=int(getattr(lattice, "n_basis", 1)),
                     **options.architecture(lattice))
