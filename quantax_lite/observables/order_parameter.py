"""The staggered structure factor ``S(Q)`` and magnetization ``m^2`` of a two-sublattice lattice."""
from __future__ import annotations

import math

import numpy as np

from quantax_lite.geometry.lattice import Lattice
from .checks import lattice_of
from .contract import Observable, Part
from .correlations import corr_sites, pair_functional, pair_specs
from .json_values import number


def _staggered_signs(lattice: Lattice) -> np.ndarray:
    if lattice.n_sublattices != 2:
        raise ValueError(
            f"lattice: the staggered magnetization needs two sublattices, {lattice.name} has "
            f"{lattice.n_sublattices}"
        )
    return 1.0 - 2.0 * lattice.sublattice.astype(np.float64)


def staggered_magnetization_sq(corr, lattice: Lattice):
    """``m^2 = <(sum_i eps_i S_i)^2> / N^2 = S(Q) / N`` with the staggered structure factor
    ``S(Q) = (1/N) sum_ij eps_i eps_j <S_i . S_j>``, ``eps_i = +1 / -1`` on the two
    sublattices (:attr:`Lattice.sublattice`). On a chain or square lattice
    ``eps_i = (-1)^{x_i + y_i} = e^{i Q . r_i}``, ``Q = (pi, ..., pi)``, so ``S(Q)`` is
    ``S(pi, pi)`` (``S(pi)`` on a chain), also where ``Q`` is not a momentum of the
    cluster (an odd periodic side). Returns ``((S(Q), error), (m^2, error))``, errors None
    for a matrix ``corr``. ValueError for a lattice without two sublattices."""
    n = corr_sites(corr)
    lattice = lattice_of(lattice, n)
    coef, const = stag_tables(lattice)
    mean, error = pair_functional(corr, coef, const)
    err = (None, None) if error is None else (float(error[0]), float(error[1]))
    return (float(mean[0]), err[0]), (float(mean[1]), err[1])


def stag_tables(lattice: Lattice):
    """Pair functional of ``(S(Q), m^2)``: ``(coefficients (n_pairs, 2), constant (2,))``."""
    n = lattice.n_sites
    eps = _staggered_signs(lattice)
    i, j = np.triu_indices(n, k=1)
    coef = np.stack([2.0 * eps[i] * eps[j] / n, 2.0 * eps[i] * eps[j] / n**2], axis=1)
    return coef, np.array([0.75, 0.75 / n])


def _evaluate(inputs, values) -> Part:
    if inputs.lattice.n_sublattices != 2:
        return Part(np.zeros((inputs.n_samples, 0)))
    coef, const = stag_tables(inputs.lattice)
    return Part(values[0] @ coef, offset=const)


def _finish(inputs, stats, state) -> dict:
    lattice = inputs.lattice
    if len(stats.mean) == 0:
        s_q = s_q_err = m2 = m2_err = None
    else:
        (s_q, m2), (s_q_err, m2_err) = stats.mean, stats.error
    return {
        "s_pi_pi": {"q": [math.pi] * lattice.ndim if lattice.is_hypercubic else None,
                    "mean": number(s_q), "error": number(s_q_err)},
        "staggered_magnetization_sq": {"mean": number(m2), "error": number(m2_err)},
    }


STAGGERED_MAGNETIZATION = Observable("staggered_magnetization", _evaluate, _finish, pair_specs)
