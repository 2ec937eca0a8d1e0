"""Projection of a network onto a symmetry sector: psi(s) = sum_g chi_g psi_0(g s).

Group elements act on configurations as ``(g s)[i] = flips[g] * s[perms[g, i]]``
(the convention of :mod:`quantax_lite.geometry.symmetry`). With characters ``chi`` of a 1-D
representation, ``psi(g s) = psi(s) / chi_g``, i.e. ``log psi(g s) = log psi(s) - log chi_g``.
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from quantax_lite.geometry.lattice import translation_perms  # re-exported: the translations of a grid of cells
from quantax_lite.geometry.symmetry import group_table  # the one check of a group table (re-exported here)
from quantax_lite.utils import tuning
from ._checks import lattice_shape, positive_int, spin_batch

__all__ = [
    "Symmetrized",
    "group_table",
    "weighted_logsumexp",
    "translation_perms",
    "merge_translation_images",
]

# Relative size below which a (summed) character counts as zero.
_ZERO_WEIGHT = 1e-9


def _expm1(z):
    """``exp(z) - 1`` for complex ``z``, accurate for small ``|z|`` (no cancellation)."""
    x, y = jnp.real(z), jnp.imag(z)
    re = jnp.expm1(x) * jnp.cos(y) - 2 * jnp.sin(y / 2) ** 2
    return jax.lax.complex(re, jnp.exp(x) * jnp.sin(y))


def weighted_logsumexp(log_terms, weights):
    """``log(sum_g weights[g] * exp(log_terms[..., g]))`` over the last axis, stably.

    Args:
      log_terms: ``(..., G)`` real or complex jax array.
      weights: ``(G,)`` numpy complex constants, none of them zero.

    Returns ``(...)``: real when ``log_terms`` is real and every weight is real and positive,
    complex otherwise (imaginary part = phase, defined mod 2 pi).

    The complex case is evaluated as ``exp(m) * (sum_g w_g expm1(l_g - m) + sum_g w_g)``
    with ``m = max_g Re l_g``: when the terms are nearly equal (a network near its uniform
    initialization) and the characters sum to zero, the result carries no cancellation
    error. Where the weighted sum vanishes (below the dtype's smallest normal number,
    e.g. a zero row or a configuration whose amplitude the sector forces to zero), the
    result is the finite ``m + log(tiny)`` (``log(tiny)`` about -708 in float64, -87 in
    float32) instead of ``-inf``, with a finite gradient.
    """
    weights = np.asarray(weights, np.complex128)
    real_dt = jnp.real(log_terms).dtype
    if not jnp.iscomplexobj(log_terms) and np.all(weights.imag == 0) and np.all(weights.real > 0):
        t = log_terms + jnp.asarray(np.log(weights.real), real_dt)
        m = jax.lax.stop_gradient(jnp.max(t, axis=-1, keepdims=True))
        return m[..., 0] + jnp.log(jnp.sum(jnp.exp(t - m), axis=-1))
    cdt = jnp.complex128 if real_dt == jnp.float64 else jnp.complex64
    total = weights.sum()
    if abs(total) <= _ZERO_WEIGHT * np.abs(weights).sum():
        total = 0.0  # characters of a nontrivial sector sum to exactly zero
    lt = log_terms.astype(cdt)
    m = jax.lax.stop_gradient(jnp.max(lt.real, axis=-1, keepdims=True))
    z = jnp.sum(_expm1(lt - m) * jnp.asarray(weights, cdt), axis=-1) + jnp.asarray(total, cdt)
    tiny = np.finfo(real_dt).tiny
    ok = jnp.abs(z) > tiny
    log_z = jnp.log(jnp.where(ok, z, jnp.ones_like(z)))
    log_z = jnp.where(ok, log_z, jnp.asarray(np.log(tiny), cdt))
    return m[..., 0] + log_z


class Symmetrized(nn.Module):
    """A network projected on a symmetry sector: ``psi(s) = sum_g chi_g psi_0(g s)``.

    The ``G`` images ``g s`` of a batch are stacked into one ``(batch * G, N)`` batch and
    passed through ``base``; the sum is a complex log-sum-exp. Elements whose character
    is 0 are dropped (they contribute nothing).

    Attributes:
      base: a module mapping ``(batch, N)`` spins to ``(batch,)`` log-amplitudes ``log psi_0``.
      perms: ``(G, N)`` ints; ``flips``: ``(G,)`` +1/-1 (default +1); ``characters``: ``(G,)``
        complex (default 1). Stored as tuples (the module stays hashable). A ``Symmetry``
        (anything with ``perms``, ``flips``, ``characters``) may be passed as ``perms``.

    Call: ``s`` ``(batch, N)`` -> ``(batch,)`` log psi, complex (real only when ``base`` is
    real and every character is real and positive).
    """

    base: nn.Module
    perms: Any
    flips: Any = None
    characters: Any = None

    def __post_init__(self):
        group = self.perms
        if all(hasattr(group, a) for a in ("perms", "flips", "characters")):
            if self.flips is not None or self.characters is not None:
                raise TypeError("perms: a Symmetry was given, so flips and characters must be left out")
            perms, flips, chars = group_table(group.perms, group.flips, group.characters)
        else:
            perms, flips, chars = group_table(self.perms, self.flips, self.characters)
        keep = np.abs(chars) > 0
        object.__setattr__(self, "perms", tuple(map(tuple, perms[keep].tolist())))
        object.__setattr__(self, "flips", tuple(flips[keep].tolist()))
        object.__setattr__(self, "characters", tuple(chars[keep].tolist()))
        super().__post_init__()

    @classmethod
    def from_symmetry(cls, base: nn.Module, symmetry, **kwargs) -> "Symmetrized":
        """Build from an object with ``perms``, ``flips`` and ``characters`` (a ``Symmetry``)."""
        return cls(base, symmetry, **kwargs)

    @property
    def real_jacobian(self) -> bool:
        """The base's declaration (:mod:`~quantax_lite.models.heads`), kept when every
        character is real (a real combination of real-derivative terms)."""
        return bool(getattr(self.base, "real_jacobian", False)) and not np.any(np.imag(np.asarray(self.characters)))

    @property
    def n_elements(self) -> int:
        return len(self.perms)

    @property
    def n_sites(self) -> int:
        return len(self.perms[0])

    def images(self, s):
        """The symmetry images ``g s`` of every row, ``(batch, G, N)`` (dtype of ``s``)."""
        s = spin_batch(s, self.n_sites)
        perms = np.asarray(self.perms, np.int32)
        flips = jnp.asarray(np.asarray(self.flips, np.int8), s.dtype)
        return s[:, perms] * flips[None, :, None]

    @tuning.at_matmul_precision
    def __call__(self, s):
        images = self.images(s)
        batch, G, N = images.shape
        log_psi0 = self.base(images.reshape(batch * G, N))
        if log_psi0.shape != (batch * G,):
            raise ValueError(f"base: expected log-amplitudes of shape ({batch * G},), got {log_psi0.shape}")
        return weighted_logsumexp(log_psi0.reshape(batch, G), np.asarray(self.characters))


def merge_translation_images(shape, perms, flips=None, characters=None, atol: float = _ZERO_WEIGHT,
                             n_basis: int = 1, translation_factors=None, stride: int = 1):
    """Merge the group elements a translation-covariant base network cannot tell apart.

    ``shape``: the grid of unit cells, ``n_basis`` sites per cell (:func:`translation_perms`).
    If ``psi_0(T_r s) = lambda_r psi_0(s)`` for every translation ``T_r`` by whole cells
    (``translation_factors``: the ``(n_translations,)`` complex ``lambda_r`` in the order of
    :func:`translation_perms`; default all 1, a translation-invariant base such as
    :class:`ConvResNet` with ``readout="sum"``), elements ``g`` and ``T_r g`` give the same
    ``psi_0`` up to ``lambda_r``: the sum ``sum_g chi_g psi_0(g s)`` equals
    ``sum_c w_c psi_0(r_c s)`` over the classes ``c = {T_r g}`` with representative
    ``r_c`` and weight ``w_c = sum_{T_r r_c in c} chi_{T_r r_c} lambda_r``.
    Classes whose weight vanishes (below ``atol`` times the largest ``|chi|``) are dropped.
    ``stride``: only the translations by multiples of ``stride`` cells along every axis
    (a base invariant under those alone, such as a ViT on patches of ``stride`` cells;
    ``translation_factors`` then not allowed).

    Returns ``(perms, flips, weights)`` of the representatives; for the full space group
    of an ``L x L`` lattice (all characters 1) that is ``G / L**2`` elements of weight
    ``L**2`` (of an ``L1 x L2`` grid of cells, ``G / (L1 L2)`` of weight ``L1 L2``). Raises
    ValueError if every weight vanishes (e.g. a nonzero-momentum sector with a
    translation-invariant base).
    """
    shape = lattice_shape(shape, "shape")
    n_basis = positive_int(n_basis, "n_basis")
    perms, flips, characters = group_table(perms, flips, characters, int(np.prod(shape)) * n_basis)
    T = translation_perms(shape, n_basis, stride)
    if stride != 1 and translation_factors is not None:
        raise ValueError("translation_factors: only with stride 1 (translations by whole cells)")
    factors = np.ones(T.shape[0], np.complex128)
    if translation_factors is not None:
        factors = np.asarray(translation_factors, np.complex128)
        if factors.shape != (T.shape[0],) or not np.all(np.isfinite(factors)):
            raise ValueError(f"translation_factors: expected {T.shape[0]} finite numbers, one per translation")
    classes: dict = {}
    order = []
    for g in range(perms.shape[0]):
        translated = perms[g][T]  # the perms of T_r o g for every r: (T_r (g s))[i] = (g s)[T[r, i]]
        key = (int(flips[g]), min(map(tuple, translated.tolist())))
        if key not in classes:  # g represents its class; T_r g is found by its perm
            classes[key] = [g, 0j, {row: r for r, row in enumerate(map(tuple, translated.tolist()))}]
            order.append(key)
        rep = classes[key]
        rep[1] += characters[g] * factors[rep[2][tuple(perms[g].tolist())]]
    scale = np.abs(characters).max()
    reps = [classes[k] for k in order if abs(classes[k][1]) > atol * scale]
    if not reps:
        raise ValueError(
            "characters: the weights of every translation class cancel (a nonzero-momentum "
            "sector); a translation-invariant base network cannot represent it"
        )
    idx = np.array([g for g, _, _ in reps])
    weights = np.array([w for _, w, _ in reps], np.complex128)
    return perms[idx], flips[idx], weights
