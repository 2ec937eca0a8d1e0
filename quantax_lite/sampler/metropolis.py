"""Sampling spin configurations s ~ |psi(s)|^2.

Two samplers share one interface, ``init(key, params, initial_states=None) -> state``
and ``sample(state, params, n_samples) -> (samples, log_psi_samples, new_state)``:

- :class:`MetropolisSampler`: many Markov chains in parallel, the chain batch sharded
  over the device mesh (axis ``"batch"``), the whole sweep loop jitted.
- :class:`ExactSampler`: independent draws from |psi|^2 by enumerating every
  configuration (optionally of one Sz sector); for small systems and tests.

Transition rules (:class:`LocalFlip`, :class:`Exchange`, :class:`Mixture`) propose a
move s -> s' for every chain; it is accepted with probability
min(1, |psi(s') / psi(s)|^2 q(s' -> s) / q(s -> s')), i.e. when
``log(u) < 2 Re[log_psi(s') - log_psi(s)] + log_proposal_ratio``. Symmetric rules
(``rule.symmetric`` True or absent) have ratio 1; ``Exchange(bonds, anti_aligned=True)``
is the one asymmetric rule here and provides ``log_proposal_ratio(states, proposed)``.

Sample layout: ``samples`` has shape (n_samples, n_sites), **chain-major**: rows
``c * n_sweeps : (c + 1) * n_sweeps`` are the successive recorded states of chain c.
``per_chain(x, n_chains)`` reshapes any per-sample array to (n_chains, n_sweeps, ...),
the layout :func:`quantax_lite.stats.statistics` takes. Chain-major order keeps each
device's chains contiguous, so the flat sample batch stays sharded over the mesh
without communication.

Configurations are int8 arrays of +1 / -1 (+1 = up), shape (batch, n_sites).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from quantax_lite.hilbert import all_states, n_up, random_states, sector_size, total_sz_of, validate_states
from quantax_lite.utils import chunk_map, make_mesh
from quantax_lite.utils.mesh import batch_sharding, mesh_size, replicated_sharding

__all__ = [
    "LocalFlip",
    "Exchange",
    "Mixture",
    "SamplerState",
    "MetropolisSampler",
    "ExactSamplerState",
    "ExactSampler",
    "acceptance_rate",
    "per_chain",
]


# --------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class LocalFlip:
    """Flip the spin on one uniformly random site of every chain.

    Always changes the configuration; does not conserve total Sz.
    """

    conserves_sz: ClassVar[bool] = False

    def check(self, n_sites: int) -> None:
        """Raise ValueError if the rule cannot act on ``n_sites`` sites."""
        if n_sites < 1:
            raise ValueError(f"LocalFlip needs n_sites >= 1, got {n_sites}")

    def propose(self, key: jax.Array, states: jax.Array) -> jax.Array:
        """states int8 (n_chains, n_sites) -> proposed states, same shape and dtype."""
        n_chains, n_sites = states.shape
        site = jax.random.randint(key, (n_chains,), 0, n_sites)
        hit = jnp.arange(n_sites)[None, :] == site[:, None]
        return jnp.where(hit, -states, states)


@dataclass(frozen=True)
class Exchange:
    """Swap the two spins of one random bond (i, j) of every chain. Conserves total Sz.

    ``bonds``: (n_bonds, 2) ints, e.g. ``lattice.bonds()`` (concatenate
    ``lattice.bonds(1)`` and ``lattice.bonds(2)`` for J1-J2).

    ``anti_aligned=False`` (default): the bond is uniform among all bonds. A bond whose
    spins are aligned proposes the unchanged state: a null move that Metropolis accepts
    (ratio 1). It counts as *proposed* but **not** as accepted: ``n_accepted`` counts
    only moves that changed the configuration. On a uniform |psi|^2 in the Sz = 0
    sector of N sites the expected acceptance rate is therefore the probability that a
    bond is anti-aligned, N / (2 (N - 1)).

    ``anti_aligned=True``: the bond is uniform among the ``n_a(s)`` bonds whose spins
    differ, so every proposal moves (no network evaluation is spent on null moves).
    The proposal is not symmetric; the Metropolis-Hastings ratio ``n_a(s) / n_a(s')``
    (:meth:`log_proposal_ratio`) enters the acceptance. A configuration without an
    anti-aligned bond (fully polarized) proposes itself.
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
        """Whether q(s -> s') = q(s' -> s) (no Hastings ratio needed)."""
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

    def propose(self, key: jax.Array, states: jax.Array) -> jax.Array:
        """states int8 (n_chains, n_sites) -> proposed states, same shape and dtype."""
        n_chains, n_sites = states.shape
        bonds = jnp.asarray(self.bonds, dtype=jnp.int32)
        if self.anti_aligned:
            differs = self._differs(states)
            n_a = jnp.sum(differs, axis=1, dtype=jnp.int32)
            rank = jnp.floor(jax.random.uniform(key, (n_chains,)) * n_a).astype(jnp.int32)
            rank = jnp.minimum(rank, jnp.maximum(n_a - 1, 0))
            # the (rank + 1)-th anti-aligned bond; bond 0 (aligned: a null move) if none
            pick = jnp.argmax(jnp.cumsum(differs, axis=1, dtype=jnp.int32) > rank[:, None], axis=1)
        else:
            pick = jax.random.randint(key, (n_chains,), 0, len(self.bonds))
        i, j = bonds[pick, 0][:, None], bonds[pick, 1][:, None]
        s_i = jnp.take_along_axis(states, i, axis=1)
        s_j = jnp.take_along_axis(states, j, axis=1)
        sites = jnp.arange(n_sites)[None, :]
        return jnp.where(sites == i, s_j, jnp.where(sites == j, s_i, states))

    def log_proposal_ratio(self, states: jax.Array, proposed: jax.Array) -> jax.Array:
        """``log q(s' -> s) - log q(s -> s')`` per chain, (n_chains,) float32."""
        if not self.anti_aligned:
            return jnp.zeros(states.shape[:1], jnp.float32)
        n_a = jnp.sum(self._differs(states), axis=1).astype(jnp.float32)
        n_a_new = jnp.sum(self._differs(proposed), axis=1).astype(jnp.float32)
        # a swap of an anti-aligned bond keeps that bond anti-aligned: n_a_new >= 1
        return jnp.log(jnp.maximum(n_a, 1.0)) - jnp.log(jnp.maximum(n_a_new, 1.0))


@dataclass(frozen=True)
class Mixture:
    """Apply rule k with probability ``probs[k]``, independently for every chain.

    ``rules``: a sequence of rules; ``probs``: non-negative weights, one per rule
    (normalized here). A mixture of symmetric rules with fixed weights is symmetric.
    Conserves Sz only if every rule does.
    """

    rules: tuple
    probs: tuple[float, ...]

    def __post_init__(self):
        rules = tuple(self.rules)
        if len(rules) < 1:
            raise ValueError("Mixture: rules must hold at least one rule")
        for r in rules:
            if not (hasattr(r, "propose") and hasattr(r, "conserves_sz")):
                raise TypeError(f"Mixture: {r!r} is not a transition rule")
            if not getattr(r, "symmetric", True):
                raise ValueError(
                    f"Mixture: {r!r} is not a symmetric proposal; a mixture needs symmetric "
                    "rules (e.g. Exchange(bonds) without anti_aligned=True)"
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
        for r in self.rules:
            r.check(n_sites)

    def propose(self, key: jax.Array, states: jax.Array) -> jax.Array:
        """states int8 (n_chains, n_sites) -> proposed states, same shape and dtype."""
        keys = jax.random.split(key, len(self.rules) + 1)
        which = jax.random.choice(
            keys[0], len(self.rules), (states.shape[0],), p=jnp.asarray(self.probs)
        )
        out = states
        for k, rule in enumerate(self.rules):
            out = jnp.where((which == k)[:, None], rule.propose(keys[k + 1], states), out)
        return out


# --------------------------------------------------------------------------- helpers


def _check_positive_int(name: str, value: Any, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else ">= 1"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return int(value)


def _validate_initial_states(states: Any, n_chains: int, n_sites: int, total_sz=None) -> jax.Array:
    """``states`` as int8 (n_chains, n_sites) of +-1, every chain in the sector ``total_sz``
    (None: any); values are checked for concrete arrays only."""
    if not hasattr(states, "shape") or not hasattr(states, "dtype"):
        states = np.asarray(states)
    if tuple(states.shape) != (n_chains, n_sites):
        raise ValueError(
            f"initial_states: expected shape (n_chains, n_sites) = {(n_chains, n_sites)}, "
            f"got {tuple(states.shape)}"
        )
    arr = validate_states(states, n_sites, name="initial_states")
    if total_sz is not None and not isinstance(arr, jax.core.Tracer):
        twice = int(round(2 * float(total_sz)))
        if isinstance(arr, jax.Array):  # one reduction on the devices; details only on failure
            if bool(jnp.all(jnp.sum(arr.astype(jnp.int32), axis=1) == twice)):
                return arr
            if not arr.is_fully_addressable:
                raise ValueError(
                    f"initial_states: some chains are outside the sampler's sector total_sz={total_sz:g}"
                )
        sz = total_sz_of(arr)
        wrong = np.nonzero(2 * sz != twice)[0]
        if wrong.size:
            c = int(wrong[0])
            raise ValueError(
                f"initial_states: chain {c} has total_sz={sz[c]:g}, the sampler's sector is "
                f"total_sz={total_sz:g} ({wrong.size} of {n_chains} chains outside it)"
            )
    return jnp.asarray(arr)


def _onto_mesh(tree: Any, sharding) -> Any:
    """Move array leaves that live on other devices onto ``sharding``'s devices.

    jit refuses arguments committed to different device sets (e.g. params on device 0
    and chains on the mesh). Leaves already on the mesh are left as they are; in a
    multi-process run the caller must already pass global arrays.
    """
    if jax.process_count() > 1:
        return tree
    devices = sharding.device_set

    def move(x):
        if isinstance(x, jax.core.Tracer):  # inside jit: placement is the caller's
            return x
        if isinstance(x, jax.Array) and x.sharding.device_set != devices:
            return jax.device_put(x, sharding)
        return x

    return jax.tree_util.tree_map(move, tree)


def per_chain(x: jax.Array, n_chains: int) -> jax.Array:
    """Reshape a chain-major per-sample array (n_samples, ...) to (n_chains, n_sweeps, ...)."""
    x = jnp.asarray(x)
    if x.shape[0] % n_chains:
        raise ValueError(
            f"per_chain: leading axis {x.shape[0]} is not a multiple of n_chains={n_chains}"
        )
    return x.reshape(n_chains, x.shape[0] // n_chains, *x.shape[1:])


# --------------------------------------------------------------------------- Metropolis


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class SamplerState:
    """The persistent state of the Markov chains (a pytree).

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


def acceptance_rate(state: SamplerState) -> float:
    """Fraction of the last call's proposals that changed the configuration."""
    proposed = int(jnp.sum(state.n_proposed))
    if proposed == 0:
        return float("nan")
    return int(jnp.sum(state.n_accepted)) / proposed


@dataclass(frozen=True)
class MetropolisSampler:
    """Metropolis-Hastings sampler of |psi(s)|^2 with ``n_chains`` parallel chains.

    log_psi: ``log_psi(params, s) -> (batch,)`` for s int8 (batch, n_sites) (real or
        complex: only 2 Re log_psi enters the acceptance).
    rule: a transition rule (LocalFlip(), Exchange(bonds), Mixture(...)).
    n_chains: number of chains; must be a multiple of the mesh size.
    n_sites: number of spins.
    sweep_size: proposals per chain between recorded samples (default n_sites).
    n_thermalize: sweeps discarded on the first call (or when asked).
    chunk_size: rows per device per call of log_psi (see ``chunk_map``); None: no chunking.
    mesh: device mesh (chains split over all its axes); None: ``make_mesh()`` at call time.
    total_sz: Sz sector (units of spin 1/2, sum(s) / 2) of random initial states when
        the rule conserves Sz; None: unconstrained. Ignored by rules that change Sz.

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
    total_sz: float | None = 0

    def __post_init__(self):
        if not callable(self.log_psi):
            raise TypeError(f"log_psi must be callable, got {type(self.log_psi).__name__}")
        if not (hasattr(self.rule, "propose") and hasattr(self.rule, "conserves_sz")):
            raise TypeError(
                f"rule must be a transition rule (LocalFlip(), Exchange(bonds), Mixture(...)), "
                f"got {self.rule!r}"
            )
        _check_positive_int("n_chains", self.n_chains)
        _check_positive_int("n_sites", self.n_sites)
        sweep = self.n_sites if self.sweep_size is None else self.sweep_size
        object.__setattr__(self, "sweep_size", _check_positive_int("sweep_size", sweep))
        _check_positive_int("n_thermalize", self.n_thermalize, allow_zero=True)
        if self.chunk_size is not None:
            _check_positive_int("chunk_size", self.chunk_size)
        if self.rule.conserves_sz:
            n_up(self.n_sites, self.total_sz)  # ValueError if the sector does not exist
        self.rule.check(self.n_sites)

    # -- public API -------------------------------------------------------------

    def init(self, key: jax.Array, params: Any, initial_states: Any = None) -> SamplerState:
        """Start the chains: random configurations (in the ``total_sz`` sector when the
        rule conserves Sz) or ``initial_states`` int8 (n_chains, n_sites).

        ``initial_states`` must be +-1 with that shape and, when the rule conserves Sz and
        ``total_sz`` is not None, lie in the sector ``total_sz`` (the chains could never
        reach it): ValueError naming ``initial_states`` otherwise.
        """
        mesh = self._resolved_mesh()
        key, k_init = jax.random.split(key)
        sector = self.total_sz if self.rule.conserves_sz else None
        if initial_states is None:
            states = random_states(k_init, self.n_sites, self.n_chains, total_sz=sector)
        else:
            states = _validate_initial_states(initial_states, self.n_chains, self.n_sites, sector)
        replicated = replicated_sharding(mesh)
        states = _onto_mesh(states, batch_sharding(mesh, 2))
        key, params = _onto_mesh((key, params), replicated)
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
        n_samples = _check_positive_int("n_samples", n_samples)
        if n_samples % self.n_chains:
            raise ValueError(
                f"n_samples={n_samples} must be a multiple of n_chains={self.n_chains}"
            )
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
        mesh = self._resolved_mesh()
        n_therm = jnp.asarray(n_therm, jnp.int32)
        params = _onto_mesh(params, replicated_sharding(mesh))
        return _run_chains(self, mesh, n_samples // self.n_chains, n_therm, state, params)

    # -- internals ----------------------------------------------------------------

    def _resolved_mesh(self):
        mesh = make_mesh() if self.mesh is None else self.mesh
        n_dev = mesh_size(mesh)
        if self.n_chains % n_dev:
            raise ValueError(
                f"n_chains={self.n_chains} must be a multiple of the device count {n_dev} "
                f"(the chains are sharded over every device of the mesh)"
            )
        return mesh

    def _evaluator(self, mesh):
        return chunk_map(
            self.log_psi, in_axes=(None, 0), chunk_size=self.chunk_size, use_scan=True, mesh=mesh
        )


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
        proposed = constrain(sampler.rule.propose(k_move, states))
        log_psi_new = evaluate(params, proposed).astype(log_psi.dtype)
        log_u = jnp.log(constrain(jax.random.uniform(k_accept, (n_chains,))))
        log_ratio = 2.0 * jnp.real(log_psi_new - log_psi)
        if not getattr(sampler.rule, "symmetric", True):
            log_ratio = log_ratio + sampler.rule.log_proposal_ratio(states, proposed).astype(log_ratio.dtype)
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


# --------------------------------------------------------------------------- exact


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class ExactSamplerState:
    """State of the exact sampler: the PRNG key for the next call and, for drivers written
    for :class:`SamplerState`, per "chain" (see ``ExactSampler.n_chains``):

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
    """Independent draws from |psi(s)|^2 / sum |psi|^2 over every configuration.

    log_psi: ``log_psi(params, s) -> (batch,)``; n_sites: number of spins;
    total_sz: restrict to one Sz sector (units of spin 1/2), None = full space;
    chunk_size, mesh: passed to ``chunk_map`` for evaluating log_psi on every state.
    Enumerates at most ``max_states`` configurations (default 2**22).
    n_chains: the number of sequences the independent draws are split into (default 1),
    with the chain-major layout of :class:`MetropolisSampler` (``per_chain(x, n_chains)``);
    ``n_samples`` must be a multiple of it. It lets a driver written for the Metropolis
    sampler (``sampler.n_chains``, ``state.n_accepted`` / ``state.n_proposed``) run on exact
    draws; the draws do not depend on it.
    """

    log_psi: Callable
    n_sites: int
    total_sz: float | None = None
    chunk_size: int | None = None
    mesh: Any = None
    max_states: int = 2**22
    n_chains: int = 1

    def __post_init__(self):
        if not callable(self.log_psi):
            raise TypeError(f"log_psi must be callable, got {type(self.log_psi).__name__}")
        _check_positive_int("n_sites", self.n_sites)
        _check_positive_int("n_chains", self.n_chains)
        if self.chunk_size is not None:
            _check_positive_int("chunk_size", self.chunk_size)
        n_states = sector_size(self.n_sites, self.total_sz)  # ValueError for a bad sector
        if n_states > self.max_states:
            raise ValueError(
                f"ExactSampler: n_sites={self.n_sites}, total_sz={self.total_sz} has "
                f"{n_states} configurations, more than max_states={self.max_states}"
            )

    def _resolved_mesh(self):
        """The device mesh (as :meth:`MetropolisSampler._resolved_mesh`, which drivers call)."""
        return make_mesh() if self.mesh is None else self.mesh

    def states(self) -> jax.Array:
        """Every configuration of the space, int8 (n_states, n_sites)."""
        return jnp.asarray(all_states(self.n_sites, total_sz=self.total_sz))

    def probabilities(self, params: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(states int8 (n_states, n_sites), log_psi (n_states,), |psi|^2 normalized)."""
        states = self.states()
        mesh = self._resolved_mesh()
        log_psi = chunk_map(
            self.log_psi, in_axes=(None, 0), chunk_size=self.chunk_size, mesh=mesh
        )(params, states)
        log_p = 2.0 * jnp.real(log_psi)
        p = jnp.exp(log_p - jnp.max(log_p))
        return states, log_psi, p / jnp.sum(p)

    def init(self, key: jax.Array, params: Any = None, initial_states: Any = None):
        """The state: the key (the draws depend on it only), zero counts and the chains'
        current configurations, ``initial_states`` (n_chains, n_sites) of the sector when
        given, else random ones (they do not influence the draws)."""
        if initial_states is None:
            # fold_in: the draws stay those of ``key``
            states = random_states(jax.random.fold_in(key, 1), self.n_sites, self.n_chains, self.total_sz)
        else:
            states = _validate_initial_states(initial_states, self.n_chains, self.n_sites, self.total_sz)
        zeros = jnp.zeros((self.n_chains,), jnp.int32)
        return ExactSamplerState(key, states, zeros, zeros)

    def sample(self, state: ExactSamplerState, params: Any, n_samples: int):
        """n_samples independent draws: (samples int8 (n_samples, n_sites),
        log_psi (n_samples,), new state)."""
        n_samples = _check_positive_int("n_samples", n_samples)
        if n_samples % self.n_chains:
            raise ValueError(
                f"n_samples={n_samples} must be a multiple of n_chains={self.n_chains}"
            )
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
