"""Forward throughput and compiled memory of the symmetrized 6x6 network vs batch size.

Model: ``quantax_lite.make_conv_nqs(Square(6), full_symmetry(Square(6)))`` -- the
default 6x6 architecture (16 channels, depth 4, kernel 3: 18752 parameters) projected on
translations x C4v x spin inversion (576 elements). Variant "full" is built in
``quantax_lite.utils.tuning.override(merge_translations=False)`` (576 network images per
sample); variant "merged" is the library's default, merged over translations (16 images
per sample, the same log psi up to rounding), measured too unless ``--no-merged``.
The convolution form is ``--conv`` (``tuning.override(conv_form=...)`` around building
and compiling; default ``gather``, ``auto`` is the library's own choice).

Samples are placed sharded over the devices (``shard_batch_array``), parameters
replicated. log psi is evaluated through ``quantax_lite.utils.chunk_map(model.apply, in_axes=(None, 0),
chunk_size=c, use_scan=True, shard_batch=...)`` on ``--devices`` simulated CPU devices
(default 8; XLA_FLAGS is set before jax is imported), jitted, with and without
``shard_batch``. For each batch size the compiled program's memory is read from
``memory_analysis()`` (per device: temp, and peak bound = arguments + outputs + temp -
aliased), then -- unless the predicted time exceeds ``--budget`` seconds -- it is run once
to warm up and timed (median of ``--repeat`` runs).

Every variant and mode of a batch size is evaluated on the same samples (drawn once per
batch size) with the same parameters, so they compute the same log psi: a timed row after
the first of its batch size records ``max_abs_diff_vs_first``, the largest difference of
Re log psi (and ``max_phase_diff_vs_first``, of Im log psi modulo 2 pi) from that first
row, a rounding-level number (about 1e-13 in float64). Results written before this was so
(samples drawn afresh for every row) compared different samples; that field was removed
from them.

A second table: the per-sample gradient ``jax.jit(jax.vmap(jax.grad(Re log psi)))`` of the
default 4x4 network (bare ConvResNet, 8 channels, depth 2: 2432 parameters) on
``--grad-samples`` samples (default 1024; 256 with ``--quick``), traced in
``tuning.override(conv_form="gather")`` vs ``conv_form="lax"``, float32 and float64 (on
one device, no chunking). On XLA:CPU the lax.conv weight gradient of a vmapped
per-sample gradient is a grouped convolution, very slow in float64.

    python benchmarks/model_forward.py            # default network, batches 8 16 32 64
    python benchmarks/model_forward.py --quick    # 4 channels, depth 1, < 1 minute

Writes a table to stdout and JSON to benchmarks/results/model_forward.json (``--json``).
"""
from __future__ import annotations

import os as _os
import sys as _sys

_sys.path.insert(0, _os.path.dirname(_os.path.abspath(__file__)))
from _common import (add_json_option, clock, load_average, output_path, results_file, script_parser,  # noqa: E402
                     simulate_cpu_devices, Table, time_calls, write_result)

import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402

# "auto" and quantax_lite.utils.tuning.CONV_FORMS (not imported here: jax must not be loaded
# before simulate_cpu_devices)
CONV_CHOICES = ("auto", "dense", "lax", "lax_patch", "gather")


def parse_args(argv=None):
    p = script_parser(__doc__)
    p.add_argument("--quick", action="store_true", help="4 channels, depth 1, batches 8 32 (< 1 minute)")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=None, help="global batch sizes (default 8 16 32 64)")
    p.add_argument("--chunk-size", type=int, default=2, help="chunk_map rows per device per step")
    p.add_argument("--channels", type=int, default=None, help="default: the 6x6 default (16)")
    p.add_argument("--depth", type=int, default=None, help="default: the 6x6 default (4)")
    p.add_argument("--kernel-size", type=int, default=None, help="default: 3")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float64", help="network dtype (default float64)")
    p.add_argument("--conv", choices=CONV_CHOICES, default="gather",
                   help="convolution form of the forward table (tuning conv_form; auto: the library's choice)")
    p.add_argument("--no-merged", action="store_true", help="skip the merged-translations (16 images) variant")
    p.add_argument("--grad-samples", type=int, default=None,
                   help="samples of the per-sample gradient table (default 1024, --quick 256; 0: skip)")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--budget", type=float, default=60.0, help="skip timing a row predicted slower than this (s)")
    p.add_argument("--devices", type=int, default=8, help="simulated CPU devices (sets XLA_FLAGS); 0: leave as is")
    add_json_option(p, results_file("model_forward.json"), "full")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    simulate_cpu_devices(args.devices)  # before jax is imported
    import jax

    jax.config.update("jax_enable_x64", True)

    from quantax_lite.utils import tuning

    # the networks and every forward program are built and traced in the override
    with tuning.override(conv_form=args.conv):
        rows, header = forward_table(args)
    grad_rows = per_sample_gradient_table(args) if args.grad_samples else []
    result = dict(header, rows=rows, per_sample_gradient=grad_rows)
    path = output_path(args.quick, args.json, results_file("model_forward.json"))  # (--quick: only where --json says)
    if path:
        write_result(path, result, __file__, argv, indent=2)
        print(f"# wrote {path}")
    return result


def forward_table(args):
    """The forward rows and the header (called inside the ``--conv`` tuning override)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from quantax_lite import Square, count_params, full_symmetry, make_conv_nqs
    from quantax_lite.utils import tuning
    from quantax_lite.utils import chunk_map, make_mesh, replicated_sharding, shard_batch_array

    if args.quick:
        batch_sizes = args.batch_sizes or [8, 32]
        channels, depth = args.channels or 4, args.depth or 1
        args.repeat = min(args.repeat, 2)
        args.budget = min(args.budget, 10.0)
        args.grad_samples = 256 if args.grad_samples is None else args.grad_samples
    else:
        batch_sizes = args.batch_sizes or [8, 16, 32, 64]
        channels, depth = args.channels, args.depth
        args.grad_samples = 1024 if args.grad_samples is None else args.grad_samples

    lattice = Square(6)
    sym = full_symmetry(lattice)
    dtype = jnp.float32 if args.dtype == "float32" else jnp.float64
    variants = [("full", False)] + ([] if args.no_merged else [("merged", True)])
    models = {}
    for name, merge in variants:
        with tuning.override(merge_translations=merge):
            models[name] = make_conv_nqs(lattice, sym, channels=channels, depth=depth,
                                         kernel_size=args.kernel_size, dtype=dtype)
    base = models["full"].base
    rng = np.random.default_rng(0)
    probe = np.ones((1, lattice.n_sites), np.int8)
    # random parameters of the right shapes (a trained network is not near-uniform)
    shapes = jax.eval_shape(models["full"].init, jax.random.PRNGKey(0), probe)
    params = jax.tree_util.tree_map(lambda x: (0.2 * rng.normal(size=x.shape)).astype(x.dtype), shapes)
    n_params = count_params(params)
    n_dev = jax.device_count()
    if any(b % n_dev for b in batch_sizes):
        raise ValueError(f"--batch-sizes: every batch size must be a multiple of the {n_dev} devices")

    header = {
        "benchmark": "model_forward",
        "model": {
            "lattice": lattice.name, "channels": base.channels, "depth": base.depth,
            "kernel_size": base.kernel_size, "conv": args.conv, "dtype": args.dtype,
            "readout": base.readout, "n_params": n_params, "group_elements": sym.n_elements,
            "images_per_sample": {name: m.n_elements for name, m in models.items()},
        },
        "chunk_size": args.chunk_size,
        "devices": n_dev,
        "backend": jax.default_backend(),
        "device_kind": jax.devices()[0].device_kind,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "load_average": load_average(),
        "jax": jax.__version__,
        "quick": bool(args.quick),
    }
    print(
        f"# model forward: {lattice.name} conv NQS C={base.channels} depth={base.depth} k={base.kernel_size} "
        f"({n_params} params, {args.dtype}, conv={args.conv}), group of {sym.n_elements}; chunk_size "
        f"{args.chunk_size}/device; {n_dev} x {header['device_kind']} ({header['backend']}); "
        f"load average {header['load_average'][0]:.1f}"
    )
    cols = Table(("variant", 8), ("images", 6), ("shard", 5), ("batch", 6), ("compile_s", 9), ("time_s", 8),
                 ("samples/s", 10), ("temp_MiB", 9), ("peak_MiB", 9))
    print(cols.header)
    print(cols.rule)

    params = jax.device_put(params, replicated_sharding(make_mesh()))
    rows = []
    mib = 2.0**20
    reference = {}
    # one set of samples per batch size, shared by every variant and mode (the same log psi
    # up to rounding, so the differences recorded below measure rounding, not sampling);
    # they live sharded over the devices (as in a VMC run), parameters replicated
    samples = {batch: shard_batch_array(rng.choice(np.array([-1, 1], np.int8), size=(batch, lattice.n_sites)))
               for batch in batch_sizes}
    for name, model in models.items():
        per_sample = None
        for shard_batch in (False, True):
            fn = chunk_map(model.apply, in_axes=(None, 0), chunk_size=args.chunk_size, use_scan=True,
                           shard_batch=shard_batch)
            for batch in batch_sizes:
                s = samples[batch]
                compiled, compile_s = clock(lambda: jax.jit(fn).lower(params, s).compile(), wait=False)  # noqa: B023
                mem = compiled.memory_analysis()
                temp = int(mem.temp_size_in_bytes)
                peak = int(mem.argument_size_in_bytes + mem.output_size_in_bytes + temp - mem.alias_size_in_bytes)
                row = {
                    "variant": name, "images_per_sample": model.n_elements, "shard_batch": shard_batch,
                    "batch": batch, "compile_s": compile_s, "temp_bytes": temp, "peak_bytes": peak,
                    "argument_bytes": int(mem.argument_size_in_bytes), "output_bytes": int(mem.output_size_in_bytes),
                }
                predicted = None if per_sample is None else per_sample * batch * (args.repeat + 1)
                if predicted is not None and predicted > args.budget:
                    row.update(time_s=None, samples_per_s=None,
                               skipped=f"predicted {predicted:.0f} s > budget {args.budget:.0f} s")
                else:
                    out, warm_s = clock(lambda: np.asarray(compiled(params, s)), wait=False)  # noqa: B023 (warm-up)
                    per_sample = warm_s / batch
                    if not np.all(np.isfinite(out)):
                        raise RuntimeError(f"non-finite log psi ({name}, batch {batch})")
                    if batch in reference:  # same samples, same parameters: the same log psi
                        row.update(log_psi_difference(out, reference[batch]))
                    else:
                        reference[batch] = out
                    t = float(np.median(time_calls(lambda: compiled(params, s), args.repeat)))  # noqa: B023
                    per_sample = t / batch
                    row.update(time_s=t, samples_per_s=batch / t)
                rows.append(row)
                sps = f"{row['samples_per_s']:.1f}" if row["samples_per_s"] else "skipped"
                ts = f"{row['time_s']:.3f}" if row["time_s"] else "-"
                print(cols.row(name, model.n_elements, shard_batch, batch, f"{compile_s:.2f}", ts, sps,
                               f"{temp / mib:.1f}", f"{peak / mib:.1f}"))
                sys.stdout.flush()
    return rows, header


def log_psi_difference(out, ref) -> dict:
    """``max_abs_diff_vs_first``: max |Re log psi - Re ref|; ``max_phase_diff_vs_first``:
    max |Im log psi - Im ref| modulo 2 pi (0 for a real log psi)."""
    import numpy as np

    out, ref = np.asarray(out), np.asarray(ref)
    phase = np.angle(np.exp(1j * (out.imag - ref.imag))) if np.iscomplexobj(out) or np.iscomplexobj(ref) else 0.0
    return {"max_abs_diff_vs_first": float(np.max(np.abs(out.real - ref.real))),
            "max_phase_diff_vs_first": float(np.max(np.abs(phase)))}


def per_sample_gradient_table(args):
    """Time jit(vmap(grad(Re log psi))) of the default 4x4 ConvResNet: gather vs lax, float32 vs float64."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from quantax_lite import Square, make_conv_nqs
    from quantax_lite.utils import tuning

    n = args.grad_samples
    rng = np.random.default_rng(1)
    s = rng.choice(np.array([-1, 1], np.int8), size=(n, 16))
    device = jax.devices()[0]
    print(f"# per-sample gradient jit(vmap(grad(Re log psi))): default 4x4 ConvResNet, {n} samples, one device")
    cols = Table(("dtype", 8), ("conv", 7), ("compile_s", 9), ("time_ms", 9), ("samples/s", 10))
    print(cols.header)
    print(cols.rule)
    rows = []
    for dtype in (jnp.float32, jnp.float64):
        params = None
        model = make_conv_nqs(Square(4), None, dtype=dtype)
        for conv in ("gather", "lax"):
            if params is None:  # the same parameters for both implementations
                shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), s[:1])
                params = jax.tree_util.tree_map(lambda x: (0.2 * rng.normal(size=x.shape)).astype(x.dtype), shapes)
            p_dev, s_dev = jax.device_put((params, s), device)
            def build():
                with tuning.override(conv_form=conv):  # noqa: B023 (a fresh function, traced in the override)
                    grad = jax.vmap(jax.grad(lambda p, x: model.apply(p, x[None])[0].real), in_axes=(None, 0))
                    return jax.jit(grad).lower(p_dev, s_dev).compile()  # noqa: B023

            compiled, compile_s = clock(build, wait=False)
            clock(lambda: compiled(p_dev, s_dev))  # noqa: B023 (warm-up)
            t = float(np.median(time_calls(lambda: compiled(p_dev, s_dev), max(1, args.repeat))))  # noqa: B023
            name = np.dtype(dtype).name
            rows.append({"dtype": name, "conv": conv, "samples": n, "compile_s": compile_s, "time_s": t,
                         "samples_per_s": n / t})
            print(cols.row(name, conv, f"{compile_s:.2f}", f"{t * 1e3:.1f}", f"{n / t:.0f}"))
            sys.stdout.flush()
    return rows


if __name__ == "__main__":
    main()
