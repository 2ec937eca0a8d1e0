"""GSPMD vs shard_map: collectives, time and memory of the chunked per-sample Jacobian.

What is measured. The per-sample Jacobian ``O = d log psi / d theta`` of the symmetrized
periodic-conv network ``make_conv_nqs(Square(L), full_symmetry(Square(L)))``, computed by
``quantax_lite.jacobian(log_psi, params, samples, chunk_size=c)`` inside one ``jax.jit``
traced in ``quantax_lite.utils.tuning.override(conv_form=conv, jacobian_shard_batch=...)``
(the convolution form and the sharding mode are speed choices of the library, read when
the program is traced), for

* ``shard_batch=False``: GSPMD partitions the global batch of every chunk over the mesh;
* ``shard_batch=True`` (the library's default): one ``jax.shard_map``; each device scans
  over chunks of its own shard.

For every device count D, chunk size c and mode the script records, from the compiled
program: the collectives (all-gather, all-reduce, all-to-all, collective-permute,
reduce-scatter: instructions in the HLO text, matched as `` all-gather(-start)?(``, the
arrays they carry, and the bytes of their results per device, both per instruction and per
call, i.e. multiplied by the trip count of the enclosing chunk loop), the memory it needs
per device (``memory_analysis()``: arguments + outputs + scratch), and, by running it, the median wall
time of a call after one warm-up call, and the largest difference between the Jacobians of
the two modes.

Where. ``--platform cpu`` (the default without a GPU): D simulated CPU devices
(``--xla_force_host_platform_device_count=D``), each D in its own subprocess, since the
count is fixed when jax starts. ``--platform gpu`` (the default when jax sees a GPU): the
first D real devices of the machine, in this process. In addition, without any GPU,
``--gpu-topologies`` compiles (does not run) the same programs for compile-only H100
topologies (``make_precompile_mesh(topology=..., platform="cuda")``; needs the CUDA PJRT
plugin matching jax: ``pip install jax-cuda12-plugin==<jax version>
jax-cuda12-pjrt==<jax version> nvidia-cuda-nvcc-cu12``, or a folder holding them passed as
``--cuda-plugin-path``), in a subprocess with ``JAX_PLATFORMS=cpu``. In float64 that
subprocess (and ``--platform gpu``) sets ``--xla_gpu_enable_triton_gemm=false``: without it
XLA 0.10.2 fails to compile the float64 readout matmul as a Triton GEMM ("Couldn't find
output tile sizes that satisfy hlo"); cuBLAS does it instead, with the same collectives.

Sizes (every one is an option). CPU default: 6x6 lattice, full space group (576
elements) merged over translations (the library's default: 16 network images per
sample, the same log psi; ``--no-merge`` traces ``make_conv_nqs`` in
``tuning.override(merge_translations=False)``), 4 channels, depth 1 (344 parameters; the
6x6 default, 16 channels and depth 4, is tens of times slower per sample here), float64,
64 samples per device, D = 1 2 4 8; conv ``lax`` (the case GSPMD all-gathers) at chunks
4 16 64, conv ``gather`` (no all-gathers in either mode) at chunk 4; then the compile-only topologies
1x1x8 1x2x4 1x8x8 (same convs and chunks), or a note saying why they could not be compiled. GPU
default: the default 6x6 architecture (16 channels, depth 4), 256 samples per device,
D = 8 4 2 1 (as many as the machine has), a 9-minute deadline after which the remaining
cases are skipped.

    python benchmarks/jacobian_sharding.py                  # CPU, about 12 minutes on 2 cores (wall_s in the JSON)
    python benchmarks/jacobian_sharding.py --quick          # < 1 minute
    python benchmarks/jacobian_sharding.py --platform gpu   # one GPU node, < 10 minutes
    python benchmarks/jacobian_sharding.py --gpu-topologies 1x1x8 1x2x4 1x8x8 \\
        --cuda-plugin-path /path/to/plugin --devices        # compile-only H100 counts only
    python benchmarks/jacobian_sharding.py --platform tpu   # on a TPU v5e host, < 4 minutes

TPU (``--platform tpu``, or ``--tpu``; the default when jax's default backend is a TPU). Run
on a host with one real TPU v5e chip, in one process, with ``jax_enable_x64`` off (nothing
here turns it on; default ``--dtype float32``): (a) the CPU default workload (6x6, 4
channels, depth 1, 64 samples per device; ``lax`` and ``gather`` at chunk 4) compiled, run
and timed on the chip (D = 1) in both forms (median of 20 calls after a warm-up); (b) the
same programs compiled, not run, for the compile-only TPU v5e slices ``--tpu-topologies``
(default v5e:2x2 v5e:2x4 v5e:4x4 v5e:8x8 v5e:16x16, 4 to 256 chips:
``jax.experimental.topologies.get_topology_desc(name, "tpu")`` through
``make_precompile_mesh(topology=name, platform="tpu")``, a concrete ``Mesh`` over its
devices, inputs as sharded ``ShapeDtypeStruct``s, ``jit(...).lower(...).compile()``): the
collectives of the TPU HLO (all-gathers, all-reduces, ...) and ``memory_analysis()`` per
chip (XLA:TPU fills in ``peak_memory_in_bytes``; the tables show it). These programs are
slow to compile for TPU (on v5e, one at a time: 10, 30 and 52 s for ``lax`` at chunks 4, 16
and 64), so they compile on ``--compile-threads`` threads (default 4), cheapest first; none starts after
``--deadline-min`` (2) minutes, none is waited for after ``--limit-min`` (2.9): the rest are
recorded as skipped, so the run ends within about 3 minutes. Chunks 16 and 64 are further
runs (``--chunk-sizes 16``, ``--chunk-sizes 64 --convs lax``...): each run's measured rows
are merged into the ``"tpu"`` entry of the JSON file, replacing the same cases and keeping
the others; the rest of the file (the CPU rows) is kept, and a CPU run keeps an existing
``"tpu"`` entry. Where no TPU support can be loaded (no libtpu: no compile-only topology) it
prints one line and exits with status 2.

Writes a table to stdout, JSON (``--json``, default benchmarks/results/jacobian_sharding.json;
``--quick``: jacobian_sharding_quick.json) and a plot (``--plot``, same name, .png; not in
TPU mode).
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

from _common import (cpu_devices_env, load_average, platform_kind, results_file, script_parser,  # noqa: E402
                     stamp, write_json as _write_file)
from _sharding_cases import (HEADER, MODES, abstract_inputs, chunk_sizes_of, compile_jacobian,  # noqa: E402,F401
                             compiled_stats, format_row, hardware, jacobian_difference, lower_jacobian,
                             make_network, measure, mesh_cases, network_of, random_samples, run_device_count,
                             run_topologies, time_compiled)
from _sharding_hlo import COLLECTIVES, hlo_collectives  # noqa: E402,F401
from _sharding_report import markdown, markdown_tpu, plot, summary  # noqa: E402,F401
from _sharding_tpu import (TPU_TOPOLOGIES, compile_cases, merge_tpu, run_tpu, time_cases,  # noqa: E402,F401
                           tpu_cases, tpu_unavailable, write_json)



def parse_args(argv=None):
    p = script_parser(__doc__)
    p.add_argument("--quick", action="store_true", help="D = 1 8, 2 channels, depth 0, 8 samples/device, chunk 4")
    p.add_argument("--platform", choices=("auto", "cpu", "gpu", "tpu"), default="auto",
                   help="auto: gpu or tpu when jax's default backend is one, else cpu")
    p.add_argument("--tpu", action="store_true", help="the same as --platform tpu")
    p.add_argument("--devices", type=int, nargs="*", default=None, help="device counts (default 1 2 4 8)")
    p.add_argument("--samples-per-device", type=int, default=None, help="default 64 (CPU), 256 (GPU)")
    p.add_argument("--chunk-sizes", type=int, nargs="+", default=None, help="default 4 16 64")
    p.add_argument("--L", type=int, default=6, help="L x L square lattice (default 6)")
    p.add_argument("--channels", type=int, default=None, help="default 4 (CPU), the 6x6 default 16 (GPU)")
    p.add_argument("--depth", type=int, default=None, help="default 1 (CPU), the 6x6 default 4 (GPU)")
    p.add_argument("--dtype", choices=("float32", "float64"), default=None,
                   help="default float64 (CPU, GPU), float32 (TPU: jax_enable_x64 stays off)")
    p.add_argument("--no-merge", action="store_true",
                   help="all group images (576 on 6x6), not merged over translations")
    p.add_argument("--convs", nargs="+", choices=("lax", "gather"), default=None, help="default lax gather")
    p.add_argument("--gather-chunk-sizes", type=int, nargs="+", default=[4],
                   help="chunk sizes for conv=gather (default 4: it has no all-gathers to show)")
    p.add_argument("--repeat", type=int, default=None,
                   help="timed calls after the warm-up call (median; default 3, TPU 20)")
    p.add_argument("--compile-threads", type=int, default=None,
                   help="--platform tpu: programs compiled at once (default: CPU cores - 1, at most 4)")
    p.add_argument("--limit-min", type=float, default=None,
                   help="--platform tpu: stop waiting for compilations after this many minutes (default 2.9), "
                        "time the chip's programs, write the result and exit")
    p.add_argument("--hlo-dir", default=None, help="--platform tpu: also write each compiled program's HLO here")
    p.add_argument("--long", type=float, default=5.0,
                   help="a warm-up slower than this (s) is timed once more only; 5x slower: not again")
    p.add_argument("--deadline-min", type=float, default=None, help="skip the cases left after this many minutes")
    p.add_argument("--gpu-topologies", nargs="*", default=None,
                   help="compile-only CUDA topologies (default 1x1x8 1x2x4 1x8x8 on CPU; none with --quick)")
    p.add_argument("--gpu-convs", nargs="+", choices=("lax", "gather"), default=["lax", "gather"])
    p.add_argument("--cuda-plugin-path", default=os.environ.get("QUANTAX_CUDA_PLUGIN_PATH"),
                   help="folder holding jax-cuda12-plugin/-pjrt and nvidia-cuda-nvcc-cu12 (added to PYTHONPATH)")
    p.add_argument("--target-config", default=None, help="GpuTargetConfigProto text file (default: mesh.py's H100)")
    p.add_argument("--tpu-topologies", nargs="*", default=None,
                   help="compile-only TPU slices for --platform tpu (default " + " ".join(TPU_TOPOLOGIES) + ")")
    p.add_argument("--json", default=None, metavar="PATH",
                   help="result file (default benchmarks/results/jacobian_sharding.json); --platform tpu "
                        "writes its result under the key 'tpu' of this file and keeps the rest")
    p.add_argument("--plot", default=None)
    p.add_argument("--markdown", metavar="JSON", default=None,
                   help="print the tables of a result file as markdown (for docs/benchmarks.md) and exit")
    p.add_argument("--_worker", choices=("cpu", "topology"), default=None, help=SUPPRESS)
    p.add_argument("--_spec", default=None, help=SUPPRESS)
    args = p.parse_args(argv)
    if args.tpu:
        if args.platform not in ("auto", "tpu"):
            p.error(f"--tpu contradicts --platform {args.platform}")
        args.platform = "tpu"
    return args


def _detect_platform() -> str:
    import jax

    return platform_kind(jax.default_backend())


def make_spec(args, platform: str) -> dict:
    gpu = platform == "gpu"
    if platform == "tpu":  # one chip (D = 1) with the CPU workload, then compile-only TPU slices
        if args.quick:
            defaults = dict(devices=[1], per_device=8, chunk_sizes=[4], channels=2, depth=0, convs=["lax"],
                            tpu_topologies=list(TPU_TOPOLOGIES[:1]))
        else:
            # chunk 4 only: the lax programs took 10, 30, 52 s to compile for a v5e chip at
            # chunks 4, 16, 64, so larger chunks are further runs (--chunk-sizes 16 ...)
            defaults = dict(devices=[1], per_device=64, chunk_sizes=[4], channels=4, depth=1,
                            convs=["lax", "gather"], tpu_topologies=list(TPU_TOPOLOGIES))
        defaults["topologies"] = []  # no CUDA topologies here
    elif args.quick:
        defaults = dict(devices=[1, 8], per_device=8, chunk_sizes=[4], channels=2, depth=0, convs=["lax"],
                        topologies=[])
    else:
        defaults = dict(devices=[1, 2, 4, 8], per_device=256 if gpu else 64, chunk_sizes=[4, 16, 64],
                        channels=None if gpu else 4, depth=None if gpu else 1, convs=["lax", "gather"],
                        topologies=[] if gpu else ["1x1x8", "1x2x4", "1x8x8"])
    pick = lambda v, d: d if v is None else v  # noqa: E731
    return dict(
        devices=pick(args.devices, defaults["devices"]),
        per_device=pick(args.samples_per_device, defaults["per_device"]),
        chunk_sizes=pick(args.chunk_sizes, defaults["chunk_sizes"]), L=args.L,
        channels=pick(args.channels, defaults["channels"]), depth=pick(args.depth, defaults["depth"]),
        dtype=args.dtype or ("float32" if platform == "tpu" else "float64"), merge=not args.no_merge,
        convs=pick(args.convs, defaults["convs"]), repeat=3 if args.repeat is None else args.repeat,
        long=args.long, topologies=pick(args.gpu_topologies, defaults["topologies"]), gpu_convs=args.gpu_convs,
        target_config=args.target_config, gather_chunk_sizes=args.gather_chunk_sizes,
        plugin_path=args.cuda_plugin_path,
        tpu_topologies=pick(args.tpu_topologies, defaults.get("tpu_topologies", [])),
    )


def _subprocess(kind: str, spec: dict, env: dict, capture: bool):
    """Run this script as a worker; returns (rows, error text or None)."""
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as f:
        out = f.name
    spec = dict(spec, out=out)
    cmd = [sys.executable, os.path.abspath(__file__), "--_worker", kind, "--_spec", json.dumps(spec)]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE if capture else None,
                          stderr=subprocess.PIPE if capture else None, text=True)
    try:
        with open(out) as f:
            rows = json.load(f)
    except (OSError, ValueError):
        rows = []
    finally:
        if os.path.exists(out):
            os.unlink(out)
    if capture and proc.stdout:
        print(proc.stdout, end="", flush=True)
    if proc.returncode != 0:
        tail = (proc.stderr or "")[-2000:] if capture else f"exit status {proc.returncode}"
        return rows, tail
    return rows, None


def _topology_env(plugin_path: str | None, dtype: str) -> dict:
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"  # compile-only devices; the plugin must not look for a GPU
    if plugin_path:
        env["PYTHONPATH"] = os.pathsep.join([plugin_path] + [p for p in [env.get("PYTHONPATH")] if p])
        nvcc_bin = os.path.join(plugin_path, "nvidia", "cuda_nvcc", "bin")
        if os.path.isdir(nvcc_bin):  # ptxas for the PTX -> SASS step
            env["PATH"] = nvcc_bin + os.pathsep + env.get("PATH", "")
    if dtype == "float64":
        # XLA 0.10.2 fails to tile the float64 readout matmul as a Triton GEMM when no GPU can
        # be autotuned ("Couldn't find output tile sizes that satisfy hlo"); cuBLAS it is.
        # This changes which GEMM kernels run, not the partitioning or the collectives.
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_gpu_enable_triton_gemm=false").strip()
    return env


def worker(kind: str, spec: dict):
    import jax

    jax.config.update("jax_enable_x64", True)
    if kind == "cpu":
        deadline = spec.get("deadline")
        rows = run_device_count(spec, jax.devices(), deadline)
    else:
        rows = run_topologies(dict(spec, convs=spec["gpu_convs"]))
    _write_file(spec["out"], rows, indent=None)


def main(argv=None):
    args = parse_args(argv)
    if args._worker:
        return worker(args._worker, json.loads(args._spec))
    if args.markdown:
        with open(args.markdown) as f:
            print(markdown(json.load(f)))
        return None
    t_start = time.time()
    if args.platform in ("auto", "gpu") and (args.dtype or "float64") == "float64" and "jax" not in sys.modules:
        # see _topology_env: float64 GEMMs go to cuBLAS, not Triton (no effect on CPU)
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_gpu_enable_triton_gemm=false").strip()
    platform = _detect_platform() if args.platform == "auto" else args.platform
    spec = make_spec(args, platform)
    deadline_min = args.deadline_min if args.deadline_min is not None else (9.0 if platform == "gpu" else None)
    deadline = None if deadline_min is None else t_start + 60 * deadline_min
    stem = "jacobian_sharding_quick" if args.quick else "jacobian_sharding"
    json_path = args.json or results_file(stem + ".json")
    if platform == "tpu":  # tpu_unavailable: this module's (tests stand in for it)
        return run_tpu(args, spec, json_path, t_start, argv, unavailable=tpu_unavailable)
    plot_path = args.plot or os.path.splitext(json_path)[0] + ".png"

    load_start = load_average()
    print(f"# load average {load_start[0]:.1f} (1 min) on {os.cpu_count()} cores")
    print(f"# {platform}: lattice {spec['L']}x{spec['L']}, channels {spec['channels'] or 'default'}, depth "
          f"{spec['depth'] if spec['depth'] is not None else 'default'}, {spec['dtype']}, "
          f"{'merged' if spec['merge'] else 'all'} images, {spec['per_device']} samples/device, chunks "
          f"{spec['chunk_sizes']}, devices {spec['devices']}")
    print(HEADER, flush=True)
    rows, errors = [], []
    if platform == "gpu":
        import jax

        jax.config.update("jax_enable_x64", True)
        devices = jax.devices()
        for D in sorted(spec["devices"], reverse=True):  # the largest first, in case the deadline hits
            if D > len(devices):
                errors.append(f"D={D}: only {len(devices)} devices")
                continue
            rows += run_device_count(spec, devices[:D], deadline)
    else:
        for D in spec["devices"]:
            new, err = _subprocess("cpu", dict(spec, deadline=deadline), cpu_devices_env(D), capture=False)
            rows += new
            if err:
                errors.append(f"cpu D={D}: {err}")
    topo_rows = []
    if spec["topologies"]:
        print(f"\n# compile-only CUDA topologies ({', '.join(spec['topologies'])}), conv {spec['gpu_convs']}: "
              "counts only, nothing runs")
        print(HEADER, flush=True)
        env = _topology_env(args.cuda_plugin_path, spec["dtype"])
        topo_rows, err = _subprocess("topology", spec, env, capture=True)
        if err:
            errors.append(f"gpu topologies: {err}")
    print("\n# summary (shard_batch False vs True)")
    for line in summary(rows):
        print(line)
    for e in errors:
        print(f"# error: {e}")

    result = dict(benchmark="jacobian_sharding", quick=args.quick, platform=platform, spec=spec,
                  hardware=dict(hardware(), load_average_start=load_start), rows=rows,
                  topology_rows=topo_rows, errors=errors,
                  wall_s=round(time.time() - t_start, 1))
    try:
        import jax

        result["jax"] = jax.__version__
    except ImportError:
        pass
    write_json(json_path, stamp(result, __file__, argv))
    where = (f"{len(rows) and rows[0].get('device_kind')} devices" if platform == "gpu"
             else f"simulated CPU devices on {hardware().get('cpu_model') or 'CPU'}, {os.cpu_count()} cores")
    title = (f"per-sample Jacobian, symmetrized conv net {spec['L']}x{spec['L']}, {spec['dtype']}, "
             f"{spec['per_device']} samples/device\n{where}")
    plot(rows, plot_path, title)
    print(f"\nwrote {json_path} and {plot_path} ({result['wall_s']:.0f} s)")
    return result


if __name__ == "__main__":
    main()
