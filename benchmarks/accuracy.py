"""Train on systems with known ground states and compare with the exact energies.

Targets (relative error): 4x4 Heisenberg <= 2e-5, 4x4 J1-J2 (J2 = 0.5) <= 1e-3,
Heisenberg chain L = 20 <= 1e-5, each within 15 minutes on a 2-core CPU; frustrated
lattices (issue 20): triangular 6x6 Heisenberg <= 1e-3 within 30 minutes (against the
36-site literature energy), kagome 2x3 (18 sites) Heisenberg <= 1e-3 within 15 minutes
(against exact diagonalization). Every
system runs `quantax-lite train` (through its public entry point
``quantax_lite.cli.main([...])``, which returns the exit status) with the options listed
below on top of the command's defaults (translation symmetry, float32 network, 1024
samples per step, learning rate 0.02; its own output directory under --out, resumed
when it holds checkpoints); its row is read from the run's ``summary.json``. Then the
table is printed and written as JSON. The final energies come from many fresh samples,
so that their error bars are small against the targets.

    python benchmarks/accuracy.py [--quick] [--only NAME] [--out DIR] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import time

from quantax_lite.run_folder import list_checkpoints

SYSTEMS = {
    # the W1 network (translations, float32, positive psi in the Marshall basis), longer
    "heisenberg_4x4": dict(
        target=2e-5,
        args=["--lattice", "4x4", "--hamiltonian", "heisenberg", "--iters", "1800", "--lr-half-life", "300",
              "--eval-samples", "524288"],
    ),
    # sign structure beyond Marshall's rule: the signed network (the command's default for
    # j1j2: a real psi with a learned sign, real Jacobian) with SPRING (MinSR with memory).
    # The earlier complex-phase network stalled at 6.6e-3 (it keeps the Marshall signs, see
    # docs/physics.md); 2048 samples per step and 1000 steps gave 1.22e-3 (docs/benchmarks.md).
    "j1j2_4x4": dict(
        target=1e-3,
        args=["--lattice", "4x4", "--hamiltonian", "j1j2", "--J2", "0.5",
              "--iters", "2600", "--lr-half-life", "500", "--diag-shift", "1e-3", "--sr-momentum", "0.9",
              "--eval-samples", "65536"],
    ),
    "heisenberg_chain20": dict(
        target=1e-5,
        args=["--lattice", "chain:20", "--hamiltonian", "heisenberg", "--iters", "1800",
              "--lr-half-life", "300", "--eval-samples", "524288"],
    ),
    # frustrated lattices: no Marshall sign (the command's default is off there), so the
    # command's complex network from a random start (16 channels, depth 4 by default) with
    # SPRING, as for J1-J2. Sized from the 6x6 J1-J2 step of vmc_scale.json (3.4 s): about
    # 450 steps in 30 minutes.
    "heisenberg_triangular6x6": dict(
        target=1e-3,
        args=["--lattice", "triangular:6x6", "--hamiltonian", "heisenberg", "--iters", "450",
              "--lr-half-life", "120", "--diag-shift", "1e-3", "--sr-momentum", "0.9", "--eval-samples", "32768"],
    ),
    # 6 cells of 3 sites. NOTE: the 18-site ground state lies at momentum b1/2 with spin
    # inversion -1 (docs/physics.md), which the command's networks cannot represent (k = 0
    # only: translation-invariant readout; the trivial sector of full reaches -7.7637
    # against -8.0483), so this row cannot meet its target until the recipe can choose a
    # momentum sector (the network can: make_conv_nqs with a momentum group).
    "heisenberg_kagome2x3": dict(
        target=1e-3,
        args=["--lattice", "kagome:2x3", "--hamiltonian", "heisenberg", "--symmetry", "full", "--iters", "1500",
              "--lr-half-life", "300", "--diag-shift", "1e-3", "--sr-momentum", "0.9", "--eval-samples", "65536"],
    ),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="30 iterations with 256 samples (a smoke test)")
    parser.add_argument("--only", choices=sorted(SYSTEMS), action="append", help="run only these systems")
    parser.add_argument("--out", default="runs/accuracy", help="parent directory of the runs")
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results", "accuracy.json"))
    args = parser.parse_args(argv)

    from quantax_lite import cli

    rows = []
    for name in args.only or SYSTEMS:
        spec = SYSTEMS[name]
        opts = list(spec["args"])
        if args.quick:
            opts += ["--iters", "30", "--samples", "256", "--eval-samples", "4096"]
        out = os.path.join(args.out, name + ("_quick" if args.quick else ""))
        resume = bool(list_checkpoints(out))  # continue a run that has checkpoints
        t0 = time.perf_counter()
        status = cli.main(["train", *opts, "--out", out, "--no-progress"] + (["--resume"] if resume else []))
        if status != 0:
            raise SystemExit(f"accuracy: {name}: quantax-lite train exited with status {status} (see above; "
                             f"its run folder is {out})")
        with open(os.path.join(out, "summary.json")) as fh:
            summary = json.load(fh)
        rows.append({
            "system": name, "target": spec["target"], "relative_error": summary["relative_error"],
            "relative_error_bar": summary["energy_error"] / abs(summary["exact_energy"]),
            "energy": summary["energy"], "energy_error": summary["energy_error"],
            "exact_energy": summary["exact_energy"], "v_score": summary["v_score"],
            "n_params": summary["n_params"], "iterations": summary["iterations"],
            "wall_time_s": time.perf_counter() - t0, "options": " ".join(opts),
            "met": summary["relative_error"] is not None and summary["relative_error"] <= spec["target"],
        })
        print(json.dumps(rows[-1]), flush=True)
    print()
    print(f"{'system':<20} {'rel. error':>20} {'target':>8} {'met':>4} {'minutes':>8}")
    for r in rows:
        rel = f"{r['relative_error']:.2e} ± {r['relative_error_bar']:.1e}"
        print(f"{r['system']:<20} {rel:>20} {r['target']:>8.0e} {str(r['met']):>4} "
              f"{r['wall_time_s'] / 60:>8.1f}")
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    if args.only and os.path.exists(args.json):  # keep the other systems' rows
        with open(args.json) as fh:
            kept = [r for r in json.load(fh) if r["system"] not in args.only]
        rows = sorted(kept + rows, key=lambda r: list(SYSTEMS).index(r["system"]) if r["system"] in SYSTEMS else 99)
    with open(args.json, "w") as fh:
        json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
