"""The checks every observable shares: samples, chains, exact weights, the lattice, and
per-sample arrays brought to this process."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from quantax_lite.utils.validate import positive_int
from quantax_lite.geometry.lattice import Lattice
from quantax_lite.operators.hamiltonian import check_samples


def int8_samples(samples, n_sites: int):
    """``samples`` ``(n_samples, n_sites)`` checked, as an int8 jax array (ValueError naming ``samples``)."""
    samples = check_samples(samples, n_sites)
    if samples.shape[0] < 1:
        raise ValueError(f"samples: expected at least one sample, got shape {tuple(samples.shape)}")
    if isinstance(samples, jax.Array):
        return samples if samples.dtype == jnp.int8 else samples.astype(jnp.int8)
    return jnp.asarray(np.asarray(samples, np.int8))


def two_dimensional(samples):
    """``samples`` with a shape, checked to be ``(n_samples, n_sites)``."""
    if not hasattr(samples, "shape"):
        samples = np.asarray(samples)
    if samples.ndim != 2:
        raise ValueError(f"samples: expected shape (n_samples, n_sites), got {tuple(samples.shape)}")
    return samples


def host(x) -> np.ndarray:
    """A (small) per-sample array as numpy on this process (gathered in a multi-process run)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def samples_host(samples) -> np.ndarray:
    """The samples as float64 numpy (the spins ``s_i = +-1``)."""
    return host(samples).astype(np.float64)


def chains(n_chains, n_samples: int) -> int:
    """The number of chains (None: 1); ValueError naming ``n_chains`` unless it divides the samples."""
    if n_chains is None:
        return 1
    n_chains = positive_int(n_chains, "n_chains")
    if n_samples % n_chains:
        raise ValueError(f"n_chains: {n_samples} samples are not a multiple of n_chains={n_chains}")
    return n_chains


def weights(weights, n_samples: int):
    """Normalized exact weights ``(n_samples,)`` as float64, or None (Monte Carlo)."""
    if weights is None:
        return None
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n_samples,):
        raise ValueError(f"weights: expected shape ({n_samples},), got {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError("weights: expected finite, nonnegative weights with a positive sum")
    return w / w.sum()


def lattice_of(lattice, n_sites: int | None = None) -> Lattice:
    """``lattice`` checked to be a :class:`Lattice` (of ``n_sites`` sites when given)."""
    if not isinstance(lattice, Lattice):
        raise TypeError(f"lattice: expected a quantax_lite.geometry.lattice.Lattice, got {type(lattice).__name__}")
    if n_sites is not None and lattice.n_sites != n_sites:
        raise ValueError(f"lattice: has {lattice.n_sites} sites, the correlations {n_sites}")
    return lattice


def shown(x) -> str:
    """``x`` in an error message: its repr, cut short."""
    text = repr(x)
    return text if len(text) <= 80 else text[:77] + "..."
