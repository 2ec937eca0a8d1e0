"""The symmetry sector of a recipe's network: :class:`SectorChoice`, the group of a sector,
and how an 'auto' sector is chosen (a sign rule's positive ground state, or the ground state
of the whole space by exact diagonalization, :mod:`quantax_lite.exact.ground_sector`). Functions
of a hashable system ``(lattice, registered model, coupling, marshall)``
(:func:`~quantax_lite.recipes.resolve.system_key`), cached per process."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from quantax_lite.utils.errors import FieldError
from quantax_lite.exact.ground_sector import MAX_SEARCH_SITES, WEIGHT_TOL, GroundOverlaps, find_ground_sector, momenta
from quantax_lite.exact.ground_sector import whole_space_ground_state
from .fields import SYMMETRIES, is_auto


def sector_group(lattice, name: str, momentum=None, parity: int | None = None, rotation: int | None = None):
    """The group of the symmetry ``name`` ('none', 'translations', 'full') in a sector:
    ``momentum`` a Cartesian wave vector or None (k = 0); ``parity`` the character of spin
    inversion, or None (+1 with 'full', no spin inversion with 'translations'); ``rotation``
    the point group's irrep with 'full' (:func:`~quantax_lite.geometry.symmetry.rotation_characters`;
    None: +1, ignored by the other groups). 'full' with ``k != 0`` keeps the little group
    of ``k`` (:func:`~quantax_lite.geometry.symmetry.full_symmetry`).
    None for 'none' (ValueError naming ``momentum`` / ``spin_parity`` if they are set)."""
    from quantax_lite.geometry import symmetry as sym

    if name == "none":
        if momentum is not None:
            raise FieldError("momentum", "momentum: symmetry 'none' has no translations, so no momentum sector")
        if parity is not None:
            raise FieldError("spin_parity", "spin_parity: symmetry 'none' projects on no group")
        return None
    if name == "translations":
        group = sym.translations(lattice, momentum)
        return group if parity is None else sym.product(group, sym.spin_inversion(lattice, parity))
    if name == "full":
        return sym.full_symmetry(lattice, momentum, 1 if parity is None else parity,
                                 1 if rotation is None else rotation)
    raise FieldError("symmetry", f"symmetry: expected one of {SYMMETRIES}, got {name!r}.")


def wave_vector(lattice, m):
    """The Cartesian ``k = sum_d m_d b_d / L_d`` of the integers ``m`` (float64 ``(ndim,)``),
    or None for ``m`` None or ``k = 0`` (every ``m_d`` a multiple of ``L_d``)."""
    if m is None or not any(int(x) % L for x, L in zip(m, lattice.shape)):
        return None
    # reduced mod L_d in integers first (a float64 of a huge m_d would round to another one)
    m = np.asarray([int(x) % int(L) for x, L in zip(m, lattice.shape)], np.float64)
    return (m / np.asarray(lattice.shape, np.float64)) @ lattice.reciprocal_vectors


def hamiltonian_of(lattice, entry, coupling: float, marshall: bool):
    """The Hamiltonian of :func:`system_key`: the registered model ``entry``
    (:class:`~quantax_lite.hamiltonians.HamiltonianEntry`) on ``lattice`` with its coupling
    and the Marshall sign or not."""
    return entry.build(lattice, coupling, marshall)


def _sign_free(system: tuple) -> str | None:
    """Why the ground state of the system of :func:`system_key` is positive in the
    network's basis (so in the sector of characters 1 of every symmetry), or None."""
    lattice, entry, coupling, marshall = system
    return entry.why_sign_free(lattice, coupling, marshall)


@dataclasses.dataclass(frozen=True)
class SectorChoice:
    """The symmetry sector of a recipe's network and how it was chosen (:meth:`Recipe.sector_choice`).

    momentum, spin_parity, rotation_parity: the recipe's fields (None: k = 0; spin parity not
    imposed with translations, +1 with full; rotation parity +1). symmetry: the group of the
    last stage ('none', 'translations', 'full'); ndim: the lattice's. chosen_by: 'user' (every
    field that matters given, or no group), 'lattice' (a sign rule's positive ground state,
    or no diagonalization above :data:`~quantax_lite.exact.ground_sector.MAX_SEARCH_SITES` sites) or
    'exact diagonalization'; reason: why, in words. ground_energy: the whole space's lowest
    energy where it was diagonalized, else None; sector_energy: the sector's lowest where
    known, else None; holds_ground_state: whether the sector holds the whole space's ground
    state (None: not known)."""

    momentum: tuple | None
    spin_parity: int | None
    rotation_parity: int | None
    symmetry: str
    ndim: int
    chosen_by: str
    reason: str
    ground_energy: float | None = None
    sector_energy: float | None = None
    holds_ground_state: bool | None = None

    @property
    def fields(self) -> tuple:
        """``(momentum, spin_parity, rotation_parity)`` as the recipe's fields take them."""
        return self.momentum, self.spin_parity, self.rotation_parity

    def as_json(self) -> dict:
        """The sector in plain values: momentum the integers m_d (zeros at k = 0; None
        without translations), the parities +1 / -1 (None: not imposed)."""
        has_translations = self.symmetry in ("translations", "full")
        m = (list(self.momentum) if self.momentum is not None else [0] * self.ndim) if has_translations else None
        full = self.symmetry == "full"
        p = (self.spin_parity or 1) if full else self.spin_parity if has_translations else None
        r = (self.rotation_parity or 1) if full else None
        return {"symmetry": self.symmetry, "momentum": m, "spin_parity": p, "rotation_parity": r,
                "chosen_by": self.chosen_by, "reason": self.reason}

    def describe(self) -> str:
        """'momentum (2, 0), spin parity not imposed' and the like."""
        j = self.as_json()
        if j["momentum"] is None:
            return "none (symmetry 'none': the whole space)"
        parts = ["momentum (" + ", ".join(str(x) for x in j["momentum"]) + ")"]
        parts.append("spin parity " + ("not imposed" if j["spin_parity"] is None else f"{j['spin_parity']:+d}"))
        if j["rotation_parity"] is not None:
            parts.append(f"rotation parity {j['rotation_parity']:+d}")
        return ", ".join(parts) + f" (symmetry {self.symmetry})"


@functools.lru_cache(maxsize=1)
def whole_space_ground(system: tuple):
    """:func:`~quantax_lite.exact.ground_sector.whole_space_ground_state` of the system of
    :func:`system_key`, kept for the last system asked (the search and the reference
    energy share one diagonalization)."""
    return whole_space_ground_state(hamiltonian_of(*system))


@functools.lru_cache(maxsize=16)
def sector_lowest_energy(system: tuple, stage: str, fields: tuple) -> float:
    """The lowest energy in the sector ``fields`` of the group ``stage`` (sparse diagonalization)."""
    from quantax_lite.exact import diagonalization as exact

    lattice = system[0]
    m, p, r = fields
    group = sector_group(lattice, stage, wave_vector(lattice, m), p, r)
    return float(exact.ground_state_energy(hamiltonian_of(*system), symmetry=group))


@functools.lru_cache(maxsize=64)
def choose_sector(system: tuple, stage: str, momentum, spin_parity, rotation_parity,
                   positive: bool) -> SectorChoice:
    """:meth:`Recipe.sector_choice` of a system (:func:`system_key`), the group of the
    last stage and the sector fields as given; computed once per process for each."""
    from quantax_lite.geometry import symmetry as sym

    lattice = system[0]
    given = (momentum, spin_parity, rotation_parity)
    base = tuple(None if is_auto(v) else v for v in given)
    has_translations = stage in ("translations", "full") and lattice.pbc
    decide = (is_auto(momentum) and has_translations, is_auto(spin_parity) and stage == "full",
              is_auto(rotation_parity) and stage == "full")

    def choice(fields, by, reason, **known):
        return SectorChoice(*fields, symmetry=stage, ndim=lattice.ndim, chosen_by=by, reason=reason, **known)

    trivial = wave_vector(lattice, base[0]) is None and base[1] != -1 and base[2] != -1
    if stage == "none":
        return choice(base, "user", "symmetry 'none': the network is projected on no group, so it has no sector")
    if not any(decide):
        return choice(base, "user", "the sector fields given (the others do not apply to this group)")
    if positive:
        return choice(base, "user", "amplitude 'positive': a positive wavefunction lies in the sector of characters 1")
    rule = _sign_free(system)
    if rule:
        return choice(base, "lattice", rule + ", so it has every character 1", holds_ground_state=trivial)
    if lattice.n_sites > MAX_SEARCH_SITES:
        return choice(base, "lattice", f"no exact diagonalization above {MAX_SEARCH_SITES} sites: the sector of "
                      "characters 1 (k = 0, parities +1) for what was auto; the ground state may lie in another")
    ham = hamiltonian_of(*system)
    ground = whole_space_ground(system)
    overlaps = GroundOverlaps(ground[1], ground[2])
    ms = [base[0]]
    if decide[0]:  # the momenta that hold a ground state (translations alone: always one)
        every = momenta(lattice.shape)
        ms = [m for m in every if overlaps.weight(sym.translations(lattice, wave_vector(lattice, m))) > WEIGHT_TOL]
        ms = ms or every
    ps = [1, -1] if decide[1] else [base[1]]
    rs = [1, -1] if decide[2] else [base[2]]
    candidates = [(m, p, r) for m in ms for p in ps for r in rs]
    found = find_ground_sector(ham, candidates, lambda m, p, r: sector_group(lattice, stage, wave_vector(lattice, m),
                                                                             p, r),
                               ground=ground, overlaps=overlaps)
    m, p, r = found.sector
    fields = (None if decide[0] and wave_vector(lattice, m) is None else m,
              None if decide[1] and p == 1 else p, None if decide[2] and r == 1 else r)
    n_states = len(ground[2])
    space = "the whole Sz = 0 space" if system[1].sz_sector else "the whole space"
    if found.holds_ground_state:
        reason = (f"the ground state of {space} ({n_states} configurations, E0 = "
                  f"{found.ground_energy:.8f}) lies in this sector")
    else:
        reason = (f"no sector these fields can express holds the ground state of {space} (E0 = "
                  f"{found.ground_energy:.8f}); this one has the lowest energy of its own, {found.sector_energy:.8f}")
    return choice(fields, "exact diagonalization", reason, ground_energy=found.ground_energy,
                  sector_energy=found.sector_energy, holds_ground_state=found.holds_ground_state)

