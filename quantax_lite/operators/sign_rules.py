"""Sign and phase rules of spin-1/2 antiferromagnets: Marshall's rule and the 120-degree rule.

* Marshall: on a bipartite lattice (two sublattices, every nearest-neighbour bond joining
  them) the Heisenberg ground state has the sign ``u(s) = prod_{i in sublattice 1} s_i``
  (:func:`marshall_sign`); ``Heisenberg(..., marshall_sign=True)`` works in the basis
  rotated by it, where that ground state is positive.
* 120 degrees: on a lattice whose three sublattices colour every nearest-neighbour bond
  (triangular with both extents divisible by 3, kagome) the phase
  ``exp(i sum_{i: s_i = -1} theta_i)``, ``theta_i = 2 pi l_i / 3``
  (:func:`sublattice_phases`), that of the coplanar ordered state.

:func:`default_rule` says which one a lattice has.
"""
from __future__ import annotations

import numpy as np

from quantax_lite.hilbert.configurations import check_spin_dtype, check_spin_values
from quantax_lite.geometry.lattice import Lattice, translation_perms

__all__ = ["RULES", "check_marshall_rule", "default_rule", "has_marshall_rule", "marshall_sign", "phase_rule_fits", "sublattice_phases",
           "translation_phase_factors"]

RULES = ("marshall", "120")


def has_marshall_rule(lattice: Lattice) -> bool:
    """Whether Marshall's rule is defined on ``lattice``: it is bipartite."""
    return bool(lattice.is_bipartite)


def check_marshall_rule(lattice: Lattice) -> None:
    """``ValueError`` naming ``marshall_sign`` unless ``lattice`` has two sublattices."""
    if lattice.n_sublattices != 2:
        raise ValueError(
            f"marshall_sign: needs a lattice with two sublattices (chain, square, honeycomb), "
            f"got the {lattice.kind} lattice {lattice.name} with {lattice.n_sublattices} sublattices "
            "(not bipartite); use marshall_sign=False")


def marshall_sign(lattice: Lattice, states) -> np.ndarray:
    """Marshall sign ``u(s) = prod_{i: sublattice 1} s_i`` of ``states`` ``(..., n_sites)``
    +-1: ``(...,)`` int8. ``ValueError`` naming ``marshall_sign`` on a lattice without two
    sublattices (triangular, kagome)."""
    if not isinstance(lattice, Lattice):
        raise TypeError(f"lattice: expected a quantax_lite.geometry.lattice.Lattice, got {type(lattice).__name__}")
    check_marshall_rule(lattice)
    states = np.asarray(states)
    if states.ndim < 1 or states.shape[-1] != lattice.n_sites:
        raise ValueError(f"states: expected configurations of shape (..., {lattice.n_sites}), got {states.shape}")
    check_spin_dtype(states, "states")
    check_spin_values(states, "states")
    sub = lattice.sublattice.astype(bool)
    return np.prod(states[..., sub].astype(np.int64), axis=-1).astype(np.int8)


def sublattice_phases(lattice: Lattice) -> np.ndarray:
    """The 120-degree phase rule ``theta_i = 2 pi l_i / 3`` of the sublattice labels
    ``l_i`` (``lattice.sublattice``), ``(n_sites,)`` float64 radians.

    ``exp(i sum_{i: s_i = -1} theta_i)`` is the phase of the classical coplanar state whose
    spins on sublattice ``l`` point along ``2 pi l / 3`` in the xy plane: the 120-degree
    Neel state of the triangular lattice, the q = 0 state of the kagome lattice. A
    lattice whose labels are not three or do not colour every nearest-neighbour bond
    with two different labels (e.g. a triangular cluster with an extent that 3 does not
    divide) raises ValueError naming ``lattice``.
    """
    labels = np.asarray(lattice.sublattice, np.int64)
    bonds = lattice.bonds(1)
    if lattice.n_sublattices != 3 or np.any(labels[bonds[:, 0]] == labels[bonds[:, 1]]):
        raise ValueError(
            f"lattice: the 120-degree phase rule needs three sublattices that colour every nearest-neighbour "
            f"bond, which the {lattice.kind} lattice {lattice.name} does not have "
            "(triangular clusters need both extents divisible by 3)")
    return 2 * np.pi * labels / 3.0


def translation_phase_factors(lattice: Lattice, site_phases):
    """What each translation does to the phase rule ``exp(i sum_{down} theta)``:
    ``(n_translations,)`` complex factors ``c`` (translating the rule multiplies it by
    ``c ** n_down``; :func:`~quantax_lite.geometry.lattice.translation_perms` order), or None if some
    translation shifts the angles of different sites by different amounts."""
    theta = np.asarray(site_phases, np.float64)
    factors = []
    for perm in translation_perms(lattice.shape, lattice.n_basis):
        shift = np.exp(1j * (theta[perm] - theta))
        if not np.allclose(shift, shift[0], rtol=0.0, atol=1e-9):
            return None
        factors.append(shift[0])
    return np.asarray(factors)


def phase_rule_fits(lattice: Lattice) -> bool:
    """Whether the 120-degree rule is defined on ``lattice`` (three sublattices colouring every
    nearest-neighbour bond) and every translation keeps it in the Sz = 0 sector (shifts its
    phase by a multiple of 2 pi there)."""
    try:
        factors = translation_phase_factors(lattice, sublattice_phases(lattice))
    except ValueError:
        return False
    # one factor c per down spin: c ** (N / 2) in Sz = 0
    return factors is not None and bool(np.all(np.abs(factors ** (lattice.n_sites // 2) - 1) <= 1e-9))


def default_rule(lattice: Lattice) -> str | None:
    """``"marshall"`` on a bipartite lattice, ``"120"`` where :func:`phase_rule_fits`, else None."""
    if has_marshall_rule(lattice):
        return "marshall"
    return "120" if phase_rule_fits(lattice) else None
