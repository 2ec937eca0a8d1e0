"""One VMC step of the default run with the dense convolution and with the library's
choice, built in one process and stepped alternately (a ratio that the load of a shared
machine affects alike).

    python benchmarks/step_forms.py [--lattice 6x6] [--hamiltonian j1j2] [--repeats 4] [--json PATH]
"""
from __future__ import annotations

import os
import sys

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import add_json_option, clock, load_average, results_file, script_parser, write_result  # noqa: E402
from quantax_lite import Recipe, build  # noqa: E402
from quantax_lite.utils import tuning  # noqa: E402
from quantax_lite.utils import limit_blas_threads  # noqa: E402


def main(argv=None):
    parser = script_parser(__doc__)
    parser.add_argument("--lattice", default="6x6")
    parser.add_argument("--hamiltonian", default="j1j2", choices=("heisenberg", "j1j2"))
    parser.add_argument("--forms", nargs="+", default=["dense", "auto"], choices=("auto",) + tuning.CONV_FORMS)
    parser.add_argument("--repeats", type=int, default=4)
    add_json_option(parser, results_file("step_forms.json"))
    args = parser.parse_args(argv)
    load_start = load_average()
    blas = limit_blas_threads()  # as `quantax-lite train` runs
    runs, first = {}, {}
    try:
        for form in args.forms:
            with tuning.override(conv_form=form):  # built and traced here
                r = build(Recipe(lattice=args.lattice, hamiltonian=args.hamiltonian))
                (state, metrics), first[form] = clock(lambda: r.vmc.step(r.state))  # noqa: B023 (called at once)
                chosen = tuning.conv_form(r.lattice.n_sites, r.model.base.backbone.channels, r.model.base.dtype)
                runs[form] = [r.vmc.step, state, chosen]
        times = {form: [] for form in runs}
        for _ in range(args.repeats):
            for form, (step, state, _) in runs.items():
                (state, metrics), seconds = clock(lambda: step(state))  # noqa: B023 (called at once)
                times[form].append(seconds)
                runs[form][1] = state
    finally:
        blas.restore_original_limits()
    rows = [dict(form=form, conv_form=runs[form][2], median_s=float(np.median(times[form])), steps_s=times[form],
                 first_step_s=first[form]) for form in runs]
    print(f"{args.lattice} {args.hamiltonian}, median of {args.repeats} alternating steps")
    print(f"{'asked':>10} {'conv form':>10} {'step':>9} {'ratio':>6}")
    for row in rows:
        print(f"{row['form']:>10} {row['conv_form']:>10} {row['median_s']:8.2f}s {rows[0]['median_s'] / row['median_s']:6.2f}")
    result = dict(lattice=args.lattice, hamiltonian=args.hamiltonian, repeats=args.repeats, rows=rows,
                  load_average_start=load_start, load_average_end=load_average(), jax=jax.__version__)
    write_result(args.json, result, __file__, argv, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
