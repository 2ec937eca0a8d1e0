"""Compiled programs kept on disk between runs (JAX's persistent compilation cache).

A run compiles its step, its sampler and its final estimate before it computes anything:
seconds on a CPU, minutes for a large network on a TPU. With the cache on, a run whose
programs an earlier run on the same kind of machine already compiled (the same recipe
resumed or rerun) loads them instead; what it computes is the same to the last bit.

The command turns it on at start-up (:func:`configure`). ``$QUANTAX_LITE_COMPILE_CACHE``
decides: ``0``/``off``/``false``/``no`` turn it off (a cache set up with JAX's own options
too); a path names the folder; ``1``/``on``/``true``/``yes`` or no value at all take the
default folder, ``$XDG_CACHE_HOME/quantax_lite/xla`` (else ``~/.cache/quantax_lite/xla``),
unless JAX's own option ``$JAX_COMPILATION_CACHE_DIR`` was set, which is then left as it
is. Programs are kept in a subfolder per host kind (machine and CPU features: code
compiled for one CPU is never loaded on another that shares the folder, e.g. a home
directory on a cluster). Programs that compile in under ``MIN_COMPILE_S`` are not stored
(``$JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` overrides it). The folder only grows
(JAX bounds it only with the ``filelock`` package, not a dependency here): delete it
whenever you like.
"""
from __future__ import annotations

import hashlib
import os
import platform
import warnings
from collections.abc import Mapping

import jax
from jax.experimental.compilation_cache import compilation_cache as jax_compilation_cache

__all__ = ["ENV", "MIN_COMPILE_S", "cache_folder", "configure", "host_kind"]

ENV = "QUANTAX_LITE_COMPILE_CACHE"
MIN_COMPILE_S = 0.5
_OFF = {"0", "off", "false", "no", "none"}
_ON = {"", "1", "on", "true", "yes"}
_MIN_TIME_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"


def host_kind() -> str:
    """A short name of this host's kind: machine and a hash of its CPU's feature flags
    (``/proc/cpuinfo`` on Linux, else the processor's name), e.g. ``x86_64-3fa2c1d0``."""
    flags = platform.processor()
    try:
        with open("/proc/cpuinfo") as fh:
            flags = next((line for line in fh if line.startswith(("flags", "Features"))), flags)
    except OSError:
        pass
    return f"{platform.machine() or 'unknown'}-{hashlib.sha1(flags.encode()).hexdigest()[:8]}"


def _jax_folder(environ: Mapping[str, str]) -> str | None:
    """The folder the user gave JAX's own option (``$JAX_COMPILATION_CACHE_DIR``), if any: a
    folder this module set earlier in the process is not the user's."""
    return environ.get("JAX_COMPILATION_CACHE_DIR") or None


def cache_folder(environ: Mapping[str, str] | None = None) -> str | None:
    """The folder compiled programs go to (see the module docstring), as an absolute path;
    None where ``$QUANTAX_LITE_COMPILE_CACHE`` turns the cache off."""
    environ = os.environ if environ is None else environ
    value = environ.get(ENV)
    if value is not None and value.strip().lower() in _OFF:
        return None
    if value is not None and value.strip().lower() not in _ON:
        return os.path.join(os.path.abspath(os.path.expanduser(value)), host_kind())
    if value is None and _jax_folder(environ):  # the user's own JAX setting
        return os.path.abspath(os.path.expanduser(_jax_folder(environ)))
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "quantax_lite", "xla", host_kind())


def configure(environ: Mapping[str, str] | None = None) -> str | None:
    """Set up JAX's persistent compilation cache as the environment says (for applications
    at start-up, before the first compilation; the command calls it). Returns the folder,
    or None when the cache is off or its folder cannot be made (a warning says why: a run
    never fails for its cache)."""
    environ = os.environ if environ is None else environ
    folder = cache_folder(environ)
    if folder is None:
        if jax.config.jax_compilation_cache_dir:  # asked to be off: JAX's own cache too
            jax.config.update("jax_enable_compilation_cache", False)
        return None
    if environ.get(ENV) is None and _jax_folder(environ):
        return folder  # JAX's own cache option, set by the user: left as it is
    try:
        os.makedirs(folder, exist_ok=True)
        if not os.access(folder, os.W_OK):
            raise PermissionError(f"{folder} is not writable")
    except OSError as err:
        warnings.warn(f"compilation cache off: {err} (set {ENV} to a writable folder, or to 0)", stacklevel=2)
        return None
    if jax.config.jax_compilation_cache_dir != folder:  # a cache opened at another folder is closed first
        jax_compilation_cache.set_cache_dir(folder)
        jax_compilation_cache.reset_cache()
    jax.config.update("jax_enable_compilation_cache", True)
    if _MIN_TIME_ENV not in os.environ:  # the process's own: JAX read it from there at import
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_S)
    return folder
