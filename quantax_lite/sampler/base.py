"""The contracts of the sampler package: what a driver may rely on, what a rule must provide.

:class:`Sampler` (a driver such as :class:`quantax_lite.driver.vmc.VMC` uses only this):

- attributes ``log_psi`` (``log_psi(params, s) -> (batch,)``, s int8 (batch, n_sites)),
  ``n_sites``, ``n_chains``, ``mesh`` (a device mesh, or None for ``make_mesh()``);
- ``init(key, params, initial_states=None) -> state``;
- ``sample(state, params, n_samples) -> (samples, log_psi, new_state)``: samples int8
  (n_samples, n_sites) of +-1, **chain-major** (rows ``c * m : (c + 1) * m`` are the
  ``m = n_samples // n_chains`` successive samples of chain c; ``n_samples`` must be a
  multiple of ``n_chains``), log_psi (n_samples,) of those samples under ``params``;
- ``resolved_mesh()``: the mesh it runs on (``make_mesh()`` when ``mesh`` is None);
  :class:`~quantax_lite.sampler.MetropolisSampler` also checks there that ``n_chains`` is
  a multiple of the mesh size (its chains are sharded over the devices).

The state it returns is a pytree that satisfies :class:`ChainState`: ``states`` int8
(n_chains, n_sites), the chains' current configurations, and ``n_accepted``,
``n_proposed`` int32 (n_chains,), counts of the most recent ``sample`` call.

:class:`TransitionRule` (what :class:`~quantax_lite.sampler.MetropolisSampler` calls):

- ``propose(key, states) -> (proposed, log_proposal_ratio)``: states int8
  (n_chains, n_sites) -> proposed states of the same shape and dtype, and
  ``log q(s' -> s) - log q(s -> s')`` per chain, (n_chains,) float32, identically 0 for
  a symmetric rule. Jittable, one move per chain;
- ``conserves_sz: bool``: every proposal keeps ``sum(s)``;
- ``symmetric: bool``: ``q(s -> s') = q(s' -> s)`` for every pair;
- ``check(n_sites)``: raise ValueError if the rule cannot act on ``n_sites`` sites.

A rule must be immutable and hashable (e.g. a frozen dataclass): it is part of the
static argument of the sampler's jitted sweep loop.

Both protocols are ``runtime_checkable``: ``isinstance(x, Sampler)`` checks that the
members exist (not their signatures).
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable

import jax
import jax.numpy as jnp

__all__ = ["Sampler", "ChainState", "TransitionRule", "acceptance_rate", "per_chain"]


@runtime_checkable
class TransitionRule(Protocol):
    """A Metropolis-Hastings proposal (see the module docstring for the contract)."""

    conserves_sz: bool
    symmetric: bool

    def check(self, n_sites: int) -> None:
        """Raise ValueError if the rule cannot act on ``n_sites`` sites."""

    def propose(self, key: jax.Array, states: jax.Array) -> tuple[jax.Array, jax.Array]:
        """states int8 (n_chains, n_sites) -> (proposed, same shape and dtype;
        log q(s' -> s) - log q(s -> s'), (n_chains,) float32)."""


@runtime_checkable
class ChainState(Protocol):
    """The part of a sampler's state that a driver reads (a pytree)."""

    states: jax.Array  # int8 (n_chains, n_sites)
    n_accepted: jax.Array  # int32 (n_chains,)
    n_proposed: jax.Array  # int32 (n_chains,)


@runtime_checkable
class Sampler(Protocol):
    """A source of samples s ~ |psi(s)|^2 (see the module docstring for the contract)."""

    log_psi: Callable
    n_sites: int
    n_chains: int
    mesh: Any

    def init(self, key: jax.Array, params: Any, initial_states: Any = None) -> ChainState:
        """The state before the first ``sample`` call."""

    def sample(self, state: ChainState, params: Any, n_samples: int) -> tuple[jax.Array, jax.Array, ChainState]:
        """(samples int8 (n_samples, n_sites) chain-major, log_psi (n_samples,), new state)."""

    def resolved_mesh(self) -> Any:
        """The device mesh the sampler runs on."""


def per_chain(x: jax.Array, n_chains: int) -> jax.Array:
    """Reshape a chain-major per-sample array (n_samples, ...) to (n_chains, n_sweeps, ...),
    the layout :func:`quantax_lite.stats.chains.statistics` takes."""
    x = jnp.asarray(x)
    if x.shape[0] % n_chains:
        raise ValueError(
            f"per_chain: leading axis {x.shape[0]} is not a multiple of n_chains={n_chains}"
        )
    return x.reshape(n_chains, x.shape[0] // n_chains, *x.shape[1:])


def acceptance_rate(state: ChainState) -> float:
    """Fraction of the last call's proposals that changed the configuration (nan if none)."""
    proposed = int(jnp.sum(state.n_proposed))
    if proposed == 0:
        return float("nan")
    return int(jnp.sum(state.n_accepted)) / proposed
