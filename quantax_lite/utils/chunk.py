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
        if spec is None:
            raise ValueError(
                f"chunk_map: `{name}=None` is not supported: every output of f must have a "
                "batch axis (an int, or a tuple of ints, one per output)."
            )
        kinds = "an int, None or a tuple" if allow_none else "an int or a tuple of ints"
        raise TypeError(f"chunk_map: `{name}` must be {kinds}, got {spec!r}.")


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
    """True while tracing inside a ``shard_map`` over any of ``mesh``'s axes."""
    for name in mesh.axis_names:
        try:
            lax.axis_size(name)
            return True
        except NameError:
            pass
    return False


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


def _out_axis_tree(out_axes, out):
    """A pytree of ints matching ``out``: the batch axis of every output leaf."""
    if isinstance(out_axes, (tuple, list)):
        if not isinstance(out, (tuple, list)) or len(out) != len(out_axes):
            n = len(out) if isinstance(out, (tuple, list)) else "a non-tuple"
            raise ValueError(
                f"chunk_map: `out_axes` has {len(out_axes)} entries but f returned {n} "
                "outputs; give one entry per output or a single int."
            )
        return type(out)(jax.tree_util.tree_map(lambda _: int(a), o) for a, o in zip(out_axes, out))
    return jax.tree_util.tree_map(lambda _: int(out_axes), out)


def _check_outputs(out, out_axes):
    """Validate f's outputs against ``out_axes`` (shapes only); returns ``out``."""
    axis_tree = _out_axis_tree(out_axes, out)
    for leaf, ax in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(axis_tree)):
        ndim = np.ndim(leaf)
        if ndim == 0:
            raise ValueError("chunk_map: f returned a scalar output; every output must have a batch axis.")
        _resolve_axis(ax, ndim, "`out_axes`")
    return out


def _to_front(out, out_axes):
    """Move every output leaf's batch axis to the front; returns (leaves, treedef, axes)."""
    axis_tree = _out_axis_tree(out_axes, out)
    leaves, treedef = jax.tree_util.tree_flatten(out)
    axes = jax.tree_util.tree_leaves(axis_tree)
    front, resolved = [], []
    for leaf, ax in zip(leaves, axes):
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


def _chunk_loop(loop: _Loop, arrays, n_blocks: int, rows: int, chunking: bool):
    """Evaluate f over blocks (n_blocks, rows, ...), ``chunk_size`` rows of each at a time."""
    if not chunking:
        return _call_f(loop, arrays, n_blocks, rows)

    c = loop.chunk_size
    n_chunks = max(1, math.ceil(rows / c))
    padded = n_chunks * c
    axes = _batch_axes(loop.plan)
    arrays = [x if ax is None else _pad_rows(x, padded, 1) for x, ax in zip(arrays, axes)]

    def chunk_of(i):
        return [
            x if ax is None else lax.dynamic_slice_in_dim(x, i * c, c, axis=1)
            for x, ax in zip(arrays, axes)
        ]

    if loop.use_scan:
        blocks_shape, treedef, out_axes = _abstract_call(loop, chunk_of(0), n_blocks, c)
        buffers = [
            loop.constrain_blocks(jnp.zeros((s.shape[0], padded) + s.shape[2:], s.dtype))
            for s in blocks_shape
        ]

        def body(carry, _):
            i, bufs = carry
            outs, _, _ = _call_f(loop, chunk_of(i), n_blocks, c)
            bufs = [lax.dynamic_update_slice_in_dim(b, o, i * c, axis=1) for b, o in zip(bufs, outs)]
            return (i + 1, bufs), None

        # The chunk index is carried, not scanned over, so no array grows with the batch.
        (_, outs), _ = lax.scan(body, (jnp.int32(0), buffers), None, length=n_chunks)
    else:
        pieces = []
        for i in range(n_chunks):
            outs_i, treedef, out_axes = _call_f(loop, [
                x if ax is None else lax.slice_in_dim(x, i * c, (i + 1) * c, axis=1)
                for x, ax in zip(arrays, axes)
            ], n_blocks, c)
            pieces.append(outs_i)
        outs = [jnp.concatenate(p, axis=1) if len(p) > 1 else p[0] for p in zip(*pieces)]
    outs = [o[:, :rows] if padded != rows else o for o in outs]
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
    _check_axis_spec("out_axes", out_axes, allow_none=False)
    _check_chunk_size(chunk_size)
    if mesh is not None and not isinstance(mesh, (Mesh, AbstractMesh)):
        raise TypeError(f"chunk_map: `mesh` must be a jax.sharding.Mesh or AbstractMesh, got {type(mesh).__name__}.")

    def run(arrays, cfg: _Config):
        plan = cfg.plan
        names = tuple(cfg.mesh.axis_names)
        total = cfg.n_devices * cfg.per_device
        axes = _batch_axes(plan)
        xs = [
            x if ax is None else _pad_rows(jnp.moveaxis(jnp.asarray(x), ax, 0), total, 0)
            for x, ax in zip(arrays, axes)
        ]
        if shard_batch:
            info = {}
            loop = _Loop(f, plan, out_axes, chunk_size, use_scan, _identity, _identity)

            def local(*xs):
                blocks = [x if ax is None else x.reshape((1,) + x.shape) for x, ax in zip(xs, axes)]
                outs, info["treedef"], info["axes"] = _chunk_loop(loop, blocks, 1, cfg.per_device, cfg.chunking)
                return [o.reshape(o.shape[1:]) for o in outs]

            in_specs = tuple(PartitionSpec(names) if ax is not None else PartitionSpec() for ax in axes)
            outs = jax.shard_map(
                local, mesh=cfg.mesh, in_specs=in_specs, out_specs=PartitionSpec(names), check_vma=False
            )(*xs)
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
            outs, treedef, out_ax = _chunk_loop(loop, blocks, cfg.n_devices, cfg.per_device, cfg.chunking)
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
        cfg = _Config(plan, the_mesh, n_devices, per_device, chunking, inside)
        if use_scan or shard_batch:
            return run_jit(arrays, cfg)
        return run(arrays, cfg)

    return chunked
