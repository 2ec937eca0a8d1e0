"""Symmetry sectors of the recipe: momentum, spin parity, the little group of k.

References: dense diagonalization without any symmetry (numpy ``eigh`` of the Sz = 0
block), the characters read off the exact ground state by applying the group elements
to it, and little groups counted from explicit rotation and mirror matrices acting on
the wave vector.
"""
import json

import numpy as np
import pytest

from quantax_lite import Recipe
from quantax_lite.hilbert.configurations import all_states, states_to_codes
from quantax_lite.geometry.lattice import Kagome, Square, Triangular
from quantax_lite.operators.hamiltonian import Heisenberg
from quantax_lite.geometry.symmetry import (
    allowed_momenta,
    full_symmetry,
    little_group,
    point_group,
    product,
    spin_inversion,
    Symmetry,
    translations,
)


def dense_ground_state(lattice):
    """``(E0, psi, states)`` of the Heisenberg model in Sz = 0, by dense ``eigh``."""
    states = all_states(lattice.n_sites, 0)
    w, v = np.linalg.eigh(Heisenberg(lattice).to_sparse(states).toarray())
    assert w[1] - w[0] > 1e-3  # a unique ground state: its characters are defined
    return w[0], v[:, 0], states


def act(group, g, psi, states):
    """``psi(g s)`` on every basis state ``s``."""
    images = group.flips[g] * states[:, group.perms[g]]
    order = np.argsort(states_to_codes(states))
    codes = states_to_codes(states)[order]
    return psi[order[np.searchsorted(codes, states_to_codes(images))]]


def test_recipe_sector_holds_the_exact_ground_state_of_triangular_4x3():
    """The 12-site triangular ground state (dense ED, no symmetry) has k = b1/2: the
    recipe's group of momentum (2, 0) has characters it satisfies, psi(g s) = psi(s) / chi_g,
    the sector's energy (sparse ED in the sector) is the ground energy, and k = 0 is not."""
    e0, psi, states = dense_ground_state(Triangular(4, 3))
    recipe = Recipe(lattice="triangular:4x3", momentum=(2, 0), spin_parity=1, symmetry="translations")
    lattice, ham, group = recipe.system()
    assert group.n_elements == 24 and group.has_spin_inversion and not group.is_trivial_sector
    for g in range(group.n_elements):
        assert np.allclose(act(group, g, psi, states), psi / group.characters[g], atol=1e-9)
    assert abs(recipe.sector_energy() - e0) < 1e-9 and abs(recipe.reference_energy() - e0) < 1e-9
    # k = 0 (momentum None: the trivial sector, the default before 'auto') lies higher
    assert Recipe(lattice="triangular:4x3", momentum=None).sector_energy() > e0 + 0.3
    assert recipe.amplitude_kind(ham) == "complex"
    # triangular 4x3 has the point group C2 only; k = b1/2 is its own image (2k = b1), and
    # the ground state is odd under the rotation by pi: the full group with characters 1 misses it
    full = Recipe(lattice="triangular:4x3", momentum=(2, 0), symmetry="full", spin_parity=None, rotation_parity=None)
    assert full.system()[2].n_elements == 4 * 12 and full.sector_energy() > e0 + 1.0
    odd = Recipe(lattice="triangular:4x3", momentum=(2, 0), symmetry="full", rotation_parity=-1)
    group = odd.system()[2]
    assert group.n_elements == 48 and sorted(set(np.round(group.characters.real, 12))) == [-1.0, 1.0]
    for g in range(group.n_elements):
        assert np.allclose(act(group, g, psi, states), psi / group.characters[g], atol=1e-9)
    assert abs(odd.sector_energy() - e0) < 1e-9


def test_kagome_2x2_sectors():
    """12-site kagome (C6v): the ground state at k = 0, spin parity +1, in an irrep of the
    point group other than the trivial one; the full group with characters 1 gives the
    lowest state of the trivial irrep (energy from the dense spectrum's states that keep
    every element's character 1)."""
    e0, psi, states = dense_ground_state(Kagome(2, 2))
    assert abs(Recipe(lattice="kagome:2x2", momentum=None).sector_energy() - e0) < 1e-9
    full = Recipe(lattice="kagome:2x2", symmetry="full", momentum=None, spin_parity=None, rotation_parity=None)
    group = full.system()[2]
    assert group.n_elements == 4 * 12 * 2
    # dense reference: the symmetric projector P = mean_g E_g, the lowest eigenvalue of P H P on range(P)
    n = len(states)
    P = np.zeros((n, n))
    for g in range(group.n_elements):  # P = mean_g E_g, (E_g psi)(s) = psi(g s)
        np.add.at(P, (np.arange(n), act(group, g, np.arange(n, dtype=float), states).astype(int)), 1.0)
    P /= group.n_elements
    w, V = np.linalg.eigh(P)
    Q = V[:, w > 0.5]
    H = Heisenberg(Kagome(2, 2)).to_sparse(states).toarray()
    e_sym = np.linalg.eigvalsh(Q.T @ H @ Q)[0]
    assert abs(full.sector_energy() - e_sym) < 1e-9 and e_sym > e0 + 0.1
    assert np.linalg.norm(Q.T @ psi) < 1e-8  # the ground state has no component there
    # rotation_parity -1: the irrep odd under the 60-degree rotation (an irrep B of C6v), which
    # the exact ground state satisfies element by element
    odd = Recipe(lattice="kagome:2x2", symmetry="full", momentum=None, spin_parity=None, rotation_parity=-1)
    group = odd.system()[2]
    assert group.n_elements == 96 and not odd.trivial_sector() and odd.amplitude_kind(Heisenberg(Kagome(2))) == "complex"
    for g in range(group.n_elements):
        assert np.allclose(act(group, g, psi, states), psi / group.characters[g], atol=1e-9)
    assert abs(odd.sector_energy() - e0) < 1e-9


def test_little_group_sizes_from_rotation_matrices():
    """The little group of every k of the 4x4 square (C4v) and the 12-site kagome (C6v)
    clusters: as many elements as the explicit rotation / mirror matrices O with
    O k = k modulo the reciprocal lattice (k . a_d in 2 pi Z for the Bravais vectors)."""
    def rot(t):
        return np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])

    for lattice, n_rot in ((Square(4), 4), (Kagome(2, 2), 6)):
        mats = [rot(2 * np.pi * j / n_rot) for j in range(n_rot)]
        mats += [m @ np.diag([1.0, -1.0]) for m in mats]
        points = point_group(lattice, "full") if lattice.kind == "kagome" else point_group(lattice)
        assert points.n_elements == 2 * n_rot
        sizes = set()
        for k in allowed_momenta(lattice):
            expected = sum(
                np.allclose(np.round(lattice.vectors @ (O @ k - k) / (2 * np.pi)), lattice.vectors @ (O @ k - k) / (2 * np.pi))
                for O in mats
            )
            little = little_group(points, translations(lattice, k))
            assert little.n_elements == expected, (lattice.name, k)
            group = full_symmetry(lattice, k)  # a valid group: characters a 1-D representation
            assert group.n_elements == lattice.n_cells * expected * 2
            sizes.add(expected)
        assert sizes == ({8, 4, 2} if n_rot == 4 else {12, 4})


def test_spin_parity_with_translations_and_full():
    """Spin parity -1 adds spin inversion with character -1 to the translations, and sets
    its character in the full group; the 12-site singlet ground states have parity +1, so
    parity -1 gives an excited state (the lowest of that sector, checked against the dense
    spectrum's states with psi(-s) = -psi(s))."""
    lattice = Kagome(2, 2)
    e0, psi, states = dense_ground_state(lattice)
    odd = Recipe(lattice="kagome:2x2", symmetry="translations", spin_parity=-1)
    group = odd.system()[2]
    assert group == product(translations(lattice), spin_inversion(lattice, -1))
    assert odd.system()[2] != Recipe(lattice="kagome:2x2", symmetry="translations", spin_parity=1).system()[2]
    flip = act(spin_inversion(lattice), 1, np.arange(len(states), dtype=float), states).astype(int)
    F = np.eye(len(states))[:, flip]
    assert np.allclose(F @ psi, psi)
    full = Recipe(lattice="kagome:2x2", symmetry="full", spin_parity=-1).system()[2]
    assert np.all(full.characters[full.flips < 0] == -1) and np.all(full.characters[full.flips > 0] == 1)
    assert odd.amplitude_kind(Heisenberg(lattice)) == "complex"


def test_recipe_sector_options_and_errors_naming_the_field():
    assert Recipe(lattice="kagome:2x3", momentum="1,0").momentum == (1, 0)
    assert Recipe(lattice="chain:8", momentum=3).momentum == (3,)
    assert Recipe(lattice="4x4", momentum=(4, 0)).sector_momentum() is None  # a multiple of L: k = 0
    k = Recipe(lattice="triangular:4x3", momentum=(2, 0)).sector_momentum()
    assert np.allclose(k, allowed_momenta(Triangular(4, 3))[2 * 3])
    cases = [
        (dict(lattice="4x4", momentum=(1,)), "momentum: expected 2 integer"),
        (dict(lattice="4x4", momentum=(0.5, 0)), "momentum: expected 2 integer"),
        (dict(lattice="4x4", momentum="a,b"), "momentum: expected integers"),
        (dict(lattice="4x4", momentum=(1, 0), symmetry="none"), "momentum: .* needs a group with translations"),
        (dict(lattice=Triangular(4, 3, pbc=False), momentum=(1, 0), hamiltonian="tfim"), "momentum: the open lattice"),
        (dict(lattice="4x4", spin_parity=0), "spin_parity: expected"),
        (dict(lattice="4x4", spin_parity=-1, symmetry="none"), "spin_parity: -1 needs a group"),
        (dict(lattice="4x4", momentum=(2, 2), amplitude="positive"), "amplitude: 'positive'"),
        (dict(lattice="4x4", spin_parity=-1, amplitude="positive"), "amplitude: 'positive'"),
        (dict(lattice="4x4", symmetry="full", rotation_parity=-1, amplitude="positive"), "amplitude: 'positive'"),
        (dict(lattice="4x4", rotation_parity=-1), "rotation_parity: -1 sets the characters of the point group"),
        (dict(lattice="4x4", symmetry="full", rotation_parity=2), "rotation_parity: expected"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            Recipe(**kwargs)
    with pytest.raises(TypeError, match="spin_parity: expected"):  # a bool (or float) is not the int +1
        Recipe(lattice="4x4", spin_parity=True)
    with pytest.raises(ValueError, match="symmetry: 'full' does not fit the lattice chain:8: rotation_parity"):
        Recipe(lattice="chain:8", symmetry="full", rotation_parity=-1).system()
    # positive is fine in the sector of characters 1, also when spin parity +1 is explicit
    assert Recipe(lattice="4x4", spin_parity=1, momentum=(0, 0), amplitude="positive").amplitude == "positive"


def test_config_round_trip_and_earlier_runs():
    """config() is plain JSON and rebuilds the same recipe; runs made before the sector
    fields (FIELDS_OF_EARLIER_RUNS: no momentum, no spin parity) get the groups they had."""
    from quantax_lite.recipes import FIELDS_OF_EARLIER_RUNS

    r = Recipe(lattice="kagome:2x3", momentum=(1, 0), spin_parity=-1)
    config = json.loads(json.dumps(r.config()))
    assert config["momentum"] == [1, 0] and config["spin_parity"] == -1
    assert Recipe(**config) == r
    names = ("momentum", "spin_parity", "rotation_parity")
    assert all(FIELDS_OF_EARLIER_RUNS[k] is None for k in names)
    for symmetry, before in (("translations", translations), ("full", full_symmetry)):
        old = Recipe(lattice="4x4", symmetry=symmetry, **{k: FIELDS_OF_EARLIER_RUNS[k] for k in names})
        assert old.system()[2] == before(Square(4)) and old.trivial_sector()


def test_command_line_options():
    from quantax_lite.cli.command import build_parser

    parser = build_parser()
    args = parser.parse_args(["train", "--lattice", "kagome:2x3", "--momentum", "1,0", "--spin-parity", "-1",
                              "--rotation-parity", "-1"])
    assert args.momentum == [1, 0] and args.spin_parity == -1 and args.rotation_parity == -1
    assert Recipe(lattice=args.lattice, momentum=args.momentum, spin_parity=args.spin_parity).momentum == (1, 0)
    args = parser.parse_args(["train"])
    assert args.momentum == args.spin_parity == args.rotation_parity == "auto"
    args = parser.parse_args(["train", "--momentum", "auto", "--spin-parity", "auto", "--rotation-parity", "1"])
    assert args.momentum == args.spin_parity == "auto" and args.rotation_parity == 1
    for bad in (["--momentum", "1,x"], ["--spin-parity", "2"], ["--rotation-parity", "0"], ["--spin-parity", "x"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["train", *bad])


def test_kagome_2x3_ground_state_sector():
    """18-site kagome: the sector k = b1/2, spin parity -1 holds the ground state (the
    global ground energy of exact.REFERENCE_ENERGY_PER_SITE, from sparse ED without
    symmetry); k = 0 gives a higher energy."""
    from quantax_lite.exact.diagonalization import REFERENCE_ENERGY_PER_SITE

    e0 = REFERENCE_ENERGY_PER_SITE[("kagome:2x3", "heisenberg", 0.0)] * 18
    recipe = Recipe(lattice="kagome:2x3", momentum=(1, 0), spin_parity=-1)
    assert abs(recipe.sector_energy() - e0) < 1e-7
    assert Recipe(lattice="kagome:2x3", momentum=None, spin_parity=-1).sector_energy() > e0 + 0.03
    # the full group (C2 little group of b1/2) in the irrep odd under the rotation by pi holds it too
    full = Recipe(lattice="kagome:2x3", momentum=(1, 0), spin_parity=-1, symmetry="full", rotation_parity=-1)
    assert abs(full.sector_energy() - e0) < 1e-7


@pytest.mark.parametrize("name", ["chain:10", "4x2", "4x4", "honeycomb:2x2", "triangular:3x3", "kagome:2x2"])
def test_sector_dimension_is_the_size_of_the_sector_basis(name, rng):
    """``Symmetry.sector_dimension`` (from the cycles of each element) equals the number of
    columns of the exact sector basis (``exact.sector_basis``: projected basis states), for
    random sectors (momentum, spin parity, rotation parity) and magnetizations."""
    from quantax_lite.exact.diagonalization import sector_basis
    from quantax_lite.recipes import parse_lattice

    lattice = parse_lattice(name)
    momenta = allowed_momenta(lattice)
    n = lattice.n_sites
    tested = 0
    while tested < 3:
        k = momenta[rng.integers(len(momenta))]
        parity = int(rng.choice([1, -1]))
        rotation = int(rng.choice([1, -1])) if lattice.ndim == 2 else 1  # a chain has no rotation
        total_sz = 0.5 * (n % 2) if rng.random() < 0.5 else float(rng.integers(0, 2)) + 0.5 * (n % 2)
        try:
            group = full_symmetry(lattice, k, spin_parity=parity, rotation_parity=rotation)
        except ValueError:  # characters that are no representation of this cluster's group
            continue
        tested += 1
        if total_sz != 0:  # spin inversion keeps Sz = 0 only: the subgroup without it
            keep = group.flips > 0
            group = Symmetry(group.perms[keep], group.flips[keep], group.characters[keep], lattice)
        states = all_states(n, total_sz)
        expected = sector_basis(group, states).shape[1]
        assert group.sector_dimension(total_sz) == expected, (name, k, parity, rotation, total_sz)
    whole = product(translations(lattice), spin_inversion(lattice, -1))
    if n <= 10:  # every configuration
        assert whole.sector_dimension(None) == sector_basis(whole, all_states(n, None)).shape[1]


def test_an_empty_sector_is_refused_naming_its_field(tmp_path, capsys):
    """4x2 with its full group and spin parity -1 holds no Sz = 0 state (the sector
    dimension is 0, and so is the exact basis): the recipe refuses it naming spin_parity,
    in either stage of a restoration, and the command exits 2 naming --spin-parity."""
    import jax

    from quantax_lite.cli.command import main
    from quantax_lite.exact.diagonalization import sector_basis
    from quantax_lite.recipes import build, parse_lattice

    lattice = parse_lattice("4x2")
    group = full_symmetry(lattice, spin_parity=-1)
    assert group.sector_dimension(0) == 0 == sector_basis(group, all_states(8, 0)).shape[1]
    assert full_symmetry(lattice, spin_parity=1).sector_dimension(0) > 0
    jax.config.update("jax_enable_x64", True)
    for symmetry in ("full", "translations>full@5"):
        with pytest.raises(ValueError, match=r"^spin_parity: .*holds no state with Sz = 0 on 4x2"):
            build(Recipe(lattice="4x2", symmetry=symmetry, spin_parity=-1))
    code = main(["train", "--lattice", "4x2", "--symmetry", "full", "--spin-parity", "-1", "--no-progress",
                 "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--spin-parity" in err and "Traceback" not in err
