"""The ``quantax-lite`` command: ``quantax-lite train [options]``, ``quantax-lite measure --out DIR``.

train: parse -> :class:`~quantax_lite.recipes.Recipe` -> :func:`~quantax_lite.vmc.run` in a
run folder -> report. With no options it trains the symmetrized conv network on the 4x4
Heisenberg antiferromagnet and prints energy ± error, energy per site, the exact energy,
the relative error, the V-score, S(π,π) and m², and the wall time.

measure: the run of a folder rebuilt through its recipe (:func:`~quantax_lite.recipes.load_run`),
fresh samples from its newest readable checkpoint, :func:`quantax_lite.observables.measure`
-> ``observables.json``, ``structure_factor.png``, ``correlations.png``.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import sys
import time
import warnings

from .recipes import FIELDS_OF_EARLIER_RUNS, Recipe

RECIPE = {f.name: f.default for f in dataclasses.fields(Recipe)}
# Options added after runs were made without them, with the value those runs had.
_OPTIONS_OF_EARLIER_RUNS = FIELDS_OF_EARLIER_RUNS
# Options that do not define a run (not compared on --resume).
_NOT_COMPARED = {"resume", "restart", "out", "no_progress", "coordinator", "process_id", "iters", "command", "measure",
                 "time_limit", "checkpoint_every", "keep_checkpoints", "distributed", "num_processes", "init_timeout",
                 # how memory is bounded, not what is computed: a run may resume on another device
                 "chunk_size", "memory_budget",
                 "given_options"}  # which options were typed (_Given), not a value


class UsageError(Exception):
    """A bad command-line option: printed as a one-line error, not a traceback."""


class DivergedRun(Exception):
    """The run stopped on a non-finite value: printed as one line, exit status 3."""


class _Given(argparse.Action):
    """Store the value and record that the option was given (``args.given_options``), to
    refuse an option that does not apply even where its value is the default."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.given_options = set(getattr(namespace, "given_options", ())) | {self.dest}


class _Parser(argparse.ArgumentParser):
    """argparse whose errors (an unreadable value, an unknown option) are one line, exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _version() -> str:
    """The installed package's version ("unknown" when run from a source tree not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("quantax_lite")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="quantax-lite", description="Neural quantum states by variational Monte Carlo.")
    parser.add_argument("--version", action="version", version=f"quantax-lite {_version()}")
    subparsers = parser.add_subparsers(dest="command")
    t = subparsers.add_parser(
        "train", help="train a neural quantum state (default: 4x4 Heisenberg)",
        description="Train the symmetrized convolutional NQS by VMC with SR/MinSR. Energies in spin-1/2 units "
        "(Heisenberg, J1-J2) or Pauli units (tfim). Writes log.jsonl, summary.json, energy.png and the last "
        "checkpoints (checkpoint-<step>.npz) to --out; exit status 2 for a usage error, 3 for a run that diverged. "
        "The system, network and optimization options are the fields of quantax_lite.Recipe, with its defaults.")
    groups = {name: t.add_argument_group(name) for name in ("system", "network", "optimization", "output")}
    groups["optimization"].add_argument("--iters", type=int, default=600, help="VMC steps (default: 600)")
    for f in dataclasses.fields(Recipe):
        meta, name = f.metadata, "--" + f.name.replace("_", "-")
        if meta["type"] is bool:  # a rule on by default: a --no-... switch
            groups[meta["group"]].add_argument(f"--no-{f.name}", dest=f.name, action="store_false",
                                               help=f"do not apply {meta['help']}")
            continue
        shown = "" if f.default is None else f" (default: {f.default})"
        groups[meta["group"]].add_argument(name, type=meta["type"], default=f.default, choices=meta["choices"],
                                           help=meta["help"] + shown, action=_Given)
    g = groups["output"]
    g.add_argument("--out", help="output directory (default: runs/<hamiltonian>_<lattice>)")
    g.add_argument("--resume", action="store_true", help="continue the run in --out from its newest readable checkpoint")
    g.add_argument("--restart", action="store_true", help="delete the run in --out (log, checkpoints, summary, plot) "
                   "and start it again")
    g.add_argument("--checkpoint-every", type=int, default=25, help="steps between checkpoints (default: 25)")
    g.add_argument("--keep-checkpoints", type=int, default=3, help="newest checkpoints kept, an older one is used "
                   "when the newest is damaged (default: 3)")
    g.add_argument("--time-limit", type=float, metavar="MINUTES", help="stop training after this many minutes "
                   "of wall time (from the start of this call), with a checkpoint; the final estimate still runs, "
                   "summary.json says stopped_at_time_limit, and --resume continues to --iters (default: none)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--measure", action="store_true", help="at the end, also measure the observables on the final "
                   "estimate's samples, as quantax-lite measure does (observables.json and its plots)")
    g = t.add_argument_group("multi-process (JAX's multi-controller runtime)")
    g.add_argument("--coordinator", help="HOST:PORT of process 0")
    g.add_argument("--num-processes", type=int, help="number of processes")
    g.add_argument("--process-id", type=int, help="this process's index")
    g.add_argument("--init-timeout", type=int, default=300, help="seconds to wait for every process to join "
                   "(default: 300)")
    g.add_argument("--distributed", action="store_true",
                   help="call jax.distributed.initialize() with auto-detection (SLURM, Open MPI, ...)")
    _add_measure_parser(subparsers)
    return parser


def _add_measure_parser(subparsers) -> None:
    from .recipes import int_or_auto, int_or_float

    m = subparsers.add_parser(
        "measure", help="measure the observables of a trained run (spin correlations, structure factor, ...)",
        description="Rebuild the run in --out from its newest readable checkpoint (a finished or interrupted "
        "quantax-lite train run), draw fresh samples (the checkpoint's chains, thermalized again) and write "
        "observables.json (energy, <S_i.S_j>, C(r), S(q), S(pi,pi), m^2, dimer correlations; strict JSON, "
        "spin-1/2 units S = sigma/2, energies in the run's units), structure_factor.png and correlations.png to "
        "--out. Exit status 2 for a usage error (one line).")
    m.add_argument("--out", required=True, help="the run folder (a quantax-lite train --out)")
    m.add_argument("--samples", type=int, help="fresh samples, drawn in blocks of the run's samples per step "
                   "(default: the run's --eval-samples)")
    m.add_argument("--seed", type=int, default=0, help="PRNG seed of the fresh chains (default: 0)")
    m.add_argument("--chunk-size", type=int_or_auto, default="auto", help="samples per device per chunk of "
                   "the network evaluations, to bound memory; auto: the library's (default: auto)")
    # refused (measure_run): the observables' chunks are not chosen from a budget
    m.add_argument("--memory-budget", type=int_or_float, help=argparse.SUPPRESS)
    m.add_argument("--no-dimers", dest="dimers", action="store_false", help="leave out the dimer correlations "
                   "(N_bonds^2 network evaluations per sample and axis)")
    m.add_argument("--no-progress", action="store_true", help="no progress messages")


def _usage(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``; a library error naming an argument becomes a UsageError
    naming the option."""
    try:
        return fn(*args, **kwargs)
    except (TypeError, ValueError) as err:
        raise UsageError(_as_option(str(err))) from None


def _as_option(message: str) -> str:
    """A library message naming arguments ('lr_half_life: ...', '`restart`') in options'
    words ('--lr-half-life: ...', '--restart')."""
    parser = build_parser()
    names = set(vars(parser.parse_args(["train"]))) | set(vars(parser.parse_args(["measure", "--out", "."])))
    names |= {"out_dir"}

    def option(name):
        return "--out" if name == "out_dir" else f"--{name.replace('_', '-')}"

    m = re.match(r"(\w+):", message)
    if m and m.group(1) in names:
        message = option(m.group(1)) + message[m.end(1):]
    return re.sub(r"`(\w+)`", lambda k: option(k.group(1)) if k.group(1) in names else k.group(0), message)


def check_options(args) -> None:
    """Raise UsageError for run, folder and process options that cannot work."""
    from ._validate import finite_number, positive_int
    from .utils.processes import check_process_options

    for name, minimum in (("iters", 1), ("checkpoint_every", 0), ("keep_checkpoints", 1), ("init_timeout", 1)):
        _usage(positive_int, getattr(args, name), name, minimum=minimum)
    if args.time_limit is not None:
        _usage(finite_number, args.time_limit, "time_limit", above=0)
    _usage(check_process_options, args.coordinator, args.num_processes, args.process_id)
    if args.resume and args.restart:
        raise UsageError("--resume and --restart exclude each other: continue the run, or start it again.")


def train(args) -> dict:
    """Run the training the options describe; returns the summary dict."""
    import jax

    from . import tuning
    from .run_folder import check_writable, lock_run_folder, prepare_run_folder
    from .utils.processes import join_processes

    check_options(args)
    recipe = _usage(Recipe, **{name: getattr(args, name) for name in RECIPE})
    if recipe.sampling == "exact_sum" and "samples" in getattr(args, "given_options", ()):
        raise UsageError("--samples: the run sums over every configuration (sampling exact_sum), so it draws no "
                         "samples; leave --samples out.")
    if args.coordinator is not None or args.distributed:
        if args.coordinator is not None:
            print(f"quantax-lite: process {args.process_id} of {args.num_processes} waiting up to "
                  f"{args.init_timeout} s for the others at {args.coordinator}", file=sys.stderr, flush=True)
        try:
            join_processes(args.coordinator, args.num_processes, args.process_id, timeout=args.init_timeout,
                           on_timeout=lambda: _give_up_waiting(args))
        except ConnectionError as err:
            raise UsageError(f"--coordinator {args.coordinator}: could not join the {args.num_processes} "
                             f"processes ({err}).") from None
    tuning.configure_x64()  # float64 solve on CPUs; float32 on accelerators
    out = args.out or os.path.join("runs", f"{args.hamiltonian}_{recipe.config()['lattice'].replace(':', '')}")
    main = jax.process_index() == 0
    config = {k: v for k, v in vars(args).items() if k not in _NOT_COMPARED}
    # the rule 'auto' picks, so that a run made before the option existed (no rule) resumes
    # where auto still means none, and is refused (naming --phase-rule) where it would not
    config["phase_rule"] = recipe.phase_rule_kind()
    if not recipe.has_momentum():  # no choice to record: a run of any version at k = 0 resumes
        config.pop("momentum_readout", None)
    if main:
        _usage(check_writable, out)
    with lock_run_folder(out) if main else contextlib.nullcontext():  # process 0 owns the folder
        if main:
            _usage(prepare_run_folder, out, resume=args.resume, restart=args.restart, config=config,
                   earlier=_OPTIONS_OF_EARLIER_RUNS)
        return _train(args, recipe, out, config, main)


def _train(args, recipe, out, config, main) -> dict:
    import jax

    from .memory import MemoryBudgetError
    from .recipes import build
    from .report import finish_run, format_table, summary_of, zero_variance_of_run
    from .report import write_observables
    from .stats import statistics
    from .checkpoint import load_latest_checkpoint
    from .vmc import Diverged, energy_estimate

    r = _usage(build, recipe)
    exact = recipe.reference_energy(r.lattice, r.hamiltonian)
    state = load_latest_checkpoint(out, r.state)[0] if args.resume else r.state
    exact_sum = recipe.sampling == "exact_sum"
    if main and not args.no_progress:
        per_step = (f"exact sums over {r.sampler.n_representatives} orbits ({r.sampler.n_states} configurations)"
                    if exact_sum else f"{recipe.samples} samples/step")
        print(f"quantax-lite: {r.hamiltonian!r}, {r.n_params} parameters, {per_step}, "
              f"{jax.device_count()} device(s); writing {out}", file=sys.stderr)
    summary = dict(lattice=r.lattice.name, hamiltonian=args.hamiltonian, n_sites=r.lattice.n_sites,
                   n_params=r.n_params, sampling=recipe.sampling, n_samples=r.vmc.n_samples,
                   full_stage_samples=recipe.full_stage_samples, full_stage_lr=recipe.full_stage_lr,
                   n_eval_samples=None if exact_sum else recipe.n_eval_samples,
                   exact_energy=exact, exact_energy_source=recipe.reference_source(r.lattice, r.hamiltonian),
                   device_count=jax.device_count(), process_count=jax.process_count(),
                   precision=recipe.precision, norm=recipe.norm, symmetry=recipe.symmetry,
                   momentum=None if recipe.momentum is None else list(recipe.momentum),
                   spin_parity=recipe.spin_parity, rotation_parity=recipe.rotation_parity,
                   phase_rule=recipe.phase_rule_kind(r.lattice),
                   momentum_readout=getattr(r.model, "base", r.model).readout if recipe.has_momentum() else None)
    t0 = time.perf_counter()
    records = []
    try:
        r, state, stage = _run_stages(args, recipe, r, state, out, config, main, records, t0)
        summary["stopped_at_time_limit"] = int(state.iteration) < args.iters
    except MemoryBudgetError as err:  # chunk_size auto: found when the first step compiles
        raise UsageError(_as_option(str(err))) from None
    except Diverged as err:
        summary.update(diverged=True, diverged_at_iteration=err.iteration, non_finite=err.what,
                       iterations=int(err.state.iteration), wall_time_s=time.perf_counter() - t0)
        if main:
            finish_run(out, summary, exact)
        raise DivergedRun(f"step {err.iteration}: the {err.what} became non-finite, so the run stopped; nothing of "
                          "that step was written and summary.json says diverged. Start again (--restart) with a "
                          f"lower --lr (now {args.lr}) or a larger --diag-shift (now {args.diag_shift}).") from None
    # seconds per iteration after the first step of this call (which includes compilation)
    span = [r_["wall_time_s"] for r_ in records]
    per_iteration = (span[-1] - span[0]) / (len(span) - 1) if len(span) > 1 else (span[0] if span else None)
    try:  # the energy_estimate of vmc, keeping its samples for the observables
        if exact_sum:  # the rows (their weights for the order parameter) and the step's sums
            samples, _, weights = r.sampler.probabilities(state.params)
            stats = energy_estimate(r.vmc, state)[0]
        else:
            samples, log_psi_s, e_loc, chains = draw_samples(r.vmc, state.sampler, state.params,
                                                             recipe.n_eval_samples)
            state, weights, stats = state._replace(sampler=chains), None, statistics(e_loc)
    except MemoryBudgetError as err:  # a resumed run that has no step left to take
        raise UsageError(_as_option(str(err))) from None
    summary.update(iterations=int(state.iteration), estimate_symmetry=stage,
                   **summary_of(stats, r.lattice.n_sites, exact))
    if not summary["diverged"] and args.measure:  # every observable, the table's from them
        obs = (measure_samples(r, state.params, *every_configuration(r, state.params), chunk_size=recipe.chunk_size)
               if exact_sum else measure_samples(r, state.params, samples, chunk_size=recipe.chunk_size))
        obs["run"] = _provenance(recipe, int(state.iteration), "final estimate of train", exact)
        spp, m2 = obs["s_pi_pi"], obs["staggered_magnetization_sq"]
        summary.update(s_pi_pi=spp["mean"], s_pi_pi_error=spp["error"], staggered_magnetization_sq=m2["mean"],
                       staggered_magnetization_sq_error=m2["error"], n_observable_samples=obs["n_samples"])
        if main:
            write_observables(out, obs, f"{summary['hamiltonian']} {summary['lattice']}")
    elif not summary["diverged"]:
        summary.update(_order_parameter(r, state.params, samples, recipe.chunk_size, weights))
    summary.update(wall_time_s=time.perf_counter() - t0, seconds_per_iteration=per_iteration)
    if main and not summary["diverged"]:
        # over the steps of the stage estimated only (a staged run's earlier group is another wavefunction)
        summary["zero_variance_extrapolation"] = zero_variance_of_run(
            out, after_iteration=dict(recipe.symmetry_stages())[stage])
    if main:
        finish_run(out, summary, exact)
    if summary["diverged"]:
        raise DivergedRun("the final energy estimate is not finite; summary.json says diverged. Start again "
                          "(--restart) with a lower --lr or a larger --diag-shift.")
    if main:
        print(format_table(summary))
    return summary


def _run_stages(args, recipe, r, state, out, config, main, records, t0):
    """Train ``state`` to ``--iters`` through the stages of a staged ``--symmetry``
    (``translations>full@N``): each stage's run (:func:`~quantax_lite.recipes.build` at its
    first iteration) from where the state is, the state carried over at a switch
    (:func:`~quantax_lite.recipes.switch_stage`: same parameters, optimizer state and
    chains); one log, one series of checkpoints. Appends the log records to ``records``;
    returns the run of the stage that took the last step (that of the final iteration once
    ``--iters`` is reached; the earlier one where ``--time-limit`` stops a run at a stage's
    end), the final state and that stage's name."""
    from .recipes import build, switch_stage
    from .vmc import run

    staged = len(recipe.symmetry_stages()) > 1
    starts = [start for _, start in recipe.symmetry_stages()[1:]]
    current, first = recipe.symmetry_at(0), True
    out_of_time = _time_limit(args.time_limit, t0)
    while True:
        it = int(state.iteration)
        if staged:
            if recipe.symmetry_at(it) != current:
                current = recipe.symmetry_at(it)
                r = _usage(build, recipe, it)
                if main and not args.no_progress:
                    n = getattr(r.model, "n_elements", 1)
                    print(f"quantax-lite: from step {it}: symmetry {current} ({n} image(s) per configuration), "
                          f"{r.vmc.n_samples} samples/step, the same parameters", file=sys.stderr, flush=True)
            state = switch_stage(r, state)  # a checkpoint at a stage's start was written by the stage before
        if it >= args.iters and not first:  # (a first call with no step left still tidies the log)
            return r, state, current
        end, first = min([s for s in starts if s > it] + [args.iters]), False
        state, part = run(r.vmc, state, end, out_dir=out, checkpoint_every=args.checkpoint_every,
                          keep_checkpoints=args.keep_checkpoints, progress=not args.no_progress,
                          callbacks=[out_of_time] if out_of_time else (), metadata={"config": config}, lock=False,
                          time_offset=time.perf_counter() - t0)
        records.extend(part)
        it = int(state.iteration)
        # stopped by --time-limit (after a checkpoint); at a stage's end, asked once more
        if it < end or (out_of_time and it < args.iters and out_of_time(None, state)):
            if main and not args.no_progress:
                print(f"quantax-lite: --time-limit {args.time_limit:g} min reached at step {int(state.iteration)} of "
                      f"{args.iters}; --resume continues the run", file=sys.stderr, flush=True)
            return r, state, current


def _time_limit(minutes, t0):
    """The ``vmc.run`` callback that stops a run once ``minutes`` of wall time have passed
    since ``t0`` (``time.perf_counter()``), or None without a limit. With several processes,
    process 0's clock decides, so that every process stops after the same step."""
    if minutes is None:
        return None
    import jax

    def out_of_time(record, state) -> bool:
        late = time.perf_counter() - t0 >= 60 * minutes
        if jax.process_count() > 1:
            import numpy as np
            from jax.experimental import multihost_utils

            late = bool(multihost_utils.broadcast_one_to_all(np.int32(late)))
        return late

    return out_of_time


def draw_samples(vmc, chains, params, n_samples: int, *, local_energies: bool = True):
    """Fresh samples as :func:`~quantax_lite.vmc.energy_estimate` draws them (blocks of at
    most a step's samples, so the memory is that of a training step; the same local
    energies), kept: ``(samples (n, n_sites) chain-major over the whole draw, log_psi (n,),
    local energies (n_chains, n / n_chains) or None without ``local_energies``, chains)``.
    ``n_samples`` a multiple of the step's samples when larger."""
    import jax.numpy as jnp

    from .sampler import per_chain

    block = min(n_samples, vmc.n_samples)
    if n_samples % block:
        raise ValueError(f"n_samples={n_samples} must be a multiple of the step's {block} samples.")
    n_chains = vmc.sampler.n_chains
    parts = []
    for _ in range(n_samples // block):
        s, lp, chains = vmc.sampler.sample(chains, params, block)
        e = vmc.local_energies(params, s, lp) if local_energies else jnp.zeros(block)
        parts.append((per_chain(s, n_chains), per_chain(lp, n_chains), per_chain(e, n_chains)))
    s, lp, e = (jnp.concatenate(x, axis=1) for x in zip(*parts))
    return s.reshape(n_samples, s.shape[-1]), lp.reshape(n_samples), e if local_energies else None, chains


def _observable_chunk(chunk_size):
    """The observables' chunk: an int --chunk-size as given, else the library's (None)."""
    return None if chunk_size in (None, "auto") else chunk_size


def _order_parameter(r, params, samples, chunk_size, weights=None) -> dict:
    """S(pi, pi) and m^2 for the summary table, from the first samples of every chain of
    the final estimate: as many as cost about the energy estimate's network evaluations
    (a pair correlation costs one evaluation per pair, the energy one per bond). With
    ``weights`` (exact sums) from every row: both are sums over all pairs, invariant under
    the run's group, so their local values are the same on every configuration of an orbit
    and the orbit representatives with their weights give them exactly."""
    import math

    from .observables import spin_correlations, staggered_magnetization_sq
    from .recipes import physical_basis

    n_chains, n_sites = r.sampler.n_chains, r.lattice.n_sites
    if getattr(r.lattice, "n_sublattices", 2) != 2:  # no staggered pattern
        return {"s_pi_pi": None, "staggered_magnetization_sq": None}
    if weights is None:
        per = samples.shape[0] // n_chains
        keep = min(per, max(1, math.ceil(per * r.hamiltonian.max_conn / (n_sites * (n_sites - 1) / 2))))
        subset = samples.reshape(n_chains, per, n_sites)[:, :keep].reshape(n_chains * keep, n_sites)
    else:
        subset = samples
    log_psi, _ = physical_basis(r.model.apply, r.hamiltonian)
    corr = spin_correlations(log_psi, params, subset, n_chains=n_chains, chunk_size=_observable_chunk(chunk_size),
                             weights=weights)
    (s, s_err), (m2, m2_err) = staggered_magnetization_sq(corr, r.lattice)
    finite = lambda x: x if x is not None and math.isfinite(x) else None  # noqa: E731
    return {"s_pi_pi": finite(s), "s_pi_pi_error": finite(s_err), "staggered_magnetization_sq": finite(m2),
            "staggered_magnetization_sq_error": finite(m2_err), "n_observable_samples": int(subset.shape[0])}


def measure_samples(r, params, samples, weights=None, *, chunk_size=None, dimers: bool = True) -> dict:
    """:func:`quantax_lite.observables.measure` of the run ``r`` (a :class:`~quantax_lite.recipes.Run`)
    on chain-major ``samples`` of its chains, or on configurations with exact ``weights``
    (:func:`every_configuration`), in the plain spin basis
    (:func:`~quantax_lite.recipes.physical_basis`), energies in the run's units."""
    from .observables import measure
    from .recipes import physical_basis

    log_psi, hamiltonian = physical_basis(r.model.apply, r.hamiltonian)
    return measure(log_psi, params, samples, r.lattice, hamiltonian=hamiltonian,
                   n_chains=1 if weights is not None else r.sampler.n_chains,
                   chunk_size=_observable_chunk(chunk_size), dimers=dimers, weights=weights)


def every_configuration(r, params):
    """(every configuration of the sector of an exact_sum run ``r``, int8 (n, n_sites); their
    weights |psi|^2 / Z (n,)): what observables that are not invariant under the run's group
    (single pair correlations) are summed over, exactly."""
    import numpy as np

    from .sampler import FullSumSampler

    every = FullSumSampler(r.model.apply, r.lattice.n_sites, total_sz=r.sampler.total_sz,
                           chunk_size=r.sampler.chunk_size, max_states=r.sampler.max_states)
    states, _, weights = every.probabilities(params)
    # the sector's psi vanishes on some configurations of the magnetization sector: leave them out
    keep = np.asarray(weights) > 1e-12 * float(np.max(weights))
    weights = np.asarray(weights)[keep]
    return np.asarray(states)[keep], weights / weights.sum()


def _provenance(recipe, iteration: int, source: str, exact) -> dict:
    from .report import energy_unit

    return {"recipe": recipe.config(), "iteration": iteration, "samples_from": source,
            "energy_unit": energy_unit(recipe.hamiltonian), "exact_energy": exact,
            "basis": "plain spin basis (a Marshall rotation of the training undone)"}


def measure_run(args) -> dict:
    """``quantax-lite measure``: the observables of the run in ``--out``; returns them."""
    import jax

    from . import tuning
    from ._validate import positive_int
    from .recipes import check_seed, load_run, recipe_of_run, seed_key
    from .report import energy_unit, plot_energy, write_observables
    from .run_folder import lock_run_folder, read_log

    if args.samples is not None:
        _usage(positive_int, args.samples, "samples")
    _usage(check_seed, args.seed)
    if args.memory_budget is not None:
        raise UsageError("--memory-budget: measure does not choose its chunks from a memory budget; bound its "
                         "memory with --chunk-size (samples per device per chunk, e.g. 64).")
    tuning.configure_x64()
    out = args.out
    recipe = _usage(recipe_of_run, out)[0]  # names --out before the lock creates anything
    exact_sum = recipe.sampling == "exact_sum"
    if exact_sum and args.samples is not None:
        raise UsageError("--samples: the run sums over every configuration (sampling exact_sum), so it draws no "
                         "samples; leave --samples out.")
    n = args.samples or recipe.n_eval_samples
    chains = recipe.n_chains(jax.device_count())
    per_step = sorted({recipe.samples_at(start) for _, start in recipe.symmetry_stages()})
    if not exact_sum and (n % chains or any(n > b and n % b for b in per_step)):
        raise UsageError(f"--samples: {n} must be a multiple of the run's {chains} chains, and of its "
                         f"{' / '.join(map(str, per_step))} samples per step when larger.")
    with lock_run_folder(out):
        # a damaged log is refused before anything is computed or written
        log = [x for x in _usage(read_log, os.path.join(out, "log.jsonl")) if x.get("energy") is not None]
        loaded = _usage(load_run, out, chunk_size=args.chunk_size)
        r, state = loaded.run, loaded.state
        if not args.no_progress:
            what = (f"exact sums over {r.sampler.n_states} configurations" if exact_sum
                    else f"{n} fresh samples on {chains} chains")
            print(f"quantax-lite measure: {loaded.path} (step {int(state.iteration)}), {what}, "
                  f"{jax.device_count()} device(s)", file=sys.stderr)
        if exact_sum:
            samples, weights = every_configuration(r, state.params)
        else:
            fresh = r.sampler.init(seed_key(args.seed), state.params, initial_states=state.sampler.states)
            samples = draw_samples(r.vmc, fresh, state.params, n, local_energies=False)[0]  # thermalized first
            weights = None
        obs = measure_samples(r, state.params, samples, weights, chunk_size=args.chunk_size, dimers=args.dimers)
        exact = recipe.reference_energy(r.lattice, r.hamiltonian)
        obs["run"] = {**_provenance(recipe, int(state.iteration), os.path.basename(loaded.path), exact),
                      "seed": args.seed}
        title = f"{recipe.hamiltonian} {r.lattice.name}, step {int(state.iteration)}"
        written = write_observables(out, obs, title)
        energy_png = os.path.join(out, "energy.png")
        if log and not os.path.exists(energy_png):  # an interrupted run: train never drew it
            e = obs.get("energy", {})
            final = (e["mean"], e["error"]) if e.get("mean") is not None and e.get("error") is not None else None
            plot_energy(energy_png, log, exact, title, n_sites=r.lattice.n_sites, final=final,
                        unit=energy_unit(recipe.hamiltonian))
            written.append(energy_png)
    e, spp, m2 = obs.get("energy", {}), obs["s_pi_pi"], obs["staggered_magnetization_sq"]
    fmt = lambda d, spec: "n/a" if d.get("mean") is None else (  # noqa: E731
        f"{d['mean']:{spec}} ± {d['error']:{spec}}" if d.get("error") is not None else f"{d['mean']:{spec}}")
    rows = [("energy", fmt(e, ".6f") + f"  [{energy_unit(recipe.hamiltonian)}]"),
            ("S(pi,pi)", fmt(spp, ".5f")), ("m^2", fmt(m2, ".6f")),
            ("written", ", ".join(os.path.basename(p) for p in written))]
    print("\n".join(f"{k:<9} {v}" for k, v in rows))
    return obs



def _give_up_waiting(args) -> None:
    """Called by a timer thread while the processes still wait for each other: exit 2."""
    print(f"quantax-lite train: error: --coordinator {args.coordinator}: not all {args.num_processes} "
          f"processes joined within --init-timeout {args.init_timeout} s; start every process with the "
          "same --coordinator and --num-processes and a distinct --process-id.", file=sys.stderr, flush=True)
    os._exit(2)


def _is_out_of_memory(err: BaseException) -> bool:
    return isinstance(err, MemoryError) or "RESOURCE_EXHAUSTED" in str(err) or "Out of memory" in str(err)


def main(argv=None) -> int:
    from .run_folder import RunFolderBusy

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    prog = f"quantax-lite {args.command}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("once")
            warnings.showwarning = lambda message, *_, **__: print(f"{prog}: warning: {message}", file=sys.stderr)
            (train if args.command == "train" else measure_run)(args)
    except UsageError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except RunFolderBusy as err:
        print(f"{prog}: error: --out {err}", file=sys.stderr)
        return 2
    except DivergedRun as err:
        print(f"{prog}: diverged: {err}", file=sys.stderr)
        return 3
    except Exception as err:
        if not _is_out_of_memory(err):
            raise
        if args.command == "measure":
            print(f"{prog}: error: out of memory for this system; pass a smaller --chunk-size (e.g. 64) or fewer "
                  "--samples, or leave out the dimers (--no-dimers).", file=sys.stderr)
            return 2
        print(f"{prog}: error: out of memory for this system; pass a smaller --memory-budget (e.g. 0.5 "
              "of the device's memory) or --chunk-size (e.g. 64), lower --samples, or choose a smaller --lattice / "
              "--channels.", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
