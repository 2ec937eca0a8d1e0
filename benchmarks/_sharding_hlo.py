"""benchmarks/jacobian_sharding.py's reading of compiled HLO text: the collectives of a
program (all-gathers, all-reduces, ...), the arrays they carry and their bytes, per
instruction and per call (:func:`hlo_collectives`)."""
from __future__ import annotations

import math
import re

COLLECTIVES = ("all-gather", "all-reduce", "all-to-all", "collective-permute", "reduce-scatter")

_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
          "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}


_ARRAY = re.compile(r"\b(pred|[suf]\d+|bf16|f8e\w+|c64|c128)\[([0-9,]*)\]")


_OP = re.compile(r"=\s*(?P<shape>.+?)\s(?P<op>" + "|".join(COLLECTIVES) + r")(?P<start>-start)?\(")


_HEADER = re.compile(r"^(?:ENTRY\s+)?%?(?P<name>[^\s(]+)\s.*\{\s*$")


_CALLS = re.compile(r"\b(body|condition|calls|to_apply|true_computation|false_computation)=%([\w.\-]+)")


_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")


_TRIP = re.compile(r'known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"(\d+)"')


def _arrays(shape: str) -> list[tuple[str, tuple[int, ...]]]:
    return [(t, tuple(int(d) for d in dims.split(",") if d)) for t, dims in _ARRAY.findall(shape)]


def _nbytes(dtype: str, dims: tuple[int, ...]) -> int:
    return _BYTES.get(dtype, 1) * math.prod(dims)


def _result_arrays(op: str, start: bool, shape: str):
    """The arrays a collective produces. ``all-gather-start`` / ``collective-permute-start``
    return ``(operands, results[, scalar contexts])``: keep the second half of the arrays."""
    arrays = _arrays(shape)
    if start and op in ("all-gather", "collective-permute"):
        arrays = [a for a in arrays if a[1]]  # drop u32[] / s32[] context scalars
        arrays = arrays[len(arrays) // 2:]
    return arrays


def _computations(text: str):
    """Split HLO text into computations: ({name: [lines]}, entry name)."""
    comps, entry, name = {}, None, None
    for line in text.splitlines():
        if line and not line[0].isspace():
            m = _HEADER.match(line)
            if m:
                name = m.group("name")
                comps[name] = []
                if line.startswith("ENTRY"):
                    entry = name
                continue
            if line.startswith("}"):
                name = None
                continue
        if name is not None:
            comps[name].append(line)
    return comps, entry


def _multipliers(comps: dict, entry: str | None) -> dict:
    """How many times each computation runs per call of the entry computation (while-loop
    bodies multiply by their known trip count; None where a trip count is unknown)."""
    if entry is None:
        return {name: 1 for name in comps}
    mult = {entry: 1}
    stack = [entry]
    while stack:
        parent = stack.pop()
        for line in comps.get(parent, ()):
            callees = [(kind, c) for kind, c in _CALLS.findall(line)]
            for group in _BRANCHES.findall(line):
                callees += [("branch", c.strip().lstrip("%")) for c in group.split(",") if c.strip()]
            trip = _TRIP.search(line)
            for kind, child in callees:
                if child not in comps:
                    continue
                m = mult[parent]
                if kind == "body":
                    m = None if (m is None or trip is None) else m * int(trip.group(1))
                if child not in mult:
                    mult[child] = m
                    stack.append(child)
    return mult


def hlo_collectives(text: str) -> dict:
    """Collectives of a compiled program's HLO text.

    Returns ``{kind: {"count", "arrays", "bytes", "count_per_call", "bytes_per_call"}}`` for
    each kind in ``COLLECTIVES``: ``count`` instructions (synchronous or ``-start``),
    ``arrays`` they carry (a combined instruction carries several), ``bytes`` of their
    results on one device, and the same per call of the program (instructions in a loop
    body counted once per iteration; None if a loop's trip count is unknown).
    """
    comps, entry = _computations(text)
    mult = _multipliers(comps, entry)
    out = {k: dict(count=0, arrays=0, bytes=0, count_per_call=0, bytes_per_call=0) for k in COLLECTIVES}
    for name, lines in comps.items():
        m = mult.get(name, 1)
        for line in lines:
            hit = _OP.search(line)
            if not hit:
                continue
            op, start = hit.group("op"), bool(hit.group("start"))
            arrays = _result_arrays(op, start, hit.group("shape"))
            nbytes = sum(_nbytes(t, d) for t, d in arrays)
            row = out[op]
            row["count"] += 1
            row["arrays"] += len(arrays)
            row["bytes"] += nbytes
            if m is None or row["count_per_call"] is None:
                row["count_per_call"] = row["bytes_per_call"] = None
            else:
                row["count_per_call"] += m
                row["bytes_per_call"] += m * nbytes
    return out
