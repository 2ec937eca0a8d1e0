"""The recipe's resources kept apart from its physics (recipes.Resources, taken by build
beside the recipe; the flat form's chunk_size and memory_budget read as them)."""
import dataclasses

import pytest

from quantax_lite.errors import FieldError
from quantax_lite.recipes import Recipe, Resources, build


def test_resources_are_checked_and_named():
    assert Resources() == Resources("auto", None) and Resources().fixed_chunk is None
    assert Resources(None).fixed_chunk is None and Resources(64).fixed_chunk == 64
    assert Resources(memory_budget=0.5).memory_budget == 0.5
    for kwargs, error, field in ((dict(chunk_size="big"), TypeError, "chunk_size"),
                                 (dict(chunk_size=0), ValueError, "chunk_size"),
                                 (dict(memory_budget=-1), ValueError, "memory_budget"),
                                 (dict(memory_budget="8GB"), TypeError, "memory_budget"),
                                 (dict(chunk_size=64, memory_budget=0.5), ValueError, "memory_budget")):
        with pytest.raises(error, match=f"^{field}: ") as err:
            Resources(**kwargs)
        assert isinstance(err.value, FieldError) and err.value.field == field
    with pytest.raises(ValueError, match="^memory_budget: caps the chunks of `chunk_size` auto; with `chunk_size` 64"):
        Recipe(lattice="chain:8", chunk_size=64, memory_budget=0.5)


def test_the_flat_form_keeps_its_fields_and_config():
    recipe = Recipe(lattice="chain:8", chunk_size=16)
    assert recipe.resources == Resources(16, None)
    assert Recipe(lattice="chain:8", memory_budget=0.25).resources == Resources("auto", 0.25)
    config = recipe.config()
    assert config["chunk_size"] == 16 and config["memory_budget"] is None
    assert Recipe(**config) == recipe and Recipe(**config).resources == recipe.resources
    assert recipe != Recipe(lattice="chain:8")  # the flat form still compares them


def test_build_takes_resources_beside_the_recipe():
    recipe = Recipe(lattice="chain:8", samples=16, channels=2, depth=1)
    flat = build(dataclasses.replace(recipe, chunk_size=8))
    apart = build(recipe, resources=Resources(chunk_size=8))
    for r in (flat, apart):
        assert r.vmc.chunk_size == 8 and r.sampler.chunk_size == 8
    assert apart.recipe.chunk_size == "auto"  # the recipe is as given: resources are not part of it
    default = build(recipe)
    assert default.vmc.chunk_size == "auto" and default.sampler.chunk_size is None
    budget = build(recipe, resources=Resources(memory_budget=0.5))
    assert budget.vmc.memory_budget == 0.5
    with pytest.raises(TypeError, match="^resources: expected a Resources, got dict"):
        build(recipe, resources={"chunk_size": 8})
