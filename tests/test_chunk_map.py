"""chunk_map against its contract (../shared/chunk_map.md), on 8 simulated CPU devices."""
import itertools
import os
import re
import socket
import subprocess
import sys
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from quantax_lite.utils import chunk_map, make_mesh, make_precompile_mesh, shard_batch_array

ALL_GATHER = re.compile(r" all-gather(-start)?\(")

BATCHES = (1, 7, 8, 13, 64, 100, 1000)
CHUNKS = (None, 1, 3, 8, 64)


def test_eight_devices():
    assert jax.device_count() == 8
    assert make_mesh().devices.size == 8


# --------------------------------------------------------------------------- #
# values: chunk_map(f)(*args) == f(*args)                                      #
# --------------------------------------------------------------------------- #


def _row(tree, w, z):
    """One row: a dict/tuple pytree, an unbatched weight, a row batched on the last axis."""
    a, (b, c) = tree["a"], tree["bc"]
    y1 = jnp.sin(a) * w[0] + b * z[1] - c[0]
    y2 = jnp.cos(a * w) + z[0]
    return y1, y2  # (3,), (3,)


def _f(tree, w, z):
    """Vectorized: tree leaves batched on axis 0, z on its last axis, w unbatched.

    Returns (y1 (batch, 3), y2 (3, batch)): the second output is batched on axis 1.
    """
    y1, y2 = jax.vmap(_row, in_axes=({"a": 0, "bc": (0, 0)}, None, 1))(tree, w, z)
    return y1, y2.T


def _inputs(rng, batch):
    tree = {
        "a": rng.normal(size=(batch, 3)),
        "bc": (rng.normal(size=(batch, 1)), rng.normal(size=(batch, 2))),
    }
    w = rng.normal(size=(3,))
    z = rng.normal(size=(2, batch))
    return jax.tree_util.tree_map(jnp.asarray, (tree, w, z))


# by default the edges (one row; a ragged batch, fewer rows than devices times chunks); the rest under slow
@pytest.mark.parametrize("batch", [b if b in (1, 13) else pytest.param(b, marks=pytest.mark.slow) for b in BATCHES])
def test_matches_f_on_the_grid(batch, rng):
    args = _inputs(rng, batch)
    # Compiled and eager (op-by-op) evaluation may round differently (fused
    # multiply-adds), so each mode is compared with f evaluated the same way.
    eager = jax.tree_util.tree_map(np.asarray, _f(*args))
    compiled = jax.tree_util.tree_map(np.asarray, jax.jit(_f)(*args))
    for chunk, use_scan, shard_batch, at1 in itertools.product(CHUNKS, (False, True), (False, True), (False, True)):
        F = chunk_map(
            _f, in_axes=(0, None, -1), out_axes=(0, 1), chunk_size=chunk,
            use_scan=use_scan, shard_batch=shard_batch, atleast_1chunk=at1,
        )
        got = F(*args)
        per_device = -(-batch // 8)
        chunking = chunk is not None and (per_device > chunk or (at1 and per_device < chunk))
        traced = shard_batch or (use_scan and chunking)  # otherwise f runs eagerly
        expected = compiled if traced else eager
        label = dict(batch=batch, chunk=chunk, use_scan=use_scan, shard_batch=shard_batch, atleast_1chunk=at1)
        assert isinstance(got, tuple) and len(got) == 2, label
        for g, e in zip(got, expected):
            assert g.shape == e.shape and g.dtype == e.dtype, label
            np.testing.assert_array_equal(np.asarray(g), e, err_msg=str(label))


def test_single_int_axes_and_pytree_output(rng):
    x = jnp.asarray(rng.normal(size=(21, 4)))
    f = jax.vmap(lambda r: {"sum": r.sum(), "sq": r**2})
    for shard_batch, use_scan in itertools.product((False, True), (False, True)):
        got = chunk_map(f, chunk_size=2, shard_batch=shard_batch, use_scan=use_scan)(x)
        want = f(x)
        assert set(got) == {"sum", "sq"}
        np.testing.assert_array_equal(got["sq"], want["sq"])
        np.testing.assert_allclose(got["sum"], want["sum"], rtol=1e-15, atol=1e-15)


def test_matmul_rows_match_within_rounding(rng):
    """A row-wise matrix product: values agree to rounding (BLAS may block differently)."""
    x = jnp.asarray(rng.normal(size=(100, 16)))
    w = jnp.asarray(rng.normal(size=(16, 8)))
    f = lambda x, w: jnp.tanh(x @ w)  # noqa: E731
    for shard_batch in (False, True):
        got = chunk_map(f, in_axes=(0, None), chunk_size=3, use_scan=True, shard_batch=shard_batch)(x, w)
        np.testing.assert_allclose(got, f(x, w), rtol=1e-13, atol=1e-14)


def test_in_axes_none_is_plain_call(rng):
    x = jnp.asarray(rng.normal(size=(5,)))
    calls = []

    def f(x):
        calls.append(x)
        return x * 2

    out = chunk_map(f, in_axes=None, chunk_size=1)(x)
    assert len(calls) == 1 and calls[0] is x
    np.testing.assert_array_equal(out, x * 2)


def test_non_array_leaves_pass_through(rng):
    x = jnp.asarray(rng.normal(size=(10, 2)))
    seen = []

    def f(args):
        seen.append((args["scale"], args["name"]))
        return args["x"] * args["scale"]

    for use_scan, shard_batch in itertools.product((False, True), (False, True)):
        out = chunk_map(f, chunk_size=1, use_scan=use_scan, shard_batch=shard_batch)(
            {"x": x, "scale": 3.0, "name": "spins"}
        )
        np.testing.assert_array_equal(out, x * 3.0)
    assert all(s == (3.0, "spins") for s in seen)


# --------------------------------------------------------------------------- #
# what f receives                                                              #
# --------------------------------------------------------------------------- #


class Recorder:
    """A non-jittable vectorized f that records the rows it is given."""

    def __init__(self):
        self.calls = []

    def __call__(self, x):
        rows = np.asarray(x)  # concrete values only: fails under jit
        self.calls.append(rows)
        return jnp.asarray(rows.sum(axis=1) + 1.0)


def test_recording_padding_and_calls(rng):
    batch, chunk = 20, 2  # 8 devices: 3 rows per device (4 zero rows), 2 chunks of 2
    x = jnp.asarray(rng.uniform(1.0, 2.0, size=(batch, 3)))
    rec = Recorder()
    out = chunk_map(rec, chunk_size=chunk)(x)
    assert len(rec.calls) == 2
    assert all(c.shape == (8 * chunk, 3) for c in rec.calls)
    rows = np.concatenate(rec.calls)
    zero = np.all(rows == 0.0, axis=1)
    assert zero.sum() == 2 * 8 * chunk - batch  # every padded row is a zero row
    assert sorted(map(tuple, rows[~zero])) == sorted(map(tuple, np.asarray(x)))
    np.testing.assert_allclose(out, np.asarray(x).sum(1) + 1.0)
    # chunk i holds rows i*chunk .. of every device's shard of 3 rows
    np.testing.assert_array_equal(rec.calls[0][:2], np.asarray(x)[:2])
    np.testing.assert_array_equal(rec.calls[1][0], np.asarray(x)[2])
    assert np.all(rec.calls[1][1] == 0.0)


def test_arguments_unchanged_when_batch_fits(rng):
    x = jnp.asarray(rng.normal(size=(16, 3)))
    w = jnp.asarray(rng.normal(size=(3,)))
    received = []

    def f(x, w):
        received.append((x, w))
        return x * w

    for use_scan in (False, True):
        received.clear()
        chunk_map(f, in_axes=(0, None), chunk_size=2, use_scan=use_scan)(x, w)  # 2 rows per device
        assert len(received) == 1 and received[0][0] is x and received[0][1] is w


def test_atleast_1chunk_always_full_chunks(rng):
    for batch in (1, 8, 13, 40):
        x = jnp.asarray(rng.uniform(1.0, 2.0, size=(batch, 3)))
        rec = Recorder()
        out = chunk_map(rec, chunk_size=4, atleast_1chunk=True)(x)
        assert rec.calls and all(c.shape == (8 * 4, 3) for c in rec.calls)
        np.testing.assert_allclose(out, np.asarray(x).sum(1) + 1.0)


def test_non_jittable_f_with_python_loop(rng):
    x = jnp.asarray(rng.normal(size=(30, 4)))

    def f(x):
        return np.linalg.norm(np.asarray(x), axis=1)  # numpy on concrete values

    out = chunk_map(f, chunk_size=3, use_scan=False)(x)
    np.testing.assert_allclose(np.asarray(out), np.linalg.norm(np.asarray(x), axis=1), rtol=1e-15)
    with pytest.raises(Exception):  # the same f cannot be scanned
        chunk_map(f, chunk_size=3, use_scan=True)(x)


def test_mesh_of_four_devices_chunks_by_four(rng):
    mesh = make_mesh(jax.devices()[:4])
    x = jnp.asarray(rng.uniform(1.0, 2.0, size=(16, 3)))
    rec = Recorder()
    out = chunk_map(rec, chunk_size=2, mesh=mesh)(x)  # 4 rows per device: 2 chunks of 4 x 2 rows
    assert len(rec.calls) == 2 and all(c.shape == (4 * 2, 3) for c in rec.calls)
    np.testing.assert_allclose(out, np.asarray(x).sum(1) + 1.0)
    for shard_batch in (False, True):
        y = chunk_map(jax.vmap(jnp.sin), chunk_size=2, use_scan=True, shard_batch=shard_batch, mesh=mesh)(x)
        np.testing.assert_array_equal(y, jnp.sin(x))
        assert {d.id for d in y.sharding.device_set} <= {d.id for d in mesh.devices.flat}


def test_output_is_sharded_over_the_mesh(rng):
    x = shard_batch_array(rng.normal(size=(64, 3)))
    for shard_batch in (False, True):
        y = chunk_map(jax.vmap(jnp.cos), chunk_size=2, use_scan=True, shard_batch=shard_batch)(x)
        assert len(y.sharding.device_set) == 8


def test_padded_nan_rows_never_leak(rng):
    f = jax.vmap(lambda r: jnp.log(r).sum() / r[0])  # log(0) = -inf, 0/0 = nan on a zero row
    x = jnp.asarray(rng.uniform(0.5, 2.0, size=(13, 3)))
    want = f(x)
    for chunk, use_scan, shard_batch, at1 in itertools.product((3, 5, 64), (False, True), (False, True), (False, True)):
        got = chunk_map(f, chunk_size=chunk, use_scan=use_scan, shard_batch=shard_batch, atleast_1chunk=at1)(x)
        assert np.all(np.isfinite(got))
        np.testing.assert_array_equal(got, want)


def test_gradient_through_chunk_map(rng):
    x = jnp.asarray(rng.normal(size=(24, 3)))
    w = jnp.asarray(rng.normal(size=(3,)))
    f = lambda x, w: jnp.sin(x @ w)  # noqa: E731
    for shard_batch in (False, True):
        F = chunk_map(f, in_axes=(0, None), chunk_size=2, use_scan=True, shard_batch=shard_batch)
        g = jax.grad(lambda w: F(x, w).sum())(w)
        np.testing.assert_allclose(g, jax.grad(lambda w: f(x, w).sum())(w), rtol=1e-12)


def _log_row(r, w):
    """One row; its derivative is non-finite on a zero row (log 0, 0 / 0)."""
    return jnp.log(jnp.sum(r**2)) * w[0] + jnp.sin(r @ w)


_log_f = jax.vmap(_log_row, in_axes=(0, None))


# (batch, chunk_size, atleast_1chunk): 13 rows on 8 devices pad the batch to 16 (chunk 1
# divides the 2 rows per device); 40 rows = 5 per device, a ragged last chunk of 2; 13 rows
# with atleast_1chunk pad 2 rows per device to one chunk of 4.
@pytest.mark.parametrize("batch, chunk, at1", [(13, 1, False), (40, 2, False), (13, 4, True)])
def test_gradients_with_padded_rows_equal_unchunked(batch, chunk, at1, rng):
    x = jnp.asarray(rng.uniform(0.5, 1.5, size=(batch, 3)))
    w = jnp.asarray(rng.normal(size=(3,)))
    ct = jnp.asarray(rng.normal(size=(batch,)))
    want_x, want_w = jax.vjp(_log_f, x, w)[1](ct)
    assert np.all(np.isfinite(want_x)) and np.all(np.isfinite(want_w))
    for use_scan, shard_batch in itertools.product((False, True), (False, True)):
        for chunk_size in (chunk, None) if shard_batch else (chunk,):
            label = dict(use_scan=use_scan, shard_batch=shard_batch, chunk_size=chunk_size)
            F = chunk_map(_log_f, in_axes=(0, None), chunk_size=chunk_size, use_scan=use_scan,
                          shard_batch=shard_batch, atleast_1chunk=at1)
            out, vjp = jax.vjp(F, x, w)
            # each row is a sum of terms of order 1 that can nearly cancel: an absolute
            # floor of a few ulp of 1 beside the relative tolerance
            np.testing.assert_allclose(out, _log_f(x, w), rtol=1e-13, atol=1e-15, err_msg=str(label))
            got_x, got_w = vjp(ct)
            np.testing.assert_allclose(got_x, want_x, rtol=1e-12, atol=1e-14, err_msg=str(label))
            np.testing.assert_allclose(got_w, want_w, rtol=1e-12, atol=1e-14, err_msg=str(label))


def test_grad_jacrev_jvp_of_closure_with_padded_rows(rng):
    """A parameter closed over by f (not an argument), jax.jacrev w.r.t. the rows, and
    forward mode, through a ragged scan (5 rows per device, chunks of 2)."""
    x = jnp.asarray(rng.uniform(0.5, 1.5, size=(40, 3)))
    w = jnp.asarray(rng.normal(size=(3,)))
    for shard_batch in (False, True):
        def loss(w):  # f closes over w
            F = chunk_map(lambda x: _log_f(x, w), chunk_size=2, use_scan=True, shard_batch=shard_batch)
            return jnp.sum(F(x) ** 2)

        want = jax.grad(lambda w: jnp.sum(_log_f(x, w) ** 2))(w)
        np.testing.assert_allclose(jax.grad(loss)(w), want, rtol=1e-12)
        F = chunk_map(_log_f, in_axes=(0, None), chunk_size=2, use_scan=True, shard_batch=shard_batch)
        jx = jax.jacrev(F)(x[:24], w)  # 3 rows per device
        np.testing.assert_allclose(jx, jax.jacrev(_log_f)(x[:24], w), rtol=1e-12, atol=1e-14)
        t = jnp.asarray(rng.normal(size=(3,)))
        _, tan = jax.jvp(lambda w: F(x, w), (w,), (t,))
        np.testing.assert_allclose(tan, jax.jvp(lambda w: _log_f(x, w), (w,), (t,))[1], rtol=1e-12)


# --------------------------------------------------------------------------- #
# the GSPMD case: symmetry-vmapped periodic conv Jacobian                      #
# --------------------------------------------------------------------------- #


def _conv_log_psi(params, s, perms, L):
    """A tiny symmetrized periodic conv NQS: log sum_g exp(sum tanh(conv(g s)))."""
    images = s[perms].astype(params["w"].dtype).reshape(-1, L, L, 1)
    x = jnp.pad(images, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="wrap")
    y = jax.lax.conv_general_dilated(x, params["w"], (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jax.nn.logsumexp(jnp.tanh(y + params["b"]).sum(axis=(1, 2, 3)))


def _square_translations(L):
    idx = np.arange(L * L).reshape(L, L)
    return np.stack([np.roll(idx, (dx, dy), axis=(0, 1)).ravel() for dx in range(L) for dy in range(L)])


def test_shard_batch_removes_all_gathers_of_conv_jacobian(rng):
    L = 4
    perms = jnp.asarray(_square_translations(L))
    params = {"w": jnp.asarray(0.3 * rng.normal(size=(3, 3, 1, 4))), "b": jnp.asarray(0.1 * rng.normal(size=(4,)))}
    s = shard_batch_array(rng.choice(np.array([-1, 1], np.int8), size=(128, L * L)))
    per_sample_grad = jax.vmap(jax.grad(lambda p, s: _conv_log_psi(p, s, perms, L)), in_axes=(None, 0))
    reference = per_sample_grad(params, s)
    counts = {}
    for shard_batch in (False, True):
        F = chunk_map(per_sample_grad, in_axes=(None, 0), chunk_size=4, use_scan=True, shard_batch=shard_batch)
        hlo = jax.jit(F).lower(params, s).compile().as_text()
        counts[shard_batch] = len(ALL_GATHER.findall(hlo))
        got = F(params, s)
        for k in params:
            np.testing.assert_allclose(got[k], reference[k], rtol=1e-12, atol=1e-13)
    assert counts[False] > 0, counts  # GSPMD all-gathers the grouped-conv operands
    assert counts[True] == 0, counts


# --------------------------------------------------------------------------- #
# memory                                                                       #
# --------------------------------------------------------------------------- #


def test_scratch_memory_flat_in_batch():
    # a 64x64 per-row intermediate that XLA must materialize (a cumulative sum)
    f = jax.vmap(lambda r: jnp.cumsum(jnp.sin(jnp.outer(r, r)), axis=0).max())
    mesh = make_mesh()
    temps, plain = {}, {}
    for batch in (512, 4096):
        x = jax.ShapeDtypeStruct((batch, 64), jnp.float64, sharding=NamedSharding(mesh, PartitionSpec("batch")))
        for shard_batch in (False, True):
            F = chunk_map(f, chunk_size=8, use_scan=True, shard_batch=shard_batch)
            temps[batch, shard_batch] = jax.jit(F).lower(x).compile().memory_analysis().temp_size_in_bytes
        plain[batch] = jax.jit(f).lower(x).compile().memory_analysis().temp_size_in_bytes
    for shard_batch in (False, True):
        assert temps[4096, shard_batch] == temps[512, shard_batch], temps
        assert temps[4096, shard_batch] < plain[4096] / 16, (temps, plain)
    assert plain[4096] >= 7 * plain[512]  # the measure does see batch-sized scratch


def test_scratch_memory_flat_for_ragged_batches():
    """k * c + 1 rows per device (a ragged last chunk): no copy of the input to pad it, no
    padded copy of the output; the scratch is that of k * c rows plus less than a chunk."""
    f = jax.vmap(lambda r: jnp.cumsum(jnp.sin(jnp.outer(r, r)), axis=0).max())
    mesh = make_mesh()
    c, n = 8, 64
    chunk_bytes = c * n * 8  # one chunk of input rows per device
    for shard_batch in (False, True):
        F = chunk_map(f, chunk_size=c, use_scan=True, shard_batch=shard_batch)
        temps = {}
        for rows in (4 * c, 4 * c + 1, 16 * c + 1):
            x = jax.ShapeDtypeStruct((8 * rows, n), jnp.float64, sharding=NamedSharding(mesh, PartitionSpec("batch")))
            temps[rows] = jax.jit(F).lower(x).compile().memory_analysis().temp_size_in_bytes
        assert temps[16 * c + 1] == temps[4 * c + 1], (shard_batch, temps)
        assert temps[4 * c + 1] - temps[4 * c] < chunk_bytes, (shard_batch, temps)


# --------------------------------------------------------------------------- #
# compile-only meshes                                                          #
# --------------------------------------------------------------------------- #


def test_precompile_mesh_counts_collectives_for_64_devices():
    """A function GSPMD cannot keep split over the batch: the per-sample gradient of a
    symmetrized conv net in the lax form (its weight gradient is a convolution over the
    batch), as in benchmarks/jacobian_sharding.py. Compiled for 64 devices, the GSPMD form
    (shard_batch False) all-gathers, the shard_map form (shard_batch True) does not."""
    from quantax_lite import Square, full_symmetry, make_conv_nqs
    from quantax_lite.utils import tuning
    from quantax_lite.utils import replicated_sharding

    mesh = make_precompile_mesh(64)
    lattice = Square(4)
    gathers = {}
    with tuning.override(conv_form="lax"):
        model = make_conv_nqs(lattice, full_symmetry(lattice), channels=2, depth=0)
        shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, lattice.n_sites), jnp.int8))
        params = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=replicated_sharding(mesh)),
                              shapes)
        x = jax.ShapeDtypeStruct((64 * 4, lattice.n_sites), jnp.int8,
                                 sharding=NamedSharding(mesh, PartitionSpec("batch")))
        grad = jax.vmap(jax.grad(lambda p, s: model.apply(p, s[None])[0].real), in_axes=(None, 0))
        for shard_batch in (False, True):
            F = chunk_map(grad, in_axes=(None, 0), chunk_size=2, use_scan=True, shard_batch=shard_batch, mesh=mesh)
            lowered = jax.jit(F).trace(params, x).lower(lowering_platforms=("cuda",))
            assert "mhlo.num_partitions = 64" in lowered.as_text()
            compiled = lowered.compile(device_assignment=(jax.devices()[0],) * 64)
            gathers[shard_batch] = len(ALL_GATHER.findall(compiled.as_text()))
    assert gathers[False] > 0, gathers  # there is something to gather under GSPMD
    assert gathers[True] == 0, gathers


def test_precompile_mesh_errors():
    with pytest.raises(ValueError, match="n_devices"):
        make_precompile_mesh(0)
    with pytest.raises(RuntimeError, match="no compile-only CPU"):
        make_precompile_mesh(topology="1x1x8", platform="cpu")


# --------------------------------------------------------------------------- #
# errors                                                                       #
# --------------------------------------------------------------------------- #


def test_error_in_axes_length():
    F = chunk_map(lambda x, y: x + y, in_axes=(0,), chunk_size=2)
    with pytest.raises(ValueError, match="in_axes"):
        F(jnp.ones(4), jnp.ones(4))


def test_error_axis_out_of_range():
    F = chunk_map(jax.vmap(jnp.sin), in_axes=2, chunk_size=2)
    with pytest.raises(ValueError, match="in_axes.*out of range"):
        F(jnp.ones((4, 3)))
    G = chunk_map(jax.vmap(jnp.sin), out_axes=3, chunk_size=2)
    with pytest.raises(ValueError, match="out_axes.*out of range"):
        G(jnp.ones((16, 3)))


def test_error_batch_sizes_differ():
    F = chunk_map(lambda x, y: x + y, chunk_size=2)
    with pytest.raises(ValueError, match="batch sizes"):
        F(jnp.ones(4), jnp.ones(5))


@pytest.mark.parametrize("bad", [0, -3])
def test_error_chunk_size_not_positive(bad):
    with pytest.raises(ValueError, match="chunk_size"):
        chunk_map(jnp.sin, chunk_size=bad)


def test_error_chunk_size_type():
    with pytest.raises(TypeError, match="chunk_size"):
        chunk_map(jnp.sin, chunk_size=2.5)


def test_out_axes_none_passes_through_unless_chunked(rng):
    """out_axes None: that output has no batch axis; fine when f is called once on the
    whole batch, a clear error naming `out_axes` when the batch must be chunked."""
    x = jnp.asarray(rng.normal(size=(32, 3)))
    f = lambda x: (jnp.sin(x), jnp.sum(x))  # noqa: E731  (second output: no batch axis)
    for F in (chunk_map(f, out_axes=(0, None)), chunk_map(f, out_axes=(0, None), chunk_size=4)):
        got = F(x)  # 4 rows per device: f is called once, unchanged
        np.testing.assert_array_equal(got[0], jnp.sin(x))
        np.testing.assert_array_equal(got[1], jnp.sum(x))
    np.testing.assert_array_equal(chunk_map(jnp.sum, out_axes=None)(x), jnp.sum(x))
    for kwargs in (dict(chunk_size=1), dict(chunk_size=1, use_scan=True), dict(shard_batch=True)):
        with pytest.raises(ValueError, match="out_axes"):
            chunk_map(f, out_axes=(0, None), **kwargs)(x)
        with pytest.raises(ValueError, match="out_axes"):
            chunk_map(jnp.sum, out_axes=None, **kwargs)(x)


def test_error_nested_shard_batch(rng):
    inner = chunk_map(jax.vmap(jnp.sin), chunk_size=2, shard_batch=True)
    outer = chunk_map(lambda x: inner(x), chunk_size=2, shard_batch=True)
    with pytest.raises(ValueError, match="nested `shard_batch"):
        outer(jnp.ones((32, 2)))


def test_inner_plain_chunk_map_inside_shard_batch_runs_locally(rng):
    inner = chunk_map(jax.vmap(jnp.sin), chunk_size=2, use_scan=True)
    outer = chunk_map(lambda x: inner(x) * 2, chunk_size=4, use_scan=True, shard_batch=True)
    x = jnp.asarray(rng.normal(size=(64, 2)))
    np.testing.assert_array_equal(outer(x), jnp.sin(x) * 2)


def test_vmap_axis_name_equal_to_mesh_axis_is_not_a_shard_map(rng):
    """jax.vmap(..., axis_name="batch") binds the mesh's axis name; chunk_map must still
    spread and chunk the batch over the 8 devices (and shard_batch must not call it nested)."""
    xs = jnp.asarray(rng.normal(size=(3, 40, 4)))
    f = jax.vmap(lambda r: jnp.sin(r) * r.sum())
    for use_scan, shard_batch in [(False, False), (True, False), (True, True)]:
        F = chunk_map(f, chunk_size=2, use_scan=use_scan, shard_batch=shard_batch)
        got = jax.vmap(F, axis_name="batch")(xs)
        np.testing.assert_allclose(got, jax.vmap(f)(xs), rtol=1e-14, atol=1e-15, err_msg=str((use_scan, shard_batch)))


class _Pair(NamedTuple):
    rows: jax.Array  # (batch, 3)
    cols: jax.Array  # (3, batch)


def test_namedtuple_output_with_tuple_out_axes(rng):
    x = jnp.asarray(rng.normal(size=(20, 3)))
    f = lambda x: _Pair(jnp.sin(x), jnp.cos(x).T)  # noqa: E731
    for chunk, use_scan, shard_batch in [(None, False, False), (2, False, False), (2, True, True)]:
        got = chunk_map(f, out_axes=(0, 1), chunk_size=chunk, use_scan=use_scan, shard_batch=shard_batch)(x)
        assert isinstance(got, _Pair)
        np.testing.assert_array_equal(got.rows, jnp.sin(x))
        np.testing.assert_array_equal(got.cols, jnp.cos(x).T)


def test_error_f_not_callable():
    with pytest.raises(TypeError, match="`f`"):
        chunk_map(3)


# --------------------------------------------------------------------------- #
# two processes on 127.0.0.1                                                   #
# --------------------------------------------------------------------------- #


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_gloo(tmp_path):
    worker = os.path.join(os.path.dirname(__file__), "multiprocess_worker.py")
    out = tmp_path / "out.npz"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    procs = [
        subprocess.Popen([sys.executable, worker, str(port), str(i), str(out)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for i in range(2)
    ]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=180)[0].decode())
    finally:
        for p in procs:
            p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)
    res = np.load(out)
    assert int(res["n_devices"]) == 4 and int(res["n_local"]) == 2
    x = np.random.default_rng(1234).normal(size=(36, 5))
    w = np.random.default_rng(99).normal(size=(5, 3))
    want = np.tanh(x @ w)
    for shard_batch in (False, True):
        np.testing.assert_allclose(res[f"shard_batch_{shard_batch}"], want, rtol=1e-12)
