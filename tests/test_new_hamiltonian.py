"""A newcomer's Hamiltonian, written through the public contract only (``connected``,
``max_conn``, ``conserves_sz``, ``n_sites``; no bond helper), checked against an
independent dense exact diagonalization and trained with an RBM to its ground state."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from quantax_lite import ExactSampler, jacobian, make_rbm_nqs, statistics
from quantax_lite.utils import tuning
from quantax_lite.exact.diagonalization import exact_expectation, ground_state_energy
from quantax_lite.hilbert.configurations import all_states, states_to_codes
from quantax_lite.geometry.lattice import Chain
from quantax_lite.operators.hamiltonian import SpinHamiltonian, local_energy, make_local_energy
from quantax_lite.optimizer.stochastic_reconfiguration import sr_direction, unravel_like


# ---- the new Hamiltonian: 22 lines (25 with the blank ones), everything it needs
@dataclasses.dataclass(frozen=True)
class StaggeredXXZ(SpinHamiltonian):
    """Periodic XXZ chain in a staggered field (spin-1/2 units; Marshall basis, n even):
    H = sum_i [delta S^z_i S^z_i+1 - (S^x_i S^x_i+1 + S^y_i S^y_i+1)] - h sum_i (-1)^i S^z_i."""

    n_sites: int
    delta: float = 0.5
    h: float = 0.4
    conserves_sz = True

    @property
    def max_conn(self):
        return 1 + self.n_sites  # the diagonal, then the exchange on bond (i, i + 1)

    def connected(self, s):
        s = jnp.asarray(s, jnp.int8)
        i = np.arange(self.n_sites)
        j = (i + 1) % self.n_sites
        sf = s.astype(jnp.result_type(float))
        diag = self.delta / 4 * jnp.sum(sf[..., i] * sf[..., j], -1) - self.h / 2 * (sf @ (-1.0) ** i)
        flip = np.ones((self.n_sites, self.n_sites), np.int8)
        flip[i, i] = flip[i, j] = -1
        mel = jnp.where(s[..., i] != s[..., j], -0.5, 0.0)  # swap an anti-aligned pair
        s_off = jnp.where((mel != 0)[..., None], s[..., None, :] * flip, s[..., None, :])
        return jnp.concatenate([s[..., None, :], s_off], -2), jnp.concatenate([diag[..., None], mel], -1)
# ---- end of the new Hamiltonian


# ----------------------------------------------------------------- independent dense reference
SX = np.array([[0, 1], [1, 0]], dtype=complex)
SY = np.array([[0, -1j], [1j, 0]])
SZ = np.diag([-1.0, 1.0]).astype(complex)  # basis (down, up): the Kronecker index is the code


def local_op(ops, n):
    out = np.ones((1, 1), dtype=complex)
    for site in range(n - 1, -1, -1):
        out = np.kron(out, ops.get(site, np.eye(2)))
    return out


def dense_staggered_xxz(n, delta, h):
    H = np.zeros((2**n, 2**n), dtype=complex)
    for i in range(n):
        j = (i + 1) % n
        H += (delta / 4) * local_op({i: SZ, j: SZ}, n)
        H -= (1 / 4) * (local_op({i: SX, j: SX}, n) + local_op({i: SY, j: SY}, n))
        H -= (h / 2) * (-1) ** i * local_op({i: SZ}, n)
    assert np.allclose(H.imag, 0)
    return H.real


def test_the_new_hamiltonian_matches_dense_exact_diagonalization():
    n, ham = 6, StaggeredXXZ(6, delta=0.5, h=0.4)
    dense = dense_staggered_xxz(n, 0.5, 0.4)
    states = all_states(n)  # ordered by code = Kronecker index
    # the generic machinery of the base class, from connected() alone
    np.testing.assert_allclose(ham.to_dense(states), dense, atol=1e-12)
    np.testing.assert_allclose(np.asarray(ham.diagonal(states)), np.diag(dense), atol=1e-12)
    s_conn, mels = jax.jit(ham.connected)(jnp.asarray(states))
    assert s_conn.shape == (64, 7, 6) and s_conn.dtype == jnp.int8 and mels.shape == (64, 7)
    # the ground state: full space, its Sz = 0 sector, and the AF XXZ spectrum (Marshall rotation)
    e_full = np.linalg.eigvalsh(dense)[0]
    sector = all_states(n, 0)
    idx = states_to_codes(sector)
    assert abs(np.linalg.eigvalsh(dense[np.ix_(idx, idx)])[0] - e_full) < 1e-10
    assert abs(ground_state_energy(ham, total_sz=0) - e_full) < 1e-10
    assert abs(ground_state_energy(ham, total_sz=None) - e_full) < 1e-10
    u = np.prod(states[:, 1::2], axis=1).astype(float)
    af = u[:, None] * dense * u[None, :]
    assert np.all(af - np.diag(np.diag(af)) >= 0)  # the antiferromagnetic sign of the exchange
    np.testing.assert_allclose(np.linalg.eigvalsh(af), np.linalg.eigvalsh(dense), atol=1e-10)
    # local energies of a random state, every slot or only the nonzero ones
    rng = np.random.default_rng(3)
    w = rng.normal(size=(6,)) * 0.4

    def log_psi(p, s):
        return s.astype(jnp.float64) @ p

    psi = np.exp(states @ w)
    expected = (dense @ psi) / psi
    for pack in (True, False):
        with tuning.override(pack_local_energy=pack):
            got = local_energy(ham, log_psi, jnp.asarray(w), states, chunk_size=4)
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.slow
def test_the_new_hamiltonian_trains_to_its_ground_state():
    """An RBM with exact sampling in the Sz = 0 sector, SR directions and plain SGD."""
    n, ham = 6, StaggeredXXZ(6, delta=0.5, h=0.4)
    e_exact = np.linalg.eigvalsh(dense_staggered_xxz(n, 0.5, 0.4))[0]
    model = make_rbm_nqs(Chain(n), alpha=2, complex_output=False)  # the ground state is positive
    key = jax.random.PRNGKey(0)
    params = model.init(key, jnp.ones((1, n), jnp.int8))["params"]

    def log_psi(p, s):
        return model.apply({"params": p}, s)

    sampler = ExactSampler(log_psi, n, total_sz=0)
    state = sampler.init(jax.random.PRNGKey(1))
    e_loc = make_local_energy(ham, log_psi)
    opt = optax.sgd(0.1)
    opt_state = opt.init(params)

    @jax.jit
    def update(params, opt_state, direction):
        updates, opt_state = opt.update(unravel_like(direction, params), opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    for _ in range(120):
        samples, lp, state = sampler.sample(state, params, 256)
        e = e_loc(params, samples, lp)
        direction = sr_direction(jacobian(log_psi, params, samples), e, diag_shift=1e-3)
        params, opt_state = update(params, opt_state, direction)
    samples, lp, state = sampler.sample(state, params, 4096)
    stats = statistics(np.asarray(e_loc(params, samples, lp)).real)
    assert 0 < stats.error_of_mean < 1e-3 * abs(e_exact)
    assert abs(stats.mean - e_exact) < 3 * stats.error_of_mean, (float(stats.mean), float(stats.error_of_mean), e_exact)
    # and without sampling noise: the variational energy of the trained RBM
    e_var = exact_expectation(ham, log_psi, params, total_sz=0)
    assert e_exact - 1e-10 < e_var < e_exact + 1e-3 * abs(e_exact)
