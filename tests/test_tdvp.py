"""TDVP (quantax_lite.evolution) against exact dynamics on chain:8.

The network is a full table of log-amplitudes (one complex number per configuration, or
two real ones), which represents every state of the chain exactly: with exact sums the
TDVP motion is then the exact Schrodinger motion, and every deviation from the sparse
exact propagator (quantax_lite.exact.exact_evolution) is the integrator's. The exact sums
run on a one-device mesh (the suite's eight simulated devices share two cores); the
sampled tests use every device.
"""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from quantax_lite.utils import tuning
from quantax_lite.driver.checkpoint import load_checkpoint, save_checkpoint
from quantax_lite.evolution import (
    RK4, Adaptive, Euler, EvolutionDiverged, EvolutionState, Heun, PseudoInverse, Shift, SignalToNoise, TDVP,
    evolve, residual, s_norm, tdvp_equation,
)
from quantax_lite.exact import exact_evolution, exact_observables, ground_state
from quantax_lite.hilbert.configurations import all_states
from quantax_lite.geometry.lattice import Chain
from quantax_lite.operators.hamiltonian import TransverseFieldIsing
from quantax_lite.sampler import FullSumSampler, LocalFlip, MetropolisSampler
from quantax_lite.operators.local_operators import sx
from quantax_lite.utils import make_mesh

N = 8
POWERS = 2 ** np.arange(N)
STATES = all_states(N, None)  # ordered by code: row c is the configuration of code c
ONE_DEVICE = make_mesh(jax.devices()[:1])


def codes(s):
    return jnp.sum((s > 0).astype(jnp.int32) * jnp.asarray(POWERS, jnp.int32), axis=-1)


def table_complex(params, s):
    """log psi(s) = table[code(s)]: complex parameters (holomorphic)."""
    return params["table"][codes(s)]


def table_real(params, s):
    """The same with real parameters: log psi = re[code] + i im[code]."""
    i = codes(s)
    return params["re"][i] + 1j * params["im"][i]


def as_table(params) -> np.ndarray:
    p = jax.device_get(params)
    return np.asarray(p["table"]) if "table" in p else np.asarray(p["re"]) + 1j * np.asarray(p["im"])


def unit_vector(table) -> np.ndarray:
    v = np.exp(table - np.max(table.real))
    return v / np.linalg.norm(v)


def full_sum(log_psi, mesh=ONE_DEVICE):
    return FullSumSampler(log_psi, N, total_sz=None, mesh=mesh)


def sx_total():
    return sum(sx(i, N) for i in range(N))


def observables_of(params, ham):
    return exact_observables({"energy": ham, "sx": sx_total()}, unit_vector(as_table(params)), STATES)


@pytest.fixture(scope="module")
def quench():
    """All spins along +x (a table of one constant), quenched to h = 0.5, RK4 with dt = 0.005
    and a diagonal shift of 1e-12, observed every 0.25 up to t = 2."""
    ham = TransverseFieldIsing(Chain(N), h=0.5)
    tdvp = TDVP(ham, full_sum(table_complex), integrator=RK4(), regularization=Shift(1e-12))
    offset = 0.7 - 1.3j  # a gauge: the norm and the global phase do not matter
    state = tdvp.init({"table": jnp.full(2**N, offset)}, jax.random.key(0), dt=0.005)
    times = np.linspace(0, 2, 9)
    vectors, _ = exact_evolution(ham, np.ones(2**N), times)
    exact = exact_observables({"energy": ham, "sx": sx_total()}, vectors, STATES)
    got, records = [observables_of(state.params, ham)], []
    for t in times[1:]:
        state, recs = evolve(tdvp, state, t, progress=False)
        got.append(observables_of(state.params, ham))
        records += recs
    return dict(ham=ham, times=times, exact=exact, got=got, records=records, state=state, vectors=vectors)


def test_real_time_quench_matches_the_exact_propagator(quench):
    """Measured: energy and <sum sx> within 1e-8 of exact up to t = 2 (the RK4 error)."""
    for name in ("energy", "sx"):
        got = np.array([g[name][0] for g in quench["got"]])
        deviation = np.max(np.abs(got - quench["exact"][name]))
        assert deviation <= 1e-6, (name, deviation)
    final = unit_vector(as_table(quench["state"].params))
    assert 1 - abs(np.vdot(final, quench["vectors"][-1])) ** 2 < 1e-10
    assert abs(float(quench["state"].t) - 2.0) < 1e-12 and int(quench["state"].step) == 400


def test_real_time_conserves_the_energy(quench):
    energies = np.array([r["energy"] for r in quench["records"]])
    assert np.max(np.abs(energies - quench["exact"]["energy"][0])) <= 1e-6
    assert max(abs(r["energy_imag"]) for r in quench["records"]) < 1e-10
    assert all(r["energy_error"] == 0 for r in quench["records"])  # exact sums
    # the table represents every state: the variational motion is the exact one
    assert max(r["residual"] for r in quench["records"]) < 1e-12
    times = np.array([r["t"] for r in quench["records"]])
    assert np.allclose(np.diff(times), 0.005, atol=1e-12)


@pytest.mark.parametrize("log_psi, regularization", [
    (table_real, Shift(1e-12)), (table_complex, PseudoInverse()), (table_complex, SignalToNoise()),
])
def test_real_parameters_and_every_regularization_follow_the_exact_motion(rng, log_psi, regularization):
    """Real parameters (the real part of the equation) give the motion of complex ones; the
    pseudo-inverse and the signal-to-noise cutoff (no noise with exact sums) agree with exact."""
    ham = TransverseFieldIsing(Chain(N), h=float(rng.uniform(0.4, 0.6)))
    if log_psi is table_real:
        params = {"re": jnp.zeros(2**N), "im": jnp.zeros(2**N)}
    else:
        params = {"table": jnp.zeros(2**N, jnp.complex128)}
    tdvp = TDVP(ham, full_sum(log_psi), integrator=RK4(), regularization=regularization)
    state, records = evolve(tdvp, tdvp.init(params, jax.random.key(1), dt=0.01), 0.3, progress=False)
    vectors, _ = exact_evolution(ham, np.ones(2**N), [0.3])
    exact = exact_observables({"energy": ham, "sx": sx_total()}, vectors, STATES)
    got = observables_of(state.params, ham)
    for name in ("energy", "sx"):
        assert abs(got[name][0] - exact[name][0]) <= 1e-6, name
    if not isinstance(regularization, Shift):
        assert records[-1]["kept"] == 2**N - 1  # the gauge direction dropped


def test_imaginary_time_lowers_the_energy_to_the_ground_state(rng):
    """From a random state: the exact imaginary-time propagator at tau = 1, then an
    adaptive run toward the ground state, the energy falling at every step."""
    ham = TransverseFieldIsing(Chain(N), h=1.5)  # paramagnetic: a gap of about 1
    table0 = 0.3 * (rng.standard_normal(2**N) + 1j * rng.standard_normal(2**N))
    tdvp = TDVP(ham, full_sum(table_complex), integrator=RK4(), regularization=Shift(1e-12), imaginary=True)
    state, records = evolve(tdvp, tdvp.init({"table": jnp.asarray(table0)}, jax.random.key(2), dt=0.02), 1.0,
                            progress=False)
    vectors, _ = exact_evolution(ham, np.exp(table0), [1.0], imaginary=True)
    exact = exact_observables({"energy": ham, "sx": sx_total()}, vectors, STATES)
    got = observables_of(state.params, ham)
    for name in ("energy", "sx"):
        assert abs(got[name][0] - exact[name][0]) <= 1e-6, name
    adaptive = TDVP(ham, full_sum(table_complex), integrator=Adaptive(tol=1e-4, dt_max=0.5), imaginary=True,
                    regularization=Shift(1e-12))
    state = adaptive.init(state.params, jax.random.key(3), dt=0.02, t0=float(state.t))
    state, more = evolve(adaptive, state, 10.0, progress=False)
    energies = np.array([r["energy"] for r in records + more])
    # down at every step, to the steps' error: a state off by tol = 1e-4 (the S-norm) has its
    # energy off by at most 2 tol sigma_E (one draw rose by 2.1e-7 where sigma_E was 5e-3)
    sigma = np.sqrt([r["variance"] for r in records + more])
    assert np.all(np.diff(energies) < 2e-4 * np.maximum(sigma[:-1], sigma[1:]) + 1e-12)
    e0 = ground_state(ham)[0]
    final = observables_of(state.params, ham)["energy"][0]
    assert -1e-10 <= final - e0 < 1e-6, final - e0
    assert max(r["dt"] for r in more) > 0.04  # the step grew (to the explicit method's stability limit)


@pytest.mark.parametrize("pair, tols", [("heun_euler", (1e-2, 1e-3)), ("bogacki_shampine", (1e-3, 1e-5))])
def test_the_adaptive_integrator_reaches_its_tolerance(pair, tols):
    """The S-norm error control: the distance of the final state from the exact one is
    about the tolerance (measured: 0.3 to 0.7 tol), and tightening it costs steps."""
    ham = TransverseFieldIsing(Chain(N), h=0.5)
    vectors, _ = exact_evolution(ham, np.ones(2**N), [1.0])
    distances, steps = [], []
    for tol in tols:
        tdvp = TDVP(ham, full_sum(table_complex), integrator=Adaptive(tol=tol, pair=pair),
                    regularization=Shift(1e-12))
        state, records = evolve(tdvp, tdvp.init({"table": jnp.zeros(2**N, complex)}, jax.random.key(0), dt=0.01),
                                1.0, progress=False)
        final = unit_vector(as_table(state.params))
        distances.append(np.sqrt(max(0.0, 1 - abs(np.vdot(final, vectors[0])) ** 2)))
        steps.append(int(state.step))
        assert abs(float(state.t) - 1.0) < 1e-12
        assert all(r["error"] <= 1.0 for r in records)
    assert distances[0] <= 2 * tols[0] and distances[1] <= 2 * tols[1], distances
    assert distances[1] < distances[0] * 5 * tols[1] / tols[0] and steps[1] > steps[0], (distances, steps)


def test_a_sampled_evolution_resumes_bit_for_bit(tmp_path):
    """Markov chains on every device, adaptive steps (with rejections), the
    signal-to-noise cutoff: a run stopped, saved, loaded and continued equals the
    uninterrupted one, bit for bit."""
    ham = TransverseFieldIsing(Chain(N), h=0.5)
    sampler = MetropolisSampler(table_complex, LocalFlip(), n_chains=8, n_sites=N, n_thermalize=4)
    tdvp = TDVP(ham, sampler, n_samples=64, integrator=Adaptive(tol=5e-3, pair="heun_euler"),
                regularization=SignalToNoise(rcond=1e-8))
    params = {"table": jnp.asarray(0.1 * np.cos(np.arange(2**N)) + 0j)}
    fresh = tdvp.init(params, jax.random.key(7), dt=0.05)
    whole, whole_records = evolve(tdvp, fresh, 10.0, progress=False, max_steps=4)
    first, _ = evolve(tdvp, fresh, 10.0, progress=False, max_steps=2)
    save_checkpoint(tmp_path / "tdvp.npz", first)
    loaded, _ = load_checkpoint(tmp_path / "tdvp.npz", tdvp.init(params, jax.random.key(0), dt=0.05))
    rest, rest_records = evolve(tdvp, loaded, 10.0, progress=False, max_steps=2)
    raw = lambda x: jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x  # noqa: E731
    for a, b in zip(jax.tree_util.tree_leaves(whole), jax.tree_util.tree_leaves(rest)):
        assert np.array_equal(np.asarray(raw(a)), np.asarray(raw(b)))
    assert [r["energy"] for r in whole_records[2:]] == [r["energy"] for r in rest_records]
    assert int(whole.step) == 4
    assert all(r["energy_error"] > 0 for r in whole_records)  # samples: error bars


def test_lapack_gets_threads_only_for_a_large_solve():
    """One LAPACK thread for a small solve (its threads would spin against XLA's); for a
    large one (real parameters: twice the samples as rows) the cores each device has."""
    from quantax_lite.evolution.loop import _lapack_threads
    from quantax_lite.utils.threads import usable_cores

    ham = TransverseFieldIsing(Chain(N), h=0.5)
    small = TDVP(ham, full_sum(table_complex))
    assert _lapack_threads(small, {"table": jnp.zeros(2**N, jnp.complex128)}) == 1
    sampler = MetropolisSampler(table_real, LocalFlip(), n_chains=8, n_sites=N, mesh=ONE_DEVICE)
    large = TDVP(ham, sampler, n_samples=1024)
    cores = usable_cores()
    assert _lapack_threads(large, {"re": jnp.zeros(4096), "im": jnp.zeros(4096)}) == cores  # 2048 rows
    assert _lapack_threads(large, {"re": jnp.zeros(300), "im": jnp.zeros(300)}) == 1  # 600 parameters
    spread = TDVP(ham, MetropolisSampler(table_real, LocalFlip(), n_chains=8, n_sites=N), n_samples=1024)
    assert _lapack_threads(spread, {"re": jnp.zeros(4096), "im": jnp.zeros(4096)}) == max(1, cores // len(jax.devices()))


def test_a_diverging_evolution_stops_with_its_last_good_state():
    """Forward Euler far beyond its stability limit: the run stops with a finite state."""
    ham = TransverseFieldIsing(Chain(N), h=1.0)
    tdvp = TDVP(ham, full_sum(table_complex), integrator=Euler(), regularization=PseudoInverse())
    state = tdvp.init({"table": jnp.asarray(0.3 * np.sin(np.arange(2**N)) + 0j)}, jax.random.key(0), dt=2.0)
    with pytest.raises(EvolutionDiverged) as caught:
        evolve(tdvp, state, 1000.0, progress=False)
    good = caught.value.state
    assert isinstance(good, EvolutionState)
    assert np.all(np.isfinite(as_table(good.params)))
    assert np.isfinite(observables_of(good.params, ham)["energy"][0])
    assert all(np.isfinite(r["energy"]) for r in caught.value.records)
    assert "last good state" in str(caught.value)


def test_the_equation_of_a_complete_network_has_no_residual(rng):
    """S θ̇ = -i F (or -F) solved for a table is the exact motion d log psi(s)/dt =
    -i (H psi)(s) / psi(s), up to a constant (the gauge): the residual is 0. With real
    parameters S and the right-hand side are real."""
    table = rng.standard_normal(2**N) + 1j * rng.standard_normal(2**N)
    ham = TransverseFieldIsing(Chain(N), h=0.7)
    psi = unit_vector(table)
    h_psi = ham.to_sparse(STATES) @ psi
    for imaginary in (False, True):
        tdvp = TDVP(ham, full_sum(table_complex), imaginary=imaginary)
        params = {"table": jnp.asarray(table)}
        state = tdvp.init(params, jax.random.key(0), dt=0.1)

        @jax.jit
        def solve(params, chains, tdvp=tdvp):
            eq, _, weights, _ = tdvp.equation(params, chains)
            theta_dot, _ = PseudoInverse().solve(eq)
            return theta_dot, residual(eq, theta_dot), weights, eq.s

        theta_dot, r2, w, s = solve(params, state.sampler)
        assert float(r2) < 1e-20
        expected = (-1.0 if imaginary else -1j) * h_psi / psi
        diff = np.asarray(theta_dot) - expected
        # each row's component is solved against its own eigenvalue, its weight w_s: the rounding
        # grows as 1/w_s (a row of weight 3e-6 missed 1e-9 by 8%)
        w = np.asarray(w)
        assert np.all(np.abs(diff - np.sum(w * diff)) < 1e-9 + 1e-13 / w)
        assert s.dtype == np.complex128
    jac = jnp.concatenate([jnp.eye(2**N), 1j * jnp.eye(2**N)], axis=1)  # the real table's Jacobian
    eq = tdvp_equation(jac, jnp.asarray(h_psi / psi), weights=jnp.abs(jnp.asarray(psi)) ** 2, real_params=True)
    assert eq.s.dtype == np.float64 and eq.rhs.dtype == np.float64 and eq.s.shape == (2 * 2**N, 2 * 2**N)


@pytest.mark.parametrize("kind", ["complex jacobian", "real jacobian"])
@pytest.mark.parametrize("imaginary", [False, True])
def test_the_equation_equals_the_dense_formula(rng, kind, imaginary):
    """S and the right-hand side of ``tdvp_equation`` on random rows equal NumPy's
    Re(<O^† O> - <O^†><O>) and Re(<O^† g> - <O^†><g>) (g = -i E_loc or -E_loc), with and without
    weights, for real parameters; complex parameters keep the complex ones."""
    n, p = 37, 11
    jac = rng.standard_normal((n, p)) + (1j * rng.standard_normal((n, p)) if kind == "complex jacobian" else 0)
    e_loc = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    for weights in (None, rng.random(n)):
        w = np.full(n, 1 / n) if weights is None else weights / weights.sum()
        o = jac - w @ jac
        g = (-1.0 if imaginary else -1j) * (e_loc - w @ e_loc)
        s_dense = (np.conj(o).T * w) @ o
        f_dense = (np.conj(o).T * w) @ g
        for real_params in (True, False):
            eq = tdvp_equation(jnp.asarray(jac), jnp.asarray(e_loc), weights=None if weights is None else
                               jnp.asarray(w), real_params=real_params, imaginary=imaginary)
            want_s, want_f = (s_dense.real, f_dense.real) if real_params else (s_dense, f_dense)
            np.testing.assert_allclose(np.asarray(eq.s), want_s, rtol=0, atol=1e-12)
            np.testing.assert_allclose(np.asarray(eq.rhs), want_f, rtol=0, atol=1e-12)
            assert np.iscomplexobj(eq.s) == (not real_params and kind == "complex jacobian")


@pytest.mark.parametrize("rows", [5, 40], ids=["fewer rows than parameters", "more rows"])
@pytest.mark.parametrize("params", ["real", "complex"])
def test_the_pseudo_inverse_equals_numpys(rng, rows, params):
    """``PseudoInverse`` (hard and smooth cutoffs) on random equations equals NumPy's: the hard
    cutoff ``np.linalg.pinv(S, rcond, hermitian=True) @ rhs``, the smooth one V f(λ)/λ V^H rhs
    from ``np.linalg.eigh(S)``, whether it solves through S or, with fewer rows than
    parameters, through the rows' Gram matrix; the same number of kept directions."""
    p = 16
    jac = rng.standard_normal((rows, p)) + 1j * rng.standard_normal((rows, p))
    jac[:, -1] = jac[:, 0]  # S singular beyond the gauge: a direction pinv must drop
    e_loc = rng.standard_normal(rows) + 1j * rng.standard_normal(rows)
    eq = tdvp_equation(jnp.asarray(jac), jnp.asarray(e_loc), real_params=params == "real")
    s, rhs = np.asarray(eq.s), np.asarray(eq.rhs)
    lam, v = np.linalg.eigh(s)
    for rcond in (1e-12, 1e-3):
        for smooth in (False, True):
            theta_dot, info = jax.jit(PseudoInverse(rcond, smooth=smooth).solve)(eq)
            cut = rcond * np.max(np.abs(lam))
            if smooth:
                f = np.where(lam > 0, 1 / (1 + (cut / np.where(lam > 0, lam, 1)) ** 6), 0)
                want = v @ (np.where(lam > 0, f / np.where(lam > 0, lam, 1), 0) * (np.conj(v).T @ rhs))
            else:
                want = np.linalg.pinv(s, rcond=rcond, hermitian=True) @ rhs
                assert int(info["kept"]) == int(np.sum(lam > cut))
            scale = np.max(np.abs(want))
            np.testing.assert_allclose(np.asarray(theta_dot), want, rtol=0, atol=1e-8 * scale)
            assert np.iscomplexobj(theta_dot) == (params == "complex")


@pytest.mark.parametrize("rows", [5, 40], ids=["fewer rows than parameters", "more rows"])
@pytest.mark.parametrize("params", ["real", "complex"])
def test_the_shift_and_the_s_norm_equal_the_dense_formulas(rng, rows, params):
    """``Shift`` equals NumPy's ``solve(S + eps I, rhs)``, eps = diag_shift + diag_scale tr(S)/P,
    whether it solves through S or, with fewer rows than parameters, through the rows' Gram
    matrix; ``s_norm`` of the equation's metric (its rows where there are fewer rows than
    parameters, else S) equals sqrt(Re δ^H S δ) for a random δ."""
    p = 16
    jac = rng.standard_normal((rows, p)) + 1j * rng.standard_normal((rows, p))
    e_loc = rng.standard_normal(rows) + 1j * rng.standard_normal(rows)
    eq = tdvp_equation(jnp.asarray(jac), jnp.asarray(e_loc), real_params=params == "real")
    s, rhs = np.asarray(eq.s), np.asarray(eq.rhs)
    for shift, scale in ((1e-3, 0.0), (1e-6, 1e-2)):
        theta_dot, info = jax.jit(Shift(shift, scale).solve)(eq)
        eps = shift + scale * np.trace(s).real / p
        want = np.linalg.solve(s + eps * np.eye(p), rhs)
        np.testing.assert_allclose(np.asarray(theta_dot), want, rtol=0, atol=1e-9 * np.max(np.abs(want)))
        assert np.iscomplexobj(theta_dot) == (params == "complex") and not bool(info["fallback"])
    metric = eq.metric()
    assert metric.shape == ((2 * rows if params == "real" else rows, p) if rows < p else (p, p))
    delta = rng.standard_normal(p) + (1j * rng.standard_normal(p) if params == "complex" else 0)
    want = np.sqrt(np.real(np.conj(delta) @ s @ delta))
    np.testing.assert_allclose(float(s_norm(metric, jnp.asarray(delta))), want, rtol=1e-12)
    np.testing.assert_allclose(float(s_norm(eq.s, jnp.asarray(delta))), want, rtol=1e-12)


def test_bad_inputs_name_the_argument():
    ham = TransverseFieldIsing(Chain(N), h=1.0)
    sampler = full_sum(table_complex)
    tdvp = TDVP(ham, sampler)
    params = {"table": jnp.zeros(2**N, complex)}
    key = jax.random.key(0)
    for dt in (0.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="^dt:"):
            tdvp.init(params, key, dt=dt)
    state = tdvp.init(params, key, dt=0.1, t0=1.0)
    for t_end in (1.0, 0.5):
        with pytest.raises(ValueError, match="^t_end:"):
            evolve(tdvp, state, t_end, progress=False)
    with pytest.raises(ValueError, match="^t_end:"):
        evolve(tdvp, state, float("inf"), progress=False)
    with pytest.raises(ValueError, match="^max_steps:"):
        evolve(tdvp, state, 2.0, max_steps=0, progress=False)
    with pytest.raises(ValueError, match="^dt:"):  # outside the adaptive bounds
        TDVP(ham, sampler, integrator=Adaptive(dt_max=0.1)).init(params, key, dt=0.5)
    with pytest.raises(ValueError, match="^n_samples:"):
        TDVP(ham, sampler, n_samples=100)
    with pytest.raises(ValueError, match="^n_samples:"):
        TDVP(ham, MetropolisSampler(table_complex, LocalFlip(), n_chains=8, n_sites=N))
    with pytest.raises(ValueError, match="^sampler:"):
        TDVP(TransverseFieldIsing(Chain(6), h=1.0), sampler)
    with pytest.raises(TypeError, match="^integrator:"):
        TDVP(ham, sampler, integrator="rk4")
    with pytest.raises(TypeError, match="^regularization:"):
        TDVP(ham, sampler, regularization=1e-4)
    with pytest.raises(TypeError, match="^hamiltonian:"):
        TDVP("tfim", sampler)
    with pytest.raises(TypeError, match="^imaginary:"):
        TDVP(ham, sampler, imaginary="yes")
    with pytest.raises(TypeError, match="^params:"):
        tdvp.init({"a": jnp.zeros(3), "b": jnp.zeros(3, complex)}, key, dt=0.1)
    with pytest.raises(ValueError, match="^tol:"):
        Adaptive(tol=0.0)
    with pytest.raises(ValueError, match="^pair:"):
        Adaptive(pair="rk45")
    with pytest.raises(ValueError, match="^dt_max:"):
        Adaptive(dt_min=0.1, dt_max=0.01)
    with pytest.raises(ValueError, match="^diag_shift:"):
        Shift(0.0)
    with pytest.raises(ValueError, match="^diag_shift:"):
        Shift(-1.0)
    with pytest.raises(ValueError, match="^rcond:"):
        PseudoInverse(rcond=1.0)
    with pytest.raises(ValueError, match="^snr_cutoff:"):
        SignalToNoise(snr_cutoff=-1.0)
    with pytest.raises(TypeError, match="^tdvp:"):
        evolve("tdvp", state, 2.0)


def test_the_step_lowered_for_an_accelerator_holds_no_float64():
    """Under the TPU record (no float64, no eigendecomposition in a device program, products
    at HIGHEST precision) the step with the shift regularization, fixed or adaptive, sampled,
    lowers to such a program. (The pseudo-inverse and the signal-to-noise cutoff solve on the
    host there, through a callback that only a real accelerator can lower.)"""
    # float64 arrays, or a conversion up to float64 (a scalar float64 constant converted at
    # once to float32, how JAX lowers a Python float in jnp.where, is folded by XLA)
    shaped = re.compile(r"tensor<[0-9x]+x(f64|complex<f64>)>|complex<f64>")
    converts_up = re.compile(r"stablehlo\.convert.*->\s*tensor<[^>]*f64")
    spectral = re.compile(r"eigh|svd|syevd|heevd|gesvd", re.I)
    ham = TransverseFieldIsing(Chain(N), h=1.0)
    for integrator in (RK4(), Adaptive()):
        with tuning.using(tuning.for_backend("tpu")):
            sampler = MetropolisSampler(table_real, LocalFlip(), n_chains=8, n_sites=N)
            tdvp = TDVP(ham, sampler, n_samples=64, integrator=integrator, regularization=Shift(1e-4))
            params = {"re": jnp.zeros(2**N, jnp.float32), "im": jnp.zeros(2**N, jnp.float32)}
            state = tdvp.init(params, jax.random.key(0), dt=0.01)
            text = tdvp._step_fn.trace(state, jnp.asarray(1.0, state.dt.dtype)).lower(
                lowering_platforms=("tpu",)).as_text()
        assert state.t.dtype == np.float32
        wide = [line for line in text.splitlines() if shaped.search(line) or converts_up.search(line)]
        assert not wide, f"float64 values in the program: {wide[:2]}"
        assert not spectral.search(text)
        products = [line for line in text.splitlines() if "dot_general" in line]
        assert products and all("HIGHEST" in line for line in products)


@pytest.mark.slow
def test_sampled_quench_regularizations():
    """Samples (2048 per evaluation, one device), Heun with dt = 0.01 up to t = 0.5 against
    exact. Measured (two seeds): max |d<sum sx>| 0.044-0.046 with the pseudo-inverse (any
    rcond from 1e-6 to 1e-3), 0.13 with a shift of 1e-4, 0.74 with 1e-3 (the shift slows the
    motion: a bias); the signal-to-noise cutoff (2.0) kept 49 of 256 directions of the table
    (a few samples per configuration: low SNR everywhere) and reached 0.35."""
    ham = TransverseFieldIsing(Chain(N), h=0.5)
    times = np.linspace(0, 0.5, 6)
    vectors, _ = exact_evolution(ham, np.ones(2**N), times)
    exact = exact_observables({"sx": sx_total()}, vectors, STATES)["sx"]
    deviation = {}
    for name, regularization in (("pinv", PseudoInverse(1e-6)), ("shift", Shift(1e-3))):
        sampler = MetropolisSampler(table_complex, LocalFlip(), n_chains=16, n_sites=N, mesh=ONE_DEVICE)
        tdvp = TDVP(ham, sampler, n_samples=2048, integrator=Heun(), regularization=regularization)
        state = tdvp.init({"table": jnp.zeros(2**N, complex)}, jax.random.key(0), dt=0.01)
        worst = 0.0
        for k, t in enumerate(times[1:], 1):
            state, records = evolve(tdvp, state, t, progress=False)
            worst = max(worst, abs(observables_of(state.params, ham)["sx"][0] - exact[k]))
            assert all(r["energy_error"] > 0 for r in records)
        deviation[name] = worst
    assert deviation["pinv"] < 0.1 and deviation["pinv"] < deviation["shift"] / 3, deviation
