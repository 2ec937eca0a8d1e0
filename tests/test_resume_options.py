"""``quantax-lite train --resume``: options left out take the run's own values (its newest
readable checkpoint's recorded config); an option given that differs from the run is refused
in one line naming it; options that do not define a run (--iters, --time-limit, ...) stay free."""
import json
import os

import numpy as np
import pytest

from quantax_lite.cli.command import main
from quantax_lite.driver.run_folder import list_checkpoints

# a small run on a 6-site chain, every run-defining option away from its default
RUN = ["--lattice", "chain:6", "--channels", "3", "--depth", "1", "--samples", "64", "--chains", "16",
       "--eval-samples", "64", "--lr", "0.05", "--lr-half-life", "50", "--seed", "5", "--no-marshall",
       "--network-option", "kernel_size=3"]


def _summary(out):
    with open(os.path.join(out, "summary.json")) as fh:
        return json.load(fh)


def _steps(out):
    with open(os.path.join(out, "log.jsonl")) as fh:
        return [json.loads(line)["iteration"] for line in fh if line.strip()]


@pytest.mark.slow  # two trainings from the command; the default run resumes with options left out at the end of
# test_an_option_given_on_resume_that_differs_is_refused_in_one_line
def test_resume_takes_the_options_it_is_not_given_from_the_run(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert main(["train", *RUN, "--iters", "2", "--no-progress", "--out", out]) == 0
    first = _summary(out)
    capsys.readouterr()
    # only --resume, the folder and the new length: the run's own options, not the defaults
    assert main(["train", "--resume", "--iters", "4", "--no-progress", "--out", out]) == 0, capsys.readouterr().err
    assert _steps(out) == [1, 2, 3, 4]
    resumed = _summary(out)
    assert resumed["iterations"] == 4
    for key in ("lattice", "hamiltonian", "n_sites", "n_params", "n_samples", "amplitude", "phase_rule"):
        assert resumed[key] == first[key], key
    assert resumed["lattice"] == "chain:6" and resumed["n_samples"] == 64
    # the sector as the run decided it, said so again (not as if the user had given it)
    assert resumed["sector"] == first["sector"] and resumed["exact_energy_source"] == first["exact_energy_source"]


def _record(out, **options):
    """Set ``options`` in the config the newest checkpoint of the run in ``out`` records."""
    path = list_checkpoints(out)[-1]
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(bytes(arrays["metadata"]).decode())
    meta["config"].update(options)
    arrays["metadata"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(path, **arrays)


def test_an_option_given_on_resume_that_differs_is_refused_in_one_line(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert main(["train", *RUN, "--iters", "1", "--no-progress", "--out", out]) == 0
    capsys.readouterr()

    def refused(*options):
        assert main(["train", "--resume", "--iters", "2", "--no-progress", "--out", out, *options]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        return err

    # an option given (not left out) that differs from the run: named alone, exit status 2
    err = refused("--lattice", "chain:8")
    assert "--lattice chain:8 (was chain:6)" in err, err
    assert "--channels" not in err and "--depth" not in err and "--lr" not in err and "--seed" not in err
    # also where the run's other options do not fit it (momentum (3) is a chain's)
    err = refused("--lattice", "4x4", "--seed", "5")
    assert err.endswith("differ from the run in the folder: --lattice 4x4 (was chain:6)"), err
    # given in a config file: given too
    config = tmp_path / "run.toml"
    config.write_text('depth = 2\nlr = 0.05\n')
    err = refused("--config", str(config))
    assert err.endswith("differ from the run in the folder: --depth 2 (was 1)"), err
    # a switch given is compared (a run recorded with the Marshall sign, resumed without it)
    _record(out, marshall=True)
    err = refused("--no-marshall")
    assert err.endswith("differ from the run in the folder: --marshall False (was True)"), err
    assert len(list_checkpoints(out)) == 1 and _steps(out) == [1]  # nothing written
    # with only --resume, the folder and the new length, the run goes on with its own options
    _record(out, marshall=False)  # (as it was trained)
    assert main(["train", "--resume", "--iters", "2", "--no-progress", "--out", out]) == 0, capsys.readouterr().err
    assert _steps(out) == [1, 2] and _summary(out)["lattice"] == "chain:6"


@pytest.mark.slow  # trainings from the command (the default run resumes one: test_an_option_given_on_resume_that_differs_is_refused_in_one_line)
def test_resume_without_iters_goes_on_to_the_steps_the_run_was_started_for(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert main(["train", *RUN, "--iters", "2", "--no-progress", "--out", out]) == 0
    # as if stopped at its time limit after 2 of 5 steps: the checkpoints record the 5 asked for
    _record_metadata(out, iters=5)
    capsys.readouterr()
    assert main(["train", "--resume", "--no-progress", "--out", out]) == 0, capsys.readouterr().err
    assert _steps(out) == [1, 2, 3, 4, 5]  # not the default --iters 600
    # again, with every step taken: refused in one line naming --iters, the run left as it was
    summary = _summary(out)
    capsys.readouterr()
    assert main(["train", "--resume", "--no-progress", "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error: --iters: " in err and "has taken 5 steps" in err, err
    assert _summary(out) == summary and _steps(out) == [1, 2, 3, 4, 5]


@pytest.mark.slow  # trainings from the command
def test_resume_without_iters_of_a_run_that_does_not_record_it_is_refused(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert main(["train", *RUN, "--iters", "2", "--no-progress", "--out", out]) == 0
    _record_metadata(out, iters=None)  # as written by an earlier version
    summary = _summary(out)
    capsys.readouterr()
    assert main(["train", "--resume", "--no-progress", "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error: --iters: " in err, err
    assert _summary(out) == summary
    assert main(["train", "--resume", "--iters", "3", "--no-progress", "--out", out]) == 0
    assert _steps(out) == [1, 2, 3]


def _record_metadata(out, **entries):
    """Set ``entries`` at the top of the newest checkpoint's metadata in ``out``."""
    path = list_checkpoints(out)[-1]
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(bytes(arrays["metadata"]).decode())
    assert meta["iters"] == 2  # what the run was started for
    meta.update(entries)
    meta = {k: v for k, v in meta.items() if v is not None}
    arrays["metadata"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(path, **arrays)
