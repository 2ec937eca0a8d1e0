"""Argument checks shared by the models: parameter dtypes, spin-configuration batches, lattice
shapes; ``positive_int`` is the package-wide one of :mod:`quantax_lite.utils.validate`."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from quantax_lite.utils.validate import positive_int
from quantax_lite.hilbert.configurations import check_spin_dtype, check_spin_values

_REAL_DTYPES = {np.dtype(np.float32): np.dtype(np.complex64), np.dtype(np.float64): np.dtype(np.complex128)}


def real_dtype(dtype, name: str = "dtype") -> np.dtype:
    """``dtype`` as a numpy dtype, which must be float32 or float64.

    float64 needs ``jax_enable_x64``; without it jax would silently compute in float32,
    so that case raises instead.
    """
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{name}: expected jnp.float32 or jnp.float64, got {dtype!r}") from None
    if dt not in _REAL_DTYPES:
        raise ValueError(f"{name}: expected jnp.float32 or jnp.float64, got {dt}")
    if dt == np.float64 and not jax.config.jax_enable_x64:
        raise ValueError(
            f"{name}: float64 was requested but jax_enable_x64 is off, so jax would compute in "
            "float32; enable it (jax.config.update('jax_enable_x64', True)) or pass jnp.float32"
        )
    return dt


def complex_dtype(dtype) -> np.dtype:
    """complex64 for float32, complex128 for float64."""
    return _REAL_DTYPES[np.dtype(dtype)]


def spin_batch(s, n_sites: int | None, name: str = "s") -> jax.Array:
    """Check that ``s`` is a ``(batch, n_sites)`` array of spins and return it as a jax array.

    ``n_sites=None``: any number of sites. Shape and dtype (integer or real, not bool or
    complex) are checked always, also inside ``jax.jit``; the values (+1 or -1) only for
    concrete arrays (a traced batch, e.g. in the compiled sampler or VMC step, is not
    inspected, so compiled code is unchanged).
    """
    shape = getattr(s, "shape", None)
    if shape is None or not hasattr(s, "dtype"):
        s = np.asarray(s)
        shape = s.shape
    if len(shape) != 2 or (n_sites is not None and shape[1] != n_sites):
        expected = "n_sites" if n_sites is None else n_sites
        raise ValueError(f"{name}: expected spin configurations of shape (batch, {expected}), got {tuple(shape)}")
    check_spin_dtype(s, name)
    check_spin_values(s, name)
    return jnp.asarray(s)


def lattice_shape(shape, name: str = "lattice_shape") -> tuple[int, ...]:
    """A tuple of positive ints (the extent of every lattice axis)."""
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(f"{name}: expected a tuple of positive ints, got {shape!r}") from None
    if len(shape) == 0:
        raise ValueError(f"{name}: expected at least one axis, got ()")
    return tuple(positive_int(L, f"{name}[{d}]") for d, L in enumerate(shape))
