"""LocalFlip: flip one uniformly random spin per chain (symmetric; changes Sz)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp

__all__ = ["LocalFlip"]


@dataclass(frozen=True)
class LocalFlip:
    """Flip the spin on one uniformly random site of every chain.

    Always changes the configuration; symmetric (``q(s -> s') = 1 / n_sites`` both ways);
    does not conserve total Sz.
    """

    conserves_sz: ClassVar[bool] = False
    symmetric: ClassVar[bool] = True

    def check(self, n_sites: int) -> None:
        """Raise ValueError if the rule cannot act on ``n_sites`` sites."""
        if n_sites < 1:
            raise ValueError(f"LocalFlip needs n_sites >= 1, got {n_sites}")

    def propose(self, key: jax.Array, states: jax.Array) -> tuple[jax.Array, jax.Array]:
        """states int8 (n_chains, n_sites) -> (proposed states, zeros (n_chains,) float32)."""
        n_chains, n_sites = states.shape
        site = jax.random.randint(key, (n_chains,), 0, n_sites)
        hit = jnp.arange(n_sites)[None, :] == site[:, None]
        return jnp.where(hit, -states, states), jnp.zeros((n_chains,), jnp.float32)
