"""Observables of a wavefunction from samples: expectation values with Monte Carlo errors,
spin correlations, structure factor, staggered magnetization, dimer correlations, and
:func:`measure`, everything in one JSON-ready dict (``docs/observables.md``).

Units: spin-1/2, ``S = sigma / 2`` (``<S_i . S_i> = 3/4``). Samples are int8 +-1
configurations ``(n_samples, n_sites)`` in the chain-major layout of the samplers
(``n_chains`` consecutive blocks, :func:`quantax_lite.sampler.per_chain`).

Estimators. An operator ``O`` is estimated by its local value
``O_loc(s) = sum_s' O[s, s'] psi(s') / psi(s)`` averaged over ``s ~ |psi|^2``; the error
bar, variance and tau are those of :func:`quantax_lite.stats.chains.statistics` on
``per_chain(O_loc, n_chains)`` (autocorrelation included). For a Hermitian observable the
real part of ``O_loc`` is averaged (its expectation is the same, exactly). Functions of
several expectation values are estimated per sample and then averaged (S(q), C(r) are
linear in the pair values), so their errors come from the same statistics, never from
adding errors by hand; the connected dimer correlation (a product of means) uses the
linearized per-sample value (delta method).

Exact mode: ``weights`` ``(n_samples,)`` (e.g. ``|psi|^2`` over ``all_states``) replaces the
sample mean by ``sum w O_loc / sum w``; errors are then 0 and tau undefined (NaN, ``null``
in JSON).

The package: one module per observable (``correlations``, ``sz_correlations``,
``structure_factor``, ``distance``, ``order_parameter``, ``magnetization``, ``dimers``,
``energy``), each with its functions and its :class:`Observable` for :func:`measure`; the
contract and registry in ``contract``, the shared ratio program in ``ratios``, the
statistics pass in ``column_stats``, the built-in registrations in ``builtin``. A new
observable: an :class:`Observable` passed to :func:`register_observable`.
"""
from __future__ import annotations

from . import builtin  # noqa: F401  (registers the built-in observables, in the order of measure's dict)
from .contract import (
    ColumnStats, Inputs, Observable, Part, observable_names, register_observable, registered_observables,
    unregister_observable,
)
from .correlations import SpinCorrelations, spin_correlations
from .dimers import DimerCorrelations, dimer_correlations
from .distance import CorrelationVsDistance, correlation_vs_distance
from .expectation import expect
from .magnetization import sz_moments
from .measurement import SCHEMA, measure
from .order_parameter import staggered_magnetization_sq
from .structure_factors import StructureFactor, lattice_momenta, structure_factor
from .zz_correlations import sz_correlations

# the shared ratio machinery under the names it had when this package was one module
from .ratios import KINDS as _KINDS  # noqa: E402
from .ratios import default_chunk as _default_chunk  # noqa: E402
from .ratios import moved_values as _moved_values  # noqa: E402
from .ratios import moved_values_fn as _moved_values_fn  # noqa: E402

__all__ = [
    "SCHEMA",
    "expect",
    "SpinCorrelations",
    "spin_correlations",
    "sz_correlations",
    "StructureFactor",
    "structure_factor",
    "lattice_momenta",
    "staggered_magnetization_sq",
    "CorrelationVsDistance",
    "correlation_vs_distance",
    "DimerCorrelations",
    "dimer_correlations",
    "sz_moments",
    "measure",
    "Observable",
    "Inputs",
    "Part",
    "ColumnStats",
    "register_observable",
    "unregister_observable",
    "observable_names",
    "registered_observables",
]
