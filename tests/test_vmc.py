"""The VMC driver: steps, checkpoints that survive a kill, and resumed trajectories."""
import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from quantax_lite.exact.diagonalization import ground_state_energy
from quantax_lite.geometry.lattice import Chain
from quantax_lite.models import make_conv_nqs
from quantax_lite.operators.hamiltonian import Heisenberg
from quantax_lite.optimizer.preconditioners import spring, sr
from quantax_lite.sampler import ExactSampler, Exchange, MetropolisSampler
from quantax_lite.geometry.symmetry import full_symmetry
import quantax_lite.driver.vmc as vmc_module
from quantax_lite.driver.checkpoint import load_checkpoint, load_latest_checkpoint, save_checkpoint
from quantax_lite.driver.vmc import VMC, Diverged, energy_estimate, metrics_to_record, run


@functools.lru_cache(maxsize=None)
def _driver(n_samples, sr_momentum):
    """One driver per setting, shared by the tests (its step compiles once per process)."""
    lattice = Chain(6)
    ham = Heisenberg(lattice, marshall_sign=True)
    model = make_conv_nqs(lattice, full_symmetry(lattice), channels=4, depth=1, kernel_size=3)
    sampler = MetropolisSampler(model.apply, Exchange(lattice.bonds(1)), n_chains=16, n_sites=6,
                                n_thermalize=5)
    preconditioner = sr(diag_shift=1e-3)
    if sr_momentum:
        preconditioner = spring(preconditioner, sr_momentum)
    vmc = VMC(ham, sampler, optax.sgd(0.05), n_samples, preconditioner=preconditioner)
    return vmc, model, ham


def _setup(seed=0, n_samples=64, sr_momentum=0.0):
    vmc, model, ham = _driver(n_samples, sr_momentum)
    params = model.init(jax.random.PRNGKey(seed), jnp.ones((1, 6), jnp.int8))
    return vmc, vmc.init(jax.random.PRNGKey(seed + 1), params), ham


@pytest.mark.slow
def test_steps_lower_the_energy_towards_exact():
    vmc, state, ham = _setup()
    state, records = run(vmc, state, 20, progress=False)
    assert int(state.iteration) == 20 and len(records) == 20
    stats, state = energy_estimate(vmc, state, 512)
    exact = ground_state_energy(ham)
    assert records[0]["energy"] > exact + 0.3
    assert float(stats.mean.real) - exact < 0.03 * abs(exact)
    assert float(stats.mean.real) > exact - 5 * float(stats.error_of_mean)
    for key in ("energy", "energy_error", "variance", "acceptance", "r_hat", "step_norm", "wall_time_s"):
        assert np.isfinite(records[-1][key])


def test_checkpoint_roundtrip(tmp_path):
    vmc, state, _ = _setup()
    state, _ = run(vmc, state, 2, progress=False)
    path = tmp_path / "ck.npz"
    save_checkpoint(path, state, {"note": "x"})
    assert os.listdir(tmp_path) == ["ck.npz"]  # no temporary file left behind
    _, template, _ = _setup(seed=5)
    restored, meta = load_checkpoint(path, template)
    assert meta == {"note": "x"}
    for a, b in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(restored)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_checkpoint_of_another_run_is_refused(tmp_path):
    vmc, state, _ = _setup()
    save_checkpoint(tmp_path / "ck.npz", state)
    other_vmc, other, _ = _setup(n_samples=32)
    bigger = other._replace(params=jax.tree_util.tree_map(lambda x: jnp.zeros((2,) + x.shape, x.dtype), other.params))
    with pytest.raises(ValueError, match="different"):
        load_checkpoint(tmp_path / "ck.npz", bigger)


class Killed(Exception):
    pass


@pytest.mark.parametrize("sr_momentum", [0.0, 0.9])
def test_killed_run_resumes_on_the_same_trajectory(tmp_path, sr_momentum):
    vmc, state, _ = _setup(sr_momentum=sr_momentum)
    ref_state, ref = run(vmc, state, 7, progress=False)

    vmc, state, _ = _setup(sr_momentum=sr_momentum)
    out = tmp_path / "run"

    def kill_at_5(record, state):
        if record["iteration"] == 5:
            raise Killed  # dies between checkpoints (every 2 steps: last one at 4)

    with pytest.raises(Killed):
        run(vmc, state, 7, out_dir=out, checkpoint_every=2, progress=False, callbacks=[kill_at_5])
    assert len(open(out / "log.jsonl").readlines()) == 5
    _, template, _ = _setup(seed=9, sr_momentum=sr_momentum)
    resumed, _, path = load_latest_checkpoint(out, template)
    assert int(resumed.iteration) == 4 and path.endswith("checkpoint-00000004.npz")
    final, _ = run(vmc, resumed, 7, out_dir=out, checkpoint_every=2, progress=False)
    log = [json.loads(line) for line in open(out / "log.jsonl")]
    assert [r["iteration"] for r in log] == list(range(1, 8))
    assert [r["energy"] for r in log] == [r["energy"] for r in ref]
    for a, b in zip(jax.tree_util.tree_leaves(final.params), jax.tree_util.tree_leaves(ref_state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_spring_keeps_the_last_direction():
    """With spring the state carries the last SR direction: with optax.sgd(lr) every
    step moves the parameters by exactly -lr times it; without, there is no memory."""
    from jax.flatten_util import ravel_pytree

    def memory(state):
        (leaf,) = jax.tree_util.tree_leaves(state.preconditioner)
        return leaf

    assert jax.tree_util.tree_leaves(_setup()[1].preconditioner) == []
    vmc, state, _ = _setup(sr_momentum=0.9)
    assert np.all(np.asarray(memory(state)) == 0) and memory(state).dtype == jnp.float64
    directions = []
    for _ in range(3):
        new, _ = vmc.step(state)
        before, after = ravel_pytree(state.params)[0], ravel_pytree(new.params)[0]
        np.testing.assert_allclose(np.asarray(after - before), -0.05 * np.asarray(memory(new)),
                                   rtol=1e-5, atol=1e-6)
        directions.append(np.asarray(memory(new)))
        state = new
    assert not np.allclose(directions[1], directions[2])
    with pytest.raises(ValueError, match="momentum"):
        _setup(sr_momentum=1.0)


def test_callback_can_stop_the_run():
    vmc, state, _ = _setup()
    state, records = run(vmc, state, 10, progress=False, callbacks=[lambda r, s: r["iteration"] >= 3])
    assert int(state.iteration) == 3 and len(records) == 3


def test_one_sample_per_chain_and_local_energy_chunks():
    """One chain per sample: every sample of a step comes from its own chain; R-hat is
    undefined then and logged as null. On CPUs local energies run in cache-sized chunks
    unless chunk_size is given."""
    lattice = Chain(6)
    ham = Heisenberg(lattice, marshall_sign=True)
    model = make_conv_nqs(lattice, full_symmetry(lattice), channels=4, depth=1, kernel_size=3)
    params = model.init(jax.random.PRNGKey(0), jnp.ones((1, 6), jnp.int8))
    sampler = MetropolisSampler(model.apply, Exchange(lattice.bonds(1), anti_aligned=True), n_chains=64,
                                n_sites=6, sweep_size=3, n_thermalize=5)
    vmc = VMC(ham, sampler, optax.sgd(0.05), 64, preconditioner=sr(diag_shift=1e-3))
    assert vmc.local_energy_chunk_size == 8192 // ham.max_conn
    assert VMC(ham, sampler, optax.sgd(0.05), 64, chunk_size=5).local_energy_chunk_size == 5
    state, records = run(vmc, vmc.init(jax.random.PRNGKey(1), params), 3, progress=False)
    assert [r["r_hat"] for r in records] == [None] * 3
    assert all(np.isfinite(r["energy"]) and 0 < r["acceptance"] <= 1 for r in records)
    json.dumps(records, allow_nan=False)  # valid JSON: no NaN


def test_bad_configuration_errors():
    vmc, _, ham = _setup()
    with pytest.raises(ValueError, match="multiple of the number of chains"):
        VMC(ham, vmc.sampler, vmc.optimizer, 20)
    with pytest.raises(TypeError, match="sampler"):
        VMC(ham, vmc.log_psi, vmc.optimizer, 64)
    with pytest.raises(TypeError, match="preconditioner"):
        VMC(ham, vmc.sampler, vmc.optimizer, 64, preconditioner=optax.sgd(0.1))


# --------------------------------------------------------------------------- #
# runs that cannot lose work or lie                                            #
# --------------------------------------------------------------------------- #


def _poisoned_sgd(lr, from_step):
    """sgd whose updates become NaN from step ``from_step`` on (1-based)."""

    def init(params):
        return jnp.zeros((), jnp.int32)

    def update(updates, count, params=None):
        scale = jnp.where(count + 1 >= from_step, jnp.nan, -lr)
        return jax.tree_util.tree_map(lambda u: scale * u, updates), count + 1

    return optax.GradientTransformation(init, update)


def _strict_json_lines(path):
    def refuse(token):
        raise AssertionError(f"non-finite {token} in {path}")

    return [json.loads(line, parse_constant=refuse) for line in open(path)]


@pytest.mark.slow
def test_a_diverging_run_stops_and_keeps_its_good_checkpoints(tmp_path):
    """Parameters that go non-finite at step 3 are not taken: the run raises Diverged
    naming the step and the quantity, the log holds the two good steps as strict JSON,
    and the newest checkpoint is the finite state after step 2."""
    vmc, state, _ = _setup()
    vmc = VMC(vmc.hamiltonian, vmc.sampler, _poisoned_sgd(0.05, from_step=3), vmc.n_samples,
              preconditioner=vmc.preconditioner)
    state = vmc.init(jax.random.PRNGKey(1), state.params)
    out = tmp_path / "run"
    with pytest.raises(Diverged, match="step 3: the parameters became non-finite") as info:
        run(vmc, state, 10, out_dir=out, checkpoint_every=1, progress=False)
    assert info.value.iteration == 3 and info.value.what == "parameters"
    assert int(info.value.state.iteration) == 2 and len(info.value.records) == 2
    assert [r["iteration"] for r in _strict_json_lines(out / "log.jsonl")] == [1, 2]
    restored, _, path = load_latest_checkpoint(out, state)
    assert int(restored.iteration) == 2
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(restored.params))
    # a NaN energy is named as such (the command's diverging run in test_cli meets it too)
    bad = dict(finite_energy=False, finite_direction=False, finite_params=False)
    assert vmc_module._non_finite(bad) == "energy"
    assert vmc_module._non_finite(dict(bad, finite_energy=True)) == "SR direction"


def test_metrics_records_are_strict_json():
    m = dict(energy=jnp.complex128(np.nan), energy_error=np.inf, variance=1.0, tau=np.nan, r_hat=np.nan,
             acceptance=0.5, step_norm=np.inf, sr_fallback=False, effective_samples=np.nan)
    rec = metrics_to_record(m, 1, 4, 0.1)
    json.dumps(rec, allow_nan=False)
    assert rec["energy"] is None and rec["energy_error"] is None and rec["step_norm"] is None
    assert rec["variance"] == 1.0 and rec["effective_samples"] is None


def test_run_keeps_the_last_checkpoints_and_falls_back_from_a_damaged_one(tmp_path):
    vmc, state, _ = _setup()
    out = tmp_path / "run"
    final, _ = run(vmc, state, 5, out_dir=out, checkpoint_every=1, keep_checkpoints=2, progress=False)
    assert sorted(os.listdir(out)) == [".lock", "checkpoint-00000004.npz", "checkpoint-00000005.npz", "log.jsonl"]
    newest = out / "checkpoint-00000005.npz"
    newest.write_bytes(newest.read_bytes()[:200])  # truncated, as by a full disk
    with pytest.warns(UserWarning, match="damaged"):
        restored, _, path = load_latest_checkpoint(out, state)
    assert int(restored.iteration) == 4 and path.endswith("checkpoint-00000004.npz")
    # the run continues from there onto the same trajectory
    again, _ = run(vmc, restored, 5, out_dir=out, checkpoint_every=1, keep_checkpoints=2, progress=False)
    for a, b in zip(jax.tree_util.tree_leaves(again.params), jax.tree_util.tree_leaves(final.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="keep_checkpoints"):
        run(vmc, state, 1, keep_checkpoints=0, progress=False)
    for name in os.listdir(out):
        if name.startswith("checkpoint"):
            (out / name).write_bytes(b"garbage")
    with pytest.raises(FileNotFoundError, match="no readable checkpoint"), pytest.warns(UserWarning):
        load_latest_checkpoint(out, state)


def test_a_fresh_run_does_not_overwrite_another_runs_log(tmp_path):
    vmc, state, _ = _setup()
    out = tmp_path / "run"
    run(vmc, state, 2, out_dir=out, progress=False)
    before = open(out / "log.jsonl").read()
    with pytest.raises(ValueError, match="out_dir.*another run's log.*overwrite=True"):
        run(vmc, state, 2, out_dir=out, progress=False)
    assert open(out / "log.jsonl").read() == before
    run(vmc, state, 1, out_dir=out, progress=False, overwrite=True)
    assert [r["iteration"] for r in _strict_json_lines(out / "log.jsonl")] == [1]
    assert sorted(n for n in os.listdir(out) if n.startswith("checkpoint")) == ["checkpoint-00000001.npz"]


@pytest.mark.slow
def test_the_driver_runs_on_the_samplers_mesh():
    """A sampler on 4 of the 8 devices: local energies, Jacobian and SR use its mesh."""
    from quantax_lite.utils import make_mesh

    vmc, state, ham = _setup()
    mesh4 = make_mesh(jax.devices()[:4])
    sampler = MetropolisSampler(vmc.log_psi, Exchange(Chain(6).bonds(1)), n_chains=16, n_sites=6,
                                n_thermalize=5, mesh=mesh4)
    vmc4 = VMC(ham, sampler, optax.sgd(0.05), 64, preconditioner=sr(diag_shift=1e-3))
    state4 = vmc4.init(jax.random.PRNGKey(1), state.params)
    new, metrics = vmc4.step(state4)
    assert np.isfinite(float(metrics["energy"].real))
    assert float(metrics["effective_samples"]) == 1.0  # plain samples of |psi|^2
    devices = set(jax.devices()[:4])
    for leaf in jax.tree_util.tree_leaves(new.params):
        assert leaf.sharding.device_set == devices
    with pytest.raises(ValueError, match="mesh"):
        VMC(ham, sampler, optax.sgd(0.05), 64, mesh=make_mesh())


@pytest.mark.slow
def test_the_driver_trains_with_exact_sampling():
    """The exact sampler meets the Sampler contract: the driver trains with it (6-site
    chain, every configuration of Sz = 0 enumerated) to the exact energy."""
    lattice = Chain(6)
    ham = Heisenberg(lattice, marshall_sign=True)
    model = make_conv_nqs(lattice, full_symmetry(lattice), channels=4, depth=1, kernel_size=3,
                          complex_output=False)
    sampler = ExactSampler(model.apply, 6, total_sz=0, n_chains=8)
    vmc = VMC(ham, sampler, optax.sgd(0.05), 512, preconditioner=sr(diag_shift=1e-3))
    state = vmc.init(jax.random.PRNGKey(1), model.init(jax.random.PRNGKey(0), jnp.ones((1, 6), jnp.int8)))
    state, records = run(vmc, state, 40, progress=False)
    stats, _ = energy_estimate(vmc, state, 4096)
    exact = ground_state_energy(ham)
    assert records[0]["energy"] > exact + 0.1
    assert abs(float(stats.mean.real) - exact) < max(5 * float(stats.error_of_mean), 2e-3 * abs(exact))
    with pytest.raises(ValueError, match="diag_shift"):
        sr(diag_shift=float("inf"))


@pytest.mark.slow  # a hang's regression test, 11 s; the steps on 8 devices run in every VMC test
def test_a_loop_of_steps_on_several_cpu_devices_does_not_hang():
    """800 exact-sum steps called back to back on the 8 simulated devices, nothing read in
    between. Before each call waited for its step, two steps in flight at once could
    deadlock in XLA's CPU collectives (an abort after 40 s, within 1500 steps here)."""
    from quantax_lite import translations
    from quantax_lite.sampler import FullSumSampler

    lattice = Chain(8)
    group = translations(lattice)
    model = make_conv_nqs(lattice, group, channels=4, depth=1, dtype=jnp.float64)
    sampler = FullSumSampler(model.apply, lattice.n_sites, total_sz=0, symmetry=group)
    vmc = VMC(Heisenberg(lattice, marshall_sign=True), sampler, optax.sgd(0.05), None, preconditioner=sr(1e-3))
    assert jax.device_count() == 8
    state = vmc.init(jax.random.key(1), model.init(jax.random.key(0), jnp.ones((1, 8), jnp.int8)))
    for _ in range(800):
        state, metrics = vmc.step(state)
    assert metrics_to_record(metrics, 800, 8, 0.0)["effective_samples"] is None  # exact sums
    exact = ground_state_energy(Heisenberg(lattice, marshall_sign=True), total_sz=0)
    assert abs(float(np.real(metrics["energy"])) - exact) < 1e-6 * abs(exact)


def test_a_step_on_samples_of_a_power_of_psi_weighs_them():
    """With MetropolisSampler(power=0.5) one step is the weighted one on the very samples it
    drew: the energy sum w E_loc / sum w with w = |psi|, the update -lr times the SR
    direction with those weights (sr_direction(weights=...)), the error bar that of
    weighted_statistics; the final estimate's draws are samples of |psi|^2 again."""
    from quantax_lite import sr_direction
    from quantax_lite.driver.draws import draw_samples
    from quantax_lite.models import derivative_form
    from quantax_lite.optimizer.log_derivatives import jacobian
    from quantax_lite.sampler import per_chain
    from quantax_lite.stats.chains import weighted_statistics

    lattice = Chain(6)
    ham = Heisenberg(lattice, marshall_sign=True)
    model = make_conv_nqs(lattice, full_symmetry(lattice), channels=4, depth=1, kernel_size=3)
    sampler = MetropolisSampler(model.apply, Exchange(lattice.bonds(1)), n_chains=16, n_sites=6, n_thermalize=5,
                                power=0.5)
    vmc = VMC(ham, sampler, optax.sgd(0.05), 64, preconditioner=sr(diag_shift=1e-3))
    assert vmc.sampling_power == 0.5
    params = model.init(jax.random.PRNGKey(3), jnp.ones((1, 6), jnp.int8))
    state = vmc.init(jax.random.PRNGKey(4), params)
    samples, lp, _ = sampler.sample(state.sampler, params, 64)  # what the step draws
    new, metrics = vmc.step(state)
    e_loc = np.asarray(vmc.local_energies(params, samples, lp))
    w = np.exp(np.real(np.asarray(lp)))
    w /= w.sum()
    np.testing.assert_allclose(complex(metrics["energy"]), np.sum(w * e_loc), rtol=1e-12)
    expected = weighted_statistics(per_chain(e_loc, 16), per_chain(w, 16))
    np.testing.assert_allclose(float(metrics["energy_error"]), float(expected.error_of_mean), rtol=1e-10)
    # Kish's effective sample fraction of those weights, in the step's log record
    rec = metrics_to_record(metrics, 1, 6, 0.0)
    np.testing.assert_allclose(rec["effective_samples"], 1.0 / (64 * np.sum(w * w)), rtol=1e-10)
    assert 0.0 < rec["effective_samples"] < 1.0
    jac = jacobian(derivative_form(model.apply), params, samples)
    direction = sr_direction(jac, jnp.asarray(e_loc), diag_shift=1e-3, weights=jnp.asarray(w))
    moved = jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda a, b: a - b, new.params, params))
    got = np.concatenate([np.ravel(x) for x in moved])
    np.testing.assert_allclose(got, -0.05 * np.asarray(direction), rtol=1e-8, atol=1e-12)
    # samples of |psi|^2 for the final estimate and measure: the plain sampler's, from the same
    # chains thermalized again at power 1
    import dataclasses

    drawn = draw_samples(vmc, new.sampler, new.params, 64, local_energies=False)[0]
    plain = dataclasses.replace(sampler, power=1.0).sample(new.sampler, new.params, 64, thermalize=True)[0]
    broad = sampler.sample(new.sampler, new.params, 64)[0]
    assert np.array_equal(np.asarray(drawn), np.asarray(plain)) and not np.array_equal(np.asarray(drawn),
                                                                                        np.asarray(broad))
