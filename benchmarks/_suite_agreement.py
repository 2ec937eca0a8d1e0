"""benchmarks/accelerator_suite.py's agreement part: one W1 state's samples, log psi, local
energies, Jacobian, SR and MinSR directions and spin correlations on the accelerator
(:func:`start_agreement`), against the float64 CPU library on the same samples in a
subprocess (:func:`agreement_reference`, the script's ``--_agreement-reference``), compared
once it is done (:func:`finish_agreement`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from _common import last_line

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "accelerator_suite.py")

AGREEMENT_STEPS = 20


# threads of the agreement's CPU reference, which runs beside the parts timed after it
AGREEMENT_CPU_THREADS = 4


def _agreement_recipe(args):
    from quantax_lite import Recipe

    return Recipe(lattice="2x4" if args.quick else "4x4", samples=64 if args.quick else 1024)


def agreement_reference(spec: dict) -> None:
    """In a CPU process with float64 on: the library's values on the accelerator's samples."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    from quantax_lite import Recipe, build, spin_correlations
    from quantax_lite.optimizer.log_derivatives import jacobian
    from quantax_lite.models import derivative_form
    from quantax_lite.optimizer.stochastic_reconfiguration import sr_direction

    data = dict(np.load(spec["inputs"]))
    r = build(Recipe(**spec["recipe"]))
    leaves, treedef = jax.tree_util.tree_flatten(r.state.params)
    params = jax.tree_util.tree_unflatten(treedef, [np.asarray(data[f"param_{i}"]) for i in range(len(leaves))])
    samples = data["samples"]
    lp = r.vmc.log_psi(params, samples)
    e_loc = r.vmc.local_energies(params, samples, lp)
    jac = jacobian(derivative_form(r.vmc.log_psi), params, samples)
    out = dict(log_psi=np.asarray(lp), e_loc=np.asarray(e_loc), jac=np.asarray(jac))
    for method in ("sr", "minsr"):
        out[f"{method}_own"] = np.asarray(sr_direction(jac, e_loc, method=method))  # the whole CPU pipeline
        out[f"{method}_same"] = np.asarray(sr_direction(data["jac"], data["e_loc"], method=method))  # the solve
    corr = spin_correlations(r.vmc.log_psi, params, samples, log_psi_samples=lp)
    out.update(corr_mean=np.asarray(corr.mean), corr_error=np.asarray(corr.error))
    np.savez(spec["out"], **out)


def start_agreement(args, out_dir: str):
    """The accelerator's side of the agreement part (one state's samples, log psi, local
    energies, Jacobian, SR and MinSR directions, correlations), then the float64 CPU
    reference started in a subprocess on the same samples, left running: ``(recipe, mine,
    corr, spec, process)`` for :func:`finish_agreement`. The reference is limited to
    ``AGREEMENT_CPU_THREADS`` threads, so that the parts timed beside it keep the host."""
    import jax
    import numpy as np

    from quantax_lite import build, run, spin_correlations
    from quantax_lite.optimizer.log_derivatives import jacobian
    from quantax_lite.models import derivative_form
    from quantax_lite.optimizer.stochastic_reconfiguration import sr_direction

    recipe = _agreement_recipe(args)
    r = build(recipe)
    state, _ = run(r.vmc, r.state, AGREEMENT_STEPS, progress=False)
    params = state.params
    samples, lp, _ = r.vmc.sampler.sample(state.sampler, params, recipe.samples)
    e_loc = r.vmc.local_energies(params, samples, lp)
    jac = jacobian(derivative_form(r.vmc.log_psi), params, samples)
    mine = dict(log_psi=lp, e_loc=e_loc, jac=jac)
    for method in ("sr", "minsr"):
        mine[method] = sr_direction(jac, e_loc, method=method)
    corr = spin_correlations(r.vmc.log_psi, params, samples, log_psi_samples=lp)
    mine = {k: np.asarray(jax.device_get(v)) for k, v in mine.items()}
    inputs = os.path.join(out_dir, "agreement_inputs.npz")
    leaves = jax.tree_util.tree_leaves(jax.device_get(params))
    np.savez(inputs, samples=np.asarray(samples), jac=mine["jac"], e_loc=mine["e_loc"],
             **{f"param_{i}": np.asarray(x) for i, x in enumerate(leaves)})
    spec = dict(inputs=inputs, out=os.path.join(out_dir, "agreement_reference.npz"),
                recipe=dict(lattice=recipe.lattice, samples=recipe.samples))
    threads = str(AGREEMENT_CPU_THREADS)
    env = dict(os.environ, JAX_PLATFORMS="cpu", OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)
    cores = sorted(os.sched_getaffinity(0))[-AGREEMENT_CPU_THREADS:]  # the last ones: this process keeps the first

    def on_few_cores():
        os.sched_setaffinity(0, cores)

    cmd = [sys.executable, SCRIPT, "--_agreement-reference", json.dumps(spec)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=on_few_cores)
    return recipe, mine, corr, spec, proc


def finish_agreement(pending, budget_s: float) -> dict:
    """Waits at most ``budget_s`` for the reference of :func:`start_agreement` and compares:
    relative differences, the CPU's direction both from the accelerator's Jacobian (the
    solve alone) and from its own (the whole pipeline)."""
    import jax
    import numpy as np

    from quantax_lite.utils import tuning

    recipe, mine, corr, spec, proc = pending
    try:
        output, _ = proc.communicate(timeout=max(budget_s, 1.0))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return dict(error=f"the float64 CPU reference did not finish in {budget_s:.0f} s")
    if proc.returncode:
        return dict(error=last_line(output) or f"exit {proc.returncode}")
    ref = dict(np.load(spec["out"]))

    def rel(a, b):
        return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(np.asarray(b)))

    out = dict(lattice=recipe.lattice, n_samples=recipe.samples, trained_steps=AGREEMENT_STEPS,
               backend=jax.default_backend(), matmul_precision=tuning.current().matmul_precision,
               sr_solve=tuning.current().sr_solve, jacobian_dtype=str(mine["jac"].dtype))
    out["log_psi_max_abs_diff"] = float(np.max(np.abs(mine["log_psi"] - ref["log_psi"])))
    out["e_loc_rel_diff"] = rel(mine["e_loc"], ref["e_loc"])
    out["energy"], out["energy_cpu"] = float(np.mean(mine["e_loc"].real)), float(np.mean(ref["e_loc"].real))
    out["energy_std_error"] = float(np.std(ref["e_loc"].real) / np.sqrt(len(ref["e_loc"])))
    out["jacobian_rel_diff"] = rel(mine["jac"], ref["jac"])
    for method in ("sr", "minsr"):
        out[f"{method}_direction_rel_diff_same_jacobian"] = rel(mine[method], ref[f"{method}_same"])
        out[f"{method}_direction_rel_diff_whole_step"] = rel(mine[method], ref[f"{method}_own"])
    corr_diff = np.abs(np.asarray(corr.mean) - ref["corr_mean"])
    out["correlations_max_abs_diff"] = float(np.max(corr_diff))
    out["correlations_max_error_bar"] = float(np.max(ref["corr_error"]))
    for k, v in out.items():
        print(f"agreement {k}: {v}", flush=True)
    return out
