"""The command's options: ``quantax-lite train`` and ``measure``, their help groups, and
``--config FILE`` (the options as a JSON or TOML file).

The recipe's fields (:class:`~quantax_lite.recipes.Recipe`) become options with the
recipe's help and defaults, grouped for a newcomer: system, sector, network, sampling,
optimization, run, memory and devices, multi-process. Options kept only for runs of earlier
versions (:data:`LEGACY`) are accepted and not shown.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import tomllib
from importlib.metadata import PackageNotFoundError, version

from quantax_lite.utils.errors import FieldError
from quantax_lite.hamiltonians import hamiltonian_entry, hamiltonian_names
from quantax_lite.recipes import Recipe, int_or_auto, int_or_float

__all__ = ["build_parser", "read_config", "RECIPE", "GROUPS", "LEGACY"]

RECIPE = {f.name: f.default for f in dataclasses.fields(Recipe)}
GROUPS = {"system": "the lattice and the Hamiltonian", "sector": "the symmetry the network is projected on and its "
          "sector", "network": "the neural network", "sampling": "how configurations are drawn (or summed over)",
          "optimization": "the parameter updates (SR / MinSR / SPRING)", "run": "the run folder, its length and "
          "reporting", "memory and devices": "how memory is bounded", "multi-process": "JAX's multi-controller "
          "runtime (one process per host)"}
# the help group of a recipe field where it is not the recipe's own
_GROUP_OF = {**dict.fromkeys(("symmetry", "momentum", "spin_parity", "rotation_parity"), "sector"),
             **dict.fromkeys(("sampling", "samples", "full_stage_samples", "chains", "sweep_size", "eval_samples",
                               "sampling_power"),
                             "sampling"), "seed": "run", "chunk_size": "memory and devices",
             "memory_budget": "memory and devices"}
LEGACY = {"norm", "momentum_readout"}  # accepted, not shown: options kept for runs of earlier versions


class _Given(argparse.Action):
    """Store the value and record that the option was given (``args.given_options``)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.given_options = set(getattr(namespace, "given_options", ())) | {self.dest}


class _GivenOff(_Given):
    """``--no-NAME``: a rule on by default turned off (False), recorded as given."""

    def __init__(self, option_strings, dest, default=True, help=None):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, False, option_string)


class _GivenOptions(_Given):
    """``--network-option key=value``, repeatable: the pairs merged into one mapping."""

    def __call__(self, parser, namespace, values, option_string=None):
        merged = dict(getattr(namespace, self.dest, None) or {})
        merged.update(values)
        super().__call__(parser, namespace, merged, option_string)


class _Parser(argparse.ArgumentParser):
    """argparse whose errors (an unreadable value, an unknown option) are one line, exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _version() -> str:
    """The installed package's version ("unknown" when run from a source tree not installed)."""
    try:
        return version("quantax_lite")
    except PackageNotFoundError:  # a source tree not installed
        return "unknown"


def _models_help() -> str:
    """``--hamiltonian``'s help: every model registered when the parser is built, with its phrase."""
    return "; ".join(f"{name}: {hamiltonian_entry(name).help}" for name in hamiltonian_names())


def build_parser() -> argparse.ArgumentParser:
    """The command's parser; its ``train_parser`` attribute is the parser of ``train``."""
    parser = _Parser(prog="quantax-lite", description="Neural quantum states by variational Monte Carlo.")
    parser.add_argument("--version", action="version", version=f"quantax-lite {_version()}")
    sub = parser.add_subparsers(dest="command")
    t = parser.train_parser = sub.add_parser(
        "train", usage="%(prog)s [options]  (see the groups below)", help="train a neural quantum state (default: 4x4 Heisenberg)",
        description="Train a symmetrized neural quantum state by VMC. Energies in spin-1/2 units (Heisenberg, "
        "J1-J2) or Pauli units (tfim). Writes log.jsonl, summary.json, energy.png and the last checkpoints to --out; "
        "exit status 2 for a usage error, 3 for a run that diverged.")
    g = {name: t.add_argument_group(name, text) for name, text in GROUPS.items()}
    # network: the options of quantax_lite.Recipe's network fields, among them a registered
    # network's name and its own options (--network NAME --network-option key=value)
    for f in dataclasses.fields(Recipe):
        meta, name = f.metadata, "--" + f.name.replace("_", "-")
        group = g.get(_GROUP_OF.get(f.name, meta.get("group")), g["network"])
        if f.name == "network_options":  # one key=value per use, repeated for several
            group.add_argument("--network-option", dest=f.name, metavar="KEY=VALUE", type=meta["type"], default=None,
                               action=_GivenOptions, help=meta["help"] + " (repeat for several)")
            continue
        if meta["type"] is bool:  # a rule on by default: a --no-... switch
            group.add_argument(f"--no-{f.name}", dest=f.name, action=_GivenOff, help=f"do not apply {meta['help']}")
            continue
        shown = "" if f.default is None else f" (default: {f.default})"
        text = _models_help() if f.name == "hamiltonian" else meta["help"]
        group.add_argument(name, type=meta["type"], default=f.default, choices=meta["choices"], action=_Given,
                           help=argparse.SUPPRESS if f.name in LEGACY else text + shown)
    r = g["run"]
    r.add_argument("--config", metavar="FILE", help="read the options from FILE (TOML if it ends in .toml, "
                   "else JSON: {\"lattice\": \"6x6\", \"lr\": 0.01, ...}, keys as the options' names); options "
                   "given on the command line override it")
    r.add_argument("--dry-run", action="store_true", help="print the parameter count, reference energy, sector, "
                   "chunk sizes and the time of one step, then exit; writes nothing")
    r.add_argument("--iters", type=int, default=600, action=_Given, help="total VMC steps, counting those a "
                   "resumed run already took (default: 600; with --resume, the run's own)")
    r.add_argument("--out", help="output directory (default: runs/<hamiltonian>_<lattice>)")
    r.add_argument("--resume", action="store_true", help="continue the run in --out from its newest readable "
                   "checkpoint, with the run's own options: those left out take the run's values; one given that "
                   "differs from the run is refused (--iters, --time-limit, --checkpoint-every, --keep-checkpoints, "
                   "--measure, --no-progress, --chunk-size and --memory-budget may change)")
    r.add_argument("--restart", action="store_true", help="delete the run in --out and start it again")
    r.add_argument("--init-from", metavar="RUN_DIR", help="warm start: take the first parameters from the newest "
                   "checkpoint of the run in RUN_DIR (a --out folder), e.g. a trained 6x6 run for a 10x10 one; the "
                   "same network and options (the conv net's parameters do not depend on the lattice size), any "
                   "lattice, Hamiltonian or sampling; the optimizer and chains start fresh")
    r.add_argument("--checkpoint-every", type=int, default=25, help="steps between checkpoints (default: 25)")
    r.add_argument("--keep-checkpoints", type=int, default=3, help="newest checkpoints kept, an older one is used "
                   "when the newest is damaged (default: 3)")
    r.add_argument("--time-limit", type=float, metavar="MINUTES", help="stop training after this many minutes of "
                   "wall time, with a checkpoint; the final estimate still runs, summary.json says "
                   "stopped_at_time_limit, and --resume continues to --iters")
    r.add_argument("--measure", action="store_true", help="at the end, also measure the observables on the final "
                   "estimate's samples, as quantax-lite measure does")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    m = g["multi-process"]
    m.add_argument("--coordinator", help="HOST:PORT of process 0")
    m.add_argument("--num-processes", type=int, help="number of processes")
    m.add_argument("--process-id", type=int, help="this process's index")
    m.add_argument("--init-timeout", type=int, default=300, help="seconds to wait for every process (default: 300)")
    m.add_argument("--distributed", action="store_true", help="call jax.distributed.initialize() with "
                   "auto-detection (SLURM, Open MPI, ...)")
    m = sub.add_parser("measure", help="measure the observables of a trained run (correlations, S(q), ...)",
                       description="Rebuild the run in --out from its newest readable checkpoint, draw fresh samples "
                       "and write observables.json (energy, <S_i.S_j>, C(r), S(q), S(pi,pi), m^2, dimer correlations; "
                       "spin-1/2 units), structure_factor.png and correlations.png to --out. It prints its cost "
                       "(network evaluations) first. Exit status 2 for a usage error (one line).")
    m.add_argument("--out", required=True, help="the run folder (a quantax-lite train --out)")
    m.add_argument("--samples", type=int, help="fresh samples, drawn in blocks of the run's samples per step "
                   "(default: the run's --eval-samples)")
    m.add_argument("--seed", type=int, default=0, help="PRNG seed of the fresh chains (default: 0)")
    m.add_argument("--chunk-size", type=int_or_auto, default="auto", help="samples per device per chunk of the "
                   "network evaluations, to bound memory; auto: the library's (default: auto)")
    m.add_argument("--memory-budget", type=int_or_float, help=argparse.SUPPRESS)  # refused: see measure()
    m.add_argument("--no-dimers", dest="dimers", action="store_false", help="leave out the dimer correlations "
                   "(N_bonds^2 network evaluations per sample and axis)")
    m.add_argument("--lanczos", action="store_true", help="also one Lanczos step: the energy of (1 + alpha H)|psi> "
                   "with the optimal alpha, on the same samples (about max_conn^2 network evaluations per sample), "
                   "reported beside the network's own energy")
    m.add_argument("--lanczos-passes", type=int, default=2, metavar="N",
                   help="with --lanczos on a sampled run: sets of samples, at least 2: the run's own, then one of "
                        "the step's state per further pass, each at the step the previous set chose; the last "
                        "set also gives the energy of the state it was drawn from, without reweighting "
                        "(default: 2)")
    m.add_argument("--no-progress", action="store_true", help="no progress messages")
    _add_evolve(sub)
    return parser


def _add_evolve(sub) -> None:
    """``quantax-lite evolve``: time evolution by TDVP (:func:`quantax_lite.cli.evolve_run.evolve_run`)."""
    e = sub.add_parser("evolve", help="evolve a wavefunction in real or imaginary time (TDVP) after a quench",
                       description="Evolve a trained run's wavefunction (--init-from) or a product state "
                       "(--initial-state x) under the Hamiltonian the options give, by TDVP, to --t-end. Writes "
                       "log.jsonl (t, energy, <S^x_i>, <S^z_i> with errors, TDVP residual), checkpoints, summary.json "
                       "and observables_vs_time.png (with the exact curves up to 16 sites) to --out. Exit status 2 "
                       "for a usage error (one line), 3 for an evolution that diverged.")
    e.add_argument("--out", required=True, help="the run folder to write")
    e.add_argument("--init-from", metavar="RUN_DIR", help="start from the newest parameters of this train run folder")
    e.add_argument("--initial-state", choices=("x",), help="start from a product state: x, every spin along +x")
    e.add_argument("--lattice", help="the lattice (with --initial-state; with --init-from it must be the run's)")
    e.add_argument("--hamiltonian", help="the quench's model (default: the run's, or heisenberg); " + _models_help())
    e.add_argument("--h", type=float, help="transverse field of tfim (Pauli units)")
    e.add_argument("--J2", type=float, help="next-nearest coupling of j1j2")
    e.add_argument("--t-end", type=float, required=True, help="the final time (inverse energy units, hbar = 1)")
    e.add_argument("--dt", type=float, help="time step (default: 0.01; the adaptive integrator's first proposal)")
    e.add_argument("--tol", type=float, help="adaptive integrator: error per step in the S metric (default: 1e-4)")
    e.add_argument("--integrator", choices=("euler", "heun", "rk4", "adaptive"),
                   help="Runge-Kutta method: adaptive (Bogacki-Shampine 3(2) with --tol), or fixed steps of --dt "
                   "(default: adaptive)")
    e.add_argument("--regularization", choices=("pinv", "shift"), help="solve of S theta' = F: pinv "
                   "(eigenvalues below --rcond x the largest dropped) or shift (--diag-shift) (default: pinv)")
    e.add_argument("--rcond", type=float, help="pinv cutoff (default: 1e-6)")
    e.add_argument("--diag-shift", type=float, help="shift regularization (default: 1e-6)")
    e.add_argument("--sampling", choices=("exact_sum", "metropolis"),
                   help="exact sums over every configuration, or Markov-chain samples (default: exact_sum)")
    e.add_argument("--samples", type=int, help="samples per evaluation with metropolis (default: 1024)")
    e.add_argument("--imaginary", action="store_true", default=None, help="imaginary time (toward the ground state)")
    e.add_argument("--seed", type=int, help="PRNG seed of the network and chains (default: 0)")
    e.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints (default: 10)")
    e.add_argument("--resume", action="store_true", help="continue the evolution in --out: the options left out "
                   "are the evolution's, any given must equal the evolution's (--t-end may grow)")
    e.add_argument("--restart", action="store_true", help="delete the evolution in --out and start again")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")


def read_config(path: str, parser: argparse.ArgumentParser) -> dict:
    """The options a ``--config`` file sets, ``{dest: value}``, each value read as ``parser``
    reads it on the command line (a list such as ``momentum = [1, 0]`` as '1,0', a switch
    as true or false). The file: TOML if its name ends in .toml, else JSON; a table of
    options, in which a table named after a help group (``[system]``, ``[sampling]``) or
    not after an option is a section of options. Keys may use '-' or '_'. :class:`~quantax_lite.utils.errors.FieldError` of
    ``config`` for a file that cannot be read, an unknown key or an unreadable value."""
    actions = {a.dest: a for a in parser._actions if a.dest not in ("help", "config", "dry_run")}
    toml = path.lower().endswith(".toml")
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        data = tomllib.loads(raw.decode()) if toml else json.loads(raw)
    except OSError as err:
        raise FieldError("config", f"config: {path}: cannot read it ({err.strerror or err}).") from None
    except ValueError as err:  # JSONDecodeError, TOMLDecodeError, UnicodeDecodeError
        raise FieldError("config", f"config: {path}: not valid {'TOML' if toml else 'JSON'} "
                         f"({' '.join(str(err).split())}).") from None
    if not isinstance(data, dict):
        raise FieldError("config", f"config: {path}: expected a table of options, got {type(data).__name__}.")
    found = {}
    for key, value in data.items():
        section = isinstance(value, dict) and (key in GROUPS or key.replace("-", "_") not in actions)
        for name, v in value.items() if section else [(key, value)]:
            action = actions.get(name.replace("-", "_"))
            if action is None:
                raise FieldError("config", f"config: {path}: unknown key {name!r}; the keys are train's options "
                                 "(lattice, hamiltonian, symmetry, samples, lr, iters, ...).")
            found[action.dest] = _config_value(action, v, f"config: {path}: {name}")
    return found


def _config_value(action, value, where: str):
    if value is None or action.nargs == 0:  # a switch: true or false
        if value is not None and not isinstance(value, bool):
            raise FieldError("config", f"{where}: expected true or false, got {value!r}.")
        return value
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    try:
        value = action.type(text) if action.type else text
    except (argparse.ArgumentTypeError, TypeError, ValueError) as err:
        raise FieldError("config", f"{where}: cannot read {text!r} ({err}).") from None
    if action.choices and value not in action.choices:
        raise FieldError("config", f"{where}: expected one of {', '.join(map(str, action.choices))}, got {value!r}.")
    return value
