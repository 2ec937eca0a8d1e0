"""The ``quantax-lite`` command: ``quantax-lite train [options]``.

With no options it trains the symmetrized conv network on the 4x4 Heisenberg
antiferromagnet and prints energy ± error, energy per site, the exact energy,
the relative error, the V-score and the wall time.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import threading
import time
import warnings

DEFAULTS = dict(lattice="4x4", hamiltonian="heisenberg", iters=600, samples=1024, lr=0.02)

# Literature ground-state energies (spin-1/2 units, periodic) for lattices too large
# for exact diagonalization here: (lattice, hamiltonian, J2) -> energy per site.
LITERATURE_ENERGY_PER_SITE = {
    ("6x6", "heisenberg", 0.0): -0.678872,  # exact diagonalization
    ("6x6", "j1j2", 0.5): -0.50381,  # exact diagonalization
    ("10x10", "heisenberg", 0.0): -0.671549,  # quantum Monte Carlo
}
MAX_ED_SITES = 20


class UsageError(Exception):
    """A bad command-line option: printed as a one-line error, not a traceback."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="quantax-lite",
        description="Neural quantum states by variational Monte Carlo.",
    )
    sub = parser.add_subparsers(dest="command")
    t = sub.add_parser(
        "train",
        help="train a neural quantum state (default: 4x4 Heisenberg)",
        description=(
            "Train the symmetrized convolutional NQS by VMC with SR/MinSR. Energies in "
            "spin-1/2 units (Heisenberg, J1-J2) or Pauli units (tfim). Writes log.jsonl, "
            "summary.json, energy.png and the last checkpoints (checkpoint-<step>.npz) to --out; exit "
            "status 2 for a usage error, 3 for a run that diverged."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = t.add_argument_group("system")
    g.add_argument("--lattice", default=DEFAULTS["lattice"],
                   help="'LxL' or 'LxxLy' square lattice (e.g. 4x4, 6x6), or 'chain:L'; periodic")
    g.add_argument("--hamiltonian", default=DEFAULTS["hamiltonian"], choices=["heisenberg", "j1j2", "tfim"],
                   help="heisenberg: H = J1 sum S.S; j1j2: adds J2 on next-nearest bonds; "
                        "tfim: H = -sum sz sz - h sum sx (Pauli units)")
    g.add_argument("--J2", type=float, default=None, help="next-nearest coupling (j1j2 only; default 0.5)")
    g.add_argument("--h", type=float, default=None, help="transverse field (tfim only; default 1.0)")
    g.add_argument("--no-marshall", action="store_true",
                   help="do not apply the Marshall sign rule (Heisenberg / J1-J2 on bipartite lattices)")
    g = t.add_argument_group("network")
    g.add_argument("--symmetry", default="translations", choices=["none", "translations", "full"],
                   help="projection group: full = translations x point group x spin inversion (16x the "
                        "network evaluations of translations on a square lattice: more accurate, slower)")
    g.add_argument("--depth", type=int, default=None, help="residual blocks (default by lattice size)")
    g.add_argument("--channels", type=int, default=None, help="conv channels (default by lattice size)")
    g.add_argument("--kernel-size", type=int, default=None, help="conv kernel size (default 3 in 2D, 5 in 1D)")
    g.add_argument("--norm", default="none", choices=["none", "layer"],
                   help="normalization before each activation: none (default), or a LayerNorm over the channels "
                        "(about twice the cost of a forward pass on CPUs)")
    g.add_argument("--conv", default="auto", choices=["auto", "dense", "gather", "lax"],
                   help="convolution implementation (same parameters, same values); auto: the fastest on "
                        "CPUs for the size (quantax_lite.models.choose_conv): dense (one block-circulant "
                        "matrix product) for small lattices, else lax.conv for forward passes and, in "
                        "float64, the gather form for the Jacobian")
    g.add_argument("--amplitude", default="auto", choices=["auto", "positive", "signed", "complex"],
                   help="network output: positive (real log psi) for sign-free ground states; signed (a "
                        "real psi with a learned sign, for real Hamiltonians with a sign structure); "
                        "complex (a free phase); auto: positive for heisenberg with the Marshall sign and "
                        "for tfim (for h < 0 in the basis rotated by prod sz, which makes its ground "
                        "state positive), signed otherwise")
    g.add_argument("--precision", default="f32", choices=["f32", "f64"],
                   help="network precision (the SR solve is always float64)")
    g = t.add_argument_group("optimization")
    g.add_argument("--iters", type=int, default=DEFAULTS["iters"], help="VMC steps")
    g.add_argument("--samples", type=int, default=DEFAULTS["samples"], help="samples per step")
    g.add_argument("--chains", type=int, default=None,
                   help="Markov chains (default: one per sample, rounded to a multiple of the device count)")
    g.add_argument("--sweep-size", type=int, default=None,
                   help="Metropolis proposals per chain between recorded samples (default: n_sites/2 "
                        "exchanges of anti-aligned pairs for Sz-conserving models, n_sites flips otherwise)")
    g.add_argument("--chunk-size", type=int, default=None,
                   help="samples per device per chunk for local energies and Jacobians (default: no chunking)")
    g.add_argument("--lr", type=float, default=DEFAULTS["lr"], help="initial learning rate")
    g.add_argument("--lr-half-life", type=float, default=100.0,
                   help="steps over which the learning rate halves (down to lr/10); the schedule does "
                        "not depend on --iters, so a resumed, extended run continues it")
    g.add_argument("--diag-shift", type=float, default=1e-4, help="absolute SR diagonal shift")
    g.add_argument("--diag-scale", type=float, default=0.0, help="relative SR diagonal shift (x mean diag of S)")
    g.add_argument("--sr-momentum", type=float, default=0.0,
                   help="SPRING memory mu in [0, 1): each SR direction keeps mu times the last one where "
                        "the step's samples leave it undetermined (averages MinSR's sampling noise); 0: "
                        "plain MinSR")
    g.add_argument("--gram-precision", default="jacobian", choices=["jacobian", "float64"],
                   help="precision in which the SR matrix (MinSR's T = O O^T) is formed: the Jacobian's own "
                        "(float32 with --precision f32; twice as fast) or float64; the solve is float64 "
                        "either way")
    g.add_argument("--eval-samples", type=int, default=None,
                   help="fresh samples for the final energy (default 32 x samples, drawn in blocks of --samples)")
    g.add_argument("--seed", type=int, default=0, help="PRNG seed")
    g = t.add_argument_group("output")
    g.add_argument("--out", default=None, help="output directory (default runs/<hamiltonian>_<lattice>)")
    g.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its newest readable checkpoint")
    g.add_argument("--restart", action="store_true",
                   help="delete the run in --out (log, checkpoints, summary, plot) and start it again")
    g.add_argument("--checkpoint-every", type=int, default=25, help="steps between checkpoints")
    g.add_argument("--keep-checkpoints", type=int, default=3,
                   help="how many of the newest checkpoints to keep (an older one is used when the "
                        "newest is damaged)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = t.add_argument_group("multi-process (JAX's multi-controller runtime)")
    g.add_argument("--coordinator", default=None, help="HOST:PORT of process 0")
    g.add_argument("--num-processes", type=int, default=None, help="number of processes")
    g.add_argument("--process-id", type=int, default=None, help="this process's index")
    g.add_argument("--init-timeout", type=int, default=300,
                   help="seconds to wait for every process to join before giving up")
    g.add_argument("--distributed", action="store_true",
                   help="call jax.distributed.initialize() with auto-detection (SLURM, Open MPI, ...)")
    return parser


# --------------------------------------------------------------------------- #
# option checking                                                              #
# --------------------------------------------------------------------------- #


def parse_lattice(text: str):
    """'4x4' / '4x6' -> Square, 'chain:20' -> Chain (periodic)."""
    from .lattice import Chain, Square

    m = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*", text)
    if m:
        return Square(int(m.group(1)), int(m.group(2)))
    m = re.fullmatch(r"\s*chain\s*:\s*(\d+)\s*", text)
    if m:
        return Chain(int(m.group(1)))
    raise UsageError(f"--lattice: cannot read {text!r}; expected e.g. '4x4', '6x4' or 'chain:20'.")


def check_options(args, n_devices: int) -> None:
    """Raise UsageError for option combinations that cannot work."""
    if args.hamiltonian != "j1j2" and args.J2 is not None:
        raise UsageError(f"--J2 applies to --hamiltonian j1j2 only, not {args.hamiltonian}.")
    if args.hamiltonian != "tfim" and args.h is not None:
        raise UsageError(f"--h applies to --hamiltonian tfim only, not {args.hamiltonian}.")
    for name in ("iters", "samples", "checkpoint_every"):
        if getattr(args, name) < 0 or (name != "checkpoint_every" and getattr(args, name) == 0):
            raise UsageError(f"--{name.replace('_', '-')}: expected a positive integer, got {getattr(args, name)}.")
    for name in ("chains", "sweep_size", "chunk_size", "eval_samples", "depth", "channels", "kernel_size"):
        v = getattr(args, name)
        if v is not None and v <= 0:
            raise UsageError(f"--{name.replace('_', '-')}: expected a positive integer, got {v}.")
    for name in ("lr", "lr_half_life"):
        v = getattr(args, name)
        if not (math.isfinite(v) and v > 0):
            raise UsageError(f"--{name.replace('_', '-')}: expected a finite positive number, got {v}.")
    for name in ("diag_shift", "diag_scale"):
        v = getattr(args, name)
        if not (math.isfinite(v) and v >= 0):
            raise UsageError(f"--{name.replace('_', '-')}: expected a finite number >= 0, got {v}.")
    for name in ("J2", "h"):
        v = getattr(args, name)
        if v is not None and not math.isfinite(v):
            raise UsageError(f"--{name}: expected a finite number, got {v}.")
    if not 0 <= args.sr_momentum < 1:
        raise UsageError(f"--sr-momentum: expected a number in [0, 1), got {args.sr_momentum}.")
    if args.keep_checkpoints < 1:
        raise UsageError(f"--keep-checkpoints: expected a positive integer, got {args.keep_checkpoints}.")
    if args.resume and args.restart:
        raise UsageError("--resume and --restart exclude each other: continue the run, or start it again.")
    chains = args.chains
    if chains % n_devices:
        raise UsageError(
            f"--chains {chains} must be a multiple of the device count {n_devices} "
            "(the chains are split over every device)."
        )
    if args.samples % chains:
        raise UsageError(f"--samples {args.samples} must be a multiple of --chains {chains}.")
    if args.eval_samples % chains:
        raise UsageError(f"--eval-samples {args.eval_samples} must be a multiple of --chains {chains}.")
    if args.eval_samples > args.samples and args.eval_samples % args.samples:
        raise UsageError(
            f"--eval-samples {args.eval_samples} must be a multiple of --samples {args.samples} "
            "(the final estimate is drawn in blocks of one step's samples)."
        )
    check_process_options(args)


def check_process_options(args) -> None:
    """Raise UsageError for inconsistent multi-process options (before any process waits)."""
    multi = [args.coordinator, args.num_processes, args.process_id]
    if any(v is not None for v in multi) and not all(v is not None for v in multi):
        raise UsageError("--coordinator, --num-processes and --process-id go together.")
    if args.coordinator is None:
        return
    m = re.fullmatch(r"(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.\-]+):(\d+)", args.coordinator)
    if not m or not 0 < int(m.group(2)) < 65536:
        raise UsageError(f"--coordinator: expected HOST:PORT with a port in 1..65535, got {args.coordinator!r}.")
    if args.num_processes < 1:
        raise UsageError(f"--num-processes: expected a positive integer, got {args.num_processes}.")
    if not 0 <= args.process_id < args.num_processes:
        raise UsageError(
            f"--process-id: expected 0 .. {args.num_processes - 1} (--num-processes {args.num_processes}), "
            f"got {args.process_id}."
        )
    if args.init_timeout < 1:
        raise UsageError(f"--init-timeout: expected a positive number of seconds, got {args.init_timeout}.")


def default_chains(samples: int, n_devices: int) -> int:
    """One chain per sample (each records one sample per step), rounded down to a multiple
    of the device count (at least one per device). Independent chains make every sample
    of a step independent of the others."""
    return max(n_devices, samples // n_devices * n_devices)


# Options added after runs were made without them, with the value those runs had:
# resuming such a run with another value names the option instead of failing on the
# checkpoint's shapes.
_OPTIONS_OF_EARLIER_RUNS = {"norm": "layer", "gram_precision": "float64"}


def check_out_dir(out: str) -> None:
    """--out must be a folder this process can create and write."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise UsageError(f"--out {out}: exists and is not a folder.")
    try:
        os.makedirs(out, exist_ok=True)
        probe = os.path.join(out, f".write-test-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as err:
        raise UsageError(f"--out {out}: cannot write there ({err.strerror or err}).") from None


def holds_run(out: str) -> bool:
    """Whether ``out`` holds files of a run (log, checkpoints, summary or plot)."""
    from .run_folder import RUN_FILES, list_checkpoints

    return bool(list_checkpoints(out)) or any(os.path.exists(os.path.join(out, f)) for f in RUN_FILES)


def prepare_out_dir(out: str, resume: bool, restart: bool = False) -> None:
    """Check that --out suits --resume / --restart / a new run (the caller holds its lock);
    with --restart, delete the run there."""
    from .run_folder import list_checkpoints
    from .vmc import clear_run

    if resume:
        if not list_checkpoints(out):
            stopped = " (the run there stopped before its first checkpoint)" if holds_run(out) else ""
            raise UsageError(
                f"--resume: {out} holds no checkpoint to resume from{stopped}; pass --restart "
                "to start it again."
            )
        return
    if restart:
        clear_run(out)
        return
    if holds_run(out):
        raise UsageError(
            f"--out {out} already holds a run; pass --resume to continue it, --restart to start "
            "it again, or choose another --out."
        )


# --------------------------------------------------------------------------- #
# building the run                                                             #
# --------------------------------------------------------------------------- #


def build_system(args):
    """Lattice, Hamiltonian and symmetry group from the options."""
    from . import symmetry as sym
    from .operators import Heisenberg, TransverseFieldIsing

    try:
        lattice = parse_lattice(args.lattice)
    except ValueError as err:
        raise UsageError(f"--lattice {args.lattice}: {err}") from None
    if args.hamiltonian != "tfim" and lattice.n_sites % 2:
        raise UsageError(
            f"--lattice {args.lattice}: {lattice.n_sites} sites; the {args.hamiltonian} model is sampled "
            "in the Sz = 0 sector, which needs an even number of sites."
        )
    if args.hamiltonian == "tfim":
        # for h < 0, the basis rotated by prod sz (same spectrum) makes the ground state positive
        ham = TransverseFieldIsing(lattice, J=1.0, h=1.0 if args.h is None else args.h, sign_rule=True)
    else:
        j2 = (0.5 if args.J2 is None else args.J2) if args.hamiltonian == "j1j2" else 0.0
        marshall = lattice.is_bipartite and not args.no_marshall
        ham = Heisenberg(lattice, J1=1.0, J2=j2, marshall_sign=marshall)
    if args.symmetry == "none":
        group = None
    elif args.symmetry == "translations":
        group = sym.translations(lattice)
    else:
        group = sym.full_symmetry(lattice)
    return lattice, ham, group


def amplitude_kind(args, ham) -> str:
    """The network output: "positive" (real log psi), "signed" (real psi, learned sign)
    or "complex" (free phase)."""
    if args.amplitude != "auto":
        return args.amplitude
    if args.hamiltonian == "tfim":
        # -h sx: non-positive off-diagonal elements (a positive ground state) for h >= 0,
        # or for any h in the sign-rule basis; otherwise the sign (-1)^(number of down spins)
        return "positive" if ham.field >= 0 else "signed"
    if args.hamiltonian == "heisenberg" and ham.marshall_sign:
        return "positive"
    # every Hamiltonian here is real and the sector's characters are 1: a real ground state
    return "signed"


def reference_energy(args, lattice, ham) -> float | None:
    """The exact energy: sparse diagonalization up to 20 sites, else a literature value."""
    j2 = float(getattr(ham, "J2", 0.0) or 0.0)
    key = (lattice.name, args.hamiltonian, j2)
    if key in LITERATURE_ENERGY_PER_SITE:
        return LITERATURE_ENERGY_PER_SITE[key] * lattice.n_sites
    if lattice.n_sites <= MAX_ED_SITES:
        from .exact import ground_state_energy

        return float(ground_state_energy(ham))
    return None


def build_vmc(args, lattice, ham, group):
    import jax
    import jax.numpy as jnp
    import optax

    from .models import choose_conv, count_params, default_conv_architecture, make_conv_nqs, real_part
    from .sampler import Exchange, LocalFlip, MetropolisSampler
    from .vmc import VMC

    dtype = jnp.float32 if args.precision == "f32" else jnp.float64
    channels = args.channels or default_conv_architecture(lattice)["channels"]
    if args.conv == "auto":
        forward_conv = choose_conv(lattice.n_sites, channels, dtype)
        gradient_conv = choose_conv(lattice.n_sites, channels, dtype, gradient=True)
    else:
        forward_conv = gradient_conv = args.conv

    kind = amplitude_kind(args, ham)

    def network(conv):
        return make_conv_nqs(
            lattice, group, channels=args.channels, depth=args.depth, kernel_size=args.kernel_size,
            dtype=dtype, conv=conv, merge_translations=group is not None,
            complex_output=kind != "positive", signed=kind == "signed", norm=args.norm,
        )

    model = network(forward_conv)  # both forms share one parameter layout
    grad_model = model if gradient_conv == forward_conv else network(gradient_conv)
    # a signed network's imaginary part (0 or pi) has no derivatives: a real Jacobian
    jacobian_log_psi = real_part(grad_model.apply) if kind == "signed" else grad_model.apply
    key = jax.random.PRNGKey(args.seed)
    k_params, k_chains = jax.random.split(key)
    params = model.init(k_params, jnp.ones((1, lattice.n_sites), jnp.int8))
    if ham.conserves_sz:
        rule, total_sz = Exchange(lattice.bonds(1), anti_aligned=True), 0
        sweep = args.sweep_size or max(1, lattice.n_sites // 2)
    else:
        rule, total_sz = LocalFlip(), None
        sweep = args.sweep_size or lattice.n_sites
    sampler = MetropolisSampler(
        model.apply, rule, n_chains=args.chains, n_sites=lattice.n_sites, sweep_size=sweep,
        chunk_size=args.chunk_size, total_sz=total_sz,
    )
    schedule = optax.exponential_decay(args.lr, transition_steps=args.lr_half_life, decay_rate=0.5,
                                       end_value=args.lr / 10)
    vmc = VMC(
        ham, model.apply, sampler, optax.sgd(schedule), n_samples=args.samples,
        chunk_size=args.chunk_size, diag_shift=args.diag_shift, diag_scale=args.diag_scale,
        jacobian_log_psi=jacobian_log_psi, sr_momentum=args.sr_momentum,
        gram_precision=args.gram_precision,
    )
    return vmc, vmc.init(k_chains, params), count_params(params)


# --------------------------------------------------------------------------- #
# outputs                                                                      #
# --------------------------------------------------------------------------- #


def plot_energy(path: str, log: list[dict], exact: float | None, title: str) -> None:
    """energy.png: energy vs iteration (with error bars), the exact energy as a line, and
    the relative error on a log scale when the exact energy is known."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    it = [r["iteration"] for r in log]
    e = [r["energy"] for r in log]
    err = [r["energy_error"] for r in log]
    n_panels = 2 if exact is not None else 1
    fig, axes = plt.subplots(n_panels, 1, figsize=(6.4, 3.0 * n_panels), sharex=True, squeeze=False)
    ax = axes[0, 0]
    ax.errorbar(it, e, yerr=err, fmt=".", ms=2, lw=0.5, label="VMC")
    if exact is not None:
        ax.axhline(exact, color="k", lw=1, ls="--", label=f"exact {exact:.6f}")
        lo = min(e[len(e) // 10:] or e)
        ax.set_ylim(lo - 0.02 * abs(exact), exact + 0.1 * abs(exact) if e[0] > exact + 0.1 * abs(exact) else max(e) + 0.01)
        rel = [max(abs((x - exact) / exact), 1e-16) for x in e]  # log scale: no zeros
        axes[1, 0].semilogy(it, rel, ".", ms=2)
        axes[1, 0].set_ylabel("|E - E_exact| / |E_exact|")
    ax.set_ylabel("energy")
    ax.set_title(title)
    ax.legend()
    axes[-1, 0].set_xlabel("iteration")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def format_table(summary: dict) -> str:
    def fmt(v, spec):
        return "n/a" if v is None else format(v, spec)

    rows = [
        ("system", f"{summary['hamiltonian']} on {summary['lattice']} ({summary['n_sites']} sites)"),
        ("parameters", f"{summary['n_params']}"),
        ("energy", f"{summary['energy']:.6f} ± {summary['energy_error']:.6f}"),
        ("energy per site", f"{summary['energy_per_site']:.8f}"),
        ("exact energy", fmt(summary["exact_energy"], ".6f")),
        ("relative error", fmt(summary["relative_error"], ".2e")),
        ("V-score", f"{summary['v_score']:.2e}"),
        ("time", f"{summary['wall_time_s']:.1f} s ({summary['seconds_per_iteration'] * 1e3:.0f} ms/iteration, "
                 f"{summary['device_count']} device(s), {summary['process_count']} process(es))"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


# --------------------------------------------------------------------------- #
# train                                                                        #
# --------------------------------------------------------------------------- #


def _init_runtime(args):
    import jax

    if args.coordinator is not None or args.distributed:
        if jax.config.jax_platforms in (None, "", "cpu") or os.environ.get("JAX_PLATFORMS", "") == "cpu":
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        if args.coordinator is not None:
            print(f"quantax-lite: process {args.process_id} of {args.num_processes} waiting up to "
                  f"{args.init_timeout} s for the others at {args.coordinator}", file=sys.stderr, flush=True)
            # JAX aborts the whole process when its own timeout passes: give up cleanly first
            watchdog = threading.Timer(args.init_timeout, _give_up_waiting, (args,))
            watchdog.daemon = True
            watchdog.start()
            try:
                jax.distributed.initialize(
                    coordinator_address=args.coordinator, num_processes=args.num_processes,
                    process_id=args.process_id, initialization_timeout=args.init_timeout + 60,
                )
            except Exception as err:  # the runtime raises XlaRuntimeError / RuntimeError kinds
                first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
                raise UsageError(
                    f"--coordinator {args.coordinator}: could not join the {args.num_processes} "
                    f"processes ({first})."
                ) from None
            finally:
                watchdog.cancel()
        else:
            jax.distributed.initialize(initialization_timeout=args.init_timeout)
    jax.config.update("jax_enable_x64", True)  # the SR solve runs in float64


def _run_config(args) -> dict:
    """The options that define a run (compared on --resume)."""
    return {k: v for k, v in vars(args).items()
            if k not in ("resume", "restart", "out", "no_progress", "coordinator", "process_id", "iters",
                         "checkpoint_every", "keep_checkpoints", "command", "distributed", "num_processes",
                         "init_timeout")}


def _check_resumable(out: str, config: dict) -> None:
    """--resume: the options must be those of the run in ``out`` (named when not)."""
    from .vmc import newest_readable_checkpoint

    found = newest_readable_checkpoint(out)
    if found is None:
        raise UsageError(f"--resume: every checkpoint in {out} is damaged; pass --restart to start again.")
    old = {**_OPTIONS_OF_EARLIER_RUNS, **found[1].get("config", {})}
    changed = {k: (old.get(k), v) for k, v in config.items() if k in old and old[k] != v}
    if changed:
        raise UsageError(
            "--resume: these options differ from the run in --out: "
            + ", ".join(f"--{k.replace('_', '-')} {b} (was {a})" for k, (a, b) in changed.items())
        )


def _write_json(path: str, obj: dict) -> None:
    """Atomically, as strict JSON."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=2, allow_nan=False)
    os.replace(tmp, path)


def _give_up_waiting(args) -> None:
    """Called by a timer thread while jax.distributed.initialize still waits: exit 2."""
    print(f"quantax-lite train: error: --coordinator {args.coordinator}: not all {args.num_processes} "
          f"processes joined within --init-timeout {args.init_timeout} s; start every process with the "
          "same --coordinator and --num-processes and a distinct --process-id.", file=sys.stderr, flush=True)
    os._exit(2)


def train(args) -> dict:
    """Run the training the options describe; returns the summary dict."""
    import contextlib

    import jax

    from .run_folder import lock_run_folder

    check_process_options(args)
    _init_runtime(args)
    n_devices = jax.device_count()
    if args.chains is None:
        args.chains = default_chains(args.samples, n_devices)
    if args.eval_samples is None:
        args.eval_samples = 32 * args.samples
    check_options(args, n_devices)
    lattice, ham, group = build_system(args)
    out = args.out or os.path.join("runs", f"{args.hamiltonian}_{lattice.name.replace(':', '')}")
    main = jax.process_index() == 0
    if main:
        check_out_dir(out)
    # process 0 owns the folder from here to the summary
    with lock_run_folder(out) if main else contextlib.nullcontext():
        if main:
            prepare_out_dir(out, args.resume, args.restart)
        return _train(args, out, lattice, ham, group, main)


def _train(args, out, lattice, ham, group, main) -> dict:
    import jax

    from .vmc import Diverged, _finite_or_none, energy_estimate, load_latest_checkpoint, run

    n_devices = jax.device_count()
    config = _run_config(args)
    if args.resume:
        _check_resumable(out, config)
    exact = reference_energy(args, lattice, ham)
    vmc, state, n_params = build_vmc(args, lattice, ham, group)
    if args.resume:
        state, _, path = load_latest_checkpoint(out, state)
    if main and not args.no_progress:
        print(f"quantax-lite: {ham!r}, {n_params} parameters, {args.samples} samples/step, "
              f"{n_devices} device(s); writing {out}", file=sys.stderr)

    summary = {
        "lattice": lattice.name,
        "hamiltonian": args.hamiltonian,
        "n_sites": lattice.n_sites,
        "n_params": n_params,
        "n_samples": args.samples,
        "n_eval_samples": args.eval_samples,
        "exact_energy": exact,
        "device_count": n_devices,
        "process_count": jax.process_count(),
        "precision": args.precision,
        "gram_precision": args.gram_precision,
        "norm": args.norm,
        "symmetry": args.symmetry,
    }
    t0 = time.perf_counter()
    try:
        state, records = run(vmc, state, args.iters, out_dir=out, checkpoint_every=args.checkpoint_every,
                             keep_checkpoints=args.keep_checkpoints, progress=not args.no_progress,
                             metadata={"config": config}, lock=False)
    except Diverged as err:
        summary.update(diverged=True, diverged_at_iteration=err.iteration, non_finite=err.what,
                       iterations=int(err.state.iteration), wall_time_s=time.perf_counter() - t0)
        if main:
            _write_json(os.path.join(out, "summary.json"), summary)
            _plot_log(out, exact, args, lattice)
        raise DivergedRun(
            f"step {err.iteration}: the {err.what} became non-finite, so the run stopped; nothing of that "
            f"step was written and summary.json says diverged. Start again (--restart) with a lower --lr "
            f"(now {args.lr}) or a larger --diag-shift (now {args.diag_shift})."
        ) from None
    # seconds per iteration after the first step of this call (which includes compilation)
    if len(records) > 1:
        per_iteration = (records[-1]["wall_time_s"] - records[0]["wall_time_s"]) / (len(records) - 1)
    else:
        per_iteration = records[0]["wall_time_s"] if records else None
    stats, state = energy_estimate(vmc, state, args.eval_samples)
    wall = time.perf_counter() - t0

    energy, error, variance = float(stats.mean.real), float(stats.error_of_mean), float(stats.variance)
    if not all(math.isfinite(v) for v in (energy, error, variance)):
        summary.update(diverged=True, non_finite="final energy estimate", iterations=int(state.iteration))
        if main:
            _write_json(os.path.join(out, "summary.json"), summary)
        raise DivergedRun("the final energy estimate is not finite; summary.json says diverged. Start "
                          "again (--restart) with a lower --lr or a larger --diag-shift.")
    summary.update({
        "diverged": False,
        "iterations": int(state.iteration),
        "energy": energy,
        "energy_error": error,
        "energy_per_site": energy / lattice.n_sites,
        "variance": variance,
        "relative_error": None if exact is None else abs((energy - exact) / exact),
        "v_score": lattice.n_sites * variance / energy**2,
        "wall_time_s": wall,
        "seconds_per_iteration": per_iteration,
        "r_hat": _finite_or_none(stats.r_hat),
    })
    if main:
        _write_json(os.path.join(out, "summary.json"), summary)
        _plot_log(out, exact, args, lattice)
        print(format_table(summary))
    return summary


def _plot_log(out, exact, args, lattice) -> None:
    from .run_folder import read_log

    log = [r for r in read_log(os.path.join(out, "log.jsonl")) if r.get("energy") is not None]
    if log:
        plot_energy(os.path.join(out, "energy.png"), log, exact, f"{args.hamiltonian} {lattice.name}")


class DivergedRun(Exception):
    """The run stopped on a non-finite value: printed as one line, exit status 3."""


def _is_out_of_memory(err: BaseException) -> bool:
    return isinstance(err, MemoryError) or "RESOURCE_EXHAUSTED" in str(err) or "Out of memory" in str(err)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as one line each, without the source line."""
    print(f"quantax-lite train: warning: {message}", file=sys.stderr)


def main(argv=None) -> int:
    from .run_folder import RunFolderBusy

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("once")
            warnings.showwarning = _show_warning
            train(args)
    except UsageError as err:
        print(f"quantax-lite train: error: {err}", file=sys.stderr)
        return 2
    except RunFolderBusy as err:
        print(f"quantax-lite train: error: --out {err}", file=sys.stderr)
        return 2
    except DivergedRun as err:
        print(f"quantax-lite train: diverged: {err}", file=sys.stderr)
        return 3
    except Exception as err:
        if not _is_out_of_memory(err):
            raise
        print("quantax-lite train: error: out of memory for this system; lower --samples, pass "
              "--chunk-size (e.g. 64), or choose a smaller --lattice / --channels.", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
