"""``chunk_map``: chunked, device-parallel evaluation of a vectorized function.

Every batched evaluation of quantax_lite (log-amplitudes, local energies,
per-sample Jacobians) goes through :func:`chunk_map`. It bounds memory by
feeding ``f`` at most ``chunk_size`` rows per device at a time, and spreads the
batch over every device of a mesh, either by GSPMD partitioning of a global
batch (``shard_batch=False``) or by running each device's own shard inside one
``jax.shard_map`` (``shard_batch=True``).

Layout. A global batch of ``B`` rows on ``D`` devices is padded with zero rows
to ``D * b`` (``b = ceil(B / D)`` rows per device) and viewed as ``(D, b)``;
device ``d`` owns rows ``d * b ... d * b + b - 1``. When chunking, each
device's ``b`` rows are padded with zeros to ``n * chunk_size`` and chunk ``i``
is made of rows ``i * chunk_size ... (i + 1) * chunk_size - 1`` of every device
(``D * chunk_size`` rows, sharded so that each device holds its own). Outputs
are put back in the original order and padded rows are dropped.

Memory. The scan reads each chunk with a dynamic slice of the unpadded rows and
writes f's rows into an output buffer of exactly ``b`` rows per device; a ragged
last chunk is read from a window clamped to the end of the rows, shifted, with
zeros for the missing rows, so nothing the size of the batch is copied.

Gradients. Wherever a call of ``f`` sees padded rows, it goes through a
``custom_jvp``: the value is ``f`` on the zero-padded rows (what the
specification asks), the derivative is that of ``f`` at the same rows with every
padded row replaced by a real one (row 0 of the call) and a zero tangent. The
padded rows thus add exact zeros to every gradient, never ``0 * inf = nan``.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from .mesh import make_mesh, mesh_size

try:  # True outside every JAX transformation (jit, grad, vmap, ...)
    from jax._src.core import trace_state_clean as _trace_state_clean
except ImportError:  # pragma: no cover - a JAX without it: always use the safe rule
    def _trace_state_clean() -> bool:
        return False

__all__ = ["chunk_map"]


# --------------------------------------------------------------------------- #
# argument checking                                                            #
# --------------------------------------------------------------------------- #


def _is_array(x) -> bool:
    return isinstance(x, (jax.Array, np.ndarray, np.generic))


def _check_chunk_size(chunk_size):
    if chunk_size is None:
        return
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)):
        raise TypeError(
            f"chunk_map: `chunk_size` must be a positive int or None, got "
            f"{type(chunk_size).__name__} {chunk_size!r}."
        )
    if chunk_size <= 0:
        raise ValueError(f"chunk_map: `chunk_size` must be a positive int or None, got {chunk_size}.")


def _check_axis_spec(name: str, spec, allow_none: bool):
    """Type-check ``in_axes``/``out_axes``: int, None (if allowed) or a tuple of those."""

    def ok(a):
        if a is None:
            return allow_none
        return isinstance(a, (int, np.integer)) and not isinstance(a, bool)

    if isinstance(spec, (tuple, list)):
        bad = [a for a in spec if not ok(a)]
        if bad:
            kinds = "an int or None" if allow_none else "an int"
            raise TypeError(f"chunk_map: every entry of `{name}` must be {kinds}, got {bad[0]!r} in {spec!r}.")
    elif not ok(spec):
        kinds = "an int, None or a tuple" if allow_none else "an int or a tuple of ints"
        raise TypeError(f"chunk_map: `{name}` must be {kinds}, got {spec!r}.")


def _has_none(spec) -> bool:
    return spec is None or (isinstance(spec, (tuple, list)) and any(a is None for a in spec))


def _check_out_axes_chunkable(out_axes, chunking: bool):
    """``out_axes`` None (an output without a batch axis) cannot be chunked or sharded."""
    if _has_none(out_axes):
        why = "shard_batch=True splits the batch over devices" if not chunking else (
            "the per-device batch exceeds `chunk_size` (or atleast_1chunk pads it), so f is called "
            "once per chunk"
        )
        raise ValueError(
            f"chunk_map: `out_axes`={out_axes!r} marks an output without a batch axis, which can "
            f"only be passed through when f is called once on the whole batch; here {why} and "
            "such an output has no rows to put together. Give every output a batch axis."
        )


def _normalize_in_axes(in_axes, n_args: int) -> tuple:
    if isinstance(in_axes, (tuple, list)):
        if len(in_axes) != n_args:
            raise ValueError(
                f"chunk_map: `in_axes` has {len(in_axes)} entries but f was called with "
                f"{n_args} positional arguments; give one entry (int or None) per argument."
            )
        return tuple(in_axes)
    return (in_axes,) * n_args


def _resolve_axis(axis: int, ndim: int, what: str) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(
            f"chunk_map: {what} axis {axis} is out of range for an array of rank {ndim}."
        )
    return axis % ndim


def _mesh_axes_bound(mesh) -> bool:
    """True while tracing inside a ``shard_map`` over any of ``mesh``'s axes.

    Read from the manual axes of the abstract mesh in context, so that a ``jax.vmap``
    axis that happens to share a mesh axis name is not taken for a ``shard_map``.
    """
    manual = jax.sharding.get_abstract_mesh().manual_axes
    return any(name in manual for name in mesh.axis_names)


# --------------------------------------------------------------------------- #
# the argument plan: which leaves are batched, on which axis                   #
# --------------------------------------------------------------------------- #


class _Plan(NamedTuple):
    """How the positional arguments split into batched, whole and static leaves."""

    treedefs: tuple  # one treedef per positional argument
    kinds: tuple  # per leaf: ("batch", axis) | ("whole",) | ("static", value)
    batch: int | None  # global batch size, None if nothing is batched


def _make_plan(args: Sequence[Any], axes: tuple) -> tuple[_Plan, list]:
    treedefs, kinds, arrays = [], [], []
    batch, batch_from = None, None
    for i, (arg, ax) in enumerate(zip(args, axes)):
        leaves, treedef = jax.tree_util.tree_flatten(arg)
        treedefs.append(treedef)
        for leaf in leaves:
            if not _is_array(leaf):
                kinds.append(("static", leaf))
                continue
            if ax is None:
                kinds.append(("whole",))
                arrays.append(leaf)
                continue
            ndim = np.ndim(leaf)
            if ndim == 0:
                raise ValueError(
                    f"chunk_map: `in_axes` entry {ax} of argument {i} asks for a batch axis, "
                    "but that argument has a scalar (rank-0) array leaf."
                )
            axis = _resolve_axis(ax, ndim, f"`in_axes` entry for argument {i}:")
            size = np.shape(leaf)[axis]
            if batch is None:
                batch, batch_from = size, i
            elif size != batch:
                raise ValueError(
                    f"chunk_map: batched arguments have different batch sizes: argument "
                    f"{batch_from} has {batch} rows, argument {i} has {size} (along `in_axes`)."
                )
            kinds.append(("batch", axis))
            arrays.append(leaf)
    return _Plan(tuple(treedefs), tuple(kinds), batch), arrays


def _rebuild_args(plan: _Plan, arrays: Sequence) -> tuple:
    """Put array leaves back among the static leaves, then into the argument pytrees."""
    it = iter(arrays)
    leaves = [k[1] if k[0] == "static" else next(it) for k in plan.kinds]
    args, start = [], 0
    for treedef in plan.treedefs:
        n = treedef.num_leaves
        args.append(jax.tree_util.tree_unflatten(treedef, leaves[start : start + n]))
        start += n
    return tuple(args)


def _batch_axes(plan: _Plan) -> list:
    """Batch axis of each array leaf (None for a leaf passed whole)."""
    return [k[1] if k[0] == "batch" else None for k in plan.kinds if k[0] != "static"]


# --------------------------------------------------------------------------- #
# outputs                                                                      #
# --------------------------------------------------------------------------- #


def _out_axes_per_leaf(out_axes, out) -> list:
    """The batch axis (an int, or None: no batch axis) of every leaf of ``out``, in leaf order."""
    n_leaves = lambda o: len(jax.tree_util.tree_leaves(o))  # noqa: E731
    if isinstance(out_axes, (tuple, list)):
        if not isinstance(out, (tuple, list)) or len(out) != len(out_axes):
            n = len(out) if isinstance(out, (tuple, list)) else "a non-tuple"
            raise ValueError(
                f"chunk_map: `out_axes` has {len(out_axes)} entries but f returned {n} "
                "outputs; give one entry per output or a single int."
            )
        return [a for a, o in zip(out_axes, out) for _ in range(n_leaves(o))]
    return [out_axes] * n_leaves(out)


def _check_outputs(out, out_axes):
    """Validate f's outputs against ``out_axes`` (shapes only); returns ``out``."""
    for leaf, ax in zip(jax.tree_util.tree_leaves(out), _out_axes_per_leaf(out_axes, out)):
        if ax is None:
            continue
        ndim = np.ndim(leaf)
        if ndim == 0:
            raise ValueError("chunk_map: f returned a scalar output; every output must have a batch axis.")
        _resolve_axis(ax, ndim, "`out_axes`")
    return out


def _to_front(out, out_axes):
    """Move every output leaf's batch axis to the front; returns (leaves, treedef, axes)."""
    leaves, treedef = jax.tree_util.tree_flatten(out)
    front, resolved = [], []
    for leaf, ax in zip(leaves, _out_axes_per_leaf(out_axes, out)):
        leaf = jnp.asarray(leaf)
        if leaf.ndim == 0:
            raise ValueError("chunk_map: f returned a scalar output; every output must have a batch axis.")
        ax = _resolve_axis(ax, leaf.ndim, "`out_axes`")
        front.append(jnp.moveaxis(leaf, ax, 0))
        resolved.append(ax)
    return front, treedef, resolved


# --------------------------------------------------------------------------- #
# the chunk loop over a block of shape (n_blocks, rows, ...)                  #
# --------------------------------------------------------------------------- #


def _pad_rows(x, rows: int, axis: int):
    extra = rows - x.shape[axis]
    if extra == 0:
        return x
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, extra)
    return jnp.pad(x, pad)


class _Loop(NamedTuple):
    f: Callable
    plan: _Plan
    out_axes: Any
    chunk_size: int | None
    use_scan: bool
    constrain: Callable  # applied to each (n_blocks * chunk)-row input of f
    constrain_blocks: Callable  # applied to (n_blocks, rows, ...) buffers


def _call_f(loop: _Loop, arrays, n_blocks: int, rows: int):
    """Call f on arrays whose batched leaves are (n_blocks, rows, ...) with batch at 1.

    Returns f's output leaves as (n_blocks, rows, ...), treedef and out axes.
    """
    axes = _batch_axes(loop.plan)
    f_in = []
    for x, ax in zip(arrays, axes):
        if ax is None:
            f_in.append(x)
        else:
            x = loop.constrain(x.reshape((n_blocks * rows,) + x.shape[2:]))
            f_in.append(jnp.moveaxis(x, 0, ax))
    out = loop.f(*_rebuild_args(loop.plan, f_in))
    front, treedef, out_axes = _to_front(out, loop.out_axes)
    blocks = [o.reshape((n_blocks, rows) + o.shape[1:]) for o in front]
    return blocks, treedef, out_axes


def _valid_rows(n_valid, start, rows: int):
    """(n_blocks, rows) bool: row ``start + j`` of block d is real (``< n_valid[d]``)."""
    return (start + jnp.arange(rows, dtype=jnp.int32))[None, :] < n_valid[:, None]


def _zero_where(keep, t):
    """Tangent ``t`` where ``keep`` (broadcast on t's leading axes), else 0; float0 as is."""
    if t.dtype == jax.dtypes.float0:
        return t
    keep = jnp.reshape(keep, jnp.shape(keep) + (1,) * (t.ndim - jnp.ndim(keep)))
    return jnp.where(keep, t, jnp.zeros_like(t))


def _call_padded(loop: _Loop, arrays, n_blocks: int, rows: int, n_valid, start=0):
    """:func:`_call_f` on blocks (n_blocks, rows, ...) whose rows ``start + j >= n_valid[d]``
    are zero padding (``n_valid`` None: every row is real).

    The value is f on the zero-padded rows. Derivatives (a ``custom_jvp``) are taken at
    the same rows with every padded row replaced by row (0, 0) of the blocks (a real row:
    chunk starts are real rows of block 0) and a zero tangent; where row (0, 0) is
    padding too (inside ``shard_map``: a device whose chunk is all padding) whole
    arguments and values closed over by f get a zero tangent as well. Padded rows thus
    add exact zeros to every derivative, never ``0 * inf = nan``.
    """
    if n_valid is None or _trace_state_clean():  # nothing padded, or nothing to differentiate
        return _call_f(loop, arrays, n_blocks, rows)
    axes = _batch_axes(loop.plan)
    valid = _valid_rows(n_valid, start, rows)
    info = {}

    def call(arrays):
        outs, info["treedef"], info["axes"] = _call_f(loop, arrays, n_blocks, rows)
        return outs

    # hoist traced values that f closes over into arguments, so that they are differentiated
    # by the rule below too
    call, consts = jax.closure_convert(call, arrays)

    @jax.custom_jvp
    def padded_call(arrays, valid, consts):
        return call(arrays, *consts)

    @padded_call.defjvp
    def padded_call_jvp(primals, tangents):
        arrays, valid, consts = primals
        t_arrays, _, t_consts = tangents
        any_real = valid[0, 0]
        real = [x if ax is None else jnp.where(_row_mask(valid, x), x, x[:1, :1]) for x, ax in zip(arrays, axes)]
        t_arrays = [_zero_where(any_real if ax is None else valid, t) for t, ax in zip(t_arrays, axes)]
        t_consts = [_zero_where(any_real, t) for t in t_consts]
        _, t_out = jax.jvp(lambda a, k: call(a, *k), (real, list(consts)), (t_arrays, t_consts))
        return call(arrays, *consts), t_out

    outs = padded_call(arrays, valid, list(consts))
    return outs, info["treedef"], info["axes"]


def _row_mask(valid, x):
    """(n_blocks, rows) mask, broadcastable against x (n_blocks, rows, ...)."""
    return valid.reshape(valid.shape + (1,) * (x.ndim - 2))


def _read_chunk(x, start, c: int, rows: int):
    """Rows ``start ... start + c - 1`` (axis 1) of x (n_blocks, rows, ...), zeros past ``rows``.

    A ragged last chunk is read from the window of c rows that ends at ``rows``, shifted
    into place and zero-filled: nothing larger than two chunks is materialized.
    """
    if rows % c == 0:
        return lax.dynamic_slice_in_dim(x, start, c, axis=1)
    at = jnp.minimum(start, rows - c)
    window = lax.dynamic_slice_in_dim(x, at, c, axis=1)
    return lax.dynamic_slice_in_dim(jnp.concatenate([window, jnp.zeros_like(window)], axis=1), start - at, c, axis=1)


def _write_chunk(buf, out, start, c: int, rows: int):
    """``buf[:, start:start + c] = out`` (axis 1), dropping the rows of out past ``rows``.

    buf: (n_blocks, rows, ...); a ragged last chunk is shifted into the window of c rows
    that ends at ``rows``, whose first rows keep the values already written.
    """
    if rows % c == 0:
        return lax.dynamic_update_slice_in_dim(buf, out, start, axis=1)
    at = jnp.minimum(start, rows - c)
    shift = start - at
    moved = lax.dynamic_slice_in_dim(jnp.concatenate([out, out], axis=1), c - shift, c, axis=1)
    old = lax.dynamic_slice_in_dim(buf, at, c, axis=1)
    keep = (jnp.arange(c) < shift)[None, :]
    return lax.dynamic_update_slice_in_dim(buf, jnp.where(_row_mask(keep, out), old, moved), at, axis=1)


def _static_chunk(x, start: int, c: int, rows: int):
    """Rows ``start ... start + c - 1`` (axis 1) of x, the last chunk padded with zeros."""
    return _pad_rows(lax.slice_in_dim(x, start, min(start + c, rows), axis=1), c, 1)


def _chunk_loop(loop: _Loop, arrays, n_blocks: int, rows: int, chunking: bool, n_valid=None):
    """Evaluate f over blocks (n_blocks, rows, ...), ``chunk_size`` rows of each at a time.

    n_valid: None (every row is real) or (n_blocks,) ints, the number of leading real
    rows of each block (the others are zero padding). Returns f's output blocks
    (n_blocks, rows, ...), their treedef and out axes.
    """
    if not chunking:
        return _call_padded(loop, arrays, n_blocks, rows, n_valid)

    c = loop.chunk_size
    axes = _batch_axes(loop.plan)
    if rows % c and n_valid is None:
        n_valid = np.full((n_blocks,), rows, np.int32)
    if rows < c:  # atleast_1chunk: one chunk, padded (less than a chunk is copied)
        padded = [x if ax is None else _pad_rows(x, c, 1) for x, ax in zip(arrays, axes)]
        outs, treedef, out_axes = _call_padded(loop, padded, n_blocks, c, n_valid)
        return [o[:, :rows] for o in outs], treedef, out_axes

    n_chunks = -(-rows // c)

    def chunk_of(i, read):
        return [x if ax is None else read(x, i * c, c, rows) for x, ax in zip(arrays, axes)]

    if loop.use_scan:
        blocks_shape, treedef, out_axes = _abstract_call(loop, chunk_of(0, _read_chunk), n_blocks, c)
        buffers = [
            loop.constrain_blocks(jnp.zeros((s.shape[0], rows) + s.shape[2:], s.dtype))
            for s in blocks_shape
        ]

        def body(carry, _):
            i, bufs = carry
            outs, _, _ = _call_padded(loop, chunk_of(i, _read_chunk), n_blocks, c, n_valid, i * c)
            bufs = [_write_chunk(b, o, i * c, c, rows) for b, o in zip(bufs, outs)]
            return (i + 1, bufs), None

        # The chunk index is carried, not scanned over, so no array grows with the batch.
        (_, outs), _ = lax.scan(body, (jnp.int32(0), buffers), None, length=n_chunks)
        return outs, treedef, out_axes

    pieces = []
    for i in range(n_chunks):
        outs_i, treedef, out_axes = _call_padded(loop, chunk_of(i, _static_chunk), n_blocks, c, n_valid, i * c)
        if (i + 1) * c > rows:
            outs_i = [o[:, : rows - i * c] for o in outs_i]
        pieces.append(outs_i)
    outs = [jnp.concatenate(p, axis=1) if len(p) > 1 else p[0] for p in zip(*pieces)]
    return outs, treedef, out_axes


def _abstract_call(loop: _Loop, xs, n_blocks: int, rows: int):
    """Shapes of f's output blocks, their treedef and resolved out axes, without running f."""
    info = {}

    def probe(xs):
        outs, treedef, axes = _call_f(loop, xs, n_blocks, rows)
        info["treedef"], info["axes"] = treedef, axes
        return outs

    shapes = jax.eval_shape(probe, xs)
    return shapes, info["treedef"], info["axes"]


# --------------------------------------------------------------------------- #
# chunk_map                                                                    #
# --------------------------------------------------------------------------- #


def _constrainer(mesh, axis_names: tuple, eager: bool):
    """Sharding constraint: split the first axis over the mesh.

    Traced: a sharding constraint. Concrete arrays are moved only when ``eager`` (the
    whole batch); the chunks sliced from it in a Python loop keep its placement.
    """

    def constrain(x):
        spec = PartitionSpec(axis_names, *([None] * (x.ndim - 1)))
        sharding = NamedSharding(mesh, spec)
        if isinstance(x, jax.core.Tracer):
            return lax.with_sharding_constraint(x, sharding)
        if eager:
            return jax.device_put(x, sharding)
        return x  # a slice of an already placed block keeps its placement

    return constrain


def _identity(x):
    return x


class _Config(NamedTuple):
    """Everything static about one call of a chunked function."""

    plan: _Plan
    mesh: Any
    n_devices: int  # 1 inside an enclosing shard_map over the mesh axes
    per_device: int  # rows per device after padding the batch to a multiple of n_devices
    chunking: bool
    inside: bool


def chunk_map(
    f: Callable,
    in_axes: tuple | int | None = 0,
    out_axes: tuple | int | None = 0,
    chunk_size: int | None = None,
    use_scan: bool = False,
    shard_batch: bool = False,
    atleast_1chunk: bool = False,
    mesh: Mesh | None = None,
) -> Callable:
    """Convert a vmapped function to one with chunked batches, parallel over all devices.

    ``f`` is already vectorized (e.g. ``jax.vmap(g)``): output row ``i`` depends
    only on input row ``i``. The returned function takes the same arguments and
    returns what ``f`` returns on the whole batch (same values, shapes, dtypes
    and pytree structure).

    Args:
      f: the vectorized function.
      in_axes: batch axis of each positional argument: an int (all arguments),
        None (nothing batched), or a tuple with one int-or-None per argument. An
        entry applies to every array leaf of that argument; negative axes count
        from the end; a None argument is passed whole to every chunk.
      out_axes: batch axis of the outputs: an int, or a tuple with one int per
        output when f returns a tuple.
      chunk_size: rows per device per call of f; None for no chunking. When the
        per-device batch is at most ``chunk_size`` (and not ``atleast_1chunk``)
        f is called once with the arguments as given; otherwise each device's
        rows are padded with zeros to a multiple of ``chunk_size``.
      use_scan: run the chunks in one ``jax.lax.scan`` (f must be jittable;
        compiles once) instead of a Python loop (f may be non-jittable).
      shard_batch: run f inside ``jax.shard_map`` so each device chunks only its
        own shard (no GSPMD partitioning of the global batch; no all-gathers of
        the batch for per-sample reverse-mode work such as the symmetry-vmapped
        conv weight-gradient). f must be jittable and must not itself call a
        ``shard_batch`` chunk_map over the same mesh.
      atleast_1chunk: pad a per-device batch smaller than ``chunk_size`` to one
        full chunk, so f always sees ``chunk_size`` rows per device.
      mesh: the device mesh; default ``make_mesh()`` over every device of every
        process, resolved when the function is called or traced. A compile-only
        mesh from ``make_precompile_mesh`` stages the computation for another
        topology.

    Returns:
      The chunked function.
    """
    if not callable(f):
        raise TypeError(f"chunk_map: `f` must be callable, got {type(f).__name__}.")
    _check_axis_spec("in_axes", in_axes, allow_none=True)
    _check_axis_spec("out_axes", out_axes, allow_none=True)
    _check_chunk_size(chunk_size)
    if mesh is not None and not isinstance(mesh, (Mesh, AbstractMesh)):
        raise TypeError(f"chunk_map: `mesh` must be a jax.sharding.Mesh or AbstractMesh, got {type(mesh).__name__}.")

    def run(arrays, cfg: _Config):
        plan = cfg.plan
        names = tuple(cfg.mesh.axis_names)
        total = cfg.n_devices * cfg.per_device
        axes = _batch_axes(plan)
        n_valid = None  # real rows per device: the batch is padded to a multiple of the devices
        if total != plan.batch:
            n_valid = np.clip(plan.batch - cfg.per_device * np.arange(cfg.n_devices), 0, cfg.per_device)
            n_valid = n_valid.astype(np.int32)
        xs = [
            x if ax is None else _pad_rows(jnp.moveaxis(jnp.asarray(x), ax, 0), total, 0)
            for x, ax in zip(arrays, axes)
        ]
        if shard_batch:
            info = {}
            loop = _Loop(f, plan, out_axes, chunk_size, use_scan, _identity, _identity)

            def local(xs, n_valid):
                blocks = [x if ax is None else x.reshape((1,) + x.shape) for x, ax in zip(xs, axes)]
                outs, info["treedef"], info["axes"] = _chunk_loop(
                    loop, blocks, 1, cfg.per_device, cfg.chunking, n_valid
                )
                return [o.reshape(o.shape[1:]) for o in outs]

            in_specs = [PartitionSpec(names) if ax is not None else PartitionSpec() for ax in axes]
            outs = jax.shard_map(
                local, mesh=cfg.mesh, in_specs=(in_specs, PartitionSpec(names)),
                out_specs=PartitionSpec(names), check_vma=False,
            )(xs, n_valid)
            treedef, out_ax = info["treedef"], info["axes"]
        else:
            if cfg.inside:
                place = constrain = _identity
            else:
                place = _constrainer(cfg.mesh, names, eager=True)
                constrain = _constrainer(cfg.mesh, names, eager=False)
            loop = _Loop(f, plan, out_axes, chunk_size, use_scan, constrain, constrain)
            blocks = [
                x if ax is None else place(x.reshape((cfg.n_devices, cfg.per_device) + x.shape[1:]))
                for x, ax in zip(xs, axes)
            ]
            outs, treedef, out_ax = _chunk_loop(
                loop, blocks, cfg.n_devices, cfg.per_device, cfg.chunking, n_valid
            )
            outs = [o.reshape((total,) + o.shape[2:]) for o in outs]
        outs = [o[: plan.batch] if total != plan.batch else o for o in outs]
        outs = [jnp.moveaxis(o, 0, ax) for o, ax in zip(outs, out_ax)]
        return jax.tree_util.tree_unflatten(treedef, outs)

    run_jit = jax.jit(run, static_argnums=1)

    @functools.wraps(f)
    def chunked(*args):
        the_mesh = make_mesh() if mesh is None else mesh
        plan, arrays = _make_plan(args, _normalize_in_axes(in_axes, len(args)))
        if plan.batch is None:
            return f(*args)
        inside = _mesh_axes_bound(the_mesh)
        if shard_batch and inside:
            raise ValueError(
                "chunk_map: nested `shard_batch=True`: this chunk_map is called inside another "
                "shard_batch chunk_map (a shard_map) over the same mesh axes "
                f"{tuple(the_mesh.axis_names)}. Set shard_batch=False on the outer or inner one."
            )
        n_devices = 1 if inside else mesh_size(the_mesh)
        per_device = math.ceil(plan.batch / n_devices)
        chunking = chunk_size is not None and (
            per_device > chunk_size or (atleast_1chunk and per_device < chunk_size)
        )
        if not shard_batch and not chunking:
            return _check_outputs(f(*args), out_axes)
        _check_out_axes_chunkable(out_axes, chunking)
        cfg = _Config(plan, the_mesh, n_devices, per_device, chunking, inside)
        if use_scan or shard_batch:
            return run_jit(arrays, cfg)
        return run(arrays, cfg)

    return chunked
