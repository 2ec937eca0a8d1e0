"""Exact diagonalization: reference energies, free fermions, Marshall sign, exact expectations."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from quantax_lite.exact.diagonalization import (
    exact_expectation,
    exact_probabilities,
    ground_state,
    ground_state_energy,
    resolve_total_sz,
    sector_basis,
    sector_projector,
)
from quantax_lite.hilbert.configurations import all_states, states_to_codes
from quantax_lite.geometry.lattice import Chain, Square
from quantax_lite.operators.hamiltonian import Heisenberg, TransverseFieldIsing, marshall_sign
from quantax_lite.geometry.symmetry import full_symmetry, translations

# DESIGN.md reference table (spin-1/2 units, periodic boundaries)
REFERENCE = {
    "chain16": -7.1422963606,
    "chain20": -8.9043865299,
    "4x4": -11.2284832084,
    "4x4-J2=0.5": -8.4579233514,
}
TFIM_L20_PER_SITE = -1.2745494843  # Pauli units, h = J = 1


def free_fermion_tfim(L, J, h):
    """Ground-state energy of -J sum zz - h sum x on a ring of L sites (Pauli units).

    Jordan-Wigner + Bogoliubov: single-particle energies 2 sqrt(J^2 + h^2 - 2 J h cos k);
    the ground state lies in the even-parity sector, with antiperiodic momenta
    k = (2m + 1) pi / L, and E_0 = -sum_k sqrt(J^2 + h^2 - 2 J h cos k).
    """
    k = (2 * np.arange(L) + 1) * np.pi / L
    return -np.sum(np.sqrt(J**2 + h**2 - 2 * J * h * np.cos(k)))


@pytest.fixture(scope="module")
def heisenberg_4x4():
    return ground_state(Heisenberg(Square(4)))


def test_reference_energies(heisenberg_4x4):
    e, v, states = ground_state(Heisenberg(Chain(16)))
    assert abs(e - REFERENCE["chain16"]) < 1e-8
    assert states.shape == (12870, 16)
    e, v, states = heisenberg_4x4
    assert abs(e - REFERENCE["4x4"]) < 1e-8
    assert abs(e / 16 - (-0.70178020)) < 1e-8
    e = ground_state_energy(Heisenberg(Square(4), J2=0.5))
    assert abs(e - REFERENCE["4x4-J2=0.5"]) < 1e-8


@pytest.mark.slow
def test_reference_energy_chain20():
    assert abs(ground_state_energy(Heisenberg(Chain(20))) - REFERENCE["chain20"]) < 1e-8


def test_ising_against_free_fermions():
    for J, h in ((1.0, 1.0), (1.0, 0.5), (0.8, 1.7)):
        e = ground_state_energy(TransverseFieldIsing(Chain(12), J=J, h=h))
        assert abs(e - free_fermion_tfim(12, J, h)) < 1e-8
    # the formula reproduces DESIGN.md's L = 20 row (its ED needs 2**20 states: too slow here)
    assert abs(free_fermion_tfim(20, 1.0, 1.0) / 20 - TFIM_L20_PER_SITE) < 1e-10


def test_ground_state_is_an_eigenvector(heisenberg_4x4):
    e, v, states = heisenberg_4x4
    H = Heisenberg(Square(4)).to_sparse(states)
    assert v.shape == (12870,) and abs(np.linalg.norm(v) - 1) < 1e-12
    assert np.linalg.norm(H @ v - e * v) < 1e-8
    # several eigenpairs, ascending, against dense diagonalization
    ham = Heisenberg(Chain(10), J2=0.3)
    w, V, states = ground_state(ham, k=4)
    dense = np.linalg.eigvalsh(ham.to_dense(states))
    np.testing.assert_allclose(w, dense[:4], atol=1e-10)
    assert V.shape == (len(states), 4)
    # the sparse path (dimension above the dense limit) agrees with dense eigh
    ham = Heisenberg(Chain(12), J2=0.2)  # 924 states
    w, V, states = ground_state(ham, k=3)
    np.testing.assert_allclose(w, np.linalg.eigvalsh(ham.to_dense(states))[:3], atol=1e-10)


def test_marshall_ground_state_is_positive(heisenberg_4x4):
    lattice = Square(4)
    e, v, states = ground_state(Heisenberg(lattice, marshall_sign=True))
    e0, v0, _ = heisenberg_4x4
    assert abs(e - e0) < 1e-10  # same spectrum
    v = v * np.sign(v[0])
    assert np.all(v > 1e-12)  # Marshall: sign-free on a bipartite lattice
    # and it is the plain ground state times the Marshall sign
    u = marshall_sign(lattice, states)
    assert abs(abs(np.dot(u * v0, v)) - 1) < 1e-10
    # J1-J2: still the same spectrum, but no longer sign-free
    ham, ham_m = Heisenberg(Chain(12), J2=0.5), Heisenberg(Chain(12), J2=0.5, marshall_sign=True)
    w, _, _ = ground_state(ham, k=3)
    wm, vm, _ = ground_state(ham_m, k=3)
    np.testing.assert_allclose(w, wm, atol=1e-10)


def test_symmetry_sectors(heisenberg_4x4):
    lattice = Square(4)
    sym = full_symmetry(lattice)
    e, v, states = ground_state(Heisenberg(lattice), symmetry=sym)
    assert abs(e - heisenberg_4x4[0]) < 1e-10  # the ground state is fully symmetric
    Q = sector_basis(sym, states)
    assert Q.shape[0] == 12870 and Q.shape[1] < 12870 // 100
    np.testing.assert_allclose((Q.conj().T @ Q).toarray(), np.eye(Q.shape[1]), atol=1e-12)
    P = sector_projector(sym, states)
    np.testing.assert_allclose(P @ v, v, atol=1e-12)
    assert abs(P.diagonal().sum().real - Q.shape[1]) < 1e-9
    # a complex momentum sector: the energies of all sectors together are the spectrum
    chain = Chain(6)
    ham = Heisenberg(chain, J2=0.2)
    states = all_states(6, 0)
    full = np.linalg.eigvalsh(ham.to_dense(states))
    parts = []
    for m in range(6):
        T = translations(chain, (2 * np.pi * m / 6,))
        Q = sector_basis(T, states)
        Hk = (Q.conj().T @ ham.to_sparse(states) @ Q).toarray()
        np.testing.assert_allclose(Hk, Hk.conj().T, atol=1e-12)
        parts.append(np.linalg.eigvalsh(Hk))
    np.testing.assert_allclose(np.sort(np.concatenate(parts)), full, atol=1e-10)


def test_exact_expectation_and_probabilities():
    ham = Heisenberg(Chain(8), J2=0.3)
    key = jax.random.PRNGKey(4)
    params = {"a": jax.random.normal(key, (8,)), "b": jax.random.normal(jax.random.split(key)[0], (8,))}

    def log_psi(p, s):
        s = s.astype(jnp.float64)
        return s @ p["a"] * 0.3 + 1j * (s @ p["b"]) + 0.1 * (s[:, 0] * s[:, 1])

    states = all_states(8, 0)
    psi = np.exp(np.asarray(log_psi(params, jnp.asarray(states))))
    H = ham.to_dense(states)
    expected = np.vdot(psi, H @ psi).real / np.vdot(psi, psi).real
    assert abs(exact_expectation(ham, log_psi, params) - expected) < 1e-12
    p = exact_probabilities(log_psi, params, states)
    np.testing.assert_allclose(p, np.abs(psi) ** 2 / np.sum(np.abs(psi) ** 2), rtol=1e-12)
    # the exact ground state as a log_psi (a lookup table by code) gives the ground-state energy
    e, v, states = ground_state(ham)
    codes = jnp.asarray(states_to_codes(states))
    table = jnp.log(jnp.asarray(v, dtype=jnp.complex128))

    def log_gs(p, s):
        c = jnp.sum((s > 0).astype(jnp.int64) * (2 ** jnp.arange(8)), axis=-1)
        return p[jnp.searchsorted(codes, c)]

    assert abs(exact_expectation(ham, log_gs, table) - e) < 1e-10
    # a non-jittable log_psi (a Python dictionary) with jit=False
    lookup = {tuple(s): np.log(complex(x)) for s, x in zip(states.tolist(), v)}

    def log_dict(_, s):
        return np.array([lookup[tuple(r)] for r in np.asarray(s).tolist()])

    assert abs(exact_expectation(ham, log_dict, None, jit=False) - e) < 1e-10
    np.testing.assert_allclose(exact_probabilities(log_dict, None, states, jit=False), np.abs(v) ** 2, atol=1e-14)
    # overflow-safe: a huge constant in log psi changes nothing
    big = exact_expectation(ham, lambda p, s: log_psi(p, s) + 800.0, params)
    assert abs(big - expected) < 1e-10


def test_bad_input():
    with pytest.raises(ValueError, match="even number of sites"):
        ground_state(Heisenberg(Chain(7)), total_sz=0)
    # "auto" on an odd number of sites: Sz = 1/2, which holds a ground state of the
    # (SU(2)-symmetric) Heisenberg chain: the energy of the whole space
    e_auto, _, states = ground_state(Heisenberg(Chain(7)))
    assert states.shape == (35, 7) and np.all(states.sum(axis=1) == 1)
    assert abs(e_auto - ground_state_energy(Heisenberg(Chain(7)), total_sz=None)) < 1e-10
    assert ground_state(TransverseFieldIsing(Chain(7)))[2].shape == (128, 7)  # no Sz: the whole space
    with pytest.raises(ValueError, match="does not conserve Sz"):
        ground_state(TransverseFieldIsing(Chain(6)), total_sz=0)
    with pytest.raises(ValueError, match=r"^k: expected a positive int, got 0"):
        ground_state(Heisenberg(Chain(4)), k=0)
    with pytest.raises(ValueError, match=r"^k: expected an int in \[1, 6\], got 7"):
        ground_state(Heisenberg(Chain(4)), k=7)
    with pytest.raises(ValueError, match="total_sz"):
        ground_state(Heisenberg(Chain(4)), total_sz="zero")
    with pytest.raises(TypeError, match="hamiltonian"):
        ground_state("heisenberg")
    with pytest.raises(ValueError, match="acts on"):
        ground_state(Heisenberg(Chain(4)), symmetry=translations(Chain(6)))


def test_symmetry_of_another_lattice_is_rejected():
    with pytest.raises(ValueError, match=r"^symmetry: built for the lattice 2x4, the Hamiltonian's lattice is chain:8"):
        ground_state(Heisenberg(Chain(8)), symmetry=translations(Square(2, 4)))
    with pytest.raises(ValueError, match=r"^symmetry: built for the lattice 4x2, the Hamiltonian's lattice is 2x4"):
        ground_state_energy(TransverseFieldIsing(Square(2, 4)), total_sz=None, symmetry=full_symmetry(Square(4, 2)))
    # the group of the Hamiltonian's own lattice (or an equal copy of it) is accepted
    e = ground_state_energy(Heisenberg(Chain(8)), symmetry=translations(Chain(8)))
    assert abs(e - ground_state_energy(Heisenberg(Chain(8)))) < 1e-10


def test_resolve_total_sz_follows_the_hamiltonian():
    """exact's sector: hilbert's resolver with the Hamiltonian's n_sites and conserves_sz."""
    assert resolve_total_sz(Heisenberg(Chain(6)), "auto") == 0
    assert resolve_total_sz(Heisenberg(Chain(7)), "auto") == 0.5
    assert resolve_total_sz(TransverseFieldIsing(Chain(6)), "auto") is None
    assert resolve_total_sz(TransverseFieldIsing(Chain(6)), None) is None
    assert resolve_total_sz(Heisenberg(Chain(6)), 1.0) == 1
    with pytest.raises(ValueError, match=r"^total_sz: TransverseFieldIsing does not conserve Sz"):
        resolve_total_sz(TransverseFieldIsing(Chain(6)), 1)
    with pytest.raises(ValueError, match=r"^total_sz: \|total_sz\| must be <= n_sites/2"):
        resolve_total_sz(Heisenberg(Chain(6)), 4)
