"""Exact sums over a sector (FullSumSampler): orbit representatives with their weights
give the energy, variance and natural gradient of the dense sums over every configuration.

References: the sector dimension of the exact module, the dense Hamiltonian
(``to_sparse``) applied to psi on every configuration, the per-configuration Jacobian from
``jax.jacrev`` and the SR system formed and solved with numpy.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree
from grid import keeping
from test_bravais_models import random_params

from quantax_lite import Recipe
from quantax_lite.geometry import symmetry as sym
from quantax_lite.exact.diagonalization import exact_expectation
from quantax_lite.hilbert.configurations import all_states, state_index, states_to_codes
from quantax_lite.geometry.lattice import Chain, Square
from quantax_lite.models import make_conv_nqs
from quantax_lite.operators.hamiltonian import Heisenberg
from quantax_lite.optimizer.preconditioners import Preconditioner, gradient, spring, sr
from quantax_lite.sampler import FullSumSampler
from quantax_lite.sampler.full_sum import orbit_representatives, row_local_energies
from quantax_lite.optimizer.stochastic_reconfiguration import sr_direction
from quantax_lite.stats.chains import exact_statistics
from quantax_lite.driver.vmc import VMC, energy_estimate


def _sector(lattice, momentum, spin_parity, rotation_parity):
    """(lattice, Heisenberg H, full group of the sector) as the command builds them."""
    return Recipe(lattice=lattice, symmetry="full", momentum=momentum, spin_parity=spin_parity,
                  rotation_parity=rotation_parity).system(0)


def _chain_j1j2():
    """A signed network of the 10-site J1-J2 chain at k = 0 (translations)."""
    lattice = Chain(10)
    group = sym.translations(lattice)
    model = make_conv_nqs(lattice, group, channels=3, depth=1, kernel_size=3, signed=True)
    return lattice, Heisenberg(lattice, J2=0.5), group, model


def _triangular_sector():
    """A complex plane-wave network of triangular 4x3 at k = b1/2, spin parity -1, odd
    under the rotation by pi (characters -1 and complex phases on the stabilizers)."""
    lattice, ham, group = _sector("triangular:4x3", (2, 0), -1, -1)
    model = make_conv_nqs(lattice, group, channels=3, depth=1, kernel_size=3)
    return lattice, ham, group, model


SYSTEMS = {"chain10 j1j2 signed": _chain_j1j2, "triangular4x3 sector complex": _triangular_sector}


def _dense(model, params, ham, states):
    """psi-weights p, local energies and the Jacobian O (complex, (n, P)) on every
    configuration of ``states`` (a whole sector), from the dense Hamiltonian and
    jax.jacrev; 0 on the configurations where the sector's psi vanishes."""
    lp = np.asarray(jax.jit(model.apply)(params, states)).astype(np.complex128)
    psi = np.exp(lp - lp.real.max())
    alive = np.abs(psi) ** 2 > 1e-20
    p = np.where(alive, np.abs(psi) ** 2, 0) / np.sum(np.abs(psi[alive]) ** 2)
    e_loc = np.where(alive, ham.to_sparse(states) @ psi / np.where(alive, psi, 1), 0)
    flat, unravel = ravel_pytree(params)
    part = lambda f: jax.jit(jax.vmap(jax.jacrev(lambda th, s: f(model.apply(unravel(th), s[None])[0])),  # noqa: E731
                                      (None, 0)))
    jac = np.asarray(part(jnp.real)(flat, states)) + 1j * np.asarray(part(jnp.imag)(flat, states))
    return p, e_loc, np.where(alive[:, None], jac, 0)


def _dense_direction(p, e_loc, jac, eps):
    """(S + eps) x = F with S = Re(Ō^H Ō), F = Re(Ō^H ē), Ō = sqrt(p) (O - <O>)."""
    o = np.sqrt(p)[:, None] * (jac - p @ jac)
    e = np.sqrt(p) * (e_loc - p @ e_loc)
    s = (o.conj().T @ o).real
    return np.linalg.solve(s + eps * np.eye(s.shape[0]), (o.conj().T @ e).real)


@pytest.mark.parametrize("sector", [
    ("4x4", None, None, None), ("4x4", (2, 2), 1, 1), ("kagome:2x2", None, 1, -1), ("triangular:4x3", (2, 0), -1, -1),
], ids=["4x4 T", "4x4 full k=(pi,pi)", "kagome2x2 full odd", "triangular4x3 full k=b1/2"])
def test_one_representative_per_basis_state_of_the_sector(sector):
    """The orbits kept are as many as the sector's dimension (each 1-D irrep orbit holds one
    basis state or none), they are disjoint, and at characters 1 every configuration is
    in one of them."""
    if sector[1] is None and sector[2] is None:
        lattice = Square(4)
        group = sym.translations(lattice)
    else:
        lattice, _, group = _sector(*sector)
    states = all_states(lattice.n_sites, 0)
    reps, size = orbit_representatives(states, group)
    assert len(reps) == group.sector_dimension(0)
    assert len({r.tobytes() for r in reps}) == len(reps)
    assert np.all(size >= 1) and np.all(len(group.perms) % size == 0)
    if np.allclose(group.characters, 1):
        assert size.sum() == len(states)
    else:
        assert size.sum() < len(states)


@pytest.mark.parametrize("name", keeping(sorted(SYSTEMS), keep=(0,)))  # the triangular sector's step: below
def test_exact_sums_over_representatives_equal_the_dense_sums(rng, name):
    """Energy, variance and the SR direction (both the P x P and the sample-space solve,
    sharded over 8 devices) from the representatives equal those of psi on every
    configuration; so do the sums over every configuration (no symmetry; P x P only)."""
    lattice, ham, group, model = SYSTEMS[name]()
    states = all_states(lattice.n_sites, 0)
    params = random_params(model, states[:1], rng)
    p, e_loc, jac = _dense(model, params, ham, states)
    energy = float(np.real(p @ e_loc))
    assert energy == pytest.approx(exact_expectation(ham, model.apply, params), rel=1e-10)
    eps = 1e-3
    reference = _dense_direction(p, e_loc, jac, eps)
    for symmetry in (group, None):
        sampler = FullSumSampler(model.apply, lattice.n_sites, total_sz=0, symmetry=symmetry)
        rows, _, w = sampler.probabilities(params)
        assert float(np.sum(w)) == pytest.approx(1.0, abs=1e-12)
        index = state_index(np.asarray(rows), states_to_codes(states))
        e_r, jac_r = e_loc[index], jac[index]
        stats = exact_statistics(jnp.asarray(e_r), w)
        assert float(np.real(stats.mean)) == pytest.approx(energy, rel=1e-10)
        assert float(stats.variance) == pytest.approx(float(p @ np.abs(e_loc - p @ e_loc) ** 2), rel=1e-8)
        assert float(stats.error_of_mean) == 0
        for method in ("sr", "minsr") if symmetry is not None else ("sr",):
            x = sr_direction(jnp.asarray(jac_r), jnp.asarray(e_r), diag_shift=eps, method=method, weights=w)
            # the solve of S + 1e-3 I amplifies float64 rounding: one draw differed by 1.8e-9 of the
            # largest component; wrong weights or rows differ by far more
            np.testing.assert_allclose(np.asarray(x), reference, rtol=1e-7, atol=1e-8 * np.abs(reference).max())
    if symmetry is None:
        assert sampler.n_representatives == len(states)


@pytest.mark.parametrize("complex_jac", [False, True])
def test_uniform_weights_are_samples(rng, complex_jac):
    """weights = 1/N gives the direction of N samples, for sr, minsr, gradient and SPRING;
    weights that are not uniform give another (so the weights are used)."""
    n, n_par = 37, 53
    jac = rng.normal(size=(n, n_par)) + (1j * rng.normal(size=(n, n_par)) if complex_jac else 0)
    e = rng.normal(size=n) + 1j * rng.normal(size=n)
    uniform = np.full(n, 1 / n)
    skewed = rng.uniform(size=n)
    skewed /= skewed.sum()
    prev = rng.normal(size=n_par)
    for p in (sr(1e-3, method="sr"), sr(1e-3, method="minsr"), gradient(), spring(sr(1e-3), 0.9)):
        state = p.init(np.zeros(n_par))
        if state is not None:
            state = state._replace(previous=jnp.asarray(prev))
        plain = p.update(jnp.asarray(jac), jnp.asarray(e), state, step=0)[0]
        same = p.update(jnp.asarray(jac), jnp.asarray(e), state, step=0, weights=jnp.asarray(uniform))[0]
        other = p.update(jnp.asarray(jac), jnp.asarray(e), state, step=0, weights=jnp.asarray(skewed))[0]
        np.testing.assert_allclose(np.asarray(same), np.asarray(plain), rtol=1e-9, atol=1e-12)
        assert not np.allclose(np.asarray(other), np.asarray(plain), rtol=1e-3)


def test_weighted_gradient_and_spring_against_dense(rng):
    """gradient() is F = Re(Ō^H ē); SPRING solves (S + eps)(x - mu prev) = F - mu S prev,
    both with the weights' means."""
    n, n_par, eps, mu = 29, 41, 1e-2, 0.7
    jac = rng.normal(size=(n, n_par)) + 1j * rng.normal(size=(n, n_par))
    e = rng.normal(size=n)
    w = rng.uniform(size=n)
    w /= w.sum()
    prev = rng.normal(size=n_par)
    o = np.sqrt(w)[:, None] * (jac - w @ jac)
    ec = np.sqrt(w) * (e - w @ e)
    s, f = (o.conj().T @ o).real, (o.conj().T @ ec).real
    g = gradient().update(jnp.asarray(jac), jnp.asarray(e), None, step=0, weights=jnp.asarray(w))[0]
    np.testing.assert_allclose(np.asarray(g), f, rtol=1e-10, atol=1e-13)
    p = spring(sr(eps), mu)
    state = p.init(np.zeros(n_par))._replace(previous=jnp.asarray(prev))
    x = p.update(jnp.asarray(jac), jnp.asarray(e), state, step=0, weights=jnp.asarray(w))[0]
    expect = mu * prev + np.linalg.solve(s + eps * np.eye(n_par), f - mu * s @ prev)
    np.testing.assert_allclose(np.asarray(x), expect, rtol=1e-8, atol=1e-11)


@pytest.mark.parametrize("system", SYSTEMS)
def test_vmc_step_with_exact_sums(rng, system):
    """One VMC step on exact sums: the energy is <psi|H|psi> with error 0, the update is
    -lr times the dense SR direction; energy_estimate gives the exact energy of the new
    parameters."""
    lattice, ham, group, model = SYSTEMS[system]()
    states = all_states(lattice.n_sites, 0)
    params = random_params(model, states[:1], rng)
    sampler = FullSumSampler(model.apply, lattice.n_sites, total_sz=0, symmetry=group)
    lr, eps = 0.05, 1e-3
    vmc = VMC(ham, sampler, optax.sgd(lr), None, preconditioner=sr(eps))
    assert vmc.n_samples == sampler.n_rows and sampler.n_rows % jax.device_count() == 0
    with pytest.raises(TypeError, match="^FullSumSampler.sample: exact sums draw no samples"):
        sampler.sample(sampler.init(jax.random.PRNGKey(0)), params, sampler.n_rows)
    state = vmc.init(jax.random.PRNGKey(1), params)
    new, metrics = vmc.step(state)
    assert float(np.real(metrics["energy"])) == pytest.approx(exact_expectation(ham, model.apply, params), rel=1e-9)
    assert float(metrics["energy_error"]) == 0
    p, e_loc, jac = _dense(model, params, ham, states)
    expect = ravel_pytree(params)[0] - lr * _dense_direction(p, e_loc, jac, eps)
    np.testing.assert_allclose(np.asarray(ravel_pytree(new.params)[0]), np.asarray(expect), rtol=1e-6, atol=1e-8)
    stats, _ = energy_estimate(vmc, new)
    assert float(np.real(stats.mean)) == pytest.approx(exact_expectation(ham, model.apply, new.params), rel=1e-9)
    assert float(stats.error_of_mean) == 0


def test_final_estimate_of_exact_sums_is_the_steps_sum(rng):
    """energy_estimate sums as the step does, from psi on the rows alone (a quadratic form
    in those values, so variational whatever their rounding), not from the network on
    every connected configuration: a float32 network gives a configuration and its
    representative values that differ in the last digits (here a 1e-6 perturbation that
    breaks the symmetry stands for that), and an 18-site kagome run had reported an energy
    2.2e-7 below the ground state that way while its steps' sums were 4.6e-9 above it."""
    lattice, ham, group, model = _chain_j1j2()
    params = random_params(model, all_states(lattice.n_sites, 0)[:1], rng)
    site_code = jnp.arange(1, lattice.n_sites + 1)

    def rounded(p, s):  # the network's values off by about 1e-6, differently on each configuration
        return model.apply(p, s) + 1e-6 * jnp.sin(s.astype(jnp.float32) @ site_code)

    sampler = FullSumSampler(rounded, lattice.n_sites, total_sz=0, symmetry=group)
    vmc = VMC(ham, sampler, optax.sgd(0.0), None, preconditioner=sr(1e-3))
    state = vmc.init(jax.random.PRNGKey(1), params)
    _, metrics = vmc.step(state)
    stats, _ = energy_estimate(vmc, state)
    rows, log_psi, p = sampler.probabilities(params)
    expect = np.sum(np.asarray(p) * np.asarray(row_local_energies(*sampler.hamiltonian_rows(ham), log_psi)))
    assert float(np.real(stats.mean)) == pytest.approx(float(np.real(metrics["energy"])), rel=1e-13, abs=1e-13)
    assert float(np.real(stats.mean)) == pytest.approx(float(np.real(expect)), rel=1e-13, abs=1e-13)


def test_full_sum_errors():
    lattice, ham, group, model = _chain_j1j2()
    sampler = FullSumSampler(model.apply, lattice.n_sites, total_sz=0, symmetry=group)
    with pytest.raises(ValueError, match="^n_samples: the exact sums of FullSumSampler have"):
        VMC(ham, sampler, optax.sgd(0.1), sampler.n_rows + 8)
    with pytest.raises(ValueError, match="^symmetry: acts on 16 sites"):
        FullSumSampler(model.apply, 12, total_sz=0, symmetry=sym.translations(Square(4)))
    with pytest.raises(TypeError, match="^symmetry: expected a Symmetry"):
        FullSumSampler(model.apply, 12, total_sz=0, symmetry="translations")
    with pytest.raises(ValueError, match="more than max_states=100"):
        FullSumSampler(model.apply, 12, total_sz=0, max_states=100)
    with pytest.raises(ValueError, match="^sr_direction: `weights` must be a real array of shape \\(4,\\)"):
        sr_direction(jnp.ones((4, 3)), jnp.ones(4), weights=jnp.ones(5) / 5)

    def no_weights(jac, e_loc, state, *, step, mesh=None):
        return gradient().update(jac, e_loc, state, step=step, mesh=mesh)

    with pytest.raises(TypeError, match="^preconditioner: exact sums pass `weights`"):
        VMC(ham, sampler, optax.sgd(0.1), None, preconditioner=Preconditioner(lambda params: None, no_weights))


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_hamiltonian_within_the_rows_gives_the_local_energies(rng, name):
    """row_local_energies from hamiltonian_rows (psi on the rows only) equal the dense local
    energies, with and without the symmetry; a Hamiltonian that breaks the group is refused."""
    lattice, ham, group, model = SYSTEMS[name]()
    states = all_states(lattice.n_sites, 0)
    params = random_params(model, states[:1], rng)
    p, e_loc, _ = _dense(model, params, ham, states)
    for symmetry in (group, None):
        sampler = FullSumSampler(model.apply, lattice.n_sites, total_sz=0, symmetry=symmetry)
        rows, log_psi, _ = sampler.probabilities(params)
        e_rows = row_local_energies(*map(jnp.asarray, sampler.hamiltonian_rows(ham)), log_psi)
        index = state_index(np.asarray(rows), states_to_codes(states))
        alive = p[index] > 0  # without the symmetry: also the configurations where psi vanishes
        assert alive[: sampler.n_representatives].all() if symmetry is not None else alive.any()
        np.testing.assert_allclose(np.asarray(e_rows)[alive], e_loc[index][alive], rtol=1e-9, atol=1e-9)
    sampler = FullSumSampler(model.apply, lattice.n_sites, total_sz=0, symmetry=group)
    with pytest.raises(ValueError, match="^hamiltonian: does not commute with the sampler's symmetry"):
        sampler.hamiltonian_rows(_OneSiteField(ham))


class _OneSiteField:
    """``ham`` plus a field on site 0 only: commutes with no translation."""

    def __init__(self, ham):
        self.ham, self.n_sites = ham, ham.n_sites

    def to_sparse(self, states):
        import scipy.sparse as sp

        return self.ham.to_sparse(states) + sp.diags(0.3 * np.asarray(states[:, 0], float))


# slow: end to end; exact sums in the step: test_vmc_step_with_exact_sums, from the command: test_lanczos's exact-sum run
@pytest.mark.slow
def test_exact_sum_run_from_the_command(tmp_path, capsys):
    """``--sampling exact_sum`` with a staged symmetry: the log's energies have error 0,
    the summary's energy is the dense <psi|H|psi> of the saved parameters (after the switch
    to the full group), the run resumes across the stage, and ``measure`` sums over every
    configuration (``--samples`` refused)."""
    import json
    import os

    from quantax_lite.cli.command import main
    from quantax_lite.recipes import load_run

    out = str(tmp_path / "run")
    base = ["train", "--lattice", "chain:10", "--hamiltonian", "j1j2", "--channels", "2", "--depth", "1",
            "--sampling", "exact_sum", "--symmetry", "translations>full@4", "--no-progress", "--out", out,
            "--checkpoint-every", "2"]
    assert main(base + ["--iters", "6"]) == 0
    assert main(base + ["--iters", "8", "--resume"]) == 0
    with open(os.path.join(out, "summary.json")) as fh:
        summary = json.load(fh)
    with open(os.path.join(out, "log.jsonl")) as fh:
        log = [json.loads(line) for line in fh]
    assert [r["iteration"] for r in log] == list(range(1, 9))
    assert all(r["energy_error"] == 0 for r in log)
    assert summary["sampling"] == "exact_sum" and summary["energy_error"] == 0 and summary["iterations"] == 8
    assert summary["symmetry"] == "translations>full@4" and summary["estimate_symmetry"] == "full"
    loaded = load_run(out)
    run = loaded.run
    assert run.sampler.symmetry == run.symmetry  # the full group's orbits after the switch
    dense = exact_expectation(run.hamiltonian, run.model.apply, loaded.state.params)
    assert summary["energy"] == pytest.approx(dense, rel=1e-6)
    capsys.readouterr()
    assert main(["measure", "--out", out, "--samples", "64", "--no-progress"]) == 2
    assert "--samples" in capsys.readouterr().err
    assert main(["measure", "--out", out, "--no-progress"]) == 0
    with open(os.path.join(out, "observables.json")) as fh:
        obs = json.load(fh)
    assert obs["energy"]["mean"] == pytest.approx(dense, rel=1e-6) and obs["energy"]["error"] in (0, 0.0, None)


def test_order_parameter_from_the_representatives_is_exact(rng):
    """S(pi) and m^2, sums over every pair that the group leaves invariant, from the orbit
    representatives with their weights equal those from every configuration (what the
    summary of an exact_sum run reports); a single pair correlation does not (which is why
    ``measure`` sums over every configuration)."""
    from quantax_lite.observables import spin_correlations, staggered_magnetization_sq

    lattice, ham, group, model = _chain_j1j2()
    params = random_params(model, all_states(lattice.n_sites, 0)[:1], rng)
    found = []
    for symmetry in (group, None):
        rows, _, w = FullSumSampler(model.apply, lattice.n_sites, total_sz=0, symmetry=symmetry).probabilities(params)
        corr = spin_correlations(model.apply, params, rows, n_chains=1, weights=w)
        found.append((staggered_magnetization_sq(corr, lattice), np.asarray(corr.mean)))
    (s_reps, m2_reps), c_reps = found[0]
    (s_all, m2_all), c_all = found[1]
    assert s_reps[0] == pytest.approx(s_all[0], rel=1e-9) and m2_reps[0] == pytest.approx(m2_all[0], rel=1e-9)
    assert not np.allclose(c_reps, c_all, rtol=1e-3)


def test_natural_gradient_takes_the_weights(rng):
    """natural_gradient(..., weights=p) on the rows is -1 x the update of the dense SR
    direction unravelled, so exact sums work without the driver too."""
    from quantax_lite.optimizer.update import natural_gradient

    lattice, ham, group, model = _chain_j1j2()
    states = all_states(lattice.n_sites, 0)
    params = random_params(model, states[:1], rng)
    sampler = FullSumSampler(model.apply, lattice.n_sites, total_sz=0, symmetry=group)
    rows, _, w = sampler.probabilities(params)
    p, e_loc, jac = _dense(model, params, ham, states)
    e_rows = e_loc[state_index(np.asarray(rows), states_to_codes(states))]
    update = natural_gradient(model.apply, params, rows, jnp.asarray(e_rows), preconditioner=sr(1e-3), weights=w)
    expect = _dense_direction(p, e_loc, jac, 1e-3)
    np.testing.assert_allclose(np.asarray(ravel_pytree(update)[0]), expect, rtol=1e-5, atol=1e-7)
