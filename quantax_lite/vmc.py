"""The variational Monte Carlo driver.

One step: sample s ~ |psi|^2 -> local energies -> per-sample Jacobian -> a
preconditioned direction (SR / MinSR by default) -> optax update. The step is one
compiled program; :func:`run` loops it with a progress bar, writes ``log.jsonl`` and
atomic checkpoints, and resumes from them.

Energies are in the Hamiltonian's units (spin-1/2 units for Heisenberg, Pauli
units for the transverse-field Ising model).
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import pickle
import shutil
import time
import warnings
import zipfile
import zlib
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import run_folder, tuning
from ._validate import positive_int
from .jacobian import jacobian
from .models import derivative_form
from .operators import SpinHamiltonian, make_local_energy
from .preconditioners import Preconditioner, sr
from .sampler import Sampler, per_chain
from .sr import unravel_like
from .stats import Stats, statistics
from .utils import limit_blas_threads, replicate

__all__ = [
    "VMC", "VMCState", "Diverged", "energy_estimate", "run", "save_checkpoint", "load_checkpoint",
    "read_checkpoint_metadata", "load_latest_checkpoint", "newest_readable_checkpoint", "clear_run",
]


class VMCState(NamedTuple):
    """Everything a run needs to continue (a pytree).

    params: the network parameters. opt_state: the optax state.
    sampler: the sampler's state (Markov chains: configurations, cached log psi, PRNG key).
    iteration: int32 scalar, the number of completed steps.
    preconditioner: the preconditioner's state (None for SR; the last direction,
      ``(P,)`` float64, for :func:`~quantax_lite.preconditioners.spring`).
    """

    params: Any
    opt_state: Any
    sampler: Any
    iteration: jax.Array
    preconditioner: Any = None


@dataclass(frozen=True, eq=False)
class VMC:
    """A ground-state search by variational Monte Carlo.

    hamiltonian: the :class:`~quantax_lite.operators.SpinHamiltonian`.
    sampler: a :class:`~quantax_lite.sampler.Sampler` (Metropolis or exact) of the
      wavefunction being optimized: its ``log_psi(params, s) -> (batch,)`` is the one
      wavefunction of the run.
    optimizer: an optax transformation applied to the preconditioned direction (a descent
      direction, used like a gradient: ``optax.sgd(lr)`` gives params - lr * direction).
    n_samples: samples per step (a multiple of ``sampler.n_chains``).
    preconditioner: a :class:`~quantax_lite.preconditioners.Preconditioner`; default
      ``sr()`` (SR / MinSR with diagonal shift 1e-4).
    chunk_size: samples per device per chunk for local energies and the Jacobian
      (bounds memory); None: the library chooses.
    mesh: the device mesh of every part of the step; default (None) the sampler's.
      Given, it must be the sampler's mesh.

    The speed choices in force when the driver is built (:mod:`quantax_lite.tuning`)
    are those of its compiled step.
    """

    hamiltonian: SpinHamiltonian
    sampler: Sampler
    optimizer: optax.GradientTransformation
    n_samples: int
    preconditioner: Preconditioner | None = None
    chunk_size: int | None = None
    mesh: Any = None

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
        positive_int(self.n_samples, "n_samples")
        if self.n_samples % self.sampler.n_chains:
            raise ValueError(
                f"n_samples: {self.n_samples} is not a multiple of the number of chains "
                f"({self.sampler.n_chains})."
            )
        if self.chunk_size is not None:
            positive_int(self.chunk_size, "chunk_size")
        if self.preconditioner is None:
            object.__setattr__(self, "preconditioner", sr())
        elif not isinstance(self.preconditioner, Preconditioner):
            raise TypeError(
                f"preconditioner: expected a Preconditioner (sr(), spring(sr(), 0.9), gradient(), ...), "
                f"got {type(self.preconditioner).__name__}."
            )
        if self.mesh is not None and self.sampler.mesh is not None and self.mesh != self.sampler.mesh:
            raise ValueError(
                "mesh: the driver's mesh differs from its sampler's; the samples live on the "
                "sampler's devices, so pass the same mesh to both (or leave VMC's mesh None)."
            )
        object.__setattr__(self, "_tuning", tuning.current())

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
    def local_energy_chunk_size(self) -> int | None:
        """Samples per device per local-energy chunk: ``chunk_size``, or on CPUs about
        ``tuning.local_energy_rows`` connected configurations per chunk."""
        if self.chunk_size is not None or jax.default_backend() != "cpu":
            return self.chunk_size
        return max(1, self._tuning.local_energy_rows // self.hamiltonian.max_conn)

    @functools.cached_property
    def local_energies(self) -> Callable:
        """``f(params, samples, log_psi_samples=None) -> (batch,)`` local energies, the
        driver's own (chunked and sharded as in its step; jittable)."""
        with tuning.using(self._tuning):
            return make_local_energy(
                self.hamiltonian, self.log_psi, chunk_size=self.local_energy_chunk_size, jit=False,
                mesh=self.device_mesh,
            )

    @functools.cached_property
    def step(self) -> Callable[[VMCState], tuple[VMCState, dict]]:
        """The compiled step: ``state -> (new_state, metrics)``.

        metrics (jax scalars): energy (complex mean), energy_error, variance, tau,
        r_hat, acceptance, step_norm, sr_fallback; the energy is that of the
        parameters before the update; finite_energy, finite_direction, finite_params
        (bools: energy and variance, the direction, the updated parameters).
        """
        mesh = self.device_mesh
        differentiate = derivative_form(self.log_psi)

        def step(state: VMCState):
            params = state.params
            samples, log_psi_s, chains = self.sampler.sample(state.sampler, params, self.n_samples)
            e_loc = self.local_energies(params, samples, log_psi_s)
            jac = jacobian(differentiate, params, samples, chunk_size=self.chunk_size, mesh=mesh)
            direction, precond, info = self.preconditioner.update(
                jac, e_loc, state.preconditioner, step=state.iteration, mesh=mesh
            )
            updates, opt_state = self.optimizer.update(unravel_like(direction, params), state.opt_state, params)
            params = optax.apply_updates(params, updates)
            stats = statistics(per_chain(e_loc, self.sampler.n_chains))
            metrics = dict(
                energy=stats.mean, energy_error=stats.error_of_mean, variance=stats.variance,
                tau=stats.tau, r_hat=stats.r_hat,
                acceptance=jnp.sum(chains.n_accepted) / jnp.maximum(jnp.sum(chains.n_proposed), 1),
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

        return jax.jit(traced)


def energy_estimate(vmc: VMC, state: VMCState, n_samples: int | None = None) -> tuple[Stats, VMCState]:
    """The energy of ``state.params`` from fresh samples (the chains continue).

    n_samples: default ``4 * vmc.n_samples``; a multiple of ``vmc.n_samples`` when larger
      (drawn in blocks of a step's size, so the memory is that of a training step).
    Returns the :class:`~quantax_lite.stats.Stats` of the local energies and the
    state with the advanced chains.
    """
    n_samples = 4 * vmc.n_samples if n_samples is None else n_samples
    # Sampled in blocks of at most vmc.n_samples, so memory stays that of a training step;
    # the blocks are consecutive stretches of the same chains.
    block = min(n_samples, vmc.n_samples)
    if n_samples % block:
        raise ValueError(f"n_samples={n_samples} must be a multiple of the step's {block} samples.")
    chains, series = state.sampler, []
    for _ in range(n_samples // block):
        samples, log_psi_s, chains = vmc.sampler.sample(chains, state.params, block)
        e_loc = vmc.local_energies(state.params, samples, log_psi_s)
        series.append(per_chain(e_loc, vmc.sampler.n_chains))
    stats = statistics(jnp.concatenate(series, axis=1))
    return stats, state._replace(sampler=chains)


# --------------------------------------------------------------------------- #
# checkpoints                                                                  #
# --------------------------------------------------------------------------- #


def _gather_leaves(tree) -> list[np.ndarray]:
    """Every leaf as a full numpy array on every process (collective in multi-process runs)."""
    leaves = jax.tree_util.tree_leaves(tree)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        return [np.asarray(multihost_utils.process_allgather(x, tiled=True)) for x in leaves]
    return [np.asarray(jax.device_get(x)) for x in leaves]


def _key_data(tree):
    """Typed PRNG keys as raw uint32 data, so they can be written to disk."""
    return jax.tree_util.tree_map(
        lambda x: jax.random.key_data(x) if jnp.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key) else x,
        tree,
    )


def save_checkpoint(path: str | os.PathLike, state: VMCState, metadata: dict | None = None) -> None:
    """Write ``state`` to ``path`` (an .npz file) atomically: write a temporary file, then rename.

    In a multi-process run every process must call this (the arrays are gathered);
    only process 0 writes. A run killed at any moment leaves either the old or the new
    checkpoint, never a broken one.
    """
    leaves = _gather_leaves(_key_data(state))
    if jax.process_index() != 0:
        return
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    arrays = {f"leaf_{i:05d}": leaf for i, leaf in enumerate(leaves)}
    arrays["metadata"] = np.frombuffer(json.dumps(metadata or {}).encode(), dtype=np.uint8)
    with open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


# What reading a damaged checkpoint raises: a truncated or overwritten zip archive, or
# another file in its place (np.load then tries .npy / pickle and raises ValueError).
_DAMAGED = (
    zipfile.BadZipFile, zlib.error, EOFError, OSError, KeyError, ValueError, TypeError, AttributeError,
    pickle.UnpicklingError,
)


def read_checkpoint_metadata(path: str | os.PathLike) -> dict:
    """The metadata dict of a checkpoint, without reading its arrays."""
    with open(os.fspath(path), "rb") as fh, np.load(fh) as data:
        return json.loads(bytes(data["metadata"]).decode()) if "metadata" in data.files else {}


def load_checkpoint(path: str | os.PathLike, template: VMCState) -> tuple[VMCState, dict]:
    """Read a checkpoint written by :func:`save_checkpoint` into the structure of ``template``.

    ``template`` is a freshly initialized state of the same run (same model, sampler and
    optimizer): it gives the pytree structure, dtypes and shardings.
    Returns the state and the metadata dict. A damaged file raises what reading it
    raises (e.g. ``zipfile.BadZipFile``); a checkpoint of another run, ``ValueError``.
    """
    loaded, metadata = _read_checkpoint(path)
    return _into_template(path, loaded, template), metadata


def _read_checkpoint(path) -> tuple[list[np.ndarray], dict]:
    """The arrays and metadata of a checkpoint file (raises one of ``_DAMAGED`` if damaged)."""
    with open(os.fspath(path), "rb") as fh, np.load(fh) as data:
        names = sorted(k for k in data.files if k.startswith("leaf_"))
        loaded = [data[k] for k in names]
        metadata = json.loads(bytes(data["metadata"]).decode()) if "metadata" in data.files else {}
    return loaded, metadata


def _into_template(path, loaded: list[np.ndarray], template: VMCState) -> VMCState:
    """Arrays read from ``path`` as a state shaped, typed and sharded like ``template``."""
    leaves, treedef = jax.tree_util.tree_flatten(template)
    if len(leaves) != len(loaded):
        raise ValueError(
            f"load_checkpoint: {path} holds {len(loaded)} arrays, but this run's state has "
            f"{len(leaves)}: it was written by a different model, sampler or optimizer."
        )
    out = []
    for i, (t, x) in enumerate(zip(leaves, loaded)):
        is_key = jnp.issubdtype(t.dtype, jax.dtypes.prng_key)
        want = jax.random.key_data(t) if is_key else t
        if x.shape != want.shape or x.dtype != want.dtype:
            raise ValueError(
                f"load_checkpoint: array {i} of {path} has shape {x.shape} and dtype {x.dtype}, "
                f"expected {want.shape} {want.dtype}: a different run's checkpoint."
            )
        if jax.process_count() > 1:
            sharding = t.sharding
            arr = jax.make_array_from_callback(x.shape, sharding, lambda idx, x=x: x[idx])
        else:
            arr = jax.device_put(x, t.sharding)
        out.append(jax.random.wrap_key_data(arr, impl=jax.random.key_impl(t)) if is_key else arr)
    return jax.tree_util.tree_unflatten(treedef, out)


def newest_readable_checkpoint(out_dir: str | os.PathLike) -> tuple[str, dict] | None:
    """The newest checkpoint of ``out_dir`` whose metadata reads, and that metadata.

    Damaged newer ones are skipped with a warning; None when there is none.
    """
    for path in run_folder.list_checkpoints(out_dir):
        try:
            return path, read_checkpoint_metadata(path)
        except _DAMAGED as err:
            warnings.warn(f"{path} is damaged ({type(err).__name__}: {err}); trying an older checkpoint.",
                          stacklevel=2)
    return None


def load_latest_checkpoint(out_dir: str | os.PathLike, template: VMCState) -> tuple[VMCState, dict, str]:
    """The newest checkpoint of ``out_dir`` that reads, into the structure of ``template``.

    A damaged checkpoint (truncated, overwritten) is skipped with a warning and the
    previous one is used. Returns (state, metadata, path). Raises ``FileNotFoundError``
    when the folder holds no readable checkpoint.
    """
    tried = run_folder.list_checkpoints(out_dir)
    for path in tried:
        try:
            loaded, meta = _read_checkpoint(path)
        except _DAMAGED as err:
            warnings.warn(f"{path} is damaged ({type(err).__name__}: {err}); trying an older checkpoint.",
                          stacklevel=2)
            continue
        return _into_template(path, loaded, template), meta, path
    what = "no checkpoint" if not tried else f"no readable checkpoint ({len(tried)} damaged)"
    raise FileNotFoundError(f"{out_dir} holds {what}.")


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
    lock: hold the folder's lock (:func:`quantax_lite.run_folder.lock_run_folder`) while
      running; False when the caller holds it already.

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
                    callbacks, metadata, overwrite, writer)


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
            clear_run(out_dir)
    run_folder.truncate_log(log_path, start)
    return log_path


def clear_run(out_dir: str | os.PathLike) -> None:
    """Delete a run's files from its folder (log, checkpoints, summary, plot); other files stay."""
    out_dir = os.fspath(out_dir)
    for path in run_folder.list_checkpoints(out_dir):
        os.remove(path)
    for name in run_folder.RUN_FILES:
        path = os.path.join(out_dir, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)


def _run(vmc, state, n_iter, out_dir, checkpoint_every, keep, progress, callbacks, metadata, overwrite, writer):
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
    t0 = time.perf_counter()
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
                save_checkpoint(run_folder.checkpoint_path(out_dir, it), state, metadata)
                if writer:
                    run_folder.prune_checkpoints(out_dir, keep)
            if stop:
                break
    finally:
        blas.restore_original_limits()
        bar.close()
    return state, records
