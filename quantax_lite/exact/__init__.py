"""Exact results for small systems, to check every sampled number against.

- :mod:`.diagonalization`: sparse ground states, symmetry sectors, exact expectations
  (:func:`ground_state`, :func:`ground_state_energy`, :func:`exact_expectation`).
- :mod:`.dynamics`: real- and imaginary-time evolution by the sparse propagator
  (:func:`exact_evolution`, :func:`exact_observables`).
- :mod:`.ground_sector`: which symmetry sector holds the ground state.
- :mod:`.references`: the package's one table of reference ground-state energies.
"""
from quantax_lite.exact.diagonalization import (
    exact_expectation, exact_probabilities, ground_state, ground_state_energy, log_psi_on_states, sector_basis,
    sector_projector, symmetry_matrix,
)
from quantax_lite.exact.dynamics import exact_evolution, exact_observables
from quantax_lite.exact.references import ENERGY_PER_SITE, energy_per_site

__all__ = [
    "ground_state", "ground_state_energy", "exact_expectation", "exact_probabilities", "log_psi_on_states",
    "sector_basis", "sector_projector", "symmetry_matrix",
    "exact_evolution", "exact_observables",
    "ENERGY_PER_SITE", "energy_per_site",
]
