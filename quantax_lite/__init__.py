"""quantax_lite: neural quantum states in JAX, built around one batching engine.

The package is a folder per concept, bottom up (a folder imports only from those above it
in this list): ``utils`` (checks, errors, speed choices, :func:`chunk_map`, meshes),
``hilbert`` (configurations), ``geometry`` (lattices, symmetry groups), ``operators``
(Hamiltonians, local operators, sign rules), ``exact`` (exact diagonalization and
dynamics, reference energies), ``hamiltonians`` (the named models), ``models``
(networks), ``sampler``, ``stats``, ``optimizer`` (Jacobians, SR, preconditioners),
``observables`` (and one Lanczos step), ``driver`` (VMC, checkpoints, run folders),
``evolution`` (TDVP), ``recipes`` (a complete run from physics choices) and ``cli`` (the
``quantax-lite`` command).

The names most used are re-exported here, by topic:

- batching and devices: :func:`chunk_map`, :func:`make_mesh`, :func:`make_precompile_mesh`
- lattices and symmetry: :class:`Lattice`, :func:`Chain`, :func:`Square`, :class:`Symmetry`,
  :func:`translations`, :func:`point_group`, :func:`spin_inversion`, :func:`full_symmetry`;
  lattices with a basis: :func:`Triangular`, :func:`Honeycomb`, :func:`Kagome`,
  :func:`allowed_momenta`, :func:`point_group_kind`
- configurations: :func:`random_states`, :func:`all_states`
- Hamiltonians: :class:`SpinHamiltonian` (the contract), :class:`BondHamiltonian`,
  :class:`Heisenberg`, :class:`TransverseFieldIsing`, :func:`local_energy`,
  :func:`make_local_energy`
- exact results: :func:`ground_state`, :func:`ground_state_energy`, :func:`exact_expectation`
- networks: :func:`make_conv_nqs`, :func:`make_rbm_nqs`, :class:`ConvResNet`, :class:`Symmetrized`,
  :class:`RBM`, :func:`count_params`
- sampling and statistics: :class:`Sampler`, :class:`TransitionRule` (the contracts),
  :class:`MetropolisSampler`, :class:`ExactSampler`, :class:`FullSumSampler` (exact sums
  instead of samples), :class:`LocalFlip`, :class:`Exchange`, :class:`Mixture`,
  :func:`statistics`, :func:`exact_statistics`
- observables: :class:`LocalOperator` and :func:`sx`, :func:`sy`, :func:`sz`, :func:`sp`,
  :func:`sm`, :func:`spin_dot`, :func:`bond_sum`, :func:`spin_dot_sum`; :func:`expect`,
  :func:`spin_correlations`, :func:`structure_factor`, :func:`correlation_vs_distance`,
  :func:`dimer_correlations`, :func:`measure`
- optimization: :func:`jacobian`, :func:`make_jacobian`, :func:`sr_direction`,
  :func:`natural_gradient`, :class:`Preconditioner` (its instances ``sr``, ``spring``,
  ``gradient`` in :mod:`quantax_lite.optimizer.preconditioners`)
- the recipe: :class:`Recipe`, :func:`build` (a complete, fast run from physics choices),
  :func:`load_run` (a command-line run rebuilt from its folder); :func:`save_params`,
  :func:`load_params` (a trained wavefunction on disk)
- the driver: :class:`VMC` (``chunk_size="auto"``: chunks within a memory budget,
  :class:`ChunkSizes`), :func:`run`, :class:`Diverged`, :func:`energy_estimate`,
  :func:`save_checkpoint`, :func:`load_checkpoint`, :func:`load_latest_checkpoint`,
  :func:`lock_run_folder`
"""
from quantax_lite.exact.diagonalization import exact_expectation, ground_state, ground_state_energy
from quantax_lite.hilbert.configurations import all_states, random_states
from quantax_lite.optimizer.log_derivatives import jacobian, make_jacobian
from quantax_lite.geometry.lattice import Chain, Lattice, Square
from quantax_lite.geometry.lattice import Honeycomb, Kagome, Triangular
from quantax_lite.models import RBM, ConvResNet, Symmetrized, count_params, make_conv_nqs, make_rbm_nqs
from quantax_lite.models import kernel_reach
from quantax_lite.operators.hamiltonian import (
    BondHamiltonian, Heisenberg, SpinHamiltonian, TransverseFieldIsing, local_energy, make_local_energy,
)
from quantax_lite.sampler import Exchange, ExactSampler, LocalFlip, MetropolisSampler, Mixture, Sampler, TransitionRule, per_chain
from quantax_lite.sampler import FullSumSampler
from quantax_lite.optimizer.preconditioners import Preconditioner
from quantax_lite.recipes import LoadedRun, Recipe, build, load_run
from quantax_lite.recipes import switch_stage
from quantax_lite.optimizer.update import natural_gradient
from quantax_lite.optimizer.stochastic_reconfiguration import sr_direction
from quantax_lite.stats.chains import Stats, exact_statistics, statistics
from quantax_lite.operators.local_operators import LocalOperator, bond_sum, sm, sp, spin_dot, spin_dot_sum, sx, sy, sz
from quantax_lite.observables import (
    correlation_vs_distance, dimer_correlations, expect, measure, spin_correlations, structure_factor,
)
from quantax_lite.geometry.symmetry import Symmetry, full_symmetry, point_group, product, spin_inversion, translations
from quantax_lite.geometry.symmetry import allowed_momenta, point_group_kind
from quantax_lite.geometry.symmetry import little_group, rotation_characters
from quantax_lite.utils import chunk_map, make_mesh, make_precompile_mesh
from quantax_lite.driver.run_folder import RunFolderBusy, lock_run_folder
from quantax_lite.driver.wavefunction_io import load_params, save_params
from quantax_lite.driver.checkpoint import load_checkpoint, load_latest_checkpoint, save_checkpoint
from quantax_lite.driver.vmc import VMC, ChunkSizes, Diverged, VMCState, energy_estimate, run

__version__ = "0.1.0"

__all__ = [
    "chunk_map", "make_mesh", "make_precompile_mesh",
    "Lattice", "Chain", "Square",
    "Triangular", "Honeycomb", "Kagome", "allowed_momenta", "point_group_kind",
    "little_group", "rotation_characters",
    "Symmetry", "translations", "point_group", "spin_inversion", "product", "full_symmetry",
    "random_states", "all_states",
    "SpinHamiltonian", "BondHamiltonian", "Heisenberg", "TransverseFieldIsing", "local_energy",
    "make_local_energy",
    "ground_state", "ground_state_energy", "exact_expectation",
    "make_conv_nqs", "make_rbm_nqs", "ConvResNet", "Symmetrized", "RBM", "count_params", "kernel_reach",
    "Sampler", "TransitionRule", "MetropolisSampler", "ExactSampler", "FullSumSampler", "LocalFlip", "Exchange", "Mixture",
    "per_chain",
    "Stats", "statistics", "exact_statistics",
    "LocalOperator", "sx", "sy", "sz", "sp", "sm", "spin_dot", "bond_sum", "spin_dot_sum",
    "expect", "spin_correlations", "structure_factor", "correlation_vs_distance", "dimer_correlations", "measure",
    "jacobian", "make_jacobian", "sr_direction", "natural_gradient",
    "Preconditioner", "Recipe", "build",
    "VMC", "VMCState", "ChunkSizes", "run", "Diverged", "energy_estimate", "save_checkpoint", "load_checkpoint",
    "load_latest_checkpoint", "lock_run_folder", "RunFolderBusy",
    "load_run", "LoadedRun", "save_params", "load_params",
    "switch_stage",
]
