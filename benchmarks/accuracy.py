"""Train on systems with known ground states and compare with the exact energies.

Targets (relative error): 4x4 Heisenberg <= 2e-5, 4x4 J1-J2 (J2 = 0.5) <= 1e-3,
Heisenberg chain L = 20 <= 1e-5, each within 15 minutes on a 2-core CPU. Every
system runs `quantax-lite train` with the options listed below (its own output
directory under --out), then the table is printed and written as JSON.

    python benchmarks/accuracy.py [--quick] [--only NAME] [--out DIR] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import time

SYSTEMS = {
    "heisenberg_4x4": dict(
        target=2e-5,
        args=["--lattice", "4x4", "--hamiltonian", "heisenberg", "--symmetry", "full", "--precision", "f64",
              "--samples", "4096", "--iters", "400", "--lr", "0.03", "--diag-shift", "1e-4",
              "--channels", "8", "--depth", "2"],
    ),
    "j1j2_4x4": dict(
        target=1e-3,
        args=["--lattice", "4x4", "--hamiltonian", "j1j2", "--J2", "0.5", "--symmetry", "full",
              "--precision", "f64", "--samples", "2048", "--iters", "400", "--lr", "0.03",
              "--diag-shift", "1e-3", "--channels", "8", "--depth", "2"],
    ),
    "heisenberg_chain20": dict(
        target=1e-5,
        args=["--lattice", "chain:20", "--hamiltonian", "heisenberg", "--symmetry", "full", "--precision", "f64",
              "--samples", "4096", "--iters", "400", "--lr", "0.03", "--diag-shift", "1e-4",
              "--channels", "8", "--depth", "2"],
    ),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="30 iterations with 256 samples (a smoke test)")
    parser.add_argument("--only", choices=sorted(SYSTEMS), action="append", help="run only these systems")
    parser.add_argument("--out", default="runs/accuracy", help="parent directory of the runs")
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results", "accuracy.json"))
    args = parser.parse_args(argv)

    from quantax_lite.cli import build_parser, train

    rows = []
    for name in args.only or SYSTEMS:
        spec = SYSTEMS[name]
        opts = list(spec["args"])
        if args.quick:
            opts += ["--iters", "30", "--samples", "256", "--eval-samples", "2048"]
        out = os.path.join(args.out, name + ("_quick" if args.quick else ""))
        resume = os.path.exists(os.path.join(out, "checkpoint.npz"))
        cli_args = build_parser().parse_args(["train", *opts, "--out", out, "--no-progress"]
                                             + (["--resume"] if resume else []))
        t0 = time.perf_counter()
        summary = train(cli_args)
        rows.append({
            "system": name, "target": spec["target"], "relative_error": summary["relative_error"],
            "energy": summary["energy"], "energy_error": summary["energy_error"],
            "exact_energy": summary["exact_energy"], "v_score": summary["v_score"],
            "n_params": summary["n_params"], "iterations": summary["iterations"],
            "wall_time_s": time.perf_counter() - t0, "options": " ".join(opts),
            "met": summary["relative_error"] is not None and summary["relative_error"] <= spec["target"],
        })
        print(json.dumps(rows[-1]), flush=True)
    print()
    print(f"{'system':<20} {'rel. error':>10} {'target':>8} {'met':>4} {'minutes':>8}")
    for r in rows:
        print(f"{r['system']:<20} {r['relative_error']:>10.2e} {r['target']:>8.0e} {str(r['met']):>4} "
              f"{r['wall_time_s'] / 60:>8.1f}")
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as fh:
        json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
