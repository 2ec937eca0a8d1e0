"""Cost per sample of the registered networks at about equal size: the conv net and the ViT.

On ``--lattice`` (default 6x6), float32, projected on ``--symmetry`` (default the
translations; ``full`` adds the point group and spin inversion), the library's projection
as ``quantax-lite train`` builds it (``make_network``): the conv net (16 channels, depth 6:
28032 parameters on 6x6, a signed head) and the ViT (patches of 2x2 cells, dim 32, depth 4,
4 heads: 26160 parameters, a complex head; ``--quick``: smaller ones of each). Per network: its parameters, the images of each sample the
projection evaluates (the conv net one per class of elements related by translations by
whole cells; the ViT one per class related by translations by whole patches), the
forward pass's FLOPs per sample (XLA's count) and its time per sample on a batch of
``--batch`` (median of ``--repeats`` after a compiling call), and the ratio of each row's
time to the conv net's. The issue's target is a ViT within 2x of the conv net of equal size
on the chip.

    python benchmarks/network_cost.py [--lattice 6x6] [--symmetry translations|full] [--json [PATH]]
    python benchmarks/network_cost.py --quick     # 4x4, small networks, a smoke test
"""
from __future__ import annotations

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _common import (Table, add_json_option, load_average, output_path, platform_info, results_file,  # noqa: E402
                     script_parser, timed, write_result)

DEFAULT_JSON = results_file("network_cost.json")
NETWORKS = {"conv": ("signed", dict(channels=16, depth=6)), "vit": ("complex", dict(dim=32, depth=4, heads=4))}
QUICK = {"conv": dict(channels=4, depth=1), "vit": dict(dim=8, depth=1, heads=2)}


def parse_args(argv=None):
    p = script_parser(__doc__)
    p.add_argument("--quick", action="store_true", help="4x4, small networks, batch 256 (a smoke test)")
    p.add_argument("--lattice", default=None, help="default 6x6")
    p.add_argument("--symmetry", choices=("translations", "full"), default="translations")
    p.add_argument("--batch", type=int, default=None, help="samples per forward pass (default 4096)")
    p.add_argument("--repeats", type=int, default=None, help="timed calls (default 5)")
    add_json_option(p, DEFAULT_JSON, when="asked")
    args = p.parse_args(argv)
    for name, quick, full in (("lattice", "4x4", "6x6"), ("batch", 256, 4096), ("repeats", 2, 5)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.batch < 1 or args.repeats < 1:
        p.error(f"--batch / --repeats: expected positive ints, got {args.batch} / {args.repeats}")
    return args


def measure(name: str, args) -> dict:
    """One network's row: parameters, images per sample, FLOPs and seconds per sample."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from quantax_lite import Recipe
    from quantax_lite.geometry import symmetry as qsym
    from quantax_lite.models import Symmetrized, make_network

    lattice = Recipe(lattice=args.lattice).system()[0]
    group = qsym.translations(lattice) if args.symmetry == "translations" else qsym.full_symmetry(lattice)
    amplitude, options = NETWORKS[name]
    options = QUICK[name] if args.quick else options
    model = make_network(lattice, group, name, options, amplitude=amplitude, dtype=jnp.float32)
    s = jnp.asarray(np.random.default_rng(0).choice(np.array([-1, 1], np.int8), size=(args.batch, lattice.n_sites)))
    params = model.init(jax.random.key(0), s[:2])
    forward = jax.jit(model.apply)
    t = time.perf_counter()
    compiled = forward.lower(params, s).compile()
    compile_s = time.perf_counter() - t
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    median, best = timed(lambda: forward(params, s), args.repeats)
    return dict(network=name, amplitude=amplitude, options=options,
                n_params=int(sum(x.size for x in jax.tree_util.tree_leaves(params))),
                images=len(np.asarray(model.perms)) if isinstance(model, Symmetrized) else 1,
                group_elements=len(np.asarray(group.perms)), flops_per_sample=float(cost.get("flops", 0.0)) / args.batch,
                compile_s=compile_s, us_per_sample=1e6 * median / args.batch, best_us_per_sample=1e6 * best / args.batch)


def main(argv=None) -> int:
    args = parse_args(argv)
    load_start = load_average()
    rows = [measure(name, args) for name in NETWORKS]
    for row in rows:
        row["time_vs_conv"] = row["us_per_sample"] / rows[0]["us_per_sample"]
    table = Table(("network", -8), ("params", 8), ("images", 7), ("MFLOP/sample", 13), ("µs/sample", 10),
                  ("vs conv", 8))
    print(f"# {args.lattice}, {args.symmetry} ({rows[0]['group_elements']} elements), batch {args.batch}, "
          f"load average {load_start[0]:.1f}")
    print(table.header)
    print(table.rule)
    for r in rows:
        print(table.row(r["network"], r["n_params"], r["images"], f"{r['flops_per_sample'] / 1e6:.2f}",
                        f"{r['us_per_sample']:.1f}", f"{r['time_vs_conv']:.2f}"))
    path = output_path(args.quick, args.json, None)
    if path:
        result = dict(benchmark="network_cost", lattice=args.lattice, symmetry=args.symmetry, batch=args.batch,
                      repeats=args.repeats, rows=rows, load_average_start=load_start, load_average_end=load_average(),
                      **platform_info())
        write_result(path, result, __file__, argv, indent=1)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
