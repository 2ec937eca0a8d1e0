"""Local-energy throughput and compiled memory vs. chunk size.

System: the 6x6 J1-J2 Heisenberg model (J2 = 0.5, Marshall sign) with the symmetrized
convolutional network of ``quantax_lite.make_conv_nqs`` (full symmetry group:
translations x C4v x spin inversion, 576 elements, merged to 16 images per sample, the
library's default; ``--no-merge`` builds it in
``quantax_lite.utils.tuning.override(merge_translations=False)``).

The speed choices compared are set with ``quantax_lite.utils.tuning.override`` around building
and compiling: ``--conv`` is the convolution form (``conv_form``; default ``gather``,
``auto`` is the library's own choice).

For each chunk size ``c`` (samples per device per step) the local-energy function
``make_local_energy(H, model.apply, chunk_size=c)`` is compiled for a batch of
``n_chunks * c * n_devices`` samples (so the chunk loop really runs), its compiled
memory is read from ``compiled.memory_analysis()`` (per device), and -- unless the
predicted time exceeds ``--budget`` seconds -- it is timed (median of ``--repeat`` runs
after one warm-up). Every sample costs ``max_conn = 145`` network evaluations.

    python benchmarks/local_energy.py            # chunk sizes 64 ... 4096
    python benchmarks/local_energy.py --quick    # tiny network, chunks 8..32, < 1 minute
    python benchmarks/local_energy.py --devices 8   # 8 simulated CPU devices

Writes a table to stdout and JSON to benchmarks/results/local_energy.json (``--json``).
"""
from __future__ import annotations

import os as _os
import sys as _sys

_sys.path.insert(0, _os.path.dirname(_os.path.abspath(__file__)))
from _common import (add_json_option, clock, output_path, results_file, script_parser,  # noqa: E402
                     simulate_cpu_devices, Table, time_calls, write_result)

import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402

# "auto" and quantax_lite.utils.tuning.CONV_FORMS (not imported here: jax must not be loaded
# before simulate_cpu_devices)
CONV_CHOICES = ("auto", "dense", "lax", "lax_patch", "gather")


def parse_args(argv=None):
    p = script_parser(__doc__)
    p.add_argument("--quick", action="store_true", help="tiny network, chunk sizes 8..32 (< 1 min)")
    p.add_argument("--chunk-sizes", type=int, nargs="+", default=None, help="default 64 128 ... 4096")
    p.add_argument("--n-chunks", type=int, default=2, help="chunks per device in the timed batch")
    p.add_argument("--channels", type=int, default=None, help="default: the 6x6 default (16)")
    p.add_argument("--depth", type=int, default=None, help="default: the 6x6 default (4)")
    p.add_argument("--kernel-size", type=int, default=None)
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="network dtype")
    p.add_argument("--conv", choices=CONV_CHOICES, default="gather",
                   help="convolution form (tuning conv_form; auto: the library's choice)")
    p.add_argument("--no-merge", action="store_true", help="evaluate all 576 group images per sample")
    p.add_argument("--J2", type=float, default=0.5)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--budget", type=float, default=60.0, help="skip timing a chunk size predicted slower than this (s)")
    p.add_argument("--memory-fraction", type=float, default=0.5,
                   help="skip running a chunk size whose compiled memory exceeds this fraction of the device (CPU: RAM)")
    p.add_argument("--devices", type=int, default=None, help="simulated CPU devices (sets XLA_FLAGS)")
    add_json_option(p, results_file("local_energy.json"), "full")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    simulate_cpu_devices(args.devices)  # before jax is imported
    import jax

    jax.config.update("jax_enable_x64", True)  # float64 matrix elements and energies

    from quantax_lite.utils import tuning

    # the network, the probe and every local-energy program are built and traced here
    with tuning.override(conv_form=args.conv, merge_translations=not args.no_merge):
        return run(args, argv)


def run(args, argv=None):
    """The measurement (called inside the tuning override of ``args``)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from quantax_lite import (
        Heisenberg, Square, count_params, full_symmetry, make_conv_nqs, make_local_energy, random_states,
    )

    if args.quick:
        chunk_sizes = args.chunk_sizes or [8, 16, 32]
        channels, depth = args.channels or 4, args.depth or 1
        args.repeat = min(args.repeat, 2)
        args.budget = min(args.budget, 15.0)
    else:
        chunk_sizes = args.chunk_sizes or [64, 128, 256, 512, 1024, 2048, 4096]
        channels, depth = args.channels, args.depth

    lattice = Square(6)
    ham = Heisenberg(lattice, J1=1.0, J2=args.J2, marshall_sign=True)
    sym = full_symmetry(lattice)
    dtype = jnp.float32 if args.dtype == "float32" else jnp.float64
    model = make_conv_nqs(lattice, sym, channels=channels, depth=depth, kernel_size=args.kernel_size, dtype=dtype)
    key = jax.random.PRNGKey(0)
    params = model.init(key, jnp.ones((1, lattice.n_sites), jnp.int8))
    n_params = count_params(params)
    n_dev = jax.device_count()
    log_psi = model.apply

    header = {
        "benchmark": "local_energy",
        "system": f"6x6 J1-J2 Heisenberg, J2={args.J2}, Marshall sign, Sz=0",
        "max_conn": ham.max_conn,
        "model": {
            "channels": channels, "depth": depth, "kernel_size": args.kernel_size, "conv": args.conv,
            "dtype": args.dtype, "group_elements": sym.n_elements,
            "merge_translations": not args.no_merge, "n_params": n_params,
        },
        "devices": n_dev,
        "backend": jax.default_backend(),
        "device_kind": jax.devices()[0].device_kind,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "quick": bool(args.quick),
        "n_chunks": args.n_chunks,
    }
    print(
        f"# local energy: {header['system']}, max_conn={ham.max_conn}; conv NQS {n_params} params "
        f"({args.dtype}, {sym.n_elements}-element group, merged={not args.no_merge}); "
        f"{n_dev} x {header['device_kind']} ({header['backend']})"
    )
    cols = Table(("chunk", 6), ("batch", 7), ("compile_s", 9), ("time_s", 8), ("samples/s", 10), ("temp_MiB", 9),
                 ("peak_MiB", 9))
    print(cols.header)
    print(cols.rule)

    # memory available to one device: the accelerator's limit, or the host RAM on CPU
    try:
        limit = int(jax.devices()[0].memory_stats()["bytes_limit"])
    except Exception:
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // max(1, n_dev)
    header["device_memory_bytes"] = limit

    # a first estimate of the cost per sample: the network on 8 samples' connections
    probe_s = random_states(jax.random.PRNGKey(1), lattice.n_sites, 8, total_sz=0)
    probe_conn = ham.connected(probe_s)[0].reshape(-1, lattice.n_sites)
    probe = jax.jit(log_psi).lower(params, probe_conn).compile()
    clock(lambda: probe(params, probe_conn))
    per_sample = clock(lambda: probe(params, probe_conn))[1] / 8  # refined by every timed chunk size
    header["probe_seconds_per_sample"] = per_sample

    rows = []
    for c in chunk_sizes:
        batch = args.n_chunks * c * n_dev
        samples = random_states(jax.random.PRNGKey(c), lattice.n_sites, batch, total_sz=0)
        fn = make_local_energy(ham, log_psi, chunk_size=c, jit=False)
        compiled, compile_s = clock(lambda: jax.jit(fn).lower(params, samples).compile(), wait=False)  # noqa: B023
        mem = compiled.memory_analysis()
        temp = int(mem.temp_size_in_bytes)
        reported_peak = int(getattr(mem, "peak_memory_in_bytes", 0) or 0)
        # the CPU backend's peak leaves out scratch memory; use the bound args + outputs + temp
        bound = int(mem.argument_size_in_bytes + mem.output_size_in_bytes + temp - mem.alias_size_in_bytes)
        peak = max(reported_peak, bound)
        row = {
            "chunk_size": c, "batch": batch, "compile_s": compile_s, "temp_bytes": temp,
            "argument_bytes": int(mem.argument_size_in_bytes), "output_bytes": int(mem.output_size_in_bytes),
            "reported_peak_bytes": reported_peak, "peak_bytes": peak,
        }
        predicted = per_sample * batch * (args.repeat + 1)
        if peak > args.memory_fraction * limit:
            row.update(time_s=None, samples_per_s=None,
                       skipped=f"memory {peak / 2**30:.1f} GiB > {args.memory_fraction:g} x device memory")
        elif predicted > args.budget:
            row.update(time_s=None, samples_per_s=None, skipped=f"predicted {predicted:.0f} s > budget {args.budget:.0f} s")
        else:
            out = compiled(params, samples)
            out.block_until_ready()  # warm-up
            if not np.all(np.isfinite(np.asarray(out))):
                raise RuntimeError(f"non-finite local energies at chunk size {c}")
            t = float(np.median(time_calls(lambda: compiled(params, samples), args.repeat)))  # noqa: B023
            per_sample = t / batch
            row.update(time_s=t, samples_per_s=batch / t, mean_local_energy=float(np.mean(np.asarray(out).real)))
        rows.append(row)
        mib = 2.0**20
        sps = f"{row['samples_per_s']:.1f}" if row["samples_per_s"] else "skipped"
        ts = f"{row['time_s']:.3f}" if row["time_s"] else "-"
        print(cols.row(c, batch, f"{compile_s:.2f}", ts, sps, f"{temp / mib:.1f}", f"{peak / mib:.1f}"))
        sys.stdout.flush()

    result = dict(header, rows=rows)
    path = output_path(args.quick, args.json, results_file("local_energy.json"))  # (--quick: only where --json says)
    if path:
        write_result(path, result, __file__, argv, indent=2)
        print(f"# wrote {path}")
    return result


if __name__ == "__main__":
    main()
