"""Warm starts (``train(init_from=...)``, ``quantax-lite train --init-from``): a run on a
larger lattice starts from another run's trained parameters; everything else starts
fresh; a resumed warm-started run continues from its own checkpoint; what cannot work is
refused naming ``init_from`` (8 simulated CPU devices, tiny conv nets)."""
import contextlib
import json
import os
import re

import jax
import numpy as np
import pytest

from quantax_lite import Recipe
from quantax_lite.cli import training
from quantax_lite.driver.checkpoint import list_checkpoints, read_checkpoint_metadata
from quantax_lite.cli.command import main
from quantax_lite.utils.errors import FieldError
from quantax_lite.recipes import build, load_run
from quantax_lite.driver.run_folder import read_log
from quantax_lite.driver.warm_start import initial_parameters

NET = dict(channels=2, depth=1)
FAST = dict(samples=32, chains=16, eval_samples=32, seed=3)
SMALL = ["train", "--channels", "2", "--depth", "1", "--samples", "32", "--chains", "16", "--eval-samples", "32",
         "--seed", "3", "--no-progress"]


def _train(out, lattice="chain:12", iters=2, **kwargs):
    fields = {**NET, **FAST, **{k: kwargs.pop(k) for k in list(kwargs) if k in Recipe.__dataclass_fields__}}
    return training.train(Recipe(lattice=lattice, **fields), out, iters=iters, progress=False, **kwargs)


def _leaves(params):
    return {jax.tree_util.keystr(kp): np.asarray(x) for kp, x in jax.tree_util.tree_flatten_with_path(params)[0]}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A run of 2 steps on chain:8, the source of the warm starts."""
    out = str(tmp_path_factory.mktemp("warm") / "chain8")
    _train(out, lattice="chain:8")
    return out


def test_a_warm_start_begins_from_the_source_parameters_and_records_them(source, tmp_path, monkeypatch):
    started = []
    original = training.train_stages

    def spy(recipe, run_, state, iters, **kwargs):  # the state the training starts from (copied: steps donate it)
        started.append((run_, jax.tree_util.tree_map(np.array, state)))
        return original(recipe, run_, state, iters, **kwargs)

    monkeypatch.setattr(training, "train_stages", spy)
    lines = []
    out = str(tmp_path / "chain12")
    summary = training.train(Recipe(lattice="chain:12", **NET, **FAST), out, iters=2, init_from=source,
                             progress=True, announce=lines.append)
    run_, state = started[0]
    trained = load_run(source).state.params  # the source's newest checkpoint
    first = _leaves(state.params)
    assert first.keys() == _leaves(trained).keys()
    for path, x in _leaves(trained).items():
        np.testing.assert_array_equal(first[path], x, err_msg=path)
    # the rest is fresh: the step counter, the optimizer state, chains of this lattice whose
    # cached log psi is that of the warm parameters
    assert int(state.iteration) == 0 and state.sampler.states.shape[-1] == 12
    cold = build(run_.recipe).state
    for a, b in zip(jax.tree_util.tree_leaves(state.opt_state), jax.tree_util.tree_leaves(cold.opt_state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_allclose(np.asarray(run_.model.apply(state.params, state.sampler.states)),
                               np.asarray(state.sampler.log_psi), rtol=1e-5, atol=1e-5)
    expected = {"path": source, "iteration": 2, "lattice": "chain:8"}
    assert summary["init_from"] == expected and summary["iterations"] == 2 and summary["lattice"] == "chain:12"
    assert json.load(open(os.path.join(out, "summary.json")))["init_from"] == expected
    assert read_checkpoint_metadata(list_checkpoints(out)[0])["init_from"] == expected
    assert f"warm start from {source} (step 2, lattice chain:8)" in lines
    # a cold start records none
    assert json.load(open(os.path.join(source, "summary.json")))["init_from"] is None


def test_initial_parameters_match_by_path_on_another_lattice(source):
    """2x4 from chain:8 is refused (a 1D kernel against a 2D one); chain:6 takes them."""
    r = build(Recipe(lattice="chain:6", **NET, **FAST))
    warm = initial_parameters(source, r.state.params)
    assert warm.source == {"path": source, "iteration": 2, "lattice": "chain:8"}
    for (pa, a), (pb, b) in zip(jax.tree_util.tree_flatten_with_path(warm.params)[0],
                                jax.tree_util.tree_flatten_with_path(r.state.params)[0]):
        assert pa == pb and a.shape == b.shape and a.dtype == b.dtype and a.sharding == b.sharding
    square = build(Recipe(lattice="2x4", **NET, **FAST))
    with pytest.raises(FieldError, match=r"init_from: the networks differ: base/\S+/kernel is \(5, 2, 2\) there, "
                                         r"\(3, 3, 2, 2\) here") as err:
        initial_parameters(source, square.state.params)
    assert err.value.field == "init_from"


@pytest.mark.slow  # a third training; a resumed run continues from its checkpoint: test_vmc, test_cli
def test_a_resumed_warm_start_continues_from_its_own_checkpoint(source, tmp_path):
    """Resumed without --init-from (its checkpoints say where it started): the steps of an
    uninterrupted warm-started run, not a second warm start."""
    out, full = str(tmp_path / "resumed"), str(tmp_path / "full")
    _train(out, iters=1, init_from=source)
    summary = _train(out, iters=2, resume=True)
    assert summary["iterations"] == 2
    assert summary["init_from"] == {"path": source, "iteration": 2, "lattice": "chain:8"}
    assert read_checkpoint_metadata(list_checkpoints(out)[0])["init_from"] == summary["init_from"]
    _train(full, iters=2, init_from=source)
    a, b = read_log(os.path.join(full, "log.jsonl")), read_log(os.path.join(out, "log.jsonl"))
    assert [r["iteration"] for r in b] == [1, 2]
    assert [r["energy"] for r in a] == [r["energy"] for r in b]


def test_what_cannot_be_warm_started_is_refused_naming_init_from(source, tmp_path):
    with pytest.raises(FieldError, match=r"init_from: the networks differ: base/\S+ is \(2,\) there, \(4,\) here "
                                         r"\(and \d+ more of the \d+ leaves\); warm starts need the same network") as e:
        _train(str(tmp_path / "wider"), init_from=source, channels=4)
    assert e.value.field == "init_from" and not list_checkpoints(str(tmp_path / "wider"))
    for folder in (source, str(tmp_path / "missing")):  # the conflict is named before the folder is looked at
        with pytest.raises(FieldError, match="init_from: a resumed run continues from its own checkpoint") as e:
            _train(source, iters=3, resume=True, init_from=folder)
        assert e.value.field == "init_from"
    empty = tmp_path / "empty"
    empty.mkdir()
    for folder, says in ((empty, "holds no checkpoint"), (tmp_path / "missing", "is not a folder")):
        with pytest.raises(FieldError, match=re.escape(f"init_from: {folder} {says}")) as e:
            _train(str(tmp_path / "new"), init_from=str(folder))
        assert e.value.field == "init_from"
    damaged, old = tmp_path / "damaged", tmp_path / "first_format"
    damaged.mkdir()
    old.mkdir()
    (damaged / "checkpoint-00000005.npz").write_bytes(b"not a zip archive")
    np.savez(old / "checkpoint-00000005.npz", leaf_00000=np.zeros(3))  # leaves by position
    for folder, says in ((damaged, "every checkpoint in .* is damaged"), (old, "of the first format")):
        with pytest.warns(UserWarning) if folder is damaged else contextlib.nullcontext():
            with pytest.raises(FieldError, match=f"init_from: .*{says}") as e:
                _train(str(tmp_path / "new"), init_from=str(folder))
        assert e.value.field == "init_from"
    with pytest.raises(FieldError, match="init_from: .* is the run's own folder") as e:
        _train(source, restart=True, init_from=source)
    assert list_checkpoints(source)  # the source is untouched


@pytest.mark.slow  # trainings from the command; --init-from's bad values: test_option_errors
def test_the_command_takes_init_from_and_names_it_in_errors(source, tmp_path, capsys):
    out = str(tmp_path / "command")
    assert main(SMALL + ["--lattice", "chain:12", "--iters", "1", "--out", out, "--init-from", source]) == 0
    assert json.load(open(os.path.join(out, "summary.json")))["init_from"]["path"] == source
    capsys.readouterr()
    for extra in (["--init-from", str(tmp_path / "missing")], ["--init-from", source, "--channels", "4"],
                  ["--init-from", source, "--resume"]):
        assert main(SMALL + ["--lattice", "chain:12", "--iters", "2", "--out", out, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("quantax-lite train: error: --init-from: "), err
    # the warm-started run resumes without it (from its own checkpoint)
    assert main(SMALL + ["--lattice", "chain:12", "--iters", "2", "--out", out, "--resume"]) == 0
    assert json.load(open(os.path.join(out, "summary.json")))["init_from"]["path"] == source
