"""The observables of a trained run: ``quantax-lite measure`` as a library call.

:func:`measure_run` rebuilds the run of a folder through its recipe
(:func:`~quantax_lite.recipes.load_run`), draws fresh samples from its newest readable
checkpoint (or sums over every configuration of an exact-sum run), measures every
observable (:func:`quantax_lite.observables.measure`) and writes ``observables.json`` and
its plots. The pieces are the ones ``train --measure`` and the summary's S(pi, pi) use:
:func:`measure_samples`, :func:`every_configuration`, :func:`order_parameter`.
"""
from __future__ import annotations

import math
import os
import sys
from typing import Callable, NamedTuple

import jax
import numpy as np
from tqdm.auto import tqdm

from quantax_lite.utils.validate import positive_int
from quantax_lite.driver.draws import draw_samples
from quantax_lite.driver.memory import check_chunk_size
from quantax_lite.utils.errors import FieldError, concerning
from quantax_lite.observables.lanczos import lanczos_record, lanczos_sampled, lanczos_step
from quantax_lite.observables import measure, spin_correlations, staggered_magnetization_sq
from quantax_lite.recipes import check_seed, load_run, physical_basis, recipe_of_run, seed_key
from quantax_lite.cli.report import energy_unit, plot_energy, write_observables
from quantax_lite.driver.run_folder import lock_run_folder, read_log
from quantax_lite.sampler import FullSumSampler

__all__ = ["Measured", "measure_run", "measure_samples", "every_configuration", "order_parameter",
           "network_evaluations", "provenance", "lanczos_of_run", "lanczos_evaluations"]


class Measured(NamedTuple):
    """What :func:`measure_run` returns: the observables (``observables.json``'s content),
    the files written, the run's recipe."""

    observables: dict
    written: list
    recipe: object


def observable_chunk(chunk_size):
    """The observables' chunk: an int chunk size as given, else the library's (None)."""
    return None if chunk_size in (None, "auto") else chunk_size


def order_parameter(run, params, samples, chunk_size=None, weights=None) -> dict:
    """S(pi, pi) and m^2 for the summary, from the first samples of every chain of a final
    estimate (chain-major ``samples``): as many as cost about the energy estimate's network
    evaluations (a pair correlation costs one evaluation per pair, the energy one per bond).
    With ``weights`` (exact sums) from every row: both are sums over all pairs, invariant
    under the run's group, so the orbit representatives with their weights give them exactly.
    None entries on lattices without two sublattices."""
    n_chains, n_sites = run.sampler.n_chains, run.lattice.n_sites
    if getattr(run.lattice, "n_sublattices", 2) != 2:  # no staggered pattern
        return {"s_pi_pi": None, "staggered_magnetization_sq": None}
    if weights is None:
        per = samples.shape[0] // n_chains
        keep = min(per, max(1, math.ceil(per * run.hamiltonian.max_conn / (n_sites * (n_sites - 1) / 2))))
        subset = samples.reshape(n_chains, per, n_sites)[:, :keep].reshape(n_chains * keep, n_sites)
    else:
        subset = samples
    log_psi, _ = physical_basis(run.model.apply, run.hamiltonian)
    corr = spin_correlations(log_psi, params, subset, n_chains=n_chains, chunk_size=observable_chunk(chunk_size),
                             weights=weights)
    (s, s_err), (m2, m2_err) = staggered_magnetization_sq(corr, run.lattice)
    finite = lambda x: x if x is not None and math.isfinite(x) else None  # noqa: E731
    return {"s_pi_pi": finite(s), "s_pi_pi_error": finite(s_err), "staggered_magnetization_sq": finite(m2),
            "staggered_magnetization_sq_error": finite(m2_err), "n_observable_samples": int(subset.shape[0])}


def measure_samples(run, params, samples, weights=None, *, chunk_size=None, dimers: bool = True) -> dict:
    """:func:`quantax_lite.observables.measure` of ``run`` (a :class:`~quantax_lite.recipes.Run`)
    on chain-major ``samples`` of its chains, or on configurations with exact ``weights``
    (:func:`every_configuration`), in the plain spin basis
    (:func:`~quantax_lite.recipes.physical_basis`), energies in the run's units."""
    log_psi, hamiltonian = physical_basis(run.model.apply, run.hamiltonian)
    return measure(log_psi, params, samples, run.lattice, hamiltonian=hamiltonian,
                   n_chains=1 if weights is not None else run.sampler.n_chains,
                   chunk_size=observable_chunk(chunk_size), dimers=dimers, weights=weights)


def every_configuration(run, params):
    """(every configuration of the sector of an exact_sum ``run``, int8 (n, n_sites); their
    weights |psi|^2 / Z (n,)): what observables that are not invariant under the run's group
    (single pair correlations) are summed over, exactly."""
    every = FullSumSampler(run.model.apply, run.lattice.n_sites, total_sz=run.sampler.total_sz,
                           chunk_size=run.sampler.chunk_size, max_states=run.sampler.max_states)
    states, _, weights = every.probabilities(params)
    # the sector's psi vanishes on some configurations of the magnetization sector: leave them out
    keep = np.asarray(weights) > 1e-12 * float(np.max(weights))
    weights = np.asarray(weights)[keep]
    return np.asarray(states)[keep], weights / weights.sum()


def network_evaluations(run, n_samples: int, dimers: bool = True) -> int:
    """About how many network evaluations :func:`measure_samples` makes on ``n_samples``
    configurations: per configuration one for log psi, one per connection of the
    Hamiltonian (the energy), one per pair of sites (the spin correlations) and, with
    ``dimers`` on chains and square lattices, ``N_b + N_b^2`` per axis (``N_b`` bonds along
    it). A symmetrized network evaluates each on every image of its group."""
    lattice = run.lattice
    n = lattice.n_sites
    per = 1 + int(run.hamiltonian.max_conn) + n * (n - 1) // 2
    if dimers and lattice.is_hypercubic:
        for axis, length in enumerate(lattice.shape):
            if length >= 2:
                nb = n if lattice.pbc else n - n // length
                per += nb + nb * nb
    return int(n_samples) * per


def provenance(recipe, iteration: int, source: str, exact) -> dict:
    """The ``"run"`` record of ``observables.json``: recipe, step, where the samples come from."""
    return {"recipe": recipe.config(), "iteration": iteration, "samples_from": source,
            "energy_unit": energy_unit(recipe.hamiltonian), "exact_energy": exact,
            "basis": "plain spin basis (a Marshall rotation of the training undone)"}


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def lanczos_of_run(run, params, samples, weights=None, *, key=None, passes: int = 2, progress: bool = False) -> dict:
    """One Lanczos step on the state ``params`` of ``run`` (:mod:`quantax_lite.observables.lanczos`),
    as its JSON record (:func:`~quantax_lite.observables.lanczos.lanczos_record`, against the run's
    exact energy where known): with ``weights``, summed exactly over ``samples`` (an
    exact-sum run's orbit rows); else from chain-major ``samples`` of the run's chains,
    which choose the step, and as many samples of the step's own state drawn with ``key``,
    ``passes`` sets in all (:func:`~quantax_lite.observables.lanczos.lanczos_sampled`). In the
    run's own basis."""
    exact = run.recipe.reference_energy(run.lattice, run.hamiltonian)
    n = int(np.shape(samples)[0])
    with tqdm(total=n if weights is not None else passes * n, desc="Lanczos step", disable=not progress,
              dynamic_ncols=True, file=sys.stderr) as bar:
        advance = lambda done, total: bar.update(done - bar.n)  # noqa: E731
        if weights is not None:
            step = lanczos_step(run.hamiltonian, run.model.apply, params, samples, weights=weights, progress=advance)
            return lanczos_record(step, run.lattice.n_sites, exact)
        step, first = lanczos_sampled(run.hamiltonian, run.model.apply, params, run.sampler,
                                      jax.random.key(0) if key is None else key, samples, passes=passes,
                                      progress=advance)
    return lanczos_record(step, run.lattice.n_sites, exact, first)


def lanczos_evaluations(run, n_configurations: int, passes: int = 2) -> int:
    """About how many network evaluations one Lanczos step makes on ``n_configurations``:
    per configuration its ``max_conn`` connections, and for each the connections of that
    one (an upper bound: only nonzero matrix elements are evaluated); a sampled run
    ``passes`` times that (its own samples, then as many of the Lanczos state per further
    pass), and the sampling of the Lanczos state, ``max_conn`` per proposal (not counted)."""
    m = int(run.hamiltonian.max_conn)
    once = int(n_configurations) * (m + (m - 1) * m)
    return once if run.recipe.sampling == "exact_sum" else passes * once


def measure_run(out_dir, *, samples: int | None = None, seed: int = 0, chunk_size="auto", dimers: bool = True,
                lanczos: bool = False, lanczos_passes: int = 2, progress: bool = True,
                announce: Callable[[str], None] | None = _stderr) -> Measured:
    """The observables of the run in ``out_dir`` (a ``quantax-lite train`` folder, finished or
    interrupted) from its newest readable checkpoint: ``samples`` fresh samples (default:
    the run's eval_samples; a multiple of its chains, and of its samples per step when
    larger) from the checkpoint's chains thermalized again with ``seed``, or every
    configuration of an exact-sum run (``samples`` refused). Writes ``observables.json``,
    ``structure_factor.png``, ``correlations.png`` (and ``energy.png`` where an interrupted
    run has none) under the folder's lock.

    progress: a bar over the sample blocks, and (through ``announce``) the cost in network
    evaluations before they run. Errors a user can make raise
    :class:`~quantax_lite.utils.errors.FieldError` naming ``out_dir``, ``samples``, ``seed``, ``chunk_size``,
    ``lanczos_passes`` (the sets of samples of a sampled run's Lanczos step, at least 2:
    :func:`~quantax_lite.observables.lanczos.lanczos_sampled`).
    """
    with concerning("lanczos_passes"):
        if positive_int(lanczos_passes, "lanczos_passes") < 2:
            raise ValueError(f"lanczos_passes: expected at least 2 (samples of psi, then of the step's state), "
                             f"got {lanczos_passes}.")
        if lanczos_passes != 2 and not lanczos:
            raise ValueError(f"lanczos_passes: {lanczos_passes} sets of samples of a Lanczos step; pass `lanczos` "
                             "too (there is no step without it).")
    if samples is not None:
        with concerning("samples"):
            positive_int(samples, "samples")
    with concerning("seed"):
        check_seed(seed)
    check_chunk_size(chunk_size)  # before the run's recipe, whose errors name out_dir
    out_dir = os.fspath(out_dir)
    with concerning("out_dir"):
        recipe = recipe_of_run(out_dir)[0]  # names out_dir before the lock creates anything
    exact_sum = recipe.sampling == "exact_sum"
    if exact_sum and samples is not None:
        raise FieldError("samples", "samples: the run sums over every configuration (sampling exact_sum), so it "
                         "draws no samples; leave `samples` out.")
    n = samples or recipe.n_eval_samples
    chains = recipe.n_chains(jax.device_count())
    per_step = sorted({recipe.samples_at(start) for _, start in recipe.symmetry_stages()})
    if not exact_sum and (n % chains or any(n > b and n % b for b in per_step)):
        raise FieldError("samples", f"samples: {n} must be a multiple of the run's {chains} chains, and of its "
                         f"{' / '.join(map(str, per_step))} samples per step when larger.")
    say = announce if progress and announce is not None else (lambda line: None)
    with lock_run_folder(out_dir):
        with concerning("out_dir"):  # a damaged log is refused before anything is computed or written
            log = [x for x in read_log(os.path.join(out_dir, "log.jsonl")) if x.get("energy") is not None]
            loaded = load_run(out_dir, chunk_size=chunk_size)
        r, state = loaded.run, loaded.state
        rows = r.sampler.n_states if exact_sum else n
        what = (f"exact sums over {rows} configurations" if exact_sum else f"{n} fresh samples on {chains} chains")
        images = getattr(r.model, "n_elements", 1)
        cost = f"about {network_evaluations(r, rows, dimers):.2g} network evaluations" + (
            f" of {images} images each" if images > 1 else "")
        if dimers and r.lattice.is_hypercubic:
            cost += f" ({network_evaluations(r, rows, False):.2g} without the dimers)"
        if lanczos:
            lanczos_rows = r.sampler.n_states if exact_sum else n
            cost += f"; the Lanczos step about {lanczos_evaluations(r, lanczos_rows, lanczos_passes):.2g} more"
        say(f"quantax-lite measure: {loaded.path} (step {int(state.iteration)}), {what}, {jax.device_count()} "
            f"device(s); {cost}")
        if exact_sum:
            configurations, weights = every_configuration(r, state.params)
        else:
            fresh = r.sampler.init(seed_key(seed), state.params, initial_states=state.sampler.states)
            configurations = _draw(r, fresh, state.params, n, progress)
            weights = None
        say("quantax-lite measure: measuring the observables ...")
        obs = measure_samples(r, state.params, configurations, weights, chunk_size=chunk_size, dimers=dimers)
        if lanczos:
            say("quantax-lite measure: one Lanczos step ...")
            if exact_sum:  # the orbit rows of the run's group, as its energy is summed
                rows_, _, w = r.sampler.probabilities(state.params)
                obs["lanczos"] = lanczos_of_run(r, state.params, np.asarray(rows_), np.asarray(w), progress=progress)
            else:  # its own chains, from the measurement's last configurations
                obs["lanczos"] = lanczos_of_run(r, state.params, np.asarray(configurations),
                                                key=jax.random.fold_in(seed_key(seed), 1), passes=lanczos_passes,
                                                progress=progress)
        exact = recipe.reference_energy(r.lattice, r.hamiltonian)
        obs["run"] = {**provenance(recipe, int(state.iteration), os.path.basename(loaded.path), exact), "seed": seed}
        title = f"{recipe.hamiltonian} {r.lattice.name}, step {int(state.iteration)}"
        written = write_observables(out_dir, obs, title)
        energy_png = os.path.join(out_dir, "energy.png")
        if log and not os.path.exists(energy_png):  # an interrupted run: train never drew it
            e = obs.get("energy", {})
            final = (e["mean"], e["error"]) if e.get("mean") is not None and e.get("error") is not None else None
            plot_energy(energy_png, log, exact, title, n_sites=r.lattice.n_sites, final=final,
                        unit=energy_unit(recipe.hamiltonian))
            written.append(energy_png)
    return Measured(obs, written, recipe)


def _draw(run, chains, params, n: int, progress: bool):
    """``n`` fresh samples (thermalized first), with a tqdm bar over the blocks."""
    with tqdm(total=n, desc="samples", disable=not progress, dynamic_ncols=True, file=sys.stderr) as bar:
        def advance(done, total):
            bar.update(done - bar.n)

        return draw_samples(run.vmc, chains, params, n, local_energies=False, progress=advance)[0]
