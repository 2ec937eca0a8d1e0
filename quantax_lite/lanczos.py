"""One Lanczos step on a trained state: the energy of ``(1 + alpha H)|psi>``, alpha optimal.

With ``H' = H - E_ref`` (``E_ref`` a constant near ``<H>``, subtracted for precision) and the
moments ``m_k = <psi|H'^k|psi> / <psi|psi>``, ``k = 1..4``, the state
``|psi_1> = (1 + beta H')|psi>`` has

    E(beta) = E_ref + (m1 + 2 beta m2 + beta^2 m3) / (1 + 2 beta m1 + beta^2 m2),

stationary where ``(m1 m3 - m2^2) beta^2 + (m3 - m1 m2) beta + (m2 - m1^2) = 0``; the root
with the lower energy is taken (``alpha = beta / (1 - beta E_ref)`` in the form
``1 + alpha H``). Its energy variance uses ``m4``. The moments come from two numbers per
configuration ``s``, both ratios to ``psi(s)``:

    d(s) = (H' psi)(s) / psi(s) = E_loc(s) - E_ref,
    q(s) = (H'^2 psi)(s) / psi(s) = sum_{s'} H[s, s'] psi(s') / psi(s) d(s') - E_ref d(s),

so that, over ``s ~ |psi|^2`` (or exact weights), ``m1 = <d>``, ``m2 = <|d|^2>``,
``m3 = Re <conj(d) q>`` and ``m4 = <|q|^2>`` (H Hermitian). ``q`` needs the local energy
of every connection ``s'`` of ``s``: about ``max_conn^2`` network evaluations per
configuration (:func:`lanczos_terms`, through the local-energy engine, chunked by
``chunk_map``). Error bars: a jackknife over blocks of whole chains (the chains are
independent; :func:`lanczos_from_terms`).

Energies are in the Hamiltonian's units, totals over the lattice (not per site). The
Lanczos energy is a measurement of ``psi_1``, not of the network's own state: it is
reported beside the variational energy and labelled as such.
"""
from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._validate import positive_int
from .operators import hamiltonian_sizes, make_local_energy
from .utils import chunk_map

__all__ = ["LanczosStep", "lanczos_energy", "lanczos_from_terms", "lanczos_terms", "lanczos_step",
           "lanczos_record"]

# configurations handed to the local-energy engine per call (per device): one compiled size
CONNECTIONS_PER_CALL = 4096
# network evaluations per device per chunk where no chunk_size is given (memory)
EVALUATIONS_PER_CHUNK = 2048
# configurations whose connections are held on the host at once
SAMPLES_PER_BLOCK = 2048
# blocks of chains of the jackknife
JACKKNIFE_BLOCKS = 32


class LanczosStep(NamedTuple):
    """One Lanczos step's estimate (energies totals in the Hamiltonian's units).

    ``energy``, ``error``: ``<H>`` of ``(1 + alpha H)|psi>``; ``variance``: its energy variance.
    ``variational_energy``, ``variational_error``, ``variational_variance``: those of ``psi``
    itself (the same samples). ``gain``, ``gain_error``: ``energy - variational_energy`` (its
    error from the same jackknife: the two are correlated). ``alpha``: of ``1 + alpha H``
    (inf where the step is ``H|psi>`` itself). ``n_samples``: configurations used;
    ``exact``: exact sums (weights), errors 0.
    """

    energy: float
    error: float
    variance: float
    variational_energy: float
    variational_error: float
    variational_variance: float
    gain: float
    gain_error: float
    alpha: float
    n_samples: int
    exact: bool


def _moments(d, q, w):
    """(m1, m2, m3, m4) about E_ref from per-configuration ``d``, ``q`` and weights ``w`` (sum 1)."""
    m1 = float(np.real(w @ d))
    m2 = float(w @ np.abs(d) ** 2)
    m3 = float(np.real(w @ (np.conj(d) * q)))
    m4 = float(w @ np.abs(q) ** 2)
    return m1, m2, m3, m4


def lanczos_energy(m1: float, m2: float, m3: float, m4: float) -> tuple[float, float, float, float]:
    """``(beta, energy - E_ref, variance, variational variance)`` of ``(1 + beta H')|psi>`` at
    the optimal ``beta``, from the moments ``m_k = <H'^k>`` (``H' = H - E_ref``).

    ``beta = 0`` (no step) where ``psi`` is an eigenstate to the moments' precision
    (variance 0) or no root lowers the energy.
    """
    variance0 = m2 - m1 * m1

    def energy(beta):
        den = 1.0 + 2.0 * beta * m1 + beta * beta * m2
        return (m1 + 2.0 * beta * m2 + beta * beta * m3) / den, den

    a, b, c = m1 * m3 - m2 * m2, m3 - m1 * m2, variance0
    roots = []
    if variance0 > 0:
        if a != 0.0:
            disc = b * b - 4.0 * a * c
            if disc >= 0:
                root = math.sqrt(disc)
                # the two roots without cancellation
                qq = -0.5 * (b + math.copysign(root, b)) if b != 0 else -0.5 * root
                roots = [qq / a] + ([c / qq] if qq != 0 else [])
        elif b != 0.0:
            roots = [-c / b]
    best, e_best = 0.0, m1
    for beta in roots:
        e, den = energy(beta)
        if den > 0 and math.isfinite(e) and e < e_best:
            best, e_best = beta, e
    _, den = energy(best)
    second = (m2 + 2.0 * best * m3 + best * best * m4) / den
    return best, e_best, max(second - e_best * e_best, 0.0), max(variance0, 0.0)


def _estimate(d, q, w, e_ref):
    m = _moments(d, q, w)
    beta, shift, variance, variance0 = lanczos_energy(*m)
    return e_ref + shift, e_ref + m[0], beta, variance, variance0


def lanczos_from_terms(d, q, e_ref: float, *, weights=None, n_chains: int = 1,
                       n_blocks: int = JACKKNIFE_BLOCKS) -> LanczosStep:
    """The Lanczos step from the per-configuration ``d`` ``(n,)`` and ``q`` ``(n,)`` (real or
    complex; module docstring) about ``e_ref``.

    weights: ``(n,)`` exact probabilities (exact sums; errors 0), else ``d``, ``q`` are
    chain-major samples of ``n_chains`` chains, ``n_blocks`` jackknife blocks of whole chains
    (at most ``n_chains``; errors NaN with one chain).
    """
    d = np.asarray(d).astype(np.result_type(np.asarray(d).dtype, np.float64)).reshape(-1)
    q = np.asarray(q).astype(np.result_type(np.asarray(q).dtype, np.float64)).reshape(-1)
    n = d.shape[0]
    if q.shape != (n,) or n == 0:
        raise ValueError(f"q: expected shape ({n},) like d, got {q.shape}")
    exact = weights is not None
    if exact:
        w = np.asarray(weights, np.float64).reshape(-1)
        if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError(f"weights: expected {n} non-negative finite weights with a positive sum")
        w = w / w.sum()
    else:
        w = np.full(n, 1.0 / n)
    energy, h1, alpha_beta, variance, variance0 = _estimate(d, q, w, e_ref)
    error = h1_error = gain_error = 0.0 if exact else float("nan")
    if not exact:
        n_chains = positive_int(n_chains, "n_chains")
        if n % n_chains:
            raise ValueError(f"n_chains: {n_chains} does not divide the {n} samples")
        blocks = min(positive_int(n_blocks, "n_blocks"), n_chains)
        if blocks >= 2:
            chain_of = np.arange(n) // (n // n_chains)
            block_of = chain_of * blocks // n_chains
            leave_out = []
            for b in range(blocks):
                keep = block_of != b
                wb = np.where(keep, 1.0, 0.0)
                wb /= wb.sum()
                e, h, _, _, _ = _estimate(d, q, wb, e_ref)
                leave_out.append((e, h, e - h))
            est = np.asarray(leave_out)
            spread = np.sqrt((blocks - 1) / blocks * np.sum((est - est.mean(axis=0)) ** 2, axis=0))
            error, h1_error, gain_error = (float(x) for x in spread)
    alpha = alpha_beta / (1.0 - alpha_beta * e_ref) if 1.0 - alpha_beta * e_ref != 0 else math.inf
    return LanczosStep(energy=float(energy), error=error, variance=float(variance), variational_energy=float(h1),
                       variational_error=h1_error, variational_variance=float(variance0),
                       gain=float(energy - h1), gain_error=gain_error, alpha=float(alpha), n_samples=int(n),
                       exact=exact)


@functools.lru_cache(maxsize=8)
def _connections_program(hamiltonian, log_psi, chunk_size, mesh):
    """``(params, s (b, n)) -> (s_conn (b, m, n), mels (b, m), log psi (b, m))``, chunked."""

    def rows(params, s):
        s_conn, mels = hamiltonian.connected(s)
        b, m, n = s_conn.shape
        lp = log_psi(params, s_conn.reshape(b * m, n)).reshape(b, m)
        return s_conn, mels, lp

    return jax.jit(chunk_map(rows, in_axes=(None, 0), chunk_size=chunk_size, use_scan=True, shard_batch=True,
                             mesh=mesh))


def lanczos_terms(hamiltonian, log_psi: Callable, params, samples, *, e_ref: float | None = None,
                  local_energies: Callable | None = None, chunk_size: int | None = None, mesh=None,
                  progress: Callable[[int, int], None] | None = None):
    """Per configuration ``(d, q, e_ref)``: ``d = E_loc - e_ref`` and ``q = (H'^2 psi) / psi``
    (module docstring), numpy ``(n,)`` each, for ``samples`` ``(n, n_sites)``.

    e_ref: default the mean local energy of ``samples`` (computed first). local_energies:
    ``f(params, s, log_psi_s) -> (k,)`` for the connections (default
    :func:`~quantax_lite.operators.make_local_energy` with ``chunk_size``); it is called on
    blocks of ``CONNECTIONS_PER_CALL`` configurations per device, only those with a nonzero
    matrix element (padded in the last block), so it compiles once. chunk_size: also the
    samples per device per step of the connections' own program (default: about
    ``EVALUATIONS_PER_CHUNK`` network evaluations per step, either way). progress: ``f(done, total)``
    over the samples.
    """
    n_sites, max_conn = hamiltonian_sizes(hamiltonian)
    samples = np.asarray(samples)
    if samples.ndim != 2 or samples.shape[1] != n_sites or samples.shape[0] == 0:
        raise ValueError(f"samples: expected shape (n, {n_sites}) with n >= 1, got {samples.shape}")
    if chunk_size is None:  # samples per device per step: about EVALUATIONS_PER_CHUNK evaluations
        chunk_size = max(1, EVALUATIONS_PER_CHUNK // max_conn)
    if local_energies is None:
        local_energies = _local_energy_program(hamiltonian, log_psi, chunk_size, mesh)
    try:  # one program per wavefunction and Hamiltonian: compiled once, reused
        connections = _connections_program(hamiltonian, log_psi, chunk_size, mesh)
    except TypeError:  # unhashable pieces
        connections = _connections_program.__wrapped__(hamiltonian, log_psi, chunk_size, mesh)
    n = samples.shape[0]
    block = min(n, SAMPLES_PER_BLOCK)
    per_call = CONNECTIONS_PER_CALL * jax.device_count()
    parts = []
    for start in range(0, n, block):
        s = samples[start:start + block]
        if s.shape[0] < block:  # one compiled size: pad with the first rows
            s = np.concatenate([s, samples[: block - s.shape[0]]])
        s_conn, mels, lp = jax.device_get(connections(params, jnp.asarray(s, jnp.int8)))
        parts.append((s_conn, mels, lp, min(block, n - start)))
    # E_loc of the samples themselves (slot 0 is s)
    e_loc = np.concatenate([np.sum(m * _ratios(lp, m), axis=1)[:k] for _, m, lp, k in parts])
    if e_ref is None:
        e_ref = float(np.mean(np.real(e_loc)))
    e_ref = float(e_ref)
    q_parts = []
    done = 0
    for s_conn, mels, lp, k in parts:
        s_conn, mels, lp = s_conn[:k], mels[:k], lp[:k]
        ratio = _ratios(lp, mels)
        rows, slots = np.nonzero(mels[:, 1:] != 0)
        slots = slots + 1
        configs, lp_conf = s_conn[rows, slots], lp[rows, slots]
        e_conn = np.zeros(len(rows), np.result_type(lp.dtype, mels.dtype))
        # one compiled size per power of two below a full call
        size = min(per_call, 1 << max(0, len(rows) - 1).bit_length())
        for c in range(0, len(rows), size):
            x, lx = configs[c:c + size], lp_conf[c:c + size]
            real = x.shape[0]
            if real < size:
                x = np.concatenate([x, np.repeat(x[:1], size - real, axis=0)])
                lx = np.concatenate([lx, np.repeat(lx[:1], size - real)])
            e_conn[c:c + real] = np.asarray(jax.device_get(local_energies(params, jnp.asarray(x), jnp.asarray(lx))))[:real]
        e_s = np.sum(mels * ratio, axis=1)
        d_conn = np.zeros(mels.shape, e_conn.dtype)
        d_conn[:, 0] = e_s - e_ref
        d_conn[rows, slots] = e_conn - e_ref
        q = np.sum(mels * ratio * d_conn, axis=1) - e_ref * (e_s - e_ref)
        q_parts.append(q)
        done += k
        if progress is not None:
            progress(done, n)
    return e_loc - e_ref, np.concatenate(q_parts), e_ref


def _local_energy_program(hamiltonian, log_psi, chunk_size, mesh):
    try:
        return _cached_local_energy(hamiltonian, log_psi, chunk_size, mesh)
    except TypeError:  # unhashable pieces
        return make_local_energy(hamiltonian, log_psi, chunk_size=chunk_size, mesh=mesh)


@functools.lru_cache(maxsize=8)
def _cached_local_energy(hamiltonian, log_psi, chunk_size, mesh):
    return make_local_energy(hamiltonian, log_psi, chunk_size=chunk_size, mesh=mesh)


def _ratios(lp, mels):
    """psi(s') / psi(s) for every slot (slot 0: s), 0 where the element vanishes."""
    lp = np.asarray(lp)
    wide = np.result_type(lp.dtype, np.float64)
    delta = lp.astype(wide) - lp[:, :1].astype(wide)
    nonzero = np.asarray(mels) != 0
    return np.where(nonzero, np.exp(np.where(nonzero, delta, 0)), 0)


def lanczos_step(hamiltonian, log_psi: Callable, params, samples, *, weights=None, n_chains: int = 1,
                 e_ref: float | None = None, local_energies: Callable | None = None,
                 chunk_size: int | None = None, mesh=None,
                 progress: Callable[[int, int], None] | None = None) -> LanczosStep:
    """The Lanczos step of ``psi = exp(log_psi(params, .))`` estimated on ``samples``
    ``(n, n_sites)``: chain-major samples of ``n_chains`` chains drawn from ``|psi|^2``, or
    configurations with exact probabilities ``weights`` (exact sums: every configuration
    of a sector, or one per orbit of a group ``psi`` transforms under). The rest as
    :func:`lanczos_terms`; returns a :class:`LanczosStep`.
    """
    d, q, e_ref = lanczos_terms(hamiltonian, log_psi, params, samples, e_ref=e_ref, local_energies=local_energies,
                                chunk_size=chunk_size, mesh=mesh, progress=progress)
    return lanczos_from_terms(d, q, e_ref, weights=weights, n_chains=n_chains)


def lanczos_record(step: LanczosStep, n_sites: int, exact_energy: float | None = None) -> dict:
    """The JSON record of a step (``observables.json``'s ``"lanczos"``, a row's final
    estimate): energies total and per site, relative errors against ``exact_energy``."""
    def num(x):
        return float(x) if x is not None and math.isfinite(x) else None

    record = {
        "what": "one Lanczos step: <H> of (1 + alpha H)|psi>, alpha optimal (not the network's own state)",
        "energy": num(step.energy), "error": num(step.error),
        "per_site": num(step.energy / n_sites), "per_site_error": num(step.error / n_sites),
        "variance": num(step.variance), "v_score": num(n_sites * step.variance / step.energy ** 2),
        "alpha": num(step.alpha),
        "variational_energy": num(step.variational_energy), "variational_error": num(step.variational_error),
        "variational_v_score": num(n_sites * step.variational_variance / step.variational_energy ** 2),
        "gain": num(step.gain), "gain_error": num(step.gain_error),
        "n_samples": step.n_samples, "exact_sums": step.exact,
    }
    if exact_energy is not None:
        scale = abs(exact_energy)
        record["relative_error"] = num((step.energy - exact_energy) / scale)
        record["relative_error_error"] = num(step.error / scale)
        record["variational_relative_error"] = num((step.variational_energy - exact_energy) / scale)
    return record
