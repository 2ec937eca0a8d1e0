"""benchmarks/accuracy.py's rows trained across windows (one call of the script each) and
carried between machines: the time left to a row, its windows and warm start as its run
folder records them, the Lanczos step after a window, and the archive of the run folders.
"""
from __future__ import annotations

import json
import os
import tarfile
import time

from _accuracy_rows import ESTIMATE_KEYS, host_fields
from quantax_lite.utils.files import atomic_write

# of a row's budget, the --time-limit of its training; the rest is for the final estimate
# (with the full group's 16 images, 65,536 fresh samples took 8 minutes on 4x4 J1-J2)
TRAINING_SHARE = 0.8


def time_limit_of(minutes: float, windows: list[dict], window: float | None = None,
                  warm_start_min: float = 0.0) -> float | None:
    """The training time limit (minutes) of a row's next call: ``TRAINING_SHARE`` of its
    budget ``minutes`` less the training of its earlier ``windows`` and the minutes of its
    warm start (:func:`warm_start_seconds`), at most ``window``, and after a first window at
    most what the budget's wall time leaves once the next window's other time (start,
    compilation, final estimate: the most an earlier window took besides training) is set
    aside; None when nothing is left to train (the budget spent, or the last window ended
    before its time limit: its steps are done)."""
    if windows and not windows[-1]["stopped_at_time_limit"]:
        return None
    limit = TRAINING_SHARE * minutes - warm_start_min - sum(w["training_min"] for w in windows)
    if windows:  # every window's wall time counts against the budget, not only its training
        spent = warm_start_min + sum(w["wall_s"] for w in windows) / 60
        besides_training = max(w["wall_s"] / 60 - w["training_min"] for w in windows)
        limit = min(limit, minutes - spent - besides_training)
    if window is not None:
        limit = min(limit, window)
    return limit if limit > 0 else None


def warm_start_seconds(source: str) -> float | None:
    """The wall time (s) of every window that trained the run folder ``source``: what a row
    started from ``source``'s newest parameters spent before its own first window. None when
    ``source`` kept no windows (its time is not known)."""
    windows = read_windows(source)
    return round(sum(w["wall_s"] for w in windows), 2) if windows else None


# in a warm-started row's run folder: the run it started from and that run's wall time,
# written when the row starts (before its first window), read by every later call
WARM_START = "accuracy_warm_start.json"


def read_warm_start(out: str) -> float | None:
    """The wall time (s) of the run the row in ``out`` started from (:data:`WARM_START`);
    None for a row that has not started from one, or whose start's time is not known."""
    path = os.path.join(out, WARM_START)
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        return json.load(fh).get("wall_s")


WINDOWS = "accuracy_windows.json"


def read_windows(out: str) -> list[dict]:
    """The windows (calls of this script) that trained the row in the run folder ``out``,
    oldest first (``[]`` for a new run): each ``{"wall_s", "training_min",
    "time_limit_min", "stopped_at_time_limit", "iterations", "finished_utc"}`` and the host it
    ran on (:func:`host_fields`; not in windows recorded before hosts were kept), and the
    window's final estimate (``ESTIMATE_KEYS`` of its summary; not in windows recorded
    before estimates were kept)."""
    path = os.path.join(out, WINDOWS)
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        return json.load(fh)


def lanczos_of(out: str, name: str, samples: int | None) -> dict | None:
    """One Lanczos step on the newest state of the run in ``out`` from ``samples`` fresh
    samples (``quantax-lite measure --lanczos``, the dimers left out): its record
    (``observables.json``'s ``"lanczos"``); None without ``samples``."""
    if not samples:
        return None
    from quantax_lite.cli import command as cli

    status = cli.main(["measure", "--out", out, "--lanczos", "--samples", str(int(samples)), "--no-dimers",
                       "--no-progress"])
    if status != 0:  # the window's training is kept (recorded and archived); the call exits 1 at its end
        print(f"accuracy: {name}: quantax-lite measure --lanczos exited with status {status} (see above; its run "
              f"folder is {out}); the window is recorded without a Lanczos step", flush=True)
        return None
    with open(os.path.join(out, "observables.json")) as fh:
        return json.load(fh)["lanczos"]


def record_window(out: str, wall_s: float, time_limit_min: float, lanczos: dict | None = None) -> list[dict]:
    """Append this call's window to ``out``'s windows (written whole, then renamed) and
    return them all. Its training minutes: the time limit when it stopped the run, else the
    call's wall time (the steps ended first); its estimate: ``ESTIMATE_KEYS`` of the run's
    summary, and ``lanczos`` (:func:`lanczos_of`) where one was measured."""
    with open(os.path.join(out, "summary.json")) as fh:
        summary = json.load(fh)
    stopped = bool(summary.get("stopped_at_time_limit"))
    window = {"wall_s": round(wall_s, 2), "training_min": time_limit_min if stopped else wall_s / 60,
              "time_limit_min": time_limit_min, "stopped_at_time_limit": stopped,
              "iterations": summary["iterations"], **{k: summary.get(k) for k in ESTIMATE_KEYS},
              "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **host_fields()}
    if lanczos is not None:
        window["lanczos"] = lanczos
    windows = read_windows(out) + [window]
    with atomic_write(os.path.join(out, WINDOWS)) as fh:
        json.dump(windows, fh, indent=1)
    return windows


def unpack_runs(archive: str, out: str) -> None:
    """The run folders of ``archive`` (:func:`pack_runs`) into ``out``, files writable."""
    os.makedirs(out, exist_ok=True)
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later: no links out, no absolute names
            tar.extractall(out, filter="data")
        else:
            tar.extractall(out)
    for root, _, files in os.walk(out):
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)


def _pack(out: str, archive: str, with_cache: bool, cache_folder: str) -> None:
    with atomic_write(archive, "wb") as fh, tarfile.open(fileobj=fh, mode="w:gz") as tar:
        for name in sorted(os.listdir(out)):
            path = os.path.join(out, name)
            if os.path.isdir(path) and (with_cache or name != cache_folder):
                tar.add(path, arcname=name, filter=lambda i: None if i.name.endswith(".lock") else i)


def pack_runs(out: str, archive: str, with_cache: bool, limit: int, cache_folder: str) -> bool:
    """Every run folder of ``out`` (without its lock file) into the gzipped tar ``archive``,
    written whole, then renamed; with the compilation cache (the folder ``cache_folder``)
    when ``with_cache`` and the archive then stays within ``limit`` bytes. Returns whether
    the cache went in (a caller packing again can leave it out from then on)."""
    has_cache = with_cache and os.path.isdir(os.path.join(out, cache_folder))
    _pack(out, archive, has_cache, cache_folder)
    if has_cache and os.path.getsize(archive) > limit:
        print(f"accuracy: {archive} holds the runs only: with the compilation cache it would be "
              f"{os.path.getsize(archive) / 2**20:.1f} MiB (the next window compiles again)", flush=True)
        _pack(out, archive, False, cache_folder)
        return False
    return has_cache
