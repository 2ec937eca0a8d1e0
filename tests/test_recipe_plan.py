"""The recipe's resources kept apart from its physics (recipes.Resources, taken by build
beside the recipe; the flat form's chunk_size and memory_budget read as them), and its plan
(recipes.Plan: every decision made once, which build, resolved() and auto_decisions() read)."""
import dataclasses
import types

import numpy as np
import pytest

from quantax_lite.utils.errors import FieldError
from quantax_lite.hamiltonians import hamiltonian_entry
from quantax_lite.geometry.lattice import Square
from quantax_lite.recipes import Plan, Recipe, Resources, build, energies, make_plan, resolve
from quantax_lite.recipes.assembly import exchange_bonds


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


# ------------------------------------------------------------------ the plan
def test_the_plan_holds_each_decision_once():
    recipe = Recipe(lattice="triangular:4x3", symmetry="translations>full@5", samples=64)
    plan = recipe.plan()
    assert isinstance(plan, Plan) and make_plan(recipe) is plan and recipe.plan() is plan
    resolved = recipe.resolved()
    assert plan.recipe is resolved and resolved.plan() is plan and resolved.resolved() is resolved
    assert plan.decided == ("momentum", "spin_parity", "rotation_parity", "channels", "depth", "diag_shift",
                            "sr_momentum")
    # the same decisions as the recipe's own functions make
    assert plan.sector == recipe.sector_choice() and plan.sector.chosen_by == "exact diagonalization"
    assert plan.sector.fields == (resolved.momentum, resolved.spin_parity, resolved.rotation_parity) == ((2, 0), None,
                                                                                                          -1)
    assert plan.network_size == recipe.network_size() == (12, 2)
    assert plan.network_options == resolved.network_config() and plan.optimizer == recipe.optimizer_settings()
    assert plan.frustration == recipe.frustration() == "triangular"
    assert plan.stages == recipe.symmetry_stages() == (("translations", 0), ("full", 5))
    assert plan.phase_rule == recipe.phase_rule_kind() == "none" and plan.site_phases() is None
    lattice, ham, _ = recipe.system()
    assert plan.amplitude == recipe.amplitude_kind(ham) == "complex" and plan.init_scale == 0.3
    assert plan.readout is None and plan.resources == Resources()
    assert plan.reference_source == energies.reference_source(recipe) == recipe.reference_source()
    assert "exact diagonalization" in plan.reference_source
    assert plan.hamiltonian is hamiltonian_entry("heisenberg") and (plan.coupling, plan.marshall) == (0.0, False)
    assert plan.lattice == lattice and type(plan.make_hamiltonian()) is type(ham)
    assert plan.auto_decisions() == recipe.auto_decisions() == resolved.auto_decisions()
    assert plan.auto_decisions()[0].startswith("sector momentum (2, 0), spin parity +1, rotation parity -1 (symmetry full): chosen by "
                                              "exact diagonalization")


def test_what_is_given_is_not_decided():
    given = Recipe(lattice="chain:8", momentum=None, spin_parity=None, rotation_parity=None, channels=2, depth=1,
                   diag_shift=1e-3, sr_momentum=0.0)
    assert given.plan().decided == () and given.resolved() is given and given.auto_decisions() == []
    assert given.plan().sector.chosen_by == "user"
    # another network has no conv fields to decide: only what was decided is said
    rbm = Recipe(lattice="chain:8", network="rbm", momentum=None, spin_parity=None, rotation_parity=None)
    assert rbm.plan().decided == ("diag_shift", "sr_momentum") and rbm.plan().network_size == ("auto", "auto")
    assert rbm.auto_decisions() == ["auto: sr-momentum 0, diag-shift 0.0001 (the measured settings, "
                                    "benchmarks/accuracy.py)"]
    again = Recipe(**rbm.config())
    assert again == rbm and again.resolved() is again and again.auto_decisions() == []
    j1j2 = Recipe(lattice="4x4", hamiltonian="j1j2", phase_rule="auto").plan()
    assert (j1j2.coupling, j1j2.marshall, j1j2.frustration, j1j2.optimizer) == (0.5, True, "j1j2", (0.9, 1e-3))
    tfim = Recipe(lattice="chain:8", hamiltonian="tfim", h=-1.0).plan()
    assert (tfim.coupling, tfim.marshall, tfim.amplitude, tfim.sector.chosen_by) == (-1.0, False, "positive", "lattice")
    assert "every configuration" in tfim.reference_source


def test_build_reads_the_plan(monkeypatch):
    """Once planned, build decides nothing again: the deciding functions may not be called."""
    recipe = Recipe(lattice="chain:8", symmetry="translations>full@3", samples=16, channels=2, depth=1)
    plan = recipe.plan()

    def decided_already(*args, **kwargs):
        raise AssertionError("decided again")

    for name in ("sector_choice", "network_size", "network_config", "optimizer_settings", "amplitude_kind",
                 "phase_rule_kind", "init_scale", "frustration", "has_momentum", "system_key"):
        monkeypatch.setattr(resolve, name, decided_already)
    monkeypatch.setattr(energies, "reference", decided_already)
    for r in (build(recipe), build(plan), build(plan, 3)):
        assert r.recipe is plan.recipe and r.vmc.preconditioner is not None
    assert build(plan, 3).symmetry.n_elements > build(plan).symmetry.n_elements
    assert recipe.auto_decisions() == plan.auto_decisions() and recipe.reference_source() == plan.reference_source
    with pytest.raises(TypeError, match="^recipe: expected a Recipe or a Plan, got dict"):
        build({"lattice": "chain:8"})


def test_a_copy_leaves_the_plan_out():
    import copy
    import pickle

    recipe = Recipe(lattice="chain:8")
    plan = recipe.plan()
    for other in (pickle.loads(pickle.dumps(recipe)), copy.deepcopy(recipe), copy.copy(recipe)):
        assert "_plan" not in vars(other)
        assert other.plan() is not plan and other.plan().decided == plan.decided and other == recipe


def test_recipe_system_is_the_plans_stage():
    """``Recipe.system(i)`` is the plan's stage at ``i``: the group changes at the stage's
    first iteration, the lattice and the Hamiltonian's couplings are the plan's."""
    recipe = Recipe(lattice="chain:8", hamiltonian="j1j2", J2=0.3, symmetry="translations>full@3", samples=16,
                    channels=2, depth=1)
    plan = recipe.plan()
    for i, expected in ((0, "translations"), (2, "translations"), (3, "full")):
        lattice, ham, group = recipe.system(i)
        _, _, planned = plan.stage_system(i)
        assert lattice is plan.lattice and group.n_elements == planned.n_elements
        assert recipe.symmetry_at(i) == expected
    assert recipe.system(0)[2].n_elements < recipe.system(3)[2].n_elements
    assert recipe.system(0)[1].J2 == 0.3


def test_exchange_moves_follow_every_bond_of_the_hamiltonian():
    """J1-J2: the sampler swaps spins on next-nearest bonds too (the Hamiltonian's bonds);
    Heisenberg keeps the nearest-neighbour moves; a Hamiltonian without a bond list gets them."""
    lattice = Square(4)
    j1j2 = build(Recipe(lattice="4x4", hamiltonian="j1j2", J2=0.5)).sampler.rule
    moves = {tuple(sorted(b)) for b in j1j2.bonds}
    assert moves == {tuple(sorted(b)) for b in np.concatenate([lattice.bonds(1), lattice.bonds(2)])}
    assert len(j1j2.bonds) == 64 and j1j2.anti_aligned
    heis = build(Recipe(lattice="4x4", hamiltonian="heisenberg")).sampler.rule
    assert heis.bonds == tuple((int(i), int(j)) for i, j in lattice.bonds(1))
    no_list = types.SimpleNamespace()
    np.testing.assert_array_equal(exchange_bonds(no_list, lattice), lattice.bonds(1))
