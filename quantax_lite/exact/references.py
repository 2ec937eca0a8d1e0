"""Reference ground-state energies: the package's one table.

``ENERGY_PER_SITE[(lattice.name, hamiltonian, J2)]`` is the ground-state energy per site
(spin-1/2 units, J1 = 1, periodic clusters) of the Heisenberg (``"heisenberg"``, J2 = 0)
or J1-J2 (``"j1j2"``) model. Entries up to 24 sites were computed here by
:func:`~quantax_lite.exact.diagonalization.ground_state_energy` (total Sz 0, or 1/2 on 9 sites) and are
recomputed by ``tests/test_reference_energies.py`` to their last decimal; the keys of
:data:`LITERATURE` are published values of clusters beyond exact diagonalization here:

* 6x6 square, Heisenberg and J1-J2 at J2 = 0.5: exact diagonalization (Schulz, Ziman and
  Poilblanc, J. Phys. I France 6, 675 (1996));
* 10x10 square: quantum Monte Carlo (Sandvik, PRB 56, 11678 (1997));
* triangular:6x6, the 36-site torus spanned by 6 a_1 and 6 a_2 with full C6v symmetry
  (Leung and Runge, PRB 47, 5861 (1993); Bernu, Lecheminant, Lhuillier and Pierre, PRB 50,
  10048 (1994)).

The 36-site kagome value -0.43837653 (Lauchli, Sudan and Sorensen, PRB 83, 212401
(2011)) belongs to the C6v cluster "36d" spanned by 2 a_1 + 2 a_2 and -2 a_1 + 4 a_2
(12 cells), which no Kagome(L1, L2) is; it is not listed.
"""
from __future__ import annotations

__all__ = ["ENERGY_PER_SITE", "LITERATURE", "energy_per_site", "source"]

ENERGY_PER_SITE = {
    ("6x6", "heisenberg", 0.0): -0.678872,  # exact diagonalization (literature)
    ("6x6", "j1j2", 0.5): -0.50381,  # exact diagonalization (literature)
    ("10x10", "heisenberg", 0.0): -0.671549,  # quantum Monte Carlo (literature)
    ("triangular:3x3", "heisenberg", 0.0): -0.5833333333,  # 9 sites, Sz = 1/2: E = -21/4
    ("triangular:4x3", "heisenberg", 0.0): -0.5775676969,
    ("triangular:3x4", "heisenberg", 0.0): -0.5775676969,
    ("triangular:4x4", "heisenberg", 0.0): -0.5347196823,
    ("triangular:6x3", "heisenberg", 0.0): -0.5811075353,
    ("triangular:3x6", "heisenberg", 0.0): -0.5811075353,
    ("triangular:5x4", "heisenberg", 0.0): -0.5581064530,
    ("triangular:6x6", "heisenberg", 0.0): -0.5603734,  # literature (see above)
    ("honeycomb:2x2", "heisenberg", 0.0): -0.6025111718,
    ("honeycomb:3x2", "heisenberg", 0.0): -0.5775717907,
    ("honeycomb:4x2", "heisenberg", 0.0): -0.5699726305,
    ("honeycomb:2x4", "heisenberg", 0.0): -0.5699726305,
    ("honeycomb:3x3", "heisenberg", 0.0): -0.5609536576,
    ("honeycomb:5x2", "heisenberg", 0.0): -0.5667164098,
    ("honeycomb:4x3", "heisenberg", 0.0): -0.5556846899,  # 24 sites, E = -13.33643256 (ED here, ~5 min)
    ("kagome:2x2", "heisenberg", 0.0): -0.4537396014,  # E = -5.44487522, as Lauchli et al. (2011)
    ("kagome:3x2", "heisenberg", 0.0): -0.4471261541,
    ("kagome:2x3", "heisenberg", 0.0): -0.4471261541,
    ("kagome:4x2", "heisenberg", 0.0): -0.4483290520,  # 24 sites, E = -10.75989725 (ED here, ~5 min)
}

# the keys of published values (not recomputable here)
LITERATURE = frozenset({("6x6", "heisenberg", 0.0), ("6x6", "j1j2", 0.5), ("10x10", "heisenberg", 0.0),
                        ("triangular:6x6", "heisenberg", 0.0)})


def _key(lattice_name: str, hamiltonian: str, J2=0.0) -> tuple:
    return (str(lattice_name), str(hamiltonian), float(J2 or 0.0))


def energy_per_site(lattice_name: str, hamiltonian: str, J2=0.0) -> float | None:
    """The tabulated ground-state energy per site, or None."""
    return ENERGY_PER_SITE.get(_key(lattice_name, hamiltonian, J2))


def source(lattice_name: str, hamiltonian: str, J2=0.0) -> str | None:
    """Where the tabulated value comes from, in words (None without one)."""
    key = _key(lattice_name, hamiltonian, J2)
    if key not in ENERGY_PER_SITE:
        return None
    if key in LITERATURE:
        return "literature value (quantax_lite.exact.references)"
    return "tabulated ground state, exact diagonalization (quantax_lite.exact.references)"
