"""Our W1 step beside NetKet's and Quantax's, each in its own subprocess of this one.

W1 (``benchmarks/vmc_step.py`` row 0): the 4x4 Heisenberg model with periodic boundaries
in the Sz = 0 sector and the Marshall sign, 1024 samples per step, one VMC step =
Metropolis sampling (exchange moves, one chain per sample, a sweep of N/2 = 8 proposals
between samples) + local energies + one SR step (the same diagonal shift 1e-4 in every
row, the command's for this model; the parameter update at learning rate 0.02). The network of every row is the W1 one matched
in size as each package allows:

* ``quantax_lite``: the library's recipe (``Recipe(lattice="4x4", channels=8, depth=2,
  kernel_size=3, amplitude="positive", precision="f32")``, the translations): 2,424
  parameters;
* ``netket``: the same network written in flax for NetKet (periodic 3x3 convolutions,
  8 channels, an input convolution and 2 pre-activation residual blocks, GELU, a
  per-site linear readout summed: a real log psi, 2,424 parameters, float32), NetKet's
  ``MetropolisExchange`` on the lattice's bonds, ``MCState`` and ``VMC_SR`` (the kernel
  form when there are fewer samples than parameters, as ours), a step as ``driver.run``
  takes it (``reset_step``, ``compute_loss_and_update``, ``update_parameters``) without
  its loggers;
* ``quantax``: Quantax's own residual convolutional network ``ResConv(nblocks=2,
  channels=8, kernel_size=3)`` symmetrized over the translations (its parameter count is
  reported; the architecture is Quantax's), ``SpinExchange`` and ``SR``.

Energies are reported per site in units of J with S = σ/2 (NetKet and Quantax define the
Heisenberg model with Pauli matrices, so they are built with J = 1/4). Each row runs in
a fresh Python process (``python peers.py --worker NAME``), so the packages never share a
process or a compilation cache; all of them are children of this one (one process tree).
This script installs nothing: a package that does not import gives the row
``"not installed"``, a worker that fails gives ``"failed"`` with the end of its error.

Timing: after ``--warmup`` steps (compilation, thermalization) the median and minimum of
``--repeats`` steps, each waited for (``block_until_ready``). A step of NetKet or Quantax
runs as their drivers run it (several compiled programs and Python between them); ours
is one compiled program.

    python benchmarks/peers.py [--quick] [--json [PATH]] [--repeats N] [--python PATH]

``--json``: write the rows (default path ``benchmarks/results/peers.json``); without it
the table is only printed. ``--python``: the interpreter of the NetKet and Quantax rows
(e.g. a virtual environment where they are installed; ours always runs under this one).
"""
from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # the harness (stdlib only: the workers run it under any interpreter)
    sys.path.insert(0, HERE)

from argparse import SUPPRESS  # noqa: E402

from _common import (add_json_option, host_info, report_row, results_file, script_parser, worker_row,  # noqa: E402
                     write_result)

DEFAULT_JSON = results_file("peers.json")
PEERS = ("quantax_lite", "netket", "quantax")
MODULES = {"quantax_lite": "quantax_lite", "netket": "netket", "quantax": "quantax"}
L, N_SITES, LR = 4, 16, 0.02
DIAG_SHIFT = 1e-4  # the command's SR shift for the (unfrustrated) 4x4 Heisenberg model


# --------------------------------------------------------------------------- #
# the workers (each in its own process)                                        #
# --------------------------------------------------------------------------- #


def _timed_steps(step, wait, warmup: int, repeats: int) -> dict:
    """Run ``step()`` ``warmup`` times, then ``repeats`` times each waited for with ``wait()``."""
    t0 = time.perf_counter()
    for _ in range(warmup):
        step()
    wait()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        step()
        wait()
        times.append(time.perf_counter() - t)
    return {"step_s": statistics.median(times), "step_min_s": min(times), "warmup_s": first,
            "warmup_steps": warmup, "repeats": repeats}


def run_quantax_lite(n_samples: int, warmup: int, repeats: int, diag_shift: float) -> dict:
    import jax

    from quantax_lite import Recipe, build
    from quantax_lite.utils import tuning
    from quantax_lite.utils import limit_blas_threads

    tuning.configure_x64()  # as `quantax-lite train` runs (float64 SR solve on CPUs)
    blas = limit_blas_threads()
    recipe = Recipe(lattice="4x4", symmetry="translations", samples=n_samples, precision="f32",
                    amplitude="positive", channels=8, depth=2, kernel_size=3, lr=LR, diag_shift=diag_shift)
    r = build(recipe)
    holder = {"state": r.state, "energy": None}

    def step():
        holder["state"], m = r.vmc.step(holder["state"])
        holder["energy"] = m["energy"]

    timing = _timed_steps(step, lambda: jax.block_until_ready(holder["energy"]), warmup, repeats)
    from quantax_lite import __version__

    blas.restore_original_limits()
    return {"version": __version__, "n_params": int(r.n_params), "n_samples": int(r.vmc.n_samples),
            "energy_per_site": float(holder["energy"]) / N_SITES, "jax": jax.__version__,
            "network": "W1 conv net (recipe), translations, positive real log psi", **timing}


def _w1_flax_module():
    """The W1 network in flax: periodic 3x3 convolutions on the 4x4 grid (site x * 4 + y at
    (x, y)), input conv 1 -> 8 with bias, 2 pre-activation residual blocks (GELU, two convs
    8 -> 8 with bias each), GELU, a per-site linear readout 8 -> 1 without bias, summed:
    a real log psi, 80 + 2 * 1168 + 8 = 2424 parameters."""
    import flax.linen as nn
    import jax.numpy as jnp

    class W1Conv(nn.Module):
        perm: tuple
        channels: int = 8
        depth: int = 2
        kernel: int = 3

        @nn.compact
        def __call__(self, s):
            x = jnp.asarray(s, jnp.float32)[..., jnp.asarray(self.perm)].reshape(-1, L, L, 1)
            pad = self.kernel // 2

            def conv(h, name):
                h = jnp.pad(h, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="wrap")
                return nn.Conv(self.channels, (self.kernel, self.kernel), padding="VALID", param_dtype=jnp.float32,
                               dtype=jnp.float32, name=name)(h)

            x = conv(x, "input")
            for b in range(self.depth):
                h = conv(nn.gelu(x), f"block{b}_conv1")
                x = x + conv(nn.gelu(h), f"block{b}_conv2")
            out = nn.Dense(1, use_bias=False, param_dtype=jnp.float32, name="readout")(nn.gelu(x))
            return out.reshape(out.shape[0], -1).sum(axis=-1).reshape(jnp.shape(s)[:-1])

    return W1Conv


def run_netket(n_samples: int, warmup: int, repeats: int, diag_shift: float) -> dict:
    import jax
    import netket as nk
    import numpy as np
    import optax

    graph = nk.graph.Square(L, pbc=True)
    pos = np.rint(np.asarray(graph.positions)).astype(int) % L
    perm = np.empty(N_SITES, int)
    perm[pos[:, 0] * L + pos[:, 1]] = np.arange(N_SITES)  # grid position x * 4 + y holds site perm[...]
    hilbert = nk.hilbert.Spin(0.5, N=N_SITES, total_sz=0)
    ham = nk.operator.Heisenberg(hilbert, graph, J=0.25, sign_rule=True)  # S = σ/2 units
    model = _w1_flax_module()(perm=tuple(int(p) for p in perm))
    sampler = nk.sampler.MetropolisExchange(hilbert, graph=graph, n_chains=n_samples, sweep_size=N_SITES // 2)
    vstate = nk.vqs.MCState(sampler, model, n_samples=n_samples, n_discard_per_chain=0, seed=0, sampler_seed=1)
    n_params = int(vstate.n_parameters)
    driver = nk.driver.VMC_SR(ham, optax.sgd(LR), diag_shift=diag_shift, variational_state=vstate,
                              use_ntk=n_samples < n_params)
    holder = {}

    def step():  # what driver.run does per step, without its loggers and callbacks
        driver.reset_step()
        holder["energy"], dp = driver.compute_loss_and_update()
        driver.update_parameters(dp)

    timing = _timed_steps(step, lambda: jax.block_until_ready(vstate.parameters), warmup, repeats)
    return {"version": nk.__version__, "n_params": n_params, "n_samples": int(vstate.n_samples),
            "energy_per_site": float(np.real(holder["energy"].mean)) / N_SITES, "jax": jax.__version__,
            "network": "W1 conv net in flax (2 residual blocks, 8 channels, 3x3), real log psi",
            "sr": "VMC_SR " + ("kernel (NTK) form" if n_samples < n_params else "parameter form"), **timing}


def run_quantax(n_samples: int, warmup: int, repeats: int, diag_shift: float) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import quantax as qtx

    qtx.set_default_dtype(jnp.float64)
    qtx.sites.Square(L, Nparticles=(N_SITES // 2, N_SITES // 2))
    ham = qtx.operator.Heisenberg(J=0.25, msr=True)  # S = σ/2 units
    model = qtx.model.ResConv(nblocks=2, channels=8, kernel_size=3, trans_symm=qtx.symmetry.TransND(),
                              dtype=jnp.float32)
    state = qtx.state.Variational(model)
    sampler = qtx.sampler.SpinExchange(state, n_samples, sweep_steps=N_SITES // 2)
    optimizer = qtx.optimizer.SR(state, ham, solver=qtx.optimizer.auto_shift_eig(diag_shift))
    holder = {}

    def step():
        samples = sampler.sweep()
        holder["step"] = optimizer.get_step(samples)
        state.update(holder["step"] * LR)
        holder["energy"] = optimizer.energy

    timing = _timed_steps(step, lambda: jax.block_until_ready(holder["step"]), warmup, repeats)
    version = getattr(qtx, "version", None)
    return {"version": getattr(version, "__version__", None) or _dist_version("quantax"), "n_params": int(state.nparams),
            "n_samples": n_samples, "energy_per_site": float(np.real(holder["energy"])) / N_SITES,
            "jax": jax.__version__, "network": "Quantax ResConv(nblocks=2, channels=8, kernel_size=3), translations",
            **timing}


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


RUNNERS = {"quantax_lite": run_quantax_lite, "netket": run_netket, "quantax": run_quantax}


def worker(name: str, n_samples: int, warmup: int, repeats: int, diag_shift: float) -> int:
    """One row, printed as ``PEER_RESULT {json}`` on the last line of stdout."""
    if importlib.util.find_spec(MODULES[name]) is None:
        row = {"status": "not installed"}
    else:
        row = {"status": "measured", **RUNNERS[name](n_samples, warmup, repeats, diag_shift)}
    report_row(row)
    return 0


# --------------------------------------------------------------------------- #
# the parent                                                                   #
# --------------------------------------------------------------------------- #


def run_row(name: str, python: str, args, diag_shift: float) -> dict:
    """Run the worker of ``name`` under ``python`` and read its row (``"failed"`` with the
    end of its error when it exits otherwise)."""
    cmd = [python, os.path.abspath(__file__), "--worker", name, "--samples", str(args.samples),
           "--warmup", str(args.warmup), "--repeats", str(args.repeats), "--diag-shift", repr(diag_shift)]
    row = worker_row(name, cmd, args.timeout)
    if name != "quantax_lite" and row["status"] != "failed":
        row["python"] = python
    return row


def table(rows: list[dict]) -> str:
    """The rows as an aligned table: package, version, parameters, samples, ms per step
    (median, min), energy per site; 'not installed' / 'failed: ...' for the others."""
    head = f"{'package':<13} {'version':<9} {'params':>7} {'samples':>7} {'ms/step':>9} {'min':>8}  E/N (J, S=σ/2)"
    lines = [head, "-" * len(head)]
    for r in rows:
        if r["status"] != "measured":
            what = r["status"] if r["status"] == "not installed" else f"failed: {r.get('error', '')[:120]}"
            lines.append(f"{r['package']:<13} {what}")
            continue
        lines.append(f"{r['package']:<13} {str(r.get('version')):<9} {r['n_params']:>7} {r['n_samples']:>7} "
                     f"{r['step_s'] * 1e3:>9.1f} {r['step_min_s'] * 1e3:>8.1f}  {r['energy_per_site']:.5f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="64 samples, 1 warm-up step, 2 timed steps (a smoke test)")
    parser.add_argument("--samples", type=int, default=None, help="samples per step (default 1024; --quick 64)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 3; --quick 1)")
    parser.add_argument("--repeats", type=int, default=None, help="timed steps (default 10; --quick 2)")
    add_json_option(parser, DEFAULT_JSON, "asked")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter of the NetKet and Quantax rows (default: this one)")
    parser.add_argument("--only", choices=PEERS, action="append", help="run only these rows")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per row")
    parser.add_argument("--worker", choices=PEERS, help=SUPPRESS)
    parser.add_argument("--diag-shift", type=float, default=None,
                        help=f"SR diagonal shift of every row (default {DIAG_SHIFT:g}, the command's for W1)")
    args = parser.parse_args(argv)
    quick = args.quick
    args.samples = args.samples or (64 if quick else 1024)
    args.warmup = args.warmup if args.warmup is not None else (1 if quick else 3)
    args.repeats = args.repeats or (2 if quick else 10)
    if args.worker:
        return worker(args.worker, args.samples, args.warmup, args.repeats, args.diag_shift)

    diag_shift = DIAG_SHIFT if args.diag_shift is None else args.diag_shift
    rows = []
    for name in args.only or PEERS:
        python = sys.executable if name == "quantax_lite" else args.python
        rows.append(run_row(name, python, args, diag_shift))
        print(json.dumps(rows[-1]), flush=True)
    print()
    print(table(rows))
    if args.json:
        record = {"workload": "W1: 4x4 Heisenberg, Sz = 0, Marshall sign, one VMC step (sampling + local energies "
                              "+ SR)", "n_samples": args.samples, "diag_shift": diag_shift, "learning_rate": LR,
                  "quick": quick, "host": host_info(), "rows": rows}
        write_result(args.json, record, __file__, argv, indent=2)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
