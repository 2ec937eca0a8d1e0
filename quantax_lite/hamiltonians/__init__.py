"""The models a recipe names (``Recipe(hamiltonian="j1j2")``), each a registered entry.

:mod:`.registry`: :func:`register_hamiltonian` (a decorator on the builder, with what a
recipe decides from the model as data), :func:`hamiltonian_entry`, :func:`hamiltonian_names`,
:func:`unregister_hamiltonian`; :mod:`.spin_models`: the built-in ``heisenberg``, ``j1j2``
and ``tfim``. A new model is one registration (``tests/test_hamiltonian_registry.py`` adds
one in a test file and trains it through the recipe).
"""
from . import spin_models  # noqa: F401  (registers the built-in models)
from .registry import (
    HAMILTONIAN_NAMES, PAULI_UNITS, SPIN_UNITS, HamiltonianEntry, hamiltonian_entry, hamiltonian_names, marshall_rule,
    register_hamiltonian, unregister_hamiltonian,
)

__all__ = ["HamiltonianEntry", "register_hamiltonian", "unregister_hamiltonian", "hamiltonian_entry",
           "hamiltonian_names", "HAMILTONIAN_NAMES", "SPIN_UNITS", "PAULI_UNITS", "marshall_rule"]
