"""Warm starts: a run's first parameters taken from another run's checkpoint.

A network whose parameters do not depend on the lattice size (the conv ResNet: its
kernels act on cells) can start, say, a 10x10 J1-J2 run from a trained 6x6 one.
:func:`initial_parameters` reads the newest readable checkpoint of the source run folder
(a ``quantax-lite train --out`` folder) and returns its parameters in the structure,
dtypes and shardings of this run's: every leaf must match by path, shape and dtype,
otherwise :class:`~quantax_lite.utils.errors.FieldError` of ``init_from`` names the leaf that
differs. Only the parameters are taken: the optimizer state, step counter and chains of
the new run start fresh. The source run may differ in anything that leaves the parameter
tree as it is (lattice, Hamiltonian, couplings, samples, symmetry).
"""
from __future__ import annotations

import os
from typing import Any, NamedTuple

import jax
import numpy as np

from quantax_lite.driver.checkpoint import list_checkpoints, load_checkpoint_part, newest_readable_checkpoint, read_latest_checkpoint
from quantax_lite.utils.errors import FieldError

__all__ = ["WarmStart", "check_source", "initial_parameters", "describe_source"]

# Where a VMCState's parameters are in a checkpoint: the entries state.params[...]
_PARAMS = ".params"
_ITERATION = "state.iteration"


class WarmStart(NamedTuple):
    """What :func:`initial_parameters` returns: the parameters, and where they come from,
    ``source = {"path": the folder as given, "iteration": its checkpoint's step,
    "lattice": its run's lattice (None when its checkpoints record no recipe)}``, as the
    warm-started run records it (summary.json and its checkpoints' metadata)."""

    params: Any
    source: dict


def check_source(source_dir: str | os.PathLike) -> str:
    """``source_dir`` as a path, after checking that it is a folder with a readable
    checkpoint (``FieldError`` of ``init_from`` otherwise)."""
    if not isinstance(source_dir, (str, os.PathLike)):
        raise FieldError("init_from", f"init_from: expected the path of a run folder, got {source_dir!r}.")
    path = os.fspath(source_dir)
    if not os.path.isdir(path):
        raise FieldError("init_from", f"init_from: {path} is not a folder (expected the --out folder of a trained "
                         "run).")
    if not list_checkpoints(path):
        raise FieldError("init_from", f"init_from: {path} holds no checkpoint to take parameters from (a run folder "
                         "has checkpoint-<step>.npz once its first checkpoint is written).")
    if newest_readable_checkpoint(path) is None:
        raise FieldError("init_from", f"init_from: every checkpoint in {path} is damaged.")
    return path


def _leaf_name(keypath) -> str:
    """A parameter's path as 'base/input_conv/kernel' (without flax's 'params' collection)."""
    keys = [str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in keypath]
    return "/".join(keys[1:] if len(keys) > 1 and keys[0] == "params" else keys)


def _layout(loaded: dict, params_template) -> list[tuple[str, tuple | None, str | None, tuple, str]]:
    """(name, shape and dtype there or None, shape and dtype here) per leaf of the two
    parameter trees, in the template's order, then the leaves only the source has."""
    with_path = jax.tree_util.tree_flatten_with_path(params_template)[0]
    rows, seen = [], set()
    for keypath, leaf in with_path:
        entry = "state" + _PARAMS + jax.tree_util.keystr(keypath)
        seen.add(entry)
        there = loaded.get(entry)
        rows.append((_leaf_name(keypath), None if there is None else tuple(there.shape),
                     None if there is None else str(there.dtype), tuple(leaf.shape), str(np.dtype(leaf.dtype))))
    prefix = "state" + _PARAMS
    extra = sorted(k for k in loaded if k.startswith(prefix) and k[len(prefix):len(prefix) + 1] in ("", "[", ".")
                   and k not in seen)
    for entry in extra:
        name = "/".join(part.strip("'\"") for part in entry[len(prefix):].strip("[]").split("]["))
        name = name[len("params/"):] if name.startswith("params/") else name
        rows.append((name, tuple(loaded[entry].shape), str(loaded[entry].dtype), None, None))
    return rows


def _difference(name, shape_there, dtype_there, shape_here, dtype_here) -> str | None:
    """How one leaf differs between the source ('there') and this run ('here'), or None."""
    if shape_there is None:
        return f"{name} is not there, {shape_here} {dtype_here} here"
    if shape_here is None:
        return f"{name} is there ({shape_there} {dtype_there}), not here"
    if shape_there != shape_here:
        return f"{name} is {shape_there} there, {shape_here} here"
    if dtype_there != dtype_here:
        return f"{name} is {dtype_there} there, {dtype_here} here"
    return None


def _mismatch(rows) -> str | None:
    """How the parameter trees differ (the first leaf that does, and how many more), or None."""
    found = [d for d in (_difference(*row) for row in rows) if d is not None]
    if not found:
        return None
    more = len(found) - 1
    return found[0] + (f" (and {more} more of the {len(rows)} leaves)" if more else "")


def initial_parameters(source_dir: str | os.PathLike, params_template: Any, *,
                       sinh_offset: float | None = None) -> WarmStart:
    """The parameters of the newest readable checkpoint of the run folder ``source_dir``,
    shaped, typed and sharded like ``params_template`` (this run's freshly initialized
    parameters), and where they come from (:class:`WarmStart`).

    ``FieldError`` of ``init_from`` when the folder holds no readable checkpoint, or when
    the parameter trees differ in a leaf's path, shape or dtype (the message names the
    first such leaf, e.g. ``base/input_conv/kernel is (3, 3, 1, 16) there, (3, 3, 1, 8)
    here``): warm starts need the same network with the same options, one whose parameters
    do not depend on the lattice size; also where this run's sinh head (``sinh_offset``, None
    for another head) has another offset than the source's sinh head (a source recorded
    without one had 1).
    """
    path = check_source(source_dir)
    try:
        loaded, metadata, ckpt = read_latest_checkpoint(path)
    except FileNotFoundError as err:  # removed or damaged since check_source
        raise FieldError("init_from", f"init_from: {err}") from None
    if not isinstance(loaded, dict):
        raise FieldError("init_from", f"init_from: {ckpt} is a checkpoint of the first format (leaves by position, "
                         "written by an early version): its parameters cannot be told from the rest of its state.")
    differs = _mismatch(_layout(loaded, params_template))
    if differs is not None:
        raise FieldError("init_from", f"init_from: the networks differ: {differs}; warm starts need the same network "
                         "with the same options, and parameters that do not depend on the lattice size (as the "
                         "conv net's).")
    config = metadata.get("config") if isinstance(metadata.get("config"), dict) else {}
    theirs = config.get("sinh_offset", 1.0)  # (every config recorded since the option records it)
    if sinh_offset is not None and config.get("amplitude") == "sinh" and theirs != sinh_offset:
        raise FieldError("init_from", f"init_from: the run there has the sinh offset {theirs:g}, this one "
                         f"{sinh_offset:g}: its parameters would start another wavefunction; give `sinh_offset` "
                         f"{theirs:g}.")
    params = load_checkpoint_part(ckpt, loaded, params_template, _PARAMS)
    iteration = int(loaded[_ITERATION]) if _ITERATION in loaded else None
    return WarmStart(params, {"path": path, "iteration": iteration, "lattice": config.get("lattice")})


def describe_source(source: dict) -> str:
    """'warm start from <path> (step N, lattice L)', the line a warm-started run announces."""
    lattice = source.get("lattice") or "not recorded"
    return f"warm start from {source['path']} (step {source.get('iteration')}, lattice {lattice})"
