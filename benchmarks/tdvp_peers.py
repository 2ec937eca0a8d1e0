"""Our real-time TDVP beside NetKet's on the same 4x4 quench, each in its own subprocess.

The quench (issue 53): the transverse-field Ising model on the periodic 4x4 square lattice in
Pauli units, ``H = -J sum_<ij> σz_i σz_j - h sum_i σx_i`` with J = 1, from every spin along
+x (the uniform superposition) to h = h_c ≈ 3.04, in real time (hbar = 1). Both rows evolve
the same network from the same parameters with the same sampling, integrator and solve:

* network: the conv net of ``quantax-lite evolve`` on 4x4 (``Recipe(lattice="4x4",
  hamiltonian="tfim", amplitude="complex", channels=8, depth=2, kernel_size=3)``): a
  periodic 3x3 input conv 1 -> C with bias, D pre-activation residual blocks (GELU, two
  convs C -> C with bias), GELU, a per-site readout C -> 2 without bias (real and imaginary
  part of log psi) summed; real float32 parameters, complex log psi; C = 8, D = 2: 2,432
  parameters. Ours is the recipe's; NetKet's the same function written in flax (checked
  equal up to a constant and 2 pi in the phase). ``--symmetry full``: both projected on the
  full group of the lattice, translations x C4v x spin inversion (256 elements; characters
  1, the sector of the +x state): ours as the recipe's ``symmetry="full"`` does it (the 16
  translations of a translation-invariant network merged, 16 evaluations per
  configuration), NetKet's as a flax user writes it, log sum_g psi_0(g s) over every one of
  the 256 images (``_tdvp_flax.py``; its ``chunk_size`` 128 samples, for memory); the same
  function. Both start from the same numbers
  (:func:`initial_layers`: backbone normal with std 1/sqrt(fan-in), biases 0, readout 0,
  which is exactly the +x state);
* samples: ``--samples`` per evaluation of the equation, one Metropolis chain per sample,
  local-flip moves, one sweep of 16 proposals per chain between evaluations (chains
  thermalized by the warm-up), fresh samples at every Runge-Kutta stage;
* integrator: fixed-step RK4 with ``--dt``;
* equation: real parameters, the real part of S θ̇ = -i F (ours: ``TDVP`` with real
  parameters; NetKet: ``nkx.TDVP`` with its default QGT, which picks ``QGTJacobianDense``
  for a dense solver, and ``tree_cast`` to the real parameters);
* solve: the eigendecomposition of S with eigenvalues below ``--rcond`` times the largest
  dropped (ours ``PseudoInverse(rcond)``; NetKet ``pinv_smooth(rtol=rcond)``, whose extra
  smooth filter at its default 1e-14 changes nothing here); ``--smooth``: the smooth filter
  ``1 / (1 + (rcond λ_max / λ)^6)`` in both instead.

What differs: precision (both take the Jacobian in float32 and eigendecompose S in float64;
ours centres it and forms S and F in float64, the library's CPU policy, NetKet forms S in
float32 and promotes it when it adds its zero diagonal shift), the random numbers of the
samples, and the driver around the step (ours one compiled program per step through
``evolve``; NetKet ``driver.run``, its RK stages in Python between compiled parts, no
loggers, no progress bar; after the warm-up its same driver carries on with its clock
offset by the warm-up's time, as a new driver traces again on its first run).

Measured per row: the wall time of the evolution from t = 0 to ``--t-end`` after a warm-up
of ``--warmup`` steps (compilation; then the parameters are reset to the start), in seconds
per unit of simulated time; at ``--points`` evenly spaced times ⟨σx⟩ (site mean) and the
energy per site of the variational state summed exactly over all 2^16 configurations (no
measurement noise, outside the timing), compared with the exact propagator
(``quantax_lite.exact.exact_evolution``). The ratio is NetKet's seconds per unit time over
ours; "as accurate": our max |Δ⟨σx⟩| at most NetKet's, or within the issue's 2e-2.

    python benchmarks/tdvp_peers.py [--quick] [--symmetry full] [--json [PATH]] [--python PATH] [--only NAME]

``--python``: the interpreter of the NetKet row (a virtual environment with NetKet; ours
runs under this one). A package that does not import gives the row ``"not installed"``, a
worker that fails ``"failed"`` with the end of its error. ``--json``: write the record
(default ``benchmarks/results/tdvp_peers.json``); without it the table is only printed.
``--quick``: a smoke test (channels 2, depth 1, 64 samples, two steps), not a comparison.

Progress goes to stderr as it happens, one line per phase and (ours) per step: seconds since
the worker started, the step's t, dt, attempts, kept directions and its own seconds, so a run
that gives no row within ``--timeout`` still shows where its time went (the workers write it
to a file that the parent echoes).
"""
from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import sys
import time
from argparse import SUPPRESS

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # the harness (stdlib only: the workers run it under any interpreter)
    sys.path.insert(0, HERE)
from _common import (add_json_option, host_info, load_average, report_row, results_file, script_parser,  # noqa: E402
                     worker_row, write_result)
import _worker_progress  # noqa: E402
from _tdvp_flax import SYMMETRIES, flax_module, orbits  # noqa: E402

DEFAULT_JSON = results_file("tdvp_peers.json")
FULL_JSON = results_file("tdvp_peers_full.json")  # --json without a path, with --symmetry full
PEERS = ("quantax_lite", "netket")
L, N_SITES, J, H = 4, 16, 1.0, 3.04  # h_c = 3.044 (Pauli units) for the 2D TFIM
TOLERANCE = 2e-2  # issue 53's tolerance on <σx>(t) for this quench
NETKET_FULL_CHUNK = 128  # NetKet's chunk_size (samples) with --symmetry full: 17 x 256 network images a sample
WORKER_OPTIONS = ("samples", "dt", "t_end", "points", "warmup", "channels", "depth", "rcond", "seed", "symmetry")


# --------------------------------------------------------------------------- #
# shared by the workers (numpy only)                                           #
# --------------------------------------------------------------------------- #


def initial_layers(channels: int, depth: int, seed: int) -> dict:
    """The starting parameters of both rows: ``{layer: {"kernel", "bias"}}`` float32 (flax
    layouts: conv kernels (3, 3, c_in, c_out)), layers ``input_conv``, ``blocks_<b>_conv1``,
    ``blocks_<b>_conv2`` and ``readout`` (kernel (C, 2) of zeros: log psi constant, every
    spin along +x)."""
    import numpy as np

    rng = np.random.default_rng(seed)

    def conv(c_in):
        k = rng.standard_normal((3, 3, c_in, channels)) / np.sqrt(9 * c_in)
        return {"kernel": k.astype(np.float32), "bias": np.zeros(channels, np.float32)}

    layers = {"input_conv": conv(1)}
    for b in range(depth):
        layers[f"blocks_{b}_conv1"] = conv(channels)
        layers[f"blocks_{b}_conv2"] = conv(channels)
    layers["readout"] = {"kernel": np.zeros((channels, 2), np.float32)}
    return layers


def basis():
    """All 2^16 configurations, int8 ±1: row c has σz_i = +1 where bit i of c is 0."""
    import numpy as np

    codes = np.arange(2**N_SITES)
    return (1 - 2 * ((codes[:, None] >> np.arange(N_SITES)) & 1)).astype(np.int8)


def full_sum_observables(log_psi_values) -> tuple[float, float]:
    """``(⟨σx⟩ site mean, energy per site)`` of the state with these log amplitudes on
    :func:`basis` (summed exactly over every configuration)."""
    import numpy as np

    lp = np.asarray(log_psi_values, np.complex128)
    v = np.exp(lp - lp.real.max())
    v /= np.linalg.norm(v)
    codes = np.arange(v.size)
    sx = np.mean([np.real(np.vdot(v, v[codes ^ (1 << i)])) for i in range(N_SITES)])
    s = basis().reshape(-1, L, L).astype(np.float64)
    zz = (s * np.roll(s, 1, axis=1) + s * np.roll(s, 1, axis=2)).reshape(len(v), -1).sum(axis=1)
    energy = -J * float(np.abs(v) ** 2 @ zz) - H * N_SITES * sx
    return float(sx), energy / N_SITES


@functools.lru_cache(maxsize=1)
def basis_orbits():
    """:func:`_tdvp_flax.orbits` of :func:`basis` (computed once)."""
    return orbits(basis())


def evaluate_all(log_psi, params, batch: int = 8192, symmetry: str = "translations"):
    """``log_psi(params, states)`` (jitted) on every configuration of :func:`basis`, in
    batches (numpy). ``symmetry="full"``: psi is invariant under the full group (characters
    1), so it is evaluated once per orbit (:func:`_tdvp_flax.orbits`) and copied."""
    import numpy as np

    states, inverse = (basis(), None) if symmetry != "full" else basis_orbits()
    values = np.concatenate([np.asarray(log_psi(params, states[i:i + batch])) for i in range(0, len(states), batch)])
    return values if inverse is None else values[inverse]


def timed_evolution(advance, log_psi_now, times, say=lambda message: None) -> dict:
    """Run ``advance(t)`` (blocks until the state is at ``t``) through ``times[1:]``; time
    only that; measure the state (``log_psi_now()`` -> log psi on :func:`basis`) at every time.
    ``say(message)``: progress."""
    t0 = time.perf_counter()
    values = [full_sum_observables(log_psi_now())]
    say(f"measured t = 0 on all 2^{N_SITES} configurations in {time.perf_counter() - t0:.1f} s")
    seconds = 0.0
    for k, t in enumerate(times[1:], 1):
        say(f"timed evolution to t = {float(t):g} (point {k} of {len(times) - 1})")
        t0 = time.perf_counter()
        advance(float(t))
        seconds += time.perf_counter() - t0
        t1 = time.perf_counter()
        values.append(full_sum_observables(log_psi_now()))
        say(f"reached t = {float(t):g} after {t1 - t0:.1f} s; measured in {time.perf_counter() - t1:.1f} s")
    return {"evolve_s": seconds, "s_per_unit_time": seconds / (times[-1] - times[0]),
            "sx": [v[0] for v in values], "energy_per_site": [v[1] for v in values]}


def grid(cfg):
    import numpy as np

    return np.linspace(0.0, cfg.t_end, cfg.points + 1)


def progress(cfg, message: str) -> None:
    """One progress line of this worker (``_worker_progress.say``) to its ``--progress-log``."""
    _worker_progress.say(getattr(cfg, "progress_log", None), cfg.worker or "worker", message)


# --------------------------------------------------------------------------- #
# the workers (each in its own process)                                        #
# --------------------------------------------------------------------------- #


def run_quantax_lite(cfg) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from quantax_lite import Recipe, __version__, build
    from quantax_lite.utils import tuning
    from quantax_lite.evolution import RK4, TDVP, PseudoInverse, evolve

    def say(message):
        progress(cfg, message)

    tuning.configure_x64()  # as `quantax-lite evolve` runs (float64 equation and solve on CPUs)
    say(f"jax {jax.__version__} on {jax.default_backend()} ({jax.devices()[0].device_kind}), "
        f"x64 {jax.config.jax_enable_x64}; building the network")
    recipe = Recipe(lattice="4x4", hamiltonian="tfim", h=H, amplitude="complex", marshall=False, seed=cfg.seed,
                    sampling="metropolis", samples=cfg.samples, chains=cfg.samples, sweep_size=N_SITES,
                    channels=cfg.channels, depth=cfg.depth, kernel_size=3, precision="f32", symmetry=cfg.symmetry)
    r = build(recipe)
    params = jax.tree.map(lambda x: x, r.state.params)  # fresh containers, filled below
    base = params["params"]["base"]
    for name, leaves in initial_layers(cfg.channels, cfg.depth, cfg.seed).items():
        block, _, conv = name.rpartition("_")  # blocks_<b>_conv<i>: ours nests the convs in their block
        node = base["readout_dense"] if name == "readout" else base[block][conv] if block.startswith("blocks_") \
            else base[name]
        for k, value in leaves.items():
            if node[k].shape != value.shape:
                raise ValueError(f"{name}.{k}: the recipe's network has {node[k].shape}, expected {value.shape}")
            node[k] = jnp.asarray(value)
    assert int(sum(x.size for x in jax.tree_util.tree_leaves(params))) == int(r.n_params)
    regularization = PseudoInverse(cfg.rcond, smooth=cfg.smooth)
    tdvp = TDVP(r.hamiltonian, r.sampler, n_samples=cfg.samples, integrator=RK4(), regularization=regularization)
    start = tdvp.init(params, jax.random.key(cfg.seed), dt=cfg.dt)
    last = {"wall": 0.0}

    def report_step(rec, state):
        """One line per step (``evolve``'s callback): the first of a call includes its compilation."""
        residual = "-" if rec["residual"] is None else f"{rec['residual']:.2e}"
        say(f"step {rec['step']}: t = {float(state.t):.9g}, dt = {rec['dt']:.3g}, attempts {rec['attempts']}, "
            f"kept {rec['kept']}, residual {residual}, {rec['wall_time_s'] - last['wall']:.2f} s")
        last["wall"] = rec["wall_time_s"]

    def run_to(state, t_end):
        last["wall"] = 0.0
        return evolve(tdvp, state, t_end, progress=False, callbacks=[report_step])

    say(f"{int(r.n_params)} parameters, {cfg.samples} samples, {regularization!r}, t and dt in "
        f"{np.dtype(start.t.dtype).name}; warm-up: {cfg.warmup} steps of dt = {cfg.dt:g}, the first compiles the step")
    t0 = time.perf_counter()
    warm, _ = run_to(start, cfg.warmup * cfg.dt)  # compiles the step
    jax.block_until_ready(warm.params)
    warmup_s = time.perf_counter() - t0
    say(f"warm-up done in {warmup_s:.1f} s ({int(warm.step)} steps, t = {float(warm.t):.9g})")
    holder = {"state": start._replace(sampler=warm.sampler)}  # thermalized chains, parameters at the start

    def advance(t):
        holder["state"], _ = run_to(holder["state"], t)
        jax.block_until_ready(holder["state"].params)

    log_psi = jax.jit(r.model.apply)
    run = timed_evolution(advance, lambda: evaluate_all(log_psi, holder["state"].params, symmetry=cfg.symmetry),
                          grid(cfg), say)
    return {"version": __version__, "jax": jax.__version__, "n_params": int(r.n_params), "n_samples": cfg.samples,
            "steps": int(holder["state"].step), "warmup_s": warmup_s, "warmup_steps": cfg.warmup, **run,
            "network": f"recipe conv net (channels {cfg.channels}, depth {cfg.depth}, 3x3), complex head, "
                       f"symmetry {cfg.symmetry}",
            "solve": f"{regularization!r}; Jacobian float32, S and solve in {np.dtype(tuning.wide_dtype()).name}"}


def run_netket(cfg) -> dict:
    from functools import partial

    import jax
    import jax.numpy as jnp
    import netket as nk
    import netket.experimental as nkx
    import numpy as np

    graph = nk.graph.Square(L, pbc=True)
    if not np.array_equal(np.rint(np.asarray(graph.positions)), np.stack(np.divmod(np.arange(N_SITES), L), 1)):
        raise RuntimeError("NetKet's Square(4) numbers its sites otherwise than x * 4 + y")
    hilbert = nk.hilbert.Spin(0.5, N=N_SITES)
    ham = nk.operator.Ising(hilbert, graph, h=H, J=-J)  # NetKet: -h sum σx + J sum σzσz
    model = flax_module(cfg.channels, cfg.depth, cfg.symmetry)
    variables = {"params": jax.tree.map(jnp.asarray, initial_layers(cfg.channels, cfg.depth, cfg.seed))}
    sampler = nk.sampler.MetropolisLocal(hilbert, n_chains=cfg.samples, sweep_size=N_SITES)
    # 256 images a sample: chunked for memory (NetKet wants a chunk that divides the samples)
    chunk = math.gcd(cfg.samples, NETKET_FULL_CHUNK) if cfg.symmetry == "full" else None
    vstate = nk.vqs.MCState(sampler, model, n_samples=cfg.samples, n_discard_per_chain=0, variables=variables,
                            seed=cfg.seed, sampler_seed=cfg.seed + 1, chunk_size=chunk)
    solver = (partial(nk.optimizer.solver.pinv_smooth, rtol=1e-14, rtol_smooth=cfg.rcond) if cfg.smooth
              else partial(nk.optimizer.solver.pinv_smooth, rtol=cfg.rcond))

    driver = nkx.TDVP(ham, vstate, nkx.dynamics.RK4(dt=cfg.dt), propagation_type="real", linear_solver=solver)
    margin = 1e-6 * cfg.dt  # run(T) steps while t < t0 + T: a float sum of steps just below the end takes one more

    def say(message):
        progress(cfg, message)

    say(f"netket {nk.__version__}, jax {jax.__version__} on {jax.default_backend()}; warm-up: {cfg.warmup} steps")
    t0 = time.perf_counter()
    driver.run(cfg.warmup * cfg.dt - margin, out=(), show_progress=False)  # compiles its parts
    jax.block_until_ready(vstate.parameters)
    warmup_s = time.perf_counter() - t0
    say(f"warm-up done in {warmup_s:.1f} s")
    # back to the start (the chains stay thermalized); the same driver (a new one traces
    # again on its first run), its clock continuing from the warm-up's end: H does not
    # depend on time
    vstate.parameters = variables["params"]
    driver.ode_solver = nkx.dynamics.RK4(dt=cfg.dt)
    offset, first_step = float(driver.t), int(driver.step_count)

    def advance(t):
        driver.run(offset + t - float(driver.t) - margin, out=(), show_progress=False)
        jax.block_until_ready(vstate.parameters)
        if abs(float(driver.t) - offset - t) > 1e-9:
            raise RuntimeError(f"NetKet's driver reached t = {float(driver.t) - offset!r}, not {t!r}")

    log_psi = jax.jit(model.apply)
    run = timed_evolution(advance, lambda: evaluate_all(log_psi, {"params": vstate.parameters}, symmetry=cfg.symmetry),
                          grid(cfg), say)
    qgt = driver._last_qgt
    jac, dense = np.dtype(qgt.O.dtype).name, np.dtype(qgt.to_dense().dtype).name
    return {"version": nk.__version__, "jax": jax.__version__, "n_params": int(vstate.n_parameters),
            "n_samples": int(vstate.n_samples), "steps": int(driver.step_count) - first_step, "warmup_s": warmup_s,
            "warmup_steps": cfg.warmup, **run, "network": "the same conv net in flax, complex log psi"
            + (f", every one of the 256 group images evaluated, chunk_size {chunk}" if chunk else ""),
            "solve": f"{type(qgt).__name__} + pinv_smooth(" + (f"rtol_smooth={cfg.rcond:g})" if cfg.smooth
                                                              else f"rtol={cfg.rcond:g})")
            + f"; Jacobian {jac}, S = O^T O in it, solved in {dense}",
            "x64": bool(jax.config.jax_enable_x64)}


RUNNERS = {"quantax_lite": run_quantax_lite, "netket": run_netket}


def worker(name: str, cfg) -> int:
    """One row, printed as ``PEER_RESULT {json}`` on the last line of stdout."""
    if importlib.util.find_spec(name) is None:
        row = {"status": "not installed"}
    else:
        row = {"status": "measured", **RUNNERS[name](cfg)}
    report_row(row)
    return 0


# --------------------------------------------------------------------------- #
# the parent                                                                   #
# --------------------------------------------------------------------------- #


def run_row(name: str, python: str, args) -> dict:
    """Run the worker of ``name`` under ``python``; ``"failed"`` with the end of its error
    when it exits otherwise or gives no row within ``--timeout`` (then also its last
    progress line). Its progress is echoed to stderr while it runs."""
    cmd = [python, os.path.abspath(__file__), "--worker", name]
    for option in WORKER_OPTIONS:
        value = getattr(args, option)
        cmd += [f"--{option.replace('_', '-')}", value if isinstance(value, str) else repr(value)]
    cmd += ["--smooth"] if args.smooth else []
    with _worker_progress.echoed_progress(f"tdvp_peers_{name}_") as (log, lines):
        row = worker_row(name, cmd + ["--progress-log", log], args.timeout)
    if row["status"] == "failed" and lines:
        row["last_progress"] = lines[-1]
    if name != "quantax_lite" and row["status"] != "failed":
        row["python"] = python
    return row


def exact_curves(times) -> dict:
    """⟨σx⟩ (site mean) and the energy per site of the exact evolution at ``times``."""
    import numpy as np

    from quantax_lite import Square, TransverseFieldIsing, sx
    from quantax_lite.exact import exact_evolution, exact_observables

    ham = TransverseFieldIsing(Square(L), J=J, h=H)
    vectors, states = exact_evolution(ham, np.ones(2**N_SITES), np.asarray(times), total_sz=None)
    sigma_x = sum(sx(i, N_SITES) for i in range(N_SITES)) * (2.0 / N_SITES)  # sx is spin-1/2: σx = 2 sx
    values = exact_observables({"sx": sigma_x, "energy": ham}, vectors, states)
    return {"t": [float(t) for t in times], "sx": values["sx"].tolist(),
            "energy_per_site": (values["energy"] / N_SITES).tolist()}


def compare(rows: list[dict], exact: dict) -> dict:
    """Per measured row its max |Δ⟨σx⟩| and max |ΔE/N| against exact (filled into the rows);
    the ratio NetKet / ours of seconds per unit time and whether ours is as accurate."""
    import numpy as np

    for r in rows:
        if r["status"] == "measured":
            r["max_dsx"] = float(np.max(np.abs(np.subtract(r["sx"], exact["sx"]))))
            r["max_denergy_per_site"] = float(np.max(np.abs(np.subtract(r["energy_per_site"],
                                                                         exact["energy_per_site"]))))
    by = {r["package"]: r for r in rows if r["status"] == "measured"}
    if not {"quantax_lite", "netket"} <= set(by):
        return {"ratio": None, "as_accurate": None}
    ours, theirs = by["quantax_lite"], by["netket"]
    return {"ratio": theirs["s_per_unit_time"] / ours["s_per_unit_time"],
            "as_accurate": bool(ours["max_dsx"] <= max(theirs["max_dsx"], TOLERANCE)),
            "max_dsx": {"quantax_lite": ours["max_dsx"], "netket": theirs["max_dsx"]}}


def table(rows: list[dict]) -> str:
    """The rows aligned: package, version, parameters, samples, steps, seconds per unit of
    simulated time, ms per step, max |Δ⟨σx⟩|, max |ΔE/N|, warm-up seconds; 'not installed' /
    'failed: ...' for the others."""
    head = (f"{'package':<13} {'version':<9} {'params':>6} {'samples':>7} {'steps':>5} {'s/unit t':>9} "
            f"{'ms/step':>8} {'max|dsx|':>9} {'max|dE/N|':>9} {'warm-up s':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        if r["status"] != "measured":
            what = r["status"] if r["status"] == "not installed" else f"failed: {r.get('error', '')[:120]}"
            lines.append(f"{r['package']:<13} {what}")
            continue
        dsx, de = r.get("max_dsx"), r.get("max_denergy_per_site")
        lines.append(f"{r['package']:<13} {str(r.get('version')):<9} {r['n_params']:>6} {r['n_samples']:>7} "
                     f"{r['steps']:>5} {r['s_per_unit_time']:>9.2f} {r['evolve_s'] / max(r['steps'], 1) * 1e3:>8.1f} "
                     f"{'-' if dsx is None else f'{dsx:.4f}':>9} {'-' if de is None else f'{de:.4f}':>9} "
                     f"{r['warmup_s']:>9.1f}")
    return "\n".join(lines)


def parse(argv=None):
    parser = script_parser(__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test: channels 2, depth 1, 64 samples, t-end 2 dt, 2 points, 1 warm-up step")
    parser.add_argument("--samples", type=int, default=None, help="samples per evaluation (default 1024)")
    parser.add_argument("--dt", type=float, default=0.02, help="the RK4 step (default 0.02)")
    parser.add_argument("--t-end", type=float, default=None, help="final time (default 0.5)")
    parser.add_argument("--points", type=int, default=None, help="measured times after 0 (default 5)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 2)")
    parser.add_argument("--channels", type=int, default=None, help="conv channels (default 8)")
    parser.add_argument("--depth", type=int, default=None, help="residual blocks (default 2)")
    parser.add_argument("--rcond", type=float, default=1e-6,
                        help="eigenvalues of S below rcond x the largest dropped (default 1e-6, the command's)")
    parser.add_argument("--smooth", action="store_true", help="the smooth cutoff in both rows instead of the hard one")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--symmetry", choices=SYMMETRIES, default="translations",
                        help="the network as it is (translations: its sum over sites is invariant already) or "
                             "projected on the full group (translations x C4v x spin inversion; default translations)")
    add_json_option(parser, DEFAULT_JSON, "asked")
    parser.add_argument("--python", default=sys.executable, help="interpreter of the NetKet row (default: this one)")
    parser.add_argument("--only", choices=PEERS, action="append", help="run only these rows")
    parser.add_argument("--timeout", type=int, default=7200, help="seconds per row")
    parser.add_argument("--worker", choices=PEERS, help=SUPPRESS)
    parser.add_argument("--progress-log", help=SUPPRESS)  # a worker's progress file (the parent echoes it)
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = dict(samples=(64, 1024), t_end=(2 * args.dt, 0.5), points=(2, 5), warmup=(1, 2), channels=(2, 8),
                    depth=(1, 2))
    for name, (q, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, q if quick else full)
    steps = args.t_end / args.dt
    if args.dt <= 0 or args.t_end <= 0 or abs(steps - round(steps)) > 1e-9 or round(steps) % args.points:
        parser.error(f"--t-end: expected a positive multiple of --points x --dt, got {args.t_end!r} "
                     f"({args.points} points, dt {args.dt!r})")
    for name in ("samples", "points", "channels", "depth"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: expected a positive int, got {getattr(args, name)!r}")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.worker:
        return worker(args.worker, args)
    load_before = load_average()
    rows = []
    for name in args.only or PEERS:
        rows.append(run_row(name, sys.executable if name == "quantax_lite" else args.python, args))
        print(json.dumps({k: v for k, v in rows[-1].items() if k not in ("sx", "energy_per_site")}), flush=True)
    exact = exact_curves(grid(args))
    comparison = compare(rows, exact)
    print()
    print(table(rows))
    print(f"exact <σx>(t): {' '.join(f'{x:.4f}' for x in exact['sx'])}")
    if comparison["ratio"] is not None:
        print(f"NetKet / quantax_lite, seconds per unit of simulated time: {comparison['ratio']:.2f}x; "
              f"max |d<σx>| {comparison['max_dsx']['quantax_lite']:.4f} (ours) vs "
              f"{comparison['max_dsx']['netket']:.4f} (NetKet): as accurate: {comparison['as_accurate']}")
    if args.json == DEFAULT_JSON and args.symmetry == "full":
        args.json = FULL_JSON  # the default file holds the comparison without the projection
    if args.json:
        record = {"workload": f"4x4 TFIM (periodic, Pauli units, J = {J}), quench from +x to h = {H}, real-time "
                              "TDVP, sampled", "quick": args.quick, "h": H,
                  **{k: getattr(args, k) for k in WORKER_OPTIONS}, "smooth": args.smooth,
                  "host": {**host_info(), "load_average_before": load_before}, "exact": exact, "rows": rows,
                  **comparison}
        write_result(args.json, record, __file__, argv, indent=2)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
