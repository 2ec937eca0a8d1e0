"""The GSPMD-vs-shard_map benchmark's measurement (benchmarks/jacobian_sharding.py) on tiny sizes."""
import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from quantax_lite.utils import make_mesh, replicate, shard_batch_array

PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "jacobian_sharding.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("jacobian_sharding_benchmark", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_jacobian(log_psi, params, samples):
    """O[s] = grad Re log psi(s) + i grad Im log psi(s), one sample at a time, flattened."""
    def grad(part):
        return jax.jit(jax.grad(lambda p, s: part(log_psi(p, s[None])[0])))

    g_re, g_im = grad(jnp.real), grad(jnp.imag)
    flat = lambda g: np.asarray(jax.flatten_util.ravel_pytree(g)[0])  # noqa: E731
    rows = [flat(g_re(params, s)) + 1j * flat(g_im(params, s)) for s in jnp.asarray(samples)]
    return np.stack(rows)


@pytest.fixture(scope="module")
def network(bench):
    """A tiny symmetrized network on 4x4 (measured in the lax conv form), its parameters and 32 samples."""
    model, lattice = bench.make_network(4, channels=2, depth=0, dtype="float64", merge=True)
    s = bench.random_samples(32, lattice.n_sites, seed=int(np.random.default_rng().integers(2**31)))
    assert s.shape == (32, 16) and s.dtype == np.int8 and np.all(s.sum(axis=1) == 0)
    params = model.init(jax.random.key(int(np.random.default_rng().integers(2**31))), s[:1])
    return model, params, s


@pytest.mark.parametrize("n_devices", [2, 8])
def test_all_gathers_and_equal_jacobians(bench, network, n_devices):
    assert len(jax.devices()) >= n_devices
    mesh = make_mesh(jax.devices()[:n_devices])
    model, params, s = network
    s = s[: 4 * n_devices]
    samples, placed = shard_batch_array(s, mesh), replicate(params, mesh)

    rows, jacs = {}, {}
    for shard_batch in (False, True):
        rows[shard_batch], jacs[shard_batch] = bench.measure(
            model.apply, placed, samples, mesh, chunk_size=2, shard_batch=shard_batch, repeat=1, conv="lax"
        )
    gathers = {sb: r["collectives"]["all-gather"] for sb, r in rows.items()}
    assert gathers[True]["count"] == 0 and gathers[True]["bytes_per_call"] == 0
    assert gathers[False]["count"] > 0 and gathers[False]["bytes_per_call"] > 0
    # two chunks per device: every gather in the chunk loop runs twice per call
    assert gathers[False]["count_per_call"] == 2 * gathers[False]["count"]
    for r in rows.values():
        assert r["devices"] == n_devices and r["n_samples"] == 4 * n_devices
        assert r["seconds"] > 0 and r["peak_bytes"] > 0

    ref = reference_jacobian(model.apply, params, s)
    assert jacs[True].shape == ref.shape
    np.testing.assert_allclose(jacs[True], ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(jacs[False], ref, rtol=1e-9, atol=1e-12)
    assert bench.jacobian_difference(jacs[True], jacs[False]) < 1e-10


HLO = """HloModule m

%body (p: (s32[], f64[4,3])) -> (s32[], f64[4,3]) {
  %p = (s32[], f64[4,3]{1,0}) parameter(0)
  %x = f64[1,3]{1,0} constant({...})
  %ags = ((f64[1,3]{1,0}, c64[2]{0}), (f64[4,3]{1,0}, c64[8]{0})) all-gather-start(%x, %y), dimensions={0}
  %agd = (f64[4,3]{1,0}, c64[8]{0}) all-gather-done(%ags)
  %ar = f32[5]{0} all-reduce(%z), to_apply=%add
  ROOT %t = (s32[], f64[4,3]{1,0}) tuple(%i, %g)
}

%cond (p: (s32[], f64[4,3])) -> pred[] {
  ROOT %c = pred[] constant(true)
}

ENTRY %main (a: f64[4,3]) -> f64[4,3] {
  %a = f64[4,3]{1,0} parameter(0)
  %w = (s32[], f64[4,3]{1,0}) while(%t0), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"5"}}
  %g = f64[8]{0} all-gather(%q), dimensions={0}
  ROOT %r = f64[4,3]{1,0} get-tuple-element(%w), index=1
}
"""


def test_hlo_collectives_counts_and_bytes(bench):
    out = bench.hlo_collectives(HLO)
    ag = out["all-gather"]
    # one combined async gather in the loop body (2 arrays: 96 + 64 result bytes), one sync in ENTRY
    assert ag["count"] == 2 and ag["arrays"] == 3
    assert ag["bytes"] == 4 * 3 * 8 + 8 * 8 + 8 * 8
    assert ag["count_per_call"] == 5 + 1
    assert ag["bytes_per_call"] == 5 * (96 + 64) + 64
    assert out["all-reduce"] == dict(count=1, arrays=1, bytes=20, count_per_call=5, bytes_per_call=100)
    assert out["all-to-all"]["count"] == 0 and out["reduce-scatter"]["count"] == 0
