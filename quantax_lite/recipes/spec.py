"""The recipe as data: :class:`Recipe`, the physics-level choices of a run, each field checked
on its own when a recipe is made (the checks across fields: :func:`~quantax_lite.recipes.resolve.check`).

Its methods are thin: what 'auto' decides and the cross-field checks live in
:mod:`~quantax_lite.recipes.resolve`, the stage schedule in :mod:`~quantax_lite.recipes.stages`,
reference energies in :mod:`~quantax_lite.recipes.energies`, the recorded form in
:mod:`~quantax_lite.recipes.schema`; construction in :mod:`~quantax_lite.recipes.assembly`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from quantax_lite.utils.errors import FieldError, concerning
from quantax_lite.utils.validate import finite_number, positive_int
from quantax_lite.driver.memory import check_memory_budget
from . import energies, resolve, schema, stages
from .plan import Plan, make_plan
from .resources import Resources, check_chunk_size
from quantax_lite.hamiltonians import hamiltonian_entry
from quantax_lite.models.heads import SINH_OFFSET, check_offset
from .fields import (AMPLITUDES, AUTO, COUPLINGS, HAMILTONIANS, MOMENTUM_READOUTS, NORMS, PHASE_RULES, PRECISIONS, SAMPLINGS,
                     check_choice, check_seed, float_or_auto, int_or_auto, int_or_float, is_auto, momentum_text,
                     network_option, parity_or_auto, parse_symmetry)

SECTOR_AUTO_HELP = ("auto: the sector of the ground state of the whole Sz = 0 space, found by exact "
                     "diagonalization up to 24 sites (ground_sector.MAX_SEARCH_SITES), of characters 1 where a "
                     "sign rule makes that ground state positive and above 24 sites; the run prints what it "
                     "chose and why")


# the models registered when the recipe is defined, in the help of `hamiltonian` (its
# choices are every registered one, HAMILTONIANS)
MODELS_HELP = "; ".join(f"{name}: {hamiltonian_entry(name).help}" for name in HAMILTONIANS)


def recipe_field(default, kind, group, help, choices=None):
    """A recipe field with its command-line form (type, group, help, choices)."""
    return dataclasses.field(default=default, metadata=dict(type=kind, group=group, help=help, choices=choices))


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The physics-level choices of a run, checked on construction (``ValueError`` or
    ``TypeError`` naming the field). Each field's ``metadata["help"]`` says what it is;
    ``quantax-lite train --help`` prints the same text."""

    lattice: Any = recipe_field("4x4", str, "system", "a periodic square or rectangular lattice 'Lx x Ly' (e.g. 4x4, "
                                "6x4), a chain 'chain:L', or L1 x L2 unit cells of a triangular (1 site per cell), "
                                "honeycomb (2) or kagome (3) lattice: 'triangular:6x6', 'honeycomb:3x3', 'kagome:2x3' "
                                "(or a quantax_lite Lattice)")
    hamiltonian: str = recipe_field("heisenberg", str, "system", MODELS_HELP, HAMILTONIANS)
    J2: float | None = recipe_field(None, float, "system", "next-nearest coupling of j1j2 and of models registered with it (default: 0.5)")
    h: float | None = recipe_field(None, float, "system", "transverse field, tfim only (default: 1.0)")
    marshall: bool = recipe_field(True, bool, "system", "the Marshall sign rule (Heisenberg / J1-J2) where the lattice "
                                  "is bipartite (chains and square lattices of even sides, honeycomb); triangular and "
                                  "kagome lattices have none, so it is off there")
    phase_rule: str = recipe_field("auto", str, "system", "a fixed phase of the network (Heisenberg / J1-J2): 120, the "
                                   "120-degree rule exp(2 pi i / 3 * sum of the sublattice labels of the down spins), "
                                   "the coplanar order of the triangular lattice and the q = 0 state of the kagome "
                                   "lattice, which a nearly uniform network then starts from; none; auto: 120 on "
                                   "triangular and kagome lattices whose three sublattices colour every "
                                   "nearest-neighbour bond (triangular: both extents divisible by 3), none elsewhere",
                             PHASE_RULES)
    symmetry: str = recipe_field(AUTO, str, "network", "projection group: none, translations (by whole "
                                 "unit cells) or full = translations x the cluster's point group (from its geometry: up "
                                 "to C4v on square, C6v on triangular, honeycomb and kagome clusters) x spin inversion "
                                 "(more accurate, about 16x the cost of translations on a square lattice); or staged, "
                                 "'translations>full@N': translations for the first N steps, then the full group with "
                                 "the same parameters (symmetry restoration: most of the accuracy of full for a "
                                 "fraction of its cost); auto: full where the run sums exactly (sampling exact_sum) over "
                                 "a small frustrated cluster (see sampling), translations otherwise")
    momentum: Any = recipe_field(AUTO, momentum_text, "network", "momentum sector 'm1,m2' ('m' on a chain) of the "
                                 "translations: integers m_d, k = sum_d m_d b_d / L_d (b_d the reciprocal vectors, L_d "
                                 "the cells along a_d; symmetry.allowed_momenta); with symmetry full the point group is "
                                 "cut to the little group of k; " + SECTOR_AUTO_HELP + " (None: k = 0)")
    spin_parity: Any = recipe_field(AUTO, parity_or_auto, "network", "character of the global spin flip, +1 or -1 (a "
                                    "singlet of N sites has (-1)^(N/2) in the plain basis, +1 in the Marshall basis); "
                                    "adds spin inversion to the translations; auto: with symmetry full that of the "
                                    "ground state's sector (see momentum), not imposed with translations (None: +1 "
                                    "with full, not imposed with translations)", (AUTO, 1, -1))
    rotation_parity: Any = recipe_field(AUTO, parity_or_auto, "network", "with symmetry full: the point group's irrep, "
                                        "+1 (all characters 1) or -1 (odd under the smallest rotation, each mirror as "
                                        "its rotation part; the ground states of triangular:4x3, kagome:2x2 and "
                                        "kagome:2x3 are odd under the rotation by pi); auto: that of the ground "
                                        "state's sector (see momentum; where it lies in an irrep of neither kind, the "
                                        "one of the two with the lower energy) (None: +1)", (AUTO, 1, -1))
    momentum_readout: str = recipe_field("plane_wave", str, "network", "how the network carries a nonzero momentum: "
                                         "plane_wave, log psi_0 = sum_r a_r + log sum_r exp(i k.R_r + b_r) over the "
                                         "cells r, a momentum eigenstate whose log-amplitude is a sum over the lattice "
                                         "(complex networks; signed ones use origin); origin, log psi_0 = the output "
                                         "of one cell, summed over the translations with their characters (the "
                                         "network of runs made before this option)", MOMENTUM_READOUTS)
    network: str = recipe_field("conv", str, "network", "the network, by its registered name "
                                "(quantax_lite.models.register_network): conv (the convolutional ResNet, whose options "
                                "are channels, depth, kernel-size and norm), rbm, vit, or one registered by the user")
    network_options: Any = recipe_field(None, network_option, "network", "that network's own options, a mapping of "
                                        "option names to values (e.g. {'alpha': 4} for rbm; on the command "
                                        "--network-option alpha=4, repeated); the conv network's are its own fields")
    depth: Any = recipe_field(AUTO, int_or_auto, "network", "residual blocks; auto: the measured network by lattice "
                              "size (Recipe.network_size: 2 up to 20 sites, 3 on 2D lattices of 21-36 sites, 4 "
                              "beyond) (None: as make_conv_nqs chooses by lattice size)")
    channels: Any = recipe_field(AUTO, int_or_auto, "network", "conv channels; auto: the measured network by "
                                 "lattice size (Recipe.network_size: 8 up to 20 sites, 12 on triangular and kagome "
                                 "ones, 8 on 2D lattices of 21-36 sites, 16 beyond) (None: as make_conv_nqs chooses)")
    kernel_size: int | None = recipe_field(None, int, "network", "conv kernel size on the grid of unit cells (default: "
                                           "3 in 2D, 5 in 1D)")
    norm: str = recipe_field("none", str, "network", "a LayerNorm over the channels before each activation", NORMS)
    amplitude: str = recipe_field("auto", str, "network", "network output: positive (real log psi), signed (real psi, "
                                  "learned sign), sinh (real psi = sum over cells of sinh(y) + c, a sign per term; "
                                  "c: --sinh-offset), "
                                  "complex (free phase); auto: positive where the basis makes the ground "
                                  "state positive (heisenberg with the Marshall sign, tfim), complex for heisenberg / j1j2 on "
                                  "triangular and kagome lattices (from a random start), signed otherwise", AMPLITUDES)
    sinh_offset: float = recipe_field(SINH_OFFSET, float, "network", "the constant c >= 0 of the sinh amplitude's "
                                      "terms sinh(y) + c (amplitude sinh only; 0 lets a term's sum start at a "
                                      "node): 1 is Chen and Heyl's, and runs recorded without it read 1")
    precision: str = recipe_field("f32", str, "network", "network precision (the SR solve is float64)", PRECISIONS)
    sampling: str = recipe_field(AUTO, str, "optimization", "metropolis: Markov-chain samples of |psi|^2 "
                                 "(samples per step); exact_sum: no samples, every configuration of the sector with its "
                                 "exact weight, one per orbit of the symmetry group: energies, variances "
                                 "and SR steps without sampling noise, and a final energy without error bar (small "
                                 "systems: up to 22 sites; samples, chains, sweep-size and eval-samples do not apply); "
                                 "auto: exact_sum for a frustrated model (J1-J2, triangular or kagome Heisenberg) whose "
                                 "sector holds at most 4096 configurations (e.g. kagome:2x2, triangular:4x3) when no "
                                 "sampling option is given (chains, sweep-size, eval-samples, full-stage-samples, "
                                 "sampling-power; on the command also samples), metropolis otherwise",
                           (AUTO,) + SAMPLINGS)
    samples: int = recipe_field(1024, int, "optimization", "samples per step")
    full_stage_samples: int | None = recipe_field(None, int, "optimization", "with a staged symmetry "
                                                  "('translations>full@N'): samples per step from step N on, where "
                                                  "each costs the full group's images (fewer samples: more, noisier "
                                                  "steps in the same time) (default: samples)")
    chains: int | None = recipe_field(None, int, "optimization", "Markov chains (default: one per sample, of the stage "
                                      "with the fewest samples per step; a multiple of the device count)")
    sweep_size: int | None = recipe_field(None, int, "optimization", "Metropolis proposals per chain between samples "
                                          "(default: n_sites/2 exchanges of anti-aligned pairs for Sz-conserving "
                                          "models, n_sites flips otherwise)")
    sampling_power: float = recipe_field(1.0, float, "optimization", "train on samples of |psi|^(2 power), each "
                                         "weighted by |psi|^(2 - 2 power) (0 < power <= 1): below 1 the chains "
                                         "visit configurations of small |psi|, where a frustrated magnet's local "
                                         "energies carry most of their variance; the final estimate and measure "
                                         "sample |psi|^2")
    chunk_size: int | str = recipe_field("auto", int_or_auto, "optimization", "samples per device per chunk of local "
                                         "energies and Jacobians, to bound memory; auto: the library's chunks, each at "
                                         "most the largest whose compiled program fits --memory-budget")
    memory_budget: float | None = recipe_field(None, int_or_float, "optimization", "memory per device for chunk-size auto: "
                                               "bytes (a number > 1, e.g. 8e9) or a fraction of the device's memory "
                                               "(<= 1, e.g. 0.5) (default: the device's memory: a GPU's memory pool, "
                                               "or the host's memory shared by its CPU devices)")
    lr: float = recipe_field(0.02, float, "optimization", "initial learning rate")
    lr_half_life: float = recipe_field(100.0, float, "optimization", "steps over which the learning rate halves (down "
                                       "to lr/10), independent of the run length (a resumed run continues it)")
    full_stage_lr: float | None = recipe_field(None, float, "optimization", "with a staged symmetry "
                                               "('translations>full@N'): the learning rate at step N, halving over "
                                               "lr-half-life from there (down to a tenth of it) (default: the schedule "
                                               "of lr goes on)")
    diag_shift: Any = recipe_field(AUTO, float_or_auto, "optimization", "absolute SR diagonal shift; auto: 1e-3 for "
                                   "frustrated models (J1-J2, triangular and kagome Heisenberg), 1e-4 otherwise, as "
                                   "measured (recipes.MEASURED_OPTIMIZER)")
    diag_scale: float = recipe_field(0.0, float, "optimization", "relative SR diagonal shift (x mean diagonal of S)")
    sr_momentum: Any = recipe_field(AUTO, float_or_auto, "optimization", "SPRING memory in [0, 1): each direction "
                                    "keeps this fraction of the last where the step's samples leave it undetermined; "
                                    "0: MinSR; auto: 0.9 for J1-J2 and triangular Heisenberg, 0 otherwise (kagome "
                                    "included), as measured (recipes.MEASURED_OPTIMIZER)")
    eval_samples: int | None = recipe_field(None, int, "optimization", "fresh samples of the final energy, drawn in "
                                            "blocks of a step's samples (default: 32 x the samples per step of the "
                                            "last stage)")
    seed: int = recipe_field(0, int, "optimization", "PRNG seed of the parameters and chains")
    # Not a field: the version of the recorded form (schema.SCHEMA_VERSION) that a config
    # read back carries; Recipe(**config) accepts it (None: a recipe made in code, or a run
    # recorded before configs carried one).
    schema_version: dataclasses.InitVar[int | None] = None

    def __post_init__(self, schema_version=None):
        with concerning():  # every error names its field as data (FieldError.field)
            self._check(schema_version)

    def _check(self, schema_version) -> None:
        """The checks of every field, then across fields (:func:`resolve.check`)."""
        schema.check_schema_version(schema_version)
        object.__setattr__(self, "sinh_offset", schema.earlier_sinh_offset(schema_version, self.amplitude,
                                                                           self.sinh_offset))
        check_choice(self.hamiltonian, "hamiltonian", HAMILTONIANS)
        resolve.decide_sampling(self)  # 'auto' sampling and symmetry, from the lattice and model alone
        parse_symmetry(self.symmetry)
        check_choice(self.amplitude, "amplitude", AMPLITUDES)
        check_choice(self.phase_rule, "phase_rule", PHASE_RULES)
        check_choice(self.momentum_readout, "momentum_readout", MOMENTUM_READOUTS)
        check_choice(self.precision, "precision", PRECISIONS)
        check_choice(self.sampling, "sampling", SAMPLINGS)
        check_choice(self.norm, "norm", NORMS)
        for name in COUPLINGS:
            if getattr(self, name) is not None:
                finite_number(getattr(self, name), name)
        positive_int(self.samples, "samples")
        check_seed(self.seed)
        check_chunk_size(self.chunk_size)  # the resources' own checks (resources.Resources)
        check_memory_budget(self.memory_budget)
        for name in ("chains", "sweep_size", "eval_samples", "channels", "kernel_size"):
            if getattr(self, name) is not None and not is_auto(getattr(self, name)):
                positive_int(getattr(self, name), name)
        if self.depth is not None and not is_auto(self.depth):
            positive_int(self.depth, "depth", minimum=0)
        check_offset(self.sinh_offset, "sinh")
        if self.amplitude != "sinh" and self.sinh_offset != SINH_OFFSET:
            raise FieldError("sinh_offset", f"sinh_offset: only the 'sinh' amplitude has an offset, not "
                             f"{self.amplitude!r}" + (" (give `amplitude` sinh)." if self.amplitude == AUTO else "."))
        finite_number(self.lr, "lr", above=0)
        if not 0 < finite_number(self.sampling_power, "sampling_power") <= 1:
            raise FieldError("sampling_power", f"sampling_power: expected a number in (0, 1], got {self.sampling_power!r}.")
        if self.sampling == "exact_sum" and self.sampling_power != 1:
            raise FieldError("sampling_power", "sampling_power: exact sums weigh every configuration by |psi|^2 and "
                                               f"draw no samples; leave it 1, got {self.sampling_power!r}.")
        finite_number(self.lr_half_life, "lr_half_life", above=0)
        if self.full_stage_samples is not None:
            positive_int(self.full_stage_samples, "full_stage_samples")
        if self.full_stage_lr is not None:
            finite_number(self.full_stage_lr, "full_stage_lr", above=0)
        if not is_auto(self.diag_shift):
            finite_number(self.diag_shift, "diag_shift", minimum=0)
        finite_number(self.diag_scale, "diag_scale", minimum=0)
        if not is_auto(self.sr_momentum) and not (finite_number(self.sr_momentum, "sr_momentum") >= 0
                                                  and self.sr_momentum < 1):
            raise FieldError("sr_momentum", f"sr_momentum: expected a number in [0, 1) or 'auto', got {self.sr_momentum!r}.")
        resolve.check(self)  # the checks across fields

    @property
    def resources(self) -> Resources:
        """How the run bounds its memory (``chunk_size``, ``memory_budget``), apart from its
        physics: :class:`~quantax_lite.recipes.resources.Resources`."""
        return Resources(self.chunk_size, self.memory_budget)

    def network_config(self, lattice=None) -> dict:
        """The options of the network (``network_options``; for the conv network its fields,
        ``channels`` and ``depth`` as :meth:`network_size` decides an 'auto' one)."""
        return resolve.network_config(self, lattice)

    def has_momentum(self) -> bool:
        """Whether the sector has a nonzero momentum (where ``momentum_readout`` matters);
        an 'auto' momentum as :meth:`sector_choice` decides it."""
        return resolve.has_momentum(self)

    def phase_rule_kind(self, lattice=None) -> str:
        """'120' or 'none': ``phase_rule``, or what 'auto' picks for ``lattice``."""
        return resolve.phase_rule_kind(self, lattice)

    def site_phases(self, lattice=None):
        """The network's phase rule, ``(n_sites,)`` radians (:func:`~quantax_lite.operators.sign_rules.sublattice_phases`),
        or None."""
        return resolve.site_phases(self, lattice)

    def sector_momentum(self, lattice=None):
        """The Cartesian wave vector ``k = sum_d m_d b_d / L_d`` of ``momentum`` (float64
        ``(ndim,)``), or None for ``k = 0`` (every ``m_d`` a multiple of ``L_d``); an 'auto'
        momentum as :meth:`sector_choice` decides it."""
        return resolve.sector_momentum(self, lattice)

    def trivial_sector(self, lattice=None) -> bool:
        """True when every character of the group is 1 (k = 0, spin and rotation parity not -1);
        'auto' fields as :meth:`sector_choice` decides them."""
        return resolve.trivial_sector(self, lattice)

    def frustration(self, lattice=None) -> str | None:
        """The kind of frustration that picks the 'auto' optimizer settings
        (:data:`MEASURED_OPTIMIZER`): 'j1j2' (hamiltonian j1j2 with J2 != 0), 'triangular' or
        'kagome' (Heisenberg on those lattices), None otherwise (tfim included)."""
        return resolve.frustration(self, lattice)

    def optimizer_settings(self, lattice=None) -> tuple[float, float]:
        """``(sr_momentum, diag_shift)``: each as given, or what 'auto' picks by
        :meth:`frustration` (:data:`MEASURED_OPTIMIZER`)."""
        return resolve.optimizer_settings(self, lattice)

    def network_size(self, lattice=None) -> tuple[int | None, int | None]:
        """``(channels, depth)`` of the network: :func:`~quantax_lite.recipes.resolve.network_size`."""
        return resolve.network_size(self, lattice)

    @property
    def n_eval_samples(self) -> int:
        """Fresh samples of the final estimate."""
        return stages.n_eval_samples(self)

    def samples_at(self, iteration: int) -> int:
        """Samples per step of the stage at ``iteration`` (:meth:`symmetry_at`):
        ``full_stage_samples`` in the full-group stage of a staged symmetry, where given,
        else ``samples``."""
        return stages.samples_at(self, iteration)

    def n_chains(self, n_devices: int) -> int:
        """Markov chains: ``chains``, or one per sample of the stage with the fewest samples
        per step (:func:`default_chains`); the same in every stage, so that a run's state
        keeps its shape (the stage with more samples draws several per chain)."""
        return stages.n_chains(self, n_devices)

    def learning_rate(self, iteration: int = 0):
        """The learning-rate schedule of the stage at ``iteration``: :func:`~quantax_lite.recipes.stages.learning_rate`."""
        return stages.learning_rate(self, iteration)

    def symmetry_stages(self) -> tuple[tuple[str, int], ...]:
        """``((group, first iteration), ...)`` of ``symmetry`` (:func:`parse_symmetry`):
        one stage ``((symmetry, 0),)`` unless it is staged, e.g. 'translations>full@200'."""
        return stages.symmetry_stages(self)

    def symmetry_at(self, iteration: int) -> str:
        """The group ('none', 'translations' or 'full') of the state after ``iteration``
        steps, which the next step trains: that of the last stage starting at or before it."""
        return stages.symmetry_at(self, iteration)

    def system(self, iteration: int = 0):
        """``(lattice, hamiltonian, symmetry)`` of the stage at ``iteration``
        (:meth:`symmetry_at`); symmetry None for 'none'."""
        return self.plan().stage_system(iteration)

    def sector_choice(self, lattice=None, hamiltonian=None) -> "SectorChoice":
        """The symmetry sector of the network, each 'auto' field decided so that it holds the
        ground state of the whole space (:func:`~quantax_lite.recipes.resolve.sector_choice`)."""
        return resolve.sector_choice(self, lattice, hamiltonian)

    def plan(self) -> Plan:
        """Every decision of this recipe, made once and kept with it: :func:`~quantax_lite.recipes.plan.make_plan`."""
        return make_plan(self)

    def resolved(self) -> "Recipe":
        """This recipe with every 'auto' of :data:`AUTO_FIELDS` decided (``plan().recipe``): what a
        run records, so that it reloads as the same run whatever later versions make of
        'auto'. The recipe itself where nothing is decided; its :meth:`sector_choice` still
        says how the sector was chosen."""
        return make_plan(self).recipe

    def auto_decisions(self) -> list[str]:
        """What 'auto' decided, one line each (the command prints them first): the sector
        (where it was 'auto') with how and why, and the network and optimizer settings that
        were 'auto' (:meth:`Plan.auto_decisions <quantax_lite.recipes.plan.Plan.auto_decisions>`).
        Empty where nothing was decided."""
        return make_plan(self).auto_decisions()

    def amplitude_kind(self, hamiltonian) -> str:
        """'positive', 'signed', 'sinh' or 'complex': ``amplitude``, or what 'auto' picks for ``hamiltonian``."""
        return resolve.amplitude_kind(self, hamiltonian)

    def init_scale(self, lattice, hamiltonian) -> float | None:
        """The network's readout initialization: :func:`~quantax_lite.recipes.resolve.init_scale`."""
        return resolve.init_scale(self, lattice, hamiltonian)

    def reference_energy(self, lattice=None, hamiltonian=None) -> float | None:
        """The whole space's ground-state energy: :func:`~quantax_lite.recipes.energies.reference_energy`."""
        return energies.reference_energy(self, lattice, hamiltonian)

    def reference_source(self) -> str | None:
        """Where :meth:`reference_energy` comes from, in words (None without one): the plan's."""
        return make_plan(self).reference_source

    def sector_energy(self, lattice=None, hamiltonian=None) -> float | None:
        """The lowest energy of the network's sector: :func:`~quantax_lite.recipes.energies.sector_energy`."""
        return energies.sector_energy(self, lattice, hamiltonian)

    def sector_summary(self, lattice=None, hamiltonian=None) -> dict:
        """What a run's summary says of its sector: :func:`~quantax_lite.recipes.energies.sector_summary`."""
        return energies.sector_summary(self, lattice, hamiltonian)

    def config(self) -> dict:
        """The fields as plain JSON values (the lattice by name), e.g. for a checkpoint: every
        'auto' as :meth:`resolved` decides it, so that a run reloads as the same run
        (``Recipe(**recipe.config()) == recipe``)."""
        return schema.config_of(self)

    def _identity(self) -> tuple:
        """The fields as compared: the lattice by name, every 'auto' as :meth:`resolved`
        decides it."""
        config = self.config()
        return tuple((f.name, _hashable(config[f.name])) for f in dataclasses.fields(Recipe))

    def __eq__(self, other):
        """Two recipes are equal when they make the same run: the same fields, an 'auto'
        one equal to the value it decides (so a run's recorded recipe equals the one it was
        started from)."""
        if not isinstance(other, Recipe):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self):
        return hash(self._identity())

    def __getstate__(self):
        """The fields (a copy or a pickle leaves out the plan kept with the recipe)."""
        return {k: v for k, v in self.__dict__.items() if k != "_plan"}


def _hashable(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return tuple(_hashable(v) for v in value) if isinstance(value, (list, tuple)) else value
