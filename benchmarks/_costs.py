"""Compiled programs of the benchmarks: their FLOPs, memory and compile time, and this
machine's matmul peak (the part of the harness, ``_common``, that counts; ``_common``
re-exports every public name here).

Everything here imports jax when called.

FLOPs. ``compiled.cost_analysis()`` (jax 0.10.2: one dict; older versions: a list of one
dict per program) counts the body of every loop **once**: XLA's cost analysis does not
multiply by the trip count (a ``lax.scan`` of 10 matrix products reports the FLOPs of
one). The sampler's sweeps, the chunks of ``chunk_map`` and the SR blocks are all
loops, so :func:`jaxpr_cost` counts the same program from its jaxpr instead: every
``scan`` body times its length, ``shard_map`` bodies times their device count, a
``cond`` at the branch this platform takes (platform-dependent branches), a two-way
data-dependent ``cond`` (the SR fallback) at its cheaper branch and an n-way ``switch``
(the local energies' packed widths) at its dearest (an upper bound), and ``while`` loops
(trip counts known only at run time: the sampler's thermalization, 0 sweeps once the
chains are thermalized) zero times, their per-iteration FLOPs kept aside. Both numbers are
reported (:func:`compile_part`): ``flops`` (this count) and ``xla_flops`` (XLA's).
"""
from __future__ import annotations

import math
import time


# --------------------------------------------------------------------------- #
# compiled programs: time to compile, FLOPs, memory                            #
# --------------------------------------------------------------------------- #


def xla_flops(compiled) -> float | None:
    """``compiled.cost_analysis()["flops"]`` (a dict in jax 0.10.2, a list of dicts before;
    summed over programs), or None where the backend gives none. Loop bodies count once."""
    try:
        cost = compiled.cost_analysis()
    except Exception:  # some backends give no cost analysis
        return None
    if cost is None:
        return None
    if isinstance(cost, dict):
        cost = [cost]
    values = [c.get("flops") for c in cost if isinstance(c, dict) and c.get("flops") is not None]
    return float(sum(values)) if values else None


def memory_stats(compiled) -> dict | None:
    """The compiled program's ``memory_analysis()`` in bytes per device (argument, output,
    temp, alias, generated code, and ``total`` = argument + output + temp - alias), or None."""
    try:
        m = compiled.memory_analysis()
    except Exception:
        return None
    if m is None:
        return None
    if isinstance(m, (list, tuple)):
        m = m[0]
    out = {k: int(getattr(m, f"{k}_size_in_bytes", 0) or 0)
           for k in ("argument", "output", "temp", "alias", "generated_code")}
    out["total"] = out["argument"] + out["output"] + out["temp"] - out["alias"]
    return out


def compile_part(jitted, args, record: dict):
    """Trace, lower and compile ``jitted(*args)`` ahead of time; store in ``record`` the
    seconds (``trace_s``: tracing, including any choice the library makes while tracing;
    ``compile_s``: lowering and XLA compilation), the FLOPs (:func:`jaxpr_cost`: ``flops``,
    ``matmul_flops``, ``transcendentals``, ``dynamic_loops``, ``dynamic_loop_flops``,
    ``dots``; and XLA's ``xla_flops``) and the memory (:func:`memory_stats`).
    Returns the compiled program (called like ``jitted``)."""
    import jax

    if not hasattr(jitted, "trace"):
        jitted = jax.jit(jitted)
    t0 = time.perf_counter()
    traced = jitted.trace(*args)
    t1 = time.perf_counter()
    compiled = traced.lower().compile()
    t2 = time.perf_counter()
    record.update(trace_s=t1 - t0, compile_s=t2 - t1)
    record.update(jaxpr_cost(traced.jaxpr))
    record["xla_flops"] = xla_flops(compiled)
    record["memory"] = memory_stats(compiled)
    return compiled


# FLOPs per element of elementwise primitives (real arithmetic; complex: see _complex_factor)
_ELEMENTWISE = {
    "add", "sub", "mul", "div", "rem", "max", "min", "neg", "abs", "sign", "floor", "ceil", "round",
    "integer_pow", "square", "select_n", "clamp", "nextafter", "conj", "real", "imag", "complex", "add_any",
    "eq", "ne", "lt", "le", "gt", "ge", "is_finite", "copysign",
}
_TRANSCENDENTAL = {
    "exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "tan", "asin", "acos", "atan",
    "atan2", "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "erfc", "erf_inv", "lgamma", "digamma", "pow",
    "sqrt", "rsqrt", "cbrt",
}
_REDUCTIONS = {"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin", "cumsum", "cumprod",
               "cummax", "cummin", "cumlogsumexp"}


def _size(aval) -> int:
    return int(math.prod(getattr(aval, "shape", ()) or ()))


def _is_float(aval) -> bool:
    import numpy as np

    try:
        return bool(np.issubdtype(aval.dtype, np.inexact))
    except TypeError:  # key types and the like
        return False


def _is_complex(aval) -> bool:
    import numpy as np

    try:
        return bool(np.issubdtype(aval.dtype, np.complexfloating))
    except TypeError:
        return False


def _complex_factor(*avals) -> int:
    """Real FLOPs per complex multiply-add: 4 when both operands are complex, 2 when one is."""
    n = sum(_is_complex(a) for a in avals)
    return 4 if n == 2 else 2 if n == 1 else 1


def _jaxpr_types():
    try:
        from jax.extend import core as jcore

        return jcore.ClosedJaxpr, jcore.Jaxpr
    except (ImportError, AttributeError):  # older jax
        from jax import core as jcore

        return jcore.ClosedJaxpr, jcore.Jaxpr


def _platform_names() -> set:
    import jax

    backend = jax.default_backend()
    return {backend, "cuda" if backend == "gpu" else backend, "gpu" if backend in ("cuda", "rocm") else backend}


def jaxpr_cost(closed_jaxpr) -> dict:
    """FLOPs of a (closed) jaxpr, loops counted by their trip counts.

    ``flops``: real floating-point operations, complex arithmetic in real operations:
    matrix products and convolutions (``matmul_flops``: 2 per multiply-add, 4x for
    complex x complex), elementwise arithmetic and comparisons on floating-point arrays
    (1 per element, 2 for complex), reductions (1 per input element), and the
    decompositions (Cholesky n^3/3, triangular solves n^2 m, eigh 9 n^3, SVD 22 n^3, QR
    4n^3/3, LU 2n^3/3 per matrix). ``transcendentals``: elements of exp, log, tanh,
    sqrt, ... (not in ``flops``, as XLA counts them). Integer, index and data-movement
    operations (gathers, scatters, PRNG bits) count nothing. Loops: see the module
    docstring; ``dynamic_loops`` is the number of ``while`` loops counted zero times and
    ``dynamic_loop_flops`` their FLOPs for one iteration each. A ``cond`` whose branch is
    chosen at run time counts one branch: of two (``lax.cond``: a fast path and a
    fallback, e.g. the SR solve's Cholesky or pseudo-inverse) the cheaper, of more
    (``lax.switch``: one computation at several sizes, e.g. the local energies' packed
    widths) the dearest, an upper bound, as XLA counts every conditional;
    ``flops_bounds`` is ``[every such cond at its cheapest, at its dearest]``. ``dots``:
    ``{"BxMxKxN dtype": flops}`` of every matrix product (B the batch, K the contracted
    size), for choosing matmul shapes to time.
    """
    closed_type, open_type = _jaxpr_types()
    platforms = _platform_names()

    def new():
        return dict(flops=0.0, matmul_flops=0.0, transcendentals=0.0, dynamic_loops=0, dynamic_loop_flops=0.0,
                    cond_below=0.0, cond_above=0.0, dots={})

    def add(total, part, times=1.0):
        for k in ("flops", "matmul_flops", "transcendentals", "dynamic_loop_flops", "cond_below", "cond_above"):
            total[k] += times * part[k]
        total["dynamic_loops"] += part["dynamic_loops"]
        for k, v in part["dots"].items():
            total["dots"][k] = total["dots"].get(k, 0.0) + times * v

    def inner(j):
        return j.jaxpr if isinstance(j, closed_type) else j

    def walk(jaxpr):
        total = new()
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            params = eqn.params
            ins = [v.aval for v in eqn.invars]
            outs = [v.aval for v in eqn.outvars]
            if name == "scan":
                add(total, walk(inner(params["jaxpr"])), params["length"])
            elif name == "while":
                body = walk(inner(params["body_jaxpr"]))
                add(body, walk(inner(params["cond_jaxpr"])))
                total["dynamic_loops"] += 1 + body["dynamic_loops"]
                total["dynamic_loop_flops"] += body["flops"] + body["dynamic_loop_flops"]
            elif name == "cond":
                branches = [walk(inner(b)) for b in params["branches"]]
                chosen = None
                names = params.get("branches_platforms")
                if names:
                    matching = [i for i, p in enumerate(names) if p is not None and set(p) & platforms]
                    default = [i for i, p in enumerate(names) if p is None]
                    pick = matching or default
                    chosen = branches[pick[0]] if pick else None
                if chosen is None:  # data-dependent: a two-way cond's cheaper branch, a switch's dearest
                    cheap = min(branches, key=lambda b: b["flops"])
                    dear = max(branches, key=lambda b: b["flops"])
                    chosen = cheap if len(branches) == 2 else dear
                    total["cond_below"] += chosen["flops"] - cheap["flops"]
                    total["cond_above"] += dear["flops"] - chosen["flops"]
                add(total, chosen)
            elif name == "shard_map":
                mesh = params["mesh"]
                axes = params.get("newly_manual_axes") or params.get("manual_axes") or tuple(mesh.shape)
                times = math.prod(int(mesh.shape[a]) for a in axes)
                add(total, walk(inner(params["jaxpr"])), times)
            elif name == "dot_general":
                (contract, _), _ = params["dimension_numbers"]
                lhs, rhs = ins[0], ins[1]
                k = math.prod(int(lhs.shape[d]) for d in contract)
                f = 2.0 * _size(outs[0]) * k * _complex_factor(lhs, rhs)
                total["flops"] += f
                total["matmul_flops"] += f
                (lc, rc), (lb, rb) = params["dimension_numbers"]
                b = math.prod(int(lhs.shape[d]) for d in lb)
                m = _size(lhs) // max(1, b * k)
                n = _size(rhs) // max(1, b * k)
                key = f"{b}x{m}x{k}x{n} {lhs.dtype}"
                total["dots"][key] = total["dots"].get(key, 0.0) + f
            elif name == "conv_general_dilated":
                rhs = ins[1]
                out_feature_dim = params["dimension_numbers"].rhs_spec[0]
                per_output = _size(rhs) // max(1, int(rhs.shape[out_feature_dim]))
                f = 2.0 * _size(outs[0]) * per_output * _complex_factor(ins[0], rhs)
                total["flops"] += f
                total["matmul_flops"] += f
            elif name in ("cholesky", "triangular_solve", "eigh", "svd", "qr", "lu", "householder_product"):
                a = ins[0]
                n = int(a.shape[-1]) if a.shape else 1
                batch = _size(a) // max(1, n * n)
                if name == "triangular_solve":
                    m = _size(ins[1]) // max(1, batch * n)
                    f = float(batch) * n * n * m
                else:
                    f = batch * n ** 3 * {"cholesky": 1 / 3, "eigh": 9.0, "svd": 22.0, "qr": 4 / 3, "lu": 2 / 3,
                                          "householder_product": 4 / 3}[name]
                total["flops"] += f * _complex_factor(a, a)
            elif name in _TRANSCENDENTAL:
                if outs and _is_float(outs[0]):
                    total["transcendentals"] += _size(outs[0])
            elif name in _ELEMENTWISE:
                if outs and any(_is_float(a) for a in ins + outs):
                    total["flops"] += _size(outs[0]) * (2 if any(_is_complex(a) for a in ins + outs) else 1)
            elif name in _REDUCTIONS:
                if ins and _is_float(ins[0]):
                    total["flops"] += _size(ins[0]) * (2 if _is_complex(ins[0]) else 1)
            else:  # jit, custom_jvp_call, custom_vjp_call, remat, closed_call, ...: their bodies once
                for value in params.values():
                    for sub in (value if isinstance(value, (tuple, list)) else (value,)):
                        if isinstance(sub, (closed_type, open_type)):
                            add(total, walk(inner(sub)))
        return total

    total = walk(inner(closed_jaxpr))
    total["flops_bounds"] = [total["flops"] - total.pop("cond_below"), total["flops"] + total.pop("cond_above")]
    return total


# --------------------------------------------------------------------------- #
# this machine's matmul peak                                                   #
# --------------------------------------------------------------------------- #


def parse_dot(key: str) -> tuple[int, int, int, int]:
    """``"BxMxKxN dtype"`` (a key of ``jaxpr_cost(...)["dots"]``) -> (B, M, K, N)."""
    b, m, k, n = (int(x) for x in key.split()[0].split("x"))
    return b, m, k, n


def matmul_peak(shapes, repeats: int = 5, max_elements: int = 2**26, label=None) -> dict:
    """Achieved GFLOP/s of dense float32 matrix products (jax's default matmul precision).

    shapes: ``(B, M, K, N)`` tuples: ``(B, M, K) @ (B, K, N)`` (B = 1: a plain matrix
      product); shapes with an operand over ``max_elements`` elements are scaled down
      along B (then M and N) to fit.
    label: optional names for the shapes (e.g. where they come from).

    Returns ``{"rows": [{shape, label, flops, seconds, gflops}], "peak_gflops", "peak_shape",
    "peak_label", "dtype", "matmul_precision"}``: the peak is the best row.
    """
    import jax
    import jax.numpy as jnp

    from _common import timed

    rows = []
    labels = list(label or [None] * len(shapes))
    key = jax.random.key(0)
    for (b, m, k, n), name in zip(shapes, labels):
        b, m, k, n = (max(1, int(x)) for x in (b, m, k, n))
        while b > 1 and max(b * m * k, b * k * n, b * m * n) > max_elements:
            b = max(1, b // 2)
        while max(m * k, k * n, m * n) > max_elements and max(m, n) > 1:
            m, n = max(1, m // 2), max(1, n // 2)
        ka, kb = jax.random.split(jax.random.fold_in(key, len(rows)))
        x = jax.random.normal(ka, (b, m, k), jnp.float32)
        y = jax.random.normal(kb, (b, k, n), jnp.float32)
        f = jax.jit(lambda x, y: jnp.matmul(x, y))
        seconds = timed(lambda: f(x, y), repeats)[1]  # the best call: a peak
        flops = 2.0 * b * m * k * n
        rows.append(dict(shape=[b, m, k, n], label=name, flops=flops, seconds=seconds,
                         gflops=flops / seconds / 1e9))
        del x, y
    best = max(rows, key=lambda r: r["gflops"]) if rows else None
    return dict(rows=rows, peak_gflops=best and best["gflops"], peak_shape=best and best["shape"],
                peak_label=best and best["label"], dtype="float32",
                matmul_precision=str(jax.config.jax_default_matmul_precision or "default"))
