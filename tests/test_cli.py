"""The `quantax-lite train` command: a short run to the exact energy, the summary contract,
resume, two processes, and clear errors (8 simulated CPU devices)."""
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from quantax_lite.cli.command import main
from quantax_lite.driver.run_folder import checkpoint_path, list_checkpoints

SUMMARY_KEYS = {
    "lattice": str, "hamiltonian": str, "n_sites": int, "n_params": int, "n_samples": int,
    "iterations": int, "energy": float, "energy_error": float, "energy_per_site": float,
    "variance": float, "exact_energy": (float, type(None)), "relative_error": (float, type(None)),
    "v_score": float, "wall_time_s": float, "seconds_per_iteration": float,
    "device_count": int, "process_count": int,
}

# A small, fast setting: 8-site Heisenberg chain, exact energy -3.6510934089.
SMALL = ["train", "--lattice", "chain:8", "--channels", "4", "--depth", "1", "--samples", "256",
         "--chains", "64", "--no-progress", "--seed", "3"]
E_CHAIN8 = -3.6510934089371783


def _log(out):
    with open(os.path.join(out, "log.jsonl")) as fh:
        return [json.loads(line) for line in fh]


def test_short_training_reaches_exact_energy(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert main(SMALL + ["--iters", "60", "--lr", "0.05", "--out", out, "--eval-samples", "4096"]) == 0
    summary = json.load(open(os.path.join(out, "summary.json")))
    for key, kind in SUMMARY_KEYS.items():
        assert isinstance(summary[key], kind), (key, summary[key])
    assert summary["exact_energy"] == pytest.approx(E_CHAIN8, abs=1e-9)
    assert summary["iterations"] == 60 and summary["device_count"] == 8 and summary["process_count"] == 1
    assert summary["n_sites"] == 8 and summary["lattice"] == "chain:8"
    # variational: never (significantly) below the ground state, and within error bars of it
    deviation = summary["energy"] - E_CHAIN8
    assert deviation > -4 * summary["energy_error"]
    assert deviation < 4 * summary["energy_error"] + 2e-3, summary
    assert summary["relative_error"] == pytest.approx(abs(deviation / E_CHAIN8))
    assert summary["v_score"] == pytest.approx(8 * summary["variance"] / summary["energy"] ** 2)
    log = _log(out)
    assert [r["iteration"] for r in log] == list(range(1, 61))
    assert log[-1]["energy"] < log[0]["energy"] - 0.1  # it learned
    assert os.path.getsize(os.path.join(out, "energy.png")) > 1000
    table = capsys.readouterr().out
    assert "relative error" in table and "V-score" in table
    zv = summary["zero_variance_extrapolation"]  # the last quarter of the 60 steps, labelled as a fit
    assert zv["n_points"] == 15 and zv["fraction"] == 0.25 and "E(σ²→0) fit" in table
    assert f"{zv['energy']:.6f}" in table and "not variational" in table


@pytest.mark.slow
def test_j1j2_trains_a_signed_network_with_spring(tmp_path):
    """J1-J2 picks the signed network (a real Jacobian) and runs with SPRING; the 8-site
    chain at J2 = 0.5 (exact -3.0, the Majumdar-Ghosh point) is reached within 1e-2."""
    from quantax_lite import Recipe

    recipe = Recipe(hamiltonian="j1j2")
    assert recipe.amplitude_kind(recipe.system()[1]) == "signed"
    out = str(tmp_path / "j1j2")
    assert main(SMALL + ["--hamiltonian", "j1j2", "--J2", "0.5", "--iters", "40", "--lr", "0.05",
                         "--sr-momentum", "0.9", "--diag-shift", "1e-3", "--out", out,
                         "--eval-samples", "2048"]) == 0
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["exact_energy"] == pytest.approx(-3.0, abs=1e-9)
    assert summary["relative_error"] < 1e-2, summary
    assert summary["energy"] > -3.0 - 4 * summary["energy_error"]


@pytest.mark.slow
def test_a_sinh_network_reaches_the_4x4_j1j2_ground_state_by_exact_sums(tmp_path):
    """--amplitude sinh (psi = sum over cells of sinh(y) + c, a sign per term) on 4x4 J1-J2
    at J2 = 0.5, full group, exact sums, seed 1: with the library's offset c = 0.1 within
    1e-5 of the exact energy in 300 steps, never below it; with c = 1 (the runs made before
    the option) the same start stays caught at the Marshall signs, above 1e-3 (4.5e-3:
    research log, 2026-12-07)."""
    errors = {}
    for offset in ("0.1", "1"):
        out = str(tmp_path / f"sinh{offset}")
        assert main(["train", "--lattice", "4x4", "--hamiltonian", "j1j2", "--J2", "0.5", "--symmetry", "full",
                     "--sampling", "exact_sum", "--amplitude", "sinh", "--sinh-offset", offset, "--seed", "1",
                     "--iters", "300", "--lr-half-life", "1000", "--diag-shift", "1e-3", "--out", out,
                     "--no-progress"]) == 0
        summary = json.load(open(os.path.join(out, "summary.json")))
        assert summary["amplitude"] == "sinh" and summary["sinh_offset"] == float(offset)
        errors[offset] = summary["relative_error"]
    assert -1e-9 < errors["0.1"] < 1e-5 and errors["1"] > 1e-3, errors


@pytest.mark.slow
def test_killed_run_resumes_on_the_same_trajectory(tmp_path, capsys):
    """SIGKILL a training process after its second checkpoint, damage the newest checkpoint
    and tear the log's last line, resume it, and compare with an uninterrupted run: the
    same energies, step by step."""
    common = SMALL + ["--lattice", "chain:6", "--samples", "64", "--chains", "16", "--lr", "0.05",
                      "--eval-samples", "64", "--checkpoint-every", "3"]
    killed = str(tmp_path / "killed")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    proc = subprocess.Popen([sys.executable, "-m", "quantax_lite", *common, "--iters", "100000", "--out", killed],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 240
    while len(list_checkpoints(killed)) < 2 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    ckpts = list_checkpoints(killed)
    assert len(ckpts) >= 2, proc.stderr.read().decode()
    n_logged = len(_log(killed))
    assert n_logged >= 6
    # the worst case on top of the kill: the newest checkpoint damaged, the log's last line torn
    with open(ckpts[0], "r+b") as fh:
        fh.truncate(300)
    with open(os.path.join(killed, "log.jsonl"), "a") as fh:
        fh.write('{"iteration": 10')
    assert main(common + ["--iters", "12", "--out", killed, "--resume"]) == 0
    err = capsys.readouterr().err
    assert "damaged" in err and "dropping a damaged last line" in err and "Traceback" not in err
    full = str(tmp_path / "full")
    assert main(common + ["--iters", "12", "--out", full]) == 0
    a, b = _log(full), _log(killed)
    assert [r["iteration"] for r in b] == list(range(1, 13))
    for ra, rb in zip(a, b):
        assert ra["energy"] == rb["energy"] and ra["variance"] == rb["variance"], (ra, rb)
    sa = json.load(open(os.path.join(full, "summary.json")))
    sb = json.load(open(os.path.join(killed, "summary.json")))
    assert sa["energy"] == sb["energy"]


@pytest.mark.slow  # end to end; a time limit and its resume are checked faster by the accuracy windows test
def test_time_limit_stops_with_a_checkpoint_and_resume_continues(tmp_path, capsys):
    """--time-limit ends training after the step during which it passes (here the first),
    with a checkpoint; the final estimate still runs and the summary says where the run
    stopped; --resume (without a limit) continues on the trajectory of an uninterrupted
    run."""
    common = SMALL + ["--lattice", "chain:6", "--samples", "64", "--chains", "16", "--eval-samples", "64",
                      "--iters", "4"]
    out = str(tmp_path / "limited")
    assert main(common + ["--out", out, "--time-limit", "1e-6"]) == 0
    captured = capsys.readouterr()
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["stopped_at_time_limit"] is True and summary["iterations"] == 1
    assert np.isfinite(summary["energy"]) and len(_log(out)) == 1
    assert list_checkpoints(out) == [checkpoint_path(out, 1)]
    assert "stopped at the time limit after 1 steps" in captured.out
    assert main(common + ["--out", out, "--resume"]) == 0
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["stopped_at_time_limit"] is False and summary["iterations"] == 4
    full = str(tmp_path / "full")
    assert main(common + ["--out", full]) == 0
    assert [r["energy"] for r in _log(out)] == [r["energy"] for r in _log(full)]
    # a limit that passes in the last step of a stage ends the run there (no step of the next)
    staged = str(tmp_path / "staged")
    capsys.readouterr()
    assert main(common + ["--out", staged, "--symmetry", "translations>full@1", "--time-limit", "1e-6"]) == 0
    summary = json.load(open(os.path.join(staged, "summary.json")))
    assert summary["stopped_at_time_limit"] is True and summary["iterations"] == 1 and len(_log(staged)) == 1
    # the final estimate is that of the stage the run stopped in, and says so
    assert summary["estimate_symmetry"] == "translations"
    assert "translations>full@1 (final estimate: translations)" in capsys.readouterr().out


def edit_run_config(out, edit) -> dict:
    """Apply ``edit(config)`` to the options recorded in the first checkpoint of the run in
    ``out`` (to make it look like a run of an earlier version); returns the config before."""
    path = list_checkpoints(out)[0]
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(bytes(arrays["metadata"]).decode())
    before = dict(meta["config"])
    edit(meta["config"])
    arrays["metadata"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(path, **arrays)
    return before


@pytest.mark.slow  # trainings from the command; the default run: test_resume_options' differing option
def test_resume_with_changed_options_is_refused(tmp_path, capsys):
    out = str(tmp_path / "run")
    base = SMALL + ["--lattice", "chain:6", "--samples", "64", "--chains", "16", "--eval-samples", "64"]
    assert main(base + ["--iters", "1", "--out", out]) == 0
    assert main(base + ["--iters", "2", "--out", out, "--resume", "--lr", "0.5"]) == 2
    assert "--lr" in capsys.readouterr().err
    # a run made before --norm existed had LayerNorms: resuming it with --norm none names the
    # option rather than failing on the checkpoint's shapes (left out, it is the run's: layer)
    def older(config):  # gram_precision: an option of older runs, a speed choice, not compared
        del config["norm"]
        config["gram_precision"] = "float64"

    edit_run_config(out, older)
    assert main(base + ["--iters", "2", "--out", out, "--resume", "--norm", "none"]) == 2
    assert "--norm none (was layer)" in capsys.readouterr().err
    # nor --phase-rule: a run before it existed had none, which auto still is on a chain
    def before_the_phase_rule(config):
        del config["phase_rule"]
        config["norm"] = "none"

    edit_run_config(out, before_the_phase_rule)
    assert main(base + ["--iters", "2", "--out", out, "--resume", "--phase-rule", "auto"]) == 0
    # a shape-changing option is named too (not a traceback about array shapes)
    assert main(base + ["--iters", "2", "--out", out, "--resume", "--channels", "8", "--norm", "layer"]) == 2
    err = capsys.readouterr().err
    assert "--channels 8 (was 4)" in err and "Traceback" not in err


@pytest.mark.slow  # trainings from the command; a changed option on resume: test_resume_options.py
def test_a_kagome_run_made_without_the_phase_rule_is_not_resumed_with_it(tmp_path, capsys):
    """auto picks the 120-degree rule on kagome:2x2; a run from before the option (no
    rule) resumes with its own (none; --phase-rule auto is refused), and the summary names
    the rule."""
    out = str(tmp_path / "run")
    base = ["train", "--lattice", "kagome:2x2", "--channels", "2", "--depth", "1", "--samples", "32",
            "--chains", "32", "--eval-samples", "32", "--no-progress", "--out", out]
    assert main(base + ["--iters", "1", "--phase-rule", "none"]) == 0
    assert json.load(open(os.path.join(out, "summary.json")))["phase_rule"] == "none"
    assert edit_run_config(out, lambda config: config.pop("phase_rule"))["phase_rule"] == "none"
    capsys.readouterr()
    assert main(base + ["--iters", "2", "--resume", "--phase-rule", "auto"]) == 2
    err = capsys.readouterr().err
    assert "--phase-rule 120 (was none)" in err and "Traceback" not in err
    assert main(base + ["--iters", "2", "--resume"]) == 0  # left out: the run's own, none
    assert main(base + ["--iters", "1", "--restart"]) == 0
    assert json.load(open(os.path.join(out, "summary.json")))["phase_rule"] == "120"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--lattice", "hexagon:3"], "--lattice"),
        (["--hamiltonian", "tfim", "--J2", "0.5"], "--J2"),
        (["--hamiltonian", "heisenberg", "--h", "1.0"], "--h"),
        (["--chains", "12"], "multiple of the device count"),
        (["--samples", "100", "--chains", "16"], "--samples: 100 must be a multiple of chains"),
        (["--iters", "0"], "--iters"),
        (["--lr", "-1"], "--lr"),
        (["--sr-momentum", "1.0"], "--sr-momentum"),
        (["--resume"], "--resume"),
        (["--lr", "nan"], "--lr"),
        (["--lr", "inf"], "--lr"),
        (["--diag-shift", "inf"], "--diag-shift"),
        (["--diag-scale", "nan"], "--diag-scale"),
        (["--hamiltonian", "j1j2", "--J2", "nan"], "--J2"),
        (["--hamiltonian", "tfim", "--h=-inf"], "--h"),
        (["--lattice", "chain:7"], "even number of sites"),
        (["--lattice", "chain:1"], "--lattice"),
        (["--lattice", "0x4"], "--lattice"),
        (["--keep-checkpoints", "0"], "--keep-checkpoints"),
        (["--lattice", "triangular:4x3", "--phase-rule", "120"], "--phase-rule"),
        (["--sampling", "exact_sum", "--chains", "8"], "--chains"),
        (["--lattice", "6x6", "--sampling", "exact_sum"], "--sampling"),
        (["--time-limit", "0"], "--time-limit"),
        (["--time-limit", "nan"], "--time-limit"),
        (["--time-limit", "-5"], "--time-limit"),
        (["--resume", "--restart"], "--restart"),
        (["--coordinator", "nohost", "--num-processes", "2", "--process-id", "0"], "--coordinator"),
        (["--coordinator", "127.0.0.1:1", "--num-processes", "2", "--process-id", "2"], "--process-id"),
        (["--coordinator", "127.0.0.1:1", "--num-processes", "0", "--process-id", "0"], "--num-processes"),
        (["--coordinator", "127.0.0.1:1"], "go together"),
    ],
)
def test_bad_options_give_clear_errors(extra, message, tmp_path, capsys):
    code = main(["train", "--out", str(tmp_path / "x"), "--no-progress"] + extra)
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_out_directory_with_another_run(tmp_path, capsys):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "log.jsonl").write_text("{}\n")
    assert main(["train", "--out", str(out), "--no-progress"]) == 2
    assert "already holds a run" in capsys.readouterr().err


def test_out_that_is_not_a_writable_folder(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for out in (a_file, a_file / "below"):
        assert main(["train", "--out", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert "--out" in err and "Traceback" not in err


def test_a_diverging_run_stops_with_valid_files(tmp_path, capsys):
    """A learning rate far too large: the run stops at the first non-finite step (exit 3,
    one line naming --lr), every log line and summary.json are strict JSON, and every
    checkpoint holds finite numbers."""
    out = str(tmp_path / "run")
    code = main(SMALL + ["--iters", "40", "--lr", "5", "--diag-shift", "0", "--checkpoint-every", "1",
                         "--out", out, "--eval-samples", "256"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert "non-finite" in err and "--lr" in err and "Traceback" not in err

    def refuse(token):
        raise AssertionError(token)

    summary = json.loads(open(os.path.join(out, "summary.json")).read(), parse_constant=refuse)
    assert summary["diverged"] is True and summary["diverged_at_iteration"] >= 1
    log = [json.loads(line, parse_constant=refuse) for line in open(os.path.join(out, "log.jsonl"))]
    assert [r["iteration"] for r in log] == list(range(1, summary["diverged_at_iteration"]))
    for path in list_checkpoints(out):
        with np.load(path) as data:
            assert all(np.all(np.isfinite(data[k])) for k in data.files if data[k].dtype.kind == "f")


def _hold_lock(out):
    """A process that holds the run folder's lock until killed."""
    code = ("import sys, time; from quantax_lite.driver.run_folder import lock_run_folder\n"
            "with lock_run_folder(sys.argv[1]):\n    print('locked', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code, out], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


@pytest.mark.slow
def test_one_run_owns_its_folder_and_a_dead_owner_is_replaced(tmp_path, capsys):
    """While a live process holds --out, another train is refused (exit 2, no file touched);
    once it is killed (before its first checkpoint: a log, no checkpoint), --resume says to
    --restart, and --restart takes the folder over and runs."""
    out = str(tmp_path / "run")
    holder = _hold_lock(out)
    try:
        with open(os.path.join(out, "log.jsonl"), "w") as fh:
            fh.write(json.dumps({"iteration": 1, "energy": -1.0}) + "\n")
        assert main(SMALL + ["--iters", "2", "--out", out]) == 2
        err = capsys.readouterr().err
        assert "in use by another run" in err and f"pid {holder.pid}" in err
        assert main(SMALL + ["--iters", "2", "--out", out, "--restart"]) == 2
        assert open(os.path.join(out, "log.jsonl")).read().count("\n") == 1
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    capsys.readouterr()
    assert main(SMALL + ["--iters", "2", "--out", out, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "stopped before its first checkpoint" in err and "--restart" in err
    assert "taking over" not in err  # refused by reading the folder: its lock was not touched
    assert main(SMALL + ["--iters", "2", "--out", out, "--restart", "--eval-samples", "256"]) == 0
    err = capsys.readouterr().err
    assert "taking over the lock" in err and f"pid {holder.pid}" in err  # the dead owner's, named
    assert [r["iteration"] for r in _log(out)] == [1, 2]
    assert [os.path.basename(p) for p in list_checkpoints(out)] == ["checkpoint-00000002.npz"]


def test_a_lone_process_gives_up_with_a_clear_error(tmp_path):
    """Process 0 of 2 whose peer never comes: it says what it waits for, then exits 2 with
    one line naming --init-timeout."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2")
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "quantax_lite", *SMALL, "--out", str(tmp_path / "lone"),
                        "--coordinator", f"127.0.0.1:{_free_port()}", "--num-processes", "2",
                        "--process-id", "0", "--init-timeout", "3"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2, r.stderr
    assert time.time() - t0 < 60
    lines = r.stderr.strip().splitlines()
    assert "waiting up to 3 s" in lines[0] and "--init-timeout 3" in lines[-1]
    assert "Traceback" not in r.stderr and "Check failure" not in r.stderr


@pytest.mark.slow
def test_tfim_with_a_negative_field_is_trained_in_a_sign_free_basis(tmp_path):
    """-h sx with h < 0 has positive off-diagonal elements: its ground state has amplitudes
    of both signs (exact diagonalization), which a positive network cannot represent. The
    command uses the basis rotated by prod sz (same spectrum, positive ground state), and
    a short run reaches the exact energy."""
    from quantax_lite import Recipe
    from quantax_lite.exact.diagonalization import ground_state
    from quantax_lite.geometry.lattice import Chain
    from quantax_lite.operators.hamiltonian import TransverseFieldIsing

    def single_signed(ham):
        psi = np.real(np.asarray(ground_state(ham)[1]))
        psi = psi[np.abs(psi) > 1e-8]
        return bool(np.all(psi > 0) or np.all(psi < 0))

    for h in (1.0, -1.0, -0.3):
        recipe = Recipe(hamiltonian="tfim", lattice="chain:6", h=h)
        _, ham, _ = recipe.system()
        assert recipe.amplitude_kind(ham) == "positive" and single_signed(ham)
        plain = TransverseFieldIsing(Chain(6), h=h)
        assert single_signed(plain) == (h > 0)
        assert ground_state(ham)[0] == pytest.approx(ground_state(plain)[0], abs=1e-10)
        assert recipe.amplitude_kind(plain) == ("positive" if h > 0 else "signed")
    out = str(tmp_path / "tfim")
    assert main(SMALL + ["--hamiltonian", "tfim", "--h=-1", "--iters", "60", "--lr", "0.05", "--out", out,
                         "--eval-samples", "2048"]) == 0
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["relative_error"] < 1e-2, summary


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    for opt in ("--lattice", "--hamiltonian", "--J2", "--h", "--depth", "--channels", "--kernel-size",
                "--symmetry", "--samples", "--chains", "--chunk-size", "--iters", "--lr", "--diag-shift",
                "--seed", "--precision", "--out", "--resume", "--checkpoint-every", "--coordinator",
                "--num-processes", "--process-id", "--sr-momentum", "--amplitude", "--no-marshall",
                "--lr-half-life", "--restart", "--keep-checkpoints", "--init-timeout"):
        assert opt in text
    # speed choices are the library's own: no option for them; legacy options are hidden
    # (tests/test_cli_help.py: still accepted)
    for gone in ("--conv ", "--gram-precision", "--norm", "--momentum-readout"):
        assert gone not in text
    # one default per option, none for an option whose text states it
    assert "(default: None)" not in text and text.count("(default: 1024)") == 1


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("sampling", [["--samples", "64", "--chains", "16", "--eval-samples", "64"],
                                      ["--sampling", "exact_sum", "--hamiltonian", "j1j2", "--symmetry", "full"]],
                         ids=["metropolis", "exact_sum"])
def test_two_processes_match_one_process(tmp_path, sampling):
    """2 processes x 2 devices (gloo on 127.0.0.1) == 1 process x 4 devices, with samples and
    with exact sums. Process 1 is given a --time-limit already past: process 0's clock
    decides, so both take every step."""
    args = ["-m", "quantax_lite", "train", "--lattice", "chain:6", "--channels", "4", "--depth", "1",
            "--iters", "3", "--no-progress"] + sampling
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    one = str(tmp_path / "one")
    r = subprocess.run([sys.executable] + args + ["--out", one], capture_output=True, text=True, timeout=300,
                       env=dict(env, XLA_FLAGS="--xla_force_host_platform_device_count=4"))
    assert r.returncode == 0, r.stderr
    two = str(tmp_path / "two")
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable] + args + ["--out", two, "--coordinator", f"127.0.0.1:{port}",
                                       "--num-processes", "2", "--process-id", str(i),
                                       "--time-limit", "1000" if i == 0 else "1e-6"],
            env=dict(env, XLA_FLAGS="--xla_force_host_platform_device_count=2"),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(2)
    ]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=300)[0])
    finally:
        for p in procs:
            p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(outs)
    s1 = json.load(open(os.path.join(one, "summary.json")))
    s2 = json.load(open(os.path.join(two, "summary.json")))
    assert s1["device_count"] == s2["device_count"] == 4
    assert s1["process_count"] == 1 and s2["process_count"] == 2
    assert s2["iterations"] == 3 and s2["stopped_at_time_limit"] is False
    e1 = np.array([r["energy"] for r in _log(one)])
    e2 = np.array([r["energy"] for r in _log(two)])
    np.testing.assert_allclose(e2, e1, rtol=1e-9)
    assert s2["energy"] == pytest.approx(s1["energy"], rel=1e-9)


@pytest.mark.parametrize("command", [["train"], ["measure"]])
def test_help_states_one_default_per_option(command, capsys):
    """Every option's help text states its default once, in one form '(default: ...)', and
    never '(default: None)' (issue 18, item 6); parsed from the printed --help."""
    import re

    with pytest.raises(SystemExit):
        main(command + ["--help"])
    text = capsys.readouterr().out
    assert "(default: None)" not in text
    entries = re.split(r"\n  (?=-)", "\n".join(text.split("\n\n")[2:]))
    options = {}
    for entry in entries:
        flat = " ".join(entry.split())
        name = flat.split()[0].rstrip(",")
        options[name] = flat
    assert len(options) > (20 if command == ["train"] else 5)
    for name, flat in options.items():
        assert flat.count("default") <= 1, (name, flat)
        if "default" in flat:
            assert "(default: " in flat, (name, flat)
    stated = (("--lattice", "--J2", "--h", "--depth", "--kernel-size", "--eval-samples", "--seed", "--out")
              if command == ["train"] else ("--samples", "--seed", "--chunk-size"))
    for name in stated:
        assert "(default: " in options[name], name
