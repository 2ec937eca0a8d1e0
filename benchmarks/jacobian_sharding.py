"""GSPMD vs shard_map: collectives, time and memory of the chunked per-sample Jacobian.

What is measured. The per-sample Jacobian ``O = d log psi / d theta`` of the symmetrized
periodic-conv network ``make_conv_nqs(Square(L), full_symmetry(Square(L)))``, computed by
``quantax_lite.optimizer.log_derivatives(log_psi, params, samples, chunk_size=c)`` inside one ``jax.jit``
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

import argparse
import json
import math
import os
import platform as _platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
COLLECTIVES = ("all-gather", "all-reduce", "all-to-all", "collective-permute", "reduce-scatter")
MODES = (False, True)  # shard_batch
# compile-only TPU v5e slices (4 to 256 chips) accepted by get_topology_desc(name, "tpu")
TPU_TOPOLOGIES = ("v5e:2x2", "v5e:2x4", "v5e:4x4", "v5e:8x8", "v5e:16x16")

# --------------------------------------------------------------------------- #
# reading collectives out of compiled HLO text                                 #
# --------------------------------------------------------------------------- #

_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
          "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_ARRAY = re.compile(r"\b(pred|[suf]\d+|bf16|f8e\w+|c64|c128)\[([0-9,]*)\]")
_OP = re.compile(r"=\s*(?P<shape>.+?)\s(?P<op>" + "|".join(COLLECTIVES) + r")(?P<start>-start)?\(")
_HEADER = re.compile(r"^(?:ENTRY\s+)?%?(?P<name>[^\s(]+)\s.*\{\s*$")
_CALLS = re.compile(r"\b(body|condition|calls|to_apply|true_computation|false_computation)=%([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_TRIP = re.compile(r'known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"(\d+)"')


def _arrays(shape: str) -> list[tuple[str, tuple[int, ...]]]:
    return [(t, tuple(int(d) for d in dims.split(",") if d)) for t, dims in _ARRAY.findall(shape)]


def _nbytes(dtype: str, dims: tuple[int, ...]) -> int:
    return _BYTES.get(dtype, 1) * math.prod(dims)


def _result_arrays(op: str, start: bool, shape: str):
    """The arrays a collective produces. ``all-gather-start`` / ``collective-permute-start``
    return ``(operands, results[, scalar contexts])``: keep the second half of the arrays."""
    arrays = _arrays(shape)
    if start and op in ("all-gather", "collective-permute"):
        arrays = [a for a in arrays if a[1]]  # drop u32[] / s32[] context scalars
        arrays = arrays[len(arrays) // 2:]
    return arrays


def _computations(text: str):
    """Split HLO text into computations: ({name: [lines]}, entry name)."""
    comps, entry, name = {}, None, None
    for line in text.splitlines():
        if line and not line[0].isspace():
            m = _HEADER.match(line)
            if m:
                name = m.group("name")
                comps[name] = []
                if line.startswith("ENTRY"):
                    entry = name
                continue
            if line.startswith("}"):
                name = None
                continue
        if name is not None:
            comps[name].append(line)
    return comps, entry


def _multipliers(comps: dict, entry: str | None) -> dict:
    """How many times each computation runs per call of the entry computation (while-loop
    bodies multiply by their known trip count; None where a trip count is unknown)."""
    if entry is None:
        return {name: 1 for name in comps}
    mult = {entry: 1}
    stack = [entry]
    while stack:
        parent = stack.pop()
        for line in comps.get(parent, ()):
            callees = [(kind, c) for kind, c in _CALLS.findall(line)]
            for group in _BRANCHES.findall(line):
                callees += [("branch", c.strip().lstrip("%")) for c in group.split(",") if c.strip()]
            trip = _TRIP.search(line)
            for kind, child in callees:
                if child not in comps:
                    continue
                m = mult[parent]
                if kind == "body":
                    m = None if (m is None or trip is None) else m * int(trip.group(1))
                if child not in mult:
                    mult[child] = m
                    stack.append(child)
    return mult


def hlo_collectives(text: str) -> dict:
    """Collectives of a compiled program's HLO text.

    Returns ``{kind: {"count", "arrays", "bytes", "count_per_call", "bytes_per_call"}}`` for
    each kind in ``COLLECTIVES``: ``count`` instructions (synchronous or ``-start``),
    ``arrays`` they carry (a combined instruction carries several), ``bytes`` of their
    results on one device, and the same per call of the program (instructions in a loop
    body counted once per iteration; None if a loop's trip count is unknown).
    """
    comps, entry = _computations(text)
    mult = _multipliers(comps, entry)
    out = {k: dict(count=0, arrays=0, bytes=0, count_per_call=0, bytes_per_call=0) for k in COLLECTIVES}
    for name, lines in comps.items():
        m = mult.get(name, 1)
        for line in lines:
            hit = _OP.search(line)
            if not hit:
                continue
            op, start = hit.group("op"), bool(hit.group("start"))
            arrays = _result_arrays(op, start, hit.group("shape"))
            nbytes = sum(_nbytes(t, d) for t, d in arrays)
            row = out[op]
            row["count"] += 1
            row["arrays"] += len(arrays)
            row["bytes"] += nbytes
            if m is None or row["count_per_call"] is None:
                row["count_per_call"] = row["bytes_per_call"] = None
            else:
                row["count_per_call"] += m
                row["bytes_per_call"] += m * nbytes
    return out


# --------------------------------------------------------------------------- #
# the network and one measurement                                              #
# --------------------------------------------------------------------------- #


def make_network(L: int, channels: int | None, depth: int | None, dtype: str, merge: bool):
    """``make_conv_nqs(Square(L), full_symmetry(Square(L)), ...)`` and its lattice; ``merge``
    False: built in ``tuning.override(merge_translations=False)`` (every group image).

    The convolution form is not part of the network: it is chosen when a program that
    evaluates it is traced (``conv`` of :func:`compile_jacobian`)."""
    import jax.numpy as jnp

    from quantax_lite import Square, full_symmetry, make_conv_nqs
    from quantax_lite.utils import tuning

    lattice = Square(L)
    with tuning.override(merge_translations=bool(merge)):
        model = make_conv_nqs(lattice, full_symmetry(lattice), channels=channels, depth=depth,
                              dtype=getattr(jnp, dtype))
    return model, lattice


def network_of(spec: dict):
    """:func:`make_network` with the sizes of a run's ``spec``."""
    return make_network(spec["L"], spec["channels"], spec["depth"], spec["dtype"], spec["merge"])


def random_samples(n: int, n_sites: int, seed: int = 0):
    """(n, n_sites) int8 +1/-1 configurations with total S^z = 0 (n_sites even)."""
    import jax

    from quantax_lite import random_states

    return jax.device_get(random_states(jax.random.key(seed), n_sites, n, total_sz=0))


def lower_jacobian(log_psi, params, samples, mesh, chunk_size, shard_batch, conv, lowering_platforms=None):
    """The lowered ``jit(jacobian(log_psi, ., ., chunk_size=chunk_size, mesh=mesh))``, traced
    in ``tuning.override(conv_form=conv, jacobian_shard_batch=shard_batch)``, for the given
    (concrete or ``ShapeDtypeStruct``) params and samples.

    ``lowering_platforms`` (e.g. ``("tpu",)``): lower for that platform instead of the
    mesh's own; needed when ``mesh`` is an ``AbstractMesh`` (no devices to take it from)."""
    import jax

    from quantax_lite import jacobian
    from quantax_lite.utils import tuning

    with tuning.override(conv_form=conv, jacobian_shard_batch=bool(shard_batch)):
        # a fresh function per case: jit caches traces by function identity
        fn = jax.jit(lambda p, s: jacobian(log_psi, p, s, chunk_size=chunk_size, mesh=mesh))
        if lowering_platforms:
            return fn.trace(params, samples).lower(lowering_platforms=tuple(lowering_platforms))
        return fn.lower(params, samples)


def compile_jacobian(log_psi, params, samples, mesh, chunk_size, shard_batch, conv, lowering_platforms=None,
                     device_assignment=None):
    """:func:`lower_jacobian`, compiled (onto ``device_assignment`` if given: e.g. one CPU
    device repeated, for an ``AbstractMesh`` lowering); (compiled, seconds)."""
    t0 = time.perf_counter()
    lowered = lower_jacobian(log_psi, params, samples, mesh, chunk_size, shard_batch, conv, lowering_platforms)
    compiled = lowered.compile() if device_assignment is None else lowered.compile(
        device_assignment=tuple(device_assignment))
    return compiled, time.perf_counter() - t0


def compiled_stats(compiled) -> dict:
    """Collectives and memory of a compiled program, per device.

    ``peak_bytes`` = arguments + outputs + scratch (temp) - aliased: the memory the program
    needs while it runs (XLA's own ``peak_memory_in_bytes``, kept as ``xla_peak_bytes``, is
    not filled in by every backend: XLA:CPU reports almost nothing there).
    """
    stats = dict(collectives=hlo_collectives(compiled.as_text()))
    try:
        mem = compiled.memory_analysis()
        bound = mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes - mem.alias_size_in_bytes
        stats.update(peak_bytes=int(bound), temp_bytes=int(mem.temp_size_in_bytes),
                     xla_peak_bytes=int(getattr(mem, "peak_memory_in_bytes", 0) or 0),
                     argument_bytes=int(mem.argument_size_in_bytes), output_bytes=int(mem.output_size_in_bytes),
                     alias_bytes=int(mem.alias_size_in_bytes),
                     code_bytes=int(getattr(mem, "generated_code_size_in_bytes", 0) or 0))
    except Exception as err:  # some backends give no memory analysis
        stats.update(peak_bytes=None, temp_bytes=None, memory_note=repr(err))
    return stats


def measure(log_psi, params, samples, mesh, chunk_size, shard_batch, repeat=3, long=5.0, *, conv):
    """Compile, count collectives, run and time one Jacobian case.

    Args:
      log_psi, params: the network.
      samples: (N, n_sites) configurations placed sample-sharded on ``mesh``.
      mesh: the device mesh (its size is the device count D).
      chunk_size: passed to ``quantax_lite.optimizer.log_derivatives``.
      shard_batch, conv: the speed choices ``jacobian_shard_batch`` and ``conv_form`` the
        program is traced with (:func:`compile_jacobian`).
      repeat: timed calls after one warm-up call (the median is reported); a warm-up that
        takes longer than ``long`` seconds is followed by one timed call only, and one longer
        than ``5 * long`` is itself the measurement (``runs=0``: one-time costs are negligible
        next to it).

    Returns ``(row, O)``: a dict of results (collectives, ``peak_bytes``, ``seconds`` per call
    (wall), ``cpu_seconds`` (CPU time of this process: the work of all simulated CPU devices
    together; not meaningful on GPUs), ``ms_per_sample``, ``compile_s``...) and the Jacobian as
    a numpy array.
    """
    import numpy as np

    compiled, t_compile = compile_jacobian(log_psi, params, samples, mesh, chunk_size, shard_batch, conv)
    row = dict(devices=int(np.prod(mesh.devices.shape)), chunk_size=chunk_size, shard_batch=bool(shard_batch),
               n_samples=int(samples.shape[0]), compile_s=round(t_compile, 2))
    row.update(compiled_stats(compiled))
    timing, O = time_compiled(compiled, params, samples, repeat, long)
    row.update(timing)
    return row, O


def time_compiled(compiled, params, samples, repeat=3, long=5.0):
    """Run a compiled Jacobian: one warm-up call, then the median of ``repeat`` calls (see
    :func:`measure` for ``long``); (timing dict, the Jacobian as a numpy array)."""
    import jax
    import numpy as np

    c0, t0 = time.process_time(), time.perf_counter()
    O = jax.block_until_ready(compiled(params, samples))
    times = [(time.perf_counter() - t0, time.process_time() - c0)]
    runs = 0 if times[0][0] > 5 * long else 1 if times[0][0] > long else max(1, repeat)
    if runs:
        times = []
    for _ in range(runs):
        c0, t0 = time.process_time(), time.perf_counter()
        jax.block_until_ready(compiled(params, samples))
        times.append((time.perf_counter() - t0, time.process_time() - c0))
    sec = statistics.median(t for t, _ in times)
    cpu = statistics.median(c for _, c in times)
    n = int(samples.shape[0])
    return dict(seconds=sec, cpu_seconds=cpu, runs=runs, ms_per_sample=1e3 * sec / n,
                cpu_ms_per_sample=1e3 * cpu / n), np.asarray(O)


def jacobian_difference(a, b) -> float:
    """max |a - b| / max |a|."""
    import numpy as np

    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-300))


# --------------------------------------------------------------------------- #
# runs: one device count (CPU worker or real GPUs), compile-only topologies     #
# --------------------------------------------------------------------------- #


def run_device_count(spec: dict, devices, deadline: float | None) -> list[dict]:
    """Every (conv, chunk, mode) case on a mesh over ``devices``; prints rows as they finish."""
    import jax

    from quantax_lite import count_params
    from quantax_lite.utils import make_mesh, replicate, shard_batch_array

    mesh = make_mesh(devices)
    D = len(devices)
    rows = []
    for conv in spec["convs"]:
        model, lattice = network_of(spec)
        s = random_samples(D * spec["per_device"], lattice.n_sites, seed=1)
        params = model.init(jax.random.key(0), s[:1])
        samples, params = shard_batch_array(s, mesh), replicate(params, mesh)
        common = dict(conv=conv, lattice=lattice.name, n_params=count_params(params), n_images=_n_images(model),
                      platform=jax.default_backend(), device_kind=devices[0].device_kind)
        for c in chunk_sizes_of(spec, conv):
            pair = {}
            for sb in MODES:
                if deadline is not None and time.time() > deadline:
                    rows.append(dict(common, devices=D, chunk_size=c, shard_batch=sb, skipped="deadline"))
                    print(format_row(rows[-1]), flush=True)
                    continue
                try:
                    row, O = measure(model.apply, params, samples, mesh, c, sb, spec["repeat"], spec["long"],
                                     conv=conv)
                except Exception as err:  # record it, go on with the other cases
                    rows.append(dict(common, devices=D, chunk_size=c, shard_batch=sb,
                                     error=f"{type(err).__name__}: {str(err).splitlines()[0][:400]}"))
                    print(format_row(rows[-1]), flush=True)
                    continue
                row.update(common)
                pair[sb] = (row, O)
                rows.append(row)
            if len(pair) == 2:
                diff = jacobian_difference(pair[True][1], pair[False][1])
                for sb in MODES:
                    pair[sb][0]["rel_diff_modes"] = diff
                    pair[sb][0]["speedup_true_over_false"] = pair[False][0]["seconds"] / pair[True][0]["seconds"]
            for sb in MODES:
                if sb in pair:
                    print(format_row(pair[sb][0]), flush=True)
    return rows


def chunk_sizes_of(spec: dict, conv: str) -> list[int]:
    """The chunk sizes measured for ``conv`` (``gather``: ``spec["gather_chunk_sizes"]``)."""
    if conv == "gather" and spec.get("gather_chunk_sizes"):
        return spec["gather_chunk_sizes"]
    return spec["chunk_sizes"]


def _n_images(model) -> int:
    return len(getattr(model, "perms", ())) or 1


def abstract_inputs(model, lattice, mesh, per_device: int):
    """(params, samples) as ``ShapeDtypeStruct``s placed on ``mesh`` (concrete or abstract):
    parameters replicated, ``per_device`` int8 samples per device split along the batch;
    and the parameter shapes."""
    import jax
    import jax.numpy as jnp

    from quantax_lite.utils import batch_sharding, mesh_size, replicated_sharding

    shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, lattice.n_sites), jnp.int8))
    params = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=replicated_sharding(mesh)),
                          shapes)
    samples = jax.ShapeDtypeStruct((mesh_size(mesh) * per_device, lattice.n_sites), jnp.int8,
                                   sharding=batch_sharding(mesh, 2))
    return params, samples, shapes


def run_topologies(spec: dict) -> list[dict]:
    """Compile (not run) every case for compile-only CUDA topologies."""
    from quantax_lite.utils import make_precompile_mesh

    target = None
    if spec.get("target_config"):
        with open(spec["target_config"]) as f:
            target = f.read()
    rows = []
    for topo in spec["topologies"]:
        try:
            mesh = make_precompile_mesh(topology=topo, platform="cuda", target_config=target)
        except Exception as err:
            hint = "" if spec.get("plugin_path") else " (or pass --cuda-plugin-path DIR)"
            rows.append(dict(topology=topo, error=f"{type(err).__name__}: {err}{hint}"))
            print(f"{topo}: {rows[-1]['error']}", flush=True)
            continue
        D = mesh.devices.size
        kind = mesh.devices.flat[0].device_kind
        for row, (apply, params, samples, c, sb, conv) in mesh_cases(spec, topo, mesh, D, kind):
            try:
                compiled, t = compile_jacobian(apply, params, samples, mesh, c, sb, conv)
                row.update(compiled_stats(compiled), compile_s=round(t, 2))
            except Exception as err:
                row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:400]}"
            rows.append(row)
            print(format_row(row), flush=True)
    return rows


def mesh_cases(spec: dict, topo: str, mesh, devices: int, kind: str):
    """Every (row, compile arguments) of one mesh: each convolution form of ``spec``, its chunk
    sizes, both modes (GSPMD, shard_map); the row holds what identifies the case.
    Compile arguments: ``(apply, params, samples, chunk_size, shard_batch, conv)``."""
    from quantax_lite import count_params

    for conv in spec["convs"]:
        model, lattice = network_of(spec)
        params, samples, shapes = abstract_inputs(model, lattice, mesh, spec["per_device"])
        for c in chunk_sizes_of(spec, conv):
            for sb in MODES:
                row = dict(topology=topo, devices=devices, device_kind=kind, conv=conv, lattice=lattice.name,
                           n_params=count_params(shapes), n_images=_n_images(model),
                           n_samples=samples.shape[0], chunk_size=c, shard_batch=sb)
                yield row, (model.apply, params, samples, c, sb, conv)


def tpu_cases(spec: dict, chips, mesh_of=None, lowering_platforms=None, device_assignment_of=None) -> list:
    """Every case of ``--platform tpu``, as ``(row, build, inputs)``.

    ``build()`` lowers and compiles the program: ``(compiled, seconds)``. The cases on
    ``chips`` (a mesh over the first D of them for every D of ``spec["devices"]``) carry
    their placed ``inputs`` (params, samples), to be run; those of the compile-only slices
    ``spec["tpu_topologies"]`` (``make_precompile_mesh(topology=name, platform="tpu")``;
    ``ShapeDtypeStruct`` inputs) carry None. A slice that cannot be created gives one error
    row with ``build`` None. ``mesh_of(name)``, ``lowering_platforms`` and
    ``device_assignment_of(n_devices)`` stand in for the TPU in tests (an ``AbstractMesh``
    lowered for ``("tpu",)`` and compiled onto one CPU device repeated).
    """
    import functools

    import jax

    from quantax_lite import count_params
    from quantax_lite.utils import make_mesh, make_precompile_mesh, mesh_size, replicate, shard_batch_array

    cases = []
    for D in spec["devices"]:
        if D > len(chips):
            continue
        mesh = make_mesh(chips[:D])
        for conv in spec["convs"]:
            model, lattice = network_of(spec)
            s = random_samples(D * spec["per_device"], lattice.n_sites, seed=1)
            params = model.init(jax.random.key(0), s[:1])
            samples, params = shard_batch_array(s, mesh), replicate(params, mesh)
            for c in chunk_sizes_of(spec, conv):
                for sb in MODES:
                    row = dict(devices=D, chunk_size=c, shard_batch=sb, n_samples=int(samples.shape[0]), conv=conv,
                               lattice=lattice.name, n_params=count_params(params), n_images=_n_images(model),
                               platform=chips[0].platform, device_kind=chips[0].device_kind)
                    build = functools.partial(compile_jacobian, model.apply, params, samples, mesh, c, sb, conv)
                    cases.append((row, build, (params, samples)))
    for topo in spec["tpu_topologies"]:
        try:
            mesh = mesh_of(topo) if mesh_of is not None else make_precompile_mesh(topology=topo, platform="tpu")
        except Exception as err:
            cases.append((dict(topology=topo, error=f"{type(err).__name__}: {str(err).splitlines()[0][:400]}"),
                          None, None))
            continue
        D = mesh_size(mesh)
        if isinstance(mesh, jax.sharding.AbstractMesh):
            kind = f"abstract mesh, lowered for {','.join(lowering_platforms or ())}"
        else:
            kind = mesh.devices.flat[0].device_kind
        assignment = None if device_assignment_of is None else device_assignment_of(D)
        for row, (apply, params, samples, c, sb, conv) in mesh_cases(spec, topo, mesh, D, kind):
            build = functools.partial(compile_jacobian, apply, params, samples, mesh, c, sb, conv,
                                      lowering_platforms, assignment)
            cases.append((row, build, None))
    # the cheapest and most telling first, in case the deadline comes: lax before gather,
    # small chunks first, the chip before the slices, small slices first
    order = {id(case): i for i, case in enumerate(cases)}
    return sorted(cases, key=lambda case: (case[1] is not None, case[0].get("conv") != "lax",
                                           case[0].get("chunk_size") or 0, order[id(case)]))


def compile_cases(cases: list, threads: int, deadline: float | None = None, after_each=None,
                  hlo_dir: str | None = None, limit: float | None = None) -> list:
    """Compile ``cases`` (from :func:`tpu_cases`) on ``threads`` threads at once (XLA
    compiles outside the GIL; tracing is thread-safe and ``tuning.override`` is per thread),
    in order; a case not started by ``deadline`` is recorded as skipped. Fills every row
    with the collectives and memory (:func:`compiled_stats`) and ``compile_s`` (lowering +
    compiling, wall, while the other threads compile too) or ``error`` / ``skipped``, prints
    it, calls ``after_each()`` (e.g. to save the rows so far; rows change in this thread
    only), and returns ``(row, compiled, inputs)`` for the cases with inputs that compiled.
    ``hlo_dir``: write every compiled program's HLO text there too. ``limit``
    (``time.time()``): stop waiting then; the cases still compiling are recorded as skipped
    and their threads left running (the caller ends the process with ``os._exit``)."""
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    def job(case):  # returns the row's new entries; the row itself is updated by the caller
        row, build, inputs = case
        if deadline is not None and time.time() > deadline:
            return case, dict(skipped="deadline"), None
        try:
            compiled, t = build()
            new = dict(compiled_stats(compiled), compile_s=round(t, 2))
            if hlo_dir:
                name = (f"{row.get('topology') or row.get('platform', 'chip')}_D{row['devices']}_{row['conv']}"
                        f"_c{row['chunk_size']}_{'T' if row['shard_batch'] else 'F'}.hlo.txt")
                with open(os.path.join(hlo_dir, re.sub(r"[^\w.-]", "_", name)), "w") as f:
                    f.write(compiled.as_text())
        except Exception as err:  # record it, go on with the other cases
            return case, dict(error=f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:400]}"), None
        return case, new, (compiled if inputs is not None else None)

    done = []
    pool = ThreadPoolExecutor(max_workers=max(1, threads))
    futures = {pool.submit(job, case): case for case in cases if case[1] is not None}
    for case in cases:
        if case[1] is None:
            print(format_row(case[0]), flush=True)
    pending = set(futures)
    while pending:
        timeout = None if limit is None else max(0.0, limit - time.time())
        finished, pending = wait(pending, timeout=timeout, return_when=FIRST_COMPLETED)
        if not finished:  # the limit: leave the compilations still running behind
            for fut in pending:
                fut.cancel()
                row = futures[fut][0]
                row["skipped"] = "limit (still compiling)" if fut.running() else "deadline"
                print(format_row(row), flush=True)
            if after_each is not None:
                after_each()
            break
        for fut in finished:
            (row, _, inputs), new, compiled = fut.result()
            row.update(new)
            print(format_row(row), flush=True)
            if compiled is not None:
                done.append((row, compiled, inputs))
            if after_each is not None:
                after_each()
    pool.shutdown(wait=not pending, cancel_futures=True)
    order = {id(case[0]): i for i, case in enumerate(cases)}
    return sorted(done, key=lambda d: order[id(d[0])])


def time_cases(done: list, repeat: int, long: float):
    """Run and time the compiled chip cases one after the other (nothing else running), and
    compare the two forms' Jacobians of every case measured in both."""
    pairs = {}
    for row, compiled, (params, samples) in done:
        try:
            timing, O = time_compiled(compiled, params, samples, repeat, long)
        except Exception as err:
            row["error"] = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:400]}"
            continue
        row.update(timing)
        pairs.setdefault((row["conv"], row["devices"], row["chunk_size"]), {})[row["shard_batch"]] = (row, O)
    for pair in pairs.values():
        if len(pair) == 2:
            diff = jacobian_difference(pair[True][1], pair[False][1])
            for sb in MODES:
                pair[sb][0]["rel_diff_modes"] = diff
                pair[sb][0]["speedup_true_over_false"] = pair[False][0]["seconds"] / pair[True][0]["seconds"]
    for row, _, _ in done:
        print(format_row(row), flush=True)


# --------------------------------------------------------------------------- #
# output                                                                       #
# --------------------------------------------------------------------------- #

HEADER = (f"{'where':>8} {'conv':>6} {'D':>3} {'chunk':>5} {'shard_batch':>11} {'AG':>3} {'AG arr':>6} "
          f"{'AG MiB/call':>11} {'other':>5} {'mem MiB':>9} {'ms/sample':>10} {'cpu ms/s':>9} {'speedup':>7} "
          f"{'rel dJ':>8}")


def format_row(r: dict) -> str:
    where = r.get("topology", r.get("platform", "?"))
    head = f"{where:>8} {r.get('conv', '-'):>6} {r.get('devices', '-'):>3} {r.get('chunk_size', '-'):>5} "
    head += f"{str(r.get('shard_batch', '-')):>11} "
    if "error" in r or "skipped" in r:
        return head + (r.get("error") or f"skipped ({r['skipped']})")
    col = r["collectives"]
    ag = col["all-gather"]
    other = sum(v["count"] for k, v in col.items() if k != "all-gather")
    mib = "?" if ag["bytes_per_call"] is None else f"{ag['bytes_per_call'] / 2**20:.2f}"
    peak = "-" if r.get("peak_bytes") is None else f"{r['peak_bytes'] / 2**20:.2f}"
    ms = "-" if r.get("ms_per_sample") is None else f"{r['ms_per_sample']:.2f}"
    cpu = "-" if r.get("cpu_ms_per_sample") is None else f"{r['cpu_ms_per_sample']:.2f}"
    sp = "-" if r.get("speedup_true_over_false") is None else f"{r['speedup_true_over_false']:.2f}"
    dj = "-" if r.get("rel_diff_modes") is None else f"{r['rel_diff_modes']:.1e}"
    return head + f"{ag['count']:>3} {ag['arrays']:>6} {mib:>11} {other:>5} {peak:>9} {ms:>10} {cpu:>9} {sp:>7} {dj:>8}"


def plot(rows: list[dict], path: str, title: str):
    """Time per sample and all-gather count vs device count, one line per mode (and conv)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if "topology" not in r and "collectives" in r]
    chunks = sorted({r["chunk_size"] for r in rows})
    convs = sorted({r["conv"] for r in rows}, key=lambda c: c != "lax")
    if not rows:
        return
    fig, axes = plt.subplots(2, len(chunks), figsize=(max(6.0, 4.2 * len(chunks)), 6.6), squeeze=False, sharex=True)
    style = {False: dict(color="tab:red", marker="o"), True: dict(color="tab:blue", marker="s")}
    for j, c in enumerate(chunks):
        for conv in convs:
            for sb in MODES:
                sel = sorted((r for r in rows if r["chunk_size"] == c and r["conv"] == conv and r["shard_batch"] == sb),
                             key=lambda r: r["devices"])
                if not sel:
                    continue
                D = [r["devices"] for r in sel]
                kw = dict(style[sb], linestyle="-" if conv == "lax" else ":", alpha=1.0 if conv == "lax" else 0.6,
                          label=f"{conv}, shard_batch={sb}")
                axes[0, j].plot(D, [r["ms_per_sample"] for r in sel], **kw)
                axes[1, j].plot(D, [r["collectives"]["all-gather"]["count"] for r in sel], **kw)
        axes[0, j].set_title(f"chunk_size = {c}")
        axes[0, j].set_yscale("log")
        axes[1, j].set_xscale("log", base=2)
        axes[1, j].set_xticks(sorted({r["devices"] for r in rows}))
        axes[1, j].set_xticklabels(sorted({r["devices"] for r in rows}))
        axes[1, j].set_xlabel("devices")
    axes[0, 0].set_ylabel("ms per sample (wall)")
    axes[1, 0].set_ylabel("all-gathers in compiled HLO")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- #
# driver                                                                       #
# --------------------------------------------------------------------------- #


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    p.add_argument("--_worker", choices=("cpu", "topology"), default=None, help=argparse.SUPPRESS)
    p.add_argument("--_spec", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.tpu:
        if args.platform not in ("auto", "tpu"):
            p.error(f"--tpu contradicts --platform {args.platform}")
        args.platform = "tpu"
    return args


def _detect_platform() -> str:
    import jax

    backend = jax.default_backend()
    return "gpu" if backend in ("gpu", "cuda", "rocm") else "tpu" if backend == "tpu" else "cpu"


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


def _cpu_env(n: int) -> dict:
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={n}"])
    env["JAX_PLATFORMS"] = "cpu"
    return env


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
    with open(spec["out"], "w") as f:
        json.dump(rows, f)


def hardware() -> dict:
    info = dict(platform=_platform.platform(), python=_platform.python_version(), cpu_count=os.cpu_count(),
                load_average=os.getloadavg())
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        names = [line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")]
        info["cpu_model"] = names[0] if names else None
    except OSError:
        pass
    return info


def summary(rows: list[dict]) -> list[str]:
    """One line per (conv, D, chunk): all-gathers False/True and the speed-up."""
    lines = []
    pairs = _pairs(rows, lambda r: (r["conv"], r["chunk_size"], r["devices"]))
    for _, f, r in sorted(pairs, key=lambda p: p[0]):
        lines.append(f"{r['conv']:>6} D={r['devices']} chunk={r['chunk_size']:>3}: all-gathers "
                     f"{f['collectives']['all-gather']['count']} vs {r['collectives']['all-gather']['count']}, "
                     f"{f['ms_per_sample']:.2f} vs {r['ms_per_sample']:.2f} ms/sample, "
                     f"shard_batch=True {r['speedup_true_over_false']:.2f}x faster "
                     f"(CPU time {f['cpu_seconds'] / r['cpu_seconds']:.2f}x less)")
    return lines


def _mib(x) -> str:
    return "-" if x is None else f"{x / 2**20:.1f}"


def _pairs(rows: list[dict], key) -> list[tuple]:
    """(key, row with shard_batch False, row with True) for every case measured in both modes."""
    by = {}
    for r in rows:
        if "collectives" in r:
            by.setdefault(key(r), {})[r["shard_batch"]] = r
    return [(k, v[False], v[True]) for k, v in by.items() if False in v and True in v]


def _gathers(r: dict) -> str:
    ag = r["collectives"]["all-gather"]
    return f"{ag['count']} ({ag['arrays']})" if ag["count"] else "0"


def _others(r: dict) -> int:
    return sum(v["count"] for k, v in r["collectives"].items() if k != "all-gather")


def markdown(result: dict) -> str:
    """The measured and the compile-only tables of a result file, as markdown: one line per
    case, shard_batch False / True side by side."""
    out = ["| conv | D | chunk | all-gathers F / T | other coll. F / T | gathered MiB/call (F) | memory MiB F / T "
           "| ms/sample F / T | CPU ms/sample F / T | T faster by | max rel. dJ |", "|" + " --- |" * 11]
    for (conv, D, c), f, t in _pairs(result["rows"], lambda r: (r["conv"], r["devices"], r["chunk_size"])):
        out.append(f"| {conv} | {D} | {c} | {_gathers(f)} / {_gathers(t)} | {_others(f)} / {_others(t)} | "
                   f"{_mib(f['collectives']['all-gather']['bytes_per_call'])} | {_mib(f['peak_bytes'])} / "
                   f"{_mib(t['peak_bytes'])} | {f['ms_per_sample']:.2f} / {t['ms_per_sample']:.2f} | "
                   f"{f['cpu_ms_per_sample']:.2f} / {t['cpu_ms_per_sample']:.2f} | "
                   f"{f['seconds'] / t['seconds']:.1f}x | {t.get('rel_diff_modes', float('nan')):.0e} |")
    missing = [r for r in result["rows"] if "collectives" not in r]
    for r in missing:
        out.append(f"| {r.get('conv')} | {r.get('devices')} | {r.get('chunk_size')} | shard_batch="
                   f"{r.get('shard_batch')}: {r.get('error') or r.get('skipped')} |" + " |" * 7)
    topo = result.get("topology_rows") or []
    if topo:
        out += ["", "| topology | GPUs | conv | chunk | all-gathers F / T | other coll. F / T "
                "| gathered MiB/call (F) | memory MiB F / T |", "|" + " --- |" * 8]
        key = lambda r: (r["topology"], r["devices"], r["conv"], r["chunk_size"])  # noqa: E731
        for (name, D, conv, c), f, t in _pairs(topo, key):
            out.append(f"| {name} | {D} | {conv} | {c} | {_gathers(f)} / {_gathers(t)} | {_others(f)} / "
                       f"{_others(t)} | {_mib(f['collectives']['all-gather']['bytes_per_call'])} | "
                       f"{_mib(f['peak_bytes'])} / {_mib(t['peak_bytes'])} |")
        for r in topo:
            if "collectives" not in r:
                out.append(f"| {r.get('topology')} | {r.get('conv', '')} {r.get('chunk_size', '')} "
                           f"{r.get('shard_batch', '')}: {r.get('error') or r.get('skipped')} |" + " |" * 6)
    if result.get("tpu"):
        out += ["", markdown_tpu(result["tpu"])]
    return "\n".join(out)


def _count(r: dict, kind: str) -> str:
    c = r["collectives"][kind]
    return f"{c['count']} ({c['arrays']})" if c["count"] else "0"


def _rest(r: dict) -> int:
    return sum(v["count"] for k, v in r["collectives"].items() if k not in ("all-gather", "all-reduce"))


def _g(x, fmt="{:.3g}") -> str:
    return "-" if x is None else fmt.format(x)


def _peak(r: dict) -> str:
    """XLA's peak memory of the program (filled in on TPU), else arguments + outputs + scratch."""
    return _mib(r.get("xla_peak_bytes") or r.get("peak_bytes"))


def markdown_tpu(tpu: dict) -> str:
    """The tables of a ``--platform tpu`` result (the ``"tpu"`` entry of a result file): the
    real chip (D = 1, compiled, run and timed) and the compile-only TPU v5e slices."""
    kind = tpu.get("device_kind") or "TPU"
    spec = tpu.get("spec") or {}
    out = [f"TPU: {kind}, jax {tpu.get('jax')}, {spec.get('dtype')}, jax_enable_x64 {tpu.get('x64')}, "
           f"{spec.get('per_device')} samples per chip", ""]
    out += ["| conv | D | chunk | all-gathers F / T | all-reduces F / T | other coll. F / T | peak MiB F / T "
            "| ms/sample F / T | compile s F / T | T faster by | max rel. dJ |", "|" + " --- |" * 11]
    for (conv, D, c), f, t in _pairs(tpu.get("rows") or [], lambda r: (r["conv"], r["devices"], r["chunk_size"])):
        ratio = f["seconds"] / t["seconds"] if f.get("seconds") and t.get("seconds") else None
        out.append(f"| {conv} | {D} | {c} | {_count(f, 'all-gather')} / {_count(t, 'all-gather')} | "
                   f"{_count(f, 'all-reduce')} / {_count(t, 'all-reduce')} | {_rest(f)} / {_rest(t)} | "
                   f"{_peak(f)} / {_peak(t)} | {_g(f.get('ms_per_sample'))} / {_g(t.get('ms_per_sample'))} | "
                   f"{_g(f.get('compile_s'))} / {_g(t.get('compile_s'))} | {_g(ratio, '{:.2f}x')} | "
                   f"{_g(t.get('rel_diff_modes'), '{:.0e}')} |")
    for r in tpu.get("rows") or []:
        if "collectives" not in r:
            out.append(f"| {r.get('conv')} | {r.get('devices')} | {r.get('chunk_size')} | shard_batch="
                       f"{r.get('shard_batch')}: {r.get('error') or r.get('skipped')} |" + " |" * 7)
    out += ["", "| topology | chips | conv | chunk | all-gathers F / T | all-reduces F / T | other coll. F / T "
            "| gathered MiB/call (F) | peak MiB F / T | compile s F / T |", "|" + " --- |" * 10]
    key = lambda r: (r["topology"], r["devices"], r["conv"], r["chunk_size"])  # noqa: E731
    for (name, D, conv, c), f, t in _pairs(tpu.get("topology_rows") or [], key):
        out.append(f"| {name} | {D} | {conv} | {c} | {_count(f, 'all-gather')} / {_count(t, 'all-gather')} | "
                   f"{_count(f, 'all-reduce')} / {_count(t, 'all-reduce')} | {_rest(f)} / {_rest(t)} | "
                   f"{_mib(f['collectives']['all-gather']['bytes_per_call'])} | {_peak(f)} / {_peak(t)} | "
                   f"{_g(f.get('compile_s'))} / {_g(t.get('compile_s'))} |")
    for r in tpu.get("topology_rows") or []:
        if "collectives" not in r:
            out.append(f"| {r.get('topology')} | {r.get('devices', '')} | {r.get('conv', '')} | "
                       f"{r.get('chunk_size', '')} | shard_batch={r.get('shard_batch', '')}: "
                       f"{r.get('error') or r.get('skipped')} |" + " |" * 5)
    for e in tpu.get("errors") or []:
        out.append(f"\nerror: {e}")
    return "\n".join(out)


def _case_key(r: dict) -> tuple:
    return tuple(r.get(k) for k in ("topology", "devices", "conv", "chunk_size", "shard_batch", "lattice",
                                     "n_params", "n_samples"))


def merge_tpu(old: dict | None, new: dict) -> dict:
    """``new`` with the measured rows of an earlier TPU result ``old`` that ``new`` did not
    measure (other chunk sizes or slices, or cases ``new`` skipped), so that several runs
    (each within the chip's time limit) add up to one table."""
    if not isinstance(old, dict):
        return new
    out = dict(new)
    for part in ("rows", "topology_rows"):
        fresh = {_case_key(r): r for r in new.get(part) or [] if "collectives" in r}
        kept = [r for r in old.get(part) or [] if "collectives" in r and _case_key(r) not in fresh]
        if kept:
            kept_keys = {_case_key(r) for r in kept}
            out[part] = kept + [r for r in new.get(part) or [] if _case_key(r) not in kept_keys or "collectives" in r]
    return out


def write_json(path: str, result: dict, key: str | None = None):
    """Write ``result`` to ``path``. ``key`` given: into that key of the file's existing
    content, which is kept; else the whole file, keeping an existing ``"tpu"`` entry."""
    try:
        with open(path) as f:
            old = json.load(f)
        old = old if isinstance(old, dict) else {}
    except (OSError, ValueError):
        old = {}
    if key is None:
        new = dict(result)
        if "tpu" in old and "tpu" not in new:
            new["tpu"] = old["tpu"]
    else:
        new = dict(old, **{key: merge_tpu(old.get(key), result) if key == "tpu" else result})
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(new, f, indent=1)
    os.replace(tmp, path)


def tpu_unavailable(name: str) -> str | None:
    """None if this process can create the compile-only TPU topology ``name`` (libtpu is
    there), else why not, in one line."""
    try:
        from jax.experimental import topologies

        topologies.get_topology_desc(name, "tpu")
    except Exception as err:  # ImportError, RuntimeError("JAX TPU support not installed ..."), ...
        text = (str(err).strip().splitlines() or [""])[0][:300]
        return f"{type(err).__name__}: {text}"
    return None


def _library_matmul_precision() -> str | None:
    """The matrix-product precision the library traces its programs with here."""
    try:
        from quantax_lite.utils import tuning

        return str(tuning.current().matmul_precision)
    except Exception:  # an older or newer tuning module
        return None


def run_tpu(args, spec: dict, json_path: str, t_start: float) -> dict:
    """``--platform tpu``: every case compiled (:func:`tpu_cases`, :func:`compile_cases`),
    then the chip's programs run and timed one at a time (:func:`time_cases`); the result is
    saved under the key ``"tpu"`` of ``json_path`` (:func:`write_json`) after every case."""
    probe = (spec["tpu_topologies"] or list(TPU_TOPOLOGIES))[0]
    why = tpu_unavailable(probe)
    if why is not None:
        print(f"jacobian_sharding.py --platform tpu: no TPU support in this Python (get_topology_desc({probe!r}, "
              f"'tpu') failed: {why}); nothing measured, {json_path} left as it was", file=sys.stderr, flush=True)
        raise SystemExit(2)
    import jax

    if spec["dtype"] == "float64" and not jax.config.jax_enable_x64:
        print("jacobian_sharding.py --platform tpu: --dtype float64 needs jax_enable_x64, which this mode leaves "
              "off (TPUs have no fast float64); use float32", file=sys.stderr, flush=True)
        raise SystemExit(2)
    deadline_min = 2.0 if args.deadline_min is None else args.deadline_min
    deadline = t_start + 60 * deadline_min
    limit_min = max(deadline_min, 2.9 if args.limit_min is None else args.limit_min)
    limit = t_start + 60 * limit_min
    # more threads compile little more per minute (on a 13-core v5e host, 12 threads got
    # through roughly twice the programs of one) and each program takes longer (up to 190 s
    # there), which would carry the run far past the deadline
    threads = args.compile_threads or max(1, min(4, (os.cpu_count() or 2) - 1))
    repeat = 20 if args.repeat is None else args.repeat
    result = dict(benchmark="jacobian_sharding", platform="tpu", quick=args.quick, spec=dict(spec, repeat=repeat),
                  hardware=hardware(), jax=jax.__version__, x64=bool(jax.config.jax_enable_x64),
                  matmul_precision=_library_matmul_precision(), deadline_min=deadline_min,
                  limit_min=limit_min,
                  compile_threads=threads, rows=[], topology_rows=[], errors=[])

    def save():
        result["wall_s"] = round(time.time() - t_start, 1)
        write_json(json_path, result, key="tpu")

    try:
        chips = [d for d in jax.devices() if d.platform == "tpu"]
    except RuntimeError as err:
        chips, result["errors"] = [], [f"jax.devices(): {type(err).__name__}: {str(err).splitlines()[0][:300]}"]
    print(f"# tpu: lattice {spec['L']}x{spec['L']}, channels {spec['channels']}, depth {spec['depth']}, "
          f"{spec['dtype']} (jax_enable_x64 {result['x64']}), {'merged' if spec['merge'] else 'all'} images, "
          f"{spec['per_device']} samples/device, chunks {spec['chunk_sizes']}, convs {spec['convs']}; "
          f"{len(chips)} TPU chip(s) here, D = {spec['devices']}; compile-only {spec['tpu_topologies']}; "
          f"{threads} compile threads; no compilation started after {deadline_min:g} min, none waited for "
          f"after {limit_min:g} min")
    if chips:
        result["device_kind"] = chips[0].device_kind
        result["platform_version"] = getattr(chips[0].client, "platform_version", None)
        result["errors"] += [f"D={D}: only {len(chips)} TPU chip(s)" for D in spec["devices"] if D > len(chips)]
    else:
        result["errors"].append("no TPU chip visible to jax: the rows run on the chip were not measured")
    cases = tpu_cases(spec, chips)
    result["rows"] = [row for row, _, inputs in cases if inputs is not None]
    result["topology_rows"] = [row for row, _, inputs in cases if inputs is None]
    print("# compiling (rows in the order they finish; chip rows again once timed)")
    print(HEADER, flush=True)
    if args.hlo_dir:
        os.makedirs(args.hlo_dir, exist_ok=True)
    done = compile_cases(cases, threads, deadline, after_each=save, hlo_dir=args.hlo_dir, limit=limit)
    stragglers = sum(1 for r, _, _ in cases if r.get("skipped") == "limit (still compiling)")
    if done:
        print("\n# run and timed on the chip, one program at a time"
              + (f" ({stragglers} compilations left running on the host)" if stragglers else ""))
        print(HEADER, flush=True)
        time_cases(done, repeat, args.long)
        result["compiling_while_timed"] = stragglers
    save()
    print()
    print(markdown_tpu(result))
    print(f"\nwrote {json_path} (key 'tpu'; {result['wall_s']:.0f} s)", flush=True)
    if stragglers:  # threads still inside XLA's compiler: do not wait for them
        sys.stderr.flush()
        os._exit(0)
    return result


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
    json_path = args.json or os.path.join(RESULTS, stem + ".json")
    if platform == "tpu":
        return run_tpu(args, spec, json_path, t_start)
    plot_path = args.plot or os.path.splitext(json_path)[0] + ".png"

    load_start = os.getloadavg()
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
            new, err = _subprocess("cpu", dict(spec, deadline=deadline), _cpu_env(D), capture=False)
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
    write_json(json_path, result)
    where = (f"{len(rows) and rows[0].get('device_kind')} devices" if platform == "gpu"
             else f"simulated CPU devices on {hardware().get('cpu_model') or 'CPU'}, {os.cpu_count()} cores")
    title = (f"per-sample Jacobian, symmetrized conv net {spec['L']}x{spec['L']}, {spec['dtype']}, "
             f"{spec['per_device']} samples/device\n{where}")
    plot(rows, plot_path, title)
    print(f"\nwrote {json_path} and {plot_path} ({result['wall_s']:.0f} s)")
    return result


if __name__ == "__main__":
    main()
