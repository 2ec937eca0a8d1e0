"""The variational Monte Carlo driver.

One step: sample s ~ |psi|^2 -> local energies -> per-sample Jacobian -> a
preconditioned direction (SR / MinSR by default) -> optax update. The step is one
compiled program; :func:`run` loops it with a progress bar, writes ``log.jsonl`` and
atomic checkpoints (:mod:`quantax_lite.driver.checkpoint`), and resumes from them.

Energies are in the Hamiltonian's units (spin-1/2 units for Heisenberg, Pauli
units for the transverse-field Ising model).
"""
from __future__ import annotations

import contextlib
import functools
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from quantax_lite.driver import memory
from quantax_lite.driver import run_folder
from quantax_lite.utils import tuning
from quantax_lite.utils.validate import positive_int
from quantax_lite.driver.checkpoint import checkpoint_path, prune_checkpoints, save_checkpoint
from quantax_lite.driver.draws import draw_samples
from quantax_lite.optimizer.log_derivatives import jacobian
from quantax_lite.models import derivative_form
from quantax_lite.operators.hamiltonian import SpinHamiltonian, make_local_energy
from quantax_lite.optimizer.preconditioners import Preconditioner, sr
from quantax_lite.sampler import Sampler
from quantax_lite.sampler.full_sum import row_local_energies
from quantax_lite.optimizer.stochastic_reconfiguration import unravel_like
from quantax_lite.stats.chains import Stats, exact_statistics, importance_weights, sample_statistics, statistics
from quantax_lite.utils import batch_sharding, limit_blas_threads, mesh_size, replicate, replicated_sharding

__all__ = ["VMC", "VMCState", "ChunkSizes", "Diverged", "energy_estimate", "run"]


class VMCState(NamedTuple):
    """Everything a run needs to continue (a pytree).

    params: the network parameters. opt_state: the optax state.
    sampler: the sampler's state (Markov chains: configurations, cached log psi, PRNG key).
    iteration: int32 scalar, the number of completed steps.
    preconditioner: the preconditioner's state (None for SR; the last direction,
      ``(P,)`` float64, for :func:`~quantax_lite.optimizer.preconditioners.spring`).
    """

    params: Any
    opt_state: Any
    sampler: Any
    iteration: jax.Array
    preconditioner: Any = None


class ChunkSizes(NamedTuple):
    """Samples per device per chunk of the step's two chunked parts (None: all at once)."""

    local_energy: int | None
    jacobian: int | None


def _check_chunk_size(chunk_size, memory_budget) -> None:
    memory.check_chunk_size(chunk_size)
    memory.check_memory_budget(memory_budget)
    memory.check_budget_applies(chunk_size, memory_budget)


def _shape_key(tree) -> tuple:
    """A hashable key of a pytree's structure, shapes and dtypes (arrays or tracers)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return treedef, tuple((tuple(np.shape(x)), str(getattr(x, "dtype", type(x)))) for x in leaves)


def _takes_weights(update: Callable) -> bool:
    """Whether ``update`` accepts a ``weights`` keyword (named, or through ``**kwargs``)."""
    import inspect

    try:
        params = inspect.signature(update).parameters.values()
    except (TypeError, ValueError):  # no signature to read: let the call decide
        return True
    return any(p.name == "weights" or p.kind is p.VAR_KEYWORD for p in params)


@dataclass(frozen=True, eq=False)
class VMC:
    """A ground-state search by variational Monte Carlo.

    hamiltonian: the :class:`~quantax_lite.operators.hamiltonian.SpinHamiltonian`.
    sampler: a :class:`~quantax_lite.sampler.Sampler` (Metropolis, exact draws or exact sums) of the
      wavefunction being optimized: its ``log_psi(params, s) -> (batch,)`` is the one
      wavefunction of the run.
    optimizer: an optax transformation applied to the preconditioned direction (a descent
      direction, used like a gradient: ``optax.sgd(lr)`` gives params - lr * direction).
    n_samples: samples per step (a multiple of ``sampler.n_chains``). With exact sums (a
      sampler with ``exact = True``, :class:`~quantax_lite.sampler.FullSumSampler`) the
      sampler's ``n_rows``, or None for it: the step's energy, variance and natural
      gradient are then exact (errors 0), and the preconditioner gets the rows' weights.
      A sampler of |psi|^(2 power) with power < 1 (``MetropolisSampler(power=...)``): each
      sample weighs |psi|^(2 - 2 power), normalized over the step (self-normalized
      importance sampling), in the energy, its error bar
      (:func:`~quantax_lite.stats.chains.weighted_statistics`) and the preconditioner.
    preconditioner: a :class:`~quantax_lite.optimizer.preconditioners.Preconditioner`; default
      ``sr()`` (SR / MinSR with diagonal shift 1e-4).
    chunk_size: samples per device per chunk for local energies and the Jacobian
      (bounds memory); "auto" (or None, the same): the library's own chunks (see
      :meth:`chunk_sizes`), each at most the largest that fits ``memory_budget``.
    memory_budget: for "auto", bytes per device that each chunked part's compiled program
      may hold (a number > 1), or a fraction of the device's memory (<= 1); None: the
      device's memory (:func:`~quantax_lite.driver.memory.resolve_memory_budget`).
    mesh: the device mesh of every part of the step; default (None) the sampler's.
      Given, it must be the sampler's mesh.

    The speed choices in force when the driver is built (:mod:`quantax_lite.utils.tuning`)
    are those of its compiled step.
    """

    hamiltonian: SpinHamiltonian
    sampler: Sampler
    optimizer: optax.GradientTransformation
    n_samples: int
    preconditioner: Preconditioner | None = None
    chunk_size: int | str | None = "auto"
    mesh: Any = None
    memory_budget: float | None = None

    def __post_init__(self):
        if not isinstance(self.hamiltonian, SpinHamiltonian):
            raise TypeError(f"hamiltonian: expected a SpinHamiltonian, got {type(self.hamiltonian).__name__}.")
        if not isinstance(self.sampler, Sampler):
            raise TypeError(
                f"sampler: expected a Sampler (MetropolisSampler, ExactSampler, ...), got "
                f"{type(self.sampler).__name__}."
            )
        if self.sampler.n_sites != self.hamiltonian.n_sites:
            raise ValueError(
                f"sampler: n_sites={self.sampler.n_sites} does not match the Hamiltonian's "
                f"{self.hamiltonian.n_sites} sites."
            )
        if self.exact:
            rows = self.sampler.n_rows
            if self.n_samples is None:
                object.__setattr__(self, "n_samples", rows)
            elif self.n_samples != rows:
                raise ValueError(f"n_samples: the exact sums of {type(self.sampler).__name__} have {rows} rows "
                                 f"(one per orbit of the sector), got {self.n_samples}; pass None or {rows}.")
        positive_int(self.n_samples, "n_samples")
        if self.n_samples % self.sampler.n_chains:
            raise ValueError(
                f"n_samples: {self.n_samples} is not a multiple of the number of chains "
                f"({self.sampler.n_chains})."
            )
        _check_chunk_size(self.chunk_size, self.memory_budget)
        if self.preconditioner is None:
            object.__setattr__(self, "preconditioner", sr())
        elif not isinstance(self.preconditioner, Preconditioner):
            raise TypeError(
                f"preconditioner: expected a Preconditioner (sr(), spring(sr(), 0.9), gradient(), ...), "
                f"got {type(self.preconditioner).__name__}."
            )
        if self.exact and not _takes_weights(self.preconditioner.update):
            raise TypeError("preconditioner: exact sums pass `weights` (the rows' probabilities) to its update, "
                            "which does not take them; use sr(), spring(sr(), mu), gradient() or add a "
                            "`weights=None` keyword.")
        if self.sampling_power != 1.0 and not _takes_weights(self.preconditioner.update):
            raise TypeError(f"preconditioner: samples of |psi|^(2 power) (power {self.sampling_power:g}) pass "
                            "`weights` to its update, which does not take them; use sr(), spring(sr(), mu), "
                            "gradient() or add a `weights=None` keyword.")
        if self.mesh is not None and self.sampler.mesh is not None and self.mesh != self.sampler.mesh:
            raise ValueError(
                "mesh: the driver's mesh differs from its sampler's; the samples live on the "
                "sampler's devices, so pass the same mesh to both (or leave VMC's mesh None)."
            )
        object.__setattr__(self, "_tuning", tuning.current())
        object.__setattr__(self, "_chosen", {})  # (part, params key, n_samples) -> chunk
        object.__setattr__(self, "_built", {})  # ("local_energy", chunk) / ("step", ChunkSizes) -> function

    @property
    def exact(self) -> bool:
        """Whether the sampler gives exact sums (rows with weights, e.g.
        :class:`~quantax_lite.sampler.FullSumSampler`) instead of samples."""
        return bool(getattr(self.sampler, "exact", False))

    @property
    def sampling_power(self) -> float:
        """The power ``a`` of the sampled |psi|^(2a) (1: |psi|^2; a sampler's ``power``)."""
        return float(getattr(self.sampler, "power", 1.0))

    @functools.cached_property
    def _hamiltonian_rows(self):
        """With exact sums over a sampler that offers it, H within its rows (the local
        energies from psi on the rows alone, ``FullSumSampler.hamiltonian_rows``); else None."""
        if not self.exact or not hasattr(self.sampler, "hamiltonian_rows"):
            return None
        return self.sampler.hamiltonian_rows(self.hamiltonian)  # numpy: constants of the compiled step

    def _row_or_local_energies(self, local_energies, params, samples, log_psi_s):
        """The local energies of a step's samples or rows: with H within the rows
        (:attr:`_hamiltonian_rows`) from psi on the rows alone, so that the energy is a
        quadratic form in those values (variational whatever their rounding); else
        ``local_energies`` (the network on every connected configuration)."""
        if self._hamiltonian_rows is not None:
            index, values = self._hamiltonian_rows
            # numpy constants, cast on the host: no float64 in the program where it is forbidden
            return row_local_energies(index, np.asarray(values, tuning.wide_dtype(values.dtype)), log_psi_s)
        return local_energies(params, samples, log_psi_s)

    @property
    def log_psi(self) -> Callable:
        """The wavefunction ``log_psi(params, s) -> (batch,)`` (the sampler's)."""
        return self.sampler.log_psi

    @functools.cached_property
    def device_mesh(self):
        """The one mesh of the step: the sampler's (``make_mesh()`` when it has none)."""
        if self.mesh is not None and self.sampler.mesh is None:
            return self.mesh
        return self.sampler.resolved_mesh()

    # -- state -------------------------------------------------------------------

    def init(self, key: jax.Array, params: Any) -> VMCState:
        """A fresh state: optimizer and preconditioner states, new chains, iteration 0."""
        mesh = self.device_mesh
        params = replicate(params, mesh)
        return VMCState(
            params=params,
            opt_state=replicate(self.optimizer.init(params), mesh),
            sampler=self.sampler.init(key, params),
            iteration=replicate(jnp.zeros((), jnp.int32), mesh),
            preconditioner=replicate(self.preconditioner.init(params), mesh),
        )

    # -- one step ----------------------------------------------------------------

    @property
    def auto_chunks(self) -> bool:
        """Whether the chunks are the library's (``chunk_size`` "auto" or None)."""
        return not isinstance(self.chunk_size, (int, np.integer))

    @property
    def local_energy_chunk_size(self) -> int | None:
        """The preferred local-energy chunk: an int ``chunk_size``; for "auto", about
        ``tuning.local_energy_rows`` connected configurations per chunk (None there: all
        samples of a device at once). "auto" uses it unless it does not fit the
        memory budget (:meth:`chunk_sizes`)."""
        if not self.auto_chunks:
            return self.chunk_size
        rows = self._tuning.local_energy_rows
        return None if rows is None else max(1, rows // self.hamiltonian.max_conn)

    @functools.cached_property
    def memory_budget_bytes(self) -> int:
        """The budget of "auto" in bytes per device: ``memory_budget`` resolved on this process's
        first device of the mesh; in a multi-process run the smallest of the processes' (a
        collective: every process must choose the same chunks)."""
        mine = [d for d in self.device_mesh.devices.flat if d.process_index == jax.process_index()]
        budget = memory.resolve_memory_budget(self.memory_budget, mine[0] if mine else None)
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            budget = int(np.min(multihost_utils.process_allgather(np.float64(budget))))
        return budget

    def chunk_sizes(self, params: Any, n_samples: int | None = None) -> ChunkSizes:
        """The chunks of the step's local energies and Jacobian for ``params`` (a pytree of
        arrays, or of ``jax.ShapeDtypeStruct``) and ``n_samples`` (default the step's).

        An int ``chunk_size`` is both. "auto": each part's preferred chunk (local energies:
        :attr:`local_energy_chunk_size`; the Jacobian: None, all samples of a device at
        once) when its program fits :attr:`memory_budget_bytes`, else the largest that
        does of the powers of two below it (``memory.largest_fitting_chunk``: the part's
        whole chunked program, ``chunk_map`` over the per-device batch, compiled on the
        driver's mesh and not run). Chosen once per parameter shapes and ``n_samples``; a
        budget too small for one sample per chunk raises ``MemoryBudgetError`` (a
        ``ValueError`` naming ``memory_budget``).
        """
        n = self.n_samples if n_samples is None else positive_int(n_samples, "n_samples")
        return ChunkSizes(self._chunk("local_energy", params, n), self._chunk("jacobian", params, n))

    def _chunk(self, part: str, params, n: int) -> int | None:
        """The chunk of ``part`` ("local_energy" or "jacobian") for ``params`` and ``n`` samples."""
        if not self.auto_chunks:
            return self.chunk_size
        key = (part, _shape_key(params), n)
        if key not in self._chosen:
            rows = -(-n // mesh_size(self.device_mesh))
            preferred = _even_chunk(self.local_energy_chunk_size, rows) if part == "local_energy" else None
            candidates = memory.chunk_candidates(rows, preferred)
            what = "local energies" if part == "local_energy" else "the Jacobian"
            chosen = memory.largest_fitting_chunk(
                lambda c: self._compile_part(part, c, params, n), candidates, self.memory_budget_bytes, what=what
            )
            self._chosen[key] = preferred if chosen == candidates[-1] else chosen
        return self._chosen[key]

    def _compile_part(self, part: str, chunk: int | None, params, n: int):
        """The compiled (not run) program of ``part`` at ``chunk`` for ``n`` samples, on the mesh."""
        mesh = self.device_mesh
        spec = lambda shape, dtype, sharding: jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)  # noqa: E731
        p = jax.tree_util.tree_map(lambda x: spec(np.shape(x), x.dtype, replicated_sharding(mesh)), params)
        split = n % mesh_size(mesh) == 0  # the sampler's batches are; else one copy per device
        rows = lambda ndim: batch_sharding(mesh, ndim) if split else replicated_sharding(mesh)  # noqa: E731
        s = spec((n, self.hamiltonian.n_sites), jnp.int8, rows(2))
        with tuning.using(self._tuning):
            if part == "jacobian":
                differentiate = derivative_form(self.log_psi)
                fn = jax.jit(lambda q, x: jacobian(differentiate, q, x, chunk_size=chunk, mesh=mesh))
                return fn.lower(p, s).compile()
            log_psi_s = jax.eval_shape(self.log_psi, p, s)
            lp = spec(log_psi_s.shape, log_psi_s.dtype, rows(1))
            return jax.jit(self._local_energy_fn(chunk)).lower(p, s, lp).compile()

    def _local_energy_fn(self, chunk: int | None) -> Callable:
        key = ("local_energy", chunk)
        if key not in self._built:
            with tuning.using(self._tuning):
                self._built[key] = make_local_energy(
                    self.hamiltonian, self.log_psi, chunk_size=chunk, jit=False, mesh=self.device_mesh,
                )
        return self._built[key]

    @functools.cached_property
    def local_energies(self) -> Callable:
        """``f(params, samples, log_psi_samples=None) -> (batch,)`` local energies, the
        driver's own (chunked and sharded as in its step, :meth:`chunk_sizes`; jittable)."""

        def local_energies(params, samples, log_psi_samples=None):
            n = np.shape(samples)[0] if np.ndim(samples) else 0
            chunk = self._chunk("local_energy", params, n) if n else self.local_energy_chunk_size
            return self._local_energy_fn(chunk)(params, samples, log_psi_samples)

        return local_energies

    @functools.cached_property
    def step(self) -> Callable[[VMCState], tuple[VMCState, dict]]:
        """The step: ``state -> (new_state, metrics)``, one compiled program (``jax.jit``)
        per choice of chunks (:meth:`chunk_sizes`).

        metrics (jax scalars): energy (complex mean), energy_error, variance, tau,
        r_hat, acceptance, step_norm, sr_fallback; the energy is that of the
        parameters before the update; finite_energy, finite_direction, finite_params
        (bools: energy and variance, the direction, the updated parameters).

        With "auto", the first step of a parameter shape compiles the whole step at the
        preferred chunks: if that program fits the budget, so does each part in it, and
        that compilation is the one the step runs (no other program is compiled);
        otherwise each part's chunk is chosen alone (:meth:`chunk_sizes`).

        On several CPU devices each call waits for its step to finish: XLA's CPU
        collectives of two steps in flight at once can wait on each other for ever
        (measured: a loop of exact-sum steps on 8 simulated devices of a 2-core host hung
        within 1500 steps). Elsewhere steps are dispatched asynchronously.
        """
        wait = jax.default_backend() == "cpu" and mesh_size(self.device_mesh) > 1

        def step(state: VMCState):
            if not self.auto_chunks:
                sizes = ChunkSizes(self.chunk_size, self.chunk_size)
            else:
                sizes = self._step_chunk_sizes(state)
            out = self._step_fn(sizes)(state)
            concrete = not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(state))
            return jax.block_until_ready(out) if wait and concrete else out

        return step

    def step_program(self, state: VMCState):
        """The jitted program :attr:`step` runs for ``state`` (its chunks chosen as the step
        chooses them; after a step of these shapes, the same compiled program): read its
        cost or memory with ``.lower(state).compile()`` (``cost_analysis()``,
        ``memory_analysis()``), or its jaxpr with ``.trace(state)``."""
        sizes = self._step_chunk_sizes(state) if self.auto_chunks else ChunkSizes(self.chunk_size, self.chunk_size)
        return self._step_fn(sizes)

    def _step_chunk_sizes(self, state: VMCState) -> ChunkSizes:
        """The step's chunks: the preferred ones when the whole step compiled with them fits
        the budget (checked once per parameter shapes), else :meth:`chunk_sizes`."""
        keys = [(part, _shape_key(state.params), self.n_samples) for part in ("local_energy", "jacobian")]
        if all(k in self._chosen for k in keys):  # every step after the first
            return ChunkSizes(*(self._chosen[k] for k in keys))
        concrete = not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(state))
        if concrete and not any(k in self._chosen for k in keys):
            rows = -(-self.n_samples // mesh_size(self.device_mesh))
            preferred = ChunkSizes(_even_chunk(self.local_energy_chunk_size, rows), None)
            compiled = self._step_fn(preferred).lower(state).compile()  # the jit call reuses it
            if memory.program_bytes(compiled) <= self.memory_budget_bytes:
                self._chosen.update(zip(keys, preferred))
        return self.chunk_sizes(state.params)

    def _step_fn(self, sizes: ChunkSizes) -> Callable:
        """The jitted step with the chunks ``sizes``."""
        key = ("step", sizes)
        if key in self._built:
            return self._built[key]
        mesh = self.device_mesh
        self._hamiltonian_rows  # noqa: B018  (made now, not inside the trace: a generic to_sparse runs jax)
        differentiate = derivative_form(self.log_psi)
        local_energies = self._local_energy_fn(sizes.local_energy)

        def step(state: VMCState):
            params = state.params
            if self.exact:  # every row, with its weight
                samples, log_psi_s, weights = self.sampler.probabilities(params)
                chains = state.sampler
            else:
                samples, log_psi_s, chains = self.sampler.sample(state.sampler, params, self.n_samples)
                # samples of |psi|^(2 power), power < 1: importance weights |psi|^(2 - 2 power)
                weights = importance_weights(log_psi_s, self.sampling_power) if self.sampling_power != 1.0 else None
            e_loc = self._row_or_local_energies(local_energies, params, samples, log_psi_s)
            jac = jacobian(differentiate, params, samples, chunk_size=sizes.jacobian, mesh=mesh)
            exact = {} if weights is None else {"weights": weights}
            direction, precond, info = self.preconditioner.update(
                jac, e_loc, state.preconditioner, step=state.iteration, mesh=mesh, **exact
            )
            updates, opt_state = self.optimizer.update(unravel_like(direction, params), state.opt_state, params)
            params = optax.apply_updates(params, updates)
            stats = sample_statistics(e_loc, self.sampler.n_chains, weights, exact=self.exact)
            wide = tuning.wide_dtype()
            metrics = dict(
                effective_samples=_effective_fraction(weights, self.exact, wide),
                energy=stats.mean, energy_error=stats.error_of_mean, variance=stats.variance,
                tau=stats.tau, r_hat=stats.r_hat,
                acceptance=jnp.sum(chains.n_accepted).astype(wide) / jnp.maximum(jnp.sum(chains.n_proposed), 1).astype(wide),
                step_norm=jnp.linalg.norm(direction),
                sr_fallback=jnp.asarray(info.get("sr_fallback", False)),
                finite_energy=jnp.isfinite(stats.mean) & jnp.isfinite(stats.variance),
                finite_direction=jnp.all(jnp.isfinite(direction)),
                finite_params=jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(params)])),
            )
            return VMCState(params, opt_state, chains, state.iteration + 1, precond), metrics

        def traced(state):
            with tuning.using(self._tuning):  # the driver's speed choices, at trace time
                return step(state)

        self._built[key] = jax.jit(traced)
        return self._built[key]


def _even_chunk(chunk: int | None, rows: int) -> int | None:
    """``chunk`` shrunk to split ``rows`` into as many chunks of (nearly) equal size: the
    last chunk, padded to the chunk size, then wastes at most one row per chunk."""
    if chunk is None or chunk >= rows:
        return chunk
    n_chunks = -(-rows // chunk)
    return -(-rows // n_chunks)


def energy_estimate(vmc: VMC, state: VMCState, n_samples: int | None = None) -> tuple[Stats, VMCState]:
    """The energy of ``state.params`` from fresh samples (the chains continue).

    n_samples: default ``4 * vmc.n_samples``; a multiple of ``vmc.n_samples`` when larger
      (drawn in blocks of a step's size, so the memory is that of a training step).
    Returns the :class:`~quantax_lite.stats.chains.Stats` of the local energies and the
    state with the advanced chains.
    """
    if vmc.exact:  # exact sums, as the step makes them: n_samples does not apply, the error is 0
        samples, log_psi_s, weights = vmc.sampler.probabilities(state.params)
        e_loc = vmc._row_or_local_energies(vmc.local_energies, state.params, samples, log_psi_s)
        return exact_statistics(e_loc, weights), state
    n_samples = 4 * vmc.n_samples if n_samples is None else n_samples
    # in blocks of at most a step's samples (the memory of a training step), consecutive
    # stretches of the same chains
    _, _, e_loc, chains = draw_samples(vmc, state.sampler, state.params, n_samples)
    stats = statistics(e_loc)
    return stats, state._replace(sampler=chains)


# --------------------------------------------------------------------------- #
# the run loop                                                                 #
# --------------------------------------------------------------------------- #


class Diverged(RuntimeError):
    """A step produced a non-finite energy, direction or parameters.

    The state it would have produced is discarded. Attributes: ``iteration`` (the step
    that failed, 1-based), ``what`` (which quantity), ``state`` (the last good state),
    ``records`` (this call's log records, all finite).
    """

    def __init__(self, iteration: int, what: str, state, records):
        self.iteration, self.what, self.state, self.records = iteration, what, state, records
        super().__init__(
            f"step {iteration}: the {what} became non-finite; the run stopped and its last good "
            "checkpoint is kept. Likely cause: a step too large for this state: lower the "
            "learning rate or raise the SR diagonal shift."
        )


def _effective_fraction(weights, exact: bool, dtype) -> jax.Array:
    """Kish's effective sample size over the sample count, 1 / (n sum w^2) for the step's
    normalized importance ``weights`` (n,): 1 for plain samples of |psi|^2, NaN for exact sums."""
    if exact:
        return jnp.asarray(jnp.nan, dtype)
    if weights is None:
        return jnp.asarray(1.0, dtype)
    w = weights.astype(dtype)
    return 1.0 / (w.shape[0] * jnp.sum(w * w))


def _finite_or_none(x) -> float | None:
    """A float, or None (JSON null) where it is not finite (e.g. R-hat of one sample per chain)."""
    x = float(x)
    return x if np.isfinite(x) else None


def metrics_to_record(metrics: dict, iteration: int, n_sites: int, wall_time: float) -> dict:
    """One ``log.jsonl`` line: plain Python numbers, null where a value is not finite
    (``r_hat``, ``tau`` when undefined, e.g. R-hat with fewer than 4 samples per chain)."""
    m = jax.device_get(metrics)
    energy = complex(m["energy"])
    return {
        "iteration": iteration,
        "energy": _finite_or_none(energy.real),
        "energy_imag": _finite_or_none(energy.imag),
        "energy_error": _finite_or_none(m["energy_error"]),
        "variance": _finite_or_none(m["variance"]),
        "energy_per_site": _finite_or_none(energy.real / n_sites),
        "acceptance": float(m["acceptance"]),
        "r_hat": _finite_or_none(m["r_hat"]),
        "tau": _finite_or_none(m["tau"]),
        "step_norm": _finite_or_none(m["step_norm"]),
        "effective_samples": _finite_or_none(m["effective_samples"]),
        "sr_fallback": bool(m["sr_fallback"]),
        "wall_time_s": wall_time,
    }


def _non_finite(metrics: dict) -> str | None:
    """Which quantity of a step went non-finite, or None."""
    m = jax.device_get({k: metrics[k] for k in ("finite_energy", "finite_direction", "finite_params")})
    for key, what in (("finite_energy", "energy"), ("finite_direction", "SR direction"),
                      ("finite_params", "parameters")):
        if not bool(m[key]):
            return what
    return None


def run(
    vmc: VMC,
    state: VMCState,
    n_iter: int,
    *,
    out_dir: str | os.PathLike | None = None,
    checkpoint_every: int = 50,
    keep_checkpoints: int = 3,
    progress: bool = True,
    callbacks: Sequence[Callable[[dict, VMCState], bool | None]] = (),
    metadata: dict | None = None,
    overwrite: bool = False,
    lock: bool = True,
    time_offset: float = 0.0,
) -> tuple[VMCState, list[dict]]:
    """Run steps until ``state.iteration == n_iter``.

    out_dir: where ``log.jsonl`` (one strict-JSON object per step) and the checkpoints
      ``checkpoint-<iteration>.npz`` go; only process 0 writes. On a resumed state, log
      lines past its iteration are dropped first, so the log matches the trajectory. A
      fresh state (iteration 0) on a folder whose log holds steps raises ``ValueError``
      unless ``overwrite=True`` (which deletes that run's log and checkpoints).
    checkpoint_every: steps between checkpoints (0: only at the end).
    keep_checkpoints: how many of the newest checkpoints are kept (>= 1).
    progress: show a tqdm bar with energy ± error, variance, acceptance and R-hat.
    callbacks: ``callback(record, state)`` after every step; returning True stops
      the run (after a checkpoint).
    lock: hold the folder's lock (:func:`quantax_lite.driver.run_folder.lock_run_folder`) while
      running; False when the caller holds it already.
    time_offset: seconds added to every record's ``wall_time_s`` (e.g. the time the
      earlier stages of the same run took), so the log's times continue.

    A step whose energy, SR direction or parameters are not finite is not taken: the
    run raises :class:`Diverged` (nothing of that step is logged or checkpointed).

    On CPUs the BLAS/LAPACK thread pools are limited while the loop runs (see
    :func:`quantax_lite.utils.limit_blas_threads`; ``tuning.blas_threads``).

    Returns the final state and this call's log records.
    """
    positive_int(keep_checkpoints, "keep_checkpoints")
    positive_int(checkpoint_every, "checkpoint_every", minimum=0)
    writer = jax.process_index() == 0 and out_dir is not None
    held = run_folder.lock_run_folder(out_dir) if writer and lock else contextlib.nullcontext()
    with held:
        return _run(vmc, state, n_iter, out_dir, checkpoint_every, keep_checkpoints, progress,
                    callbacks, metadata, overwrite, writer, time_offset)


def _prepare_folder(out_dir, start: int, overwrite: bool) -> str:
    """Make the log match a run that continues from iteration ``start``; returns its path."""
    log_path = os.path.join(os.fspath(out_dir), run_folder.LOG_NAME)
    run_folder.remove_temporaries(out_dir)
    if start == 0:
        logged = run_folder.read_log(log_path) if os.path.exists(log_path) else []
        if logged and not overwrite:
            raise ValueError(
                f"out_dir: {out_dir} holds another run's log ({len(logged)} steps); continue it "
                "from its checkpoint (load_latest_checkpoint) or pass overwrite=True to replace it."
            )
        if overwrite:
            run_folder.clear_run(out_dir)
    run_folder.truncate_log(log_path, start)
    return log_path


def _run(vmc, state, n_iter, out_dir, checkpoint_every, keep, progress, callbacks, metadata, overwrite, writer,
         time_offset=0.0):
    from tqdm.auto import tqdm

    start = int(state.iteration)
    log_path = None
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        if writer:
            log_path = _prepare_folder(out_dir, start, overwrite)
    n_sites = vmc.hamiltonian.n_sites
    records = []
    bar = tqdm(total=n_iter, initial=start, disable=not progress or jax.process_index() != 0,
               desc="VMC", dynamic_ncols=True)
    t0 = time.perf_counter() - time_offset
    blas = limit_blas_threads(vmc._tuning.blas_threads)
    try:
        while int(state.iteration) < n_iter:
            new, metrics = vmc.step(state)
            it = int(new.iteration)
            bad = _non_finite(metrics)
            if bad is not None:
                raise Diverged(it, bad, state, records)
            state = new
            rec = metrics_to_record(metrics, it, n_sites, time.perf_counter() - t0)
            records.append(rec)
            if log_path is not None:
                run_folder.append_log(log_path, rec)
            r_hat = "" if rec["r_hat"] is None else f" R̂={rec['r_hat']:.3f}"
            bar.set_postfix_str(
                f"E={rec['energy']:.6f}±{rec['energy_error']:.1e} σ²={rec['variance']:.1e} "
                f"acc={rec['acceptance']:.2f}{r_hat}"
            )
            bar.update(1)
            stop = any(bool(cb(rec, state)) for cb in callbacks)
            if out_dir is not None and (
                (checkpoint_every and it % checkpoint_every == 0) or it == n_iter or stop
            ):
                save_checkpoint(checkpoint_path(out_dir, it), state, metadata)
                if writer:
                    prune_checkpoints(out_dir, keep)
            if stop:
                break
    finally:
        blas.restore_original_limits()
        bar.close()
    return state, records
