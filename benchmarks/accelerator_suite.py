"""Every accelerator figure the project quotes (TPU or GPU), in one run of under 8 minutes on one chip.

Parts, each with its own time budget (seconds; all options), within a total budget:

1. ``train``: the README's main job, ``python -m quantax_lite train`` (4x4 Heisenberg, 600
   steps) in a subprocess: the wall time of its first step (compilation included), of the
   whole training, the final energy and its relative error (from its summary.json).
2. ``sharding``: GSPMD vs ``shard_map`` for the chunked per-sample Jacobian,
   ``benchmarks/jacobian_sharding.py --platform gpu|tpu`` in a subprocess.
3. ``memory``: memory per chunk size of the 6x6 local-energy and Jacobian programs
   (1024 samples, the library's default network): for each chunk, the compiled
   program's ``memory_analysis()`` and the device's measured ``peak_bytes_in_use`` after
   running it (a fresh subprocess; see ``memory_worker``).
4. ``peaks``: the chip's matrix-product peak in bfloat16, float32 at default precision and
   float32 at "highest" (the library's precision on accelerators), one square product each.
5. ``scale``: the table of ``benchmarks/vmc_scale.py``: one VMC step of the default
   network for 4x4 .. 10x10, heisenberg and j1j2, translations and full symmetry, with
   its breakdown and FLOP/s (each row also against the "highest" peak of part 4).
6. ``w1``: the W1 rows of ``benchmarks/vmc_step.py`` (its ``measure``), 1024 samples (the
   float64-network row only where the backend has float64 on the device).
7. ``tdvp``: ``benchmarks/tdvp_peers.py``'s row of this library in a subprocess (the 4x4
   quench's real-time TDVP: 2432 parameters, 1024 samples, RK4 at dt 0.02, the
   eigendecomposition on the host in float64 where the device has no float64): seconds per
   step after its compiled warm-up, the warm-up itself, and max |Δ⟨σx⟩| against exact.
8. ``agreement``: one W1 state after a few training steps; its samples, log psi, local
   energies, Jacobian, SR and MinSR directions and spin correlations on the accelerator,
   against the float64 CPU library (``JAX_PLATFORMS=cpu``, ``jax_enable_x64`` on, in a
   subprocess) on the same samples: relative differences, the CPU's direction both from
   the accelerator's Jacobian (the solve alone) and from its own (the whole pipeline).

The subprocess parts that open the accelerator run first, before this process touches
it (one program at a time can hold a TPU); then the agreement's accelerator side, whose
float64 CPU reference runs on a few host cores beside peaks, scale and w1 (it never opens
the accelerator) and is compared at the end. A part that cannot start within the total
budget is recorded as skipped; a part that fails is recorded with its error and the
others still run.

    python benchmarks/accelerator_suite.py              # on a TPU or GPU; refuses (exit 2) without one
    python benchmarks/accelerator_suite.py --allow-cpu  # the full suite on CPUs (hours: not meant)
    python benchmarks/accelerator_suite.py --quick      # the whole script on the CPU, tiny sizes: a smoke
                                                        # test (CPU code generation unoptimized: its
                                                        # timings mean nothing)
    python benchmarks/accelerator_suite.py --parts scale w1 --scale-budget-s 300

Writes the tables to stdout and one JSON (``--json``, default
benchmarks/results/accelerator_suite.json on a full run; ``--quick`` writes only with
``--json``), with the figures beside it: ``<json stem>_vmc_scale.png`` and
``<json stem>_jacobian_sharding.png``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # the harness and this script's parts, beside it
    sys.path.insert(0, HERE)

from argparse import SUPPRESS  # noqa: E402

from _common import (command_line, detect_backend, error_text, is_accelerator, last_line,  # noqa: E402
                     load_average, output_path as _output_path, platform_info, platform_kind, results_file,
                     run_process_group, script_parser, write_result)
from _suite_agreement import (AGREEMENT_CPU_THREADS, AGREEMENT_STEPS, agreement_reference,  # noqa: E402,F401
                              finish_agreement, start_agreement)
from _suite_memory import MEMORY_COMPILE_SHARE, memory_table, memory_worker, run_memory  # noqa: E402,F401

DEFAULT_JSON = results_file("accelerator_suite.json")

# in the order they run: the subprocess parts that hold the accelerator first; the agreement's
# float64 CPU reference then runs beside peaks, scale and w1 (it never touches the accelerator)
PART_NAMES = ("train", "sharding", "memory", "tdvp", "agreement", "peaks", "scale", "w1")


W1_CONFIGS = [("translations", "f32", "positive"), ("translations", "f32", "complex"), ("full", "f32", "positive"),
              ("translations", "f64", "positive"), ("translations", "f32", "signed")]


def parse_args(argv=None):
    p = script_parser(__doc__)
    p.add_argument("--quick", action="store_true", help="every part on the CPU at tiny sizes (a smoke test)")
    p.add_argument("--allow-cpu", action="store_true", help="run the full suite without an accelerator")
    p.add_argument("--parts", nargs="+", choices=PART_NAMES, default=list(PART_NAMES))
    p.add_argument("--json", default=None, help="default benchmarks/results/accelerator_suite.json (full runs only)")
    p.add_argument("--total-budget-s", type=float, default=420.0, help="no part starts after this (default 420)")
    p.add_argument("--train-budget-s", type=float, default=90.0)
    p.add_argument("--train-iters", type=int, default=None, help="steps of the train part (default 600)")
    p.add_argument("--sharding-budget-s", type=float, default=80.0)
    p.add_argument("--peaks-budget-s", type=float, default=30.0)
    p.add_argument("--agreement-budget-s", type=float, default=90.0)
    p.add_argument("--memory-budget-s", type=float, default=60.0)
    p.add_argument("--scale-budget-s", type=float, default=180.0)
    p.add_argument("--w1-budget-s", type=float, default=90.0)
    p.add_argument("--tdvp-budget-s", type=float, default=120.0)
    p.add_argument("--tdvp-t-end", type=float, default=0.1, help="simulated time of the tdvp part (default 0.1: 5 steps)")
    p.add_argument("--scale-row-budget-s", type=float, default=90.0, help="vmc_scale's --budget-s")
    p.add_argument("--scale-lattices", nargs="+", default=None, help="default 4 6 8 10")
    p.add_argument("--scale-hamiltonians", nargs="+", default=None, help="default heisenberg j1j2")
    p.add_argument("--scale-symmetries", nargs="+", default=None, help="default translations full")
    p.add_argument("--samples", type=int, default=None, help="samples per step of scale and w1 (default 1024)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats (default 5)")
    p.add_argument("--w1-rows", type=int, nargs="*", default=None,
                   help="vmc_step.py's rows (0: translations positive, 1: complex, 2: full, 3: float64, 4: signed)")
    p.add_argument("--memory-lattice", default=None, help="default 6x6")
    p.add_argument("--memory-chunks", nargs="+", default=None,
                   help="chunk sizes, 'default' for the library's choice (default 16 64 256 default)")
    p.add_argument("--_memory-worker", dest="memory_worker", default=None, help=SUPPRESS)
    p.add_argument("--_agreement-reference", dest="agreement_reference", default=None, help=SUPPRESS)
    args = p.parse_args(argv)
    quick = args.quick
    defaults = dict(scale_lattices=["2x4"] if quick else ["4", "6", "8", "10"],
                    scale_hamiltonians=["heisenberg"] if quick else ["heisenberg", "j1j2"],
                    scale_symmetries=["translations"] if quick else ["translations", "full"],
                    samples=16 if quick else 1024, repeats=1 if quick else 5, w1_rows=[0] if quick else [0, 1, 2, 3, 4],
                    memory_lattice="2x4" if quick else "6x6",
                    memory_chunks=["4", "default"] if quick else ["16", "64", "256", "default"],
                    train_iters=10 if quick else 600)
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    return args


def platform_flag(backend: str) -> str:
    """``--platform`` of jacobian_sharding.py for ``backend`` (the harness's ``platform_kind``)."""
    return platform_kind(backend)



def run_train(args, budget_s: float, out_dir: str) -> dict:
    """``python -m quantax_lite train`` (the default 4x4 run) in a subprocess: the wall time of
    its first step (compilation included, from nothing: without the compilation cache) and of
    the training, and the final energy."""
    folder = os.path.join(out_dir, "train")
    cmd = [sys.executable, "-m", "quantax_lite", "train", "--out", folder, "--iters", str(args.train_iters)]
    if args.quick:
        cmd += ["--lattice", "chain:8", "--samples", "64"]
    out = dict(command=" ".join(cmd[1:]).replace(folder, "OUT"))
    print(f"$ {out['command']}", flush=True)
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, timeout=budget_s, capture_output=True, text=True, cwd=os.path.dirname(HERE),
                              env=dict(os.environ, QUANTAX_LITE_COMPILE_CACHE="0"))
        out["returncode"] = proc.returncode
        if proc.returncode:
            out["error"] = last_line(proc.stderr) or last_line(proc.stdout) or f"exit {proc.returncode}"
    except subprocess.TimeoutExpired:
        out["error"] = f"killed after {budget_s:.0f} s"
    out["process_wall_s"] = time.perf_counter() - t
    try:
        with open(os.path.join(folder, "summary.json")) as fh:
            summary = json.load(fh)
        with open(os.path.join(folder, "log.jsonl")) as fh:
            log = [json.loads(line) for line in fh if line.strip()]
    except (OSError, ValueError) as err:
        out.setdefault("error", f"no summary: {err}")
        return out
    keys = ("lattice", "iterations", "energy", "energy_error", "exact_energy", "relative_error", "n_params",
            "wall_time_s", "seconds_per_iteration")
    out.update({k: summary.get(k) for k in keys})
    out["first_step_s"] = log[0]["wall_time_s"] if log else None  # from the start of training: compile included
    out["training_s"] = log[-1]["wall_time_s"] if log else None
    print(f"train: first step {out['first_step_s']:.1f} s, {out['iterations']} steps in {out['training_s']:.1f} s "
          f"({out['seconds_per_iteration'] * 1e3:.1f} ms/step after the first), relative error "
          f"{out['relative_error']:.2e}; process {out['process_wall_s']:.0f} s", flush=True)
    return out


TDVP_PROGRESS_LINES = 12  # the tdvp worker's progress lines kept where it fails


def run_tdvp(args, budget_s: float, out_dir: str) -> dict:
    """``benchmarks/tdvp_peers.py --only quantax_lite`` in a subprocess (its worker killed at
    ``budget_s``): milliseconds per TDVP step after the warm-up, the warm-up (compilation),
    max |Δ⟨σx⟩| against the exact propagator. Where the row fails or the script exits
    otherwise: ``error`` and ``progress``, the last lines it wrote to stderr (its worker's
    progress; none where the whole process group is killed at ``budget_s + 30``)."""
    path = os.path.join(out_dir, "tdvp.json")
    cmd = [sys.executable, os.path.join(HERE, "tdvp_peers.py"), "--only", "quantax_lite", "--json", path,
           "--timeout", str(max(int(budget_s) - 10, 1))]
    cmd += ["--quick"] if args.quick else ["--t-end", repr(args.tdvp_t_end), "--points", "1"]
    out = dict(command=" ".join(cmd[1:]).replace(path, "OUT").replace(HERE + os.sep, "benchmarks/"))
    print(f"$ {out['command']}", flush=True)
    try:
        proc = run_process_group(cmd, budget_s + 30, cwd=os.path.dirname(HERE))  # its worker killed with it
    except subprocess.TimeoutExpired:
        return dict(out, error=f"killed after {budget_s + 30:.0f} s")
    # where a row fails, the worker's last progress lines say where its time went
    progress = [line for line in (proc.stderr or "").splitlines() if line.strip()][-TDVP_PROGRESS_LINES:]
    if proc.returncode:
        return dict(out, error=last_line(proc.stderr) or last_line(proc.stdout) or f"exit {proc.returncode}",
                    progress=progress)
    with open(path) as fh:
        row = json.load(fh)["rows"][0]
    if row.get("status") != "measured":
        return dict(out, error=row.get("error", "not measured"), progress=progress)
    out.update({k: row.get(k) for k in ("n_params", "n_samples", "steps", "warmup_s", "warmup_steps", "evolve_s",
                                        "max_dsx", "solve")})
    out["step_ms"] = 1e3 * row["evolve_s"] / row["steps"]
    print(f"tdvp: {out['step_ms']:.0f} ms per step ({out['steps']} steps of 4 stages) after a warm-up of "
          f"{out['warmup_s']:.0f} s; max |d<σx>| {out['max_dsx']}", flush=True)
    return out


def run_peaks(args) -> dict:
    """TFLOP/s of one square product in bfloat16, float32 (default precision) and float32
    ("highest"), the best of ``repeats`` calls each."""
    import jax
    import jax.numpy as jnp
    from _common import timed

    n = 512 if args.quick else 8192
    out = dict(n=n)
    for name, dtype, precision in (("bfloat16", jnp.bfloat16, "default"), ("float32_default", jnp.float32, "default"),
                                   ("float32_highest", jnp.float32, "highest")):
        ka, kb = jax.random.split(jax.random.key(len(out)))
        x, y = jax.random.normal(ka, (n, n), dtype), jax.random.normal(kb, (n, n), dtype)
        with jax.default_matmul_precision(precision):  # part of jit's cache key: time inside it
            f = jax.jit(lambda a, b: a @ b)
            f(x, y).block_until_ready()
            seconds = timed(lambda: f(x, y), max(3, args.repeats))[1]
        out[name] = dict(seconds=seconds, tflops=2.0 * n**3 / seconds / 1e12, precision=precision)
        print(f"peak {name:>16}: {out[name]['tflops']:8.2f} TFLOP/s ({n}^3)", flush=True)
    return out


def run_sharding(args, budget_s: float, out_dir: str, plot_path: str | None, backend: str) -> dict:
    """``jacobian_sharding.py`` in a subprocess; its JSON as this part's result."""
    path = os.path.join(out_dir, "jacobian_sharding.json")
    png = plot_path or os.path.join(out_dir, "jacobian_sharding.png")
    cmd = [sys.executable, os.path.join(HERE, "jacobian_sharding.py"), "--json", path, "--plot", png]
    platform = platform_flag(backend)
    cmd += ["--platform", platform]
    if platform == "cpu":
        cmd += ["--quick", "--devices", "2"] if args.quick else []
    startup = 20.0 if platform != "cpu" else 0.0
    cmd += ["--deadline-min", f"{max(0.1, (budget_s - startup) / 60 * 0.85):.2f}"]
    out = dict(command=" ".join(os.path.relpath(c) if c.startswith(HERE) else c for c in cmd))
    print(f"$ {out['command']}", flush=True)
    try:
        proc = subprocess.run(cmd, timeout=budget_s + 30)
        out["returncode"] = proc.returncode
    except subprocess.TimeoutExpired:
        out["error"] = f"killed after {budget_s + 30:.0f} s"
    try:
        with open(path) as fh:
            out["result"] = json.load(fh)
    except (OSError, ValueError) as err:
        out.setdefault("error", f"no result file: {err}")
    if plot_path and os.path.exists(png):
        out["plot"] = png
    return out


def run_scale(args, budget_s: float, plot_path: str | None, peaks: dict | None = None) -> dict:
    import vmc_scale

    result = vmc_scale.run(args.scale_lattices, args.scale_hamiltonians, args.scale_symmetries, args.samples,
                           args.repeats, args.scale_row_budget_s, deadline=time.time() + budget_s,
                           square=128 if args.quick else None, quick=args.quick)
    highest = (peaks or {}).get("float32_highest", {}).get("tflops")
    if highest:  # the library's products run at "highest" on accelerators: its own peak
        for row in result.get("rows", []):
            if row.get("gflops") is not None:
                row["peak_fraction_highest"] = row["gflops"] / (highest * 1e3)
        result["peak_highest_tflops"] = highest
    print()
    for line in vmc_scale.format_table(result):
        print(line)
    if plot_path:
        vmc_scale.plot(result, plot_path)
        result["plot"] = plot_path
    return result


def run_w1(args, budget_s: float) -> dict:
    import vmc_step

    from quantax_lite.utils import tuning

    deadline = time.time() + budget_s
    rows, last = [], None
    for i in args.w1_rows:
        group, precision, amplitude = W1_CONFIGS[i]
        if precision == "f64" and not tuning.current().device_float64:
            rows.append(dict(row=i, group=group, precision=precision, output=amplitude, status="skipped",
                             reason="no float64 on this backend's device"))
            continue
        left = deadline - time.time()
        if last is not None and last > left:
            rows.append(dict(row=i, group=group, precision=precision, output=amplitude, status="skipped",
                             reason=f"estimated {last:.0f} s (the previous row) > time left {left:.0f} s"))
            print(f"W1 row {i}: {rows[-1]['reason']}", flush=True)
            continue
        t = time.perf_counter()
        try:
            row = dict(row=i, status="measured", **vmc_step.measure(group, args.samples, precision, amplitude,
                                                                     args.repeats))
        except Exception as err:
            row = dict(row=i, group=group, precision=precision, output=amplitude, status="error",
                       reason=error_text(err))
        row["wall_s"] = last = time.perf_counter() - t
        rows.append(row)
        if row["status"] == "measured":
            print(f"W1 {row['group']:>12} {row['precision']} {row['output']:>8} P={row['n_params']:5d}  step "
                  f"{row['step_s'] * 1e3:7.1f} ms | sample {row['sampling_s'] * 1e3:6.1f}  E_loc "
                  f"{row['local_energy_s'] * 1e3:6.1f}  jac {row['jacobian_s'] * 1e3:6.1f}  solve "
                  f"{row['solve_s'] * 1e3:6.1f} ms", flush=True)
        else:
            print(f"W1 row {i}: {row['reason']}", flush=True)
    return dict(n_samples=args.samples, repeats=args.repeats, rows=rows)


def output_path(quick: bool, json_path: str | None) -> str | None:
    """The JSON to write: the given path; without one the default on a full run, none on a
    quick one (a quick run never replaces the results)."""
    return _output_path(quick, json_path, DEFAULT_JSON)


QUICK_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true")


def main(argv=None):
    args = parse_args(argv)
    if args.quick and "jax" not in sys.modules:
        # a smoke test: CPU code generation without its costly optimizations compiles
        # about twice as fast here; its timings mean nothing anyway (inherited by the subprocesses)
        os.environ["JAX_PLATFORMS"] = "cpu"
        flags = os.environ.get("XLA_FLAGS", "").split()
        os.environ["XLA_FLAGS"] = " ".join(flags + [f for f in QUICK_XLA_FLAGS if f.split("=")[0] not in
                                                    {g.split("=")[0] for g in flags}])
    if args.memory_worker:
        memory_worker(json.loads(args.memory_worker))
        return 0
    if args.agreement_reference:
        agreement_reference(json.loads(args.agreement_reference))
        return 0
    t_start = time.time()
    backend = detect_backend()
    if not is_accelerator(backend) and not args.quick and not args.allow_cpu:
        print(f"accelerator_suite: no TPU or GPU visible to jax (backend {backend!r}); use --quick for the CPU smoke "
              "test or --allow-cpu to run the full suite here anyway.", file=sys.stderr)
        return 2
    json_path = output_path(args.quick, args.json)
    stem = os.path.splitext(json_path)[0] if json_path else None
    plots = dict(scale=stem and stem + "_vmc_scale.png", sharding=stem and stem + "_jacobian_sharding.png")
    if json_path:
        os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    budgets = dict(train=args.train_budget_s, sharding=args.sharding_budget_s, memory=args.memory_budget_s,
                   peaks=args.peaks_budget_s, scale=args.scale_budget_s, w1=args.w1_budget_s,
                   agreement=args.agreement_budget_s, tdvp=args.tdvp_budget_s)
    load_start = load_average()
    print(f"# accelerator_suite on {backend}{' (quick)' if args.quick else ''}: parts {' '.join(args.parts)}, total budget "
          f"{args.total_budget_s:.0f} s, load average {load_start[0]:.1f}", flush=True)
    command = command_line(__file__, argv)
    environment = {k: v for k, v in sorted(os.environ.items()) if k.startswith(("QUANTAX_LITE_", "JAX_", "XLA_"))}
    result = dict(benchmark="accelerator_suite", command=command, environment=environment,
                  started_utc=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t_start)), quick=args.quick,
                  backend=backend, budgets=dict(budgets, total=args.total_budget_s), parts={},
                  load_average_start=load_start)
    todo = [name for name in PART_NAMES if name in args.parts]  # the subprocess parts first
    import jax

    from quantax_lite.utils import limit_blas_threads

    # as the command runs (float64 solve on CPUs only), without opening the device here
    # before the subprocess parts have run (tuning.configure_x64 would)
    jax.config.update("jax_enable_x64", not is_accelerator(backend))
    # as `quantax-lite train` runs (and vmc_scale.py, vmc_step.py); only on CPUs, where asking
    # jax's backend here cannot take an accelerator from the subprocess parts
    blas = limit_blas_threads() if backend == "cpu" else None
    pending = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(todo):
            left = t_start + args.total_budget_s - time.time()
            reserve = sum(min(budgets[n], 30.0) for n in todo[i + 1:])
            budget = min(budgets[name], left - reserve)
            print(f"\n## {name} (budget {max(budget, 0):.0f} s)", flush=True)
            if budget < (5.0 if args.quick else 15.0):
                result["parts"][name] = dict(skipped=f"total budget: {left:.0f} s left, {reserve:.0f} s kept for "
                                                     f"{' '.join(todo[i + 1:]) or 'nothing'}")
                print(result["parts"][name]["skipped"])
                continue
            t = time.time()
            try:
                if name == "train":
                    part = run_train(args, budget, tmp)
                elif name == "sharding":
                    part = run_sharding(args, budget, tmp, plots["sharding"], backend)
                elif name == "memory":
                    part = run_memory(args, budget, tmp)
                    print("\n".join(memory_table(part)))
                elif name == "peaks":
                    part = run_peaks(args)
                elif name == "scale":
                    part = run_scale(args, budget, plots["scale"], result["parts"].get("peaks"))
                elif name == "w1":
                    part = run_w1(args, budget)
                elif name == "tdvp":
                    part = run_tdvp(args, budget, tmp)
                else:  # its CPU reference runs beside the parts after it; compared at the end
                    pending["agreement"] = start_agreement(args, tmp)
                    part = dict(started=True)
            except Exception as err:  # record it, run the other parts
                part = dict(error=error_text(err))
                print(f"{name}: {part['error']}")
            part["wall_s"] = round(time.time() - t, 1)
            part["budget_s"] = round(budget, 1)
            result["parts"][name] = part
        if "agreement" in pending:
            started = result["parts"]["agreement"]
            t = time.time()
            left = t_start + args.total_budget_s - t
            print(f"\n## agreement: the float64 CPU reference (waiting at most {max(left, 30):.0f} s)", flush=True)
            try:
                part = finish_agreement(pending.pop("agreement"), max(left, 30.0))
            except Exception as err:
                part = dict(error=error_text(err))
            if "error" in part:
                print(f"agreement: {part['error']}")
            started.pop("started", None)
            part.update(accelerator_wall_s=started["wall_s"], reference_wait_s=round(time.time() - t, 1),
                        wall_s=round(started["wall_s"] + time.time() - t, 1), budget_s=started["budget_s"])
            result["parts"]["agreement"] = part
    if blas is not None:
        blas.restore_original_limits()
    result.update(platform_info(), load_average_end=load_average(), wall_s=round(time.time() - t_start, 1))
    print(f"\n# accelerator_suite: {result['wall_s']:.0f} s; " + ", ".join(
        f"{n} {p.get('wall_s', 0):.0f} s" + (" (error)" if "error" in p else " (skipped)" if "skipped" in p else "")
        for n, p in result["parts"].items()))
    if json_path:
        write_result(json_path, result, __file__, argv, indent=1)
        print(f"wrote {json_path}" + "".join(f" and {p}" for p in plots.values() if p and os.path.exists(p)))
    else:
        print("quick run: no JSON written (give --json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
