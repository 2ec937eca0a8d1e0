"""One Lanczos step on a trained state: sampled estimates against the dense values.

Trains one row of ``benchmarks/accuracy.py`` (its options, with ``--iters`` of its own), or
takes a finished run folder (``--run``), then on the trained network:

* dense (every configuration of the Sz sector, at most ``MAX_DENSE`` of them): the
  network's energy and variance, the energy of one and of two Lanczos steps (the 2 x 2
  and 3 x 3 Krylov problems), and how much of the variance sits on configurations of
  small |psi|^2 (``variance_share``: per threshold t, the share of the variance on
  configurations with |psi|^2 < t max|psi|^2, and their total probability);
* sampled, from the same fresh chains: the step estimated on samples of psi alone
  (``from_psi_samples``) and on samples of the Lanczos state itself (``sampled``:
  ``quantax_lite.observables.lanczos.lanczos_sampled``, what ``quantax-lite measure --lanczos`` does),
  each with its jackknife error bar and wall time.

    python benchmarks/lanczos.py [--row j1j2_4x4] [--iters 600] [--samples 4096] [--seed 0]
        [--run DIR] [--out DIR] [--json PATH] [--quick]

Results: ``benchmarks/results/lanczos.json`` (none with ``--quick`` unless ``--json`` is
given). ``--quick``: a chain of 8 trained for 20 steps, 256 samples.
"""
from __future__ import annotations

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # the harness (and accuracy.py's rows), beside this script
    sys.path.insert(0, HERE)

from _common import add_json_option, output_path, results_file, script_parser, stamp, write_result  # noqa: E402

DEFAULT_JSON = results_file("lanczos.json")
# configurations summed densely at most (the 4x4 Sz = 0 sector has 12,870)
MAX_DENSE = 200_000
THRESHOLDS = (1e-6, 1e-5, 1e-4, 1e-3)
QUICK_OPTIONS = ["--lattice", "chain:8", "--hamiltonian", "j1j2", "--J2", "0.5", "--channels", "4", "--depth", "1",
                 "--samples", "256", "--chains", "32", "--eval-samples", "256"]


def dense_lanczos(run, params) -> dict:
    """The network's energy and variance, one and two Lanczos steps, and where the variance
    lies, over every configuration of the run's Sz sector."""
    import jax.numpy as jnp
    import numpy as np
    import scipy.linalg

    from quantax_lite.hilbert.configurations import all_states

    n = run.lattice.n_sites
    states = all_states(n, 0 if run.hamiltonian.conserves_sz else None)
    if len(states) > MAX_DENSE:
        raise SystemExit(f"lanczos: {len(states)} configurations: too many for the dense values (at most {MAX_DENSE})")
    lp = np.concatenate([np.asarray(run.model.apply(params, jnp.asarray(states[i:i + 4096])))
                         for i in range(0, len(states), 4096)])
    psi = np.exp(lp - lp.real.max())
    psi /= np.linalg.norm(psi)
    h = run.hamiltonian.to_sparse(states)
    krylov = [psi]
    for _ in range(3):
        krylov.append(h @ krylov[-1])
    moment = lambda i, j: float(np.real(np.vdot(krylov[i], krylov[j])))  # noqa: E731  <psi|H^(i+j)|psi>
    m = [moment(0, 0), moment(0, 1), moment(1, 1), moment(1, 2), moment(2, 2), moment(2, 3)]
    energy = m[1]
    one = scipy.linalg.eigh([[m[1], m[2]], [m[2], m[3]]], [[m[0], m[1]], [m[1], m[2]]], eigvals_only=True)[0]
    two = scipy.linalg.eigh([[m[1], m[2], m[3]], [m[2], m[3], m[4]], [m[3], m[4], m[5]]],
                            [[m[0], m[1], m[2]], [m[1], m[2], m[3]], [m[2], m[3], m[4]]], eigvals_only=True)[0]
    p = np.abs(psi) ** 2
    residue = np.abs(krylov[1] - energy * psi) ** 2
    shares = [{"below": t, "configurations": int(np.sum(p < t * p.max())),
               "probability": float(np.sum(p[p < t * p.max()])),
               "variance_share": float(np.sum(residue[p < t * p.max()]) / np.sum(residue))} for t in THRESHOLDS]
    exact = run.recipe.reference_energy(run.lattice, run.hamiltonian)
    return {"n_configurations": int(len(states)), "energy": energy, "variance": m[2] - energy ** 2,
            "one_step": float(one), "two_steps": float(two),
            "relative_error": relative(energy, exact), "one_step_relative_error": relative(float(one), exact),
            "two_steps_relative_error": relative(float(two), exact), "variance_share": shares}


def sampled_lanczos(run, state, n_samples: int, seed: int) -> dict:
    """The step from fresh samples of psi alone and from samples of its own state."""
    import jax

    from quantax_lite.driver.draws import draw_samples
    from quantax_lite.observables.lanczos import lanczos_record, lanczos_sampled
    from quantax_lite.recipes import seed_key

    n_sites = run.lattice.n_sites
    exact = run.recipe.reference_energy(run.lattice, run.hamiltonian)
    chains = run.sampler.init(seed_key(seed), state.params, initial_states=state.sampler.states)
    t0 = time.perf_counter()
    samples = draw_samples(run.vmc, chains, state.params, n_samples, local_energies=False)[0]
    drawn_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    step, first = lanczos_sampled(run.hamiltonian, run.model.apply, state.params, run.sampler,
                                  jax.random.fold_in(seed_key(seed), 1), samples)
    return {"n_samples": n_samples, "draw_s": round(drawn_s, 2), "lanczos_s": round(time.perf_counter() - t0, 2),
            "sampled": lanczos_record(step, n_sites, exact, first=first),
            "from_psi_samples": lanczos_record(first, n_sites, exact)}


def relative(x: float, exact: float | None) -> float | None:
    return None if exact is None else (x - exact) / abs(exact)


def table(result: dict) -> str:
    d, s = result["dense"], result["sampled"]
    fmt = lambda x: "n/a" if x is None else f"{x:.3g}"  # noqa: E731
    rows = [("network (dense)", fmt(d["relative_error"]), ""),
            ("one Lanczos step (dense)", fmt(d["one_step_relative_error"]), ""),
            ("two Lanczos steps (dense)", fmt(d["two_steps_relative_error"]), ""),
            ("one step from samples of psi", fmt(s["from_psi_samples"]["relative_error"]),
             fmt(s["from_psi_samples"]["relative_error_error"])),
            ("one step from samples of psi_b", fmt(s["sampled"]["relative_error"]),
             fmt(s["sampled"]["relative_error_error"]))]
    lines = [f"{'energy':<32} {'relative error':>15} {'error bar':>10}"]
    lines += [f"{a:<32} {b:>15} {c:>10}" for a, b, c in rows]
    for share in d["variance_share"]:
        lines.append(f"|psi|^2 < {share['below']:g} max: {share['configurations']} configurations, probability "
                     f"{share['probability']:.2g}, {100 * share['variance_share']:.0f}% of the variance")
    return "\n".join(lines)


def main(argv=None):
    parser = script_parser(__doc__)
    parser.add_argument("--row", default="j1j2_4x4", help="the benchmarks/accuracy.py row to train (default j1j2_4x4)")
    parser.add_argument("--iters", type=int, default=600, help="training steps (default 600)")
    parser.add_argument("--samples", type=int, default=4096, help="fresh samples of psi, and as many of psi_b")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fresh chains (default 0)")
    parser.add_argument("--run", help="a finished run folder to measure instead of training one")
    parser.add_argument("--out", default="runs/lanczos", help="where the trained run goes (default runs/lanczos)")
    add_json_option(parser, DEFAULT_JSON, "full")
    parser.add_argument("--quick", action="store_true", help="a chain of 8 trained for 20 steps, 256 samples")
    args = parser.parse_args(argv)
    for name in ("iters", "samples"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name}: expected a positive number, got {getattr(args, name)}")
    json_path = output_path(args.quick, args.json, DEFAULT_JSON)
    from quantax_lite.cli import command as cli
    from quantax_lite.utils import tuning
    from quantax_lite.recipes import load_run
    from quantax_lite.driver.run_folder import list_checkpoints

    tuning.configure_x64()  # as the command: float64 solves on CPUs (a run's checkpoint holds them)

    if args.run is not None and not (os.path.isdir(args.run) and list_checkpoints(args.run)):
        parser.error(f"--run: {args.run} is not a run folder with a checkpoint")

    t0 = time.perf_counter()
    if args.run is None:
        if args.quick:
            options, iters, samples = QUICK_OPTIONS, 20, 256
        else:
            import accuracy

            if args.row not in accuracy.SYSTEMS:
                parser.error(f"--row: expected one of {', '.join(accuracy.SYSTEMS)}, got {args.row!r}")
            options, iters, samples = [a for a in accuracy.SYSTEMS[args.row]["args"]], args.iters, args.samples
            if "--iters" in options:
                i = options.index("--iters")
                del options[i:i + 2]
        out = os.path.join(args.out, "quick" if args.quick else args.row)
        status = cli.main(["train", *options, "--iters", str(iters), "--out", out, "--no-progress", "--restart"])
        if status != 0:
            raise SystemExit(f"lanczos: quantax-lite train exited with status {status}")
    else:
        out, samples = args.run, args.samples
    train_s = time.perf_counter() - t0
    loaded = load_run(out)
    run, state = loaded.run, loaded.state
    result = stamp({}, __file__, argv)  # command and meta first
    result.update({"run": out, "options": run.recipe.config(), "iteration": int(state.iteration),
                   "train_s": round(train_s, 2),
                   "exact_energy": run.recipe.reference_energy(run.lattice, run.hamiltonian),
                   "dense": dense_lanczos(run, state.params),
                   "sampled": sampled_lanczos(run, state, samples, args.seed)})
    print(table(result))
    if json_path:
        write_result(json_path, result, __file__, argv, indent=1)
        print(f"wrote {json_path}")


if __name__ == "__main__":
    main()
