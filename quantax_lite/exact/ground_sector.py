"""Which symmetry sector holds the ground state: one exact diagonalization of the whole
magnetization sector, then the weight of its ground state in each candidate sector.

The ground state ``psi`` of the whole Sz sector (Sz = 0 for an Sz-conserving Hamiltonian on
an even number of sites: it holds a member of every multiplet, so its lowest energy is that
of the whole space) is found once by sparse Lanczos (:func:`whole_space_ground_state`).
Its weight in the sector of a group ``G`` with characters ``chi`` is

    <psi| P |psi> = (1/|G|) sum_g chi_g <psi| E_g psi>,   (E_g psi)(s) = psi(g s),

so one overlap ``<psi|E_g psi>`` per group element (a permutation of the basis) decides
every sector built from those elements. A sector with a weight above :data:`WEIGHT_TOL`
holds a ground state (``P psi`` is an eigenvector of the lowest energy, also where it is
degenerate). Energies in the Hamiltonian's units.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Callable

import numpy as np
import scipy.linalg
import scipy.sparse.linalg as spla
from threadpoolctl import threadpool_limits

from quantax_lite.exact import diagonalization as exact
from quantax_lite.hilbert.configurations import all_states
from quantax_lite.geometry.symmetry import Symmetry

__all__ = ["MAX_SEARCH_SITES", "WEIGHT_TOL", "SectorSearch", "whole_space_ground_state", "GroundOverlaps",
           "find_ground_sector", "momenta"]

# the largest lattice whose whole Sz = 0 space is diagonalized to find the ground state's
# sector: 24 sites (2.7 million configurations) took 30 s and 5.4 GB on honeycomb 4x3
# (2-core CPU); 20 sites 3-4 s, 18 (kagome 2x3) 3 s, 12 well under 1 s
MAX_SEARCH_SITES = 24
# a sector whose weight <psi|P|psi> exceeds this holds a ground state; a sector without one
# gets only the Lanczos vector's error, (residual / gap)^2, many orders of magnitude less
WEIGHT_TOL = 1e-6


def whole_space_ground_state(hamiltonian):
    """``(energy, psi (n,) float64 unit vector, states (n, n_sites) int8)``: the lowest
    eigenpair of ``hamiltonian`` in its whole Sz sector (``total_sz="auto"``: Sz = 0 on an
    even number of sites when it conserves Sz, every configuration otherwise), by dense
    ``eigh`` up to 300 configurations, else Lanczos (``eigsh``, residual about 1e-11)."""
    states = np.asarray(all_states(hamiltonian.n_sites, exact.resolve_total_sz(hamiltonian, "auto")))
    H = hamiltonian.to_sparse(states)
    n = H.shape[0]
    if n <= 300:
        w, v = scipy.linalg.eigh(H.toarray())
        return float(w[0]), np.asarray(v[:, 0]), states
    v0 = np.random.default_rng(0).standard_normal(n)
    # tol 1e-12 with 40 Lanczos vectors: 2-3x faster than tol=0 on 48,620 configurations (kagome
    # 2x3); one BLAS thread: ARPACK's vector updates took 7.6 s with two threads on a busy
    # 2-core CPU, 1.4 s with one
    with threadpool_limits(limits=1, user_api="blas"):
        w, v = spla.eigsh(H, k=1, which="SA", v0=v0, tol=1e-12, ncv=min(n - 1, 40))
    return float(w[0]), np.asarray(v[:, 0]), states


class GroundOverlaps:
    """``<psi| E_g psi>`` of one vector over the configurations ``states``, computed per group
    element on first use and kept (keyed by the element's permutation and flip)."""

    def __init__(self, psi, states):
        self.psi = np.asarray(psi)
        self.states = np.asarray(states)
        self._known: dict[bytes, complex] = {}

    @staticmethod
    def _key(perm, flip) -> bytes:
        return np.asarray(perm, np.int32).tobytes() + (b"+" if int(flip) > 0 else b"-")

    def of(self, group: Symmetry) -> np.ndarray:
        """``(G,)`` complex: ``<psi|E_g psi>`` for every element of ``group`` in its order."""
        keys = [self._key(p, f) for p, f in zip(group.perms, group.flips)]
        missing = [g for g, k in enumerate(keys) if k not in self._known]
        block = 8  # image indices of 8 elements at a time: 8 x n int64 of memory
        for start in range(0, len(missing), block):
            part = missing[start:start + block]
            idx = exact.image_indices(group.perms[part], group.flips[part], self.states)  # (b, n)
            for g, rows in zip(part, idx):
                # (an elementwise sum, not BLAS's dot: 18 ms instead of 0.1 ms per element on a busy CPU)
                self._known[keys[g]] = complex(np.sum(np.conj(self.psi) * self.psi[rows]))
        return np.array([self._known[k] for k in keys])

    def weight(self, group: Symmetry) -> float:
        """``<psi|P|psi>``, the squared norm of ``psi``'s projection on ``group``'s sector."""
        c = self.of(group)
        return float(np.real(np.sum(group.characters * c)) / group.n_elements)


@dataclasses.dataclass(frozen=True)
class SectorSearch:
    """What :func:`find_ground_sector` found.

    sector: ``(momentum m or None, spin parity or None, rotation parity or None)`` as the
      caller's ``group_of`` takes them. ground_energy: the whole space's lowest energy.
    sector_energy: the chosen sector's lowest energy (``ground_energy`` where it holds the
      ground state). holds_ground_state: whether it does. weight: ``<psi|P|psi>`` of the
      chosen sector (0 where it does not hold the ground state)."""

    sector: tuple
    ground_energy: float
    sector_energy: float
    holds_ground_state: bool
    weight: float


def find_ground_sector(hamiltonian, candidates, group_of: Callable, *, ground=None,
                       overlaps: GroundOverlaps | None = None) -> SectorSearch:
    """The first of ``candidates`` (sectors in order of preference, each a tuple that
    ``group_of(*sector)`` turns into a :class:`~quantax_lite.geometry.symmetry.Symmetry`, or None for
    no group) whose sector holds a ground state of ``hamiltonian``'s whole Sz sector.

    A candidate whose ``group_of`` raises ValueError (characters the cluster's group does not
    have) is skipped. When none holds a ground state (it lies in an irrep no candidate
    expresses), the candidate with the lowest energy of its own, by Lanczos in each sector,
    is chosen. ``ground``: ``(energy, psi, states)`` of :func:`whole_space_ground_state`, if
    already known; ``overlaps``: a :class:`GroundOverlaps` of its ``psi`` to reuse. ValueError
    naming ``candidates`` when no candidate forms a group."""
    energy, psi, states = whole_space_ground_state(hamiltonian) if ground is None else ground
    overlaps = GroundOverlaps(psi, states) if overlaps is None else overlaps
    usable = []
    for sector in candidates:
        try:
            group = group_of(*sector)
        except ValueError:
            continue
        usable.append((sector, group))
        weight = 1.0 if group is None else overlaps.weight(group)
        if weight > WEIGHT_TOL:
            return SectorSearch(tuple(sector), energy, energy, True, weight)
    if not usable:
        raise ValueError("candidates: none of the sectors forms a group of this lattice")
    lowest = [(exact.ground_state_energy(hamiltonian, symmetry=group), i) for i, (_, group) in enumerate(usable)
              if group is None or group.sector_dimension(exact.resolve_total_sz(hamiltonian, "auto")) > 0]
    e_sector, i = min(lowest)
    return SectorSearch(tuple(usable[i][0]), energy, float(e_sector), False, 0.0)


def momenta(shape) -> list[tuple[int, ...]]:
    """Every momentum ``m`` (``0 <= m_d < shape[d]``) of a cluster of ``shape`` cells, in
    row-major order (k = 0 first), as :func:`~quantax_lite.geometry.symmetry.allowed_momenta` lists them."""
    return [tuple(int(x) for x in m) for m in itertools.product(*(range(int(L)) for L in shape))]
