"""Time evolution in a run folder: ``quantax-lite evolve`` as a library call.

:func:`evolve_run` takes a wavefunction (a trained run's newest parameters,
``init_from``, or a named product state, ``initial_state``), a quench (the Hamiltonian's
options, as the recipe names them) and evolves it by TDVP (:mod:`quantax_lite.evolution`)
to ``t_end``, under the folder's lock. It writes ``log.jsonl`` (one record per time: t,
energy with its error, ``<S^x_i>`` and ``<S^z_i>`` per site with errors, the step's TDVP
residual), checkpoints of the :class:`~quantax_lite.evolution.EvolutionState` (a resumed
run continues bit for bit), ``summary.json`` and ``observables_vs_time.png`` (beside the
exact curves of :func:`quantax_lite.exact.exact_evolution` up to :data:`MAX_EXACT_SITES`).

Initial states: ``"x"``, every spin along +x, the uniform superposition: the run's network
with its readout set to zero gives it exactly. There the backbone's derivatives vanish, so
the first step sees only the readout's directions (TDVP residual 0.39 on chain:8, 1e-5
once the readout has moved): the default adaptive integrator takes small first steps and
then grows them. Measured on chain:8, h = 0.5, exact sums, up to t = 0.2: max |dE| 1.3e-4
and max |d<S^x>| 1.6e-4 (adaptive, tol 1e-4); RK4 with dt = 0.02: 2.8e-3 in both (to
t = 1), almost all of it from the first step. The Neel state is not offered: a network
projected on the translations cannot represent it (it breaks them).
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from quantax_lite.utils import tuning
from quantax_lite.utils.validate import finite_number, positive_int
from quantax_lite.driver.checkpoint import checkpoint_path, load_latest_checkpoint, prune_checkpoints, save_checkpoint
from quantax_lite.utils.errors import FieldError, concerning
from quantax_lite.evolution import (RK4, Adaptive, Euler, EvolutionDiverged, EvolutionStalled, Heun, PseudoInverse, Shift,
                                   TDVP, evolve)
from quantax_lite.exact.dynamics import exact_evolution, exact_observables
from quantax_lite.hamiltonians import hamiltonian_names
from quantax_lite.hilbert.configurations import all_states
from quantax_lite.geometry.lattice import parse_lattice
from quantax_lite.observables.column_stats import all_column_stats
from quantax_lite.observables.programs import log_psi_fn
from quantax_lite.recipes import Recipe, build, load_run, physical_basis, seed_key
from quantax_lite.operators.hamiltonian import make_local_energy
from quantax_lite.cli.report import energy_unit, save_figure, write_json
from quantax_lite.driver.run_folder import append_log, check_writable, lock_run_folder, prepare_run_folder, read_log, truncate_log
from quantax_lite.operators.local_operators import sx, sz
from quantax_lite.sampler import of_psi_squared
from quantax_lite.driver.warm_start import check_source

__all__ = ["evolve_run", "EvolutionStopped", "EVOLUTION_DEFAULTS", "INITIAL_STATES", "INTEGRATORS", "MAX_EXACT_SITES",
           "magnetizations", "bond_zz", "options_of_evolution", "same_option"]

INITIAL_STATES = ("x",)
INTEGRATORS = ("euler", "heun", "rk4", "adaptive")
MAX_EXACT_SITES = 16  # the exact curves beside the plot up to this many sites
_FIXED = {"euler": Euler, "heun": Heun, "rk4": RK4}


class EvolutionStopped(RuntimeError):
    """The evolution became non-finite; ``summary`` (summary.json) says where, and the folder
    keeps the last good state as its newest checkpoint."""

    def __init__(self, message: str, summary: dict):
        super().__init__(message)
        self.summary = summary


def _stderr(line: str) -> None:
    print(f"quantax-lite evolve: {line}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------- the options
def check_options(*, init_from, initial_state, lattice, hamiltonian, t_end, dt, tol, integrator, sampling, samples,
                  resume: bool = False, restart: bool = False) -> None:
    """The options on their own, before anything is read or written: ``FieldError`` naming the one at fault."""
    if (init_from is None) == (initial_state is None):
        raise FieldError("initial_state", "initial_state: give one start, `init_from` (a trained run folder) or "
                         f"`initial_state` ({', '.join(INITIAL_STATES)}).")
    if initial_state is not None and initial_state not in INITIAL_STATES:
        raise FieldError("initial_state", f"initial_state: expected one of {', '.join(INITIAL_STATES)}, got "
                         f"{initial_state!r} (the Neel state breaks the translations the network is projected on).")
    if initial_state is not None and lattice is None:
        raise FieldError("lattice", "lattice: a named initial state needs the lattice, e.g. `lattice` chain:8.")
    if hamiltonian is not None and hamiltonian not in hamiltonian_names():
        raise FieldError("hamiltonian", f"hamiltonian: expected one of {', '.join(hamiltonian_names())}, got "
                         f"{hamiltonian!r}.")
    with concerning("t_end"):
        finite_number(t_end, "t_end", above=0)
    if integrator not in INTEGRATORS:
        raise FieldError("integrator", f"integrator: expected one of {', '.join(INTEGRATORS)}, got {integrator!r}.")
    if integrator == "adaptive":
        with concerning("tol"):
            finite_number(tol if tol is not None else _TAKEN["tol"], "tol", above=0)
    elif tol is not None:
        raise FieldError("tol", f"tol: only the adaptive integrator has a tolerance; pass `dt` with {integrator}.")
    if dt is not None:
        with concerning("dt"):
            finite_number(dt, "dt", above=0)
    if sampling not in ("exact_sum", "metropolis"):
        raise FieldError("sampling", f"sampling: expected exact_sum or metropolis, got {sampling!r}.")
    if sampling == "exact_sum" and samples is not None:
        raise FieldError("samples", "samples: exact sums draw no samples; leave `samples` out.")
    if samples is not None:
        with concerning("samples"):
            positive_int(samples, "samples")
    if resume and restart:
        raise FieldError("restart", "restart: `resume` and `restart` exclude each other.")
    if init_from is not None:
        check_source(init_from)


# the options an evolution is started with, as evolve_run names them, and where not given
EVOLUTION_DEFAULTS = {"init_from": None, "initial_state": None, "lattice": None, "hamiltonian": None, "h": None,
                      "J2": None, "dt": None, "tol": None, "integrator": "adaptive", "regularization": "pinv",
                      "rcond": 1e-6, "diag_shift": 1e-6, "sampling": "exact_sum", "samples": None,
                      "imaginary": False, "seed": 0}
# what evolve_run takes for these options left out (None): the first step, the adaptive tolerance
_TAKEN = {"dt": 0.01, "tol": 1e-4}


def options_of_evolution(out_dir) -> dict | None:
    """The options the evolution in ``out_dir`` was started with (its newest readable
    checkpoint's record), ``{name: value}`` for every key of :data:`EVOLUTION_DEFAULTS`;
    None where the folder holds no readable checkpoint. ``FieldError`` naming ``out_dir``
    where it holds a checkpoint of something else (a ``train`` run)."""
    from quantax_lite.driver.checkpoint import newest_readable_checkpoint

    out = os.fspath(out_dir)
    found = newest_readable_checkpoint(out) if os.path.isdir(out) else None
    if found is None:
        return None
    metadata = found[1]
    config = metadata.get("config")
    if metadata.get("kind") != "evolve" or not isinstance(config, dict) or not isinstance(config.get("recipe"), dict):
        raise FieldError("out_dir", f"out_dir: {out} holds no evolution to resume (its checkpoints are not "
                         "quantax-lite evolve's); choose the evolution's folder.")
    recipe = config["recipe"]  # the rest as evolve_run records them, beside the recipe
    options = {**EVOLUTION_DEFAULTS, **{k: v for k, v in config.items() if k in EVOLUTION_DEFAULTS}}
    options.update(lattice=recipe.get("lattice"), hamiltonian=recipe.get("hamiltonian"), h=recipe.get("h"),
                   J2=recipe.get("J2"), sampling=recipe.get("sampling", "exact_sum"), seed=recipe.get("seed", 0),
                   samples=recipe.get("samples") if recipe.get("sampling") == "metropolis" else None)
    return options


def same_option(name: str, given, recorded) -> bool:
    """Whether an option given equals the value an evolution recorded (folders by their
    absolute path, lattices by name, ``dt`` and ``tol`` left out as the values taken)."""
    given, recorded = (_TAKEN.get(name) if v is None else v for v in (given, recorded))
    if given is None or recorded is None:
        return given is recorded
    if name == "init_from":
        return os.path.abspath(os.fspath(given)) == os.path.abspath(os.fspath(recorded))
    if name == "lattice":
        try:
            return parse_lattice(given).name == parse_lattice(recorded).name
        except (TypeError, ValueError):
            return False
    return given == recorded


def _recipe(*, init_from, initial_state, lattice, hamiltonian, h, J2, sampling, samples, seed, imaginary) -> tuple:
    """``(recipe, source params or None)``: the run's recipe with the quench's Hamiltonian."""
    quench = {k: v for k, v in dict(hamiltonian=hamiltonian, h=h, J2=J2).items() if v is not None}
    sampled = dict(sampling=sampling, **({"samples": samples} if samples is not None else {}))
    if initial_state is not None:
        with concerning():
            recipe = Recipe(lattice=lattice, amplitude="complex", marshall=False, seed=seed, **quench, **sampled)
            r = build(recipe)
        if r.hamiltonian.conserves_sz:
            raise FieldError("initial_state", f"initial_state: {initial_state!r} holds every magnetization, but "
                             f"{recipe.hamiltonian} conserves Sz and the run sums over Sz = 0 only; quench to a "
                             "model that does not (tfim with h != 0).")
        return r, _uniform(r.state.params)
    loaded = load_run(init_from)
    source = loaded.recipe
    if lattice is not None and parse_lattice(lattice).name != loaded.run.lattice.name:
        raise FieldError("init_from", f"init_from: {init_from} is a run on {loaded.run.lattice.name}, not on "
                         f"{parse_lattice(lattice).name} (`lattice`); leave `lattice` out or give the run's.")
    if sampling == "exact_sum":  # the run's own sampling options do not apply to exact sums
        sampled.update(chains=None, sweep_size=None, eval_samples=None, full_stage_samples=None)
    with concerning():
        recipe = dataclasses.replace(source, seed=seed, **quench, **sampled)
        r = build(recipe)
    kind = recipe.amplitude_kind(r.hamiltonian)
    if kind != "complex" and not imaginary:
        raise FieldError("init_from", f"init_from: the run's network is {kind} (a real psi), which cannot follow the "
                         "phases of real-time motion; train it with `amplitude` complex, or evolve in `imaginary` time.")
    if r.sampler.n_sites != loaded.run.sampler.n_sites:
        raise FieldError("init_from", "init_from: the run's lattice differs from the evolution's.")
    return r, loaded.state.params


def _uniform(params):
    """``params`` with every readout weight 0: log psi constant, the uniform superposition."""
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    if not any("readout" in jax.tree_util.keystr(p) for p, _ in flat):
        raise FieldError("initial_state", "initial_state: the network has no readout layer to set to zero.")
    return jax.tree_util.tree_map_with_path(
        lambda p, x: jnp.zeros_like(x) if "readout" in jax.tree_util.keystr(p) else x, params)


def _integrator(name: str, tol):
    return Adaptive(tol=_TAKEN["tol"] if tol is None else tol) if name == "adaptive" else _FIXED[name]()


def _regularization(name: str, rcond: float, diag_shift: float):
    with concerning("rcond" if name == "pinv" else "diag_shift"):
        return PseudoInverse(rcond) if name == "pinv" else Shift(diag_shift)


# ----------------------------------------------------------------- measurements
def magnetizations(log_psi, params, samples, weights=None, *, n_chains: int = 1, symmetry=None) -> dict:
    """``<S^x_i>`` and ``<S^z_i>`` per site with errors (spin-1/2 units), and the errors of
    their site means (``sx_mean_error``, ``sz_mean_error``; the means are those of the
    lists), from ``samples`` (int8 (N, n_sites), chain-major over ``n_chains``) or rows with
    exact ``weights``. With ``symmetry`` (the rows are one per orbit of the group) each
    site's value is averaged over the group's images, exact for a state of that symmetry."""
    s = jnp.asarray(samples, jnp.int8)
    n = s.shape[1]
    flip = 1 - 2 * jnp.eye(n, dtype=s.dtype)
    evaluate = log_psi_fn(log_psi, None, None, tuning.current())  # chunk_map over every device, compiled once
    lp = evaluate(params, s)
    lp_flip = evaluate(params, (s[:, None, :] * flip[None]).reshape(-1, n)).reshape(s.shape[0], n)
    mx = 0.5 * np.real(np.asarray(jnp.exp(lp_flip - lp[:, None])))
    mz = 0.5 * np.asarray(s, np.float64)
    w = None if weights is None else np.asarray(weights, np.float64)
    columns = np.concatenate([mx, mz, mx.mean(axis=1, keepdims=True), mz.mean(axis=1, keepdims=True)], axis=1)
    mean, error = (np.asarray(x) for x in all_column_stats(columns, n_chains, w)[:2])
    mean, (error, mean_error) = mean[:2 * n].reshape(2, n), (error[:2 * n].reshape(2, n), error[2 * n:])
    if symmetry is not None and w is not None:
        perms, flips = np.asarray(symmetry.perms), np.asarray(symmetry.flips, np.float64)
        mean = np.stack([mean[0][perms].mean(axis=0), (flips[:, None] * mean[1][perms]).mean(axis=0)])
    return {"sx": mean[0].tolist(), "sx_error": error[0].tolist(), "sz": mean[1].tolist(),
            "sz_error": error[1].tolist(), "sx_mean_error": float(mean_error[0]), "sz_mean_error": float(mean_error[1])}


def bond_zz(samples, bonds, weights=None, *, n_chains: int = 1) -> dict:
    """``<S^z_i S^z_j>`` averaged over ``bonds`` (pairs (i, j); spin-1/2 units) with its
    error, from ``samples`` (int8 (N, n_sites), chain-major over ``n_chains``) or rows with
    exact ``weights``. The mean over a lattice's bonds is the same on every image of a row
    under the lattice's symmetries and spin inversion, so rows one per orbit need no more."""
    bonds = np.asarray(bonds, np.int64).reshape(-1, 2)
    if not len(bonds):
        raise ValueError("bonds: expected at least one pair of sites, got none")
    s = np.asarray(samples, np.float64)
    values = 0.25 * np.mean(s[:, bonds[:, 0]] * s[:, bonds[:, 1]], axis=1)
    w = None if weights is None else np.asarray(weights, np.float64)
    mean, error = all_column_stats(values[:, None], n_chains, w)[:2]
    return {"szsz_nn": float(np.asarray(mean)[0]), "szsz_nn_error": float(np.asarray(error)[0])}


def measurement(run, tdvp, log_psi) -> Callable:
    """``measure(state) -> record``: energy with its error, the magnetizations and the
    nearest-neighbour ``<S^z_i S^z_j>`` of a state at its time, from fresh samples drawn from
    a copy of its chains (the state's own chains do not move: a resumed run measures the
    same) or from the exact rows. Samples of |psi|^2 also where the evolution samples
    |psi|^(2 power): the copy is thermalized again at power 1 first."""
    local = make_local_energy(run.hamiltonian, run.model.apply, mesh=run.sampler.resolved_mesh(), jit=False)
    sampler, again = (run.sampler, False) if tdvp.exact else of_psi_squared(run.sampler)

    @jax.jit
    def draw(params, chains):
        if tdvp.exact:
            rows, lp, w = sampler.probabilities(params)
        else:
            rows, lp, _ = sampler.sample(chains, params, tdvp.n_samples, **({"thermalize": True} if again else {}))
            w = None
        return rows, local(params, rows, lp), w

    def measure(state) -> dict:
        rows, e_loc, w = draw(state.params, state.sampler)
        chains = 1 if tdvp.exact else run.sampler.n_chains
        mean, error = all_column_stats(np.real(np.asarray(e_loc))[:, None], chains, w)[:2]
        mags = magnetizations(log_psi, state.params, rows, w, n_chains=chains,
                              symmetry=run.sampler.symmetry if tdvp.exact else None)
        zz = bond_zz(rows, run.lattice.bonds(1), w, n_chains=chains)
        return {"t": float(state.t), "energy": float(mean[0]), "energy_error": float(error[0]), **mags, **zz}

    return measure


# ----------------------------------------------------------------- exact curves
def _exact_curves(run, params, times, log_psi, imaginary: bool) -> dict | None:
    """Exact energy, <S^x>, <S^z> (site means) and the nearest-neighbour <S^z_i S^z_j> at
    ``times`` from the network's initial vector, or None above :data:`MAX_EXACT_SITES` sites."""
    n = run.lattice.n_sites
    if n > MAX_EXACT_SITES:
        return None
    _, ham = physical_basis(run.model.apply, run.hamiltonian)
    total_sz = 0 if ham.conserves_sz else None
    states = all_states(n, total_sz)
    lp = np.asarray(jax.jit(log_psi)(params, jnp.asarray(states)))
    psi0 = np.exp(lp - np.max(lp.real))
    vectors, _ = exact_evolution(ham, psi0, np.asarray(times), total_sz=total_sz, imaginary=imaginary)
    bonds = run.lattice.bonds(1)
    ops = {"energy": ham, "sx": sum(sx(i, n) for i in range(n)) / n, "sz": sum(sz(i, n) for i in range(n)) / n,
           "szsz_nn": sum(sz(int(i), n) @ sz(int(j), n) for i, j in bonds) / len(bonds)}
    return {k: v.tolist() for k, v in exact_observables(ops, vectors, states).items()} | {"t": list(map(float, times))}


def plot_observables(path: str, log: list[dict], exact: dict | None, title: str, unit: str) -> None:
    """Energy, site-mean <S^x>, <S^z> and the nearest-neighbour <S^z_i S^z_j> against time with
    error bars, exact curves beside."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(17, 3.8))
    t = np.array([r["t"] for r in log])

    def mean_error(r, name):  # (a log begun by an earlier version: one site's error, an upper bound)
        return r.get(f"{name}_mean_error", np.sqrt(np.mean(np.square(r[f"{name}_error"]))))

    series = {"energy": ([r["energy"] for r in log], [r["energy_error"] for r in log]),
              "sx": ([np.mean(r["sx"]) for r in log], [mean_error(r, "sx") for r in log]),
              "sz": ([np.mean(r["sz"]) for r in log], [mean_error(r, "sz") for r in log]),
              "szsz_nn": ([r.get("szsz_nn", np.nan) for r in log], [r.get("szsz_nn_error", np.nan) for r in log])}
    labels = {"energy": f"energy [{unit}]", "sx": "<S^x> (site mean)", "sz": "<S^z> (site mean)",
              "szsz_nn": "<S^z_i S^z_j> (nearest neighbours)"}
    for ax, (name, (y, err)) in zip(axes, series.items()):
        ax.errorbar(t, y, yerr=err, fmt=".-", ms=3, lw=1, label="TDVP")
        if exact is not None:
            ax.plot(exact["t"], exact[name], "k--", lw=1, label="exact")
        ax.set_xlabel("t")
        ax.set_ylabel(labels[name])
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)


# ----------------------------------------------------------------- the run
def evolve_run(out_dir, *, t_end: float, init_from=None, initial_state: str | None = None, lattice: str | None = None,
               hamiltonian: str | None = None, h: float | None = None, J2: float | None = None, dt: float | None = None,
               tol: float | None = None, integrator: str = "adaptive", regularization: str = "pinv", rcond: float = 1e-6,
               diag_shift: float = 1e-6, sampling: str = "exact_sum", samples: int | None = None,
               imaginary: bool = False, seed: int = 0, resume: bool = False, restart: bool = False,
               checkpoint_every: int = 10, keep_checkpoints: int = 3, progress: bool = True,
               announce: Callable[[str], None] | None = _stderr) -> dict:
    """Evolve a wavefunction to ``t_end`` (time units, hbar = 1: inverse units of H) in the
    run folder ``out_dir``; returns the summary (also ``summary.json``).

    Start: ``init_from`` (a ``quantax-lite train`` folder: its network and newest
    parameters; ``lattice``, if given, must be its lattice) or ``initial_state`` ("x", on
    ``lattice``). Quench: ``hamiltonian``, ``h``, ``J2`` as the recipe names them (default:
    the run's, or the recipe's). Steps: ``integrator`` adaptive (default, with ``tol``,
    default 1e-4; ``dt`` its first proposal) or euler, heun, rk4 with the step ``dt``
    (default 0.01).
    ``regularization``: "pinv" (eigenvalues below ``rcond`` x the largest dropped) or
    "shift" (``diag_shift``). ``sampling``: exact_sum or metropolis with ``samples`` per
    evaluation. ``imaginary``: imaginary time. ``resume``: continue from the folder's newest
    checkpoint (the same options; ``t_end`` may grow). Errors a user can make raise
    :class:`~quantax_lite.utils.errors.FieldError` naming the option, before anything is written;
    a diverged evolution raises :class:`EvolutionStopped` with its last good state saved.
    """
    check_options(init_from=init_from, initial_state=initial_state, lattice=lattice, hamiltonian=hamiltonian,
                  t_end=t_end, dt=dt, tol=tol, integrator=integrator, sampling=sampling, samples=samples,
                  resume=resume, restart=restart)
    if regularization not in ("pinv", "shift"):
        raise FieldError("regularization", f"regularization: expected pinv or shift, got {regularization!r}.")
    for name, value in (("checkpoint_every", checkpoint_every), ("keep_checkpoints", keep_checkpoints)):
        with concerning(name):
            positive_int(value, name)
    out = os.fspath(out_dir)
    run, params = _recipe(init_from=init_from, initial_state=initial_state, lattice=lattice, hamiltonian=hamiltonian,
                          h=h, J2=J2, sampling=sampling, samples=samples, seed=seed,
                          imaginary=imaginary)
    tdvp = TDVP(run.hamiltonian, run.sampler, n_samples=run.vmc.n_samples, integrator=_integrator(integrator, tol),
                regularization=_regularization(regularization, rcond, diag_shift), imaginary=bool(imaginary))
    with concerning("dt"):
        fresh = tdvp.init(params, seed_key(seed), dt=_TAKEN["dt"] if dt is None else dt)
    config = dict(init_from=None if init_from is None else os.path.abspath(os.fspath(init_from)),
                  initial_state=initial_state, recipe=run.recipe.config(), dt=dt, tol=tol, integrator=integrator,
                  regularization=regularization, rcond=rcond, diag_shift=diag_shift, imaginary=bool(imaginary))
    # an evolution of an earlier version records its recipe in that version's form: compared as a recipe
    compared = {**config, "recipe": _recipe_as_recorded(out, run.recipe)} if resume else config
    if not restart:  # nothing (or another evolution) to resume: refused before the folder and its lock are created
        prepare_run_folder(out, resume=resume, restart=False, config=compared)  # (only reads without restart)
    check_writable(out)
    with lock_run_folder(out):
        prepare_run_folder(out, resume=resume, restart=restart, config=compared)
        say = announce if progress and announce is not None else (lambda line: None)
        return _evolve(run, tdvp, fresh, out, config, float(t_end), say, checkpoint_every=checkpoint_every,
                       keep_checkpoints=keep_checkpoints, resume=resume, progress=progress)


def _recipe_as_recorded(out: str, recipe: Recipe) -> dict:
    """``recipe``'s config, or the one the newest checkpoint in ``out`` records where that
    reads as the same recipe (a config of an earlier version lacks later fields)."""
    from quantax_lite.driver.checkpoint import newest_readable_checkpoint
    from quantax_lite.recipes.schema import migrate

    mine = recipe.config()
    found = newest_readable_checkpoint(out) if os.path.isdir(out) else None
    recorded = (found[1].get("config") or {}).get("recipe") if found is not None else None
    if not isinstance(recorded, dict) or recorded == mine:
        return mine
    try:
        same = Recipe(**migrate(recorded, {f.name for f in dataclasses.fields(Recipe)})).config() == mine
    except (TypeError, ValueError):
        return mine
    return recorded if same else mine


def _evolve(run, tdvp, state, out, config, t_end, say, *, checkpoint_every, keep_checkpoints, resume, progress):
    log_path = os.path.join(out, "log.jsonl")
    initial_params = state.params
    log_psi = physical_basis(run.model.apply, run.hamiltonian)[0]
    measure = measurement(run, tdvp, log_psi)
    if resume:
        state, _, _ = load_latest_checkpoint(out, state)
        truncate_log(log_path, int(state.step))
    with concerning("t_end"):
        if not t_end > float(state.t):
            raise FieldError("t_end", f"t_end: expected a time after the run's t = {float(state.t):g}, got {t_end!r}.")
    metadata = {"config": config, "kind": "evolve"}
    what = "exact sums" if tdvp.exact else f"{tdvp.n_samples} samples per evaluation"
    say(f"{run.recipe.hamiltonian} on {run.lattice.name}, {'imaginary' if tdvp.imaginary else 'real'} time from "
        f"t = {float(state.t):g} to {t_end:g}, {what}; writing {out}")
    if not resume:
        append_log(log_path, {"iteration": 0, **measure(state)})
        save_checkpoint(checkpoint_path(out, 0), state, metadata)

    good = {"state": state, "records": []}  # the last state whose measurement was finite

    def record(rec, new):
        step = int(new.step)
        line = {"iteration": step, **measure(new), "dt": rec["dt"],
                "residual": rec["residual"], "error": rec["error"], "wall_time_s": rec["wall_time_s"]}
        if not _finite(line):  # finite parameters whose observables are not: not a good state either
            last = good["state"]
            raise EvolutionDiverged(last, int(last.step), float(last.t), good["records"])
        append_log(log_path, line)
        good["state"] = new
        good["records"].append(rec)
        if step % checkpoint_every == 0:
            save_checkpoint(checkpoint_path(out, step), new, metadata)
            prune_checkpoints(out, keep_checkpoints)

    t0 = time.perf_counter()
    summary = {"lattice": run.lattice.name, "hamiltonian": run.recipe.hamiltonian, "n_sites": run.lattice.n_sites,
               "n_params": run.n_params, "config": config, "t_end": t_end, "diverged": False}
    try:
        state, _ = evolve(tdvp, state, t_end, callbacks=[record], progress=progress)
    except EvolutionDiverged as err:
        state = err.state
        save_checkpoint(checkpoint_path(out, int(state.step)), state, metadata)
        summary.update(diverged=True, t=float(state.t), steps=int(state.step), wall_time_s=time.perf_counter() - t0)
        write_json(os.path.join(out, "summary.json"), summary)
        raise EvolutionStopped(f"t = {float(err.t):g}: the evolution became non-finite, so it stopped with its last "
                               "good state saved; summary.json says diverged. Lower `dt` (or `tol`), or raise "
                               "`rcond`.", summary) from None
    except EvolutionStalled as err:  # the last state kept, so that a longer step resumes from it
        save_checkpoint(checkpoint_path(out, int(err.state.step)), err.state, metadata)
        raise FieldError("dt", f"dt: {err} Give a longer `dt` (or a larger `tol`).") from None
    save_checkpoint(checkpoint_path(out, int(state.step)), state, metadata)
    prune_checkpoints(out, keep_checkpoints)
    log = read_log(log_path)
    exact = _exact_curves(run, initial_params, [r["t"] for r in log], log_psi, tdvp.imaginary)
    summary.update(t=float(state.t), steps=int(state.step), rejected=int(state.rejected),
                   wall_time_s=time.perf_counter() - t0, final=log[-1], exact=exact)
    if exact is not None:
        names = [k for k in ("energy", "sx", "sz", "szsz_nn")
                 if all(k in r for r in log)]  # (a log begun by an earlier version has no szsz_nn)
        summary["max_deviation"] = {k: float(np.max(np.abs(np.array([_site_mean(r, k) for r in log]) -
                                                           np.array(exact[k])))) for k in names}
    write_json(os.path.join(out, "summary.json"), summary)
    title = f"{run.recipe.hamiltonian} {run.lattice.name}, {'imaginary' if tdvp.imaginary else 'real'} time"
    plot_observables(os.path.join(out, "observables_vs_time.png"), log, exact, title,
                     energy_unit(run.recipe.hamiltonian))
    return summary


def _finite(record: dict) -> bool:
    """Whether every number of a log record is finite (None counts as not)."""
    values = [v for v in record.values() if not isinstance(v, list)] + [x for v in record.values()
                                                                         if isinstance(v, list) for x in v]
    return all(v is not None and np.isfinite(v) for v in values)


def _site_mean(record: dict, name: str) -> float:
    return float(np.mean(record[name]))
