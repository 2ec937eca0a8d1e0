"""Choosing among equivalent implementations by timing each of them once.

:func:`pick` is given a few *candidates* that compute the same thing (convolution forms,
chunk sizes, ...) and returns the name of the fastest on this machine. Each candidate is a
zero-argument *builder* that prepares the work (typically ``jax.jit(f).lower(*args)
.compile()`` on concrete inputs it makes itself) and returns a zero-argument *runner*
that executes it once and blocks until the result is ready (``jax.block_until_ready``).

What is timed: every builder is called once (compilation, not timed), every runner once
(a warm-up, not timed), then ``repeats`` rounds that run each candidate in turn (turns
interleaved, so a drifting clock rate favours no one); a candidate's time is the median of
its rounds, and the smallest median wins. A candidate whose builder or runner raises is
left out; when all of them raise, :func:`pick` raises ``RuntimeError`` naming ``kind``.

Where the results live: in memory for the process, and in a JSON file per machine in
``cache_dir`` (else ``$QUANTAX_LITE_AUTOTUNE_DIR``, else ``~/.cache/quantax_lite/autotune``).
The file is named after, and holds, the :func:`environment` it was measured in: the host,
its architecture and CPU count, the jax backend and device kind, the jax version and the
library version. Any change there starts a new file, so a choice is never reused on other
hardware or software. Files are replaced whole (a temporary file renamed over the old
one), so a reader sees the old or the new content, never a part; a file that cannot be
read or parsed is treated as empty and rewritten at the next measurement. A folder that
cannot be written only costs the timing again in the next process.

Turning it off: ``QUANTAX_LITE_AUTOTUNE=0`` in the environment (or ``enabled=False``)
makes :func:`pick` return its ``default`` without building or timing anything.
Reproducible benchmarks set it off, so that the implementations they measure do not
depend on what an earlier timing happened to find (and they time nothing extra).

Several processes (``jax.process_count() > 1``): :func:`pick` is then a collective. Every
process must call it with the same arguments in the same order; all of them use process
0's cached choice when it has one, else all of them time the candidates (so programs that
span processes run everywhere alike) and all use process 0's winner. The setting
``QUANTAX_LITE_AUTOTUNE`` must be the same in every process.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from quantax_lite.utils.validate import positive_int
from quantax_lite.utils.threads import usable_cores

__all__ = ["pick", "environment", "cache_file", "forget"]

_ENABLE_VAR = "QUANTAX_LITE_AUTOTUNE"
_DIR_VAR = "QUANTAX_LITE_AUTOTUNE_DIR"
_FORMAT = 1
_OFF = ("0", "false", "no", "off")
_ON = ("", "1", "true", "yes", "on")


class _Memo:
    """The choices made in this process, by (cache file, entry): memoisation only."""

    def __init__(self):
        self.choices: dict[tuple[str, str], str] = {}


_MEMO = _Memo()


def forget() -> None:
    """Drop the choices remembered in this process (the files on disk stay)."""
    _MEMO.choices.clear()


def _library_version() -> str:
    try:
        return importlib.metadata.version("quantax_lite")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def environment() -> dict:
    """What a timing depends on besides its own key: host, architecture, CPU count, jax
    backend, device kind, jax version and library version (the cache file's identity)."""
    return {
        "host": platform.node(),
        "machine": platform.machine(),
        "cpu_count": usable_cores(),
        "backend": jax.default_backend(),
        "device_kind": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "quantax_lite": _library_version(),
    }


def _cache_folder(cache_dir) -> str:
    if cache_dir is None:
        cache_dir = os.environ.get(_DIR_VAR) or os.path.join("~", ".cache", "quantax_lite", "autotune")
    elif not isinstance(cache_dir, (str, os.PathLike)):
        raise TypeError(f"cache_dir: expected a path or None, got {cache_dir!r}")
    return os.path.abspath(os.path.expanduser(os.fspath(cache_dir)))


def _file_for(folder: str, env: dict) -> str:
    digest = hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()[:16]
    label = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{env['backend']}-{env['host'] or 'host'}")[:60]
    return os.path.join(folder, f"{label}-{digest}.json")


def cache_file(cache_dir=None) -> str:
    """The path of this machine's cache file in ``cache_dir`` (see the module docstring);
    it need not exist yet."""
    return _file_for(_cache_folder(cache_dir), environment())


def _is_enabled(enabled) -> bool:
    if enabled is not None:
        if not isinstance(enabled, (bool, np.bool_)):
            raise TypeError(f"enabled: expected a bool or None, got {enabled!r}")
        return bool(enabled)
    value = os.environ.get(_ENABLE_VAR, "").strip().lower()
    if value in _OFF:
        return False
    if value in _ON:
        return True
    raise ValueError(f"{_ENABLE_VAR}: expected 0 or 1 (or off / on), got {os.environ[_ENABLE_VAR]!r}")


def _check_key(key, name: str = "key"):
    if isinstance(key, (tuple, list)):
        for i, item in enumerate(key):
            _check_key(item, f"{name}[{i}]")
    elif key is not None and not isinstance(key, (str, bool, int, float)):
        raise TypeError(f"{name}: expected str, int, float, bool, None or a tuple of them, got {key!r}")


def _read(path: str, env: dict) -> dict:
    """The choices in ``path``; empty when it is missing, unreadable, corrupt or foreign."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    if (not isinstance(data, dict) or data.get("format") != _FORMAT or data.get("environment") != env
            or not isinstance(data.get("choices"), dict)):
        return {}
    return data["choices"]


def _write(path: str, env: dict, entry: str, record: dict) -> None:
    """Add ``record`` under ``entry`` to ``path``, replacing the file whole; failures to
    write are ignored (the choice is still remembered in memory)."""
    folder = os.path.dirname(path)
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        choices = dict(_read(path, env))  # merge with what other processes wrote meanwhile
        choices[entry] = record
        text = json.dumps({"format": _FORMAT, "environment": env, "choices": choices},
                          indent=1, sort_keys=True, allow_nan=False)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".autotune-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except (OSError, ValueError):
        pass
    finally:
        if tmp is not None:
            try:
                os.remove(tmp)
            except OSError:
                pass


def _time(kind: str, candidates: Mapping[str, Callable], repeats: int) -> tuple[str, dict]:
    """Build, warm up and time every candidate; the fastest name and every median."""
    runners, errors = {}, {}
    for name, builder in candidates.items():
        try:
            runner = builder()
            if not callable(runner):
                raise TypeError(f"the builder returned {type(runner).__name__}, not a callable")
            runner()  # warm-up
            runners[name] = runner
        except Exception as err:  # noqa: BLE001 - a failing candidate is only left out
            errors[name] = err
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(repeats):
        for name in list(times):
            try:
                start = time.perf_counter()
                runners[name]()
                times[name].append(time.perf_counter() - start)
            except Exception as err:  # noqa: BLE001
                errors[name] = err
                del times[name]
    if not times:
        detail = "; ".join(f"{name}: {type(err).__name__}: {err}" for name, err in errors.items())
        raise RuntimeError(f"autotune {kind!r}: every candidate failed ({detail})")
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    return min(medians, key=medians.__getitem__), medians


def _process_zero(index: int) -> int:
    from jax.experimental import multihost_utils

    return int(multihost_utils.broadcast_one_to_all(np.int32(index)))


def pick(kind: str, key: tuple, candidates: Mapping[str, Callable[[], Callable[[], Any]]], *,
         default: str, enabled: bool | None = None, cache_dir=None, repeats: int = 3) -> str:
    """The name of the fastest of ``candidates`` for ``kind`` and ``key`` on this machine.

    ``kind``: what is chosen (e.g. ``"conv_form"``). ``key``: a tuple of str, int, float,
    bool or None (nested tuples allowed) that fixes the problem (shape, dtype name, ...).
    ``candidates``: name -> builder; a builder compiles and returns a runner that
    executes once and blocks until done (see the module docstring for what is timed).
    ``default``: one of the names, returned without timing when autotuning is off
    (``enabled=False``, or ``enabled=None`` and ``QUANTAX_LITE_AUTOTUNE=0``).
    ``cache_dir``: the cache folder (default ``$QUANTAX_LITE_AUTOTUNE_DIR``, else
    ``~/.cache/quantax_lite/autotune``). ``repeats``: timed runs per candidate.

    A choice found in memory or in the cache file is returned without building anything;
    so is the only candidate. Raises ``RuntimeError`` naming ``kind`` when every
    candidate fails; ``TypeError`` / ``ValueError`` naming the argument for bad arguments.
    """
    if not isinstance(kind, str):
        raise TypeError(f"kind: expected a str, got {kind!r}")
    if not kind:
        raise ValueError(f"kind: expected a non-empty str, got {kind!r}")
    if not isinstance(key, tuple):
        raise TypeError(f"key: expected a tuple, got {key!r}")
    _check_key(key)
    if not isinstance(candidates, Mapping):
        raise TypeError(f"candidates: expected a mapping of names to builders, got {candidates!r}")
    if not candidates:
        raise ValueError("candidates: expected at least one candidate, got none")
    for name, builder in candidates.items():
        if not isinstance(name, str):
            raise TypeError(f"candidates: expected str names, got {name!r}")
        if not callable(builder):
            raise TypeError(f"candidates[{name!r}]: expected a callable builder, got {builder!r}")
    if not isinstance(default, str) or default not in candidates:
        raise ValueError(f"default: expected one of {list(candidates)}, got {default!r}")
    repeats = positive_int(repeats, "repeats")
    folder = _cache_folder(cache_dir)
    if not _is_enabled(enabled):
        return default
    names = list(candidates)
    multi = jax.process_count() > 1
    if len(names) == 1:
        return names[0]

    env = environment()
    path = _file_for(folder, env)
    entry = json.dumps([kind, key], separators=(",", ":"))
    memo_key = (path, entry)
    found = _MEMO.choices.get(memo_key)
    if found not in candidates:
        record = _read(path, env).get(entry)
        found = record.get("choice") if isinstance(record, dict) else None
        if found not in candidates:
            found = None
    if multi:
        index = _process_zero(names.index(found) if found is not None else -1)
        found = names[index] if index >= 0 else None
    if found is not None:
        _MEMO.choices[memo_key] = found
        return found

    best, medians = _time(kind, candidates, repeats)
    if multi:
        best = names[_process_zero(names.index(best))]
    _MEMO.choices[memo_key] = best
    _write(path, env, entry, {"choice": best, "median_seconds": medians, "repeats": repeats,
                              "timed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return best
