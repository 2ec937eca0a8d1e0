"""A trained wavefunction on disk: its parameters alone, in one ``.npz`` file.

A checkpoint (:func:`quantax_lite.driver.checkpoint.save_checkpoint`) holds everything a run needs to
continue (optimizer state, Markov chains, PRNG key) and reads back only into the state
of the same run. :func:`save_params` keeps what a trained wavefunction *is*: the
parameter pytree, each leaf under its path (``params/block_0/conv/kernel``), plus a
JSON metadata dict (put the recipe there, ``{"recipe": recipe.config()}``, to rebuild
the model that reads them)::

    save_params("psi.npz", state.params, {"recipe": run.recipe.config()})
    params, metadata = load_params("psi.npz")            # nested dicts of numpy arrays
    model = build(Recipe(**metadata["recipe"])).model   # log psi = model.apply(params, s)
"""
from __future__ import annotations

import json
import os
import pickle
import zipfile
from typing import Any

import jax
import numpy as np

from quantax_lite.driver.run_folder import atomic_write

__all__ = ["save_params", "load_params"]

_META = "__metadata__"
_SEP = "/"


def _key_name(entry) -> str:
    """One step of a pytree path as text (a dict key, a sequence index or an attribute)."""
    for attr in ("key", "idx", "name"):
        if hasattr(entry, attr):
            text = str(getattr(entry, attr))
            break
    else:
        text = str(entry)
    if not text or _SEP in text or text == _META:
        raise ValueError(f"params: cannot store the key {text!r} (empty, containing {_SEP!r}, or reserved).")
    return text


def _flatten(params) -> dict[str, np.ndarray]:
    """``{"a/b/c": leaf}`` for every leaf of ``params`` (numpy arrays on the host)."""
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    if not leaves:
        raise ValueError("params: expected a pytree with at least one array, got an empty one.")
    out = {}
    for path, leaf in leaves:
        name = _SEP.join(_key_name(k) for k in path) or "leaf"
        out[name] = np.asarray(jax.device_get(leaf))
    return out


def save_params(path: str | os.PathLike, params: Any, metadata: dict | None = None) -> None:
    """Write the parameter pytree ``params`` and a JSON-able ``metadata`` dict to ``path``
    (an ``.npz`` file) atomically: a temporary file, then a rename, so a reader sees the
    old file or the new one, never a partial one.

    Each leaf is stored under its path in the pytree, with its shape and dtype.
    ``ValueError`` naming ``params`` for an empty pytree, a key that cannot be stored or
    a leaf holding NaN or infinity, ``metadata`` for a dict that is not strict JSON (NaN,
    infinity, non-JSON types); nothing is written then.
    """
    path = os.fspath(path)
    arrays = _flatten(params)
    for name, x in arrays.items():
        if x.dtype.kind in "fc" and not np.all(np.isfinite(x)):
            raise ValueError(f"params: {name} holds {int(np.sum(~np.isfinite(x)))} non-finite value(s) (NaN or "
                             "infinity); a wavefunction with them is not written.")
    if metadata is not None and not isinstance(metadata, dict):
        raise TypeError(f"metadata: expected a dict or None, got {type(metadata).__name__}.")
    try:
        text = json.dumps(metadata or {}, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ValueError(f"metadata: must be strict JSON (no NaN or infinity): {err}") from None
    arrays[_META] = np.frombuffer(text.encode(), dtype=np.uint8)
    with atomic_write(path, "wb") as fh:
        np.savez(fh, **arrays)


def _nest(flat: dict[str, np.ndarray]) -> dict:
    """``{"a/b": x}`` -> ``{"a": {"b": x}}``."""
    out: dict = {}
    for name, value in flat.items():
        *parents, leaf = name.split(_SEP)
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def load_params(path: str | os.PathLike, template: Any = None) -> tuple[Any, dict]:
    """Read a file written by :func:`save_params`: ``(params, metadata)``.

    template: None: the parameters as nested dicts of numpy arrays (the structure of a
      flax ``params`` dict). A pytree (e.g. ``model.init(...)`` of the same model): the
      parameters in its structure, as jax arrays placed like its leaves; a missing,
      extra or differently shaped / typed array raises ``ValueError`` naming it.
    """
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"path: expected a file path, got {type(path).__name__}")
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh, np.load(fh) as data:
            flat = {k: data[k] for k in data.files if k != _META}
            metadata = json.loads(bytes(data[_META]).decode()) if _META in data.files else {}
        if not isinstance(metadata, dict):
            raise ValueError(f"its metadata is a {type(metadata).__name__}, not a dict")
    except OSError:
        raise
    except (ValueError, TypeError, AttributeError, EOFError, KeyError, zipfile.BadZipFile, pickle.UnpicklingError,
            UnicodeDecodeError) as err:  # (a .npy file: np.load returns an array, not an archive)
        raise ValueError(f"path: {path} is not a parameter file written by save_params "
                         f"({type(err).__name__}: {err})") from None
    if not flat:
        raise ValueError(f"path: {path} holds no parameter arrays.")
    if template is None:
        return (flat["leaf"] if list(flat) == ["leaf"] else _nest(flat)), metadata
    want = _flatten(template)
    missing, extra = sorted(set(want) - set(flat)), sorted(set(flat) - set(want))
    if missing or extra:
        raise ValueError(f"template: {path} does not hold this model's parameters (missing {missing[:3]}, "
                         f"extra {extra[:3]}).")
    for name, t in want.items():
        if flat[name].shape != t.shape or flat[name].dtype != t.dtype:
            raise ValueError(f"template: {path}: {name} has shape {flat[name].shape} and dtype {flat[name].dtype}, "
                             f"the template's {t.shape} {t.dtype}.")
    leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    out = []
    for (_, t), name in zip(leaves, want):
        x = flat[name]
        sharding = getattr(t, "sharding", None)
        if sharding is None:
            out.append(jax.numpy.asarray(x))
        elif jax.process_count() > 1:  # placed on devices of other processes too
            out.append(jax.make_array_from_callback(x.shape, sharding, lambda idx, x=x: x[idx]))
        else:
            out.append(jax.device_put(x, sharding))
    return jax.tree_util.tree_unflatten(treedef, out), metadata
