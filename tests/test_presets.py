"""The named recipes (quantax_lite.recipes.presets) are the rows of benchmarks/accuracy.py:
each preset equals the recipe that row's command line makes, and the schema version of
configs reads back."""
from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest

from quantax_lite.cli.options import RECIPE, build_parser
from quantax_lite.recipes import SCHEMA_VERSION, Recipe, presets

ACCURACY = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "accuracy.py"


def _rows() -> dict:
    spec = importlib.util.spec_from_file_location("accuracy_rows", ACCURACY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SYSTEMS


def _recipe_of(args) -> tuple[Recipe, int]:
    parsed = build_parser().parse_args(["train", *args])
    return Recipe(**{name: getattr(parsed, name) for name in RECIPE}), parsed.iters


def test_every_accuracy_row_has_a_preset():
    assert set(presets.names()) == set(_rows())
    assert list(presets.names()) == list(_rows())


@pytest.mark.parametrize("name", sorted(_rows()))
def test_each_preset_is_the_recipe_of_its_row(name):
    recipe, iters = _recipe_of(_rows()[name]["args"])
    preset = presets.get(name)
    assert preset == recipe, name
    # every field as given, not only equal after 'auto' is decided
    assert {k: getattr(preset, k) for k in RECIPE} == {k: getattr(recipe, k) for k in RECIPE}
    assert presets.ITERATIONS[name] == iters


def test_an_unknown_preset_is_refused():
    with pytest.raises(ValueError, match="^name: "):
        presets.get("heisenberg_9x9")


def test_configs_carry_the_schema_version_and_older_ones_read():
    recipe = Recipe(lattice="chain:8", channels=2, depth=1)
    config = json.loads(json.dumps(recipe.config()))
    assert config["schema_version"] == SCHEMA_VERSION
    assert Recipe(**config) == recipe
    old = {k: v for k, v in config.items() if k != "schema_version"}  # written before the version existed
    assert Recipe(**old) == recipe
    with pytest.raises(ValueError, match="^schema_version: "):
        Recipe(**{**config, "schema_version": SCHEMA_VERSION + 1})
