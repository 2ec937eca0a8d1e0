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


@pytest.mark.slow  # a resumed training and a measurement from the command
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
