"""Runs on disk through their recipe: :func:`recipe_of_run` reads the recipe a run folder's
newest readable checkpoint records (any :mod:`~quantax_lite.recipes.schema` version, earlier
runs migrated), :func:`load_run` rebuilds the run and its state from it."""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from quantax_lite.utils.errors import FieldError
from .assembly import Run, build, switch_stage
from .resources import RESOURCE_FIELDS
from .schema import FIELDS_OF_EARLIER_RUNS, migrate  # noqa: F401  (FIELDS_OF_EARLIER_RUNS: read with the runs)
from .spec import Recipe


class LoadedRun(NamedTuple):
    """What :func:`load_run` returns: the recipe of a run folder, the run it builds, the
    state of the folder's newest readable checkpoint, that checkpoint's metadata and path."""

    recipe: Recipe
    run: Run
    state: Any
    metadata: dict
    path: str


def recipe_of_run(out_dir, *, chunk_size="auto", memory_budget=None) -> tuple[Recipe, str, dict]:
    """The :class:`Recipe` of a ``quantax-lite train`` run folder, read from the metadata
    of its newest readable checkpoint: ``(recipe, checkpoint path, metadata)``.

    chunk_size, memory_budget: how memory is bounded here (not part of the run: a run may
    be continued or measured on another machine). ``ValueError`` naming ``out_dir`` when the
    folder holds no readable checkpoint, or one without a recipe (written by
    :func:`quantax_lite.driver.vmc.run` directly: rebuild its driver and call
    :func:`~quantax_lite.driver.checkpoint.load_latest_checkpoint`).
    """
    import os

    from quantax_lite.driver.checkpoint import list_checkpoints, newest_readable_checkpoint

    out_dir = os.fspath(out_dir)
    if not os.path.isdir(out_dir):
        raise FieldError("out_dir", f"out_dir: {out_dir} is not a folder.")
    if not list_checkpoints(out_dir):
        raise FieldError("out_dir", f"out_dir: {out_dir} holds no checkpoint (a run folder of quantax-lite train has "
                         "checkpoint-<step>.npz once its first checkpoint is written).")
    found = newest_readable_checkpoint(out_dir)
    if found is None:
        raise FieldError("out_dir", f"out_dir: every checkpoint in {out_dir} is damaged.")
    path, metadata = found
    config = metadata.get("config")
    if not isinstance(config, dict) or "lattice" not in config:
        raise FieldError("out_dir", f"out_dir: {path} records no recipe (written by vmc.run, not by quantax-lite train); "
                         "rebuild its driver and use checkpoint.load_latest_checkpoint.")
    names = {f.name for f in dataclasses.fields(Recipe)} - set(RESOURCE_FIELDS)
    fields = migrate(config, names, where=path)
    recipe = Recipe(**fields, chunk_size=chunk_size, memory_budget=memory_budget)
    if "momentum_readout" not in config and not recipe.has_momentum():  # at k = 0 no choice is recorded
        recipe = dataclasses.replace(recipe, momentum_readout=Recipe.momentum_readout)
    return recipe, path, metadata


def load_run(out_dir, *, chunk_size="auto", memory_budget=None) -> LoadedRun:
    """Rebuild a ``quantax-lite train`` run from its folder, through the recipe: the
    :class:`Recipe` its newest readable checkpoint records (:func:`recipe_of_run`), the
    :class:`Run` that :func:`build` makes of it, and that checkpoint's state (parameters,
    optimizer state, chains) in the run's structure and shardings.

    ``state.params`` is the trained wavefunction (``run.model.apply(state.params, s)``);
    ``run.vmc`` and ``state`` continue the training (:func:`~quantax_lite.driver.vmc.run`).
    Errors name ``out_dir`` (see
    :func:`recipe_of_run`); a checkpoint that does not fit the rebuilt run (e.g. another
    device count with a chain count that depends on it) raises ``ValueError``.
    A staged ``symmetry`` (e.g. 'translations>full@200') gives the run of the checkpoint's
    stage (:meth:`Recipe.symmetry_at` its iteration), its state carried over by
    :func:`switch_stage`.
    """
    from quantax_lite.driver.checkpoint import load_latest_checkpoint

    recipe = recipe_of_run(out_dir, chunk_size=chunk_size, memory_budget=memory_budget)[0]
    r = build(recipe)
    state, metadata, path = load_latest_checkpoint(out_dir, r.state)  # a damaged one is skipped
    if len(recipe.symmetry_stages()) > 1:  # every stage has the same state structure
        iteration = int(state.iteration)
        if recipe.symmetry_at(iteration) != recipe.symmetry_at(0):
            r = build(recipe, iteration)
        state = switch_stage(r, state)
    return LoadedRun(recipe, r, state, metadata, path)
