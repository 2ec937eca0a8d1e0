"""Preconditioners: SR with schedules (one compilation), SPRING against its closed form,
the plain gradient against jax.grad of an exact energy, and the docstring's example
(8 devices, float64)."""
import re
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

import quantax_lite.optimizer.preconditioners as preconditioners_module
from quantax_lite.utils import tuning
from quantax_lite.optimizer.preconditioners import Preconditioner, SpringState, gradient, spring, sr
from quantax_lite.optimizer.update import natural_gradient
from quantax_lite.optimizer.stochastic_reconfiguration import sr_direction
from quantax_lite.utils import batch_sharding, make_mesh, replicate

from test_sr import blocks_of, random_problem, reference_update
from grid import keeping


def stacked(O, e, real_params):
    """Centred, normalized A, b of the (real-stacked) least-squares problem."""
    n = O.shape[0]
    Oc = (O - O.mean(axis=0)) / np.sqrt(n)
    ec = (e - e.mean()) / np.sqrt(n)
    if real_params:
        A = np.concatenate([Oc.real, Oc.imag]) if np.iscomplexobj(Oc) else Oc
        b = np.concatenate([ec.real, ec.imag]) if np.iscomplexobj(O) else ec.real
    else:
        A, b = Oc, ec
    return A, b


def put(O, e, sharded):
    O, e = jnp.asarray(O), jnp.asarray(e)
    if sharded:
        mesh = make_mesh()
        O, e = jax.device_put(O, batch_sharding(mesh, 2)), jax.device_put(e, batch_sharding(mesh, 1))
    return O, e


# ----------------------------------------------------------------------------------------
# SPRING
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, n, p, sharded",
    keeping([("complex_real_params", 9, 70, False), ("holomorphic", 9, 70, False), ("real", 52, 10, False),
             ("real", 11, 30, False), ("complex_real_params", 16, 70, True), ("real", 48, 10, True)], keep=(1, 2, 4)),
)
def test_spring_matches_dense_reference(rng, kind, n, p, sharded):
    """SPRING: (S + eps)(x - mu prev) = F - mu S prev, against dense numpy, with SR and
    MinSR, padding to 8 devices (or sample-sharded inputs) and blocked accumulation;
    mu = 0 gives plain SR; a fresh state (zeros) gives plain SR."""
    real_params = kind != "holomorphic"
    O, e = random_problem(rng, n, p, kind)
    prev = rng.normal(size=p) + (1j * rng.normal(size=p) if kind == "holomorphic" else 0)
    mu, eps = 0.8, 1e-3
    A, b = stacked(O, e, real_params)
    S, F = A.conj().T @ A, A.conj().T @ b
    ref = mu * prev + np.linalg.solve(S + eps * np.eye(p), F - mu * S @ prev)
    Oj, ej = put(O, e, sharded)
    params = {"w": jnp.zeros(p, jnp.float64 if real_params else jnp.complex128)}
    for method in ["sr", "minsr"]:
        inner = sr(diag_shift=eps, method=method, real_params=real_params)
        with blocks_of(3, method, n, p, kind):
            x, state, info = spring(inner, mu).update(Oj, ej, SpringState(jnp.asarray(prev)), step=0)
        np.testing.assert_allclose(np.asarray(x), ref, rtol=1e-8, atol=1e-8 * np.abs(ref).max())
        np.testing.assert_array_equal(np.asarray(state.previous), np.asarray(x))
        assert not bool(info["sr_fallback"])
        plain, _, _ = spring(inner, 0.0).update(Oj, ej, SpringState(jnp.asarray(prev)), step=0)
        np.testing.assert_allclose(np.asarray(plain), reference_update(O, e, eps, 0.0, real_params),
                                   rtol=1e-8, atol=1e-10)
        p_spring = spring(inner, mu)
        zero, _, _ = p_spring.update(Oj, ej, p_spring.init(params), step=0)
        np.testing.assert_allclose(np.asarray(zero), reference_update(O, e, eps, 0.0, real_params),
                                   rtol=1e-8, atol=1e-10)
    with pytest.raises(ValueError, match="momentum"):
        spring(sr(), 1.0)
    with pytest.raises(ValueError, match="previous"):
        spring(sr(), 0.5).update(Oj, ej, SpringState(jnp.zeros(p + 1)), step=0)


@pytest.mark.parametrize("kind", ["real", "complex_real_params"])
def test_spring_memory_term_is_accurate_for_float32_jacobians(rng, kind):
    """jac @ prev is accumulated in float64: with a float32 Jacobian whose columns have
    large means (1000 + N(0, 1)) SPRING still equals the float64 closed form of the same
    float32 values (float64 Gram precision), for SR and MinSR."""
    for method, n, p in [("minsr", 48, 200), ("sr", 200, 48)]:
        O = 1000.0 + rng.normal(size=(n, p))
        if kind != "real":
            O = O + 1j * (500.0 + rng.normal(size=(n, p)))
        O = O.astype(np.complex64 if kind != "real" else np.float32)
        e = rng.normal(size=n) - 3.0
        prev = rng.normal(size=p)
        mu, eps = 0.9, 1e-3
        A, b = stacked(O.astype(np.complex128 if kind != "real" else np.float64), e, True)
        S, F = A.T @ A, A.T @ b
        ref = mu * prev + np.linalg.solve(S + eps * np.eye(p), F - mu * S @ prev)
        with tuning.override(gram_precision="float64"):
            x, _, _ = spring(sr(eps, method=method), mu).update(
                jnp.asarray(O), jnp.asarray(e), SpringState(jnp.asarray(prev)), step=0)
        err = np.linalg.norm(np.asarray(x) - ref) / np.linalg.norm(ref)
        assert err < 1e-9, (method, err)


def test_spring_state_has_one_leaf_and_runs_in_jit(rng):
    """init: zeros (P,) float64, one array leaf (old checkpoints' sr_memory); under jit
    the state carries the last direction and each step equals the closed form; a
    momentum schedule is evaluated at the (traced) step."""
    params = {"a": jnp.zeros((3, 4)), "b": jnp.zeros(5)}
    p = spring(sr(1e-3), lambda step: 0.5 + 0.1 * step)
    state = p.init(params)
    leaves = jax.tree.leaves(state)
    assert len(leaves) == 1 and leaves[0].shape == (17,) and leaves[0].dtype == jnp.float64
    assert np.all(np.asarray(leaves[0]) == 0)
    assert p.init({"w": jnp.zeros(3, jnp.complex128)}).previous.dtype == jnp.complex128
    update = jax.jit(lambda j, e, s, k: p.update(j, e, s, step=k))
    state = replicate(state, make_mesh())  # the sharding of the states the update returns
    prev = np.zeros(17)
    for step in range(3):
        O, e = random_problem(rng, 12, 17, "complex_real_params")
        x, state, info = update(jnp.asarray(O), jnp.asarray(e), state, step)
        mu = 0.5 + 0.1 * step
        A, b = stacked(O, e, True)
        S, F = A.T @ A, A.T @ b
        ref = mu * prev + np.linalg.solve(S + 1e-3 * np.eye(17), F - mu * S @ prev)
        np.testing.assert_allclose(np.asarray(x), ref, rtol=1e-8, atol=1e-8 * np.abs(ref).max())
        prev = np.asarray(x)
    assert update._cache_size() == 1
    with pytest.raises(TypeError, match="inner"):
        spring(sr, 0.5)


# ----------------------------------------------------------------------------------------
# SR
# ----------------------------------------------------------------------------------------


def test_sr_schedule_is_evaluated_at_each_step_with_one_compilation(rng):
    """A diag_shift schedule (and a diag_scale schedule) gives the schedule's value at
    each step; the jitted update traces once, and so does natural_gradient with a
    changing step."""
    traces = []

    def shift(step):
        traces.append(1)  # runs only while tracing
        return 1e-2 * 0.5 ** step

    def scale(step):
        return 0.025 * step

    p = sr(diag_shift=shift, diag_scale=scale)
    O, e = random_problem(rng, 20, 12, "complex_real_params")
    update = jax.jit(lambda j, e, k: p.update(j, e, None, step=k))
    S_trace = np.sum(np.abs(O - O.mean(0)) ** 2) / 20
    for step in range(4):
        x, state, info = update(jnp.asarray(O), jnp.asarray(e), step)
        assert state is None
        ref = reference_update(O, e, 1e-2 * 0.5 ** step, 0.025 * step, True)
        np.testing.assert_allclose(np.asarray(x), ref, rtol=1e-9, atol=1e-9 * np.abs(ref).max())
        assert float(info["sr_eps"]) == pytest.approx(1e-2 * 0.5 ** step + 0.025 * step * S_trace / 12, rel=1e-10)
        assert not bool(info["sr_fallback"])
    assert len(traces) == 1 and update._cache_size() == 1

    # the same through natural_gradient: the step is traced
    def log_psi(params, s):
        return jnp.tanh(s.astype(jnp.float64) @ params["w"]).sum(-1) + 1j * (s.astype(jnp.float64) @ params["b"])

    params = {"w": jnp.asarray(0.3 * rng.normal(size=(6, 4))), "b": jnp.asarray(rng.normal(size=6))}
    samples = jnp.asarray(rng.choice([-1, 1], size=(16, 6)).astype(np.int8))
    e_loc = jnp.asarray(rng.normal(size=16))
    from quantax_lite.optimizer.log_derivatives import jacobian

    jac = jacobian(log_psi, params, samples)
    traces.clear()
    for step in range(3):
        upd = natural_gradient(log_psi, params, samples, e_loc, preconditioner=p, step=step)
        ref = sr_direction(jac, e_loc, diag_shift=1e-2 * 0.5 ** step, diag_scale=0.025 * step)
        np.testing.assert_allclose(np.asarray(ravel_pytree(upd)[0]), np.asarray(ref), rtol=1e-10, atol=1e-12)
    assert len(traces) == 1

    # an optax schedule (float32 values) works the same way
    decay = optax.exponential_decay(1e-2, transition_steps=1, decay_rate=0.5)
    update = jax.jit(lambda j, e, k: sr(diag_shift=decay).update(j, e, None, step=k)[2]["sr_eps"])
    for step in range(3):
        assert float(update(jnp.asarray(O), jnp.asarray(e), step)) == pytest.approx(1e-2 * 0.5 ** step, rel=1e-6)
    assert update._cache_size() == 1


def test_sr_arguments_are_validated():
    for name, bad in [("diag_shift", -1.0), ("diag_shift", np.nan), ("diag_shift", np.inf), ("diag_scale", -0.1),
                      ("diag_shift", "1e-3"), ("method", "cg"), ("rcond", 1.0), ("rcond", -0.1)]:
        with pytest.raises(ValueError, match=name):
            sr(**{name: bad})
    for bad in [-0.1, 1.0, np.nan]:
        with pytest.raises(ValueError, match="momentum"):
            spring(sr(), bad)
    assert sr(1e-3, method="minsr") == sr(1e-3, method="minsr")  # equal options, equal objects


# ----------------------------------------------------------------------------------------
# Plain gradient
# ----------------------------------------------------------------------------------------


def test_gradient_is_half_the_exact_energy_gradient():
    """A pure-phase wavefunction psi = exp(i f(theta, s)) has |psi|^2 uniform, so the
    average over every basis state once is the exact expectation: gradient() must give
    0.5 dE/dtheta of E = <psi|H|psi> / <psi|psi> from jax.grad (4-site Heisenberg
    ring, 16 states over 8 devices); natural_gradient + optax.sgd steps params - lr F."""
    from quantax_lite.hilbert.configurations import all_states
    from quantax_lite.optimizer.log_derivatives import jacobian
    from quantax_lite.geometry.lattice import Chain
    from quantax_lite.operators.hamiltonian import Heisenberg

    rng = np.random.default_rng(3)
    ham = Heisenberg(Chain(4))
    states = all_states(4)
    H = jnp.asarray(ham.to_sparse(states).toarray())

    def log_psi(params, s):
        x = s.astype(jnp.float64)
        return 1j * (jnp.tanh(x @ params["w"]).sum(-1) + x @ params["b"] + 0.5 * (x[:, 0] * x[:, 1]) * params["c"])

    params = {"w": jnp.asarray(rng.normal(size=(4, 3))), "b": jnp.asarray(rng.normal(size=4)), "c": jnp.asarray(0.7)}

    def energy(params):
        psi = jnp.exp(log_psi(params, jnp.asarray(states)))
        return jnp.real(jnp.vdot(psi, H @ psi) / jnp.vdot(psi, psi))

    exact = ravel_pytree(jax.grad(energy)(params))[0]
    psi = np.exp(np.asarray(log_psi(params, jnp.asarray(states))))
    e_loc = jnp.asarray((np.asarray(H) @ psi) / psi)
    samples = jnp.asarray(states)
    jac = jacobian(log_psi, params, samples)
    g, state, info = gradient().update(jac, e_loc, None, step=0)
    assert g.dtype == jnp.float64 and state is None and not bool(info["sr_fallback"])
    assert np.abs(exact).max() > 1e-2
    np.testing.assert_allclose(np.asarray(g), 0.5 * np.asarray(exact), rtol=1e-10, atol=1e-12)

    update = natural_gradient(log_psi, params, samples, e_loc, preconditioner=gradient())
    opt = optax.sgd(0.1)
    updates, _ = opt.update(update, opt.init(params), params)
    new = optax.apply_updates(params, updates)
    np.testing.assert_allclose(ravel_pytree(new)[0], ravel_pytree(params)[0] - 0.05 * exact, rtol=1e-10, atol=1e-12)
    assert float(energy(new)) < float(energy(params))


@pytest.mark.parametrize("kind, n, sharded", keeping([("real", 37, False), ("complex_real_params", 24, True),
                                                      ("holomorphic", 24, True), ("real", 40, True)], keep=(0, 2)))
def test_gradient_matches_dense_formula(rng, kind, n, sharded):
    """Re(Ō^H ē) (Ō^H ē for complex parameters) from float32 or float64 Jacobians,
    accumulated in float64 in blocks of 3 rows, against numpy."""
    real_params = kind != "holomorphic"
    for dtype in (np.float64, np.float32):
        O, e = random_problem(rng, n, 13, kind, dtype=dtype)
        Oc = O.astype(np.complex128) - O.astype(np.complex128).mean(0)
        ref = Oc.conj().T @ (e - e.mean()) / n
        ref = ref.real if real_params else ref
        Oj, ej = put(O, e, sharded)
        itemsize = 8 if kind == "real" else 16
        with tuning.override(sr_block_bytes=3 * 13 * itemsize):
            g, _, _ = gradient(real_params=real_params).update(Oj, ej, None, step=0)
        assert g.dtype == (np.float64 if real_params else np.complex128)
        np.testing.assert_allclose(np.asarray(g), ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())
        A, b = stacked(O.astype(np.complex128 if kind != "real" else np.float64), e, real_params)
        np.testing.assert_allclose(np.asarray(g), A.conj().T @ b, rtol=1e-10, atol=1e-12 * np.abs(ref).max())


def test_products_with_the_jacobian_stay_on_their_devices():
    """The float64 products jac @ v (SPRING) and jac^H u (gradient) of a sample-sharded
    Jacobian run per device: no all-gather of a 2-D block, no all-to-all."""
    mesh = make_mesh()
    O = jax.device_put(jnp.zeros((64, 16), jnp.complex64), batch_sharding(mesh, 2))
    e = jax.device_put(jnp.zeros((64,), jnp.float64), batch_sharding(mesh, 1))
    for f in (lambda O, e: preconditioners_module._jac_times(O, jnp.ones(16), mesh),
              lambda O, e: gradient().update(O, e, None, step=0, mesh=mesh)[0]):
        txt = jax.jit(f).lower(O, e).compile().as_text()
        gathered = re.findall(r"= \w+\[([\d,]*)\]\S* all-gather(?:-start)?\(", txt)
        assert all("," not in shape for shape in gathered), gathered
        assert " all-to-all(" not in txt


# ----------------------------------------------------------------------------------------
# The protocol's example
# ----------------------------------------------------------------------------------------


def _docstring_example() -> str:
    doc = preconditioners_module.__doc__
    start = doc.index("Writing one")
    block = doc[start:].split("::\n", 1)[1]
    lines = []
    for line in block.splitlines():
        if line.strip() and not line.startswith("    "):
            break
        lines.append(line)
    return textwrap.dedent("\n".join(lines))


def test_docstring_example_runs(rng):
    """The module docstring's diagonally scaled gradient, executed: F_k / (S_kk + eps),
    in the driver's protocol (jit, step traced), and through natural_gradient."""
    code = _docstring_example()
    assert "def diagonal_gradient" in code and len(code.strip().splitlines()) <= 14
    namespace = {}
    exec(code, namespace)
    p = namespace["diagonal_gradient"](eps=1e-2)
    assert isinstance(p, Preconditioner) and p.init({"w": jnp.zeros(3)}) is None
    O, e = random_problem(rng, 24, 10, "complex_real_params")
    A, b = stacked(O, e, True)
    ref = (A.T @ b) / (np.sum(A * A, axis=0) + 1e-2)
    x, state, info = jax.jit(lambda j, e, k: p.update(j, e, None, step=k))(jnp.asarray(O), jnp.asarray(e), 0)
    np.testing.assert_allclose(np.asarray(x), ref, rtol=1e-10)
    assert state is None and "sr_fallback" in info

    def log_psi(params, s):
        return 1j * (s.astype(jnp.float64) @ params["b"]) + jnp.tanh(s.astype(jnp.float64) @ params["w"]).sum(-1)

    params = {"w": jnp.asarray(0.3 * rng.normal(size=(5, 2))), "b": jnp.asarray(rng.normal(size=5))}
    samples = jnp.asarray(rng.choice([-1, 1], size=(16, 5)).astype(np.int8))
    e_loc = jnp.asarray(rng.normal(size=16))
    update, info = natural_gradient(log_psi, params, samples, e_loc, preconditioner=p, return_info=True)
    assert jax.tree.structure(update) == jax.tree.structure(params) and not bool(info["sr_fallback"])


def test_natural_gradient_with_spring_returns_the_state(rng):
    """natural_gradient(..., preconditioner=spring(...), return_state=True): the new
    state is the direction, fed back it equals spring's update on the explicit Jacobian;
    one program across steps."""
    from quantax_lite.optimizer.log_derivatives import jacobian

    traces = []

    def log_psi(params, s):
        traces.append(1)
        return jnp.tanh(s.astype(jnp.float64) @ params["w"]).sum(-1) + 1j * (s.astype(jnp.float64) @ params["b"])

    params = {"w": jnp.asarray(0.3 * rng.normal(size=(6, 8))), "b": jnp.asarray(rng.normal(size=6))}
    p = spring(sr(1e-3), 0.9)
    state = None
    ref_state = p.init(params)
    for step in range(3):
        samples = jnp.asarray(rng.choice([-1, 1], size=(16, 6)).astype(np.int8))
        e_loc = jnp.asarray(rng.normal(size=16))
        update, info, state = natural_gradient(log_psi, params, samples, e_loc, preconditioner=p, state=state,
                                               step=step, return_info=True, return_state=True)
        jac = jacobian(log_psi, params, samples)
        ref, ref_state, _ = p.update(jac, e_loc, ref_state, step=step)
        np.testing.assert_allclose(np.asarray(ravel_pytree(update)[0]), np.asarray(ref), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(np.asarray(state.previous), np.asarray(ref), rtol=1e-10, atol=1e-12)
        assert set(info) == {"sr_fallback", "sr_eps"}
    n_traces = len(traces)
    natural_gradient(log_psi, params, samples, e_loc, preconditioner=spring(sr(1e-2), 0.5), state=state, step=7)
    assert len(traces) == n_traces  # new numbers, same structure: no new trace
