"""Metropolis-Hastings sampling of |psi(s)|^2 with many chains sharded over the device mesh.

A rule (:class:`~quantax_lite.sampler.TransitionRule`) proposes a move s -> s' for every
chain; it is accepted with probability
min(1, |psi(s') / psi(s)|^2 q(s' -> s) / q(s -> s')), i.e. when
``log(u) < 2 Re[log_psi(s') - log_psi(s)] + log_proposal_ratio``, with the ratio that
``rule.propose`` returns (0 for symmetric rules). The whole sweep loop is one jitted
program; the chain batch is sharded over the mesh (axis ``"batch"``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from quantax_lite.utils.validate import finite_number, positive_int
from quantax_lite.hilbert.configurations import random_states, resolve_total_sz
from quantax_lite.utils import chunk_map, make_mesh
from quantax_lite.utils.mesh import batch_sharding, mesh_size, replicated_sharding

from ._common import check_n_samples, onto_mesh, validate_initial_states
from .base import TransitionRule
from quantax_lite.utils import tuning

__all__ = ["SamplerState", "MetropolisSampler", "of_psi_squared"]


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class SamplerState:
    """The persistent state of the Markov chains (a pytree; a :class:`ChainState`).

    states: int8 (n_chains, n_sites), the current configurations (sharded over "batch").
    log_psi: (n_chains,), log_psi of ``states`` under the parameters of the last call
        (re-evaluated at the start of every call, since the parameters may have changed).
    key: the PRNG key for the next call.
    n_accepted, n_proposed: int32 (n_chains,), counts over the recorded sweeps of the
        most recent ``sample`` call (thermalization excluded). A move counts as
        accepted only if it changed the configuration.
    thermalized: bool scalar array, True once the chains have been thermalized (an
        array, not a static flag, so the first and later calls share one compilation).
    """

    states: jax.Array
    log_psi: jax.Array
    key: jax.Array
    n_accepted: jax.Array
    n_proposed: jax.Array
    thermalized: jax.Array


@dataclass(frozen=True)
class MetropolisSampler:
    """Metropolis-Hastings sampler of |psi(s)|^2 (of |psi(s)|^(2 power)) with ``n_chains``
    parallel chains (a :class:`~quantax_lite.sampler.Sampler`).

    log_psi: ``log_psi(params, s) -> (batch,)`` for s int8 (batch, n_sites) (real or
        complex: only 2 Re log_psi enters the acceptance).
    rule: a :class:`~quantax_lite.sampler.TransitionRule` (``LocalFlip()``,
        ``Exchange(bonds)``, ``Mixture(...)``); TypeError naming ``rule`` otherwise.
    n_chains: number of chains; must be a multiple of the mesh size.
    n_sites: number of spins.
    sweep_size: proposals per chain between recorded samples (default n_sites).
    n_thermalize: sweeps discarded on the first call (or when asked).
    chunk_size: rows per device per call of log_psi (see ``chunk_map``); None: no chunking.
    mesh: device mesh (chains split over all its axes); None: ``make_mesh()`` at call time.
    total_sz: the chains' Sz sector (spin-1/2 units, sum(s) / 2). ``"auto"`` (default):
        :func:`~quantax_lite.hilbert.configurations.resolve_total_sz` with ``rule.conserves_sz``, i.e.
        0 (even n_sites) or 1/2 (odd) for a rule that conserves Sz, None for one that
        changes it. A number: the sector of the random initial states and of any
        ``initial_states`` (only with a rule that conserves Sz; ValueError otherwise).
        None: unconstrained random initial states. After construction ``total_sz``
        holds the resolved sector.
    power: the chains sample |psi|^(2 power), 0 < power <= 1 (default 1: |psi|^2). Below
        1 the distribution is broader: configurations of small |psi| are visited, and
        the driver weighs each sample by |psi|^(2 - 2 power) (importance sampling;
        :class:`~quantax_lite.driver.vmc.VMC`). The ``log_psi`` returned with the samples
        is always the network's.

    The sampler is immutable and hashable: it is the static part of the jitted sweep
    loop, which compiles once per (sampler, shapes, n_sweeps).
    """

    log_psi: Callable
    rule: Any
    n_chains: int
    n_sites: int
    sweep_size: int | None = None
    n_thermalize: int = 20
    chunk_size: int | None = None
    mesh: Any = None
    total_sz: float | str | None = "auto"
    power: float = 1.0

    def __post_init__(self):
        if not callable(self.log_psi):
            raise TypeError(f"log_psi must be callable, got {type(self.log_psi).__name__}")
        if not isinstance(self.rule, TransitionRule):
            raise TypeError(
                f"rule: expected a transition rule (LocalFlip(), Exchange(bonds), Mixture(...); "
                f"see sampler.TransitionRule), got {self.rule!r}"
            )
        try:
            hash(self.rule)
        except TypeError:
            raise TypeError(
                f"rule: must be hashable (e.g. a frozen dataclass), it is a static jit argument; got {self.rule!r}"
            ) from None
        positive_int(self.n_chains, "n_chains")
        positive_int(self.n_sites, "n_sites")
        sweep = self.n_sites if self.sweep_size is None else self.sweep_size
        object.__setattr__(self, "sweep_size", positive_int(sweep, "sweep_size"))
        positive_int(self.n_thermalize, "n_thermalize", minimum=0)
        power = finite_number(self.power, "power")
        if not 0 < power <= 1:
            raise ValueError(f"power: the chains sample |psi|^(2 power) with 0 < power <= 1, got {self.power!r}")
        object.__setattr__(self, "power", float(power))
        if self.chunk_size is not None:
            positive_int(self.chunk_size, "chunk_size")
        conserves = bool(self.rule.conserves_sz)
        total_sz = resolve_total_sz(self.total_sz, self.n_sites, conserves)
        if total_sz is not None and not conserves:
            raise ValueError(
                f"total_sz: the rule {self.rule!r} changes Sz, so the chains cannot stay in the "
                f"sector total_sz={total_sz:g}; use total_sz='auto' or None"
            )
        object.__setattr__(self, "total_sz", total_sz)
        self.rule.check(self.n_sites)

    # -- public API -------------------------------------------------------------

    def init(self, key: jax.Array, params: Any, initial_states: Any = None) -> SamplerState:
        """Start the chains: random configurations of the sector ``total_sz`` or
        ``initial_states`` int8 (n_chains, n_sites).

        ``initial_states`` must be +-1 with that shape and, when ``total_sz`` is not None,
        lie in that sector (the chains could never reach it): ValueError naming
        ``initial_states`` otherwise.
        """
        mesh = self.resolved_mesh()
        key, k_init = jax.random.split(key)
        if initial_states is None:
            states = random_states(k_init, self.n_sites, self.n_chains, total_sz=self.total_sz)
        else:
            states = validate_initial_states(initial_states, self.n_chains, self.n_sites, self.total_sz)
        replicated = replicated_sharding(mesh)
        states = onto_mesh(states, batch_sharding(mesh, 2))
        key, params = onto_mesh((key, params), replicated)
        return _start_chains(self, mesh, states, key, params)

    def sample(
        self,
        state: SamplerState,
        params: Any,
        n_samples: int,
        thermalize: bool | None = None,
    ) -> tuple[jax.Array, jax.Array, SamplerState]:
        """Run the chains and record ``n_samples // n_chains`` sweeps per chain.

        thermalize: None (default): run ``n_thermalize`` sweeps first only if the chains
            have never been thermalized; True / False: force / skip them.

        Returns samples int8 (n_samples, n_sites) chain-major (see ``per_chain``), their
        log_psi (n_samples,), and the new state (chains continue from there on the next
        call; acceptance counts refer to this call).
        """
        n_samples = check_n_samples(n_samples, self.n_chains)
        if not isinstance(state, SamplerState):
            raise TypeError(f"state must be a SamplerState, got {type(state).__name__}")
        if state.states.shape != (self.n_chains, self.n_sites):
            raise ValueError(
                f"state.states has shape {state.states.shape}, expected "
                f"(n_chains, n_sites) = {(self.n_chains, self.n_sites)}"
            )
        # Thermalization sweeps for fresh and for already thermalized chains; the choice
        # is made inside the jitted loop, so every call compiles to the same program.
        n = self.n_thermalize
        if thermalize is None:
            n_therm = (n, 0)
        elif isinstance(thermalize, (bool, np.bool_)):
            n_therm = (n, n) if thermalize else (0, 0)
        else:
            raise TypeError(f"thermalize must be None, True or False, got {thermalize!r}")
        mesh = self.resolved_mesh()
        n_therm = jnp.asarray(n_therm, jnp.int32)
        params = onto_mesh(params, replicated_sharding(mesh))
        return _run_chains(self, mesh, n_samples // self.n_chains, n_therm, state, params)

    def resolved_mesh(self):
        """The mesh the chains run on: ``mesh``, or ``make_mesh()`` when it is None.

        Raises ValueError unless ``n_chains`` is a multiple of its size.
        """
        mesh = make_mesh() if self.mesh is None else self.mesh
        n_dev = mesh_size(mesh)
        if self.n_chains % n_dev:
            raise ValueError(
                f"n_chains={self.n_chains} must be a multiple of the device count {n_dev} "
                f"(the chains are sharded over every device of the mesh)"
            )
        return mesh


    # -- internals ----------------------------------------------------------------

    def _evaluator(self, mesh):
        return chunk_map(
            self.log_psi, in_axes=(None, 0), chunk_size=self.chunk_size, use_scan=True, mesh=mesh
        )


def of_psi_squared(sampler) -> tuple[Any, bool]:
    """``(sampler of |psi|^2, again)`` for the chains of ``sampler``: itself and False where it
    samples |psi|^2 already (power 1, or a sampler without a ``power``), else its copy at
    power 1 and True: chains at home in |psi|^(2 power) must thermalize again before their
    draws are samples of |psi|^2 (``sample(..., thermalize=True)``)."""
    if getattr(sampler, "power", 1.0) == 1.0:
        return sampler, False
    return dataclasses.replace(sampler, power=1.0), True


@partial(jax.jit, static_argnums=(0, 1))
def _start_chains(sampler: MetropolisSampler, mesh, states, key, params) -> SamplerState:
    """The initial state, every leaf placed as ``_run_chains`` returns it (so that the
    first and later calls reuse one compiled program)."""
    states = jax.lax.with_sharding_constraint(states, batch_sharding(mesh, 2))
    log_psi = sampler._evaluator(mesh)(params, states)
    zeros = jax.lax.with_sharding_constraint(
        jnp.zeros((sampler.n_chains,), jnp.int32), batch_sharding(mesh)
    )
    key, fresh = jax.lax.with_sharding_constraint((key, jnp.asarray(False)), replicated_sharding(mesh))
    return SamplerState(states, log_psi, key, zeros, zeros, fresh)


@partial(jax.jit, static_argnums=(0, 1, 2))
def _run_chains(sampler: MetropolisSampler, mesh, n_sweeps: int, n_therm, state, params):
    """The whole sampling call: thermalization sweeps, then n_sweeps recorded ones.

    n_therm: int32 (2,), the discarded sweeps for fresh / for thermalized chains.
    """

    def constrain(x):
        return jax.lax.with_sharding_constraint(x, batch_sharding(mesh, x.ndim))

    evaluate = sampler._evaluator(mesh)
    n_chains, sweep = sampler.n_chains, sampler.sweep_size

    def propose_and_accept(key, carry):
        states, log_psi, n_acc = carry
        k_move, k_accept = jax.random.split(key)
        proposed, log_q_ratio = sampler.rule.propose(k_move, states)
        proposed = constrain(proposed)
        log_psi_new = evaluate(params, proposed).astype(log_psi.dtype)
        log_u = jnp.log(constrain(tuning.uniform(k_accept, (n_chains,))))
        log_ratio = 2.0 * sampler.power * jnp.real(log_psi_new - log_psi)
        log_ratio = log_ratio + log_q_ratio.astype(log_ratio.dtype)  # 0 for symmetric rules
        accept = log_u < log_ratio
        moved = accept & jnp.any(proposed != states, axis=1)
        states = jnp.where(accept[:, None], proposed, states)
        log_psi = jnp.where(accept, log_psi_new, log_psi)
        return constrain(states), constrain(log_psi), n_acc + moved.astype(n_acc.dtype)

    def run_sweep(key, carry):
        return jax.lax.fori_loop(
            0, sweep, lambda p, c: propose_and_accept(jax.random.fold_in(key, p), c), carry
        )

    key, k_therm, k_record = jax.random.split(state.key, 3)
    zeros = constrain(jnp.zeros((n_chains,), jnp.int32))
    # The parameters may have changed since the chains stopped (a VMC step in between):
    # re-evaluate log psi of the current states, or the acceptance ratios and the
    # returned log psi of unmoved samples would belong to the old parameters.
    log_psi_now = evaluate(params, constrain(state.states)).astype(state.log_psi.dtype)
    carry = (constrain(state.states), constrain(log_psi_now), zeros)
    n_discard = jnp.where(state.thermalized, n_therm[1], n_therm[0])
    carry = jax.lax.fori_loop(
        0, n_discard, lambda t, c: run_sweep(jax.random.fold_in(k_therm, t), c), carry
    )
    carry = (carry[0], carry[1], zeros)

    def record(c, t):
        c = run_sweep(jax.random.fold_in(k_record, t), c)
        return c, (c[0], c[1])

    (states, log_psi, n_acc), (rec_states, rec_log_psi) = jax.lax.scan(
        record, carry, jnp.arange(n_sweeps)
    )
    # (n_sweeps, n_chains, ...) -> chain-major (n_chains * n_sweeps, ...): each device's
    # chains stay contiguous, so the flat batch keeps its sharding.
    samples = jnp.swapaxes(rec_states, 0, 1).reshape(n_chains * n_sweeps, sampler.n_sites)
    log_psi_samples = jnp.swapaxes(rec_log_psi, 0, 1).reshape(n_chains * n_sweeps)
    n_prop = constrain(jnp.full((n_chains,), n_sweeps * sweep, jnp.int32))
    thermalized = state.thermalized | (n_discard > 0)
    new_state = SamplerState(states, log_psi, key, n_acc, n_prop, thermalized)
    return constrain(samples), constrain(log_psi_samples), new_state
