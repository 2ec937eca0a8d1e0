"""Accuracy guard: short trainings by exact sums that must reach a small relative error.

With ``sampling="exact_sum"`` every step sums over one configuration per orbit of the full
symmetry group with its exact weight (112 rows for the 12,870 configurations of 4x4 at
Sz = 0), so the energy, variance and SR step have no sampling noise and a training is
deterministic: the error it reaches after a fixed number of steps is a property of the
library (network, symmetrization, exact sums, SR solve, learning-rate schedule), not of
luck. Each test trains a float64 network for a fixed number of steps and asserts

* the relative error of the trained state's energy, ``<psi|H|psi>`` summed densely over
  every configuration of the sector (independent of the exact-sum machinery), is below
  about 10x the value measured when the test was written: losing an order of magnitude
  of accuracy fails;
* that energy, the driver's own final estimate and every step's logged energy lie above
  the exact ground-state energy (variational) up to rounding;
* the driver's final estimate equals the dense sum, and the recipe's reference energy
  (diagonalization in the network's symmetry sector) equals the global one.

Measured on a shared 2-core CPU (seed 0, deterministic: the same digits on every run):
4x4 Heisenberg 3.24e-7 after 100 steps, 4x4 J1-J2 (J2 = 0.5) 4.97e-7 after 200 steps
(longer runs of the same settings go on falling, to 5e-15 and 2e-10 after 800 steps: no
plateau within reach, so the bound guards how much accuracy a fixed budget of steps buys). About
20-35 s per test, 50-70 s for the file (warm / cold compilation cache, with the machine
under load from other jobs).
"""
import math

import numpy as np
import pytest

from quantax_lite.exact.diagonalization import exact_expectation, ground_state_energy
from quantax_lite.recipes import Recipe, build
from quantax_lite.driver.vmc import energy_estimate, run

# name -> (recipe fields, steps, measured relative error, asserted bound)
CASES = {
    # positive network (Marshall sign), 2424 parameters, lr 0.05 halving every 100 steps
    "4x4 heisenberg": (dict(lattice="4x4", hamiltonian="heisenberg"), 100, 3.2e-7, 3e-6),
    # signed network (learned sign), 2432 parameters, the same schedule
    "4x4 j1j2 J2=0.5": (dict(lattice="4x4", hamiltonian="j1j2", J2=0.5), 200, 5.0e-7, 5e-6),
}
COMMON = dict(symmetry="full", sampling="exact_sum", precision="f64", lr=0.05, seed=0)
ROUNDING = 1e-12  # relative: float64 sums of a few thousand terms


# 100-200 exact-sum steps each; an exact-sum training to the exact energy by default:
# test_network_registry's trainings, test_vit's, test_accelerator_precision's chain
@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_exact_sum_training_reaches_its_measured_accuracy(name):
    fields, steps, measured, bound = CASES[name]
    assert bound <= 10.5 * measured
    recipe = Recipe(**fields, **COMMON)
    r = build(recipe)
    e0 = ground_state_energy(r.hamiltonian)
    assert recipe.reference_energy(r.lattice, r.hamiltonian) == pytest.approx(e0, rel=1e-10, abs=0)

    state, records = run(r.vmc, r.state, steps, progress=False)
    assert [rec["iteration"] for rec in records] == list(range(1, steps + 1))
    assert all(rec["energy_error"] == 0 for rec in records)  # exact sums: no error bar
    logged = np.array([rec["energy"] for rec in records])
    assert np.all(logged >= e0 - ROUNDING * abs(e0)), logged.min() - e0

    dense = exact_expectation(r.hamiltonian, r.model.apply, state.params)
    estimate, _ = energy_estimate(r.vmc, state)
    estimate = float(np.real(estimate.mean))
    assert estimate == pytest.approx(dense, rel=1e-10, abs=0)
    rel_error = (dense - e0) / abs(e0)
    print(f"{name}: {steps} steps, relative error {rel_error:.3e} (measured {measured:.1e}, bound {bound:.1e})")
    assert rel_error >= -ROUNDING and estimate >= e0 - ROUNDING * abs(e0)  # variational
    assert rel_error < bound, f"{name}: relative error {rel_error:.3e} after {steps} steps, above {bound:.1e}"
    # the last logged energy (that of the parameters before the last update) is as good, within
    # the last steps' progress
    assert math.isfinite(logged[-1]) and (logged[-1] - e0) / abs(e0) < 3 * bound
