"""Plain JSON values of numpy results: floats, nested lists, NaN and infinity as None."""
from __future__ import annotations

import math

import numpy as np


def number(x):
    """A plain float; NaN, inf and None as None (JSON null)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def nested_list(x):
    """An array as nested lists of :func:`number` (a scalar as one number); None stays None."""
    if x is None:
        return None
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 0:
        return number(a)
    return [nested_list(v) for v in a]


def mean_error(mean, error) -> dict:
    """``{"mean": ..., "error": ...}`` as nested lists."""
    return {"mean": nested_list(mean), "error": nested_list(error)}
