"""Seconds per VMC iteration and its breakdown, on the standard workload W1.

W1: 4x4 Heisenberg (Marshall sign), Sz = 0, 1024 samples, conv net with 2 residual
blocks of 8 channels and 3x3 kernels, projected on the translations only, float32
network (float64 SR solve). Every row is built by the library's recipe
(``quantax_lite.build(Recipe(...))``, as ``quantax-lite train`` builds its run: the
library's convolution form, one chain per sample, sweeps of n_sites/2 anti-aligned
exchanges, packed local energies in cache-sized chunks, BLAS threads limited to one). Rows: W1 with a positive (real log psi) network, W1 with a
complex one, the full group (translations x C4v x spin inversion), W1 in float64, and W1
with a signed network (real psi with a learned sign, as J1-J2 runs use; real Jacobian).
Each row reports the fused step (one compiled program: sample -> local energies ->
Jacobian -> SR -> update; the median of ``--repeats`` steps) and, separately
compiled, each part.

    python benchmarks/vmc_step.py [--quick] [--json PATH] [--repeats N] [--rows 0 2]
"""
from __future__ import annotations

import json
import os
import platform
import sys

import jax

from quantax_lite.utils import tuning  # noqa: E402

tuning.configure_x64()  # float64 SR solve on CPUs, as `quantax-lite train` runs; float32 on accelerators

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (add_json_option, chunk_sizes, load_average, output_path, results_file,  # noqa: E402
                     script_parser, step_parts, timed, write_result)
from quantax_lite import Recipe, build  # noqa: E402
from quantax_lite.models.conv import conv_form_for  # noqa: E402
from quantax_lite.utils import limit_blas_threads  # noqa: E402


def measure(group_name, n_samples, precision, amplitude, repeats):
    """One W1 row, built by the library's recipe (as ``quantax-lite train`` builds its run)."""
    recipe = Recipe(lattice="4x4", symmetry=group_name, samples=n_samples, precision=precision,
                    amplitude=amplitude, channels=8, depth=2, kernel_size=3)
    r = build(recipe)
    vmc, group, n_params = r.vmc, r.symmetry, r.n_params
    state, _ = vmc.step(r.state)  # compile, thermalize
    holder = {"state": state}

    def one_step():
        holder["state"], m = vmc.step(holder["state"])
        return m["energy"]

    t_step, t_step_min = timed(one_step, repeats)
    state = holder["state"]
    p = state.params
    fns, v = step_parts(vmc, state, n_samples)  # each part jitted alone, run once in order
    sample, eloc, jac, solve = (fns[k][0] for k in ("sampling", "local_energy", "jacobian", "solve"))
    samples, lp, e, O = v["samples"], v["log_psi"], v["e_loc"], v["jac"]
    parts = {
        "sampling": timed(lambda: sample(state.sampler, p)[0], repeats)[0],
        "local_energy": timed(lambda: eloc(p, samples, lp), repeats)[0],
        "jacobian": timed(lambda: jac(p, samples), repeats)[0],
        "solve": timed(lambda: solve(O, e), repeats)[0],
    }
    model = vmc.log_psi.__self__
    return {
        "group": group_name, "n_elements": group.n_elements, "n_images": model.n_elements,
        "n_params": n_params, "precision": precision, "output": amplitude,
        "conv_form": conv_form_for((4, 4), 3, 8, r.model.base.dtype),
        "jacobian_dtype": str(O.dtype), "n_samples": n_samples, "n_chains": vmc.sampler.n_chains,
        "sweep_size": vmc.sampler.sweep_size, "rule": repr(vmc.sampler.rule.__class__.__name__)
        + (" anti-aligned" if getattr(vmc.sampler.rule, "anti_aligned", False) else ""),
        "local_energy_chunk": chunk_sizes(vmc, p)[0],
        "step_s": t_step, "step_min_s": t_step_min, **{f"{k}_s": v for k, v in parts.items()},
    }


def main(argv=None):
    parser = script_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="256 samples, 2 repeats")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", type=int, nargs="*", default=None,
                        help="which rows (0: W1 translations positive, 1: complex, 2: full group, 3: float64, "
                             "4: signed); measured rows replace their own in the JSON, others stay")
    add_json_option(parser, results_file("vmc_step.json"), "full", help="the rows")
    args = parser.parse_args(argv)
    args.json = output_path(args.quick, args.json, results_file("vmc_step.json"))
    load_start = load_average()
    n_samples, repeats = (256, 2) if args.quick else (1024, args.repeats)
    rows = []
    configs = [("translations", "f32", "positive"), ("translations", "f32", "complex"),
               ("full", "f32", "positive"), ("translations", "f64", "positive"),
               ("translations", "f32", "signed")]
    if args.rows:
        configs = [configs[i] for i in args.rows]
    blas = limit_blas_threads()  # as `quantax-lite train` runs
    for group, precision, amplitude in configs:
        rows.append(measure(group, n_samples, precision, amplitude, repeats))
        r = rows[-1]
        print(f"{r['group']:>12} {r['precision']} {r['output']:>8} P={r['n_params']:5d}  "
              f"step {r['step_s'] * 1e3:7.1f} ms (min {r['step_min_s'] * 1e3:6.1f}) | "
              f"sample {r['sampling_s'] * 1e3:6.1f}  E_loc {r['local_energy_s'] * 1e3:6.1f}  "
              f"jac {r['jacobian_s'] * 1e3:6.1f}  solve {r['solve_s'] * 1e3:6.1f} ms", flush=True)
    meta = {"devices": [str(d) for d in jax.devices()], "jax": jax.__version__, "cpu_count": os.cpu_count(),
            "machine": platform.processor() or platform.machine(), "python": sys.version.split()[0],
            "load_average_start_end": [load_start[0], load_average()[0]]}
    blas.restore_original_limits()
    if args.json is None:
        return
    if args.rows and os.path.exists(args.json):  # keep the rows not measured now
        def key(r):
            return r["group"], r["precision"], r["output"]

        with open(args.json) as fh:
            old = json.load(fh)["rows"]
        new = {key(r): r for r in rows}
        rows = [new.pop(key(r), r) for r in old] + list(new.values())
    write_result(args.json, {"meta": meta, "rows": rows}, __file__, argv, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
