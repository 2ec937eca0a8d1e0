"""Local spin operators: the algebra against Kronecker products of 2x2 matrices, the
Hamiltonian contract (to_dense, local energies), and bad input."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from quantax_lite import Heisenberg
from quantax_lite.utils import tuning
from quantax_lite.hilbert.configurations import all_states, states_to_codes
from quantax_lite.geometry.lattice import Chain, Square
from quantax_lite.operators.hamiltonian import local_energy
from quantax_lite.operators.local_operators import (
    LocalOperator, bond_sum, identity, sm, sp, spin_dot, spin_dot_sum, sx, sy, sz, total_sz,
)

# ----------------------------------------------------------------- dense references
# single-site basis (down, up) = (0, 1), so the Kronecker index is the code of hilbert.py
SP = np.array([[0, 0], [1, 0]], dtype=complex)  # S+ = |up><down|
SM = SP.T.copy()
SX = (SP + SM) / 2
SY = (SP - SM) / 2j
SZ = np.diag([-0.5, 0.5]).astype(complex)
DENSE = {sx: SX, sy: SY, sz: SZ, sp: SP, sm: SM}


def site_op(m, i, n):
    """The 2x2 matrix ``m`` on site ``i`` of ``n`` (site n-1 is the first Kronecker factor)."""
    out = np.ones((1, 1), dtype=complex)
    for site in range(n - 1, -1, -1):
        out = np.kron(out, m if site == i else np.eye(2))
    return out


def random_polynomial(rng, n, n_terms=4, max_len=3):
    """A random sum of products of single-site operators (same sites allowed), and its matrix."""
    op, mat = LocalOperator(n), np.zeros((2**n, 2**n), complex)
    fns = list(DENSE)
    for _ in range(n_terms):
        c = complex(rng.normal(), rng.normal())
        term, tmat = identity(n), np.eye(2**n, dtype=complex)
        for _ in range(rng.integers(1, max_len + 1)):
            f, i = fns[rng.integers(len(fns))], int(rng.integers(n))
            term, tmat = term @ f(i, n), tmat @ site_op(DENSE[f], i, n)
        op, mat = op + c * term, mat + c * tmat
    return op, mat


def test_single_site_operators_and_spin_algebra():
    n = 3
    states = all_states(n)
    for f, m in DENSE.items():
        for i in range(n):
            np.testing.assert_allclose(f(i, n).to_dense(states), site_op(m, i, n), atol=1e-14)
    # exact same-site reductions (no identity expanded): S^a_i S^a_i = 1/4, S+ S+ = 0, S_i . S_i = 3/4
    for f in (sx, sy, sz):
        assert (f(1, n) @ f(1, n)).terms == {(): 0.25}
    assert (sp(0, n) @ sp(0, n)).terms == {}
    assert spin_dot(2, 2, n).terms == {(): 0.75}
    # [S^x, S^y] = i S^z and S+ = S^x + i S^y, written with the operators' algebra
    comm = sx(0, n) * sy(0, n) - sy(0, n) * sx(0, n)
    np.testing.assert_allclose(comm.to_dense(states), 1j * sz(0, n).to_dense(states), atol=1e-14)
    assert (sp(1, n) - (sx(1, n) + 1j * sy(1, n))).terms == {}
    assert (sp(0, n) @ sm(0, n) - sm(0, n) @ sp(0, n) - 2 * sz(0, n)).terms == {}


def test_algebra_matches_kronecker_products(rng):
    n = 4
    states = all_states(n)
    for _ in range(2):
        a, A = random_polynomial(rng, n)
        b, B = random_polynomial(rng, n)
        c = complex(rng.normal(), rng.normal())
        cases = [
            (a, A), (a + b, A + B), (a - b, A - B), (-a, -A), (a @ b, A @ B), (a * b, A @ B),
            (c * a, c * A), (a * c, c * A), (a / c, A / c), (a + c, A + c * np.eye(16)),
            (c - a, c * np.eye(16) - A), (a.dagger(), A.conj().T), (a @ b @ a, A @ B @ A),
        ]
        for op, ref in cases:
            np.testing.assert_allclose(op.to_dense(states), ref, atol=1e-12)
        # connected() (jax) gives the same matrix elements as the numpy to_dense
        for op, ref in cases[4:6]:
            s_conn, mels = jax.jit(op.connected)(jnp.asarray(states))
            rebuilt = np.zeros_like(ref)
            for k in range(op.max_conn):
                np.add.at(rebuilt, (np.arange(16), states_to_codes(np.asarray(s_conn[:, k]))), np.asarray(mels[:, k]))
            np.testing.assert_allclose(rebuilt, ref, atol=1e-12)
            np.testing.assert_allclose(np.asarray(op.diagonal(states)), np.diag(ref), atol=1e-12)
        # conserves_sz: the operator commutes with the total S^z exactly when it says so
        Sz = total_sz(n).to_dense(states)
        for op, ref in ((a, A), (spin_dot(0, 2, n) * c + sz(1, n), None)):
            ref = op.to_dense(states) if ref is None else ref
            if op.conserves_sz:
                np.testing.assert_allclose(ref @ Sz - Sz @ ref, 0, atol=1e-12)
    assert spin_dot(0, 2, n).conserves_sz and not sx(0, n).conserves_sz


def test_the_hamiltonian_contract_and_local_energies(rng):
    lat = Square(2, 3)
    n = lat.n_sites
    states = all_states(n)
    op = spin_dot_sum(lat) + 0.3 * bond_sum(lat, 2, sz) - 0.7j * sx(2, lat) @ sy(4, lat)
    dense = np.zeros((2**n, 2**n), complex)
    for i, j in lat.bonds(1):
        for m in (SX, SY, SZ):
            dense += site_op(m, i, n) @ site_op(m, j, n)
    for i, j in lat.bonds(2):
        dense += 0.3 * site_op(SZ, i, n) @ site_op(SZ, j, n)
    dense += -0.7j * site_op(SX, 2, n) @ site_op(SY, 4, n)
    np.testing.assert_allclose(op.to_dense(states), dense, atol=1e-12)
    # the Heisenberg model is the nearest-neighbour sum of S_i . S_j
    np.testing.assert_allclose(spin_dot_sum(lat).to_dense(states), Heisenberg(lat).to_dense(states), atol=1e-12)
    # connected(): shapes, slot 0 is s, jittable
    s_conn, mels = jax.jit(op.connected)(jnp.asarray(states[:5]))
    assert s_conn.shape == (5, op.max_conn, n) and s_conn.dtype == jnp.int8 and mels.shape == (5, op.max_conn)
    np.testing.assert_array_equal(np.asarray(s_conn[:, 0]), states[:5])
    # local energies through the library's engine, for a random complex wavefunction
    w = jnp.asarray(rng.normal(size=n) * 0.5 + 1j * rng.normal(size=n) * 0.5)

    def log_psi(p, s):
        return s.astype(jnp.complex128) @ p

    psi = np.exp(states @ np.asarray(w))
    with tuning.override(pack_local_energy=False):  # (packing: tests/test_operators.py)
        got = local_energy(op, log_psi, w, states, chunk_size=8)
    np.testing.assert_allclose(np.asarray(got), dense @ psi / psi, rtol=1e-10, atol=1e-10)


def test_bad_input():
    with pytest.raises(ValueError, match=r"i: site 4 is out of range for n_sites=4"):
        sz(4, 4)
    with pytest.raises(ValueError, match="site -1"):
        sx(-1, Chain(4))
    with pytest.raises(TypeError, match="i: expected a site index"):
        sy(1.0, 4)
    with pytest.raises(ValueError, match=r"different n_sites \(4 and 5\)"):
        sz(0, 4) @ sz(0, 5)
    with pytest.raises(ValueError, match="different n_sites"):
        sz(0, 4) + sx(1, 6)
    with pytest.raises(TypeError, match="n_sites"):
        sz(0, 2.5)
    with pytest.raises(TypeError, match="lattice"):
        spin_dot_sum(4)
