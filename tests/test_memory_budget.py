"""chunk_size="auto" and the memory budget: the largest chunk whose compiled program fits,
found by compiling (not running); the budget resolver; the driver and the command
(8 simulated CPU devices)."""
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from quantax_lite.utils import tuning
from quantax_lite.cli.command import build_parser, main
from quantax_lite.optimizer.log_derivatives import jacobian
from quantax_lite.geometry.lattice import Chain
from quantax_lite.driver.memory import (
    MemoryBudgetError, chunk_candidates, device_memory_bytes, largest_fitting_chunk, program_bytes,
    resolve_memory_budget,
)
from quantax_lite.models import make_rbm_nqs
from quantax_lite.operators.hamiltonian import Heisenberg, make_local_energy
from quantax_lite.sampler import Exchange, MetropolisSampler
from quantax_lite.utils import batch_sharding, chunk_map, make_mesh, replicated_sharding
import quantax_lite.driver.vmc as vmc_module
from quantax_lite.driver.vmc import VMC, ChunkSizes

N_DEV = jax.device_count()


def _chunked_program(rows_per_device=64, cols=64):
    """``chunk -> Compiled``: a chunk_map whose scratch grows with the chunk."""
    g = jax.vmap(lambda r: jnp.cumsum(jnp.sin(jnp.outer(r, r)), axis=0).max())
    mesh = make_mesh()
    spec = jax.ShapeDtypeStruct((rows_per_device * N_DEV, cols), jnp.float64, sharding=batch_sharding(mesh, 2))
    calls = []

    def compile_at(chunk):
        calls.append(chunk)
        return jax.jit(chunk_map(g, chunk_size=chunk, use_scan=True, mesh=mesh)).lower(spec).compile()

    return compile_at, calls


def test_candidates():
    assert chunk_candidates(1) == (1,)
    assert chunk_candidates(64) == (1, 2, 4, 8, 16, 32, 64)
    assert chunk_candidates(13) == (1, 2, 4, 8, 13)
    assert chunk_candidates(100, preferred=20) == (1, 2, 4, 8, 16, 20)
    assert chunk_candidates(5, preferred=1170) == (1, 2, 4, 5)


def test_the_chosen_chunk_fits_and_the_next_larger_does_not():
    compile_at, calls = _chunked_program()
    candidates = chunk_candidates(64)
    need = [program_bytes(compile_at(c)) for c in candidates]
    assert need == sorted(need) and need[0] < need[-1], need  # memory grows with the chunk
    i = next(k for k in range(2, len(need) - 1) if need[k] < need[k + 1])
    for budget in (need[i], (need[i] + need[i + 1]) // 2):
        calls.clear()
        chosen = largest_fitting_chunk(compile_at, candidates, budget)
        assert chosen == candidates[i]
        c_next = candidates[candidates.index(chosen) + 1]
        assert program_bytes(compile_at(chosen)) <= budget < program_bytes(compile_at(c_next))
        assert len(set(calls)) <= 1 + math.ceil(math.log2(len(candidates)))  # a bisection, not a scan
    calls.clear()
    assert largest_fitting_chunk(compile_at, candidates, need[-1]) == 64 and calls == [64]  # fits: one compile


def test_a_budget_below_one_row_names_memory_budget():
    compile_at, _ = _chunked_program(rows_per_device=8)
    one_row = program_bytes(compile_at(1))
    with pytest.raises(MemoryBudgetError, match="memory_budget") as err:
        largest_fitting_chunk(compile_at, chunk_candidates(8), one_row - 1, what="g")
    assert isinstance(err.value, ValueError)
    assert f"{one_row - 1} bytes per device" in str(err.value) and f"the {one_row} bytes g needs" in str(err.value)
    assert "one row per chunk" in str(err.value)


class _Device:
    platform = "gpu"

    def memory_stats(self):
        return {"bytes_limit": 1000, "bytes_in_use": 10}


def test_budget_resolver():
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    whole = device_memory_bytes()
    assert whole == host // N_DEV  # CPU devices of one host share its memory
    assert resolve_memory_budget() == whole
    assert resolve_memory_budget(0.5) == int(0.5 * whole)
    assert resolve_memory_budget(1) == resolve_memory_budget(1.0) == whole  # <= 1: a fraction
    assert resolve_memory_budget(4096) == 4096 and resolve_memory_budget(1e9) == 10**9  # > 1: bytes
    assert device_memory_bytes(_Device()) == 1000 and resolve_memory_budget(0.25, _Device()) == 250
    for bad in (0, -1, 0.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="memory_budget"):
            resolve_memory_budget(bad)
    for bad in ("8G", True, [1]):
        with pytest.raises(TypeError, match="memory_budget"):
            resolve_memory_budget(bad)


# --------------------------------------------------------------------------- #
# the driver                                                                   #
# --------------------------------------------------------------------------- #

N_SAMPLES = 64  # 8 per device: candidates 1, 2, 4, 8


def _system():
    lattice = Chain(6)
    ham = Heisenberg(lattice, marshall_sign=True)
    model = make_rbm_nqs(lattice, alpha=1, complex_output=False)
    params = model.init(jax.random.PRNGKey(0), jnp.ones((1, 6), jnp.int8))
    sampler = MetropolisSampler(model.apply, Exchange(lattice.bonds(1)), n_chains=16, n_sites=6, n_thermalize=5)
    return ham, model, params, sampler


def _specs(params, mesh):
    p = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated_sharding(mesh)), params)
    s = jax.ShapeDtypeStruct((N_SAMPLES, 6), jnp.int8, sharding=batch_sharding(mesh, 2))
    lp = jax.ShapeDtypeStruct((N_SAMPLES,), jnp.float64, sharding=batch_sharding(mesh, 1))
    return p, s, lp


def _no_part(*args, **kwargs):
    raise AssertionError("a part was compiled alone")


def test_auto_with_a_tight_budget_computes_what_an_explicit_chunk_does(monkeypatch):
    """A budget that holds local energies in chunks of 4 but not 8: "auto" picks 4 for them
    (measured here independently of the driver), a Jacobian chunk that fits while the next
    larger does not, and the energies are those of chunk_size=4, exactly."""
    ham, model, params, sampler = _system()
    mesh = sampler.resolved_mesh()
    p, s, lp = _specs(params, mesh)
    with tuning.override(pack_local_energy=False):  # the same programs, compiled faster
        le_bytes = {c: program_bytes(jax.jit(make_local_energy(ham, model.apply, chunk_size=c, jit=False,
                                                                 mesh=mesh)).lower(p, s, lp).compile())
                    for c in (4, 8)}
        budget = le_bytes[4]
        assert le_bytes[8] > budget
        auto = VMC(ham, sampler, optax.sgd(0.05), N_SAMPLES, memory_budget=budget)
        fixed = VMC(ham, sampler, optax.sgd(0.05), N_SAMPLES, chunk_size=4)
    assert auto.memory_budget_bytes == budget
    sizes = auto.chunk_sizes(params)
    assert sizes.local_energy == 4
    jac_chunk = 8 if sizes.jacobian is None else sizes.jacobian

    def jac_bytes(c):
        return program_bytes(jax.jit(lambda q, x: jacobian(model.apply, q, x, chunk_size=c, mesh=mesh))
                             .lower(p, s).compile())

    assert jac_bytes(jac_chunk) <= budget
    if jac_chunk < 8:
        assert jac_bytes(2 * jac_chunk) > budget
    monkeypatch.setattr(vmc_module.memory, "largest_fitting_chunk", _no_part)
    assert auto.chunk_sizes(params) == sizes  # chosen once per parameter shapes

    state = auto.init(jax.random.PRNGKey(1), params)
    samples, log_psi_s, _ = sampler.sample(state.sampler, state.params, N_SAMPLES)
    e_auto = auto.local_energies(state.params, samples, log_psi_s)
    np.testing.assert_array_equal(e_auto, fixed.local_energies(state.params, samples, log_psi_s))
    np.testing.assert_array_equal(jax.jit(auto.local_energies)(state.params, samples, log_psi_s), e_auto)
    new_auto, m_auto = auto.step(state)
    new_fixed, m_fixed = fixed.step(state)
    assert complex(m_auto["energy"]) == complex(m_fixed["energy"])
    for a, b in zip(jax.tree.leaves(new_auto.params), jax.tree.leaves(new_fixed.params)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_default_budget_keeps_the_preferred_chunks_and_compiles_only_the_step(monkeypatch):
    """The device's memory holds the step at the library's preferred chunks: they are kept
    (the cache-sized local-energy chunk on CPUs, the Jacobian unchunked) and no part is
    compiled on its own."""
    ham, model, params, sampler = _system()
    vmc = VMC(ham, sampler, optax.sgd(0.05), N_SAMPLES)
    assert vmc.chunk_size == "auto" and vmc.memory_budget_bytes == device_memory_bytes()
    monkeypatch.setattr(vmc_module.memory, "largest_fitting_chunk", _no_part)
    state, metrics = vmc.step(vmc.init(jax.random.PRNGKey(1), params))
    assert np.isfinite(complex(metrics["energy"]).real)
    preferred = tuning.current().local_energy_rows // ham.max_conn
    assert vmc.chunk_sizes(params) == ChunkSizes(preferred, None) == (vmc.local_energy_chunk_size, None)
    assert VMC(ham, sampler, optax.sgd(0.05), N_SAMPLES, chunk_size=None).auto_chunks  # None: the same as "auto"


def test_driver_errors():
    ham, model, params, sampler = _system()
    with tuning.override(pack_local_energy=False):
        vmc = VMC(ham, sampler, optax.sgd(0.05), N_SAMPLES, memory_budget=100)
    with pytest.raises(MemoryBudgetError, match="memory_budget: 100 bytes per device.*local energies.*one row"):
        vmc.chunk_sizes(params)
    with pytest.raises(ValueError, match="memory_budget"):
        VMC(ham, sampler, optax.sgd(0.05), N_SAMPLES, chunk_size=8, memory_budget=0.5)
    with pytest.raises(TypeError, match="chunk_size"):
        VMC(ham, sampler, optax.sgd(0.05), N_SAMPLES, chunk_size="big")
    with pytest.raises(ValueError, match="chunk_size"):
        VMC(ham, sampler, optax.sgd(0.05), N_SAMPLES, chunk_size=0)
    with pytest.raises(ValueError, match="memory_budget"):
        VMC(ham, sampler, optax.sgd(0.05), N_SAMPLES, memory_budget=-1)


# --------------------------------------------------------------------------- #
# the command                                                                  #
# --------------------------------------------------------------------------- #


def test_command_line_options(tmp_path, capsys):
    parse = build_parser().parse_args
    assert parse(["train"]).chunk_size == "auto" and parse(["train"]).memory_budget is None
    assert parse(["train", "--chunk-size", "auto"]).chunk_size == "auto"
    assert parse(["train", "--chunk-size", "64"]).chunk_size == 64
    assert parse(["train", "--memory-budget", "0.5"]).memory_budget == 0.5
    assert parse(["train", "--memory-budget", "8000000000"]).memory_budget == 8_000_000_000
    for option, value in (("--chunk-size", "big"), ("--chunk-size", "1.5"), ("--memory-budget", "8G")):
        with pytest.raises(SystemExit) as exit_:
            main(["train", option, value])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and option in err and len(err.strip().splitlines()) == 1, err
    out = str(tmp_path / "x")
    for extra, option in ((["--chunk-size", "0"], "--chunk-size"), (["--memory-budget", "-1"], "--memory-budget"),
                          (["--chunk-size", "8", "--memory-budget", "0.5"], "--memory-budget")):
        assert main(["train", "--out", out, "--no-progress"] + extra) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"quantax-lite train: error: {option}") and len(err.strip().splitlines()) == 1, err
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "--memory-budget" in capsys.readouterr().out


def test_command_with_a_budget_too_small(tmp_path, capsys):
    """The budget is checked when the first step compiles: one line naming --memory-budget."""
    code = main(["train", "--lattice", "chain:4", "--channels", "2", "--depth", "1", "--samples", "16",
                 "--chains", "8", "--symmetry", "none", "--iters", "1", "--no-progress", "--memory-budget", "1000",
                 "--out", str(tmp_path / "tiny")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert err.startswith("quantax-lite train: error: --memory-budget: 1000 bytes per device"), err
