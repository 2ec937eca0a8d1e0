"""Seconds per VMC iteration and its breakdown, on the standard workload W1.

W1: 4x4 Heisenberg (Marshall sign), Sz = 0, 1024 samples, conv net with 2 residual
blocks of 8 channels and 3x3 kernels, projected on the translations only, float32
network (float64 SR solve). A second row uses the full group (translations x C4v x
spin inversion). Each row reports the fused step (one compiled program: sample ->
local energies -> Jacobian -> SR -> update) and, separately compiled, each part.

    python benchmarks/vmc_step.py [--quick] [--json PATH] [--repeats N]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

from quantax_lite.jacobian import make_jacobian  # noqa: E402
from quantax_lite.lattice import Square  # noqa: E402
from quantax_lite.models import count_params, make_conv_nqs  # noqa: E402
from quantax_lite.operators import Heisenberg, make_local_energy  # noqa: E402
from quantax_lite.sampler import Exchange, MetropolisSampler  # noqa: E402
from quantax_lite.sr import sr_direction  # noqa: E402
from quantax_lite.symmetry import full_symmetry, translations  # noqa: E402
from quantax_lite.vmc import VMC  # noqa: E402


def timed(fn, repeats):
    jax.block_until_ready(fn())  # compile + warm up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure(group_name, n_samples, n_chains, dtype, complex_output, repeats, chunk_size=None):
    lattice = Square(4)
    ham = Heisenberg(lattice, marshall_sign=True)
    group = translations(lattice) if group_name == "translations" else full_symmetry(lattice)
    def network(conv):
        return make_conv_nqs(lattice, group, channels=8, depth=2, kernel_size=3, dtype=dtype, conv=conv,
                             merge_translations=True, complex_output=complex_output)

    # as `quantax-lite train --conv auto`: lax.conv forward passes; gather form for
    # float64 per-sample gradients
    model = network("lax")
    grad_model = model if dtype == jnp.float32 else network("gather")
    params = model.init(jax.random.PRNGKey(0), jnp.ones((1, 16), jnp.int8))
    sampler = MetropolisSampler(model.apply, Exchange(lattice.bonds(1)), n_chains=n_chains, n_sites=16,
                                chunk_size=chunk_size)
    vmc = VMC(ham, model.apply, sampler, optax.sgd(0.01), n_samples=n_samples, chunk_size=chunk_size,
              diag_shift=1e-4, jacobian_log_psi=grad_model.apply)
    state = vmc.init(jax.random.PRNGKey(1), params)
    state, _ = vmc.step(state)  # compile, thermalize
    holder = {"state": state}

    def one_step():
        holder["state"], m = vmc.step(holder["state"])
        return m["energy"]

    t_step = timed(one_step, repeats)
    state = holder["state"]
    p = state.params
    sample = jax.jit(lambda st, p: vmc.sampler.sample(st, p, n_samples))
    samples, lp, _ = sample(state.sampler, p)
    eloc = make_local_energy(ham, model.apply, chunk_size=chunk_size)
    jac = make_jacobian(grad_model.apply, chunk_size=chunk_size)
    e = eloc(p, samples, lp)
    O = jac(p, samples)
    solve = jax.jit(lambda O, e: sr_direction(O, e, diag_shift=1e-4))
    parts = {
        "sampling": timed(lambda: sample(state.sampler, p)[0], repeats),
        "local_energy": timed(lambda: eloc(p, samples, lp), repeats),
        "jacobian": timed(lambda: jac(p, samples), repeats),
        "solve": timed(lambda: solve(O, e), repeats),
    }
    return {
        "group": group_name, "n_elements": group.n_elements, "n_params": count_params(params),
        "dtype": jnp.dtype(dtype).name, "output": "complex" if complex_output else "positive (real)",
        "jacobian_dtype": str(O.dtype), "n_samples": n_samples, "n_chains": n_chains,
        "step_s": t_step, **{f"{k}_s": v for k, v in parts.items()},
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="256 samples, 2 repeats")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results", "vmc_step.json"))
    args = parser.parse_args(argv)
    n_samples, repeats = (256, 2) if args.quick else (1024, args.repeats)
    rows = []
    for group, dtype, cplx in [
        ("translations", jnp.float32, False),
        ("translations", jnp.float32, True),
        ("full", jnp.float32, False),
    ]:
        rows.append(measure(group, n_samples, n_samples // 4, dtype, cplx, repeats))
        r = rows[-1]
        print(f"{r['group']:>12} {r['output']:>16} P={r['n_params']:5d}  step {r['step_s'] * 1e3:7.1f} ms | "
              f"sample {r['sampling_s'] * 1e3:6.1f}  E_loc {r['local_energy_s'] * 1e3:6.1f}  "
              f"jac {r['jacobian_s'] * 1e3:6.1f}  solve {r['solve_s'] * 1e3:6.1f} ms", flush=True)
    meta = {"devices": [str(d) for d in jax.devices()], "jax": jax.__version__, "cpu_count": os.cpu_count(),
            "machine": platform.processor() or platform.machine(), "python": sys.version.split()[0]}
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as fh:
        json.dump({"meta": meta, "rows": rows}, fh, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
