"""One VMC step of the library's default network against lattice size: time, FLOPs, GFLOP/s.

Every row is ``quantax_lite.build(Recipe(lattice=L x L, hamiltonian=..., symmetry=...,
samples=...))`` with the recipe's defaults otherwise (J2 = 0.5 for j1j2; the network for
its size: 8 channels and depth 2 up to 20 sites, 16 channels and depth 4 above, 3x3
kernels; float32 network, float64 SR solve; one chain per sample; the library's
convolution form and chunks). Default: lattices 4x4 6x6 8x8 10x10, Hamiltonians
heisenberg and j1j2, symmetries translations and full, 1024 samples. For each row:

* the fused step: the driver's step (``jax.jit(vmc.step)``, the one program of
  sample -> local energies -> Jacobian -> SR -> update) compiled ahead of time, run once
  (thermalizing the chains), then the median of ``--repeats`` steps after one more;
* the breakdown: sampling, local energies, the Jacobian and the solve, each compiled and
  timed alone (``_common.step_parts``, the parts ``benchmarks/vmc_step.py`` times);
* the FLOPs of each compiled program and of the step, counted from its jaxpr with every
  loop at its trip count (``_common.jaxpr_cost``), and XLA's own count
  (``compiled.cost_analysis()["flops"]``, a dict in jax 0.10.2, per device), which counts
  each loop body once and so misses most of the sampler's and the chunks' work; GFLOP/s
  (from the former, all devices together) and their fraction of this machine's matmul
  peak (times the device count);
* compile times (and the time the driver takes to choose its chunks, which with
  ``chunk_size="auto"`` compiles the chunked parts), n_params, n_sites, the conv form
  (``tuning.conv_form``), the chunks, the load average at start and end.

The peak is measured in the same run: dense float32 matrix products (jax's default
precision) of the shapes of the network's own largest matrix products (read from the
steps' jaxprs) and one large square one; the best is "peak" (its shape is recorded).

Budget. Before a row runs, its cost is estimated: from an earlier row (the same
Hamiltonian and symmetry if measured, else the last one) as compile time x (depth ratio)
+ run time x (work ratio: samples x images x n_sites x channels^2 x depth x (sweep +
connections)); for the first row, from its build (a row costs at least 3 builds), then
from its compile and first two steps. A row whose estimate exceeds ``--budget-s`` is
reported as skipped, with the estimate and its basis, in the table and the JSON.

Scaling. At fixed samples and network, one evaluation costs O(n_sites * C^2 * depth);
sampling makes n_sites / 2 proposals per sample and the local energies evaluate O(n_sites)
connected configurations per sample, so the step's FLOPs grow as n_sites^2 (the Jacobian
as n_sites, the MinSR solve not at all: the conv network's parameters do not depend on
n_sites). The default network widens above 20 sites (C 8 -> 16, depth 2 -> 4: 8x per
evaluation), so the plot's ideal line is n_sites^2 * C^2 * depth through each line's
smallest measured point. Where the library evaluates a convolution in its dense form
(one block-circulant matrix product per layer; ``tuning.conv_form`` picks it up to a
width, in float32 4x4 and 6x6 today) a layer costs (n_sites C)^2 instead of
n_sites C^2 k^2, n_sites / k^2 times the FLOPs (4x at 6x6) in fewer, larger products,
so the counted FLOPs do not follow the line across a change of form; the ``conv_form``
column says which form each row used.

    python benchmarks/vmc_scale.py [--lattices 4 6 8 10] [--hamiltonians heisenberg j1j2]
        [--symmetries translations full] [--samples 1024] [--repeats 5] [--budget-s 300]
        [--no-breakdown] [--json PATH] [--plot PATH] [--quick]

Writes a table to stdout, JSON (``--json``, default benchmarks/results/vmc_scale.json) and a
log-log plot (``--plot``, default benchmarks/results/vmc_scale.png); ``--quick`` (2x4 and
4x4, heisenberg, translations, 32 samples, 1 repeat: about 35 s on 2 cores)
writes neither unless ``--json`` / ``--plot`` are given.
"""
from __future__ import annotations

import itertools
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # the harness, beside this script
    sys.path.insert(0, HERE)

from _common import (add_json_option, chunk_sizes, clock, compile_part, error_text, load_average,  # noqa: E402
                     matmul_peak, on_accelerator, output_path, parse_dot, platform_info, results_file, script_parser,
                     step_parts, timed, write_result)

DEFAULT_JSON = results_file("vmc_scale.json")
DEFAULT_PLOT = results_file("vmc_scale.png")
PARTS = ("sampling", "local_energy", "jacobian", "solve")
QUICK = dict(lattices=["2x4", "4x4"], hamiltonians=["heisenberg"], symmetries=["translations"], samples=32,
             repeats=1, square=256)


def lattice_name(text) -> str:
    """'6' -> '6x6'; '4x2' stays."""
    text = str(text).strip()
    return f"{text}x{text}" if text.isdigit() else text


def recipe_for(lattice: str, hamiltonian: str, symmetry: str, samples: int):
    """The recipe of one row: the defaults, with J2 = 0.5 for j1j2."""
    from quantax_lite import Recipe

    return Recipe(lattice=lattice_name(lattice), hamiltonian=hamiltonian, J2=0.5 if hamiltonian == "j1j2" else None,
                  symmetry=symmetry, samples=samples)


def work_model(recipe) -> dict:
    """What decides a row's run time, without building it: the default architecture, the
    network images per sample, the Hamiltonian's connections; ``units`` = samples x images x
    n_sites x C^2 x k^2 x depth x (n_sites/2 sweep + max_conn + 4)."""
    from quantax_lite import make_conv_nqs
    from quantax_lite.models import default_conv_architecture

    lattice, ham, group = recipe.system()
    arch = default_conv_architecture(lattice)
    images = 1 if group is None else int(getattr(make_conv_nqs(lattice, group, dtype=np.float32), "n_elements", 1))
    n = lattice.n_sites
    units = (recipe.samples * images * n * arch["channels"] ** 2 * arch["kernel_size"] ** 2 * max(1, arch["depth"])
             * (max(1, n // 2) + ham.max_conn + 4))
    return dict(n_sites=n, channels=arch["channels"], depth=arch["depth"], kernel_size=arch["kernel_size"],
                n_images=images, max_conn=int(ham.max_conn), units=float(units))


def estimate(prior: dict, model: dict) -> tuple[float, str]:
    """Seconds a row will take, from an earlier row's ``{compile_s, run_s, units, depth, label}``."""
    c = max(1.0, max(1, model["depth"]) / max(1, prior["depth"]))
    w = model["units"] / prior["units"]
    est = prior["compile_s"] * c + prior["run_s"] * w
    return est, (f"from {prior['label']}: compile {prior['compile_s']:.1f} s x {c:.1f} + run {prior['run_s']:.2f} s x "
                 f"work {w:.3g}")


def _kind(row):
    return row["hamiltonian"], row["symmetry"]


def _skip(row, est, basis, limit, what):
    row.update(status="skipped", estimate_s=est, estimate_basis=basis,
               reason=f"estimated {est:.0f} s > {what} {limit:.0f} s ({basis})")
    return row


def measure_row(lattice, hamiltonian, symmetry, samples, repeats, budget_s, priors, deadline=None, breakdown=True):
    """One row (a dict; ``status`` measured / skipped / error). ``priors``: the estimate
    bases of earlier rows (appended to)."""
    import jax

    from quantax_lite import build
    from quantax_lite.models.conv import conv_form_for

    t_row = time.perf_counter()
    recipe = recipe_for(lattice, hamiltonian, symmetry, samples)
    model = work_model(recipe)
    row = dict(lattice=lattice_name(lattice), hamiltonian=hamiltonian, J2=recipe.J2, symmetry=symmetry,
               n_samples=samples, repeats=repeats, **{k: v for k, v in model.items() if k != "units"})
    label = f"{row['lattice']} {hamiltonian} {symmetry}"
    limit, what = budget_s, "budget"
    if deadline is not None and deadline - time.time() < limit:
        limit, what = max(0.0, deadline - time.time()), "time left"
    same = [p for p in priors if p["kind"] == _kind(row) and p["measured"]]
    prior = (same or priors or [None])[-1]
    if prior is not None:
        est, basis = estimate(prior, model)
        if est > limit:
            return _skip(row, est, basis, limit, what)

    def basis(compile_s, run_s, measured):
        priors.append(dict(kind=_kind(row), label=label, compile_s=compile_s, run_s=run_s, units=model["units"],
                           depth=model["depth"], measured=measured))

    t0 = time.perf_counter()
    r, build_s = clock(lambda: build(recipe), wait=False)
    row["build_s"] = build_s
    if prior is None and 3 * build_s > limit:
        basis(3 * build_s, 0.0, False)
        return _skip(row, 3 * build_s, f"its build took {build_s:.1f} s; a row costs at least 3 builds", limit, what)
    vmc = r.vmc
    base = getattr(getattr(r.model, "base", r.model), "backbone", None)  # the conv trunk: its size as built
    if not all(hasattr(base, a) for a in ("channels", "depth", "kernel_size", "lattice_shape", "dtype")):
        raise TypeError(f"vmc_scale: expected the conv network's trunk at model.base.backbone, found "
                        f"{type(base).__name__} (the network's modules changed: update measure_row here)")
    p0 = r.state.params
    (state, metrics), first_s = clock(lambda: vmc.step(r.state))  # as a run: compiles (chunks chosen), thermalizes
    row["first_step_s"] = first_s
    le_chunk, jac_chunk = chunk_sizes(vmc, p0)  # chosen by the first step
    row.update(n_params=int(r.n_params), n_images=int(getattr(r.model, "n_elements", 1)),
               channels=int(base.channels), depth=int(base.depth), kernel_size=int(base.kernel_size),
               conv_form=conv_form_for(tuple(base.lattice_shape), base.kernel_size, base.channels, base.dtype),
               amplitude=recipe.amplitude_kind(r.hamiltonian), n_chains=int(vmc.sampler.n_chains),
               sweep_size=int(vmc.sampler.sweep_size), local_energy_chunk=le_chunk, jacobian_chunk=jac_chunk)

    step = {}
    compiled = compile_part(vmc.step_program(state), (state,), step)  # the program the first step compiled
    step["compile_s"] = first_s  # compilation dominates the first step; the cached program re-lowers in ms
    (state, metrics), second_s = clock(lambda: compiled(state))
    step_compile = step["trace_s"] + step["compile_s"]
    elapsed = time.perf_counter() - t0
    est = elapsed + repeats * second_s + (step_compile + (repeats + 1) * second_s if breakdown else 0.0)
    if est > limit:
        row.update(step={k: v for k, v in step.items() if k != "dots"}, probe_step_s=second_s)
        basis(build_s + 2 * step_compile, first_s + (2 * repeats + 2) * second_s, False)
        return _skip(row, est, f"probe: build {build_s:.1f} s, compile {step_compile:.1f} s, first step "
                     f"{first_s:.2f} s, step {second_s:.3f} s", limit, what)
    times = []
    for _ in range(repeats):
        (state, metrics), seconds = clock(lambda: compiled(state))  # noqa: B023 (called at once)
        times.append(seconds)
    step.update(time_s=statistics.median(times), min_s=min(times))
    row["energy_per_site"] = float(jax.numpy.real(metrics["energy"])) / r.lattice.n_sites
    dots = step.pop("dots")
    step["top_dots"] = sorted(([k, v] for k, v in dots.items() if "float32" in k), key=lambda kv: -kv[1])[:4]
    row["step"] = step
    compile_total = build_s + step_compile
    if breakdown:
        records = {}

        def prepare(name, fn, args):
            records[name] = {}
            return compile_part(fn, args, records[name])

        fns, values = step_parts(vmc, state, samples, prepare)
        row["jacobian_dtype"] = str(values["jac"].dtype)
        for name in PARTS:
            fn, args = fns[name]
            rec = records[name]
            rec.pop("dots", None)
            rec["time_s"], rec["min_s"] = timed(lambda: fn(*args), repeats)
            compile_total += rec["trace_s"] + rec["compile_s"]
        row["parts"] = records
    row["wall_s"] = wall = time.perf_counter() - t_row
    row["status"] = "measured"
    row["estimate_s"] = est
    basis(compile_total, max(0.0, wall - compile_total), True)
    return row


def _programs(row):
    """(name, record) of a measured row's step and parts."""
    yield "step", row["step"]
    for name in PARTS:
        if name in row.get("parts", {}):
            yield name, row["parts"][name]


def add_rates(rows, peak_gflops):
    """GFLOP/s of every measured program (all devices together) and its fraction of
    ``peak_gflops`` (the peak of one device times the device count)."""
    for row in rows:
        if row.get("status") != "measured":
            continue
        for _, rec in _programs(row):
            rec["gflops"] = rec["flops"] / rec["time_s"] / 1e9 if rec.get("time_s") else None
            rec["peak_fraction"] = rec["gflops"] / peak_gflops if rec["gflops"] is not None and peak_gflops else None


def peak_shapes(rows, square: int, n_network: int = 3):
    """The matmul shapes to time: the networks' largest float32 products (by FLOPs, over
    every measured step) and one ``square`` x ``square`` x ``square``."""
    best = {}
    for row in rows:
        for key, flops in (row.get("step") or {}).get("top_dots", []):
            shape = parse_dot(key)
            if flops > best.get(shape, (0, ""))[0]:
                best[shape] = (flops, f"network {row['lattice']} {row['hamiltonian']} {row['symmetry']}")
    top = sorted(best.items(), key=lambda kv: -kv[1][0])[:n_network]
    shapes = [s for s, _ in top] + [(1, square, square, square)]
    labels = [f"{lab} {'x'.join(map(str, s))}" for s, (_, lab) in top] + [f"square {square}"]
    return shapes, labels


def run(lattices, hamiltonians, symmetries, samples=1024, repeats=5, budget_s=300.0, deadline=None, breakdown=True,
        square=None, quick=False, log=print) -> dict:
    """Every row (lattices innermost), then the matmul peak; returns the result dict
    (``meta``, ``peak``, ``rows``). ``deadline``: a ``time.time()`` after which no row
    starts (rows estimated past it are skipped)."""
    t_start = time.time()
    load_start = load_average()
    meta = dict(platform_info(), quick=quick, samples=samples, repeats=repeats, budget_s=budget_s,
                breakdown=breakdown, load_average_start=load_start)
    if square is None:
        square = 8192 if on_accelerator() else 2048
    rows, priors = [], []
    log(progress_header())
    for ham, sym in itertools.product(hamiltonians, symmetries):
        for lat in lattices:
            try:
                row = measure_row(lat, ham, sym, samples, repeats, budget_s, priors, deadline, breakdown)
            except Exception as err:  # record it and go on
                row = dict(lattice=lattice_name(lat), hamiltonian=ham, symmetry=sym, n_samples=samples,
                           status="error", reason=error_text(err))
            rows.append(row)
            log(progress_line(row))
    shapes, labels = peak_shapes(rows, square)
    peak = matmul_peak(shapes, repeats=max(3, repeats), label=labels,
                       max_elements=2**26 if on_accelerator() else 2**23)
    add_rates(rows, peak["peak_gflops"] and peak["peak_gflops"] * meta["n_devices"])
    meta.update(load_average_end=load_average(), wall_s=round(time.time() - t_start, 1))
    return dict(benchmark="vmc_scale", meta=meta, peak=peak, rows=rows, flops_note=FLOPS_NOTE,
                reference_line="n_sites^2 * channels^2 * depth through each line's smallest measured point")


FLOPS_NOTE = ("flops: counted from the jaxpr with loops at their trip counts (while loops, whose trip count is known "
              "only at run time: the sampler's thermalization, 0 sweeps once thermalized, counted 0 times; a two-way "
              "data-dependent cond, the SR fallback, at its cheaper branch; an n-way switch, the packed local "
              "energies, at its dearest, an upper bound; flops_bounds: every such cond at its cheapest / dearest); "
              "xla_flops: compiled.cost_analysis()['flops'], which counts each loop body once, per device; "
              "gflops: flops / time_s (all devices); peak_fraction: of the matmul peak times the device count")


# --------------------------------------------------------------------------- #
# output                                                                       #
# --------------------------------------------------------------------------- #


def progress_header() -> str:
    return f"{'lattice':>7} {'hamiltonian':>10} {'symmetry':>12}  status"


def progress_line(row) -> str:
    head = f"{row['lattice']:>7} {row['hamiltonian']:>10} {row['symmetry']:>12}  "
    if row.get("status") != "measured":
        return head + f"{row.get('status')}: {row.get('reason')}"
    return head + (f"step {row['step']['time_s'] * 1e3:.1f} ms, {row['step']['flops'] / 1e9:.3g} GFLOP, "
                   f"row {row['wall_s']:.0f} s")


def _ms(x):
    return "-" if x is None else f"{x * 1e3:.1f}"


def _rate(rec):
    g = rec.get("gflops")
    return "-" if g is None else f"{g:.3g}"


def format_table(result) -> list[str]:
    """The table: one line per row, times in ms, GFLOP/s and % of peak for the step and each part."""
    peak = result["peak"]["peak_gflops"]
    n_dev = result["meta"]["n_devices"]
    lines = [f"# peak {peak:.1f} GFLOP/s float32 ({result['peak']['peak_label']}){f' x {n_dev} devices' if n_dev > 1 else ''}; "
             f"{result['meta']['device_kind']} ({result['meta']['backend']}), jax {result['meta']['jax']}, "
             f"load {result['meta']['load_average_start'][0]:.1f} -> {result['meta']['load_average_end'][0]:.1f}"]
    head = (f"{'lattice':>7} {'ham':>10} {'sym':>12} {'N':>4} {'P':>6} {'conv':>10} {'chunk':>6} "
            f"{'step ms':>9} {'GFLOP':>8} {'GF/s':>7} {'%peak':>6} {'XLA GF/dev':>10} | "
            + " | ".join(f"{p[:8]:>8} ms GF/s" for p in PARTS) + f" | {'compile s':>9}")
    lines.append(head)
    for r in result["rows"]:
        base = f"{r['lattice']:>7} {r['hamiltonian']:>10} {r['symmetry']:>12} {r['n_sites']:>4} " if "n_sites" in r \
            else f"{r['lattice']:>7} {r['hamiltonian']:>10} {r['symmetry']:>12} {'-':>4} "
        if r.get("status") != "measured":
            lines.append(base + f"{r.get('status')}: {r.get('reason')}")
            continue
        s = r["step"]
        frac = "-" if s.get("peak_fraction") is None else f"{100 * s['peak_fraction']:.2f}"
        xla = "-" if s.get("xla_flops") is None else f"{s['xla_flops'] / 1e9:.3g}"
        line = (base + f"{r['n_params']:>6} {r['conv_form']:>10} {str(r['local_energy_chunk']):>6} "
                f"{_ms(s['time_s']):>9} {s['flops'] / 1e9:>8.3g} {_rate(s):>7} {frac:>6} {xla:>10} | ")
        parts = r.get("parts", {})
        line += " | ".join(f"{_ms(parts[p]['time_s']):>8} {_rate(parts[p]):>7}" if p in parts else f"{'-':>16}"
                           for p in PARTS)
        compile_s = s["trace_s"] + s["compile_s"] + sum(parts[p]["trace_s"] + parts[p]["compile_s"] for p in parts)
        lines.append(line + f" | {compile_s:>9.1f}")
    return lines


def plot(result, path: str):
    """Log-log time per step vs n_sites, one line per (hamiltonian, symmetry), each with its
    ideal-scaling line (n_sites^2 * C^2 * depth through its smallest measured point)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401

    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    rows = [r for r in result["rows"] if r.get("status") == "measured"]
    kinds = sorted({_kind(r) for r in rows})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, kind in enumerate(kinds):
        sel = sorted((r for r in rows if _kind(r) == kind), key=lambda r: r["n_sites"])
        n = [r["n_sites"] for r in sel]
        t = [r["step"]["time_s"] * 1e3 for r in sel]
        color = colors[i % len(colors)]
        ax.plot(n, t, marker="o", color=color, label=f"{kind[0]}, {kind[1]}")
        cost = [r["n_sites"] ** 2 * r["channels"] ** 2 * max(1, r["depth"]) for r in sel]
        ax.plot(n, [t[0] * c / cost[0] for c in cost], linestyle=":", color=color, alpha=0.7)
    skipped = [r for r in result["rows"] if r.get("status") != "measured"]
    if not rows:
        ax.text(0.5, 0.5, "no row measured", ha="center", va="center", transform=ax.transAxes)
    if skipped:
        names = ", ".join(f"{r['lattice']} {r['hamiltonian']} {r['symmetry']}" for r in skipped[:6])
        more = f" and {len(skipped) - 6} more" if len(skipped) > 6 else ""
        import textwrap

        note = textwrap.fill(f"not measured (over budget): {names}{more}", 70)
        ax.text(0.01, 0.99, note, transform=ax.transAxes, fontsize=6, va="top")
    ax.set_xscale("log")
    ax.set_yscale("log")
    sites = sorted({r["n_sites"] for r in rows})
    if sites:
        ax.set_xticks(sites)
        ax.set_xticklabels([str(s) for s in sites])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("sites")
    ax.set_ylabel("ms per VMC step")
    ax.plot([], [], linestyle=":", color="gray", label=r"ideal: $\propto N^2 C^2$ depth")
    ax.legend(fontsize=8, loc="lower right")
    m = result["meta"]
    ax.set_title(f"one VMC step, {m['samples']} samples, default network\n{m['device_kind']} ({m['backend']}), "
                 f"jax {m['jax']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def output_paths(quick: bool, json_path: str | None, plot_path: str | None) -> tuple[str | None, str | None]:
    """Where to write: the given paths; without them the defaults on a full run, nothing on
    a quick one (a quick run never replaces the results)."""
    return output_path(quick, json_path, DEFAULT_JSON), output_path(quick, plot_path, DEFAULT_PLOT)


def write(result, json_path, plot_path, log=print, argv=None):
    """The JSON (stamped with the command line ``argv``: the harness's ``write_result``) and the plot."""
    if json_path:
        write_result(json_path, result, __file__, argv, indent=1)
        log(f"wrote {json_path}")
    if plot_path:
        os.makedirs(os.path.dirname(os.path.abspath(plot_path)), exist_ok=True)
        plot(result, plot_path)
        log(f"wrote {plot_path}")
    if not json_path and not plot_path:
        log("quick run: no JSON or plot written (give --json / --plot)")


def parse_args(argv=None):
    p = script_parser(__doc__)
    p.add_argument("--lattices", nargs="+", default=None, help="L (an L x L lattice) or 'LxM'; default 4 6 8 10")
    p.add_argument("--hamiltonians", nargs="+", choices=("heisenberg", "j1j2"), default=None)
    p.add_argument("--symmetries", nargs="+", choices=("none", "translations", "full"), default=None)
    p.add_argument("--samples", type=int, default=None, help="samples per step (default 1024)")
    p.add_argument("--repeats", type=int, default=None, help="timed steps and part calls (median; default 5)")
    p.add_argument("--budget-s", type=float, default=300.0, help="skip a row estimated to take longer (seconds)")
    p.add_argument("--no-breakdown", action="store_true", help="the fused step only (no separately compiled parts)")
    p.add_argument("--square", type=int, default=None, help="the square matmul of the peak (default 8192 GPU, 2048 CPU)")
    p.add_argument("--quick", action="store_true", help="2x4 and 4x4, heisenberg, translations, 32 samples, 1 repeat")
    p.add_argument("--conv-form", default="auto", choices=("auto", "dense", "lax", "lax_patch", "lax_gather",
                                                             "gather", "banded"), help="the convolution form of every row (tuning.CONV_FORMS; "
                   "default: the library's choice), to compare forms on the same rows")
    add_json_option(p, DEFAULT_JSON, "full")
    p.add_argument("--plot", default=None, help=f"default {os.path.relpath(DEFAULT_PLOT)} (full runs only)")
    args = p.parse_args(argv)
    q = QUICK if args.quick else dict(lattices=["4", "6", "8", "10"], hamiltonians=["heisenberg", "j1j2"],
                                      symmetries=["translations", "full"], samples=1024, repeats=5, square=None)
    for k, v in q.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    return args


def main(argv=None):
    args = parse_args(argv)
    from quantax_lite.utils import tuning
    from quantax_lite.utils import limit_blas_threads

    tuning.configure_x64()  # as `quantax-lite train` runs

    json_path, plot_path = output_paths(args.quick, args.json, args.plot)
    blas = limit_blas_threads()  # as `quantax-lite train` runs
    try:
        with tuning.override(conv_form=args.conv_form):
            result = run(args.lattices, args.hamiltonians, args.symmetries, args.samples, args.repeats, args.budget_s,
                         breakdown=not args.no_breakdown, square=args.square, quick=args.quick)
    finally:
        blas.restore_original_limits()
    print()
    for line in format_table(result):
        print(line)
    write(result, json_path, plot_path, argv=argv)
    return result


if __name__ == "__main__":
    main()
