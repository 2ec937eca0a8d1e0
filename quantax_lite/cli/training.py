"""Training a recipe in a run folder: its symmetry stages, resume, a time limit, the summary.

:func:`train` is what ``quantax-lite train`` runs, as a library call: it takes the run
folder's lock, checks that the folder suits the run (new, resumed or restarted), trains
through the recipe's stages (:func:`stages`: a staged ``symmetry`` such as
``'translations>full@200'`` switches group at a step, carrying the parameters, optimizer
state and chains over), makes the final estimate from fresh samples and writes
``summary.json`` and ``energy.png`` (and with ``measure`` the observables). One log, one
series of checkpoints; a resumed run continues where its newest readable checkpoint is. A
warm start (``init_from``) takes its first parameters from another run's checkpoint
(:mod:`quantax_lite.driver.warm_start`).
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Callable, NamedTuple

import jax
import numpy as np
from jax.experimental import multihost_utils

from quantax_lite.utils.validate import finite_number, positive_int
from quantax_lite.driver.checkpoint import load_latest_checkpoint
from quantax_lite.driver.draws import draw_samples
from quantax_lite.utils.errors import FieldError, as_field_error, concerning
from quantax_lite.cli.measure_run import every_configuration, measure_samples, order_parameter, provenance
from quantax_lite.driver.memory import MemoryBudgetError
from quantax_lite.recipes import AUTO_FIELDS, FIELDS_OF_EARLIER_RUNS, Recipe, build, switch_stage
from quantax_lite.cli.report import finish_run, summary_of, write_observables, zero_variance_of_run
from quantax_lite.driver.run_folder import check_not_busy, check_writable, lock_run_folder, prepare_run_folder
from quantax_lite.stats.chains import statistics
from quantax_lite.driver.vmc import Diverged, energy_estimate, run
from quantax_lite.driver.warm_start import check_source, describe_source, initial_parameters
from quantax_lite.geometry.lattice import parse_lattice

__all__ = ["Stage", "stages", "train", "check_run_options", "train_stages", "dry_run", "RunDiverged", "run_config", "default_out_dir",
           "time_limit_callback", "describe"]


class Stage(NamedTuple):
    """One stage of a recipe's schedule: from step ``start`` on, the network is projected
    on ``symmetry``, with ``samples`` per step (None with exact sums)."""

    symmetry: str
    start: int
    samples: int | None


def stages(recipe: Recipe) -> tuple[Stage, ...]:
    """The stages of ``recipe`` (one unless its ``symmetry`` is staged), in order."""
    exact = recipe.sampling == "exact_sum"
    return tuple(Stage(name, start, None if exact else recipe.samples_at(start))
                 for name, start in recipe.symmetry_stages())


class RunDiverged(RuntimeError):
    """The run stopped on a non-finite value; ``summary`` (as written to summary.json) says
    where (``diverged_at_iteration``, ``non_finite``)."""

    def __init__(self, message: str, summary: dict):
        super().__init__(message)
        self.summary = summary


class Trained(NamedTuple):
    """What :func:`train_stages` returns: the run (:class:`~quantax_lite.recipes.Run`) of the
    stage that took the last step, the final state, that stage's symmetry, this call's log
    records and whether the time limit stopped it."""

    run: object
    state: object
    stage: str
    records: list
    stopped: bool


def run_config(recipe: Recipe) -> dict:
    """What a run records in its checkpoints to be rebuilt and compared on resume: the
    recipe's fields (:meth:`~quantax_lite.recipes.Recipe.config`) without how memory is
    bounded, the phase rule that 'auto' picks, and no momentum readout at k = 0."""
    config = {k: v for k, v in recipe.config().items() if k not in ("chunk_size", "memory_budget")}
    config["phase_rule"] = recipe.phase_rule_kind()
    if not recipe.has_momentum():
        config.pop("momentum_readout", None)
    return config


def default_out_dir(recipe: Recipe) -> str:
    """``runs/<hamiltonian>_<lattice>`` (the lattice's name without ':'): of a recipe, or of
    the parsed options (their ``hamiltonian`` and ``lattice``; nothing is decided)."""
    return os.path.join("runs", f"{recipe.hamiltonian}_{parse_lattice(recipe.lattice).name.replace(':', '')}")


def describe(recipe: Recipe, run) -> str:
    """The system and sector in words, e.g. 'Heisenberg model on chain:8 (8 sites), symmetry
    translations, k = 0'."""
    plan = recipe.plan()
    text = f"{plan.hamiltonian.words(plan.coupling, units=True)} on {run.lattice.name} ({run.lattice.n_sites} sites)"
    sector = [f"symmetry {recipe.symmetry}"]
    if recipe.symmetry != "none":
        sector.append("k = 0" if recipe.momentum is None else f"momentum {tuple(recipe.momentum)}")
    for name in ("spin_parity", "rotation_parity"):
        if getattr(recipe, name) is not None:
            sector.append(f"{name.replace('_', ' ')} {getattr(recipe, name):+d}")
    return f"{text}, {', '.join(sector)}"


def time_limit_callback(minutes: float | None, t0: float):
    """The :func:`~quantax_lite.driver.vmc.run` callback that stops a run once ``minutes`` of wall
    time have passed since ``t0`` (``time.perf_counter()``), or None without a limit. With
    several processes, process 0's clock decides, so that every process stops after the
    same step."""
    if minutes is None:
        return None

    def out_of_time(record, state) -> bool:
        late = time.perf_counter() - t0 >= 60 * minutes
        if jax.process_count() > 1:
            late = bool(multihost_utils.broadcast_one_to_all(np.int32(late)))
        return late

    return out_of_time


def _build(recipe: Recipe, iteration: int = 0):
    with concerning():  # the recipe's checks name their field
        return build(recipe, iteration)


def train_stages(recipe: Recipe, run_, state, iters: int, *, out_dir=None, checkpoint_every: int = 25,
                 keep_checkpoints: int = 3, time_limit: float | None = None, t0: float | None = None,
                 progress: bool = True, metadata: dict | None = None,
                 announce: Callable[[str], None] = lambda line: None) -> Trained:
    """Train ``state`` to step ``iters`` through the recipe's stages, each stage's run
    (:func:`~quantax_lite.recipes.build` at its first step) taking over from where the state
    is (:func:`~quantax_lite.recipes.switch_stage`); one log and one series of checkpoints in
    ``out_dir`` (the caller holds its lock). ``run_`` is the run of the state's stage.
    ``time_limit`` (minutes since ``t0``) stops the run after a step, with a checkpoint; a
    limit that passes in the last step of a stage ends the run there."""
    t0 = time.perf_counter() if t0 is None else t0
    staged = len(recipe.symmetry_stages()) > 1
    starts = [s.start for s in stages(recipe)[1:]]
    current, first, records = recipe.symmetry_at(0), True, []
    out_of_time = time_limit_callback(time_limit, t0)
    while True:
        it = int(state.iteration)
        if staged:
            if recipe.symmetry_at(it) != current:
                current = recipe.symmetry_at(it)
                run_ = _build(recipe, it)
                announce(f"from step {it}: symmetry {current} ({getattr(run_.model, 'n_elements', 1)} image(s) per "
                         f"configuration), {run_.vmc.n_samples} samples/step, the same parameters")
            state = switch_stage(run_, state)  # a checkpoint at a stage's start was written by the stage before
        if it >= iters and not first:  # (a first call with no step left still tidies the log)
            return Trained(run_, state, current, records, False)
        end, first = min([s for s in starts if s > it] + [iters]), False
        state, part = run(run_.vmc, state, end, out_dir=out_dir, checkpoint_every=checkpoint_every,
                          keep_checkpoints=keep_checkpoints, progress=progress,
                          callbacks=[out_of_time] if out_of_time else (), metadata=metadata, lock=False,
                          time_offset=time.perf_counter() - t0)
        records.extend(part)
        it = int(state.iteration)
        # stopped by the time limit (after a checkpoint); at a stage's end, asked once more
        if it < end or (out_of_time and it < iters and out_of_time(None, state)):
            announce(f"time limit of {time_limit:g} min reached at step {it} of {iters}; resuming continues the run")
            return Trained(run_, state, current, records, True)


def _stderr(line: str) -> None:
    print(f"quantax-lite: {line}", file=sys.stderr, flush=True)


def check_run_options(*, iters: int, checkpoint_every: int = 25, keep_checkpoints: int = 3,
                      time_limit: float | None = None, init_from: str | os.PathLike | None = None,
                      resume: bool = False) -> None:
    """The options of a run besides its recipe: ``FieldError`` naming the one at fault
    (``init_from``: a folder with a readable checkpoint, never with ``resume``)."""
    if resume and init_from is not None:  # before the source folder is looked at
        raise FieldError("init_from", "init_from: a resumed run continues from its own checkpoint (a warm-started one "
                         "too: it records where it started); leave out `init_from` with `resume`.")
    for name, value, minimum in (("iters", iters, 1), ("checkpoint_every", checkpoint_every, 0),
                                 ("keep_checkpoints", keep_checkpoints, 1)):
        with concerning(name):
            positive_int(value, name, minimum=minimum)
    if time_limit is not None:
        with concerning("time_limit"):
            finite_number(time_limit, "time_limit", above=0)
    if init_from is not None:
        check_source(init_from)


def train(recipe: Recipe, out_dir: str | os.PathLike | None = None, *, iters: int = 600, resume: bool = False,
          restart: bool = False, checkpoint_every: int = 25, keep_checkpoints: int = 3,
          time_limit: float | None = None, measure: bool = False, progress: bool = True,
          config: dict | None = None, announce: Callable[[str], None] | None = _stderr,
          init_from: str | os.PathLike | None = None) -> dict:
    """Train ``recipe`` for ``iters`` steps in the run folder ``out_dir`` (default
    :func:`default_out_dir`) and return the summary (also ``summary.json``).

    resume: continue the run in the folder from its newest readable checkpoint (its
      recorded ``config`` must equal this one); restart: delete the run there first.
    time_limit: minutes of wall time after which training stops (with a checkpoint); the
      final estimate still runs and the summary says ``stopped_at_time_limit``.
    measure: also measure every observable on the final estimate's samples
      (``observables.json`` and its plots, as :func:`~quantax_lite.cli.measure_run.measure_run`).
    config: what the checkpoints record of the run (default :func:`run_config`).
    announce: called with the progress lines when ``progress`` (None: silent).
    init_from: a warm start: another run folder (a ``quantax-lite train --out``) whose newest
      readable checkpoint's parameters are this run's first ones
      (:func:`~quantax_lite.driver.warm_start.initial_parameters`: the same parameter tree, leaf by
      leaf; lattice, Hamiltonian, sampling and symmetry may differ). The optimizer state,
      step counter and chains start fresh. Recorded in ``summary.json`` and the checkpoints'
      metadata as ``init_from`` (``{"path", "iteration", "lattice"}`` of the source), so a
      resumed warm-started run continues from its own checkpoint; not with ``resume``.

    Errors a user can make raise :class:`~quantax_lite.utils.errors.FieldError` naming the
    argument or recipe field; a run that diverges raises :class:`RunDiverged` after writing
    its summary. With several processes (``jax.distributed``) every process calls it;
    process 0 writes the folder.
    """
    check_run_options(iters=iters, checkpoint_every=checkpoint_every, keep_checkpoints=keep_checkpoints,
                      time_limit=time_limit, init_from=init_from, resume=resume)
    if resume and restart:
        raise FieldError("restart", "restart: `resume` and `restart` exclude each other: continue the run, or "
                         "start it again.")
    if not isinstance(recipe, Recipe):
        raise FieldError("recipe", f"recipe: expected a Recipe, got {type(recipe).__name__}.")
    with concerning():  # every 'auto' decided once (sector, network size, optimizer), recorded as decided
        recipe = recipe.resolved()
    out = os.fspath(out_dir) if out_dir is not None else default_out_dir(recipe)
    config = run_config(recipe) if config is None else {**config, **{k: recipe.config()[k] for k in AUTO_FIELDS}}
    run_, warm = None, None
    if init_from is not None:  # before the folder is touched (a restart deletes the run there)
        if os.path.realpath(os.fspath(init_from)) == os.path.realpath(out):
            raise FieldError("init_from", f"init_from: {os.fspath(init_from)} is the run's own folder (`out_dir`); "
                             "warm-start a run in another folder.")
        run_ = _build(recipe)
        warm = initial_parameters(init_from, run_.state.params, sinh_offset=_sinh_offset(recipe))
    main = jax.process_index() == 0
    if main:
        _check_folder(out, resume=resume, restart=restart, config=config)
    # before the folder is created or changed (a restart deletes the run there): the recipe's
    # checks that need the devices (chains) and the network are refused with nothing written
    run_ = _build(recipe) if run_ is None else run_
    if main:
        check_writable(out)
    with lock_run_folder(out) if main else contextlib.nullcontext():  # process 0 owns the folder
        if main:
            prepare_run_folder(out, resume=resume, restart=restart, config=config, earlier=FIELDS_OF_EARLIER_RUNS)
        say = announce if progress and main and announce is not None else (lambda line: None)
        return _train(recipe, out, config, main, say, iters=iters, resume=resume, checkpoint_every=checkpoint_every,
                      keep_checkpoints=keep_checkpoints, time_limit=time_limit, measure=measure, progress=progress,
                      run_=run_, warm=warm)


def _check_folder(out: str, *, resume: bool, restart: bool, config: dict) -> None:
    """The run folder's errors found without creating or changing anything, before the run
    is built (checked again under the folder's lock): a file in its place, a run there
    without ``resume`` or ``restart``, nothing (or another run) to resume."""
    if os.path.exists(out):
        check_not_busy(out)  # a live run there: named before anything else is said of the folder
        check_writable(out)  # an existing folder: its probe file is removed again
    if not restart:  # without restart, prepare_run_folder only reads
        prepare_run_folder(out, resume=resume, restart=False, config=config, earlier=FIELDS_OF_EARLIER_RUNS)


def _sinh_offset(recipe: Recipe) -> float | None:
    """The recipe's sinh offset where its head is sinh, else None."""
    return recipe.sinh_offset if recipe.amplitude == "sinh" else None


def _summary_head(recipe: Recipe, r, exact) -> dict:
    """The summary's description of the run (before any step)."""
    exact_sum = recipe.sampling == "exact_sum"
    return dict(lattice=r.lattice.name, hamiltonian=recipe.hamiltonian, n_sites=r.lattice.n_sites,
                n_params=r.n_params, network=recipe.network, network_options=recipe.network_options,
                amplitude=recipe.amplitude_kind(r.hamiltonian),
                sinh_offset=_sinh_offset(recipe),
                sampling=recipe.sampling, n_samples=r.vmc.n_samples,
                full_stage_samples=recipe.full_stage_samples, full_stage_lr=recipe.full_stage_lr,
                n_eval_samples=None if exact_sum else recipe.n_eval_samples,
                exact_energy=exact, exact_energy_source=recipe.reference_source(),
                device_count=jax.device_count(), process_count=jax.process_count(),
                precision=recipe.precision, norm=recipe.norm, symmetry=recipe.symmetry,
                momentum=None if recipe.momentum is None else list(recipe.momentum),
                spin_parity=recipe.spin_parity, rotation_parity=recipe.rotation_parity,
                phase_rule=recipe.phase_rule_kind(r.lattice),
                momentum_readout=getattr(r.model, "base", r.model).readout if recipe.has_momentum() else None,
                **recipe.sector_summary(r.lattice, r.hamiltonian))  # the sector, how chosen, its own lowest energy


def _train(recipe, out, config, main, say, *, iters, resume, checkpoint_every, keep_checkpoints, time_limit, measure,
           progress, run_=None, warm=None) -> dict:
    r = _build(recipe) if run_ is None else run_
    exact = recipe.reference_energy(r.lattice, r.hamiltonian)
    if resume:  # a warm-started run continues from its own checkpoint, which says where it started
        state, metadata, _ = load_latest_checkpoint(out, r.state)
        source = metadata.get("init_from")
    elif warm is not None:  # fresh optimizer state, step counter and chains; the chains' log psi of these parameters
        state, source = switch_stage(r, r.state._replace(params=warm.params)), warm.source
    else:
        state, source = r.state, None
    exact_sum = recipe.sampling == "exact_sum"
    per_step = (f"exact sums over {r.sampler.n_representatives} orbits ({r.sampler.n_states} configurations)"
                if exact_sum else f"{recipe.samples} samples/step")
    say(f"{describe(recipe, r)}; {r.n_params} parameters, {per_step}, {jax.device_count()} device(s); writing {out}")
    if warm is not None:
        say(describe_source(source))
    for line in recipe.auto_decisions():  # what 'auto' chose: the sector and why, network and optimizer settings
        say(line)
    summary = _summary_head(recipe, r, exact)
    summary["init_from"] = source
    t0 = time.perf_counter()
    try:
        trained = train_stages(recipe, r, state, iters, out_dir=out, checkpoint_every=checkpoint_every,
                               keep_checkpoints=keep_checkpoints, time_limit=time_limit, t0=t0, progress=progress,
                               metadata={"config": config, "iters": iters, **({"init_from": source} if source else {})},
                               announce=say)
        r, state, stage, records = trained.run, trained.state, trained.stage, trained.records
        summary["stopped_at_time_limit"] = int(state.iteration) < iters
    except MemoryBudgetError as err:  # chunk_size auto: found when the first step compiles
        raise as_field_error(err) from None
    except Diverged as err:
        summary.update(diverged=True, diverged_at_iteration=err.iteration, non_finite=err.what,
                       iterations=int(err.state.iteration), wall_time_s=time.perf_counter() - t0)
        if main:
            finish_run(out, summary, exact)
        raise RunDiverged(f"step {err.iteration}: the {err.what} became non-finite, so the run stopped; nothing of "
                          "that step was written and summary.json says diverged. Start again (`restart`) with a "
                          f"lower `lr` (now {recipe.lr}) or a larger `diag_shift` (now {recipe.diag_shift}).",
                          summary) from None
    # seconds per iteration after the first step of this call (which includes compilation)
    span = [rec["wall_time_s"] for rec in records]
    per_iteration = (span[-1] - span[0]) / (len(span) - 1) if len(span) > 1 else (span[0] if span else None)
    try:  # the final estimate, keeping its samples for the observables
        if exact_sum:  # the rows (their weights for the order parameter) and the step's sums
            samples, _, weights = r.sampler.probabilities(state.params)
            stats = energy_estimate(r.vmc, state)[0]
        else:
            samples, _, e_loc, chains = draw_samples(r.vmc, state.sampler, state.params, recipe.n_eval_samples)
            state, weights, stats = state._replace(sampler=chains), None, statistics(e_loc)
    except MemoryBudgetError as err:  # a resumed run that has no step left to take
        raise as_field_error(err) from None
    summary.update(iterations=int(state.iteration), estimate_symmetry=stage,
                   **summary_of(stats, r.lattice.n_sites, exact))
    if not summary["diverged"] and measure:  # every observable, the table's from them
        obs = (measure_samples(r, state.params, *every_configuration(r, state.params), chunk_size=recipe.chunk_size)
               if exact_sum else measure_samples(r, state.params, samples, chunk_size=recipe.chunk_size))
        obs["run"] = provenance(recipe, int(state.iteration), "final estimate of train", exact)
        spp, m2 = obs["s_pi_pi"], obs["staggered_magnetization_sq"]
        summary.update(s_pi_pi=spp["mean"], s_pi_pi_error=spp["error"], staggered_magnetization_sq=m2["mean"],
                       staggered_magnetization_sq_error=m2["error"], n_observable_samples=obs["n_samples"])
        if main:
            write_observables(out, obs, f"{summary['hamiltonian']} {summary['lattice']}")
    elif not summary["diverged"]:
        summary.update(order_parameter(r, state.params, samples, recipe.chunk_size, weights))
    summary.update(wall_time_s=time.perf_counter() - t0, seconds_per_iteration=per_iteration)
    if main and not summary["diverged"]:
        # over the steps of the stage estimated only (a staged run's earlier group is another wavefunction)
        summary["zero_variance_extrapolation"] = zero_variance_of_run(
            out, after_iteration=dict(recipe.symmetry_stages())[stage])
    if main:
        finish_run(out, summary, exact)
    if summary["diverged"]:
        raise RunDiverged("the final energy estimate is not finite; summary.json says diverged. Start again "
                          "(`restart`) with a lower `lr` or a larger `diag_shift`.", summary)
    return summary


def dry_run(recipe: Recipe, *, init_from: str | os.PathLike | None = None) -> dict:
    """What a run of ``recipe`` would be, without writing anything: the system and sector in
    words, the parameter count, the reference energy and its source, the samples per step,
    the chunk sizes chosen (None: all samples of a device at once), and the wall time of one step (timed after a first step that
    compiles it; an estimate of the training's time per step). init_from: the warm start's
    source run folder, checked as :func:`train` checks it (its parameters then start the
    timed steps); ``"init_from"`` in the result says where they come from (None: a cold start)."""
    r = _build(recipe)
    recipe = r.recipe  # every 'auto' decided
    state, source = r.state, None
    if init_from is not None:
        warm = initial_parameters(init_from, r.state.params, sinh_offset=_sinh_offset(recipe))
        state, source = switch_stage(r, r.state._replace(params=warm.params)), warm.source
    try:
        sizes = r.vmc.chunk_sizes(r.state.params)
    except MemoryBudgetError as err:
        raise as_field_error(err) from None
    rows = -(-(r.vmc.n_samples or r.sampler.n_rows) // jax.device_count())  # samples per device
    t0 = time.perf_counter()
    state, metrics = r.vmc.step(state)
    jax.block_until_ready(metrics)
    t1 = time.perf_counter()
    _, metrics = r.vmc.step(state)
    jax.block_until_ready(metrics)
    t2 = time.perf_counter()
    return {"system": describe(recipe, r), "n_params": r.n_params,
            "per_step": "exact sums over every configuration" if r.vmc.exact else f"{r.vmc.n_samples} samples",
            "exact_energy": recipe.reference_energy(r.lattice, r.hamiltonian),
            "exact_energy_source": recipe.reference_source(),
            "chunk_sizes": {part: None if c is None or c >= rows else c for part, c in sizes._asdict().items()},
            "compile_and_first_step_s": t1 - t0, "seconds_per_step": t2 - t1, "init_from": source}
