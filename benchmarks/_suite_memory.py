"""benchmarks/accelerator_suite.py's memory part: the 6x6 local-energy and Jacobian programs
compiled at each chunk size in a fresh process (:func:`memory_worker`, the script's
``--_memory-worker``), their compiled sizes against the device's measured peak
(:func:`run_memory`), as a table (:func:`memory_table`)."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

from _common import error_text, write_json

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "accelerator_suite.py")

# of the memory part's budget, the share its worker may spend compiling (the rest runs them)
MEMORY_COMPILE_SHARE = 0.75


def memory_worker(spec: dict) -> None:
    """In a fresh process: compile the local-energy and Jacobian programs at each chunk,
    then run them in increasing compiled size, reading the device's memory statistics;
    the result file is rewritten after every case (a killed worker leaves what it did).
    Compilation stops at ``compile_deadline`` so that what was compiled is still run (runs
    take milliseconds; on the chip eight compilations filled a 70 s budget and none ran)."""
    from quantax_lite.utils import tuning

    tuning.configure_x64()
    import jax
    from _common import chunk_sizes, compile_part, timed
    from quantax_lite import Recipe, build
    from quantax_lite.optimizer.log_derivatives import make_jacobian
    from quantax_lite.models import derivative_form

    deadline = spec["deadline"]
    out = dict(lattice=spec["lattice"], n_samples=spec["samples"], cases=[], notes=[])

    def save():
        write_json(spec["out"], out, indent=1)

    r = build(Recipe(lattice=spec["lattice"], samples=spec["samples"]))
    vmc, p = r.vmc, r.state.params
    samples, lp, _ = jax.block_until_ready(
        jax.jit(lambda st, q: vmc.sampler.sample(st, q, spec["samples"]))(r.state.sampler, p))
    out.update(n_params=int(r.n_params), n_sites=int(r.lattice.n_sites))
    device = jax.devices()[0]
    stats0 = _device_stats(device)
    out["device_kind"], out["bytes_limit"] = device.device_kind, (stats0 or {}).get("bytes_limit")
    save()
    cases = []
    # the library's own chunk first: what the budget leaves out is one of the others
    for chunk in sorted(spec["chunks"], key=lambda c: c != "default"):
        if time.time() > spec.get("compile_deadline", deadline):
            out["notes"].append(f"deadline: chunk {chunk} and later not compiled")
            break
        v = vmc if chunk == "default" else dataclasses.replace(vmc, chunk_size=int(chunk))
        le_chunk, jac_chunk = chunk_sizes(v, p)
        programs = (("local_energy", jax.jit(v.local_energies), (p, samples, lp), le_chunk),
                    ("jacobian", make_jacobian(derivative_form(v.log_psi), chunk_size=jac_chunk), (p, samples),
                     jac_chunk))
        for name, fn, fn_args, used in programs:
            rec = dict(program=name, chunk=chunk, chunk_used=used)
            try:
                compiled = compile_part(fn, fn_args, rec)
                rec.pop("dots", None)
                cases.append((rec, compiled, fn_args))
            except Exception as err:
                rec["error"] = error_text(err)
            out["cases"].append(rec)
            save()
    last_peak = (stats0 or {}).get("peak_bytes_in_use")
    for rec, compiled, fn_args in sorted(cases, key=lambda c: (c[0]["memory"] or {}).get("total", 0)):
        if time.time() > deadline:
            rec["skipped"] = "deadline: not run"
            continue
        before = _device_stats(device)
        try:
            rec["time_s"] = timed(lambda: compiled(*fn_args), 1)[0]
        except Exception as err:  # e.g. out of memory
            rec["error"] = error_text(err)
            save()
            continue
        after = _device_stats(device)
        rec["bytes_in_use_before"] = (before or {}).get("bytes_in_use")
        rec["peak_bytes_in_use"] = peak = (after or {}).get("peak_bytes_in_use")
        rec["peak_rose"] = None if peak is None else bool(last_peak is None or peak > last_peak)
        last_peak = peak if peak is not None else last_peak
        save()
    save()


def _device_stats(device):
    try:
        return device.memory_stats()
    except Exception:
        return None


def run_memory(args, budget_s: float, out_dir: str) -> dict:
    path = os.path.join(out_dir, "memory.json")
    start = time.time()
    spec = dict(lattice=args.memory_lattice, samples=args.samples, chunks=args.memory_chunks,
                deadline=start + budget_s, compile_deadline=start + MEMORY_COMPILE_SHARE * budget_s, out=path)
    cmd = [sys.executable, SCRIPT, "--_memory-worker", json.dumps(spec)]
    out = {}
    try:
        proc = subprocess.run(cmd, timeout=budget_s + 20)
        if proc.returncode:
            out["error"] = f"worker exit status {proc.returncode}"
    except subprocess.TimeoutExpired:
        out["error"] = f"worker killed after {budget_s + 20:.0f} s"
    try:
        with open(path) as fh:
            out.update(json.load(fh))
    except (OSError, ValueError) as err:
        out.setdefault("error", f"no result file: {err}")
    return out


def memory_table(result: dict) -> list[str]:
    def mib(x):
        return "-" if x is None else f"{x / 2**20:.1f}"

    lines = [f"# memory per chunk: {result.get('lattice')}, {result.get('n_samples')} samples, "
             f"{result.get('device_kind')} (MiB per device; measured = peak_bytes_in_use, '<=' where it did not rise)",
             f"{'program':>13} {'chunk':>8} {'used':>5} {'argument':>9} {'output':>8} {'temp':>9} {'total':>9} "
             f"{'measured':>10} {'ms':>8}"]
    for c in result.get("cases", []):
        m = c.get("memory") or {}
        meas = mib(c.get("peak_bytes_in_use"))
        if c.get("peak_rose") is False:
            meas = "<=" + meas
        tail = c.get("error") or c.get("skipped") or ""
        ms = "-" if c.get("time_s") is None else f"{c['time_s'] * 1e3:.1f}"
        lines.append(f"{c['program']:>13} {str(c['chunk']):>8} {str(c.get('chunk_used')):>5} {mib(m.get('argument')):>9} "
                     f"{mib(m.get('output')):>8} {mib(m.get('temp')):>9} {mib(m.get('total')):>9} {meas:>10} {ms:>8} "
                     f"{tail}")
    return lines
