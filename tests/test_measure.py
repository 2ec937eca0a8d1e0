"""`quantax-lite measure`, `train --measure`, `recipes.load_run`, `recipes.physical_basis` and
params-only save/load, on one tiny trained run (8-site chain, 8 simulated CPU devices) and
against exact values (dense algebra over all 2^8 configurations)."""
import contextlib
import io
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from quantax_lite.cli.command import main
from quantax_lite.driver.run_folder import list_checkpoints, lock_run_folder

TRAIN = ["train", "--lattice", "chain:8", "--channels", "4", "--depth", "1", "--samples", "64", "--chains", "16",
         "--iters", "3", "--lr", "0.05", "--eval-samples", "256", "--no-progress", "--seed", "5"]


def _strict(path):
    def refuse(token):
        raise AssertionError(f"{path}: non-finite {token}")

    with open(path) as fh:
        return json.loads(fh.read(), parse_constant=refuse)


@pytest.fixture(scope="module")
def loaded(trained):
    from quantax_lite.recipes import load_run

    return load_run(trained[0])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished run with --measure: (folder, printed table)."""
    out = str(tmp_path_factory.mktemp("measure") / "run")
    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        assert main(TRAIN + ["--out", out, "--measure"]) == 0
    return out, table.getvalue()


# ------------------------------------------------------------------ exact references
def _all_states(n):
    bits = (np.arange(2**n)[:, None] >> np.arange(n)[::-1]) & 1
    return (2 * bits - 1).astype(np.int8)


def _spin_ops(n):
    """S^x, S^y, S^z (spin-1/2) of every site as dense 2^n x 2^n matrices, in the basis of
    _all_states (site 0 the most significant bit, +1 = up = bit 1)."""
    sx = np.array([[0, 1], [1, 0]]) / 2
    sy = np.array([[0, -1j], [1j, 0]]) / 2
    sz = np.array([[-1, 0], [0, 1]]) / 2  # index 0 = bit 0 = spin down
    ops = []
    for i in range(n):
        def at(m):
            out = np.eye(1)
            for k in range(n):
                out = np.kron(out, m if k == i else np.eye(2))
            return out
        ops.append((at(sx), at(sy), at(sz)))
    return ops


def _exact_correlations(psi, n):
    """<S_i . S_j> of the vector psi (normalized here), (n, n)."""
    psi = psi / np.linalg.norm(psi)
    ops = _spin_ops(n)
    c = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            c[i, j] = sum(np.real(np.conj(psi) @ (ops[i][a] @ (ops[j][a] @ psi))) for a in range(3))
    return c


def _structure_factor(c, coords, q):
    dr = coords[:, None, :] - coords[None, :, :]
    return np.array([np.sum(np.cos(dr @ qq) * c) / len(c) for qq in q])


# ---------------------------------------------------------------------------- tests
@pytest.mark.slow  # the module's one training run (about 40 s of CPU on 8 simulated devices)
def test_train_measure_writes_strict_observables_and_a_short_table(trained):
    out, table = trained
    obs = _strict(os.path.join(out, "observables.json"))
    for key in ("schema", "n_sites", "n_samples", "energy", "spin_correlations", "correlation_vs_distance",
                "structure_factor", "s_pi_pi", "staggered_magnetization_sq", "dimer_correlations", "run"):
        assert key in obs, key
    assert obs["n_samples"] == 256 and obs["run"]["recipe"]["lattice"] == "chain:8"
    for name in ("structure_factor.png", "correlations.png", "energy.png"):
        assert os.path.getsize(os.path.join(out, name)) > 1000
    summary = _strict(os.path.join(out, "summary.json"))
    # the table's S(pi,pi) and m^2: from the final estimate's samples, m^2 = S(pi,pi) / N
    assert summary["staggered_magnetization_sq"] == pytest.approx(summary["s_pi_pi"] / 8, rel=1e-12)
    assert 0 < summary["n_observable_samples"] <= 256 and summary["n_observable_samples"] % 16 == 0
    assert f"{summary['s_pi_pi']:.4f}" in table and "S(π,π), m²" in table
    assert len(table.strip().splitlines()) == 11 and "E(σ²→0) fit" in table


@pytest.mark.slow
def test_measure_agrees_with_the_exact_values_of_the_trained_state(trained, loaded, capsys):
    """S(q), C(r), m^2 and the energy from `measure`'s fresh samples lie within their error
    bars of the exact values of the trained wavefunction (all 2^8 configurations, dense
    spin matrices, the Marshall sign of the training basis undone by hand)."""
    from quantax_lite.operators.hamiltonian import marshall_sign

    out, _ = trained
    before = _strict(os.path.join(out, "observables.json"))
    assert main(["measure", "--out", out, "--samples", "256", "--seed", "11"]) == 0
    printed = capsys.readouterr().out
    obs = _strict(os.path.join(out, "observables.json"))
    assert obs["n_samples"] == 256 and obs["run"]["seed"] == 11 and obs["dimer_correlations"]["x"]["mean"]
    assert obs["structure_factor"]["mean"] != before["structure_factor"]["mean"]  # fresh samples
    assert "S(pi,pi)" in printed and "observables.json" in printed

    lattice, n = loaded.run.lattice, 8
    states = _all_states(n)
    log_psi = np.asarray(loaded.run.model.apply(loaded.state.params, jnp.asarray(states)))
    psi = np.exp(log_psi - log_psi.real.max()) * (states.sum(axis=1) == 0)  # the sampled Sz = 0 sector
    psi = psi * marshall_sign(lattice, states)  # the training basis is U H U
    c = _exact_correlations(psi, n)
    coords = np.asarray(lattice.coords, float)
    q = np.asarray(obs["structure_factor"]["q"], float)
    exact_sq = _structure_factor(c, coords, q)
    mc, err = np.asarray(obs["structure_factor"]["mean"]), np.asarray(obs["structure_factor"]["error"])
    assert np.all(np.abs(mc - exact_sq) < 5 * err + 1e-3), (mc, exact_sq, err)
    k = int(np.argmin(np.abs(q[:, 0] - np.pi)))
    assert obs["s_pi_pi"]["mean"] == pytest.approx(mc[k], abs=1e-10)
    assert abs(obs["staggered_magnetization_sq"]["mean"] - exact_sq[k] / n) < 5 * obs[
        "staggered_magnetization_sq"]["error"] + 1e-4
    # C(r) at r = 1 (nearest neighbours): negative, within errors of the exact value
    cr = obs["correlation_vs_distance"]
    j = cr["distance"].index(1.0)
    exact_c1 = np.mean([c[i, (i + 1) % n] for i in range(n)])
    assert exact_c1 < -0.3 and abs(cr["mean"][j] - exact_c1) < 5 * cr["error"][j] + 1e-3
    # the energy: <H> = sum over the bonds of <S_i . S_j> of the same vector
    bonds = np.asarray(lattice.bonds(1))
    assert len(bonds) == n
    e_exact = float(np.sum(c[bonds[:, 0], bonds[:, 1]]))
    assert abs(obs["energy"]["mean"] - e_exact) < 5 * obs["energy"]["error"] + 1e-3


def test_physical_basis_gives_the_plain_correlations():
    """The exact ground state of the Marshall-rotated Heisenberg model on 4x2, through
    physical_basis and observables in exact mode (weights |psi|^2), has the correlations
    of the plain model's ground state (dense algebra); the rotated vector's own
    correlations differ on pairs joining the two sublattices (what physical_basis undoes)."""
    from quantax_lite.exact.diagonalization import ground_state
    from quantax_lite.geometry.lattice import Square
    from quantax_lite.observables import spin_correlations
    from quantax_lite.operators.hamiltonian import Heisenberg
    from quantax_lite.recipes import physical_basis

    lattice = Square(4, 2)
    n = lattice.n_sites
    rotated = Heisenberg(lattice, marshall_sign=True)
    _, vec, basis = ground_state(rotated)
    vec, basis = np.real(np.asarray(vec)), np.asarray(basis)
    powers = 2 ** np.arange(n)[::-1]
    table = np.full(2**n, -1e3 + 0j)  # log psi; tiny outside the sector
    idx = ((basis + 1) // 2) @ powers
    table[idx] = np.log(np.abs(vec) + 1e-300) + 1j * np.pi * (vec < 0)
    table = jnp.asarray(table)

    def log_psi(params, s):
        return table[((jnp.asarray(s, jnp.int32) + 1) // 2) @ jnp.asarray(powers)]

    plain_log_psi, plain = physical_basis(log_psi, rotated)
    assert not plain.marshall_sign and plain.lattice == lattice
    weights = np.abs(vec) ** 2
    corr = spin_correlations(plain_log_psi, None, jnp.asarray(basis, jnp.int8), weights=weights)
    _, plain_vec, plain_basis = ground_state(Heisenberg(lattice))
    full = np.zeros(2**n, complex)
    full[((np.asarray(plain_basis) + 1) // 2) @ powers] = np.asarray(plain_vec)
    exact = _exact_correlations(full, n)
    np.testing.assert_allclose(corr.mean, exact, atol=1e-8)
    rotated_vec = np.zeros(2**n)
    rotated_vec[idx] = vec
    wrong = _exact_correlations(rotated_vec, n)
    sub = np.asarray(lattice.sublattice)
    cross = sub[:, None] != sub[None, :]
    assert np.max(np.abs(wrong - exact)[cross]) > 0.1
    np.testing.assert_allclose(wrong[~cross], exact[~cross], atol=1e-8)


def _without_recipe(src_dir, dst_dir):
    """A copy of the newest checkpoint whose metadata has no recipe (as vmc.run writes)."""
    os.makedirs(dst_dir)
    src = list_checkpoints(src_dir)[0]
    with np.load(src) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["metadata"] = np.frombuffer(b"{}", dtype=np.uint8)
    np.savez(os.path.join(dst_dir, os.path.basename(src)), **arrays)


def test_measure_bad_inputs_are_one_line_errors(trained, tmp_path, capsys):
    out, _ = trained
    empty = tmp_path / "empty"
    empty.mkdir()
    _without_recipe(out, str(tmp_path / "bare"))
    cases = [
        (["--out", str(tmp_path / "missing")], "--out", "not a folder"),
        (["--out", str(empty)], "--out", "holds no checkpoint"),
        (["--out", str(tmp_path / "bare")], "--out", "records no recipe"),
        (["--out", out, "--samples", "0"], "--samples", "positive int"),
        (["--out", out, "--seed", "-1"], "--seed", ""),
        (["--out", out, "--samples", "100"], "--samples", "multiple of the run's 16 chains"),
    ]
    for argv, option, words in cases:
        assert main(["measure"] + argv) == 2, argv
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and option in lines[0] and words in lines[0], (argv, err)
        assert "Traceback" not in err
    assert not os.path.exists(tmp_path / "missing")  # nothing created
    for argv in (["--out", out, "--chunk-size", "big"], []):  # argparse: one line, status 2
        with pytest.raises(SystemExit) as exc:
            main(["measure"] + argv)
        assert exc.value.code == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_measure_takes_the_folder_lock(trained, capsys):
    out, _ = trained
    before = os.path.getmtime(os.path.join(out, "observables.json"))
    with lock_run_folder(out):  # another open file: flock refuses it as it refuses another process
        assert main(["measure", "--out", out]) == 2
    err = capsys.readouterr().err
    assert "in use by another run" in err and "--out" in err and len(err.strip().splitlines()) == 1
    assert os.path.getmtime(os.path.join(out, "observables.json")) == before


def test_load_run_and_params_only_files(trained, loaded, tmp_path):
    from quantax_lite import Recipe, load_params, save_params

    out, _ = trained
    # the run records the phase rule that auto picked (none on a chain), not "auto"
    assert loaded.recipe == Recipe(lattice="chain:8", channels=4, depth=1, samples=64, chains=16, lr=0.05,
                                   eval_samples=256, seed=5, phase_rule="none")
    assert int(loaded.state.iteration) == 3 and loaded.path == list_checkpoints(out)[0]
    with np.load(loaded.path) as data:  # the checkpoint's leaves, keyed by their parameter paths
        leaves = jax.tree_util.tree_leaves_with_path(loaded.state.params)
        assert leaves
        for key_path, leaf in leaves:
            np.testing.assert_array_equal(np.asarray(leaf), data["state.params" + jax.tree_util.keystr(key_path)])

    path = str(tmp_path / "psi.npz")
    save_params(path, loaded.state.params, {"recipe": loaded.recipe.config(), "note": "trained"})
    assert os.listdir(tmp_path) == ["psi.npz"]  # no temporary left
    params, meta = load_params(path)
    assert meta["note"] == "trained" and Recipe(**meta["recipe"]) == loaded.recipe
    assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(
        jax.tree_util.tree_map(np.asarray, loaded.state.params))
    s = jnp.asarray(_all_states(8)[::7])
    np.testing.assert_array_equal(loaded.run.model.apply(params, s),
                                  loaded.run.model.apply(loaded.state.params, s))
    again, _ = load_params(path, template=loaded.run.state.params)
    for a, b in zip(jax.tree_util.tree_leaves(again), jax.tree_util.tree_leaves(loaded.state.params)):
        assert a.dtype == b.dtype and a.sharding == b.sharding
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    other = jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape + (1,), x.dtype), loaded.state.params)
    with pytest.raises(ValueError, match="template"):
        load_params(path, template=other)
    with pytest.raises(ValueError, match="metadata"):
        save_params(path, loaded.state.params, {"x": float("nan")})
    assert os.listdir(tmp_path) == ["psi.npz"]
    with pytest.raises(ValueError, match="params"):
        save_params(path, {})
