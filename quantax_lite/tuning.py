"""How fast things run: every speed choice of the library, in one place.

Nothing here changes what is computed beyond rounding: each choice picks one of several
implementations of the same function (a convolution form, a chunk size, the precision of
a matrix product whose result is then solved in float64). Users never set these; the
library reads :func:`current` where it builds a program, and a benchmark or a test that
wants another choice overrides it for the programs built inside a ``with`` block::

    with tuning.override(conv_form="gather", pack_local_energy=False):
        ...  # models traced and drivers built here use the overrides

An override applies to programs *traced* (or drivers built) inside the block: a function
compiled before it keeps the choices it was compiled with.

The figures behind the defaults are in ``docs/benchmarks.md``.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses

import numpy as np

__all__ = ["Tuning", "current", "override", "using", "conv_form", "CONV_FORMS"]

# The implementations of a periodic convolution (quantax_lite.models.conv):
# "dense": one block-circulant matrix product (channel-major maps), kernel derivatives
#   in the patch form (a custom JVP);
# "lax": lax.conv_general_dilated, its own derivatives;
# "lax_patch": lax.conv_general_dilated, kernel derivatives in the patch form;
# "lax_gather": lax.conv_general_dilated, all derivatives those of the gather form;
# "gather": im2col with a neighbour table and one matrix product (the reference form);
# "banded": k shifted rows stacked, times one matrix of circulant bands (2-D grids),
#   kernel derivatives in the patch form.
CONV_FORMS = ("dense", "lax", "lax_patch", "lax_gather", "gather", "banded")


@dataclasses.dataclass(frozen=True)
class Tuning:
    """The speed choices (a frozen, hashable record; see the module docstring).

    conv_form: "auto" (see :func:`conv_form`) or one of :data:`CONV_FORMS`.
    dense_conv_max_width: for "auto", the largest ``n_sites * channels`` for which the
      dense form is used, per parameter dtype (CPUs; other backends use it up to the
      same width).
    merge_translations: a translation-invariant network symmetrized over a group with
      every translation is evaluated on one image per coset (``n_sites`` times fewer).
    local_energy_rows: on CPUs, connected configurations per local-energy chunk when the
      caller gives no chunk size (cache-sized batches run faster there); elsewhere the
      samples are done in one piece.
    pack_local_energy: evaluate the network only on connections with a nonzero matrix
      element, packed into one of ``packed_fractions`` of the off-diagonal slots.
    gram_precision: "jacobian" (the SR / MinSR matrix formed in the Jacobian's own
      precision from centred float64 data, then solved in float64) or "float64".
    sr_block_bytes: bytes of float64 Jacobian converted at a time in the SR solve.
    blas_threads: BLAS / LAPACK threads on CPUs while a run loops (XLA has its own pool).
    jacobian_shard_batch: per-sample Jacobians inside one ``shard_map`` per device
      (False: GSPMD partitions the batch, which all-gathers it for conv networks).
    """

    conv_form: str = "auto"
    dense_conv_max_width: tuple = (("float32", 512), ("float64", 1024))
    merge_translations: bool = True
    local_energy_rows: int = 8192
    pack_local_energy: bool = True
    packed_fractions: tuple = (0.25, 0.5, 0.625, 0.6875, 0.75, 0.8125, 0.875, 1.0)
    gram_precision: str = "jacobian"
    sr_block_bytes: int = 64 * 2**20
    blas_threads: int = 1
    jacobian_shard_batch: bool = True

    def __post_init__(self):
        if self.conv_form not in ("auto",) + CONV_FORMS:
            raise ValueError(f"conv_form: expected 'auto' or one of {CONV_FORMS}, got {self.conv_form!r}")
        if self.gram_precision not in ("jacobian", "float64"):
            raise ValueError(f"gram_precision: expected 'jacobian' or 'float64', got {self.gram_precision!r}")
        for name in ("local_energy_rows", "sr_block_bytes", "blas_threads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name}: expected a positive int, got {value!r}")


_CURRENT = contextvars.ContextVar("quantax_lite_tuning", default=Tuning())


def current() -> Tuning:
    """The speed choices in force here (the defaults unless inside :func:`override`)."""
    return _CURRENT.get()


@contextlib.contextmanager
def override(**changes):
    """Use other speed choices for what is built inside the ``with`` block.

    ``changes``: fields of :class:`Tuning`; an unknown name raises ``TypeError``.
    """
    names = {f.name for f in dataclasses.fields(Tuning)}
    unknown = sorted(set(changes) - names)
    if unknown:
        raise TypeError(f"override: unknown tuning option(s) {unknown}; expected some of {sorted(names)}")
    token = _CURRENT.set(dataclasses.replace(_CURRENT.get(), **changes))
    try:
        yield _CURRENT.get()
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def using(choices: Tuning):
    """Use the whole record ``choices`` inside the block (e.g. a driver's own, at trace time)."""
    if not isinstance(choices, Tuning):
        raise TypeError(f"choices: expected a Tuning, got {type(choices).__name__}")
    token = _CURRENT.set(choices)
    try:
        yield choices
    finally:
        _CURRENT.reset(token)


def conv_form(n_sites: int, channels: int, dtype) -> str:
    """The convolution form for a network of ``n_sites * channels`` in ``dtype``.

    "dense" up to ``dense_conv_max_width`` (its one matrix product per layer is the
    fastest form there, for forward passes and per-sample gradients). Above it (measured
    on x86-64 CPUs by ``benchmarks/conv_forms.py``): "lax_gather" in float32 (XLA's
    convolution is the fastest forward pass, the gather form's derivatives the fastest
    per-sample gradients), "gather" in float64 (fastest both ways there).
    """
    tuning = current()
    if tuning.conv_form != "auto":
        return tuning.conv_form
    name = np.dtype(dtype).name
    width = dict(tuning.dense_conv_max_width)
    if name not in width:
        raise ValueError(f"dtype: expected float32 or float64, got {name}")
    if n_sites * channels <= width[name]:
        return "dense"
    return "lax_gather" if name == "float32" else "gather"
