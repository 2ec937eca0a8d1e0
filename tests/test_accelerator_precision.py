"""The precision policy per backend (quantax_lite.utils.tuning), checked on the CPU.

CI has no accelerator, so what a TPU (or GPU) run relies on is checked here through what
it guarantees: the programs lowered for "tpu" under ``tuning.for_backend("tpu")`` hold no
float64 / complex128 value and no eigendecomposition, and every matrix product in them
runs at HIGHEST precision; the float32 solve agrees with a dense float64 one; the library
trains with ``jax_enable_x64`` off. The test process itself has x64 on (conftest), so a
float64 constant that slipped into a program would show.
"""
import dataclasses
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from quantax_lite import Recipe, build
from quantax_lite.utils import tuning
from quantax_lite.observables import _moved_values_fn
from quantax_lite.optimizer.stochastic_reconfiguration import solve_psd, sr_direction
from quantax_lite.driver.vmc import ChunkSizes, energy_estimate, run
from grid import keeping

WIDE = re.compile(r"\b(f64|complex<f64>)\b")
SPECTRAL = re.compile(r"eigh|svd|Eigh|Svd|syevd|gesvd", re.I)


def _lower_tpu(fn, *args) -> str:
    return jax.jit(fn).trace(*args).lower(lowering_platforms=("tpu",)).as_text()


def _float64_work(text: str) -> list[str]:
    """Lines of the lowered program that compute with float64 / complex128 values. A
    scalar float64 constant converted at once to float32 is not such work (how JAX lowers
    a Python float in ``jnp.where(c, x, 0.0)``; XLA folds the conversion), nor passing
    such a scalar through a call."""
    scalar_only = re.compile(r"stablehlo\.constant|stablehlo\.convert|\bcall\b|func\.func|\breturn\b")
    found = []
    for line in text.splitlines():
        if not WIDE.search(line) or line.startswith("#loc"):
            continue
        shaped = re.search(r"tensor<[0-9x]+x(f64|complex<f64>)>", line) or "complex<f64>" in line
        converts_up = re.search(r"->\s*tensor<[^>]*f64", line) and "stablehlo.convert" in line
        if shaped or converts_up or not scalar_only.search(line):
            found.append(line.strip()[:200])
    return found


def _assert_accelerator_safe(text: str, what: str):
    wide = _float64_work(text)
    assert not wide, f"{what}: {len(wide)} float64 operations in the program lowered for tpu: {wide[:3]}"
    assert not SPECTRAL.search(text), f"{what}: an eigendecomposition / SVD in the program lowered for tpu"
    products = [line for line in text.splitlines() if "dot_general" in line or "convolution" in line]
    low = [line.strip()[:160] for line in products if "HIGHEST" not in line]
    assert not low, f"{what}: {len(low)} of {len(products)} matrix products below HIGHEST precision: {low[:2]}"


def _step_text(recipe: Recipe, backend: str) -> str:
    with tuning.using(tuning.for_backend(backend)):
        r = build(recipe)
        step = r.vmc._step_fn(ChunkSizes(None, None))
        return step.trace(r.state).lower(lowering_platforms=("tpu",)).as_text()


def test_tpu_record_compiles_one_copy_of_the_network_in_chunks():
    """The TPU record's speed choices (measured on the chip, compile_probe_tpu.json): every
    connection slot evaluated (no ``lax.switch`` over packing sizes, each a compiled copy of
    the network) and about 65,536 connected configurations per local-energy chunk."""
    cpu, tpu, gpu = (tuning.for_backend(name) for name in ("cpu", "tpu", "gpu"))
    assert (cpu.pack_local_energy, tpu.pack_local_energy, gpu.pack_local_energy) == (True, False, True)
    assert (cpu.local_energy_rows, tpu.local_energy_rows, gpu.local_energy_rows) == (8192, 65536, None)
    recipe = Recipe(lattice="4x4", samples=1024)
    def products(text):
        return text.count("stablehlo.convolution") + text.count("dot_general")

    convs = {}
    for name, record in (("tpu", tpu), ("tpu packed", dataclasses.replace(tpu, pack_local_energy=True))):
        with tuning.using(record):
            r = build(recipe)
            convs[name] = products(_lower_tpu(r.vmc._step_fn(ChunkSizes(None, None)), r.state))
            network = products(_lower_tpu(r.model.apply, r.state.params, jnp.ones((4, 16), jnp.int8)))
    # the packed local energies hold a copy of the network per packing size, the TPU record's one
    sizes = len(set(tpu.packed_fractions) | {1.0})
    assert convs["tpu packed"] - convs["tpu"] == (sizes - 1) * network, (convs, network)
    with tuning.using(tpu):
        vmc = build(Recipe(lattice="6x6", hamiltonian="j1j2", J2=0.5, samples=1024)).vmc
        assert vmc.local_energy_chunk_size == 65536 // vmc.hamiltonian.max_conn
    with tuning.using(gpu):
        assert build(recipe).vmc.local_energy_chunk_size is None


def test_local_energy_chunks_split_the_samples_evenly():
    """A preferred chunk that does not divide the samples is shrunk to as many equal
    chunks (the last chunk is padded to the chunk size: 1024 samples in chunks of 248
    evaluated 1240 rows)."""
    from quantax_lite.driver.vmc import _even_chunk

    assert _even_chunk(248, 1024) == 205 and 5 * 205 >= 1024
    assert _even_chunk(256, 1024) == 256 and _even_chunk(None, 1024) is None and _even_chunk(2000, 1024) == 2000
    for chunk in range(1, 300, 7):
        for rows in (2, 63, 1000, 1024):
            if chunk >= rows:
                assert _even_chunk(chunk, rows) == chunk  # one piece: nothing padded
                continue
            even = _even_chunk(chunk, rows)
            n = -(-rows // chunk)
            assert even <= chunk and -(-rows // even) == n and n * even - rows < n


@pytest.mark.slow  # two steps of the default 4x4 network (1024 and 8192 samples); the rule is the test above
def test_the_step_evaluates_local_energies_in_even_chunks():
    from quantax_lite.driver.vmc import _even_chunk

    r = build(Recipe(lattice="4x4", samples=1024))
    state, _ = r.vmc.step(r.state)
    rows = -(-1024 // r.vmc.device_mesh.size)  # per device (the tests run on 8 CPU devices)
    assert r.vmc.chunk_sizes(state.params).local_energy == _even_chunk(r.vmc.local_energy_chunk_size, rows)
    with tuning.override(local_energy_rows=33 * 200):  # 200 samples per chunk (33 connections each)
        r = build(Recipe(lattice="4x4", samples=8192))
        state, _ = r.vmc.step(r.state)
        rows = -(-r.vmc.n_samples // r.vmc.device_mesh.size)
        assert r.vmc.chunk_sizes(state.params).local_energy == _even_chunk(200, rows)


def test_for_backend_records():
    cpu, tpu, gpu = (tuning.for_backend(name) for name in ("cpu", "tpu", "gpu"))
    assert cpu.device_float64 and cpu.sr_solve == "cholesky_eigh" and cpu.matmul_precision == "default"
    for acc in (tpu, gpu):
        assert not acc.device_float64 and acc.sr_solve == "cholesky_refine" and acc.matmul_precision == "highest"
    assert tpu.backend == "tpu"
    assert tuning.current() == cpu  # the tests run on CPU devices
    with pytest.raises(ValueError, match="name"):
        tuning.for_backend("cuda")
    with pytest.raises(ValueError, match="sr_solve"):
        tuning.Tuning(sr_solve="qr")
    with pytest.raises(ValueError, match="matmul_precision"):
        tuning.Tuning(matmul_precision="bf16")
    with tuning.using(tpu):
        assert tuning.wide_dtype() == np.float32 and tuning.wide_dtype(np.complex128) == np.complex64
    assert tuning.wide_dtype() == np.float64 and tuning.wide_dtype(np.complex64) == np.complex128


@pytest.mark.parametrize("options", keeping([
    dict(lattice="4x4"),  # the command's default run
    dict(lattice="4x4", hamiltonian="j1j2", amplitude="signed", sr_momentum=0.9),  # SPRING, signed
    dict(lattice="4x4", amplitude="complex"),
    dict(lattice="4x4", sampling="exact_sum", symmetry="full"),  # exact sums
    dict(lattice="4x4", hamiltonian="j1j2", network="vit", network_options=dict(dim=8, depth=1, heads=2)),
    dict(lattice="triangular:6x3", symmetry="full"),  # complex with the 120-degree rule, the point group
], keep=(0, 1, 5), ids=["default", "j1j2-spring", "complex", "exact-sum", "vit", "triangular"]))
def test_step_lowered_for_tpu_is_float32_highest_and_has_no_eigh(options):
    _assert_accelerator_safe(_step_text(Recipe(**options), "tpu"), f"step {options}")


def test_the_check_has_teeth_on_the_cpu_record():
    """The same step built with the CPU record holds float64 and the eigh fallback."""
    text = _step_text(Recipe(lattice="4x4"), "cpu")
    assert len(_float64_work(text)) > 100 and SPECTRAL.search(text)
    assert not _float64_work("%0 = stablehlo.constant dense<0.0> : tensor<f64>\n"
                             "%1 = stablehlo.convert %0 : (tensor<f64>) -> tensor<f32>")
    assert _float64_work("%1 = stablehlo.convert %0 : (tensor<f32>) -> tensor<f64>")
    assert _float64_work("%2 = stablehlo.add %0, %1 : tensor<f64>")


def test_estimate_and_measure_programs_lowered_for_tpu():
    with tuning.using(tuning.for_backend("tpu")):
        r = build(Recipe(lattice="4x4", samples=64))
        vmc, state = r.vmc, r.state

        def estimate(chains, params):  # one block of energy_estimate
            samples, lp, chains = vmc.sampler.sample(chains, params, 64)
            return vmc.local_energies(params, samples, lp), chains

        _assert_accelerator_safe(_lower_tpu(estimate, state.sampler, state.params), "energy estimate")
        samples = jnp.ones((64, 16), jnp.int8)
        lp = jnp.zeros(64, jnp.complex64)
        specs = (("pairs", (16,)),)
        fn = _moved_values_fn(vmc.log_psi, specs, 64, None, tuning.current())
        _assert_accelerator_safe(fn.trace(state.params, samples, lp).lower(lowering_platforms=("tpu",)).as_text(),
                                 "measure: spin correlations")


def _ill_conditioned(rng, n, cond, complex_=False):
    q, _ = np.linalg.qr(rng.normal(size=(n, n)) + (1j * rng.normal(size=(n, n)) if complex_ else 0))
    w = np.geomspace(1.0, 1.0 / cond, n)
    return (q * w) @ q.conj().T


@pytest.mark.parametrize("cond", [1e2, 1e4, 1e5])
def test_refined_float32_solve_matches_dense_float64(rng, cond):
    """float32 Cholesky, with and without refinement, against numpy's float64 solve of the
    same (float64) system: a relative error of order cond * float32 epsilon (the rounding
    of the matrix to float32 alone costs that much)."""
    n = 200
    a = _ill_conditioned(rng, n, cond)
    b = rng.normal(size=n)
    exact = np.linalg.solve(a, b)
    errors = []
    for steps in (0, 2):
        x, fallback = solve_psd(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32),
                                solver="cholesky_refine", refinement=steps)
        assert x.dtype == jnp.float32 and not bool(fallback)
        errors.append(np.linalg.norm(np.asarray(x, np.float64) - exact) / np.linalg.norm(exact))
    eps32 = np.finfo(np.float32).eps
    assert max(errors) < 5 * cond * eps32, errors


def test_refined_solve_falls_back_to_a_stronger_shift_without_eigh(rng):
    """A singular matrix: the Cholesky of A fails, the shifted one gives a finite
    solution of (A + delta I) x = b, and the program holds no eigendecomposition."""
    n = 50
    v = rng.normal(size=(n, 10))
    a = (v @ v.T).astype(np.float32)  # rank 10
    a[:, 0] = a[0, :] = 0.0  # and a zero pivot
    b = rng.normal(size=n).astype(np.float32)
    x, fallback = solve_psd(jnp.asarray(a), jnp.asarray(b), solver="cholesky_refine")
    assert bool(fallback) and np.all(np.isfinite(np.asarray(x)))
    delta = n * np.finfo(np.float32).eps * np.abs(np.diag(a)).max()
    shifted = a.astype(np.float64) + delta * np.eye(n)
    x = np.asarray(x, np.float64)  # a small backward error for the shifted system
    assert np.linalg.norm(shifted @ x - b) / (np.linalg.norm(shifted, 2) * np.linalg.norm(x)) < 1e-5
    text = _lower_tpu(lambda a, b: solve_psd(a, b, solver="cholesky_refine"), jnp.asarray(a), jnp.asarray(b))
    assert not SPECTRAL.search(text)
    with pytest.raises(ValueError, match="solver"):
        solve_psd(jnp.asarray(a), jnp.asarray(b), solver="lu")


@pytest.mark.parametrize("method", ["sr", "minsr"])
def test_sr_direction_on_the_accelerator_record_matches_float64(rng, method):
    """The float32 SR / MinSR direction of the accelerator record against a dense float64
    one on the same Jacobian: within ten times the error of the CPU record's own (a float32
    Gram matrix solved in float64), on a system of condition number about 1e5."""
    n, p = 96, 60
    basis = rng.normal(size=(8, p))
    jac = (rng.normal(size=(n, 8)) @ basis + 0.05 * rng.normal(size=(n, p))).astype(np.float32)
    e = rng.normal(size=n)
    o = jac.astype(np.float64)
    o_bar = (o - o.mean(0)) / np.sqrt(n)
    e_bar = (e - e.mean()) / np.sqrt(n)
    ref = np.linalg.solve(o_bar.T @ o_bar + 1e-3 * np.eye(p), o_bar.T @ e_bar)
    cpu = np.asarray(sr_direction(jnp.asarray(jac), jnp.asarray(e), diag_shift=1e-3, method=method))
    with tuning.using(tuning.for_backend("tpu")):
        d = sr_direction(jnp.asarray(jac), jnp.asarray(e, jnp.float32), diag_shift=1e-3, method=method)
    assert d.dtype == jnp.float32

    def error(x):
        return np.linalg.norm(np.asarray(x, np.float64) - ref) / np.linalg.norm(ref)

    assert error(d) < 10 * error(cpu) + 1e-5, (error(d), error(cpu))  # measured: 0.8x to 4.6x
    assert error(d) < 1e-2


def _train_without_x64(lattice: str, iters: int, samples: int):
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.simplefilter("error")  # a float64 request would warn (and be truncated)
        r = build(Recipe(lattice=lattice, samples=samples))
        state, _ = run(r.vmc, r.state, iters, progress=False)
        stats, _ = energy_estimate(r.vmc, state, 8 * samples)
        assert np.asarray(stats.mean).dtype in (np.float32, np.complex64)
        return float(np.real(stats.mean)), float(stats.error_of_mean), r


def test_trains_chain_to_exact_without_x64():
    """chain:8 Heisenberg with jax_enable_x64 off: float32 everywhere, exact within error bars."""
    energy, error, r = _train_without_x64("chain:8", 120, 512)
    exact = r.recipe.reference_energy()
    assert abs(energy - exact) < 4 * error + 2e-4 * abs(exact), (energy, error, exact)
    assert energy > exact - 4 * error  # variational


@pytest.mark.slow
def test_trains_4x4_to_exact_without_x64():
    energy, error, r = _train_without_x64("4x4", 400, 1024)
    exact = r.recipe.reference_energy()
    assert abs(energy - exact) < 4 * error + 1e-4 * abs(exact), (energy, error, exact)


def test_lanczos_programs_lowered_for_tpu():
    """The Lanczos step's device programs (the connections of the samples, H psi of each
    connection relative to its largest term, and one sweep of the Lanczos state's sampler)
    hold no float64 on the chip, with a float32 network."""
    import dataclasses as dc

    from quantax_lite.observables.lanczos import LanczosState, _connections_program, _h_psi_program

    with tuning.using(tuning.for_backend("tpu")):
        r = build(Recipe(lattice="4x4", hamiltonian="j1j2", samples=64))
        params, samples = r.state.params, jnp.ones((64, 16), jnp.int8).at[:, ::2].set(-1)
        for name, build_program in (("connections", _connections_program), ("H psi", _h_psi_program)):
            program = build_program(r.hamiltonian, r.model.apply, 4, None, tuning.current())
            _assert_accelerator_safe(program.trace(params, samples).lower(lowering_platforms=("tpu",)).as_text(),
                                     f"Lanczos: {name}")
        wide = tuning.wide_dtype()  # as lanczos_sampled passes b and e_ref
        theta = (params, jnp.asarray(-0.1, wide), jnp.asarray(-8.0, wide))
        _assert_accelerator_safe(_lower_tpu(LanczosState(r.hamiltonian, r.model.apply), theta, samples),
                                 "Lanczos: log |psi_b|")
        sampler = dc.replace(r.sampler, log_psi=LanczosState(r.hamiltonian, r.model.apply), chunk_size=8)

        def sweep(chains, theta):
            return sampler.sample(chains, theta, 64)

        chains = sampler.init(jax.random.key(0), theta)
        _assert_accelerator_safe(_lower_tpu(sweep, chains, theta), "Lanczos: sampler of psi_b")
