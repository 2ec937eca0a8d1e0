"""The GSPMD-vs-shard_map benchmark's measurement (benchmarks/jacobian_sharding.py) on tiny sizes."""
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

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


# --------------------------------------------------------------------------- #
# --platform tpu: what can be checked without a TPU                            #
# --------------------------------------------------------------------------- #

TPU_SPEC = dict(devices=[1], L=4, channels=2, depth=0, dtype="float32", merge=True, per_device=2, convs=["lax"],
                chunk_sizes=[2], gather_chunk_sizes=[2], tpu_topologies=["stand-in for v5e:2x4"])


def _abstract_mesh(n):
    from quantax_lite.utils import make_precompile_mesh

    return make_precompile_mesh(n)


def test_tpu_lowering_for_abstract_mesh_carries_the_sharding(bench):
    """The TPU mode's inputs and lowering, for an AbstractMesh of 8 lowered for "tpu" (no
    libtpu needed), with jax_enable_x64 off as on the chip: the GSPMD form keeps the samples
    split over the batch axis for 8 partitions, the shard_map form is a manual computation,
    and nothing is float64."""
    mesh = _abstract_mesh(8)
    with jax.enable_x64(False):
        model, lattice = bench.make_network(4, channels=2, depth=0, dtype="float32", merge=True)
        params, samples, shapes = bench.abstract_inputs(model, lattice, mesh, per_device=2)
        assert samples.shape == (16, 16) and samples.sharding.spec == jax.sharding.PartitionSpec(("batch",), None)
        text = {sb: bench.lower_jacobian(model.apply, params, samples, mesh, 2, sb, "lax",
                                         lowering_platforms=("tpu",)).as_text() for sb in (False, True)}
    for t in text.values():
        assert "mhlo.num_partitions = 8" in t
        assert 'tensor<16x16xi8> {sdy.sharding = #sdy.sharding<@mesh, [{"batch"}, {}]>}' in t
        assert "f64" not in t and "complex<f32>" in t
    assert "sdy.manual_computation" in text[True] and "sdy.manual_computation" not in text[False]


def test_tpu_cases_with_stand_in_devices(bench, tmp_path):
    """The TPU mode's cases, compiled on threads and timed, with CPU stand-ins: one CPU device
    for the chip, and an AbstractMesh of 8 lowered for "tpu" and compiled onto one CPU device
    repeated for the compile-only slice. GSPMD all-gathers there, shard_map does not."""
    cpu = jax.devices()[0]
    with jax.enable_x64(False):
        cases = bench.tpu_cases(TPU_SPEC, [cpu], mesh_of=lambda name: _abstract_mesh(8), lowering_platforms=("tpu",),
                                device_assignment_of=lambda n: (cpu,) * n)
        assert [(r.get("topology"), r["shard_batch"], inputs is None) for r, _, inputs in cases] == [
            (None, False, False), (None, True, False),
            ("stand-in for v5e:2x4", False, True), ("stand-in for v5e:2x4", True, True)]
        saves = []
        done = bench.compile_cases(cases, threads=2, after_each=lambda: saves.append(1), hlo_dir=str(tmp_path))
        assert len(saves) == 4 and [r["shard_batch"] for r, _, _ in done] == [False, True]
        bench.time_cases(done, repeat=1, long=5.0)
    hlo = sorted(p.name for p in tmp_path.iterdir())
    assert hlo == ["cpu_D1_lax_c2_F.hlo.txt", "cpu_D1_lax_c2_T.hlo.txt", "stand-in_for_v5e_2x4_D8_lax_c2_F.hlo.txt",
                   "stand-in_for_v5e_2x4_D8_lax_c2_T.hlo.txt"]
    assert bench.hlo_collectives((tmp_path / hlo[2]).read_text())["all-gather"]["count"] > 0
    chip, topo = [c[0] for c in cases[:2]], [c[0] for c in cases[2:]]
    for r in chip:
        assert r["devices"] == 1 and r["seconds"] > 0 and r["rel_diff_modes"] < 1e-5
        assert r["collectives"]["all-gather"]["count"] == 0
    assert topo[0]["devices"] == 8 and topo[0]["n_samples"] == 16 and topo[0]["peak_bytes"] > 0
    assert topo[0]["collectives"]["all-gather"]["count"] > 0
    assert all(v["count"] == 0 for v in topo[1]["collectives"].values())
    table = bench.markdown_tpu(dict(spec=TPU_SPEC, rows=chip, topology_rows=topo, x64=False, jax=jax.__version__))
    assert "| lax | 1 | 2 | 0 / 0 |" in table and "| stand-in for v5e:2x4 | 8 | lax | 2 |" in table


def test_tpu_deadline_and_missing_slice(bench):
    """A case not started by the deadline is recorded as skipped; a slice that cannot be
    created is one error row; neither stops the run."""
    def refuse(name):
        raise RuntimeError("JAX TPU support not installed")

    spec = dict(TPU_SPEC, tpu_topologies=["v5e:2x2"])
    cases = bench.tpu_cases(spec, [jax.devices()[0]], mesh_of=refuse)
    assert len(cases) == 3
    error, chip = cases[0][0], [c[0] for c in cases[1:]]
    assert error == dict(topology="v5e:2x2", error="RuntimeError: JAX TPU support not installed")
    assert bench.compile_cases(cases, threads=1, deadline=0.0) == []
    assert [r.get("skipped") for r in chip] == ["deadline", "deadline"]
    table = bench.markdown_tpu(dict(spec=spec, rows=chip, topology_rows=[error]))
    assert "| v5e:2x2 |" in table and "shard_batch=True: deadline" in table


def test_write_json_keeps_the_other_results(bench, tmp_path):
    path = str(tmp_path / "r.json")
    bench.write_json(path, dict(rows=[1], topology_rows=[2]))
    bench.write_json(path, dict(rows=[3]), key="tpu")
    assert json.loads(pathlib.Path(path).read_text()) == dict(rows=[1], topology_rows=[2], tpu=dict(rows=[3]))
    bench.write_json(path, dict(rows=[4]))  # a CPU run keeps the TPU entry
    assert json.loads(pathlib.Path(path).read_text()) == dict(rows=[4], tpu=dict(rows=[3]))


def test_merge_tpu_adds_up_runs(bench):
    """A second TPU run (other chunk sizes, or cases the first one skipped) keeps the rows
    measured before that it did not measure again."""
    col = {"all-gather": dict(count=0)}
    a = dict(conv="lax", devices=1, chunk_size=4, shard_batch=False, collectives=col, seconds=1.0)
    b = dict(a, chunk_size=16, seconds=2.0)
    old = dict(rows=[a, b], topology_rows=[dict(topology="v5e:2x2", error="x")])
    new = dict(rows=[dict(a, seconds=3.0), dict(b, collectives=None, skipped="deadline")], topology_rows=[])
    del new["rows"][1]["collectives"]
    merged = bench.merge_tpu(old, new)
    assert merged["rows"] == [b, dict(a, seconds=3.0)] and merged["topology_rows"] == []
    assert bench.merge_tpu(None, new) is new


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is not None, reason="libtpu is installed here")
def test_tpu_mode_without_tpu_exits_2_with_one_line(tmp_path):
    out = tmp_path / "r.json"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, str(PATH), "--platform", "tpu", "--json", str(out)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no TPU support" in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    assert not out.exists()


def test_compile_limit_leaves_slow_compilations_behind(bench):
    """At the limit, the case still compiling and the one not started are recorded as
    skipped, and compile_cases returns without waiting for the first."""
    import threading
    import time

    release = threading.Event()

    def slow():
        release.wait(30)
        raise RuntimeError("released")

    cases = [(dict(conv="lax", devices=1, chunk_size=c, shard_batch=False), slow, None) for c in (2, 4)]
    t0 = time.time()
    try:
        assert bench.compile_cases(cases, threads=1, limit=t0 + 0.5) == []
    finally:
        release.set()
    assert time.time() - t0 < 10
    assert [r["skipped"] for r, _, _ in cases] == ["limit (still compiling)", "deadline"]


def test_tpu_mode_flow_with_stand_in_support(bench, tmp_path, monkeypatch):
    """The --platform tpu driver end to end on CPU, with TPU support faked: no chip is seen
    (recorded as an error), the slice cannot be made here (an error row), the result goes
    under "tpu" and the CPU rows of the file stay."""
    path = tmp_path / "r.json"
    path.write_text(json.dumps(dict(rows=[dict(conv="lax")], topology_rows=[])))
    monkeypatch.setattr(bench, "tpu_unavailable", lambda name: None)
    with jax.enable_x64(False):
        bench.main(["--tpu", "--json", str(path), "--L", "4", "--channels", "2", "--depth", "0",
                    "--samples-per-device", "2", "--chunk-sizes", "2", "--convs", "lax", "--tpu-topologies", "v5e:2x2"])
    out = json.loads(path.read_text())
    assert out["rows"] == [dict(conv="lax")]
    tpu = out["tpu"]
    assert tpu["platform"] == "tpu" and tpu["x64"] is False and tpu["spec"]["dtype"] == "float32"
    assert tpu["rows"] == [] and any("no TPU chip" in e for e in tpu["errors"])
    assert tpu["topology_rows"][0]["topology"] == "v5e:2x2" and "error" in tpu["topology_rows"][0]
