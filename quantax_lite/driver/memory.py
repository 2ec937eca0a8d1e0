"""Choosing a chunk size from a memory budget, by compiling (not running) the program.

A chunked program (``chunk_map`` with ``use_scan=True``) needs memory that grows with its
chunk and not with its batch (see ``docs/chunk_map.md``). Its need is read from XLA before
anything runs: ``jax.jit(f).lower(*specs).compile().memory_analysis()``. The quantity
compared with the budget is :func:`program_bytes`, bytes **per device**:

    arguments + outputs + temporaries - aliased bytes

that is every buffer the program holds on a device while it runs. Arguments and outputs
are the same for every chunk (the batch and its results); the temporaries are what the
chunk changes. :func:`largest_fitting_chunk` bisects sorted candidates (memory grows with
the chunk), so about log2(n) of n candidates are compiled.

The budget (:func:`resolve_memory_budget`) is bytes per device: by default what the
backend reports as the device's memory pool (``memory_stats()["bytes_limit"]`` on GPUs
and TPUs), or on CPUs the host's physical memory shared by its CPU devices.

Nothing here holds state: a caller that chooses often caches its choices (the driver
keeps them per parameter shapes and sample count, ``VMC.chunk_sizes``).
"""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import jax

from quantax_lite.utils.validate import finite_number, positive_int
from quantax_lite.utils.errors import FieldError, FieldTypeError

__all__ = [
    "MemoryBudgetError", "program_bytes", "chunk_candidates", "largest_fitting_chunk", "device_memory_bytes",
    "resolve_memory_budget", "check_memory_budget", "check_chunk_size",
]


class MemoryBudgetError(ValueError):
    """No chunk can be chosen within the memory budget: it is too small for the smallest
    chunk, or the backend reports no memory analysis (the message names ``memory_budget``)."""


def program_bytes(compiled) -> int:
    """Bytes per device a compiled program holds while it runs: arguments + outputs +
    temporaries - aliased (``compiled.memory_analysis()``; ``compiled`` a ``jax.stages.Compiled``)."""
    m = compiled.memory_analysis()
    if m is None:
        raise MemoryBudgetError("memory_budget: this backend reports no memory analysis of compiled programs, "
                                "so no chunk can be chosen from a budget; pass chunk_size as an int.")
    return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes)


def chunk_candidates(rows: int, preferred: int | None = None) -> tuple[int, ...]:
    """Chunk sizes to try for ``rows`` rows per device, ascending: the powers of two below
    ``min(preferred, rows)`` and that number itself (``preferred`` None: ``rows``)."""
    top = max(1, int(rows if preferred is None else min(preferred, rows)))
    return tuple(2**k for k in range(top.bit_length()) if 2**k < top) + (top,)


def largest_fitting_chunk(
    compile_at: Callable[[int], Any], candidates: Sequence[int], budget: int, *, what: str = "the program",
) -> int:
    """The largest of ``candidates`` whose compiled program fits in ``budget`` bytes per device.

    compile_at: ``chunk -> jax.stages.Compiled`` (compile only: nothing runs).
    candidates: chunk sizes, ascending; the largest is compiled first (the common case: it
      fits, one compilation), then a bisection below it (about log2(n) compilations).
    budget: bytes per device, compared with :func:`program_bytes`.
    what: the program's name, for the error.

    Raises :class:`MemoryBudgetError` (a ``ValueError``) naming ``memory_budget``, with the
    bytes one row per chunk needs, when not even the smallest candidate fits.
    """
    candidates = sorted(candidates)
    if not candidates:
        raise ValueError("candidates: expected at least one chunk size.")
    measured: dict[int, int] = {}

    def fits(i: int) -> bool:
        c = candidates[i]
        if c not in measured:
            measured[c] = program_bytes(compile_at(c))
        return measured[c] <= budget

    top = len(candidates) - 1
    if fits(top):
        return candidates[top]
    lo, hi = -1, top  # candidates[lo] fits (lo = -1: none known), candidates[hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    if lo < 0:
        smallest = candidates[0]
        rows = "one row" if smallest == 1 else f"{smallest} rows"
        raise MemoryBudgetError(
            f"memory_budget: {budget} bytes per device is less than the {measured[smallest]} bytes {what} needs "
            f"with {rows} per chunk (its smallest chunk); raise memory_budget, or use fewer samples or a "
            "smaller network."
        )
    return candidates[lo]


def device_memory_bytes(device=None) -> int:
    """Memory of one device of this process in bytes (default ``jax.local_devices()[0]``): its pool's
    ``memory_stats()["bytes_limit"]`` where the backend reports one (GPUs, TPUs); on CPUs
    the host's physical memory divided by the host's CPU devices (they share it)."""
    device = jax.local_devices()[0] if device is None else device
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    try:
        host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        host = 0
    if host <= 0:
        raise ValueError(f"memory_budget: {device} reports no memory size; pass memory_budget in bytes.")
    sharing = len(jax.local_devices(backend=device.platform)) if device.platform == "cpu" else 1
    return host // max(1, sharing)


def is_auto_chunk(chunk_size) -> bool:
    """Whether ``chunk_size`` leaves the chunks to the library: 'auto' or None."""
    return chunk_size is None or isinstance(chunk_size, str) and chunk_size == "auto"


def check_budget_applies(chunk_size, memory_budget) -> None:
    """``ValueError`` naming ``memory_budget`` when one is given with a fixed ``chunk_size``
    (a budget caps the chunks of 'auto' only)."""
    if not is_auto_chunk(chunk_size) and memory_budget is not None:
        raise FieldError("memory_budget", f"memory_budget: caps the chunks of `chunk_size` auto; with `chunk_size` "
                         f"{chunk_size} the chunk is used as given, so give one or the other.")


def check_chunk_size(chunk_size) -> None:
    """'auto', None or a positive int: samples per device per chunk (the first two leave
    the chunks to the library); ``TypeError`` / ``ValueError`` naming ``chunk_size`` otherwise."""
    if is_auto_chunk(chunk_size):
        return
    try:
        positive_int(chunk_size, "chunk_size")
    except (TypeError, ValueError) as err:
        kind = FieldTypeError if isinstance(err, TypeError) else FieldError
        raise kind("chunk_size", f"chunk_size: expected a positive int, 'auto' or None, got {chunk_size!r}") from None


def check_memory_budget(memory_budget) -> int | float | None:
    """``memory_budget`` checked (None, or a finite number > 0); returned unchanged.
    ``TypeError``/``ValueError`` naming ``memory_budget`` otherwise."""
    if memory_budget is not None:
        finite_number(memory_budget, "memory_budget", above=0)
    return memory_budget


def resolve_memory_budget(memory_budget=None, device=None) -> int:
    """The budget in bytes per device.

    memory_budget: None: :func:`device_memory_bytes` of ``device``; a number <= 1: that
      fraction of it; a number > 1: bytes (rounded down).
    """
    check_memory_budget(memory_budget)
    if memory_budget is None:
        return device_memory_bytes(device)
    if memory_budget <= 1:
        return int(memory_budget * device_memory_bytes(device))
    return int(memory_budget)
