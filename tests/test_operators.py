"""Hamiltonians and local energies, checked against dense matrices built from Kronecker products."""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from quantax_lite.operators import hamiltonian as operators
from quantax_lite.utils import tuning
from quantax_lite.exact.diagonalization import exact_expectation, exact_probabilities, ground_state_energy, symmetry_matrix
from quantax_lite.hilbert.configurations import all_states, states_to_codes
from quantax_lite.geometry.lattice import Chain, Square
from quantax_lite.operators.hamiltonian import (
    BondHamiltonian,
    BondTerms,
    Heisenberg,
    SpinHamiltonian,
    TransverseFieldIsing,
    local_energy,
    make_local_energy,
    marshall_sign,
)
from quantax_lite.geometry.symmetry import full_symmetry
from grid import keeping

# ----------------------------------------------------------------- dense references
# single-site basis (down, up) = (0, 1), so the Kronecker index is the code of hilbert.py
SX = np.array([[0, 1], [1, 0]], dtype=complex)
SY = np.array([[0, -1j], [1j, 0]])
SZ = np.diag([-1.0, 1.0]).astype(complex)


def local_op(ops, n):
    """Kronecker product of {site: 2x2 matrix} (identity elsewhere); site n-1 is the first factor."""
    out = np.ones((1, 1), dtype=complex)
    for site in range(n - 1, -1, -1):
        out = np.kron(out, ops.get(site, np.eye(2)))
    return out


@functools.lru_cache(maxsize=None)
def dense_heisenberg(lattice, J1, J2, delta, marshall, hz=0.0):
    n = lattice.n_sites
    H = np.zeros((2**n, 2**n), dtype=complex)
    for order, J in ((1, J1), (2, J2)):
        for i, j in (lattice.bonds(order) if J else []):
            # spin-1/2 units: S = sigma / 2
            for op, c in ((SX, 1.0), (SY, 1.0), (SZ, delta)):
                H += (J * c / 4) * local_op({i: op, j: op}, n)
    for i in range(n):
        H -= (hz / 2) * local_op({i: SZ}, n)  # -hz S^z_i
    if marshall:
        u = np.diag(local_op({i: SZ for i in np.nonzero(lattice.sublattice)[0]}, n)).real
        H = u[:, None] * H * u[None, :]
    assert np.allclose(H.imag, 0)
    return H.real


@functools.lru_cache(maxsize=None)
def dense_ising(lattice, J, h):
    n = lattice.n_sites
    H = np.zeros((2**n, 2**n), dtype=complex)
    for i, j in lattice.bonds(1):
        H -= J * local_op({i: SZ, j: SZ}, n)
    for i in range(n):
        H -= h * local_op({i: SX}, n)
    return H.real


CASES = {
    "heis-chain6": (lambda: Heisenberg(Chain(6), J1=1.0, J2=0.4, delta=0.7, marshall_sign=True),
                    lambda: dense_heisenberg(Chain(6), 1.0, 0.4, 0.7, True)),
    "heis-3x3": (lambda: Heisenberg(Square(3), J1=0.9, J2=0.5),
                 lambda: dense_heisenberg(Square(3), 0.9, 0.5, 1.0, False)),
    "heis-chain6-hz": (lambda: Heisenberg(Chain(6), J1=1.0, J2=0.3, delta=0.8, marshall_sign=True, hz=0.7),
                       lambda: dense_heisenberg(Chain(6), 1.0, 0.3, 0.8, True, 0.7)),
    "heis-3x2-hz": (lambda: Heisenberg(Square(3, 2), J1=1.0, J2=0.0, hz=-1.3),
                    lambda: dense_heisenberg(Square(3, 2), 1.0, 0.0, 1.0, False, -1.3)),
    "ising-chain6": (lambda: TransverseFieldIsing(Chain(6), J=1.0, h=0.8),
                     lambda: dense_ising(Chain(6), 1.0, 0.8)),
    "ising-3x3": (lambda: TransverseFieldIsing(Square(3), J=0.7, h=1.3),
                  lambda: dense_ising(Square(3), 0.7, 1.3)),
}


# ----------------------------------------------------------------- a random complex log_psi
def make_log_psi(n_sites, seed, alpha=2):
    """One hidden layer, log psi = sum log cosh(W s + b) + a.s with complex W, b, a from real params."""
    keys = jax.random.split(jax.random.PRNGKey(seed), 6)
    m = alpha * n_sites
    params = {
        "W_re": 0.3 * jax.random.normal(keys[0], (m, n_sites)),
        "W_im": 0.3 * jax.random.normal(keys[1], (m, n_sites)),
        "b_re": 0.2 * jax.random.normal(keys[2], (m,)),
        "b_im": 0.2 * jax.random.normal(keys[3], (m,)),
        "a_re": 0.2 * jax.random.normal(keys[4], (n_sites,)),
        "a_im": 0.5 * jax.random.normal(keys[5], (n_sites,)),
    }

    def log_psi(p, s):
        s = s.astype(jnp.float64)
        W = p["W_re"] + 1j * p["W_im"]
        theta = s @ W.T + (p["b_re"] + 1j * p["b_im"])
        return jnp.sum(jnp.log(jnp.cosh(theta)), axis=-1) + s @ (p["a_re"] + 1j * p["a_im"])

    return log_psi, params


def dense_local_energy(H, log_psi, params, states):
    psi = np.exp(np.asarray(log_psi(params, jnp.asarray(states)), dtype=complex))
    return (H @ psi) / psi


# ----------------------------------------------------------------- tests
def test_eight_devices():
    assert jax.device_count() == 8


@pytest.mark.parametrize("name", list(CASES))
def test_connected_and_sparse_match_dense(name):
    make_h, make_dense = CASES[name]
    ham, dense = make_h(), make_dense()
    n = ham.n_sites
    states = all_states(n)  # ordered by code = Kronecker index
    s_conn, mels = jax.jit(ham.connected)(jnp.asarray(states))
    s_conn, mels = np.asarray(s_conn), np.asarray(mels)
    assert s_conn.shape == (len(states), ham.max_conn, n) and s_conn.dtype == np.int8
    assert mels.shape == (len(states), ham.max_conn) and mels.dtype == np.float64
    # layout: slot 0 is s with the diagonal element; padding keeps s and has element 0
    np.testing.assert_array_equal(s_conn[:, 0], states)
    np.testing.assert_allclose(mels[:, 0], np.diag(dense), atol=1e-12)
    pad = mels == 0
    np.testing.assert_array_equal(s_conn[pad], np.broadcast_to(states[:, None], s_conn.shape)[pad])
    # summing every slot's element into its target column rebuilds the dense row
    rebuilt = np.zeros_like(dense)
    rows = np.broadcast_to(np.arange(len(states))[:, None], mels.shape)
    np.add.at(rebuilt, (rows, states_to_codes(s_conn)), mels)
    np.testing.assert_allclose(rebuilt, dense, atol=1e-12)
    # sparse matrix in the full space and (if conserved) in the Sz = 0 sector
    np.testing.assert_allclose(ham.to_dense(states), dense, atol=1e-12)
    H = ham.to_sparse(states)
    assert abs(H - H.T).max() < 1e-14
    if ham.conserves_sz and n % 2 == 0:
        sector = all_states(n, 0)
        idx = states_to_codes(sector)
        np.testing.assert_allclose(ham.to_dense(sector), dense[np.ix_(idx, idx)], atol=1e-12)
        # a basis in another order gives the permuted matrix
        perm = np.random.default_rng(0).permutation(len(sector))
        np.testing.assert_allclose(
            ham.to_dense(sector[perm]), dense[np.ix_(idx[perm], idx[perm])], atol=1e-12
        )


def test_max_conn():
    assert Heisenberg(Square(4)).max_conn == 1 + 32
    assert Heisenberg(Square(4), J2=0.5).max_conn == 1 + 64
    assert Heisenberg(Square(6), J2=0.5).max_conn == 1 + 144
    assert Heisenberg(Chain(2)).max_conn == 2  # the single (deduplicated) bond
    assert TransverseFieldIsing(Chain(12)).max_conn == 13
    assert Heisenberg(Square(4)).conserves_sz and not TransverseFieldIsing(Chain(4)).conserves_sz
    assert hash(Heisenberg(Square(4), J2=0.5)) == hash(Heisenberg(Square(4), J2=0.5))


def image_indices(sym, states):
    """(G, n): basis row of g s for every element g and basis state s."""
    codes = states_to_codes(states)
    order = np.argsort(codes)
    out = []
    for g in range(sym.n_elements):
        images = states_to_codes(sym.flips[g] * states[:, sym.perms[g]])
        pos = np.searchsorted(codes[order], images)
        assert np.all(codes[order][np.minimum(pos, len(codes) - 1)] == images)
        out.append(order[pos])
    return np.array(out)


def commutator_norms(H, sym, states, rng):
    """max |(H E_g - E_g H) x| for random x, every element g; (E_g x)(s) = x(g s)."""
    idx = image_indices(sym, states)
    x = rng.standard_normal((len(states), 2))
    Hx = H @ x
    return np.array([np.abs(H @ x[idx[g]] - Hx[idx[g]]).max() for g in range(sym.n_elements)])


@pytest.mark.parametrize(
    "lattice, J2",
    [(Square(4), 0.5), (Square(4), 0.0), (Square(2, 4), 0.3)],
    ids=["4x4-J1J2", "4x4-marshall-J1", "2x4-J1J2"],
)
def test_hamiltonian_commutes_with_its_symmetries(lattice, J2, rng):
    ham = Heisenberg(lattice, J2=J2, marshall_sign=(J2 == 0.0))
    states = all_states(lattice.n_sites, 0)
    H = ham.to_sparse(states)
    sym = full_symmetry(lattice)
    assert commutator_norms(H, sym, states, rng).max() < 1e-12
    # the check is not vacuous: a field on site 0 breaks the translations
    odd = (H + sp.diags(states[:, 0].astype(float))).tocsr()
    assert commutator_norms(odd, sym, states, rng).max() > 0.1
    # E_g of exact.symmetry_matrix is the same operator
    E = symmetry_matrix(sym, 5, states)
    x = rng.standard_normal(len(states))
    np.testing.assert_array_equal(E @ x, x[image_indices(sym, states)[5]])


def test_ising_commutes_with_its_symmetries(rng):
    ham = TransverseFieldIsing(Square(3), J=0.7, h=1.3)
    states = all_states(9)
    sym = full_symmetry(Square(3))
    assert sym.n_elements == 9 * 8 * 2
    assert commutator_norms(ham.to_sparse(states), sym, states, rng).max() < 1e-12


@pytest.mark.parametrize("name", keeping(["heis-chain6", "heis-3x3", "heis-3x2-hz", "ising-3x3"], keep=(2, 3)))
def test_local_energy_matches_dense(name):
    make_h, make_dense = CASES[name]
    ham, dense = make_h(), make_dense()
    states = all_states(ham.n_sites)
    log_psi, params = make_log_psi(ham.n_sites, seed=len(name))
    expected = dense_local_energy(dense, log_psi, params, states)
    e_plain = np.asarray(local_energy(ham, log_psi, params, jnp.asarray(states)))
    assert e_plain.dtype == np.complex128
    np.testing.assert_allclose(e_plain, expected, rtol=1e-10, atol=1e-10)
    # chunked: 5 samples per device per step (batch not a multiple: padded chunks)
    e_chunk = np.asarray(local_energy(ham, log_psi, params, states, chunk_size=5))
    np.testing.assert_allclose(e_chunk, expected, rtol=1e-10, atol=1e-10)
    # variational energy: <E_loc> under |psi|^2 equals <psi|H|psi>/<psi|psi>
    p = exact_probabilities(log_psi, params, states)
    total_sz = None
    e_var = exact_expectation(ham, log_psi, params, total_sz=total_sz)
    psi = np.exp(np.asarray(log_psi(params, jnp.asarray(states)), dtype=complex))
    assert abs(e_var - np.vdot(psi, dense @ psi).real / np.vdot(psi, psi).real) < 1e-10
    assert abs(np.sum(p * e_chunk) - e_var) < 1e-10
    assert abs(np.sum(p * e_chunk).imag) < 1e-10


def test_local_energy_in_a_sector_with_known_log_psi_and_jit():
    ham = Heisenberg(Square(2, 3), J2=0.3)
    states = all_states(6, 0)
    log_psi, params = make_log_psi(6, seed=11)
    dense = ham.to_dense(states)
    expected = dense_local_energy(dense, log_psi, params, states)
    f = make_local_energy(ham, log_psi, chunk_size=1)
    lp = log_psi(params, jnp.asarray(states))
    got = f(params, jnp.asarray(states), lp)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-10, atol=1e-10)
    got2 = f(params, jnp.asarray(states))
    np.testing.assert_allclose(np.asarray(got2), expected, rtol=1e-10, atol=1e-10)


def test_packed_local_energy_evaluates_only_nonzero_connections():
    """Packing (the default tuning): log_psi runs on the smallest packed size that holds a
    chunk's nonzero off-diagonal connections (fewer for polarized states, all slots for
    Neel states), with the energies of pack_local_energy=False; the evaluated sizes are
    recorded by a callback that runs only in the branch taken."""
    from quantax_lite.utils import make_mesh

    PACKED_FRACTIONS = tuning.current().packed_fractions

    ham = Heisenberg(Chain(8), J2=0.0)
    log_psi0, params = make_log_psi(8, seed=5)
    seen = []

    def log_psi(p, s):
        jax.debug.callback(lambda n: seen.append(int(n)), s.shape[0])
        return log_psi0(p, s)

    up = np.ones((8, 8), np.int8)
    neel = np.tile(np.array([1, -1] * 4, np.int8), (8, 1))
    mixed = all_states(8, 0)[::7][:64]
    mesh = make_mesh(jax.devices()[:1])
    slots = ham.max_conn - 1
    for states, expected_size in ((up, int(np.ceil(PACKED_FRACTIONS[0] * 8 * slots))), (neel, 8 * slots)):
        seen.clear()
        got = make_local_energy(ham, log_psi, mesh=mesh)(params, jnp.asarray(states), log_psi0(params, jnp.asarray(states)))
        jax.effects_barrier()
        assert seen == [expected_size]
        with tuning.override(pack_local_energy=False):
            unpacked = make_local_energy(ham, log_psi0, mesh=mesh)
        ref = unpacked(params, jnp.asarray(states))
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    # random Sz = 0 states: about half the bonds are anti-aligned; chunked on 8 devices
    seen.clear()
    f = make_local_energy(ham, log_psi, chunk_size=4)
    got = f(params, jnp.asarray(mixed))
    jax.effects_barrier()
    dense = ham.to_dense(all_states(8, 0))
    index = {tuple(x): i for i, x in enumerate(all_states(8, 0))}
    psi = np.exp(np.asarray(log_psi0(params, jnp.asarray(all_states(8, 0))), dtype=complex))
    rows = [index[tuple(x)] for x in mixed]
    np.testing.assert_allclose(np.asarray(got), (dense @ psi)[rows] / psi[rows], rtol=1e-10, atol=1e-10)
    assert max(seen) < 4 * slots  # fewer than every slot of a chunk


def test_local_energy_with_vanishing_amplitudes_has_no_nan():
    """psi = 0 on half the space (log psi = -inf): the finite rows stay exact, no NaN."""
    ham = Heisenberg(Chain(6), J2=0.4)
    log_psi0, params = make_log_psi(6, seed=3)

    def log_psi(p, s):
        return log_psi0(p, s) + jnp.where(s[:, 0] > 0, 0.0, -jnp.inf)

    states = all_states(6)
    keep = states[:, 0] > 0
    dense = dense_heisenberg(Chain(6), 1.0, 0.4, 1.0, False)
    psi = np.exp(np.asarray(log_psi(params, jnp.asarray(states)), dtype=complex))
    assert np.sum(psi == 0) == 32
    expected = (dense @ psi)[keep] / psi[keep]
    for chunk in (None, 3):
        got = np.asarray(local_energy(ham, log_psi, params, states[keep], chunk_size=chunk))
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


def test_real_log_psi_gives_real_local_energy():
    ham = TransverseFieldIsing(Chain(6), h=0.5)

    def log_psi(p, s):
        return s.astype(jnp.float64) @ p

    params = jnp.linspace(-0.3, 0.4, 6)
    states = all_states(6)
    got = np.asarray(local_energy(ham, log_psi, params, states))
    assert got.dtype == np.float64
    psi = np.exp(np.asarray(log_psi(params, jnp.asarray(states))))
    np.testing.assert_allclose(got, dense_ising(Chain(6), 1.0, 0.5) @ psi / psi, rtol=1e-12)


def test_marshall_sign_is_a_basis_rotation():
    for lattice, J2, sz in ((Chain(8), 0.0, None), (Square(2, 4), 0.5, 0), (Square(3), 0.3, 0.5)):
        states = all_states(lattice.n_sites, sz)
        plain = Heisenberg(lattice, J2=J2).to_dense(states)
        rot = Heisenberg(lattice, J2=J2, marshall_sign=True).to_dense(states)
        np.testing.assert_allclose(np.linalg.eigvalsh(plain), np.linalg.eigvalsh(rot), atol=1e-10)
        u = marshall_sign(lattice, states).astype(float)
        np.testing.assert_allclose(rot, u[:, None] * plain * u[None, :], atol=1e-14)
        assert not np.allclose(rot, plain)


def test_ising_sign_rule_is_a_basis_rotation(rng):
    """sign_rule=True is U H U with U = prod sz = (-1)^(number of down spins) for h < 0,
    and changes nothing for h >= 0."""
    lattice = Chain(6)
    states = all_states(6, None)
    u = np.prod(states, axis=1).astype(float)
    for h in (-abs(rng.normal()) - 0.1, abs(rng.normal()) + 0.1):
        plain = TransverseFieldIsing(lattice, J=rng.normal(), h=h)
        rot = TransverseFieldIsing(lattice, J=plain.J, h=h, sign_rule=True)
        a, b = plain.to_dense(states), rot.to_dense(states)
        if h < 0:
            np.testing.assert_allclose(b, u[:, None] * a * u[None, :], atol=1e-14)
            assert not np.allclose(a, b) and np.all(b - np.diag(np.diag(b)) <= 0)
        else:
            np.testing.assert_array_equal(a, b)


def test_bad_input():
    ham = Heisenberg(Chain(6))
    log_psi, params = make_log_psi(6, seed=0)
    with pytest.raises(ValueError, match="samples"):
        local_energy(ham, log_psi, params, np.ones((4, 5), np.int8))
    with pytest.raises(ValueError, match="samples"):
        local_energy(ham, log_psi, params, np.zeros((4, 6), np.int8))
    with pytest.raises(ValueError, match="samples"):
        local_energy(ham, log_psi, params, jnp.ones((4, 7), jnp.int8))
    with pytest.raises(ValueError, match="chunk_size"):
        local_energy(ham, log_psi, params, np.ones((4, 6), np.int8), chunk_size=0)
    with pytest.raises(ValueError, match="log_psi_samples"):
        local_energy(ham, log_psi, params, np.ones((4, 6), np.int8), log_psi_samples=jnp.zeros(3))
    with pytest.raises(ValueError, match="s:"):
        ham.connected(jnp.ones((2, 5), jnp.int8))
    with pytest.raises(TypeError, match="lattice"):
        Heisenberg("4x4")
    with pytest.raises(TypeError, match="J2"):
        Heisenberg(Chain(4), J2="big")
    with pytest.raises(ValueError, match="h"):
        TransverseFieldIsing(Chain(4), h=float("nan"))
    with pytest.raises(ValueError, match="outside"):
        TransverseFieldIsing(Chain(6)).to_sparse(all_states(6, 0))
    with pytest.raises(ValueError, match="repeated"):
        ham.to_sparse(np.concatenate([all_states(6, 0)] * 2))
    with pytest.raises(ValueError, match=r"\+1 or -1"):
        ham.to_sparse(np.zeros((3, 6), np.int8))


# ----------------------------------------------------------------- input checks
BAD_VALUES = (0, 2, -2, 3, 0.5)


def corrupt(rng, s):
    """A copy of the spin batch ``s`` with one random entry replaced by a random non-spin value."""
    bad = np.array(s, dtype=np.float64 if rng.random() < 0.3 else np.int8)
    value = rng.choice(BAD_VALUES)
    if bad.dtype == np.int8:
        value = int(value) if float(value).is_integer() else 0
    bad[tuple(rng.integers(0, n) for n in bad.shape)] = value
    return bad


@pytest.mark.parametrize("make_ham", [lambda: Heisenberg(Chain(6), J2=0.3), lambda: TransverseFieldIsing(Square(2, 3))])
def test_non_spin_configurations_are_rejected(rng, make_ham):
    ham = make_ham()
    n = ham.n_sites
    s = rng.choice(np.array([-1, 1], np.int8), size=(int(rng.integers(2, 6)), n))
    bad = corrupt(rng, s)
    for arr in (bad, jnp.asarray(bad)):
        with pytest.raises(ValueError, match=r"^s: entries must be \+1 or -1"):
            ham.diagonal(arr)
        with pytest.raises(ValueError, match=r"^s: entries must be \+1 or -1"):
            ham.connected(arr)
        with pytest.raises(ValueError, match=r"^s: expected configurations of shape \(\.\.\., 6\)"):
            ham.diagonal(arr[:, :-1])
        with pytest.raises(ValueError, match=r"^s: expected configurations of shape \(\.\.\., 6\)"):
            ham.connected(np.concatenate([s, s[:, :1]], axis=1))
    with pytest.raises(TypeError, match=r"^s: expected an integer"):
        ham.diagonal(s > 0)
    with pytest.raises(TypeError, match=r"^s: expected an integer"):
        ham.connected(s.astype(np.complex128))
    # valid input: numpy, jax and jitted give the same numbers, also for extra batch axes
    d = np.asarray(ham.diagonal(s))
    np.testing.assert_allclose(d, np.asarray(jax.jit(ham.diagonal)(jnp.asarray(s))), rtol=0, atol=1e-14)
    c, m = ham.connected(s)
    cj, mj = jax.jit(ham.connected)(jnp.asarray(s, jnp.float32))
    np.testing.assert_array_equal(c, cj)
    np.testing.assert_allclose(m, mj, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(np.asarray(ham.diagonal(s[None])), d[None])
    np.testing.assert_allclose(m[:, 0], d, rtol=0, atol=1e-14)


def test_local_energy_rejects_non_spin_samples(rng):
    ham = Heisenberg(Chain(6))
    log_psi, params = make_log_psi(6, seed=int(rng.integers(1000)))
    s = rng.choice(np.array([-1, 1], np.int8), size=(8, 6))
    bad = corrupt(rng, s)
    f = make_local_energy(ham, log_psi)
    g = make_local_energy(ham, log_psi, jit=False)
    for arr in (bad, jnp.asarray(bad)):
        with pytest.raises(ValueError, match=r"^samples: entries must be \+1 or -1"):
            local_energy(ham, log_psi, params, arr)
        for fn in (f, g):
            with pytest.raises(ValueError, match=r"^samples: entries must be \+1 or -1"):
                fn(params, arr)
    for fn in (f, g):
        with pytest.raises(ValueError, match=r"^samples: expected shape \(batch, 6\)"):
            fn(params, s[:, :5])
        with pytest.raises(ValueError, match=r"^samples: expected shape \(batch, 6\)"):
            fn(params, s[0])
        with pytest.raises(TypeError, match=r"^samples: expected an integer"):
            fn(params, s > 0)
        with pytest.raises(ValueError, match=r"^log_psi_samples: expected shape \(8,\)"):
            fn(params, s, jnp.zeros(7))
    # valid samples: every entry point gives the same energies, also inside an outer jit
    with tuning.override(pack_local_energy=False):
        ref = np.asarray(local_energy(ham, log_psi, params, s))
    for got in (f(params, s), f(params, jnp.asarray(s)), g(params, jnp.asarray(s)), jax.jit(g)(params, s), jax.jit(f)(params, s)):
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-12, atol=1e-12)


def test_marshall_sign_checks_states():
    with pytest.raises(ValueError, match=r"^states: "):
        marshall_sign(Square(2, 2), np.ones((3, 5), np.int8))
    with pytest.raises(ValueError, match=r"^states: entries must be \+1 or -1"):
        marshall_sign(Square(2, 2), np.zeros((3, 4), np.int8))


# ----------------------------------------------------------------- longitudinal field
def sector_energies(ham, n):
    """{total_sz: lowest eigenvalue in that sector} by dense diagonalization."""
    return {sz: np.linalg.eigvalsh(ham.to_dense(all_states(n, sz)))[0] for sz in np.arange(-n / 2, n / 2 + 1)}


@pytest.mark.parametrize(
    "lattice, J2, delta, marshall",
    [(Chain(6), 0.3, 0.8, True), (Square(3, 2), 0.0, 1.0, False), (Square(2), 0.5, 1.2, False)],
    ids=["chain6-J1J2-xxz-marshall", "3x2", "2x2-J1J2-xxz"],
)
def test_longitudinal_field_matches_exact_diagonalization_in_the_full_space(lattice, J2, delta, marshall):
    """Heisenberg(..., hz) = H(0) - hz sum S^z: the matrix in the full space equals the
    Kronecker-product one, every Sz sector is H(0) shifted by -hz * total_sz (nothing in
    Sz = 0), and a field large enough moves the ground state out of Sz = 0 (above the
    saturation field: the polarized state)."""
    n = lattice.n_sites
    states = all_states(n, None)
    plain = Heisenberg(lattice, J2=J2, delta=delta, marshall_sign=marshall)
    zero_field = sector_energies(plain, n)
    moved_out = False
    for hz in (0.0, 0.45, -1.1, 2.2, 9.0):
        ham = Heisenberg(lattice, 1.0, J2, delta, marshall, hz=hz)
        dense = dense_heisenberg(lattice, 1.0, J2, delta, marshall, hz)
        assert ham.conserves_sz and ham.max_conn == plain.max_conn and ham.default_total_sz == plain.default_total_sz
        np.testing.assert_allclose(ham.to_dense(states), dense, atol=1e-12)
        np.testing.assert_allclose(SpinHamiltonian.to_sparse(ham, states).toarray(), dense, atol=1e-12)
        np.testing.assert_allclose(np.asarray(ham.diagonal(states)), np.diag(dense), atol=1e-12)
        e_dense = np.linalg.eigvalsh(dense)[0]
        assert abs(ground_state_energy(ham, total_sz=None) - e_dense) < 1e-9
        for sz in zero_field:
            sector = all_states(n, sz)
            np.testing.assert_allclose(
                ham.to_dense(sector), plain.to_dense(sector) - hz * sz * np.eye(len(sector)), atol=1e-12
            )
            if sz == 0:
                np.testing.assert_array_equal(ham.to_dense(sector), plain.to_dense(sector))
        by_sector = {sz: e - hz * sz for sz, e in zero_field.items()}
        best = min(by_sector, key=by_sector.get)
        assert abs(by_sector[best] - e_dense) < 1e-9
        assert np.sign(best) == np.sign(hz) or best == 0  # the field favours its own direction
        if best != 0:
            moved_out = True
            assert e_dense < by_sector[0] - 1e-6
        if abs(hz) == 9.0:  # beyond saturation: all spins along the field
            assert best == np.sign(hz) * n / 2
            polarized = np.ones((1, n), np.int8) * int(np.sign(hz))
            assert abs(e_dense - float(ham.diagonal(polarized)[0])) < 1e-9
    assert moved_out


def test_longitudinal_field_checks_and_repr():
    assert repr(Heisenberg(Chain(4), J2=0.5)) == (
        "Heisenberg(lattice=Lattice(shape=(4,), pbc=True), J1=1.0, J2=0.5, delta=1.0, marshall_sign=False)"
    )
    assert repr(Heisenberg(Chain(4), hz=0.25)).endswith("marshall_sign=False, hz=0.25)")
    assert Heisenberg(Chain(4), hz=0.25) != Heisenberg(Chain(4))
    assert Heisenberg(Chain(4), hz=0) == Heisenberg(Chain(4)) and Heisenberg(Chain(4), hz=2).hz == 2.0
    with pytest.raises(ValueError, match=r"^hz: expected a finite number"):
        Heisenberg(Chain(4), hz=float("inf"))
    with pytest.raises(TypeError, match=r"^hz: expected a real number"):
        Heisenberg(Chain(4), hz="strong")
    # the field is diagonal: same bonds, moves and packing hint
    h = Heisenberg(Square(4), J2=0.5, hz=0.3)
    assert h.max_conn == 1 + 64 and h.n_moves == 64 and h.mels_can_vanish
    np.testing.assert_array_equal(h.bonds, Heisenberg(Square(4), J2=0.5).bonds)


# ----------------------------------------------------------------- generic vs fast sparse path
def random_basis(rng, n, total_sz):
    """A random order of a sector."""
    states = all_states(n, total_sz)
    return states[rng.permutation(len(states))]


@pytest.mark.parametrize("name", list(CASES))
def test_generic_to_sparse_equals_the_fast_one_on_random_bases(name, rng):
    ham = CASES[name][0]()
    n = ham.n_sites
    sectors = [None] + ([rng.choice(np.arange(-n / 2, n / 2 + 1)), 0.5 * (n % 2)] if ham.conserves_sz else [])
    for total_sz in sectors:
        states = random_basis(rng, n, total_sz)
        fast, generic = ham.to_sparse(states), SpinHamiltonian.to_sparse(ham, states)
        assert generic.dtype == np.float64 and generic.shape == fast.shape
        assert abs(fast - generic).max() < 1e-14
    # a random subset that H leads out of: both raise the same error
    subset = random_basis(rng, n, None)[: 2 ** n // 3]
    for path in (ham.to_sparse, lambda x: SpinHamiltonian.to_sparse(ham, x)):
        with pytest.raises(ValueError, match="outside"):
            path(subset)
        with pytest.raises(ValueError, match="repeated"):
            path(np.concatenate([subset, subset[:1]]))


def test_diagonal_hamiltonians_on_random_subsets(rng):
    """Without moves any set of configurations is a basis; both paths agree on random ones."""
    for ham in (
        Heisenberg(Square(3), J1=0.0, J2=0.0, hz=0.7),
        TransverseFieldIsing(Square(2, 3), J=0.6, h=0.0),
    ):
        n = ham.n_sites
        subset = all_states(n)[rng.choice(2**n, size=int(rng.integers(1, 2**n)), replace=False)]
        fast, generic = ham.to_dense(subset), SpinHamiltonian.to_sparse(ham, subset).toarray()
        np.testing.assert_allclose(generic, fast, atol=1e-14)
        np.testing.assert_allclose(np.diag(fast), np.asarray(ham.diagonal(subset)), atol=1e-14)
        assert np.count_nonzero(fast - np.diag(np.diag(fast))) == 0


# ----------------------------------------------------------------- the bond helper, public
@dataclasses.dataclass(frozen=True)
class MixedFieldIsing(BondHamiltonian):
    """H = -J sum s^z s^z - hx sum s^x - hz sum s^z (Pauli units), through BondTerms."""

    lattice: object
    J: float = 1.0
    hx: float = 0.7
    hz: float = 0.4
    conserves_sz = False

    def build_terms(self):
        n, bonds, site = self.n_sites, self.lattice.bonds(1), np.arange(self.n_sites)
        flip = np.where(np.eye(n, dtype=bool), -1, 1)
        return BondTerms(
            zz_pairs=bonds, zz_coef=np.full(len(bonds), -self.J), constant=0.0, flip=flip,
            cond_pairs=np.stack([site, site], 1), amp_aligned=np.full(n, -self.hx),
            amp_anti=np.full(n, -self.hx), z_coef=np.full(n, -self.hz),
        )


def test_a_bond_hamiltonian_with_a_longitudinal_field():
    lattice = Chain(6)
    ham = MixedFieldIsing(lattice)
    dense = dense_ising(lattice, 1.0, 0.7) - 0.4 * sum(local_op({i: SZ}, 6) for i in range(6)).real
    states = all_states(6)
    assert ham.max_conn == 7 and ham.n_moves == 6 and not ham.mels_can_vanish
    np.testing.assert_allclose(ham.to_dense(states), dense, atol=1e-12)
    np.testing.assert_allclose(SpinHamiltonian.to_sparse(ham, states).toarray(), dense, atol=1e-12)
    log_psi, params = make_log_psi(6, seed=2)
    got = np.asarray(local_energy(ham, log_psi, params, states, chunk_size=3))
    np.testing.assert_allclose(got, dense_local_energy(dense, log_psi, params, states), rtol=1e-10, atol=1e-10)


def test_bond_terms_are_checked():
    bonds = np.array([[0, 1], [1, 2]])
    good = dict(zz_pairs=bonds, zz_coef=[1.0, 1.0], constant=0.0, flip=np.ones((2, 3)),
                cond_pairs=bonds, amp_aligned=[0.0, 0.0], amp_anti=[0.5, 0.5])
    t = BondTerms(**good)
    assert t.flip.dtype == np.int8 and t.zz_pairs.dtype == np.int32 and t.z_coef is None and not t.has_linear
    for change, name in (
        (dict(flip=np.zeros((2, 3))), "flip"),
        (dict(zz_pairs=np.array([[0, 1, 2]])), "zz_pairs"),
        (dict(cond_pairs=bonds[:1]), "cond_pairs"),
        (dict(cond_pairs=bonds + 5), "cond_pairs"),
        (dict(zz_coef=[1.0]), "zz_coef"),
        (dict(amp_anti=[0.5, np.nan]), "amp_anti"),
        (dict(amp_aligned=[0.0]), "amp_aligned"),
        (dict(z_coef=[1.0, 2.0]), "z_coef"),
        (dict(constant=float("nan")), "constant"),
    ):
        with pytest.raises(ValueError, match=f"^{name}: "):
            BondTerms(**{**good, **change})

    class WrongSize(BondHamiltonian):
        lattice = Chain(4)
        conserves_sz = True

        def build_terms(self):
            return t

    with pytest.raises(ValueError, match="^build_terms: the terms act on 3 sites"):
        WrongSize().max_conn


# ----------------------------------------------------------------- the contract and the engine
class Wrapped(SpinHamiltonian):
    """Any Hamiltonian seen through connected() only (no bond helper)."""

    def __init__(self, inner, mels_can_vanish=True):
        self.inner, self.n_sites, self.max_conn = inner, inner.n_sites, inner.max_conn
        self.conserves_sz, self.mels_can_vanish = inner.conserves_sz, mels_can_vanish

    def connected(self, s):
        return self.inner.connected(s)


@pytest.mark.parametrize("name", ["heis-chain6-hz", "ising-chain6"])
def test_the_engine_needs_connected_only(name):
    make_h, make_dense = CASES[name]
    inner, dense = make_h(), make_dense()
    states = all_states(inner.n_sites)
    log_psi, params = make_log_psi(inner.n_sites, seed=7)
    expected = dense_local_energy(dense, log_psi, params, states)
    for ham in (Wrapped(inner), Wrapped(inner, mels_can_vanish=False)):
        assert ham.lattice is None and ham.default_total_sz == inner.default_total_sz
        np.testing.assert_allclose(ham.to_dense(states), dense, atol=1e-12)
        np.testing.assert_allclose(np.asarray(ham.diagonal(states)), np.diag(dense), atol=1e-12)
        for pack in (True, False):
            with tuning.override(pack_local_energy=pack):
                f = make_local_energy(ham, log_psi, chunk_size=8)
            np.testing.assert_allclose(np.asarray(f(params, states)), expected, rtol=1e-10, atol=1e-10)
        e = np.asarray(local_energy(ham, log_psi, params, states, log_psi_samples=log_psi(params, jnp.asarray(states))))
        np.testing.assert_allclose(e, expected, rtol=1e-10, atol=1e-10)


def test_packing_is_a_tuning_choice_read_when_the_function_is_built():
    """pack_local_energy and packed_fractions come from the tuning in force when
    make_local_energy runs; a Hamiltonian whose elements never vanish is never packed."""
    from quantax_lite.utils import make_mesh

    log_psi0, params = make_log_psi(8, seed=4)
    seen = []

    def log_psi(p, s):
        jax.debug.callback(lambda n: seen.append(int(n)), s.shape[0])
        return log_psi0(p, s)

    mesh = make_mesh(jax.devices()[:1])
    up = jnp.ones((8, 8), jnp.int8)
    lp = log_psi0(params, up)
    heis, ising = Heisenberg(Chain(8)), TransverseFieldIsing(Chain(8), h=0.3)
    slots = heis.max_conn - 1

    def sizes(f, *args):
        seen.clear()
        out = f(params, *args)
        jax.effects_barrier()
        return list(seen), np.asarray(out)

    packed = make_local_energy(heis, log_psi, mesh=mesh)
    with tuning.override(pack_local_energy=False):
        unpacked = make_local_energy(heis, log_psi, mesh=mesh)
        ising_f = make_local_energy(ising, log_psi, mesh=mesh)
    with tuning.override(packed_fractions=(0.5,)):
        halves = make_local_energy(heis, log_psi, mesh=mesh)
    ising_default = make_local_energy(ising, log_psi, mesh=mesh)
    # called outside the blocks: each keeps the choice it was built with
    n_packed, e_packed = sizes(packed, up, lp)
    n_unpacked, e_unpacked = sizes(unpacked, up, lp)
    n_halves, e_halves = sizes(halves, up, lp)
    assert n_packed == [int(np.ceil(tuning.Tuning().packed_fractions[0] * 8 * slots))]
    assert n_unpacked == [8 * heis.max_conn]
    assert n_halves == [int(np.ceil(0.5 * 8 * slots))]
    np.testing.assert_allclose(e_packed, e_unpacked, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(e_halves, e_unpacked, rtol=1e-12, atol=1e-12)
    assert not ising.mels_can_vanish
    assert sizes(ising_default, up, lp)[0] == sizes(ising_f, up, lp)[0] == [8 * ising.max_conn]
    # the speed knobs are not part of the public API any more
    assert not hasattr(operators, "PACKED_FRACTIONS")
    with pytest.raises(TypeError, match="pack"):
        make_local_energy(heis, log_psi0, pack=True)
    with pytest.raises(TypeError, match="pack"):
        local_energy(heis, log_psi0, params, up, pack=False)


def test_contract_errors_name_what_is_missing():
    log_psi, params = make_log_psi(4, seed=1)
    s = np.ones((2, 4), np.int8)

    class NoMaxConn(SpinHamiltonian):
        n_sites = 4
        conserves_sz = True

        def connected(self, s):
            return s[..., None, :], jnp.zeros(s.shape[:-1] + (1,))

    class NoSites(SpinHamiltonian):
        max_conn = 1
        conserves_sz = True

    class WrongShapes(NoMaxConn):
        max_conn = 2

    with pytest.raises(TypeError, match=r"^hamiltonian: NoMaxConn does not give `max_conn`"):
        make_local_energy(NoMaxConn(), log_psi)
    with pytest.raises(TypeError, match=r"^hamiltonian: NoSites gives neither `lattice` nor `n_sites`"):
        local_energy(NoSites(), log_psi, params, s)
    with pytest.raises(AttributeError, match="conserves_sz"):
        type("NoSz", (SpinHamiltonian,), {"n_sites": 4})().default_total_sz
    with pytest.raises(ValueError, match=r"^hamiltonian: WrongShapes.connected returned shapes"):
        local_energy(WrongShapes(), log_psi, params, s)
    with pytest.raises(ValueError, match=r"^hamiltonian: WrongShapes.connected returned shapes"):
        WrongShapes().to_sparse(all_states(4))
    with pytest.raises(TypeError, match=r"^hamiltonian: expected a SpinHamiltonian"):
        make_local_energy("Heisenberg", log_psi)
    # a dataclass field of a contract name is an ordinary field (no inherited default)
    @dataclasses.dataclass(frozen=True)
    class Fields(SpinHamiltonian):
        n_sites: int
        max_conn: int
        conserves_sz: bool

    h = Fields(4, 1, True)
    assert (h.n_sites, h.max_conn, h.conserves_sz, h.lattice, h.default_total_sz) == (4, 1, True, None, 0)
    with pytest.raises(TypeError):
        Fields(4)
