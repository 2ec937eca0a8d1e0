"""How far a row's final error moves with the seed, also under the "tpu" tuning record on this CPU.

A frustrated row trained from different random starts (``--seed`` draws both the first
parameters and the chains) can settle at different levels, so two settings compared by one
run each may differ by their seeds alone. This script trains one row of
``benchmarks/accuracy.py`` (its options, with ``--iters`` and ``--eval-samples`` of its own)
once per seed and per tuning record, and reports each run's relative error from fresh
samples and, per tuning, the median, smallest and largest. ``--tunings cpu tpu`` also runs
every seed under the library's "tpu" record on this CPU (``quantax_lite.utils.tuning``: float32
device programs, the SR solve by refined Cholesky, unpacked local energies), which tells
that record's numerics from the seeds; the chip's own arithmetic and random draws differ
from the CPU's.

    python benchmarks/seed_spread.py [--row NAME] [--seeds 0 1 2 3] [--iters 600]
        [--eval-samples 16384] [--tunings cpu tpu] [--out DIR] [--json PATH] [--quick]
        [-- MORE TRAIN OPTIONS]

Results: ``benchmarks/results/seed_spread.json`` (none with ``--quick`` unless ``--json``
is given). Options after ``--`` are added to the row's (``-- --samples 4096``).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # the harness and accuracy.py's rows, beside this script
    sys.path.insert(0, HERE)
from _common import add_json_option, load_average, output_path, results_file, script_parser, write_result  # noqa: E402

DEFAULT_JSON = results_file("seed_spread.json")


def with_option(args: list[str], name: str, value) -> list[str]:
    """``args`` with the option ``name`` set to ``value`` (replaced where it is, else added)."""
    args = list(args)
    if name in args:
        args[args.index(name) + 1] = str(value)
    else:
        args += [name, str(value)]
    return args


def train_one(options: list[str], out: str, tuning_name: str) -> tuple[int, dict | None]:
    """Train ``options`` into the fresh run folder ``out`` under the tuning record
    ``tuning_name`` (:func:`quantax_lite.utils.tuning.for_backend`): the command's exit status and
    the run's summary (None where it wrote none)."""
    from quantax_lite.cli import command as cli
    from quantax_lite.utils import tuning

    with tuning.using(tuning.for_backend(tuning_name)):
        status = cli.main(["train", *options, "--out", out, "--no-progress", "--restart"])
    try:
        with open(os.path.join(out, "summary.json")) as fh:
            return status, json.load(fh)
    except FileNotFoundError:
        return status, None


def spread(errors: list[float]) -> dict:
    """Median, smallest and largest of the relative errors ``errors``."""
    return {"n": len(errors), "median": statistics.median(errors), "min": min(errors), "max": max(errors)}


def check_args(parser: argparse.ArgumentParser, args, extra: list[str], systems: dict) -> None:
    """Every refusal before anything trains: ``parser.error`` (exit 2, one line naming the
    option) for a row not in ``systems`` or an accelerator row, steps or samples below one,
    repeated or negative seeds, repeated tunings, another backend's record on an accelerator,
    or options after ``--`` that the train command would refuse."""
    from quantax_lite.utils import tuning
    from quantax_lite.cli.options import build_parser

    if args.row not in systems:
        parser.error(f"--row: expected one of {', '.join(sorted(systems))}, got {args.row!r}")
    if systems[args.row].get("accelerator"):
        parser.error(f"--row: {args.row} is an accelerator row (a budget in chip-minutes); choose a CPU row")
    for name in ("iters", "eval_samples"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: expected a positive number, got {getattr(args, name)}")
    if any(s < 0 for s in args.seeds) or len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds: expected distinct seeds >= 0, got {args.seeds}")
    if len(set(args.tunings)) != len(args.tunings):
        parser.error(f"--tunings: expected distinct records, got {args.tunings}")
    backend = tuning.current().backend
    if backend != "cpu" and set(args.tunings) != {backend}:
        parser.error(f"--tunings: jax runs on {backend} here; another backend's record is emulated only on the CPU")
    said = io.StringIO()
    try:  # the options after -- as the train command reads them
        with contextlib.redirect_stderr(said):
            build_parser().train_parser.parse_args(extra)
    except SystemExit:
        reason = (said.getvalue().strip().splitlines() or ["refused"])[-1].split("error: ")[-1]
        parser.error(f"options after --: {reason}")


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    import accuracy

    parser = script_parser(__doc__)
    parser.add_argument("--row", default="j1j2_4x4", help="a row of benchmarks/accuracy.py (default: j1j2_4x4)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3], help="the seeds (default: 0 1 2 3)")
    parser.add_argument("--iters", type=int, default=600, help="steps per run (default: 600)")
    parser.add_argument("--eval-samples", type=int, default=16384, help="fresh samples of each final estimate")
    parser.add_argument("--tunings", nargs="+", choices=("cpu", "gpu", "tpu"), default=["cpu", "tpu"],
                        help="tuning records to train under, on this machine (default: cpu tpu)")
    parser.add_argument("--out", default="runs/seed_spread", help="parent directory of the runs")
    add_json_option(parser, DEFAULT_JSON, "full")
    parser.add_argument("--quick", action="store_true", help="20 steps of 128 samples (a smoke test)")
    args = parser.parse_args(argv)
    check_args(parser, args, extra, accuracy.SYSTEMS)

    options = with_option(accuracy.SYSTEMS[args.row]["args"], "--iters", args.iters)
    options = with_option(options, "--eval-samples", args.eval_samples)
    if args.quick:
        options = with_option(with_option(options, "--iters", 20), "--samples", 128)
    options += extra
    load_start = load_average()
    runs = []
    for tuning_name in args.tunings:
        for seed in args.seeds:
            out = os.path.join(args.out, f"{args.row}-{tuning_name}-seed{seed}")
            t0 = time.perf_counter()
            status, summary = train_one(with_option(options, "--seed", seed), out, tuning_name)
            if status == 2:  # a user error the train command named in one line
                raise SystemExit(2)
            run = {"tuning": tuning_name, "seed": seed, "exit_status": status,
                   "wall_time_s": round(time.perf_counter() - t0, 1)}
            if status == 0:
                run.update(relative_error=summary["relative_error"],
                           relative_error_bar=summary["energy_error"] / abs(summary["exact_energy"]),
                           energy=summary["energy"], energy_error=summary["energy_error"],
                           v_score=summary["v_score"], iterations=summary["iterations"])
                print(f"{tuning_name:5s} seed {seed:3d}  relative error {run['relative_error']:.3e} "
                      f"± {run['relative_error_bar']:.1e}  V-score {run['v_score']:.1e}", flush=True)
            else:  # a diverged run is a result too: recorded, left out of the spread
                print(f"{tuning_name:5s} seed {seed:3d}  quantax-lite train exited with status {status} "
                      f"(run folder {out})", flush=True)
            runs.append(run)
    finished = [r for r in runs if r["exit_status"] == 0]
    by_tuning = {t: spread([r["relative_error"] for r in finished if r["tuning"] == t])
                 for t in args.tunings if any(r["tuning"] == t for r in finished)}
    steps = sorted({r["iterations"] for r in finished})
    print(f"\n{args.row}: {len(args.seeds)} seeds, {'/'.join(map(str, steps))} steps each")
    print("tuning   median      smallest    largest")
    for t, s in by_tuning.items():
        print(f"{t:6s}   {s['median']:.3e}   {s['min']:.3e}   {s['max']:.3e}")
    result = {"row": args.row, "options": " ".join(options), "seeds": args.seeds, "runs": runs,
              "spread": by_tuning, **accuracy.host_fields(), "load_average_start": load_start,
              "load_average_end": load_average()}
    json_path = output_path(args.quick, args.json, DEFAULT_JSON)
    if json_path:
        write_result(json_path, result, __file__, argv, indent=1, allow_nan=False)
        print(f"wrote {json_path}")
    return result


if __name__ == "__main__":
    main()
