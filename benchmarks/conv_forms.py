"""The convolution forms of ``PeriodicConv`` on the default network, per size and precision.

For each lattice (default 4x4 and 6x6; the library's default network for its size,
symmetrized over translations, a positive output) and each form of
``quantax_lite.utils.tuning.CONV_FORMS``: the forward pass of ``--batch`` configurations (what
sampling and local energies evaluate) and the per-sample Jacobian of ``--jac-samples``
configurations in chunks of 64 (what the SR solve needs), median of ``--repeats``. Every
form computes the same function; ``tuning.conv_form`` picks one per size and dtype from
these figures. The lax form's float64 Jacobian is skipped above the dense width: XLA:CPU
lowers its per-sample weight gradient to a grouped convolution that takes tens of seconds.

    python benchmarks/conv_forms.py [--lattices 4 6] [--dtypes float32] [--forms dense banded] [--quick]
        [--json PATH]
"""
from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (Table, add_json_option, load_average, output_path, results_file, script_parser,  # noqa: E402
                     timed, write_result)
from quantax_lite import Square, make_conv_nqs, translations  # noqa: E402
from quantax_lite.utils import tuning  # noqa: E402
from quantax_lite.optimizer.log_derivatives import jacobian  # noqa: E402


def measure(L, dtype, form, batch, n_jac, repeats, rng):
    lattice = Square(L)
    model = make_conv_nqs(lattice, translations(lattice), dtype=dtype, amplitude="positive")
    s = jnp.asarray(rng.choice(np.array([-1, 1], np.int8), size=(batch, lattice.n_sites)))
    params = model.init(jax.random.PRNGKey(0), s[:1])
    with tuning.override(conv_form=form):  # traced here: fresh functions per form
        forward = jax.jit(lambda p, x: model.apply(p, x))
        jac = jax.jit(lambda p, x: jacobian(lambda q, y: model.apply(q, y), p, x, chunk_size=64))
        row = dict(lattice=lattice.name, dtype=np.dtype(dtype).name, form=form)
        row["forward_s"] = timed(lambda: forward(params, s), repeats)[0]
        slow = form == "lax" and np.dtype(dtype) == np.float64 and lattice.n_sites * model.base.channels > 1024
        row["jacobian_s"] = None if slow else timed(lambda: jac(params, s[:n_jac]), repeats)[0]
    row["chosen"] = tuning.conv_form(lattice.n_sites, model.base.channels, dtype) == form
    return row


def main(argv=None):
    parser = script_parser(__doc__)
    parser.add_argument("--lattices", type=int, nargs="*", default=[4, 6])
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--jac-samples", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="4x4 only, small batches, 1 repeat")
    parser.add_argument("--dtypes", nargs="*", choices=("float32", "float64"), default=["float32", "float64"])
    parser.add_argument("--forms", nargs="*", choices=tuning.CONV_FORMS, default=list(tuning.CONV_FORMS))
    add_json_option(parser, results_file("conv_forms.json"), "full")
    args = parser.parse_args(argv)
    if args.quick:
        args.lattices, args.batch, args.jac_samples, args.repeats = [4], 256, 64, 1
    rng = np.random.default_rng(0)
    rows = []
    columns = Table(("lattice", 7), ("dtype", 7), ("form", 10), ("forward", 10), ("jacobian", 10))
    print(columns.header + "  chosen")
    for L in args.lattices:
        for dtype in (getattr(jnp, name) for name in args.dtypes):
            for form in args.forms:
                r = measure(L, dtype, form, args.batch, args.jac_samples, args.repeats, rng)
                rows.append(r)
                jac = "skipped" if r["jacobian_s"] is None else f"{r['jacobian_s'] * 1e3:7.1f} ms"
                print(columns.row(r["lattice"], r["dtype"], form, f"{r['forward_s'] * 1e3:7.1f} ms", jac)
                      + f"  {'*' if r['chosen'] else ''}", flush=True)
    meta = dict(batch=args.batch, jac_samples=args.jac_samples, repeats=args.repeats, jax=jax.__version__,
                devices=[str(d) for d in jax.devices()], load_average=load_average())
    path = output_path(args.quick, args.json, results_file("conv_forms.json"))
    if path:  # (a --quick smoke run never replaces the committed results)
        write_result(path, {"meta": meta, "rows": rows}, __file__, argv, indent=2)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
