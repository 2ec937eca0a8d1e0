"""Sampling spin configurations s ~ |psi(s)|^2.

Contracts (:mod:`quantax_lite.sampler.base`, where they are written out in full):

- :class:`Sampler`: what a driver relies on. Attributes ``log_psi``, ``n_sites``,
  ``n_chains``, ``mesh``; ``init(key, params, initial_states=None) -> state``;
  ``sample(state, params, n_samples) -> (samples, log_psi, new_state)`` with samples
  int8 (n_samples, n_sites) chain-major and log_psi (n_samples,); ``resolved_mesh()``,
  the mesh it runs on. The state is a :class:`ChainState`: ``states`` int8
  (n_chains, n_sites), ``n_accepted`` and ``n_proposed`` int32 (n_chains,).
- :class:`TransitionRule`: what the Metropolis sampler calls. ``propose(key, states) ->
  (proposed, log_proposal_ratio)`` (``log q(s' -> s) - log q(s -> s')``, (n_chains,)
  float32, 0 for symmetric rules), ``conserves_sz``, ``symmetric``, ``check(n_sites)``.

Samplers: :class:`MetropolisSampler` (many Markov chains in parallel, sharded over the
device mesh, the whole sweep loop jitted; ``metropolis.py``) and :class:`ExactSampler`
(independent draws by enumerating a sector, for small systems and tests; ``exact.py``);
:class:`FullSumSampler` (no draws: every configuration of a sector, one per symmetry
orbit, with its exact weight in ``state.probabilities``, for exact sums in the driver;
``full_sum.py``).
Rules, one per module under ``rules/``: :class:`LocalFlip`, :class:`Exchange`,
:class:`Mixture`.

Sample layout: ``samples`` has shape (n_samples, n_sites), **chain-major**: rows
``c * n_sweeps : (c + 1) * n_sweeps`` are the successive recorded states of chain c.
``per_chain(x, n_chains)`` reshapes any per-sample array to (n_chains, n_sweeps, ...),
the layout :func:`quantax_lite.stats.chains.statistics` takes. Chain-major order keeps each
device's chains contiguous, so the flat sample batch stays sharded over the mesh
without communication.

Sectors: ``total_sz="auto"`` is the default of both samplers, resolved by
:func:`quantax_lite.hilbert.configurations.resolve_total_sz`: the Metropolis sampler from
``rule.conserves_sz`` (0 or 1/2 for a rule that conserves Sz, the whole space for one
that changes it), the exact sampler as the whole space (it knows no Hamiltonian).

Configurations are int8 arrays of +1 / -1 (+1 = up), shape (batch, n_sites).
"""
from .base import ChainState, Sampler, TransitionRule, acceptance_rate, per_chain
from .exact import ExactSampler, ExactSamplerState
from .full_sum import FullSumSampler, FullSumState
from .metropolis import MetropolisSampler, SamplerState, of_psi_squared
from .rules import Exchange, LocalFlip, Mixture

__all__ = [
    "Sampler",
    "ChainState",
    "TransitionRule",
    "LocalFlip",
    "Exchange",
    "Mixture",
    "SamplerState",
    "MetropolisSampler",
    "of_psi_squared",
    "ExactSamplerState",
    "ExactSampler",
    "FullSumState",
    "FullSumSampler",
    "acceptance_rate",
    "per_chain",
]
