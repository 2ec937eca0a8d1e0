"""benchmarks/ as thin scripts over one harness (benchmarks/_common.py): no file over 500
lines, every script that writes a JSON result stamps it with the harness's fields, and the
harness's pieces (the record, JSON writing, tables, timing, worker rows) do what they say."""
import ast
import importlib.util
import json
import os
import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
LIMIT = 500
# scripts with a --json option that do not stamp it, and why (each must still exist and
# take --json: an entry that no longer applies fails below)
UNSTAMPED = {
    "accuracy": "a list of rows, each with its host (HOST_KEYS) and its options; readme_table.py and the "
                "docs' ties read it as a list",
    "training_curve": "summaries of run folders keyed by run (each run folder names its own host), not a "
                      "measurement on this machine",
}


def load(name):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scripts():
    """The benchmark scripts (``python benchmarks/NAME.py``): not the harness or a script's
    parts (``_*.py``)."""
    return sorted(p for p in BENCH.glob("*.py") if not p.name.startswith("_"))


def calls(path) -> set:
    """Names of the functions a file calls (``f(...)`` and ``module.f(...)``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None)
    return names


def takes_json(path) -> bool:
    text = path.read_text()
    return '"--json"' in text or "add_json_option(" in text


def test_no_benchmark_file_is_over_500_lines():
    files = sorted(BENCH.glob("*.py"))
    assert len(files) > 20
    long = {p.name: n for p in files if (n := len(p.read_text().splitlines())) > LIMIT}
    assert not long, f"over {LIMIT} lines (split by concept into _NAME_*.py parts beside the script): {long}"


def test_every_script_with_json_stamps_the_harness_fields():
    """A script that writes a JSON result writes it through the harness (``write_result``)
    or stamps it (``stamp``), so it carries ``command`` and ``meta``; the exceptions are
    named above with their reason."""
    with_json = {p.stem: p for p in scripts() if takes_json(p)}
    assert {"vmc_scale", "accelerator_suite", "jacobian_sharding", "peers", "lanczos"} <= set(with_json)
    missing = [name for name, p in with_json.items()
               if name not in UNSTAMPED and not {"write_result", "stamp"} & calls(p)]
    assert not missing, f"write the result with _common.write_result (or stamp it): {missing}"
    assert set(UNSTAMPED) <= set(with_json), "an exception for a script that is gone or takes no --json"
    stamped = [name for name in UNSTAMPED if {"write_result", "stamp"} & calls(with_json[name])]
    assert not stamped, f"stamped now: drop them from UNSTAMPED: {stamped}"


def test_scripts_use_the_harness_for_what_they_share():
    """What the harness holds is not written again in a script: the load average, the
    record's command line, a JSON file opened for writing by hand."""
    for p in scripts():
        text = p.read_text()
        if p.stem in UNSTAMPED:
            continue
        assert "os.getloadavg()" not in text, f"{p.name}: _common.load_average()"
        if takes_json(p):  # the record's command line: command_line (stamp), not built by hand
            assert 'python benchmarks/" +' not in text and '"benchmarks/' + p.name + '"' not in text, p.name
        assert "json.dump(" not in text, f"{p.name}: write JSON with _common.write_json / write_result"


def test_stamp_and_write_result(tmp_path):
    common = load("_common")
    assert common.RECORD_FIELDS == ("command", "meta")
    assert common.command_line("/x/benchmarks/vmc_scale.py", ["--quick", "--json", "a b.json"]) == \
        "python benchmarks/vmc_scale.py --quick --json 'a b.json'"
    assert common.command_line("peers", []) == "python benchmarks/peers.py"
    path = tmp_path / "deep" / "r.json"
    result = dict(rows=[1], meta=dict(jax="mine", note="kept"))
    assert common.write_result(str(path), result, "vmc_step.py", ["--rows", "0"], indent=2) is result
    written = json.loads(path.read_text())
    assert written == result and set(common.RECORD_FIELDS) <= set(written)
    assert written["command"] == "python benchmarks/vmc_step.py --rows 0"
    meta = written["meta"]
    assert meta["jax"] == "mine" and meta["note"] == "kept"  # the script's own meta keys win
    for key in ("backend", "device_kind", "n_devices", "devices", "cpu_count", "machine", "python"):
        assert key in meta, key
    assert len(meta["load_average"]) == 3
    assert path.read_text().startswith('{\n  "rows"') and os.listdir(path.parent) == ["r.json"]  # no .tmp left
    given = common.stamp(dict(command="python benchmarks/x.py --by-hand"), "x.py", ["--other"])
    assert given["command"] == "python benchmarks/x.py --by-hand"  # a command already there is kept
    common.write_json(os.devnull, [1, 2])  # not a regular file: written as it is, nothing renamed over it
    common.write_json(str(tmp_path / "n.json"), {"a": 1}, indent=None, newline=True)
    assert (tmp_path / "n.json").read_text() == '{"a": 1}\n'
    with pytest.raises(ValueError):
        common.write_json(str(tmp_path / "nan.json"), {"a": float("nan")}, allow_nan=False)
    assert not (tmp_path / "nan.json").exists() and not (tmp_path / "nan.json.tmp").exists()


def test_json_option_and_the_quick_rule():
    common = load("_common")
    default = str(BENCH / "results" / "x.json")
    assert common.output_path(True, None, default) is None
    assert common.output_path(True, "a.json", default) == "a.json"
    assert common.output_path(False, None, default) == default
    parsed = {}
    for when in ("always", "full", "asked", "given"):
        parser = common.script_parser("doc")
        common.add_json_option(parser, default if when != "given" else None, when)
        parsed[when] = [parser.parse_args(a).json for a in ([], ["--json", "p.json"])]
        assert "benchmarks/results/x.json" in parser.format_help() or when == "given"
    assert parsed == {"always": [default, "p.json"], "full": [None, "p.json"], "asked": [None, "p.json"],
                      "given": [None, "p.json"]}
    parser = common.script_parser("doc")
    common.add_json_option(parser, default, "asked")
    assert parser.parse_args(["--json"]).json == default


def test_table_and_timing():
    common = load("_common")
    t = common.Table(("package", -13), ("params", 7), ("ms", 9))
    assert t.header == f"{'package':<13} {'params':>7} {'ms':>9}"
    assert t.rule == "-" * len(t.header)
    assert t.row("ours", 2424, f"{100.0:.1f}", " tail") == f"{'ours':<13} {2424:>7} {100.0:>9.1f}  tail"
    assert t.row(None, True) == f"{'None':<13} {'True':>7}"
    import jax.numpy as jnp

    value, seconds = common.clock(lambda: jnp.ones(3) * 2)
    assert float(value.sum()) == 6.0 and seconds >= 0
    assert len(common.time_calls(lambda: jnp.ones(2), 3)) == 3
    median, best = common.timed(lambda: jnp.ones(2), 2)
    assert 0 <= best <= median
    assert [common.platform_kind(b) for b in ("tpu", "cuda", "rocm", "gpu", "cpu", "METAL")] == \
        ["tpu", "gpu", "gpu", "gpu", "cpu", "cpu"]
    env = common.cpu_devices_env(4, {"XLA_FLAGS": "--a --xla_force_host_platform_device_count=8"})
    assert env["XLA_FLAGS"] == "--a --xla_force_host_platform_device_count=4" and env["JAX_PLATFORMS"] == "cpu"


def test_worker_rows_measured_failed_and_late(tmp_path):
    """A worker's row read from its last marked line; a worker that fails gives the end of
    its error, one that takes too long says so."""
    common = load("_common")
    ok = f"import sys; sys.path.insert(0, {str(BENCH)!r}); import _common; _common.report_row({{'status': 'measured', 'x': 1}})"
    row = common.worker_row("pkg", [sys.executable, "-c", ok], timeout=60)
    assert list(row) == ["package", "status", "x", "process_s"] and row["x"] == 1 and row["process_s"] > 0
    bad = common.worker_row("pkg", [sys.executable, "-c", "raise SystemExit('broken here')"], timeout=60)
    assert bad == {"package": "pkg", "status": "failed", "error": "broken here"}
    late = common.worker_row("pkg", [sys.executable, "-c", "import time; time.sleep(30)"], timeout=1)
    assert late["status"] == "failed" and "no result within 1 s" in late["error"]


def _assert_gone(pid: int, message: str, wait_s: float = 10.0) -> None:
    """Fail with ``message`` unless process ``pid`` ends within ``wait_s`` (then it is killed)."""
    import signal
    import time

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    pytest.fail(message)


def test_a_terminated_parent_takes_its_worker_with_it(tmp_path):
    """``timeout`` sends SIGTERM to the parent only: its worker must die with it (on a TPU
    machine an orphaned worker kept the chip and the next program could not open it)."""
    import signal
    import subprocess
    import time

    pid_file = tmp_path / "worker.pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    parent = (f"import sys; sys.path.insert(0, {str(BENCH)!r}); import _common; "
              f"_common.worker_row('pkg', [sys.executable, '-c', {child!r}], timeout=60)")
    proc = subprocess.Popen([sys.executable, "-c", parent])
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    worker = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    _assert_gone(worker, "the worker outlived its parent")


def test_a_process_group_is_killed_whole_at_its_timeout(tmp_path):
    """run_process_group: a script whose own worker sleeps on; at the timeout both go."""
    import subprocess

    common = load("_common")
    pid_file = tmp_path / "grandchild.pid"
    grandchild = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {grandchild!r}])"
    with pytest.raises(subprocess.TimeoutExpired):
        common.run_process_group([sys.executable, "-c", child], timeout=3)
    worker = int(pid_file.read_text())
    _assert_gone(worker, "the script's worker outlived the timeout")
    done = common.run_process_group([sys.executable, "-c", "print('ok')"], timeout=30)
    assert done.returncode == 0 and done.stdout.strip() == "ok"


def test_scripts_keep_their_command_lines():
    """The scripts split into parts still parse the options the suite and the docs pass."""
    args = load("jacobian_sharding").parse_args(["--quick", "--platform", "cpu", "--json", "x.json"])
    assert args.quick and args.platform == "cpu" and args.json == "x.json"
    args = load("accelerator_suite").parse_args(["--quick", "--parts", "scale", "w1", "--json", "x.json"])
    assert args.quick and args.parts == ["scale", "w1"] and args.json == "x.json" and args.scale_lattices == ["2x4"]
