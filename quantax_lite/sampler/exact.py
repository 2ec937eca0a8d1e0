"""Independent draws from |psi(s)|^2 by enumerating every configuration (small systems)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp

from quantax_lite.utils.validate import positive_int
from quantax_lite.hilbert.configurations import all_states, random_states
from quantax_lite.utils import chunk_map, make_mesh

from ._common import check_n_samples, enumerated_sector, validate_initial_states

__all__ = ["ExactSamplerState", "ExactSampler"]


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class ExactSamplerState:
    """State of the exact sampler (a :class:`ChainState`): the PRNG key for the next call
    and, for drivers written for :class:`SamplerState`, per "chain" (see
    ``ExactSampler.n_chains``):

    states: int8 (n_chains, n_sites), the last draw of every chain (random configurations
        of the sector, or the given ``initial_states``, before the first call);
    n_accepted, n_proposed: int32 (n_chains,), the draws of the last call (every
        independent draw counts as an accepted move).
    """

    key: jax.Array
    states: jax.Array = None
    n_accepted: jax.Array = None
    n_proposed: jax.Array = None


@dataclass(frozen=True)
class ExactSampler:
    """Independent draws from |psi(s)|^2 / sum |psi|^2 over every configuration of a sector
    (a :class:`~quantax_lite.sampler.Sampler`).

    log_psi: ``log_psi(params, s) -> (batch,)``; n_sites: number of spins.
    total_sz: the sector (spin-1/2 units, sum(s) / 2) to draw from; ``"auto"`` (default)
        and None: the whole space of 2**n_sites configurations (the sampler knows no
        Hamiltonian, so it has no conserved Sz to pick a sector from; pass e.g. 0 to draw
        from the Sz = 0 sector of an Sz-conserving model). After construction
        ``total_sz`` holds the resolved sector.
    chunk_size, mesh: passed to ``chunk_map`` for evaluating log_psi on every state.
    max_states: the most configurations it enumerates (default 2**22).
    n_chains: the number of sequences the independent draws are split into (default 1),
        with the chain-major layout of :class:`MetropolisSampler` (``per_chain(x,
        n_chains)``); ``n_samples`` must be a multiple of it. It lets a driver written for
        the Metropolis sampler (``sampler.n_chains``, ``state.n_accepted`` /
        ``state.n_proposed``) run on exact draws; the draws do not depend on it, and it
        need not be a multiple of the mesh size.
    """

    log_psi: Callable
    n_sites: int
    total_sz: float | str | None = "auto"
    chunk_size: int | None = None
    mesh: Any = None
    max_states: int = 2**22
    n_chains: int = 1

    def __post_init__(self):
        if not callable(self.log_psi):
            raise TypeError(f"log_psi must be callable, got {type(self.log_psi).__name__}")
        positive_int(self.n_sites, "n_sites")
        positive_int(self.n_chains, "n_chains")
        positive_int(self.max_states, "max_states")
        if self.chunk_size is not None:
            positive_int(self.chunk_size, "chunk_size")
        total_sz = enumerated_sector("ExactSampler", self.n_sites, self.total_sz, self.max_states)
        object.__setattr__(self, "total_sz", total_sz)

    def resolved_mesh(self):
        """The mesh log_psi is evaluated on: ``mesh``, or ``make_mesh()`` when it is None."""
        return make_mesh() if self.mesh is None else self.mesh


    def states(self) -> jax.Array:
        """Every configuration of the sector, int8 (n_states, n_sites)."""
        return jnp.asarray(all_states(self.n_sites, total_sz=self.total_sz))

    def probabilities(self, params: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(states int8 (n_states, n_sites), log_psi (n_states,), |psi|^2 normalized)."""
        states = self.states()
        mesh = self.resolved_mesh()
        log_psi = chunk_map(
            self.log_psi, in_axes=(None, 0), chunk_size=self.chunk_size, mesh=mesh
        )(params, states)
        log_p = 2.0 * jnp.real(log_psi)
        p = jnp.exp(log_p - jnp.max(log_p))
        return states, log_psi, p / jnp.sum(p)

    def init(self, key: jax.Array, params: Any = None, initial_states: Any = None) -> ExactSamplerState:
        """The state: the key (the draws depend on it only), zero counts and the chains'
        current configurations, ``initial_states`` (n_chains, n_sites) of the sector when
        given, else random ones (they do not influence the draws)."""
        if initial_states is None:
            # fold_in: the draws stay those of ``key``
            states = random_states(jax.random.fold_in(key, 1), self.n_sites, self.n_chains, self.total_sz)
        else:
            states = validate_initial_states(initial_states, self.n_chains, self.n_sites, self.total_sz)
        zeros = jnp.zeros((self.n_chains,), jnp.int32)
        return ExactSamplerState(key, states, zeros, zeros)

    def sample(self, state: ExactSamplerState, params: Any, n_samples: int):
        """n_samples independent draws: (samples int8 (n_samples, n_sites) chain-major,
        log_psi (n_samples,), new state)."""
        n_samples = check_n_samples(n_samples, self.n_chains)
        states, log_psi, p = self.probabilities(params)
        key, k_draw = jax.random.split(state.key)
        index = _draw_indices(k_draw, p, n_samples)
        samples = states[index]
        per = n_samples // self.n_chains
        counts = jnp.full((self.n_chains,), per, jnp.int32)
        last = samples.reshape(self.n_chains, per, self.n_sites)[:, -1]
        return samples, log_psi[index], ExactSamplerState(key, last, counts, counts)


@partial(jax.jit, static_argnums=(2,))
def _draw_indices(key, p, n_samples):
    """Inverse-CDF draws of n_samples indices with probabilities p."""
    cdf = jnp.cumsum(p)
    u = jax.random.uniform(key, (n_samples,), dtype=cdf.dtype) * cdf[-1]
    return jnp.minimum(jnp.searchsorted(cdf, u, side="right"), p.shape[0] - 1)
