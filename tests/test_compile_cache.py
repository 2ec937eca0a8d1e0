"""quantax_lite.utils.compile_cache: where the command keeps compiled programs, and that a second
run loads them and computes the same numbers."""
import json
import os
import subprocess
import sys

import pytest

from quantax_lite.utils import compile_cache


def test_the_folder_follows_the_environment(tmp_path):
    env, kind = compile_cache.ENV, compile_cache.host_kind()
    home = os.path.join(os.path.expanduser("~"), ".cache", "quantax_lite", "xla", kind)
    for off in ("0", "off", "OFF", "none", "false", "no"):
        assert compile_cache.cache_folder({env: off}) is None
    for on in ("1", "on", "TRUE", "yes", " "):
        assert compile_cache.cache_folder({env: on}) == home
    assert compile_cache.cache_folder({env: str(tmp_path / "c")}) == str(tmp_path / "c" / kind)
    assert compile_cache.cache_folder({env: "~/x"}) == os.path.join(os.path.expanduser("~"), "x", kind)
    assert compile_cache.cache_folder({"XDG_CACHE_HOME": str(tmp_path)}) == str(tmp_path / "quantax_lite" / "xla" / kind)
    assert compile_cache.cache_folder({}) == home
    assert kind == compile_cache.host_kind() and kind.count("-") >= 1


def test_a_folder_set_for_jax_is_kept(tmp_path):
    before = (compile_cache.jax.config.jax_compilation_cache_dir,
              compile_cache.jax.config.jax_persistent_cache_min_compile_time_secs)
    jax_env = {"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "j")}
    assert compile_cache.cache_folder(jax_env) == str(tmp_path / "j")
    kind = compile_cache.host_kind()
    assert compile_cache.cache_folder(dict(jax_env, **{compile_cache.ENV: str(tmp_path / "q")})) == str(
        tmp_path / "q" / kind)
    assert compile_cache.configure(jax_env) == str(tmp_path / "j")  # left as the user set it
    assert (compile_cache.jax.config.jax_compilation_cache_dir,
            compile_cache.jax.config.jax_persistent_cache_min_compile_time_secs) == before


def test_off_turns_off_a_cache_set_up_for_jax(monkeypatch):
    if not compile_cache.jax.config.jax_compilation_cache_dir:
        pytest.skip("the tests run without JAX's cache (JAX_COMPILATION_CACHE_DIR empty)")
    updates = []
    monkeypatch.setattr(compile_cache.jax.config, "update", lambda name, value: updates.append((name, value)))
    assert compile_cache.configure({compile_cache.ENV: "off"}) is None
    assert updates == [("jax_enable_compilation_cache", False)]


def test_an_unusable_folder_warns_and_turns_the_cache_off(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.warns(UserWarning, match="compilation cache off"):
        assert compile_cache.configure({compile_cache.ENV: str(blocker / "sub")}) is None


RUN = """
import json, sys
import jax
hits = []
jax.monitoring.register_event_listener(lambda name, **kw: hits.append(name))
from quantax_lite import cli
status = cli.main(["train", "--lattice", "4x4", "--samples", "32", "--iters", "3", "--eval-samples", "64",
                   "--out", sys.argv[1], "--no-progress"])
print(json.dumps(dict(status=status, hits=hits.count("/jax/compilation_cache/cache_hits"),
                      folder=jax.config.jax_compilation_cache_dir)))
"""


@pytest.mark.slow  # two trainings in fresh processes; the folder rules are the fast tests above
def test_a_second_run_loads_its_programs_and_computes_the_same(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    # every program stored, however quickly it compiles: the second run then loads them all
    env.update(JAX_PLATFORMS="cpu", QUANTAX_LITE_COMPILE_CACHE=str(tmp_path / "cache"),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split()
                                if not f.startswith("--xla_force_host_platform_device_count"))
    results = []
    for run in ("first", "second"):
        proc = subprocess.run([sys.executable, "-c", RUN, str(tmp_path / run)], capture_output=True, text=True,
                              env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    first, second = results
    assert first["status"] == second["status"] == 0
    folder = tmp_path / "cache" / compile_cache.host_kind()
    assert first["folder"] == second["folder"] == str(folder) and os.listdir(folder)
    assert first["hits"] == 0 and second["hits"] > 0

    def trajectory(run):
        with open(tmp_path / run / "log.jsonl") as fh:
            return [{k: v for k, v in json.loads(line).items() if k != "wall_time_s"} for line in fh]

    assert trajectory("first") == trajectory("second")
    with open(tmp_path / "first" / "summary.json") as a, open(tmp_path / "second" / "summary.json") as b:
        assert json.load(a)["energy"] == json.load(b)["energy"]
