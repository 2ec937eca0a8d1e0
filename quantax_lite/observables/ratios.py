"""The shared ratio program: local values from ``psi(s[perm]) / psi(s)`` over fixed tables
of site permutations.

A *spec* ``(kind, key)`` names one table (``key`` hashable: the compiled program is memoized
on the specs). Kinds: ``"pairs"`` ``(n_sites,)``: ``S_i . S_j`` for every pair ``i < j``
(``np.triu_indices`` order); ``"dimers"`` ``(n_sites, bonds bytes, group bytes, n_groups)``:
the bond values ``D_b`` and, per group of ordered bond pairs, the sum of ``Re (D_b1 D_b2)_loc``.
Every spec asked for by one :func:`~quantax_lite.observables.measure` is evaluated in one
chunked program, their values side by side."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from quantax_lite.utils import tuning
from quantax_lite.utils.validate import positive_int
from quantax_lite.utils import chunk_map
from .checks import host
from .programs import cached


def default_chunk(chunk_size, n_moves: int):
    """Samples per chunk: ``chunk_size`` checked, or about ``tuning.current().local_energy_rows``
    network evaluations per chunk (None: unchunked)."""
    if chunk_size is not None:
        return positive_int(chunk_size, "chunk_size")
    rows = tuning.current().local_energy_rows
    return None if rows is None else max(1, rows // max(1, n_moves))


@cached
def moved_values_fn(log_psi, specs: tuple, chunk_size, mesh, choices):
    """A jitted ``(params, samples, log_psi_samples) -> (n_samples, k)`` of real local values
    from the ratios ``psi(s[perm]) / psi(s)`` over fixed tables of site permutations: one
    table per spec ``(kind, key)``, all evaluated in one chunked program, their values
    side by side."""
    parts = [KINDS[kind](*key) for kind, key in specs]
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


def swap_perms(n_sites: int, pairs: np.ndarray) -> np.ndarray:
    """One permutation per pair ``(i, j)``: the identity with ``i`` and ``j`` swapped."""
    perms = np.tile(np.arange(n_sites), (len(pairs), 1))
    k = np.arange(len(pairs))
    perms[k, pairs[:, 0]] = pairs[:, 1]
    perms[k, pairs[:, 1]] = pairs[:, 0]
    return perms


def _pair_kind(n_sites: int):
    """S_i . S_j for every pair i < j (np.triu_indices order)."""
    i, j = np.triu_indices(n_sites, k=1)
    perms = swap_perms(n_sites, np.stack([i, j], 1))

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
    single = swap_perms(n_sites, bonds)  # (nb, n)
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


KINDS = {"pairs": _pair_kind, "dimers": _dimer_kind}


def pairs_spec(n_sites: int) -> tuple:
    """The spec of ``S_i . S_j`` for every pair ``i < j``."""
    return ("pairs", (n_sites,))


def spec_moves(spec) -> int:
    """Network evaluations per sample of one spec."""
    kind, key = spec
    if kind == "pairs":
        return key[0] * (key[0] - 1) // 2
    nb = len(key[1]) // 16
    return nb + nb * nb


def spec_width(spec) -> int:
    """Values per sample of one spec."""
    kind, key = spec
    if kind == "pairs":
        return key[0] * (key[0] - 1) // 2
    return len(key[1]) // 16 + key[3]


def moved_values(log_psi, params, samples, lp, specs, chunk_size, mesh) -> list:
    """The values of every spec, one ``(n_samples, width)`` numpy array each, from one program."""
    specs = tuple(specs)
    chunk = default_chunk(chunk_size, sum(spec_moves(s) for s in specs))
    fn = moved_values_fn(log_psi, specs, chunk, mesh, tuning.current())
    values = host(fn(params, samples, lp))
    out, start = [], 0
    for spec in specs:
        w = spec_width(spec)
        out.append(values[:, start : start + w])
        start += w
    return out
