"""The VMC driver: steps, checkpoints that survive a kill, and resumed trajectories."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from quantax_lite.exact import ground_state_energy
from quantax_lite.lattice import Chain
from quantax_lite.models import make_conv_nqs
from quantax_lite.operators import Heisenberg
from quantax_lite.sampler import Exchange, MetropolisSampler
from quantax_lite.symmetry import full_symmetry
from quantax_lite.vmc import VMC, energy_estimate, load_checkpoint, run, save_checkpoint


def _setup(seed=0, n_samples=64, sr_momentum=0.0):
    lattice = Chain(6)
    ham = Heisenberg(lattice, marshall_sign=True)
    model = make_conv_nqs(lattice, full_symmetry(lattice), channels=4, depth=1, kernel_size=3,
                          merge_translations=True)
    params = model.init(jax.random.PRNGKey(seed), jnp.ones((1, 6), jnp.int8))
    sampler = MetropolisSampler(model.apply, Exchange(lattice.bonds(1)), n_chains=16, n_sites=6,
                                n_thermalize=5)
    vmc = VMC(ham, model.apply, sampler, optax.sgd(0.05), n_samples=n_samples, diag_shift=1e-3,
              sr_momentum=sr_momentum)
    return vmc, vmc.init(jax.random.PRNGKey(seed + 1), params), ham


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
    resumed, _ = load_checkpoint(out / "checkpoint.npz", template)
    assert int(resumed.iteration) == 4
    final, _ = run(vmc, resumed, 7, out_dir=out, checkpoint_every=2, progress=False)
    log = [json.loads(line) for line in open(out / "log.jsonl")]
    assert [r["iteration"] for r in log] == list(range(1, 8))
    assert [r["energy"] for r in log] == [r["energy"] for r in ref]
    for a, b in zip(jax.tree_util.tree_leaves(final.params), jax.tree_util.tree_leaves(ref_state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_spring_keeps_the_last_direction():
    """With sr_momentum the state carries the last SR direction: with optax.sgd(lr) every
    step moves the parameters by exactly -lr times it; without, there is no memory."""
    from jax.flatten_util import ravel_pytree

    assert _setup()[1].sr_memory is None
    vmc, state, _ = _setup(sr_momentum=0.9)
    assert np.all(np.asarray(state.sr_memory) == 0) and state.sr_memory.dtype == jnp.float64
    directions = []
    for _ in range(3):
        new, _ = vmc.step(state)
        before, after = ravel_pytree(state.params)[0], ravel_pytree(new.params)[0]
        np.testing.assert_allclose(np.asarray(after - before), -0.05 * np.asarray(new.sr_memory),
                                   rtol=1e-5, atol=1e-6)
        directions.append(np.asarray(new.sr_memory))
        state = new
    assert not np.allclose(directions[1], directions[2])
    with pytest.raises(ValueError, match="sr_momentum"):
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
    model = make_conv_nqs(lattice, full_symmetry(lattice), channels=4, depth=1, kernel_size=3,
                          merge_translations=True, conv="dense")
    params = model.init(jax.random.PRNGKey(0), jnp.ones((1, 6), jnp.int8))
    sampler = MetropolisSampler(model.apply, Exchange(lattice.bonds(1), anti_aligned=True), n_chains=64,
                                n_sites=6, sweep_size=3, n_thermalize=5)
    vmc = VMC(ham, model.apply, sampler, optax.sgd(0.05), n_samples=64, diag_shift=1e-3)
    assert vmc.local_energy_chunk_size == 8192 // ham.max_conn
    assert VMC(ham, model.apply, sampler, optax.sgd(0.05), n_samples=64, chunk_size=5).local_energy_chunk_size == 5
    state, records = run(vmc, vmc.init(jax.random.PRNGKey(1), params), 3, progress=False)
    assert [r["r_hat"] for r in records] == [None] * 3
    assert all(np.isfinite(r["energy"]) and 0 < r["acceptance"] <= 1 for r in records)
    json.dumps(records, allow_nan=False)  # valid JSON: no NaN


def test_bad_configuration_errors():
    vmc, _, ham = _setup()
    with pytest.raises(ValueError, match="multiple of the number of chains"):
        VMC(ham, vmc.log_psi, vmc.sampler, vmc.optimizer, n_samples=20)
