"""Progress lines of a benchmark's worker process, echoed by its parent as they come.

A worker run through ``_common.worker_row`` has its output captured and dropped when it
times out; so a worker writes its progress lines to a file (:func:`say`) and the parent
copies the lines appended there to its own stderr while the worker runs
(:func:`echoed_progress`), keeping them for the row of a worker that gave no result.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
import time

_STARTED = time.perf_counter()


def say(path: str | None, label: str, message: str) -> None:
    """One line (seconds since this process started, ``label``, ``message``) appended to
    ``path``, or to stderr without one."""
    line = f"[{time.perf_counter() - _STARTED:7.1f} s] {label}: {message}\n"
    if path:
        with open(path, "a") as fh:
            fh.write(line)
    else:
        sys.stderr.write(line)
        sys.stderr.flush()


@contextlib.contextmanager
def echoed_progress(prefix: str):
    """A fresh progress file's path, whose lines are copied to stderr as they are appended
    until the block ends; yields ``(path, lines)``, ``lines`` the lines copied so far."""
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=".log")
    os.close(fd)
    done, lines, rest = threading.Event(), [], [""]

    def pump(fh, last=False):
        """Echo the whole lines appended since; a line being written waits for its end."""
        text = rest[0] + fh.read()
        *whole, rest[0] = text.split("\n")
        if last and rest[0]:
            whole, rest[0] = whole + [rest[0]], ""
        for line in whole:
            lines.append(line)
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def follow():
        with open(path) as fh:
            while not done.wait(0.5):
                pump(fh)
            pump(fh, last=True)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        yield path, lines
    finally:
        done.set()
        thread.join(timeout=5)
        os.unlink(path)
