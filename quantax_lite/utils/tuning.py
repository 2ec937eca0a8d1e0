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

Each backend has its own record (:func:`for_backend`): the choices above, and the
precision policy of the programs that run on the device. On a CPU float64 buys digits
cheaply (the SR solve and statistics run in float64 when ``jax_enable_x64`` is on).
An accelerator has no fast float64 (a TPU has none at all: XLA emulates it, slowly to
compile and to run), so there no device program holds a float64 or complex128 value
or an eigendecomposition, and every matrix product runs at ``"highest"`` precision (a
TPU's default float32 product is one bfloat16 pass, about 3 digits, too few for a
Gram matrix or a ratio of amplitudes). :func:`current` is the record of the default
backend unless a ``with`` block chose another; tests pick one with
``tuning.using(tuning.for_backend("tpu"))``.

The figures behind the defaults are in ``docs/benchmarks.md``.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Tuning", "current", "override", "using", "for_backend", "conv_form", "wide_dtype",
           "matmul_precision", "at_matmul_precision", "configure_x64", "CONV_FORMS", "BACKENDS"]

BACKENDS = ("cpu", "gpu", "tpu")

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
    local_energy_rows: connected configurations per local-energy chunk when the caller gives
      no chunk size (CPUs: cache-sized batches run faster; a TPU: a program far below the
      chip's memory compiles several times faster); None: the samples in one piece.
    pack_local_energy: evaluate the network only on connections with a nonzero matrix
      element, packed into one of ``packed_fractions`` of the off-diagonal slots.
    gram_precision: "jacobian" (the SR / MinSR matrix formed in the Jacobian's own
      precision from centred float64 data, then solved in float64) or "float64".
    sr_block_bytes: bytes of float64 Jacobian converted at a time in the SR solve.
    blas_threads: BLAS / LAPACK threads on CPUs while a run loops (XLA has its own pool).
    jacobian_shard_batch: per-sample Jacobians inside one ``shard_map`` per device
      (False: GSPMD partitions the batch, which all-gathers it for conv networks).
    backend: the backend the record is made for ("cpu", "gpu", "tpu"; informational).
    device_float64: device programs may hold float64 / complex128 values (the SR solve,
      statistics and local-energy sums then run in float64 when ``jax_enable_x64`` is
      on; see :func:`wide_dtype`). False: they run in float32, with the solve below.
    matmul_precision: the precision of every matrix product in the library's programs
      ("default" or "highest"; applied at trace time by :func:`matmul_precision`).
    sr_solve: how the small SR / MinSR system is solved: "cholesky_eigh" (Cholesky,
      falling back to an eigendecomposition pseudo-inverse) or "cholesky_refine"
      (Cholesky with ``sr_refinement`` steps of iterative refinement, falling back to
      a Cholesky of a more strongly shifted matrix: no eigendecomposition in the program).
    sr_refinement: refinement steps of "cholesky_refine".
    autotune: with ``conv_form="auto"``, time the candidate convolution forms once per
      machine, shape and library version and use the fastest
      (:func:`quantax_lite.models.conv.conv_form_for`, cached on disk by
      :mod:`quantax_lite.utils.autotune`). Off unless ``QUANTAX_LITE_AUTOTUNE=1``: the timing
      of one layer is a poor proxy for the network (on a 2-core CPU it chose "gather"
      for the W1 network, whose step then took 906 ms against 98 ms with the width rule
      of :func:`conv_form`).
    """

    conv_form: str = "auto"
    dense_conv_max_width: tuple = (("float32", 512), ("float64", 1024))
    merge_translations: bool = True
    local_energy_rows: int | None = 8192
    pack_local_energy: bool = True
    packed_fractions: tuple = (0.25, 0.5, 0.625, 0.6875, 0.75, 0.8125, 0.875, 1.0)
    gram_precision: str = "jacobian"
    sr_block_bytes: int = 64 * 2**20
    blas_threads: int = 1
    jacobian_shard_batch: bool = True
    backend: str = "cpu"
    device_float64: bool = True
    matmul_precision: str = "default"
    sr_solve: str = "cholesky_eigh"
    sr_refinement: int = 2
    autotune: bool = False

    def __post_init__(self):
        if self.conv_form not in ("auto",) + CONV_FORMS:
            raise ValueError(f"conv_form: expected 'auto' or one of {CONV_FORMS}, got {self.conv_form!r}")
        if self.gram_precision not in ("jacobian", "float64"):
            raise ValueError(f"gram_precision: expected 'jacobian' or 'float64', got {self.gram_precision!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}, got {self.backend!r}")
        if self.matmul_precision not in ("default", "highest"):
            raise ValueError(f"matmul_precision: expected 'default' or 'highest', got {self.matmul_precision!r}")
        if self.sr_solve not in ("cholesky_eigh", "cholesky_refine"):
            raise ValueError(f"sr_solve: expected 'cholesky_eigh' or 'cholesky_refine', got {self.sr_solve!r}")
        if isinstance(self.sr_refinement, bool) or not isinstance(self.sr_refinement, (int, np.integer)) \
                or self.sr_refinement < 0:
            raise ValueError(f"sr_refinement: expected an int >= 0, got {self.sr_refinement!r}")
        for name in ("local_energy_rows", "sr_block_bytes", "blas_threads"):
            value = getattr(self, name)
            if name == "local_energy_rows" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name}: expected a positive int, got {value!r}")


TPU_LOCAL_ENERGY_ROWS = 65536  # a forward pass of this many 6x6 configurations: 3.4 ms on one v5e chip


def for_backend(name: str) -> Tuning:
    """The record the library uses on backend ``name`` ("cpu", "gpu" or "tpu").

    "cpu": float64 allowed on the device, products at default precision, SR solved by
    Cholesky with an eigendecomposition fallback. "gpu", "tpu": no float64 in a device
    program, products at "highest" precision, SR by Cholesky with iterative refinement.
    "tpu" also evaluates every connection slot of the local energies (no packing): each
    packing size is another compiled copy of the network, and there compilation, not
    arithmetic, dominates (benchmarks/results/compile_probe_tpu.json).
    """
    if name not in BACKENDS:
        raise ValueError(f"name: expected one of {BACKENDS}, got {name!r}")
    timed = os.environ.get("QUANTAX_LITE_AUTOTUNE", "").strip().lower() in ("1", "true", "on", "yes")
    if name == "cpu":
        return Tuning(autotune=timed)
    return Tuning(backend=name, device_float64=False, matmul_precision="highest", sr_solve="cholesky_refine",
                  pack_local_energy=name != "tpu", local_energy_rows=TPU_LOCAL_ENERGY_ROWS if name == "tpu" else None,
                  autotune=timed)


_CURRENT = contextvars.ContextVar("quantax_lite_tuning", default=None)


def _backend_name() -> str:
    name = jax.default_backend()
    return name if name in BACKENDS else ("gpu" if name in ("cuda", "rocm") else "cpu")


def current() -> Tuning:
    """The choices in force here: the default backend's record (:func:`for_backend`)
    unless inside :func:`override` or :func:`using`."""
    chosen = _CURRENT.get()
    return for_backend(_backend_name()) if chosen is None else chosen


def wide_dtype(dtype=None):
    """The dtype of sums, statistics and the SR solve in device programs: float64 where
    :func:`current` allows it on the device and ``jax_enable_x64`` is on, else float32;
    complex (complex128 / complex64) when ``dtype`` is complex."""
    wide = np.float64 if current().device_float64 and jax.config.jax_enable_x64 else np.float32
    if dtype is not None and np.issubdtype(np.dtype(dtype), np.complexfloating):
        return np.dtype(np.complex128 if wide == np.float64 else np.complex64)
    return np.dtype(wide)


def matmul_precision():
    """A context in which the matrix products traced use :func:`current`'s
    ``matmul_precision`` (the library enters it where it builds a program)."""
    return jax.default_matmul_precision(current().matmul_precision)


def uniform(key, shape):
    """Uniform random numbers in [0, 1) of :func:`wide_dtype` (no float64 in the program
    where the record forbids it)."""
    dtype = wide_dtype()
    return jax.random.uniform(key, shape, dtype, jnp.zeros((), dtype), jnp.ones((), dtype))


def configure_x64() -> bool:
    """Turn ``jax_enable_x64`` on where the default backend's record allows float64 on the
    device (CPUs), off elsewhere (accelerators: float64 values made by mistake then become
    float32 instead of slow emulated float64). For applications at start-up (the command
    calls it); returns the setting."""
    wanted = bool(for_backend(_backend_name()).device_float64)
    jax.config.update("jax_enable_x64", wanted)
    return wanted


def at_matmul_precision(fn):
    """``fn`` (a network's ``__call__``) with its products traced inside :func:`matmul_precision`:
    a log-amplitude used in a ratio keeps its digits whoever calls the network."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with matmul_precision():
            return fn(*args, **kwargs)

    return wrapped


@contextlib.contextmanager
def override(**changes):
    """Use other speed choices for what is built inside the ``with`` block (matrix
    products traced there use its ``matmul_precision``).

    ``changes``: fields of :class:`Tuning`; an unknown name raises ``TypeError``.
    """
    names = {f.name for f in dataclasses.fields(Tuning)}
    unknown = sorted(set(changes) - names)
    if unknown:
        raise TypeError(f"override: unknown tuning option(s) {unknown}; expected some of {sorted(names)}")
    token = _CURRENT.set(dataclasses.replace(current(), **changes))
    try:
        with matmul_precision():
            yield current()
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def using(choices: Tuning):
    """Use the whole record ``choices`` inside the block (e.g. a driver's own, at trace time)."""
    if not isinstance(choices, Tuning):
        raise TypeError(f"choices: expected a Tuning, got {type(choices).__name__}")
    token = _CURRENT.set(choices)
    try:
        with matmul_precision():
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
