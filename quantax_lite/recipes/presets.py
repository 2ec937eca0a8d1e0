"""Named recipes: every row that the README or ``benchmarks/accuracy.py`` quotes, as the
:class:`~quantax_lite.recipes.spec.Recipe` its command line makes (the run's length and time
limit are not part of a recipe: :data:`ITERATIONS` gives the steps each row runs).

    from quantax_lite.recipes import presets
    recipe = presets.get("j1j2_4x4_restored")   # Recipe(lattice="4x4", hamiltonian="j1j2", ...)
    presets.names()                              # ('heisenberg_4x4', 'j1j2_4x4', ...)

``tests/test_presets.py`` checks each against the row of the same name in
``benchmarks/accuracy.py``.
"""
from __future__ import annotations

import types

from quantax_lite.utils.errors import FieldError
from .spec import Recipe

_J1J2 = dict(hamiltonian="j1j2", J2=0.5)
_SPRING = dict(diag_shift=1e-3, sr_momentum=0.9)

# name -> the recipe's fields (beyond the defaults), as the row's options give them
PRESETS = types.MappingProxyType({
    "heisenberg_4x4": dict(lattice="4x4", hamiltonian="heisenberg", lr_half_life=300.0, eval_samples=524288),
    "j1j2_4x4": dict(lattice="4x4", **_J1J2, lr_half_life=500.0, **_SPRING, eval_samples=65536),
    "j1j2_4x4_sinh": dict(lattice="4x4", **_J1J2, amplitude="sinh", sampling_power=0.5, lr_half_life=500.0,
                          **_SPRING, eval_samples=65536),
    "j1j2_4x4_restored": dict(lattice="4x4", **_J1J2, symmetry="translations>full@900", lr_half_life=300.0,
                              **_SPRING, eval_samples=16384),
    "j1j2_4x4_exact_sum": dict(lattice="4x4", **_J1J2, symmetry="full", sampling="exact_sum", lr_half_life=1000.0,
                               diag_shift=1e-3),
    "heisenberg_chain20": dict(lattice="chain:20", hamiltonian="heisenberg", lr_half_life=300.0,
                               eval_samples=524288),
    "heisenberg_6x6": dict(lattice="6x6", hamiltonian="heisenberg", channels=8, depth=3, lr_half_life=300.0,
                           eval_samples=32768),
    "j1j2_6x6": dict(lattice="6x6", **_J1J2, channels=8, depth=3, symmetry="translations>full@600",
                     lr_half_life=300.0, **_SPRING, eval_samples=8192),
    "heisenberg_triangular6x6": dict(lattice="triangular:6x6", hamiltonian="heisenberg", channels=8, depth=3,
                                     symmetry="translations>full@300", lr_half_life=200.0, full_stage_samples=512,
                                     full_stage_lr=0.02, **_SPRING, eval_samples=6144),
    "heisenberg_kagome2x3": dict(lattice="kagome:2x3", hamiltonian="heisenberg", symmetry="full", momentum=(1, 0),
                                 spin_parity=-1, rotation_parity=-1, amplitude="signed", phase_rule="none",
                                 channels=12, depth=2, sampling="exact_sum", lr=0.1, lr_half_life=1000.0,
                                 diag_shift=1e-3),
    # right by default: every option at its default (sampling and symmetry 'auto': exact sums, full group)
    "heisenberg_kagome2x2_default": dict(lattice="kagome:2x2"),
    "heisenberg_triangular4x3_default": dict(lattice="triangular:4x3"),
    # accelerator rows (budgets in chip-minutes): 16 channels, depth 6
    "heisenberg_6x6_chip": dict(lattice="6x6", hamiltonian="heisenberg", channels=16, depth=6, samples=4096,
                                lr_half_life=1000.0, eval_samples=65536),
    "j1j2_6x6_chip": dict(lattice="6x6", **_J1J2, channels=16, depth=6, samples=2048,
                          symmetry="translations>full@1800", lr_half_life=1000.0, full_stage_samples=1024,
                          full_stage_lr=0.01, **_SPRING, eval_samples=32768),
    # issue 52: Chen and Heyl's depth (8 blocks: 16 convolutions of 16 channels, 37k parameters), 4096
    # samples per step with the translations, the full group at the end, a 60 chip-minute budget
    "j1j2_6x6_deep_chip": dict(lattice="6x6", **_J1J2, channels=16, depth=8, samples=4096,
                               symmetry="translations>full@6000", lr_half_life=2000.0, full_stage_samples=2048,
                               full_stage_lr=0.005, **_SPRING, eval_samples=32768),
    "j1j2_6x6_deep_power_chip": dict(lattice="6x6", **_J1J2, channels=16, depth=8, samples=4096, sampling_power=0.5,
                                     symmetry="translations>full@3000", lr_half_life=2000.0, full_stage_samples=2048,
                                     full_stage_lr=0.005, **_SPRING, eval_samples=32768),
    # Chen and Heyl's last activation (a sign in every term) on samples of |psi|
    "j1j2_6x6_sinh_chip": dict(lattice="6x6", **_J1J2, channels=16, depth=6, amplitude="sinh", sinh_offset=1.0,
                               sampling_power=0.5, samples=2048, lr_half_life=1000.0, **_SPRING, eval_samples=16384),
    "j1j2_10x10_sinh_chip": dict(lattice="10x10", **_J1J2, channels=16, depth=6, amplitude="sinh",
                                 sinh_offset=1.0, sampling_power=0.5, samples=2048, lr=0.005, lr_half_life=2000.0,
                                 **_SPRING, eval_samples=16384),
    "heisenberg_triangular6x6_chip": dict(lattice="triangular:6x6", hamiltonian="heisenberg", channels=16, depth=6,
                                          samples=2048, symmetry="translations>full@1800", lr_half_life=1000.0,
                                          full_stage_samples=1024, full_stage_lr=0.01, **_SPRING,
                                          eval_samples=16384),
    "j1j2_10x10_chip": dict(lattice="10x10", **_J1J2, channels=16, depth=6, samples=2048, lr=0.005,
                            lr_half_life=1000.0, **_SPRING, eval_samples=16384),
})
# name -> the steps the row runs (its --iters; a time limit may end it sooner)
ITERATIONS = types.MappingProxyType({
    "heisenberg_4x4": 1800, "j1j2_4x4": 2600, "j1j2_4x4_sinh": 2600, "j1j2_4x4_restored": 1300,
    "j1j2_4x4_exact_sum": 3000,
    "heisenberg_chain20": 1800, "heisenberg_6x6": 850, "j1j2_6x6": 800, "heisenberg_triangular6x6": 450,
    "heisenberg_kagome2x3": 400, "heisenberg_kagome2x2_default": 600, "heisenberg_triangular4x3_default": 600,
    "heisenberg_6x6_chip": 6000, "j1j2_6x6_chip": 3500, "j1j2_6x6_deep_chip": 8000,
    "j1j2_6x6_deep_power_chip": 4000, "j1j2_6x6_sinh_chip": 12000, "j1j2_10x10_sinh_chip": 12000,
    "heisenberg_triangular6x6_chip": 3500, "j1j2_10x10_chip": 3000,
})


def names() -> tuple[str, ...]:
    """The presets' names, in the order of the accuracy table."""
    return tuple(PRESETS)


def get(name: str) -> Recipe:
    """The :class:`~quantax_lite.recipes.spec.Recipe` of the row ``name`` (:func:`names`);
    ``ValueError`` naming ``name`` for another."""
    if name not in PRESETS:
        raise FieldError("name", f"name: expected one of {', '.join(PRESETS)}, got {name!r}.")
    return Recipe(**PRESETS[name])
