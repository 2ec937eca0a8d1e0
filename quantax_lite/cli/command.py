"""The ``quantax-lite`` command: ``quantax-lite train [options]``, ``quantax-lite measure --out DIR``,
``quantax-lite evolve --out DIR ...`` (:func:`quantax_lite.cli.evolve_run.evolve_run`).

train: parse (:mod:`quantax_lite.cli.options`; ``--config FILE`` under the typed options) ->
:class:`~quantax_lite.recipes.Recipe` -> :func:`quantax_lite.cli.training.train` in a run folder
-> the summary table (:mod:`quantax_lite.cli.report`). ``--dry-run``:
:func:`quantax_lite.cli.training.dry_run`. measure: :func:`quantax_lite.cli.measure_run.measure_run`
-> its table. A user error is one line naming the option (exit status 2): library errors
carry their field (:class:`~quantax_lite.utils.errors.FieldError`), mapped to the option here; a
run that diverged exits with status 3.
"""
from __future__ import annotations

import os
import re
import sys
import warnings

from quantax_lite.utils import compile_cache
from quantax_lite.driver.draws import draw_samples  # noqa: F401  (cli.draw_samples of earlier versions)
from quantax_lite.utils.errors import FieldError, as_field_error
from quantax_lite.cli.measure_run import every_configuration, measure_samples  # noqa: F401  (as draw_samples)
from quantax_lite.cli.options import RECIPE, build_parser, read_config  # noqa: F401  (RECIPE, build_parser: the command's API)
from quantax_lite.recipes import Recipe
from quantax_lite.recipes.plan import SECTOR_FIELDS
from quantax_lite.recipes.schema import SCHEMA_VERSION
from quantax_lite.driver.warm_start import describe_source

__all__ = ["main", "build_parser", "RECIPE"]

# Options that do not define a run (not compared on --resume).
_NOT_COMPARED = {"resume", "restart", "out", "no_progress", "coordinator", "process_id", "iters", "command", "measure",
                 "time_limit", "checkpoint_every", "keep_checkpoints", "distributed", "num_processes", "init_timeout",
                 "chunk_size", "memory_budget",  # how memory is bounded: a run may resume on another device
                 "given_options", "config", "dry_run",
                 "init_from"}  # where a run's first parameters came from: its checkpoints record it apart


class UsageError(Exception):
    """A bad command-line option: printed as a one-line error, not a traceback."""


def _option(name: str) -> str:
    special = {"out_dir": "--out", "network_options": "--network-option"}
    return special.get(name, f"--{name.replace('_', '-')}")


# evolve's own options (the others are train's)
EVOLVE_OPTIONS = {"initial_state", "t_end", "dt", "tol", "integrator", "regularization", "rcond", "imaginary"}


def _options() -> set[str]:
    """The names the command has options for (train's, measure's and evolve's), and ``out_dir``."""
    return (set(RECIPE) | {a.dest for a in build_parser().train_parser._actions}
            | {"out_dir", "samples", "dimers", "lanczos", "lanczos_passes"} | EVOLVE_OPTIONS)


def _message(err: BaseException) -> str:
    """A library error in the options' words: its field (``err.field``; for a check that
    raises no FieldError yet, the name its message starts with) as the option, and the
    names it quotes in backquotes (`restart`) as options."""
    err, options = as_field_error(err), _options()
    text = str(err)
    if err.field in options:
        text = _option(err.field) + (text[len(err.field):] if text.startswith(f"{err.field}:") else f": {text}")
    return re.sub(r"`(\w+)`", lambda k: _option(k.group(1)) if k.group(1) in options else k.group(0), text)


def _usage(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``; a ValueError / TypeError becomes a UsageError naming the option."""
    try:
        return fn(*args, **kwargs)
    except (TypeError, ValueError) as err:
        raise UsageError(_message(err)) from None


def _configure_jax() -> None:
    """The command's start-up: float64 solve on CPUs, float32 on accelerators; programs
    compiled by an earlier run are loaded, not compiled again."""
    from quantax_lite.utils import tuning

    tuning.configure_x64()
    compile_cache.configure()


def options_of_run(args) -> dict | None:
    """With ``--resume``, the options of the run in ``--out`` (default: the folder of the
    options' lattice and Hamiltonian): ``{field: value}`` for every recipe field but
    ``chunk_size`` and ``memory_budget``, as its newest readable checkpoint records them
    (earlier versions' missing fields: :data:`~quantax_lite.recipes.FIELDS_OF_EARLIER_RUNS`),
    and ``iters`` where recorded. None without ``--resume`` or without a checkpoint there (the
    run's start says so); a run that does not read raises ``FieldError`` naming ``out_dir``."""
    from quantax_lite.cli.training import default_out_dir
    from quantax_lite.driver.checkpoint import newest_readable_checkpoint
    from quantax_lite.recipes import recipe_of_run
    from quantax_lite.recipes.resources import RESOURCE_FIELDS

    if not getattr(args, "resume", False):
        return None
    try:
        out = args.out if args.out is not None else default_out_dir(args)
    except (TypeError, ValueError):  # options that name no folder: refused when the run starts
        return None
    if not os.path.isdir(out) or newest_readable_checkpoint(out) is None:  # no run: named when it starts
        return None
    recorded, _, metadata = recipe_of_run(out)  # a run it cannot read: the error names out_dir
    config = metadata["config"]
    # a recorded value as recorded (the recipe may hold it in another form: a conv net's
    # network_options moved to its fields), which the run folder's check compares with
    options = {name: config[name] if name in config else getattr(recorded, name)
               for name in RECIPE if name not in RESOURCE_FIELDS}
    if isinstance(metadata.get("iters"), int):  # the steps it was started for (earlier versions: not recorded)
        options["iters"] = metadata["iters"]
    return options


def recipe_of_args(args) -> Recipe:
    """The recipe of parsed ``train`` options. With ``--resume``, every recipe option that
    ``args`` does not give (on the command line or in ``--config``: ``args.given_options``),
    and 'auto' ``sampling`` and ``symmetry`` (decided when the run began, perhaps by an earlier
    version), is the run's own (:func:`options_of_run`), set on ``args`` (whose values the run
    records and compares); an option given that differs from the run is refused by the run
    folder's check, or here where the recipe mixed of both is invalid. Else 'auto' sampling
    with ``--samples`` given asks for samples, so the sampling is metropolis (an exact sum
    draws none), and the recipe decides the rest."""
    given, run_options = set(getattr(args, "given_options", ())), options_of_run(args)
    if run_options is not None and "iters" not in run_options and "iters" not in given:
        raise FieldError("iters", f"iters: the run in {args.out or 'its folder'} does not record how many steps it "
                         "was started for (an earlier version); give `iters`, the total number of steps.")
    if run_options is not None:
        changed = [f"`{name}` {getattr(args, name)} (was {run_options[name]})" for name in RECIPE
                   if name in given and name in run_options and getattr(args, name) != "auto"
                   and _plain(getattr(args, name)) != _plain(run_options[name])]
        if changed:  # the options given that differ, before any the run would decide from them
            raise FieldError("resume", "resume: these options differ from the run in the folder: " + ", ".join(changed))
        # the rest the run's; a sector left 'auto' is decided again as the run decided it, and said so
        vars(args).update({name: value for name, value in run_options.items() if (
            name not in given and name not in SECTOR_FIELDS) or (name in ("sampling", "symmetry") and getattr(
                args, name) == "auto")})
    fields = {name: getattr(args, name) for name in RECIPE}
    if fields["sampling"] == "auto" and "samples" in given:
        fields["sampling"] = "metropolis"
    return Recipe(**fields)


def _plain(value):
    """A value as JSON records it (a tuple as a list)."""
    return [_plain(v) for v in value] if isinstance(value, (list, tuple)) else value


def train(args) -> dict | None:
    """Run the training the options describe; returns the summary (None with --dry-run)."""
    import jax

    from quantax_lite.cli import training
    from quantax_lite.cli.report import format_table
    from quantax_lite.driver.checkpoint import checkpoint_step, newest_readable_checkpoint
    from quantax_lite.utils.processes import check_process_options, join_processes
    from quantax_lite.utils.validate import positive_int

    _usage(check_process_options, args.coordinator, args.num_processes, args.process_id)
    _usage(positive_int, args.init_timeout, "init_timeout")
    recipe = _usage(recipe_of_args, args)
    if recipe.sampling == "exact_sum" and "samples" in getattr(args, "given_options", ()):
        raise UsageError("--samples: the run sums over every configuration (sampling exact_sum), so it draws no "
                         "samples; leave --samples out.")
    out = args.out or training.default_out_dir(args)
    found = newest_readable_checkpoint(out) if args.resume else None
    taken = checkpoint_step(found[0]) if found else None
    if taken is not None and taken >= args.iters:
        raise UsageError(f"--iters: the run in {out} has taken {taken} steps already (--iters {args.iters}); give a "
                         "larger --iters to continue it (quantax-lite measure estimates it again).")
    _usage(training.check_run_options, iters=args.iters, checkpoint_every=args.checkpoint_every,
           keep_checkpoints=args.keep_checkpoints, time_limit=args.time_limit, init_from=args.init_from,
           resume=args.resume)
    if args.dry_run:
        _configure_jax()
        return _print_dry_run(training.dry_run(recipe, init_from=args.init_from))
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
    _configure_jax()  # (after joining: it starts the backend)
    config = {k: v for k, v in vars(args).items() if k not in _NOT_COMPARED}
    config["phase_rule"] = recipe.phase_rule_kind()  # what auto picks: runs made before the option resume
    config["sampling"], config["symmetry"] = recipe.sampling, recipe.symmetry  # as decided, not 'auto'
    config["schema_version"] = SCHEMA_VERSION  # the form read back (recipes.schema.migrate)
    if not recipe.has_momentum():  # no choice to record: a run of any version at k = 0 resumes
        config.pop("momentum_readout", None)
    summary = training.train(recipe, args.out, iters=args.iters, resume=args.resume, restart=args.restart,
                             checkpoint_every=args.checkpoint_every, keep_checkpoints=args.keep_checkpoints,
                             time_limit=args.time_limit, measure=args.measure, progress=not args.no_progress,
                             config=config, init_from=args.init_from)
    if jax.process_index() == 0:
        print(format_table(summary))
    return summary


def _print_dry_run(plan: dict) -> None:
    exact, chunks = plan["exact_energy"], plan["chunk_sizes"]
    rows = [("system", plan["system"]), ("parameters", plan["n_params"]), ("per step", plan["per_step"]),
            ("exact energy", "n/a" if exact is None else f"{exact:.8f} ({plan['exact_energy_source']})"),
            ("chunk sizes", f"local energies {chunks['local_energy'] or 'all'}, Jacobian {chunks['jacobian'] or 'all'}"
                            " (samples per device per chunk)"),
            ("time per step", f"{plan['seconds_per_step']:.3g} s (one step, timed after a first one of "
                              f"{plan['compile_and_first_step_s']:.3g} s that compiled it)")]
    if plan.get("init_from"):
        rows.append(("warm start", describe_source(plan["init_from"]).removeprefix("warm start ")))
    print("\n".join(f"{k:<14} {v}" for k, v in rows) + "\nnothing written (--dry-run)")


def measure(args) -> dict:
    """``quantax-lite measure``: the observables of the run in ``--out``; returns them."""
    from quantax_lite.cli.measure_run import measure_run
    from quantax_lite.cli.report import energy_unit

    if args.memory_budget is not None:
        raise UsageError("--memory-budget: measure does not choose its chunks from a memory budget; bound its "
                         "memory with --chunk-size (samples per device per chunk, e.g. 64).")
    _configure_jax()
    done = measure_run(args.out, samples=args.samples, seed=args.seed, chunk_size=args.chunk_size,
                       dimers=args.dimers, lanczos=args.lanczos, lanczos_passes=args.lanczos_passes,
                       progress=not args.no_progress)
    obs = done.observables
    e, spp, m2 = obs.get("energy", {}), obs["s_pi_pi"], obs["staggered_magnetization_sq"]
    fmt = lambda d, spec: "n/a" if d.get("mean") is None else (  # noqa: E731
        f"{d['mean']:{spec}} ± {d['error']:{spec}}" if d.get("error") is not None else f"{d['mean']:{spec}}")
    rows = [("energy", fmt(e, ".6f") + f"  [{energy_unit(done.recipe.hamiltonian)}]"),
            ("S(pi,pi)", fmt(spp, ".5f")), ("m^2", fmt(m2, ".6f"))]
    if "lanczos" in obs:
        lz = obs["lanczos"]
        first = lz.get("from_psi_samples", lz)  # the network's energy from its own samples
        rel = (f", relative error {lz['relative_error']:.3g} (network {first['variational_relative_error']:.3g})"
               if lz.get("relative_error") is not None else "")
        rows.append(("Lanczos", fmt({"mean": lz["energy"], "error": lz["error"] if not lz["exact_sums"] else None},
                                    ".6f") + f" (1 + alpha H)|psi>, alpha {lz['alpha'] if lz['alpha'] is None else format(lz['alpha'], '.4g')}{rel}"))
        if "from_psi_samples" in lz:  # the state psi_b was sampled at: its energy without reweighting
            own = (f", relative error {lz['sampled_state_relative_error']:.3g}"
                   if lz.get("sampled_state_relative_error") is not None else "")
            rows.append(("  sampled", fmt({"mean": lz["sampled_state_energy"], "error": lz["sampled_state_error"]},
                                          ".6f") + f" the state sampled, (1 + b (H - E))|psi> at b = "
                                                   f"{lz['sampled_state_beta']:.4g}, by its own samples{own}"))
    rows += [("written", ", ".join(os.path.basename(p) for p in done.written))]
    print("\n".join(f"{k:<9} {v}" for k, v in rows))
    return obs


def _differs(name: str, given, recorded) -> str:
    """``--name given (was recorded)`` of an option that differs from the evolution's; a
    switch by its name alone, a value not recorded as 'not given'."""
    if isinstance(given, bool):
        return f"{_option(name)} (was {'given' if recorded else 'not given'})"
    return f"{_option(name)} {given} (was {'not given' if recorded is None else recorded})"


def evolve_options(args) -> None:
    """Complete ``evolve``'s options on ``args``: with ``--resume``, each one not given is the
    evolution's own (:func:`~quantax_lite.cli.evolve_run.options_of_evolution`) and one given
    that differs is refused in one line naming it; the rest take their defaults."""
    from quantax_lite.cli.evolve_run import EVOLUTION_DEFAULTS, options_of_evolution, same_option

    recorded = _usage(options_of_evolution, args.out) if args.resume else None
    if recorded is not None:
        changed = [_differs(k, getattr(args, k), v) for k, v in recorded.items()
                   if getattr(args, k) is not None and not same_option(k, getattr(args, k), v)]
        if changed:
            raise UsageError("--resume: these options differ from the evolution in the folder: " + ", ".join(changed))
    for name, default in EVOLUTION_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default if recorded is None else recorded[name])


def evolve(args) -> dict:
    """``quantax-lite evolve``: :func:`quantax_lite.cli.evolve_run.evolve_run`; returns its summary."""
    from quantax_lite.cli.evolve_run import evolve_run

    evolve_options(args)
    _configure_jax()
    summary = evolve_run(args.out, init_from=args.init_from, initial_state=args.initial_state, lattice=args.lattice,
                         hamiltonian=args.hamiltonian, h=args.h, J2=args.J2, t_end=args.t_end, dt=args.dt,
                         tol=args.tol, integrator=args.integrator, regularization=args.regularization,
                         rcond=args.rcond, diag_shift=args.diag_shift, sampling=args.sampling, samples=args.samples,
                         imaginary=args.imaginary, seed=args.seed, resume=args.resume, restart=args.restart,
                         checkpoint_every=args.checkpoint_every, progress=not args.no_progress)
    final, dev = summary["final"], summary.get("max_deviation")
    rows = [("t", f"{summary['t']:g} in {summary['steps']} steps"),
            ("energy", f"{final['energy']:.6f} ± {final['energy_error']:.2g}"),
            ("<S^x>", f"{sum(final['sx']) / len(final['sx']):.6f} (site mean)")]
    if dev is not None:
        rows.append(("vs exact", f"max |dE| {dev['energy']:.2g}, max |d<S^x>| {dev['sx']:.2g}"))
    print("\n".join(f"{k:<9} {v}" for k, v in rows))
    return summary


def _give_up_waiting(args) -> None:
    """Called by a timer thread while the processes still wait for each other: exit 2."""
    print(f"quantax-lite train: error: --coordinator {args.coordinator}: not all {args.num_processes} "
          f"processes joined within --init-timeout {args.init_timeout} s; start every process with the "
          "same --coordinator and --num-processes and a distinct --process-id.", file=sys.stderr, flush=True)
    os._exit(2)


def _is_out_of_memory(err: BaseException) -> bool:
    return isinstance(err, MemoryError) or "RESOURCE_EXHAUSTED" in str(err) or "Out of memory" in str(err)


def main(argv=None) -> int:
    from quantax_lite.cli.evolve_run import EvolutionStopped
    from quantax_lite.driver.run_folder import RunFolderBusy
    from quantax_lite.cli.training import RunDiverged

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
            if args.command == "train" and args.config:  # the file's options, the typed ones on top
                found = read_config(args.config, parser.train_parser)
                parser.train_parser.set_defaults(**found)
                args = parser.parse_args(argv)
                args.given_options = set(getattr(args, "given_options", ())) | set(found)
            {"train": train, "measure": measure, "evolve": evolve}[args.command](args)
    except UsageError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except FieldError as err:
        print(f"{prog}: error: {_message(err)}", file=sys.stderr)
        return 2
    except RunFolderBusy as err:
        print(f"{prog}: error: --out {err}", file=sys.stderr)
        return 2
    except (RunDiverged, EvolutionStopped) as err:
        print(f"{prog}: diverged: {_message(err)}", file=sys.stderr)
        return 3
    except Exception as err:
        if not _is_out_of_memory(err):
            raise
        advice = ("pass a smaller --chunk-size (e.g. 64) or fewer --samples, or leave out the dimers (--no-dimers)"
                  if args.command == "measure" else "pass a smaller --memory-budget (e.g. 0.5 of the device's memory) "
                  "or --chunk-size (e.g. 64), lower --samples, or choose a smaller --lattice / --channels")
        print(f"{prog}: error: out of memory for this system; {advice}.", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
