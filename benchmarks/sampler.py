"""Metropolis sampler throughput: sweeps/s and samples/s, chunked vs unchunked log_psi.

The network is the project's default for the lattice: ``quantax_lite.make_conv_nqs(lattice,
full_symmetry(lattice))`` (6x6: ConvResNet C=16, depth 4, k=3, 18752 parameters,
projected on the 576-element group, evaluated on 16 images per sample: merged over
translations), with the library's own speed choices (``quantax_lite.utils.tuning``). Every
proposal evaluates log_psi on the whole chain batch, so one sweep costs ``sweep_size``
(default n_sites) network evaluations of n_chains states.

    python benchmarks/sampler.py               # 6x6, 1024 and 8192 chains (a GPU job)
    python benchmarks/sampler.py --quick       # 4x4, few chains, short sweeps (< 1 min on CPU)
    python benchmarks/sampler.py --devices 8   # 8 simulated CPU devices

Reported per (n_chains, chunk_size): first-call time (compilation + one run), then the
best of ``--repeats`` timed calls of ``--sweeps`` recorded sweeps each (no thermalization):
sweeps/s, samples/s (= n_chains * sweeps/s) and configurations evaluated per second.
A configuration that fails (e.g. out of memory unchunked) is reported as failed.
"""
from __future__ import annotations

import os as _os
import sys as _sys

_sys.path.insert(0, _os.path.dirname(_os.path.abspath(__file__)))
from _common import (add_json_option, clock, output_path, results_file, simulate_cpu_devices, Table,  # noqa: E402
                     time_calls, write_result)

import argparse  # noqa: E402
import sys  # noqa: E402

COLUMNS = Table(("chains", 7), ("chunk", 6), ("sweep", 6), ("first call s", 13), ("call s", 9), ("sweeps/s", 9),
                ("samples/s", 10), ("evals/s", 10), ("accept", 7))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small, fast run (< 1 minute on CPU)")
    p.add_argument("--L", type=int, default=None, help="square lattice side (default 6; quick 4)")
    p.add_argument("--chains", type=int, nargs="+", default=None,
                   help="chain counts (default 1024 8192; quick 16 32)")
    p.add_argument("--chunk-size", type=int, default=None,
                   help="rows per device per log_psi call in the chunked runs (default 256; quick 8)")
    p.add_argument("--sweeps", type=int, default=None, help="recorded sweeps per timed call (default 2; quick 1)")
    p.add_argument("--sweep-size", type=int, default=None,
                   help="proposals per sweep (default n_sites; quick 4)")
    p.add_argument("--repeats", type=int, default=None,
                   help="timed calls per configuration, best kept (default 2; quick 1)")
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    p.add_argument("--devices", type=int, default=None, help="simulate this many CPU devices")
    add_json_option(p, results_file("sampler.json"), "full")
    args = p.parse_args(argv)
    quick = args.quick
    args.L = args.L or (4 if quick else 6)
    args.chains = args.chains or ([16, 32] if quick else [1024, 8192])
    args.chunk_size = args.chunk_size or (8 if quick else 256)
    args.sweeps = args.sweeps or (1 if quick else 2)
    args.sweep_size = args.sweep_size or (4 if quick else None)
    args.repeats = args.repeats or (1 if quick else 2)
    return args


def main(argv=None):
    args = parse_args(argv)
    simulate_cpu_devices(args.devices)  # before jax is imported
    import jax  # imported here: XLA_FLAGS must be set first

    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    from quantax_lite import Exchange, MetropolisSampler, Square, count_params, full_symmetry, make_conv_nqs
    from quantax_lite.sampler import acceptance_rate

    lattice = Square(args.L)
    symmetry = full_symmetry(lattice)
    model = make_conv_nqs(lattice, symmetry, dtype=getattr(jnp, args.dtype))
    n_dev = jax.device_count()
    dummy = jnp.ones((n_dev, lattice.n_sites), jnp.int8)
    params = model.init(jax.random.key(0), dummy)
    log_psi = model.apply
    rule = Exchange(lattice.bonds())

    info = dict(
        lattice=lattice.name, n_sites=lattice.n_sites, group_size=int(symmetry.n_elements),
        n_params=count_params(params), dtype=args.dtype, rule="Exchange(nearest-neighbour bonds)",
        device=str(jax.devices()[0].device_kind), platform=jax.devices()[0].platform,
        n_devices=n_dev, sweeps_per_call=args.sweeps, repeats=args.repeats, quick=args.quick,
    )
    print("sampler benchmark:", ", ".join(f"{k}={v}" for k, v in info.items()), flush=True)

    results = []
    for n_chains in args.chains:
        for chunk in (None, args.chunk_size):
            row = dict(n_chains=n_chains, chunk_size=chunk)
            try:
                sampler = MetropolisSampler(
                    log_psi, rule, n_chains, lattice.n_sites, sweep_size=args.sweep_size,
                    n_thermalize=0, chunk_size=chunk,
                )
                row["sweep_size"] = sampler.sweep_size
                state = sampler.init(jax.random.key(1), params)
                n_samples = n_chains * args.sweeps
                holder = [state]

                def call():
                    samples, _, holder[0] = sampler.sample(holder[0], params, n_samples)  # noqa: B023
                    return samples

                row["first_call_s"] = clock(call)[1]
                best = min(time_calls(call, args.repeats), default=float("inf"))
                state = holder[0]
                row.update(
                    call_s=best,
                    sweeps_per_s=args.sweeps / best,
                    samples_per_s=n_samples / best,
                    evals_per_s=n_samples * sampler.sweep_size / best,
                    acceptance=acceptance_rate(state),
                )
            except Exception as err:  # noqa: BLE001 - a benchmark reports, it does not crash
                row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
            results.append(row)
            print_row(row, header=len(results) == 1)

    path = output_path(args.quick, args.json, results_file("sampler.json"))  # (--quick: only where --json says)
    if path:
        write_result(path, dict(benchmark="sampler", info=info, results=results), __file__, argv, indent=2)
        print(f"wrote {path}")
    return results


def print_row(row, header=False):
    if header:
        print(COLUMNS.header)
    chunk = "none" if row["chunk_size"] is None else str(row["chunk_size"])
    if "error" in row:
        print(COLUMNS.row(row["n_chains"], chunk) + f"  failed: {row['error']}", flush=True)
        return
    print(COLUMNS.row(row["n_chains"], chunk, row["sweep_size"], f"{row['first_call_s']:.2f}", f"{row['call_s']:.3f}",
                      f"{row['sweeps_per_s']:.3f}", f"{row['samples_per_s']:.1f}", f"{row['evals_per_s']:.3g}",
                      f"{row['acceptance']:.3f}"), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
