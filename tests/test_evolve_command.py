"""``quantax-lite evolve``: a TFIM quench on chain:8 against the exact propagator, resume
bit for bit, and the bad inputs (one line naming the option, exit status 2, nothing written).

The conv network (complex head, readout set to zero: all spins along +x) evolves with exact
sums on one device's worth of rows; its deviation from exact is the network's (the TDVP
residual), not noise.
"""
import json
import os

import numpy as np
import pytest

from quantax_lite.driver.checkpoint import list_checkpoints
from quantax_lite.cli.command import main
from quantax_lite.driver.run_folder import read_log

QUENCH = ["--initial-state", "x", "--lattice", "chain:8", "--hamiltonian", "tfim", "--h", "0.5", "--no-progress",
          # dyadic steps: a run stopped half-way lands on its t exactly
          "--regularization", "shift", "--integrator", "rk4", "--dt", "0.03125"]


def evolve(out, *extra):
    return main(["evolve", "--out", str(out), *QUENCH, *extra])


@pytest.fixture(scope="module")
def quench(tmp_path_factory):
    out = tmp_path_factory.mktemp("evolve") / "quench"
    assert evolve(out, "--t-end", "0.125") == 0
    return out


def test_a_quench_follows_the_exact_evolution(quench):
    """Measured: max |dE| 7.9e-3 and max |d<S^x>| 4.5e-3 (site mean) up to t = 1/8 with the
    shift 1e-6 (the conv network's residual and the shift's bias; the exact energy stays -4).
    Almost all of it is the first step, from the readout at zero (evolve_run's docstring);
    outside this test the default adaptive integrator (tol 1e-4) and the pseudo-inverse reach
    1.3e-4 and 1.6e-4 up to t = 0.2."""
    summary = json.loads((quench / "summary.json").read_text())
    log = read_log(quench / "log.jsonl")
    assert [r["iteration"] for r in log] == list(range(5))
    assert [r["t"] for r in log] == [0, 0.03125, 0.0625, 0.09375, 0.125]
    assert log[0]["energy"] == pytest.approx(-4.0) and np.allclose(log[0]["sx"], 0.5)
    assert np.allclose(summary["exact"]["energy"], -4.0)
    dev = summary["max_deviation"]
    assert dev["energy"] < 2e-2 and dev["sx"] < 1e-2 and dev["szsz_nn"] < 1e-2, dev
    assert log[0]["szsz_nn"] == pytest.approx(0.0, abs=1e-12) and summary["exact"]["szsz_nn"][0] == pytest.approx(0.0)
    assert summary["exact"]["szsz_nn"][-1] > 1e-3  # the field along z correlates neighbours at once
    assert all(r["sx_mean_error"] == 0.0 == r["sz_mean_error"] for r in log)  # exact sums: no error bars
    assert all(0 <= r["residual"] < 1 for r in log[1:])
    for name in ("log.jsonl", "summary.json", "observables_vs_time.png"):
        assert (quench / name).exists()
    assert list_checkpoints(quench)


# slow: two evolutions from the command; the bit-for-bit resume: test_tdvp's test_a_sampled_evolution_resumes_bit_for_bit
@pytest.mark.slow
def test_a_resumed_evolution_continues_bit_for_bit(quench, tmp_path):
    """Stopped at t = 1/16 and resumed to 1/8 with only --t-end given (the other options the
    evolution's own): the same checkpoint and log as one run."""
    out = tmp_path / "split"
    assert evolve(out, "--t-end", "0.0625") == 0
    assert main(["evolve", "--out", str(out), "--t-end", "0.125", "--resume", "--no-progress"]) == 0
    whole, split = np.load(list_checkpoints(quench)[0]), np.load(list_checkpoints(out)[0])
    arrays = [k for k in whole.files if k.startswith("state")]
    assert arrays and all(np.array_equal(whole[k], split[k]) for k in arrays)
    strip = lambda log: [{k: v for k, v in r.items() if k != "wall_time_s"} for r in log]  # noqa: E731
    assert strip(read_log(out / "log.jsonl")) == strip(read_log(quench / "log.jsonl"))


def test_bond_zz_equals_the_operator_on_random_states():
    """``bond_zz`` with exact weights is <psi| sum_b S^z_i S^z_j |psi> / n_bonds of a random
    vector, written with the library's operators; from samples of |psi|^2 it agrees within
    its error bar (four of them)."""
    from quantax_lite.cli.evolve_run import bond_zz
    from quantax_lite.geometry.lattice import parse_lattice
    from quantax_lite.hilbert.configurations import all_states
    from quantax_lite.operators.local_operators import sz

    rng = np.random.default_rng()
    lattice = parse_lattice("3x2")
    n, bonds = lattice.n_sites, lattice.bonds(1)
    states = np.asarray(all_states(n, None))
    psi = rng.normal(size=len(states)) + 1j * rng.normal(size=len(states))
    p = np.abs(psi) ** 2 / np.sum(np.abs(psi) ** 2)
    op = sum(sz(int(i), n) @ sz(int(j), n) for i, j in bonds) / len(bonds)
    H = op.to_sparse(states)
    want = float(np.real(np.vdot(psi, H @ psi)) / np.vdot(psi, psi).real)
    got = bond_zz(states, bonds, p)
    assert got["szsz_nn"] == pytest.approx(want, abs=1e-12) and got["szsz_nn_error"] == 0.0
    drawn = states[rng.choice(len(states), size=4096, p=p)]
    sampled = bond_zz(drawn, bonds, n_chains=8)
    assert 0 < sampled["szsz_nn_error"] and abs(sampled["szsz_nn"] - want) < 4 * sampled["szsz_nn_error"]
    with pytest.raises(ValueError, match="bonds"):
        bond_zz(states, [])


def test_magnetizations_and_their_site_means_against_dense_sums(rng):
    """``magnetizations`` of a random correlated state on 6 sites: with exact weights every
    ⟨S^x_i⟩, ⟨S^z_i⟩ equals the dense sum over the 64 configurations; from samples of |psi|^2
    the site means lie within four of their errors (``sx_mean_error``, ``sz_mean_error``), and
    the error of a site mean is no larger than the largest single site's."""
    import jax.numpy as jnp

    from quantax_lite.cli.evolve_run import magnetizations
    from quantax_lite.hilbert.configurations import all_states

    n = 6
    params = {"w": jnp.asarray(0.4 * rng.normal(size=n) + 0.4j * rng.normal(size=n)),
              "v": jnp.asarray(0.4 * rng.normal(size=n) + 0.4j * rng.normal(size=n))}

    def log_psi(p, s):
        s = s.astype(jnp.float64)
        return s @ p["w"] + (s * jnp.roll(s, -1, axis=-1)) @ p["v"]

    states = np.asarray(all_states(n, None))
    psi = np.exp(np.asarray(log_psi(params, jnp.asarray(states))))
    prob = np.abs(psi) ** 2 / np.sum(np.abs(psi) ** 2)
    index = {row.tobytes(): k for k, row in enumerate(states)}
    sx_dense = np.zeros(n)
    for i in range(n):
        flipped = states.copy()
        flipped[:, i] *= -1
        partner = np.array([index[row.tobytes()] for row in flipped])
        sx_dense[i] = 0.5 * np.real(np.sum(np.conj(psi) * psi[partner])) / np.sum(np.abs(psi) ** 2)
    sz_dense = 0.5 * prob @ states
    exact = magnetizations(log_psi, params, states, prob)
    np.testing.assert_allclose(exact["sx"], sx_dense, atol=1e-12)
    np.testing.assert_allclose(exact["sz"], sz_dense, atol=1e-12)
    assert exact["sx_mean_error"] == 0.0 == exact["sz_mean_error"]
    drawn = states[rng.choice(len(states), size=4096, p=prob)]
    sampled = magnetizations(log_psi, params, drawn, n_chains=8)
    for name, want in (("sx", sx_dense.mean()), ("sz", sz_dense.mean())):
        got, err = np.mean(sampled[name]), sampled[f"{name}_mean_error"]
        assert 0 < err <= max(sampled[f"{name}_error"]) + 1e-12
        assert abs(got - want) < 4 * err, (name, got, want, err)


@pytest.mark.parametrize("power", [1.0, 0.5])
def test_the_measurements_are_of_psi_squared_whatever_the_sampling_power(power):
    """An evolution of a run trained on samples of |psi|^(2 power) measures its energy on
    samples of |psi|^2: within four error bars of the exact expectation of a state far from
    uniform, for power 1 and 0.5 alike."""
    import types

    import jax

    from quantax_lite import Recipe, build
    from quantax_lite.cli.evolve_run import measurement
    from quantax_lite.exact.diagonalization import exact_expectation
    from quantax_lite.recipes.assembly import physical_basis

    r = build(Recipe(lattice="chain:8", channels=2, depth=1, samples=512, chains=64, sampling_power=power))
    params = jax.tree.map(lambda x: 6.0 * x, r.state.params)  # far from uniform: log|psi| spread over 1.7
    measure = measurement(r, types.SimpleNamespace(exact=False, n_samples=4096),
                          physical_basis(r.model.apply, r.hamiltonian)[0])
    got = measure(types.SimpleNamespace(params=params, sampler=r.state.sampler, t=0.0))
    exact = exact_expectation(r.hamiltonian, r.model.apply, params, total_sz=0)
    assert abs(got["energy"] - exact) < 4 * got["energy_error"] + 1e-9, (got["energy"], got["energy_error"], exact)


def test_resume_refuses_an_option_that_differs_and_a_folder_of_no_evolution(quench, chain6_run, tmp_path, capsys):
    """`evolve --resume` with an option that differs from the evolution's: one line naming it
    with the recorded value, nothing written; a train run's folder: one line naming --out."""
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(quench, out)
    before = sorted(os.listdir(out)), (out / "log.jsonl").read_text()
    for extra, words in ((["--h", "0.7"], ["--h 0.7 (was 0.5)"]), (["--integrator", "heun"], ["--integrator heun"]),
                         (["--lattice", "chain:10"], ["--lattice chain:10"]), (["--imaginary"], ["--imaginary"])):
        assert main(["evolve", "--out", str(out), "--t-end", "0.25", "--resume", "--no-progress", *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "error: --resume: " in err and all(w in err for w in words), err
    assert (sorted(os.listdir(out)), (out / "log.jsonl").read_text()) == before
    assert main(["evolve", "--out", str(chain6_run), "--t-end", "0.25", "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error: --out: " in err and "no evolution" in err, err


def test_an_evolution_recorded_by_an_earlier_version_resumes(quench, tmp_path):
    """An evolution whose checkpoints record the recipe without a field added since (schema
    version 2, no sinh_offset) resumes with only --t-end given."""
    import shutil

    out = tmp_path / "earlier"
    shutil.copytree(quench, out)
    for path in list_checkpoints(out):
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files}
        meta = json.loads(bytes(arrays["metadata"]).decode())
        meta["config"]["recipe"].pop("sinh_offset")
        meta["config"]["recipe"]["schema_version"] = 2
        arrays["metadata"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        np.savez(path, **arrays)
    assert main(["evolve", "--out", str(out), "--t-end", "0.1875", "--resume", "--no-progress"]) == 0
    assert [r["t"] for r in read_log(out / "log.jsonl")][-1] == 0.1875


@pytest.fixture(scope="module")
def chain6_run(tmp_path_factory):
    """A one-step train run on chain:6 (complex network), to start from."""
    out = tmp_path_factory.mktemp("train") / "chain6"
    assert main(["train", "--out", str(out), "--lattice", "chain:6", "--hamiltonian", "tfim", "--amplitude", "complex",
                 "--sampling", "exact_sum", "--iters", "1", "--channels", "2", "--depth", "1", "--no-progress"]) == 0
    return out


@pytest.mark.parametrize("args, option", [
    (QUENCH + ["--t-end", "1", "--dt", "0"], "--dt"),  # (the last --dt wins)
    (QUENCH + ["--t-end", "1", "--dt", "-0.1"], "--dt"),
    (QUENCH + ["--t-end", "0"], "--t-end"),
    (QUENCH + ["--t-end", "-1"], "--t-end"),
    (["--initial-state", "x", "--lattice", "chain:8", "--hamiltonian", "ising", "--t-end", "1"], "--hamiltonian"),
    (["--initial-state", "x", "--lattice", "chain:8", "--t-end", "1"], "--initial-state"),  # heisenberg: Sz = 0
    (QUENCH + ["--t-end", "1", "--tol", "1e-3"], "--tol"),
])
def test_bad_inputs_are_one_line_naming_the_option(tmp_path, capsys, args, option):
    out = tmp_path / "run"
    assert main(["evolve", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"error: {option}" in err, err
    assert not out.exists()


def test_a_run_folder_of_another_lattice_is_refused(chain6_run, tmp_path, capsys):
    out = tmp_path / "run"
    for extra in (["--lattice", "chain:8"], []):  # another lattice; a real psi in real time (not here: complex)
        code = main(["evolve", "--out", str(out), "--init-from", str(chain6_run), "--hamiltonian", "tfim", "--h", "2",
                     "--t-end", "0.05", "--dt", "0.05", "--integrator", "rk4", "--regularization", "shift", "--no-progress",
                     *extra])
        if extra:
            err = capsys.readouterr().err.strip()
            assert code == 2 and "error: --init-from" in err and "chain:6" in err, err
            assert not out.exists()
        else:  # the run's own lattice: a quench from the trained state
            assert code == 0
            assert len(read_log(out / "log.jsonl")) == 2
    assert os.path.exists(out / "summary.json")


def test_a_diverging_evolution_stops_with_its_last_good_state(tmp_path, capsys):
    """Forward Euler with steps far beyond its stability limit: exit 3, one line, the last
    finite state checkpointed and summary.json saying diverged."""
    out = tmp_path / "run"
    code = main(["evolve", "--out", str(out), *QUENCH, "--t-end", "1000", "--dt", "3", "--integrator", "euler",
                 "--diag-shift", "1e-10"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and "diverged" in err[-1] and "--dt" in err[-1], err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["diverged"] and summary["steps"] == len(read_log(out / "log.jsonl")) - 1
    newest = np.load(list_checkpoints(out)[0])
    assert all(np.all(np.isfinite(newest[k])) for k in newest.files if k.startswith("state.params"))


def test_a_folder_in_use_is_refused(tmp_path, capsys):
    """The folder's lock, as for train: a second run into it exits 2 and writes nothing there."""
    from quantax_lite.driver.run_folder import lock_run_folder

    out = tmp_path / "run"
    with lock_run_folder(out):
        code = main(["evolve", "--out", str(out), *QUENCH, "--t-end", "0.1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "error: --out" in err and "in use" in err, err
    assert sorted(os.listdir(out)) == [".lock"]


@pytest.mark.slow
def test_imaginary_time_reaches_the_ground_state(tmp_path):
    """From +x to the chain:8 TFIM ground state at h = 1.5 (adaptive, the default; the shift,
    as the pseudo-inverse's eigendecomposition is repeated on each of the suite's eight
    simulated devices). Measured: -13.3850046 at tau = 3 on one CPU device (44 steps, 40 s),
    -13.3850053 on the suite's eight (3 minutes), against -13.3850052 (exact ground state);
    float32 networks land within about 1e-7 of it, either side."""
    from quantax_lite.exact.diagonalization import ground_state
    from quantax_lite.geometry.lattice import Chain
    from quantax_lite.operators.hamiltonian import TransverseFieldIsing

    out = tmp_path / "tau"
    assert main(["evolve", "--out", str(out), "--initial-state", "x", "--lattice", "chain:8", "--hamiltonian", "tfim",
                 "--h", "1.5", "--t-end", "3", "--imaginary", "--regularization", "shift", "--no-progress"]) == 0
    energies = [r["energy"] for r in read_log(out / "log.jsonl")]
    e0 = ground_state(TransverseFieldIsing(Chain(8), h=1.5))[0]
    assert np.all(np.diff(energies) < 1e-6)
    assert -1e-6 < energies[-1] - e0 < 1e-5, energies[-1] - e0


def test_a_step_that_cannot_move_the_time_ends_the_command_in_one_line(tmp_path, capsys, monkeypatch):
    """A stalled step (``EvolutionStalled``, e.g. a float32 time on an accelerator) ends
    ``evolve`` with one line naming --dt, exit status 2, and the last state kept."""
    from quantax_lite.cli import evolve_run
    from quantax_lite.evolution import EvolutionStalled

    real = evolve_run.evolve

    def stalls(tdvp, state, t_end, **kw):
        state, records = real(tdvp, state, 0.0625, **kw)  # two good steps, then no progress
        raise EvolutionStalled(state, float(state.t), 1e-12, np.float32, records)

    monkeypatch.setattr(evolve_run, "evolve", stalls)
    out = tmp_path / "stalled"
    assert evolve(out, "--t-end", "0.125") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("quantax-lite evolve: error: --dt: at t = 0.0625") and "float32" in err, err
    assert max(int(p.rsplit("-", 1)[1].split(".")[0]) for p in list_checkpoints(out)) == 2

