"""The run folder: its lock, checkpoint rotation, and a log that survives a torn line."""
import json
import os
import subprocess
import sys

import pytest

from quantax_lite.driver import run_folder as rf


def _records(n, start=1):
    return [{"iteration": i, "energy": -1.0 - i} for i in range(start, start + n)]


def test_a_torn_last_line_is_dropped_and_a_damaged_middle_line_is_an_error(tmp_path):
    path = tmp_path / "log.jsonl"
    for rec in _records(3):
        rf.append_log(path, rec)
    with open(path, "a") as fh:
        fh.write('{"iteration": 4, "ene')
    with pytest.warns(UserWarning, match="dropping a damaged last line"):
        assert [r["iteration"] for r in rf.read_log(path)] == [1, 2, 3]
    with pytest.warns(UserWarning):
        rf.truncate_log(path, 10)  # rewrites the file without the torn line
    rf.append_log(path, {"iteration": 4, "energy": -5.0})
    assert [r["iteration"] for r in rf.read_log(path)] == [1, 2, 3, 4]
    rf.truncate_log(path, 2)
    assert [json.loads(line)["iteration"] for line in open(path)] == [1, 2]
    lines = open(path).read().splitlines()
    path.write_text("\n".join([lines[0], "garbage", lines[1]]) + "\n")
    with pytest.raises(ValueError, match="line 2"):
        rf.read_log(path)
    assert rf.read_log(tmp_path / "absent.jsonl") == []


def test_a_record_with_a_non_finite_number_is_refused(tmp_path):
    with pytest.raises(ValueError):
        rf.append_log(tmp_path / "log.jsonl", {"iteration": 1, "energy": float("nan")})


def test_checkpoints_are_listed_newest_first_and_pruned(tmp_path):
    for it in (3, 12, 7, 100):
        open(rf.checkpoint_path(tmp_path, it), "wb").close()
    (tmp_path / "checkpoint.npz").write_bytes(b"")  # a run made before rotation
    (tmp_path / "checkpoint-00000200.npz.tmp-999").write_bytes(b"")  # half-written by a killed run
    names = [os.path.basename(p) for p in rf.list_checkpoints(tmp_path)]
    assert names == ["checkpoint-00000100.npz", "checkpoint-00000012.npz", "checkpoint-00000007.npz",
                     "checkpoint-00000003.npz", "checkpoint.npz"]
    rf.prune_checkpoints(tmp_path, keep=2)
    rf.remove_temporaries(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-00000012.npz", "checkpoint-00000100.npz"]


def test_the_lock_excludes_a_second_owner_and_dies_with_its_process(tmp_path):
    out = str(tmp_path / "run")
    code = ("import sys, time; from quantax_lite.driver.run_folder import lock_run_folder\n"
            "with lock_run_folder(sys.argv[1]):\n    print('locked', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code, out], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(rf.RunFolderBusy, match=f"pid {proc.pid}"):
            with rf.lock_run_folder(out):
                pass
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    with pytest.warns(UserWarning, match=f"taking over.*pid {proc.pid}"):
        with rf.lock_run_folder(out):
            pass
    with rf.lock_run_folder(out):  # a clean exit leaves nothing to take over
        pass


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path):
    from quantax_lite.driver.run_folder import atomic_write

    path = tmp_path / "summary.json"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_write(path) as fh:
            fh.write("half of the new")
            raise RuntimeError("killed mid-write")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["summary.json"]
    with atomic_write(path, "wb") as fh:
        fh.write(b"new")
    assert path.read_bytes() == b"new" and os.listdir(tmp_path) == ["summary.json"]
