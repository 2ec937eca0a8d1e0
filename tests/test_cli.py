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

from quantax_lite.cli import main

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


def test_j1j2_trains_a_signed_network_with_spring(tmp_path):
    """J1-J2 picks the signed network (a real Jacobian) and runs with SPRING; the 8-site
    chain at J2 = 0.5 (exact -3.0, the Majumdar-Ghosh point) is reached within 1e-2."""
    from quantax_lite.cli import amplitude_kind, build_parser, build_system

    args = build_parser().parse_args(["train", "--hamiltonian", "j1j2"])
    assert amplitude_kind(args, build_system(args)[1]) == "signed"
    out = str(tmp_path / "j1j2")
    assert main(SMALL + ["--hamiltonian", "j1j2", "--J2", "0.5", "--iters", "40", "--lr", "0.05",
                         "--sr-momentum", "0.9", "--diag-shift", "1e-3", "--out", out,
                         "--eval-samples", "2048"]) == 0
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["exact_energy"] == pytest.approx(-3.0, abs=1e-9)
    assert summary["relative_error"] < 1e-2, summary
    assert summary["energy"] > -3.0 - 4 * summary["energy_error"]


def test_killed_run_resumes_on_the_same_trajectory(tmp_path):
    """SIGKILL a training process right after its first checkpoint, resume it, and compare
    with an uninterrupted run: the same energies, step by step."""
    common = SMALL + ["--lattice", "chain:6", "--samples", "64", "--chains", "16", "--lr", "0.05",
                      "--eval-samples", "64", "--checkpoint-every", "3"]
    killed = str(tmp_path / "killed")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    proc = subprocess.Popen([sys.executable, "-m", "quantax_lite", *common, "--iters", "100000", "--out", killed],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ckpt = os.path.join(killed, "checkpoint.npz")
    deadline = time.time() + 240
    while not os.path.exists(ckpt) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    assert os.path.exists(ckpt), proc.stderr.read().decode()
    n_logged = len(_log(killed))
    assert n_logged >= 3
    assert main(common + ["--iters", "12", "--out", killed, "--resume"]) == 0
    full = str(tmp_path / "full")
    assert main(common + ["--iters", "12", "--out", full]) == 0
    a, b = _log(full), _log(killed)
    assert [r["iteration"] for r in b] == list(range(1, 13))
    for ra, rb in zip(a, b):
        assert ra["energy"] == rb["energy"] and ra["variance"] == rb["variance"], (ra, rb)
    sa = json.load(open(os.path.join(full, "summary.json")))
    sb = json.load(open(os.path.join(killed, "summary.json")))
    assert sa["energy"] == sb["energy"]


def test_resume_with_changed_options_is_refused(tmp_path, capsys):
    out = str(tmp_path / "run")
    base = SMALL + ["--lattice", "chain:6", "--samples", "64", "--chains", "16", "--eval-samples", "64"]
    assert main(base + ["--iters", "1", "--out", out]) == 0
    assert main(base + ["--iters", "2", "--out", out, "--resume", "--lr", "0.5"]) == 2
    assert "--lr" in capsys.readouterr().err
    # a run made before --norm existed had LayerNorms: resuming it with the new default
    # names the option rather than failing on the checkpoint's shapes
    path = os.path.join(out, "checkpoint.npz")
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(bytes(arrays["metadata"]).decode())
    del meta["config"]["norm"], meta["config"]["gram_precision"]
    arrays["metadata"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(path, **arrays)
    assert main(base + ["--iters", "2", "--out", out, "--resume"]) == 2
    assert "--norm none (was layer)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--lattice", "hexagon:3"], "--lattice"),
        (["--hamiltonian", "tfim", "--J2", "0.5"], "--J2"),
        (["--hamiltonian", "heisenberg", "--h", "1.0"], "--h"),
        (["--chains", "12"], "multiple of the device count"),
        (["--samples", "100", "--chains", "16"], "multiple of --chains"),
        (["--iters", "0"], "--iters"),
        (["--lr", "-1"], "--lr"),
        (["--sr-momentum", "1.0"], "--sr-momentum"),
        (["--resume"], "--resume"),
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


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    for opt in ("--lattice", "--hamiltonian", "--J2", "--h", "--depth", "--channels", "--kernel-size",
                "--symmetry", "--samples", "--chains", "--chunk-size", "--iters", "--lr", "--diag-shift",
                "--seed", "--precision", "--out", "--resume", "--checkpoint-every", "--coordinator",
                "--num-processes", "--process-id", "--norm", "--gram-precision", "--sr-momentum", "--amplitude"):
        assert opt in text


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_match_one_process(tmp_path):
    """2 processes x 2 devices (gloo on 127.0.0.1) == 1 process x 4 devices."""
    args = ["-m", "quantax_lite", "train", "--lattice", "chain:6", "--channels", "4", "--depth", "1",
            "--samples", "64", "--chains", "16", "--iters", "3", "--eval-samples", "64", "--no-progress"]
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
                                       "--num-processes", "2", "--process-id", str(i)],
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
    e1 = np.array([r["energy"] for r in _log(one)])
    e2 = np.array([r["energy"] for r in _log(two)])
    np.testing.assert_allclose(e2, e1, rtol=1e-9)
    assert s2["energy"] == pytest.approx(s1["energy"], rel=1e-9)
