"""benchmarks/sampling_power.py: estimates from samples of |psi|^(2a) against exact sums.

The quick run (slow: it trains a network first) checks the script end to end on a chain
of 8; the fast tests its refusals and that its estimates at a = 1 and a < 1 are the ones
of the library's weighted SR solve on exactly summed inputs.
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "sampling_power.py")


def _run(*args, timeout=600):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split()
                                if not f.startswith("--xla_force_host_platform_device_count"))
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT)


@pytest.mark.parametrize("args, option", [
    (["--powers", "1,0"], "--powers"), (["--powers", "1,x"], "--powers"), (["--train-powers", "2"], "--train-powers"),
    (["--samples", "0"], "--samples"), (["--train-steps", "-1"], "--train-steps"), (["--run", "/nonexistent"], "--run"),
])
def test_bad_options_are_refused_in_one_line(tmp_path, args, option):
    proc = _run(*args, "--json", str(tmp_path / "x.json"), timeout=120)
    assert proc.returncode == 2 and option in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.mark.slow
def test_quick_run_compares_the_powers_and_trains_on(tmp_path):
    out = tmp_path / "sp.json"
    proc = _run("--quick", "--train-steps", "3", "--train-powers", "1,0.5", "--out", str(tmp_path / "runs"),
                "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert [r["power"] for r in result["rows"]] == [1.0, 0.8, 0.6, 0.5, 0.4]
    plain = result["rows"][0]
    assert plain["effective_sample_fraction"] == pytest.approx(1.0)
    for r in result["rows"]:
        assert 0 < r["effective_sample_fraction"] <= 1 + 1e-12 and -1 <= r["cosine"] <= 1
    assert [r["power"] for r in result["training"]] == [1.0, 0.5]
    assert all(r["steps"] == 3 and r["relative_error"] > 0 for r in result["training"])
    assert result["command"].startswith("python benchmarks/sampling_power.py")
