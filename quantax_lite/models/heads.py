"""Heads, phase rules and the headed network: what the library puts on a backbone.

A backbone (:mod:`quantax_lite.models.registry`) maps spins ``(batch, n_sites)`` to
features ``(batch, n_cells, F)``. A :class:`Head` turns features into ``log psi_0``:

* ``kind``: ``"positive"`` (real log psi, one output per cell), ``"complex"`` (a free
  phase: real and imaginary part per cell), ``"signed"`` (a real psi with a learned
  sign: ``psi_0 = exp(sum_r a_r) (1 + sum_r g_r)``, log psi complex with imaginary part 0
  or pi, so its parameter derivatives are real) or ``"sinh"`` (a real psi that is a sum
  of signed terms, ``psi_0 = sum_r sum_k (sinh(y_rk) + c)`` over the two outputs ``k`` of
  each cell, ``c`` the head's ``offset``: with ``c = 1`` the last activation of Chen and
  Heyl's residual networks; each term's sign can change; real derivatives as ``"signed"``);
* ``readout``: ``"sum"`` over cells (translation-invariant for an equivariant backbone),
  ``"origin"`` (cell 0 only), or ``"plane_wave"`` (complex only:
  ``sum_r a_r + log sum_r exp(i phi_r + b_r)``, a momentum eigenstate for the cell
  phases ``phi_r``).

:class:`Network` is backbone + head; :class:`PhaseRule` adds a fixed phase
``i sum_{i: s_i = -1} theta_i``. Both share their child's parameter scope, so wrapping
adds no level to the parameter paths (a conv backbone with a head has the parameters of
:class:`~quantax_lite.models.ConvResNet`, path for path).

Every module here declares ``real_jacobian``: True when ``log psi`` is complex but its
parameter derivatives are real (a signed head), so the driver may differentiate
``real(log psi)`` (:func:`~quantax_lite.models.derivative_form`).
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
from jax import lax

from quantax_lite.utils import tuning
from ._checks import complex_dtype, real_dtype
from .symmetrize import weighted_logsumexp

__all__ = ["HEAD_KINDS", "READOUTS", "SINH_OFFSET", "Head", "Network", "PhaseRule", "add_phase_rule", "angles",
           "check_offset", "signed_log", "sinh_sum_log"]

HEAD_KINDS = ("positive", "complex", "signed", "sinh")
# the sinh head's offset c where none is given: 0.1 (c = 1 left one start in four of the 4x4
# J1-J2 row caught at the Marshall signs, 0.1 none; docs/research_log.md)
SINH_OFFSET = 0.1
READOUTS = ("sum", "origin", "plane_wave")


def angles(phases, n: int, name: str = "site_phases", per: str = "site") -> tuple:
    """``phases`` as a tuple of ``n`` finite floats (radians; hashable: a module attribute)."""
    try:
        a = np.asarray(phases, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected {n} real angles, got {phases!r}") from None
    if a.shape != (n,) or not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: expected {n} finite angles (one per {per}), got shape {a.shape}")
    return tuple(a.tolist())


def signed_log(log_amplitude, factor):
    """``log(exp(log_amplitude) * factor)`` for a real ``factor`` of either sign: complex,
    imaginary part 0 or pi. A factor below the smallest normal number in magnitude (a
    node) is clamped there, so values and derivatives stay finite."""
    tiny = jnp.finfo(factor.dtype).tiny
    magnitude = jnp.maximum(jnp.abs(factor), tiny)
    phase = jnp.where(factor < 0, jnp.asarray(np.pi, factor.dtype), jnp.zeros((), factor.dtype))
    return lax.complex(log_amplitude + jnp.log(magnitude), phase)


def sinh_sum_log(y, offset: float = 1.0):
    """``log sum_{r,k} (sinh(y_rk) + offset)`` for ``y`` ``(batch, cells, K)`` real: complex,
    imaginary part 0 or pi (the sum's sign). Computed relative to ``m = max |y|`` per row
    (``e^m`` factored out, held constant for the derivatives, which do not depend on it),
    so no term overflows; a sum that vanishes is clamped as in :func:`signed_log`. Terms
    that cancel lose what the dtype's precision loses (two of e^50 leave nothing of an
    order-one rest in float32)."""
    y = y.reshape(y.shape[0], -1)
    m = lax.stop_gradient(jnp.max(jnp.abs(y), axis=-1, keepdims=True))
    terms = 0.5 * (jnp.exp(y - m) - jnp.exp(-y - m)) + offset * jnp.exp(-m)
    return signed_log(m[:, 0], terms.sum(axis=-1))


def check_offset(offset, kind: str) -> float:
    """``offset`` as a float: finite and >= 0 for the sinh head (``ValueError`` /
    ``TypeError`` naming ``sinh_offset``), exactly 1 for any other ``kind``."""
    if isinstance(offset, bool) or not isinstance(offset, (int, float, np.floating, np.integer)):
        raise TypeError(f"sinh_offset: expected a number, got {offset!r}")
    if not np.isfinite(offset) or offset < 0:
        raise ValueError(f"sinh_offset: expected a finite number >= 0, got {offset!r}")
    if kind != "sinh" and offset != 1:
        raise ValueError(f"sinh_offset: only the 'sinh' amplitude has an offset, not {kind!r}")
    return float(offset)


def add_phase_rule(log_psi, s, site_phases):
    """``log_psi + i sum_{i: s_i = -1} theta_i``: ``log_psi`` ``(batch,)`` complex, ``s``
    ``(batch, n_sites)`` +-1, ``site_phases`` ``n_sites`` angles (radians)."""
    theta = jnp.asarray(site_phases, jnp.real(log_psi).dtype)
    down = (1 - jnp.asarray(s).astype(theta.dtype)) / 2
    phase = down @ theta
    return log_psi + lax.complex(jnp.zeros_like(phase), phase)


class Head(nn.Module):
    """Features ``(batch, n_cells, F)`` -> ``log psi_0`` ``(batch,)``.

    A per-cell linear map without bias (``readout_dense``, ``F -> R`` with ``R`` = 1
    positive, 2 complex, signed or sinh, 4 plane-wave), initialized normal with standard
    deviation ``final_scale / sqrt(F)`` (plane wave: the ``a_r`` outputs at 0), so a
    small ``final_scale`` starts near the uniform state.

    Attributes: ``kind`` (:data:`HEAD_KINDS`), ``readout`` (:data:`READOUTS`),
    ``final_scale``, ``cell_phases`` (plane wave only: one angle per cell, default 0),
    ``dtype`` (float32 / float64; complex64 / complex128 outputs), ``offset`` (sinh only:
    the constant ``c >= 0`` of each term ``sinh(y) + c``; 1 elsewhere).
    """

    kind: str = "complex"
    readout: str = "sum"
    final_scale: float = 1e-2
    cell_phases: Any = None
    dtype: Any = jnp.float64
    offset: float = 1.0

    def __post_init__(self):
        if self.kind not in HEAD_KINDS:
            raise ValueError(f"amplitude: expected one of {HEAD_KINDS}, got {self.kind!r}")
        check_offset(self.offset, self.kind)
        if self.readout not in READOUTS:
            raise ValueError(f"readout: expected one of {READOUTS}, got {self.readout!r}")
        if self.readout == "plane_wave" and self.kind != "complex":
            raise ValueError("readout: 'plane_wave' needs a complex network (complex_output=True, signed=False)")
        if self.cell_phases is not None and self.readout != "plane_wave":
            raise ValueError(f"cell_phases: only the 'plane_wave' readout has cell phases, not {self.readout!r}")
        real_dtype(self.dtype)
        super().__post_init__()

    @property
    def real_jacobian(self) -> bool:
        return self.kind in ("signed", "sinh")

    @property
    def n_outputs(self) -> int:
        """Readout outputs per cell."""
        return 4 if self.readout == "plane_wave" else 1 if self.kind == "positive" else 2

    def setup(self):
        dtype = real_dtype(self.dtype)
        self.readout_dense = nn.Dense(self.n_outputs, use_bias=False, dtype=dtype, param_dtype=dtype,
                                      kernel_init=self._readout_init)

    def _readout_init(self, key, shape, dtype):
        w = nn.initializers.normal(self.final_scale / np.sqrt(shape[0]))(key, shape, dtype)
        return w.at[:, :2].set(0) if self.readout == "plane_wave" else w

    def outputs(self, x):
        """Per-cell outputs: ``(batch, n_cells)`` positive, else ``(batch, n_cells, R)``."""
        y = self.readout_dense(x)
        return y.reshape(x.shape[0], x.shape[1]) if self.kind == "positive" else y

    def log_amplitudes(self, x):
        """Per-cell log-amplitude contributions ``f_r`` ``(batch, n_cells)`` (positive: real;
        complex: complex). Not defined for signed, sinh or plane-wave heads."""
        if self.kind in ("signed", "sinh") or self.readout == "plane_wave":
            raise ValueError(f"position_log_amplitudes: a {self.kind if self.real_jacobian else 'plane_wave'} "
                             "network has no per-position log-amplitudes")
        out = self.outputs(x)
        if self.kind == "positive":
            return out
        return lax.complex(out[..., 0], out[..., 1]).astype(complex_dtype(self.dtype))

    def __call__(self, x):
        if self.kind == "signed":
            out = self.outputs(x)
            pick = (lambda y: y.sum(axis=-1)) if self.readout == "sum" else (lambda y: y[:, 0])
            return signed_log(pick(out[..., 0]), 1 + pick(out[..., 1]))
        if self.kind == "sinh":
            out = self.outputs(x)
            return sinh_sum_log(out if self.readout == "sum" else out[:, :1], self.offset)
        if self.readout == "plane_wave":
            out = self.outputs(x)
            a, b = (lax.complex(out[..., i], out[..., i + 1]) for i in (0, 2))
            phases = np.zeros(x.shape[1]) if self.cell_phases is None else np.asarray(self.cell_phases)
            log_psi = a.sum(axis=-1) + weighted_logsumexp(b, np.exp(1j * phases))
            return log_psi.astype(complex_dtype(self.dtype))
        f = self.log_amplitudes(x)
        return f.sum(axis=-1) if self.readout == "sum" else f[:, 0]


class Network(nn.Module):
    """A backbone with a head: ``log psi_0(s) = head(backbone(s))``, ``(batch,)``.

    ``backbone``: a module ``(batch, n_sites)`` +-1 -> ``(batch, n_cells, F)``; ``head``: a
    :class:`Head`. Parameters: the backbone's and ``readout_dense``, at this module's level.
    """

    backbone: nn.Module
    head: Head

    def setup(self):
        nn.share_scope(self, self.backbone)
        nn.share_scope(self, self.head)

    @property
    def real_jacobian(self) -> bool:
        return self.head.real_jacobian

    @property
    def readout(self) -> str:
        return self.head.readout

    @property
    def dtype(self):
        return self.head.dtype

    def features(self, s):
        """The backbone's features ``(batch, n_cells, F)``."""
        return self.backbone(s)

    def position_outputs(self, s):
        return self.head.outputs(self.backbone(s))

    @tuning.at_matmul_precision
    def __call__(self, s):
        return self.head(self.backbone(s))


class PhaseRule(nn.Module):
    """``log psi(s) = log psi_net(s) + i sum_{i: s_i = -1} theta_i``: a fixed phase rule
    (e.g. the 120-degree rule of :func:`~quantax_lite.operators.sign_rules.sublattice_phases`) on a
    complex network. ``site_phases``: one angle (radians) per site."""

    network: nn.Module
    site_phases: Any

    def __post_init__(self):
        if getattr(self.network, "real_jacobian", False) or getattr(getattr(self.network, "head", None), "kind",
                                                                    "complex") != "complex":
            raise ValueError("site_phases: a phase rule needs a complex network (complex_output=True, signed=False)")
        object.__setattr__(self, "site_phases", angles(self.site_phases, len(np.ravel(self.site_phases))))
        super().__post_init__()

    def setup(self):
        nn.share_scope(self, self.network)

    real_jacobian = False

    @property
    def readout(self) -> str:
        return self.network.readout

    @property
    def dtype(self):
        return self.network.dtype

    @tuning.at_matmul_precision
    def __call__(self, s):
        return add_phase_rule(self.network(s), s, self.site_phases)
