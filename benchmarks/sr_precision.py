"""How many digits the SR / MinSR direction keeps under each backend's precision record.

On one Jacobian of W1 (4x4 Heisenberg, the default network, 1024 samples; the untrained
state, or after ``--steps`` training steps), the direction of ``sr_direction`` under the
CPU record (float32 Gram matrix, float64 solve) and under the accelerator record
(``tuning.for_backend("tpu")``: float32 throughout, Cholesky with 0 to 3 refinement
steps) against an all-float64 dense solve with NumPy, and against a float32 Cholesky
whose refinement residual is formed in float64 (what limits the accelerator record).
On a CPU the accelerator record is emulated exactly (float32 products there are
float32-accurate, as "highest" products are on a TPU).

    python benchmarks/sr_precision.py [--steps N] [--json PATH]

On an accelerator the Jacobian, the local energies and the accelerator record's solves are
the device's; the references are NumPy's on the host, and ``host_float64`` times the
alternative of solving there: the Jacobian fetched from the device, the centred Gram
matrix formed and solved in float64 by NumPy, the direction put back.

Prints a table and writes benchmarks/results/sr_precision.json (or ``--json``).
"""
from __future__ import annotations

import os
import sys

import jax

jax.config.update("jax_enable_x64", True)  # the float64 references

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.linalg as sl  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import (add_json_option, on_accelerator, platform_info, results_file, script_parser,  # noqa: E402
                     step_parts, time_calls, write_result)
from quantax_lite import Recipe, build, run
from quantax_lite.utils import tuning  # noqa: E402
from quantax_lite.optimizer.stochastic_reconfiguration import sr_direction  # noqa: E402

SHIFTS = (1e-4, 1e-3)


def dense_minsr(o: np.ndarray, e: np.ndarray, shift: float) -> np.ndarray:
    """MinSR by dense float64 linear algebra (real Jacobian and local energies)."""
    n = len(e)
    o_bar = (o - o.mean(0)) / np.sqrt(n)
    e_bar = (e - e.mean()) / np.sqrt(n)
    return o_bar.T @ np.linalg.solve(o_bar @ o_bar.T + shift * np.eye(n), e_bar)


def float32_cholesky_float64_residual(o: np.ndarray, e: np.ndarray, shift: float, steps: int = 3) -> np.ndarray:
    """float32 Gram matrix and Cholesky, refinement residuals in float64."""
    n = len(e)
    o_bar = (o - o.mean(0)) / np.sqrt(n)
    e_bar = (e - e.mean()) / np.sqrt(n)
    o32 = o_bar.astype(np.float32)
    a32 = o32 @ o32.T + np.float32(shift) * np.eye(n, dtype=np.float32)
    factor = sl.cholesky(a32, lower=True)
    y = sl.cho_solve((factor, True), e_bar.astype(np.float32))
    for _ in range(steps):
        r = e_bar - a32.astype(np.float64) @ y.astype(np.float64)
        y = y + sl.cho_solve((factor, True), r.astype(np.float32))
    return o_bar.T @ y.astype(np.float64)


def float32_cholesky_float32_residual(o: np.ndarray, e: np.ndarray, shift: float, steps: int = 2) -> np.ndarray:
    """The accelerator record in NumPy float32: Gram, Cholesky and refinement residuals."""
    n = len(e)
    o32 = ((o - o.mean(0)) / np.sqrt(n)).astype(np.float32)
    e32 = ((e - e.mean()) / np.sqrt(n)).astype(np.float32)
    a32 = o32 @ o32.T + np.float32(shift) * np.eye(n, dtype=np.float32)
    factor = sl.cholesky(a32, lower=True)
    y = sl.cho_solve((factor, True), e32)
    for _ in range(steps):
        y = y + sl.cho_solve((factor, True), e32 - a32 @ y)
    return o32.T.astype(np.float64) @ y.astype(np.float64)


def host_float64_seconds(jac_device, e: np.ndarray, shift: float, repeats: int = 3) -> float:
    """Median seconds of the host float64 MinSR solve of a device Jacobian (fetch, centred
    Gram matrix, Cholesky, direction put back on the device)."""
    def solve():
        o = np.asarray(jax.device_get(jac_device), np.float64)
        n = len(e)
        o_bar = (o - o.mean(0)) / np.sqrt(n)
        gram = o_bar @ o_bar.T
        gram[np.diag_indices(n)] += shift
        y = sl.cho_solve(sl.cho_factor(gram, lower=True), (e - e.mean()) / np.sqrt(n))
        return jax.device_put((o_bar.T @ y).astype(np.float32))

    return float(np.median(time_calls(solve, repeats)))


def main(argv=None):
    parser = script_parser(__doc__)
    parser.add_argument("--steps", type=int, default=0, help="training steps before the Jacobian (default 0)")
    parser.add_argument("--samples", type=int, default=1024)
    add_json_option(parser, results_file("sr_precision.json"))
    args = parser.parse_args(argv)
    r = build(Recipe(lattice="4x4", samples=args.samples))
    state = r.state
    if args.steps:
        state, _ = run(r.vmc, state, args.steps, progress=False)
    _, values = step_parts(r.vmc, state, args.samples)
    o, e = np.asarray(values["jac"]), np.real(np.asarray(values["e_loc"]))
    rows = []
    accelerator = on_accelerator()
    for shift in SHIFTS:
        ref = dense_minsr(o.astype(np.float64), e, shift)

        def error(d):
            return float(np.linalg.norm(np.asarray(d, np.float64) - ref) / np.linalg.norm(ref))

        row = dict(diag_shift=shift,
                   float32_cholesky_float64_residual=error(float32_cholesky_float64_residual(o, e, shift)),
                   numpy_float32_refine_2=error(float32_cholesky_float32_residual(o, e, shift)))
        if accelerator:  # the device's own record (the CPU record would put float64 on the device)
            row["backend_record"] = error(sr_direction(values["jac"], jnp.asarray(e, jnp.float32), diag_shift=shift))
            row["host_float64_s"] = host_float64_seconds(values["jac"], e, shift)
        else:
            row["cpu_record"] = error(sr_direction(jnp.asarray(o), jnp.asarray(e), diag_shift=shift))
        for steps in (0, 1, 2, 3):
            with tuning.using(tuning.for_backend("gpu" if jax.default_backend() == "gpu" else "tpu")), \
                    tuning.override(sr_refinement=steps):
                d = sr_direction(jnp.asarray(o, jnp.float32), jnp.asarray(e, jnp.float32), diag_shift=shift)
            row[f"accelerator_record_refine_{steps}"] = error(d)
        rows.append(row)
        print(f"shift {shift:g}: " + ", ".join(f"{k} {v:.2e}" for k, v in row.items() if k != "diag_shift"), flush=True)
    result = dict(benchmark="sr_precision", lattice="4x4", n_samples=args.samples, n_params=int(o.shape[1]),
                  trained_steps=args.steps, method="minsr", reference="all-float64 dense MinSR (NumPy)",
                  measure="relative error ||d - d_ref|| / ||d_ref||", rows=rows, **platform_info())
    write_result(args.json, result, __file__, argv, indent=1)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
