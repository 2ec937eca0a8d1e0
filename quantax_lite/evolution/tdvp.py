"""Time evolution of a variational state by the time-dependent variational principle.

:class:`TDVP` holds the choices (Hamiltonian, sampler or exact sums, integrator,
regularization, real or imaginary time); its :meth:`TDVP.init` makes an
:class:`EvolutionState` and :meth:`TDVP.step` advances it by one accepted step, one
compiled program. The same sampler batch, local energies and chunked Jacobian as a
ground-state step (:mod:`quantax_lite.driver.vmc`) give the equation of :mod:`.equation`.

Units: time in inverse units of the Hamiltonian's energy (hbar = 1): a transverse-field
Ising model in Pauli units evolves with ``exp(-i t H)`` for H in those units.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from quantax_lite.utils import tuning
from quantax_lite.utils.validate import finite_number, positive_int
from quantax_lite.optimizer.log_derivatives import jacobian
from quantax_lite.models import derivative_form
from quantax_lite.operators.hamiltonian import SpinHamiltonian, make_local_energy
from quantax_lite.sampler import Sampler
from quantax_lite.sampler.full_sum import row_local_energies
from quantax_lite.optimizer.stochastic_reconfiguration import unravel_like
from quantax_lite.stats.chains import importance_weights, sample_statistics
from quantax_lite.utils import replicate
from .equation import residual, s_norm, tdvp_equation
from .integrators import RK4, Adaptive, Euler, Heun, next_dt, rk_stages
from .regularization import PseudoInverse, Shift, SignalToNoise

__all__ = ["TDVP", "EvolutionState"]


class EvolutionState(NamedTuple):
    """Everything an evolution needs to continue, bit for bit (a pytree; save it with
    :func:`quantax_lite.driver.checkpoint.save_checkpoint` and load it into ``tdvp.init(...)``'s
    state with :func:`~quantax_lite.driver.checkpoint.load_checkpoint`).

    t: the time reached (wide-dtype scalar; time units). dt: the next step (fixed-step
      integrators: the step; adaptive: the proposal). params: the network parameters.
    sampler: the sampler's state (Markov chains and their PRNG key; with exact sums an
      unused stand-in). step: int32, accepted steps so far. rejected: int32, steps the
      adaptive control rejected so far.
    """

    t: jax.Array
    dt: jax.Array
    params: Any
    sampler: Any
    step: jax.Array
    rejected: jax.Array


def _params_kind(params) -> bool:
    """True for complex (holomorphic) parameters, False for real ones (TypeError for a mix)."""
    leaves = jax.tree_util.tree_leaves(params)
    if not leaves:
        raise ValueError("params: expected a pytree with array leaves, got none")
    kinds = {bool(jnp.iscomplexobj(x)) for x in leaves}
    if len(kinds) > 1:
        raise TypeError("params: expected all real or all complex (holomorphic) leaves, got a mix; store a "
                        "complex parameter as two real ones")
    return kinds.pop()


@dataclasses.dataclass(frozen=True, eq=False)
class TDVP:
    """Real- or imaginary-time evolution of ``sampler.log_psi`` under ``hamiltonian``.

    hamiltonian: the :class:`~quantax_lite.operators.hamiltonian.SpinHamiltonian` of the evolution.
    sampler: a :class:`~quantax_lite.sampler.Sampler` of the wavefunction (Metropolis:
      samples, of |psi|^(2a) with ``MetropolisSampler(power=a)``, each then weighing
      |psi|^(2 - 2a); :class:`~quantax_lite.sampler.FullSumSampler`: exact sums, no noise).
    n_samples: samples per evaluation of the equation (a multiple of ``sampler.n_chains``);
      None (or the rows) with exact sums.
    integrator: :class:`Euler`, :class:`Heun`, :class:`RK4` (fixed steps) or
      :class:`Adaptive` (default ``RK4()``).
    regularization: :class:`PseudoInverse` (default, ``rcond=1e-10``), :class:`Shift` or
      :class:`SignalToNoise`.
    imaginary: imaginary time, ``d psi / d tau = -(H - E) psi`` (toward the ground state),
      instead of real time, ``d psi / dt = -i H psi``.
    chunk_size: samples per device per chunk of the local energies and the Jacobian
      (None: all at once).

    The parameters may be real (a real network, complex log psi: the real part of the
    equation is solved) or all complex (a holomorphic log psi: the complex equation).
    The speed choices in force when the TDVP is built (:mod:`quantax_lite.utils.tuning`) are
    those of its compiled step.
    """

    hamiltonian: SpinHamiltonian
    sampler: Sampler
    n_samples: int | None = None
    integrator: Any = dataclasses.field(default_factory=RK4)
    regularization: Any = dataclasses.field(default_factory=PseudoInverse)
    imaginary: bool = False
    chunk_size: int | None = None

    def __post_init__(self):
        if not isinstance(self.hamiltonian, SpinHamiltonian):
            raise TypeError(f"hamiltonian: expected a SpinHamiltonian, got {type(self.hamiltonian).__name__}")
        if not isinstance(self.sampler, Sampler):
            raise TypeError(f"sampler: expected a Sampler (MetropolisSampler, FullSumSampler, ...), got "
                            f"{type(self.sampler).__name__}")
        if self.sampler.n_sites != self.hamiltonian.n_sites:
            raise ValueError(f"sampler: has {self.sampler.n_sites} sites, the Hamiltonian {self.hamiltonian.n_sites}")
        if self.exact:
            rows = self.sampler.n_rows
            if self.n_samples is None:
                object.__setattr__(self, "n_samples", rows)
            elif self.n_samples != rows:
                raise ValueError(f"n_samples: exact sums have {rows} rows, got {self.n_samples!r}; pass None")
        elif self.n_samples is None:
            raise ValueError("n_samples: expected a positive int (samples per evaluation), got None")
        positive_int(self.n_samples, "n_samples")
        if self.n_samples % self.sampler.n_chains:
            raise ValueError(f"n_samples: expected a multiple of the sampler's {self.sampler.n_chains} chains, "
                             f"got {self.n_samples}")
        if not isinstance(self.integrator, (Euler, Heun, RK4, Adaptive)):
            raise TypeError(f"integrator: expected Euler(), Heun(), RK4() or Adaptive(...), got {self.integrator!r}")
        if not isinstance(self.regularization, (Shift, PseudoInverse, SignalToNoise)):
            raise TypeError(f"regularization: expected Shift(...), PseudoInverse(...) or SignalToNoise(...), got "
                            f"{self.regularization!r}")
        if not isinstance(self.imaginary, (bool, np.bool_)):
            raise TypeError(f"imaginary: expected a bool, got {self.imaginary!r}")
        if self.chunk_size is not None:
            positive_int(self.chunk_size, "chunk_size")
        object.__setattr__(self, "_tuning", tuning.current())

    @property
    def choices(self) -> tuning.Tuning:
        """The speed choices of the compiled step (those in force when the TDVP was built)."""
        return self._tuning

    @property
    def sampling_power(self) -> float:
        """The power ``a`` of the sampled |psi|^(2a) (1: |psi|^2; the sampler's ``power``).
        Below 1 each sample weighs |psi|^(2 - 2a) in the equation and the energy: the
        configurations where |psi| is small, which |psi|^2 rarely draws, are seen."""
        return float(getattr(self.sampler, "power", 1.0))

    @property
    def exact(self) -> bool:
        """Whether the sampler gives exact sums (rows with weights) instead of samples."""
        return bool(getattr(self.sampler, "exact", False))

    # -- state -------------------------------------------------------------------

    def init(self, params: Any, key: jax.Array, *, dt: float, t0: float = 0.0) -> EvolutionState:
        """A fresh state at time ``t0`` with step ``dt`` (> 0; the first proposal of an
        adaptive integrator, which must lie in its ``[dt_min, dt_max]``) and the sampler
        started from ``key``; ``t`` and ``dt`` in the wide dtype of the TDVP's own speed
        choices (:attr:`choices`: float32 under an accelerator's), as its step computes them."""
        with tuning.using(self._tuning):
            return self._init(params, key, dt=dt, t0=t0)

    def _init(self, params: Any, key: jax.Array, *, dt: float, t0: float) -> EvolutionState:
        dt = finite_number(dt, "dt", above=0)
        t0 = finite_number(t0, "t0")
        if isinstance(self.integrator, Adaptive) and not self.integrator.dt_min <= dt <= self.integrator.dt_max:
            raise ValueError(f"dt: expected a step in the integrator's [dt_min, dt_max] = "
                             f"[{self.integrator.dt_min:g}, {self.integrator.dt_max:g}], got {dt!r}")
        _params_kind(params)
        mesh = self.sampler.resolved_mesh()
        wide = tuning.wide_dtype()
        params = replicate(params, mesh)
        return EvolutionState(
            t=replicate(jnp.asarray(t0, wide), mesh), dt=replicate(jnp.asarray(dt, wide), mesh), params=params,
            sampler=self.sampler.init(key, params), step=replicate(jnp.zeros((), jnp.int32), mesh),
            rejected=replicate(jnp.zeros((), jnp.int32), mesh),
        )

    # -- the equation --------------------------------------------------------------

    @functools.cached_property
    def _hamiltonian_rows(self):
        """H within the exact sums' rows (numpy), where the sampler offers it; else None."""
        if not self.exact or not hasattr(self.sampler, "hamiltonian_rows"):
            return None
        return self.sampler.hamiltonian_rows(self.hamiltonian)

    @functools.cached_property
    def _local_energies(self):
        return make_local_energy(self.hamiltonian, self.sampler.log_psi, chunk_size=self.chunk_size,
                                 mesh=self.sampler.resolved_mesh(), jit=False)

    def equation(self, params: Any, sampler_state: Any):
        """The TDVP equation at ``params`` (traceable): ``(TDVPEquation, e_loc (N,), weights
        (N,) or None, new sampler state)``, from fresh samples (or the exact rows with their
        weights)."""
        holomorphic = _params_kind(params)
        if self.exact:
            samples, log_psi_s, weights = self.sampler.probabilities(params)
            chains = sampler_state
        else:
            samples, log_psi_s, chains = self.sampler.sample(sampler_state, params, self.n_samples)
            # samples of |psi|^(2a), a < 1: each weighs |psi|^(2 - 2a) (self-normalized)
            weights = importance_weights(log_psi_s, self.sampling_power) if self.sampling_power != 1.0 else None
        if self._hamiltonian_rows is not None:
            index, values = self._hamiltonian_rows
            e_loc = row_local_energies(index, np.asarray(values, tuning.wide_dtype(values.dtype)), log_psi_s)
        else:
            e_loc = self._local_energies(params, samples, log_psi_s)
        log_psi = self.sampler.log_psi if holomorphic else derivative_form(self.sampler.log_psi)
        jac = jacobian(log_psi, params, samples, chunk_size=self.chunk_size, mesh=self.sampler.resolved_mesh(),
                       holomorphic=holomorphic)
        eq = tdvp_equation(jac, e_loc, weights=weights, real_params=not holomorphic, imaginary=bool(self.imaginary),
                           exact=self.exact)
        return eq, e_loc, weights, chains

    def _derivative(self, template):
        """``f(y, t, chains) -> (θ̇ (P,), aux, chains)`` on flat parameters like ``template``."""

        def f(y, t, chains):
            params = unravel_like(y, template)
            eq, e_loc, weights, chains = self.equation(params, chains)
            theta_dot, info = self.regularization.solve(eq)
            stats = sample_statistics(e_loc, self.sampler.n_chains, weights, exact=self.exact)
            aux = dict(energy=eq.energy, energy_error=stats.error_of_mean, variance=eq.variance,
                       residual=residual(eq, theta_dot), kept=info["kept"])
            if self.integrator.adaptive:  # the step's error is measured in the S metric
                aux["metric"] = eq.metric()
            return theta_dot, aux, chains

        return f

    # -- one step ------------------------------------------------------------------

    def step(self, state: EvolutionState, max_dt=None) -> tuple[EvolutionState, dict]:
        """One accepted step from ``state``, at most ``max_dt`` long (time units; default no
        bound): ``(new state, info)``. ``info`` (scalars): at the step's start ``t`` the
        energy (complex), its error (0 with exact sums), variance and the TDVP residual
        (:func:`.equation.residual`), ``kept`` (directions the regularization kept); then
        ``dt`` (the step taken), ``error`` (adaptive: the accepted error / tol, else 0),
        ``attempts`` and ``finite`` (energy, step and parameters all finite). A step that
        is not finite is returned as computed: the caller keeps the state before it
        (:func:`~quantax_lite.evolution.evolve` does)."""
        cap = jnp.asarray(np.inf if max_dt is None else max_dt, state.dt.dtype)
        return self._step_fn(state, cap)

    @functools.cached_property
    def _step_fn(self):
        self._hamiltonian_rows  # noqa: B018  (numpy, built before tracing)
        integrator = self.integrator
        tableau = integrator.tableau

        def program(state: EvolutionState, cap):
            y, _ = ravel_pytree(state.params)
            f = self._derivative(state.params)
            aux_shape = jax.eval_shape(f, y, state.t, state.sampler)[1]
            zeros = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), aux_shape)

            def attempt(dt, chains):
                y_new, y_low, aux, chains = rk_stages(f, y, state.t, dt, chains, tableau, zeros)
                err = s_norm(aux["metric"], y_new - y_low) / integrator.tol if integrator.adaptive else jnp.zeros((), dt.dtype)
                return y_new, aux, chains, err

            if not integrator.adaptive:
                dt = jnp.minimum(state.dt, cap)
                y_new, aux, chains, err = attempt(dt, state.sampler)
                attempts, rejected, dt_next = jnp.ones((), jnp.int32), state.rejected, state.dt
            else:
                def body(carry):
                    dt, _, _, chains, _, n, _ = carry
                    y_new, aux, chains, err = attempt(dt, chains)
                    at_min = dt <= integrator.dt_min * (1 + 1e-12)
                    accepted = (err <= 1.0) | at_min | (n + 1 >= integrator.max_attempts)
                    proposal = next_dt(integrator, dt, err)
                    dt_out = jnp.where(accepted, dt, jnp.minimum(proposal, cap))
                    return dt_out, y_new, aux, chains, err, n + 1, accepted

                def cond(carry):
                    return jnp.logical_not(carry[-1])

                dt0 = jnp.minimum(state.dt, cap)
                y0, aux0, chains0, err0 = jax.eval_shape(attempt, dt0, state.sampler)
                init = (dt0, jnp.zeros(y0.shape, y0.dtype), jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), aux0),
                        state.sampler, jnp.zeros(err0.shape, err0.dtype), jnp.zeros((), jnp.int32),
                        jnp.zeros((), bool))
                dt, y_new, aux, chains, err, attempts, _ = jax.lax.while_loop(cond, body, init)
                rejected = state.rejected + attempts - 1
                # a first-attempt step cut short by ``cap`` (the end of a run) keeps the proposal it had
                capped = (attempts == 1) & (cap < state.dt)
                dt_next = jnp.where(capped, state.dt, next_dt(integrator, dt, err))
            params = unravel_like(y_new, state.params)
            finite = (jnp.isfinite(aux["energy"]) & jnp.all(jnp.isfinite(y_new)) & jnp.isfinite(err))
            new = EvolutionState(t=state.t + dt, dt=dt_next.astype(state.dt.dtype), params=params, sampler=chains,
                                 step=state.step + 1, rejected=rejected)
            info = {k: v for k, v in aux.items() if k != "metric"}
            info.update(t=state.t, dt=dt, error=err, attempts=attempts, finite=finite)
            return new, info

        def traced(state, cap):
            with tuning.using(self._tuning):
                return program(state, cap)

        return jax.jit(traced)
