"""An evolution whose time is held in float32 (the accelerator record: no float64 in a device
program, so ``EvolutionState.t`` is float32) ends at its final time, checked on the CPU under
``tuning.for_backend("tpu")``: two float32 steps of 0.02 reach float32(0.04) = 0.04 - 8.9e-10,
which must count as arrived (a step of 8.9e-10 cannot move a float32 time at 0.04).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from quantax_lite.evolution import RK4, TDVP, Euler, EvolutionStalled, PseudoInverse, evolve
from quantax_lite.geometry.lattice import Chain
from quantax_lite.operators.hamiltonian import TransverseFieldIsing
from quantax_lite.sampler import FullSumSampler
from quantax_lite.utils import make_mesh, tuning

N = 6
POWERS = 2 ** np.arange(N)


def table_real(params, s):
    """log psi(s) = re[code(s)] + i im[code(s)] (real parameters, complex log psi)."""
    i = jnp.sum((s > 0).astype(jnp.int32) * jnp.asarray(POWERS, jnp.int32), axis=-1)
    return params["re"][i] + 1j * params["im"][i]


def _start(integrator, dt, t0=0.0):
    """A TDVP and its state made under the TPU record: float32 time, the pseudo-inverse's
    eigendecomposition on the host (a callback, as on the chip)."""
    with tuning.using(tuning.for_backend("tpu")):
        sampler = FullSumSampler(table_real, N, total_sz=None, mesh=make_mesh(jax.devices()[:1]))
        tdvp = TDVP(TransverseFieldIsing(Chain(N), h=1.0), sampler, integrator=integrator,
                    regularization=PseudoInverse(1e-6))
        params = {"re": jnp.zeros(2**N, jnp.float32), "im": jnp.zeros(2**N, jnp.float32)}
        return tdvp, tdvp.init(params, jax.random.key(0), dt=dt, t0=t0)


def test_a_float32_time_lands_on_the_final_time(monkeypatch):
    """RK4 with dt = 0.02 to t = 0.04, then on to 0.1: two steps, then three, each with one
    host eigendecomposition per stage, and the time within a few float32 units of the end."""
    calls = []
    eigh = np.linalg.eigh

    def counted(a, *args, **kwargs):
        calls.append(np.shape(a))
        return eigh(a, *args, **kwargs)

    monkeypatch.setattr(np.linalg, "eigh", counted)
    tdvp, state = _start(RK4(), 0.02)
    assert state.t.dtype == np.float32 and state.dt.dtype == np.float32
    assert float(np.float32(0.04)) < 0.04 - 1e-10  # float32 cannot hold the end: the old loop never stopped
    state, records = evolve(tdvp, state, 0.04, progress=False, max_steps=10)
    assert [r["step"] for r in records] == [1, 2], [(r["t"], r["dt"]) for r in records]
    assert abs(float(state.t) - 0.04) <= 4 * np.spacing(np.float32(0.04))
    assert len(calls) == 4 * 2 and set(calls) == {(2 * 2**N, 2 * 2**N)}  # S (real parameters): one per RK stage
    state, records = evolve(tdvp, state, 0.1, progress=False, max_steps=10)
    assert len(records) == 3 and int(state.step) == 5, [(r["t"], r["dt"]) for r in records]
    assert abs(float(state.t) - 0.1) <= 4 * np.spacing(np.float32(0.1))
    assert all(abs(r["dt"] - 0.02) < 1e-6 for r in records)
    assert len(calls) == 4 * 5


def test_a_step_that_cannot_move_a_float32_time_stops_the_run():
    """At t = 1000 a float32 time moves in units of 6.1e-5: a step of 1e-5 leaves it where it
    was. The run stops with an error naming the step and the time, its state not advanced."""
    tdvp, state = _start(Euler(), 1e-5, t0=1000.0)
    with pytest.raises(EvolutionStalled, match=r"dt = 1e-05 does not move the time.*float32") as err:
        evolve(tdvp, state, 1000.001, progress=False, max_steps=3)
    assert float(err.value.state.t) == 1000.0 and int(err.value.state.step) == int(state.step)


def test_the_state_takes_the_time_dtype_of_the_tdvps_own_record():
    """``init`` makes the state in the TDVP's own record (the one its step is compiled with),
    wherever it is called: float32 time under the accelerator record, float64 under the CPU's."""
    with tuning.using(tuning.for_backend("tpu")):
        sampler = FullSumSampler(table_real, N, total_sz=None, mesh=make_mesh(jax.devices()[:1]))
        tdvp = TDVP(TransverseFieldIsing(Chain(N), h=1.0), sampler, regularization=PseudoInverse(1e-6))
    params = {"re": jnp.zeros(2**N, jnp.float32), "im": jnp.zeros(2**N, jnp.float32)}
    state = tdvp.init(params, jax.random.key(0), dt=0.02)
    assert state.t.dtype == np.float32 and state.dt.dtype == np.float32
    cpu = TDVP(tdvp.hamiltonian, sampler, regularization=PseudoInverse(1e-6))  # the tests' record: CPU, x64 on
    assert cpu.init(params, jax.random.key(0), dt=0.02).t.dtype == np.float64
