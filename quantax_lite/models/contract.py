"""A check of the network contract, for whoever registers a network."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from quantax_lite.geometry.lattice import translation_perms
from .registry import network_entry, network_options

__all__ = ["check_network"]


def check_network(network: str, lattice, options=None, *, dtype=jnp.float64, batch: int = 4, seed: int = 0,
                  atol: float = 1e-10) -> tuple[int, ...]:
    """Build the registered ``network`` on ``lattice`` and check its contract on random
    configurations: features ``(batch, n_positions, F)`` of a real dtype (``n_positions =
    n_cells`` unless it declares ``equivariance = "none"``), and, where it declares
    ``"cells"``, ``features(T_r s)[:, 0] == features(s)[:, r]`` for every translation
    ``T_r`` by whole cells (within ``atol``); where it declares ``translation_stride``, its
    features summed over positions unchanged by translations by whole strides. Returns the features' shape; ``ValueError``
    naming ``network`` on a breach."""
    entry = network_entry(network)
    module = entry.build(lattice, network_options(network, options), dtype)
    equivariance = getattr(module, "equivariance", "cells")
    rng = np.random.default_rng(seed)
    s = jnp.asarray(rng.choice(np.array([-1, 1], np.int8), size=(batch, lattice.n_sites)))
    params = module.init(jax.random.PRNGKey(seed), s)
    features = np.asarray(module.apply(params, s))
    if features.ndim != 3 or features.shape[0] != batch or not np.issubdtype(features.dtype, np.floating):
        raise ValueError(f"network: {network!r} must give real features (batch, n_cells, features), got "
                         f"{features.dtype} {features.shape}")
    stride = getattr(module, "translation_stride", None) if equivariance == "none" else None
    if stride is not None:  # the features summed over positions, under translations by whole strides
        perms = translation_perms(lattice.shape, lattice.n_basis, stride)
        moved = np.asarray(module.apply(params, s[:, perms].reshape(-1, lattice.n_sites)))
        moved = moved.reshape(batch, len(perms), *features.shape[1:]).sum(axis=2)
        error = float(np.max(np.abs(moved - features.sum(axis=1)[:, None])))
        if not error <= atol * max(1.0, features.shape[1]):
            raise ValueError(f"network: {network!r} declares translation_stride {stride}, but its features summed "
                             f"over positions change by up to {error:.2e} under those translations")
    if equivariance == "none" or equivariance == "projects":
        return features.shape
    if features.shape[1] != lattice.n_cells:
        raise ValueError(f"network: {network!r} declares equivariance 'cells' but gives {features.shape[1]} "
                         f"positions for {lattice.n_cells} cells")
    perms = translation_perms(lattice.shape, lattice.n_basis)
    moved = np.asarray(module.apply(params, s[:, perms].reshape(-1, lattice.n_sites)))
    moved = moved.reshape(batch, len(perms), *features.shape[1:])[:, :, 0]  # cell 0 of every T_r s
    error = float(np.max(np.abs(moved - features)))
    if not error <= atol:
        raise ValueError(f"network: {network!r} declares equivariance 'cells', but features(T_r s) at cell 0 "
                         f"differ from features(s) at cell r by up to {error:.2e}")
    return features.shape
