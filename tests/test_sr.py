"""SR / MinSR: dense float64 references, push-through identity, fallback, collectives,
and one imaginary-time step on an exactly enumerable system (8 devices, float64)."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

from quantax_lite.utils import tuning
from quantax_lite.optimizer.preconditioners import sr
from quantax_lite.optimizer.update import natural_gradient
from quantax_lite.optimizer.stochastic_reconfiguration import _block_size, choose_method, solve_psd, sr_direction, unravel_like
from quantax_lite.utils import batch_sharding, make_mesh
from grid import keeping


def reference_update(O, e, diag_shift, diag_scale, real_params):
    """Dense numpy SR: (S + eps) x = F from explicitly centered, normalized, stacked rows."""
    O = np.asarray(O).astype(np.complex128 if np.iscomplexobj(O) else np.float64)
    e = np.asarray(e).astype(np.complex128)
    n, p = O.shape
    Oc = (O - O.mean(axis=0)) / np.sqrt(n)
    ec = (e - e.mean()) / np.sqrt(n)
    if real_params:
        A = np.concatenate([Oc.real, Oc.imag]) if np.iscomplexobj(Oc) else Oc
        b = np.concatenate([ec.real, ec.imag]) if np.iscomplexobj(Oc) else ec.real
    else:
        A, b = Oc, ec
    S = A.conj().T @ A
    F = A.conj().T @ b
    eps = diag_shift + diag_scale * np.trace(S).real / p
    return np.linalg.solve(S + eps * np.eye(p), F)


def random_problem(rng, n, p, kind, dtype=np.float64):
    O = rng.normal(size=(n, p)) + 1.5 * rng.normal(size=p)  # nonzero column means
    e = rng.normal(size=n) - 3.0
    if kind != "real":
        O = O + 1j * (rng.normal(size=(n, p)) - 0.5)
        e = e + 1j * rng.normal(size=n)
    cdt = np.result_type(dtype, np.complex64) if np.iscomplexobj(O) else dtype
    return O.astype(cdt), e.astype(np.result_type(dtype, e.dtype))


def blocks_of(size, method, n, p, kind, n_dev=8):
    """A tuning override under which the solve converts ``size`` rows (SR) or columns
    (MinSR) of the Jacobian to float64 at a time (tuning.sr_block_bytes)."""
    complex_jac, real = kind != "real", kind != "holomorphic"
    if method == "auto":
        method = choose_method(n, p, complex_jac=complex_jac, real_params=real)
    if method == "sr":
        unit = p * (16 if complex_jac else 8)
    else:
        unit = (2 if complex_jac and real else 1) * (-(-n // n_dev) * n_dev) * 8
    block_bytes = size * unit
    assert _block_size(method, n, p, complex_jac=complex_jac, real=real, n_dev=n_dev,
                       block_bytes=block_bytes) == size
    return tuning.override(sr_block_bytes=block_bytes)


# kind: complex O with real parameters (real formulation), complex parameters, real O.
# Shapes are not multiples of the 8 devices (padding); MinSR is the automatic choice for
# (9, 70), SR for (52, 10); the other method is forced too. Blocks of 3 rows (SR) or
# columns (MinSR) exercise the blocked float64 accumulation (loop and remainder).
@pytest.mark.parametrize(
    "kind, n, p",
    [("complex_real_params", 9, 70), ("holomorphic", 9, 70), ("real", 52, 10)],
)
def test_sr_and_minsr_match_dense_reference(rng, kind, n, p):
    real_params = kind != "holomorphic"
    mesh = make_mesh()
    O, e = random_problem(rng, n, p, kind)
    ref = reference_update(O, e, 1e-3, 1e-2, real_params)
    rows = 2 * n if (kind == "complex_real_params") else n
    auto = "minsr" if rows < p else "sr"
    for method in ["auto", "sr" if auto == "minsr" else "minsr"]:
        with blocks_of(3, method, n, p, kind):
            x, info = sr_direction(
                jnp.asarray(O), jnp.asarray(e), diag_shift=1e-3, diag_scale=1e-2, method=method,
                real_params=real_params, mesh=mesh, return_info=True,
            )
        assert info.method == (auto if method == "auto" else method)
        assert x.shape == (p,)
        assert x.dtype == (np.complex128 if kind == "holomorphic" else np.float64)
        assert not bool(info.used_fallback)
        np.testing.assert_allclose(np.asarray(x), ref, rtol=1e-9, atol=1e-9 * np.abs(ref).max())


@pytest.mark.parametrize("m, complex_", [(1030, False), (520, True), (200, False)])
def test_gram_upper_block_triangle(rng, m, complex_):
    """_gram forms a @ a^H from the upper panel pairs only (4 panels of uneven size for
    1030 rows, 2 for 520, the plain product below 512)."""
    from quantax_lite.optimizer.stochastic_reconfiguration import _gram

    a = rng.normal(size=(m, 37)) + (1j * rng.normal(size=(m, 37)) if complex_ else 0)
    got = np.asarray(jax.jit(_gram)(jnp.asarray(a)))
    np.testing.assert_allclose(got, a @ a.conj().T, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", keeping(["real", "complex_real_params", "holomorphic"], keep=(0, 1)))
def test_sr_with_panelled_gram_matches_dense_reference(rng, kind):
    """P = 1030 parameters: SR forms each block's contribution to S from the upper panel
    pairs of its 1030 columns (4 panels of uneven size), in blocks of 16 of the 40 rows."""
    real_params = kind != "holomorphic"
    O, e = random_problem(rng, 40, 1030, kind)
    ref = reference_update(O, e, 1e-3, 1e-2, real_params)
    with blocks_of(16, "sr", 40, 1030, kind):
        x = sr_direction(jnp.asarray(O), jnp.asarray(e), diag_shift=1e-3, diag_scale=1e-2, method="sr",
                         real_params=real_params)
    np.testing.assert_allclose(np.asarray(x), ref, rtol=1e-9, atol=1e-9 * np.abs(ref).max())


def test_minsr_with_many_samples_matches_dense_reference(rng):
    """N = 1030 samples (the panelled Gram matrix, padding to 8 devices) against numpy."""
    O, e = random_problem(rng, 1030, 1100, "real")
    ref = reference_update(O, e, 1e-3, 1e-2, True)
    x, info = sr_direction(jnp.asarray(O), jnp.asarray(e), diag_shift=1e-3, diag_scale=1e-2, return_info=True)
    assert info.method == "minsr"
    np.testing.assert_allclose(np.asarray(x), ref, rtol=1e-9, atol=1e-9 * np.abs(ref).max())


def test_push_through_identity_minsr_equals_sr(rng):
    """MinSR O^H (T + eps)^-1 eps_vec equals SR (S + eps)^-1 F for the same (relative) eps."""
    O, e = random_problem(rng, 16, 48, "complex_real_params")
    O, e = jnp.asarray(O), jnp.asarray(e)
    x_sr, i_sr = sr_direction(O, e, diag_shift=1e-4, diag_scale=0.05, method="sr", return_info=True)
    x_min, i_min = sr_direction(O, e, diag_shift=1e-4, diag_scale=0.05, method="minsr", return_info=True)
    assert i_sr.method == "sr" and i_min.method == "minsr"
    np.testing.assert_allclose(float(i_sr.eps), float(i_min.eps), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(x_min), np.asarray(x_sr), rtol=1e-8, atol=1e-10)


def test_float32_jacobian_is_solved_in_float64(rng):
    O, e = random_problem(rng, 40, 12, "complex_real_params", dtype=np.float32)
    assert O.dtype == np.complex64
    with tuning.override(gram_precision="float64"):
        x = sr_direction(jnp.asarray(O), jnp.asarray(e), diag_shift=1e-6)
    assert x.dtype == np.float64
    ref = reference_update(O, e, 1e-6, 0.0, True)  # from the same float32 values, in float64
    np.testing.assert_allclose(np.asarray(x), ref, rtol=1e-9)


@pytest.mark.parametrize(
    "kind, n, p", [("complex_real_params", 9, 70), ("holomorphic", 9, 70), ("real", 52, 10), ("real", 11, 30)]
)
def test_gram_in_jacobian_precision(rng, kind, n, p):
    """tuning gram_precision="jacobian" (the default): S or T formed in float32 from a float32 Jacobian (the
    products in the compiled program are float32), solved in float64; the direction
    matches the float64 reference to float32 rounding, for SR and MinSR."""
    real_params = kind != "holomorphic"
    O, e = random_problem(rng, n, p, kind, dtype=np.float32)
    ref = reference_update(O, e, 1e-2, 0.0, real_params)
    for method in ["sr", "minsr"]:
        def solve(O, e, precision):
            with tuning.override(gram_precision=precision):  # read at the call (here: tracing)
                return sr_direction(O, e, diag_shift=1e-2, method=method, real_params=real_params)

        x = solve(jnp.asarray(O), jnp.asarray(e), "jacobian")
        assert x.dtype == (np.complex128 if kind == "holomorphic" else np.float64)
        np.testing.assert_allclose(np.asarray(x), ref, rtol=2e-4, atol=2e-4 * np.abs(ref).max())
        x_default = sr_direction(jnp.asarray(O), jnp.asarray(e), diag_shift=1e-2, method=method,
                                 real_params=real_params)
        np.testing.assert_array_equal(np.asarray(x_default), np.asarray(x))  # "jacobian" is the default
        hlo = jax.jit(solve, static_argnums=2).lower(jnp.asarray(O), jnp.asarray(e), "jacobian").compile().as_text()
        hlo64 = jax.jit(solve, static_argnums=2).lower(jnp.asarray(O), jnp.asarray(e), "float64").compile().as_text()
        f32_dot = re.compile(r"= (f32|c64)\[[\d,]+\]\{[^}]*\} dot\(")
        assert f32_dot.search(hlo), method
        assert not f32_dot.search(hlo64), method
    with pytest.raises(ValueError, match="gram_precision"):
        with tuning.override(gram_precision="float32"):
            pass


@pytest.mark.parametrize("kind", ["real", "complex_real_params", "holomorphic"])
def test_gram_in_jacobian_precision_with_large_column_means(rng, kind):
    """tuning gram_precision="jacobian" centres in float64 before rounding to float32: columns
    1000 + N(0, 1) keep their digits (MinSR centring in float32 left 1e-4 .. 2e-3 relative
    error; now about 1e-7)."""
    real_params = kind != "holomorphic"
    for method, n, p in [("minsr", 48, 200), ("sr", 200, 48)]:  # each in its own regime
        O = 1000.0 + rng.normal(size=(n, p))
        if kind != "real":
            O = O + 1j * (500.0 + rng.normal(size=(n, p)))
        O = O.astype(np.complex64 if kind != "real" else np.float32)
        e = rng.normal(size=n) - 3.0 + (1j * rng.normal(size=n) if kind == "holomorphic" else 0)
        ref = reference_update(O, e, 1e-3, 0.0, real_params)  # the same float32 values, float64
        with blocks_of(64, method, n, p, kind), tuning.override(gram_precision="jacobian"):
            x = sr_direction(jnp.asarray(O), jnp.asarray(e), diag_shift=1e-3, method=method,
                             real_params=real_params)
        err = np.linalg.norm(np.asarray(x) - ref) / np.linalg.norm(ref)
        assert err < 1e-5, (method, err)


def test_minsr_complex_jacobian_with_real_local_energies(rng):
    """A complex Jacobian with a real e_loc (real parameters): the stacked right-hand side
    [Re e; Im e] has zero imaginary rows (MinSR used to fail on the shape mismatch)."""
    O, _ = random_problem(rng, 9, 70, "complex_real_params")
    e = rng.normal(size=9) - 3.0
    ref = reference_update(O, e, 1e-3, 0.0, True)
    for method in ["minsr", "sr"]:
        x = sr_direction(jnp.asarray(O), jnp.asarray(e), diag_shift=1e-3, method=method)
        np.testing.assert_allclose(np.asarray(x), ref, rtol=1e-9, atol=1e-9 * np.abs(ref).max())


def test_fallback_on_singular_matrices(rng):
    # SR: duplicated parameter columns and no shift -> S exactly singular
    O, e = random_problem(rng, 40, 8, "real")
    O[:, 5] = O[:, 2]
    x, info = sr_direction(jnp.asarray(O), jnp.asarray(e), diag_shift=0.0, method="sr", return_info=True)
    assert bool(info.used_fallback) and np.all(np.isfinite(np.asarray(x)))
    Oc = (O - O.mean(0)) / np.sqrt(40)
    ec = (e - e.mean()) / np.sqrt(40)
    np.testing.assert_allclose(np.asarray(x), np.linalg.pinv(Oc) @ ec, rtol=1e-7, atol=1e-9)
    # MinSR: duplicated samples -> T exactly singular; the pseudo-inverse gives pinv(O) e
    O, e = random_problem(rng, 8, 30, "complex_real_params")
    O[3], e[3] = O[1], e[1]
    x, info = sr_direction(jnp.asarray(O), jnp.asarray(e), diag_shift=0.0, method="minsr", return_info=True)
    assert bool(info.used_fallback) and np.all(np.isfinite(np.asarray(x)))
    Oc = (O - O.mean(0)) / np.sqrt(8)
    ec = (e - e.mean()) / np.sqrt(8)
    A, b = np.concatenate([Oc.real, Oc.imag]), np.concatenate([ec.real, ec.imag])
    np.testing.assert_allclose(np.asarray(x), np.linalg.pinv(A) @ b, rtol=1e-7, atol=1e-9)


def test_solve_psd_uses_cholesky_when_well_conditioned_and_falls_back_otherwise(rng):
    B = rng.normal(size=(6, 6))
    A = B @ B.T + 0.1 * np.eye(6)
    b = rng.normal(size=6)
    x, fb = jax.jit(solve_psd)(jnp.asarray(A), jnp.asarray(b))
    assert not bool(fb)
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(A, b), rtol=1e-10)
    # rank-deficient PSD matrix (rank 3)
    C = B[:, :3] @ B[:, :3].T
    x, fb = jax.jit(solve_psd)(jnp.asarray(C), jnp.asarray(b))
    assert bool(fb)
    np.testing.assert_allclose(np.asarray(x), np.linalg.pinv(C, rcond=1e-12, hermitian=True) @ b, rtol=1e-7)


def _collectives(txt):
    names = ["all-gather", "all-reduce", "all-to-all", "collective-permute", "reduce-scatter"]
    return {c: len(re.findall(rf" {c}(-start)?\(", txt)) for c in names}


def test_sr_step_collectives_on_8_devices(record_property):
    """SR: only all-reduces; MinSR: one all-to-all of O, all-gathers only of 1-D vectors."""
    mesh = make_mesh()
    assert mesh.size == 8
    for (n, p), method in [((64, 16), "sr"), ((16, 64), "minsr")]:
        O = jax.device_put(jnp.zeros((n, p), jnp.complex64), batch_sharding(mesh, 2))
        e = jax.device_put(jnp.zeros((n,), jnp.complex128), batch_sharding(mesh, 1))
        step = jax.jit(lambda O, e: sr_direction(O, e, method=method, mesh=mesh))
        txt = step.lower(O, e).compile().as_text()
        counts = _collectives(txt)
        record_property(f"{method}_collectives", counts)
        print(method, counts)
        gathered = re.findall(r"= \w+\[([\d,]*)\]\S* all-gather(?:-start)?\(", txt)
        assert all("," not in shape for shape in gathered), gathered  # never a 2-D block of O
        if method == "sr":
            assert counts["all-gather"] == 0 and counts["all-to-all"] == 0
            assert counts["all-reduce"] >= 1
        else:
            assert counts["all-to-all"] >= 1 and counts["all-reduce"] >= 1


def test_one_sr_step_lowers_the_exact_energy(rng):
    from quantax_lite.exact.diagonalization import exact_expectation
    from quantax_lite.hilbert.configurations import all_states
    from quantax_lite.geometry.lattice import Chain
    from quantax_lite.models import RBM
    from quantax_lite.operators.hamiltonian import Heisenberg

    lattice = Chain(6)
    ham = Heisenberg(lattice)
    states = all_states(6, total_sz=0)
    model = RBM(alpha=1, complex_output=True)
    shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.asarray(states[:2]))
    params = jax.tree.map(lambda x: 0.2 * rng.normal(size=x.shape).astype(x.dtype), shapes)
    log_psi = model.apply

    psi = np.exp(np.asarray(log_psi(params, jnp.asarray(states))).astype(np.complex128))
    H = ham.to_sparse(states).toarray()
    prob = np.abs(psi) ** 2 / np.sum(np.abs(psi) ** 2)
    idx = rng.choice(len(states), size=2048, p=prob)
    samples = jnp.asarray(states[idx])
    e_loc = jnp.asarray(((H @ psi) / psi)[idx])

    update, info = natural_gradient(
        log_psi, params, samples, e_loc, chunk_size=64, preconditioner=sr(diag_shift=1e-3), return_info=True
    )
    n_par = ravel_pytree(params)[0].size
    assert choose_method(2048, n_par, complex_jac=True) == "sr" and not bool(info["sr_fallback"])
    assert jax.tree.structure(update) == jax.tree.structure(params)
    assert all(u.dtype == p.dtype and u.shape == p.shape for u, p in zip(jax.tree.leaves(update), jax.tree.leaves(params)))
    flat = ravel_pytree(update)[0]

    opt = optax.sgd(0.05)
    updates, _ = opt.update(update, opt.init(params), params)
    new_params = optax.apply_updates(params, updates)
    np.testing.assert_allclose(ravel_pytree(new_params)[0], ravel_pytree(params)[0] - 0.05 * flat, rtol=1e-12)
    e0 = exact_expectation(ham, log_psi, params, total_sz=0)
    e1 = exact_expectation(ham, log_psi, new_params, total_sz=0)
    print("exact energy before, after one SR step:", e0, e1)
    assert e1 < e0 - 1e-3, (e0, e1)
    # adam accepts the same update pytree
    adam = optax.adam(1e-2)
    updates, _ = adam.update(update, adam.init(params), params)
    assert jax.tree.structure(updates) == jax.tree.structure(params)


def test_natural_gradient_compiles_once_across_eager_calls(rng, monkeypatch):
    """Three eager calls with the same log_psi, options and shapes (new parameter values,
    samples, e_loc and a new sr(diag_shift=...) each time) trace log_psi and the solve
    once; a static option (method) is a new program; each result matches sr_direction
    on the explicit Jacobian."""
    import quantax_lite.optimizer.preconditioners as preconditioners_module
    from quantax_lite.optimizer.log_derivatives import jacobian

    traces, solves = [], []

    def log_psi(params, s):
        traces.append(1)  # runs only while tracing
        h = jnp.tanh(s.astype(params["w"].dtype) @ params["w"])
        return jnp.sum(h, axis=-1) + 1j * (s.astype(params["b"].dtype) @ params["b"])

    def counting_sr_direction(*args, **kwargs):
        solves.append(isinstance(args[0], jax.core.Tracer))
        return sr_direction(*args, **kwargs)

    monkeypatch.setattr(preconditioners_module, "sr_direction", counting_sr_direction)
    n, sites, hidden = 24, 6, 5
    mesh = make_mesh()

    def args():
        params = {"w": jnp.asarray(0.3 * rng.normal(size=(sites, hidden))), "b": jnp.asarray(rng.normal(size=sites))}
        samples = jnp.asarray(rng.choice([-1, 1], size=(n, sites)).astype(np.int8))
        return params, samples, jnp.asarray(rng.normal(size=n) + 1j * rng.normal(size=n))

    counts = []
    with tuning.override(gram_precision="float64"):
        for shift in [1e-3, 2e-3, 5e-3]:
            params, samples, e_loc = args()
            update, info = natural_gradient(log_psi, params, samples, e_loc, mesh=mesh,
                                            preconditioner=sr(diag_shift=shift), return_info=True)
            counts.append((len(traces), len(solves)))
            jac = jacobian(log_psi, params, samples, mesh=mesh)
            ref = sr_direction(jac, e_loc, diag_shift=shift, mesh=mesh)
            np.testing.assert_allclose(np.asarray(ravel_pytree(update)[0]), np.asarray(ref), rtol=1e-10, atol=1e-12)
            assert float(info["sr_eps"]) == pytest.approx(shift, rel=1e-12)
            assert not bool(info["sr_fallback"])
    assert counts[0][0] >= 1 and counts[0][1] == 1 and counts[1] == counts[0] and counts[2] == counts[0], counts
    assert solves == [True]  # traced inside the one jitted program

    n_par = sites * hidden + sites
    auto = choose_method(n, n_par, complex_jac=True)
    other = "minsr" if auto == "sr" else "sr"
    update2 = natural_gradient(log_psi, params, samples, e_loc, mesh=mesh,
                               preconditioner=sr(diag_shift=5e-3, method=other))
    assert len(solves) == 2  # a static option: a new program
    ref2 = sr_direction(jac, e_loc, diag_shift=5e-3, method=other, mesh=mesh)
    np.testing.assert_allclose(np.asarray(ravel_pytree(update2)[0]), np.asarray(ref2), rtol=1e-8, atol=1e-10)
    natural_gradient(log_psi, params, samples, e_loc, mesh=mesh)  # default sr(): compiles
    natural_gradient(log_psi, params, samples, e_loc, mesh=mesh, preconditioner=sr())
    assert len(solves) == 3  # sr() equals the default: the same program
    with tuning.override(sr_block_bytes=2**20):  # other tuning in force: another program
        natural_gradient(log_psi, params, samples, e_loc, mesh=mesh)
    assert len(solves) == 4
    with tuning.override(gram_precision="float64"):  # the tuning of the first calls: cached
        natural_gradient(log_psi, params, samples, e_loc, mesh=mesh, preconditioner=sr(diag_shift=0.1))
    assert len(solves) == 4
    with pytest.raises(TypeError, match="diag_shft"):
        sr(diag_shft=1e-3)
    with pytest.raises(TypeError, match="diag_shift"):  # SR options are the preconditioner's now
        natural_gradient(log_psi, params, samples, e_loc, mesh=mesh, diag_shift=1e-3)
    with pytest.raises(ValueError, match="diag_shift"):
        natural_gradient(log_psi, params, samples, e_loc, mesh=mesh, preconditioner=sr(diag_shift=-1.0))
    with pytest.raises(TypeError, match="real direction"):  # complex parameters need real_params=False
        cparams = jax.tree.map(lambda x: x.astype(jnp.complex128), params)
        natural_gradient(lambda p, s: s.astype(p["b"].dtype) @ p["b"], cparams, samples, e_loc, mesh=mesh,
                         holomorphic=True, preconditioner=sr())


def test_unravel_like_follows_ravel_pytree_order_and_dtypes(rng):
    params = {"b": jnp.zeros((2, 3), jnp.float32), "a": [jnp.zeros(4), jnp.zeros((), jnp.float64)]}
    flat = jnp.asarray(rng.normal(size=11))
    tree = unravel_like(flat, params)
    _, unravel = ravel_pytree(params)
    expected = unravel(flat)
    for u, ex, p in zip(jax.tree.leaves(tree), jax.tree.leaves(expected), jax.tree.leaves(params)):
        assert u.dtype == p.dtype and u.shape == p.shape
        np.testing.assert_allclose(np.asarray(u), np.asarray(ex).astype(p.dtype), rtol=1e-7)


def test_bad_arguments_raise_clear_errors():
    O, e = jnp.ones((8, 3)), jnp.ones(8)
    with pytest.raises(ValueError, match="e_loc"):
        sr_direction(O, jnp.ones(7))
    with pytest.raises(ValueError, match="jac"):
        sr_direction(jnp.ones(8), e)
    with pytest.raises(ValueError, match="method"):
        sr_direction(O, e, method="cg")
    with pytest.raises(ValueError, match="diag_shift"):
        sr_direction(O, e, diag_shift=-1.0)
    for removed in ("block_size", "momentum", "previous", "gram_precision"):  # tuning / spring now
        with pytest.raises(TypeError, match=removed):
            sr_direction(O, e, **{removed: 1})
    with pytest.raises(TypeError, match="complex update"):
        unravel_like(jnp.ones(3, jnp.complex128), {"w": jnp.ones(3)})
    with pytest.raises(ValueError, match="shape"):
        unravel_like(jnp.ones(4), {"w": jnp.ones(3)})


def test_sr_direction_without_x64_solves_in_float32(rng):
    """With jax_enable_x64 off the solve runs in float32 (no float64 request, no warning)
    and agrees with the float64 solve to float32 accuracy."""
    import warnings

    O = rng.normal(size=(64, 40)).astype(np.float32)
    e = rng.normal(size=64)
    ref = np.asarray(sr_direction(jnp.asarray(O), jnp.asarray(e), diag_shift=1e-2))
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.simplefilter("error")
        d = sr_direction(jnp.asarray(O), jnp.asarray(e, jnp.float32), diag_shift=1e-2)
        assert d.dtype == jnp.float32
        d = np.asarray(d)
    np.testing.assert_allclose(d, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
