"""The command as a newcomer meets it: help groups, hidden legacy options, --config FILE,
--dry-run, errors mapped to options through their field, and the library calls behind
the command (quantax_lite.cli.training, quantax_lite.cli.measure_run) (8 simulated CPU devices)."""
import errno
import json
import os
import pickle

import pytest

from quantax_lite.cli import command as cli
from quantax_lite.cli.command import main
from quantax_lite.utils.errors import FieldError, FieldTypeError, as_field_error, concerning
from quantax_lite.cli.options import GROUPS, build_parser, read_config
from quantax_lite.recipes import Recipe

TINY = ["--lattice", "chain:4", "--channels", "2", "--depth", "1", "--samples", "16", "--chains", "8",
        "--eval-samples", "32", "--no-progress"]


def _help(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    return capsys.readouterr().out


# ------------------------------------------------------------------ help
def test_help_groups_the_options_for_a_newcomer(capsys):
    text = _help(capsys)
    titles = [line[:-1] for line in text.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert titles[-len(GROUPS):] == list(GROUPS) == ["system", "sector", "network", "sampling", "optimization",
                                                     "run", "memory and devices", "multi-process"]

    def group(name):
        start = text.index(f"\n{name}:\n")
        rest = text[start + 1:]
        nxt = [rest.index(f"\n{g}:\n") for g in GROUPS if f"\n{g}:\n" in rest]
        return rest[: min(nxt)] if nxt else rest

    expected = {"system": ["--lattice", "--hamiltonian", "--J2"], "sector": ["--symmetry", "--momentum",
                "--spin-parity"], "network": ["--channels", "--depth"], "sampling": ["--samples", "--chains",
                "--eval-samples"], "optimization": ["--lr", "--diag-shift", "--sr-momentum"],
                "run": ["--iters", "--seed", "--out", "--resume", "--config", "--dry-run", "--time-limit"],
                "memory and devices": ["--chunk-size", "--memory-budget"],
                "multi-process": ["--coordinator", "--num-processes", "--process-id"]}
    for name, options in expected.items():
        for option in options:
            assert f"  {option} " in group(name), (name, option)
    assert "--iters" not in group("optimization") and "--chunk-size" not in group("optimization")
    assert text.splitlines()[0].startswith("usage: quantax-lite train [options]")


def test_legacy_options_are_hidden_and_still_accepted(capsys):
    text = _help(capsys)
    assert "--norm" not in text and "--momentum-readout" not in text
    args = build_parser().parse_args(["train", "--norm", "layer", "--momentum-readout", "origin"])
    assert args.norm == "layer" and args.momentum_readout == "origin"
    assert Recipe(**{k: getattr(args, k) for k in cli.RECIPE}).norm == "layer"
    with pytest.raises(SystemExit) as exc:  # a bad value is refused as for any option
        main(["train", "--norm", "batch"])
    assert exc.value.code == 2 and "--norm" in capsys.readouterr().err


# ------------------------------------------------------------------ --config
def test_config_file_json_and_toml_with_sections(tmp_path):
    t = build_parser().train_parser
    js = tmp_path / "recipe.json"
    js.write_text(json.dumps({"lattice": "chain:6", "momentum": [1], "lr-half-life": 50, "marshall": False,
                              "chunk_size": "auto", "J2": None}))
    assert read_config(str(js), t) == {"lattice": "chain:6", "momentum": [1], "lr_half_life": 50.0,
                                       "marshall": False, "chunk_size": "auto", "J2": None}
    toml = tmp_path / "recipe.toml"
    toml.write_text('iters = 7\n[system]\nlattice = "4x4"\nhamiltonian = "j1j2"\n'
                    '[sampling]\nsampling = "metropolis"\nsamples = 64\n')
    assert read_config(str(toml), t) == {"iters": 7, "lattice": "4x4", "hamiltonian": "j1j2",
                                         "sampling": "metropolis", "samples": 64}


@pytest.mark.parametrize("content, words", [
    ('{"lattice": "chain:4", "frobnicate": 1}', "unknown key 'frobnicate'"),
    ('{"system": {"latice": "4x4"}}', "unknown key 'latice'"),
    ('{"samples": "many"}', "samples"),
    ('{"hamiltonian": "ising"}', "hamiltonian"),
    ('{"marshall": "no"}', "marshall"),
    ('{"lattice": ', "not valid JSON"),
    ('[1, 2]', "a table of options"),
])
def test_config_file_errors_are_one_line_naming_config_and_the_key(tmp_path, capsys, content, words):
    path = tmp_path / "bad.json"
    path.write_text(content)
    out = tmp_path / "run"
    assert main(["train", "--config", str(path), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--config" in lines[0] and words in lines[0] and "Traceback" not in err, err
    assert not out.exists()
    assert main(["train", "--config", str(tmp_path / "missing.toml")]) == 2
    assert "--config" in capsys.readouterr().err


def test_config_file_then_options_typed_on_top_in_a_dry_run_that_writes_nothing(tmp_path, capsys):
    """--config gives the recipe, an option typed on the command line overrides the file;
    --dry-run prints the parameters, reference energy with its source, sector, chunk sizes
    and the time of a step, exits 0 and creates no run folder."""
    path = tmp_path / "recipe.toml"
    path.write_text('[system]\nlattice = "chain:4"\n[network]\nchannels = 2\ndepth = 1\n'
                    '[sampling]\nsamples = 16\nchains = 8\neval_samples = 32\n')
    out = tmp_path / "run"
    assert main(["train", "--config", str(path), "--lattice", "chain:6", "--out", str(out), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert not out.exists() and not os.path.exists("runs/heisenberg_chain6")
    assert "chain:6 (6 sites)" in printed and "symmetry translations, k = 0" in printed
    for words in ("parameters", "exact energy   -2.80277564", "exact diagonalization", "chunk sizes",
                  "time per step", "16 samples", "nothing written"):
        assert words in printed, (words, printed)


def test_a_config_value_counts_as_given(tmp_path, capsys):
    """--samples from a file with sampling exact_sum is refused as a typed one is."""
    path = tmp_path / "recipe.json"
    path.write_text('{"lattice": "chain:4", "sampling": "exact_sum", "samples": 64}')
    assert main(["train", "--config", str(path), "--out", str(tmp_path / "x"), "--no-progress"]) == 2
    assert "--samples" in capsys.readouterr().err


# ------------------------------------------------------------------ errors carry their field
def test_field_errors():
    err = FieldError("lr_half_life", "lr_half_life: expected a finite number > 0, got -1")
    assert isinstance(err, ValueError) and err.field == "lr_half_life"
    again = pickle.loads(pickle.dumps(err))
    assert again.field == "lr_half_life" and str(again) == str(err)
    assert isinstance(FieldTypeError("seed", "seed: x"), TypeError)
    # a check that raises no FieldError yet: the name its message starts with
    assert as_field_error(ValueError("chains: 12 must be a multiple")).field == "chains"
    assert as_field_error(ValueError("/tmp/log.jsonl: line 2")).field is None
    assert isinstance(as_field_error(TypeError("seed: expected an int")), FieldTypeError)
    with pytest.raises(FieldError) as info:
        with concerning("samples"):
            raise ValueError("n_samples: 100 is not a multiple of 16")
    assert info.value.field == "samples" and str(info.value).startswith("n_samples:")


@pytest.mark.parametrize("err, line", [
    (FieldError("lr_half_life", "lr_half_life: expected a finite number > 0, got -1"),
     "--lr-half-life: expected a finite number > 0, got -1"),
    # the field decides, not the message's first word
    (FieldError("samples", "n_samples: 100 must be a multiple of 16"), "--samples: n_samples: 100 must be"),
    (FieldError("out_dir", "/x/log.jsonl: line 1 holds a non-finite number"), "--out: /x/log.jsonl: line 1"),
    (FieldError("resume", "resume: these options differ: `lr` 0.5 (was 0.1)"),
     "--resume: these options differ: --lr 0.5 (was 0.1)"),
    (FieldError(None, "something about `restart` and `n_chains`"), "something about --restart and `n_chains`"),
    (FieldError("n_chains", "n_chains: not an option"), "n_chains: not an option"),
    (ValueError("diag_shift: expected a finite number >= 0, got nan"), "--diag-shift: expected"),
])
def test_field_errors_map_to_options(err, line):
    assert cli._message(err).startswith(line)


@pytest.mark.slow  # a training to see one warning; the lock itself: test_cli's folder tests
def test_a_file_system_without_flock_trains_with_one_warning(tmp_path, monkeypatch, capsys):
    """A cluster file system without flock (ENOLCK): the run goes on without the folder's
    lock, after one warning line, and writes its summary."""
    import quantax_lite.driver.run_folder as run_folder

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(run_folder.fcntl, "flock", no_flock)
    out = tmp_path / "run"
    assert main(["train", *TINY, "--iters", "1", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    warned = [line for line in err.splitlines() if "warning" in line]
    assert len(warned) == 1 and "without the folder lock" in warned[0] and "Traceback" not in err
    assert (out / "summary.json").exists()


# ------------------------------------------------------------------ the library behind the command
@pytest.fixture(scope="module")
def staged_run(tmp_path_factory):
    """A staged run trained from Python (no command), in two calls: the second resumes."""
    from quantax_lite.cli import training

    out = str(tmp_path_factory.mktemp("library") / "run")
    recipe = Recipe(lattice="chain:4", channels=2, depth=1, samples=16, chains=8, eval_samples=32,
                    symmetry="translations>full@2")
    lines = []
    first = training.train(recipe, out, iters=1, checkpoint_every=1, announce=lines.append, progress=False)
    summary = training.train(recipe, out, iters=3, resume=True, checkpoint_every=1, announce=lines.append)
    return recipe, out, first, summary, lines


def test_training_from_python_runs_the_stages_and_resumes(staged_run):
    from quantax_lite.cli import training
    from quantax_lite.driver.run_folder import read_log

    recipe, out, first, summary, lines = staged_run
    assert training.stages(recipe) == (training.Stage("translations", 0, 16), training.Stage("full", 2, 16))
    assert first["iterations"] == 1 and first["estimate_symmetry"] == "translations"
    assert summary["iterations"] == 3 and summary["estimate_symmetry"] == "full"
    assert summary["stopped_at_time_limit"] is False
    assert [r["iteration"] for r in read_log(os.path.join(out, "log.jsonl"))] == [1, 2, 3]
    assert json.load(open(os.path.join(out, "summary.json")))["energy"] == summary["energy"]
    # progress=False on the first call: silent; the second names the system and the stage switch
    assert lines[0].startswith("Heisenberg model on chain:4 (4 sites)") and sum("writing" in x for x in lines) == 1
    assert lines[-1].startswith("from step 2: symmetry full")
    with pytest.raises(FieldError) as info:  # a user error names the argument
        training.train(recipe, out, iters=0)
    assert info.value.field == "iters"
    with pytest.raises(FieldError) as info:
        training.train(recipe, out, iters=3, resume=True, restart=True)
    assert info.value.field == "restart"


@pytest.mark.slow  # a measurement from the command
def test_measure_prints_its_cost_then_measures(staged_run, capsys):
    from quantax_lite.cli.measure_run import measure_run, network_evaluations
    from quantax_lite.recipes import build

    recipe, out, *_ = staged_run
    assert main(["measure", "--out", out, "--samples", "32"]) == 0
    err = capsys.readouterr().err
    assert "32 fresh samples on 8 chains" in err and "network evaluations" in err and "samples" in err
    # per configuration: log psi, the 2 x 4 connections... of the Hamiltonian, 6 pairs, 4 + 16 dimers
    run = build(recipe)
    per = 1 + run.hamiltonian.max_conn + 6 + 4 + 16
    assert network_evaluations(run, 32) == 32 * per
    assert network_evaluations(run, 32, dimers=False) == 32 * (per - 20)
    said = []
    done = measure_run(out, samples=32, seed=3, announce=said.append, progress=True)
    assert done.observables["run"]["seed"] == 3 and len(said) == 2 and "network evaluations" in said[0]
    assert {os.path.basename(p) for p in done.written} >= {"observables.json"}
    with pytest.raises(FieldError) as info:
        measure_run(out, samples=30)
    assert info.value.field == "samples"


def test_a_6x6_measure_costs_about_1e8_evaluations():
    """The figure a user sees before measuring 6x6 with the default 32768 samples."""
    from quantax_lite.geometry.lattice import Square
    from quantax_lite.cli.measure_run import network_evaluations

    class Ham:
        max_conn = 72

    class Run:
        lattice, hamiltonian = Square(6, 6), Ham()

    n = network_evaluations(Run(), 32768)
    assert 0.9e8 < n < 1.3e8


def test_network_and_repeated_network_options_from_the_command(tmp_path, capsys):
    """``--network NAME --network-option key=value`` (repeatable, merged) reaches the recipe
    and its config; an option the network does not have exits 2 naming --network-option."""
    args = build_parser().parse_args(["train", "--network", "vit", "--network-option", "heads=2",
                                      "--network-option", "layers=1", "--network-option", "heads=4"])
    assert args.network == "vit" and args.network_options == {"heads": 4, "layers": 1}
    assert "network_options" in args.given_options
    out = tmp_path / "rbm"
    assert main(["train", "--lattice", "chain:8", "--network", "rbm", "--network-option", "alpha=2",
                 "--sampling", "exact_sum", "--iters", "2", "--out", str(out), "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["network"] == "rbm" and summary["network_options"] == {"alpha": 2}
    from quantax_lite.recipes import recipe_of_run

    recipe = recipe_of_run(str(out))[0]  # what a resume or measure rebuilds
    assert recipe.network == "rbm" and recipe.network_options == {"alpha": 2}
    capsys.readouterr()
    assert main(["train", "--lattice", "chain:8", "--network", "rbm", "--network-option", "beta=1",
                 "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("quantax-lite train: error: --network-option: beta:")


@pytest.mark.parametrize("fields, field", [
    (dict(lr=-1.0), "lr"), (dict(lattice="hexagon:3"), "lattice"), (dict(symmetry="full>none@3"), "symmetry"),
    (dict(J2=0.5), "J2"), (dict(seed=-1), "seed"), (dict(seed=1.5), "seed"), (dict(chunk_size="big"), "chunk_size"),
    (dict(network="nope"), "network"), (dict(network="rbm", network_options={"beta": 1}), "network_options"),
    (dict(samples=0), "samples"), (dict(sr_momentum=1.0), "sr_momentum"), (dict(hamiltonian="xxz"), "hamiltonian"),
    (dict(lattice="kagome:3x3"), "lattice"),
])
def test_every_recipe_error_carries_its_field(fields, field):
    """Recipe(...) raises a FieldError (a ValueError / TypeError) whose .field names the
    field at fault, the first word of its message too: the command maps .field to its
    option without reading the message."""
    with pytest.raises(FieldError) as info:
        Recipe(**fields)
    assert info.value.field == field and str(info.value).startswith(f"{field}:"), (info.value.field, str(info.value))


def test_a_dry_run_checks_the_run_options_too(tmp_path, capsys):
    """--dry-run refuses what the run would refuse (here --iters -5), naming the option."""
    assert main(["train", "--iters", "-5", "--dry-run", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["quantax-lite train: error: --iters: expected a positive int, got -5"]
    assert not (tmp_path / "run").exists()
