"""Compile time against step time of the default VMC step, per speed choice of ``tuning``.

On an accelerator a short run is dominated by compilation (one TPU v5e chip: about 40 s
before the 4x4 default run's first step, 80 s for a 6x6 J1-J2 step, against milliseconds
per step). This script builds one recipe per system and, for each variant of the
``tuning`` record (speed choices only: every variant computes the same energies), times
the build, the first step (the library's compilation and chunk choice, thermalization
included) and the median of ``--repeats`` further steps. The variants
(see ``VARIANTS``): the packed local energies with 8, 3 or 2 packing sizes (every size is
a compiled copy of the network inside a ``lax.switch``) and the unpacked form (every
connection slot evaluated: one copy, more evaluations), the latter with the samples in one
piece or in chunks of about 65,536 connected configurations.

    python benchmarks/compile_probe.py                       # 4x4 Heisenberg, every variant
    python benchmarks/compile_probe.py --systems 4x4:heisenberg 6x6:j1j2 --variants packed3 unpacked
    python benchmarks/compile_probe.py --quick               # tiny, on the CPU (a smoke test)

Prints one line per row and writes JSON with ``--json`` (rewritten after every row). A row that would start after
``--deadline-s`` (seconds from the start) is recorded as skipped.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from _common import add_json_option, clock, platform_info, script_parser, write_result  # noqa: E402
from quantax_lite.utils import tuning  # noqa: E402

tuning.configure_x64()

VARIANTS = {
    "packed8": dict(pack_local_energy=True, packed_fractions=(0.25, 0.5, 0.625, 0.6875, 0.75, 0.8125, 0.875, 1.0)),
    "packed3": dict(pack_local_energy=True, packed_fractions=(0.5, 0.75, 1.0)),
    "packed2": dict(pack_local_energy=True, packed_fractions=(0.75, 1.0)),
    "unpacked": dict(pack_local_energy=False),
    "unpacked_whole": dict(pack_local_energy=False, local_energy_rows=None),
    "unpacked_rows64k": dict(pack_local_energy=False, local_energy_rows=65536),
}


def parse_args(argv=None):
    p = script_parser(__doc__)
    p.add_argument("--systems", nargs="+", default=["4x4:heisenberg"], help="LATTICE:HAMILTONIAN (j1j2: J2 = 0.5)")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--samples", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--deadline-s", type=float, default=None, help="no row starts after this many seconds")
    p.add_argument("--quick", action="store_true", help="chain:8, 64 samples, 2 repeats (CPU smoke test)")
    add_json_option(p, when="given", help="rewritten after every row")
    return p.parse_args(argv)


def measure(system: str, variant: str, samples: int, repeats: int) -> dict:
    """One row: seconds of the build, the first step (compilation included), a later step."""
    import jax

    from quantax_lite import Recipe, build

    lattice, _, hamiltonian = system.rpartition(":")
    recipe = Recipe(lattice=lattice, hamiltonian=hamiltonian, J2=0.5 if hamiltonian == "j1j2" else None,
                    samples=samples)
    row = dict(system=system, variant=variant, n_samples=samples, **{k: list(v) if isinstance(v, tuple) else v
                                                                   for k, v in VARIANTS[variant].items()})
    jax.clear_caches()
    record = tuning.override(**VARIANTS[variant])
    with record:
        r, row["build_s"] = clock(lambda: build(recipe), wait=False)
        (state, metrics), row["first_step_s"] = clock(lambda: r.vmc.step(r.state))  # compiles, thermalizes, steps
        sizes = r.vmc.chunk_sizes(state.params) if hasattr(r.vmc, "chunk_sizes") else None  # chosen by then
        row["chunks"] = None if sizes is None else [sizes[0], sizes[1]]
        times = []
        for _ in range(repeats):
            (state, metrics), seconds = clock(lambda: r.vmc.step(state))  # noqa: B023 (called at once)
            times.append(seconds)
    row["step_s"] = statistics.median(times)
    row["energy"] = float(jax.numpy.real(metrics["energy"]))
    row["n_params"] = int(r.n_params)
    row["until_first_step_s"] = row["build_s"] + row["first_step_s"]
    return row


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.systems, args.samples, args.repeats = ["chain:8:heisenberg"], 64, 2
    t0 = time.perf_counter()
    rows = []
    for system in args.systems:
        for variant in args.variants:
            if args.deadline_s is not None and time.perf_counter() - t0 > args.deadline_s:
                rows.append(dict(system=system, variant=variant, status="skipped", reason="deadline"))
                continue
            try:
                row = measure(system, variant, args.samples, args.repeats)
                row["status"] = "measured"
            except Exception as err:  # one failing variant must not lose the others
                row = dict(system=system, variant=variant, status="error", reason=f"{type(err).__name__}: {err}")
            rows.append(row)
            print(_line(row), flush=True)
            if args.json:  # after every row: a run cut short keeps what it measured
                result = dict(benchmark="compile_probe", rows=rows, **platform_info(),
                              wall_s=round(time.perf_counter() - t0, 1))
                write_result(args.json, result, __file__, argv, indent=1)
    return 0


def _line(row) -> str:
    if row.get("status") != "measured":
        return f"{row['system']:>16} {row['variant']:>9}  {row.get('status')}: {row.get('reason')}"
    return (f"{row['system']:>16} {row['variant']:>9}  build {row['build_s']:6.1f} s  "
            f"first step (compile included) {row['first_step_s']:6.1f} s  "
            f"step {1e3 * row['step_s']:8.2f} ms  E {row['energy']:.6f}")


if __name__ == "__main__":
    sys.exit(main())
