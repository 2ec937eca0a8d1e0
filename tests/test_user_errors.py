"""User errors found by adversarial trials: each is refused with one line naming the option
(command, exit status 2) or a ValueError / TypeError naming the argument (library), and
nothing non-finite or partial is written (8 simulated CPU devices)."""
import dataclasses
import errno
import json
import os
import shutil
import warnings

import jax
import numpy as np
import pytest

from quantax_lite.cli.command import main
from quantax_lite.recipes import Recipe, recipe_of_run
from quantax_lite.driver.run_folder import list_checkpoints, lock_run_folder, prepare_run_folder, read_log

# A tiny run: 4-site Heisenberg chain, 2 steps, a checkpoint after each, measured at the end.
TRAIN = ["train", "--lattice", "chain:4", "--channels", "2", "--depth", "1", "--samples", "16", "--chains", "8",
         "--eval-samples", "32", "--checkpoint-every", "1", "--no-progress", "--seed", "1"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished run with --measure (log, checkpoints, summary, observables and their plots)."""
    out = str(tmp_path_factory.mktemp("user_errors") / "run")
    assert main(TRAIN + ["--iters", "2", "--out", out, "--measure"]) == 0
    return out


@pytest.fixture
def run_copy(trained, tmp_path):
    out = str(tmp_path / "run")
    shutil.copytree(trained, out)
    return out


def _one_line(capsys, *words):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], (w, err)
    return lines[0]


def _edit_config(out, edit):
    """Apply ``edit(config)`` to the options recorded in every checkpoint of ``out``."""
    for path in list_checkpoints(out):
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files}
        meta = json.loads(bytes(arrays["metadata"]).decode())
        edit(meta["config"])
        arrays["metadata"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        np.savez(path, **arrays)


# ------------------------------------------------------------------ 1. seeds
@pytest.mark.parametrize("seed", [2**63, 2**64 + 5, -1])
def test_a_seed_out_of_range_names_seed(seed):
    with pytest.raises(ValueError, match=r"^seed: .*2\*\*63"):
        Recipe(seed=seed)


def test_a_seed_out_of_range_is_one_line_for_train_and_measure(trained, tmp_path, capsys):
    assert main(TRAIN + ["--iters", "1", "--out", str(tmp_path / "x"), "--seed", str(2**63)]) == 2
    _one_line(capsys, "--seed", "2**63")
    before = os.path.getmtime(os.path.join(trained, "observables.json"))
    assert main(["measure", "--out", trained, "--seed", str(2**63), "--no-progress"]) == 2
    _one_line(capsys, "--seed", "2**63")
    assert os.path.getmtime(os.path.join(trained, "observables.json")) == before


def test_seed_keys_do_not_depend_on_x64():
    """A seed above 2**32 gives the same key with and without x64 (jax's own PRNGKey keeps
    only its low 32 bits without x64, so 2**32 would be the key of seed 0)."""
    from quantax_lite.recipes import seed_key

    assert jax.config.jax_enable_x64
    wide = [np.asarray(seed_key(s)) for s in (0, 2**32, 2**63 - 1)]
    np.testing.assert_array_equal(wide[1], np.asarray(jax.random.PRNGKey(2**32)))
    jax.config.update("jax_enable_x64", False)
    try:
        narrow = [np.asarray(seed_key(s)) for s in (0, 2**32, 2**63 - 1)]
    finally:
        jax.config.update("jax_enable_x64", True)
    for a, b in zip(wide, narrow):
        np.testing.assert_array_equal(a.astype(np.uint32), b.astype(np.uint32))
    assert not np.array_equal(narrow[0], narrow[1])


# ------------------------------------------------------------------ 2. non-finite log records
@pytest.mark.parametrize("token", ["NaN", "Infinity", "1e999"])
def test_a_non_finite_log_record_is_refused_naming_the_file(tmp_path, token):
    path = tmp_path / "log.jsonl"
    path.write_text('{"iteration": 1, "energy": -1.0}\n{"iteration": 2, "energy": %s}\n'
                    '{"iteration": 3, "energy": -1.5}\n' % token)
    with pytest.raises(ValueError, match=r"log\.jsonl: line 2 .*non-finite"):
        read_log(path)


def test_resume_and_measure_refuse_a_non_finite_log_before_writing(run_copy, capsys):
    log = os.path.join(run_copy, "log.jsonl")
    lines = open(log).read().splitlines()
    lines[0] = lines[0].replace('"energy": ', '"energy": NaN, "was": ', 1)
    with open(log, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    written = {name: open(os.path.join(run_copy, name), "rb").read()
               for name in ("summary.json", "observables.json", "log.jsonl")}
    assert main(TRAIN + ["--iters", "3", "--out", run_copy, "--resume"]) == 2
    _one_line(capsys, "log.jsonl", "line 1", "non-finite")
    assert main(["measure", "--out", run_copy, "--no-progress"]) == 2
    _one_line(capsys, "log.jsonl", "line 1", "non-finite")
    for name, content in written.items():
        assert open(os.path.join(run_copy, name), "rb").read() == content, name


# ------------------------------------------------------------------ 3. restart
def test_restart_removes_every_file_of_the_old_run(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    run_files = ["log.jsonl", "summary.json", "energy.png", "observables.json", "structure_factor.png",
                 "correlations.png", "checkpoint-00000001.npz", "checkpoint.npz", "summary.json.tmp-123"]
    for name in run_files + ["notes.txt"]:
        (out / name).write_text("x")
    prepare_run_folder(str(out), resume=False, restart=True, config={})
    assert sorted(os.listdir(out)) == ["notes.txt"]


def test_a_folder_with_only_observables_holds_a_run(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "observables.json").write_text("{}")
    with pytest.raises(ValueError, match="already holds a run"):
        prepare_run_folder(str(out), resume=False, restart=False, config={})


# ------------------------------------------------------------------ 4. measure --memory-budget
def test_measure_refuses_a_memory_budget_it_cannot_honour(trained, capsys):
    before = os.path.getmtime(os.path.join(trained, "observables.json"))
    assert main(["measure", "--out", trained, "--memory-budget", "0.5", "--no-progress"]) == 2
    _one_line(capsys, "--memory-budget", "--chunk-size")
    assert os.path.getmtime(os.path.join(trained, "observables.json")) == before


# ------------------------------------------------------------------ 5. train --samples with exact_sum
def test_train_refuses_samples_with_exact_sum(tmp_path, capsys):
    out = tmp_path / "x"
    assert main(["train", "--lattice", "chain:4", "--channels", "2", "--depth", "1", "--sampling", "exact_sum",
                 "--samples", "64", "--iters", "1", "--no-progress", "--out", str(out)]) == 2
    _one_line(capsys, "--samples", "exact_sum")
    assert not os.path.exists(out / "log.jsonl")


# ------------------------------------------------------------------ 6. unknown recorded options
def test_a_recorded_option_this_version_does_not_know_is_refused(run_copy, capsys):
    _edit_config(run_copy, lambda config: config.update(frobnicate=3))
    with pytest.raises(ValueError, match=r"`frobnicate`.*checkpoint-0000000\d\.npz|checkpoint.*`frobnicate`"):
        recipe_of_run(run_copy)
    before = os.path.getmtime(os.path.join(run_copy, "observables.json"))
    assert main(["measure", "--out", run_copy, "--no-progress"]) == 2
    _one_line(capsys, "frobnicate", "checkpoint-0000000")
    assert os.path.getmtime(os.path.join(run_copy, "observables.json")) == before


def test_a_legacy_option_of_earlier_versions_is_ignored_with_a_warning(run_copy):
    _edit_config(run_copy, lambda config: config.update(gram_precision="float64", conv="gather"))
    with pytest.warns(UserWarning, match="gram_precision"):
        recipe = recipe_of_run(run_copy)[0]
    assert recipe.lattice == "chain:4"


def test_a_sinh_run_made_before_the_offset_option_reads_its_offset_of_one(run_copy):
    """Runs recorded before ``sinh_offset`` existed (schema version 2 or earlier): a sinh run
    had c = 1 (not the library's 0.1 of later runs), any other run the field's default; the
    same through ``Recipe(**config)`` (how a saved wavefunction's recipe is read)."""
    from quantax_lite.models.heads import SINH_OFFSET

    def earlier(config):
        config.pop("sinh_offset", None)
        config["schema_version"] = 2

    _edit_config(run_copy, earlier)
    assert recipe_of_run(run_copy)[0].sinh_offset == SINH_OFFSET != 1.0
    _edit_config(run_copy, lambda config: config.update(amplitude="sinh"))
    recipe, _, metadata = recipe_of_run(run_copy)
    assert recipe.sinh_offset == 1.0 and Recipe(**metadata["config"]).sinh_offset == 1.0
    assert Recipe(**recipe.config()) == recipe and recipe.config()["sinh_offset"] == 1.0
    _edit_config(run_copy, lambda config: config.update(schema_version=3))  # a config of today records it
    assert recipe_of_run(run_copy)[0].sinh_offset == SINH_OFFSET
    _edit_config(run_copy, lambda config: config.update(sinh_offset=0.3))
    assert recipe_of_run(run_copy)[0].sinh_offset == 0.3


def test_a_sinh_run_recorded_by_the_command_is_read_with_its_own_offset(tmp_path):
    """What the command records (its options with ``schema_version``; before, without it but
    with ``sinh_offset``) is read back with the offset it trained with, the library's default
    or a given one, and the run rebuilt from the folder evaluates that network (not the one
    of c = 1)."""
    from quantax_lite import build
    from quantax_lite.models.heads import SINH_OFFSET
    from quantax_lite.recipes import load_run
    from quantax_lite.recipes.schema import SCHEMA_VERSION

    out = str(tmp_path / "run")
    assert main(TRAIN + ["--amplitude", "sinh", "--iters", "1", "--out", out]) == 0
    with np.load(list_checkpoints(out)[-1]) as data:
        assert json.loads(bytes(data["metadata"]))["config"]["schema_version"] == SCHEMA_VERSION
    # the default, then a given one, each also as the command recorded them before it wrote its version
    for offset, version in ((SINH_OFFSET, SCHEMA_VERSION), (SINH_OFFSET, None), (0.3, None)):
        def record(config, offset=offset, version=version):
            config.update(sinh_offset=offset, schema_version=version)
            if version is None:
                del config["schema_version"]

        _edit_config(out, record)
        recipe = recipe_of_run(out)[0]
        assert recipe.sinh_offset == offset
        loaded = load_run(out)
        s = loaded.state.sampler.states
        for c, same in ((recipe.sinh_offset, True), (1.0, False)):
            other = build(dataclasses.replace(recipe, sinh_offset=c)).model.apply(loaded.state.params, s)
            assert np.allclose(np.asarray(other), np.asarray(loaded.run.model.apply(loaded.state.params, s))) == same


@pytest.mark.slow  # two trainings from the command
def test_a_warm_start_from_a_sinh_run_of_another_offset_is_refused(tmp_path, capsys):
    """--init-from a sinh run with c = 1 into a sinh run with the default c: one line naming
    --init-from, nothing written; with --sinh-offset 1 it starts."""
    source, out = str(tmp_path / "source"), str(tmp_path / "run")
    sinh = ["--amplitude", "sinh", "--iters", "1"]
    assert main(TRAIN + sinh + ["--sinh-offset", "1", "--out", source]) == 0
    capsys.readouterr()
    assert main(TRAIN + sinh + ["--init-from", source, "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error: --init-from: " in err and "--sinh-offset 1" in err, err
    assert not os.path.exists(out)
    assert main(TRAIN + sinh + ["--sinh-offset", "1", "--init-from", source, "--out", out]) == 0


# ------------------------------------------------------------------ 7. momentum
def test_a_huge_momentum_is_reduced_exactly():
    huge = Recipe(lattice="4x4", momentum=(4 * 10**20 + 1, 0))
    np.testing.assert_allclose(huge.sector_momentum(), Recipe(lattice="4x4", momentum=(1, 0)).sector_momentum())
    assert Recipe(lattice="4x4", momentum=(4 * 10**20, 0)).sector_momentum() is None


# ------------------------------------------------------------------ 8. parities
@pytest.mark.parametrize("name", ["spin_parity", "rotation_parity"])
@pytest.mark.parametrize("value", [1.0, -1.0, True, np.float64(1.0)])
def test_a_parity_must_be_an_int(name, value):
    with pytest.raises(TypeError, match=f"^{name}: "):
        Recipe(lattice="4x4", symmetry="full", **{name: value})


def test_a_numpy_int_parity_is_accepted():
    assert Recipe(lattice="4x4", symmetry="full", spin_parity=np.int64(-1)).spin_parity == -1


# ------------------------------------------------------------------ 9. load_params, structure_factor
def test_load_params_errors_name_the_file(tmp_path):
    from quantax_lite import load_params

    cases = {"text.npz": b"not an npz file", "empty.npz": b"", "truncated.npz": b"PK\x03\x04garbage"}
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(ValueError, match=f"^path: .*{name}"):
            load_params(path)
    bad_meta = tmp_path / "meta.npz"
    np.savez(bad_meta, w=np.ones(2), __metadata__=np.frombuffer(b"{not json", np.uint8))
    with pytest.raises(ValueError, match="^path: .*meta.npz"):
        load_params(bad_meta)
    with pytest.raises(TypeError, match="^path: "):
        load_params(3.5)


@pytest.mark.parametrize("kwargs, name", [
    (dict(q="abc"), "q"), (dict(q=[[0.0, 0.0], [1.0]]), "q"), (dict(q=object()), "q"), (dict(q=[1j, 0.0]), "q"),
    (dict(corr=[[1.0, 2.0], [3.0]]), "corr"), (dict(corr=np.full((4, 4), "a")), "corr"),
    (dict(corr=np.eye(4) * 1j), "corr"), (dict(corr=np.full((4, 4), np.nan)), "corr"),
])
def test_structure_factor_errors_name_the_argument(kwargs, name):
    from quantax_lite.geometry.lattice import Square
    from quantax_lite.observables import structure_factor

    args = {"corr": np.eye(4) * 0.75, "lattice": Square(2, 2), **kwargs}
    with pytest.raises((TypeError, ValueError), match=f"^{name}: "):
        structure_factor(**args)


# ------------------------------------------------------------------ 10. save_params
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_save_params_refuses_non_finite_parameters(tmp_path, bad):
    from quantax_lite import save_params

    path = tmp_path / "psi.npz"
    params = {"dense": {"kernel": np.array([1.0, bad]), "bias": np.zeros(2)}}
    with pytest.raises(ValueError, match="^params: .*dense/kernel"):
        save_params(path, params)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------ 11. flock not supported
@pytest.mark.parametrize("code", [errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL])
def test_a_file_system_without_flock_runs_unlocked_with_a_warning(tmp_path, monkeypatch, code):
    import quantax_lite.driver.run_folder as run_folder

    def no_flock(fd, op):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(run_folder.fcntl, "flock", no_flock)
    entered = False
    with pytest.warns(UserWarning, match="without the folder lock") as caught:
        with lock_run_folder(tmp_path / "run"):
            entered = True
    assert entered and len(caught) == 1 and "\n" not in str(caught[0].message)


def test_other_flock_errors_still_raise(tmp_path, monkeypatch):
    import quantax_lite.driver.run_folder as run_folder

    def broken(fd, op):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(run_folder.fcntl, "flock", broken)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(OSError):
            with lock_run_folder(tmp_path / "run"):
                pass


def test_version_prints_the_installed_version(capsys):
    from importlib.metadata import version

    from quantax_lite.cli import command as cli

    with pytest.raises(SystemExit) as exit_info:
        cli.build_parser().parse_args(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"quantax-lite {version('quantax_lite')}"
