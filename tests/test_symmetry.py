"""Symmetry groups: closure, 1-D representations, sizes, action, sectors, clear errors."""
import numpy as np
import pytest

from quantax_lite.exact.diagonalization import ground_state
from quantax_lite.hilbert.configurations import states_to_codes
from quantax_lite.geometry.lattice import Chain, Honeycomb, Square
from quantax_lite.operators.hamiltonian import Heisenberg
from quantax_lite.geometry.symmetry import (
    Symmetry,
    full_symmetry,
    group_table,
    identity,
    little_group,
    point_group,
    product,
    rotation_characters,
    spin_inversion,
    translations,
)


def brute_force_check_group(sym: Symmetry):
    """Every composition of two elements lies in the group, with chi(gh) = chi(g) chi(h)."""
    P, F, chi = sym.perms, sym.flips.astype(int), sym.characters
    index = {(tuple(p), f): g for g, (p, f) in enumerate(zip(P.tolist(), F.tolist()))}
    assert len(index) == sym.n_elements  # no repeats
    # comp[h, g, i] = P[h, P[g, i]]: "apply h, then g"
    comp = P[:, P]
    for h in range(sym.n_elements):
        for g in range(sym.n_elements):
            gh = index[(tuple(comp[h, g].tolist()), F[g] * F[h])]
            assert abs(chi[gh] - chi[g] * chi[h]) < 1e-9


def apply_loop(sym: Symmetry, s):
    out = np.empty((sym.n_elements,) + s.shape, dtype=s.dtype)
    for g in range(sym.n_elements):
        for i in range(sym.n_sites):
            out[g, i] = sym.flips[g] * s[sym.perms[g, i]]
    return out


def test_group_sizes():
    sq = Square(4)
    assert translations(sq).n_elements == 16
    assert point_group(sq).n_elements == 8
    assert spin_inversion(sq).n_elements == 2
    assert full_symmetry(sq).n_elements == 16 * 8 * 2
    assert full_symmetry(Square(6)).n_elements == 36 * 8 * 2
    assert full_symmetry(Square(4, 6)).n_elements == 24 * 4 * 2  # C2v on a rectangle
    assert full_symmetry(Chain(16)).n_elements == 16 * 2 * 2
    assert full_symmetry(Square(4, pbc=False)).n_elements == 8 * 2  # no translations
    assert identity(sq).n_elements == 1
    # 2x2 torus: the group of its 4-cycle graph (8) times spin inversion; repeats merged
    assert full_symmetry(Square(2)).n_elements == 16


@pytest.mark.parametrize(
    "make",
    [
        lambda: full_symmetry(Square(4)),
        lambda: translations(Square(4), momentum=(np.pi / 2, np.pi)),
        lambda: product(translations(Square(4), (np.pi, np.pi)), point_group(Square(4))),
        lambda: product(translations(Chain(6), (np.pi,)), point_group(Chain(6)), spin_inversion(Chain(6), -1)),
        lambda: full_symmetry(Square(3, 5)),
        lambda: point_group(Square(4), characters=[1, -1, 1, -1, 1, -1, 1, -1]),  # B1
    ],
)
def test_closure_and_one_dimensional_representation(make):
    brute_force_check_group(make())


def test_action_matches_definition_numpy_and_jax():
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    sym = full_symmetry(Square(4))
    s = rng.choice(np.array([-1, 1], np.int8), size=16)
    expected = apply_loop(sym, s)
    np.testing.assert_array_equal(sym.apply(s), expected)
    batch = rng.choice(np.array([-1, 1], np.int8), size=(3, 16))
    out = np.asarray(sym.apply(jnp.asarray(batch)))
    assert out.shape == (3, sym.n_elements, 16) and out.dtype == np.int8
    for b in range(3):
        np.testing.assert_array_equal(out[b], apply_loop(sym, batch[b]))


def test_translation_and_point_group_content():
    sq = Square(4)
    T = translations(sq, momentum=(np.pi / 2, 0.0))
    # element g is the translation by coords[g]: (T_r s)[x] = s[x + r], chi = exp(i k.r)
    for g, r in enumerate(sq.coords):
        for i, x in enumerate(sq.coords):
            assert T.perms[g, i] == sq.site_index(x + r)
        assert np.isclose(T.characters[g], np.exp(1j * (np.pi / 2) * r[0]))
    C = point_group(sq)
    assert np.array_equal(C.perms[0], np.arange(16))
    # rotations and reflections preserve the bonds (both orders)
    for order in (1, 2):
        bonds = {frozenset(b) for b in sq.bonds(order).tolist()}
        for p in C.perms:
            assert {frozenset((int(p[i]), int(p[j]))) for i, j in bonds} == bonds
    # the inverse table
    inv = full_symmetry(sq).inverse
    P = full_symmetry(sq).perms
    for g in range(0, 256, 17):
        np.testing.assert_array_equal(P[g][P[inv[g]]], np.arange(16))


def test_sector_convention_on_exact_eigenvectors():
    """ED in a momentum sector gives psi(g s) = psi(s) / chi_g, and momentum k is exp(+i k x)."""
    L = 8
    chain = Chain(L)
    H = Heisenberg(chain)
    for m in (1, 3):
        k = 2 * np.pi * m / L
        T = translations(chain, momentum=(k,))
        # one magnon: the sector ground state is the plane wave exp(+i k x) of the flipped spin
        e, v, states = ground_state(H, total_sz=L / 2 - 1, symmetry=T)
        x = np.argmin(states, axis=1)
        plane = np.exp(1j * k * x) / np.sqrt(L)
        assert abs(abs(np.vdot(plane, v)) - 1) < 1e-10
        assert abs(e - (L / 4 - (1 - np.cos(k)))) < 1e-10
        # Sz = 0: the eigenvector obeys psi(g s) = psi(s) / chi_g for every element
        e, v, states = ground_state(H, total_sz=0, symmetry=T)
        codes = states_to_codes(states)
        where = {c: a for a, c in enumerate(codes)}
        for g in range(T.n_elements):
            images = T.apply(states)[:, g]
            idx = np.array([where[c] for c in states_to_codes(images)])
            np.testing.assert_allclose(v[idx], v / T.characters[g], atol=1e-10)
        assert np.linalg.norm(v) == pytest.approx(1)


def test_sector_energies_of_the_chain():
    """Heisenberg ring ground state: momentum 0 for L/2 even, pi for L/2 odd; parity even."""
    for L, k_gs in ((8, 0.0), (10, np.pi)):
        chain = Chain(L)
        H = Heisenberg(chain)
        e_all = ground_state(H)[0]
        e_k = ground_state(H, symmetry=translations(chain, (k_gs,)))[0]
        e_other = ground_state(H, symmetry=translations(chain, (np.pi - k_gs,)))[0]
        assert abs(e_k - e_all) < 1e-10 and e_other > e_all + 1e-3
    e_full = ground_state(Heisenberg(Chain(8)), symmetry=full_symmetry(Chain(8)))[0]
    assert abs(e_full - ground_state(Heisenberg(Chain(8)))[0]) < 1e-10


def test_hash_equality_and_product_operator():
    a = translations(Square(4))
    b = translations(Square(4))
    assert a == b and hash(a) == hash(b)
    assert a != translations(Square(4), (np.pi, np.pi))
    ab = a * point_group(Square(4))
    assert ab == product(a, point_group(Square(4)))
    assert ab.n_elements == 128
    with pytest.raises(ValueError):
        a.perms[0, 0] = 3  # read-only


def test_errors():
    sq = Square(4)
    with pytest.raises(ValueError, match="C4v needs a square"):
        point_group(Square(4, 6))
    with pytest.raises(ValueError, match="periodic"):
        translations(Square(4, pbc=False))
    with pytest.raises(ValueError, match="momentum"):
        translations(sq, momentum=(1.0, 0.0))
    with pytest.raises(ValueError, match="momentum"):
        translations(sq, momentum=(0.0,))
    with pytest.raises(ValueError, match="one-dimensional representation|characters"):
        product(translations(sq, (np.pi, 0.0)), point_group(sq))  # (pi, 0) is not C4v-invariant
    with pytest.raises(ValueError, match="characters"):
        point_group(sq, characters=[1, 1j, 1, 1, 1, 1, 1, 1])
    with pytest.raises(ValueError, match="parity"):
        spin_inversion(sq, parity=2)
    with pytest.raises(TypeError, match="lattice"):
        translations("4x4")
    with pytest.raises(ValueError, match="acts on"):
        product(translations(sq), translations(Chain(8)))
    rot = point_group(sq).perms[1]
    # a set that is not closed: {e, R} without R^2, R^3
    with pytest.raises(ValueError, match="closed"):
        Symmetry(np.stack([np.arange(16), rot]), [1, 1], [1, 1])
    with pytest.raises(ValueError, match="identity"):
        Symmetry(rot[None], [1], [1])
    with pytest.raises(ValueError, match="permutation"):
        Symmetry([[0, 0, 1]], [1], [1])
    with pytest.raises(ValueError, match="flips"):
        Symmetry([[0, 1]], [2], [1])
    with pytest.raises(ValueError, match="same group element"):
        Symmetry([[0, 1], [0, 1]], [1, 1], [1, 1])
    with pytest.raises(ValueError, match="identity must have character 1"):
        Symmetry([[0, 1]], [1], [-1])
    # translations with characters that are not a representation
    T = translations(Chain(4))
    with pytest.raises(ValueError, match="representation"):
        Symmetry(T.perms, T.flips, [1, 1j, 1, 1])
    # the chain of 2: translation by one = reflection, but with characters -1 and +1
    with pytest.raises(ValueError, match="characters"):
        product(translations(Chain(2), (np.pi,)), point_group(Chain(2)))
    # spin inversion does not map a total_sz != 0 sector to itself
    with pytest.raises(ValueError, match="spin inversion"):
        ground_state(Heisenberg(Chain(6)), total_sz=1, symmetry=spin_inversion(Chain(6)))


def test_groups_remember_their_lattice():
    sq, ch = Square(4), Chain(16)
    for make in (identity, translations, point_group, spin_inversion, full_symmetry):
        assert make(sq).lattice == sq and make(ch).lattice == ch
    assert point_group(Square(2, 4), "C2v").lattice == Square(2, 4)
    # a product of groups of one lattice knows it (also an equal copy of the lattice)
    assert (translations(sq) * spin_inversion(Square(4, 4))).lattice == sq
    assert product(translations(sq), point_group(sq), spin_inversion(sq)).lattice == sq
    # the lattice is not part of the group's value
    t = translations(sq)
    bare = Symmetry(t.perms, t.flips, t.characters)
    assert bare.lattice is None and bare == t and hash(bare) == hash(t)
    assert product(bare, spin_inversion(sq)).lattice == sq
    assert Symmetry(t.perms, t.flips, t.characters, lattice=sq).lattice == sq
    # groups of different lattices with the same number of sites do not multiply
    with pytest.raises(ValueError, match=r"^groups\[1\]: built for the lattice chain:16, groups\[0\] for 4x4"):
        product(translations(sq), spin_inversion(ch))
    with pytest.raises(ValueError, match=r"^groups\[2\]: built for the lattice 2x8, groups\[0\] for 4x4"):
        product(translations(sq), bare, point_group(Square(2, 8), "C2v"))
    with pytest.raises(ValueError, match=r"^groups\[1\]: built for the lattice 4x4:open, groups\[0\] for 4x4"):
        translations(sq) * point_group(Square(4, pbc=False))
    with pytest.raises(ValueError, match=r"^lattice: has 8 sites, the group acts on 16"):
        Symmetry(t.perms, t.flips, t.characters, lattice=Chain(8))
    with pytest.raises(TypeError, match=r"^lattice: expected a quantax_lite.geometry.lattice.Lattice or None"):
        Symmetry(t.perms, t.flips, t.characters, lattice=(4, 4))


def test_one_table_check_for_groups_and_models():
    """Symmetry and models.group_table run the same check (one function, one wording)."""
    from quantax_lite import models

    assert models.group_table is group_table
    t = full_symmetry(Square(4))
    perms, flips, chars = group_table(t.perms, t.flips, t.characters, 16)
    assert perms.dtype == np.int32 and flips.dtype == np.int8 and chars.dtype == np.complex128
    np.testing.assert_array_equal(perms, t.perms)
    np.testing.assert_array_equal(flips, t.flips)
    np.testing.assert_array_equal(chars, t.characters)
    assert perms is not t.perms and chars is not t.characters and perms.flags.writeable
    p, f, c = group_table([[1, 0], [0, 1]])  # defaults; a table, not necessarily a group
    assert f.tolist() == [1, 1] and c.tolist() == [1, 1]
    given = np.ones(2, np.complex128)
    assert group_table([[0, 1], [1, 0]], characters=given)[2] is not given  # never the caller's array
    # the same message from both
    bad = [
        (dict(perms=[[0, 0, 1]]), ValueError, r"^perms: every row must be a permutation of range\(3\)"),
        (dict(perms=np.zeros((0, 3), int)), ValueError, r"^perms: expected an int array of shape"),
        (dict(perms=[[0.0, 1.0]]), TypeError, r"^perms: expected integers"),
        (dict(perms=[[0, 1]], flips=[2]), ValueError, r"^flips: expected shape \(1,\) with entries \+1 or -1"),
        (dict(perms=[[0, 1]], characters=[np.nan]), ValueError, r"^characters: expected 1 finite complex numbers"),
        (dict(perms=[[0, 1]], characters=[0.0]), ValueError, r"^characters: all zero"),
    ]
    for kwargs, err, match in bad:
        with pytest.raises(err, match=match):
            group_table(**kwargs)
        with pytest.raises(err, match=match):
            Symmetry(kwargs["perms"], kwargs.get("flips", [1] * len(kwargs["perms"])),
                     kwargs.get("characters", [1] * len(kwargs["perms"])))
    with pytest.raises(ValueError, match=r"^perms: expected 6 sites per row \(the lattice's\), got 4"):
        group_table(translations(Chain(4)).perms, n_sites=6)


def test_detected_point_group_of_hypercubic_lattices():
    """kind='full' finds C4v / C2v / the reflection from the coordinates alone; with the
    translations it spans the same space group as the coordinate-map tables."""
    from quantax_lite.geometry.symmetry import point_group_kind

    for lat, name, size in ((Square(4), "C4v", 8), (Square(3, 5), "C2v", 4), (Chain(6), "reflection", 2),
                            (Square(4, pbc=False), "C4v", 8)):
        assert point_group_kind(lat) == name
        found = point_group(lat, "full")
        assert found.n_elements == size
        table = point_group(lat, "C2v" if name == "C2v" else None)
        if lat.pbc:
            found, table = translations(lat) * found, translations(lat) * table
        assert {tuple(p) for p in found.perms.tolist()} == {tuple(p) for p in table.perms.tolist()}
    assert point_group(Square(4), "C4").n_elements == 4 and point_group(Square(4), "C2").n_elements == 2
    with pytest.raises(ValueError, match=r"^kind: the cluster 3x5 has no C4 point group \(its full point group is C2v\)"):
        point_group(Square(3, 5), "C4")


def test_documented_errors_of_little_group():
    """TypeError naming the argument that is not a Symmetry; ValueError naming ``group``
    for groups of different sizes and for an element that does not normalize the sector."""
    chain = Chain(6)
    T = translations(chain, (np.pi / 3,))
    with pytest.raises(TypeError, match=r"^group: expected a Symmetry, got str"):
        little_group("C2v", T)
    with pytest.raises(TypeError, match=r"^sector: expected a Symmetry, got ndarray"):
        little_group(point_group(chain), T.perms)
    with pytest.raises(ValueError, match=r"^group: acts on 6 sites, sector on 8"):
        little_group(point_group(chain), translations(Chain(8)))
    # {e, the swap of sites 0 and 1} is a group, but it maps a translation to a permutation
    # that is no translation
    swap = np.arange(6)
    swap[[0, 1]] = [1, 0]
    swaps = Symmetry(np.stack([np.arange(6), swap]), [1, 1], [1, 1])
    with pytest.raises(ValueError, match=r"^group: element 1 does not normalize the sector's group "
                                         r"\(g t g\^-1 of element 1 lies outside it\)"):
        little_group(swaps, T)
    # the reflection does normalize the translations: no error, k = pi/3 keeps the identity only
    assert little_group(point_group(chain), T).n_elements == 1


def test_documented_errors_of_rotation_characters():
    """ValueError naming ``rotation_parity`` for a value other than +-1, for a group without
    rotations (a chain) and for one with rotations of odd order only (C3v); TypeError
    naming ``lattice``."""
    with pytest.raises(ValueError, match=r"^rotation_parity: expected \+1 or -1, got 2"):
        rotation_characters(Square(4), 2)
    with pytest.raises(ValueError, match=r"^rotation_parity: expected \+1 or -1, got 0"):
        rotation_characters(Square(4), 0)
    with pytest.raises(ValueError, match=r"^rotation_parity: the lattice chain:8 has no point-group rotation"):
        rotation_characters(Chain(8), -1)
    with pytest.raises(ValueError, match=r"^rotation_parity: the point group of honeycomb:1x1 \(C3v\) has "
                                         r"rotations of odd order only"):
        rotation_characters(Honeycomb(1), -1)
    with pytest.raises(TypeError, match=r"^lattice: expected a quantax_lite.geometry.lattice.Lattice, got tuple"):
        rotation_characters((4, 4))
    # the documented valid cases next to them
    np.testing.assert_array_equal(rotation_characters(Chain(8), 1), [1, 1])
    np.testing.assert_array_equal(rotation_characters(Honeycomb(1), 1), np.ones(6))
    np.testing.assert_array_equal(rotation_characters(Square(4), -1), [1, -1, 1, -1, 1, -1, 1, -1])


def test_documented_errors_of_full_symmetry():
    """ValueError naming ``spin_parity``, ``momentum`` (on an open lattice; a disallowed
    wave vector) and ``rotation_parity``; TypeError naming ``lattice``."""
    sq = Square(4)
    for parity in (0, 2, -2):
        with pytest.raises(ValueError, match=rf"^spin_parity: expected \+1 or -1, got {parity}"):
            full_symmetry(sq, spin_parity=parity)
    with pytest.raises(ValueError, match=r"^momentum: the open lattice 4x4:open has no translations, so no "
                                         r"momentum sector; got \(3.14"):
        full_symmetry(Square(4, pbc=False), momentum=(np.pi, 0.0))
    with pytest.raises(ValueError, match=r"^momentum: component 0 = 1.0 is not allowed on an axis of length 4"):
        full_symmetry(sq, momentum=(1.0, 0.0))
    with pytest.raises(ValueError, match=r"^rotation_parity: expected \+1 or -1, got 3"):
        full_symmetry(sq, rotation_parity=3)
    with pytest.raises(ValueError, match=r"^rotation_parity: the lattice chain:8 has no point-group rotation"):
        full_symmetry(Chain(8), rotation_parity=-1)
    with pytest.raises(ValueError, match=r"^rotation_parity: the point group of honeycomb:1x1 \(C3v\)"):
        full_symmetry(Honeycomb(1), rotation_parity=-1)
    with pytest.raises(TypeError, match=r"^lattice: expected a quantax_lite.geometry.lattice.Lattice, got str"):
        full_symmetry("4x4")
    # k = 0 on an open lattice is no sector and no error
    assert full_symmetry(Square(4, pbc=False), momentum=(0.0, 0.0)).n_elements == 16
