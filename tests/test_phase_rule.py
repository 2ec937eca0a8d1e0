"""The 120-degree phase rule of three-sublattice lattices (triangular, kagome).

References: the coplanar state written from the sites' positions (the wave vector K of
the triangular lattice), the classical energy of a bond between spins 120 degrees
apart, explicit group sums of the network with the rule, exact energies by full
enumeration of the Sz = 0 sector.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_bravais_models import KEY, assert_log_close, explicit_sum, group, random_params, random_spins

from quantax_lite import Recipe
from quantax_lite.exact.diagonalization import exact_expectation
from quantax_lite.geometry.lattice import Honeycomb, Kagome, Square, Triangular
from quantax_lite.models import ConvResNet, make_conv_nqs, sublattice_phases
from quantax_lite.recipes import make_run_network as _network
from grid import keeping

THREE_SUBLATTICES = {"triangular:6x6": lambda: Triangular(6, 6), "triangular:6x3": lambda: Triangular(6, 3),
                     "kagome:2x2": lambda: Kagome(2, 2), "kagome:2x3": lambda: Kagome(2, 3)}


def rule_phase(theta, s):
    """sum of theta_i over the down spins of each row of ``s``."""
    return ((1 - np.asarray(s, float)) / 2) @ theta


@pytest.mark.parametrize("name", sorted(THREE_SUBLATTICES))
def test_sublattice_phases_are_a_120_degree_state(name):
    """Every nearest-neighbour bond joins spins 120 degrees apart (classical bond energy
    -1/8 in spin-1/2 units); on the triangular lattice the angles are those of the
    coplanar spiral with wave vector K = (4 pi / 3, 0), theta_i = -K . r_i (mod 2 pi)."""
    lattice = THREE_SUBLATTICES[name]()
    theta = sublattice_phases(lattice)
    assert theta.shape == (lattice.n_sites,)
    b = lattice.bonds(1)
    np.testing.assert_allclose(np.cos(theta[b[:, 0]] - theta[b[:, 1]]), -0.5, atol=1e-12)
    if lattice.kind == "triangular":
        k = np.array([4 * np.pi / 3, 0.0])
        np.testing.assert_allclose(np.exp(1j * theta), np.exp(-1j * lattice.positions @ k), atol=1e-9)


@pytest.mark.parametrize("lattice", [Triangular(4, 3), Triangular(3, 4), Square(4, 4), Honeycomb(3, 3)],
                         ids=["triangular:4x3", "triangular:3x4", "4x4", "honeycomb:3x3"])
def test_sublattice_phases_need_a_three_colouring(lattice):
    with pytest.raises(ValueError, match="^lattice: the 120-degree phase rule"):
        sublattice_phases(lattice)


@pytest.mark.parametrize("readout", ["sum", "origin"])
def test_site_phases_add_the_rule_to_log_psi(rng, readout):
    """With the same parameters, log psi_0 gains exactly i * sum_{down} theta_i."""
    lattice = Kagome(2, 2)
    theta = rng.uniform(0, 2 * np.pi, lattice.n_sites)
    kw = dict(channels=3, depth=1, dtype=jnp.float64, readout=readout, n_basis=3)
    plain, ruled = ConvResNet((2, 2), **kw), ConvResNet((2, 2), site_phases=theta, **kw)
    s = random_spins(rng, lattice.n_sites, 6)
    params = random_params(plain, s, rng)
    assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(jax.eval_shape(ruled.init, KEY, s))
    expected = np.asarray(plain.apply(params, s)) + 1j * rule_phase(theta, s)
    assert_log_close(ruled.apply(params, s), expected, 1e-9)


def sz0_generic_spins(rng, table, batch):
    """Sz = 0 configurations whose images under the group are all different."""
    n = table.perms.shape[1]
    s = np.array([rng.permutation(np.repeat(np.array([1, -1], np.int8), n // 2)) for _ in range(256)])
    images = table.flips[None, :, None] * s[:, table.perms]
    distinct = np.array([len({row.tobytes() for row in x}) for x in images]) == len(table.perms)
    return s[distinct][:batch]


@pytest.mark.parametrize("name", keeping(["kagome:2x2", "triangular:6x3"], keep=(0,)))
def test_the_rule_is_applied_inside_the_projection(rng, name):
    """psi(s) = sum_g chi_g psi_0(g s) with the rule in psi_0: with images merged by
    translations (zero momentum, odd spin and inversion parity; a nonzero momentum with
    the plane-wave readout) and over every element (the origin readout); the result lies
    in the sector (log psi(g s) = log psi(s) - log chi_g). On the triangular lattice a
    translation shifts the rule by 2 pi / 3 per down spin: the merge is exact in Sz = 0
    with n_down = 9."""
    lattice = THREE_SUBLATTICES[name]()
    theta = sublattice_phases(lattice)
    for table, readout in ((group(lattice, parity=-1, inversion_char=-1), "sum"),
                           (group(lattice, momentum=(1, 0)), "plane_wave"),
                           (group(lattice, momentum=(1, 0)), "origin")):
        s = sz0_generic_spins(rng, table, 3)
        model = make_conv_nqs(lattice, table, channels=2, depth=1, site_phases=theta,
                              readout="origin" if readout == "origin" else None)
        assert model.base.readout == readout and model.base.site_phases is not None
        params = random_params(model, s, rng)
        log_psi = np.asarray(model.apply(params, s))
        assert_log_close(log_psi, explicit_sum(model, params, table, s), 1e-8)
        g = rng.choice(len(table.perms), 3, replace=False)
        images = (table.flips[g, None, None] * s[:, table.perms[g]].transpose(1, 0, 2)).reshape(-1, s.shape[1])
        expected = (log_psi[None, :] - np.log(table.characters[g])[:, None]).reshape(-1)
        assert_log_close(np.asarray(model.apply(params, images)), expected, 1e-8)


def test_bad_site_phases_are_refused(rng):
    lattice = Triangular(6, 3)
    with pytest.raises(ValueError, match="^site_phases: expected 18 finite angles"):
        ConvResNet((6, 3), site_phases=np.zeros(17))
    with pytest.raises(ValueError, match="^site_phases: expected 18 finite angles"):
        ConvResNet((6, 3), site_phases=[np.nan] + [0.0] * 17)
    for kw in (dict(signed=True), dict(complex_output=False)):
        with pytest.raises(ValueError, match="^site_phases: a phase rule needs a complex network"):
            ConvResNet((6, 3), site_phases=np.zeros(18), **kw)
    table = group(lattice)
    with pytest.raises(ValueError, match="^site_phases: a translation changes the phase rule"):
        make_conv_nqs(lattice, table, channels=2, depth=1, site_phases=rng.uniform(0, 6, 18))


@pytest.mark.parametrize("name", ["triangular:6x3", "kagome:2x2"])
def test_a_nearly_uniform_network_with_the_rule_starts_at_the_ordered_state(name):
    """Without a rule the nearly uniform network is the ferromagnet's Sz = 0 member
    (E = n_bonds / 4, the highest eigenstate); with the recipe's rule it is the coplanar
    state projected on Sz = 0 and the sector, whose energy is below the classical
    -n_bonds / 8."""
    recipe = Recipe(lattice=name, symmetry="translations", channels=2, depth=1, precision="f64")
    lattice, ham, group_ = recipe.system()
    n_bonds = len(lattice.bonds(1))
    s = jnp.ones((1, lattice.n_sites), jnp.int8)
    assert recipe.phase_rule_kind(lattice) == "120" and recipe.init_scale(lattice, ham) is None
    uniform = make_conv_nqs(lattice, group_, channels=2, depth=1)
    e_uniform = exact_expectation(ham, uniform.apply, uniform.init(KEY, s), total_sz=0)
    ruled = _network(recipe, lattice, group_, recipe.amplitude_kind(ham))
    e_ruled = exact_expectation(ham, ruled.apply, ruled.init(KEY, s), total_sz=0)
    assert abs(e_uniform - n_bonds / 4) < 1e-2
    assert e_ruled < -n_bonds / 8, (e_ruled, -n_bonds / 8)


def test_recipe_picks_the_rule_and_names_it_in_errors():
    assert Recipe(lattice="triangular:6x6").phase_rule_kind() == "120"
    assert Recipe(lattice="kagome:2x3").phase_rule_kind() == "120"
    assert Recipe(lattice="triangular:4x3").phase_rule_kind() == "none"  # no three-colouring
    assert Recipe(lattice="kagome:2x2", amplitude="signed").phase_rule_kind() == "none"
    assert Recipe(lattice="kagome:2x2", phase_rule="none").site_phases() is None
    for name in ("4x4", "honeycomb:3x3", "chain:8"):
        assert Recipe(lattice=name).phase_rule_kind() == "none"
    r = Recipe(lattice="kagome:2x2")
    _, ham, _ = r.system()
    assert r.amplitude_kind(ham) == "complex"
    np.testing.assert_allclose(r.site_phases(), sublattice_phases(Kagome(2, 2)))
    bad = [(dict(lattice="triangular:4x3", phase_rule="120"), "three sublattices"),
           (dict(lattice="kagome:2x2", phase_rule="120", amplitude="positive"), "complex amplitudes"),
           (dict(lattice="kagome:2x2", phase_rule="120", hamiltonian="tfim"), "not for tfim"),
           (dict(lattice="kagome:2x2", phase_rule="60"), "")]
    for kw, text in bad:
        with pytest.raises(ValueError, match=f"^phase_rule: .*{text}"):
            Recipe(**kw)
