"""Observables of a wavefunction from samples: expectation values with Monte Carlo errors,
spin correlations, structure factor, staggered magnetization, dimer correlations, and
:func:`measure`, everything in one JSON-ready dict (``docs/observables.md``).

Units: spin-1/2, ``S = sigma / 2`` (``<S_i . S_i> = 3/4``). Samples are int8 +-1
configurations ``(n_samples, n_sites)`` in the chain-major layout of the samplers
(``n_chains`` consecutive blocks, :func:`quantax_lite.sampler.per_chain`).

Estimators. An operator ``O`` is estimated by its local value
``O_loc(s) = sum_s' O[s, s'] psi(s') / psi(s)`` averaged over ``s ~ |psi|^2``; the error
bar, variance and tau are those of :func:`quantax_lite.stats.statistics` on
``per_chain(O_loc, n_chains)`` (autocorrelation included). For a Hermitian observable the
real part of ``O_loc`` is averaged (its expectation is the same, exactly). Functions of
several expectation values are estimated per sample and then averaged (S(q), C(r) are
linear in the pair values), so their errors come from the same statistics, never from
adding errors by hand; the connected dimer correlation (a product of means) uses the
linearized per-sample value (delta method).

Exact mode: ``weights`` ``(n_samples,)`` (e.g. ``|psi|^2`` over ``all_states``) replaces the
sample mean by ``sum w O_loc / sum w``; errors are then 0 and tau undefined (NaN, ``null``
in JSON).
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import tuning
from ._validate import positive_int
from .lattice import Lattice
from .operators import SpinHamiltonian, check_samples, hamiltonian_sizes, make_local_energy
from .sampler import per_chain
from .stats import Stats, statistics
from .utils import chunk_map

__all__ = [
    "SCHEMA",
    "expect",
    "SpinCorrelations",
    "spin_correlations",
    "sz_correlations",
    "StructureFactor",
    "structure_factor",
    "lattice_momenta",
    "staggered_magnetization_sq",
    "CorrelationVsDistance",
    "correlation_vs_distance",
    "DimerCorrelations",
    "dimer_correlations",
    "sz_moments",
    "measure",
]

SCHEMA = "quantax_lite.observables/1"


# ----------------------------------------------------------------------------- checks
def _samples(samples, n_sites: int):
    samples = check_samples(samples, n_sites)
    if samples.shape[0] < 1:
        raise ValueError(f"samples: expected at least one sample, got shape {tuple(samples.shape)}")
    if isinstance(samples, jax.Array):
        return samples if samples.dtype == jnp.int8 else samples.astype(jnp.int8)
    return jnp.asarray(np.asarray(samples, np.int8))


def _host(x) -> np.ndarray:
    """A (small) per-sample array as numpy on this process (gathered in a multi-process run)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def _samples_host(samples) -> np.ndarray:
    return _host(samples).astype(np.float64)


def _chains(n_chains, n_samples: int) -> int:
    if n_chains is None:
        return 1
    n_chains = positive_int(n_chains, "n_chains")
    if n_samples % n_chains:
        raise ValueError(f"n_chains: {n_samples} samples are not a multiple of n_chains={n_chains}")
    return n_chains


def _weights(weights, n_samples: int):
    if weights is None:
        return None
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n_samples,):
        raise ValueError(f"weights: expected shape ({n_samples},), got {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError("weights: expected finite, nonnegative weights with a positive sum")
    return w / w.sum()


def _log_psi_samples(log_psi, params, samples, log_psi_samples, chunk_size=None, mesh=None):
    """``log_psi(params, samples)`` (compiled once per wavefunction, chunked), or the given values checked."""
    if log_psi_samples is None:
        return _log_psi_fn(log_psi, chunk_size, mesh, tuning.current())(params, samples)
    lp = jnp.asarray(log_psi_samples)
    if lp.shape != (samples.shape[0],):
        raise ValueError(f"log_psi_samples: expected shape ({samples.shape[0]},), got {lp.shape}")
    return lp


def _lattice(lattice, n_sites: int | None = None) -> Lattice:
    if not isinstance(lattice, Lattice):
        raise TypeError(f"lattice: expected a quantax_lite.lattice.Lattice, got {type(lattice).__name__}")
    if n_sites is not None and lattice.n_sites != n_sites:
        raise ValueError(f"lattice: has {lattice.n_sites} sites, the correlations {n_sites}")
    return lattice


# ------------------------------------------------------------------------- statistics
@functools.partial(jax.jit, static_argnums=1)
def _column_stats(values, n_chains: int):
    """(mean, error, variance, tau, r_hat) of every column of values (n_samples, k), chain-major."""
    x = values.reshape(n_chains, values.shape[0] // n_chains, values.shape[1])

    def one(col):
        st = statistics(col)
        return st.mean, st.error_of_mean, st.variance, st.tau, st.r_hat

    return jax.lax.map(one, jnp.moveaxis(x, -1, 0), batch_size=64)


def _all_column_stats(values, n_chains: int, weights):
    """(mean, error, variance, tau, r_hat), each (k,) numpy, of per-sample values (n_samples, k).

    The columns are padded to a power of two (at least 8), so that few programs are compiled."""
    values = _host(values)
    k = values.shape[1]
    if weights is not None:
        v = values
        mean = weights @ v
        variance = weights @ np.abs(v - mean) ** 2
        nan = np.full(mean.shape, np.nan)
        return mean, np.zeros(mean.shape), variance, nan, nan
    width = max(8, 1 << max(0, (k - 1).bit_length()))
    padded = np.pad(values, ((0, 0), (0, width - k)))
    return tuple(np.array(x)[:k] for x in _column_stats(jnp.asarray(padded), n_chains))


def _stats_of_columns(values, n_chains: int, weights):
    """(mean (k,), error (k,), tau (k,)) as numpy of per-sample values (n_samples, k)."""
    mean, error, _, tau, _ = _all_column_stats(values, n_chains, weights)
    return mean, error, tau


def _stats(values, n_chains: int, weights) -> Stats:
    """Stats of one per-sample series (n_samples,)."""
    if weights is None and jnp.iscomplexobj(values):
        return statistics(per_chain(values, n_chains))
    values = _host(values)
    mean, error, variance, tau, r_hat = (x[0] for x in _all_column_stats(values[:, None], n_chains, weights))
    return Stats(jnp.asarray(mean), jnp.asarray(error), jnp.asarray(variance), jnp.asarray(tau),
                 jnp.asarray(r_hat), int(values.shape[0]))


# ---------------------------------------------------------------------------- expect
def _cached(build):
    """``build(*key)`` memoized on its (hashable) arguments, so that repeated calls with the
    same operator and wavefunction reuse one compiled program; unhashable keys build anew."""
    cached = functools.lru_cache(maxsize=16)(build)

    @functools.wraps(build)
    def get(*key):
        try:
            hash(key)
        except TypeError:
            return build(*key)
        return cached(*key)

    return get


@_cached
def _log_psi_fn(log_psi, chunk_size, mesh, choices):
    with tuning.using(choices):
        f = chunk_map(log_psi, in_axes=(None, 0), chunk_size=chunk_size, use_scan=True, shard_batch=True, mesh=mesh)
    return jax.jit(f)


@_cached
def _local_values_fn(operator, log_psi, chunk_size, mesh, choices):
    with tuning.using(choices):
        return make_local_energy(operator, log_psi, chunk_size=chunk_size, mesh=mesh)


def expect(
    log_psi: Callable,
    params,
    samples,
    operator: SpinHamiltonian,
    *,
    n_chains: int | None = None,
    chunk_size: int | None = None,
    mesh=None,
    weights=None,
    log_psi_samples=None,
    real: bool = False,
) -> Stats:
    """``<O>`` from samples: the statistics of ``O_loc(s) = sum_s' O[s, s'] psi(s')/psi(s)``.

    ``operator``: any Hamiltonian-contract operator (a
    :class:`~quantax_lite.spin_operators.LocalOperator`, a ``Heisenberg``, ...);
    ``samples`` ``(n_samples, n_sites)`` int8, chain-major with ``n_chains`` chains (None:
    one chain). The local values come from the local-energy engine
    (:func:`~quantax_lite.operators.make_local_energy`, chunked by ``chunk_size`` samples
    per device, built once per operator and wavefunction); the result is
    ``statistics(per_chain(O_loc, n_chains))``, complex when ``O_loc`` is. ``weights``:
    exact mode (module docstring). ``log_psi_samples``: ``log_psi(params, samples)`` if known.
    ``real=True``: the statistics of ``Re O_loc`` -- for a Hermitian ``O`` the same
    expectation, with the error bar of the real part (the complex one also counts the
    fluctuations of ``Im O_loc``, whose mean is 0, and so covers the exact value more often
    than 68% of the time).
    """
    n_sites, _ = hamiltonian_sizes(operator)
    samples = _samples(samples, n_sites)
    n = samples.shape[0]
    n_chains = _chains(n_chains, n)
    w = _weights(weights, n)
    values = _local_values(log_psi, params, samples, operator, chunk_size, mesh, log_psi_samples)
    return _stats(jnp.real(values) if real else values, n_chains, w)


def _local_values(log_psi, params, samples, operator, chunk_size, mesh, log_psi_samples):
    if chunk_size is not None:
        chunk_size = positive_int(chunk_size, "chunk_size")
    fn = _local_values_fn(operator, log_psi, chunk_size, mesh, tuning.current())
    if log_psi_samples is not None:
        log_psi_samples = _log_psi_samples(log_psi, params, samples, log_psi_samples)
    return fn(params, samples, log_psi_samples)


# ------------------------------------------------------------ ratios psi(P s) / psi(s)
def _default_chunk(chunk_size, n_moves: int):
    if chunk_size is not None:
        return positive_int(chunk_size, "chunk_size")
    rows = tuning.current().local_energy_rows
    return None if rows is None else max(1, rows // max(1, n_moves))


@_cached
def _moved_values_fn(log_psi, specs: tuple, chunk_size, mesh, choices):
    """A jitted ``(params, samples, log_psi_samples) -> (n_samples, k)`` of real local values
    from the ratios ``psi(s[perm]) / psi(s)`` over fixed tables of site permutations: one
    table per spec ``(kind, key)``, all evaluated in one chunked program, their values
    side by side."""
    parts = [_KINDS[kind](*key) for kind, key in specs]
    sizes = [len(p) for p, _ in parts]
    perms = jnp.asarray(np.concatenate([p for p, _ in parts]))
    n_moves, n_sites = perms.shape

    def rows(params, s, lp):
        b = s.shape[0]
        moved = s[:, perms]  # (b, n_moves, n_sites): moved[:, k, i] = s[:, perms[k, i]]
        lpm = log_psi(params, moved.reshape(b * n_moves, n_sites)).reshape(b, n_moves)
        ratios = jnp.exp(lpm - lp[:, None])
        outs, start = [], 0
        for (_, combine), k in zip(parts, sizes):
            outs.append(combine(s, ratios[:, start : start + k]))
            start += k
        return jnp.concatenate(outs, axis=1)

    with tuning.using(choices):
        f = chunk_map(rows, in_axes=(None, 0, 0), chunk_size=chunk_size, use_scan=True,
                      shard_batch=True, mesh=mesh)
    return jax.jit(f)


def _swap_perms(n_sites: int, pairs: np.ndarray) -> np.ndarray:
    perms = np.tile(np.arange(n_sites), (len(pairs), 1))
    k = np.arange(len(pairs))
    perms[k, pairs[:, 0]] = pairs[:, 1]
    perms[k, pairs[:, 1]] = pairs[:, 0]
    return perms


def _pair_kind(n_sites: int):
    """S_i . S_j for every pair i < j (np.triu_indices order)."""
    i, j = np.triu_indices(n_sites, k=1)
    perms = _swap_perms(n_sites, np.stack([i, j], 1))

    def combine(s, ratios):
        sf = s.astype(tuning.wide_dtype())
        anti = s[:, i] != s[:, j]
        off = jnp.where(anti, 0.5 * jnp.real(jnp.where(anti, ratios, 0)), 0.0)
        return sf[:, i] * sf[:, j] / 4 + off

    return perms, combine


def _dimer_kind(n_sites: int, bonds_bytes: bytes, group_bytes: bytes, n_groups: int):
    """Per sample: the bond values D_b (n_bonds) and, for each group of ordered bond pairs,
    the sum of Re (D_b1 D_b2)_loc over its pairs (n_groups)."""
    bonds = np.frombuffer(bonds_bytes, np.int64).reshape(-1, 2)
    group = np.frombuffer(group_bytes, np.int64).reshape(len(bonds), len(bonds))
    nb = len(bonds)
    single = _swap_perms(n_sites, bonds)  # (nb, n)
    # s[p1][p2] = s[p1[p2]]: first swap b1, then b2
    double = np.stack([single[b1][single[b2]] for b1 in range(nb) for b2 in range(nb)])
    perms = np.concatenate([single, double])
    bi, bj = bonds[:, 0], bonds[:, 1]
    onehot = np.zeros((nb * nb, n_groups))
    onehot[np.arange(nb * nb), group.reshape(-1)] = 1.0

    def combine(s, ratios):
        real = tuning.wide_dtype()
        r1 = ratios[:, :nb]
        r2 = ratios[:, nb:].reshape(-1, nb, nb)
        sf = s.astype(real)
        d = sf[:, bi] * sf[:, bj] / 4  # (b, nb)
        anti = s[:, bi] != s[:, bj]
        s1 = s[:, single]  # (b, nb, n): s after the swap of b1
        d2s1 = s1[:, :, bi].astype(real) * s1[:, :, bj].astype(real) / 4  # (b, b1, b2)
        anti2s1 = s1[:, :, bi] != s1[:, :, bj]
        rr1 = jnp.where(anti, jnp.real(jnp.where(anti, r1, 0)), 0.0)  # Re R(swap_b s) on anti bonds
        bond = d + 0.5 * rr1
        both = anti[:, :, None] & anti2s1
        rr2 = jnp.where(both, jnp.real(jnp.where(both, r2, 0)), 0.0)
        dd = (
            d[:, :, None] * d[:, None, :]
            + 0.5 * d[:, :, None] * rr1[:, None, :]
            + 0.5 * rr1[:, :, None] * d2s1
            + 0.25 * rr2
        )
        return jnp.concatenate([bond, dd.reshape(dd.shape[0], -1) @ jnp.asarray(onehot, real)], axis=1)

    return perms, combine


_KINDS = {"pairs": _pair_kind, "dimers": _dimer_kind}


def _spec_moves(spec) -> int:
    kind, key = spec
    if kind == "pairs":
        return key[0] * (key[0] - 1) // 2
    nb = len(key[1]) // 16
    return nb + nb * nb


def _spec_width(spec) -> int:
    kind, key = spec
    if kind == "pairs":
        return key[0] * (key[0] - 1) // 2
    return len(key[1]) // 16 + key[3]


def _moved_values(log_psi, params, samples, lp, specs, chunk_size, mesh) -> list:
    """The values of every spec, one ``(n_samples, width)`` array each, from one program."""
    specs = tuple(specs)
    chunk = _default_chunk(chunk_size, sum(_spec_moves(s) for s in specs))
    fn = _moved_values_fn(log_psi, specs, chunk, mesh, tuning.current())
    values = _host(fn(params, samples, lp))
    out, start = [], 0
    for spec in specs:
        w = _spec_width(spec)
        out.append(values[:, start : start + w])
        start += w
    return out


# ------------------------------------------------------------------ spin correlations
class SpinCorrelations(NamedTuple):
    """``<S_i . S_j>`` for every pair (numpy ``(n, n)``: ``mean``, ``error``, ``tau``) and
    ``<S^z_i S^z_j>`` (``zz_mean``, ``zz_error``); ``pair_values`` ``(n_samples, n_pairs)``
    the per-sample local values of ``S_i . S_j`` for ``i < j`` (``np.triu_indices`` order),
    from which :func:`structure_factor` and :func:`correlation_vs_distance` take their
    statistics; ``n_chains``; ``weights`` (exact mode) or None."""

    mean: np.ndarray
    error: np.ndarray
    tau: np.ndarray
    zz_mean: np.ndarray
    zz_error: np.ndarray
    pair_values: Any
    n_chains: int
    weights: Any

    @property
    def n_sites(self) -> int:
        return self.mean.shape[0]


def _pairs_to_matrix(values: np.ndarray, n: int, diagonal: float) -> np.ndarray:
    out = np.full((n, n), diagonal, dtype=np.float64)
    i, j = np.triu_indices(n, k=1)
    out[i, j] = out[j, i] = values
    return out


def sz_correlations(samples, *, n_chains: int | None = None, weights=None) -> tuple[np.ndarray, np.ndarray]:
    """``<S^z_i S^z_j>`` from the samples alone (diagonal): ``(mean (n, n), error (n, n))``."""
    if not hasattr(samples, "shape"):
        samples = np.asarray(samples)
    if samples.ndim != 2:
        raise ValueError(f"samples: expected shape (n_samples, n_sites), got {tuple(samples.shape)}")
    n_sites = samples.shape[1]
    samples = _samples(samples, n_sites)
    n_chains = _chains(n_chains, samples.shape[0])
    w = _weights(weights, samples.shape[0])
    i, j = np.triu_indices(n_sites, k=1)
    sf = _samples_host(samples)
    mean, error, _ = _stats_of_columns(sf[:, i] * sf[:, j] / 4, n_chains, w)
    return _pairs_to_matrix(mean, n_sites, 0.25), _pairs_to_matrix(error, n_sites, 0.0)


def spin_correlations(
    log_psi: Callable,
    params,
    samples,
    *,
    n_chains: int | None = None,
    chunk_size: int | None = None,
    mesh=None,
    weights=None,
    log_psi_samples=None,
) -> SpinCorrelations:
    """``<S_i . S_j>`` for all pairs at once.

    Per sample, the local value of ``S_i . S_j = S^z_i S^z_j + (S+_i S-_j + S-_i S+_j) / 2``
    is ``s_i s_j / 4 + [s_i != s_j] Re psi(s with i, j swapped) / (2 psi(s))``: one
    network evaluation per pair and sample (``n (n - 1) / 2``), chunked by ``chunk_map``
    (``chunk_size`` samples per device per step; None: about
    ``tuning.current().local_energy_rows`` evaluations per step). Statistics per entry
    (:func:`quantax_lite.stats.statistics`, tau included). ``pair_values`` holds
    ``n_samples * n (n - 1) / 2`` floats.
    """
    if not hasattr(samples, "shape"):
        samples = np.asarray(samples)
    if samples.ndim != 2:
        raise ValueError(f"samples: expected shape (n_samples, n_sites), got {tuple(samples.shape)}")
    n_sites = samples.shape[1]
    if n_sites < 2:
        raise ValueError(f"samples: expected at least 2 sites, got shape {tuple(samples.shape)}")
    samples = _samples(samples, n_sites)
    n = samples.shape[0]
    n_chains = _chains(n_chains, n)
    w = _weights(weights, n)
    lp = _log_psi_samples(log_psi, params, samples, log_psi_samples, chunk_size, mesh)
    (values,) = _moved_values(log_psi, params, samples, lp, [("pairs", (n_sites,))], chunk_size, mesh)
    return _spin_correlations_of(values, samples, n_chains, w)


def _spin_correlations_of(values, samples, n_chains: int, w) -> SpinCorrelations:
    n_sites = samples.shape[1]
    mean, error, tau = _stats_of_columns(values, n_chains, w)
    zz_mean, zz_error = sz_correlations(samples, n_chains=n_chains, weights=w)
    return SpinCorrelations(
        mean=_pairs_to_matrix(mean, n_sites, 0.75),
        error=_pairs_to_matrix(error, n_sites, 0.0),
        tau=_pairs_to_matrix(tau, n_sites, np.nan),
        zz_mean=zz_mean,
        zz_error=zz_error,
        pair_values=values,
        n_chains=n_chains,
        weights=w,
    )


def _pair_functional(corr, coefficients: np.ndarray, constant: np.ndarray):
    """Linear functionals ``f_k = constant_k + sum_{i<j} coefficients[p, k] C_ij`` of the
    correlations: ``(mean (K,), error (K,) or None)``; per sample when ``corr`` is a
    :class:`SpinCorrelations`, on the matrix when it is an ``(n, n)`` array."""
    if isinstance(corr, SpinCorrelations):
        per_sample = _host(corr.pair_values) @ coefficients
        mean, error, _ = _stats_of_columns(per_sample, corr.n_chains, corr.weights)
        return mean + constant, error
    c = np.asarray(corr, dtype=np.float64)
    i, j = np.triu_indices(c.shape[0], k=1)
    return c[i, j] @ coefficients + constant, None


def _corr_sites(corr) -> int:
    if isinstance(corr, SpinCorrelations):
        return corr.n_sites
    c = np.asarray(corr)
    if c.ndim != 2 or c.shape[0] != c.shape[1]:
        raise ValueError(f"corr: expected SpinCorrelations or an (n, n) matrix, got shape {c.shape}")
    return c.shape[0]


# ------------------------------------------------------------------- structure factor
class StructureFactor(NamedTuple):
    """``q`` ``(n_q, ndim)``, ``mean`` ``(n_q,)`` and ``error`` ``(n_q,)`` (None for a matrix input)."""

    q: np.ndarray
    mean: np.ndarray
    error: Any


def lattice_momenta(lattice: Lattice) -> np.ndarray:
    """Every momentum of the periodic cluster, ``q = sum_d (m_d / L_d) b_d`` (``b_d`` the
    reciprocal vectors, :attr:`Lattice.reciprocal_vectors`) with ``m_d`` in
    ``-(L_d - 1) // 2 .. L_d // 2``, row-major over the axes: ``(n_cells, ndim)``. On a
    chain or square lattice ``q_d = 2 pi m_d / L_d`` in ``(-pi, pi]``."""
    lattice = _lattice(lattice)
    axes = [np.arange(-((L - 1) // 2), L // 2 + 1) / L for L in lattice.shape]
    grids = np.meshgrid(*axes, indexing="ij")
    frac = np.stack([g.reshape(-1) for g in grids], axis=1)
    q = frac @ lattice.reciprocal_vectors
    q[np.abs(q) < 1e-14] = 0.0
    return q


def _check_momenta(q, lattice: Lattice) -> np.ndarray:
    try:
        if np.iscomplexobj(q) or any(isinstance(x, complex) for x in np.ravel(np.asarray(q, dtype=object))):
            raise TypeError("complex")
        q = np.asarray(q, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"q: expected real momenta of shape (n_q, {lattice.ndim}) or ({lattice.ndim},), "
                         f"got {_shown(q)}") from None
    if q.ndim == 1:
        q = q[None, :]
    if q.ndim != 2 or q.shape[1] != lattice.ndim:
        raise ValueError(f"q: expected momenta of shape (n_q, {lattice.ndim}), got {q.shape}")
    m = q @ lattice.periods.T / (2 * np.pi)  # q . (L_d a_d) / 2 pi must be an integer
    bad = np.any(np.abs(m - np.round(m)) > 1e-8, axis=1) | ~np.all(np.isfinite(q), axis=1)
    if np.any(bad):
        k = int(np.nonzero(bad)[0][0])
        raise ValueError(
            f"q: momentum {tuple(float(x) for x in q[k])} is not on the lattice {lattice.name} "
            f"(q . L_d a_d must be a multiple of 2 pi; on a chain or square lattice q_d = 2 pi m / L_d, "
            f"L = {lattice.shape})"
        )
    return q


def structure_factor(corr, lattice: Lattice, q=None) -> StructureFactor:
    """``S(q) = (1/N) sum_ij e^{i q . (r_i - r_j)} <S_i . S_j>`` (real: the sum is symmetric).

    ``corr``: a :class:`SpinCorrelations` (errors from the per-sample ``S(q)``, statistics
    incl. tau) or an ``(n, n)`` matrix (exact correlations; ``error`` None). ``q``: momenta
    ``(n_q, ndim)`` or one ``(ndim,)`` momentum on the lattice (``2 pi m / L`` per axis;
    ValueError naming ``q`` otherwise); None: every momentum, :func:`lattice_momenta`.
    ``r_i`` are the site positions (:attr:`Lattice.positions`; the coordinates on a chain
    or square lattice). ``S(0) = <S_tot^2> / N``.
    """
    if not isinstance(corr, SpinCorrelations):
        corr = _real_matrix(corr)
    n = _corr_sites(corr)
    lattice = _lattice(lattice, n)
    q, coef, const = _sq_tables(lattice, q)
    mean, error = _pair_functional(corr, coef, const)
    return StructureFactor(q, mean, error)


def _shown(x) -> str:
    """``x`` in an error message: its repr, cut short."""
    text = repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


def _real_matrix(corr) -> np.ndarray:
    """``corr`` as a finite real float64 array (its shape checked by :func:`_corr_sites`);
    ``TypeError`` / ``ValueError`` naming ``corr`` otherwise."""
    try:
        c = np.asarray(corr)
    except ValueError:  # a ragged nested list
        raise ValueError(f"corr: expected SpinCorrelations or an (n, n) matrix of real numbers, "
                         f"got {_shown(corr)}") from None
    if c.dtype.kind not in "iuf":
        raise TypeError(f"corr: expected SpinCorrelations or an (n, n) matrix of real numbers, got dtype {c.dtype}")
    c = c.astype(np.float64)
    if not np.all(np.isfinite(c)):
        raise ValueError("corr: the correlation matrix holds NaN or infinity")
    return c


def _sq_tables(lattice: Lattice, q=None):
    """``(q, coefficients (n_pairs, n_q), constant (n_q,))`` of S(q) as a pair functional."""
    n = lattice.n_sites
    q = lattice_momenta(lattice) if q is None else _check_momenta(q, lattice)
    i, j = np.triu_indices(n, k=1)
    dr = lattice.positions[i] - lattice.positions[j]  # (n_pairs, ndim)
    return q, 2.0 * np.cos(dr @ q.T) / n, np.full(len(q), 0.75)


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
    n = _corr_sites(corr)
    lattice = _lattice(lattice, n)
    coef, const = _stag_tables(lattice)
    mean, error = _pair_functional(corr, coef, const)
    err = (None, None) if error is None else (float(error[0]), float(error[1]))
    return (float(mean[0]), err[0]), (float(mean[1]), err[1])


def _stag_tables(lattice: Lattice):
    """Pair functional of ``(S(Q), m^2)``: ``(coefficients (n_pairs, 2), constant (2,))``."""
    n = lattice.n_sites
    eps = _staggered_signs(lattice)
    i, j = np.triu_indices(n, k=1)
    coef = np.stack([2.0 * eps[i] * eps[j] / n, 2.0 * eps[i] * eps[j] / n**2], axis=1)
    return coef, np.array([0.75, 0.75 / n])


# ----------------------------------------------------------- correlation vs distance
class CorrelationVsDistance(NamedTuple):
    """``C(r)`` per displacement ``r`` ``(n_r, ndim)`` (``distance`` ``(n_r,)``, ``mean``,
    ``error``) and per distance (``shell_distance``, ``shell_mean``, ``shell_error``)."""

    r: np.ndarray
    distance: np.ndarray
    mean: np.ndarray
    error: Any
    shell_distance: np.ndarray
    shell_mean: np.ndarray
    shell_error: Any


def correlation_vs_distance(corr, lattice: Lattice) -> CorrelationVsDistance:
    """``C(r) = mean over ordered pairs (i, j) with r_j - r_i = r of <S_i . S_j>``.

    ``r`` is the minimum-image displacement (:meth:`Lattice.displacement`) under periodic
    boundaries, where every ``r`` has ``N`` pairs and ``C(r) = (1/N) sum_i <S_i . S_{i+r}>``
    (``= <S_0 . S_r>`` in a translation-invariant state); the plain displacement on open
    lattices. ``C(0) = 3/4``. Shells: the mean over every pair at the same ``|r|``.
    Ordered by distance, then by ``r``.
    """
    n = _corr_sites(corr)
    lattice = _lattice(lattice, n)
    vecs, dist, shells, (coef, const), (shell_coef, shell_const) = _cr_tables(lattice)
    mean, error = _pair_functional(corr, coef, const)
    shell_mean, shell_error = _pair_functional(corr, shell_coef, shell_const)
    return CorrelationVsDistance(vecs, dist, mean, error, shells, shell_mean, shell_error)


def _cr_tables(lattice: Lattice):
    """``(r, distance, shell distances, (coef, const) per r, (coef, const) per shell)``."""
    n = lattice.n_sites
    a, b = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    a, b = a.reshape(-1), b.reshape(-1)
    d = np.round(lattice.displacement(a, b), 9) + 0.0  # + 0.0: no negative zeros
    vecs, group = np.unique(d, axis=0, return_inverse=True)
    group = group.reshape(-1)
    dist = np.sqrt((vecs**2).sum(axis=1))
    order = np.lexsort(tuple(vecs.T[::-1]) + (np.round(dist, 9),))
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    vecs, dist, group = vecs[order], dist[order], rank[group]
    if lattice.is_hypercubic:
        vecs = vecs.astype(np.int64)
    shells, shell_of = np.unique(np.round(dist, 9), return_inverse=True)
    shell_of = shell_of.reshape(-1)
    iu = np.full((n, n), -1)
    ti, tj = np.triu_indices(n, k=1)
    iu[ti, tj] = iu[tj, ti] = np.arange(len(ti))
    off = a != b

    def tables(group_of_pair, n_groups):
        counts = np.bincount(group_of_pair, minlength=n_groups).astype(np.float64)
        coef = np.zeros((len(ti), n_groups))
        np.add.at(coef, (iu[a[off], b[off]], group_of_pair[off]), 1.0)
        const = 0.75 * np.bincount(group_of_pair[~off], minlength=n_groups)
        return coef / counts, const / counts

    return vecs, dist, shells, tables(group, len(vecs)), tables(shell_of[group], len(shells))


# ------------------------------------------------------------------ dimer correlations
class DimerCorrelations(NamedTuple):
    """Dimer-dimer correlations along one axis, ``D_i = S_i . S_{i+e}``.

    ``r`` ``(n_r, ndim)`` bond displacements (from the first site of one bond to that of the
    other, minimum image), ``distance``; ``mean``/``error``: the plain correlation
    ``(1/N_r) sum_{pairs at r} Re <D_i D_j>``; ``connected_mean``/``connected_error``: the plain
    one minus ``<D>^2``; ``bond_mean``/``bond_error``: ``<D> = (1/N_b) sum_i <D_i>``.
    """

    axis: int
    r: np.ndarray
    distance: np.ndarray
    mean: np.ndarray
    error: np.ndarray
    connected_mean: np.ndarray
    connected_error: np.ndarray
    bond_mean: float
    bond_error: float


def _axis_bonds(lattice: Lattice, axis: int) -> np.ndarray:
    L = lattice.shape[axis]
    coords = lattice.coords
    keep = np.ones(lattice.n_sites, bool) if lattice.pbc else coords[:, axis] < L - 1
    start = np.nonzero(keep)[0]
    step = np.zeros(lattice.ndim, np.int64)
    step[axis] = 1
    end = lattice.site_index(coords[start] + step)
    return np.stack([start, end], axis=1).astype(np.int64)


def dimer_correlations(
    log_psi: Callable,
    params,
    samples,
    lattice: Lattice,
    axis: int = 0,
    *,
    n_chains: int | None = None,
    chunk_size: int | None = None,
    mesh=None,
    weights=None,
    log_psi_samples=None,
) -> DimerCorrelations:
    """Dimer-dimer correlations of the bonds ``(i, i + e_axis)`` (every site under periodic
    boundaries; axis of length >= 2).

    The local value of ``D_1 D_2`` (bonds ``b1``, ``b2``, overlapping ones included) needs
    ``psi`` at ``s`` with ``b2`` swapped, ``b1`` swapped and both: ``N_b + N_b^2``
    evaluations per sample. Its real part is averaged (``Re <D_1 D_2>``, the symmetrized
    product ``<{D_1, D_2}> / 2`` for bonds that share a site). The connected correlation
    ``C_D(r) - <D>^2`` gets its error from the linearized per-sample value
    ``DD_loc(s) - 2 <D> D_loc(s)`` (delta method).
    """
    lattice = _lattice(lattice)
    if not lattice.is_hypercubic:
        raise ValueError(f"lattice: dimer correlations are defined on chains and square lattices, got {lattice.name}")
    axis = positive_int(axis, "axis", minimum=0)
    if axis >= lattice.ndim or lattice.shape[axis] < 2:
        raise ValueError(f"axis: expected an axis of length >= 2 of the lattice {lattice.name}, got {axis}")
    n_sites = lattice.n_sites
    samples = _samples(samples, n_sites)
    n = samples.shape[0]
    n_chains = _chains(n_chains, n)
    w = _weights(weights, n)
    lp = _log_psi_samples(log_psi, params, samples, log_psi_samples, chunk_size, mesh)
    spec, meta = _dimer_spec(lattice, axis)
    (values,) = _moved_values(log_psi, params, samples, lp, [spec], chunk_size, mesh)
    return _dimers_of(values, meta, n_chains, w)


def _dimer_spec(lattice: Lattice, axis: int):
    """``(spec, meta)`` of the dimer correlations along ``axis``."""
    bonds = _axis_bonds(lattice, axis)
    nb = len(bonds)
    d = lattice.displacement(np.repeat(bonds[:, 0], nb), np.tile(bonds[:, 0], nb))
    vecs, group = np.unique(d, axis=0, return_inverse=True)
    group = group.reshape(-1)
    dist = np.sqrt((vecs**2).sum(axis=1))
    order = np.lexsort(tuple(vecs.T[::-1]) + (np.round(dist, 9),))
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    vecs, dist, group = vecs[order], dist[order], rank[group]
    counts = np.bincount(group, minlength=len(vecs)).astype(np.float64)
    key = (lattice.n_sites, bonds.astype(np.int64).tobytes(), group.astype(np.int64).tobytes(), len(vecs))
    return ("dimers", key), (axis, nb, vecs, dist, counts)


def _dimers_of(values, meta, n_chains: int, w) -> DimerCorrelations:
    axis, nb, vecs, dist, counts = meta
    values = _host(values)
    bond_local = np.mean(values[:, :nb], axis=1)
    plain = values[:, nb:] / counts
    mean, error, _ = _stats_of_columns(plain, n_chains, w)
    b = _stats(bond_local, n_chains, w)
    d_mean = float(b.mean)
    linear = plain - 2.0 * d_mean * bond_local[:, None]
    _, c_error, _ = _stats_of_columns(linear, n_chains, w)
    return DimerCorrelations(axis, vecs, dist, mean, error, mean - d_mean**2, c_error, d_mean,
                             float(b.error_of_mean))


# ------------------------------------------------------------------------ Sz moments
def sz_moments(samples, *, n_chains: int | None = None, weights=None) -> tuple[Stats, Stats]:
    """``(<S^z_tot>, <(S^z_tot)^2>)`` with ``S^z_tot = sum_i s_i / 2``, from the samples alone."""
    if not hasattr(samples, "shape"):
        samples = np.asarray(samples)
    if samples.ndim != 2:
        raise ValueError(f"samples: expected shape (n_samples, n_sites), got {tuple(samples.shape)}")
    samples = _samples(samples, samples.shape[1])
    n_chains = _chains(n_chains, samples.shape[0])
    w = _weights(weights, samples.shape[0])
    m = np.sum(_samples_host(samples), axis=1) / 2
    return _stats(m, n_chains, w), _stats(m**2, n_chains, w)


# --------------------------------------------------------------------------- measure
def _num(x):
    """A plain float; NaN, inf and None as None (JSON null)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _list(x):
    if x is None:
        return None
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 0:
        return _num(a)
    return [_list(v) for v in a]


def _mean_error(mean, error) -> dict:
    return {"mean": _list(mean), "error": _list(error)}


def measure(
    log_psi: Callable,
    params,
    samples,
    lattice: Lattice,
    *,
    hamiltonian: SpinHamiltonian | None = None,
    n_chains: int | None = None,
    chunk_size: int | None = None,
    mesh=None,
    weights=None,
    log_psi_samples=None,
    dimers: bool = True,
) -> dict:
    """Every observable of this module from one set of samples, as a JSON-ready dict.

    Plain Python floats, ints and nested lists (NaN as None); the schema
    (``"schema": SCHEMA``) is written out in ``docs/observables.md``. ``hamiltonian``: adds
    ``"energy"``. ``dimers=False`` leaves out the dimer correlations (their cost grows as
    ``N^2`` evaluations per sample and axis). Other arguments as in :func:`spin_correlations`.
    """
    lattice = _lattice(lattice)
    n_sites = lattice.n_sites
    samples = _samples(samples, n_sites)
    n = samples.shape[0]
    n_chains = _chains(n_chains, n)
    w = _weights(weights, n)
    lp = _log_psi_samples(log_psi, params, samples, log_psi_samples, chunk_size, mesh)
    out: dict = {
        "schema": SCHEMA,
        "units": "spin-1/2 (S = sigma/2)",
        "n_sites": n_sites,
        "n_samples": int(n),
        "n_chains": n_chains,
        "exact": w is not None,
        "lattice": {"shape": list(lattice.shape), "pbc": bool(lattice.pbc), "name": lattice.name},
    }
    if hamiltonian is not None:
        h_sites, _ = hamiltonian_sizes(hamiltonian)
        if h_sites != n_sites:
            raise ValueError(f"hamiltonian: acts on {h_sites} sites, the lattice has {n_sites}")
        e_loc = _host(_local_values(log_psi, params, samples, hamiltonian, chunk_size, mesh, lp))
    specs, metas = [("pairs", (n_sites,))], []
    axes = [a for a in range(lattice.ndim) if lattice.shape[a] >= 2] if dimers and lattice.is_hypercubic else []
    for axis in axes:
        spec, meta = _dimer_spec(lattice, axis)
        specs.append(spec)
        metas.append(meta)
    values = _moved_values(log_psi, params, samples, lp, specs, chunk_size, mesh)
    pairs = values[0]
    sf = _samples_host(samples)
    ti, tj = np.triu_indices(n_sites, k=1)
    # every per-sample quantity as a column of one matrix: one statistics pass
    columns, slices = [], {}

    def add(name, cols):
        start = sum(c.shape[1] for c in columns)
        columns.append(cols)
        slices[name] = slice(start, start + cols.shape[1])

    if hamiltonian is not None:
        add("energy", np.real(e_loc)[:, None])
    add("pairs", pairs)
    add("zz", sf[:, ti] * sf[:, tj] / 4)
    r, dist, shells, cr_tab, shell_tab = _cr_tables(lattice)
    q, sq_coef, sq_const = _sq_tables(lattice)
    tabs = [("cr", cr_tab), ("shells", shell_tab), ("sq", (sq_coef, sq_const))]
    if lattice.n_sublattices == 2:
        tabs.append(("stag", _stag_tables(lattice)))
    for name, (coef, _) in tabs:
        add(name, pairs @ coef)
    m = np.sum(sf, axis=1) / 2
    add("sz", np.stack([m, m**2], axis=1))
    dimer_meta = []
    for axis, meta, v in zip(axes, metas, values[1:]):
        nb, counts = meta[1], meta[4]
        bond_local = np.mean(v[:, :nb], axis=1)
        plain = v[:, nb:] / counts
        d_mean = float(w @ bond_local) if w is not None else float(np.mean(bond_local))
        add(f"dimer{axis}", np.concatenate([bond_local[:, None], plain, plain - 2.0 * d_mean * bond_local[:, None]], 1))
        dimer_meta.append((axis, meta, d_mean, plain.shape[1]))
    mean, error, _, tau, r_hat = _all_column_stats(np.concatenate(columns, axis=1), n_chains, w)
    for name, (_, const) in tabs:
        mean[slices[name]] += const

    def get(name):
        return mean[slices[name]], error[slices[name]]

    if hamiltonian is not None:
        k = slices["energy"].start
        w_e = np.full(n, 1.0 / n) if w is None else w
        e_mean = w_e @ e_loc
        out["energy"] = {
            "mean": _num(mean[k]), "error": _num(error[k]),
            "variance": _num(w_e @ np.abs(e_loc - e_mean) ** 2), "tau": _num(tau[k]), "r_hat": _num(r_hat[k]),
            "per_site": _num(mean[k] / n_sites), "per_site_error": _num(error[k] / n_sites),
        }
        if np.iscomplexobj(e_loc):
            out["energy"]["imag"] = _num(np.imag(e_mean))

    out["spin_correlations"] = _mean_error(_pairs_to_matrix(mean[slices["pairs"]], n_sites, 0.75),
                                           _pairs_to_matrix(error[slices["pairs"]], n_sites, 0.0))
    out["sz_correlations"] = _mean_error(_pairs_to_matrix(mean[slices["zz"]], n_sites, 0.25),
                                         _pairs_to_matrix(error[slices["zz"]], n_sites, 0.0))
    out["correlation_vs_distance"] = {
        "r": r.tolist(), "distance": _list(dist), **_mean_error(*get("cr")),
        "shells": {"distance": _list(shells), **_mean_error(*get("shells"))},
    }
    out["structure_factor"] = {"q": _list(q), **_mean_error(*get("sq"))}
    if "stag" in slices:
        (s_q, m2), (s_q_err, m2_err) = get("stag")
    else:
        s_q = s_q_err = m2 = m2_err = None
    out["s_pi_pi"] = {"q": [math.pi] * lattice.ndim if lattice.is_hypercubic else None,
                      "mean": _num(s_q), "error": _num(s_q_err)}
    out["staggered_magnetization_sq"] = {"mean": _num(m2), "error": _num(m2_err)}
    (sz, sz2), (sz_err, sz2_err) = get("sz")
    out["sz"] = {"mean": _num(sz), "error": _num(sz_err)}
    out["sz_squared"] = {"mean": _num(sz2), "error": _num(sz2_err)}
    out["dimer_correlations"] = {}
    for axis, meta, d_mean, k in dimer_meta:
        mu, err = get(f"dimer{axis}")
        out["dimer_correlations"]["xyz"[axis]] = {
            "r": meta[2].tolist(), "distance": _list(meta[3]), "mean": _list(mu[1 : 1 + k]),
            "error": _list(err[1 : 1 + k]), "connected_mean": _list(mu[1 : 1 + k] - d_mean**2),
            "connected_error": _list(err[1 + k :]),
            "bond": {"mean": _num(mu[0]), "error": _num(err[0])},
        }
    return out
