"""The Hamiltonian registry: one decorator line per model that a recipe can name.

A model is a *builder* ``builder(lattice, coupling, marshall) -> SpinHamiltonian`` (the
contract of :mod:`quantax_lite.operators.hamiltonian`, with ``lattice`` set): ``coupling`` is the float
of the recipe field the entry names (``"J2"``, ``"h"``; its ``default`` where the field is
unset, 0.0 for a model without one), ``marshall`` whether Marshall's sign rule is on (only
for an entry with ``marshall=True``, on a bipartite lattice, when the recipe asks for it).
The entry also says, as data, what a recipe decides from the model::

    @register_hamiltonian("j1j2", title="J1-J2 model", coupling="J2", default=0.5, marshall=True,
                          antiferromagnet=True, frustration="j1j2", sign_free=marshall_rule)
    def j1j2(lattice, J2, marshall):
        return Heisenberg(lattice, J1=1.0, J2=J2, marshall_sign=marshall)

``Recipe(hamiltonian=name)`` then takes it: sectors, exact sums, reference energies by
exact diagonalization, the summary's words and units work unchanged. The built-in models
are registered in :mod:`~quantax_lite.hamiltonians.spin_models`.
"""
from __future__ import annotations

import collections.abc
import dataclasses
import math
from typing import Callable

from quantax_lite.utils.errors import FieldError, FieldTypeError
from quantax_lite.geometry.lattice import Lattice
from quantax_lite.operators.hamiltonian import SpinHamiltonian

__all__ = ["HamiltonianEntry", "register_hamiltonian", "unregister_hamiltonian", "hamiltonian_entry",
           "hamiltonian_names", "HAMILTONIAN_NAMES", "SPIN_UNITS", "PAULI_UNITS", "marshall_rule"]

SPIN_UNITS = "units of J, spin-1/2 (S = σ/2)"
PAULI_UNITS = "Pauli units (σ), J = 1"


def marshall_rule(lattice: Lattice, coupling: float, marshall: bool) -> str | None:
    """A ``sign_free`` rule: Marshall's sign makes the ground state positive where it is on
    (a bipartite lattice) and the coupling (of a frustrating bond, J2) is 0; else None."""
    if marshall and coupling == 0:
        return (f"Marshall's sign rule on the bipartite lattice {lattice.name} makes the ground state positive in "
                "the network's basis")
    return None


@dataclasses.dataclass(frozen=True)
class HamiltonianEntry:
    """A registered model (:func:`register_hamiltonian` documents each field)."""

    name: str
    builder: Callable
    title: str
    help: str = ""
    coupling: str | None = None
    default: float = 0.0
    units: str = SPIN_UNITS
    sz_sector: bool = True
    marshall: bool = False
    antiferromagnet: bool = False
    frustration: str | None = None
    sign_free: Callable | None = None
    positive: Callable | None = None

    def build(self, lattice: Lattice, coupling: float | None = None, marshall: bool = False) -> SpinHamiltonian:
        """The Hamiltonian on ``lattice`` (``coupling`` None: the entry's ``default``);
        ``TypeError`` / ``ValueError`` naming ``hamiltonian`` when the builder breaks the contract."""
        if self.coupling is None and coupling is not None and coupling != self.default:
            raise FieldError("hamiltonian", f"hamiltonian: the model {self.name!r} has no coupling, got {coupling!r}.")
        value = float(self.default if coupling is None else coupling)
        ham = self.builder(lattice, value, bool(marshall and self.marshall))
        if not isinstance(ham, SpinHamiltonian):
            raise FieldTypeError("hamiltonian", f"hamiltonian: the builder of {self.name!r} returned "
                                 f"{type(ham).__name__}, expected a SpinHamiltonian (quantax_lite.operators.hamiltonian).")
        if getattr(ham, "lattice", None) is None or ham.n_sites != lattice.n_sites:
            raise FieldError("hamiltonian", f"hamiltonian: the builder of {self.name!r} must give the Hamiltonian "
                             f"its lattice ({lattice.name}, {lattice.n_sites} sites) as `lattice`.")
        if bool(ham.conserves_sz) != self.sz_sector:  # the sampler follows the one, sectors and sizes the other
            raise FieldError("hamiltonian", f"hamiltonian: {self.name!r} is registered with sz_sector="
                             f"{self.sz_sector} but its Hamiltonian has conserves_sz={bool(ham.conserves_sz)}.")
        return ham

    def words(self, coupling: float | None = None, *, units: bool = False) -> str:
        """The model in words: ``"J1-J2 model (J2 = 0.5)"`` with a coupling, the title alone
        without (or for a model without one); ``units``: ``"(h = 1, Pauli units)"`` where the
        units are not spin-1/2 ones."""
        parts = [] if coupling is None or self.coupling is None else [f"{self.coupling} = {coupling:g}"]
        if units and self.units != SPIN_UNITS:
            parts.append(self.units.split(" (")[0])
        return self.title + (f" ({', '.join(parts)})" if parts else "")

    def why_sign_free(self, lattice: Lattice, coupling: float, marshall: bool) -> str | None:
        """Why the ground state is positive in the network's basis (so in the sector of
        characters 1), or None (:attr:`sign_free`)."""
        return None if self.sign_free is None else self.sign_free(lattice, coupling, marshall)

    def picks_positive(self, hamiltonian) -> bool:
        """Whether amplitude 'auto' picks a positive network for ``hamiltonian`` (:attr:`positive`)."""
        return bool(self.positive is not None and self.positive(hamiltonian))


_HAMILTONIANS: dict[str, HamiltonianEntry] = {}


def _check_registration(name, title, coupling, default, flags, rules) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise FieldError("name", f"name: expected an identifier such as 'j1j2', got {name!r}")
    if not isinstance(title, str) or not title:
        raise FieldError("title", f"title: expected the model in words (e.g. 'J1-J2 model'), got {title!r}")
    if coupling is not None and (not isinstance(coupling, str) or not coupling.isidentifier()):
        raise FieldError("coupling", f"coupling: expected the name of a recipe field (e.g. 'J2') or None, got "
                         f"{coupling!r}")
    if isinstance(default, bool) or not isinstance(default, (int, float)) or not math.isfinite(default):
        raise FieldTypeError("default", f"default: expected a finite number, got {default!r}")
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise FieldTypeError(key, f"{key}: expected a bool, got {value!r}")
    for key, value in rules.items():
        if value is not None and not callable(value):
            raise FieldTypeError(key, f"{key}: expected a function or None, got {value!r}")


def register_hamiltonian(name: str, *, title: str, help: str = "", coupling: str | None = None, default: float = 0.0,
                         units: str = SPIN_UNITS, sz_sector: bool = True, marshall: bool = False,
                         antiferromagnet: bool = False, frustration: str | None = None,
                         sign_free: Callable | None = None, positive: Callable | None = None) -> Callable:
    """Decorator: register ``builder(lattice, coupling, marshall) -> SpinHamiltonian`` as
    the model ``name`` of ``Recipe(hamiltonian=name)``. Registering a name again replaces
    the entry (a module reloaded). Returns the builder unchanged.

    title: the model in words ("J1-J2 model"); help: its phrase in the recipe's help;
    coupling, default: the recipe field of its coupling ("J2", "h"; None: none) and the
    value where that field is unset; units: how its energies are measured (:data:`SPIN_UNITS`,
    :data:`PAULI_UNITS`); sz_sector: it conserves Sz and runs in the Sz = 0 sector (an even
    number of sites; False: every configuration); marshall: the recipe's ``marshall``
    applies (Marshall's sign on bipartite lattices, :func:`~quantax_lite.operators.sign_rules.check_marshall_rule`);
    antiferromagnet: an SU(2) antiferromagnet, for which the 120-degree phase rule, the random
    start on frustrated lattices and those lattices' measured optimizer settings apply;
    frustration: the kind of frustration (a key of ``recipes.MEASURED_OPTIMIZER``) of a
    nonzero coupling; sign_free(lattice, coupling, marshall) -> str or None: why the ground
    state is positive in the network's basis (:func:`marshall_rule`); positive(hamiltonian)
    -> bool: whether amplitude 'auto' picks a positive network."""
    _check_registration(name, title, coupling, default, dict(sz_sector=sz_sector, marshall=marshall,
                                                             antiferromagnet=antiferromagnet),
                        dict(sign_free=sign_free, positive=positive))
    if not isinstance(help, str):
        raise FieldTypeError("help", f"help: expected a string, got {help!r}")
    if not isinstance(units, str) or not units:
        raise FieldTypeError("units", f"units: expected a string such as {SPIN_UNITS!r}, got {units!r}")
    if frustration is not None and not isinstance(frustration, str):
        raise FieldTypeError("frustration", f"frustration: expected a str or None, got {frustration!r}")

    def register(builder: Callable) -> Callable:
        if not callable(builder):
            raise FieldTypeError("builder", "builder: expected a function (lattice, coupling, marshall) -> "
                                 f"SpinHamiltonian, got {builder!r}")
        for key, value in dict(builder=builder, sign_free=sign_free, positive=positive).items():
            try:  # an entry keys the caches of sectors and exact energies
                hash(value)
            except TypeError:
                raise FieldTypeError(key, f"{key}: expected a hashable function, got {value!r}") from None
        _HAMILTONIANS[name] = HamiltonianEntry(name, builder, title, help, coupling, float(default), units, sz_sector,
                                               marshall, antiferromagnet, frustration, sign_free, positive)
        return builder

    return register


def unregister_hamiltonian(name: str) -> HamiltonianEntry:
    """Removes the model ``name`` from the registry; returns its entry (``ValueError`` naming ``name``)."""
    if name not in _HAMILTONIANS:
        raise FieldError("name", f"name: no Hamiltonian {name!r} is registered; registered: {hamiltonian_names()}")
    return _HAMILTONIANS.pop(name)


def hamiltonian_names() -> tuple[str, ...]:
    """The registered names, sorted."""
    return tuple(sorted(_HAMILTONIANS))


def hamiltonian_entry(name: str) -> HamiltonianEntry:
    """The entry of ``name``; ``ValueError`` naming ``hamiltonian`` for an unknown one."""
    if not isinstance(name, str) or name not in _HAMILTONIANS:
        raise FieldError("hamiltonian", f"hamiltonian: expected one of {hamiltonian_names()}, got {name!r}.")
    return _HAMILTONIANS[name]


class _Names(collections.abc.Sequence):
    """The registered names as they are when read (the command's choices of ``--hamiltonian``)."""

    def __getitem__(self, index):
        return hamiltonian_names()[index]

    def __len__(self) -> int:
        return len(_HAMILTONIANS)

    def __contains__(self, name) -> bool:
        return isinstance(name, str) and name in _HAMILTONIANS

    def __repr__(self) -> str:
        return repr(hamiltonian_names())


# the registered names, a live view: ('heisenberg', 'j1j2', 'tfim') and those registered since
HAMILTONIAN_NAMES = _Names()
