"""Parameter grids whose default run covers every value once and whose slow run is whole.

``@pytest.mark.parametrize(*covering(("shape,k", [((3, 4), 3), ((5,), 4)]),
("form", ["dense", "banded"])))`` runs, by default, as many cases as the longest axis has
values, case i taking value ``i mod len`` of every axis: every value of every axis is
tried. The rest of the full product is marked ``slow`` (``pytest -m slow``; CI runs both).
"""
from __future__ import annotations

import itertools

import pytest

__all__ = ["covering", "keeping"]


def covering(*axes: tuple[str, list]) -> tuple[str, list]:
    """``(argnames, params)`` for ``pytest.mark.parametrize`` over the product of ``axes``
    (each ``(names, values)``; several comma-separated names take tuples as values)."""
    if not axes:
        raise ValueError("axes: expected at least one (names, values) pair")
    names, values = [], []
    for axis_names, axis_values in axes:
        axis_values = list(axis_values)
        if not axis_values:
            raise ValueError(f"axes: {axis_names!r} has no values")
        names.append(axis_names)
        values.append(axis_values)
    longest = max(len(v) for v in values)
    default = {tuple(i % len(v) for v in values) for i in range(longest)}
    params = []
    for index in itertools.product(*(range(len(v)) for v in values)):
        flat = []
        for axis_names, axis, i in zip(names, values, index):
            flat.extend(axis[i] if "," in axis_names else (axis[i],))
        marks = () if index in default else (pytest.mark.slow,)
        params.append(pytest.param(*flat, marks=marks))
    return ",".join(names), params


def keeping(values, keep, ids=None) -> list:
    """``values`` as ``pytest.param``s, those whose index is not in ``keep`` marked ``slow``
    (a value that is a tuple fills several argument names; ``ids``: optional names)."""
    keep = set(keep)
    if not keep <= set(range(len(values))):
        raise ValueError(f"keep: indices {sorted(keep)} outside the {len(values)} values")
    params = []
    for i, value in enumerate(values):
        args = value if isinstance(value, tuple) else (value,)
        kw = {} if ids is None else {"id": ids[i]}
        params.append(pytest.param(*args, marks=() if i in keep else (pytest.mark.slow,), **kw))
    return params
