"""Files written whole or not at all."""
from __future__ import annotations

import contextlib
import os

__all__ = ["atomic_write"]


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w"):
    """Open ``path.tmp-<pid>`` for writing (``mode`` "w" or "wb"); on leaving the block it
    is flushed to disk and renamed over ``path``, so ``path`` holds either its old or its
    whole new content. An exception in the block removes the temporary file and leaves
    ``path`` untouched."""
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
