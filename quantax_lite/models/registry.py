"""The network contract and its registry: one decorator line per network.

A network is a *backbone*: ``builder(lattice, options, dtype) -> flax module`` whose
``__call__(s)`` maps int8 +-1 configurations ``(batch, n_sites)`` to features
``(batch, n_cells, features)``. The module declares, by a class attribute
``equivariance``, what it guarantees under translations by whole cells:

* ``"cells"`` (the default when absent): ``features(T_r s)[:, 0] = features(s)[:, r]``
  for the translation ``T_r`` that brings cell ``r`` to the origin (cells row-major, as
  :class:`~quantax_lite.geometry.lattice.Lattice` numbers them): the library then merges group
  elements that differ by a translation and may use the plane-wave readout;
* ``"none"``: no guarantee (any number of positions on axis 1); projected over every
  group element, unless it also declares ``translation_stride`` (an int ``k``): its
  features summed over positions are invariant under translations by multiples of ``k``
  cells along every axis (a ViT on patches of ``k`` cells), and the projection evaluates
  one image per class of elements those translations relate;
* ``"projects"``: the module projects on the symmetry group itself; the builder then
  takes a fourth argument, the ``Symmetry`` (or None), and the library adds no projection.

Heads, phase rules and the projection are added by the library
(:func:`~quantax_lite.models.make_network`)::

    @dataclasses.dataclass(frozen=True)
    class MyOptions:
        width: int = 8

    @register_network("mine", options=MyOptions)
    def build_mine(lattice, options, dtype):
        return MyBackbone(lattice.n_cells, options.width, dtype)

``options`` is a frozen dataclass of plain JSON values (int, float, bool, str, None);
its ``__post_init__`` may raise ``ValueError`` / ``TypeError`` naming the option.
"""
from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from typing import Callable, Mapping

from quantax_lite.utils.errors import FieldError, FieldTypeError

__all__ = ["NetworkEntry", "register_network", "network_entry", "network_names", "network_options",
           "options_config", "EQUIVARIANCES"]

EQUIVARIANCES = ("cells", "none", "projects")
_JSON_TYPES = (bool, int, float, str, type(None))


@dataclasses.dataclass(frozen=True)
class NetworkEntry:
    """A registered network: its ``name``, ``builder`` and ``options`` dataclass."""

    name: str
    builder: Callable
    options: type

    def build(self, lattice, options, dtype, symmetry=None):
        """The backbone module for ``lattice``; ``symmetry`` reaches only a builder that
        takes a fourth argument (a module that projects on the group itself)."""
        args = (lattice, options, dtype, symmetry) if _takes_symmetry(self.builder) else (lattice, options, dtype)
        module = self.builder(*args)
        found = getattr(module, "equivariance", "cells")
        if found not in EQUIVARIANCES:
            raise ValueError(f"network: {self.name!r} declares equivariance {found!r}; expected one of "
                             f"{EQUIVARIANCES}")
        return module


def _takes_symmetry(builder) -> bool:
    try:
        params = list(inspect.signature(builder).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 4 or any(p.kind == p.VAR_POSITIONAL for p in params)


_NETWORKS: dict[str, NetworkEntry] = {}


def register_network(name: str, *, options: type) -> Callable:
    """Decorator: register ``builder(lattice, options, dtype)`` under ``name`` with its
    ``options`` dataclass (every field with a default). Registering a name again
    replaces the entry (a module reloaded). Returns the builder unchanged."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name: expected an identifier such as 'conv', got {name!r}")
    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise TypeError(f"options: expected a dataclass type, got {options!r}")
    missing = [f.name for f in dataclasses.fields(options)
               if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"options: every option needs a default; {missing} have none")

    def register(builder: Callable) -> Callable:
        if not callable(builder):
            raise TypeError(f"builder: expected a function (lattice, options, dtype) -> module, got {builder!r}")
        _NETWORKS[name] = NetworkEntry(name, builder, options)
        return builder

    return register


def network_names() -> tuple[str, ...]:
    """The registered names, sorted."""
    return tuple(sorted(_NETWORKS))


def network_entry(name: str) -> NetworkEntry:
    """The entry of ``name``; ``ValueError`` naming ``network`` for an unknown one."""
    if name not in _NETWORKS:
        raise ValueError(f"network: expected one of {network_names()}, got {name!r}")
    return _NETWORKS[name]


def _allowed(annotation) -> tuple[type, ...]:
    """The types an option's (resolved) annotation admits (empty: not checked)."""
    if isinstance(annotation, type):
        return (annotation,)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        return args if all(isinstance(a, type) for a in args) else ()
    return ()


def _check_type(option: str, value, allowed: tuple[type, ...], where: str) -> None:
    if not isinstance(value, _JSON_TYPES):
        raise TypeError(f"network_options: {option}: expected a plain value (int, float, bool, str or None) for "
                        f"{where}, got {value!r}")
    if not allowed:
        return
    ok = any(
        (t is float and isinstance(value, (int, float)) and not isinstance(value, bool))
        or (t is int and isinstance(value, int) and not isinstance(value, bool))
        or (t not in (int, float) and isinstance(value, t))
        for t in allowed
    )
    if not ok:
        names = " or ".join("None" if t is type(None) else t.__name__ for t in allowed)
        raise TypeError(f"network_options: {option}: expected {names} for {where}, got {value!r}")


def network_options(name: str, given=None):
    """The options of the network ``name``: ``given`` a mapping of option -> value (None:
    every default) or already an instance of its options dataclass. An unknown option,
    a value of the wrong type or one the dataclass refuses raises ``ValueError`` /
    ``TypeError`` starting ``network_options: <option>:``."""
    entry = network_entry(name)
    if isinstance(given, entry.options):
        return given
    if given is None:
        given = {}
    if not isinstance(given, Mapping):
        raise TypeError(f"network_options: expected a mapping of option names to values for the network "
                        f"{name!r}, got {given!r}")
    fields = {f.name: f for f in dataclasses.fields(entry.options)}
    try:
        hints = typing.get_type_hints(entry.options)
    except Exception:  # an annotation that does not resolve: values are checked by the dataclass only
        hints = {}
    where = f"the network {name!r}"
    for key, value in given.items():
        if key not in fields:
            raise ValueError(f"network_options: {key}: not an option of {where}; its options: "
                             f"{', '.join(fields) or 'none'}")
        _check_type(key, value, _allowed(hints.get(key)), where)
    try:
        return entry.options(**dict(given))
    except (TypeError, ValueError) as err:
        message = str(err)
        if not message.startswith("network_options"):
            message = f"network_options: {message}"
        kind = FieldTypeError if isinstance(err, TypeError) else FieldError
        raise kind("network_options", message) from None


def options_config(options) -> dict:
    """An options dataclass as a dict of its JSON values (what a run records)."""
    return dataclasses.asdict(options)
