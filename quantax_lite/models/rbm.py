"""Restricted Boltzmann machine (flax linen), real or complex, with real parameters.

    log psi(s) = sum_i a_i s_i + sum_j log cosh(b_j + sum_i W_ij s_i)

With ``complex_output=True`` the couplings are complex, ``a = a_re + i a_im`` etc.,
stored as separate real arrays (``*_re``, ``*_im``), so every parameter is real.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from quantax_lite.utils import tuning
from quantax_lite.geometry.lattice import translation_perms
from ._checks import complex_dtype, positive_int, real_dtype, spin_batch
from .registry import register_network

__all__ = ["RBM", "RBMFeatures", "RBMOptions", "log_cosh"]


def log_cosh(z):
    """``log cosh(z)`` for real or complex ``z``, without overflow.

    Uses ``cosh(z) = cosh(-z)`` to take the branch with ``Re z >= 0``, then
    ``log cosh z = z - log 2 + log1p(exp(-2 z))``. For complex ``z`` the result is a
    logarithm of ``cosh z`` (imaginary part defined mod 2 pi).
    """
    sign = jnp.where(jnp.real(z) < 0, -1, 1).astype(jnp.real(z).dtype)
    w = z * sign
    return w - jnp.log(2.0).astype(jnp.real(z).dtype) + jnp.log1p(jnp.exp(-2 * w))


class RBM(nn.Module):
    """Restricted Boltzmann machine with ``n_hidden = max(1, round(alpha * n_sites))``.

    Attributes:
      alpha: hidden-unit density.
      dtype: parameter and compute dtype, ``jnp.float32`` or ``jnp.float64``.
      complex_output: complex couplings (complex log psi, can carry signs/phases) or real.
      visible_bias: include the ``a_i s_i`` term.
      init_scale: standard deviation of the initial parameters.

    Parameters (real arrays): ``kernel (N, M)``, ``hidden_bias (M,)``, ``visible_bias (N,)``,
    with a ``_re``/``_im`` pair of each when ``complex_output``. Count:
    ``(N*M + M + N) * (2 if complex_output else 1)`` (without the ``N`` if no visible bias).

    Call: ``s`` ``(batch, N)`` -> ``(batch,)``, complex64/complex128 or float32/float64.
    """

    alpha: float = 1
    dtype: Any = jnp.float64
    complex_output: bool = True
    visible_bias: bool = True
    init_scale: float = 1e-2

    def __post_init__(self):
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float, np.integer, np.floating)):
            raise TypeError(f"alpha: expected a positive number, got {self.alpha!r}")
        if not self.alpha > 0:
            raise ValueError(f"alpha: expected a positive number, got {self.alpha}")
        real_dtype(self.dtype)
        super().__post_init__()

    def _param(self, name, shape):
        dtype = real_dtype(self.dtype)
        init = nn.initializers.normal(self.init_scale)
        if not self.complex_output:
            return self.param(name, init, shape, dtype)
        re = self.param(name + "_re", init, shape, dtype)
        im = self.param(name + "_im", init, shape, dtype)
        return jax.lax.complex(re, im)

    @nn.compact
    @tuning.at_matmul_precision
    def __call__(self, s):
        kernel_name = "kernel_re" if self.complex_output else "kernel"
        known = None  # the number of sites of existing parameters (None while initializing)
        if self.has_variable("params", kernel_name):
            known = self.get_variable("params", kernel_name).shape[0]
        s = spin_batch(s, known)
        n_sites = s.shape[-1]
        n_hidden = max(1, int(round(self.alpha * n_sites)))
        x = s.astype(real_dtype(self.dtype))
        kernel = self._param("kernel", (n_sites, n_hidden))
        theta = x @ kernel + self._param("hidden_bias", (n_hidden,))
        out = log_cosh(theta).sum(axis=-1)
        if self.visible_bias:
            out = out + x @ self._param("visible_bias", (n_sites,))
        if self.complex_output:
            out = out.astype(complex_dtype(self.dtype))
        return out


class RBMFeatures(nn.Module):
    """The hidden units of an RBM as features: the backbone of the ``"rbm"`` network.

    ``translated=True`` (periodic lattices): ``features[:, r, f] = log cosh(b_f + sum_i
    W[i, f] (T_r s)[i])`` for every cell ``r`` (``T_r`` the translation bringing cell ``r``
    to the origin: :func:`~quantax_lite.geometry.lattice.translation_perms`), ``alpha`` hidden units
    per cell, equivariant under translations by whole cells; with the ``"sum"`` head of
    weights ``w_f`` this is the symmetric RBM ``sum_{r,f} w_f log cosh(theta_rf)``.
    Parameters ``kernel (n_sites, alpha)``, ``hidden_bias (alpha,)``.
    ``translated=False`` (open lattices): ``alpha * n_cells`` independent hidden units at one
    position, ``(batch, 1, alpha * n_cells)``, no symmetry (``equivariance = "none"``);
    ``kernel (n_sites, alpha * n_cells)``. Real parameters.

    Call: ``s`` ``(batch, n_sites)`` -> ``(batch, n_cells, alpha)`` (translated).
    """

    lattice_shape: tuple
    n_basis: int = 1
    alpha: int = 2
    dtype: Any = jnp.float64
    translated: bool = True

    @property
    def equivariance(self) -> str:
        return "cells" if self.translated else "none"

    @nn.compact
    def __call__(self, s):
        dtype = real_dtype(self.dtype)
        perms = translation_perms(self.lattice_shape, self.n_basis)  # (n_cells, n_sites)
        n_cells, n_sites = perms.shape
        s = spin_batch(s, n_sites)
        width = self.alpha if self.translated else self.alpha * n_cells
        kernel = self.param("kernel", nn.initializers.normal(1.0 / np.sqrt(n_sites)), (n_sites, width), dtype)
        bias = self.param("hidden_bias", nn.initializers.zeros_init(), (width,), dtype)
        x = s.astype(dtype)
        if self.translated:
            return log_cosh(x[:, perms] @ kernel + bias)
        return log_cosh(x @ kernel + bias)[:, None, :]


@dataclasses.dataclass(frozen=True)
class RBMOptions:
    """Options of the ``"rbm"`` network: ``alpha``, hidden units per unit cell."""

    alpha: int = 2

    def __post_init__(self):
        positive_int(self.alpha, "alpha")


@register_network("rbm", options=RBMOptions)
def rbm_network(lattice, options: RBMOptions, dtype) -> RBMFeatures:
    """The :class:`RBMFeatures` of ``lattice``: hidden units translated over the cells of a
    periodic lattice, independent ones on an open lattice."""
    return RBMFeatures(tuple(lattice.shape), int(lattice.n_basis), options.alpha, dtype, translated=bool(lattice.pbc))
