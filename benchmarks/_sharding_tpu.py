"""benchmarks/jacobian_sharding.py's ``--platform tpu``: the cases on the chip and on the
compile-only TPU v5e slices (:func:`tpu_cases`), compiled on threads within a deadline
(:func:`compile_cases`), the chip's programs timed (:func:`time_cases`), and the result
kept under the key ``"tpu"`` of the JSON file, merged with earlier runs (:func:`write_json`,
:func:`merge_tpu`); :func:`run_tpu` drives it."""
from __future__ import annotations

import json
import os
import re
import sys
import time

from _common import error_text, stamp, write_json as _write_file
from _sharding_cases import (HEADER, MODES, chunk_sizes_of, compile_jacobian, compiled_stats, format_row, hardware,
                             jacobian_difference, mesh_cases, network_of, random_samples, time_compiled, _n_images)
from _sharding_report import markdown_tpu

# compile-only TPU v5e slices (4 to 256 chips) accepted by get_topology_desc(name, "tpu")
TPU_TOPOLOGIES = ("v5e:2x2", "v5e:2x4", "v5e:4x4", "v5e:8x8", "v5e:16x16")

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
            cases.append((dict(topology=topo, error=error_text(err, 400)),
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
            return case, dict(error=error_text(err, 400)), None
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
            row["error"] = error_text(err, 400)
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
    _write_file(path, new, indent=1)


def tpu_unavailable(name: str) -> str | None:
    """None if this process can create the compile-only TPU topology ``name`` (libtpu is
    there), else why not, in one line."""
    try:
        from jax.experimental import topologies

        topologies.get_topology_desc(name, "tpu")
    except Exception as err:  # ImportError, RuntimeError("JAX TPU support not installed ..."), ...
        return error_text(err)
    return None


def _library_matmul_precision() -> str | None:
    """The matrix-product precision the library traces its programs with here."""
    try:
        from quantax_lite.utils import tuning

        return str(tuning.current().matmul_precision)
    except Exception:  # an older or newer tuning module
        return None


def run_tpu(args, spec: dict, json_path: str, t_start: float, argv=None, unavailable=None) -> dict:
    """``--platform tpu``: every case compiled (:func:`tpu_cases`, :func:`compile_cases`),
    then the chip's programs run and timed one at a time (:func:`time_cases`); the result
    (stamped with the command line ``argv``) is saved under the key ``"tpu"`` of
    ``json_path`` (:func:`write_json`) after every case. ``unavailable``: the check for TPU
    support (default :func:`tpu_unavailable`)."""
    probe = (spec["tpu_topologies"] or list(TPU_TOPOLOGIES))[0]
    why = (unavailable or tpu_unavailable)(probe)
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
    stamp(result, "jacobian_sharding.py", argv)

    def save():
        result["wall_s"] = round(time.time() - t_start, 1)
        write_json(json_path, result, key="tpu")

    try:
        chips = [d for d in jax.devices() if d.platform == "tpu"]
    except RuntimeError as err:
        chips, result["errors"] = [], [f"jax.devices(): {error_text(err)}"]
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
