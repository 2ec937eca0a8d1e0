"""The energies a run is measured against: the exact ground-state energy of the whole space
(a literature value, else exact diagonalization, else the table of
:mod:`quantax_lite.exact.references`) and the lowest energy of the network's sector. Functions of
a recipe; :class:`~quantax_lite.recipes.spec.Recipe`'s methods of the same names call them."""
from __future__ import annotations

from quantax_lite.exact import references
from quantax_lite.exact.ground_sector import MAX_SEARCH_SITES
from quantax_lite.geometry.lattice import parse_lattice
from .resolve import sector_choice, system_key
from .sector import sector_lowest_energy, whole_space_ground

# The literature values of the package's table of reference energies (quantax_lite.exact.references),
# (lattice, hamiltonian, J2: the model's coupling) -> energy per site, by their earlier name.
LITERATURE_ENERGY_PER_SITE = {key: references.ENERGY_PER_SITE[key] for key in sorted(references.LITERATURE)}
MAX_ED_SITES = 20


def reference_energy(recipe, lattice=None, hamiltonian=None) -> float | None:
    """The exact energy of the whole space's ground state (the summary's relative error
    is against it): a literature value (:data:`quantax_lite.exact.references.LITERATURE`), else sparse
    diagonalization of the whole Sz = 0 space (every configuration for tfim) up to
    :data:`MAX_ED_SITES` sites, or up to 24 where :meth:`sector_choice` diagonalized it,
    else a value of the table :data:`quantax_lite.exact.references.ENERGY_PER_SITE`, else None. Whether the network's sector holds that ground state,
    and its own lowest energy where not: :meth:`sector_energy`, :meth:`sector_summary`."""
    return reference(recipe, lattice, hamiltonian)[0]


def reference_source(recipe, lattice=None, hamiltonian=None) -> str | None:
    """Where :meth:`reference_energy` comes from, in words (None without one)."""
    return reference(recipe, lattice, hamiltonian, energy=False)[1]


def reference(recipe, lattice, hamiltonian, energy: bool = True) -> tuple:
    """(energy or None, source) of :meth:`reference_energy`; ``energy=False`` skips the
    diagonalization and gives the source only."""
    lattice = parse_lattice(recipe.lattice) if lattice is None else lattice
    system = system_key(recipe, lattice)
    key = (lattice.name, recipe.hamiltonian, system[2])  # the table's keys: (lattice, model, its coupling)
    if key in references.LITERATURE:
        return references.energy_per_site(*key) * lattice.n_sites, references.source(*key)
    choice = sector_choice(recipe, lattice) if lattice.n_sites <= MAX_SEARCH_SITES else None
    if lattice.n_sites <= MAX_ED_SITES or (choice is not None and choice.ground_energy is not None):
        whole = "the whole Sz = 0 space" if system[1].sz_sector else "every configuration"
        source = f"exact diagonalization (scipy eigsh) of this lattice, without a symmetry sector ({whole})"
        if choice is not None and choice.holds_ground_state:
            source += f"; the symmetry sector of the network holds its ground state ({choice.chosen_by})"
        elif choice is not None and choice.holds_ground_state is False:
            source += "; the symmetry sector of the network lies higher (sector_energy)"
        if choice is not None and choice.ground_energy is not None:
            return choice.ground_energy, source
        return (whole_space_ground(system)[0] if energy else None), source
    per_site = references.energy_per_site(*key)
    if per_site is None:
        return None, None
    return per_site * lattice.n_sites, references.source(*key)


def sector_energy(recipe, lattice=None, hamiltonian=None) -> float | None:
    """The lowest energy of the network's sector (the group of the last stage with its
    characters, :meth:`sector_choice`): the whole space's where the sector holds its
    ground state (a sign rule's positive ground state, or found by diagonalization),
    else sparse diagonalization in the sector up to :data:`MAX_ED_SITES` sites; None
    beyond (or with symmetry 'none': no sector, the whole space)."""
    lattice = parse_lattice(recipe.lattice) if lattice is None else lattice
    choice = sector_choice(recipe, lattice)
    if choice.sector_energy is not None:
        return choice.sector_energy
    if choice.symmetry == "none" or (choice.holds_ground_state and choice.chosen_by == "lattice"):
        return reference_energy(recipe, lattice) if lattice.n_sites <= MAX_ED_SITES else None
    if lattice.n_sites > MAX_ED_SITES:
        return None
    return sector_lowest_energy(system_key(recipe, lattice), choice.symmetry, choice.fields)


def sector_summary(recipe, lattice=None, hamiltonian=None) -> dict:
    """What a run's summary says of its sector: ``{"sector": {symmetry, momentum (the
    integers m_d, also at k = 0), spin_parity (None: not imposed), rotation_parity,
    chosen_by ('exact diagonalization', 'lattice' or 'user'), reason,
    holds_ground_state (None: unknown), lowest_energy (the sector's, None: unknown)},
    "sector_energy": the sector's lowest energy where it lies above the whole space's
    ground state (:meth:`reference_energy`), else None}``."""
    lattice = parse_lattice(recipe.lattice) if lattice is None else lattice
    choice = sector_choice(recipe, lattice)
    exact = reference_energy(recipe, lattice)
    lowest = sector_energy(recipe, lattice)
    holds = choice.holds_ground_state
    if holds is None and lowest is not None and exact is not None:
        holds = bool(abs(lowest - exact) <= 1e-9 * max(1.0, abs(exact)))
    return {"sector": {**choice.as_json(), "holds_ground_state": holds, "lowest_energy": lowest},
            "sector_energy": lowest if holds is False else None}

