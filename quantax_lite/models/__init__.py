"""Neural quantum states (flax linen modules).

The rest of quantax_lite sees a model only as ``log_psi = model.apply`` with
``params = model.init(key, s)``: ``log_psi(params, s)`` maps ``(batch, n_sites)`` spins
(+1/-1) to ``(batch,)`` log-amplitudes.

Networks are registered backbones (:mod:`.registry`: ``"conv"``, ``"rbm"``, ``"vit"``);
:func:`make_network` adds a head, a phase rule and the projection (:mod:`.heads`).
"""
from .conv import (
    ConvOptions,
    ConvResNet,
    ConvTrunk,
    PeriodicConv,
    ResidualBlock,
    kernel_reach,
    periodic_conv_matrix,
    periodic_neighbour_table,
)
from .factory import (
    conv_param_count, count_params, default_conv_architecture, derivative_form, make_conv_nqs, make_rbm_nqs, real_part,
    make_network, make_vit_nqs, sublattice_phases,
)
from .contract import check_network
from .heads import Head, Network, PhaseRule
from .rbm import RBM, RBMFeatures, RBMOptions, log_cosh
from .registry import network_entry, network_names, network_options, options_config, register_network
from .vit import ViT, ViTOptions, ViTTrunk, vit_param_count
from .symmetrize import (
    Symmetrized,
    group_table,
    merge_translation_images,
    translation_perms,
    weighted_logsumexp,
)

__all__ = [
    "ConvOptions",
    "ConvResNet",
    "ConvTrunk",
    "Head",
    "Network",
    "PhaseRule",
    "RBMFeatures",
    "RBMOptions",
    "ViTOptions",
    "ViTTrunk",
    "check_network",
    "make_network",
    "network_entry",
    "network_names",
    "network_options",
    "options_config",
    "register_network",
    "PeriodicConv",
    "RBM",
    "ResidualBlock",
    "Symmetrized",
    "conv_param_count",
    "count_params",
    "default_conv_architecture",
    "derivative_form",
    "group_table",
    "kernel_reach",
    "log_cosh",
    "make_conv_nqs",
    "make_rbm_nqs",
    "make_vit_nqs",
    "merge_translation_images",
    "periodic_conv_matrix",
    "periodic_neighbour_table",
    "real_part",
    "sublattice_phases",
    "translation_perms",
    "ViT",
    "vit_param_count",
    "weighted_logsumexp",
]
