"""Geometry: lattices and their symmetry groups.

- :mod:`.lattice`: a grid of unit cells with a basis of sites (:class:`Lattice`,
  :func:`Chain`, :func:`Square`, :func:`Triangular`, :func:`Honeycomb`, :func:`Kagome`);
  coordinates, sublattices, bonds.
- :mod:`.symmetry`: symmetry groups as permutation tables with characters
  (:class:`Symmetry`, :func:`translations`, :func:`point_group`, :func:`spin_inversion`,
  :func:`product`, :func:`full_symmetry`).
- :mod:`.brillouin`: the first Brillouin zone and its high-symmetry points.
"""
from quantax_lite.geometry.lattice import (
    Chain, Honeycomb, Kagome, Lattice, Square, Triangular, parse_lattice,
)
from quantax_lite.geometry.symmetry import (
    Symmetry, allowed_momenta, full_symmetry, little_group, point_group, point_group_kind, product,
    rotation_characters, spin_inversion, translations,
)

__all__ = [
    "Lattice", "Chain", "Square", "Triangular", "Honeycomb", "Kagome", "parse_lattice",
    "Symmetry", "translations", "allowed_momenta", "point_group", "point_group_kind", "spin_inversion",
    "product", "little_group", "rotation_characters", "full_symmetry",
]
