"""Is a run reproducible from its preset and seed, and does a resumed run follow it exactly?

Trains one row of ``benchmarks/accuracy.py`` (its options, with ``--iters``,
``--eval-samples`` and no time limit) three times from the row's seed:

* ``first``: straight through;
* ``again``: straight through once more;
* ``resumed``: stopped after half the steps (with its checkpoint), then ``--resume``\\ d to
  the end, as a row trained across the chip's 10-minute windows is;

each (each half of the resumed one) a ``quantax-lite train`` process of its own, and
compares ``again`` and ``resumed`` with ``first``: every number of every step's log
record (energy, error bar, variance, acceptance, step norm ...; not the wall time), the
parameters of the final checkpoint, and the final estimate from fresh samples. Identical
means equal bit for bit; otherwise the largest differences and the first step that differs
are recorded.

    python benchmarks/reproducibility.py --only heisenberg_6x6_chip --iters 100   # on a chip
    python benchmarks/reproducibility.py --quick                                  # CPU smoke test

Prints a table and writes ``benchmarks/results/reproducibility.json`` (or ``--json``; the
result is stored under the key of jax's backend, the others kept).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (add_json_option, detect_backend, output_path, platform_info, results_file,  # noqa: E402
                     script_parser, stamp, write_json)
from accuracy import SYSTEMS  # noqa: E402

from quantax_lite.driver.run_folder import read_log  # noqa: E402

DEFAULT_JSON = results_file("reproducibility.json")
# log fields that are measurements of the run's own clock, not of its trajectory
CLOCK_FIELDS = ("wall_time_s",)
# the final estimate's fields compared (summary.json)
SUMMARY_FIELDS = ("energy", "energy_error", "variance", "iterations")
QUICK = dict(row="heisenberg_4x4", iters=4, eval_samples=128, extra=["--samples", "32", "--channels", "2", "--depth", "1"])


def _numbers(record: dict) -> dict:
    """A log record's values that are no clock reading (numbers, flags, nulls)."""
    return {k: v for k, v in record.items() if k not in CLOCK_FIELDS and (v is None or isinstance(v, (int, float)))}


def _diff(a, b) -> float:
    """|a - b| for numbers (0 for equal ones, NaN equal to NaN); inf where only one is a
    finite number, or the two differ otherwise (None against a number)."""
    if a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)):
        return 0.0
    if not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return math.inf
    d = abs(float(a) - float(b))
    return d if math.isfinite(d) else math.inf


def compare_logs(first: list[dict], other: list[dict]) -> dict:
    """Step-by-step comparison of two runs' log records (``log.jsonl``): ``identical``,
    ``first_difference`` (the iteration of the first record that differs, or None),
    ``max_abs_difference`` per field and ``steps`` (records compared)."""
    by_step = {r["iteration"]: r for r in other}
    steps = [r["iteration"] for r in first]
    if len(other) != len(first) or sorted(by_step) != steps:
        return dict(identical=False, first_difference=None, steps=len(steps), max_abs_difference={},
                    note=f"different steps logged: {len(steps)} against {len(by_step)}")
    first_difference, worst = None, {}
    for rec in first:
        a, b = _numbers(rec), _numbers(by_step[rec["iteration"]])
        for key in sorted(set(a) | set(b)):
            d = _diff(a[key], b[key]) if key in a and key in b else math.inf
            worst[key] = max(worst.get(key, 0.0), d)
            if d != 0.0 and first_difference is None:
                first_difference = rec["iteration"]
    return dict(identical=first_difference is None, first_difference=first_difference, steps=len(steps),
                max_abs_difference={k: v for k, v in worst.items() if v != 0.0})


def compare_parameters(first: dict, other: dict) -> dict:
    """Leaf-by-leaf comparison of two checkpoints' arrays (as read by
    ``read_latest_checkpoint``): ``identical`` and the largest difference relative to the
    leaf's largest magnitude."""
    if sorted(first) != sorted(other):
        return dict(identical=False, max_relative_difference=math.inf, note="different leaves")
    worst, identical = 0.0, True
    for name in first:
        a, b = np.asarray(first[name]), np.asarray(other[name])
        if a.shape != b.shape or a.dtype != b.dtype:
            return dict(identical=False, max_relative_difference=math.inf, note=f"{name}: shape or dtype differs")
        if a.dtype.kind not in "fc":  # PRNG keys, counters: equal or not
            identical = identical and bool(np.array_equal(a, b))
            continue
        if not np.array_equal(a, b, equal_nan=True):
            identical = False
            scale = float(np.nanmax(np.abs(a))) if np.isfinite(a).any() else 1.0
            with np.errstate(invalid="ignore"):
                d = np.abs(a - b)
            d = np.where(np.isnan(a) & np.isnan(b), 0.0, np.where(np.isnan(d), np.inf, d))
            worst = max(worst, float(np.max(d)) / (scale or 1.0))
    return dict(identical=identical, max_relative_difference=worst)


def compare_summaries(first: dict, other: dict) -> dict:
    diffs = {k: _diff(first.get(k), other.get(k)) for k in SUMMARY_FIELDS if k in first or k in other}
    return dict(identical=all(v == 0.0 for v in diffs.values()),
                max_abs_difference={k: v for k, v in diffs.items() if v != 0.0})


def _run(opts: list, out: str, iters: int, resume: bool = False) -> None:
    """``quantax-lite train`` in a process of its own, as each window on the chip is."""
    cmd = [sys.executable, "-m", "quantax_lite", "train", *opts, "--iters", str(iters), "--out", out, "--no-progress"]
    if subprocess.run(cmd + (["--resume"] if resume else [])).returncode != 0:
        raise SystemExit(f"reproducibility: quantax-lite train exited with an error (its folder: {out})")


def _read(out: str) -> tuple[list[dict], dict, dict]:
    from quantax_lite.driver.checkpoint import read_latest_checkpoint

    arrays, _, _ = read_latest_checkpoint(out)
    with open(os.path.join(out, "summary.json")) as fh:
        summary = json.load(fh)
    return read_log(os.path.join(out, "log.jsonl")), arrays, summary


def measure(row: str, iters: int, eval_samples: int, parent: str, extra: list | None = None) -> dict:
    """Train ``row`` three times (first, again, resumed at ``iters // 2``) under ``parent``
    and compare; returns the result record."""
    opts = list(SYSTEMS[row]["args"]) + ["--eval-samples", str(eval_samples)] + list(extra or [])
    runs = {name: os.path.join(parent, f"{row}_{name}") for name in ("first", "again", "resumed")}
    for out in runs.values():
        shutil.rmtree(out, ignore_errors=True)
    _run(opts, runs["first"], iters)
    _run(opts, runs["again"], iters)
    half = max(1, iters // 2)
    _run(opts + ["--checkpoint-every", str(half)], runs["resumed"], half)
    _run(opts + ["--checkpoint-every", str(half)], runs["resumed"], iters, resume=True)
    read = {name: _read(out) for name, out in runs.items()}
    log0, params0, summary0 = read["first"]
    here = platform_info()  # opens the accelerator: after the runs
    result = dict(row=row, iters=iters, resumed_at=half, eval_samples=eval_samples, options=opts,
                  processes="one per run (the resumed run: one per half)",
                  backend=here["backend"], device=here["device_kind"],
                  jax_version=here["jax"], energy=summary0["energy"], energy_error=summary0["energy_error"],
                  # each run's own clock (summary.json; the resumed run's second part only): the first
                  # compiles everything, the later ones find in the compilation cache what it compiled
                  **{f"{name}_wall_time_s": read[name][2]["wall_time_s"] for name in runs})
    for name in ("again", "resumed"):
        log, params, summary = read[name]
        result[name] = dict(log=compare_logs(log0, log), parameters=compare_parameters(params0, params),
                            estimate=compare_summaries(summary0, summary))
        result[name]["identical"] = all(result[name][k]["identical"] for k in ("log", "parameters", "estimate"))
    result["reproducible"] = result["again"]["identical"] and result["resumed"]["identical"]
    return result


def _json_safe(x):
    """``x`` with every non-finite float written as a string ("inf", "nan"): valid JSON."""
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return str(x) if isinstance(x, float) and not math.isfinite(x) else x


def table(result: dict) -> str:
    lines = [f"{result['row']}, {result['iters']} steps on {result['backend']} ({result['device']}): "
             f"final energy {result['energy']:.8g} ± {result['energy_error']:.2g}",
             f"{'run':<10} {'log':<28} {'parameters':<24} {'estimate':<20}"]
    for name in ("again", "resumed"):
        r = result[name]
        log = "identical" if r["log"]["identical"] else (
            f"differs from step {r['log']['first_difference']}: "
            f"dE {r['log']['max_abs_difference'].get('energy', 0):.2g}")
        par = "identical" if r["parameters"]["identical"] else f"rel. diff {r['parameters']['max_relative_difference']:.2g}"
        est = "identical" if r["estimate"]["identical"] else (
            f"dE {r['estimate']['max_abs_difference'].get('energy', 0):.2g}")
        lines.append(f"{name:<10} {log:<28} {par:<24} {est:<20}")
    return "\n".join(lines)


def main(argv=None):
    parser = script_parser(__doc__)
    parser.add_argument("--only", choices=sorted(SYSTEMS), help="the row of benchmarks/accuracy.py to train")
    parser.add_argument("--iters", type=int, default=100, help="steps of each run (default 100)")
    parser.add_argument("--eval-samples", type=int, default=4096, help="fresh samples of the final estimate")
    parser.add_argument("--out", default="runs/reproducibility", help="parent folder of the three runs")
    add_json_option(parser, DEFAULT_JSON, "full", help="one entry per backend, the others kept")
    parser.add_argument("--allow-cpu", action="store_true", help="train an accelerator row without an accelerator")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK['row']}, {QUICK['iters']} steps of a tiny network")
    args = parser.parse_args(argv)
    if args.iters < 2:
        parser.error(f"--iters: at least 2 (the resumed run stops half-way), got {args.iters}")
    if args.eval_samples < 1:
        parser.error(f"--eval-samples: expected a positive count, got {args.eval_samples}")
    if args.quick:
        row, iters, eval_samples, extra = QUICK["row"], QUICK["iters"], QUICK["eval_samples"], QUICK["extra"]
    else:
        if args.only is None:
            parser.error("--only: name the row to train (or --quick)")
        row, iters, eval_samples, extra = args.only, args.iters, args.eval_samples, []
    # asked in a subprocess: this process must not hold the accelerator the runs need
    if SYSTEMS[row].get("accelerator") and detect_backend() == "cpu" and not (args.allow_cpu or args.quick):
        parser.error(f"--only: {row} is an accelerator row and jax has no accelerator here; add --allow-cpu")
    result = measure(row, iters, eval_samples, args.out, extra)
    print(table(result))
    json_path = output_path(args.quick, args.json, DEFAULT_JSON)
    if json_path:
        stored = {}
        if os.path.exists(json_path):
            with open(json_path) as fh:
                stored = json.load(fh)
        stored[result["backend"]] = stamp(result, __file__, argv)  # the file: one record per backend
        write_json(json_path, _json_safe(stored), indent=2, allow_nan=False)
        print(f"wrote {json_path}")
    return 0 if result["reproducible"] else 1


if __name__ == "__main__":
    sys.exit(main())
