"""Restricted Boltzmann machine (flax linen), real or complex, with real parameters.

    log psi(s) = sum_i a_i s_i + sum_j log cosh(b_j + sum_i W_ij s_i)

With ``complex_output=True`` the couplings are complex, ``a = a_re + i a_im`` etc.,
stored as separate real arrays (``*_re``, ``*_im``), so every parameter is real.
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from .. import tuning
from ._checks import complex_dtype, real_dtype, spin_batch

__all__ = ["RBM", "log_cosh"]


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
