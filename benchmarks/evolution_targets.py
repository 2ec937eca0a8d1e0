"""Sampled time evolution on 4x4 against exact results: a real-time quench and imaginary time.

* ``quench``: the transverse-field Ising model on the periodic 4x4 square lattice in Pauli
  units, ``H = -J sum_<ij> σz_i σz_j - h sum_i σx_i`` (J = 1; the library's
  ``TransverseFieldIsing`` is in these units, so h_c ≈ 3.04 is passed as it is), from every
  spin along +x to h = 3.04 in real time (hbar = 1), up to t = 1. The network is the conv net
  with a complex head that ``quantax-lite evolve --initial-state x`` builds
  (``Recipe(lattice="4x4", hamiltonian="tfim", amplitude="complex")``; here 8 channels, depth
  2, projected on the full group), its readout set to zero: log psi constant, exactly the +x
  state at t = 0. TDVP with Metropolis samples (local flips), fixed-step RK4 and the
  signal-to-noise cut (:class:`Quench` has the settings). At
  ``points`` evenly spaced times, ⟨σx⟩ (site mean) and the energy from fresh samples of the
  state (``measure_samples``, drawn from a copy of its chains), against the exact propagator
  (``quantax_lite.exact.exact_evolution``).
* ``imaginary``: imaginary-time TDVP of the 4x4 Heisenberg model (spin-1/2 units, the Marshall
  basis, the default network with a positive amplitude) from the recipe's random
  initialization to ``tau_end``; the final energy from fresh samples and, exactly, summed over
  every configuration of Sz = 0, against exact diagonalization.

    python benchmarks/evolution_targets.py [--only quench|imaginary] [--quick] [--json [PATH]]

``--quick``: a smoke test (a tiny network, few samples, short times), not the targets;
nothing is written unless ``--json PATH`` is given. Results:
``benchmarks/results/evolution_targets.json`` (with ``--json`` alone).
``tests/test_benchmark_scripts.py`` runs ``--quick`` (slow).
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
from _common import (Table, add_json_option, command_line, output_path, results_file, script_parser,  # noqa: E402
                     write_result)

DEFAULT_JSON = results_file("evolution_targets.json")
H_C = 3.04  # the 2D TFIM's critical field in Pauli units (3.044)
SX_TOLERANCE = 2e-2  # on the site mean <σx>(t), up to t = 1
IMAGINARY_TOLERANCE = 1e-3  # relative error of the energy reached in imaginary time


@dataclasses.dataclass(frozen=True)
class Quench:
    """Settings of the sampled 4x4 quench (real time)."""

    channels: int = 8
    depth: int = 2  # (depth 1 does not hold the motion even with exact sums: research log)
    samples: int = 4096  # per evaluation of the equation (every Runge-Kutta stage draws its own)
    chains: int = 1024  # (4096, one sweep a chain and stage, with sampling_power 0.5: worse; research log)
    dt: float = 0.01  # RK4 step after the start
    start_dt: float = 0.002  # RK4 step up to start_t: from the +x state only the readout moves at first
    start_t: float = 0.02
    rcond: float = 1e-10  # pseudo-inverse cutoff, relative to the largest eigenvalue of S
    snr_cutoff: float | None = 2.0  # a number: SignalToNoise(snr_cutoff, rcond); None: PseudoInverse(rcond)
    t_end: float = 1.0
    points: int = 10  # measurement times after t = 0
    measure_samples: int = 8192
    h: float = H_C
    sampling_power: float = 1.0  # samples of |psi|^(2a), each weighing |psi|^(2-2a) (measurements: |psi|^2)
    symmetry: str = "full"  # the group the network is projected on ("full": with the point group)
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class Imaginary:
    """Settings of the sampled imaginary-time evolution of the 4x4 Heisenberg model."""

    channels: int = 8
    depth: int = 2
    samples: int = 1024
    chains: int = 512
    integrator: str = "heun"
    dt: float = 0.05
    diag_shift: float = 1e-4
    tau_end: float = 8.0
    points: int = 8
    measure_samples: int = 16384
    seed: int = 0


QUICK_QUENCH = Quench(channels=2, depth=1, samples=128, chains=64, dt=0.05, start_dt=0.01, start_t=0.05, t_end=0.2,
                      points=2, measure_samples=512)
QUICK_IMAGINARY = Imaginary(channels=2, depth=1, samples=128, chains=64, dt=0.05, tau_end=0.2, points=2,
                            measure_samples=512)


def _zero_readout(params):
    """``params`` with every readout weight 0: log psi constant, the +x state (as
    ``quantax-lite evolve --initial-state x``)."""
    import jax
    import jax.numpy as jnp

    return jax.tree_util.tree_map_with_path(
        lambda p, x: jnp.zeros_like(x) if "readout" in jax.tree_util.keystr(p) else x, params)


def _fresh(run, state, n_samples: int, operators: dict) -> dict:
    """``{name: (mean, error)}`` of ``operators`` from ``n_samples`` fresh samples drawn from a
    copy of ``state``'s chains (the evolution's own chains do not move)."""
    from quantax_lite import expect

    from quantax_lite.sampler import of_psi_squared

    sampler, again = of_psi_squared(run.sampler)  # an evolution on samples of |psi|^(2a): measured on |psi|^2
    samples, log_psi_s, _ = sampler.sample(state.sampler, state.params, n_samples, thermalize=again or None)
    out = {}
    for name, op in operators.items():
        stats = expect(run.model.apply, state.params, samples, op, n_chains=run.sampler.n_chains,
                       log_psi_samples=log_psi_s, real=True)
        out[name] = (float(stats.mean), float(stats.error_of_mean))
    return out


def quench(s: Quench = Quench(), progress: bool = False) -> dict:
    """The sampled 4x4 quench against the exact propagator (``s``: :class:`Quench`). Each
    measurement is printed to stderr as it is made (a run is an hour on two CPU cores);
    ``progress``: also the evolution's progress bars."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from quantax_lite import Recipe, build, sx
    from quantax_lite.evolution import RK4, TDVP, PseudoInverse, SignalToNoise, evolve
    from quantax_lite.exact import exact_evolution, exact_observables
    from quantax_lite.hilbert import all_states

    t_start = time.perf_counter()
    run = build(Recipe(lattice="4x4", hamiltonian="tfim", h=s.h, amplitude="complex", marshall=False,
                       channels=s.channels, depth=s.depth, samples=s.samples, chains=s.chains,
                       sampling_power=s.sampling_power, symmetry=s.symmetry, seed=s.seed))
    n = run.lattice.n_sites
    sigma_x = sum(sx(i, n) for i in range(n)) * (2.0 / n)  # site mean of σx = 2 Sx
    times = np.linspace(0.0, s.t_end, s.points + 1)
    vectors, _ = exact_evolution(run.hamiltonian, np.ones(2**n), times, total_sz=None)
    exact = exact_observables({"energy": run.hamiltonian, "sx": sigma_x}, vectors, all_states(n, None))
    regularization = PseudoInverse(s.rcond) if s.snr_cutoff is None else SignalToNoise(s.snr_cutoff, s.rcond)
    tdvp = TDVP(run.hamiltonian, run.sampler, n_samples=s.samples, integrator=RK4(), regularization=regularization)
    state = tdvp.init(_zero_readout(run.state.params), jax.random.key(s.seed), dt=s.start_dt)
    ops = {"sx": sigma_x, "energy": run.hamiltonian}
    rows, records = [], []
    for t in times:
        if float(state.t) < s.start_t <= t:
            state, recs = evolve(tdvp, state, s.start_t, progress=progress)
            records += recs
            state = state._replace(dt=jnp.asarray(s.dt, state.dt.dtype))
        if t > 0:
            state, recs = evolve(tdvp, state, float(t), progress=progress)
            records += recs
        m = _fresh(run, state, s.measure_samples, ops)
        rows.append(dict(t=float(t), sx=m["sx"][0], sx_error=m["sx"][1], energy=m["energy"][0],
                         energy_error=m["energy"][1]))
        k = len(rows) - 1  # progress of a long run: each measurement as it is made
        print(f"quench t = {t:.2f}: <σx> {m['sx'][0]:.5f} ± {m['sx'][1]:.1e} (exact {exact['sx'][k]:.5f}), "
              f"E {m['energy'][0]:.4f} ± {m['energy'][1]:.1e} (exact {exact['energy'][k]:.4f}), "
              f"{len(records)} steps, {time.perf_counter() - t_start:.0f} s", file=sys.stderr, flush=True)
    wall = time.perf_counter() - t_start
    for row, e_x, sx_x in zip(rows, exact["energy"], exact["sx"]):
        row.update(exact_energy=float(e_x), exact_sx=float(sx_x), d_sx=row["sx"] - float(sx_x))
    e0 = float(exact["energy"][0])
    drift = [(r["energy"] - e0) / r["energy_error"] for r in rows[1:]]
    return dict(settings=dataclasses.asdict(s), n_params=int(run.n_params), steps=len(records),
                rows=rows, max_d_sx=float(max(abs(r["d_sx"]) for r in rows)),
                max_sx_error=float(max(r["sx_error"] for r in rows)),
                energy_exact=e0, max_energy_drift_in_error_bars=float(max(abs(d) for d in drift)),
                energy_chi2=float(sum(d * d for d in drift)), energy_points=len(drift),
                max_residual=float(max(r["residual"] for r in records)), wall_s=round(wall, 1),
                tolerance=SX_TOLERANCE)


def imaginary(s: Imaginary = Imaginary(), progress: bool = False) -> dict:
    """Sampled imaginary time to the 4x4 Heisenberg ground state (``s``: :class:`Imaginary`)."""
    import jax
    import numpy as np

    from quantax_lite import Recipe, build, exact_expectation
    from quantax_lite.evolution import RK4, TDVP, Euler, Heun, Shift, evolve

    t_start = time.perf_counter()
    run = build(Recipe(lattice="4x4", channels=s.channels, depth=s.depth, samples=s.samples, chains=s.chains,
                       seed=s.seed))
    e0 = float(run.recipe.reference_energy(run.lattice, run.hamiltonian))
    integrator = {"euler": Euler, "heun": Heun, "rk4": RK4}[s.integrator]()
    tdvp = TDVP(run.hamiltonian, run.sampler, n_samples=s.samples, integrator=integrator,
                regularization=Shift(s.diag_shift), imaginary=True)
    state = tdvp.init(run.state.params, jax.random.key(s.seed), dt=s.dt)
    curve = [dict(tau=0.0, exact_energy=float(exact_expectation(run.hamiltonian, run.model.apply, state.params)))]
    records = []
    for tau in np.linspace(0.0, s.tau_end, s.points + 1)[1:]:
        state, recs = evolve(tdvp, state, float(tau), progress=progress)
        records += recs
        curve.append(dict(tau=float(tau), exact_energy=float(exact_expectation(run.hamiltonian, run.model.apply,
                                                                                 state.params))))
    wall = time.perf_counter() - t_start
    energy, error = _fresh(run, state, s.measure_samples, {"energy": run.hamiltonian})["energy"]
    final = curve[-1]["exact_energy"]
    return dict(settings=dataclasses.asdict(s), n_params=int(run.n_params), steps=len(records), exact_e0=e0,
                curve=curve, step_energies=[r["energy"] for r in records],
                final_energy=energy, final_energy_error=error, relative_error=(energy - e0) / abs(e0),
                relative_error_error=error / abs(e0), final_exact_energy=final,
                exact_relative_error=(final - e0) / abs(e0), wall_s=round(wall, 1), tolerance=IMAGINARY_TOLERANCE)


def table(result: dict) -> str:
    lines = []
    if "quench" in result:
        q = result["quench"]
        t = Table(("t", 5), ("<σx>", 8), ("±", 7), ("exact", 8), ("Δ", 8), ("E", 9), ("±", 6), ("E exact", 9))
        lines += [f"4x4 TFIM quench to h = {q['settings']['h']}: {q['n_params']} parameters, {q['steps']} steps, "
                  f"{q['wall_s']:.0f} s", t.header, t.rule]
        lines += [t.row(f"{r['t']:.2f}", f"{r['sx']:.4f}", f"{r['sx_error']:.4f}", f"{r['exact_sx']:.4f}",
                        f"{r['d_sx']:+.4f}", f"{r['energy']:.3f}", f"{r['energy_error']:.3f}",
                        f"{r['exact_energy']:.3f}") for r in q["rows"]]
        lines.append(f"max |Δ<σx>| {q['max_d_sx']:.2e} (target {q['tolerance']:g}); energy: max |E - E(0)| "
                     f"{q['max_energy_drift_in_error_bars']:.2f} error bars, chi2 {q['energy_chi2']:.1f} over "
                     f"{q['energy_points']} points")
    if "imaginary" in result:
        m = result["imaginary"]
        lines.append(f"4x4 Heisenberg, imaginary time to tau = {m['settings']['tau_end']:g}: {m['n_params']} "
                     f"parameters, {m['steps']} steps, {m['wall_s']:.0f} s")
        lines += [f"  tau {c['tau']:5.2f}: E (exact sum) {c['exact_energy']:.5f}" for c in m["curve"]]
        lines.append(f"E = {m['final_energy']:.5f} ± {m['final_energy_error']:.5f} (exact E0 {m['exact_e0']:.5f}): "
                     f"relative error {m['relative_error']:.2e} ± {m['relative_error_error']:.1e}; exact sum of the "
                     f"network {m['exact_relative_error']:.2e} (target {m['tolerance']:g})")
    return "\n".join(lines)


def parse_args(argv=None):
    parser = script_parser(__doc__)
    parser.add_argument("--only", choices=("quench", "imaginary"), help="one of the two (default both)")
    parser.add_argument("--quick", action="store_true", help="a smoke test: tiny network, few samples, short times")
    add_json_option(parser, DEFAULT_JSON, "asked")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)  # float64 solves on CPUs, as the command
    result = {}
    if args.only in (None, "quench"):
        result["quench"] = quench(QUICK_QUENCH if args.quick else Quench())
    if args.only in (None, "imaginary"):
        result["imaginary"] = imaginary(QUICK_IMAGINARY if args.quick else Imaginary())
    print(table(result))
    path = output_path(args.quick, args.json, None)
    if path:
        for part in result.values():  # each part names the command that made it
            part["command"] = command_line(__file__, argv)
        if args.only and os.path.isfile(path):  # the other part, measured before, is kept
            with open(path) as fh:
                kept = {k: v for k, v in json.load(fh).items() if k in ("quench", "imaginary")}
            result = {**kept, **result}
        write_result(path, result, __file__, argv)
        print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
