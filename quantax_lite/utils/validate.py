"""Argument checks shared by the whole package: one function per kind of value, one wording.

Every check names the argument and what was expected, in the form
``"<name>: expected <what>, got <value!r>"``: ``TypeError`` for a value of the wrong
kind, ``ValueError`` for one of the right kind out of range.
"""
from __future__ import annotations

import numbers

import numpy as np

from quantax_lite.utils.errors import FieldError, FieldTypeError

__all__ = ["positive_int", "finite_number"]


def _int_wording(minimum: int) -> str:
    if minimum == 1:
        return "a positive int"
    return f"an int >= {minimum}"


def positive_int(value, name: str, *, minimum: int = 1) -> int:
    """``value`` as a Python int, checked to be an int ``>= minimum``.

    Accepts Python and numpy integers; bools, floats (also ``3.0``) and anything else
    raise ``TypeError``. ``value < minimum`` raises ``ValueError``. The message reads
    ``"{name}: expected a positive int, got {value!r}"`` (``"an int >= 0"`` for
    ``minimum=0``, ``"an int >= m"`` for any other ``minimum``).
    """
    what = _int_wording(minimum)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise FieldTypeError(name, f"{name}: expected {what}, got {value!r}")
    if value < minimum:
        raise FieldError(name, f"{name}: expected {what}, got {value!r}")
    return int(value)


def finite_number(value, name: str, *, minimum: float | None = None, above: float | None = None) -> float:
    """``value`` as a Python float, checked to be a finite real number.

    Accepts Python/numpy ints and floats and 0-d real numpy/jax arrays; bools, complex
    numbers, strings and other objects raise ``TypeError``. NaN or infinity, a value
    ``< minimum`` (inclusive bound) or a value ``<= above`` (strict bound) raise
    ``ValueError``, e.g. ``"diag_shift: expected a finite number > 0, got -1.0"``.
    """
    bounds = []
    if minimum is not None:
        bounds.append(f">= {minimum:g}")
    if above is not None:
        bounds.append(f"> {above:g}")
    what = "a finite number" + (" " + " and ".join(bounds) if bounds else "")
    if isinstance(value, (bool, np.bool_)):
        raise FieldTypeError(name, f"{name}: expected {what}, got {value!r}")
    if isinstance(value, numbers.Real):
        v = float(value)
    elif getattr(value, "ndim", None) == 0 and hasattr(value, "dtype") and (
        np.issubdtype(np.dtype(value.dtype), np.integer) or np.issubdtype(np.dtype(value.dtype), np.floating)
    ):
        v = float(value)
    else:
        raise FieldTypeError(name, f"{name}: expected {what}, got {value!r}")
    if not np.isfinite(v) or (minimum is not None and v < minimum) or (above is not None and v <= above):
        raise FieldError(name, f"{name}: expected {what}, got {value!r}")
    return v
