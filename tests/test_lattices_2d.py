"""Triangular, honeycomb and kagome lattices: geometry, bonds, space groups, Hamiltonians, ED.

References are built here independently of the library: positions from the Bravais
vectors written out below, bonds by an explicit search over periodic images, symmetry
operations as explicit coordinate maps, Hamiltonians as Kronecker products of spin
matrices.
"""
import functools
import itertools

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from quantax_lite.exact.diagonalization import REFERENCE_ENERGY_PER_SITE, ground_state, symmetry_matrix
from quantax_lite.hilbert.configurations import all_states
from quantax_lite.geometry.lattice import Chain, Honeycomb, Kagome, Lattice, Square, Triangular, parse_lattice, site_coords
from quantax_lite.operators.hamiltonian import Heisenberg, TransverseFieldIsing, marshall_sign
from quantax_lite.geometry.symmetry import (
    allowed_momenta,
    full_symmetry,
    point_group,
    point_group_kind,
    product,
    spin_inversion,
    translations,
)

S3 = np.sqrt(3.0)
# (vectors, basis) written out independently of quantax_lite.geometry.lattice
GEOMETRY = {
    "triangular": ([[1, 0], [0.5, S3 / 2]], [[0, 0]]),
    "honeycomb": ([[S3, 0], [S3 / 2, 1.5]], [[0, 0], [S3 / 2, 0.5]]),
    "kagome": ([[2, 0], [1, S3]], [[0, 0], [1, 0], [0.5, S3 / 2]]),
}
MAKE = {"triangular": Triangular, "honeycomb": Honeycomb, "kagome": Kagome}


def reference_positions(kind, L1, L2):
    V, B = (np.array(x, float) for x in GEOMETRY[kind])
    return np.array([c1 * V[0] + c2 * V[1] + b for c1 in range(L1) for c2 in range(L2) for b in B])


def reference_bonds(kind, L1, L2, pbc, order):
    """Pairs at the order-th distance of the infinite lattice, by trying every image."""
    V, B = (np.array(x, float) for x in GEOMETRY[kind])
    pos = reference_positions(kind, L1, L2)
    patch = np.array([a * V[0] + b * V[1] + x - y for a in range(-6, 7) for b in range(-6, 7) for x in B for y in B])
    dist = np.sqrt((patch**2).sum(1))
    shells = []
    for d in np.sort(dist[dist > 1e-9]):
        if not shells or d - shells[-1] > 1e-6:
            shells.append(d)
    target = shells[order - 1]
    images = [(0, 0)] if not pbc else list(itertools.product(range(-2, 3), repeat=2))
    shifts = np.array([w1 * L1 * V[0] + w2 * L2 * V[1] for w1, w2 in images])
    pairs = []
    for i in range(len(pos)):
        for j in range(i + 1, len(pos)):
            d = np.sqrt((((pos[j] + shifts) - pos[i]) ** 2).sum(1)).min()
            if abs(d - target) < 1e-6:
                pairs.append((i, j))
    return pairs


CLUSTERS = [
    ("triangular", 3, 3, True), ("triangular", 4, 3, True), ("triangular", 2, 5, True),
    ("triangular", 3, 3, False), ("honeycomb", 2, 2, True), ("honeycomb", 3, 2, True),
    ("honeycomb", 1, 3, True), ("honeycomb", 2, 3, False), ("kagome", 2, 2, True),
    ("kagome", 2, 3, True), ("kagome", 2, 2, False),
]


@pytest.mark.parametrize("kind,L1,L2,pbc", CLUSTERS, ids=lambda x: str(x))
def test_geometry_numbering_and_bonds_match_brute_force(kind, L1, L2, pbc):
    lat = MAKE[kind](L1, L2, pbc=pbc)
    nb = len(GEOMETRY[kind][1])
    assert lat.kind == kind and lat.shape == (L1, L2) and lat.n_basis == nb and lat.pbc is pbc
    assert lat.n_sites == L1 * L2 * nb and lat.ndim == 2
    assert lat.name == f"{kind}:{L1}x{L2}" + ("" if pbc else ":open")
    np.testing.assert_allclose(lat.vectors, GEOMETRY[kind][0], atol=1e-15)
    np.testing.assert_allclose(lat.basis, GEOMETRY[kind][1], atol=1e-15)
    np.testing.assert_allclose(lat.positions, reference_positions(kind, L1, L2), atol=1e-12)
    assert lat.positions.shape == (lat.n_sites, 2) and lat.cell_coords.dtype == np.int64
    # site = cell_index * n_basis + b, cells row-major
    for site in range(lat.n_sites):
        c, b = divmod(site, nb)
        assert tuple(lat.cell_coords[site]) == (c // L2, c % L2) and lat.basis_index[site] == b
        assert lat.site_index(lat.cell_coords[site], b) == site
    np.testing.assert_array_equal(lat.coords, lat.cell_coords)
    for order in (1, 2, 3):
        b = lat.bonds(order)
        assert b.dtype == np.int32 and (len(b) == 0 or np.all(b[:, 0] < b[:, 1]))
        assert [tuple(p) for p in b.tolist()] == reference_bonds(kind, L1, L2, pbc, order)
    # minimum-image displacements have the shell lengths
    for order, shell in zip((1, 2), lat.distance_shells(2)):
        d = lat.displacement(lat.bonds(order)[:, 0], lat.bonds(order)[:, 1])
        np.testing.assert_allclose((d**2).sum(1), shell, rtol=1e-10)


def test_shells_coordination_and_sublattices():
    np.testing.assert_allclose(Triangular(6).distance_shells(4), [1, 3, 4, 7])
    np.testing.assert_allclose(Honeycomb(6).distance_shells(4), [1, 3, 4, 7])
    np.testing.assert_allclose(Kagome(6).distance_shells(4), [1, 3, 4, 7])
    # coordination numbers of the first three shells on clusters large enough to have no coincidences
    for lat, z in ((Triangular(6), (6, 6, 6)), (Honeycomb(6), (3, 6, 3)), (Kagome(6), (4, 4, 6))):
        for order, zk in zip((1, 2, 3), z):
            assert all(len(n) == zk for n in lat.neighbours(order)), (lat.name, order)
    h, t, k = Honeycomb(3), Triangular(6), Kagome(2)
    assert h.is_bipartite and h.n_sublattices == 2
    np.testing.assert_array_equal(h.sublattice, h.basis_index)
    assert not t.is_bipartite and not k.is_bipartite and k.n_sublattices == t.n_sublattices == 3
    # the three-sublattice labels of the triangular lattice colour every triangle (3 | L)
    b = t.bonds(1)
    assert np.all(t.sublattice[b[:, 0]] != t.sublattice[b[:, 1]])
    # the chain and square keep their contract values
    sq = Square(3, 4)
    assert sq.n_basis == 1 and sq.kind == "square" and Chain(5).kind == "chain"
    np.testing.assert_array_equal(sq.positions, sq.coords)
    np.testing.assert_array_equal(sq.basis_index, 0)
    assert Square(4) == Lattice((4, 4)) and Triangular(4) != Square(4) and hash(Kagome(2)) == hash(Kagome(2, 2))
    with pytest.raises(ValueError, match=r"^L1, L2: a triangular lattice needs at least 2 sites"):
        Triangular(1)
    with pytest.raises(ValueError, match=r"^L2: expected a positive int, got 0"):
        Kagome(2, 0)


def test_translations_momenta_and_one_magnon_plane_waves():
    lat = Kagome(2, 3)
    T = translations(lat, allowed_momenta(lat)[4])
    k = allowed_momenta(lat)[4]
    P = lat.periods
    for g, r in enumerate(site_coords(lat.shape)):
        R = r @ lat.vectors
        moved = lat.positions[T.perms[g]] - lat.positions - R  # a whole period apart
        frac = moved @ np.linalg.inv(P)
        np.testing.assert_allclose(frac, np.round(frac), atol=1e-9)
        np.testing.assert_array_equal(lat.basis_index[T.perms[g]], lat.basis_index)
        assert np.isclose(T.characters[g], np.exp(1j * k @ R))
    with pytest.raises(ValueError, match=r"^momentum: .* is not on the reciprocal lattice of the cluster kagome:2x3"):
        translations(lat, (np.pi / 2, 0.0))
    # a single magnon on a ferromagnet is the plane wave exp(+i k.r) with the dispersion of the six bonds
    tri = Triangular(4)
    H = Heisenberg(tri)
    nn = np.array([[1, 0], [0.5, S3 / 2], [-0.5, S3 / 2], [-1, 0], [-0.5, -S3 / 2], [0.5, -S3 / 2]])
    for k in allowed_momenta(tri)[[0, 1, 5, 10]]:
        e, v, states = ground_state(H, total_sz=7, symmetry=translations(tri, k))
        x = np.argmin(states, axis=1)
        plane = np.exp(1j * tri.positions[x] @ k) / 4
        assert abs(abs(np.vdot(plane, v)) - 1) < 1e-10
        assert abs(e - (48 / 4 - 0.5 * np.sum(1 - np.cos(nn @ k)))) < 1e-10


def test_point_groups_detected_from_geometry():
    kinds = {
        Triangular(3): "C6v", Triangular(6): "C6v", Triangular(4, 3): "C2", Honeycomb(2): "C6v",
        Honeycomb(3): "C6v", Honeycomb(3, 2): "C2", Kagome(2): "C6v", Kagome(2, 3): "C2",
        Square(4): "C4v", Square(3, 5): "C2v", Triangular(3, pbc=False): "C2v",
    }
    for lat, name in kinds.items():
        assert point_group_kind(lat) == name, lat.name
    # rotation by 60 degrees about site 0: c1 a1 + c2 a2 -> -c2 a1 + (c1 + c2) a2
    tri = Triangular(4)
    C6v = point_group(tri, "full")
    assert C6v.n_elements == 12 and point_group(tri) == C6v
    c = tri.cell_coords
    np.testing.assert_array_equal(C6v.perms[1], tri.site_index(np.stack([-c[:, 1], c[:, 0] + c[:, 1]], 1)))
    # named subgroups and their sizes; a group the cluster lacks is an error naming it
    for name, size in (("C6", 6), ("C3v", 6), ("C3", 3), ("C2v", 4), ("C2", 2), ("Cs", 2)):
        assert point_group(tri, name).n_elements == size
    assert point_group(Honeycomb(3), "C3v").n_elements == 6 and point_group(Square(4), "C4").n_elements == 4
    with pytest.raises(ValueError, match=r"^kind: the cluster triangular:4x3 has no C6v point group \(its full point group is C2\)"):
        point_group(Triangular(4, 3), "C6v")
    with pytest.raises(ValueError, match=r"^kind: the cluster 4x4 has no C6v point group"):
        point_group(Square(4), "C6v")
    with pytest.raises(ValueError, match=r"^kind: expected None, 'full'"):
        point_group(Kagome(2), "D7")
    with pytest.raises(ValueError, match=r"^characters: expected 12 values for full"):
        point_group(Kagome(2), "full", characters=[1, -1])


def brute_force_space_group(lat):
    """Distinct site maps x -> O x + t (O: every rotation/mirror by a multiple of 15 degrees) that
    map the periodic cluster onto itself, found by trying every t that sends site 0 to a site."""
    pos, P = lat.positions, lat.periods
    inv = np.linalg.inv(P)
    wrapped = (pos @ inv) % 1.0
    found = set()
    for k in range(24):
        t = np.pi * (k % 12) / 6
        O = np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]]) @ (np.diag([1, -1]) if k >= 12 else np.eye(2))
        C = P @ O.T @ inv
        if np.abs(C - np.round(C)).max() > 1e-9:
            continue  # does not map the torus to itself
        for j in range(lat.n_sites):
            img = ((pos @ O.T + (pos[j] - O @ pos[0])) @ inv) % 1.0
            diff = np.abs(img[:, None, :] - wrapped[None, :, :])
            match = np.all(np.minimum(diff, 1 - diff) < 1e-7, axis=2)
            if np.all(match.sum(1) == 1):
                found.add(tuple(np.argmax(match, axis=1)))
    return found


def brute_force_check_group(sym):
    P, F, chi = sym.perms, sym.flips.astype(int), sym.characters
    index = {(tuple(p), f): g for g, (p, f) in enumerate(zip(P.tolist(), F.tolist()))}
    assert len(index) == sym.n_elements
    comp = P[:, P]
    for h in range(sym.n_elements):
        for g in range(sym.n_elements):
            gh = index[(tuple(comp[h, g].tolist()), F[g] * F[h])]
            assert abs(chi[gh] - chi[g] * chi[h]) < 1e-9


@pytest.mark.parametrize("lat", [Triangular(3), Triangular(4, 3), Honeycomb(2), Honeycomb(3, 2), Kagome(2), Kagome(2, 3)],
                         ids=lambda l: l.name)
def test_space_group_is_every_symmetry_of_the_cluster(lat):
    space = product(translations(lat), point_group(lat, "full"))
    assert {tuple(p) for p in space.perms.tolist()} == brute_force_space_group(lat)
    full = full_symmetry(lat)
    assert full.n_elements == 2 * space.n_elements and full.lattice == lat
    brute_force_check_group(space)
    brute_force_check_group(translations(lat, allowed_momenta(lat)[1]))
    for order in (1, 2, 3):  # every element maps every bond shell onto itself
        bonds = {frozenset(b) for b in lat.bonds(order).tolist()}
        for p in full.perms:
            assert {frozenset((int(p[i]), int(p[j]))) for i, j in bonds} == bonds


# --------------------------------------------------------------------- Hamiltonians
SX = np.array([[0, 0.5], [0.5, 0]])
SY = np.array([[0, -0.5j], [0.5j, 0]])
SZ = np.diag([0.5, -0.5])


def kron_heisenberg(n, bonds, J=1.0, delta=1.0):
    """Sparse H = J sum_bonds (Sx Sx + Sy Sy + delta Sz Sz) from Kronecker products; site 0 is the
    most significant factor (basis index bit n-1-i is site i up... down = 1)."""
    terms = []
    for i, j in bonds:
        for a, w in ((SX, 1.0), (SY, 1.0), (SZ, delta)):
            ops = [sp.identity(2**i), sp.csr_matrix(a), sp.identity(2 ** (j - i - 1)), sp.csr_matrix(a),
                   sp.identity(2 ** (n - j - 1))]
            terms.append(J * w * functools.reduce(lambda x, y: sp.kron(x, y, format="csr"), ops))
    return sum(terms).real.tocsr()


def kron_perm(perm, n):
    """Operator E with (E psi)(s) = psi(g s), (g s)[i] = s[perm[i]], in the Kronecker basis."""
    idx = np.arange(2**n)
    bits = (idx[:, None] >> (n - 1 - np.arange(n))) & 1  # bit of site i
    img = (bits[:, perm] << (n - 1 - np.arange(n))).sum(1)
    return sp.csr_matrix((np.ones(2**n), (idx, img)), shape=(2**n, 2**n))


def sector(n, sz):
    idx = np.arange(2**n)
    ups = n - ((idx[:, None] >> np.arange(n)) & 1).sum(1)
    return np.nonzero(ups - n / 2 == sz)[0]


@pytest.mark.parametrize("lat", [Triangular(3), Honeycomb(2), Kagome(2)], ids=lambda l: l.name)
def test_every_group_element_commutes_with_the_hamiltonian(lat):
    n = lat.n_sites
    pairs = reference_bonds(lat.kind, *lat.shape, True, 1)
    H = kron_heisenberg(n, pairs)
    group = product(translations(lat), point_group(lat, "full"))
    E = [kron_perm(p, n) for p in group.perms]
    assert all(abs(Eg @ H - H @ Eg).max() < 1e-12 for Eg in E)
    # a deliberately wrong bond set (one bond left out) breaks the commutation
    H_wrong = kron_heisenberg(n, pairs[1:])
    assert max(abs(Eg @ H_wrong - H_wrong @ Eg).max() for Eg in E) > 0.1
    # the library's Hamiltonians in a sector, with the library's symmetry matrices (spin inversion too)
    sz = 0 if n % 2 == 0 else 0.5
    states = all_states(n, sz)
    G = full_symmetry(lat) if n % 2 == 0 else group
    for ham in (Heisenberg(lat, J2=0.37, delta=0.6), Heisenberg(lat)):
        Hs = ham.to_sparse(states)
        for g in range(G.n_elements):
            Eg = symmetry_matrix(G, g, states)
            assert abs(Eg @ Hs - Hs @ Eg).max() < 1e-12
    if n <= 9:
        every = all_states(n)
        tfim = TransverseFieldIsing(lat, h=0.7).to_sparse(every)
        for g in range(group.n_elements):
            Eg = symmetry_matrix(group, g, every)
            assert abs(Eg @ tfim - tfim @ Eg).max() < 1e-12


ED_CASES = [
    # lattice, total_sz, literature energy of this cluster (None where none is quoted)
    (Triangular(3), 0.5, None),
    (Triangular(4, 3), 0, None),
    (Honeycomb(2), 0, None),
    (Honeycomb(3, 2), 0, None),
    # 12-site kagome torus spanned by 2 a1, 2 a2 (C6v): E0 = -5.44487522, Lauchli, Sudan and
    # Sorensen, PRB 83, 212401 (2011), table of clusters
    (Kagome(2), 0, -5.44487522),
]


@pytest.mark.parametrize("lat,sz,literature", ED_CASES, ids=lambda x: getattr(x, "name", str(x)))
def test_exact_energies_against_kronecker_hamiltonians(lat, sz, literature):
    n = lat.n_sites
    sel = sector(n, sz)
    H = kron_heisenberg(n, reference_bonds(lat.kind, *lat.shape, True, 1))[sel][:, sel]
    expected = spla.eigsh(H, k=1, which="SA", v0=np.ones(H.shape[0]), tol=0)[0][0]
    e, v, states = ground_state(Heisenberg(lat), total_sz=sz)
    assert abs(e - expected) < 1e-9
    assert abs(REFERENCE_ENERGY_PER_SITE[(lat.name, "heisenberg", 0.0)] * n - expected) < 1e-7
    if literature is not None:
        assert abs(e - literature) < 1e-7
    # the symmetric sector of the full space group: the ground state of the bipartite honeycomb
    # clusters, an excited state of the 12-site kagome and triangular 4x3 clusters
    if sz == 0:
        e_sym = ground_state(Heisenberg(lat), total_sz=0, symmetry=full_symmetry(lat))[0]
        assert e_sym > e - 1e-9 and (abs(e_sym - e) < 1e-9) == (lat.kind == "honeycomb")


def test_triangular_4x4_energy_and_table():
    lat = Triangular(4)
    sel = sector(16, 0)
    H = kron_heisenberg(16, reference_bonds("triangular", 4, 4, True, 1))[sel][:, sel]
    expected = spla.eigsh(H, k=1, which="SA", v0=np.ones(H.shape[0]), tol=0)[0][0]
    assert abs(REFERENCE_ENERGY_PER_SITE[("triangular:4x4", "heisenberg", 0.0)] * 16 - expected) < 1e-7
    # every table entry names a lattice the constructors build, with its number of sites
    for (name, ham, j2), e in REFERENCE_ENERGY_PER_SITE.items():
        lattice = parse_lattice(name)
        kind = name.split(":")[0] if ":" in name else "square"
        assert lattice.kind == kind and lattice.pbc and lattice.name == name
        if kind != "square":
            assert MAKE[kind](*lattice.shape).name == name
        assert (ham, j2) in (("heisenberg", 0.0), ("j1j2", 0.5)) and -0.7 < e < -0.4


def test_marshall_sign_only_with_two_sublattices():
    lat = Honeycomb(3, 2)
    e, v, states = ground_state(Heisenberg(lat, marshall_sign=True), total_sz=0)
    v = v * np.sign(v[np.argmax(abs(v))])
    assert np.all(v > 1e-12)  # bipartite: the rotated ground state is sign-free
    e0, v0, _ = ground_state(Heisenberg(lat), total_sz=0)
    assert abs(e - e0) < 1e-10 and abs(abs(np.dot(marshall_sign(lat, states) * v0, v)) - 1) < 1e-10
    for bad in (Triangular(3), Kagome(2)):
        with pytest.raises(ValueError, match=r"^marshall_sign: needs a lattice with two sublattices"):
            Heisenberg(bad, marshall_sign=True)
        with pytest.raises(ValueError, match=r"^marshall_sign: "):
            marshall_sign(bad, np.ones((1, bad.n_sites), np.int8))
