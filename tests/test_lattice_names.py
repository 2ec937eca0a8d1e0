"""Lattice names read back, geometric frustration as a property, and the sign rules' one home."""
import itertools

import numpy as np
import pytest

from quantax_lite.operators import sign_rules
from quantax_lite.hilbert.configurations import all_states
from quantax_lite.geometry.lattice import CONSTRUCTORS, Chain, Honeycomb, Kagome, Lattice, Square, Triangular, parse_lattice

SHAPES = {Chain: [(2,), (5,), (8,)], Square: [(4,), (2, 3), (5, 4), (1, 6)], Triangular: [(3,), (4, 3), (2, 5)],
          Honeycomb: [(2,), (3, 2)], Kagome: [(1, 2), (2, 2), (3, 2)]}
BOUNDARIES = [True, False, "periodic", "open", "pbc", "obc"]


@pytest.mark.parametrize("make, shape, pbc", [(m, s, b) for m, shapes in SHAPES.items() for s in shapes
                                              for b in BOUNDARIES],
                         ids=lambda v: getattr(v, "__name__", str(v)))  # stable across xdist workers
def test_every_constructor_name_reads_back(make, shape, pbc):
    lattice = make(*shape, pbc=pbc)
    again = parse_lattice(lattice.name)
    assert again == lattice and again.name == lattice.name
    assert np.array_equal(again.bonds(1), lattice.bonds(1)) and np.allclose(again.positions, lattice.positions)
    assert lattice.name.endswith(":open") == (not lattice.pbc)


@pytest.mark.parametrize("shape", [(3, 3, 3), (2, 2, 2, 2), (4,), (3, 4)])
def test_hypercubic_lattices_by_shape_read_back(shape):
    for pbc in (True, False):
        lattice = Lattice(shape, pbc)
        assert parse_lattice(lattice.name) == lattice


def test_spellings_and_errors():
    assert parse_lattice(" 4 x 4 : OPEN ") == Square(4, pbc=False)
    assert parse_lattice("Kagome:2x3:periodic") == Kagome(2, 3)
    assert parse_lattice("chain:6:obc") == Chain(6, pbc=False)
    assert parse_lattice(Square(2)) == Square(2)
    for text, match in [("4x", "cannot read"), ("hexagon:3x3", "cannot read"), ("chain:1", "L: expected an int >= 2"),
                        ("4x4:closed", "cannot read"), ("0x4", "Lx")]:
        with pytest.raises(ValueError, match=f"^lattice: .*{match}"):
            parse_lattice(text)
    with pytest.raises(TypeError, match="^lattice: expected a lattice name"):
        parse_lattice(16)
    # a lattice given by hand with its own geometry has a name, not a constructor
    custom = Lattice((2, 2), kind="rectangular", vectors=((1.0, 0.0), (0.0, 2.0)))
    with pytest.raises(ValueError, match="^lattice: cannot read 'rectangular:2x2'"):
        parse_lattice(custom.name)
    assert set(CONSTRUCTORS) == {"triangular", "honeycomb", "kagome"}


def test_frustrated_is_the_geometry_not_the_name_or_the_extent():
    """Nearest-neighbour triangles on the infinite lattice: triangular and kagome; not the
    square lattice even where a periodic extent of 3 closes a 3-cycle, nor a 3-site chain;
    a triangular geometry built by hand under another name is frustrated."""
    assert Triangular(3).frustrated and Kagome(2, 2).frustrated and Triangular(4, 3, pbc=False).frustrated
    for lattice in (Chain(3), Square(3), Square(4), Honeycomb(2), Lattice((3, 3, 3)), Square(5, 4)):
        assert not lattice.frustrated, lattice.name
    hand_made = Lattice((4, 4), kind="hexagonal", vectors=((1.0, 0.0), (0.5, np.sqrt(3) / 2)))
    assert hand_made.frustrated
    # the 3-cycle of the periodic 3x3 square cluster exists, but is no nearest-neighbour triangle
    bonds = {tuple(b) for b in Square(3).bonds(1).tolist()}
    assert (0, 3) in bonds and (3, 6) in bonds and (0, 6) in bonds


def test_default_rules_follow_the_geometry():
    assert sign_rules.default_rule(Square(4)) == "marshall" and sign_rules.default_rule(Honeycomb(2)) == "marshall"
    assert sign_rules.default_rule(Chain(8)) == "marshall" and sign_rules.default_rule(Square(5, 4)) is None
    assert sign_rules.default_rule(Triangular(6, 3)) == "120" and sign_rules.default_rule(Kagome(2, 2)) == "120"
    assert sign_rules.default_rule(Triangular(4, 4)) is None  # 3 divides neither extent
    assert not sign_rules.phase_rule_fits(Square(4))


def test_marshall_sign_is_the_parity_of_sublattice_one_down_spins():
    lattice = Square(2, 3)
    states = all_states(lattice.n_sites)
    u = sign_rules.marshall_sign(lattice, states)
    sub = lattice.sublattice == 1
    expected = (-1) ** np.sum(states[:, sub] < 0, axis=1)
    np.testing.assert_array_equal(u, expected)
    with pytest.raises(ValueError, match="^marshall_sign: needs a lattice with two sublattices"):
        sign_rules.marshall_sign(Triangular(3), np.ones((1, 9), np.int8))
    with pytest.raises(ValueError, match="^states: expected configurations of shape"):
        sign_rules.marshall_sign(lattice, np.ones((1, 5), np.int8))
    with pytest.raises(ValueError, match="^states"):
        sign_rules.marshall_sign(lattice, np.zeros((1, 6), np.int8))


def test_the_120_degree_rule_translates_by_one_angle():
    lattice = Triangular(3, 6)
    theta = sign_rules.sublattice_phases(lattice)
    factors = sign_rules.translation_phase_factors(lattice, theta)
    assert factors.shape == (lattice.n_cells,) and np.allclose(np.abs(factors), 1)
    assert np.allclose(factors ** 3, 1)  # a shift by 2 pi / 3 per down spin, or none
    assert sign_rules.translation_phase_factors(lattice, np.arange(lattice.n_sites) * 0.1) is None
