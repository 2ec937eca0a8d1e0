"""Local spin-1/2 operators a physicist writes: ``sz(0) @ sz(1) + 0.5 * (sp(0) @ sm(1) + sm(0) @ sp(1))``.

Units: spin-1/2, ``S = sigma / 2``; ``S+ = Sx + i Sy = |up><down|``, ``S- = |down><up|``.
Configurations are +-1 (+1 = up), as everywhere in the package.

Representation. An operator is a sum of terms ``c * prod_{i in sites} E_i(a_i, b_i)``
with complex ``c`` and, on each listed site, a matrix unit ``E(a, b) = |a><b|`` (a, b =
+-1); unlisted sites carry the identity. The four units are a basis of the 2x2 matrices
and close under products (``E(a, b) E(c, d) = [b == c] E(a, d)``), so products of
operators, same-site products included, are reduced exactly without expanding anything
(``sz(0) @ sz(0)`` is the identity times 1/4: a pair of terms that differ only by
``E(+,+)`` versus ``E(-,-)`` on one site, with equal coefficients, is merged into the
identity there).

The matrix element of a term between ``<s|`` and ``|s'>`` is ``c`` when ``s_i = a_i`` on
every listed site and ``s'`` is ``s`` with the sites where ``a_i != b_i`` flipped, else 0.
:class:`LocalOperator` groups the terms by this flip pattern: ``connected(s)`` has one
slot per distinct pattern (slot 0: no flip, the diagonal) whose element is
``sum_t c_t [s matches the bra of term t]``, a matrix product. So a LocalOperator meets
the Hamiltonian contract of :mod:`quantax_lite.operators.hamiltonian` (``to_dense``, ``to_sparse``,
``local_energy`` and :func:`quantax_lite.observables.expect` work on it); its elements
are complex when a coefficient is, and it need not be Hermitian.
"""
from __future__ import annotations

import numbers
from typing import Callable

import jax.numpy as jnp
import numpy as np

from quantax_lite.utils.validate import positive_int
from quantax_lite.geometry.lattice import Lattice
from quantax_lite.operators.hamiltonian import SpinHamiltonian
from quantax_lite.utils import tuning

__all__ = [
    "LocalOperator",
    "identity",
    "sx",
    "sy",
    "sz",
    "sp",
    "sm",
    "spin_dot",
    "bond_sum",
    "spin_dot_sum",
    "total_sz",
]



def _n_sites_of(n_sites, name: str = "n_sites") -> int:
    if isinstance(n_sites, Lattice):
        return n_sites.n_sites
    return positive_int(n_sites, name)


def _check_site(i, n_sites: int, name: str = "i") -> int:
    if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
        raise TypeError(f"{name}: expected a site index (int), got {i!r}")
    if not 0 <= int(i) < n_sites:
        raise ValueError(f"{name}: site {int(i)} is out of range for n_sites={n_sites} (0 .. {n_sites - 1})")
    return int(i)


def _check_scalar(c) -> complex:
    if isinstance(c, (bool, np.bool_)) or not isinstance(c, numbers.Number):
        if getattr(c, "ndim", None) == 0 and hasattr(c, "dtype"):
            c = complex(c)
        else:
            raise TypeError(f"coefficient: expected a (complex) number, got {c!r}")
    c = complex(c)
    if not (np.isfinite(c.real) and np.isfinite(c.imag)):
        raise ValueError(f"coefficient: expected a finite number, got {c!r}")
    return c


def _term_product(k1: tuple, k2: tuple):
    """Product of two unit strings: (key, 1) or (None, 0) when it vanishes."""
    d1 = {i: (a, b) for i, a, b in k1}
    out = dict(d1)
    for i, c, d in k2:
        if i in d1:
            a, b = d1[i]
            if b != c:
                return None
            out[i] = (a, d)
        else:
            out[i] = (c, d)
    return tuple((i, a, b) for i, (a, b) in sorted(out.items()))


def _simplify(terms: dict) -> dict:
    """Drop zero coefficients; merge ``c E(+,+)_i X + c E(-,-)_i X`` into ``c X``, repeatedly."""
    terms = {k: v for k, v in terms.items() if v != 0}
    changed = True
    while changed:
        changed = False
        for key in list(terms):
            if key not in terms:
                continue
            for pos, (i, a, b) in enumerate(key):
                if a != b or a != 1:
                    continue
                partner = key[:pos] + ((i, -1, -1),) + key[pos + 1 :]
                c1, c2 = terms[key], terms.get(partner)
                if c2 is None or abs(c1 - c2) > 1e-15 * max(abs(c1), abs(c2)):
                    continue
                rest = key[:pos] + key[pos + 1 :]
                del terms[key], terms[partner]
                new = terms.get(rest, 0) + c1
                if new != 0:
                    terms[rest] = new
                else:
                    terms.pop(rest, None)
                changed = True
                break
    return terms


class LocalOperator(SpinHamiltonian):
    """A sum of products of single-site spin-1/2 operators on ``n_sites`` sites.

    Build one with :func:`sx`, :func:`sy`, :func:`sz`, :func:`sp`, :func:`sm`,
    :func:`identity` and the algebra: ``a @ b`` and ``a * b`` (operator product, ``a``
    acting last), ``a + b``, ``a - b``, ``-a``, ``c * a``, ``a * c``, ``a / c`` and
    ``a + c`` (``c`` a complex number, ``c`` times the identity), ``a.dagger()``.
    Mixing operators on different ``n_sites`` raises ValueError.

    The Hamiltonian contract: ``n_sites``; ``max_conn`` (1 + the number of distinct flip
    patterns of the terms); ``conserves_sz`` (every term flips as many up spins down as
    down spins up); jittable ``connected(s) -> (s_conn (..., max_conn, n_sites) int8,
    mels (..., max_conn))``, slot 0 the diagonal, elements float64 or complex128 (when a
    coefficient is complex). ``terms``: ``{((site, a, b), ...): coefficient}``.
    """

    def __init__(self, n_sites, terms: dict | None = None):
        self.n_sites = _n_sites_of(n_sites)
        self.terms = _simplify(dict(terms or {}))
        self._tables = None

    # ------------------------------------------------------------------ algebra
    def _other(self, other, what: str) -> "LocalOperator":
        if isinstance(other, LocalOperator):
            if other.n_sites != self.n_sites:
                raise ValueError(
                    f"{what}: operators on different n_sites ({self.n_sites} and {other.n_sites})"
                )
            return other
        return LocalOperator(self.n_sites, {(): _check_scalar(other)})

    def __add__(self, other):
        if not isinstance(other, (LocalOperator, numbers.Number)):
            return NotImplemented
        other = self._other(other, "a + b")
        terms = dict(self.terms)
        for k, v in other.terms.items():
            terms[k] = terms.get(k, 0) + v
        return LocalOperator(self.n_sites, terms)

    __radd__ = __add__

    def __neg__(self):
        return LocalOperator(self.n_sites, {k: -v for k, v in self.terms.items()})

    def __sub__(self, other):
        if not isinstance(other, (LocalOperator, numbers.Number)):
            return NotImplemented
        return self + (-self._other(other, "a - b"))

    def __rsub__(self, other):
        if not isinstance(other, numbers.Number):
            return NotImplemented
        return (-self) + other

    def __matmul__(self, other):
        if not isinstance(other, LocalOperator):
            return NotImplemented
        other = self._other(other, "a @ b")
        terms = {}
        for k1, v1 in self.terms.items():
            for k2, v2 in other.terms.items():
                key = _term_product(k1, k2)
                if key is not None:
                    terms[key] = terms.get(key, 0) + v1 * v2
        return LocalOperator(self.n_sites, terms)

    def __mul__(self, other):
        if isinstance(other, LocalOperator):
            return self @ other
        if not isinstance(other, numbers.Number):
            return NotImplemented
        c = _check_scalar(other)
        return LocalOperator(self.n_sites, {k: v * c for k, v in self.terms.items()})

    def __rmul__(self, other):
        if not isinstance(other, numbers.Number):
            return NotImplemented
        return self * other

    def __truediv__(self, other):
        if not isinstance(other, numbers.Number):
            return NotImplemented
        c = _check_scalar(other)
        if c == 0:
            raise ZeroDivisionError("a / c: c is 0")
        return self * (1 / c)

    def dagger(self) -> "LocalOperator":
        """The Hermitian conjugate (``E(a, b)^dagger = E(b, a)``, conjugated coefficients)."""
        return LocalOperator(
            self.n_sites, {tuple((i, b, a) for i, a, b in k): np.conj(v) for k, v in self.terms.items()}
        )

    def __repr__(self) -> str:
        return f"LocalOperator(n_sites={self.n_sites}, {len(self.terms)} terms, max_conn={self.max_conn})"

    # ------------------------------------------------------------------ contract
    @property
    def conserves_sz(self) -> bool:
        return all(sum(a - b for _, a, b in k) == 0 for k in self.terms)

    @property
    def is_complex(self) -> bool:
        """Whether some coefficient has a nonzero imaginary part (complex matrix elements)."""
        return any(complex(v).imag != 0 for v in self.terms.values())

    def _build(self):
        if self._tables is not None:
            return self._tables
        n = self.n_sites
        keys = list(self.terms)
        patterns = {0: 0}  # flip bitmask -> slot
        slot_of_term, flips = [], [np.ones(n, np.int8)]
        for k in keys:
            mask = 0
            for i, a, b in k:
                if a != b:
                    mask |= 1 << i
            if mask not in patterns:
                patterns[mask] = len(patterns)
                f = np.ones(n, np.int8)
                f[[i for i, a, b in k if a != b]] = -1
                flips.append(f)
            slot_of_term.append(patterns[mask])
        n_terms = max(1, len(keys))
        bra = np.zeros((n, n_terms))  # a_i of each term on its listed sites
        length = np.zeros(n_terms)
        coef = np.zeros((n_terms, len(patterns)), complex)
        for t, k in enumerate(keys):
            for i, a, _ in k:
                bra[i, t] = a
            length[t] = len(k)
            coef[t, slot_of_term[t]] += self.terms[k]
        if not self.is_complex:
            coef = coef.real
        self._tables = (np.stack(flips), bra, length, coef)
        return self._tables

    @property
    def max_conn(self) -> int:
        return int(self._build()[0].shape[0])

    def connected(self, s):
        """``s`` (..., n_sites) int8 -> ``(s_conn (..., max_conn, n_sites) int8, mels (..., max_conn))``."""
        flips, bra, length, coef = self._build()
        s = jnp.asarray(s, jnp.int8)
        real = tuning.wide_dtype()
        # term t matches <s| when s_i = a_i on its listed sites: s . a_t == |sites of t|
        overlap = s.astype(real) @ jnp.asarray(bra, real)
        match = (overlap == jnp.asarray(length, real)).astype(real)
        ctype = tuning.wide_dtype() if not np.iscomplexobj(coef) else tuning.wide_dtype(np.complex64)
        mels = match.astype(ctype) @ jnp.asarray(coef, ctype)
        s_conn = s[..., None, :] * jnp.asarray(flips)
        return s_conn, mels

    def to_sparse(self, states):
        """The matrix ``O[a, b] = <states[a]| O |states[b]>`` as scipy CSR (complex128 when a
        coefficient is complex, else float64), computed with numpy from the same tables as
        ``connected`` (no compilation). ValueError when O leads out of the basis."""
        from quantax_lite.hilbert.configurations import states_to_codes
        from quantax_lite.operators.hamiltonian import sparse_basis, basis_columns, csr_from_blocks

        states, codes, order, sorted_codes = sparse_basis(states, self.n_sites)
        flips, bra, length, coef = self._build()
        match = (states.astype(np.float64) @ bra == length).astype(np.float64)
        mels = match @ coef  # (n, max_conn)
        rows, cols, vals = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], []
        for k in range(flips.shape[0]):
            (r,) = np.nonzero(mels[:, k])
            rows.append(r)
            cols.append(basis_columns(states_to_codes(states[r] * flips[k]), order, sorted_codes))
            vals.append(mels[r, k])
        return csr_from_blocks(rows, cols, vals, len(states))


# ---------------------------------------------------------------------- builders
def identity(n_sites) -> LocalOperator:
    """The identity on ``n_sites`` sites (an int or a Lattice)."""
    return LocalOperator(n_sites, {(): 1.0})


def _single(i, n_sites, units) -> LocalOperator:
    n = _n_sites_of(n_sites)
    i = _check_site(i, n)
    return LocalOperator(n, {((i, a, b),): c for (a, b), c in units.items()})


def sz(i, n_sites) -> LocalOperator:
    """``S^z_i = (|up><up| - |down><down|) / 2`` on site ``i`` of ``n_sites`` (an int or a Lattice)."""
    return _single(i, n_sites, {(1, 1): 0.5, (-1, -1): -0.5})


def sx(i, n_sites) -> LocalOperator:
    """``S^x_i = (S+_i + S-_i) / 2``."""
    return _single(i, n_sites, {(1, -1): 0.5, (-1, 1): 0.5})


def sy(i, n_sites) -> LocalOperator:
    """``S^y_i = (S+_i - S-_i) / (2i)``."""
    return _single(i, n_sites, {(1, -1): -0.5j, (-1, 1): 0.5j})


def sp(i, n_sites) -> LocalOperator:
    """``S+_i = S^x_i + i S^y_i = |up><down|``."""
    return _single(i, n_sites, {(1, -1): 1.0})


def sm(i, n_sites) -> LocalOperator:
    """``S-_i = S^x_i - i S^y_i = |down><up|``."""
    return _single(i, n_sites, {(-1, 1): 1.0})


def spin_dot(i, j, n_sites) -> LocalOperator:
    """``S_i . S_j = S^z_i S^z_j + (S+_i S-_j + S-_i S+_j) / 2`` (3/4 for ``i == j``)."""
    return sz(i, n_sites) @ sz(j, n_sites) + 0.5 * (sp(i, n_sites) @ sm(j, n_sites) + sm(i, n_sites) @ sp(j, n_sites))


def bond_sum(lattice: Lattice, order: int, a_fn: Callable, b_fn: Callable | None = None, coefficient=1.0) -> LocalOperator:
    """``coefficient * sum_{(i, j) in lattice.bonds(order)} a_fn(i, n) @ b_fn(j, n)``.

    ``a_fn``, ``b_fn``: builders ``(site, n_sites) -> LocalOperator`` such as :func:`sz`
    (``b_fn=None``: ``a_fn``). Every bond once, ``i < j`` (see
    :meth:`~quantax_lite.geometry.lattice.Lattice.bonds`). E.g. ``bond_sum(lat, 1, sz)`` is
    ``sum_<ij> S^z_i S^z_j``.
    """
    if not isinstance(lattice, Lattice):
        raise TypeError(f"lattice: expected a quantax_lite.geometry.lattice.Lattice, got {type(lattice).__name__}")
    b_fn = a_fn if b_fn is None else b_fn
    n = lattice.n_sites
    terms = {}
    for i, j in lattice.bonds(order):
        for k, v in (a_fn(int(i), n) @ b_fn(int(j), n)).terms.items():
            terms[k] = terms.get(k, 0) + v
    return LocalOperator(n, terms) * coefficient


def spin_dot_sum(lattice: Lattice, order: int = 1) -> LocalOperator:
    """``sum_{(i, j) in lattice.bonds(order)} S_i . S_j`` (``order=1``: the Heisenberg model, J = 1)."""
    if not isinstance(lattice, Lattice):
        raise TypeError(f"lattice: expected a quantax_lite.geometry.lattice.Lattice, got {type(lattice).__name__}")
    n = lattice.n_sites
    terms = {}
    for i, j in lattice.bonds(order):
        for k, v in spin_dot(int(i), int(j), n).terms.items():
            terms[k] = terms.get(k, 0) + v
    return LocalOperator(n, terms)


def total_sz(n_sites) -> LocalOperator:
    """``sum_i S^z_i`` on ``n_sites`` sites (an int or a Lattice)."""
    n = _n_sites_of(n_sites)
    terms = {}
    for i in range(n):
        for k, v in sz(i, n).terms.items():
            terms[k] = terms.get(k, 0) + v
    return LocalOperator(n, terms)
