"""Samples of |psi|^(2a) instead of |psi|^2: how well do they estimate the energy and the SR step?

Takes a trained run (``--run``; else trains a row of ``benchmarks/accuracy.py`` for
``--iters`` steps, the 4x4 J1-J2 one by default), sums every configuration of its Sz sector
exactly (local energies from the sparse Hamiltonian, the per-sample Jacobian of every
configuration), and compares, for each power ``a``, estimates from ``--samples``
independent draws of p_a(s) ∝ |psi(s)|^(2a), each draw weighted by |psi(s)|^(2 - 2a)
(normalized: self-normalized importance sampling; a = 1 is plain sampling of |psi|^2),
with the exact values:

* the energy: mean |E_est - E| / |E| over ``--repeats`` draws;
* the SR direction (the run's diagonal shift, weighted S and F, the library's
  ``sr_direction`` with ``weights``): relative error |d_est - d| / |d| and cosine;
* the step: the exact energy after one step of the run's learning rate along d_est,
  as a fraction of the exact step's gain (1: as good as the exact direction);
* the effective sample size (sum w)^2 / sum w^2 / N.

Draws are independent (no Markov chain), so the comparison isolates the distribution.

With ``--train-steps N`` it then trains on from the run, once per power of
``--train-powers`` (``quantax-lite train --init-from RUN --sampling-power a``, the row's
options, N steps, Markov chains as in any run), and reports the exact (dense) energy each
run reaches: what the better step estimates buy in training.

    python benchmarks/sampling_power.py [--run DIR] [--row j1j2_4x4] [--iters 600]
        [--samples 1024] [--repeats 20] [--powers 1,0.8,0.6,0.5,0.4] [--json PATH] [--quick]
        [--train-steps N] [--train-powers 1,0.3]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_JSON = os.path.join(HERE, "results", "sampling_power.json")
QUICK_OPTIONS = ["--lattice", "chain:8", "--hamiltonian", "j1j2", "--J2", "0.5", "--channels", "4", "--depth", "1",
                 "--samples", "256", "--chains", "32", "--eval-samples", "256"]


def exact_sums(run, params):
    """(states, psi normalized, local energies, Jacobian) over the run's Sz sector."""
    import jax.numpy as jnp
    import numpy as np

    from quantax_lite import jacobian
    from quantax_lite.hilbert.configurations import all_states
    from quantax_lite.models import derivative_form

    states = all_states(run.lattice.n_sites, 0 if run.hamiltonian.conserves_sz else None)
    lp = np.concatenate([np.asarray(run.model.apply(params, jnp.asarray(states[i:i + 4096])))
                         for i in range(0, len(states), 4096)])
    psi = np.exp(lp - lp.real.max())
    psi /= np.linalg.norm(psi)
    e_loc = (run.hamiltonian.to_sparse(states) @ psi) / psi
    jac = np.asarray(jacobian(derivative_form(run.model.apply), params, jnp.asarray(states)))
    return states, psi, e_loc, jac


def energy_of(run, params, states) -> float:
    import jax.numpy as jnp
    import numpy as np

    lp = np.concatenate([np.asarray(run.model.apply(params, jnp.asarray(states[i:i + 4096])))
                         for i in range(0, len(states), 4096)])
    psi = np.exp(lp - lp.real.max())
    h = run.hamiltonian.to_sparse(states)
    return float(np.real(np.vdot(psi, h @ psi)) / np.real(np.vdot(psi, psi)))


def compare(run, params, powers, n_samples: int, repeats: int, seed: int) -> dict:
    import jax.numpy as jnp
    import numpy as np
    import optax

    from quantax_lite import sr_direction
    from quantax_lite.optimizer.stochastic_reconfiguration import unravel_like

    states, psi, e_loc, jac = exact_sums(run, params)
    p = np.abs(psi) ** 2
    shift = float(run.recipe.optimizer_settings(run.lattice)[1])
    lr = float(run.recipe.lr)
    real_params = not np.iscomplexobj(np.asarray(jax_leaves(params)[0]))

    def direction(rows, weights):
        return np.asarray(sr_direction(jnp.asarray(jac[rows]), jnp.asarray(e_loc[rows]), diag_shift=shift,
                                       weights=jnp.asarray(weights), real_params=real_params))

    def after_step(d):
        new = optax.apply_updates(params, unravel_like(jnp.asarray(-lr * d), params))
        return energy_of(run, new, states)

    everything = np.arange(len(states))
    d_exact = direction(everything, p)
    e0 = float(np.sum(p * e_loc.real))
    gain_exact = after_step(d_exact) - e0
    rng = np.random.default_rng(seed)
    rows = []
    for a in powers:
        pa = p ** a
        pa /= pa.sum()
        errs, drel, cosines, gains, ess = [], [], [], [], []
        for _ in range(repeats):
            idx = rng.choice(len(states), size=n_samples, p=pa)
            w = p[idx] / pa[idx]
            w /= w.sum()
            errs.append(abs(float(np.sum(w * e_loc[idx].real)) - e0) / abs(e0))
            d = direction(idx, w)
            drel.append(float(np.linalg.norm(d - d_exact) / np.linalg.norm(d_exact)))
            cosines.append(float(np.dot(d, d_exact) / (np.linalg.norm(d) * np.linalg.norm(d_exact))))
            gains.append((after_step(d) - e0) / gain_exact)
            ess.append(float(1.0 / np.sum(w ** 2) / n_samples))
        rows.append({"power": a, "energy_relative_error": float(np.mean(errs)),
                     "direction_relative_error": float(np.mean(drel)), "cosine": float(np.mean(cosines)),
                     "step_gain_fraction": float(np.mean(gains)), "step_gain_fraction_worst": float(np.min(gains)),
                     "effective_sample_fraction": float(np.mean(ess))})
    return {"n_configurations": int(len(states)), "energy": e0, "exact_step_gain": gain_exact, "lr": lr,
            "diag_shift": shift, "rows": rows}


def train_on(options, source: str, out: str, steps: int, powers) -> list[dict]:
    """From the run ``source``: ``steps`` more steps per power (``--init-from``), each
    run's exact energy (dense) and wall time."""
    from quantax_lite.cli import main as command
    from quantax_lite.recipes import load_run

    rows = []
    for a in powers:
        folder = os.path.join(out, f"power_{a:g}")
        t0 = time.perf_counter()
        if command(["train", *options, "--iters", str(steps), "--init-from", source, "--sampling-power", f"{a:g}",
                    "--out", folder, "--no-progress", "--restart"]) != 0:
            raise SystemExit(f"sampling_power: training at power {a:g} failed")
        wall = time.perf_counter() - t0
        loaded = load_run(folder)
        run = loaded.run
        states = exact_sums_states(run)
        energy = energy_of(run, loaded.state.params, states)
        exact = run.recipe.reference_energy(run.lattice, run.hamiltonian)
        with open(os.path.join(folder, "summary.json")) as fh:
            summary = json.load(fh)  # the run's own final estimate, from fresh samples of |psi|^2
        rows.append({"power": a, "steps": steps, "energy": energy, "relative_error": (energy - exact) / abs(exact),
                     "wall_s": round(wall, 1), "final_estimate_energy": summary["energy"],
                     "final_estimate_energy_error": summary["energy_error"],
                     "final_estimate_relative_error": summary["relative_error"]})
        print(f"power {a:g}: {steps} steps, exact energy {energy:.6f}, relative error {rows[-1]['relative_error']:.3e}",
              flush=True)
    return rows


def exact_sums_states(run):
    from quantax_lite.hilbert.configurations import all_states

    return all_states(run.lattice.n_sites, 0 if run.hamiltonian.conserves_sz else None)


def jax_leaves(tree):
    import jax

    return jax.tree_util.tree_leaves(tree)


def table(result: dict) -> str:
    lines = [f"{'a':>5} {'|dE|/|E|':>10} {'|dd|/|d|':>10} {'cosine':>8} {'step gain':>10} {'worst':>8} {'ESS/N':>7}"]
    for r in result["rows"]:
        lines.append(f"{r['power']:>5g} {r['energy_relative_error']:>10.2e} {r['direction_relative_error']:>10.3f} "
                     f"{r['cosine']:>8.3f} {r['step_gain_fraction']:>10.3f} {r['step_gain_fraction_worst']:>8.3f} "
                     f"{r['effective_sample_fraction']:>7.3f}")
    return "\n".join(lines)


def parse_powers(parser, name: str, text: str) -> list[float]:
    try:
        powers = [float(x) for x in text.split(",")]
    except ValueError:
        parser.error(f"--{name.replace('_', '-')}: expected numbers separated by commas, got {text!r}")
    if not all(0 < a <= 1 for a in powers):
        parser.error(f"--{name.replace('_', '-')}: expected powers in (0, 1], got {text!r}")
    return powers


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--row", default="j1j2_4x4", help="the benchmarks/accuracy.py row to train (default j1j2_4x4)")
    parser.add_argument("--iters", type=int, default=600, help="training steps (default 600)")
    parser.add_argument("--run", help="a finished run folder to probe instead of training one")
    parser.add_argument("--out", default="runs/sampling_power", help="where the trained run goes")
    parser.add_argument("--samples", type=int, default=1024, help="draws per estimate (default 1024)")
    parser.add_argument("--repeats", type=int, default=20, help="estimates per power (default 20)")
    parser.add_argument("--powers", default="1,0.8,0.6,0.5,0.4", help="the powers a, comma-separated, in (0, 1]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help=f"results (default {os.path.relpath(DEFAULT_JSON)}; none with --quick)")
    parser.add_argument("--quick", action="store_true", help="a chain of 8 trained for 20 steps, 64 draws")
    parser.add_argument("--train-steps", type=int, default=0, help="then train this many more steps per power")
    parser.add_argument("--train-powers", default="1,0.3", help="the powers of --train-steps, comma-separated")
    args = parser.parse_args(argv)
    if args.train_steps < 0:
        parser.error(f"--train-steps: expected a number >= 0, got {args.train_steps}")
    for name in ("iters", "samples", "repeats"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name}: expected a positive number, got {getattr(args, name)}")
    powers, train_powers = (parse_powers(parser, name, getattr(args, name)) for name in ("powers", "train_powers"))
    json_path = args.json if args.json or args.quick else DEFAULT_JSON
    sys.path.insert(0, HERE)
    from _common import write_result

    from quantax_lite.cli import main as command
    from quantax_lite.driver.run_folder import list_checkpoints
    from quantax_lite.recipes import load_run
    from quantax_lite.utils import tuning

    tuning.configure_x64()
    if args.run is not None and not (os.path.isdir(args.run) and list_checkpoints(args.run)):
        parser.error(f"--run: {args.run} is not a run folder with a checkpoint")
    t0 = time.perf_counter()
    options = QUICK_OPTIONS
    if args.run is None or args.train_steps:
        if args.quick:
            options, iters, samples, repeats = QUICK_OPTIONS, 20, 64, 4
        else:
            import accuracy

            if args.row not in accuracy.SYSTEMS:
                parser.error(f"--row: expected one of {', '.join(accuracy.SYSTEMS)}, got {args.row!r}")
            options = list(accuracy.SYSTEMS[args.row]["args"])
            if "--iters" in options:
                i = options.index("--iters")
                del options[i:i + 2]
            iters, samples, repeats = args.iters, args.samples, args.repeats
    if args.run is None:
        out = os.path.join(args.out, "quick" if args.quick else args.row)
        if command(["train", *options, "--iters", str(iters), "--out", out, "--no-progress", "--restart"]) != 0:
            raise SystemExit("sampling_power: quantax-lite train failed")
    else:
        out, samples, repeats = args.run, args.samples, args.repeats
    train_s = time.perf_counter() - t0
    loaded = load_run(out)
    t0 = time.perf_counter()
    result = compare(loaded.run, loaded.state.params, powers, samples, repeats, args.seed)
    result.update(run=out, options=loaded.run.recipe.config(),
                  iteration=int(loaded.state.iteration), train_s=round(train_s, 2),
                  probe_s=round(time.perf_counter() - t0, 2), n_samples=samples, repeats=repeats)
    print(table(result))
    if args.train_steps:
        result["training"] = train_on(options, out, os.path.join(args.out, "continued"), args.train_steps,
                                      train_powers)
    if json_path:
        write_result(json_path, result, "sampling_power", argv)
        print(f"wrote {json_path}")


if __name__ == "__main__":
    main()
