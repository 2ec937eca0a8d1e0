"""Per-sample Jacobian throughput and memory, and SR / MinSR solve times.

Jacobian. The default 6x6 symmetrized network of ``quantax_lite.make_conv_nqs``
(16 channels, depth 4, kernel 3: 18752 real parameters; full group translations x C4v
x spin inversion, merged to 16 images per sample, the library's default), in two
convolution forms (``quantax_lite.utils.tuning.override(conv_form="gather")`` and
``conv_form="lax"``, set around building and compiling) and both precisions.
For each chunk size the jitted ``make_jacobian(model.apply, chunk_size=c)`` is compiled
for a fixed batch, its per-device scratch memory read from
``compiled.memory_analysis().temp_size_in_bytes``, and its throughput (samples/s)
measured: the first run after compilation, then the median of ``--repeat`` more runs
when one run is short. The lax form is very slow under ``vmap(grad)`` on XLA:CPU, so its
batch is smaller, and a chunk size predicted to exceed ``--budget`` seconds is not timed.
On several devices the all-gathers of the compiled program are counted, and those of
the same program traced with ``tuning.override(jacobian_shard_batch=False)`` (GSPMD).

Solve. ``sr_direction`` on a random complex64 Jacobian (a float32 network; real
parameters, i.e. the real formulation), solved in float64, for (n_samples, n_params)
in {(1024, 5e3), (4096, 2e4), (8192, 1e5)}, both SR (P x P) and MinSR (2N x 2N). A case is
skipped when its estimated memory exceeds the machine's available memory or its time,
extrapolated from the measured flop rate of the cases run so far, exceeds
``--solve-budget`` seconds; the estimate is reported. Memory is the compiled
program's ``memory_analysis()`` (scratch + arguments + outputs), compared with the
memory available when the case starts.

    python benchmarks/jacobian.py             # full (about 5 minutes on 2 CPU cores)
    python benchmarks/jacobian.py --quick     # small 4x4 network, small solves (< 1 minute)
    python benchmarks/jacobian.py --devices 8 # 8 simulated CPU devices (+ collective counts)

Writes a table to stdout and JSON to benchmarks/results/jacobian.json (``--json``).
"""
from __future__ import annotations

import os as _os
import sys as _sys

_sys.path.insert(0, _os.path.dirname(_os.path.abspath(__file__)))
from _common import (add_json_option, clock, output_path, results_file, script_parser,  # noqa: E402
                     simulate_cpu_devices, Table, time_calls, write_result)

import os  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

JACOBIAN_COLUMNS = Table(("lat", 5), ("conv", 6), ("dtype", 7), ("params", 6), ("N", 5), ("chunk", 5),
                         ("samples/s", 10), ("temp MiB", 9), ("out MiB", 8), ("compile", 7))
SOLVE_COLUMNS = Table(("N", 6), ("P", 7), ("method", 6), ("seconds", 9), ("temp GiB", 9))


def parse_args(argv=None):
    p = script_parser(__doc__)
    p.add_argument("--quick", action="store_true", help="small 4x4 network (4 channels, depth 1), small solves")
    p.add_argument("--chunk-sizes", type=int, nargs="+", default=None, help="samples per device per chunk")
    p.add_argument("--repeat", type=int, default=2, help="timed runs after the first (short runs only)")
    p.add_argument("--budget", type=float, default=40.0, help="skip timing a Jacobian predicted slower (s)")
    p.add_argument("--solve-budget", type=float, default=200.0, help="skip a solve estimated slower (s)")
    p.add_argument("--skip-jacobian", action="store_true")
    p.add_argument("--skip-solve", action="store_true")
    p.add_argument("--devices", type=int, default=None, help="simulated CPU devices (sets XLA_FLAGS)")
    add_json_option(p, results_file("jacobian.json"), "full")
    return p.parse_args(argv)


def available_memory_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 2**30


def collective_counts(text: str) -> dict:
    names = ("all-gather", "all-reduce", "all-to-all", "collective-permute", "reduce-scatter")
    return {c: len(re.findall(rf" {c}(-start)?\(", text)) for c in names}


def timed(fn, args, repeat: int, short: float = 5.0):
    """(seconds per run, runs timed): a run that takes longer than ``short`` is timed once;
    shorter ones are warmed up once, then the median of ``repeat`` runs is taken."""
    first = clock(lambda: fn(*args))[1]
    if first > short or repeat <= 0:
        return first, 1
    return statistics.median(time_calls(lambda: fn(*args), repeat)), repeat


def bench_jacobian(args, n_dev):
    import numpy as np

    from quantax_lite import Square
    from quantax_lite.utils import tuning
    from quantax_lite.utils import make_mesh

    lattice = Square(4) if args.quick else Square(6)
    arch = dict(channels=4, depth=1) if args.quick else {}  # quick: a small 4x4 network
    mesh = make_mesh()
    # (conv, dtype, samples per device, chunk sizes): the lax form gets fewer samples
    if args.quick:
        configs = [("gather", "float32", 16, [4, 16]), ("gather", "float64", 16, [4]),
                   ("lax", "float32", 8, [4]), ("lax", "float64", 8, [4])]
    else:
        configs = [("gather", "float32", 64, [4, 16, 64]), ("gather", "float64", 64, [4, 16, 64]),
                   ("lax", "float32", 32, [4, 16, 32]), ("lax", "float64", 16, [4, 16])]
    if args.chunk_sizes:
        configs = [(c, d, n, args.chunk_sizes) for c, d, n, _ in configs]
    rng = np.random.default_rng(0)
    rows = []
    for conv, dtype, per_device, chunk_sizes in configs:
        # the convolution form is a speed choice, read when a program is traced: build,
        # trace and compile inside the override (one fresh jitted function per case)
        with tuning.override(conv_form=conv):
            rows += jacobian_rows(args, lattice, arch, mesh, rng, n_dev, conv, dtype, per_device, chunk_sizes)
    return rows


def jacobian_rows(args, lattice, arch, mesh, rng, n_dev, conv, dtype, per_device, chunk_sizes):
    """The rows of one (conv, dtype) configuration; called inside its tuning override."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from quantax_lite import count_params, full_symmetry, jacobian, make_conv_nqs, make_jacobian
    from quantax_lite.utils import tuning
    from quantax_lite.utils import batch_sharding

    rows = []
    model = make_conv_nqs(lattice, full_symmetry(lattice), dtype=getattr(jnp, dtype), **arch)
    n = per_device * n_dev
    s = rng.choice(np.array([-1, 1], np.int8), size=(n, lattice.n_sites))
    samples = jax.device_put(jnp.asarray(s), batch_sharding(mesh, 2))
    params = model.init(jax.random.key(0), samples[:2])
    n_params = count_params(params)
    rate = None
    seen = set()
    for c in chunk_sizes:
        c_eff = min(c, per_device)
        if c_eff in seen:
            continue
        seen.add(c_eff)
        fn = make_jacobian(model.apply, chunk_size=c_eff, mesh=mesh)
        compiled, t_compile = clock(lambda: fn.lower(params, samples).compile(), wait=False)  # noqa: B023
        mem = compiled.memory_analysis()
        row = dict(
            lattice=lattice.name, conv=conv, dtype=dtype, n_params=n_params, n_samples=n,
            chunk_size=c_eff, devices=n_dev, compile_s=round(t_compile, 2),
            temp_MiB=round(mem.temp_size_in_bytes / 2**20, 2),
            output_MiB=round(mem.output_size_in_bytes / 2**20, 2),
        )
        predicted = None if rate is None else n / rate
        if predicted is not None and predicted > args.budget:
            row.update(samples_per_s=None, note=f"not timed: predicted {predicted:.0f} s > budget")
        else:
            sec, runs = timed(compiled, (params, samples), args.repeat)
            rate = n / sec
            row.update(samples_per_s=round(rate, 2), seconds=round(sec, 3), runs=runs)
        if n_dev > 1:
            row["all_gathers"] = collective_counts(compiled.as_text())["all-gather"]
            with tuning.override(jacobian_shard_batch=False):  # GSPMD partitions the batch
                fn_gspmd = jax.jit(lambda p, x, c=c_eff: jacobian(model.apply, p, x, chunk_size=c, mesh=mesh))
                gspmd = fn_gspmd.lower(params, samples).compile()
            row["all_gathers_shard_batch_false"] = collective_counts(gspmd.as_text())["all-gather"]
        rows.append(row)
        print_jacobian_row(row)
    return rows


def print_jacobian_row(r):
    rate = "-" if r.get("samples_per_s") is None else f"{r['samples_per_s']:.1f}"
    extra = r.get("note", "")
    if "all_gathers" in r:
        extra += f" all-gathers {r['all_gathers']} (GSPMD: {r['all_gathers_shard_batch_false']})"
    print(JACOBIAN_COLUMNS.row(r["lattice"], r["conv"], r["dtype"], r["n_params"], r["n_samples"], r["chunk_size"],
                               rate, f"{r['temp_MiB']:.1f}", f"{r['output_MiB']:.1f}", f"{r['compile_s']:.1f}",
                               f" {extra}"), flush=True)


def solve_flops(n, p, method):
    """Flop estimate of one solve on a complex64 Jacobian, real formulation."""
    if method == "sr":
        return 4.0 * n * p * p + p**3 / 3
    m = 2 * n
    return 2.0 * m * m * p + 2 * m * p + m**3 / 3


def bench_solve(args):
    import jax
    import jax.numpy as jnp

    from quantax_lite import sr_direction

    cases = [(256, 1000), (512, 2000)] if args.quick else [(1024, 5000), (4096, 20000), (8192, 100000)]
    methods = {(512, 2000): ("minsr",)} if args.quick else {}
    flop_rate = None
    rows = []
    for n, p in cases:
        for method in methods.get((n, p), ("minsr", "sr")):
            flops = solve_flops(n, p, method)
            row = dict(n_samples=n, n_params=p, method=method)
            fn = jax.jit(lambda O, e, m=method: sr_direction(O, e, diag_shift=1e-3, method=m))
            shapes = (jax.ShapeDtypeStruct((n, p), jnp.complex64), jax.ShapeDtypeStruct((n,), jnp.complex128))
            compiled, t_compile = clock(lambda: fn.lower(*shapes).compile(), wait=False)  # noqa: B023
            mem = compiled.memory_analysis()
            need = mem.temp_size_in_bytes + mem.argument_size_in_bytes + mem.output_size_in_bytes
            avail = available_memory_bytes()  # now: other processes may hold memory
            row.update(compile_s=round(t_compile, 2), temp_GiB=round(mem.temp_size_in_bytes / 2**30, 3),
                       total_GiB=round(need / 2**30, 3))
            est = None if flop_rate is None else flops / flop_rate
            if need > 0.7 * avail:
                row.update(seconds=None, note=f"skipped: needs {need / 2**30:.1f} GiB (available {avail / 2**30:.1f})")
            elif est is not None and est > args.solve_budget:
                row.update(seconds=None, note=f"skipped: estimated {est:.0f} s at {flop_rate / 1e9:.1f} GFLOP/s")
            else:
                k1, k2, k3 = jax.random.split(jax.random.key(n + p), 3)
                O = jax.lax.complex(
                    jax.random.normal(k1, (n, p), jnp.float32), jax.random.normal(k2, (n, p), jnp.float32)
                )
                e = jax.random.normal(k3, (n,), jnp.float64) * (1 + 0.5j)
                sec, runs = timed(compiled, (O, e), args.repeat, short=20.0)
                flop_rate = flops / sec if flop_rate is None else max(flop_rate, flops / sec)
                row.update(seconds=round(sec, 3), runs=runs, GFLOP_per_s=round(flops / sec / 1e9, 1))
                del O, e
            rows.append(row)
            secs = "-" if row["seconds"] is None else f"{row['seconds']:.3f}"
            print(SOLVE_COLUMNS.row(n, p, method, secs, f"{row['temp_GiB']:.2f}", f" {row.get('note', '')}"), flush=True)
    return rows


def collectives_of_solves(n_dev):
    import jax
    import jax.numpy as jnp

    from quantax_lite import sr_direction
    from quantax_lite.utils import batch_sharding, make_mesh

    mesh = make_mesh()
    out = {}
    for method, (n, p) in (("sr", (64 * n_dev, 200)), ("minsr", (8 * n_dev, 400 * n_dev))):
        O = jax.device_put(jnp.zeros((n, p), jnp.complex64), batch_sharding(mesh, 2))
        e = jax.device_put(jnp.zeros((n,), jnp.complex128), batch_sharding(mesh, 1))
        fn = jax.jit(lambda O, e, m=method: sr_direction(O, e, method=m, mesh=mesh))
        out[method] = collective_counts(fn.lower(O, e).compile().as_text())
    return out


def main(argv=None):
    args = parse_args(argv)
    simulate_cpu_devices(args.devices)  # before jax is imported
    import jax

    jax.config.update("jax_enable_x64", True)  # the SR solve runs in float64
    n_dev = jax.device_count()
    result = dict(
        benchmark="jacobian", quick=args.quick, devices=n_dev, platform=platform.platform(),
        cpu_count=os.cpu_count(), jax=jax.__version__, backend=jax.default_backend(),
    )
    print(f"# jax {jax.__version__}, {n_dev} {jax.default_backend()} device(s), {os.cpu_count()} CPU cores")
    if not args.skip_jacobian:
        print("\n## Jacobian (per-sample d log psi / d theta, one shard_map per device: the default)")
        print(JACOBIAN_COLUMNS.header)
        result["jacobian"] = bench_jacobian(args, n_dev)
    if not args.skip_solve:
        print("\n## SR / MinSR solve (complex64 O, real parameters, float64 solve)")
        print(SOLVE_COLUMNS.header)
        result["solve"] = bench_solve(args)
    if n_dev > 1:
        result["solve_collectives"] = collectives_of_solves(n_dev)
        print(f"\nSR-step collectives on {n_dev} devices: {result['solve_collectives']}")
    path = output_path(args.quick, args.json, results_file("jacobian.json"))  # (--quick: only where --json says)
    if path:
        write_result(path, result, __file__, argv, indent=1)
        print(f"\nwrote {path}")
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
