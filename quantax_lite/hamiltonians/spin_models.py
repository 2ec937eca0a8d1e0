"""The built-in models of a recipe: ``heisenberg``, ``j1j2`` and ``tfim``, one registration each.

Heisenberg and J1-J2 in spin-1/2 units (J1 = 1), the transverse-field Ising model in Pauli
units (J = 1) in its sign-rule basis (for h < 0 the basis rotated by prod sz, same
spectrum, a positive ground state).
"""
from __future__ import annotations

from quantax_lite.operators.hamiltonian import Heisenberg, TransverseFieldIsing
from .registry import PAULI_UNITS, marshall_rule, register_hamiltonian

__all__ = ["heisenberg", "j1j2", "tfim"]


def _in_marshall_basis(hamiltonian) -> bool:
    return bool(getattr(hamiltonian, "marshall_sign", False))


def _nonnegative_field(hamiltonian) -> bool:
    # -h sx: non-positive off-diagonal elements (a positive ground state) for a field >= 0,
    # which the sign-rule basis gives for any h
    return hamiltonian.field >= 0


def _ising_sign_free(lattice, h, marshall) -> str:
    return "the transverse-field Ising model in its sign-rule basis has a positive ground state"


@register_hamiltonian("heisenberg", title="Heisenberg model", help="H = J1 sum S.S", marshall=True,
                      antiferromagnet=True, sign_free=marshall_rule, positive=_in_marshall_basis)
def heisenberg(lattice, coupling, marshall):
    """H = sum_<ij> S_i . S_j (no coupling: ``coupling`` is 0.0)."""
    return Heisenberg(lattice, J1=1.0, J2=coupling, marshall_sign=marshall)


@register_hamiltonian("j1j2", title="J1-J2 model", help="adds J2 on next-nearest bonds", coupling="J2", default=0.5,
                      marshall=True, antiferromagnet=True, frustration="j1j2", sign_free=marshall_rule)
def j1j2(lattice, J2, marshall):
    """H = sum_<ij> S_i . S_j + J2 sum_<<ij>> S_i . S_j."""
    return Heisenberg(lattice, J1=1.0, J2=J2, marshall_sign=marshall)


@register_hamiltonian("tfim", title="transverse-field Ising model", help="H = -sum sz sz - h sum sx (Pauli units)",
                      coupling="h", default=1.0, units=PAULI_UNITS, sz_sector=False, sign_free=_ising_sign_free,
                      positive=_nonnegative_field)
def tfim(lattice, h, marshall):
    """H = -sum_<ij> sz_i sz_j - h sum_i sx_i, in the basis where the ground state is positive."""
    return TransverseFieldIsing(lattice, J=1.0, h=h, sign_rule=True)
