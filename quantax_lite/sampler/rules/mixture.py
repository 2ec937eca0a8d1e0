"""Mixture: one of several symmetric rules, chosen at random per chain."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from quantax_lite.sampler.base import TransitionRule

__all__ = ["Mixture"]


@dataclass(frozen=True)
class Mixture:
    """Apply rule k with probability ``probs[k]``, independently for every chain.

    ``rules``: a sequence of **symmetric** transition rules; ``probs``: non-negative
    weights, one per rule (normalized here). A mixture of symmetric rules with fixed
    weights is symmetric (its proposal ratio is 0). Conserves Sz only if every rule does.
    """

    rules: tuple
    probs: tuple[float, ...]
    symmetric: ClassVar[bool] = True

    def __post_init__(self):
        rules = tuple(self.rules)
        if len(rules) < 1:
            raise ValueError("Mixture: rules must hold at least one rule")
        for k, r in enumerate(rules):
            if not isinstance(r, TransitionRule):
                raise TypeError(
                    f"Mixture: rules[{k}] = {r!r} is not a transition rule (see sampler.TransitionRule)"
                )
            if not r.symmetric:
                raise ValueError(
                    f"Mixture: rules[{k}] = {r!r} is not a symmetric proposal; a mixture needs "
                    "symmetric rules (e.g. Exchange(bonds) without anti_aligned=True)"
                )
        probs = np.asarray(self.probs, dtype=np.float64)
        if probs.shape != (len(rules),):
            raise ValueError(
                f"Mixture: probs must have one entry per rule ({len(rules)}), "
                f"got shape {probs.shape}"
            )
        if np.any(probs < 0) or not np.isfinite(probs).all() or probs.sum() <= 0:
            raise ValueError(f"Mixture: probs must be non-negative and sum > 0, got {probs}")
        probs = probs / probs.sum()
        object.__setattr__(self, "rules", rules)
        object.__setattr__(self, "probs", tuple(float(p) for p in probs))

    @property
    def conserves_sz(self) -> bool:
        return all(r.conserves_sz for r in self.rules)

    def check(self, n_sites: int) -> None:
        """Raise ValueError if one of the rules cannot act on ``n_sites`` sites."""
        for r in self.rules:
            r.check(n_sites)

    def propose(self, key: jax.Array, states: jax.Array) -> tuple[jax.Array, jax.Array]:
        """states int8 (n_chains, n_sites) -> (proposed states, zeros (n_chains,) float32)."""
        keys = jax.random.split(key, len(self.rules) + 1)
        which = jax.random.choice(
            keys[0], len(self.rules), (states.shape[0],), p=jnp.asarray(self.probs)
        )
        out = states
        for k, rule in enumerate(self.rules):
            proposed, _ = rule.propose(keys[k + 1], states)  # symmetric: ratio 0
            out = jnp.where((which == k)[:, None], proposed, out)
        return out, jnp.zeros(states.shape[:1], jnp.float32)
