"""The run folder: who owns it, which checkpoints it keeps, and its log.

A run folder holds ``log.jsonl`` (one JSON object per step), the last few
checkpoints ``checkpoint-<iteration>.npz`` (each written atomically by
:func:`quantax_lite.driver.checkpoint.save_checkpoint`; their names, listing and pruning are
:mod:`quantax_lite.driver.checkpoint`'s, re-exported here) and, written by the command,
``summary.json`` and ``energy.png``. Only one process may write to it at a
time: :func:`lock_run_folder` takes an exclusive ``flock`` on ``.lock`` in the
folder, which the operating system releases when its process ends, however it
ends, so a killed run never leaves a lock that blocks the next one.

Everything here runs on the writing process only (process 0 of a run).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import re
import shutil
import socket
import warnings
from typing import Iterator

from quantax_lite.driver.checkpoint import (  # the checkpoints' names, listing and pruning, re-exported
    LEGACY_CHECKPOINT, checkpoint_path, list_checkpoints, newest_readable_checkpoint, prune_checkpoints,
)
from quantax_lite.utils.errors import FieldError, as_field_error
from quantax_lite.utils.files import atomic_write

__all__ = [
    "RunFolderBusy",
    "check_not_busy",
    "lock_run_folder",
    "checkpoint_path",
    "list_checkpoints",
    "prune_checkpoints",
    "remove_temporaries",
    "read_log",
    "truncate_log",
    "append_log",
    "atomic_write",
    "RUN_FILES",
    "clear_run",
    "holds_run",
    "check_writable",
    "prepare_run_folder",
]

LOCK_NAME = ".lock"
LOG_NAME = "log.jsonl"
# Files that make a folder hold a run (``checkpoint-*.npz`` too): what train writes there
# (log, summary, energy plot) and what measure or train --measure adds (the observables
# and their plots); a restart deletes them all (:func:`clear_run`).
RUN_FILES = (LOG_NAME, LEGACY_CHECKPOINT, "summary.json", "energy.png", "observables.json", "structure_factor.png",
             "correlations.png")
# flock errors of a file system that has no flock (some NFS, Lustre or GPFS mounts): the
# run goes on without the folder lock, with a warning
_NO_FLOCK = frozenset(getattr(errno, name) for name in ("ENOLCK", "EOPNOTSUPP", "ENOTSUP", "ENOSYS", "EINVAL")
                      if hasattr(errno, name))


class RunFolderBusy(RuntimeError):
    """Another live process holds the run folder's lock."""


def check_not_busy(out_dir: str | os.PathLike) -> None:
    """:class:`RunFolderBusy` naming the holder when a live process holds ``out_dir``'s lock;
    reads only (no folder or lock file is created, nothing is written)."""
    path = os.path.join(os.fspath(out_dir), LOCK_NAME)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # no lock file: nobody holds the folder
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno in (errno.EWOULDBLOCK, errno.EACCES):
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
                raise RunFolderBusy(f"{os.fspath(out_dir)} is in use by another run ({holder}); wait for it to "
                                    "finish or choose another output folder.") from None
    finally:
        os.close(fd)  # releases a lock taken here


@contextlib.contextmanager
def lock_run_folder(out_dir: str | os.PathLike) -> Iterator[None]:
    """Hold the exclusive lock of ``out_dir`` (created if missing) for the ``with`` block.

    Raises :class:`RunFolderBusy` naming the holder (pid and host) when another live
    process holds it. A lock file left by a killed process holds no lock: it is taken
    over, with a warning naming the old holder. On a file system without ``flock``
    (ENOLCK, EOPNOTSUPP, ENOSYS, EINVAL) the block runs without the lock, after a
    one-line warning; other errors of ``flock`` are raised.
    """
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        unsupported = None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno in _NO_FLOCK:
                unsupported = err.strerror or str(err)
            elif err.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            else:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
                raise RunFolderBusy(
                    f"{out_dir} is in use by another run ({holder}); wait for it to finish or "
                    "choose another output folder."
                ) from None
        if unsupported is not None:
            warnings.warn(f"{out_dir}: this file system does not support flock ({unsupported}), so the run goes "
                          "on without the folder lock: make sure no other run uses this folder.", stacklevel=3)
            yield
            return
        old = os.pread(fd, 200, 0).decode(errors="replace").strip()
        if old:
            warnings.warn(f"{out_dir}: taking over the lock of a run that ended without "
                          f"releasing it ({old}).", stacklevel=3)
        me = f"pid {os.getpid()} on {socket.gethostname()}".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, me, 0)
        os.fsync(fd)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # a clean exit leaves an empty lock file: nothing to take over
    finally:
        os.close(fd)  # releases the flock


# --------------------------------------------------------------------------- #
# temporaries                                                                  #
# --------------------------------------------------------------------------- #


def remove_temporaries(out_dir: str | os.PathLike) -> None:
    """Delete half-written temporary files (``*.tmp-<pid>``) left by a killed run; call it
    while holding the folder's lock (then no live process is writing one)."""
    out_dir = os.fspath(out_dir)
    for name in os.listdir(out_dir):
        if re.fullmatch(r".+\.tmp-\d+", name):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(out_dir, name))


# --------------------------------------------------------------------------- #
# the log                                                                      #
# --------------------------------------------------------------------------- #


def read_log(path: str | os.PathLike) -> list[dict]:
    """The records of ``log.jsonl``; [] when it does not exist.

    A torn last line (a run killed while writing it) is dropped with a warning; a
    damaged line before the last raises ``ValueError`` naming the file and line, and so
    does a record holding a number that is not finite (``NaN``, ``Infinity``, ``1e999``:
    the log is written as strict JSON, so that is a hand edit), wherever it is.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        return []
    with open(path, "rb") as fh:
        lines = fh.read().decode(errors="replace").splitlines()
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line, parse_constant=_non_finite)
            if not isinstance(rec, dict) or "iteration" not in rec:
                raise ValueError("not a log record")
            _check_finite(rec)
        except _NonFinite:
            raise ValueError(f"{path}: line {i + 1} holds a non-finite number (the log is strict JSON): "
                             f"{line[:60]!r}; delete that line (or the run's later lines) to use the log.") from None
        except ValueError:
            if all(not rest.strip() for rest in lines[i + 1 :]):
                warnings.warn(f"{path}: dropping a damaged last line ({line[:60]!r}).", stacklevel=2)
                break
            raise ValueError(f"{path}: line {i + 1} is not a log record: {line[:60]!r}") from None
        records.append(rec)
    return records


class _NonFinite(ValueError):
    """A log record with NaN or infinity."""


def _non_finite(token):
    raise _NonFinite(token)


def _check_finite(value) -> None:
    """Raise :class:`_NonFinite` for a float in ``value`` (a parsed JSON value) that is not finite."""
    if isinstance(value, float) and not math.isfinite(value):
        raise _NonFinite(value)
    if isinstance(value, dict):
        value = value.values()
    if isinstance(value, (list, type({}.values()))):
        for v in value:
            _check_finite(v)


def _write_lines(path: str, records: list[dict]) -> None:
    lines = [json.dumps(r, allow_nan=False) + "\n" for r in records]
    with atomic_write(path) as fh:
        fh.writelines(lines)


def truncate_log(path: str | os.PathLike, iteration: int) -> None:
    """Keep only the records of steps up to ``iteration`` (and drop a torn last line)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        return
    with open(path, "rb") as fh:
        raw = fh.read()
    n_lines = sum(1 for ln in raw.splitlines() if ln.strip())
    keep = [r for r in read_log(path) if r["iteration"] <= iteration]
    if len(keep) != n_lines or (raw and not raw.endswith(b"\n")):
        _write_lines(path, keep)


def append_log(path: str | os.PathLike, record: dict) -> None:
    """Append one record as a line of strict JSON (non-finite numbers are refused)."""
    with open(os.fspath(path), "a") as fh:
        fh.write(json.dumps(record, allow_nan=False) + "\n")


def check_writable(out_dir: str | os.PathLike) -> None:
    """Create ``out_dir`` if needed and check that this process can write there
    (:class:`~quantax_lite.utils.errors.FieldError` of ``out_dir`` saying why not)."""
    out_dir = os.fspath(out_dir)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise FieldError("out_dir", f"out_dir: {out_dir} exists and is not a folder.")
    try:
        os.makedirs(out_dir, exist_ok=True)
        probe = os.path.join(out_dir, f".write-test-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as err:
        raise FieldError("out_dir", f"out_dir: {out_dir}: cannot write there ({err.strerror or err}).") from None


def holds_run(out_dir: str | os.PathLike) -> bool:
    """Whether ``out_dir`` holds files of a run (log, checkpoints, summary or plot)."""
    return bool(list_checkpoints(out_dir)) or any(os.path.exists(os.path.join(out_dir, f)) for f in RUN_FILES)


def clear_run(out_dir: str | os.PathLike) -> None:
    """Delete a run's files from its folder (log, checkpoints, summary, observables, their
    plots: :data:`RUN_FILES`, and half-written temporaries); other files stay."""
    out_dir = os.fspath(out_dir)
    remove_temporaries(out_dir)
    for path in list_checkpoints(out_dir):
        os.remove(path)
    for name in RUN_FILES:
        path = os.path.join(out_dir, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)


def prepare_run_folder(out_dir, *, resume: bool, restart: bool, config: dict, earlier: dict | None = None) -> None:
    """Check that ``out_dir`` suits the run about to start (the caller holds its lock).

    resume: the folder must hold a readable checkpoint whose ``config`` metadata equals
    ``config`` on every key both have (``earlier``: values of keys that older runs did not
    record). restart: delete the run there. Neither: the folder must not hold a run.
    Raises :class:`~quantax_lite.utils.errors.FieldError` (a ``ValueError``) of the argument at
    fault, ``out_dir`` or ``resume`` (its message names the differing keys of ``config`` in
    backquotes), or of the file of a damaged log.
    """
    if restart:
        return clear_run(out_dir)
    if not resume:
        if holds_run(out_dir):
            raise FieldError("out_dir", f"out_dir: {out_dir} already holds a run; pass `resume` to continue it, `restart` to "
                             "start it again, or choose another `out_dir`.")
        return
    if not list_checkpoints(out_dir):
        stopped = " (the run there stopped before its first checkpoint)" if holds_run(out_dir) else ""
        raise FieldError("resume", f"resume: {out_dir} holds no checkpoint to resume from{stopped}; pass `restart` to "
                         "start it again.")
    found = newest_readable_checkpoint(out_dir)
    if found is None:
        raise FieldError("resume", f"resume: every checkpoint in {out_dir} is damaged; pass `restart` to start again.")
    old = {**(earlier or {}), **found[1].get("config", {})}
    changed = [f"`{k}` {v} (was {old[k]})" for k, v in config.items() if k in old and old[k] != v]
    if changed:
        raise FieldError("resume", "resume: these options differ from the run in the folder: " + ", ".join(changed))
    try:  # a damaged log: refused before anything is written
        read_log(os.path.join(os.fspath(out_dir), LOG_NAME))
    except ValueError as err:
        raise as_field_error(err, "out_dir") from None
