""":func:`measure`: every registered observable from one set of samples, as one JSON-ready dict.

One chunked program evaluates every ratio table the observables ask for (each table once),
one statistics pass takes the statistics of every observable's per-sample columns, then each
observable writes its entries (:mod:`quantax_lite.observables.contract`)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from quantax_lite.geometry.lattice import Lattice
from quantax_lite.operators.hamiltonian import SpinHamiltonian, hamiltonian_sizes
from .checks import lattice_of, samples_host
from .column_stats import all_column_stats
from .contract import ColumnStats, Inputs, Part, registered_observables
from .programs import sampled_inputs
from .ratios import moved_values

SCHEMA = "quantax_lite.observables/1"


def measure(
    log_psi: Callable,
    params,
    samples,
    lattice: Lattice,
    *,
    hamiltonian: SpinHamiltonian | None = None,
    n_chains: int | None = None,
    chunk_size: int | None = None,
    mesh=None,
    weights=None,
    log_psi_samples=None,
    dimers: bool = True,
    observables=None,
) -> dict:
    """Every registered observable from one set of samples, as a JSON-ready dict.

    Plain Python floats, ints and nested lists (NaN as None); the schema
    (``"schema": SCHEMA``) is written out in ``docs/observables.md``. ``hamiltonian``: adds
    ``"energy"``. ``dimers=False`` leaves out the dimer correlations (their cost grows as
    ``N^2`` evaluations per sample and axis). ``observables``: the names of the observables
    to compute (:func:`~quantax_lite.observables.observable_names`; None: all). Other
    arguments as in :func:`~quantax_lite.observables.spin_correlations`.
    """
    lattice = lattice_of(lattice)
    chosen = registered_observables(observables)
    n_sites = lattice.n_sites
    samples, n_chains, w, lp = sampled_inputs(log_psi, params, samples, n_sites, n_chains, weights,
                                              log_psi_samples, chunk_size, mesh)
    n = samples.shape[0]
    if hamiltonian is not None:
        h_sites, _ = hamiltonian_sizes(hamiltonian)
        if h_sites != n_sites:
            raise ValueError(f"hamiltonian: acts on {h_sites} sites, the lattice has {n_sites}")
    out: dict = {
        "schema": SCHEMA,
        "units": "spin-1/2 (S = sigma/2)",
        "n_sites": n_sites,
        "n_samples": int(n),
        "n_chains": n_chains,
        "exact": w is not None,
        "lattice": {"shape": list(lattice.shape), "pbc": bool(lattice.pbc), "name": lattice.name},
    }
    inputs = Inputs(log_psi, params, samples, samples_host(samples), lattice, n_chains, w, lp, chunk_size,
                    mesh, hamiltonian, bool(dimers))
    wanted = [tuple(obs.specs(inputs)) for obs in chosen]
    specs = list(dict.fromkeys(spec for own in wanted for spec in own))
    values = dict(zip(specs, moved_values(log_psi, params, samples, lp, specs, chunk_size, mesh) if specs else []))
    parts = []
    for obs, own in zip(chosen, wanted):
        part = obs.evaluate(inputs, tuple(values[spec] for spec in own))
        if part is not None:
            parts.append((obs, _checked(part, obs, n)))
    columns = np.concatenate([np.zeros((n, 0))] + [part.columns for _, part in parts], axis=1)
    mean, error, _, tau, r_hat = all_column_stats(columns, n_chains, w)
    start = 0
    for obs, part in parts:
        cut = slice(start, start + part.columns.shape[1])
        start = cut.stop
        if part.offset is not None:
            mean[cut] += part.offset
        entries = obs.finish(inputs, ColumnStats(mean[cut], error[cut], tau[cut], r_hat[cut]), part.state)
        taken = sorted(set(entries) & set(out))
        if taken:
            raise ValueError(f"observables: {obs.name!r} reports {taken}, reported already")
        out.update(entries)
    return out


def _checked(part, obs, n_samples: int) -> Part:
    if not isinstance(part, Part):
        raise TypeError(f"observables: {obs.name!r}.evaluate returned {type(part).__name__}, expected a Part or None")
    columns = np.asarray(part.columns)
    if columns.ndim != 2 or columns.shape[0] != n_samples:
        raise ValueError(f"observables: {obs.name!r}.evaluate returned columns of shape {columns.shape}, "
                         f"expected ({n_samples}, k)")
    if part.offset is not None and np.shape(part.offset) != (columns.shape[1],):
        raise ValueError(f"observables: {obs.name!r}.evaluate returned an offset of shape {np.shape(part.offset)}, "
                         f"expected ({columns.shape[1]},)")
    return Part(columns, part.state, part.offset)
