"""Exact sums over a sector instead of samples: one row per symmetry orbit, exact weights."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from quantax_lite.utils.validate import positive_int
from quantax_lite.hilbert.configurations import all_states
from quantax_lite.utils import chunk_map, make_mesh, replicate
from quantax_lite.utils.mesh import mesh_size

from ._common import enumerated_sector
from quantax_lite.utils import tuning

__all__ = ["FullSumState", "FullSumSampler", "orbit_representatives", "row_local_energies"]


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class FullSumState:
    """State of :class:`FullSumSampler` (a :class:`ChainState` with one "chain"); the sums
    need none, so it holds the same parts whatever the rows (a run's state keeps its shape
    when its symmetry stage, and with it the rows, changes):

    key: unused by the sums, kept so a driver's state has the same parts as with samples.
    states: int8 (1, n_sites), the first configuration of the sector.
    n_accepted, n_proposed: int32 (1,), both 1 (nothing is rejected).
    """

    key: jax.Array
    states: jax.Array
    n_accepted: jax.Array
    n_proposed: jax.Array


@dataclass(frozen=True)
class FullSumSampler:
    """Every configuration of a sector with its exact weight |psi|^2 / Z, in place of samples
    (a :class:`~quantax_lite.sampler.Sampler` for drivers that take weights: ``VMC``, which
    calls :meth:`probabilities` each step instead of ``sample``).

    With ``symmetry`` (a :class:`~quantax_lite.geometry.symmetry.Symmetry` of the wavefunction:
    psi(g s) = psi(s) / chi_g for every element g, as a network projected on it satisfies)
    the rows are one representative per orbit of the group, each weighted by its orbit's
    size: |psi|^2, the local energy (for a Hamiltonian that commutes with the group) and
    d log psi / d theta are the same on every configuration of an orbit, so every sum over
    the sector is a sum over the representatives. Orbits on which every such psi vanishes
    (the characters are not 1 on the orbit's stabilizer) are left out. Without it the rows
    are every configuration.

    log_psi: ``log_psi(params, s) -> (batch,)``; n_sites: number of spins.
    total_sz: the sector (spin-1/2 units); ``"auto"`` and None: every configuration (pass 0
        for an Sz-conserving model).
    symmetry: the group the wavefunction is projected on, or None.
    chunk_size, mesh: passed to ``chunk_map`` for evaluating log_psi on the rows.
    max_states: the most configurations of the sector it enumerates (default 2**21).

    Attributes after construction: ``n_rows`` (the rows of every call, a multiple of the
    mesh size: the representatives, then copies of the first with weight 0),
    ``n_representatives``, ``n_states`` (configurations of the sector), ``exact`` (True:
    the driver reads ``state.probabilities`` and reports errors of 0).
    """

    log_psi: Callable
    n_sites: int
    total_sz: float | str | None = "auto"
    symmetry: Any = None
    chunk_size: int | None = None
    mesh: Any = None
    max_states: int = 2**21
    n_chains: int = 1
    exact = True  # class attribute: exact sums, not samples

    def __post_init__(self):
        from quantax_lite.geometry.symmetry import Symmetry

        if not callable(self.log_psi):
            raise TypeError(f"log_psi must be callable, got {type(self.log_psi).__name__}")
        positive_int(self.n_sites, "n_sites")
        positive_int(self.max_states, "max_states")
        if self.n_chains != 1:
            raise ValueError(f"n_chains: exact sums have no chains; expected 1, got {self.n_chains!r}")
        if self.chunk_size is not None:
            positive_int(self.chunk_size, "chunk_size")
        if self.symmetry is not None:
            if not isinstance(self.symmetry, Symmetry):
                raise TypeError(f"symmetry: expected a Symmetry or None, got {type(self.symmetry).__name__}")
            if self.symmetry.n_sites != self.n_sites:
                raise ValueError(f"symmetry: acts on {self.symmetry.n_sites} sites, the sampler has {self.n_sites}")
        total_sz = enumerated_sector("FullSumSampler", self.n_sites, self.total_sz, self.max_states)
        object.__setattr__(self, "total_sz", total_sz)
        states = all_states(self.n_sites, total_sz=total_sz)
        reps, multiplicity = orbit_representatives(states, self.symmetry)
        n_dev = mesh_size(self.resolved_mesh())
        pad = -len(reps) % n_dev
        reps = np.concatenate([reps, np.repeat(reps[:1], pad, axis=0)])
        multiplicity = np.concatenate([multiplicity, np.zeros(pad)])
        object.__setattr__(self, "_rows", reps)
        object.__setattr__(self, "_log_multiplicity",
                           np.where(multiplicity > 0, np.log(np.maximum(multiplicity, 1.0)), -np.inf))
        object.__setattr__(self, "n_states", int(len(states)))
        object.__setattr__(self, "n_representatives", int(len(reps) - pad))
        object.__setattr__(self, "n_rows", int(len(reps)))

    def hamiltonian_rows(self, hamiltonian) -> tuple[np.ndarray, np.ndarray]:
        """H acting within the rows: ``(index int32 (n_rows, K), values (n_rows, K))`` with
        ``(H psi)(r) = sum_k values[r, k] psi(rows[index[r, k]])`` for every wavefunction of
        the sector, so the local energy of row r is ``sum_k values[r, k] psi(row_k) / psi(r)``
        (:func:`row_local_energies`) without evaluating psi off the rows. Each configuration s'
        that H reaches is replaced by its orbit's representative: psi(s') = chi_g psi(g s')
        (``ValueError`` naming ``hamiltonian`` when it does not commute with the group:
        then the local energy differs within an orbit)."""
        import scipy.sparse as sp

        from quantax_lite.exact.diagonalization import image_indices
        from quantax_lite.hilbert.configurations import state_index, states_to_codes

        if hamiltonian.n_sites != self.n_sites:
            raise ValueError(f"hamiltonian: has {hamiltonian.n_sites} sites, the sampler {self.n_sites}")
        states = all_states(self.n_sites, total_sz=self.total_sz)
        n = len(states)
        ham = hamiltonian.to_sparse(states).tocsr()
        if self.symmetry is None:
            rep_of, factor = np.arange(n), np.ones(n, np.complex128)
        else:
            group = self.symmetry
            idx = image_indices(group.perms, group.flips, states)
            if any(abs(ham[idx[g]][:, idx[g]] - ham).max() > 1e-10 for g in group.generators):
                raise ValueError("hamiltonian: does not commute with the sampler's symmetry, so its local energy is "
                                 "not the same on every configuration of an orbit; sum without the symmetry.")
            best = idx.argmin(axis=0)  # g* with g* s = the representative: psi(s) = chi_{g*} psi(rep)
            rep_of = idx[best, np.arange(n)]
            factor = np.asarray(group.characters)[best]
        row_index = state_index(self._rows, states_to_codes(states))
        column = np.full(n, -1)
        column[row_index[: self.n_representatives]] = np.arange(self.n_representatives)
        target = column[rep_of]  # -1: an orbit on which psi vanishes
        keep = target >= 0
        to_rows = sp.csr_matrix((factor[keep], (np.nonzero(keep)[0], target[keep])), shape=(n, self.n_rows))
        reduced = (ham[row_index] @ to_rows).tocsr()
        reduced.sum_duplicates()
        width = max(1, int(np.diff(reduced.indptr).max()))
        index = np.repeat(np.arange(self.n_rows)[:, None], width, axis=1).astype(np.int32)
        values = np.zeros((self.n_rows, width), np.complex128)
        row = np.repeat(np.arange(self.n_rows), np.diff(reduced.indptr))  # CSR -> padded rows
        slot = np.arange(reduced.nnz) - reduced.indptr[row]
        index[row, slot] = reduced.indices
        values[row, slot] = reduced.data
        if np.allclose(values.imag, 0):
            values = values.real.copy()
        return index, values

    def resolved_mesh(self):
        """The mesh log_psi is evaluated on: ``mesh``, or ``make_mesh()`` when it is None."""
        return make_mesh() if self.mesh is None else self.mesh

    def rows(self) -> jax.Array:
        """The configurations summed over, int8 (n_rows, n_sites)."""
        return jnp.asarray(self._rows)

    def probabilities(self, params: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(rows int8 (n_rows, n_sites), log_psi (n_rows,), their weights (n_rows,) float64,
        summing to 1)."""
        rows = self.rows()
        log_psi = chunk_map(self.log_psi, in_axes=(None, 0), chunk_size=self.chunk_size,
                            mesh=self.resolved_mesh())(params, rows)
        wide = tuning.wide_dtype()
        log_p = 2.0 * jnp.real(log_psi).astype(wide) + jnp.asarray(self._log_multiplicity, wide)
        p = jnp.exp(log_p - jnp.max(log_p))
        return rows, log_psi, p / jnp.sum(p)

    def init(self, key: jax.Array, params: Any = None, initial_states: Any = None) -> FullSumState:
        """The state (``params`` and ``initial_states`` are not used: the sums do not depend
        on a starting point)."""
        one = jnp.ones((1,), jnp.int32)
        state = FullSumState(key, jnp.asarray(all_states(self.n_sites, total_sz=self.total_sz)[:1]), one, one)
        return replicate(state, self.resolved_mesh())  # on every device, as the parameters

    def sample(self, state: FullSumState, params: Any, n_samples: int):
        """Not available: the rows are not samples of |psi|^2 and mean nothing without their
        weights (:meth:`probabilities`); ``TypeError``."""
        raise TypeError("FullSumSampler.sample: exact sums draw no samples; use probabilities(params) -> "
                        "(rows, log_psi, weights) and weighted sums (VMC does).")


@jax.jit
def row_local_energies(index: jax.Array, values: jax.Array, log_psi: jax.Array) -> jax.Array:
    """Local energies (n_rows,) of the rows from :meth:`FullSumSampler.hamiltonian_rows`
    ``(index, values)`` and log psi of the rows (n_rows,):
    ``sum_k values[r, k] exp(log_psi[index[r, k]] - log_psi[r])``."""
    log_psi = log_psi.astype(tuning.wide_dtype(log_psi.dtype))
    return jnp.sum(values * jnp.exp(log_psi[index] - log_psi[:, None]), axis=1)


def orbit_representatives(states: np.ndarray, symmetry) -> tuple[np.ndarray, np.ndarray]:
    """(representatives int8 (R, n_sites), orbit sizes (R,) float64) of ``states`` (every
    configuration of a sector, closed under the group) under ``symmetry``, leaving out the
    orbits on which the sector's wavefunctions vanish (the characters summed over the
    stabilizer are 0). ``symmetry`` None: every state, each of size 1."""
    from quantax_lite.exact.diagonalization import image_indices

    states = np.asarray(states, np.int8)
    if symmetry is None:
        return states, np.ones(len(states))
    idx = image_indices(symmetry.perms, symmetry.flips, states)  # (G, n)
    rep_of = idx.min(axis=0)
    reps, size = np.unique(rep_of, return_counts=True)
    fixed = idx[:, reps] == reps[None, :]  # (G, R): g fixes the representative
    stabilizer_sum = np.asarray(symmetry.characters) @ fixed
    keep = np.abs(stabilizer_sum) > 1e-8 * fixed.sum(axis=0)
    return states[reps[keep]], size[keep].astype(np.float64)
