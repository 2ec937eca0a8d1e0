"""Tests of quantax_lite.sampler: exact distributions by chi-square, detailed bookkeeping.

All Metropolis tests run on the 8 simulated devices of conftest (n_chains a multiple
of 8). Seeds are fixed, so each chi-square test is deterministic for a given device
count; the threshold p > 1e-3 is loose enough for a correct sampler and tight
enough that sampling |psi| instead of |psi|^2, or a biased rule, fails.
"""
import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import chisquare

from quantax_lite.hilbert.configurations import random_states
from quantax_lite.geometry.lattice import Chain, Square
from quantax_lite.sampler import (
    ChainState,
    ExactSampler,
    Exchange,
    LocalFlip,
    MetropolisSampler,
    Mixture,
    Sampler,
    TransitionRule,
    acceptance_rate,
    per_chain,
)
from quantax_lite.utils import batch_sharding, make_mesh

N_CHAINS = 64
P_MIN = 1e-3


def log_psi(params, s):
    """A random complex 'Jastrow' amplitude: log psi = a.s + s.B.s / 2, (batch,) complex."""
    x = s.astype(jnp.float64)
    return x @ params["a"] + 0.5 * jnp.einsum("bi,ij,bj->b", x, params["b"], x)


def uniform_log_psi(params, s):
    return jnp.zeros(s.shape[0])


def random_params(seed, n_sites, scale=0.15):
    rng = np.random.default_rng(seed)
    c = lambda *shape: scale * (rng.normal(size=shape) + 1j * rng.normal(size=shape))  # noqa: E731
    b = c(n_sites, n_sites)
    return {"a": jnp.asarray(c(n_sites)), "b": jnp.asarray(np.triu(b, 1) + np.triu(b, 1).T)}


def exact_distribution(params, n_sites, total_sz):
    """(states, |psi|^2 normalized) by explicit enumeration, independent of the package."""
    states = np.array(list(itertools.product([1, -1], repeat=n_sites)), dtype=np.int8)
    if total_sz is not None:
        states = states[states.sum(axis=1) == 2 * total_sz]
    # log psi by explicit sums, one state at a time (no jax, no batching).
    a, b = np.asarray(params["a"]), np.asarray(params["b"])
    lp = np.array([
        sum(a[i] * s[i] for i in range(n_sites))
        + 0.5 * sum(b[i, j] * s[i] * s[j] for i in range(n_sites) for j in range(n_sites))
        for s in states.astype(np.float64)
    ])
    p = np.exp(2 * (lp.real - lp.real.max()))
    return states, p / p.sum()


def chi2_pvalue(samples, params, n_sites, total_sz):
    states, p = exact_distribution(params, n_sites, total_sz)
    index = {tuple(s): i for i, s in enumerate(states)}
    samples = np.asarray(samples)
    idx = np.array([index.get(tuple(s), -1) for s in samples])
    assert np.all(idx >= 0), "a sample lies outside the expected sector"
    counts = np.bincount(idx, minlength=len(states))
    expected = p * len(samples)
    assert expected.min() > 5, "too few samples for a chi-square test"
    return chisquare(counts, expected).pvalue


SYSTEMS = {"square2x2": Square(2), "chain6": Chain(6)}


def test_exchange_on_nearest_and_next_nearest_bonds_matches_psi_squared():
    """The J1-J2 runs' moves: anti-aligned exchange on the bonds of both shells (a 2x3
    torus: 20 configurations of Sz = 0), against |psi|^2 by chi-square."""
    lattice = Square(2, 3)
    n = lattice.n_sites
    rule = Exchange(np.concatenate([lattice.bonds(1), lattice.bonds(2)]), anti_aligned=True)
    params = random_params(5, n)
    sampler = MetropolisSampler(log_psi, rule, N_CHAINS, n, sweep_size=2 * n, n_thermalize=10)
    samples, _, state = sampler.sample(sampler.init(jax.random.key(3), params), params, N_CHAINS * 120)
    assert np.all(np.asarray(samples).sum(axis=1) == 0)
    assert 0.05 < acceptance_rate(state) < 1.0
    assert chi2_pvalue(samples, params, n, 0) > P_MIN


def make_rule(name, lattice):
    if name == "flip":
        return LocalFlip()
    if name == "exchange":
        return Exchange(lattice.bonds())
    if name == "anti_aligned":
        return Exchange(lattice.bonds(), anti_aligned=True)
    return Mixture([LocalFlip(), Exchange(lattice.bonds())], [0.3, 0.7])


@pytest.mark.parametrize("system", list(SYSTEMS))
@pytest.mark.parametrize("rule_name", ["flip", "exchange", "anti_aligned", "mixture"])
def test_metropolis_matches_psi_squared(system, rule_name):
    lattice = SYSTEMS[system]
    n = lattice.n_sites
    rule = make_rule(rule_name, lattice)
    total_sz = 0 if rule.conserves_sz else None
    params = random_params(7, n)
    # Sweeps of 2 n_sites proposals keep consecutive samples nearly independent.
    sampler = MetropolisSampler(log_psi, rule, N_CHAINS, n, sweep_size=2 * n, n_thermalize=10)
    state = sampler.init(jax.random.key(11), params)
    samples, lp, state = sampler.sample(state, params, N_CHAINS * 120)

    assert samples.shape == (N_CHAINS * 120, n) and samples.dtype == jnp.int8
    assert samples.sharding.is_equivalent_to(batch_sharding(make_mesh(), 2), 2)
    np.testing.assert_allclose(lp, log_psi(params, samples), rtol=1e-12, atol=1e-12)
    if rule.conserves_sz:
        assert np.all(np.asarray(samples).sum(axis=1) == 0)
    assert 0.05 < acceptance_rate(state) < 1.0
    assert chi2_pvalue(samples, params, n, total_sz) > P_MIN


def test_chi_square_detects_wrong_distribution():
    """The test above has power: |psi| (not |psi|^2) samples fail it."""
    n = 6
    params = random_params(7, n)
    half = jax.tree_util.tree_map(lambda v: 0.5 * v, params)  # psi^(1/2): |psi|^2 -> |psi|
    sampler = MetropolisSampler(log_psi, LocalFlip(), N_CHAINS, n, sweep_size=2 * n, n_thermalize=10)
    samples, _, _ = sampler.sample(sampler.init(jax.random.key(11), half), half, N_CHAINS * 120)
    assert chi2_pvalue(samples, params, n, None) < 1e-6


class _NoHastings(Exchange):
    """The anti-aligned exchange without its Metropolis-Hastings ratio (biased)."""

    def propose(self, key, states):
        proposed, _ = super().propose(key, states)
        return proposed, jnp.zeros(states.shape[:1], jnp.float32)


@pytest.mark.parametrize("rule_cls, should_pass", [(Exchange, True), (_NoHastings, False)])
def test_anti_aligned_exchange_needs_its_hastings_ratio(rule_cls, should_pass):
    """On a uniform |psi|^2 over the Sz = 0 chain of 6 sites the anti-aligned proposal
    visits s in proportion to its number of anti-aligned bonds (2, 4 or 6) unless the
    ratio n_a(s) / n_a(s') corrects it: the corrected sampler is uniform, the
    uncorrected one fails the chi-square test."""
    n = 6
    rule = rule_cls(Chain(n).bonds(), anti_aligned=True)
    sampler = MetropolisSampler(uniform_log_psi, rule, N_CHAINS, n, sweep_size=2 * n, n_thermalize=10)
    samples, _, state = sampler.sample(sampler.init(jax.random.key(3), None), None, N_CHAINS * 60)
    zero = {"a": jnp.zeros(n, complex), "b": jnp.zeros((n, n), complex)}
    p_value = chi2_pvalue(samples, zero, n, 0)
    assert (p_value > P_MIN) if should_pass else (p_value < 1e-6)
    # every proposal exchanges an anti-aligned pair: it always changes the state
    if should_pass:
        proposed, _ = rule.propose(jax.random.key(0), state.states)
        assert np.all(np.any(np.asarray(proposed) != np.asarray(state.states), axis=1))


def test_anti_aligned_exchange_on_polarized_states():
    """Without an anti-aligned bond the proposal is the state itself (a null move)."""
    rule = Exchange(Chain(4).bonds(), anti_aligned=True)
    states = jnp.asarray([[1, 1, 1, 1], [-1, -1, -1, -1], [1, -1, 1, -1]], jnp.int8)
    proposed, log_ratio = rule.propose(jax.random.key(1), states)
    np.testing.assert_array_equal(proposed[:2], states[:2])
    assert log_ratio.shape == (3,) and log_ratio.dtype == jnp.float32
    assert np.all(np.asarray(log_ratio)[:2] == 0)
    # the Neel state has 4 anti-aligned bonds; after one swap, 2
    np.testing.assert_allclose(log_ratio[2], np.log(4 / 2), rtol=1e-6)
    np.testing.assert_array_equal(log_ratio, rule.log_proposal_ratio(states, proposed))
    with pytest.raises(ValueError, match="symmetric"):
        Mixture([LocalFlip(), rule], [0.5, 0.5])
    with pytest.raises(TypeError, match="anti_aligned"):
        Exchange(Chain(4).bonds(), anti_aligned="yes")


def test_exchange_conserves_nonzero_sector_and_state_bookkeeping():
    lattice = Chain(6)
    params = random_params(3, 6)
    sampler = MetropolisSampler(
        log_psi, Exchange(lattice.bonds()), N_CHAINS, 6, sweep_size=2 * 6, n_thermalize=10,
        total_sz=1,
    )
    state = sampler.init(jax.random.key(0), params)
    assert np.all(np.asarray(state.states).sum(axis=1) == 2)
    assert not bool(state.thermalized)
    samples, lp, state = sampler.sample(state, params, N_CHAINS * 4)
    assert bool(state.thermalized)
    assert np.all(np.asarray(samples).sum(axis=1) == 2)
    # Chain-major layout: the last recorded sample of chain c is the chain's state.
    chains = per_chain(samples, N_CHAINS)
    np.testing.assert_array_equal(chains[:, -1], state.states)
    np.testing.assert_allclose(state.log_psi, log_psi(params, state.states), rtol=1e-12)
    np.testing.assert_array_equal(state.n_proposed, np.full(N_CHAINS, 4 * 12))
    # The chains persist: the next call starts where the last one stopped.
    samples2, _, state2 = sampler.sample(state, params, N_CHAINS * 4)
    assert not np.array_equal(samples, samples2)
    assert np.all(np.asarray(samples2).sum(axis=1) == 2)


@pytest.mark.parametrize(
    "rule_name, total_sz, expected",
    [
        ("flip", None, 1.0),  # every flip changes the state and is accepted
        ("exchange", 0, 6 / (2 * 5)),  # P(bond anti-aligned) in Sz = 0: N / (2 (N - 1))
        ("mixture", None, 0.3 * 1.0 + 0.7 * 0.5),  # unconstrained: P(anti-aligned) = 1/2
    ],
)
def test_acceptance_on_uniform_psi(rule_name, total_sz, expected):
    lattice = Chain(6)
    sampler = MetropolisSampler(
        uniform_log_psi, make_rule(rule_name, lattice), N_CHAINS, 6, n_thermalize=2,
        total_sz=total_sz,
    )
    _, _, state = sampler.sample(sampler.init(jax.random.key(5), None), None, N_CHAINS * 50)
    rate = acceptance_rate(state)
    if expected == 1.0:
        assert rate == 1.0
        np.testing.assert_array_equal(state.n_accepted, state.n_proposed)
    else:
        assert abs(rate - expected) < 0.02


def test_same_key_same_samples_and_chunking():
    n = 4
    params = random_params(1, n)
    rule = Mixture([LocalFlip(), Exchange(Square(2).bonds())], [0.3, 0.7])
    sampler = MetropolisSampler(log_psi, rule, N_CHAINS, n, sweep_size=2 * n, n_thermalize=10)

    def run(smp, seed):
        return smp.sample(smp.init(jax.random.key(seed), params), params, N_CHAINS * 120)

    a, lp_a, _ = run(sampler, 11)
    b, lp_b, _ = run(MetropolisSampler(log_psi, rule, N_CHAINS, n, sweep_size=2 * n,
                                       n_thermalize=10), 11)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(lp_a, lp_b)
    c, _, _ = run(sampler, 12)
    assert not np.array_equal(a, c)
    # Chunked evaluation of the proposals (2 rows per device per call) changes nothing.
    chunked = MetropolisSampler(log_psi, rule, N_CHAINS, n, sweep_size=2 * n, n_thermalize=10,
                                chunk_size=2)
    d, lp_d, _ = run(chunked, 11)
    np.testing.assert_array_equal(a, d)
    np.testing.assert_allclose(lp_a, lp_d, rtol=1e-12)


def test_initial_states():
    n = 6
    params = random_params(2, n)
    sampler = MetropolisSampler(log_psi, LocalFlip(), N_CHAINS, n, sweep_size=2 * n, n_thermalize=10)
    start = np.ones((N_CHAINS, n), np.int8)
    state = sampler.init(jax.random.key(0), params, initial_states=start)
    np.testing.assert_array_equal(state.states, start)
    np.testing.assert_allclose(state.log_psi, log_psi(params, jnp.asarray(start)), rtol=1e-12)
    assert not bool(state.thermalized)


class _Count:
    """A counting rule for tests: the proposal of s is s + 1 read as a binary number (a down
    spin on site i is bit i) modulo 2**n_sites. Under a uniform |psi|^2 every proposal is
    accepted (the acceptance is min(1, 1)), so a chain started all up (0) reads k after k
    proposals (k < 2**n_sites): the state counts the proposals made, thermalization
    included. (Not symmetric in the Hastings sense; with a uniform |psi|^2 that does not
    matter.)"""

    conserves_sz = False
    symmetric = True

    def check(self, n_sites):
        pass

    def propose(self, key, states):
        n = states.shape[1]
        weights = 2 ** jnp.arange(n, dtype=jnp.int32)
        code = (states < 0).astype(jnp.int32) @ weights
        bits = (((code + 1) % 2**n)[:, None] // weights) % 2
        return (1 - 2 * bits).astype(jnp.int8), jnp.zeros(states.shape[:1], jnp.float32)


def _counts(samples, n_chains):
    """The binary number (down spin = 1, site i = bit i) of every sample, (n_chains, m)."""
    s = np.asarray(per_chain(samples, n_chains))
    return (s < 0).astype(np.int64) @ (2 ** np.arange(s.shape[-1]))


def test_thermalization_runs_exactly_the_discarded_sweeps():
    """With the counting rule the recorded samples read the number of proposals made
    since the start: n_thermalize sweeps of sweep_size proposals are discarded on the
    first call (thermalize=None), none on later ones, again when forced (True), never when
    skipped (False; the chains then stay unthermalized), and the counts exclude them."""
    n, sweep, n_therm, m, chains = 8, 3, 5, 4, 8
    sampler = MetropolisSampler(uniform_log_psi, _Count(), chains, n, sweep_size=sweep,
                                n_thermalize=n_therm)
    fresh = sampler.init(jax.random.key(0), None, initial_states=np.ones((chains, n), np.int8))
    recorded = sweep * np.arange(1, m + 1)  # proposals made by the recorded sweeps
    discarded = sweep * n_therm  # 15 proposals of thermalization

    def run(state, thermalize):
        samples, _, new = sampler.sample(state, None, chains * m, thermalize=thermalize)
        # every proposal changes the state; the counts are those of the recorded sweeps
        np.testing.assert_array_equal(new.n_proposed, np.full(chains, m * sweep))
        np.testing.assert_array_equal(new.n_accepted, np.full(chains, m * sweep))
        return _counts(samples, chains), new

    counts, warm = run(fresh, None)  # fresh chains: thermalized first
    np.testing.assert_array_equal(counts, np.tile(discarded + recorded, (chains, 1)))
    assert bool(warm.thermalized)
    counts, _ = run(warm, None)  # already thermalized: nothing discarded
    np.testing.assert_array_equal(counts, np.tile(discarded + m * sweep + recorded, (chains, 1)))
    counts, _ = run(warm, True)  # forced: thermalized again
    np.testing.assert_array_equal(counts, np.tile(2 * discarded + m * sweep + recorded, (chains, 1)))
    counts, cold = run(fresh, False)  # skipped: the first sample is one sweep from the start
    np.testing.assert_array_equal(counts, np.tile(recorded, (chains, 1)))
    assert not bool(cold.thermalized)
    counts, late = run(cold, None)  # still unthermalized: the next default call thermalizes
    np.testing.assert_array_equal(counts, np.tile(m * sweep + discarded + recorded, (chains, 1)))
    assert bool(late.thermalized)


# The chains' stored log psi belongs to the parameters of the previous call (A); ``sample``
# with new parameters (B, a VMC step later) must re-evaluate it. One proposal per chain
# per call (sweep_size=1), so that many chains keep their configuration.
def _one_flip_sampler(n):
    return MetropolisSampler(log_psi, LocalFlip(), N_CHAINS, n, sweep_size=1, n_thermalize=10)


def test_sample_returns_log_psi_of_the_new_parameters():
    """The returned log psi is B's on every sample, also on those of the chains that
    rejected their proposal (which kept A's value if it were not re-evaluated)."""
    n = 6
    sampler = _one_flip_sampler(n)
    a, b = random_params(1, n), random_params(2, n)
    _, _, state = sampler.sample(sampler.init(jax.random.key(0), a), a, N_CHAINS)
    np.testing.assert_allclose(state.log_psi, log_psi(a, state.states), rtol=1e-12)
    samples, lp, new = sampler.sample(state, b, N_CHAINS)
    stayed = np.asarray(new.n_accepted) == 0
    assert 0 < stayed.sum() < N_CHAINS  # both kinds of chains are checked
    assert np.all(np.abs(np.asarray(log_psi(a, new.states) - log_psi(b, new.states))) > 1e-3)
    np.testing.assert_allclose(lp, log_psi(b, samples), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(new.log_psi, log_psi(b, new.states), rtol=1e-12, atol=1e-12)


def test_acceptance_uses_the_new_parameters():
    """The first proposals after a parameter change are accepted with B's ratios."""
    n = 6
    sampler = _one_flip_sampler(n)
    # Under A (a field of 5 per site) |psi|^2 is peaked on the all-up state,
    # a flip costs e^-20, and the chains stay there. Under B (a field of -0.5) every flip
    # from the all-up state raises log psi by 1: the first proposal of every chain is
    # accepted with ratio e^2 > 1. With A's stale log psi (30) the ratio would be e^-64.
    zeros = jnp.zeros((n, n), complex)
    peaked, downhill = {"a": jnp.full(n, 5.0 + 0j), "b": zeros}, {"a": jnp.full(n, -0.5 + 0j), "b": zeros}
    state = sampler.init(jax.random.key(1), peaked, initial_states=np.ones((N_CHAINS, n), np.int8))
    samples, _, state = sampler.sample(state, peaked, N_CHAINS)
    assert np.all(np.asarray(samples) == 1)
    samples, lp, state = sampler.sample(state, downhill, N_CHAINS)
    np.testing.assert_array_equal(state.n_accepted, np.ones(N_CHAINS))
    np.testing.assert_array_equal(np.sum(np.asarray(samples) == -1, axis=1), np.ones(N_CHAINS))
    np.testing.assert_allclose(lp, log_psi(downhill, samples), rtol=1e-12)


def test_exact_sampler_matches_psi_squared():
    n = 6
    params = random_params(7, n)
    for total_sz in (None, 0):
        sampler = ExactSampler(log_psi, n, total_sz=total_sz)
        states, lp, p = sampler.probabilities(params)
        ref_states, ref_p = exact_distribution(params, n, total_sz)
        order = {tuple(s): i for i, s in enumerate(ref_states)}
        perm = [order[tuple(s)] for s in np.asarray(states)]
        np.testing.assert_allclose(p, ref_p[perm], rtol=1e-10)
        state = sampler.init(jax.random.key(4))
        samples, lp_s, state2 = sampler.sample(state, params, 20000)
        np.testing.assert_allclose(lp_s, log_psi(params, samples), rtol=1e-12)
        assert chi2_pvalue(samples, params, n, total_sz) > P_MIN
        again, _, _ = sampler.sample(state, params, 20000)
        np.testing.assert_array_equal(samples, again)
        other, _, _ = sampler.sample(state2, params, 20000)
        assert not np.array_equal(samples, other)


def test_bad_arguments():
    params = random_params(0, 6)
    with pytest.raises(ValueError, match="multiple of the device count"):
        MetropolisSampler(log_psi, LocalFlip(), 12, 6).init(jax.random.key(0), params)
    sampler = MetropolisSampler(log_psi, LocalFlip(), 8, 6)
    state = sampler.init(jax.random.key(0), params)
    with pytest.raises(ValueError, match="n_samples=12 must be a multiple of n_chains=8"):
        sampler.sample(state, params, 12)
    with pytest.raises(ValueError, match="initial_states"):
        sampler.init(jax.random.key(0), params, initial_states=np.ones((8, 5), np.int8))
    with pytest.raises(ValueError, match="initial_states"):
        sampler.init(jax.random.key(0), params, initial_states=np.zeros((8, 6), np.int8))
    with pytest.raises(ValueError, match="out of range"):
        MetropolisSampler(log_psi, Exchange([(0, 6)]), 8, 6)
    with pytest.raises(ValueError, match="bonds"):
        Exchange(np.zeros((3, 3), int))
    with pytest.raises(ValueError, match="total_sz"):
        MetropolisSampler(log_psi, Exchange(Chain(5).bonds()), 8, 5, total_sz=0)  # Sz = 0 needs even N
    with pytest.raises(ValueError, match="probs"):
        Mixture([LocalFlip()], [0.5, 0.5])
    with pytest.raises(TypeError, match=r"^rule: expected a transition rule"):
        MetropolisSampler(log_psi, "flip", 8, 6)
    with pytest.raises(ValueError, match="max_states"):
        ExactSampler(log_psi, 30)


def _states_in_sector(rng, n_chains, n_sites, total_sz):
    up = n_sites // 2 + int(total_sz)
    base = np.where(np.arange(n_sites) < up, 1, -1).astype(np.int8)
    return np.stack([rng.permutation(base) for _ in range(n_chains)])


def test_initial_states_outside_the_sector_are_rejected(rng):
    params = random_params(int(rng.integers(1000)), 6)
    bonds = Chain(6).bonds()
    good = _states_in_sector(rng, 8, 6, 0)
    bad = good.copy()
    c = int(rng.integers(8))
    bad[c] = _states_in_sector(rng, 1, 6, rng.choice([-2, -1, 1, 2, 3]))[0]
    sampler = MetropolisSampler(log_psi, Exchange(bonds), 8, 6)  # total_sz=0 by default
    for arr in (bad, jnp.asarray(bad)):
        with pytest.raises(ValueError, match=rf"^initial_states: chain {c} has total_sz=-?\d(\.\d)?, the sampler's sector is total_sz=0"):
            sampler.init(jax.random.key(0), params, initial_states=arr)
    with pytest.raises(ValueError, match=r"^initial_states: chain \d has total_sz=0, the sampler's sector is total_sz=1"):
        MetropolisSampler(log_psi, Exchange(bonds, anti_aligned=True), 8, 6, total_sz=1).init(
            jax.random.key(0), params, initial_states=good)
    noisy = good.copy()
    noisy[rng.integers(8), rng.integers(6)] = rng.choice([0, 2, -3])
    for arr in (noisy, jnp.asarray(noisy)):
        with pytest.raises(ValueError, match=r"^initial_states: entries must be \+1 or -1"):
            sampler.init(jax.random.key(0), params, initial_states=arr)
    with pytest.raises(ValueError, match=r"^initial_states: expected shape \(n_chains, n_sites\) = \(8, 6\), got \(8, 5\)"):
        sampler.init(jax.random.key(0), params, initial_states=good[:, :5])
    with pytest.raises(ValueError, match=r"^initial_states: expected shape \(n_chains, n_sites\) = \(8, 6\), got \(16, 6\)"):
        sampler.init(jax.random.key(0), params, initial_states=np.concatenate([good, good]))
    # accepted: states of the sector, any states for total_sz=None or a rule that changes Sz
    for s, arr in ((sampler, good), (MetropolisSampler(log_psi, Exchange(bonds), 8, 6, total_sz=None), bad),
                   (MetropolisSampler(log_psi, LocalFlip(), 8, 6), bad)):
        state = s.init(jax.random.key(0), params, initial_states=jnp.asarray(arr))
        np.testing.assert_array_equal(np.asarray(state.states), arr)


def test_exact_sampler_has_the_driver_attributes():
    params = random_params(3, 6)
    sampler = ExactSampler(log_psi, 6, total_sz=0)
    assert sampler.n_chains == 1
    state = sampler.init(jax.random.key(0), params)
    assert state.n_accepted.shape == state.n_proposed.shape == (1,)
    assert state.states.shape == (1, 6) and int(jnp.sum(state.states)) == 0
    samples, lp, state = sampler.sample(state, params, 24)
    assert samples.shape == (24, 6) and np.all(np.asarray(samples).sum(axis=1) == 0)
    assert int(jnp.sum(state.n_proposed)) == 24 and int(jnp.sum(state.n_accepted)) == 24
    assert acceptance_rate(state) == 1.0
    assert per_chain(lp, sampler.n_chains).shape == (1, 24)
    four = ExactSampler(log_psi, 6, total_sz=0, n_chains=4)
    s4, lp4, st4 = four.sample(four.init(jax.random.key(0), params), params, 24)
    assert st4.n_proposed.tolist() == [6] * 4 and st4.n_accepted.tolist() == [6] * 4
    # the same draws whatever the number of chains
    np.testing.assert_array_equal(np.asarray(s4), np.asarray(samples))
    with pytest.raises(ValueError, match="n_samples=10 must be a multiple of n_chains=4"):
        four.sample(st4, params, 10)
    np.testing.assert_array_equal(np.asarray(st4.states), np.asarray(s4).reshape(4, 6, 6)[:, -1])
    with pytest.raises(ValueError, match=r"^n_chains: expected a positive int, got 0"):
        ExactSampler(log_psi, 6, n_chains=0)
    with pytest.raises(ValueError, match=r"^initial_states: chain 0 has total_sz=1, the sampler's sector is total_sz=0"):
        sampler.init(jax.random.key(0), params, initial_states=np.array([[1, 1, 1, 1, -1, -1]], np.int8))
    # the driver's step runs with it (as with a MetropolisSampler)
    step = jax.jit(lambda st: sampler.sample(st, params, 16))
    _, _, st = step(sampler.init(jax.random.key(1), params))
    assert int(jnp.sum(st.n_proposed)) == 16


# --------------------------------------------------------------------------- contracts


def _driver_loop(sampler, params, n_steps=3, samples_per_chain=4):
    """What a VMC driver does with a sampler, through the Sampler protocol only."""
    assert isinstance(sampler, Sampler)
    mesh = sampler.resolved_mesh()
    assert mesh is not None
    state = sampler.init(jax.random.key(0), params)
    assert isinstance(state, ChainState)
    n = sampler.n_chains * samples_per_chain
    for _ in range(n_steps):
        samples, lp, state = sampler.sample(state, params, n)
        assert samples.shape == (n, sampler.n_sites) and samples.dtype == jnp.int8
        assert set(np.unique(np.asarray(samples)).tolist()) <= {-1, 1}
        assert lp.shape == (n,)
        np.testing.assert_allclose(lp, sampler.log_psi(params, samples), rtol=1e-12)
        assert isinstance(state, ChainState)
        assert state.states.shape == (sampler.n_chains, sampler.n_sites)
        for counts in (state.n_accepted, state.n_proposed):
            assert counts.shape == (sampler.n_chains,) and counts.dtype == jnp.int32
        # chain-major: the last sample of every chain is its current configuration
        np.testing.assert_array_equal(per_chain(samples, sampler.n_chains)[:, -1], state.states)
        assert 0.0 <= acceptance_rate(state) <= 1.0
    return state


@pytest.mark.parametrize("kind", ["metropolis", "exact"])
def test_both_samplers_satisfy_the_sampler_protocol(kind):
    n = 6
    params = random_params(5, n)
    if kind == "metropolis":
        sampler = MetropolisSampler(log_psi, Exchange(Chain(n).bonds()), 8, n, n_thermalize=2)
    else:
        sampler = ExactSampler(log_psi, n, total_sz=0, n_chains=4)
    _driver_loop(sampler, params)
    assert not isinstance(LocalFlip(), Sampler) and not isinstance(log_psi, Sampler)


def test_metropolis_resolved_mesh_checks_the_chains():
    sampler = MetropolisSampler(log_psi, LocalFlip(), 12, 6)
    with pytest.raises(ValueError, match=r"^n_chains=12 must be a multiple of the device count 8"):
        sampler.resolved_mesh()
    one = make_mesh(jax.devices()[:4])
    assert MetropolisSampler(log_psi, LocalFlip(), 12, 6, mesh=one).resolved_mesh() is one
    # the exact sampler does not shard its draws by chain: any n_chains runs on the mesh
    assert ExactSampler(log_psi, 6, n_chains=3).resolved_mesh().size == 8


@pytest.mark.parametrize("rule_name", ["flip", "exchange", "anti_aligned", "mixture"])
def test_rules_satisfy_the_rule_protocol(rule_name):
    rule = make_rule(rule_name, Chain(6))
    assert isinstance(rule, TransitionRule)
    assert isinstance(rule.conserves_sz, bool) and isinstance(rule.symmetric, bool)
    assert rule.symmetric == (rule_name != "anti_aligned")
    assert rule.conserves_sz == (rule_name in ("exchange", "anti_aligned"))
    hash(rule)  # a static jit argument
    rule.check(6)
    states = random_states(jax.random.key(2), 6, 16, 0 if rule.conserves_sz else None)
    proposed, log_ratio = jax.jit(rule.propose)(jax.random.key(3), states)
    assert proposed.shape == states.shape and proposed.dtype == jnp.int8
    assert log_ratio.shape == (16,) and log_ratio.dtype == jnp.float32
    if rule.symmetric:
        assert np.all(np.asarray(log_ratio) == 0)
    if rule.conserves_sz:
        np.testing.assert_array_equal(np.sum(np.asarray(proposed), 1), np.sum(np.asarray(states), 1))


class _Stay:
    """A user rule written against the protocol only (no base class): the null move."""

    conserves_sz = True
    symmetric = True

    def check(self, n_sites):
        pass

    def propose(self, key, states):
        return states, jnp.zeros(states.shape[:1], jnp.float32)


def test_rules_are_checked_against_the_protocol():
    with pytest.raises(TypeError, match=r"^rule: expected a transition rule"):
        MetropolisSampler(log_psi, Exchange(Chain(6).bonds()).propose, 8, 6)

    class NoFlag:  # propose and check, but no symmetric flag
        conserves_sz = False

        def check(self, n_sites):
            pass

        def propose(self, key, states):
            return states, jnp.zeros(states.shape[:1], jnp.float32)

    with pytest.raises(TypeError, match=r"^rule: expected a transition rule"):
        MetropolisSampler(log_psi, NoFlag(), 8, 6)
    with pytest.raises(TypeError, match=r"^Mixture: rules\[1\] = 'flip' is not a transition rule"):
        Mixture([LocalFlip(), "flip"], [0.5, 0.5])

    class Unhashable(NoFlag):
        symmetric = True
        __hash__ = None

    with pytest.raises(TypeError, match=r"^rule: must be hashable"):
        MetropolisSampler(log_psi, Unhashable(), 8, 6)
    # a rule that only follows the protocol runs: the null move keeps every chain in place
    params = random_params(1, 6)
    sampler = MetropolisSampler(log_psi, _Stay(), 8, 6, n_thermalize=1)
    state = sampler.init(jax.random.key(0), params)
    samples, _, state2 = sampler.sample(state, params, 16)
    np.testing.assert_array_equal(state2.states, state.states)
    assert int(jnp.sum(state2.n_accepted)) == 0 and int(jnp.sum(state2.n_proposed)) == 16 * 6
    assert isinstance(Mixture([_Stay(), LocalFlip()], [0.5, 0.5]), TransitionRule)


def test_total_sz_auto_everywhere():
    """One default: 'auto' resolves from the rule (Metropolis) or to the whole space (exact)."""
    even, odd = Chain(6).bonds(), Chain(5).bonds()
    assert MetropolisSampler(log_psi, Exchange(even), 8, 6).total_sz == 0
    assert MetropolisSampler(log_psi, Exchange(odd), 8, 5).total_sz == 0.5
    assert MetropolisSampler(log_psi, Exchange(odd, anti_aligned=True), 8, 5, total_sz=-1.5).total_sz == -1.5
    assert MetropolisSampler(log_psi, LocalFlip(), 8, 6).total_sz is None
    assert MetropolisSampler(log_psi, make_rule("mixture", Chain(6)), 8, 6).total_sz is None
    assert MetropolisSampler(log_psi, Exchange(even), 8, 6, total_sz=None).total_sz is None
    # "auto" and the sector it resolves to are the same sampler (one compiled program)
    assert MetropolisSampler(log_psi, Exchange(even), 8, 6) == MetropolisSampler(log_psi, Exchange(even), 8, 6, total_sz=0)
    # odd chain, auto: every chain starts (and stays) in Sz = 1/2
    sampler = MetropolisSampler(log_psi, Exchange(odd), 8, 5, n_thermalize=1)
    params = random_params(2, 5)
    samples, _, _ = sampler.sample(sampler.init(jax.random.key(1), params), params, 16)
    assert np.all(np.asarray(samples).sum(axis=1) == 1)
    # a sector for a rule that leaves it is an error, not silently ignored
    with pytest.raises(ValueError, match=r"^total_sz: the rule LocalFlip\(\) changes Sz"):
        MetropolisSampler(log_psi, LocalFlip(), 8, 6, total_sz=0)
    with pytest.raises(ValueError, match=r"^total_sz: expected a number, None or 'auto', got 'zero'"):
        MetropolisSampler(log_psi, Exchange(even), 8, 6, total_sz="zero")
    # the exact sampler knows no Hamiltonian: "auto" is the whole space
    assert ExactSampler(log_psi, 6).total_sz is None
    assert ExactSampler(log_psi, 6).states().shape == (64, 6)
    assert ExactSampler(log_psi, 5, total_sz=0.5).states().shape == (10, 5)
    with pytest.raises(ValueError, match="total_sz"):
        ExactSampler(log_psi, 5, total_sz=0)


def test_positive_int_arguments_name_themselves():
    for kwargs, name, err in [
        (dict(n_chains=0), "n_chains", ValueError),
        (dict(n_chains=8.0), "n_chains", TypeError),
        (dict(n_sites=0), "n_sites", ValueError),
        (dict(sweep_size=0), "sweep_size", ValueError),
        (dict(chunk_size=True), "chunk_size", TypeError),
    ]:
        args = dict(log_psi=log_psi, rule=LocalFlip(), n_chains=8, n_sites=6) | kwargs
        with pytest.raises(err, match=rf"^{name}: expected a positive int, got "):
            MetropolisSampler(**args)
    with pytest.raises(ValueError, match=r"^n_thermalize: expected an int >= 0, got -1"):
        MetropolisSampler(log_psi, LocalFlip(), 8, 6, n_thermalize=-1)
    sampler = ExactSampler(log_psi, 4)
    with pytest.raises(ValueError, match=r"^n_samples: expected a positive int, got 0"):
        sampler.sample(sampler.init(jax.random.key(0)), random_params(0, 4), 0)


def test_metropolis_with_a_power_matches_psi_to_that_power():
    """MetropolisSampler(power=a) draws |psi|^(2a) (chi-square against the enumerated
    distribution); the log psi it returns is the network's, and |psi|^2 fails the test."""
    lattice = Chain(6)
    n = lattice.n_sites
    params = random_params(3, n)
    sampler = MetropolisSampler(log_psi, Exchange(lattice.bonds()), N_CHAINS, n, sweep_size=2 * n, n_thermalize=10,
                                power=0.5)
    samples, lp, _ = sampler.sample(sampler.init(jax.random.key(5), params), params, N_CHAINS * 120)
    np.testing.assert_allclose(lp, log_psi(params, samples), rtol=1e-12, atol=1e-12)
    states, p = exact_distribution(params, n, 0)
    codes = {tuple(x): i for i, x in enumerate(states)}
    counts = np.bincount([codes[tuple(x)] for x in np.asarray(samples)], minlength=len(states))
    pa = np.sqrt(p) / np.sum(np.sqrt(p))
    assert chisquare(counts, pa * counts.sum()).pvalue > P_MIN
    assert chisquare(counts, p * counts.sum()).pvalue < P_MIN


@pytest.mark.parametrize("power", [0, -0.5, 1.5, float("nan"), "half"])
def test_a_power_outside_zero_one_is_refused(power):
    with pytest.raises((ValueError, TypeError), match="power"):
        MetropolisSampler(log_psi, LocalFlip(), N_CHAINS, 4, power=power)


def test_of_psi_squared_keeps_everything_but_the_power():
    """A sampler at power 1 (or without one) is its own sampler of |psi|^2; one below 1 gives
    its copy at power 1 (the same rule, chains, sweeps) and says its chains must thermalize."""
    from quantax_lite.sampler import FullSumSampler, of_psi_squared

    low = MetropolisSampler(log_psi, LocalFlip(), 16, 6, sweep_size=3, n_thermalize=7, power=0.5)
    squared, again = of_psi_squared(low)
    assert again and squared.power == 1.0 and dataclasses.replace(squared, power=0.5) == low
    one = dataclasses.replace(low, power=1.0)
    assert of_psi_squared(one) == (one, False)
    every = FullSumSampler(log_psi, 6)
    assert of_psi_squared(every) == (every, False)


def test_draws_at_power_one_from_chains_of_a_lower_power_thermalize_them_first():
    """``draw_samples`` of a driver that trains on |psi|^(2a) draws |psi|^2 from the same
    chains: thermalized again at power 1 first, so even one sample per chain after one
    move is a sample of |psi|^2 (chi-square; before, such draws kept the broad |psi|^(2a))."""
    from types import SimpleNamespace

    from quantax_lite.driver.draws import draw_samples

    lattice = Chain(6)
    n, n_chains = lattice.n_sites, 2048
    params = random_params(3, n, scale=0.3)
    sampler = MetropolisSampler(log_psi, LocalFlip(), n_chains, n, sweep_size=1, n_thermalize=3000, power=0.1)
    _, _, chains = sampler.sample(sampler.init(jax.random.key(5), params), params, n_chains)  # at home in |psi|^0.2
    vmc = SimpleNamespace(sampler=sampler, n_samples=n_chains)
    samples, _, _, _ = draw_samples(vmc, chains, params, n_chains, local_energies=False)
    states, p = exact_distribution(params, n, None)
    codes = {tuple(x): i for i, x in enumerate(states)}
    counts = np.bincount([codes[tuple(x)] for x in np.asarray(samples)], minlength=len(states))
    big = p * n_chains > 5  # the rare states lumped into one bin
    observed = np.append(counts[big], counts[~big].sum())
    expected = np.append(p[big], p[~big].sum()) * n_chains
    assert chisquare(observed, expected).pvalue > P_MIN
    p_low = p**0.1 / np.sum(p**0.1)  # and the test can fail: the broad distribution is far from |psi|^2
    assert chisquare(observed, np.append(p_low[big], p_low[~big].sum()) * n_chains).pvalue < P_MIN
