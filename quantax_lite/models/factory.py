"""Ready-made neural quantum states for a lattice and a symmetry sector, and parameter counts."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from quantax_lite.utils import tuning
from quantax_lite.utils.validate import finite_number
from quantax_lite.operators.sign_rules import sublattice_phases, translation_phase_factors  # re-exported: the rules' home is sign_rules
from quantax_lite.geometry.symmetry import Symmetry
from .conv import ConvOptions, ConvResNet, conv_network, default_conv_architecture
from .heads import HEAD_KINDS, SINH_OFFSET, Head, Network, PhaseRule, check_offset
from .rbm import RBM
from .registry import network_entry, network_options
from .symmetrize import Symmetrized, group_table, merge_translation_images, translation_perms
from .vit import ViT

__all__ = [
    "count_params",
    "default_conv_architecture",
    "derivative_form",
    "make_conv_nqs",
    "make_network",
    "make_rbm_nqs",
    "conv_param_count",
    "real_part",
    "sublattice_phases",
]


def real_part(log_psi):
    """``(params, s) -> real(log_psi(params, s))``, ``(batch,)`` real: ``log |psi|``."""

    def log_abs_psi(params, s):
        return jnp.real(log_psi(params, s))

    log_abs_psi.__wrapped__ = log_psi  # the complex form, for introspection
    return log_abs_psi


def has_real_log_derivatives(log_psi) -> bool:
    """Whether d log psi / d theta is real for every configuration although log psi is
    complex: what the module of ``log_psi`` (``model.apply``) declares as ``real_jacobian``
    (a signed head, also projected with real characters; :mod:`~quantax_lite.models.heads`)."""
    return bool(getattr(getattr(log_psi, "__self__", None), "real_jacobian", False))


def derivative_form(log_psi):
    """The form of ``log_psi`` whose per-sample Jacobian the SR solve needs.

    For a wavefunction with real log-derivatives (:func:`has_real_log_derivatives`: a
    signed network) that is ``real_part(log_psi)``: the same derivatives, half the
    work, and a real (N x N, not 2N x 2N) MinSR system. Otherwise ``log_psi`` itself.
    """
    return real_part(log_psi) if has_real_log_derivatives(log_psi) else log_psi


def count_params(params) -> int:
    """Total number of scalar parameters in a pytree (complex leaves count once)."""
    return int(sum(np.size(leaf) for leaf in jax.tree_util.tree_leaves(params)))


def conv_param_count(
    ndim: int, channels: int, depth: int, kernel_size: int, complex_output: bool = True, norm: str = "none",
    n_basis: int = 1, readout: str = "sum",
) -> int:
    """Parameter count of :class:`ConvResNet`: ``K*B*C + C + depth*(2*K*C**2 + 2*C) + R*C``
    with ``K = kernel_size**ndim``, ``C = channels``, ``B = n_basis`` input channels (sites
    per unit cell) and ``R = 2`` readout outputs (1 for a real network, 4 with
    ``readout="plane_wave"``); ``norm="layer"`` adds ``2*C`` for each of the ``2*depth + 1``
    LayerNorms."""
    K, C, B = kernel_size**ndim, channels, n_basis
    n_norms = 2 * depth + 1 if norm == "layer" else 0
    R = 4 if readout == "plane_wave" else 2 if complex_output else 1
    return K * B * C + C + depth * (2 * K * C * C + 2 * C) + 2 * C * n_norms + R * C


def plane_wave_phases(lattice, symmetry_table):
    """The cell phases and translation factors of the ``"plane_wave"`` readout in the
    momentum sector of ``symmetry_table`` (``(perms, flips, characters)``), or None.

    Returns ``(phi, lam)``: ``phi`` ``(n_cells,)`` angles with ``exp(i phi_{cell(T_r 0)})``
    the character ``chi_r`` of the translation ``T_r`` (``translation_perms`` order), so
    that the readout's ``psi_0`` obeys ``psi_0(T_r s) = lam_r psi_0(s)`` with
    ``lam_r = conj(chi_r)`` and every coset of the translations adds up in the projection.
    None when the table lacks a translation (without spin flip) or its characters are
    not those of a momentum (modulus 1, ``chi_{r + r'} = chi_r chi_{r'}``).
    """
    perms, flips, chars = symmetry_table
    n_basis = int(getattr(lattice, "n_basis", 1))
    T = translation_perms(lattice.shape, n_basis)
    found = {(tuple(p), int(f)): complex(c) for p, f, c in zip(np.asarray(perms).tolist(), np.asarray(flips).tolist(),
                                                                 np.asarray(chars))}
    chi = np.array([found.get((tuple(t), 1), 0j) for t in T.tolist()])
    if not np.allclose(np.abs(chi), 1.0, rtol=0.0, atol=1e-9):
        return None
    w = np.zeros(T.shape[1] // n_basis, np.complex128)
    w[T[:, 0] // n_basis] = chi  # the cell that T_r brings to the origin
    moved = T[:, ::n_basis] // n_basis  # moved[r, u]: the cell whose features T_r brings to cell u
    if not np.allclose(w[moved], chi[:, None] * w[None, :], rtol=0.0, atol=1e-9):
        return None
    return np.angle(w), np.conj(chi)


def _check_phases_covariant(lattice, site_phases) -> None:
    """A translation-invariant (``readout="sum"``) network with ``site_phases`` stays
    translation-covariant only when every translation shifts the phase rule by a constant
    (a factor ``exp(i c n_down)``); ValueError naming ``site_phases`` otherwise."""
    if translation_phase_factors(lattice, site_phases) is None:
        raise ValueError("site_phases: a translation changes the phase rule by more than a constant, so "
                         "the translation-invariant network would not be; give phases that every "
                         "translation shifts by one angle (e.g. sublattice_phases)")


def _lattice_name(lattice) -> str:
    return getattr(lattice, "name", None) or repr(lattice)


def _symmetry_table(lattice, symmetry):
    """The checked group table of ``symmetry`` for ``lattice``.

    A group that remembers the lattice it was built for (``symmetry.lattice``, set by the
    builders of :mod:`quantax_lite.geometry.symmetry`) must have been built for this lattice:
    another lattice with the same number of sites (e.g. a 2x8 or a chain of 16 sites for
    4x4) raises ValueError. A hand-made table (no lattice) is checked by size only.
    """
    if isinstance(symmetry, Symmetry):  # checked when it was built: only its size and lattice here
        if symmetry.n_sites != lattice.n_sites:
            raise ValueError(f"perms: expected {lattice.n_sites} sites per row (the lattice's), got {symmetry.n_sites}")
        table = (np.asarray(symmetry.perms), np.asarray(symmetry.flips), np.asarray(symmetry.characters))
    else:
        for attr in ("perms", "flips", "characters"):
            if not hasattr(symmetry, attr):
                raise TypeError(f"symmetry: expected a Symmetry (with perms, flips, characters) or None, got {symmetry!r}")
        table = group_table(symmetry.perms, symmetry.flips, symmetry.characters, lattice.n_sites)
    built_for = getattr(symmetry, "lattice", None)
    if built_for is not None and built_for != lattice:
        raise ValueError(
            f"symmetry: built for the lattice {_lattice_name(built_for)}, not for the model's "
            f"lattice {_lattice_name(lattice)}; build the group from the same lattice"
        )
    return table


def _lattice_table(lattice, symmetry):
    if not getattr(lattice, "pbc", True):
        raise ValueError("lattice: periodic convolutions need periodic boundaries (pbc=True)")
    if symmetry is None:
        return None
    return _symmetry_table(lattice, symmetry)


def make_conv_nqs(lattice, symmetry=None, options=None, *, amplitude: str = "complex", readout: str | None = None,
                  site_phases=None, final_scale: float | None = None, sinh_offset: float | None = None,
                  dtype=jnp.float64, **keywords):
    """The symmetrized convolutional network for ``lattice`` in the sector of ``symmetry``
    (the registry's ``"conv"`` network, :func:`make_network`, returned as the bare
    :class:`ConvResNet` when ``symmetry`` is None).

    Args:
      lattice: a periodic ``Lattice`` (``shape`` in cells, ``n_basis`` sites per cell,
        ``n_sites``): the convolutions run on the grid of cells, the sites of a cell are
        the input channels.
      symmetry: a ``Symmetry`` (``perms``, ``flips``, ``characters``) or None (no projection:
        the bare :class:`ConvResNet` is returned); one built for another lattice (its
        ``lattice`` attribute) raises ValueError.
      options: :class:`ConvOptions` or a mapping of its fields (``channels``, ``depth``,
        ``kernel_size``, ``norm``; None: :func:`default_conv_architecture`). The fields may
        also be given as keywords (``make_conv_nqs(lattice, g, channels=8, depth=2)``).
      amplitude: the head, ``"complex"`` (default: complex log-amplitudes), ``"positive"``
        (a positive wavefunction, real log psi, for sign-free ground states, only in a
        sector whose characters are all 1), ``"signed"`` (a real wavefunction with a
        learned sign, see :class:`ConvResNet`; its derivatives are those of
        ``real(log psi)``, :func:`derivative_form`) or ``"sinh"`` (a real wavefunction
        ``psi_0 = sum_r sum_k (sinh(y_rk) + c)``, :class:`~quantax_lite.models.heads.Head`;
        real derivatives as ``"signed"``). The keywords ``complex_output`` and
        ``signed`` of earlier versions still choose it.
      readout: ``"sum"`` (translation-invariant ``psi_0``), ``"plane_wave"`` (``psi_0`` a
        momentum eigenstate, with the momentum of the translations in ``symmetry``),
        ``"origin"``, or None: ``"sum"`` unless the characters cancel on every class of
        translated elements (a nonzero-momentum sector), then ``"plane_wave"`` for a
        complex network whose ``symmetry`` holds every translation with characters of
        modulus 1 (a momentum), else ``"origin"``. With ``"sum"`` and ``"plane_wave"``,
        group elements that differ by a translation by whole cells give the same image up
        to a known factor, and the network is evaluated on one image per coset
        (:func:`merge_translation_images`; same log psi up to rounding).
      final_scale: scale of the readout initialization (None: :class:`ConvResNet`'s
        1e-2, a nearly uniform initial state). A frustrated Heisenberg model without a
        sign rule needs an order-one value: there the uniform state of the Sz = 0 sector
        is a member of the ferromagnetic multiplet, the highest eigenstate, where the
        energy gradient vanishes.
      sinh_offset: the sinh head's ``c >= 0`` (None: :data:`~quantax_lite.models.heads.SINH_OFFSET`);
        any other amplitude has none (ValueError naming ``sinh_offset`` unless None).
      site_phases: None or a phase rule, one angle per site (see :class:`ConvResNet`; e.g.
        :func:`sublattice_phases`), applied to ``psi_0`` inside the projection, so the
        result is in the sector of ``symmetry`` whatever the rule. With a
        translation-invariant ``psi_0`` every translation must shift the rule by one
        angle ``c`` (ValueError naming ``site_phases`` otherwise); the images it merges
        are then equal in the magnetization sectors where ``c * n_down`` is a multiple
        of ``2 pi`` (for the 120-degree rule: ``n_down`` divisible by 3), which the
        caller chooses (:class:`~quantax_lite.recipes.Recipe` checks it).
      dtype: ``jnp.float64`` (default) or ``jnp.float32``: parameters and compute.

    Returns a flax module: ``params = model.init(key, s)``, ``model.apply(params, s) -> (batch,)``
    complex128 (float64) or complex64 (float32).
    """
    options, amplitude, named = _conv_options(options, amplitude, keywords)
    offset = _sinh_offset_of(amplitude, sinh_offset)
    complex_output, signed = amplitude != "positive", amplitude == "signed"
    table = _lattice_table(lattice, symmetry)
    arch = options.architecture(lattice)
    if final_scale is not None:
        arch["final_scale"] = finite_number(final_scale, "final_scale", above=0)

    def base(readout, cell_phases):
        if amplitude == "sinh":  # the same trunk and readout parameters, path for path
            head = Head(amplitude, readout, arch.get("final_scale", Head.final_scale), dtype=dtype, offset=offset)
            net = Network(conv_network(lattice, options, dtype), head)
            return net if site_phases is None else PhaseRule(net, site_phases)
        return ConvResNet(tuple(lattice.shape), dtype=dtype, readout=readout, complex_output=complex_output,
                          signed=signed, norm=options.norm, n_basis=int(getattr(lattice, "n_basis", 1)),
                          site_phases=site_phases, cell_phases=cell_phases, **arch)

    return project(lattice, table, base, readout, amplitude, site_phases, amplitude_name=named)


def _conv_options(options, amplitude, keywords) -> tuple[ConvOptions, str, str]:
    """``(ConvOptions, amplitude, the argument that named it)`` from :func:`make_conv_nqs`'s
    arguments: ``options`` with the fields given as keywords, and the amplitude (or the
    older ``complex_output`` / ``signed`` keywords)."""
    keywords = dict(keywords)
    legacy = {k: keywords.pop(k) for k in ("complex_output", "signed") if k in keywords}
    fields = {f.name for f in dataclasses.fields(ConvOptions)}
    unknown = sorted(set(keywords) - fields)
    if unknown:
        raise TypeError(f"make_conv_nqs: unexpected keyword {unknown[0]!r} (the options are "
                        f"{', '.join(sorted(fields))}; amplitude, readout, site_phases, final_scale, dtype)")
    options = network_options("conv", options)
    if keywords:
        options = dataclasses.replace(options, **keywords)
    if amplitude not in HEAD_KINDS:
        raise ValueError(f"amplitude: expected one of {', '.join(HEAD_KINDS)}, got {amplitude!r}")
    if legacy:
        if amplitude != "complex":
            raise ValueError("amplitude: give the amplitude or complex_output / signed, not both")
        complex_output, signed = bool(legacy.get("complex_output", True)), bool(legacy.get("signed", False))
        if signed and not complex_output:
            raise ValueError("signed: needs complex_output=True (log psi of a negative psi is complex)")
        amplitude = "signed" if signed else "complex" if complex_output else "positive"
        return options, amplitude, "complex_output"
    return options, amplitude, "amplitude"


def make_network(lattice, symmetry=None, network: str = "conv", options=None, *, amplitude: str = "complex",
                 readout: str | None = None, site_phases=None, final_scale: float | None = None,
                 sinh_offset: float | None = None, dtype=jnp.float32):
    """The registered network ``network`` (:func:`~quantax_lite.models.register_network`)
    on ``lattice`` with a head, a phase rule and the projection on ``symmetry``.

    Args:
      lattice: a ``Lattice``; symmetry: a ``Symmetry`` of it, or None (no projection).
      network, options: the registered name and its options (a mapping or the options
        dataclass; :func:`~quantax_lite.models.network_options` checks them).
      amplitude: the head, ``"positive"``, ``"signed"``, ``"sinh"`` or ``"complex"``.
      readout: ``"sum"``, ``"origin"``, ``"plane_wave"`` or None (chosen as in
        :func:`make_conv_nqs`: ``"sum"``, or in a nonzero-momentum sector ``"plane_wave"``
        for a complex head, else ``"origin"``). A backbone that declares
        ``equivariance = "none"`` is projected over every group element (``"sum"``), or,
        where it declares ``translation_stride`` and no phase rule is given, over one per
        class of elements related by those translations (``"origin"`` in a sector whose
        characters cancel on them); one that declares ``"projects"`` gets no projection
        from here.
      site_phases: a phase rule, one angle per site (complex heads), or None.
      final_scale: the head's initialization scale (None: 1e-2, nearly uniform).
      sinh_offset: the sinh head's ``c`` (as in :func:`make_conv_nqs`).
      dtype: ``jnp.float32`` (default) or ``jnp.float64``.

    Returns a flax module, ``model.apply(params, s) -> (batch,)`` log psi; parameters are
    the backbone's and the head's ``readout_dense`` at one level (wrappers add none).
    """
    entry = network_entry(network)
    options = network_options(network, options)
    table = None if symmetry is None else _symmetry_table(lattice, symmetry)
    backbone = entry.build(lattice, options, dtype, symmetry)
    equivariance = getattr(backbone, "equivariance", "cells")
    if equivariance == "projects":
        table = None
    scale = 1e-2 if final_scale is None else finite_number(final_scale, "final_scale", above=0)
    offset = _sinh_offset_of(amplitude, sinh_offset)

    def base(readout, cell_phases):
        net = Network(backbone, Head(amplitude, readout, scale, cell_phases, dtype, offset))
        return net if site_phases is None else PhaseRule(net, site_phases)

    return project(lattice, table, base, readout, amplitude, site_phases, cells_equivariant=equivariance == "cells",
                   stride=getattr(backbone, "translation_stride", None))


def _sinh_offset_of(amplitude: str, sinh_offset) -> float:
    """The head's offset: ``sinh_offset`` checked (:func:`~quantax_lite.models.heads.check_offset`),
    or for None :data:`~quantax_lite.models.heads.SINH_OFFSET` (sinh) and 1 (the other heads)."""
    if sinh_offset is None:
        return SINH_OFFSET if amplitude == "sinh" else 1.0
    if amplitude != "sinh":
        raise ValueError(f"sinh_offset: only the 'sinh' amplitude has an offset, not {amplitude!r}")
    return check_offset(sinh_offset, amplitude)


def _merge_by_stride(lattice, table, stride: int, n_basis: int):
    """:func:`merge_translation_images` by multiples of ``stride`` cells, or None where the
    sector's characters cancel on every class (the other refusals are raised)."""
    try:
        return merge_translation_images(lattice.shape, *table, n_basis=n_basis, stride=stride)
    except ValueError as err:
        if str(err).startswith("characters:"):
            return None
        raise


def project(lattice, table, make_base, readout, kind: str, site_phases=None, *, cells_equivariant: bool = True,
            amplitude_name: str = "amplitude", stride: int | None = None):
    """``make_base(readout, cell_phases)`` projected on the group ``table`` (``(perms, flips,
    characters)`` or None): the readout chosen for the sector, group elements that differ by
    a translation merged where the base is translation-covariant (:func:`merge_translation_images`);
    for a base that is not, but whose ``"sum"`` readout is invariant under translations by
    multiples of ``stride`` cells (a ViT's patches), the elements that differ by those.
    ``kind``: the head (``"positive"`` needs a sector with all characters 1; ValueError
    naming ``amplitude_name`` otherwise)."""
    n_basis = int(getattr(lattice, "n_basis", 1))
    merged, cell_phases = None, None
    if not cells_equivariant:
        if readout == "plane_wave":
            raise ValueError("readout: 'plane_wave' needs a network equivariant under translations by whole cells")
        # a phase rule is not invariant under those translations: every element then
        if stride is not None and site_phases is None and table is not None and readout in (None, "sum"):
            merged = _merge_by_stride(lattice, table, stride, n_basis)
            if merged is None:
                if readout == "sum":
                    raise ValueError(
                        f"readout: 'sum' of this network is invariant under translations by {stride} cells, "
                        "which this sector's characters cancel; use readout='origin'")
                readout = "origin"  # one token, projected over every element
    elif table is not None and readout in (None, "sum"):
        try:
            merged = merge_translation_images(lattice.shape, *table, n_basis=n_basis)
        except ValueError:
            if readout == "sum":
                raise ValueError(
                    "readout: 'sum' gives a translation-invariant psi_0, which vanishes in this "
                    "nonzero-momentum sector; use readout='plane_wave' or 'origin'"
                ) from None
            plane = plane_wave_phases(lattice, table) if kind == "complex" else None
            readout = "origin" if plane is None else "plane_wave"
    elif table is not None and readout == "plane_wave":
        plane = plane_wave_phases(lattice, table)
        if plane is None:
            raise ValueError("readout: 'plane_wave' needs a symmetry that holds every translation by whole cells, "
                             "with characters of modulus 1 (a momentum sector)")
    if table is not None and readout == "plane_wave":
        cell_phases, factors = plane
        merged = merge_translation_images(lattice.shape, *table, n_basis=n_basis, translation_factors=factors)
    readout = readout or "sum"
    if kind == "positive" and table is not None and not np.all(np.asarray(table[2]) == 1):
        raise ValueError(
            f"{amplitude_name}: a real (positive) network needs a sector with all characters 1; "
            f"use {'complex_output=True' if amplitude_name == 'complex_output' else 'a complex amplitude'} "
            "for this symmetry sector"
        )
    base = make_base(readout, cell_phases)
    if site_phases is not None and cells_equivariant and readout in ("sum", "plane_wave"):
        _check_phases_covariant(lattice, site_phases)
    if table is None:
        return base
    if merged is not None and tuning.current().merge_translations:
        return Symmetrized(base, *merged)
    return Symmetrized(base, *table)


def make_vit_nqs(lattice, symmetry=None, *, patch: int = 2, dim: int = 32, depth: int = 2, heads: int = 4,
                 dtype=jnp.float32, complex_output: bool = True):
    """A :class:`~quantax_lite.models.vit.ViT` on ``lattice``'s grid of unit cells (patches
    of ``patch`` cells along every axis), projected on the sector of ``symmetry`` when given."""
    base = ViT(tuple(lattice.shape), n_basis=lattice.n_basis, patch=patch, dim=dim, depth=depth, heads=heads,
               dtype=dtype, complex_output=complex_output)
    if symmetry is None:
        return base
    table = _symmetry_table(lattice, symmetry)
    if patch > 1:  # its sum over tokens is invariant under shifts by whole patches
        merged = _merge_by_stride(lattice, table, patch, lattice.n_basis)
        if merged is None:
            raise ValueError(f"symmetry: a ViT on patches of {patch} cells is invariant under translations by "
                             f"{patch} cells, which this sector's characters cancel (its projection vanishes)")
        if tuning.current().merge_translations:
            return Symmetrized(base, *merged)
    return Symmetrized(base, *table)


def make_rbm_nqs(lattice, symmetry=None, alpha: float = 1, dtype=jnp.float64, complex_output: bool = True):
    """An :class:`RBM`, projected on the sector of ``symmetry`` when given (lattice may be open)."""
    base = RBM(alpha=alpha, dtype=dtype, complex_output=complex_output)
    if symmetry is None:
        return base
    perms, flips, chars = _symmetry_table(lattice, symmetry)
    return Symmetrized(base, perms, flips, chars)
