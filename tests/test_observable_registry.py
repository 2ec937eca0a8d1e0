"""The observable contract: an observable registered in this file (the nearest-neighbour
bond ``<S^z_0 S^z_1>`` and ``<S_0 . S_1>``, its off-diagonal part from the shared ratio
program) is reported by ``measure``, equal to exact sums over every configuration (a
random complex wavefunction) and to the ED ground state of the Heisenberg chain
(``<S_0 . S_1> = E_0 / N``, ``<S^z_0 S^z_1> = E_0 / 3N``); the registry's errors name
their argument; the built-in observables are registered in the order of measure's dict."""
import json

import jax.numpy as jnp
import numpy as np
import pytest

from quantax_lite import Heisenberg
from quantax_lite.exact.diagonalization import ground_state
from quantax_lite.hilbert.configurations import all_states, states_to_codes
from quantax_lite.geometry.lattice import Chain
from quantax_lite.observables import (
    Observable, Part, measure, observable_names, register_observable, unregister_observable,
)
from quantax_lite.observables.ratios import pairs_spec
from quantax_lite.operators.local_operators import spin_dot, sz

BUILT_IN = ("energy", "spin_correlations", "sz_correlations", "correlation_vs_distance", "structure_factor",
            "staggered_magnetization", "sz_moments", "dimer_correlations")


def _bond_specs(inputs):
    return (pairs_spec(inputs.n_sites),)  # S_i . S_j for i < j: pair (0, 1) is the first column


def _bond_evaluate(inputs, values):
    (pairs,) = values
    s = inputs.spins
    return Part(np.stack([s[:, 0] * s[:, 1] / 4, pairs[:, 0]], axis=1))


def _bond_finish(inputs, stats, state):
    return {"bond_01": {"zz": float(stats.mean[0]), "zz_error": float(stats.error[0]),
                        "dot": float(stats.mean[1]), "dot_error": float(stats.error[1])}}


BOND = Observable("bond_01", _bond_evaluate, _bond_finish, _bond_specs)


@pytest.fixture
def bond():
    register_observable(BOND)
    try:
        yield BOND
    finally:
        unregister_observable(BOND.name)


def _random_wavefunction(n, seed):
    rng = np.random.default_rng(seed)
    a = jnp.asarray(rng.normal(size=(n,)) * 0.3)
    b = jnp.asarray(rng.normal(size=(n, n)) * 0.4)

    def log_psi(params, s):
        s = s.astype(jnp.float64)
        return s @ params[0] + 1j * jnp.sum(jnp.cos(s @ params[1]), -1)

    return log_psi, (a, b)


def _exact(operator, states, vector):
    v = vector / np.linalg.norm(vector)
    return float(np.real(np.conj(v) @ (operator.to_sparse(states) @ v)))


def test_a_registered_observable_is_measured_exactly(bond):
    lattice = Chain(6)
    n = lattice.n_sites
    assert observable_names() == BUILT_IN + ("bond_01",)
    log_psi, params = _random_wavefunction(n, 3)
    states = all_states(n)
    psi = np.exp(np.asarray(log_psi(params, states)))
    m = measure(log_psi, params, states, lattice, weights=np.abs(psi) ** 2)
    json.dumps(m, allow_nan=False)
    assert list(m)[-1] == "bond_01"
    zz_ref = _exact(sz(0, n) @ sz(1, n), states, psi)
    dot_ref = _exact(spin_dot(0, 1, n), states, psi)
    assert abs(dot_ref - zz_ref) > 1e-3  # the off-diagonal part counts
    assert m["bond_01"]["zz"] == pytest.approx(zz_ref, abs=1e-10)
    assert m["bond_01"]["dot"] == pytest.approx(dot_ref, abs=1e-10)
    assert m["bond_01"]["zz_error"] == 0 and m["bond_01"]["dot_error"] == 0  # exact mode
    # the built-in entries agree with it: the same pair column, the same diagonal
    assert m["spin_correlations"]["mean"][0][1] == pytest.approx(dot_ref, abs=1e-10)
    assert m["sz_correlations"]["mean"][0][1] == pytest.approx(zz_ref, abs=1e-10)


def test_a_registered_observable_on_the_heisenberg_ground_state(bond):
    lattice = Chain(8)
    n = lattice.n_sites
    e0, v, states = ground_state(Heisenberg(lattice))  # ED in the Sz = 0 sector
    codes = jnp.asarray(states_to_codes(states))
    amp = jnp.asarray(np.log(np.abs(v)) + 1j * np.pi * (v < 0))
    bits = jnp.asarray(1 << np.arange(n, dtype=np.int64))

    def log_psi(params, s):  # the ground-state vector as a table, -inf outside the sector
        c = (s > 0).astype(jnp.int64) @ bits
        idx = jnp.clip(jnp.searchsorted(codes, c), 0, len(codes) - 1)
        return jnp.where(codes[idx] == c, amp[idx], -jnp.inf)

    m = measure(log_psi, None, states, lattice, weights=v**2, observables=["bond_01", "energy"],
                hamiltonian=Heisenberg(lattice))
    assert [k for k in m if k in ("energy", "bond_01", "spin_correlations")] == ["energy", "bond_01"]
    assert m["energy"]["mean"] == pytest.approx(e0, abs=1e-9)
    assert m["bond_01"]["dot"] == pytest.approx(e0 / n, abs=1e-9)  # translation invariance
    assert m["bond_01"]["zz"] == pytest.approx(e0 / (3 * n), abs=1e-9)  # SU(2) invariance
    assert m["bond_01"]["dot"] == pytest.approx(_exact(spin_dot(0, 1, n), states, v), abs=1e-9)


def test_a_registered_observable_from_monte_carlo_samples(bond):
    lattice = Chain(6)
    log_psi, params = _random_wavefunction(lattice.n_sites, 5)
    samples = all_states(6)[np.random.default_rng(0).integers(0, 64, 128)]
    m = measure(log_psi, params, samples, lattice, n_chains=4, observables=("bond_01", "spin_correlations"))
    assert m["bond_01"]["dot"] == pytest.approx(m["spin_correlations"]["mean"][0][1], abs=1e-12)
    assert m["bond_01"]["dot_error"] == pytest.approx(m["spin_correlations"]["error"][0][1], abs=1e-12)
    assert m["bond_01"]["zz_error"] > 0


def test_the_registry_refuses_bad_observables(bond):
    with pytest.raises(ValueError, match="observable: the name 'bond_01'"):
        register_observable(BOND)
    with pytest.raises(TypeError, match="observable: expected an Observable"):
        register_observable("bond_01")
    with pytest.raises(ValueError, match="name: expected a non-empty string"):
        Observable("", _bond_evaluate, _bond_finish)
    with pytest.raises(TypeError, match="finish: expected a function"):
        Observable("x", _bond_evaluate, None)
    with pytest.raises(ValueError, match="name: no observable 'nothing'"):
        unregister_observable("nothing")
    lattice = Chain(4)
    log_psi, params = _random_wavefunction(4, 1)
    states = all_states(4)
    with pytest.raises(ValueError, match="observables: \\['nothing'\\] not registered"):
        measure(log_psi, params, states, lattice, observables=["nothing"])


def test_measure_refuses_an_observable_that_breaks_the_contract():
    lattice = Chain(4)
    log_psi, params = _random_wavefunction(4, 1)
    states = all_states(4)
    wrong_rows = Observable("wrong_rows", lambda inputs, values: Part(np.zeros((3, 1))), _bond_finish)
    twice = Observable("twice", lambda inputs, values: Part(np.zeros((16, 0))), lambda i, s, st: {"sz": 0})
    for obs, match in ((wrong_rows, "'wrong_rows'.evaluate returned columns of shape \\(3, 1\\)"),
                       (twice, "'twice' reports \\['sz'\\], reported already")):
        register_observable(obs)
        try:
            with pytest.raises(ValueError, match=match):
                measure(log_psi, params, states, lattice)
        finally:
            unregister_observable(obs.name)
    assert observable_names() == BUILT_IN
