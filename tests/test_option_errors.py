"""Every option of ``train``, ``measure`` and ``evolve`` tried with bad values: the command
exits 2 with one line that names that very option, no traceback, and writes nothing to
--out. The options are read from the parser itself, so an option added without a
bad-value case here fails :func:`test_every_option_has_a_bad_value_case`."""
import os

import pytest

from quantax_lite.cli import main
from quantax_lite.cli.options import build_parser

# The options no value of which can be wrong: switches that take no value and are each
# valid in any combination. A switch that can be misused (--resume with no run to resume,
# --restart with --resume) has a case below instead.
EXCLUDED = {
    "train": {
        "--help": "prints the help and exits 0",
        "--no-marshall": "a switch: the sign rule off is valid for every model",
        "--dry-run": "a switch: any valid run can be dry-run",
        "--measure": "a switch: any run can be measured at its end",
        "--no-progress": "a switch: only hides the progress bar",
        "--distributed": "a switch: its only misuse, no cluster to detect, needs a cluster runtime "
                         "(jax.distributed's auto-detection) to show",
    },
    "measure": {
        "--help": "prints the help and exits 0",
        "--no-dimers": "a switch: leaves out one observable, valid for every run",
        "--lanczos": "a switch: valid for every run (sampled or exact sums)",
        "--no-progress": "a switch: only hides the progress messages",
    },
    "evolve": {
        "--help": "prints the help and exits 0",
        "--imaginary": "a switch: imaginary time is valid for every start",
        "--no-progress": "a switch: only hides the progress bar",
    },
}

# option -> its bad values: a string is given as `option value` after the base options; a
# list is given as it is (a value with the options it conflicts with).
TRAIN_BAD = {
    "--lattice": ["hexagon:3", "4x", "0x4", "chain:-4"],
    "--hamiltonian": ["ising"],
    "--J2": ["abc", ["--hamiltonian", "j1j2", "--J2", "nan"], "0.5"],  # 0.5: heisenberg has no J2
    "--h": ["abc", ["--hamiltonian", "tfim", "--h", "inf"]],
    "--phase-rule": ["90"],
    "--symmetry": ["mirror", "full>none@3"],
    "--momentum": ["x", "1,2,3"],
    "--spin-parity": ["2", "even"],
    "--rotation-parity": ["0"],
    "--momentum-readout": ["center"],
    "--network": ["nope"],
    "--network-option": ["frobnicate=1", "alpha"],
    "--depth": ["-1", "two"],  # (0 is valid: no residual blocks)
    "--channels": ["0", "-2", "many"],
    "--kernel-size": ["0", "-3", "3.5"],
    "--norm": ["batch"],
    "--amplitude": ["real"],
    "--sinh-offset": ["-1", "nan", "big", "0.5", ["--amplitude", "signed", "--sinh-offset", "1"]],
    "--precision": ["f16"],
    "--sampling": ["exact"],
    "--samples": ["0", "-16", "many", "1e3", ["--sampling", "exact_sum", "--samples", "64"]],
    "--full-stage-samples": ["0", "-64"],
    "--chains": ["0", "-8", "3"],
    "--sweep-size": ["0", "-1"],
    "--sampling-power": ["0", "-0.5", "1.5", "nan", "half", ["--sampling", "exact_sum", "--sampling-power", "0.5"]],
    "--chunk-size": ["0", "-64", "big"],
    "--memory-budget": ["0", "-1", "nan", "lots"],
    "--lr": ["0", "-0.01", "nan", "inf", "fast"],
    "--lr-half-life": ["0", "-100"],
    "--full-stage-lr": ["-0.1", "nan"],
    "--diag-shift": ["-1", "nan"],
    "--diag-scale": ["-1", "inf"],
    "--sr-momentum": ["1.0", "-0.5"],
    "--eval-samples": ["0", "-32", "20"],  # 20: not a multiple of the 8 chains
    "--seed": ["-1", str(2**63), "1.5"],
    "--config": ["missing.toml"],
    "--iters": ["0", "-5", "ten"],
    "--out": ["<file>"],  # an existing regular file
    "--resume": [["--resume"]],  # nothing to resume in --out
    "--restart": [["--resume", "--restart"]],
    "--init-from": ["missing-run", "<empty>", ["--resume", "--init-from", "<run>"]],
    "--checkpoint-every": ["-1", "often"],
    "--keep-checkpoints": ["0", "-3"],
    "--time-limit": ["0", "-5", "nan"],
    "--coordinator": [["--coordinator", "localhost", "--num-processes", "2", "--process-id", "0"],
                      ["--coordinator", "localhost:99999", "--num-processes", "2", "--process-id", "0"]],
    "--num-processes": [["--coordinator", "localhost:1234", "--num-processes", "0", "--process-id", "0"], "two"],
    "--process-id": [["--coordinator", "localhost:1234", "--num-processes", "2", "--process-id", "2"],
                     ["--coordinator", "localhost:1234", "--num-processes", "2", "--process-id", "-1"]],
    "--init-timeout": ["0", "-5", "soon"],
}

MEASURE_BAD = {
    "--out": ["missing-run", "<empty>", "<file>"],
    "--samples": ["0", "-32", "many", "30"],  # 30: not a multiple of the run's 8 chains
    "--seed": ["-1", str(2**63), "x"],
    "--chunk-size": ["0", "-64", "big"],
    "--memory-budget": ["0.5", "lots"],  # measure bounds its memory by --chunk-size only
    "--lanczos-passes": [["--lanczos", "--lanczos-passes", "1"], ["--lanczos", "--lanczos-passes", "x"],
                         "3"],  # 3 without --lanczos: nothing to pass over
}

EVOLVE_BAD = {
    "--out": ["<file>"],
    "--init-from": ["missing-run", "<empty>", "<run>"],  # <run>: a real network, real time
    "--initial-state": ["neel"],
    "--lattice": ["hexagon:3", "4x"],
    "--hamiltonian": ["ising"],
    "--h": ["abc", "nan"],
    "--J2": ["abc", ["--hamiltonian", "j1j2", "--J2", "inf"]],
    "--t-end": ["0", "-1", "nan", "later"],
    "--dt": ["0", "-0.01", "nan"],
    "--tol": ["0", "-1e-4", ["--integrator", "rk4", "--tol", "1e-4"]],
    "--integrator": ["rk5"],
    "--regularization": ["svd"],
    "--rcond": ["-1", "nan"],
    "--diag-shift": [["--regularization", "shift", "--diag-shift", "-1"],
                     ["--regularization", "shift", "--diag-shift", "nan"]],
    "--sampling": ["mcmc"],
    "--samples": ["64", ["--sampling", "metropolis", "--samples", "0"]],  # 64: exact sums draw none
    "--seed": ["-1", "x"],
    "--checkpoint-every": ["0", "-1"],
    "--resume": [["--resume"]],
    "--restart": [["--resume", "--restart"]],
}

BAD = {"train": TRAIN_BAD, "measure": MEASURE_BAD, "evolve": EVOLVE_BAD}


def _subparsers():
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return action.choices


def _options(name: str) -> dict:
    """{option: its action} of the subcommand ``name``, each option by its long name (--help, not -h)."""
    return {max(a.option_strings, key=len): a for a in _subparsers()[name]._actions if a.option_strings}


@pytest.mark.parametrize("command", sorted(BAD))
def test_every_option_has_a_bad_value_case(command):
    options = _options(command)
    excluded = EXCLUDED[command]
    assert set(BAD[command]) | set(excluded) == set(options), (
        "options without a bad-value case:", sorted(set(options) - set(BAD[command]) - set(excluded)),
        "cases of no option:", sorted((set(BAD[command]) | set(excluded)) - set(options)))
    assert not set(BAD[command]) & set(excluded)
    for option in excluded:  # only options that take no value are left out
        assert options[option].nargs == 0, option
    assert all(BAD[command].values())


def _cases(command):
    return [pytest.param(command, option, value, id=f"{command} {option} {value if isinstance(value, str) else ' '.join(value)}")
            for option, values in BAD[command].items() for value in values]


def _run(argv, capsys):
    """``main(argv)``'s exit status (returned or raised, as argparse does) and its stderr."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr().err


def _check(code, err, option):
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err)
    assert option in lines[0], (option, lines[0])
    return lines[0]


def _folder_state(path) -> dict:
    """What --out holds: {name: (size, mtime)} of every file below it."""
    found = {}
    for root, _, files in os.walk(path):
        for f in files:
            st = os.stat(os.path.join(root, f))
            found[os.path.relpath(os.path.join(root, f), path)] = (st.st_size, st.st_mtime_ns)
    return found


def _places(tmp_path, trained=None) -> dict:
    """The placeholders of the cases: an existing file, an empty folder, a trained run."""
    (tmp_path / "a-file").write_text("notes\n")
    (tmp_path / "empty").mkdir()
    return {"<file>": str(tmp_path / "a-file"), "<empty>": str(tmp_path / "empty"), "<run>": trained,
            "missing-run": str(tmp_path / "missing-run"), "missing.toml": str(tmp_path / "missing.toml")}


def _argv(option, value, places):
    given = [option, value] if isinstance(value, str) else list(value)
    return [places.get(x, x) for x in given]


# ------------------------------------------------------------------ train
# A tiny network, one step; no sampling options, which the cases with exact sums would refuse.
# Every case is refused before anything compiles.
TRAIN = ["train", "--lattice", "chain:4", "--channels", "2", "--depth", "1", "--iters", "1", "--no-progress"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished tiny run (1 step, 8 chains): measure's --out, train's and evolve's --init-from."""
    out = str(tmp_path_factory.mktemp("option_errors") / "run")
    assert main(TRAIN + ["--samples", "16", "--chains", "8", "--eval-samples", "32", "--out", out]) == 0
    return out


@pytest.mark.parametrize("command, option, value", _cases("train"))
def test_a_bad_train_option_is_one_line_naming_it(command, option, value, tmp_path, capsys, request):
    places = _places(tmp_path, request.getfixturevalue("trained") if "<run>" in value else None)
    out = tmp_path / "run"
    given = _argv(option, value, places)
    argv = TRAIN + (["--out", str(out)] if option != "--out" else []) + given
    before = _folder_state(tmp_path)
    code, err = _run(argv, capsys)
    _check(code, err, option)
    assert not out.exists() or not any(out.iterdir()), sorted(os.listdir(out))
    assert _folder_state(tmp_path) == before  # nor anywhere else (the file given as --out)


# ------------------------------------------------------------------ measure
@pytest.mark.parametrize("command, option, value", _cases("measure"))
def test_a_bad_measure_option_is_one_line_naming_it(command, option, value, trained, tmp_path, capsys):
    places = _places(tmp_path, trained)
    given = _argv(option, value, places)
    argv = ["measure", "--no-progress"] + (["--out", trained] if option != "--out" else []) + given
    run_before, before = _folder_state(trained), _folder_state(tmp_path)
    code, err = _run(argv, capsys)
    _check(code, err, option)
    assert _folder_state(trained) == run_before  # the run's files untouched, no new one
    assert _folder_state(tmp_path) == before and not os.path.exists(places["missing-run"])


# ------------------------------------------------------------------ evolve
EVOLVE = ["evolve", "--initial-state", "x", "--lattice", "chain:4", "--hamiltonian", "tfim", "--h", "0.5",
          "--t-end", "0.01", "--no-progress"]


@pytest.mark.parametrize("command, option, value", _cases("evolve"))
def test_a_bad_evolve_option_is_one_line_naming_it(command, option, value, tmp_path, capsys, request):
    places = _places(tmp_path, request.getfixturevalue("trained") if "<run>" in value else None)
    out = tmp_path / "run"
    given = _argv(option, value, places)
    base = list(EVOLVE)
    if option == "--init-from":  # one start only
        i = base.index("--initial-state")
        del base[i:i + 2]
        j = base.index("--lattice")
        del base[j:j + 2]
    argv = base + (["--out", str(out)] if option != "--out" else []) + given
    before = _folder_state(tmp_path)
    code, err = _run(argv, capsys)
    _check(code, err, option)
    assert not out.exists() or not any(out.iterdir()), sorted(os.listdir(out))
    assert _folder_state(tmp_path) == before


def test_a_restart_with_a_bad_option_keeps_the_run(trained, tmp_path, capsys):
    """--restart with an option refused only when the run is built (the chains split over
    the 8 devices) is refused before the old run is deleted."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(trained, out)
    before = _folder_state(out)
    code, err = _run(TRAIN + ["--out", str(out), "--restart", "--chains", "3"], capsys)
    _check(code, err, "--chains")
    assert _folder_state(out) == before
