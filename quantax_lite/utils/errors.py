"""Errors that say which field they concern.

A user error of the library is a ``ValueError`` / ``TypeError`` whose message starts with
the argument's name (``"<name>: expected …, got …"``). :class:`FieldError` carries that
name as data (``.field``), so that a front end (the command) can say which option is wrong
without reading the message.
"""
from __future__ import annotations

import contextlib
import re
from typing import Iterator

__all__ = ["FieldError", "FieldTypeError", "as_field_error", "concerning"]


class FieldError(ValueError):
    """A value of one field (a recipe field, an argument) that cannot work.

    ``field``: the field's name as the library spells it (``"lr_half_life"``, ``"out_dir"``),
    or None where no single field is at fault. The message keeps the package's wording,
    ``"<field>: ..."``.
    """

    def __init__(self, field: str | None, message: str):
        super().__init__(message)
        self.field = field

    def __reduce__(self):
        return type(self), (self.field, str(self))


class FieldTypeError(FieldError, TypeError):
    """A :class:`FieldError` for a value of the wrong kind (also a ``TypeError``)."""


_LEADING_NAME = re.compile(r"([A-Za-z_]\w*):")


def as_field_error(err: BaseException, field: str | None = None) -> FieldError:
    """``err`` (a ``ValueError`` / ``TypeError``) as a :class:`FieldError` with the same message.

    The field: ``field`` if given, else ``err.field`` for a FieldError, else the name the
    message starts with (``"<name>: ..."``, the package's wording: the bridge for checks that
    do not raise a FieldError yet), else None. A ``TypeError`` becomes a
    :class:`FieldTypeError`."""
    if field is None:
        field = getattr(err, "field", None)
    if field is None:
        found = _LEADING_NAME.match(str(err))
        field = found.group(1) if found else None
    if isinstance(err, FieldError) and err.field == field:
        return err
    cls = FieldTypeError if isinstance(err, TypeError) else FieldError
    return cls(field, str(err))


@contextlib.contextmanager
def concerning(field: str | None = None) -> Iterator[None]:
    """Within the block, a ``ValueError`` / ``TypeError`` is raised again as a
    :class:`FieldError` (:func:`as_field_error`, of ``field`` if given)."""
    try:
        yield
    except (TypeError, ValueError) as err:
        raise as_field_error(err, field) from None
