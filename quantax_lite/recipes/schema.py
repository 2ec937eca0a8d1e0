"""The recorded form of a recipe: :func:`config_of` (what :meth:`Recipe.config()
<quantax_lite.recipes.spec.Recipe.config>` returns and a run's checkpoints record), its
version, and how the forms of earlier versions read (:func:`migrate`).

Versions: 1, the configs written before they carried ``schema_version`` (read as 1 where it
is absent); 2, the same fields with ``schema_version``; 3, with ``sinh_offset`` (this one: a
recipe of an earlier version with ``amplitude`` sinh has the offset 1 it was trained with,
:func:`earlier_sinh_offset`). A config of version 1 may lack fields added since
(:data:`FIELDS_OF_EARLIER_RUNS` gives the values those runs had) and may record options
that no longer exist (:data:`OPTIONS_OF_EARLIER_VERSIONS`) or options of how the run was
carried out (:data:`RUN_CONTROL_OPTIONS`)."""
from __future__ import annotations

import dataclasses
import warnings

from quantax_lite.utils.errors import FieldError
from quantax_lite.geometry.lattice import parse_lattice
from .resources import RESOURCE_FIELDS

# the version of the form config_of writes; configs without one are of version 1
SCHEMA_VERSION = 3
# Recipe fields added after runs were made without them, with the value those runs had
# (the sector fields' None: k = 0, spin parity not imposed with translations, +1 with full).
FIELDS_OF_EARLIER_RUNS = {"norm": "layer", "momentum": None, "spin_parity": None, "rotation_parity": None,
                          "phase_rule": "none", "momentum_readout": "origin", "sampling": "metropolis",
                          "full_stage_samples": None, "full_stage_lr": None}
# Options that runs of earlier versions recorded and that no longer exist: speed choices the
# library now makes itself (quantax_lite.utils.tuning). A run recording one is read with a warning.
OPTIONS_OF_EARLIER_VERSIONS = {"conv": "the convolution's form", "gram_precision": "the SR Gram matrix's precision"}
# Options of the command that say how a run is carried out, not what it computes; earlier
# versions recorded some of them with the recipe (the resources among them). Ignored where a
# run records one.
RUN_CONTROL_OPTIONS = frozenset({"iters", "out", "resume", "restart", "checkpoint_every", "keep_checkpoints",
                                 "time_limit", "no_progress", "measure", "coordinator", "num_processes",
                                 "process_id", "init_timeout", "distributed", "command", *RESOURCE_FIELDS})


def check_schema_version(version) -> None:
    """``ValueError`` naming ``schema_version`` unless ``version`` is None (not recorded) or
    an int from 1 to :data:`SCHEMA_VERSION` (a later one: written by a newer version)."""
    if version is None:
        return
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise FieldError("schema_version", f"schema_version: expected an int >= 1, got {version!r}.")
    if version > SCHEMA_VERSION:
        raise FieldError("schema_version", f"schema_version: {version}: written by a newer version of quantax_lite (this one reads "
                         f"up to {SCHEMA_VERSION}); read it with that version.")


def earlier_sinh_offset(version, amplitude: str, offset: float) -> float:
    """The sinh offset of a recipe recorded by ``version`` (None: made in code): 1 for a
    sinh recipe of version 2 or earlier, which had no such field and was trained with c = 1
    (its ``offset`` is then the field's default, as no earlier config records one);
    ``offset`` otherwise."""
    return 1.0 if version is not None and version < 3 and amplitude == "sinh" else offset


def resolved_or_self(recipe):
    """:meth:`~quantax_lite.recipes.spec.Recipe.resolved`, or the recipe as it is where its
    sector cannot be formed on its lattice (:func:`~quantax_lite.recipes.assembly.build` then
    names the field)."""
    try:
        return recipe.resolved()
    except (TypeError, ValueError):
        return recipe


def config_of(recipe) -> dict:
    """The fields as plain JSON values (the lattice by name), e.g. for a checkpoint: every
    'auto' as :meth:`~quantax_lite.recipes.spec.Recipe.resolved` decides it, so that a run
    reloads as the same run (``Recipe(**recipe.config()) == recipe``), and
    ``schema_version`` (:data:`SCHEMA_VERSION`)."""
    recipe = resolved_or_self(recipe)
    out = dataclasses.asdict(recipe)
    out["lattice"] = parse_lattice(recipe.lattice).name
    if isinstance(out["momentum"], tuple):
        out["momentum"] = list(out["momentum"])
    out["schema_version"] = SCHEMA_VERSION
    return out


def migrate(config: dict, names, *, where: str = "the config") -> dict:
    """The recipe fields of a recorded ``config`` (of any version) in this version's form:
    ``names`` (the fields to read) taken from it, those it lacks as
    :data:`FIELDS_OF_EARLIER_RUNS` gives them, ``schema_version`` kept (the recipe reads a
    sinh run of version 2 or earlier with its offset 1: :func:`earlier_sinh_offset`).
    A config that records ``sinh_offset`` is read as version 3 (the command records its
    options without ``schema_version``). Options of earlier versions are dropped with a
    warning, run-control options silently;
    ``ValueError`` naming ``out_dir`` for an option this version does not know (``where``:
    the file, for the message)."""
    names = set(names)
    check_schema_version(config.get("schema_version"))
    legacy = sorted(k for k in config if k in OPTIONS_OF_EARLIER_VERSIONS)
    unknown = sorted(k for k in config if k not in names and k not in OPTIONS_OF_EARLIER_VERSIONS
                     and k not in RUN_CONTROL_OPTIONS and k != "schema_version")
    if unknown:
        raise FieldError("out_dir", f"out_dir: {where} records the option(s) {', '.join(f'`{k}`' for k in unknown)} "
                         f"({', '.join(f'{k}={config[k]!r}' for k in unknown)}), which this version does not "
                         "know, so it cannot rebuild that run; measure it with the version that made it.")
    if legacy:
        warnings.warn(f"{where}: the run records {', '.join(f'{k}={config[k]!r}' for k in legacy)}, option(s) of an "
                      "earlier version that this one chooses itself (quantax_lite.utils.tuning); ignored.", stacklevel=3)
    fields = {**{k: v for k, v in FIELDS_OF_EARLIER_RUNS.items() if k in names},
              **{k: v for k, v in config.items() if k in names}}
    # a config that records sinh_offset has the form of version 3 whatever it says (the command
    # records its options without schema_version): its offset is the one it trained with
    version = config.get("schema_version", 1)
    fields["schema_version"] = max(version or 1, 3) if "sinh_offset" in config else version
    return fields
