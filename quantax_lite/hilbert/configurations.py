"""Spin-1/2 configurations: int8 arrays of +1 (up) / -1 (down), shape ``(batch, n_sites)``.

Magnetization sectors are labelled by ``total_sz = sum(s) / 2`` (spin-1/2 units: each
spin carries Sz = +-1/2), so the sector has ``n_up = n_sites / 2 + total_sz`` up spins;
``total_sz=None`` means the unconstrained space of all ``2**n_sites`` configurations.

One default for every function that picks a sector for some dynamics (samplers, exact
diagonalization): ``total_sz="auto"``, resolved by :func:`resolve_total_sz` from the
number of sites and whether the dynamics conserve Sz. The functions of this module know
no dynamics and give ``"auto"`` no meaning: :func:`all_states` and :func:`sector_size`
default to ``None`` (the whole space), :func:`random_states` has no default (its sector
must be named).

Integer codes (used to index basis states for exact diagonalization): bit ``i`` of the
code is set when site ``i`` is up. :func:`all_states` lists states by increasing code.
"""
from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from quantax_lite.utils.validate import finite_number, positive_int

__all__ = [
    "resolve_total_sz",
    "n_up",
    "sector_size",
    "random_states",
    "all_states",
    "states_to_codes",
    "codes_to_states",
    "state_index",
    "validate_states",
    "check_spin_dtype",
    "check_spin_values",
    "total_sz_of",
]

_MAX_ENUMERATE = 2**27  # states; ~ a few GiB at 24+ sites, beyond any test


def resolve_total_sz(total_sz, n_sites: int, conserves_sz: bool):
    """The sector a sampler or a solver works in: ``total_sz`` with ``"auto"`` resolved.

    ``"auto"``: for dynamics that conserve Sz, the sector nearest zero magnetization,
    0 on an even number of sites and 1/2 on an odd one (Sz = 0 does not exist there;
    the ground state of an antiferromagnet lies in the smallest |Sz|, and spin inversion
    makes +1/2 and -1/2 equivalent); ``None`` (the whole space) for dynamics that change
    Sz. A number or ``None`` is returned as given (a number as an int or a half-integer
    float), after checking that the sector exists on ``n_sites`` sites (ValueError
    naming ``total_sz``). Whether a given sector suits non-conserving dynamics is the
    caller's decision.
    """
    n_sites = positive_int(n_sites, "n_sites")
    if not isinstance(conserves_sz, (bool, np.bool_)):
        raise TypeError(f"conserves_sz: expected a bool, got {conserves_sz!r}")
    if isinstance(total_sz, str):
        if total_sz != "auto":
            raise ValueError(f"total_sz: expected a number, None or 'auto', got {total_sz!r}")
        if not conserves_sz:
            return None
        return 0 if n_sites % 2 == 0 else 0.5
    if total_sz is None:
        return None
    twice = 2 * n_up(n_sites, total_sz) - n_sites
    return twice // 2 if twice % 2 == 0 else twice / 2


def n_up(n_sites: int, total_sz) -> int | None:
    """Number of up spins in the sector ``total_sz`` (``None`` for the unconstrained space).

    Raises ValueError when the sector does not exist, e.g. ``total_sz=0`` on an odd
    number of sites or ``|total_sz| > n_sites / 2``; TypeError for a non-number.
    """
    n_sites = positive_int(n_sites, "n_sites")
    if total_sz is None:
        return None
    twice = 2 * finite_number(total_sz, "total_sz")
    if abs(twice - round(twice)) > 1e-12:
        raise ValueError(f"total_sz: expected a multiple of 1/2, got {total_sz!r}")
    twice = int(round(twice))
    if (n_sites + twice) % 2:
        parity = "an even" if twice % 2 == 0 else "an odd"
        raise ValueError(
            f"total_sz: the sector total_sz={total_sz} needs {parity} number of sites, "
            f"got n_sites={n_sites}"
        )
    up = (n_sites + twice) // 2
    if not 0 <= up <= n_sites:
        raise ValueError(f"total_sz: |total_sz| must be <= n_sites/2 = {n_sites / 2}, got {total_sz}")
    return up


def sector_size(n_sites: int, total_sz=None) -> int:
    """Number of configurations in the sector."""
    up = n_up(n_sites, total_sz)
    return 2**n_sites if up is None else math.comb(n_sites, up)


def random_states(key, n_sites: int, n_states: int, total_sz) -> jax.Array:
    """Uniformly random configurations of the sector, ``(n_states, n_sites)`` int8 (jax array).

    ``total_sz``: the sector (no default: name it, e.g. ``0``); ``None``: independent fair
    coins on every site. Jittable with static sizes.
    """
    n_sites = positive_int(n_sites, "n_sites")
    n_states = positive_int(n_states, "n_states", minimum=0)
    return _random_states(key, n_sites, n_states, n_up(n_sites, total_sz))


@partial(jax.jit, static_argnums=(1, 2, 3))
def _random_states(key, n_sites: int, n_states: int, up: int | None):
    if up is None:
        bits = jax.random.bernoulli(key, 0.5, (n_states, n_sites))
        return jnp.where(bits, 1, -1).astype(jnp.int8)
    base = jnp.where(jnp.arange(n_sites) < up, 1, -1).astype(jnp.int8)
    order = jnp.argsort(jax.random.uniform(key, (n_states, n_sites)), axis=1)
    return base[order]


def _sector_codes(n_sites: int, up: int) -> np.ndarray:
    """Sorted codes with exactly ``up`` set bits among ``n_sites`` (int64), built bit by bit."""
    # table[k]: sorted codes over the first m bits with k ones; only k that can still reach `up`
    table = {0: np.zeros(1, dtype=np.int64)}
    for m in range(n_sites):
        remaining = n_sites - m - 1
        new = {}
        for k in range(max(0, up - remaining), min(up, m + 1) + 1):
            parts = []
            if k in table:
                parts.append(table[k])  # bit m unset: codes < 2**m, listed first
            if k - 1 in table:
                parts.append(table[k - 1] | np.int64(1 << m))
            if parts:
                new[k] = np.concatenate(parts)
        table = new
    return table.get(up, np.zeros(0, dtype=np.int64))


def codes_to_states(codes, n_sites: int) -> np.ndarray:
    """Integer codes ``(...,)`` -> configurations ``(..., n_sites)`` int8 (bit i set = site i up)."""
    codes = np.asarray(codes, dtype=np.int64)
    bits = (codes[..., None] >> np.arange(n_sites, dtype=np.int64)) & 1
    return (2 * bits - 1).astype(np.int8)


def states_to_codes(states) -> np.ndarray:
    """Configurations ``(..., n_sites)`` (+-1) -> integer codes ``(...,)`` int64."""
    states = np.asarray(states)
    n = states.shape[-1]
    if n > 62:
        raise ValueError(f"states: integer codes hold at most 62 sites, got {n}")
    weights = np.int64(1) << np.arange(n, dtype=np.int64)
    return ((states > 0).astype(np.int64) * weights).sum(axis=-1)


def all_states(n_sites: int, total_sz=None) -> np.ndarray:
    """Every configuration of the sector, ``(n, n_sites)`` int8 numpy, ordered by code.

    ``n = 2**n_sites`` for ``total_sz=None``, ``binom(n_sites, n_up)`` otherwise.
    Raises ValueError above 2**27 states.
    """
    n_sites = positive_int(n_sites, "n_sites")
    size = sector_size(n_sites, total_sz)
    if size > _MAX_ENUMERATE:
        raise ValueError(
            f"n_sites: the sector has {size} states, more than the enumeration limit {_MAX_ENUMERATE}"
        )
    up = n_up(n_sites, total_sz)
    codes = np.arange(2**n_sites, dtype=np.int64) if up is None else _sector_codes(n_sites, up)
    return codes_to_states(codes, n_sites)


def state_index(states, basis_codes: np.ndarray) -> np.ndarray:
    """Row index of every configuration in a basis given by its sorted codes; -1 where absent."""
    codes = states_to_codes(states)
    basis_codes = np.asarray(basis_codes)
    pos = np.searchsorted(basis_codes, codes)
    pos_c = np.minimum(pos, len(basis_codes) - 1)
    found = (len(basis_codes) > 0) & (basis_codes[pos_c] == codes)
    return np.where(found, pos_c, -1)


def check_spin_dtype(s, name: str = "s") -> None:
    """TypeError unless ``s`` has an integer or real floating dtype (not bool, not complex)."""
    dtype = np.dtype(s.dtype)
    if not (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)):
        raise TypeError(f"{name}: expected an integer (int8) array of +-1, got dtype {dtype}")


def check_spin_values(s, name: str = "s") -> None:
    """ValueError unless every entry of a concrete ``s`` is +1 or -1.

    Skipped for traced values (inside ``jax.jit``, ``vmap``, ...), so it costs nothing in
    compiled code. A concrete jax array is checked by one reduction on its devices (no
    copy to the host unless the check fails).
    """
    if isinstance(s, jax.core.Tracer):
        return
    if isinstance(s, jax.Array):
        ok = jnp.all((s == 1) | (s == -1))
        if isinstance(ok, jax.core.Tracer):  # a constant inside a trace: not checked
            return
        if bool(ok):
            return
        if not s.is_fully_addressable:
            raise ValueError(f"{name}: entries must be +1 or -1")
    elif np.all((np.asarray(s) == 1) | (np.asarray(s) == -1)):
        return
    values = np.asarray(s)
    bad = values[(values != 1) & (values != -1)]
    raise ValueError(f"{name}: entries must be +1 or -1, found {bad.ravel()[:5].tolist()}")


def total_sz_of(s) -> np.ndarray:
    """``sum(s) / 2`` over the last axis (numpy float64), for concrete +-1 configurations."""
    if isinstance(s, jax.Array):
        s = np.asarray(jnp.sum(s.astype(jnp.int32), axis=-1))
    else:
        s = np.asarray(s).astype(np.int64).sum(axis=-1)
    return s / 2


def validate_states(s, n_sites: int, *, name: str = "s"):
    """Check a batch of configurations and return it as int8 (same array library).

    Accepts ``(n_sites,)`` or ``(batch, n_sites)`` (numpy or jax). Raises ValueError naming
    ``name`` for a wrong number of sites or (for concrete arrays) entries other than +-1,
    TypeError for a non-numeric dtype. Values of traced jax arrays cannot be checked.
    """
    n_sites = positive_int(n_sites, "n_sites")
    if not hasattr(s, "shape"):
        s = np.asarray(s)
    if s.ndim not in (1, 2):
        raise ValueError(f"{name}: expected shape (batch, {n_sites}) or ({n_sites},), got {tuple(s.shape)}")
    if s.shape[-1] != n_sites:
        raise ValueError(
            f"{name}: expected {n_sites} sites on the last axis, got shape {tuple(s.shape)}"
        )
    check_spin_dtype(s, name)
    check_spin_values(s, name)
    if isinstance(s, np.ndarray):
        return s.astype(np.int8, copy=False)
    return s.astype(jnp.int8)
