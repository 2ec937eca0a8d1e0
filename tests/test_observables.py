"""Observables against exact references: dense Kronecker-product operators on small
lattices (random complex and signed networks, exact weights |psi|^2 over every
configuration), the 4x4 Heisenberg ground state from sparse exact diagonalization, the
coverage of the Monte Carlo error bars over repeated i.i.d. draws, and bad input."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from quantax_lite import ExactSampler, Heisenberg, make_conv_nqs, make_rbm_nqs
from quantax_lite.utils import tuning
from quantax_lite.exact.diagonalization import ground_state, log_psi_on_states
from quantax_lite.hilbert.configurations import all_states, states_to_codes
from quantax_lite.geometry.lattice import Chain, Square
from quantax_lite.observables import (
    SCHEMA, correlation_vs_distance, dimer_correlations, expect, lattice_momenta, measure,
    spin_correlations, staggered_magnetization_sq, structure_factor,
)
from quantax_lite.operators.local_operators import spin_dot

# single-site basis (down, up) = (0, 1): the Kronecker index is the code of hilbert.py
SP = np.array([[0, 0], [1, 0]], dtype=complex)
SPIN = {"x": (SP + SP.T) / 2, "y": (SP - SP.T) / 2j, "z": np.diag([-0.5, 0.5]).astype(complex)}


def site_op(m, i, n):
    out = np.ones((1, 1), dtype=complex)
    for site in range(n - 1, -1, -1):
        out = np.kron(out, m if site == i else np.eye(2))
    return out


class Dense:
    """Exact expectations in the state vector ``v`` (2**n, Kronecker order) from the
    matrices of the single-site spin operators (applied to vectors: S^a_i v)."""

    def __init__(self, lattice, v):
        self.lat, self.n, self.v = lattice, lattice.n_sites, v / np.linalg.norm(v)
        self.S = {a: [site_op(m, i, self.n) for i in range(self.n)] for a, m in SPIN.items()}
        self.Sv = {a: [m @ self.v for m in ms] for a, ms in self.S.items()}

    def ev(self, M):
        return np.vdot(self.v, M @ self.v)

    def corr(self):
        """<S_i . S_j> = sum_a <S^a_i v, S^a_j v> (S^a_i Hermitian)."""
        return np.array([[sum(np.vdot(self.Sv[a][i], self.Sv[a][j]) for a in "xyz").real
                          for j in range(self.n)] for i in range(self.n)])

    def dot_v(self, i, j):
        """(S_i . S_j) v."""
        return sum(self.S[a][i] @ self.Sv[a][j] for a in "xyz")

    def weighted_square(self, phases):
        """<|sum_i phases_i S_i|^2> = sum_a |sum_i conj(phases_i) S^a_i v|^2."""
        return sum(np.linalg.norm(sum(np.conj(p) * self.Sv[a][i] for i, p in enumerate(phases))) ** 2
                   for a in "xyz")

    def dimers(self, axis):
        """(1/N) sum_i <D_i D_{i+r}> for every cell displacement r, and <D>."""
        step = np.eye(self.lat.ndim, dtype=int)[axis]
        bonds = [(i, int(self.lat.site_index(self.lat.coords[i] + step))) for i in range(self.n)]
        u = [self.dot_v(i, j) for i, j in bonds]  # D_b v (D_b Hermitian)
        out = {}
        for r in {tuple(self.lat.displacement(0, k)) for k in range(self.n)}:
            partner = [int(self.lat.site_index(self.lat.coords[i] + np.asarray(r))) for i in range(self.n)]
            out[r] = np.mean([np.vdot(u[i], u[partner[i]]).real for i in range(self.n)])
        return out, np.mean([np.vdot(self.v, x).real for x in u])


def random_params(model, n, seed, scale):
    """Initial parameters (one compiled init) plus numpy noise, so that psi is far from uniform."""
    params = jax.jit(model.init)(jax.random.PRNGKey(seed), jnp.ones((1, n), jnp.int8))["params"]
    noise = np.random.default_rng(seed)
    return jax.tree_util.tree_map(lambda x: np.asarray(x) + scale * noise.normal(size=x.shape).astype(x.dtype), params)


def network(kind, lattice, seed):
    """A random complex RBM, or a signed conv network (real psi, both signs) on ``lattice``."""
    n = lattice.n_sites
    if kind == "rbm-complex":
        model = make_rbm_nqs(lattice, alpha=1, complex_output=True)
    else:  # a real wavefunction with a learned sign: psi = exp(a_0) (1 + g_0)
        model = make_conv_nqs(lattice, channels=2, depth=1, kernel_size=3, readout="origin", signed=True)

    def log_psi(p, s):
        return model.apply({"params": p}, s)

    if kind == "rbm-complex":
        return log_psi, random_params(model, n, seed, 0.3)
    states = all_states(n)
    for attempt in range(20):  # a sign term large enough that psi takes both signs
        params = random_params(model, n, seed + attempt, 0.3)
        kernel = np.array(params["readout_dense"]["kernel"])
        kernel[:, 1] *= 30.0
        params["readout_dense"]["kernel"] = jnp.asarray(kernel)
        negative = np.mean(log_psi_on_states(log_psi, params, states).imag != 0)
        if 0.1 < negative < 0.9:
            return log_psi, params
    raise AssertionError("no signed network with both signs")


@pytest.mark.parametrize(
    "lattice, kind",
    [(Square(2), "rbm-complex"), (Square(3), "conv-signed"), (Square(4, 2), "rbm-complex"), (Chain(6), "conv-signed")],
    ids=["2x2-rbm-complex", "3x3-conv-signed", "4x2-rbm-complex", "chain6-conv-signed"],
)
def test_every_observable_equals_its_exact_value(lattice, kind, rng):
    n = lattice.n_sites
    log_psi, params = network(kind, lattice, int(rng.integers(1000)))
    states = all_states(n)  # every configuration (3x3: both odd Sz sectors together)
    lp = log_psi_on_states(log_psi, params, states)
    if kind == "conv-signed":
        assert np.all(np.isin(np.round(lp.imag, 10), [0.0, np.round(np.pi, 10)])) and np.any(lp.imag != 0)
    psi = np.exp(lp - lp.real.max())
    w = np.abs(psi) ** 2
    dense = Dense(lattice, psi)
    corr = dense.corr()
    ham = Heisenberg(lattice)
    with tuning.override(pack_local_energy=False):
        m = measure(log_psi, params, states, lattice, hamiltonian=ham if n != 9 else None, weights=w, log_psi_samples=lp)
    json.dumps(m, allow_nan=False)
    assert m["schema"] == SCHEMA and m["n_sites"] == n and m["exact"] and m["n_samples"] == 2**n
    np.testing.assert_allclose(m["spin_correlations"]["mean"], corr, atol=1e-10)
    zz = np.array([[np.vdot(dense.Sv["z"][i], dense.Sv["z"][j]).real for j in range(n)] for i in range(n)])
    np.testing.assert_allclose(m["sz_correlations"]["mean"], zz, atol=1e-10)
    e_exact = sum(corr[i, j] for i, j in lattice.bonds(1))
    if n != 9:  # (3x3: the energy is left out, one compilation less)
        assert abs(m["energy"]["mean"] - e_exact) < 1e-10 and abs(m["energy"]["per_site"] - e_exact / n) < 1e-10
    # S(q) on every lattice momentum, from |sum_i e^{-i q r_i} S_i v|^2 / N
    q = np.asarray(m["structure_factor"]["q"])
    assert len(q) == n and np.allclose(q, lattice_momenta(lattice))
    for qk, sq in zip(q, m["structure_factor"]["mean"]):
        assert abs(sq - dense.weighted_square(np.exp(1j * lattice.coords @ qk)) / n) < 1e-10
    eps = (-1.0) ** lattice.coords.sum(axis=1)
    s_pi = dense.weighted_square(eps) / n
    assert abs(m["s_pi_pi"]["mean"] - s_pi) < 1e-10 and abs(m["staggered_magnetization_sq"]["mean"] - s_pi / n) < 1e-10
    assert abs(m["sz_squared"]["mean"] - np.linalg.norm(sum(dense.Sv["z"])) ** 2) < 1e-10
    # C(r) = (1/N) sum_i <S_i . S_{i+r}> per displacement, and per distance
    cr = m["correlation_vs_distance"]
    for r, d, c in zip(cr["r"], cr["distance"], cr["mean"]):
        partner = lattice.site_index(lattice.coords + np.asarray(r))
        assert abs(c - np.mean(corr[np.arange(n), partner])) < 1e-10 and abs(d - np.linalg.norm(r)) < 1e-12
    for d, c in zip(cr["shells"]["distance"], cr["shells"]["mean"]):
        at = [k for k, dk in enumerate(cr["distance"]) if abs(dk - d) < 1e-9]
        assert abs(c - np.mean([cr["mean"][k] for k in at])) < 1e-10  # periodic: N pairs per r
    # dimer-dimer correlations, plain and connected
    for axis, name in enumerate("xy"[: lattice.ndim]):
        if name not in m["dimer_correlations"]:
            continue
        dd, d_mean = dense.dimers(axis)
        got = m["dimer_correlations"][name]
        assert abs(got["bond"]["mean"] - d_mean) < 1e-10
        assert sorted(map(tuple, got["r"])) == sorted(dd)
        for r, plain, conn in zip(got["r"], got["mean"], got["connected_mean"]):
            assert abs(plain - dd[tuple(r)]) < 1e-10 and abs(conn - (dd[tuple(r)] - d_mean**2)) < 1e-10


def test_expect_of_local_operators_and_the_direct_functions(rng):
    lattice = Square(2, 3)
    n = lattice.n_sites
    log_psi, params = network("rbm-complex", lattice, int(rng.integers(1000)))
    states = all_states(n)
    lp = log_psi_on_states(log_psi, params, states)
    psi = np.exp(lp - lp.real.max())
    w = np.abs(psi) ** 2
    dense = Dense(lattice, psi)
    from quantax_lite.operators.local_operators import sm, sp, sx, sy

    op = 0.3j * sx(1, n) @ sy(2, n) + (1 - 2j) * sp(0, n) @ sm(3, n) + spin_dot(4, 5, n)
    ref = 0.3j * dense.S["x"][1] @ dense.S["y"][2] + (1 - 2j) * (dense.S["x"][0] + 1j * dense.S["y"][0]) @ (
        dense.S["x"][3] - 1j * dense.S["y"][3]) + sum(dense.S[a][4] @ dense.S[a][5] for a in "xyz")
    with tuning.override(pack_local_energy=False):
        st = expect(log_psi, params, states, op, weights=w, log_psi_samples=lp)
    assert abs(complex(st.mean) - dense.ev(ref)) < 1e-10 and float(st.error_of_mean) == 0.0
    corr = spin_correlations(log_psi, params, states, weights=w, log_psi_samples=lp)
    np.testing.assert_allclose(corr.mean, dense.corr(), atol=1e-10)
    sq = structure_factor(corr, lattice, q=[np.pi, 2 * np.pi / 3])
    assert sq.q.shape == (1, 2) and abs(sq.mean[0] - dense.weighted_square(
        np.exp(1j * lattice.coords @ np.array([np.pi, 2 * np.pi / 3]))) / n) < 1e-10
    exact = structure_factor(corr.mean, lattice)  # an (n, n) matrix: no errors
    np.testing.assert_allclose(exact.mean, structure_factor(corr, lattice).mean, atol=1e-12)
    assert exact.error is None
    (s_q, _), (m2, _) = staggered_magnetization_sq(corr, lattice)
    assert abs(m2 - s_q / n) < 1e-14
    c = correlation_vs_distance(corr, lattice)
    assert c.mean[0] == 0.75 and np.all(c.r[0] == 0)
    d = dimer_correlations(log_psi, params, states, lattice, 1, weights=w, log_psi_samples=lp)
    dd, d_mean = dense.dimers(1)
    assert abs(d.bond_mean - d_mean) < 1e-10
    np.testing.assert_allclose(d.mean, [dd[tuple(r)] for r in d.r], atol=1e-10)


def table_wavefunction(states, vector):
    """log psi of a vector over the basis ``states`` (sorted by code), -inf outside it."""
    codes = jnp.asarray(states_to_codes(states))
    amp = jnp.asarray(np.log(np.abs(vector)) + 1j * np.pi * (vector < 0))
    weights = jnp.asarray(1 << np.arange(states.shape[1], dtype=np.int64))

    def log_psi(params, s):
        c = (s > 0).astype(jnp.int64) @ weights
        idx = jnp.clip(jnp.searchsorted(codes, c), 0, len(codes) - 1)
        return jnp.where(codes[idx] == c, amp[idx], -jnp.inf)

    return log_psi


def test_heisenberg_4x4_ground_state_against_exact_diagonalization():
    lattice = Square(4)
    n = lattice.n_sites
    e0, v, states = ground_state(Heisenberg(lattice))  # sparse ED in the Sz = 0 sector
    # reference by sparse linear algebra: <v| S_i . S_j |v> from the basis and its swaps
    codes = states_to_codes(states)
    sf = states.astype(np.float64)
    ref = np.full((n, n), 0.75)
    for i in range(n):
        for j in range(i + 1, n):
            anti = states[:, i] != states[:, j]
            swapped = codes[anti] ^ ((1 << i) | (1 << j))
            off = 0.5 * np.sum(v[anti] * v[np.searchsorted(codes, swapped)])
            ref[i, j] = ref[j, i] = np.sum(v**2 * sf[:, i] * sf[:, j]) / 4 + off
    assert abs(sum(ref[i, j] for i, j in lattice.bonds(1)) - e0) < 1e-8  # the reference is sound
    eps = (-1.0) ** lattice.coords.sum(axis=1)
    s_pi_ref = eps @ ref @ eps / n
    corr = spin_correlations(table_wavefunction(states, v), None, states, weights=v**2)
    np.testing.assert_allclose(corr.mean, ref, atol=1e-8)
    (s_pi, _), (m2, _) = staggered_magnetization_sq(corr, lattice)
    assert abs(s_pi - s_pi_ref) < 1e-8 and abs(m2 - s_pi_ref / n) < 1e-8
    assert abs(structure_factor(corr, lattice, q=(np.pi, np.pi)).mean[0] - s_pi_ref) < 1e-8
    c = correlation_vs_distance(corr, lattice)
    for r, mean in zip(c.r, c.mean):
        partner = lattice.site_index(lattice.coords + r)
        assert abs(mean - np.mean(ref[np.arange(n), partner])) < 1e-8
    assert abs(c.mean[-1] - ref[0, lattice.site_index((2, 2))]) < 1e-8  # (2, 2): the farthest point


def test_error_bars_cover_the_exact_value_at_the_stated_rate():
    """40 independent runs of 128 i.i.d. draws each: the 1-sigma bars of the energy (of
    Re E_loc, ``real=True``) and of S(pi) cover the exact value in about 68% of the runs
    (binomial range), 2-sigma in 95%."""
    lattice = Chain(6)
    n = lattice.n_sites
    log_psi, params = network("rbm-complex", lattice, 7)
    ham = Heisenberg(lattice)
    states = all_states(n)
    lp = log_psi_on_states(log_psi, params, states)
    psi = np.exp(lp - lp.real.max())
    dense = Dense(lattice, psi)
    e_exact = dense.ev(ham.to_dense(states)).real
    s_exact = dense.weighted_square((-1.0) ** lattice.coords[:, 0]) / n
    runs, size = 40, 128
    sampler = ExactSampler(log_psi, n)
    samples, lp_s, _ = sampler.sample(sampler.init(jax.random.PRNGKey(3)), params, runs * size)
    samples, lp_s = np.asarray(samples), np.asarray(lp_s)
    hits = np.zeros((2, 2), int)
    with tuning.override(pack_local_energy=False):
        for k in range(runs):
            block = slice(k * size, (k + 1) * size)
            e = expect(log_psi, params, samples[block], ham, n_chains=4, log_psi_samples=lp_s[block], real=True)
            corr = spin_correlations(log_psi, params, samples[block], n_chains=4, log_psi_samples=lp_s[block])
            (s, s_err), _ = staggered_magnetization_sq(corr, lattice)
            for row, (mean, err, exact) in enumerate(((float(jnp.real(e.mean)), float(e.error_of_mean), e_exact),
                                                      (s, s_err, s_exact))):
                assert err > 0
                hits[row] += [abs(mean - exact) <= err, abs(mean - exact) <= 2 * err]
    # Binomial(40, 0.683): mean 27.3, sd 2.9 (18 .. 36 is +-3.1 sd); Binomial(40, 0.954): mean 38.2, sd 1.3
    assert np.all((18 <= hits[:, 0]) & (hits[:, 0] <= 36)), hits
    assert np.all(hits[:, 1] >= 33), hits
    # measure() on Monte Carlo samples: strict JSON with error bars and tau
    with tuning.override(pack_local_energy=False):
        m = measure(log_psi, params, samples[:size], lattice, hamiltonian=ham, n_chains=4, log_psi_samples=lp_s[:size])
    back = json.loads(json.dumps(m, allow_nan=False))
    assert back["n_chains"] == 4 and not back["exact"] and back["energy"]["tau"] > 0
    assert back["s_pi_pi"]["error"] > 0 and back["s_pi_pi"]["q"] == [np.pi]
    assert min(back["structure_factor"]["error"]) > 0 and min(back["dimer_correlations"]["x"]["connected_error"]) > 0
    err = np.asarray(back["spin_correlations"]["error"])
    assert err.shape == (n, n) and np.all(err[~np.eye(n, dtype=bool)] > 0) and np.all(np.diag(err) == 0)
    assert back["lattice"] == {"shape": [6], "pbc": True, "name": "chain:6"}
    # the same samples through the single-purpose functions: the same numbers
    with tuning.override(pack_local_energy=False):
        e = expect(log_psi, params, samples[:size], ham, n_chains=4, log_psi_samples=lp_s[:size], real=True)
        e_c = expect(log_psi, params, samples[:size], ham, n_chains=4, log_psi_samples=lp_s[:size])
    assert abs(back["energy"]["mean"] - float(jnp.real(e.mean))) < 1e-12
    assert abs(back["energy"]["error"] - float(e.error_of_mean)) < 1e-12 and abs(back["energy"]["tau"] - float(e.tau)) < 1e-12
    assert jnp.iscomplexobj(e_c.mean) and abs(back["energy"]["imag"] - float(jnp.imag(e_c.mean))) < 1e-12
    assert abs(back["energy"]["variance"] - float(e_c.variance)) < 1e-10  # mean |E_loc - E|^2
    corr = spin_correlations(log_psi, params, samples[:size], n_chains=4, log_psi_samples=lp_s[:size])
    np.testing.assert_allclose(back["spin_correlations"]["error"], corr.error, atol=1e-12)
    (s, s_err), _ = staggered_magnetization_sq(corr, lattice)
    assert abs(back["s_pi_pi"]["mean"] - s) < 1e-12 and abs(back["s_pi_pi"]["error"] - s_err) < 1e-12


def test_bad_input():
    lattice = Chain(4)
    log_psi, params = network("rbm-complex", lattice, 0)
    states = all_states(4)
    with pytest.raises(ValueError, match=r"samples: expected shape \(batch, 4\)"):
        measure(log_psi, params, np.ones((8, 5), np.int8), lattice)
    with pytest.raises(ValueError, match="samples"):
        spin_correlations(log_psi, params, np.ones((8,), np.int8))
    with pytest.raises(ValueError, match="n_chains: 16 samples are not a multiple of n_chains=3"):
        expect(log_psi, params, states, spin_dot(0, 1, 4), n_chains=3)
    with pytest.raises(ValueError, match="weights"):
        expect(log_psi, params, states, spin_dot(0, 1, 4), weights=np.ones(3))
    corr = spin_correlations(log_psi, params, states, weights=np.ones(16))
    with pytest.raises(ValueError, match=r"q: momentum \(1.0,\) is not on the lattice chain:4"):
        structure_factor(corr, lattice, q=[[np.pi], [1.0]])
    with pytest.raises(ValueError, match="lattice: has 6 sites"):
        structure_factor(corr, Chain(6))
    with pytest.raises(ValueError, match="axis"):
        dimer_correlations(log_psi, params, states, lattice, 1)
    with pytest.raises(ValueError, match="hamiltonian: acts on 6 sites"):
        measure(log_psi, params, states, lattice, hamiltonian=Heisenberg(Chain(6)))


def test_open_chain_and_honeycomb_against_dense(rng):
    """Open boundaries (C(r) and dimers over the pairs that exist) and a lattice with a basis
    (S(q) with real positions on the reciprocal momenta, m^2 with the two sublattices)."""
    from quantax_lite.geometry.lattice import Honeycomb
    from quantax_lite.geometry.symmetry import allowed_momenta

    def log_psi(p, s):
        x = s.astype(jnp.float64)
        return x @ p[0] + 1j * (x @ p[1]) + 0.3 * jnp.sum(x * jnp.roll(x, 1, axis=1), axis=1)

    for lattice in (Chain(5, pbc=False), Honeycomb(2, 2)):
        n = lattice.n_sites
        params = jnp.asarray(rng.normal(size=(2, n)) * 0.4)
        states = all_states(n)
        lp = log_psi_on_states(log_psi, params, states)
        psi = np.exp(lp - lp.real.max())
        dense = Dense(lattice, psi)
        corr = dense.corr()
        m = measure(log_psi, params, states, lattice, weights=np.abs(psi) ** 2, log_psi_samples=lp)
        json.dumps(m, allow_nan=False)
        np.testing.assert_allclose(m["spin_correlations"]["mean"], corr, atol=1e-10)
        q = np.asarray(m["structure_factor"]["q"])
        for qk, sq in zip(q, m["structure_factor"]["mean"]):
            assert abs(sq - dense.weighted_square(np.exp(1j * lattice.positions @ qk)) / n) < 1e-10
        eps = 1.0 - 2.0 * lattice.sublattice
        assert abs(m["staggered_magnetization_sq"]["mean"] - dense.weighted_square(eps) / n**2) < 1e-10
        cr = m["correlation_vs_distance"]
        d = lattice.displacement(*np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))  # (n, n, ndim)
        for r, c in zip(cr["r"], cr["mean"]):
            at = np.all(np.abs(d - np.asarray(r)) < 1e-8, axis=-1)
            assert at.any() and abs(c - corr[at].mean()) < 1e-10
        if lattice.ndim == 1:  # open chain: the 4 bonds (i, i + 1) and S(q) on q = 2 pi m / 5
            assert np.allclose(np.sort(q[:, 0]), np.sort(2 * np.pi * np.array([-2, -1, 0, 1, 2]) / 5))
            u = [dense.dot_v(i, i + 1) for i in range(n - 1)]
            got = m["dimer_correlations"]["x"]
            assert abs(got["bond"]["mean"] - np.mean([np.vdot(dense.v, x).real for x in u])) < 1e-10
            for r, plain in zip(got["r"], got["mean"]):
                pairs = [(a, a + r[0]) for a in range(n - 1) if 0 <= a + r[0] < n - 1]
                assert abs(plain - np.mean([np.vdot(u[a], u[b]).real for a, b in pairs])) < 1e-10
        else:  # honeycomb: the reciprocal momenta of the cluster; no S(pi, pi), no dimers
            k = allowed_momenta(lattice)
            frac = np.linalg.solve(lattice.reciprocal_vectors.T, (q[:, None, :] - k[None]).transpose(2, 0, 1).reshape(2, -1))
            same = np.all(np.abs(frac - np.round(frac)) < 1e-9, axis=0).reshape(len(q), len(k))
            assert np.all(same.sum(axis=1) == 1) and np.all(same.sum(axis=0) == 1)
            assert m["s_pi_pi"]["q"] is None and m["dimer_correlations"] == {}
            with pytest.raises(ValueError, match="q: momentum"):
                structure_factor(corr, lattice, q=[0.5, 0.0])
