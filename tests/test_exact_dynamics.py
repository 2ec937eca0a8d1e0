"""The sparse exact propagator (quantax_lite.exact.exact_evolution) and expectation values
along its trajectories, against dense matrix exponentials."""
import numpy as np
import pytest
import scipy.linalg

from quantax_lite.exact import exact_evolution, exact_observables, ground_state
from quantax_lite.hilbert.configurations import all_states
from quantax_lite.geometry.lattice import Chain
from quantax_lite.operators.hamiltonian import Heisenberg, TransverseFieldIsing
from quantax_lite.operators.local_operators import sx, sz


def _random_vector(rng, n):
    return rng.standard_normal(n) + 1j * rng.standard_normal(n)


@pytest.mark.parametrize("model", ["tfim", "heisenberg"])
def test_real_time_matches_dense_expm(rng, model):
    if model == "tfim":
        ham, total_sz = TransverseFieldIsing(Chain(6), h=float(rng.uniform(0.3, 1.5))), None
    else:
        ham, total_sz = Heisenberg(Chain(8), J2=float(rng.uniform(0, 0.5))), 0
    states = all_states(ham.n_sites, total_sz)
    psi0 = _random_vector(rng, len(states))
    times = np.sort(rng.uniform(0, 3, size=5))
    vectors, basis = exact_evolution(ham, psi0, times, total_sz=total_sz)
    assert vectors.shape == (5, len(states)) and np.array_equal(basis, states)
    H = ham.to_dense(states)
    unit = psi0 / np.linalg.norm(psi0)
    for t, v in zip(times, vectors):
        exact = scipy.linalg.expm(-1j * t * H) @ unit
        assert np.max(np.abs(v - exact)) < 1e-11
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-12)


def test_imaginary_time_matches_dense_expm_and_reaches_the_ground_state(rng):
    ham = TransverseFieldIsing(Chain(6), h=1.5)  # paramagnetic: gapped
    states = all_states(6, None)
    psi0 = _random_vector(rng, len(states))
    times = [0.0, 0.5, 2.0, 30.0]
    vectors, _ = exact_evolution(ham, psi0, times, imaginary=True)
    H = ham.to_dense(states)
    for t, v in zip(times[:3], vectors):
        exact = scipy.linalg.expm(-t * H) @ psi0
        exact /= np.linalg.norm(exact)
        assert np.max(np.abs(v - exact)) < 1e-11
    e0, _, _ = ground_state(ham)
    energies = exact_observables({"H": ham}, vectors, states)["H"]
    assert np.all(np.diff(energies) < 0)
    assert abs(energies[-1] - e0) < 1e-10


def test_observables_along_a_trajectory(rng):
    ham = TransverseFieldIsing(Chain(6), h=1.0)
    states = all_states(6, None)
    psi0 = np.ones(len(states))  # every spin along +x
    times = np.linspace(0, 2, 9)
    vectors, basis = exact_evolution(ham, psi0, times)
    H = ham.to_dense(states)
    sx_total = sum(sx(i, 6) for i in range(6))
    values = exact_observables(
        {"energy": ham, "sx": sx_total, "sz0_diag": lambda s: s[:, 0] / 2, "dense": H,
         "sparse": ham.to_sparse(states), "diag": states[:, 1] / 2.0, "sz0": sz(0, 6)},
        vectors, basis,
    )
    assert values["energy"].dtype == np.float64
    assert np.allclose(values["energy"], values["energy"][0], atol=1e-10)  # conserved
    assert np.allclose(values["energy"], values["dense"]) and np.allclose(values["energy"], values["sparse"])
    assert abs(values["sx"][0] - 3.0) < 1e-12  # spin-1/2 units: 6 x 1/2
    assert np.allclose(values["sz0_diag"], values["sz0"], atol=1e-12)
    assert np.allclose(values["diag"], 0, atol=1e-12)  # Z2 symmetry of the x-polarized start
    # a non-Hermitian observable stays complex
    assert np.iscomplexobj(exact_observables({"s+": sx(0, 6) + 1j * sz(0, 6)}, vectors, basis)["s+"])


def test_bad_inputs_name_the_argument():
    ham = TransverseFieldIsing(Chain(4), h=1.0)
    psi0 = np.ones(16)
    with pytest.raises(ValueError, match="^times:"):
        exact_evolution(ham, psi0, [1.0, 0.5])
    with pytest.raises(ValueError, match="^times:"):
        exact_evolution(ham, psi0, [-1.0])
    with pytest.raises(ValueError, match="^times:"):
        exact_evolution(ham, psi0, [])
    with pytest.raises(ValueError, match="^psi0:"):
        exact_evolution(ham, np.ones(8), [1.0])
    with pytest.raises(ValueError, match="^psi0:"):
        exact_evolution(ham, np.zeros(16), [1.0])
    with pytest.raises(TypeError, match="^hamiltonian:"):
        exact_evolution("tfim", psi0, [1.0])
    with pytest.raises(TypeError, match="^imaginary:"):
        exact_evolution(ham, psi0, [1.0], imaginary="yes")
    with pytest.raises(ValueError, match="^total_sz:"):
        exact_evolution(ham, psi0, [1.0], total_sz=0)
    vectors, basis = exact_evolution(ham, psi0, [0.0, 1.0])
    with pytest.raises(ValueError, match="^vectors:"):
        exact_observables({"H": ham}, vectors[:, :8], basis)
    with pytest.raises(ValueError, match=r"^observables\['d'\]:"):
        exact_observables({"d": np.ones(3)}, vectors, basis)
    with pytest.raises(TypeError, match="^observables:"):
        exact_observables([ham], vectors, basis)
