"""A recipe made into a run: the network from the registry with its head, phase rule and
projection, the sampler and its rule, the driver and its first state (:func:`build`); a
state carried over to another symmetry stage (:func:`switch_stage`); the plain spin basis
of a run's wavefunction (:func:`physical_basis`). Construction only: every decision comes
from the recipe's plan (:func:`~quantax_lite.recipes.plan.make_plan`, ``recipe.plan()``)."""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from quantax_lite.utils.errors import FieldError, FieldTypeError
from quantax_lite.geometry.lattice import Lattice
from quantax_lite.models import count_params, make_network
from quantax_lite.optimizer.preconditioners import spring, sr
from quantax_lite.sampler import Exchange, FullSumSampler, LocalFlip, MetropolisSampler
from quantax_lite.driver.vmc import VMC
from .fields import MAX_EXACT_SUM_STATES, seed_key
from .plan import Plan
from .resources import Resources
from .spec import Recipe
from .stages import symmetry_stages


class Run(NamedTuple):
    """What :func:`build` makes: the pieces of one run and its first state."""

    recipe: Recipe
    lattice: Lattice
    hamiltonian: Any
    symmetry: Any
    model: Any
    sampler: Any
    vmc: Any
    state: Any
    n_params: int



def make_run_network(plan: Plan | Recipe, lattice, group, kind: str):
    """The network of ``plan`` (a :class:`~quantax_lite.recipes.plan.Plan`, or a recipe:
    its ``plan()``) with the head ``kind`` and the projection on ``group``: its registered
    ``network`` with the options, readout, phase rule and initialization scale the plan
    decided, on ``lattice`` (the plan's own)."""
    if isinstance(plan, Recipe):
        plan = plan.plan()
    recipe = plan.recipe
    dtype = jnp.float32 if recipe.precision == "f32" else jnp.float64
    return make_network(lattice, group, recipe.network, dict(plan.network_options), amplitude=kind,
                        readout=plan.readout, site_phases=plan.site_phases(), final_scale=plan.init_scale,
                        sinh_offset=recipe.sinh_offset if kind == "sinh" else None, dtype=dtype)


def _param_layout(params):
    """``(tree structure, [(shape, dtype name), ...])`` of a parameter pytree (arrays or
    shape structs): what must agree for parameters to carry over between networks."""

    leaves, treedef = jax.tree_util.tree_flatten(params)
    return treedef, [(tuple(x.shape), str(x.dtype)) for x in leaves]


def _check_sector_holds_states(recipe: Recipe, stage: str, lattice, ham, group) -> None:
    """``ValueError`` naming the sector's field when ``group``'s sector holds no state of the
    magnetization sector the run samples (Sz = 0 where ``ham`` conserves Sz): a
    wavefunction with that symmetry would vanish everywhere."""
    if group is None:
        return
    total_sz = 0 if ham.conserves_sz else None
    if group.sector_dimension(total_sz) == 0:
        field = next((f for f in ("spin_parity", "rotation_parity", "momentum") if getattr(recipe, f) is not None),
                     "symmetry")
        where = "with Sz = 0 " if total_sz == 0 else ""
        raise FieldError(field, f"{field}: the sector of {stage!r} (momentum {recipe.momentum}, spin_parity "
                         f"{recipe.spin_parity}, rotation_parity {recipe.rotation_parity}) holds no state {where}on "
                         f"{lattice.name}: every wavefunction with that symmetry vanishes; choose another sector.")


def _check_stages(plan: Plan) -> None:
    """Every stage of a staged ``symmetry`` has the same amplitude kind and parameter
    structure (shapes, dtypes), so its parameters and optimizer state carry over;
    ``ValueError`` naming ``symmetry`` otherwise."""
    recipe, kind = plan.recipe, plan.amplitude
    shapes = {}
    for name, start in plan.stages:
        lattice, ham, group = plan.stage_system(start)
        _check_sector_holds_states(recipe, name, lattice, ham, group)
        try:
            model = make_run_network(plan, lattice, group, kind)
        except ValueError as err:
            raise FieldError("symmetry", f"symmetry: the stage {name!r} of {recipe.symmetry!r} cannot use the {kind} "
                             f"network of the run: {err}") from None
        s = jax.ShapeDtypeStruct((1, lattice.n_sites), jnp.int8)
        params = jax.eval_shape(model.init, jax.random.PRNGKey(0), s)
        shapes[name] = (kind, _param_layout(params))
    first, *rest = shapes.items()
    for name, found in rest:
        if found != first[1]:
            raise FieldError("symmetry", f"symmetry: {recipe.symmetry!r}: the network of {name!r} has other parameters "
                             f"(or another amplitude kind) than that of {first[0]!r}, so they cannot carry over.")


def exchange_bonds(hamiltonian, lattice) -> np.ndarray:
    """The bonds the sampler's exchange moves act on, ``(n_bonds, 2)`` int: every bond the
    Hamiltonian couples (``hamiltonian.bonds``: nearest and, for J1-J2, next-nearest
    neighbours), so a move follows each exchange term of H; ``lattice.bonds(1)`` for a
    Hamiltonian without a bond list. Which moves are proposed changes how fast the chains
    mix, never the distribution they sample."""
    bonds = getattr(hamiltonian, "bonds", None)
    if bonds is None or np.ndim(bonds) != 2 or np.shape(bonds)[0] == 0 or np.shape(bonds)[1] != 2:
        return np.asarray(lattice.bonds(1))
    return np.asarray(bonds)


def build(recipe: Recipe, iteration: int = 0, *, resources: Resources | None = None) -> Run:
    """The model, sampler, driver and first state of ``recipe`` (a :class:`Recipe` or its
    :class:`~quantax_lite.recipes.plan.Plan`) on every device, for the stage of its
    ``symmetry`` at ``iteration`` (:meth:`Recipe.symmetry_at`; the state is that of
    iteration 0 whatever the stage: :func:`switch_stage` carries a run's state over). Every
    decision is read from the plan (``recipe.plan()``); ``Run.recipe`` is its resolved recipe.
    ``resources`` (:class:`~quantax_lite.recipes.resources.Resources`): how memory is bounded;
    default the plan's (the recipe's ``chunk_size`` and ``memory_budget``).

    Raises ``ValueError`` naming ``chains`` when the chains cannot be split over the
    devices, naming ``symmetry`` when the stages' networks differ in their parameters.
    Runs with ``jax_enable_x64`` on or off: the SR solve and statistics use float64 on
    CPUs when it is on, float32 otherwise and on accelerators (:mod:`quantax_lite.utils.tuning`).
    """


    if isinstance(recipe, Recipe):
        plan = recipe.plan()  # every 'auto' decided once (the sector, network size, optimizer, ...)
    elif isinstance(recipe, Plan):
        plan = recipe
    else:
        raise FieldTypeError("recipe", f"recipe: expected a Recipe or a Plan, got {type(recipe).__name__}.")
    if resources is None:
        resources = plan.resources
    elif not isinstance(resources, Resources):
        raise FieldTypeError("resources", f"resources: expected a Resources, got {type(resources).__name__}.")
    recipe = plan.recipe
    n_devices = jax.device_count()
    chains = recipe.n_chains(n_devices)
    if recipe.sampling == "metropolis":
        if chains % n_devices:
            raise FieldError("chains", f"chains: {chains} must be a multiple of the device count {n_devices} "
                             "(the chains are split over every device).")
        for name, n in (("samples", recipe.samples), ("full_stage_samples", recipe.full_stage_samples),
                        ("eval_samples", recipe.n_eval_samples)):
            if n is not None and n % chains:
                raise FieldError(name, f"{name}: {n} must be a multiple of chains ({chains}).")
    lattice, ham, group = plan.stage_system(iteration)
    if len(plan.stages) > 1:
        _check_stages(plan)  # every stage, its sector included
    else:
        _check_sector_holds_states(recipe, recipe.symmetry, lattice, ham, group)
    model = make_run_network(plan, lattice, group, plan.amplitude)
    k_params, k_chains = jax.random.split(seed_key(recipe.seed))
    params = model.init(k_params, jnp.ones((1, lattice.n_sites), jnp.int8))
    if ham.conserves_sz:
        rule = Exchange(exchange_bonds(ham, lattice), anti_aligned=True)
        sweep = recipe.sweep_size or max(1, lattice.n_sites // 2)
    else:
        rule, sweep = LocalFlip(), recipe.sweep_size or lattice.n_sites
    fixed_chunk = resources.fixed_chunk  # the sampler's calls (one configuration per chain): an int chunk_size only
    if recipe.sampling == "exact_sum":
        # one row per orbit of this stage's group (its network is symmetric under it)
        sampler = FullSumSampler(model.apply, lattice.n_sites, total_sz=0 if ham.conserves_sz else None,
                                 symmetry=group, chunk_size=fixed_chunk,
                                 max_states=MAX_EXACT_SUM_STATES)
    else:
        sampler = MetropolisSampler(model.apply, rule, n_chains=chains, n_sites=lattice.n_sites, sweep_size=sweep,
                                    chunk_size=fixed_chunk, power=recipe.sampling_power)
    schedule = recipe.learning_rate(iteration)
    sr_momentum, diag_shift = plan.optimizer
    preconditioner = sr(diag_shift=diag_shift, diag_scale=recipe.diag_scale)
    if sr_momentum:
        preconditioner = spring(preconditioner, sr_momentum)
    n_samples = None if recipe.sampling == "exact_sum" else recipe.samples_at(iteration)
    vmc = VMC(ham, sampler, optax.sgd(schedule), n_samples, preconditioner=preconditioner,
              chunk_size=resources.chunk_size, memory_budget=resources.memory_budget)
    return Run(recipe, lattice, ham, group, model, sampler, vmc, vmc.init(k_chains, params), count_params(params))


def switch_stage(run: Run, state, *, thermalize: bool | None = None):
    """``state`` (a :class:`~quantax_lite.driver.vmc.VMCState` of the same recipe, e.g. of its
    previous symmetry stage) continued by ``run`` (:func:`build` of the stage to go on in).

    Kept: the parameters, the optimizer state (the learning-rate schedule's step count
    continues), the preconditioner state, the iteration, the chains' configurations and
    PRNG key. Recomputed with ``run.model``: what the sampler state caches of the
    wavefunction (log psi of the chains' configurations). thermalize: run the sampler's
    thermalization sweeps again before its next samples, so the chains relax to the new
    ``|psi|^2``; default: when a stage of ``run.recipe`` begins at ``state.iteration`` (the
    group has just changed). ``ValueError`` naming ``state`` when its parameters do not fit
    ``run``'s network.
    """
    if _param_layout(state.params) != _param_layout(run.state.params):
        raise FieldError("state", "state: its parameters do not fit the network of the run (another recipe's state?).")
    chains = state.sampler
    if dataclasses.is_dataclass(chains) and hasattr(chains, "log_psi"):  # Metropolis chains cache log psi
        fresh = run.sampler.init(chains.key, state.params, initial_states=chains.states)
        changes = {"log_psi": fresh.log_psi}
        if thermalize is None:
            thermalize = int(state.iteration) in {s for _, s in symmetry_stages(run.recipe) if s > 0}
        if thermalize and hasattr(chains, "thermalized"):
            changes["thermalized"] = fresh.thermalized  # False: thermalized again on the next call
        chains = dataclasses.replace(chains, **changes)
    return state._replace(sampler=chains)


def physical_basis(log_psi, hamiltonian):
    """``(log_psi, hamiltonian)`` in the plain spin basis, for observables that are not
    invariant under the basis rotation a run trains in.

    A Heisenberg / J1-J2 Hamiltonian with ``marshall_sign`` is ``U H U``, ``U = diag(u)``,
    ``u(s) = prod_{i in sublattice 1} s_i``: its wavefunction is ``u(s) psi(s)``, and the
    exchange part of ``<S_i . S_j>`` for ``i``, ``j`` on different sublattices changes sign in
    that basis. Returned then: ``log_psi(params, s) + i pi [u(s) = -1]`` (complex) and the
    Hamiltonian without the rotation (same energies). Otherwise both unchanged (the
    transverse-field Ising rotation ``prod_i sigma^z_i`` flips every ``S^x``, ``S^y``, which
    leaves ``S_i . S_j`` as it is).
    """
    if not getattr(hamiltonian, "marshall_sign", False):
        return log_psi, hamiltonian

    sub = tuple(int(i) for i in np.nonzero(np.asarray(hamiltonian.lattice.sublattice) == 1)[0])
    try:  # one function per wavefunction and sublattice: its compiled programs are reused
        plain = _unrotated(log_psi, sub)
    except TypeError:  # an unhashable log_psi
        plain = _unrotated.__wrapped__(log_psi, sub)
    return plain, dataclasses.replace(hamiltonian, marshall_sign=False)


@functools.lru_cache(maxsize=8)
def _unrotated(log_psi, sub: tuple):
    """``log_psi + i pi [prod_{i in sub} s_i = -1]``, jitted."""

    index = jnp.asarray(sub, jnp.int32)

    def plain_log_psi(params, s):
        lp = log_psi(params, s)
        minus = jnp.prod(jnp.asarray(s)[..., index].astype(jnp.int32), axis=-1) < 0
        return lp + jnp.where(minus, 1j * jnp.pi, 0.0).astype(jnp.result_type(lp.dtype, jnp.complex64))

    return jax.jit(plain_log_psi)

