"""Time evolution of a neural quantum state by the time-dependent variational principle.

One concept per module: :mod:`.equation` (S θ̇ = -i F or -F from the chunked Jacobian and
the local energies), :mod:`.regularization` (:class:`Shift`, :class:`PseudoInverse`,
:class:`SignalToNoise`), :mod:`.integrators` (:class:`Euler`, :class:`Heun`, :class:`RK4`,
:class:`Adaptive`), :mod:`.tdvp` (:class:`TDVP`, :class:`EvolutionState`: the step),
:mod:`.loop` (:func:`evolve`, :class:`EvolutionDiverged`, :class:`EvolutionStalled`).

Use::

    tdvp = TDVP(hamiltonian, FullSumSampler(log_psi, n_sites), integrator=RK4())
    state = tdvp.init(params, jax.random.key(0), dt=0.01)
    state, records = evolve(tdvp, state, t_end=2.0)

Exact dynamics to compare with: :func:`quantax_lite.exact.exact_evolution`.
"""
from .equation import TDVPEquation, residual, s_norm, tdvp_equation
from .integrators import RK4, Adaptive, Euler, Heun, Tableau
from .loop import EvolutionDiverged, EvolutionStalled, evolve, info_to_record
from .regularization import PseudoInverse, Shift, SignalToNoise
from .tdvp import TDVP, EvolutionState

__all__ = [
    "TDVP", "EvolutionState", "evolve", "EvolutionDiverged", "EvolutionStalled", "info_to_record",
    "Euler", "Heun", "RK4", "Adaptive", "Tableau",
    "Shift", "PseudoInverse", "SignalToNoise",
    "TDVPEquation", "tdvp_equation", "s_norm", "residual",
]
