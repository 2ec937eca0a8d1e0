"""Compiled programs kept on disk between runs (JAX's persistent compilation cache).

A run compiles its step, its sampler and its final estimate before it computes anything:
seconds on a CPU, minutes for a large network on a TPU. With the cache on, a run whose
programs an earlier run already compiled (the same recipe resumed, rerun, or trained in
another window) loads them instead; what it computes is the same to the last bit.

The command turns it on at start-up (:func:`configure`), in the folder named by
``$QUANTAX_LITE_COMPILE_CACHE`` (``0``, ``off`` or an empty value: no cache), else in the
folder JAX was already given (``$JAX_COMPILATION_CACHE_DIR``), else
``$XDG_CACHE_HOME/quantax_lite/xla``, else ``~/.cache/quantax_lite/xla``. Programs that
compile in under ``MIN_COMPILE_S`` are not stored. The folder only grows (JAX bounds it
only with the ``filelock`` package, not a dependency here): delete it whenever you like.
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Mapping

import jax
from jax.experimental.compilation_cache import compilation_cache as jax_compilation_cache

__all__ = ["ENV", "MIN_COMPILE_S", "cache_folder", "configure"]

ENV = "QUANTAX_LITE_COMPILE_CACHE"
MIN_COMPILE_S = 0.5
_OFF = {"", "0", "off", "none", "false", "no"}


def _jax_folder() -> str | None:
    """The folder JAX's own option names (``$JAX_COMPILATION_CACHE_DIR``), if any."""
    return jax.config.jax_compilation_cache_dir or None


def cache_folder(environ: Mapping[str, str] | None = None) -> str | None:
    """The cache folder the environment names (see the module docstring), as an absolute
    path; None where ``$QUANTAX_LITE_COMPILE_CACHE`` turns the cache off."""
    environ = os.environ if environ is None else environ
    value = environ.get(ENV)
    if value is not None:
        if value.strip().lower() in _OFF:
            return None
        return os.path.abspath(os.path.expanduser(value))
    if _jax_folder():  # the user's own setting
        return os.path.abspath(os.path.expanduser(_jax_folder()))
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.abspath(os.path.join(base, "quantax_lite", "xla"))


def configure(environ: Mapping[str, str] | None = None) -> str | None:
    """Point JAX's persistent compilation cache at :func:`cache_folder` (for applications at
    start-up, before the first compilation; the command calls it). Returns the folder, or
    None when the cache is off or its folder cannot be made (a warning says why: a run never
    fails for its cache)."""
    environ = os.environ if environ is None else environ
    folder = cache_folder(environ)
    if folder is None:
        return None
    try:
        os.makedirs(folder, exist_ok=True)
        if not os.access(folder, os.W_OK):
            raise PermissionError(f"{folder} is not writable")
    except OSError as err:
        warnings.warn(f"compilation cache off: {err} (set {ENV} to a writable folder, or to 0)", stacklevel=2)
        return None
    if ENV not in environ and _jax_folder():
        return folder  # JAX's own cache option, set by the user: left as it is
    if _jax_folder() != folder:  # a cache opened at another folder is closed first
        jax_compilation_cache.set_cache_dir(folder)
        jax_compilation_cache.reset_cache()
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_S)
    return folder
