"""Training on small frustrated clusters reaches the exact energy.

The driver is the recipe's (its network, SR and learning-rate schedule) with the
exact sampler (independent draws from |psi|^2 over the Sz = 0 sector), so the test
isolates the optimisation from Markov-chain noise. The reference is sparse exact
diagonalization without any symmetry; the variational energy is the exact expectation
of the trained state (a sum over every configuration).

Both 12-site ground states (triangular 4x3 at k = b1/2, kagome 2x2 at k = 0) are odd
under the rotation by pi of their point group. Projected on that sector (the recipe's
``rotation_parity=-1``), a short run from a random start converges; in the sector of
the translations alone (about 10x more states) it stalls far above the ground state
(kagome 2x2: about -3.7 against -5.445 after 100 steps at learning rates 0.02 to 0.3;
see docs/physics.md).
"""
import jax
import jax.numpy as jnp
import optax
import pytest

from quantax_lite import Recipe
from quantax_lite.exact.diagonalization import exact_expectation, ground_state_energy
from quantax_lite.operators.hamiltonian import Heisenberg
from quantax_lite.optimizer.preconditioners import sr
from quantax_lite.recipes import make_run_network as _network
from quantax_lite.sampler import ExactSampler
from quantax_lite.geometry.symmetry import point_group, product, rotation_characters, translations
from quantax_lite.driver.vmc import VMC, run


def odd_under_rotation_by_pi(lattice, momentum):
    """translations(k) x point group in the irrep odd under the smallest rotation
    (``rotation_characters(lattice, -1)``; the recipe's ``symmetry="full",
    rotation_parity=-1`` without spin inversion, half the images)."""
    points = point_group(lattice, "full", characters=rotation_characters(lattice, -1))
    return product(translations(lattice, momentum), points)


@pytest.mark.slow
@pytest.mark.parametrize("name, momentum, depth, steps, rule, readout, tol", [
    ("triangular:4x3", (2, 0), 2, 40, "none", "origin", 1e-2),
    ("triangular:4x3", (2, 0), 2, 80, "none", "plane_wave", 2e-2),
    ("kagome:2x2", (0, 0), 1, 60, "none", "plane_wave", 1e-2),
    ("kagome:2x2", (0, 0), 1, 60, "120", "plane_wave", 1e-2)])
def test_short_run_reaches_the_exact_energy(name, momentum, depth, steps, rule, readout, tol):
    """A short run reaches the exact ground energy within 1% (2% with the plane-wave
    readout at k = b1/2; the next state of the sector is 26% (triangular) and 28%
    (kagome) higher), and the last step's Monte Carlo estimate agrees with it within 3
    error bars or that tolerance: from a random start (the recipe's init for frustrated
    lattices without a phase rule), and from the q = 0 state (the kagome lattice's
    120-degree rule, a nearly uniform network)."""
    recipe = Recipe(lattice=name, momentum=momentum, channels=4, depth=depth, precision="f64", lr=0.1,
                    diag_shift=1e-3, samples=128, phase_rule=rule, momentum_readout=readout)
    lattice, ham, _ = recipe.system()
    group = odd_under_rotation_by_pi(lattice, recipe.sector_momentum(lattice))
    e0 = ground_state_energy(Heisenberg(lattice))
    assert abs(ground_state_energy(ham, symmetry=group) - e0) < 1e-9  # the ground state is in this sector
    kind = recipe.amplitude_kind(ham)
    model = _network(recipe, lattice, group, kind)
    params = model.init(jax.random.PRNGKey(0), jnp.ones((1, lattice.n_sites), jnp.int8))
    e_start = exact_expectation(ham, model.apply, params, total_sz=0)
    sampler = ExactSampler(model.apply, lattice.n_sites, total_sz=0, n_chains=8)
    schedule = optax.exponential_decay(recipe.lr, transition_steps=recipe.lr_half_life, decay_rate=0.5,
                                       end_value=recipe.lr / 10)
    vmc = VMC(ham, sampler, optax.sgd(schedule), recipe.samples, preconditioner=sr(diag_shift=recipe.diag_shift))
    state, log = run(vmc, vmc.init(jax.random.PRNGKey(1), params), steps, progress=False)
    e = exact_expectation(ham, model.apply, state.params, total_sz=0)
    if rule == "none":
        assert e_start > e0 + 1.0  # a random start, far from the ground state
    else:
        assert e_start < 0  # the ordered state the rule describes
    assert e0 - 1e-9 < e < e0 + tol * abs(e0), (e, e0)
    last = log[-1]  # the last step's Monte Carlo estimate
    assert abs(last["energy"] - e0) <= max(3 * last["energy_error"], tol * abs(e0))
