"""Symmetry restoration (``--symmetry translations>full@N``): the restored wavefunction is
the explicit sum over the whole group, the parameters, optimizer state and chains carry
over and the energy does not rise at the switch (exact sums), a short staged J1-J2 run
with exact sampling reaches the exact energy, the recipe's checks, and the command: one
log across the switch and a resume from the switch's checkpoint on the same trajectory."""
import dataclasses
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from quantax_lite import ExactSampler, Recipe, build, load_run, switch_stage
from quantax_lite.cli.command import main
from quantax_lite.exact.diagonalization import exact_expectation, ground_state_energy
from quantax_lite.hilbert.configurations import all_states
from quantax_lite.driver.run_folder import list_checkpoints
from quantax_lite.driver.vmc import VMC, energy_estimate, run


def _group(lx: int, ly: int, parity: int, mirrors: bool = True):
    """Every element of translations (x {x -> -x, y -> -y} if ``mirrors``) x spin inversion
    of the periodic lx x ly lattice (site x * ly + y; ly = 1: a chain), built here by brute
    force, and its characters (``parity`` on the elements with a spin flip; with no spin
    inversion for ``parity`` None): ``(perms (G, N), flips (G,), chars (G,))``."""
    signs = (1, -1) if mirrors else (1,)
    perms = {tuple(((sx * x + a) % lx) * ly + (sy * y + b) % ly for x in range(lx) for y in range(ly))
             for a in range(lx) for b in range(ly) for sx in signs for sy in signs}
    elements = [(p, f) for p in sorted(perms) for f in ((1,) if parity is None else (1, -1))]
    flips = np.array([f for _, f in elements])
    return np.array([p for p, _ in elements]), flips, np.where(flips < 0, parity or 1, 1).astype(complex)


def _explicit_sum(log_psi0, states, perms, flips, chars):
    """``(psi, scale)``: psi(s) = sum_g chi_g psi_0(g s) with (g s)[i] = flips[g] s[perms[g, i]]
    over every element, and sum_g |psi_0(g s)| (the size of its rounding error)."""
    images = states[:, perms] * flips[None, :, None]  # (n, G, N)
    lp0 = np.asarray(log_psi0(images.reshape(-1, states.shape[1]).astype(np.int8)), np.complex128)
    terms = np.exp(lp0.reshape(len(states), -1))
    return (terms * chars[None, :]).sum(axis=1), np.abs(terms).sum(axis=1)


def _perturbed(params, rng, scale=0.05):
    """The parameters with random changes of order ``scale`` (a generic, non-uniform psi_0)."""
    return jax.tree_util.tree_map(lambda x: np.asarray(x) + scale * rng.standard_normal(np.shape(x)), params)


@pytest.mark.parametrize("lattice, shape, sector", [
    ("4x2", (4, 2), {}), ("chain:8", (8, 1), {"spin_parity": -1, "amplitude": "complex"}),
])
def test_the_restored_wavefunction_is_the_explicit_sum_over_the_full_group(lattice, shape, sector, rng):
    """The stage-2 model of 'translations>full@N' with random stage-1 parameters is
    sum_g chi_g psi_0(g s) over every element of translations x point group x spin
    inversion (the group built here by brute force), in the trivial sector of the 4x2
    lattice and in spin parity -1 (characters -1) on the 8-site chain, to 1e-10 of the
    terms' size; the stage-1 model is the same sum over the translations (x spin inversion
    in the parity sector). (On 4x2 the Sz = 0 states of spin parity -1 and the full group
    all vanish: no such sector to test there.)"""
    recipe = Recipe(lattice=lattice, symmetry="translations>full@5", precision="f64", samples=64, channels=2,
                    depth=1, chunk_size=64, **sector)
    r1, r2 = build(recipe, 4), build(recipe, 5)
    assert (recipe.symmetry_at(4), recipe.symmetry_at(5)) == ("translations", "full")
    params = _perturbed(r1.state.params, rng)
    log_psi0 = jax.jit(lambda s: r2.model.base.apply({"params": params["params"]["base"]}, s))
    states = np.asarray(all_states(8, 0))
    parity = sector.get("spin_parity")
    elements = lambda p, f: {(tuple(map(int, x)), int(y)) for x, y in zip(p, f)}  # noqa: E731
    for r, group in ((r2, _group(*shape, parity or 1)), (r1, _group(*shape, parity, mirrors=False))):
        perms, flips, chars = group
        assert elements(r.symmetry.perms, r.symmetry.flips) == elements(perms, flips)
        want, scale = _explicit_sum(log_psi0, states, perms, flips, chars)
        got = np.exp(np.asarray(jax.jit(r.model.apply)(params, states), np.complex128))
        assert np.all(np.abs(got - want) <= 1e-10 * scale), np.max(np.abs(got - want) / scale)
        # not a sector where psi vanishes (there |want| is rounding, ~1e-15 of the scale; a generic
        # psi_0 near the uniform start cancels to ~1e-3 of it, once in CI to 9e-4)
        assert np.sum(np.abs(want) > 1e-8 * scale) >= 16
        if r is r2:
            assert len(perms) == 32 and (parity is None or np.any(chars == -1))  # 8 x 2 mirrors x 2 flips
            full = got
    keep = np.abs(got) > 1e-3 * np.abs(got).max()
    ratio = full[keep] / got[keep]
    assert np.max(np.abs(ratio / ratio[0] - 1)) > 1e-3  # the restoration changes the state


def _count(opt_state) -> list:
    """The learning-rate schedule's step count(s) in an optax state."""
    return [int(x) for x in jax.tree_util.tree_leaves(opt_state) if np.ndim(x) == 0 and x.dtype == jnp.int32]


def test_switch_keeps_the_state_and_recomputes_the_chains_log_psi(rng):
    """switch_stage at the stage's first step: the same parameters, optimizer state (its
    step count), iteration, configurations and key; the chains' cached log psi is the new
    model's, and they thermalize again (a state already past the start keeps them
    thermalized); a state of another network is refused naming ``state``."""
    recipe = Recipe(lattice="4x2", symmetry="translations>full@6", precision="f64", samples=64, chains=64,
                    channels=2, depth=1, chunk_size=64, seed=int(rng.integers(1000)))
    r1, r2 = build(recipe), build(recipe, 6)
    params = _perturbed(r1.state.params, rng)
    _, _, chains = r1.sampler.sample(r1.state.sampler, params, 64)  # thermalized, log psi of stage 1
    state1 = r1.state._replace(params=params, sampler=chains, iteration=jnp.asarray(6, jnp.int32))
    state2 = switch_stage(r2, state1)
    assert int(state2.iteration) == 6 and state2.opt_state is state1.opt_state
    assert all(a is b for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(state2.params)))
    np.testing.assert_array_equal(state2.sampler.states, chains.states)
    np.testing.assert_array_equal(jax.random.key_data(state2.sampler.key), jax.random.key_data(chains.key))
    np.testing.assert_allclose(state2.sampler.log_psi, r2.model.apply(params, chains.states), rtol=1e-12)
    np.testing.assert_allclose(chains.log_psi, r1.model.apply(params, chains.states), rtol=1e-12)
    assert not np.allclose(state2.sampler.log_psi, chains.log_psi)
    assert bool(chains.thermalized) and not bool(state2.sampler.thermalized)
    later = switch_stage(r2, state1._replace(iteration=jnp.asarray(7, jnp.int32)))
    assert bool(later.sampler.thermalized)
    fewer = jax.tree_util.tree_map(lambda x: x[..., :1], params)  # another network's parameters
    with pytest.raises(ValueError, match="^state: "):
        switch_stage(r2, state1._replace(params=fewer))


def test_stages_whose_networks_differ_are_refused(monkeypatch):
    """build checks that every stage's network has the same parameters: one whose full
    stage would get other parameters (here: a wider network, patched in) is refused,
    naming ``symmetry``, before anything is compiled."""
    import sys

    build_module = sys.modules["quantax_lite.recipes.assembly"]
    network = build_module.make_run_network

    def wider_with_the_full_group(plan, lattice, group, kind):
        if group is not None and group.n_elements > lattice.n_sites:  # a recipe of its own: a plan of its own
            plan = dataclasses.replace(plan.recipe, channels=(plan.recipe.channels or 8) + 1)
        return network(plan, lattice, group, kind)

    recipe = Recipe(lattice="4x2", symmetry="translations>full@5", channels=2, samples=64)
    monkeypatch.setattr(build_module, "make_run_network", wider_with_the_full_group)
    with pytest.raises(ValueError, match=r"^symmetry: 'translations>full@5': the network of 'full'"):
        build(recipe)
    with pytest.raises(ValueError, match="^symmetry: "):
        build(recipe, 5)
    build(dataclasses.replace(recipe, symmetry="translations"))  # one stage: nothing to compare


# slow: a training; the switch keeps the state (test_switch_keeps_the_state...) and a resumed full stage its trajectory (test_spring_run_resumed...)
@pytest.mark.slow
def test_staged_j1j2_training_with_exact_sampling_reaches_the_exact_energy():
    """The 8-site J1-J2 chain (J2 = 0.5, exact -3.0) with exact sampling: 20 steps with the
    translations, then 20 with the full group from the same parameters. At the switch the
    exactly summed energy of the same parameters does not rise and the schedule's step
    count goes on; at the end the exact-sampled estimate is within its error bars of the
    exact energy, the exactly summed one within 2e-3 of it, never below."""
    recipe = Recipe(lattice="chain:8", hamiltonian="j1j2", symmetry="translations>full@20", precision="f64",
                    samples=256, chains=8, channels=4, depth=1, lr=0.1, diag_shift=1e-3, chunk_size=256)
    state = None
    for start, end in ((0, 20), (20, 40)):
        r = build(recipe, start)
        exact = ExactSampler(r.model.apply, 8, total_sz=0, n_chains=8)
        vmc = VMC(r.hamiltonian, exact, r.vmc.optimizer, recipe.samples, preconditioner=r.vmc.preconditioner,
                  chunk_size=256)
        r = r._replace(sampler=exact, vmc=vmc, state=vmc.init(jax.random.PRNGKey(start), r.state.params))
        if state is None:
            state = r.state
        else:  # the switch: the same parameters have no higher energy with the full group
            state = switch_stage(r, state)
            assert _count(state.opt_state) == [20]
            assert exact_expectation(r.hamiltonian, r.model.apply, state.params, total_sz=0) <= e_var + 1e-10
        state, _ = run(vmc, state, end, progress=False)
        e_var = exact_expectation(r.hamiltonian, r.model.apply, state.params, total_sz=0)
    assert _count(state.opt_state) == [40]
    e0 = ground_state_energy(r.hamiltonian)
    assert e0 == pytest.approx(-3.0, abs=1e-9)
    stats, _ = energy_estimate(vmc, state, 4096)
    e, err = float(stats.mean.real), float(stats.error_of_mean)
    assert abs(e - e0) < 4 * err, (e, err, e0)
    assert e0 - 1e-9 < e_var < e0 + 2e-3 * abs(e0), (e_var, e0)


@pytest.mark.parametrize("value, message", [
    ("translations>full", "positive int"), ("translations>full@0", "positive int"),
    ("translations>full@-3", "positive int"), ("translations>full@x", "positive int"),
    ("full>translations@5", "not larger"), ("translations>full@5>full@9", "not larger"),
    ("translations>full@9>full@5", "must increase"), ("translations@5", "from the start"),
    ("translation>full@5", "cannot read"), ("translations>c4v@5", "cannot read"),
    ("none>translations@5", "'none' cannot be followed"), ("", "cannot read"),
])
def test_bad_stages_are_refused_naming_symmetry(value, message, capsys):
    with pytest.raises(ValueError, match=r"^symmetry: .*" + message):
        Recipe(symmetry=value)
    assert main(["train", "--symmetry", value, "--out", "unused"]) == 2
    err = capsys.readouterr().err
    assert "--symmetry" in err and message in err and "Traceback" not in err


def test_stages_parse_and_hold_from_their_step():
    r = Recipe(symmetry=" translations > full @ 7 ")
    assert r.symmetry_stages() == (("translations", 0), ("full", 7))
    assert [r.symmetry_at(i) for i in (0, 6, 7, 10**6)] == ["translations", "translations", "full", "full"]
    assert Recipe(symmetry="full").symmetry_stages() == (("full", 0),)
    assert Recipe(symmetry="none").symmetry_at(5) == "none"
    with pytest.raises(ValueError, match="iteration"):
        r.symmetry_at(-1)


SMALL = ["train", "--lattice", "chain:8", "--channels", "4", "--depth", "1", "--samples", "64", "--chains", "16",
         "--seed", "3", "--eval-samples", "64", "--lr", "0.05", "--checkpoint-every", "2",
         "--chunk-size", "64", "--symmetry", "translations>full@3"]


def _log(out):
    with open(os.path.join(out, "log.jsonl")) as fh:
        return [json.loads(line) for line in fh]


@pytest.mark.slow
def test_train_switches_once_and_resumes_from_the_switch_on_the_same_trajectory(tmp_path, capsys):
    """6 steps, the full group from step 3 with half the samples per step and its own
    learning rate: one log of 6 steps with continuous times, the switch announced once;
    the run folder cut back to its checkpoint at step 3 (written by the translations
    stage) and resumed gives the same energies, step by step, and the same final
    estimate; load_run rebuilds the stage of the newest checkpoint."""
    a = str(tmp_path / "a")
    full_stage = ["--full-stage-samples", "32", "--full-stage-lr", "0.1"]
    assert main(SMALL + full_stage + ["--iters", "6", "--out", a]) == 0
    err = capsys.readouterr().err
    assert err.count("from step 3: symmetry full (4 image(s) per configuration), 32 samples/step") == 1, err
    log = _log(a)
    assert [x["iteration"] for x in log] == list(range(1, 7))
    times = [x["wall_time_s"] for x in log]
    assert times == sorted(times)
    summary = json.load(open(os.path.join(a, "summary.json")))
    assert summary["symmetry"] == "translations>full@3" and summary["iterations"] == 6
    assert (summary["n_samples"], summary["full_stage_samples"], summary["full_stage_lr"]) == (64, 32, 0.1)
    steps = [int(os.path.basename(p)[11:-4]) for p in list_checkpoints(a)]
    assert 3 in steps and max(steps) == 6
    b = str(tmp_path / "b")
    shutil.copytree(a, b)
    for path in list_checkpoints(b):
        if int(os.path.basename(path)[11:-4]) > 3:
            os.remove(path)
    os.remove(os.path.join(b, "summary.json"))
    loaded = load_run(b)
    assert int(loaded.state.iteration) == 3 and loaded.run.model.n_elements == 4  # the full group of chain:8
    assert loaded.run.vmc.n_samples == 32 and not bool(loaded.state.sampler.thermalized)
    # another run's options are refused (left out, they are the run's own)
    assert main(SMALL + ["--full-stage-samples", "64", "--iters", "6", "--out", b, "--resume"]) == 2
    assert "--full-stage-samples 64 (was 32)" in capsys.readouterr().err
    assert main(SMALL + full_stage + ["--iters", "6", "--out", b, "--resume"]) == 0
    assert capsys.readouterr().err.count("from step 3: symmetry full") == 1  # resumed in the full stage
    for x, y in zip(log, _log(b)):
        assert x["iteration"] == y["iteration"] and x["energy"] == y["energy"] and x["variance"] == y["variance"]
    assert len(_log(b)) == 6
    assert json.load(open(os.path.join(b, "summary.json")))["energy"] == summary["energy"]
    # measure: fresh samples in blocks of a step's samples of either stage
    assert main(["measure", "--out", a, "--samples", "48", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--samples: 48" in err and "32 / 64 samples per step" in err and "Traceback" not in err
    assert main(["measure", "--out", a, "--samples", "64", "--no-progress"]) == 0


def test_full_stage_samples_and_learning_rate_hold_from_the_switch(rng):
    """``full_stage_samples`` / ``full_stage_lr``: the step draws the full stage's samples
    from the switch on, on the same chains (one per sample of the smaller count, so the
    state keeps its shape); the optimizer of the full stage steps by ``full_stage_lr`` at
    the switch, halving over ``lr_half_life`` from there down to a tenth; the translation
    stage's schedule is unchanged, and without ``full_stage_lr`` the full stage goes on
    with it."""
    start, lr, half, lr_full = 5, 0.02, 10.0, float(rng.uniform(0.03, 0.1))
    recipe = Recipe(lattice="4x2", symmetry=f"translations>full@{start}", samples=64, full_stage_samples=32,
                    lr=lr, lr_half_life=half, full_stage_lr=lr_full, channels=2, depth=1, chunk_size=64)
    assert [recipe.samples_at(i) for i in (0, start - 1, start, 10**6)] == [64, 64, 32, 32]
    assert recipe.n_chains(1) == 32 and recipe.n_eval_samples == 32 * 32
    r1, r2 = build(recipe), build(recipe, start)
    assert (r1.vmc.n_samples, r2.vmc.n_samples) == (64, 32)
    assert r1.sampler.n_chains == r2.sampler.n_chains == 32
    assert jax.tree_util.tree_structure(r1.state) == jax.tree_util.tree_structure(r2.state)
    for a, b in zip(jax.tree_util.tree_leaves(r1.state), jax.tree_util.tree_leaves(r2.state)):
        assert np.shape(a) == np.shape(b)

    def step_size(run, count):  # the optimizer's update of a unit gradient at step `count`
        grad = jax.tree_util.tree_map(jnp.ones_like, run.state.params)
        opt_state = jax.tree_util.tree_map(
            lambda x: jnp.asarray(count, x.dtype) if np.ndim(x) == 0 and x.dtype == jnp.int32 else x,
            run.state.opt_state)
        updates, _ = run.vmc.optimizer.update(grad, opt_state, run.state.params)
        return -float(jax.tree_util.tree_leaves(updates)[0].ravel()[0])

    for count in (0, 3, start - 1):
        assert step_size(r1, count) == pytest.approx(lr * 0.5 ** (count / half), rel=1e-6)
    for count in (start, start + 7, start + 20):
        assert step_size(r2, count) == pytest.approx(lr_full * 0.5 ** ((count - start) / half), rel=1e-6)
    assert step_size(r2, start + 1000) == pytest.approx(lr_full / 10, rel=1e-6)
    going_on = build(dataclasses.replace(recipe, full_stage_lr=None), start)
    assert step_size(going_on, start + 7) == pytest.approx(lr * 0.5 ** ((start + 7) / half), rel=1e-6)
    assert build(dataclasses.replace(recipe, full_stage_samples=None), start).vmc.n_samples == 64
    for method in (recipe.samples_at, recipe.learning_rate):
        with pytest.raises(ValueError, match="^iteration"):
            method(-1)


@pytest.mark.parametrize("changes, message", [
    (dict(symmetry="full", full_stage_samples=32), "^full_stage_samples: applies to the full-group stage"),
    (dict(symmetry="translations", full_stage_lr=0.01), "^full_stage_lr: applies to the full-group stage"),
    (dict(full_stage_samples=0), "^full_stage_samples"),
    (dict(full_stage_lr=0.0), "^full_stage_lr"),
    (dict(full_stage_lr=float("nan")), "^full_stage_lr"),
    (dict(full_stage_samples=48, eval_samples=64, chains=16), "^eval_samples: 64 must be a multiple of full_stage_samples"),
    (dict(full_stage_samples=48), "^full_stage_samples: 48 and samples 64: the larger must be a multiple"),
    (dict(sampling="exact_sum", samples=64, full_stage_samples=32), "^full_stage_samples: sampling 'exact_sum'"),
])
def test_bad_full_stage_options_are_refused_naming_them(changes, message):
    with pytest.raises(ValueError, match=message):
        Recipe(**{**dict(lattice="4x2", symmetry="translations>full@5", samples=64), **changes})


def test_full_stage_options_on_the_command_line(capsys):
    assert main(["train", "--symmetry", "full", "--full-stage-samples", "256", "--out", "unused"]) == 2
    err = capsys.readouterr().err
    assert "--full-stage-samples" in err and "staged symmetry" in err and "Traceback" not in err
    assert main(["train", "--symmetry", "translations>full@5", "--full-stage-lr", "-1", "--out", "unused"]) == 2
    err = capsys.readouterr().err
    assert "--full-stage-lr" in err and "Traceback" not in err


@pytest.mark.slow  # trainings; the switch keeps the state: test_switch_keeps_the_state_and_recomputes_the_chains_log_psi
def test_spring_run_resumed_inside_the_full_stage_stays_on_its_trajectory(tmp_path):
    """What a frustrated chip row does between windows: SPRING momentum, the full group
    from step 3, the run stopped at its checkpoint of step 4 (one step into the full stage,
    with momentum accumulated in both stages) and resumed: every logged energy and variance
    and the final estimate equal the straight run's, bit for bit."""
    opts = SMALL + ["--full-stage-samples", "32", "--full-stage-lr", "0.1", "--sr-momentum", "0.9",
                    "--diag-shift", "1e-3", "--iters", "7"]
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert main(opts + ["--out", a]) == 0
    shutil.copytree(a, b)
    for path in list_checkpoints(b):
        if int(os.path.basename(path)[11:-4]) > 4:
            os.remove(path)
    os.remove(os.path.join(b, "summary.json"))
    assert int(load_run(b).state.iteration) == 4
    assert main(opts + ["--out", b, "--resume"]) == 0
    straight, resumed = _log(a), _log(b)
    assert [x["iteration"] for x in resumed] == list(range(1, 8))
    assert [(x["energy"], x["variance"], x["step_norm"]) for x in resumed] == \
           [(x["energy"], x["variance"], x["step_norm"]) for x in straight]
    summary = json.load(open(os.path.join(a, "summary.json")))
    assert json.load(open(os.path.join(b, "summary.json")))["energy"] == summary["energy"]
