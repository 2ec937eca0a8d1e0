"""Run folders written by an earlier version of the package keep working.

``tests/data/run_0.1.0`` is a run folder (checkpoint, log, summary) written by the
command of version 0.1.0 before its modules moved into folders:
``quantax-lite train --lattice chain:8 --iters 4 --samples 64 --channels 2 --depth 1
--eval-samples 256``. It must resume, load and be measured by the code of today.
"""
from __future__ import annotations

import json
import math
import os
import shutil

import jax
import pytest

from quantax_lite import load_run
from quantax_lite.cli.command import main

DATA = os.path.join(os.path.dirname(__file__), "data", "run_0.1.0")
OPTIONS = ["train", "--lattice", "chain:8", "--samples", "64", "--channels", "2", "--depth", "1",
           "--eval-samples", "256"]


def _copy(tmp_path) -> str:
    out = str(tmp_path / "run")
    shutil.copytree(DATA, out)
    return out


def _log(out: str) -> list[dict]:
    with open(os.path.join(out, "log.jsonl")) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_a_run_of_version_0_1_0_is_read_as_the_run_it_was(tmp_path):
    """Its recorded options (version 1: no ``schema_version``) rebuild the run it was: the
    recipe of its command, the network its parameters fit, its chains' configurations."""
    loaded = load_run(_copy(tmp_path))
    recipe = loaded.recipe
    assert (recipe.lattice, recipe.samples, recipe.channels, recipe.depth, recipe.eval_samples) == ("chain:8", 64, 2, 1,
                                                                                                     256)
    assert recipe.amplitude != "sinh" and int(loaded.state.iteration) == 4
    lp = loaded.run.model.apply(loaded.state.params, loaded.state.sampler.states)
    assert lp.shape == (loaded.state.sampler.states.shape[0],) and bool(jax.numpy.all(jax.numpy.isfinite(lp.real)))


@pytest.mark.slow  # a resumed training and a measurement from the command; the reading: the test above
def test_a_run_of_version_0_1_0_resumes_and_is_measured(tmp_path, capsys):
    out = _copy(tmp_path)
    before = _log(out)
    assert [r["iteration"] for r in before] == [1, 2, 3, 4]
    assert main(OPTIONS + ["--iters", "6", "--out", out, "--resume"]) == 0
    after = _log(out)
    assert [r["iteration"] for r in after] == [1, 2, 3, 4, 5, 6]
    assert after[:4] == before  # the earlier steps are kept as they were written
    assert all(math.isfinite(r["energy"]) for r in after)
    loaded = load_run(out)
    assert loaded.recipe.lattice == "chain:8"
    assert main(["measure", "--out", out, "--samples", "64", "--no-dimers"]) == 0
    with open(os.path.join(out, "observables.json")) as fh:
        observables = json.load(fh)
    assert math.isfinite(observables["energy"]["mean"])
    assert "Traceback" not in capsys.readouterr().err
