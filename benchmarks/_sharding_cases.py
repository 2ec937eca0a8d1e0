"""benchmarks/jacobian_sharding.py's cases: the network, one Jacobian program lowered,
compiled, counted (:func:`compiled_stats`), run and timed (:func:`measure`), every case of
one device count (:func:`run_device_count`) and of compile-only CUDA topologies
(:func:`run_topologies`), and a case as one line of the printed table (:func:`format_row`)."""
from __future__ import annotations

import os
import platform as _platform
import statistics
import time

from _common import clock, cpu_model, error_text, load_average
from _sharding_hlo import hlo_collectives

MODES = (False, True)  # shard_batch

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
    def build():
        lowered = lower_jacobian(log_psi, params, samples, mesh, chunk_size, shard_batch, conv, lowering_platforms)
        return lowered.compile() if device_assignment is None else lowered.compile(
            device_assignment=tuple(device_assignment))

    return clock(build, wait=False)


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
      chunk_size: passed to ``quantax_lite.jacobian``.
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
                                     error=error_text(err, 400)))
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
                row["error"] = error_text(err, 400)
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


def hardware() -> dict:
    """The host of a run: platform, Python, CPU count and model, the load average now."""
    return dict(platform=_platform.platform(), python=_platform.python_version(), cpu_count=os.cpu_count(),
                load_average=load_average(), cpu_model=cpu_model())
