"""Exchange: swap the spins of one random bond per chain (conserves Sz)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from quantax_lite.utils import tuning

__all__ = ["Exchange"]


@dataclass(frozen=True)
class Exchange:
    """Swap the two spins of one random bond (i, j) of every chain. Conserves total Sz.

    ``bonds``: (n_bonds, 2) ints, e.g. ``lattice.bonds()`` (concatenate
    ``lattice.bonds(1)`` and ``lattice.bonds(2)`` for J1-J2).

    ``anti_aligned=False`` (default): the bond is uniform among all bonds (a symmetric
    proposal). A bond whose spins are aligned proposes the unchanged state: a null move
    that Metropolis accepts (ratio 1). It counts as *proposed* but **not** as accepted:
    ``n_accepted`` counts only moves that changed the configuration. On a uniform |psi|^2
    in the Sz = 0 sector of N sites the expected acceptance rate is therefore the
    probability that a bond is anti-aligned, N / (2 (N - 1)).

    ``anti_aligned=True``: the bond is uniform among the ``n_a(s)`` bonds whose spins
    differ, so every proposal moves (no network evaluation is spent on null moves).
    The proposal is not symmetric: ``propose`` returns the Metropolis-Hastings ratio
    ``log(n_a(s) / n_a(s'))`` (:meth:`log_proposal_ratio`). A configuration without an
    anti-aligned bond (fully polarized) proposes itself (ratio 0).
    """

    bonds: tuple[tuple[int, int], ...]
    anti_aligned: bool = False
    conserves_sz: ClassVar[bool] = True

    def __post_init__(self):
        arr = np.asarray(self.bonds)
        if arr.ndim != 2 or arr.shape[1] != 2 or arr.shape[0] < 1:
            raise ValueError(
                f"Exchange: bonds must have shape (n_bonds, 2) with n_bonds >= 1, "
                f"got shape {arr.shape}"
            )
        if not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"Exchange: bonds must be integers, got dtype {arr.dtype}")
        if np.any(arr < 0) or np.any(arr[:, 0] == arr[:, 1]):
            raise ValueError(
                "Exchange: bonds must be pairs (i, j) of distinct non-negative site indices"
            )
        # Stored as a tuple so the rule is hashable (it is a static jit argument).
        object.__setattr__(self, "bonds", tuple((int(i), int(j)) for i, j in arr))
        if not isinstance(self.anti_aligned, (bool, np.bool_)):
            raise TypeError(f"Exchange: anti_aligned must be a bool, got {self.anti_aligned!r}")
        object.__setattr__(self, "anti_aligned", bool(self.anti_aligned))

    @property
    def n_bonds(self) -> int:
        return len(self.bonds)

    @property
    def symmetric(self) -> bool:
        """Whether q(s -> s') = q(s' -> s): True unless ``anti_aligned``."""
        return not self.anti_aligned

    def check(self, n_sites: int) -> None:
        """Raise ValueError if a bond names a site >= ``n_sites``."""
        top = max(max(b) for b in self.bonds)
        if top >= n_sites:
            raise ValueError(
                f"Exchange: bond site index {top} out of range for n_sites={n_sites}"
            )

    def _differs(self, states: jax.Array) -> jax.Array:
        """(n_chains, n_bonds) bool: the bond's two spins differ."""
        bonds = np.asarray(self.bonds, np.int32)
        return states[:, bonds[:, 0]] != states[:, bonds[:, 1]]

    def propose(self, key: jax.Array, states: jax.Array) -> tuple[jax.Array, jax.Array]:
        """states int8 (n_chains, n_sites) -> (proposed states, same shape and dtype;
        log q(s' -> s) - log q(s -> s'), (n_chains,) float32)."""
        n_chains, n_sites = states.shape
        bonds = jnp.asarray(self.bonds, dtype=jnp.int32)
        if self.anti_aligned:
            differs = self._differs(states)
            n_a = jnp.sum(differs, axis=1, dtype=jnp.int32)
            rank = jnp.floor(tuning.uniform(key, (n_chains,)) * n_a).astype(jnp.int32)
            rank = jnp.minimum(rank, jnp.maximum(n_a - 1, 0))
            # the (rank + 1)-th anti-aligned bond; bond 0 (aligned: a null move) if none
            pick = jnp.argmax(jnp.cumsum(differs, axis=1, dtype=jnp.int32) > rank[:, None], axis=1)
        else:
            pick = jax.random.randint(key, (n_chains,), 0, len(self.bonds))
        i, j = bonds[pick, 0][:, None], bonds[pick, 1][:, None]
        s_i = jnp.take_along_axis(states, i, axis=1)
        s_j = jnp.take_along_axis(states, j, axis=1)
        sites = jnp.arange(n_sites)[None, :]
        proposed = jnp.where(sites == i, s_j, jnp.where(sites == j, s_i, states))
        return proposed, self.log_proposal_ratio(states, proposed)

    def log_proposal_ratio(self, states: jax.Array, proposed: jax.Array) -> jax.Array:
        """``log q(s' -> s) - log q(s -> s')`` per chain, (n_chains,) float32:
        ``log(n_a(s) / n_a(s'))`` with ``anti_aligned``, else 0."""
        if not self.anti_aligned:
            return jnp.zeros(states.shape[:1], jnp.float32)
        n_a = jnp.sum(self._differs(states), axis=1).astype(jnp.float32)
        n_a_new = jnp.sum(self._differs(proposed), axis=1).astype(jnp.float32)
        # a swap of an anti-aligned bond keeps that bond anti-aligned: n_a_new >= 1
        return jnp.log(jnp.maximum(n_a, 1.0)) - jnp.log(jnp.maximum(n_a_new, 1.0))
