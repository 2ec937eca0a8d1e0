"""Spin configurations: sectors, enumeration, random states, codes, validation."""
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from quantax_lite.hilbert.configurations import (
    all_states,
    codes_to_states,
    n_up,
    random_states,
    resolve_total_sz,
    sector_size,
    state_index,
    states_to_codes,
    validate_states,
)


@pytest.mark.parametrize("n_sites,total_sz", [(6, None), (6, 0), (7, 0.5), (7, -1.5), (8, 4), (5, None)])
def test_all_states_matches_itertools(n_sites, total_sz):
    states = all_states(n_sites, total_sz)
    expected = [
        c for c in itertools.product((-1, 1), repeat=n_sites) if total_sz is None or sum(c) == 2 * total_sz
    ]
    assert states.dtype == np.int8 and states.shape == (len(expected), n_sites)
    assert len(expected) == sector_size(n_sites, total_sz)
    assert {tuple(s) for s in states.tolist()} == set(expected)
    codes = states_to_codes(states)
    assert np.all(np.diff(codes) > 0)  # sorted by code, no repeats


def test_code_convention_and_roundtrip():
    s = np.array([[1, -1, -1, 1], [-1, -1, -1, -1]], np.int8)
    np.testing.assert_array_equal(states_to_codes(s), [1 + 8, 0])  # bit i set = site i up
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 2**20, 50)
    np.testing.assert_array_equal(states_to_codes(codes_to_states(codes, 20)), codes)
    basis = all_states(10, 0)
    pick = rng.integers(0, len(basis), 20)
    np.testing.assert_array_equal(state_index(basis[pick], states_to_codes(basis)), pick)
    assert state_index(np.ones((1, 10), np.int8), states_to_codes(basis))[0] == -1


def test_large_sector_enumeration_is_fast_and_right_sized():
    states = all_states(20, 0)
    assert states.shape == (math.comb(20, 10), 20)
    assert np.all(states.sum(axis=1) == 0)
    assert np.all(np.diff(states_to_codes(states)) > 0)


def test_random_states_in_sector_and_uniform():
    key = jax.random.PRNGKey(0)
    s = random_states(key, 16, 1000, total_sz=0)
    assert s.shape == (1000, 16) and s.dtype == jnp.int8
    assert np.all(np.asarray(s).sum(axis=1) == 0)
    s = random_states(key, 9, 100, total_sz=1.5)
    assert np.all(np.asarray(s).sum(axis=1) == 3)
    # uniform over the 6 states of 4 sites with Sz = 0
    s = np.asarray(random_states(jax.random.PRNGKey(1), 4, 6000, total_sz=0))
    _, counts = np.unique(states_to_codes(s), return_counts=True)
    assert len(counts) == 6 and counts.min() > 850 and counts.max() < 1150
    # unconstrained: every site a fair coin
    s = np.asarray(random_states(jax.random.PRNGKey(2), 5, 4000, total_sz=None))
    assert set(np.unique(s)) == {-1, 1}
    assert np.all(np.abs(s.mean(axis=0)) < 0.1)
    # usable inside jit
    f = jax.jit(lambda k: random_states(k, 16, 1000, 0))
    np.testing.assert_array_equal(f(key), random_states(key, 16, 1000, total_sz=0))
    # no default sector: it must be named (the old default 0 is not assumed silently)
    with pytest.raises(TypeError, match="total_sz"):
        random_states(key, 16, 1000)


def test_sector_errors():
    with pytest.raises(ValueError, match="even number of sites"):
        all_states(7, 0)
    with pytest.raises(ValueError, match="even number of sites"):
        random_states(jax.random.PRNGKey(0), 9, 4, total_sz=0)
    with pytest.raises(ValueError, match="odd number of sites"):
        n_up(6, 0.5)
    with pytest.raises(ValueError, match="multiple of 1/2"):
        n_up(6, 0.3)
    with pytest.raises(ValueError, match="total_sz"):
        n_up(6, 4)
    with pytest.raises(ValueError, match="n_sites"):
        all_states(0)
    with pytest.raises(ValueError, match=r"^n_states: expected an int >= 0, got -1"):
        random_states(jax.random.PRNGKey(0), 4, -1, None)
    with pytest.raises(TypeError, match=r"^n_states: expected an int >= 0, got 2.0"):
        random_states(jax.random.PRNGKey(0), 4, 2.0, None)
    with pytest.raises(TypeError, match=r"^n_sites: expected a positive int, got True"):
        sector_size(True, None)
    with pytest.raises(TypeError, match="total_sz"):
        n_up(6, "0")


@pytest.mark.parametrize(
    "total_sz, n_sites, conserves_sz, expected",
    [
        ("auto", 6, True, 0),  # even: Sz = 0
        ("auto", 7, True, 0.5),  # odd: the sector nearest zero
        ("auto", 6, False, None),  # dynamics that change Sz: the whole space
        ("auto", 7, False, None),
        (None, 6, True, None),
        (None, 7, False, None),
        (1, 6, True, 1),  # a number passes through, checked
        (np.float64(-1.5), 7, True, -1.5),
        (2.0, 6, False, 2),  # the resolver does not judge a sector against the dynamics
    ],
)
def test_resolve_total_sz(total_sz, n_sites, conserves_sz, expected):
    got = resolve_total_sz(total_sz, n_sites, conserves_sz)
    assert got == expected and type(got) is type(expected)
    if got is not None:
        assert n_up(n_sites, got) == n_sites // 2 + int(np.floor(got)) + (n_sites % 2)


def test_resolve_total_sz_errors():
    with pytest.raises(ValueError, match=r"^total_sz: expected a number, None or 'auto', got 'zero'"):
        resolve_total_sz("zero", 6, True)
    with pytest.raises(ValueError, match="total_sz.*even number of sites"):
        resolve_total_sz(0, 7, True)
    with pytest.raises(ValueError, match="total_sz"):
        resolve_total_sz(4, 6, True)
    with pytest.raises(TypeError, match="total_sz"):
        resolve_total_sz(True, 6, True)
    with pytest.raises(ValueError, match="n_sites"):
        resolve_total_sz("auto", 0, True)
    with pytest.raises(TypeError, match="conserves_sz"):
        resolve_total_sz("auto", 6, "yes")


def test_validate_states():
    good = np.array([[1, -1, 1, -1]], np.int8)
    assert validate_states(good, 4).dtype == np.int8
    assert validate_states(jnp.asarray(good, jnp.int32), 4).dtype == jnp.int8
    with pytest.raises(ValueError, match="4 sites"):
        validate_states(np.ones((2, 5), np.int8), 4)
    with pytest.raises(ValueError, match=r"\+1 or -1"):
        validate_states(np.array([[1, 0, 1, -1]]), 4)
    with pytest.raises(ValueError, match=r"\+1 or -1"):
        validate_states(jnp.array([[1, 2, 1, -1]]), 4)
    with pytest.raises(ValueError, match="shape"):
        validate_states(np.ones((2, 2, 4), np.int8), 4)
    with pytest.raises(TypeError, match="dtype"):
        validate_states(np.ones((2, 4), bool), 4)
    with pytest.raises(ValueError, match="samples"):
        validate_states(np.ones((2, 3), np.int8), 4, name="samples")
