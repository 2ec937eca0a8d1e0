"""Operators on spins 1/2.

- :mod:`.hamiltonian`: the Hamiltonian contract (:class:`SpinHamiltonian`), bond
  Hamiltonians (:class:`BondHamiltonian`, :class:`Heisenberg`,
  :class:`TransverseFieldIsing`), local energies and sparse matrices.
- :mod:`.local_operators`: operators a physicist writes, ``sz(0) @ sz(1) + ...``
  (:class:`LocalOperator`, :func:`sx`, :func:`sy`, :func:`sz`, :func:`sp`, :func:`sm`).
- :mod:`.sign_rules`: Marshall's sign rule and the 120-degree phase rule.

Named models (``heisenberg``, ``j1j2``, ``tfim``, ...) are registered in
:mod:`quantax_lite.hamiltonians`.
"""
from quantax_lite.operators.hamiltonian import (
    BondHamiltonian, BondTerms, Heisenberg, SpinHamiltonian, TransverseFieldIsing, local_energy, make_local_energy,
)
from quantax_lite.operators.local_operators import (
    LocalOperator, bond_sum, sm, sp, spin_dot, spin_dot_sum, sx, sy, sz, total_sz,
)
from quantax_lite.operators.sign_rules import marshall_sign

__all__ = [
    "SpinHamiltonian", "BondHamiltonian", "BondTerms", "Heisenberg", "TransverseFieldIsing", "local_energy",
    "make_local_energy", "marshall_sign",
    "LocalOperator", "sx", "sy", "sz", "sp", "sm", "spin_dot", "bond_sum", "spin_dot_sum", "total_sz",
]
