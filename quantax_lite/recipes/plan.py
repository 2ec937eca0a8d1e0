"""Every decision of a recipe, made once: :class:`Plan` and :func:`make_plan`.

A recipe is data, some of it 'auto'. Its plan holds the recipe with each 'auto' decided (what
a run records, ``Recipe.resolved()``) and every other choice the run is built from, each
made once by :mod:`~quantax_lite.recipes.resolve`: the registered model with its coupling and
Marshall sign, the sector and how it was chosen, the stages, the network's size and options,
the amplitude kind, the phase rule, the readout and the initialization scale, the optimizer
settings and the kind of frustration that picked them, where the reference energy comes
from, and the resources. :func:`~quantax_lite.recipes.assembly.build` reads it and looks the
pieces up in the registries; ``Recipe.plan()`` makes it once per recipe (kept with the recipe
and with its resolved form, so ``resolved()``, ``sector_choice()`` and ``auto_decisions()``
read the same decisions).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from quantax_lite.operators import sign_rules
from quantax_lite.hamiltonians import hamiltonian_entry
from quantax_lite.geometry.lattice import Lattice, parse_lattice
from . import energies, resolve
from .fields import is_auto
from .resources import Resources
from .sector import SectorChoice, hamiltonian_of
from .stages import symmetry_at, symmetry_stages

SECTOR_FIELDS = ("momentum", "spin_parity", "rotation_parity")


@dataclasses.dataclass(frozen=True, eq=False)
class Plan:
    """What a recipe decides, once (:func:`make_plan`; fields in the module docstring).

    recipe: the Recipe with every 'auto' of ``AUTO_FIELDS`` decided; decided: those fields
    that were 'auto' and are decided now; hamiltonian: the registered model
    (:class:`~quantax_lite.hamiltonians.HamiltonianEntry`), coupling its float, marshall
    whether the Marshall sign is on; stages: ``((group, first iteration), ...)``;
    network_size: ``(channels, depth)`` (conv; the fields as given for another network);
    optimizer: ``(sr_momentum, diag_shift)``; phase_rule: '120' or 'none'; readout:
    'origin' or None (the network's choice); init_scale: None or the readout's scale."""

    recipe: Any
    decided: tuple[str, ...]
    lattice: Lattice
    hamiltonian: Any
    coupling: float
    marshall: bool
    sector: SectorChoice
    stages: tuple[tuple[str, int], ...]
    network_size: tuple
    network_options: dict
    amplitude: str
    phase_rule: str
    readout: str | None
    init_scale: float | None
    optimizer: tuple[float, float]
    frustration: str | None
    reference_source: str | None
    resources: Resources

    @property
    def system(self) -> tuple:
        """``(lattice, model, coupling, marshall)``: the hashable key of the sector's and the
        reference energy's caches (:func:`~quantax_lite.recipes.resolve.system_key`)."""
        return self.lattice, self.hamiltonian, self.coupling, self.marshall

    def make_hamiltonian(self):
        """The Hamiltonian (the registered model's builder on the lattice)."""
        return hamiltonian_of(*self.system)

    def stage_system(self, iteration: int = 0):
        """``(lattice, hamiltonian, symmetry)`` of the stage at ``iteration``
        (:func:`~quantax_lite.recipes.stages.symmetry_at`); symmetry None for 'none';
        ``ValueError`` naming ``symmetry`` when the group does not fit the lattice."""
        stage = symmetry_at(self.recipe, iteration)
        return self.lattice, self.make_hamiltonian(), resolve.stage_group(self.lattice, stage, self.sector.fields)

    def site_phases(self):
        """The network's phase rule, ``(n_sites,)`` radians, or None."""
        return sign_rules.sublattice_phases(self.lattice) if self.phase_rule == "120" else None

    def auto_decisions(self) -> list[str]:
        """What 'auto' decided, one line each (the command prints them first): the sector
        (where it was 'auto') with how and why, and the network and optimizer settings that
        were 'auto'. Empty where nothing was decided."""
        lines = []
        if set(SECTOR_FIELDS) & set(self.decided):
            lines.append(f"sector {self.sector.describe()}: chosen by {self.sector.chosen_by} ({self.sector.reason})")
        settings = [f"{f.replace('_', '-')} {getattr(self.recipe, f)}" for f in ("channels", "depth")
                    if f in self.decided]
        settings += [f"{f.replace('_', '-')} {getattr(self.recipe, f):g}" for f in ("sr_momentum", "diag_shift")
                     if f in self.decided]
        if settings:
            kind = self.frustration
            why = f"the settings measured best for {kind} models" if kind else "the measured settings"
            lines.append(f"auto: {', '.join(settings)} ({why}, benchmarks/accuracy.py)")
        return lines


def make_plan(recipe) -> Plan:
    """The plan of ``recipe`` (:class:`Plan`): every decision made once, kept with the
    recipe (a second call returns the same plan). ``ValueError`` naming a field where the
    recipe's sector cannot be formed on its lattice."""
    found = getattr(recipe, "_plan", None)
    if found is not None and found.hamiltonian is hamiltonian_entry(recipe.hamiltonian):
        return found  # (planned before the model was registered again: planned again)
    lattice = parse_lattice(recipe.lattice)
    choice = resolve.sector_choice(recipe, lattice)
    channels, depth = (resolve.network_size(recipe, lattice) if recipe.network == "conv"
                       else (recipe.channels, recipe.depth))
    sr_momentum, diag_shift = resolve.optimizer_settings(recipe, lattice)
    m, p, r = choice.fields
    values = dict(momentum=m, spin_parity=p, rotation_parity=r, channels=channels, depth=depth,
                  sr_momentum=sr_momentum, diag_shift=diag_shift)
    decided = tuple(f for f in resolve.AUTO_FIELDS if is_auto(getattr(recipe, f)) and not is_auto(values[f]))
    out = dataclasses.replace(recipe, **{f: values[f] for f in decided}) if decided else recipe
    system = resolve.system_key(out, lattice)
    ham = hamiltonian_of(*system)
    phase_rule = resolve.phase_rule_kind(out, lattice)
    plan = Plan(
        recipe=out, decided=decided, lattice=lattice, hamiltonian=system[1], coupling=system[2], marshall=system[3],
        sector=choice, stages=symmetry_stages(out), network_size=(channels, depth),
        network_options=resolve.network_config(out, lattice), amplitude=resolve.amplitude_kind(out, ham),
        phase_rule=phase_rule,
        readout="origin" if out.momentum_readout == "origin" and resolve.has_momentum(out) else None,
        init_scale=resolve.init_scale(out, lattice, ham), optimizer=(sr_momentum, diag_shift),
        frustration=resolve.frustration(out, lattice),
        reference_source=energies.reference_source(recipe, lattice),  # the sector as chosen for `recipe`
        resources=out.resources)
    for planned in {id(recipe): recipe, id(out): out}.values():
        object.__setattr__(planned, "_plan", plan)
    return plan
