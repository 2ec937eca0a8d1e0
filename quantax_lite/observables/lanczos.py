"""One Lanczos step on a trained state: the energy of ``(1 + alpha H)|psi>``, alpha optimal.

With ``H' = H - E_ref`` (``E_ref`` a constant near ``<H>``, subtracted for precision) the
state ``psi_b = (1 + b H') psi`` has, at every configuration ``s``,

    psi_b(s) = psi(s) (1 + b d(s)),      (H' psi_b)(s) = psi(s) (d(s) + b q(s)),
    d(s) = (H' psi)(s) / psi(s) = E_loc(s) - E_ref,
    q(s) = (H'^2 psi)(s) / psi(s) = sum_{s'} H[s, s'] psi(s') / psi(s) d(s') - E_ref d(s),

so over configurations ``s`` drawn from ``|psi_c|^2`` (any ``c``; ``c = 0``: from ``psi``
itself) with weights ``v(s) = 1 / |1 + c d(s)|^2``

    E(b) - E_ref = <v Re[conj(1 + b d)(d + b q)]> / <v |1 + b d|^2>,

a ratio of two quadratics in ``b``, minimized in closed form (the root of a quadratic);
the state's variance is ``<v |d + b q|^2> / <v |1 + b d|^2> - (E(b) - E_ref)^2``. In the
form ``1 + alpha H``: ``alpha = b / (1 - b E_ref)``. ``q`` needs the local energy of every
connection of ``s``: about ``max_conn^2`` network evaluations per configuration
(:func:`lanczos_terms`, summed on the device relative to the largest term, chunked by
``chunk_map``).

Why sample ``psi_b`` and not only ``psi``: ``<|E_loc|^2>`` over ``|psi|^2`` is dominated by
rare configurations where ``psi`` is small and ``H psi`` is not (near the nodes of a
trained network: on a 4x4 J1-J2 state, configurations of total probability 3e-4 held 57%
of its variance), so estimates from ``psi``'s samples miss most of what the step gains;
``psi_b`` is large exactly there. :func:`lanczos_sampled` draws a first set from ``psi``
for ``b``, then the estimate from ``psi_b``'s own samples (:class:`LanczosState` is its
log-amplitude for a Metropolis sampler). Error bars: a jackknife over blocks of whole
chains (:func:`lanczos_from_terms`).

Energies are in the Hamiltonian's units, totals over the lattice (not per site). The
Lanczos energy is a measurement of ``psi_b``, not of the network's own state: it is
reported beside the variational energy and labelled as such.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from quantax_lite.utils import tuning
from quantax_lite.utils.validate import positive_int
from quantax_lite.observables.programs import cached, chunked_fn
from quantax_lite.operators.hamiltonian import hamiltonian_sizes
from quantax_lite.sampler import of_psi_squared

__all__ = ["LanczosStep", "LanczosState", "lanczos_energy", "lanczos_from_terms", "lanczos_terms", "lanczos_step",
           "lanczos_sampled", "lanczos_record"]

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
    (inf where the step is ``H|psi>`` itself); ``beta``, ``e_ref``: the same step as
    ``1 + beta (H - e_ref)``. ``n_samples``: configurations used; ``exact``: exact sums
    (weights), errors 0. ``sampled_energy``, ``sampled_error``: ``<H>`` of the state the
    samples come from, ``psi_c = (1 + c (H - e_ref)) psi`` (``c = sampled_beta``; ``psi`` itself
    for ``c = 0``), by its own samples without reweighting: a variational energy of that
    state, unbiased whatever the weights' tails (not optimal in ``b`` unless ``c`` is);
    ``sampled_beta``: that ``c``.
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
    beta: float
    e_ref: float
    n_samples: int
    exact: bool
    sampled_energy: float = math.nan
    sampled_error: float = math.nan
    sampled_beta: float = 0.0


def _coefficients(d, q, w):
    """Weighted means (``w`` sums to 1): the quadratics in ``b`` of the numerator, the
    denominator and the second moment of ``psi_b`` (module docstring), each (c0, c1, c2)."""
    re_d, abs_d2 = np.real(d), np.abs(d) ** 2
    dq = np.real(np.conj(d) * q)
    one = float(np.sum(w))
    numerator = (float(w @ re_d), float(w @ (np.real(q) + abs_d2)), float(w @ dq))
    denominator = (one, 2.0 * float(w @ re_d), float(w @ abs_d2))
    second = (float(w @ abs_d2), 2.0 * float(w @ dq), float(w @ np.abs(q) ** 2))
    return numerator, denominator, second


def _quadratic(c, b):
    return c[0] + b * (c[1] + b * c[2])


def lanczos_energy(numerator, denominator, second) -> tuple[float, float, float, float]:
    """``(b, E(b) - E_ref, variance at b, variance at 0)`` at the ``b`` that minimizes
    ``E(b) - E_ref = N(b) / D(b)``, the quadratics given by their coefficients
    ``(c0, c1, c2)`` (``second``: ``<H'^2>`` of ``psi_b`` times ``D(b)``).

    ``b = 0`` (no step) where no stationary point lowers the energy (``psi`` an eigenstate
    to the estimates' precision).
    """
    a0, a1, a2 = numerator
    b0, b1, b2 = denominator
    # d/db (N / D) = 0: (a2 b1 - a1 b2) b^2 + 2 (a2 b0 - a0 b2) b + (a1 b0 - a0 b1) = 0
    qa, qb, qc = a2 * b1 - a1 * b2, 2.0 * (a2 * b0 - a0 * b2), a1 * b0 - a0 * b1
    roots = []
    if qa != 0.0:
        disc = qb * qb - 4.0 * qa * qc
        if disc >= 0:
            root = math.sqrt(disc)
            qq = -0.5 * (qb + math.copysign(root, qb)) if qb != 0 else -0.5 * root
            roots = [qq / qa] + ([qc / qq] if qq != 0 else [])
    elif qb != 0.0:
        roots = [-qc / qb]

    def energy(b):
        den = _quadratic(denominator, b)
        return (_quadratic(numerator, b) / den if den > 0 else math.inf), den

    best, (e_best, _) = 0.0, energy(0.0)
    for b in roots:
        e, den = energy(b)
        if den > 0 and math.isfinite(e) and e < e_best:
            best, e_best = b, e
    variances = []
    for b in (best, 0.0):
        e, den = energy(b)
        variances.append(max(_quadratic(second, b) / den - e * e, 0.0))
    return best, e_best, variances[0], variances[1]


def _estimate(d, q, w, e_ref, c=0.0):
    """(E of the step, E of psi, b, variance of the step, variance of psi, E of psi_c), weights ``w``."""
    numerator, denominator, second = _coefficients(d, q, w)
    b, shift, variance, variance0 = lanczos_energy(numerator, denominator, second)
    e_c = e_ref + _quadratic(numerator, c) / _quadratic(denominator, c)
    return e_ref + shift, e_ref + numerator[0] / denominator[0], b, variance, variance0, e_c


def lanczos_from_terms(d, q, e_ref: float, *, weights=None, n_chains: int = 1,
                       n_blocks: int = JACKKNIFE_BLOCKS, sampled_beta: float = 0.0) -> LanczosStep:
    """The Lanczos step from the per-configuration ``d`` ``(n,)`` and ``q`` ``(n,)`` (real or
    complex; module docstring) about ``e_ref``.

    weights: ``(n,)`` exact probabilities of the configurations under ``|psi|^2`` (exact
    sums; errors 0), else ``d``, ``q`` belong to chain-major samples of ``n_chains`` chains,
    ``n_blocks`` jackknife blocks of whole chains (at most ``n_chains``; errors NaN with
    one chain). sampled_beta: the ``c`` of the distribution ``|psi_c|^2`` the samples come
    from (0: ``psi``'s own; each sample then weighs ``1 / |1 + c d|^2``).
    """
    d = np.asarray(d).astype(np.result_type(np.asarray(d).dtype, np.float64)).reshape(-1)
    q = np.asarray(q).astype(np.result_type(np.asarray(q).dtype, np.float64)).reshape(-1)
    n = d.shape[0]
    if q.shape != (n,) or n == 0:
        raise ValueError(f"q: expected shape ({n},) like d, got {q.shape}")
    bad = int(np.sum(~(np.isfinite(d) & np.isfinite(q))))
    if bad:  # no step (b = 0, an energy of NaN) is reported from such terms
        raise FloatingPointError(f"lanczos: {bad} of {n} configurations have a local energy or (H'^2 psi)/psi that "
                                 "is not finite (psi vanishes or overflows there); no Lanczos step from them")
    try:
        c = float(sampled_beta)
    except (TypeError, ValueError):
        raise TypeError(f"sampled_beta: expected a real number, got {sampled_beta!r}") from None
    if not math.isfinite(c):
        raise ValueError(f"sampled_beta: expected a finite number, got {sampled_beta!r}")
    exact = weights is not None
    if exact:
        w = np.asarray(weights, np.float64).reshape(-1)
        if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError(f"weights: expected {n} non-negative finite weights with a positive sum")
        w = w / w.sum()
    else:
        w = np.full(n, 1.0 / n)
    if c != 0.0:
        with np.errstate(divide="ignore"):
            v = 1.0 / np.abs(1.0 + c * d) ** 2
        if not np.all(np.isfinite(v)):
            raise ValueError("sampled_beta: a sample lies on a node of psi_c (1 + c d = 0); it cannot come from "
                             "|psi_c|^2")
        w = w * v
    energy, h1, beta, variance, variance0, e_c = _estimate(d, q, w, e_ref, c)
    error = h1_error = gain_error = e_c_error = 0.0 if exact else float("nan")
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
                e, h, _, _, _, ec = _estimate(d, q, np.where(block_of != b, w, 0.0), e_ref, c)
                leave_out.append((e, h, e - h, ec))
            est = np.asarray(leave_out)
            spread = np.sqrt((blocks - 1) / blocks * np.sum((est - est.mean(axis=0)) ** 2, axis=0))
            error, h1_error, gain_error, e_c_error = (float(x) for x in spread)
    alpha = beta / (1.0 - beta * e_ref) if 1.0 - beta * e_ref != 0 else math.inf
    return LanczosStep(energy=float(energy), error=error, variance=float(variance), variational_energy=float(h1),
                       variational_error=h1_error, variational_variance=float(variance0),
                       gain=float(energy - h1), gain_error=gain_error, alpha=float(alpha), beta=float(beta),
                       e_ref=float(e_ref), n_samples=int(n), exact=exact, sampled_energy=float(e_c),
                       sampled_error=e_c_error, sampled_beta=c)


@cached
def _connections_program(hamiltonian, log_psi, chunk_size, mesh, choices):
    """``(params, s (b, n)) -> (s_conn (b, m, n), mels (b, m), log psi (b, m))``, chunked."""

    def rows(params, s):
        s_conn, mels = hamiltonian.connected(s)
        b, m, n = s_conn.shape
        lp = log_psi(params, s_conn.reshape(b * m, n)).reshape(b, m)
        return s_conn, mels, lp

    return chunked_fn(rows, chunk_size, mesh, choices)


def _relative_to_largest(lp, terms):
    """``(top (b,), exp(lp - top) (b, m))``: ``top`` the largest ``Re lp`` over the slots
    ``terms`` (b, m) of each row (0 where there is none), the exponentials 0 off them, so a
    sum of the terms times ``e^top`` never overflows, even in float32."""
    re = jnp.where(terms, jnp.real(lp), -jnp.inf)
    top = jax.lax.stop_gradient(jnp.max(re, axis=1))
    top = jnp.where(jnp.isfinite(top), top, 0)  # every term zero: no NaN below
    return top, jnp.where(terms, jnp.exp(jnp.where(terms, lp - top[:, None], 0)), 0)


@cached
def _h_psi_program(hamiltonian, log_psi, chunk_size, mesh, choices):
    """``(params, x (b, n)) -> (top (b,), h (b,))`` with ``(H psi)(x) = e^top h``, the sum
    taken relative to the largest ``|psi|`` among its terms (:func:`_relative_to_largest`),
    chunked: finite where ``psi(x)`` is tiny beside its connections, where a local energy
    ``(H psi)(x) / psi(x)`` overflows float32."""

    def rows(params, x):
        x_conn, mels = hamiltonian.connected(x)
        b, m, n = x_conn.shape
        lp = log_psi(params, x_conn.reshape(b * m, n)).reshape(b, m)
        top, scaled = _relative_to_largest(lp, mels != 0)
        return top, jnp.sum(mels * scaled, axis=1)

    return chunked_fn(rows, chunk_size, mesh, choices)


def lanczos_terms(hamiltonian, log_psi: Callable, params, samples, *, e_ref: float | None = None,
                  chunk_size: int | None = None, mesh=None,
                  progress: Callable[[int, int], None] | None = None):
    """Per configuration ``(d, q, e_ref)``: ``d = E_loc - e_ref`` and ``q = (H'^2 psi) / psi``
    (module docstring), numpy ``(n,)`` each in float64 (complex128 for a complex psi), for
    ``samples`` ``(n, n_sites)``.

    e_ref: default the mean local energy of ``samples`` (computed first). ``(H psi)(s')``
    of every connection ``s'`` with a nonzero matrix element is summed on the device
    relative to its largest term (:func:`_h_psi_program`, one compiled size per power of
    two up to ``CONNECTIONS_PER_CALL`` configurations per device) and divided by
    ``psi(s)`` on the host in float64: finite where ``psi`` is tiny beside its
    connections (where samples of ``psi_b`` go), whatever the network's precision.
    chunk_size: samples per device per step of both programs (default: about
    ``EVALUATIONS_PER_CHUNK`` network evaluations per step). progress: ``f(done, total)``
    over the samples.
    """
    n_sites, max_conn = hamiltonian_sizes(hamiltonian)
    samples = np.asarray(samples)
    if samples.ndim != 2 or samples.shape[1] != n_sites or samples.shape[0] == 0:
        raise ValueError(f"samples: expected shape (n, {n_sites}) with n >= 1, got {samples.shape}")
    if chunk_size is None:  # samples per device per step: about EVALUATIONS_PER_CHUNK evaluations
        chunk_size = max(1, EVALUATIONS_PER_CHUNK // max_conn)
    # compiled once per wavefunction, Hamiltonian, chunking and the speed choices in force
    connections = _connections_program(hamiltonian, log_psi, chunk_size, mesh, tuning.current())
    h_psi = _h_psi_program(hamiltonian, log_psi, chunk_size, mesh, tuning.current())
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
        wide = np.result_type(lp.dtype, mels.dtype, np.float64)
        ratio = _ratios(lp, mels)
        rows, slots = np.nonzero(mels[:, 1:] != 0)
        slots = slots + 1
        configs = s_conn[rows, slots]
        top, h = np.zeros(len(rows)), np.zeros(len(rows), wide)
        # one compiled size per power of two below a full call
        size = min(per_call, 1 << max(0, len(rows) - 1).bit_length())
        for c in range(0, len(rows), size):
            x = configs[c:c + size]
            real = x.shape[0]
            if real < size:
                x = np.concatenate([x, np.repeat(x[:1], size - real, axis=0)])
            t, v = jax.device_get(h_psi(params, jnp.asarray(x)))
            top[c:c + real], h[c:c + real] = np.asarray(t)[:real], np.asarray(v)[:real]
        # (H' psi)(s') / psi(s) for every slot: (H psi)(s') / psi(s) - e_ref psi(s') / psi(s)
        lp_s = lp[:, 0].astype(wide)
        e_s = np.sum(mels * ratio, axis=1)
        h_conn = np.zeros(mels.shape, wide)
        h_conn[:, 0] = e_s - e_ref
        h_conn[rows, slots] = np.exp(top - lp_s[rows]) * h - e_ref * ratio[rows, slots]
        q = np.sum(mels * h_conn, axis=1) - e_ref * (e_s - e_ref)
        q_parts.append(q)
        done += k
        if progress is not None:
            progress(done, n)
    return e_loc - e_ref, np.concatenate(q_parts), e_ref


def _ratios(lp, mels):
    """psi(s') / psi(s) for every slot (slot 0: s), 0 where the element vanishes."""
    lp = np.asarray(lp)
    wide = np.result_type(lp.dtype, np.float64)
    delta = lp.astype(wide) - lp[:, :1].astype(wide)
    nonzero = np.asarray(mels) != 0
    return np.where(nonzero, np.exp(np.where(nonzero, delta, 0)), 0)


def lanczos_step(hamiltonian, log_psi: Callable, params, samples, *, weights=None, n_chains: int = 1,
                 sampled_beta: float = 0.0, e_ref: float | None = None,
                 chunk_size: int | None = None, mesh=None,
                 progress: Callable[[int, int], None] | None = None) -> LanczosStep:
    """The Lanczos step of ``psi = exp(log_psi(params, .))`` estimated on ``samples``
    ``(n, n_sites)``: chain-major samples of ``n_chains`` chains drawn from ``|psi_c|^2``,
    ``c = sampled_beta`` (0: from ``|psi|^2``; :class:`LanczosState` for another ``c``, with
    this ``e_ref``), or configurations with exact probabilities ``weights`` under
    ``|psi|^2`` (exact sums: every configuration of a sector, or one per orbit of a group
    ``psi`` transforms under). The rest as :func:`lanczos_terms`; returns a
    :class:`LanczosStep`. On samples of ``psi`` alone the estimate can miss most of the
    gain (module docstring): :func:`lanczos_sampled` samples the step's own state.
    """
    d, q, e_ref = lanczos_terms(hamiltonian, log_psi, params, samples, e_ref=e_ref,
                                chunk_size=chunk_size, mesh=mesh, progress=progress)
    return lanczos_from_terms(d, q, e_ref, weights=weights, n_chains=n_chains, sampled_beta=sampled_beta)


@dataclasses.dataclass(frozen=True)
class LanczosState:
    """``log |psi_b(s)|`` of ``psi_b = (1 + beta (H - e_ref)) psi``, a log-amplitude for a
    sampler: ``((params, beta, e_ref), s (batch, n_sites)) -> (batch,)`` real, ``-inf`` on a
    node of ``psi_b``; ``params`` are ``log_psi``'s. Each call evaluates ``log_psi`` on every
    connection of every row (``max_conn`` evaluations per row). Equal (and hashed) by its
    Hamiltonian and ``log_psi``, so ``beta`` and ``e_ref`` change no compiled program."""

    hamiltonian: Any
    log_psi: Callable

    def __call__(self, params, s):
        psi_params, beta, e_ref = params
        s_conn, mels = self.hamiltonian.connected(s)
        b, m, n = s_conn.shape
        lp_conn = self.log_psi(psi_params, s_conn.reshape(b * m, n)).reshape(b, m)
        # psi_b(s) = (1 - beta e_ref) psi(s) + beta sum_k mels_k psi(s_k) (slot 0 is s), summed
        # relative to the largest |psi| among the terms: no ratio overflows, even in float32
        # where psi(s) is tiny beside its connections (where samples of psi_b go)
        beta = jnp.asarray(beta, mels.dtype)
        terms = (mels != 0).at[:, 0].set(True)
        coef = jnp.where(terms, beta * mels, 0).at[:, 0].add(1 - beta * jnp.asarray(e_ref, mels.dtype))
        top, scaled = _relative_to_largest(lp_conn, terms)
        return top + jnp.log(jnp.abs(jnp.sum(coef * scaled, axis=1)))


def lanczos_sampled(hamiltonian, log_psi: Callable, params, sampler, key, samples, *, passes: int = 2,
                    chunk_size: int | None = None, mesh=None,
                    progress: Callable[[int, int], None] | None = None) -> tuple[LanczosStep, LanczosStep]:
    """The Lanczos step from samples of its own state: ``(step, first)``.

    ``samples``: ``(n, n_sites)`` chain-major samples of ``|psi|^2`` (drawn at power 1) from
    ``sampler``'s chains (a :class:`~quantax_lite.sampler.MetropolisSampler` of ``log_psi``, of
    any ``power``); ``first``, the step
    estimated on them, gives ``b``. Then ``n`` samples of ``|psi_b|^2`` (at power 1 whatever
    ``sampler.power``; :class:`LanczosState` with ``(params, b, e_ref)``, the same rule and
    chains, started from the last configuration of each chain of the previous set and
    thermalized again under ``key`` for the sampler's ``n_thermalize`` sweeps: 5 or 10
    instead of 20 left a bias of 0.6 or 0.14 error bars on the tests' chain) give the next
    estimate
    (:func:`lanczos_step` with ``sampled_beta = b``, the same ``e_ref``), whose ``b`` the
    next set is drawn at: ``passes`` sets in all (at least 2), the last one's estimate is
    ``step``. A further pass samples the state at the ``b`` the previous one chose, so the
    last set's ``sampled_energy`` (no reweighting) is the energy of a state near the
    optimal step where the first ``b``, from ``psi``'s samples, is far from it. The rest as
    :func:`lanczos_terms`; ``progress(done, total)`` over every set (``total = passes n``).
    """
    samples = np.asarray(samples)
    n, n_chains = samples.shape[0], sampler.n_chains
    if n % n_chains:
        raise ValueError(f"samples: {n} must be a multiple of the sampler's {n_chains} chains")
    passes = positive_int(passes, "passes")
    if passes < 2:
        raise ValueError(f"passes: expected at least 2 (samples of psi, then of the step's state), got {passes}")
    options = dict(chunk_size=chunk_size, mesh=mesh)
    tell = (lambda offset: None if progress is None else
            (lambda done, total: progress(offset + done, passes * n)))
    first = lanczos_step(hamiltonian, log_psi, params, samples, n_chains=n_chains, progress=tell(0), **options)
    _, max_conn = hamiltonian_sizes(hamiltonian)
    rows = max(1, EVALUATIONS_PER_CHUNK // max_conn)  # chains per device per evaluation of psi_b
    # |psi_b|^2, as the weights of lanczos_step assume, also where the run trains on |psi|^(2 power)
    sampler_b = dataclasses.replace(of_psi_squared(sampler)[0], log_psi=LanczosState(hamiltonian, log_psi),
                                    chunk_size=rows)
    wide = tuning.wide_dtype()  # float32 on an accelerator, whatever jax_enable_x64 says
    step, drawn = first, samples
    for k in range(1, passes):
        params_b = (params, jnp.asarray(step.beta, wide), jnp.asarray(first.e_ref, wide))
        last = np.asarray(drawn).reshape(n_chains, n // n_chains, -1)[:, -1]
        pass_key = key if k == 1 else jax.random.fold_in(key, k)  # the first pass's draws as before
        chains = sampler_b.init(pass_key, params_b, initial_states=jnp.asarray(last, jnp.int8))
        drawn, _, _ = sampler_b.sample(chains, params_b, n)
        step = lanczos_step(hamiltonian, log_psi, params, np.asarray(drawn), n_chains=n_chains,
                            sampled_beta=step.beta, e_ref=first.e_ref, progress=tell(k * n), **options)
    return step, first


def lanczos_record(step: LanczosStep, n_sites: int, exact_energy: float | None = None,
                   first: LanczosStep | None = None) -> dict:
    """The JSON record of a step (``observables.json``'s ``"lanczos"``, a row's final
    estimate): energies total and per site, relative errors against ``exact_energy``;
    ``first``: the estimate from samples of ``psi`` that chose the step
    (:func:`lanczos_sampled`), kept as ``"from_psi_samples"``."""
    def num(x):
        return float(x) if x is not None and math.isfinite(x) else None

    record = {
        "what": "one Lanczos step: <H> of (1 + alpha H)|psi>, alpha optimal (not the network's own state)",
        "energy": num(step.energy), "error": num(step.error),
        "per_site": num(step.energy / n_sites), "per_site_error": num(step.error / n_sites),
        "variance": num(step.variance), "v_score": num(n_sites * step.variance / step.energy ** 2),
        "alpha": num(step.alpha), "beta": num(step.beta), "e_ref": num(step.e_ref),
        "variational_energy": num(step.variational_energy), "variational_error": num(step.variational_error),
        "variational_v_score": num(n_sites * step.variational_variance / step.variational_energy ** 2),
        "gain": num(step.gain), "gain_error": num(step.gain_error),
        "sampled_state_energy": num(step.sampled_energy), "sampled_state_error": num(step.sampled_error),
        "sampled_state_beta": num(step.sampled_beta),
        "n_samples": step.n_samples, "exact_sums": step.exact,
    }
    record["samples_from"] = ("exact sums over |psi|^2" if step.exact else
                              "|psi|^2" if step.beta == 0.0 or first is None else "the Lanczos state's own |psi_b|^2")
    if exact_energy is not None:
        scale = abs(exact_energy)
        record["relative_error"] = num((step.energy - exact_energy) / scale)
        record["relative_error_error"] = num(step.error / scale)
        record["variational_relative_error"] = num((step.variational_energy - exact_energy) / scale)
        record["sampled_state_relative_error"] = num((step.sampled_energy - exact_energy) / scale)
    if first is not None:
        record["from_psi_samples"] = {k: v for k, v in lanczos_record(first, n_sites, exact_energy).items()
                                      if k not in ("what", "samples_from")}
    return record
