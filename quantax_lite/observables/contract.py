"""The observable contract and its registry.

An :class:`Observable` is three pure functions around the one pass of
:func:`~quantax_lite.observables.measure`:

1. ``specs(inputs) -> tuple`` the tables of the shared ratio program it needs
   (:mod:`quantax_lite.observables.ratios`; specs asked for by several observables are
   evaluated once);
2. ``evaluate(inputs, values) -> Part | None`` its per-sample values ``(n_samples, k)``
   (``values``: one numpy array per spec, in the order of ``specs``) and whatever
   ``finish`` needs besides their statistics; None: not measured this time (nothing reported);
3. ``finish(inputs, stats, state) -> dict`` its JSON-ready entries of the ``measure`` dict
   from the statistics of its columns (:class:`ColumnStats`, all columns of all observables
   taken in one statistics pass, errors and tau included).

``register_observable(obs)`` adds one to what ``measure`` reports, in registration order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import numpy as np

from quantax_lite.geometry.lattice import Lattice


class Inputs(NamedTuple):
    """What every observable of one ``measure`` call sees (checked by ``measure``).

    ``samples`` int8 ``(n_samples, n_sites)`` (jax); ``spins`` the same as float64 numpy;
    ``log_psi_samples`` ``log_psi(params, samples)``; ``weights`` normalized exact weights or
    None (Monte Carlo, ``n_chains`` chain-major chains); ``hamiltonian`` or None;
    ``dimers``: whether the dimer correlations were asked for."""

    log_psi: Callable
    params: Any
    samples: Any
    spins: np.ndarray
    lattice: Lattice
    n_chains: int
    weights: Any
    log_psi_samples: Any
    chunk_size: Any
    mesh: Any
    hamiltonian: Any
    dimers: bool

    @property
    def n_sites(self) -> int:
        return self.lattice.n_sites

    @property
    def n_samples(self) -> int:
        return int(self.samples.shape[0])


class Part(NamedTuple):
    """What :attr:`Observable.evaluate` returns: per-sample ``columns`` ``(n_samples, k)``
    (real), a ``state`` handed to :attr:`Observable.finish`, and an ``offset`` ``(k,)`` (or
    None): constants added to the columns' means (the part of an estimator that does not
    vary from sample to sample, such as ``<S_i . S_i> = 3/4`` in ``S(q)``)."""

    columns: np.ndarray
    state: Any = None
    offset: Any = None


class ColumnStats(NamedTuple):
    """Statistics of an observable's columns, each ``(k,)`` numpy: ``mean`` (its ``offset`` added), ``error``
    (0 in exact mode), ``tau`` and ``r_hat`` (NaN in exact mode)."""

    mean: np.ndarray
    error: np.ndarray
    tau: np.ndarray
    r_hat: np.ndarray


def no_specs(inputs: Inputs) -> tuple:
    """The ``specs`` of an observable that needs no network evaluations."""
    return ()


@dataclass(frozen=True)
class Observable:
    """One observable of :func:`~quantax_lite.observables.measure` (module docstring)."""

    name: str
    evaluate: Callable[[Inputs, tuple], Part | None]
    finish: Callable[[Inputs, ColumnStats, Any], dict]
    specs: Callable[[Inputs], tuple] = no_specs

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name: expected a non-empty string, got {self.name!r}")
        for field in ("evaluate", "finish", "specs"):
            if not callable(getattr(self, field)):
                raise TypeError(f"{field}: expected a function, got {type(getattr(self, field)).__name__}")


_REGISTRY: dict[str, Observable] = {}


def register_observable(observable: Observable) -> Observable:
    """Adds ``observable`` to what :func:`~quantax_lite.observables.measure` reports (after
    those registered before it); returns it. ValueError naming ``observable`` when its name
    is taken."""
    if not isinstance(observable, Observable):
        raise TypeError(f"observable: expected an Observable, got {type(observable).__name__}")
    if observable.name in _REGISTRY:
        raise ValueError(f"observable: the name {observable.name!r} is registered already")
    _REGISTRY[observable.name] = observable
    return observable


def unregister_observable(name: str) -> Observable:
    """Removes the observable ``name`` from the registry; returns it (ValueError naming ``name``)."""
    if name not in _REGISTRY:
        raise ValueError(f"name: no observable {name!r} is registered; registered: {observable_names()}")
    return _REGISTRY.pop(name)


def observable_names() -> tuple[str, ...]:
    """The names of the registered observables, in registration order."""
    return tuple(_REGISTRY)


def registered_observables(names=None) -> tuple[Observable, ...]:
    """The registered observables named in ``names`` (None: all), in registration order;
    ValueError naming ``observables`` for a name not registered."""
    if names is None:
        return tuple(_REGISTRY.values())
    if isinstance(names, str):
        names = (names,)
    names = tuple(names)
    unknown = [n for n in names if n not in _REGISTRY]
    if unknown:
        raise ValueError(f"observables: {unknown} not registered; registered: {list(_REGISTRY)}")
    return tuple(obs for name, obs in _REGISTRY.items() if name in names)
