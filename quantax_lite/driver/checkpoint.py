"""Checkpoints: a run's whole state in one ``.npz`` file, and the checkpoints of a folder.

A checkpoint holds every array leaf of the state (parameters, optimizer, sampler and
preconditioner states, iteration) under its pytree key path, e.g.
``state.params['params']['conv_0']['kernel']`` (``"state"`` followed by
``jax.tree_util.keystr`` of the leaf's path), a ``checkpoint_format`` entry (2) and a
``metadata`` entry (a JSON dict). Loading matches the leaves of a template state (a
freshly initialized state of the same run) by path, so a refactored model whose
parameters were renamed is refused, naming the paths, instead of loading equal-shaped
arrays into the wrong places. Checkpoints of the first format (``leaf_00000``,
``leaf_00001``, ... in the template's flattening order, no ``checkpoint_format``) still
load, by position, as they did.

A run folder keeps its last few checkpoints as ``checkpoint-<iteration>.npz``
(:func:`checkpoint_path`, :func:`list_checkpoints`, :func:`prune_checkpoints`); the rest
of the folder (lock, log) is :mod:`quantax_lite.driver.run_folder`. One part of a state (the
parameters a warm start takes) loads from :func:`read_latest_checkpoint`'s arrays with
:func:`load_checkpoint_part`. The template is any pytree
shaped like the state (a :class:`quantax_lite.driver.vmc.VMCState` for the driver's runs);
this module does not depend on the driver.
"""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import warnings
import zipfile
import zlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from quantax_lite.utils.files import atomic_write

__all__ = [
    "save_checkpoint",
    "load_checkpoint",
    "read_checkpoint_metadata",
    "newest_readable_checkpoint",
    "checkpoint_step",
    "load_latest_checkpoint",
    "read_latest_checkpoint",
    "load_checkpoint_part",
    "checkpoint_path",
    "list_checkpoints",
    "prune_checkpoints",
    "LEGACY_CHECKPOINT",
    "FORMAT",
]

FORMAT = 2  # leaves keyed by path; 1 (no ``checkpoint_format`` entry): leaves by position
_FORMAT_KEY = "checkpoint_format"
_METADATA_KEY = "metadata"
_PREFIX = "state"  # every leaf's entry is "state" + keystr(path)
_POSITIONAL = re.compile(r"leaf_\d{5}")

_CKPT = re.compile(r"checkpoint-(\d+)\.npz")
LEGACY_CHECKPOINT = "checkpoint.npz"  # the single checkpoint of runs made before rotation

# What reading a damaged checkpoint raises: a truncated or overwritten zip archive, or
# another file in its place (np.load then tries .npy / pickle and raises ValueError).
_DAMAGED = (
    zipfile.BadZipFile, zlib.error, EOFError, OSError, KeyError, ValueError, TypeError, AttributeError,
    pickle.UnpicklingError,
)


# --------------------------------------------------------------------------- #
# one file                                                                     #
# --------------------------------------------------------------------------- #


def _gather_leaves(leaves: list) -> list[np.ndarray]:
    """Every leaf as a full numpy array on every process (collective in multi-process runs)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils  # only multi-process runs need it

        return [np.asarray(multihost_utils.process_allgather(x, tiled=True)) for x in leaves]
    return [np.asarray(jax.device_get(x)) for x in leaves]


def _is_key(x) -> bool:
    return jnp.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key)


def _key_data(tree):
    """Typed PRNG keys as raw uint32 data, so they can be written to disk."""
    return jax.tree_util.tree_map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def _leaf_paths(tree, prefix: str = _PREFIX) -> tuple[list[str], list, Any]:
    """(entry names, leaves, treedef) of ``tree``: ``prefix + keystr(path)`` per leaf
    (``"state" + keystr(path)`` for a whole state)."""
    with_path, treedef = jax.tree_util.tree_flatten_with_path(tree)
    names = [prefix + jax.tree_util.keystr(kp) for kp, _ in with_path]
    return names, [x for _, x in with_path], treedef


def save_checkpoint(path: str | os.PathLike, state: Any, metadata: dict | None = None) -> None:
    """Write ``state`` to ``path`` (an .npz file) atomically: write a temporary file, then rename.

    Each leaf is stored under its pytree key path (see the module docstring). In a
    multi-process run every process must call this (the arrays are gathered); only
    process 0 writes. A run killed at any moment leaves either the old or the new
    checkpoint, never a broken one.
    """
    names, leaves, _ = _leaf_paths(_key_data(state))
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"save_checkpoint: `state` has leaves with the same path {twice[:3]}; "
                         "give its nodes distinct keys.")
    leaves = _gather_leaves(leaves)
    if jax.process_index() != 0:
        return
    arrays = dict(zip(names, leaves))
    arrays[_FORMAT_KEY] = np.asarray(FORMAT, np.int64)
    arrays[_METADATA_KEY] = np.frombuffer(json.dumps(metadata or {}).encode(), dtype=np.uint8)
    with atomic_write(os.fspath(path), "wb") as fh:
        np.savez(fh, **arrays)


def _metadata(data) -> dict:
    return json.loads(bytes(data[_METADATA_KEY]).decode()) if _METADATA_KEY in data.files else {}


def read_checkpoint_metadata(path: str | os.PathLike) -> dict:
    """The metadata dict of a checkpoint, without reading its arrays."""
    with open(os.fspath(path), "rb") as fh, np.load(fh) as data:
        return _metadata(data)


def _read_checkpoint(path) -> tuple[dict[str, np.ndarray] | list[np.ndarray], dict]:
    """The arrays and metadata of a checkpoint file (raises one of ``_DAMAGED`` if damaged).

    The arrays are a dict by path (format 2) or a list in flattening order (format 1)."""
    with open(os.fspath(path), "rb") as fh, np.load(fh) as data:
        metadata = _metadata(data)
        if _FORMAT_KEY not in data.files:  # format 1: leaf_00000, leaf_00001, ...
            names = sorted(k for k in data.files if _POSITIONAL.fullmatch(k))
            return [data[k] for k in names], metadata
        version = int(data[_FORMAT_KEY])
        if version != FORMAT:
            raise ValueError(f"load_checkpoint: {path} has checkpoint format {version}; this version of "
                             f"quantax_lite reads formats 1 and {FORMAT}.")
        loaded = {k: data[k] for k in data.files if k not in (_FORMAT_KEY, _METADATA_KEY)}
    return loaded, metadata


def _listing(names: list[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _matched(path, loaded, names: list[str]) -> list[tuple[str, np.ndarray]]:
    """(name, array) per template leaf: by path (format 2) or by position (format 1)."""
    if isinstance(loaded, list):
        if len(loaded) != len(names):
            raise ValueError(
                f"load_checkpoint: {path} holds {len(loaded)} arrays, but this run's state has "
                f"{len(names)}: it was written by a different model, sampler or optimizer."
            )
        return [(f"array {i} ({name})", x) for i, (name, x) in enumerate(zip(names, loaded))]
    missing = [n for n in names if n not in loaded]
    wanted = set(names)
    unexpected = sorted(n for n in loaded if n not in wanted)
    if missing or unexpected:
        parts = ([f"missing from the file: {_listing(missing)}"] if missing else []) + (
            [f"in the file but not in this run's state: {_listing(unexpected)}"] if unexpected else [])
        raise ValueError(
            f"load_checkpoint: {path} was written by a different model, sampler or optimizer (the "
            f"parameter paths differ): {'; '.join(parts)}."
        )
    return [(name, loaded[name]) for name in names]


def _into_template(path, loaded, template: Any, prefix: str = _PREFIX) -> Any:
    """Arrays read from ``path`` as a state shaped, typed and sharded like ``template``
    (``prefix``: the entry names' start, that of the part of the state ``template`` is)."""
    names, leaves, treedef = _leaf_paths(template, prefix)
    out = []
    for t, (name, x) in zip(leaves, _matched(path, loaded, names)):
        is_key = _is_key(t)
        want = jax.random.key_data(t) if is_key else t
        if x.shape != want.shape or x.dtype != want.dtype:
            raise ValueError(
                f"load_checkpoint: {name} of {path} has shape {x.shape} and dtype {x.dtype}, "
                f"expected {want.shape} {want.dtype}: a different run's checkpoint."
            )
        if jax.process_count() > 1:
            arr = jax.make_array_from_callback(x.shape, t.sharding, lambda idx, x=x: x[idx])
        else:
            arr = jax.device_put(x, t.sharding)
        out.append(jax.random.wrap_key_data(arr, impl=jax.random.key_impl(t)) if is_key else arr)
    return jax.tree_util.tree_unflatten(treedef, out)


def load_checkpoint(path: str | os.PathLike, template: Any) -> tuple[Any, dict]:
    """Read a checkpoint written by :func:`save_checkpoint` into the structure of ``template``.

    ``template`` is a freshly initialized state of the same run (same model, sampler and
    optimizer): it gives the pytree structure, dtypes and shardings; the file's leaves
    are matched to it by path (by position for a checkpoint of the first format).
    Returns the state and the metadata dict. A damaged file raises what reading it
    raises (e.g. ``zipfile.BadZipFile``); a checkpoint of another run, ``ValueError``
    naming the paths that differ or the leaf whose shape or dtype differs.
    """
    loaded, metadata = _read_checkpoint(path)
    return _into_template(path, loaded, template), metadata


# --------------------------------------------------------------------------- #
# the checkpoints of a run folder                                              #
# --------------------------------------------------------------------------- #


def checkpoint_path(out_dir: str | os.PathLike, iteration: int) -> str:
    """``out_dir/checkpoint-<iteration, 8 digits>.npz``."""
    return os.path.join(os.fspath(out_dir), f"checkpoint-{int(iteration):08d}.npz")


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """The step a numbered checkpoint's file name carries (:func:`checkpoint_path`); None for
    another name (a legacy ``checkpoint.npz``)."""
    m = _CKPT.fullmatch(os.path.basename(os.fspath(path)))
    return int(m.group(1)) if m else None


def list_checkpoints(out_dir: str | os.PathLike) -> list[str]:
    """The folder's checkpoints, newest first (a legacy ``checkpoint.npz`` last)."""
    out_dir = os.fspath(out_dir)
    if not os.path.isdir(out_dir):
        return []
    found = [(checkpoint_step(name), os.path.join(out_dir, name)) for name in os.listdir(out_dir)]
    paths = [p for step, p in sorted((f for f in found if f[0] is not None), reverse=True)]
    legacy = os.path.join(out_dir, LEGACY_CHECKPOINT)
    if os.path.exists(legacy):
        paths.append(legacy)
    return paths


def prune_checkpoints(out_dir: str | os.PathLike, keep: int) -> None:
    """Delete all but the newest ``keep`` numbered checkpoints (and a legacy one once
    a numbered one exists)."""
    paths = list_checkpoints(out_dir)
    numbered = [p for p in paths if checkpoint_step(p) is not None]
    doomed = numbered[keep:]
    if numbered and len(paths) > len(numbered):
        doomed.append(paths[-1])
    for p in doomed:
        with contextlib.suppress(FileNotFoundError):
            os.remove(p)


def _warn_damaged(path, err) -> None:
    warnings.warn(f"{path} is damaged ({type(err).__name__}: {err}); trying an older checkpoint.", stacklevel=3)


def newest_readable_checkpoint(out_dir: str | os.PathLike) -> tuple[str, dict] | None:
    """The newest checkpoint of ``out_dir`` whose metadata reads, and that metadata.

    Damaged newer ones are skipped with a warning; None when there is none.
    """
    for path in list_checkpoints(out_dir):
        try:
            return path, read_checkpoint_metadata(path)
        except _DAMAGED as err:
            _warn_damaged(path, err)
    return None


def read_latest_checkpoint(out_dir: str | os.PathLike) -> tuple[dict[str, np.ndarray] | list[np.ndarray], dict, str]:
    """The arrays, metadata and path of the newest checkpoint of ``out_dir`` that reads,
    without a template: the arrays by entry name (``"state" + keystr(path)``, e.g.
    ``state.params['params']['conv_0']['kernel']``), or a list in flattening order for a
    checkpoint of the first format. A damaged checkpoint is skipped with a warning;
    ``FileNotFoundError`` when the folder holds no readable checkpoint."""
    tried = list_checkpoints(out_dir)
    for path in tried:
        try:
            loaded, meta = _read_checkpoint(path)
        except _DAMAGED as err:
            _warn_damaged(path, err)
            continue
        return loaded, meta, path
    what = "no checkpoint" if not tried else f"no readable checkpoint ({len(tried)} damaged)"
    raise FileNotFoundError(f"{out_dir} holds {what}.")


def load_latest_checkpoint(out_dir: str | os.PathLike, template: Any) -> tuple[Any, dict, str]:
    """The newest checkpoint of ``out_dir`` that reads, into the structure of ``template``.

    A damaged checkpoint (truncated, overwritten) is skipped with a warning and the
    previous one is used. Returns (state, metadata, path). Raises ``FileNotFoundError``
    when the folder holds no readable checkpoint.
    """
    loaded, meta, path = read_latest_checkpoint(out_dir)
    return _into_template(path, loaded, template), meta, path


def load_checkpoint_part(path: str | os.PathLike, loaded: dict[str, np.ndarray], template: Any, part: str) -> Any:
    """One part of a checkpoint's state, e.g. ``part=".params"`` (the entries
    ``state.params...``, a :class:`~quantax_lite.driver.vmc.VMCState`'s parameters), into the
    structure, dtypes and shardings of ``template`` (a pytree shaped like that part).

    ``loaded``: the arrays of the checkpoint ``path`` by entry name, as
    :func:`read_latest_checkpoint` returns them. The entries of other parts are left out;
    those of ``part`` must match ``template``'s leaves by path, shape and dtype
    (``ValueError`` naming them otherwise, as :func:`load_checkpoint`)."""
    if not isinstance(loaded, dict):
        raise ValueError(f"load_checkpoint: {path} is of the first checkpoint format (leaves by position), whose "
                         "parts cannot be told apart; only a whole state loads from it.")
    prefix = _PREFIX + part
    mine = {k: x for k, x in loaded.items()
            if k.startswith(prefix) and k[len(prefix):len(prefix) + 1] in ("", "[", ".")}
    return _into_template(path, mine, template, prefix)
