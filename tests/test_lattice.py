"""Lattices: site numbering, coordinates, bonds (checked against a brute-force image search)."""
import itertools

import numpy as np
import pytest

from quantax_lite.utils.validate import finite_number, positive_int
from quantax_lite.geometry.lattice import Chain, Lattice, Square, periodic_site_index, site_coords


def brute_force_bonds(shape, pbc, order):
    """Pairs at the order-th shell distance, found by trying every periodic image explicitly."""
    shape = tuple(shape)
    coords = list(itertools.product(*(range(L) for L in shape)))
    # shells of the infinite lattice from an explicit list of integer vectors
    span = range(-order - 1, order + 2)
    shells = sorted({sum(c * c for c in v) for v in itertools.product(span, repeat=len(shape))} - {0})
    target = shells[order - 1]
    images = list(itertools.product((-1, 0, 1), repeat=len(shape))) if pbc else [(0,) * len(shape)]
    pairs = set()
    for i, ci in enumerate(coords):
        for j, cj in enumerate(coords):
            if j <= i:
                continue
            d2 = min(
                sum((cj[a] + w[a] * shape[a] - ci[a]) ** 2 for a in range(len(shape))) for w in images
            )
            if d2 == target:
                pairs.add((i, j))
    return sorted(pairs)


LATTICES = [
    Chain(2),
    Chain(3),
    Chain(4),
    Chain(7),
    Chain(6, pbc=False),
    Square(2),
    Square(3),
    Square(4),
    Square(2, 4),
    Square(3, 5),
    Square(4, pbc=False),
    Square(1, 4),
]


@pytest.mark.parametrize("lattice", LATTICES, ids=lambda l: l.name)
def test_bonds_match_brute_force(lattice):
    for order in (1, 2):
        b = lattice.bonds(order)
        assert b.dtype == np.int32 and b.ndim == 2 and b.shape[1] == 2
        assert np.all(b[:, 0] < b[:, 1])
        assert len({tuple(p) for p in b}) == len(b)  # each pair once
        assert [tuple(p) for p in b.tolist()] == brute_force_bonds(lattice.shape, lattice.pbc, order)
    # the two orders never share a pair
    assert not {tuple(p) for p in lattice.bonds(1)} & {tuple(p) for p in lattice.bonds(2)}


def test_bond_counts_and_small_lattice_rules():
    assert len(Square(4).bonds(1)) == 32 and len(Square(4).bonds(2)) == 32
    assert len(Square(6).bonds(1)) == 72 and len(Square(6).bonds(2)) == 72
    assert len(Square(4, pbc=False).bonds(1)) == 24 and len(Square(4, pbc=False).bonds(2)) == 18
    assert len(Chain(16).bonds(1)) == 16 and len(Chain(16, pbc=False).bonds(1)) == 15
    # L = 2 periodic: the direct and the wrapped bond coincide and are listed once
    np.testing.assert_array_equal(Chain(2).bonds(1), [[0, 1]])
    # L = 3 periodic: (0, 2) is a nearest-neighbour pair; there are no next-nearest ones
    assert len(Chain(3).bonds(1)) == 3 and len(Chain(3).bonds(2)) == 0
    # an axis of length 1 has no bonds along it (no self bonds)
    assert len(Square(1, 4).bonds(1)) == 4


def test_coordinates_and_numbering_are_row_major():
    lat = Square(3, 5)
    assert lat.n_sites == 15 and lat.ndim == 2 and lat.shape == (3, 5)
    assert lat.coords.shape == (15, 2)
    for x in range(3):
        for y in range(5):
            i = x * 5 + y
            assert tuple(lat.coords[i]) == (x, y)
            assert lat.site_index([x, y]) == i
    assert lat.site_index([3, -1]) == lat.site_index([0, 4])  # periodic wrap
    with pytest.raises(ValueError, match="coords"):
        Square(3, pbc=False).site_index([3, 0])
    chain = Chain(5)
    np.testing.assert_array_equal(chain.coords[:, 0], np.arange(5))


def test_nearest_neighbour_bonds_are_unit_displacements():
    rng = np.random.default_rng(1)
    for lat in (Square(4), Square(3, 5), Chain(7)):
        for i, j in lat.bonds(1):
            assert np.abs(lat.displacement(i, j)).sum() == 1
        for i, j in lat.bonds(2):
            d = np.abs(lat.displacement(i, j))
            assert (d**2).sum() == lat.distance_shells(2)[1]
        for _ in range(10):
            i, j = rng.integers(0, lat.n_sites, 2)
            dij, dji = lat.displacement(i, j), lat.displacement(j, i)
            half = 2 * np.abs(dij) == np.asarray(lat.shape)  # +L/2 and -L/2 are the same image
            np.testing.assert_array_equal(np.where(half, dij, -dij), dji)
            # the displacement really leads from i to j (modulo the periodic wrap)
            np.testing.assert_array_equal(
                np.mod(lat.coords[i] + dij, lat.shape), lat.coords[j]
            )


def test_neighbours_and_sublattice():
    lat = Square(4)
    nb = lat.neighbours(1)
    assert all(len(n) == 4 for n in nb)
    np.testing.assert_array_equal(nb[0], sorted([1, 3, 4, 12]))
    assert lat.is_bipartite and Chain(8).is_bipartite
    assert not Chain(5).is_bipartite and not Square(3).is_bipartite
    assert Square(3, pbc=False).is_bipartite
    assert set(np.unique(lat.sublattice)) == {0, 1}


def test_names_hash_and_equality():
    assert Square(4).name == "4x4" and Square(4, 6).name == "4x6"
    assert Chain(20).name == "chain:20" and Chain(20, pbc=False).name == "chain:20:open"
    assert Square(4) == Square(4, 4) == Lattice((4, 4), True)
    assert hash(Square(4)) == hash(Square(4, 4))
    assert Square(4) != Square(4, pbc=False)
    assert Chain(4, pbc="open") == Chain(4, pbc=False)
    assert Chain(4, pbc="periodic").pbc is True


def test_bad_input():
    with pytest.raises(ValueError, match="pbc"):
        Chain(4, pbc="twisted")
    with pytest.raises(ValueError, match="pbc"):
        Square(4, pbc=None)
    with pytest.raises(ValueError, match="L"):
        Chain(0)
    with pytest.raises(TypeError, match="L"):
        Chain(2.5)
    with pytest.raises(ValueError, match="Ly"):
        Square(4, -1)
    with pytest.raises(ValueError, match="order"):
        Square(4).bonds(0)
    with pytest.raises(ValueError, match="shape"):
        Lattice(())


def test_lattices_need_two_sites():
    with pytest.raises(ValueError, match=r"^L: expected an int >= 2 \(a chain needs at least 2 sites\), got 1"):
        Chain(1)
    with pytest.raises(ValueError, match=r"^L: expected an int >= 2 \(a chain needs at least 2 sites\), got 1"):
        Chain(1, pbc=False)
    with pytest.raises(ValueError, match=r"^Lx, Ly: a square lattice needs at least 2 sites, got 1x1"):
        Square(1)
    with pytest.raises(ValueError, match=r"^Lx, Ly: a square lattice needs at least 2 sites, got 1x1"):
        Square(1, 1, pbc=False)
    for shape in ((1,), (1, 1), (1, 1, 1)):
        with pytest.raises(ValueError, match=r"^shape: a lattice needs at least 2 sites, got shape"):
            Lattice(shape)
    with pytest.raises(ValueError, match=r"^Lx: expected a positive int, got 0"):
        Square(0, 4)
    with pytest.raises(ValueError, match=r"^Ly: expected a positive int, got 0"):
        Square(4, 0)
    with pytest.raises(ValueError, match=r"^shape\[1\]: expected a positive int, got -3"):
        Lattice((2, -3))
    with pytest.raises(TypeError, match=r"^L: expected a positive int, got True"):
        Chain(True)
    # the smallest lattices still work
    assert Chain(2).n_sites == 2 and Square(1, 2).n_sites == 2 and Square(2, 1).bonds(1).tolist() == [[0, 1]]


def test_periodic_site_index_is_the_one_wrapped_numbering():
    """The shape-level function behind Lattice.site_index: row-major, wrapped per axis."""
    for shape in ((5,), (3, 4), (2, 3, 2)):
        coords = site_coords(shape)
        assert coords.dtype == np.int64 and coords.shape == (int(np.prod(shape)), len(shape))
        assert coords.tolist() == [list(c) for c in itertools.product(*(range(L) for L in shape))]
        np.testing.assert_array_equal(periodic_site_index(coords, shape), np.arange(len(coords)))
        # an offset of any size (also negative, also several periods) wraps per axis
        rng = np.random.default_rng(len(shape))
        r = rng.integers(-17, 17, size=(len(coords), len(shape)))
        expected = [int(np.ravel_multi_index(tuple(np.mod(c + d, shape)), shape)) for c, d in zip(coords, r)]
        assert periodic_site_index(coords + r, shape).tolist() == expected
    lat = Square(3, 4)
    np.testing.assert_array_equal(lat.coords, site_coords((3, 4)))
    grid = lat.coords[:, None, :] + lat.coords[None, :, :]  # batched (..., ndim) input
    np.testing.assert_array_equal(lat.site_index(grid), periodic_site_index(grid, (3, 4)))
    with pytest.raises(ValueError, match=r"^coords: expected last axis of length 2"):
        periodic_site_index(np.zeros((4, 3), int), (3, 4))


def test_positive_int_and_finite_number():
    assert positive_int(np.int32(3), "n") == 3 and type(positive_int(np.int64(3), "n")) is int
    assert positive_int(0, "n", minimum=0) == 0
    with pytest.raises(ValueError, match=r"^n_chains: expected a positive int, got 0$"):
        positive_int(0, "n_chains")
    with pytest.raises(ValueError, match=r"^n_thermalize: expected an int >= 0, got -1$"):
        positive_int(-1, "n_thermalize", minimum=0)
    with pytest.raises(ValueError, match=r"^L: expected an int >= 2, got 1$"):
        positive_int(1, "L", minimum=2)
    for bad in (True, np.bool_(True), 2.0, "3", None):
        with pytest.raises(TypeError, match=r"^chunk_size: expected a positive int, got "):
            positive_int(bad, "chunk_size")
    assert finite_number(np.float32(0.5), "x") == 0.5 and finite_number(3, "x", minimum=3) == 3.0
    assert finite_number(np.asarray(2.0), "x") == 2.0
    with pytest.raises(ValueError, match=r"^h: expected a finite number, got nan$"):
        finite_number(float("nan"), "h")
    with pytest.raises(ValueError, match=r"^diag_shift: expected a finite number > 0, got 0.0$"):
        finite_number(0.0, "diag_shift", above=0)
    with pytest.raises(ValueError, match=r"^lr: expected a finite number >= 0, got -1$"):
        finite_number(-1, "lr", minimum=0)
    for bad in (True, 1j, "1.0", None, np.ones(2)):
        with pytest.raises(TypeError, match=r"^J: expected a finite number, got "):
            finite_number(bad, "J")


def test_contract_attributes_of_chain_and_square():
    """n_basis = 1: positions are the integer coordinates, cells are sites, numbering unchanged."""
    for lat in (Chain(7), Square(3, 5), Square(4, pbc=False)):
        assert lat.n_basis == 1 and lat.n_sites == int(np.prod(lat.shape))
        assert lat.kind == ("chain" if lat.ndim == 1 else "square")
        np.testing.assert_array_equal(lat.vectors, np.eye(lat.ndim))
        np.testing.assert_array_equal(lat.basis, np.zeros((1, lat.ndim)))
        np.testing.assert_array_equal(lat.cell_coords, site_coords(lat.shape))
        np.testing.assert_array_equal(lat.positions, lat.coords.astype(float))
        np.testing.assert_array_equal(lat.basis_index, np.zeros(lat.n_sites))
        assert lat.positions.dtype == np.float64 and lat.cell_coords.dtype == np.int64
        assert not lat.positions.flags.writeable and not lat.vectors.flags.writeable
    assert repr(Square(4)) == "Lattice(shape=(4, 4), pbc=True)"
    with pytest.raises(ValueError, match=r"^basis_index: expected ints in \[0, 1\)"):
        Square(4).site_index([0, 0], 1)
    with pytest.raises(ValueError, match=r"^vectors: expected 2 linearly independent Bravais vectors"):
        Lattice((3, 3), vectors=[[1, 0], [2, 0]])
