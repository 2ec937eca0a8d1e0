"""One Lanczos step (quantax_lite.observables.lanczos) against dense linear algebra.

The reference: the lowest energy in the Krylov space {psi, H psi}, the smallest root of
the 2x2 generalized eigenproblem [[h1, h2], [h2, h3]] v = E [[1, h1], [h1, h2]] v with
h_k = <psi|H^k|psi> / <psi|psi> from the dense vector psi and the sparse H of the sector.
Exact sums must equal it to 1e-10; sampled estimates must agree within their error bars,
and the error bars must cover the exact value as often as they claim (over seeds).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from quantax_lite.hilbert.configurations import all_states
from quantax_lite.observables.lanczos import (LanczosState, lanczos_from_terms, lanczos_record, lanczos_sampled, lanczos_step,
                                  lanczos_terms)
from quantax_lite.geometry.lattice import Chain, Square
from quantax_lite.operators.hamiltonian import Heisenberg
from quantax_lite.sampler import Exchange, MetropolisSampler
from grid import keeping


def jastrow(params, s):
    """log psi = a.s + s.B.s / 2 (complex), (batch,)."""
    x = s.astype(jnp.float64)
    return x @ params["a"] + 0.5 * jnp.einsum("bi,ij,bj->b", x, params["b"], x)


def random_params(rng, n, scale=0.2):
    c = lambda *shape: scale * (rng.normal(size=shape) + 1j * rng.normal(size=shape))  # noqa: E731
    b = np.triu(c(n, n), 1)
    return {"a": jnp.asarray(c(n)), "b": jnp.asarray(b + b.T)}


def dense_lanczos(hamiltonian, params, states):
    """(E of the optimal step, h1) from the dense psi and sparse H on ``states``."""
    psi = np.exp(np.asarray(jastrow(params, jnp.asarray(states))))
    psi /= np.linalg.norm(psi)
    h = hamiltonian.to_sparse(states)
    v1 = h @ psi
    v2 = h @ v1
    h1, h2, h3 = (np.real(np.vdot(psi, v1)), np.real(np.vdot(v1, v1)), np.real(np.vdot(v1, v2)))
    energies = scipy.linalg.eigh(np.array([[h1, h2], [h2, h3]]), np.array([[1.0, h1], [h1, h2]]),
                                 eigvals_only=True)
    return float(energies[0]), float(h1)


SYSTEMS = {
    "chain16": lambda: Heisenberg(Chain(16)),
    "4x4_j1j2": lambda: Heisenberg(Square(4), J2=0.5, marshall_sign=True),
}


@pytest.mark.parametrize("name", keeping(list(SYSTEMS), keep=(0,)))
def test_exact_sums_equal_the_dense_krylov_energy(name, rng):
    ham = SYSTEMS[name]()
    n = ham.n_sites
    params = random_params(rng, n)
    states = all_states(n, 0)
    lp = np.asarray(jastrow(params, jnp.asarray(states)))
    weights = np.exp(2 * (lp.real - lp.real.max()))
    step = lanczos_step(ham, jastrow, params, states, weights=weights / weights.sum())
    e1, h1 = dense_lanczos(ham, params, states)
    assert step.exact and step.error == 0.0
    assert abs(step.variational_energy - h1) < 1e-10 * abs(h1)
    assert abs(step.energy - e1) < 1e-10 * abs(e1)
    assert step.energy < step.variational_energy
    # alpha: the energy of (1 + alpha H) psi, formed densely, is the step's
    psi = np.exp(lp)
    h = ham.to_sparse(states)
    psi1 = psi + step.alpha * (h @ psi)
    assert abs(np.real(np.vdot(psi1, h @ psi1) / np.vdot(psi1, psi1)) - e1) < 1e-10 * abs(e1)
    # the variance of the Lanczos state, densely
    hpsi1 = h @ psi1
    second = np.real(np.vdot(hpsi1, hpsi1) / np.vdot(psi1, psi1))
    assert abs(step.variance - (second - e1**2)) < 1e-8 * e1**2


def test_an_eigenstate_takes_no_step():
    """psi an eigenstate: variance 0, the step changes nothing (b 0, gain 0)."""
    d = np.full(8, -0.25)
    q = d * d
    step = lanczos_from_terms(d, q, -10.0, n_chains=4)
    assert step.beta == 0.0 and step.gain == 0.0 and step.energy == step.variational_energy == -10.25
    assert step.variance == 0.0


@pytest.mark.parametrize("c", [0.0, -0.3, 0.17])
def test_samples_of_the_lanczos_state_reweight_exactly(c, rng):
    """Exact probabilities of |psi_c|^2 (dense, c any) with sampled_beta=c give the dense
    Krylov energy to 1e-10: the reweighting by 1 / |1 + c d|^2 is exact; the sampled state's
    own energy is that of the dense psi_c = (1 + c (H - e_ref)) psi."""
    ham = Heisenberg(Chain(10))
    params = random_params(rng, 10)
    states = all_states(10, 0)
    d, q, e_ref = lanczos_terms(ham, jastrow, params, states)
    lp = np.asarray(jastrow(params, jnp.asarray(states)))
    p_c = np.exp(2 * (lp.real - lp.real.max())) * np.abs(1 + c * d) ** 2
    step = lanczos_from_terms(d, q, e_ref, weights=p_c / p_c.sum(), sampled_beta=c)
    e1, h1 = dense_lanczos(ham, params, states)
    assert abs(step.energy - e1) < 1e-10 * abs(e1) and abs(step.variational_energy - h1) < 1e-10 * abs(h1)
    psi = np.exp(np.asarray(jastrow(params, jnp.asarray(states))))
    h = ham.to_sparse(states)
    psi_c = psi + c * (h @ psi - e_ref * psi)
    e_c = np.real(np.vdot(psi_c, h @ psi_c) / np.vdot(psi_c, psi_c))
    assert abs(step.sampled_energy - e_c) < 1e-10 * abs(e_c) and step.sampled_error == 0.0


def test_lanczos_state_samples_its_own_distribution():
    """A Metropolis sampler of LanczosState draws |psi_b|^2 with psi_b = (1 + b (H - e)) psi
    formed densely (chi-square on the 20 configurations of Sz = 0 of a chain of 6)."""
    from scipy.stats import chisquare

    ham = Heisenberg(Chain(6))
    params = random_params(np.random.default_rng(4), 6, scale=0.3)
    states = all_states(6, 0)
    psi = np.exp(np.asarray(jastrow(params, jnp.asarray(states))))
    b, e = -0.4, -2.0
    psi_b = psi + b * (ham.to_sparse(states) @ psi - e * psi)
    p = np.abs(psi_b) ** 2 / np.sum(np.abs(psi_b) ** 2)
    sampler = MetropolisSampler(LanczosState(ham, jastrow), Exchange(Chain(6).bonds()), 64, 6, sweep_size=12,
                                n_thermalize=10)
    theta = (params, b, e)
    samples, _, _ = sampler.sample(sampler.init(jax.random.key(2), theta), theta, 64 * 100)
    codes = {tuple(x): i for i, x in enumerate(states)}
    counts = np.bincount([codes[tuple(x)] for x in np.asarray(samples)], minlength=len(states))
    assert chisquare(counts, p * counts.sum()).pvalue > 1e-3


def test_lanczos_state_is_finite_where_psi_is_tiny_beside_large_neighbours():
    """log |psi_b| in float32 (the chip's precision) where a configuration's neighbours are
    e^100 times larger than it (ratios that overflow float32, where sampling psi_b goes):
    finite and equal to the float64 value of the dense psi_b."""
    ham = Heisenberg(Chain(6))
    states = all_states(6, 0)
    rng = np.random.default_rng(7)
    table = rng.normal(size=len(states)) + 1j * rng.normal(size=len(states))
    table[0] -= 100.0  # one configuration e^100 below its neighbours
    codes = jnp.asarray([int(np.sum((x > 0) * 2 ** np.arange(6))) for x in states])

    def log_psi(full, s):  # a table of log psi by the configuration's binary code
        return full[jnp.sum((s > 0) * 2 ** jnp.arange(6), axis=1)]

    b, e = -0.3, -2.5
    psi = np.exp(table)
    psi_b = psi + b * (ham.to_sparse(states) @ psi - e * psi)
    for dtype in (jnp.complex64, jnp.complex128):
        full = jnp.zeros(2 ** 6, dtype).at[codes].set(jnp.asarray(table, dtype))
        got = np.asarray(LanczosState(ham, log_psi)((full, b, e), jnp.asarray(states)))
        assert np.all(np.isfinite(got)), dtype
        tol = 1e-4 if dtype == jnp.complex64 else 1e-10
        np.testing.assert_allclose(got, np.log(np.abs(psi_b)), rtol=tol, atol=tol * 100)


def test_terms_are_finite_where_psi_is_tiny_beside_large_neighbours():
    """d and q in float32 (the chip's precision) at and around a configuration whose
    neighbours are e^100 times larger (its local energy overflows float32; samples of psi_b
    go there): finite and equal to the float64 values of the dense (H - e) psi and
    (H - e)^2 psi over psi, and the step from them to the dense Krylov energy."""
    ham = Heisenberg(Chain(6))
    states = all_states(6, 0)
    rng = np.random.default_rng(11)
    table = 0.3 * (rng.normal(size=len(states)) + 1j * rng.normal(size=len(states)))
    table[0] -= 100.0
    codes = jnp.asarray([int(np.sum((x > 0) * 2 ** np.arange(6))) for x in states])

    def log_psi(full, s):
        return full[jnp.sum((s > 0) * 2 ** jnp.arange(6), axis=1)]

    e = -2.5
    psi = np.exp(table)
    h = ham.to_sparse(states)
    h1 = h @ psi - e * psi
    d_dense, q_dense = h1 / psi, (h @ h1 - e * h1) / psi
    full = jnp.zeros(2 ** 6, jnp.complex64).at[codes].set(jnp.asarray(table, jnp.complex64))
    d, q, _ = lanczos_terms(ham, log_psi, full, states, e_ref=e)
    assert np.all(np.isfinite(d)) and np.all(np.isfinite(q))
    assert abs(d[0]) > 1e40  # beyond float32's range: held in float64
    np.testing.assert_allclose(d, d_dense, rtol=1e-4)
    np.testing.assert_allclose(q, q_dense, rtol=1e-4, atol=1e-4 * np.median(np.abs(q_dense)))
    # the step over every configuration (weights |psi|^2: configuration 0's is e^-200)
    p = np.abs(psi) ** 2
    step = lanczos_from_terms(d, q, e, weights=p / p.sum())
    v = psi / np.linalg.norm(psi)
    m1, m2, m3 = (np.real(np.vdot(v, h @ v)), np.real(np.vdot(h @ v, h @ v)), np.real(np.vdot(h @ v, h @ (h @ v))))
    e1 = scipy.linalg.eigh([[m1, m2], [m2, m3]], [[1.0, m1], [m1, m2]], eigvals_only=True)[0]
    assert abs(step.energy - e1) < 1e-5 * abs(e1)


# slow: 30 sampled Lanczos steps (20-40 s); their reweighting is exact: test_samples_of_the_lanczos_state_reweight_exactly
@pytest.mark.slow
def test_sampled_estimate_covers_the_exact_value():
    """Over 30 seeds the step estimated from samples of its own state (lanczos_sampled) lies
    within two of its error bars of the dense value in at least 25 (95% expected; error bars
    half as large as they should be would give about 68%)."""
    ham = Heisenberg(Chain(12))
    n = ham.n_sites
    params = random_params(np.random.default_rng(1), n, scale=0.1)
    e1, _ = dense_lanczos(ham, params, all_states(n, 0))
    sampler = MetropolisSampler(jastrow, Exchange(Chain(n).bonds()), 32, n, sweep_size=2 * n, n_thermalize=20)
    inside, gains = 0, []
    for seed in range(30):
        samples, _, _ = sampler.sample(sampler.init(jax.random.key(seed), params), params, 32 * 16)
        step, first = lanczos_sampled(ham, jastrow, params, sampler, jax.random.key(1000 + seed), samples)
        assert np.isfinite(step.error) and step.error > 0 and step.e_ref == first.e_ref
        inside += abs(step.energy - e1) < 2 * step.error
        gains.append(step.gain / step.gain_error)
    assert inside >= 25, inside
    assert np.median(gains) < -3  # the step lowers the energy by many of its error bars


def test_the_lanczos_state_is_sampled_from_its_square_whatever_the_run_trains_on():
    """A run that trains on samples of |psi|^(2 power) hands its sampler over with that power:
    the step's own state is still drawn from |psi_b|^2, as its weights assume (the same draws,
    bit for bit, as from the sampler at power 1)."""
    import dataclasses

    ham = Heisenberg(Chain(8))
    params = random_params(np.random.default_rng(2), 8, scale=0.3)
    sampler = MetropolisSampler(jastrow, Exchange(Chain(8).bonds()), 16, 8, sweep_size=8, n_thermalize=10)
    samples, _, _ = sampler.sample(sampler.init(jax.random.key(0), params), params, 16 * 8)
    steps = [lanczos_sampled(ham, jastrow, params, dataclasses.replace(sampler, power=power), jax.random.key(1),
                             samples)[0] for power in (1.0, 0.5)]
    assert steps[0] == steps[1], steps


def test_reference_energy_changes_nothing_but_rounding(rng):
    """d and q about another E_ref give the same step (the moments are shifted exactly)."""
    ham = Heisenberg(Chain(8))
    params = random_params(rng, 8)
    states = all_states(8, 0)
    lp = np.asarray(jastrow(params, jnp.asarray(states)))
    w = np.exp(2 * (lp.real - lp.real.max()))
    w /= w.sum()
    steps = [lanczos_from_terms(*lanczos_terms(ham, jastrow, params, states, e_ref=r), weights=w)
             for r in (None, 0.0, -7.0)]
    for s in steps[1:]:
        assert abs(s.energy - steps[0].energy) < 1e-11 and abs(s.alpha - steps[0].alpha) < 1e-8 * abs(s.alpha)


def test_record_names_what_it_is():
    step = lanczos_from_terms(np.array([0.1, -0.1, 0.2, -0.2]), np.array([0.3, 0.1, 0.5, 0.2]), -5.0, n_chains=2)
    rec = lanczos_record(step, 4, exact_energy=-5.5)
    assert "Lanczos" in rec["what"] and rec["per_site"] == pytest.approx(step.energy / 4)
    assert rec["relative_error"] == pytest.approx((step.energy + 5.5) / 5.5)


def test_bad_arguments():
    ham = Heisenberg(Chain(4))
    params = random_params(np.random.default_rng(0), 4)
    with pytest.raises(ValueError, match="samples"):
        lanczos_terms(ham, jastrow, params, np.ones((3, 5), np.int8))
    with pytest.raises(ValueError, match="weights"):
        lanczos_from_terms(np.zeros(3), np.zeros(3), 0.0, weights=[1.0, -1.0, 1.0])
    with pytest.raises(ValueError, match="n_chains"):
        lanczos_from_terms(np.zeros(6), np.zeros(6), 0.0, n_chains=4)
    with pytest.raises(ValueError, match="q"):
        lanczos_from_terms(np.zeros(6), np.zeros(5), 0.0)
    with pytest.raises(ValueError, match="sampled_beta"):  # a sample on a node of psi_c
        lanczos_from_terms(np.array([1.0, 2.0]), np.zeros(2), 0.0, sampled_beta=-1.0, n_chains=2)
    with pytest.raises(TypeError, match="sampled_beta"):
        lanczos_from_terms(np.zeros(2), np.zeros(2), 0.0, sampled_beta="x")
    sampler = MetropolisSampler(jastrow, Exchange(Chain(4).bonds(1)), n_chains=2, n_sites=4)
    for passes, error in ((1, ValueError), (0, ValueError), (2.5, TypeError)):
        with pytest.raises(error, match="passes"):
            lanczos_sampled(ham, jastrow, params, sampler, jax.random.key(0),
                            np.tile([[1, -1, 1, -1]], (4, 1)).astype(np.int8), passes=passes)


def test_measure_lanczos_of_an_exact_sum_run_equals_the_dense_value(tmp_path, capsys):
    """`quantax-lite measure --lanczos` on an exact-sum run (chain of 12, full group, float64):
    the step over the run's orbit rows equals the dense Krylov energy of the run's network
    over every configuration of Sz = 0, to 1e-10; it is written beside the network's energy."""
    import json
    import os

    from quantax_lite.cli.command import main
    from quantax_lite.recipes import load_run

    out = str(tmp_path / "run")
    assert main(["train", "--lattice", "chain:12", "--hamiltonian", "heisenberg", "--symmetry", "full",
                 "--sampling", "exact_sum", "--precision", "f64", "--channels", "4", "--depth", "1", "--iters", "3",
                 "--no-progress", "--out", out]) == 0
    capsys.readouterr()
    assert main(["measure", "--out", out, "--lanczos", "--no-dimers", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    with open(os.path.join(out, "observables.json")) as fh:
        lz = json.load(fh)["lanczos"]
    loaded = load_run(out)
    run, params = loaded.run, loaded.state.params
    states = all_states(12, 0)
    lp = np.asarray(run.model.apply(params, jnp.asarray(states)))
    psi = np.exp(lp - lp.real.max())
    h = run.hamiltonian.to_sparse(states)
    psi /= np.linalg.norm(psi)
    v1 = h @ psi
    h1, h2, h3 = np.real(np.vdot(psi, v1)), np.real(np.vdot(v1, v1)), np.real(np.vdot(v1, h @ v1))
    e1 = scipy.linalg.eigh([[h1, h2], [h2, h3]], [[1.0, h1], [h1, h2]], eigvals_only=True)[0]
    assert lz["exact_sums"] and lz["error"] == 0.0
    assert abs(lz["variational_energy"] - h1) < 1e-10 * abs(h1)
    assert abs(lz["energy"] - e1) < 1e-10 * abs(e1)
    assert lz["relative_error"] < lz["variational_relative_error"]
    assert "Lanczos" in printed and f"{lz['energy']:.6f}" in printed


@pytest.mark.slow  # end to end; coverage of the sampled step is test_sampled_estimate_covers_the_exact_value, the command the exact-sum test
def test_measure_lanczos_of_a_sampled_run_agrees_with_the_dense_value(tmp_path, capsys):
    """`measure --lanczos` on a sampled run (chain of 8): the step from samples of its own
    state lies within four error bars of the dense Krylov energy of the run's network, and
    the estimate from samples of psi that chose it is kept beside it."""
    import json
    import os

    from quantax_lite.cli.command import main
    from quantax_lite.recipes import load_run

    out = str(tmp_path / "run")
    assert main(["train", "--lattice", "chain:8", "--channels", "4", "--depth", "1", "--samples", "64", "--chains",
                 "16", "--iters", "2", "--eval-samples", "256", "--no-progress", "--seed", "3", "--out", out]) == 0
    assert main(["measure", "--out", out, "--lanczos", "--samples", "512", "--no-dimers", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    with open(os.path.join(out, "observables.json")) as fh:
        lz = json.load(fh)["lanczos"]
    loaded = load_run(out)
    states = all_states(8, 0)
    lp = np.asarray(loaded.run.model.apply(loaded.state.params, jnp.asarray(states)))
    psi = np.exp(lp - lp.real.max())
    psi /= np.linalg.norm(psi)
    h = loaded.run.hamiltonian.to_sparse(states)
    v1 = h @ psi
    h1, h2, h3 = np.real(np.vdot(psi, v1)), np.real(np.vdot(v1, v1)), np.real(np.vdot(v1, h @ v1))
    e1 = scipy.linalg.eigh([[h1, h2], [h2, h3]], [[1.0, h1], [h1, h2]], eigvals_only=True)[0]
    assert lz["samples_from"] == "the Lanczos state's own |psi_b|^2" and lz["n_samples"] == 512
    assert 0 < lz["error"] and abs(lz["energy"] - e1) < 4 * lz["error"], (lz["energy"], e1, lz["error"])
    assert lz["from_psi_samples"]["n_samples"] == 512 and lz["energy"] < h1
    # the state the second set was drawn from, psi_c with c the first set's b, by its own samples
    c, e_ref = lz["from_psi_samples"]["beta"], lz["e_ref"]
    psi_c = psi + c * (v1 - e_ref * psi)
    e_c = np.real(np.vdot(psi_c, h @ psi_c) / np.vdot(psi_c, psi_c))
    assert 0 < lz["sampled_state_error"] and abs(lz["sampled_state_energy"] - e_c) < 4 * lz["sampled_state_error"]
    assert "the state sampled" in printed and f"{lz['sampled_state_energy']:.6f}" in printed
    # a third set, drawn at the b the second one chose: the state it was drawn from, by its own samples
    assert main(["measure", "--out", out, "--lanczos", "--lanczos-passes", "3", "--samples", "512", "--no-dimers",
                 "--no-progress"]) == 0
    with open(os.path.join(out, "observables.json")) as fh:
        lz3 = json.load(fh)["lanczos"]
    assert lz3["sampled_state_beta"] == pytest.approx(lz["beta"])  # the same seed: the same first two sets
    c = lz3["sampled_state_beta"]
    psi_c = psi + c * (v1 - e_ref * psi)
    e_c = np.real(np.vdot(psi_c, h @ psi_c) / np.vdot(psi_c, psi_c))
    assert abs(lz3["sampled_state_energy"] - e_c) < 4 * lz3["sampled_state_error"], (lz3["sampled_state_energy"], e_c)


def test_non_finite_terms_give_no_step():
    """A NaN or an infinity among the per-configuration terms is an error naming how many,
    not a step of b = 0 with an energy of NaN (what a float32 overflow once wrote as null)."""
    d, q = np.zeros(8), np.ones(8)
    d[3] = np.nan
    with pytest.raises(FloatingPointError, match="1 of 8 configurations"):
        lanczos_from_terms(d, q, -1.0, n_chains=2)
    q[5] = np.inf
    with pytest.raises(FloatingPointError, match="2 of 8"):
        lanczos_from_terms(d, q, -1.0, n_chains=2)
