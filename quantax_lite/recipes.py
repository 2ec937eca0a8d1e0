"""A complete, fast VMC run from physics-level choices: the library's recipe.

:class:`Recipe` holds what a physicist chooses (lattice, Hamiltonian, symmetry sector,
network size, amplitude kind, samples, optimisation, precision); :func:`build` turns it
into the model, the sampler with its rule and sweep, the driver and its first state.
The ``quantax-lite train`` command is this recipe plus a run folder: its options are the
fields below (``--lr-half-life`` is ``lr_half_life``) with the same defaults, by
construction. How fast the run goes is decided inside the library
(:mod:`quantax_lite.tuning`)::

    import jax; jax.config.update("jax_enable_x64", True)  # float64 SR solve on CPUs
    from quantax_lite import Recipe, build, run
    r = build(Recipe(lattice="4x4", samples=1024))
    state, log = run(r.vmc, r.state, 300)

Energies are in spin-1/2 units (Heisenberg, J1-J2) or Pauli units (tfim).
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import re
from typing import Any, NamedTuple

import numpy as np

from ._validate import finite_number, positive_int
from .ground_sector import MAX_SEARCH_SITES, WEIGHT_TOL, GroundOverlaps, find_ground_sector, momenta
from .ground_sector import whole_space_ground_state
from . import references, sign_rules
from .memory import check_memory_budget
from .lattice import Lattice, parse_lattice

__all__ = ["Recipe", "Run", "build", "parse_lattice", "network_option", "LITERATURE_ENERGY_PER_SITE", "LoadedRun", "load_run",
           "recipe_of_run", "physical_basis", "parse_symmetry", "switch_stage", "SectorChoice", "AUTO_FIELDS",
           "MEASURED_OPTIMIZER"]

HAMILTONIANS = ("heisenberg", "j1j2", "tfim")
SYMMETRIES = ("none", "translations", "full")
AMPLITUDES = ("auto", "positive", "signed", "complex")
PHASE_RULES = ("auto", "none", "120")
PRECISIONS = ("f32", "f64")
NORMS = ("none", "layer")
MOMENTUM_READOUTS = ("plane_wave", "origin")
SAMPLINGS = ("metropolis", "exact_sum")
# the most configurations (of the Sz sector sampled) that sampling exact_sum sums over: 2**21 (22 sites at Sz = 0)
MAX_EXACT_SUM_STATES = 2**21

# The literature values of the package's table of reference energies (quantax_lite.references),
# (lattice, hamiltonian, J2) -> energy per site, by their earlier name.
LITERATURE_ENERGY_PER_SITE = {key: references.ENERGY_PER_SITE[key] for key in sorted(references.LITERATURE)}
MAX_ED_SITES = 20
# Fields whose default "auto" the recipe decides from the lattice and Hamiltonian
# (Recipe.resolved); a run records what they were decided to be, so it reloads the same.
AUTO_FIELDS = ("momentum", "spin_parity", "rotation_parity", "channels", "depth", "diag_shift", "sr_momentum")
# (sr_momentum, diag_shift) that "auto" gives, by the kind of frustration (Recipe.frustration),
# as measured best in benchmarks/accuracy.py (docs/benchmarks.md): SPRING with memory 0.9 and
# a shift of 1e-3 on the 4x4 and 6x6 J1-J2 rows (MinSR stalled at 4.5e-3 on 4x4) and the
# triangular 6x6 row; the kagome 2x3 row used the shift 1e-3 without SPRING (SPRING 0.9
# diverged there); unfrustrated models (the 4x4, 6x6 and chain Heisenberg rows): MinSR, 1e-4.
MEASURED_OPTIMIZER = {"j1j2": (0.9, 1e-3), "triangular": (0.9, 1e-3), "kagome": (0.0, 1e-3), None: (0.0, 1e-4)}
# readout initialization scale of networks for frustrated Heisenberg models (Recipe.init_scale)
FRUSTRATED_INIT_SCALE = 0.3
# Recipe fields added after runs were made without them, with the value those runs had
# (the sector fields' None: k = 0, spin parity not imposed with translations, +1 with full).
FIELDS_OF_EARLIER_RUNS = {"norm": "layer", "momentum": None, "spin_parity": None, "rotation_parity": None,
                          "phase_rule": "none", "momentum_readout": "origin", "sampling": "metropolis",
                          "full_stage_samples": None, "full_stage_lr": None}
AUTO = "auto"
# Options that runs of earlier versions recorded and that no longer exist: speed choices the
# library now makes itself (quantax_lite.tuning). A run recording one is read with a warning.
OPTIONS_OF_EARLIER_VERSIONS = {"conv": "the convolution's form", "gram_precision": "the SR Gram matrix's precision"}
# Options of the command that say how a run is carried out, not what it computes; earlier
# versions recorded some of them with the recipe. Ignored where a run records one.
RUN_CONTROL_OPTIONS = frozenset({"iters", "out", "resume", "restart", "checkpoint_every", "keep_checkpoints",
                                 "time_limit", "no_progress", "measure", "coordinator", "num_processes",
                                 "process_id", "init_timeout", "distributed", "command", "chunk_size",
                                 "memory_budget"})
# seeds are 64-bit PRNG seeds: 0 <= seed < 2**63 (jax reads an int seed as an int64)
SEED_LIMIT = 2**63


def check_seed(seed, name: str = "seed") -> int:
    """``seed`` as an int in ``[0, 2**63)``; ``TypeError`` / ``ValueError`` naming ``name``
    otherwise (a larger int is refused, not folded: every seed names one key)."""
    wanted = f"{name}: expected an int >= 0 and < 2**63, got {seed!r}"
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(wanted)
    seed = int(seed)
    if not 0 <= seed < SEED_LIMIT:
        raise ValueError(wanted)
    return seed


def seed_key(seed: int):
    """The PRNG key of ``seed`` (:func:`check_seed`): ``jax.random.PRNGKey(seed)`` as jax
    makes it with ``jax_enable_x64`` on, the same with it off (where jax itself keeps only
    the low 32 bits of a seed, so seeds 2**32 apart would share a key)."""
    import jax
    import jax.numpy as jnp

    seed = check_seed(seed)
    if seed < 2**32 or jax.config.jax_enable_x64 or str(jax.config.jax_default_prng_impl) != "threefry2x32":
        return jax.random.PRNGKey(seed)
    return jnp.asarray([seed >> 32, seed & 0xFFFFFFFF], dtype=jnp.uint32)  # threefry's key of a 64-bit seed


def _choice(value, name, options):
    if value not in options:
        raise ValueError(f"{name}: expected one of {options}, got {value!r}.")


def parse_symmetry(text) -> tuple[tuple[str, int], ...]:
    """The stages of a ``symmetry`` value: ``((group, first iteration), ...)``, the first
    at iteration 0. ``'full'`` -> ``(('full', 0),)``; ``'translations>full@200'`` ->
    ``(('translations', 0), ('full', 200))``: the state after N steps, and every step
    after it, is in the group of ``@N``. Each later group contains the earlier one
    (none < translations < full) and its N is larger; ``none`` is only a whole run (its
    network has no projection, so its parameters would not carry over). ``ValueError``
    naming ``symmetry`` otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"symmetry: expected one of {SYMMETRIES} or stages such as 'translations>full@200', "
                         f"got {text!r}.")
    parts = [p.strip() for p in text.split(">")]
    stages, rank = [], {name: i for i, name in enumerate(SYMMETRIES)}
    for i, part in enumerate(parts):
        m = re.fullmatch(r"([a-z]+)(?:\s*@\s*(\S+))?", part)
        if m is None or m.group(1) not in rank:
            raise ValueError(f"symmetry: {text!r}: cannot read {part!r}; expected one of {SYMMETRIES}, or stages "
                             "'translations>full@N' (the full group from step N on).")
        name, at = m.group(1), m.group(2)
        if i == 0:
            if at is not None:
                raise ValueError(f"symmetry: {text!r}: the first group holds from the start; no '@' on {part!r}.")
            stages.append((name, 0))
            continue
        if at is None or not re.fullmatch(r"\d+", at) or int(at) < 1:
            raise ValueError(f"symmetry: {text!r}: {part!r} needs the step where it takes over, a positive int "
                             f"'@N', got {at!r}.")
        prev, start = stages[-1]
        if int(at) <= start:
            raise ValueError(f"symmetry: {text!r}: the stages' steps must increase, got @{at} after @{start}.")
        if prev == "none":
            raise ValueError(f"symmetry: {text!r}: 'none' cannot be followed by a group (the projected network's "
                             "parameters differ from the bare one's); start from 'translations', whose network "
                             "is the same translation-invariant one.")
        if rank[name] <= rank[prev]:
            raise ValueError(f"symmetry: {text!r}: {name!r} is not larger than {prev!r}; each later group must "
                             f"contain the earlier one and more ({' < '.join(SYMMETRIES)}).")
        stages.append((name, int(at)))
    return tuple(stages)


def _momentum(text: str):
    """Command-line form of ``momentum``: 'auto', or 'm1,m2' (or 'm' on a chain) -> a list of
    ints (checked by the recipe)."""
    if text.strip() == AUTO:
        return AUTO
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers m1,m2 (k = m1 b1/L1 + m2 b2/L2), got {text!r}") from None


def int_or_auto(text: str):
    """Command-line form of ``chunk_size``: 'auto' or an int (checked by the recipe)."""
    if text.strip() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive int or 'auto', got {text!r}") from None


def parity_or_auto(text: str):
    """Command-line form of ``spin_parity`` / ``rotation_parity``: 'auto' or an int (the
    parser's choices then allow +1 and -1)."""
    if text.strip() == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected +1, -1 or 'auto', got {text!r}") from None


def float_or_auto(text: str):
    """Command-line form of ``diag_shift`` / ``sr_momentum``: 'auto' or a number (checked by
    the recipe)."""
    if text.strip() == AUTO:
        return AUTO
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None


def int_or_float(text: str):
    """Command-line form of ``memory_budget``: an int or a float (checked by the recipe)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected bytes (a number > 1) or a fraction of the device's memory (<= 1), got {text!r}"
        ) from None


def _halving_schedule(lr: float, half_life: float, start: int, count):
    """The learning rate at step ``count``: ``lr`` until ``start``, then halving every
    ``half_life`` steps, never below ``lr / 10`` (optax's ``exponential_decay`` with
    ``decay_rate=0.5``, computed in :func:`~quantax_lite.tuning.wide_dtype`)."""
    import jax.numpy as jnp

    from . import tuning

    dt = tuning.wide_dtype()
    elapsed = jnp.maximum(jnp.asarray(count, dt) - jnp.asarray(start, dt), jnp.zeros((), dt))
    value = jnp.asarray(lr, dt) * jnp.asarray(0.5, dt) ** (elapsed / jnp.asarray(half_life, dt))
    return jnp.maximum(value, jnp.asarray(lr / 10, dt))


_SECTOR_AUTO_HELP = ("auto: the sector of the ground state of the whole Sz = 0 space, found by exact "
                     "diagonalization up to 24 sites (ground_sector.MAX_SEARCH_SITES), of characters 1 where a "
                     "sign rule makes that ground state positive and above 24 sites; the run prints what it "
                     "chose and why")


def network_option(text: str) -> dict:
    """Command-line form of one of ``network_options``: 'key=value' -> ``{key: value}``, the
    value read as an int, a float, true/false, none, or else a string."""
    key, sep, value = str(text).partition("=")
    if not sep or not key.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"expected an option of the network as key=value (e.g. alpha=4), got {text!r}")
    value = value.strip()
    words = {"true": True, "false": False, "none": None, "null": None}
    if value.lower() in words:
        return {key.strip(): words[value.lower()]}
    for kind in (int, float):
        try:
            return {key.strip(): kind(value)}
        except ValueError:
            pass
    return {key.strip(): value}


def _field(default, kind, group, help, choices=None):
    """A recipe field with its command-line form (type, group, help, choices)."""
    return dataclasses.field(default=default, metadata=dict(type=kind, group=group, help=help, choices=choices))


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The physics-level choices of a run, checked on construction (``ValueError`` or
    ``TypeError`` naming the field). Each field's ``metadata["help"]`` says what it is;
    ``quantax-lite train --help`` prints the same text."""

    lattice: Any = _field("4x4", str, "system", "a periodic square or rectangular lattice 'Lx x Ly' (e.g. 4x4, "
                          "6x4), a chain 'chain:L', or L1 x L2 unit cells of a triangular (1 site per cell), "
                          "honeycomb (2) or kagome (3) lattice: 'triangular:6x6', 'honeycomb:3x3', 'kagome:2x3' "
                          "(or a quantax_lite Lattice)")
    hamiltonian: str = _field("heisenberg", str, "system", "heisenberg: H = J1 sum S.S; j1j2: adds J2 on "
                              "next-nearest bonds; tfim: H = -sum sz sz - h sum sx (Pauli units)", HAMILTONIANS)
    J2: float | None = _field(None, float, "system", "next-nearest coupling, j1j2 only (default: 0.5)")
    h: float | None = _field(None, float, "system", "transverse field, tfim only (default: 1.0)")
    marshall: bool = _field(True, bool, "system", "the Marshall sign rule (Heisenberg / J1-J2) where the lattice "
                            "is bipartite (chains and square lattices of even sides, honeycomb); triangular and "
                            "kagome lattices have none, so it is off there")
    phase_rule: str = _field("auto", str, "system", "a fixed phase of the network (Heisenberg / J1-J2): 120, the "
                             "120-degree rule exp(2 pi i / 3 * sum of the sublattice labels of the down spins), "
                             "the coplanar order of the triangular lattice and the q = 0 state of the kagome "
                             "lattice, which a nearly uniform network then starts from; none; auto: 120 on "
                             "triangular and kagome lattices whose three sublattices colour every "
                             "nearest-neighbour bond (triangular: both extents divisible by 3), none elsewhere",
                             PHASE_RULES)
    symmetry: str = _field("translations", str, "network", "projection group: none, translations (by whole "
                           "unit cells) or full = translations x the cluster's point group (from its geometry: up "
                           "to C4v on square, C6v on triangular, honeycomb and kagome clusters) x spin inversion "
                           "(more accurate, about 16x the cost of translations on a square lattice); or staged, "
                           "'translations>full@N': translations for the first N steps, then the full group with "
                           "the same parameters (symmetry restoration: most of the accuracy of full for a "
                           "fraction of its cost)")
    momentum: Any = _field(AUTO, _momentum, "network", "momentum sector 'm1,m2' ('m' on a chain) of the "
                           "translations: integers m_d, k = sum_d m_d b_d / L_d (b_d the reciprocal vectors, L_d "
                           "the cells along a_d; symmetry.allowed_momenta); with symmetry full the point group is "
                           "cut to the little group of k; " + _SECTOR_AUTO_HELP + " (None: k = 0)")
    spin_parity: Any = _field(AUTO, parity_or_auto, "network", "character of the global spin flip, +1 or -1 (a "
                              "singlet of N sites has (-1)^(N/2) in the plain basis, +1 in the Marshall basis); "
                              "adds spin inversion to the translations; auto: with symmetry full that of the "
                              "ground state's sector (see momentum), not imposed with translations (None: +1 "
                              "with full, not imposed with translations)", (AUTO, 1, -1))
    rotation_parity: Any = _field(AUTO, parity_or_auto, "network", "with symmetry full: the point group's irrep, "
                                  "+1 (all characters 1) or -1 (odd under the smallest rotation, each mirror as "
                                  "its rotation part; the ground states of triangular:4x3, kagome:2x2 and "
                                  "kagome:2x3 are odd under the rotation by pi); auto: that of the ground "
                                  "state's sector (see momentum; where it lies in an irrep of neither kind, the "
                                  "one of the two with the lower energy) (None: +1)", (AUTO, 1, -1))
    momentum_readout: str = _field("plane_wave", str, "network", "how the network carries a nonzero momentum: "
                                   "plane_wave, log psi_0 = sum_r a_r + log sum_r exp(i k.R_r + b_r) over the "
                                   "cells r, a momentum eigenstate whose log-amplitude is a sum over the lattice "
                                   "(complex networks; signed ones use origin); origin, log psi_0 = the output "
                                   "of one cell, summed over the translations with their characters (the "
                                   "network of runs made before this option)", MOMENTUM_READOUTS)
    network: str = _field("conv", str, "network", "the network, by its registered name "
                          "(quantax_lite.models.register_network): conv (the convolutional ResNet, whose options "
                          "are channels, depth, kernel-size and norm), rbm, vit, or one registered by the user")
    network_options: Any = _field(None, network_option, "network", "that network's own options, a mapping of "
                                  "option names to values (e.g. {'alpha': 4} for rbm; on the command "
                                  "--network-option alpha=4, repeated); the conv network's are its own fields")
    depth: Any = _field(AUTO, int_or_auto, "network", "residual blocks; auto: the measured network by lattice "
                        "size (Recipe.network_size: 2 up to 20 sites, 3 on 2D lattices of 21-36 sites, 4 "
                        "beyond) (None: as make_conv_nqs chooses by lattice size)")
    channels: Any = _field(AUTO, int_or_auto, "network", "conv channels; auto: the measured network by "
                           "lattice size (Recipe.network_size: 8 up to 20 sites, 12 on triangular and kagome "
                           "ones, 8 on 2D lattices of 21-36 sites, 16 beyond) (None: as make_conv_nqs chooses)")
    kernel_size: int | None = _field(None, int, "network", "conv kernel size on the grid of unit cells (default: "
                                     "3 in 2D, 5 in 1D)")
    norm: str = _field("none", str, "network", "a LayerNorm over the channels before each activation", NORMS)
    amplitude: str = _field("auto", str, "network", "network output: positive (real log psi), signed (real psi, "
                            "learned sign), complex (free phase); auto: positive where the basis makes the ground "
                            "state positive (heisenberg with the Marshall sign, tfim), complex for heisenberg / j1j2 on "
                            "triangular and kagome lattices (from a random start), signed otherwise", AMPLITUDES)
    precision: str = _field("f32", str, "network", "network precision (the SR solve is float64)", PRECISIONS)
    sampling: str = _field("metropolis", str, "optimization", "metropolis: Markov-chain samples of |psi|^2 "
                           "(samples per step); exact_sum: no samples, every configuration of the sector with its "
                           "exact weight, one per orbit of the symmetry group: energies, variances "
                           "and SR steps without sampling noise, and a final energy without error bar (small "
                           "systems: up to 22 sites; samples, chains, sweep-size and eval-samples do not apply)",
                           SAMPLINGS)
    samples: int = _field(1024, int, "optimization", "samples per step")
    full_stage_samples: int | None = _field(None, int, "optimization", "with a staged symmetry "
                                            "('translations>full@N'): samples per step from step N on, where "
                                            "each costs the full group's images (fewer samples: more, noisier "
                                            "steps in the same time) (default: samples)")
    chains: int | None = _field(None, int, "optimization", "Markov chains (default: one per sample, of the stage "
                                "with the fewest samples per step; a multiple of the device count)")
    sweep_size: int | None = _field(None, int, "optimization", "Metropolis proposals per chain between samples "
                                    "(default: n_sites/2 exchanges of anti-aligned pairs for Sz-conserving "
                                    "models, n_sites flips otherwise)")
    chunk_size: int | str = _field("auto", int_or_auto, "optimization", "samples per device per chunk of local "
                                   "energies and Jacobians, to bound memory; auto: the library's chunks, each at "
                                   "most the largest whose compiled program fits --memory-budget")
    memory_budget: float | None = _field(None, int_or_float, "optimization", "memory per device for chunk-size auto: "
                                         "bytes (a number > 1, e.g. 8e9) or a fraction of the device's memory "
                                         "(<= 1, e.g. 0.5) (default: the device's memory: a GPU's memory pool, "
                                         "or the host's memory shared by its CPU devices)")
    lr: float = _field(0.02, float, "optimization", "initial learning rate")
    lr_half_life: float = _field(100.0, float, "optimization", "steps over which the learning rate halves (down "
                                 "to lr/10), independent of the run length (a resumed run continues it)")
    full_stage_lr: float | None = _field(None, float, "optimization", "with a staged symmetry "
                                         "('translations>full@N'): the learning rate at step N, halving over "
                                         "lr-half-life from there (down to a tenth of it) (default: the schedule "
                                         "of lr goes on)")
    diag_shift: Any = _field(AUTO, float_or_auto, "optimization", "absolute SR diagonal shift; auto: 1e-3 for "
                             "frustrated models (J1-J2, triangular and kagome Heisenberg), 1e-4 otherwise, as "
                             "measured (recipes.MEASURED_OPTIMIZER)")
    diag_scale: float = _field(0.0, float, "optimization", "relative SR diagonal shift (x mean diagonal of S)")
    sr_momentum: Any = _field(AUTO, float_or_auto, "optimization", "SPRING memory in [0, 1): each direction "
                              "keeps this fraction of the last where the step's samples leave it undetermined; "
                              "0: MinSR; auto: 0.9 for J1-J2 and triangular Heisenberg, 0 otherwise (kagome "
                              "included), as measured (recipes.MEASURED_OPTIMIZER)")
    eval_samples: int | None = _field(None, int, "optimization", "fresh samples of the final energy, drawn in "
                                      "blocks of a step's samples (default: 32 x the samples per step of the "
                                      "last stage)")
    seed: int = _field(0, int, "optimization", "PRNG seed of the parameters and chains")

    def __post_init__(self):
        _choice(self.hamiltonian, "hamiltonian", HAMILTONIANS)
        parse_symmetry(self.symmetry)
        _choice(self.amplitude, "amplitude", AMPLITUDES)
        _choice(self.phase_rule, "phase_rule", PHASE_RULES)
        _choice(self.momentum_readout, "momentum_readout", MOMENTUM_READOUTS)
        _choice(self.precision, "precision", PRECISIONS)
        _choice(self.sampling, "sampling", SAMPLINGS)
        _choice(self.norm, "norm", NORMS)
        if self.hamiltonian != "j1j2" and self.J2 is not None:
            raise ValueError(f"J2: applies to hamiltonian 'j1j2' only, not {self.hamiltonian!r}.")
        if self.hamiltonian != "tfim" and self.h is not None:
            raise ValueError(f"h: applies to hamiltonian 'tfim' only, not {self.hamiltonian!r}.")
        for name in ("J2", "h"):
            if getattr(self, name) is not None:
                finite_number(getattr(self, name), name)
        positive_int(self.samples, "samples")
        check_seed(self.seed)
        if not (self.chunk_size is None or isinstance(self.chunk_size, str) and self.chunk_size == "auto"):
            try:
                positive_int(self.chunk_size, "chunk_size")
            except (TypeError, ValueError) as err:
                raise type(err)(f"chunk_size: expected a positive int or 'auto', got {self.chunk_size!r}") from None
            if self.memory_budget is not None:
                raise ValueError(f"memory_budget: caps the chunks of `chunk_size` auto; with `chunk_size` "
                                 f"{self.chunk_size} the chunk is used as given, so give one or the other.")
        check_memory_budget(self.memory_budget)
        for name in ("chains", "sweep_size", "eval_samples", "channels", "kernel_size"):
            if getattr(self, name) is not None and not _is_auto(getattr(self, name)):
                positive_int(getattr(self, name), name)
        if self.depth is not None and not _is_auto(self.depth):
            positive_int(self.depth, "depth", minimum=0)
        finite_number(self.lr, "lr", above=0)
        finite_number(self.lr_half_life, "lr_half_life", above=0)
        self._check_full_stage()
        if not _is_auto(self.diag_shift):
            finite_number(self.diag_shift, "diag_shift", minimum=0)
        finite_number(self.diag_scale, "diag_scale", minimum=0)
        if not _is_auto(self.sr_momentum) and not (finite_number(self.sr_momentum, "sr_momentum") >= 0
                                                   and self.sr_momentum < 1):
            raise ValueError(f"sr_momentum: expected a number in [0, 1) or 'auto', got {self.sr_momentum!r}.")
        lattice = parse_lattice(self.lattice)
        self._check_network()
        self._check_exact_sum(lattice)
        self._check_sector(lattice)
        self._check_phase_rule(lattice)
        if self.hamiltonian != "tfim" and lattice.n_sites % 2:
            raise ValueError(
                f"lattice: {lattice.name} has {lattice.n_sites} sites; the {self.hamiltonian} model is "
                "sampled in the Sz = 0 sector, which needs an even number of sites."
            )
        n_eval = self.n_eval_samples
        for name, n in (("samples", self.samples), ("full_stage_samples", self.full_stage_samples)):
            if n is not None and n_eval > n and n_eval % n:
                raise ValueError(
                    f"eval_samples: {n_eval} must be a multiple of {name} ({n}): the final estimate is "
                    "drawn in blocks of one step's samples."
                )

    def _check_network(self) -> None:
        """``network`` registered; ``network_options`` that network's (``ValueError`` /
        ``TypeError`` starting ``network_options: <option>:``), stored as a plain dict (None
        when empty). The conv network's options are the fields ``channels``, ``depth``,
        ``kernel_size`` and ``norm``: given in ``network_options`` they move there (once); for
        another network those fields keep their defaults (``ValueError`` naming the field)."""
        from .models import network_entry, network_options

        network_entry(self.network)
        given = self.network_options
        if given is not None and not isinstance(given, dict):
            if not hasattr(given, "items"):
                raise TypeError(f"network_options: expected a mapping of option names to values, got {given!r}.")
            given = dict(given.items())
        given = dict(given or {})
        network_options(self.network, given)  # the network's own check of every option
        defaults = {f.name: f.default for f in dataclasses.fields(Recipe)}
        if self.network == "conv":
            for key in list(given):
                if getattr(self, key) != defaults[key]:
                    raise ValueError(f"network_options: {key}: given twice, as the field {key} "
                                     f"({getattr(self, key)!r}) and in network_options ({given[key]!r}).")
                object.__setattr__(self, key, given.pop(key))
        else:
            for key in ("channels", "depth", "kernel_size", "norm"):
                if getattr(self, key) not in (defaults[key], None):
                    raise ValueError(f"{key}: an option of the conv network, not of {self.network!r}; give that "
                                     f"network's options in network_options.")
        object.__setattr__(self, "network_options", given or None)

    def network_config(self, lattice=None) -> dict:
        """The options of the network (``network_options``; for the conv network its fields,
        ``channels`` and ``depth`` as :meth:`network_size` decides an 'auto' one)."""
        if self.network != "conv":
            return dict(self.network_options or {})
        channels, depth = self.network_size(lattice)
        return dict(channels=channels, depth=depth, kernel_size=self.kernel_size, norm=self.norm)

    def _check_full_stage(self) -> None:
        """``full_stage_samples`` / ``full_stage_lr``: positive, only with a staged symmetry, and
        (with the default chains) ``samples`` and ``full_stage_samples`` multiples of one another."""
        if self.full_stage_samples is not None:
            positive_int(self.full_stage_samples, "full_stage_samples")
        if self.full_stage_lr is not None:
            finite_number(self.full_stage_lr, "full_stage_lr", above=0)
        for name in ("full_stage_samples", "full_stage_lr"):
            if getattr(self, name) is not None and len(self.symmetry_stages()) == 1:
                raise ValueError(f"{name}: applies to the full-group stage of a staged symmetry such as "
                                 f"'translations>full@200'; symmetry is {self.symmetry!r}.")
        m, n = self.full_stage_samples, self.samples
        if m is not None and self.chains is None and max(m, n) % min(m, n):
            raise ValueError(f"full_stage_samples: {m} and samples {n}: the larger must be a multiple of the "
                             "smaller, since both stages draw from the same chains, one per sample of the "
                             "smaller count (or give chains).")

    def _check_exact_sum(self, lattice) -> None:
        """With ``sampling`` exact_sum: no sampling options, and a sector small enough to sum."""
        if self.sampling != "exact_sum":
            return
        for name in ("chains", "sweep_size", "eval_samples", "full_stage_samples"):
            if getattr(self, name) is not None:
                raise ValueError(f"{name}: sampling 'exact_sum' draws no samples; leave {name} unset.")
        from .hilbert import sector_size

        n = lattice.n_sites
        n_states = sector_size(n, 0 if self.hamiltonian != "tfim" and n % 2 == 0 else None)
        if n_states > MAX_EXACT_SUM_STATES:
            raise ValueError(f"sampling: 'exact_sum' on {lattice.name} would sum over {n_states} configurations, "
                             f"more than {MAX_EXACT_SUM_STATES}; use 'metropolis'.")

    def _check_sector(self, lattice) -> None:
        """Validate (and normalize to a tuple) ``momentum``, ``spin_parity``; ``amplitude``
        'positive' only in the sector of characters 1. An 'auto' field is decided later
        (:meth:`sector_choice`), never here: constructing a recipe diagonalizes nothing."""
        m = self.momentum
        if isinstance(m, str) and m.strip() == AUTO:
            m = AUTO
            object.__setattr__(self, "momentum", AUTO)
        elif isinstance(m, str):
            try:
                m = _momentum(m)
            except argparse.ArgumentTypeError as err:
                raise ValueError(f"momentum: {err}") from None
        if m is not None and m != AUTO:
            if isinstance(m, (int, np.integer)) and not isinstance(m, bool):
                m = (m,)
            m = tuple(m) if isinstance(m, (list, tuple, np.ndarray)) else m
            if (not isinstance(m, tuple) or len(m) != lattice.ndim
                    or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in m)):
                raise ValueError(f"momentum: expected {lattice.ndim} integer(s) m_d (k = sum_d m_d b_d / L_d, on "
                                 f"the reciprocal lattice of {lattice.name}), got {self.momentum!r}.")
            m = tuple(int(x) for x in m)
            object.__setattr__(self, "momentum", m)
        groups = set(re.findall(r"[a-z]+", str(self.symmetry)))
        if m != AUTO and self.sector_momentum(lattice) is not None:
            if "none" in groups:
                raise ValueError(f"momentum: {m} needs a group with translations; symmetry is {self.symmetry!r}.")
            if not lattice.pbc:
                raise ValueError(f"momentum: the open lattice {lattice.name} has no translations, so no momentum "
                                 f"sector; got {m}.")
        for name in ("spin_parity", "rotation_parity"):
            value = getattr(self, name)
            if isinstance(value, str) and value.strip() == AUTO:
                object.__setattr__(self, name, AUTO)
                continue
            if value is not None and (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer))):
                raise TypeError(f"{name}: expected the int +1 or -1 (or 'auto'), got {value!r}.")
        if self.spin_parity not in (None, AUTO):
            if self.spin_parity not in (1, -1):
                raise ValueError(f"spin_parity: expected +1 or -1, got {self.spin_parity!r}.")
            if "none" in groups:
                raise ValueError(f"spin_parity: {self.spin_parity} needs a group; symmetry is {self.symmetry!r} "
                                 "(translations adds spin inversion with this character).")
        if self.rotation_parity not in (None, AUTO):
            if self.rotation_parity not in (1, -1):
                raise ValueError(f"rotation_parity: expected +1 or -1, got {self.rotation_parity!r}.")
            if "full" not in groups:
                raise ValueError(f"rotation_parity: {self.rotation_parity} sets the characters of the point group, "
                                 f"which only symmetry 'full' holds; symmetry is {self.symmetry!r}.")
        if self.amplitude == "positive" and not self._given_sector_trivial(lattice):
            raise ValueError(f"amplitude: 'positive' (a real log psi) cannot carry the characters of the sector "
                             f"momentum {m}, spin_parity {self.spin_parity}, rotation_parity {self.rotation_parity}; use 'complex' or 'signed' (or 'auto').")

    def _check_phase_rule(self, lattice) -> None:
        if self.phase_rule != "120":
            return
        if self.hamiltonian == "tfim":
            raise ValueError("phase_rule: '120' is a rule for the Heisenberg / J1-J2 models, not for tfim; use "
                             "'none' or 'auto'.")
        if self.amplitude in ("positive", "signed"):
            raise ValueError(f"phase_rule: '120' gives complex amplitudes, which amplitude {self.amplitude!r} "
                             "cannot hold; use amplitude 'complex' or 'auto', or phase_rule 'none'.")
        if not sign_rules.phase_rule_fits(lattice):
            raise ValueError(f"phase_rule: '120' needs three sublattices that colour every nearest-neighbour bond "
                             f"of {lattice.name} (triangular clusters: both extents divisible by 3; kagome); "
                             "use 'none' or 'auto'.")

    def has_momentum(self) -> bool:
        """Whether the sector has a nonzero momentum (where ``momentum_readout`` matters);
        an 'auto' momentum as :meth:`sector_choice` decides it."""
        m = self._sector_fields()[0]
        return m is not None and any(int(x) != 0 for x in np.atleast_1d(m))

    def phase_rule_kind(self, lattice=None) -> str:
        """'120' or 'none': ``phase_rule``, or what 'auto' picks for ``lattice``."""
        if self.phase_rule != "auto":
            return self.phase_rule
        lattice = parse_lattice(self.lattice) if lattice is None else lattice
        if (self.hamiltonian != "tfim" and self.amplitude in ("auto", "complex")
                and sign_rules.default_rule(lattice) == "120"):
            return "120"
        return "none"

    def site_phases(self, lattice=None):
        """The network's phase rule, ``(n_sites,)`` radians (:func:`~quantax_lite.sign_rules.sublattice_phases`),
        or None."""
        lattice = parse_lattice(self.lattice) if lattice is None else lattice
        return sign_rules.sublattice_phases(lattice) if self.phase_rule_kind(lattice) == "120" else None

    def sector_momentum(self, lattice=None):
        """The Cartesian wave vector ``k = sum_d m_d b_d / L_d`` of ``momentum`` (float64
        ``(ndim,)``), or None for ``k = 0`` (every ``m_d`` a multiple of ``L_d``); an 'auto'
        momentum as :meth:`sector_choice` decides it."""
        lattice = parse_lattice(self.lattice) if lattice is None else lattice
        m = self.momentum if self.momentum != AUTO else self._sector_fields(lattice)[0]
        return _wave_vector(lattice, m)

    def trivial_sector(self, lattice=None) -> bool:
        """True when every character of the group is 1 (k = 0, spin and rotation parity not -1);
        'auto' fields as :meth:`sector_choice` decides them."""
        m, p, r = self._sector_fields(lattice)
        lattice = parse_lattice(self.lattice) if lattice is None else lattice
        return _wave_vector(lattice, m) is None and p != -1 and r != -1

    def _given_sector_trivial(self, lattice) -> bool:
        """:meth:`trivial_sector` of the fields as given, an 'auto' one counted as trivial
        (what it becomes where ``amplitude`` is 'positive'); decides nothing."""
        m = None if self.momentum == AUTO else self.momentum
        return _wave_vector(lattice, m) is None and self.spin_parity != -1 and self.rotation_parity != -1

    # -- what 'auto' decides ----------------------------------------------------------

    def frustration(self, lattice=None) -> str | None:
        """The kind of frustration that picks the 'auto' optimizer settings
        (:data:`MEASURED_OPTIMIZER`): 'j1j2' (hamiltonian j1j2 with J2 != 0), 'triangular' or
        'kagome' (Heisenberg on those lattices), None otherwise (tfim included)."""
        lattice = parse_lattice(self.lattice) if lattice is None else lattice
        if self.hamiltonian == "tfim":
            return None
        if self.hamiltonian == "j1j2" and (0.5 if self.J2 is None else self.J2) != 0:
            return "j1j2"
        return lattice.kind if lattice.frustrated and lattice.kind in MEASURED_OPTIMIZER else None

    def optimizer_settings(self, lattice=None) -> tuple[float, float]:
        """``(sr_momentum, diag_shift)``: each as given, or what 'auto' picks by
        :meth:`frustration` (:data:`MEASURED_OPTIMIZER`)."""
        momentum, shift = MEASURED_OPTIMIZER[self.frustration(lattice)]
        return (momentum if _is_auto(self.sr_momentum) else float(self.sr_momentum),
                shift if _is_auto(self.diag_shift) else float(self.diag_shift))

    def network_size(self, lattice=None) -> tuple[int | None, int | None]:
        """``(channels, depth)`` of the network: each as given (None: the network's own
        default, :func:`~quantax_lite.models.default_conv_architecture`), or what 'auto' picks
        from the measured rows (benchmarks/accuracy.py): up to 20 sites the network's default
        (8 channels, depth 2: the 4x4 and chain rows), but 12 channels on triangular and
        kagome clusters (the kagome 2x3 row, 5,592 parameters); 2D lattices of 21-36 sites 8
        channels, depth 3 (the 6x6 Heisenberg, J1-J2 and triangular rows, which the default
        16 x 4 network lost to within their time budgets); beyond, and chains beyond 20 sites,
        the network's default (16 channels, depth 4)."""
        from .models import default_conv_architecture

        lattice = parse_lattice(self.lattice) if lattice is None else lattice
        default = default_conv_architecture(lattice)
        n, two_d = lattice.n_sites, lattice.ndim == 2
        if n <= 20:
            auto = (12, 2) if lattice.frustrated else (8, 2)
        elif n <= 36 and two_d:
            auto = (8, 3)
        else:
            auto = (default["channels"], default["depth"])
        return tuple(a if _is_auto(v) else v for v, a in ((self.channels, auto[0]), (self.depth, auto[1])))

    # -- the physics ---------------------------------------------------------------

    @property
    def n_eval_samples(self) -> int:
        """Fresh samples of the final estimate."""
        if self.eval_samples is not None:
            return self.eval_samples
        return 32 * self.samples_at(self.symmetry_stages()[-1][1])

    def samples_at(self, iteration: int) -> int:
        """Samples per step of the stage at ``iteration`` (:meth:`symmetry_at`):
        ``full_stage_samples`` in the full-group stage of a staged symmetry, where given,
        else ``samples``."""
        if self._in_full_stage(iteration) and self.full_stage_samples is not None:
            return self.full_stage_samples
        return self.samples

    def _in_full_stage(self, iteration: int) -> bool:
        """Whether ``iteration`` lies in the full-group stage of a staged symmetry (the last
        stage, from its first step on); ``ValueError`` naming ``iteration`` if negative."""
        positive_int(iteration, "iteration", minimum=0)
        stages = self.symmetry_stages()
        return len(stages) > 1 and iteration >= stages[-1][1]

    def n_chains(self, n_devices: int) -> int:
        """Markov chains: ``chains``, or one per sample of the stage with the fewest samples
        per step (:func:`default_chains`); the same in every stage, so that a run's state
        keeps its shape (the stage with more samples draws several per chain)."""
        if self.chains is not None:
            return self.chains
        return default_chains(min(self.samples, self.full_stage_samples or self.samples), n_devices)

    def learning_rate(self, iteration: int = 0):
        """The learning-rate schedule (an optax schedule of the step count) of the stage at
        ``iteration``: ``lr`` halving every ``lr_half_life`` steps down to ``lr / 10``; in the
        full-group stage of a staged symmetry with ``full_stage_lr``, that value at the
        stage's first step, halving from there down to a tenth of it."""
        lr, start = self.lr, 0
        if self._in_full_stage(iteration) and self.full_stage_lr is not None:
            lr, start = self.full_stage_lr, self.symmetry_stages()[-1][1]
        return functools.partial(_halving_schedule, lr, float(self.lr_half_life), start)

    def symmetry_stages(self) -> tuple[tuple[str, int], ...]:
        """``((group, first iteration), ...)`` of ``symmetry`` (:func:`parse_symmetry`):
        one stage ``((symmetry, 0),)`` unless it is staged, e.g. 'translations>full@200'."""
        return parse_symmetry(self.symmetry)

    def symmetry_at(self, iteration: int) -> str:
        """The group ('none', 'translations' or 'full') of the state after ``iteration``
        steps, which the next step trains: that of the last stage starting at or before it."""
        positive_int(iteration, "iteration", minimum=0)
        return [name for name, start in self.symmetry_stages() if start <= iteration][-1]

    def system(self, iteration: int = 0):
        """``(lattice, hamiltonian, symmetry)`` of the stage at ``iteration``
        (:meth:`symmetry_at`); symmetry None for 'none'."""
        lattice = parse_lattice(self.lattice)
        ham = _hamiltonian(*self._system_key(lattice))
        stage = self.symmetry_at(iteration)
        m, p, r = self._sector_fields(lattice, ham)
        try:
            group = _sector_group(lattice, stage, _wave_vector(lattice, m), p, r)
        except ValueError as err:
            raise ValueError(f"symmetry: {stage!r} does not fit the lattice {lattice.name}: {err}") from None
        return lattice, ham, group

    def _system_key(self, lattice) -> tuple:
        """``(lattice, hamiltonian, coupling, marshall)``: hashable, what the Hamiltonian is
        made of (:func:`_hamiltonian`)."""
        if self.hamiltonian == "tfim":
            return lattice, "tfim", float(1.0 if self.h is None else self.h), False
        j2 = float(0.5 if self.J2 is None else self.J2) if self.hamiltonian == "j1j2" else 0.0
        return lattice, self.hamiltonian, j2, bool(sign_rules.has_marshall_rule(lattice) and self.marshall)

    def _sector_fields(self, lattice=None, hamiltonian=None) -> tuple:
        """``(momentum, spin_parity, rotation_parity)`` as the network's group takes them:
        each as given, or as :meth:`sector_choice` decides an 'auto' one."""
        fields = (self.momentum, self.spin_parity, self.rotation_parity)
        if AUTO not in fields:
            return fields
        return self.sector_choice(lattice, hamiltonian).fields

    def sector_choice(self, lattice=None, hamiltonian=None) -> "SectorChoice":
        """The symmetry sector of the network (:class:`SectorChoice`): the fields as given,
        each 'auto' one decided so that the sector holds the ground state of the whole space.

        With a group that has translations (symmetry translations or full, of the last stage
        of a staged one), an 'auto' momentum is that of the ground state; with symmetry full,
        'auto' spin and rotation parities are its characters (with translations they are not
        imposed: the momentum sector holds the ground state whatever its parity). Decided:
        by the lattice where a sign rule makes the ground state positive in the network's
        basis (tfim; Heisenberg with the Marshall sign): every character 1; by exact
        diagonalization up to :data:`~quantax_lite.ground_sector.MAX_SEARCH_SITES` sites
        (the whole Sz = 0 space once, then the ground state's weight in each candidate
        sector, :func:`~quantax_lite.ground_sector.find_ground_sector`; where no sector the
        fields express holds it, the one with the lowest energy of its own); above that the
        sector of characters 1 (k = 0), which is said. Computed once per process for each
        system and sector fields (the lattice and Hamiltonian default to :meth:`system`'s)."""
        decided = getattr(self, "_decided", None)
        if decided is not None:  # made by resolved(): how its 'auto' fields were decided
            return decided[0]
        lattice = parse_lattice(self.lattice) if lattice is None else lattice
        stage = self.symmetry_stages()[-1][0]
        return _choose_sector(self._system_key(lattice), stage, self.momentum, self.spin_parity,
                              self.rotation_parity, self.amplitude == "positive")

    def resolved(self) -> "Recipe":
        """This recipe with every 'auto' of :data:`AUTO_FIELDS` decided (:meth:`sector_choice`,
        :meth:`network_size`, :meth:`optimizer_settings`): what a run records, so that it
        reloads as the same run whatever later versions make of 'auto'. The recipe itself
        where nothing is 'auto'. Its :meth:`sector_choice` still says how the sector was chosen."""
        if not any(_is_auto(getattr(self, f)) for f in AUTO_FIELDS):
            return self
        lattice = parse_lattice(self.lattice)
        choice = self.sector_choice(lattice)
        channels, depth = self.network_size(lattice) if self.network == "conv" else (self.channels, self.depth)
        sr_momentum, diag_shift = self.optimizer_settings(lattice)
        m, p, r = choice.fields
        out = dataclasses.replace(self, momentum=m, spin_parity=p, rotation_parity=r, channels=channels, depth=depth,
                                  diag_shift=diag_shift, sr_momentum=sr_momentum)
        object.__setattr__(out, "_decided", (choice, tuple(f for f in AUTO_FIELDS if _is_auto(getattr(self, f)))))
        return out

    def auto_decisions(self) -> list[str]:
        """What 'auto' decided, one line each (the command prints them first): the sector
        (where it was 'auto') with how and why, and the network and optimizer settings that
        were 'auto'. Empty for a recipe with nothing 'auto' that :meth:`resolved` did not make."""
        decided = getattr(self, "_decided", None)
        recipe = self
        if decided is None:
            recipe = self.resolved()
            decided = getattr(recipe, "_decided", None)
            if decided is None:
                return []
        choice, fields = decided
        lines = []
        if {"momentum", "spin_parity", "rotation_parity"} & set(fields):
            lines.append(f"sector {choice.describe()}: chosen by {choice.chosen_by} ({choice.reason})")
        settings = [f"{f.replace('_', '-')} {getattr(recipe, f)}" for f in ("channels", "depth") if f in fields]
        settings += [f"{f.replace('_', '-')} {getattr(recipe, f):g}" for f in ("sr_momentum", "diag_shift")
                     if f in fields]
        if settings:
            kind = recipe.frustration()
            why = (f"the settings measured best for {kind} models" if kind else "the measured settings")
            lines.append(f"auto: {', '.join(settings)} ({why}, benchmarks/accuracy.py)")
        return lines

    def amplitude_kind(self, hamiltonian) -> str:
        """'positive', 'signed' or 'complex': ``amplitude``, or what 'auto' picks for ``hamiltonian``."""
        if self.amplitude != "auto":
            return self.amplitude
        if not self.trivial_sector(hamiltonian.lattice):
            # characters other than 1: no positive wavefunction; a free phase (complex
            # characters need one anyway)
            return "complex"
        if self.hamiltonian == "tfim":
            # -h sx: non-positive off-diagonal elements (a positive ground state) for a field
            # >= 0, which the sign-rule basis gives for any h
            return "positive" if hamiltonian.field >= 0 else "signed"
        if self.hamiltonian == "heisenberg" and hamiltonian.marshall_sign:
            return "positive"
        if self.phase_rule_kind(hamiltonian.lattice) == "120":
            return "complex"
        if self.init_scale(hamiltonian.lattice, hamiltonian) is not None:
            # frustrated lattices, from a random start: a free phase went far lower than
            # the signed network in short runs on 12-site triangular and kagome clusters
            return "complex"
        return "signed"  # a real Hamiltonian, a sector with characters 1: a real ground state

    def init_scale(self, lattice, hamiltonian) -> float | None:
        """The network's readout initialization: None (nearly uniform, the library's
        default) unless a Heisenberg / J1-J2 model without a sign rule lives on a
        triangular or kagome lattice: there the uniform state of the Sz = 0 sector is
        in the ferromagnetic multiplet, the highest eigenstate, where the energy
        gradient vanishes, so the network starts from a random state
        (:data:`FRUSTRATED_INIT_SCALE`). With the 120-degree phase rule the uniform state
        is the coplanar ordered state instead, a good start: None there."""
        if (self.hamiltonian == "tfim" or getattr(hamiltonian, "marshall_sign", False)
                or self.phase_rule_kind(lattice) == "120"):
            return None
        return FRUSTRATED_INIT_SCALE if lattice.frustrated else None

    def reference_energy(self, lattice=None, hamiltonian=None) -> float | None:
        """The exact energy of the whole space's ground state (the summary's relative error
        is against it): a literature value (:data:`quantax_lite.references.LITERATURE`), else sparse
        diagonalization of the whole Sz = 0 space (every configuration for tfim) up to
        :data:`MAX_ED_SITES` sites, or up to 24 where :meth:`sector_choice` diagonalized it,
        else a value of the table :data:`quantax_lite.references.ENERGY_PER_SITE`, else None. Whether the network's sector holds that ground state,
        and its own lowest energy where not: :meth:`sector_energy`, :meth:`sector_summary`."""
        return self._reference(lattice, hamiltonian)[0]

    def reference_source(self, lattice=None, hamiltonian=None) -> str | None:
        """Where :meth:`reference_energy` comes from, in words (None without one)."""
        return self._reference(lattice, hamiltonian, energy=False)[1]

    def _reference(self, lattice, hamiltonian, energy: bool = True) -> tuple:
        """(energy or None, source) of :meth:`reference_energy`; ``energy=False`` skips the
        diagonalization and gives the source only."""
        lattice = parse_lattice(self.lattice) if lattice is None else lattice
        key = (lattice.name, self.hamiltonian, float(self._system_key(lattice)[2]) if self.hamiltonian == "j1j2"
               else 0.0)
        if key in references.LITERATURE:
            return references.energy_per_site(*key) * lattice.n_sites, references.source(*key)
        system = self._system_key(lattice)
        choice = self.sector_choice(lattice) if lattice.n_sites <= MAX_SEARCH_SITES else None
        if lattice.n_sites <= MAX_ED_SITES or (choice is not None and choice.ground_energy is not None):
            whole = "every configuration" if self.hamiltonian == "tfim" else "the whole Sz = 0 space"
            source = f"exact diagonalization (scipy eigsh) of this lattice, without a symmetry sector ({whole})"
            if choice is not None and choice.holds_ground_state:
                source += f"; the symmetry sector of the network holds its ground state ({choice.chosen_by})"
            elif choice is not None and choice.holds_ground_state is False:
                source += "; the symmetry sector of the network lies higher (sector_energy)"
            if choice is not None and choice.ground_energy is not None:
                return choice.ground_energy, source
            return (_whole_space_ground(system)[0] if energy else None), source
        per_site = references.energy_per_site(*key)
        if per_site is None:
            return None, None
        return per_site * lattice.n_sites, references.source(*key)

    def sector_energy(self, lattice=None, hamiltonian=None) -> float | None:
        """The lowest energy of the network's sector (the group of the last stage with its
        characters, :meth:`sector_choice`): the whole space's where the sector holds its
        ground state (a sign rule's positive ground state, or found by diagonalization),
        else sparse diagonalization in the sector up to :data:`MAX_ED_SITES` sites; None
        beyond (or with symmetry 'none': no sector, the whole space)."""
        lattice = parse_lattice(self.lattice) if lattice is None else lattice
        choice = self.sector_choice(lattice)
        if choice.sector_energy is not None:
            return choice.sector_energy
        if choice.symmetry == "none" or (choice.holds_ground_state and choice.chosen_by == "lattice"):
            return self.reference_energy(lattice) if lattice.n_sites <= MAX_ED_SITES else None
        if lattice.n_sites > MAX_ED_SITES:
            return None
        return _sector_energy(self._system_key(lattice), choice.symmetry, choice.fields)

    def sector_summary(self, lattice=None, hamiltonian=None) -> dict:
        """What a run's summary says of its sector: ``{"sector": {symmetry, momentum (the
        integers m_d, also at k = 0), spin_parity (None: not imposed), rotation_parity,
        chosen_by ('exact diagonalization', 'lattice' or 'user'), reason,
        holds_ground_state (None: unknown), lowest_energy (the sector's, None: unknown)},
        "sector_energy": the sector's lowest energy where it lies above the whole space's
        ground state (:meth:`reference_energy`), else None}``."""
        lattice = parse_lattice(self.lattice) if lattice is None else lattice
        choice = self.sector_choice(lattice)
        exact = self.reference_energy(lattice)
        lowest = self.sector_energy(lattice)
        holds = choice.holds_ground_state
        if holds is None and lowest is not None and exact is not None:
            holds = bool(abs(lowest - exact) <= 1e-9 * max(1.0, abs(exact)))
        return {"sector": {**choice.as_json(), "holds_ground_state": holds, "lowest_energy": lowest},
                "sector_energy": lowest if holds is False else None}

    def config(self) -> dict:
        """The fields as plain JSON values (the lattice by name), e.g. for a checkpoint: every
        'auto' as :meth:`resolved` decides it, so that a run reloads as the same run
        (``Recipe(**recipe.config()) == recipe``)."""
        recipe = self._resolved_or_self()
        out = dataclasses.asdict(recipe)
        out["lattice"] = parse_lattice(recipe.lattice).name
        if isinstance(out["momentum"], tuple):
            out["momentum"] = list(out["momentum"])
        return out

    def _resolved_or_self(self) -> "Recipe":
        """:meth:`resolved`, or the recipe as it is where its sector cannot be formed on its
        lattice (:func:`build` then names the field)."""
        try:
            return self.resolved()
        except (TypeError, ValueError):
            return self

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


def _sector_group(lattice, name: str, momentum=None, parity: int | None = None, rotation: int | None = None):
    """The group of the symmetry ``name`` ('none', 'translations', 'full') in a sector:
    ``momentum`` a Cartesian wave vector or None (k = 0); ``parity`` the character of spin
    inversion, or None (+1 with 'full', no spin inversion with 'translations'); ``rotation``
    the point group's irrep with 'full' (:func:`~quantax_lite.symmetry.rotation_characters`;
    None: +1, ignored by the other groups). 'full' with ``k != 0`` keeps the little group
    of ``k`` (:func:`~quantax_lite.symmetry.full_symmetry`).
    None for 'none' (ValueError naming ``momentum`` / ``spin_parity`` if they are set)."""
    from . import symmetry as sym

    if name == "none":
        if momentum is not None:
            raise ValueError("momentum: symmetry 'none' has no translations, so no momentum sector")
        if parity is not None:
            raise ValueError("spin_parity: symmetry 'none' projects on no group")
        return None
    if name == "translations":
        group = sym.translations(lattice, momentum)
        return group if parity is None else sym.product(group, sym.spin_inversion(lattice, parity))
    if name == "full":
        return sym.full_symmetry(lattice, momentum, 1 if parity is None else parity,
                                 1 if rotation is None else rotation)
    raise ValueError(f"symmetry: expected one of {SYMMETRIES}, got {name!r}.")


def _is_auto(value) -> bool:
    return isinstance(value, str) and value == AUTO


def _hashable(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return tuple(_hashable(v) for v in value) if isinstance(value, (list, tuple)) else value


def _wave_vector(lattice, m):
    """The Cartesian ``k = sum_d m_d b_d / L_d`` of the integers ``m`` (float64 ``(ndim,)``),
    or None for ``m`` None or ``k = 0`` (every ``m_d`` a multiple of ``L_d``)."""
    if m is None or not any(int(x) % L for x, L in zip(m, lattice.shape)):
        return None
    # reduced mod L_d in integers first (a float64 of a huge m_d would round to another one)
    m = np.asarray([int(x) % int(L) for x, L in zip(m, lattice.shape)], np.float64)
    return (m / np.asarray(lattice.shape, np.float64)) @ lattice.reciprocal_vectors


def _hamiltonian(lattice, name: str, coupling: float, marshall: bool):
    """The Hamiltonian of :meth:`Recipe._system_key`: tfim with field ``coupling`` (in the
    sign-rule basis), else Heisenberg with ``J2 = coupling`` and the Marshall sign or not."""
    from .operators import Heisenberg, TransverseFieldIsing

    if name == "tfim":
        # for h < 0 the basis rotated by prod sz (same spectrum) makes the ground state positive
        return TransverseFieldIsing(lattice, J=1.0, h=coupling, sign_rule=True)
    return Heisenberg(lattice, J1=1.0, J2=coupling, marshall_sign=marshall)


def _sign_free(system: tuple) -> str | None:
    """Why the ground state of the system of :meth:`Recipe._system_key` is positive in the
    network's basis (so in the sector of characters 1 of every symmetry), or None."""
    lattice, name, coupling, marshall = system
    if name == "tfim":
        return "the transverse-field Ising model in its sign-rule basis has a positive ground state"
    if coupling == 0 and marshall:
        return (f"Marshall's sign rule on the bipartite lattice {lattice.name} makes the ground state positive in "
                "the network's basis")
    return None


@dataclasses.dataclass(frozen=True)
class SectorChoice:
    """The symmetry sector of a recipe's network and how it was chosen (:meth:`Recipe.sector_choice`).

    momentum, spin_parity, rotation_parity: the recipe's fields (None: k = 0; spin parity not
    imposed with translations, +1 with full; rotation parity +1). symmetry: the group of the
    last stage ('none', 'translations', 'full'); ndim: the lattice's. chosen_by: 'user' (every
    field that matters given, or no group), 'lattice' (a sign rule's positive ground state,
    or no diagonalization above :data:`~quantax_lite.ground_sector.MAX_SEARCH_SITES` sites) or
    'exact diagonalization'; reason: why, in words. ground_energy: the whole space's lowest
    energy where it was diagonalized, else None; sector_energy: the sector's lowest where
    known, else None; holds_ground_state: whether the sector holds the whole space's ground
    state (None: not known)."""

    momentum: tuple | None
    spin_parity: int | None
    rotation_parity: int | None
    symmetry: str
    ndim: int
    chosen_by: str
    reason: str
    ground_energy: float | None = None
    sector_energy: float | None = None
    holds_ground_state: bool | None = None

    @property
    def fields(self) -> tuple:
        """``(momentum, spin_parity, rotation_parity)`` as the recipe's fields take them."""
        return self.momentum, self.spin_parity, self.rotation_parity

    def as_json(self) -> dict:
        """The sector in plain values: momentum the integers m_d (zeros at k = 0; None
        without translations), the parities +1 / -1 (None: not imposed)."""
        has_translations = self.symmetry in ("translations", "full")
        m = (list(self.momentum) if self.momentum is not None else [0] * self.ndim) if has_translations else None
        full = self.symmetry == "full"
        p = (self.spin_parity or 1) if full else self.spin_parity if has_translations else None
        r = (self.rotation_parity or 1) if full else None
        return {"symmetry": self.symmetry, "momentum": m, "spin_parity": p, "rotation_parity": r,
                "chosen_by": self.chosen_by, "reason": self.reason}

    def describe(self) -> str:
        """'momentum (2, 0), spin parity not imposed' and the like."""
        j = self.as_json()
        if j["momentum"] is None:
            return "none (symmetry 'none': the whole space)"
        parts = ["momentum (" + ", ".join(str(x) for x in j["momentum"]) + ")"]
        parts.append("spin parity " + ("not imposed" if j["spin_parity"] is None else f"{j['spin_parity']:+d}"))
        if j["rotation_parity"] is not None:
            parts.append(f"rotation parity {j['rotation_parity']:+d}")
        return ", ".join(parts) + f" (symmetry {self.symmetry})"


@functools.lru_cache(maxsize=1)
def _whole_space_ground(system: tuple):
    """:func:`~quantax_lite.ground_sector.whole_space_ground_state` of the system of
    :meth:`Recipe._system_key`, kept for the last system asked (the search and the reference
    energy share one diagonalization)."""
    return whole_space_ground_state(_hamiltonian(*system))


@functools.lru_cache(maxsize=16)
def _sector_energy(system: tuple, stage: str, fields: tuple) -> float:
    """The lowest energy in the sector ``fields`` of the group ``stage`` (sparse diagonalization)."""
    from . import exact

    lattice = system[0]
    m, p, r = fields
    group = _sector_group(lattice, stage, _wave_vector(lattice, m), p, r)
    return float(exact.ground_state_energy(_hamiltonian(*system), symmetry=group))


@functools.lru_cache(maxsize=64)
def _choose_sector(system: tuple, stage: str, momentum, spin_parity, rotation_parity,
                   positive: bool) -> SectorChoice:
    """:meth:`Recipe.sector_choice` of a system (:meth:`Recipe._system_key`), the group of the
    last stage and the sector fields as given; computed once per process for each."""
    from . import symmetry as sym

    lattice = system[0]
    given = (momentum, spin_parity, rotation_parity)
    base = tuple(None if _is_auto(v) else v for v in given)
    has_translations = stage in ("translations", "full") and lattice.pbc
    decide = (_is_auto(momentum) and has_translations, _is_auto(spin_parity) and stage == "full",
              _is_auto(rotation_parity) and stage == "full")

    def choice(fields, by, reason, **known):
        return SectorChoice(*fields, symmetry=stage, ndim=lattice.ndim, chosen_by=by, reason=reason, **known)

    trivial = _wave_vector(lattice, base[0]) is None and base[1] != -1 and base[2] != -1
    if stage == "none":
        return choice(base, "user", "symmetry 'none': the network is projected on no group, so it has no sector")
    if not any(decide):
        return choice(base, "user", "the sector fields given (the others do not apply to this group)")
    if positive:
        return choice(base, "user", "amplitude 'positive': a positive wavefunction lies in the sector of characters 1")
    rule = _sign_free(system)
    if rule:
        return choice(base, "lattice", rule + ", so it has every character 1", holds_ground_state=trivial)
    if lattice.n_sites > MAX_SEARCH_SITES:
        return choice(base, "lattice", f"no exact diagonalization above {MAX_SEARCH_SITES} sites: the sector of "
                      "characters 1 (k = 0, parities +1) for what was auto; the ground state may lie in another")
    ham = _hamiltonian(*system)
    ground = _whole_space_ground(system)
    overlaps = GroundOverlaps(ground[1], ground[2])
    ms = [base[0]]
    if decide[0]:  # the momenta that hold a ground state (translations alone: always one)
        every = momenta(lattice.shape)
        ms = [m for m in every if overlaps.weight(sym.translations(lattice, _wave_vector(lattice, m))) > WEIGHT_TOL]
        ms = ms or every
    ps = [1, -1] if decide[1] else [base[1]]
    rs = [1, -1] if decide[2] else [base[2]]
    candidates = [(m, p, r) for m in ms for p in ps for r in rs]
    found = find_ground_sector(ham, candidates, lambda m, p, r: _sector_group(lattice, stage, _wave_vector(lattice, m),
                                                                             p, r),
                               ground=ground, overlaps=overlaps)
    m, p, r = found.sector
    fields = (None if decide[0] and _wave_vector(lattice, m) is None else m,
              None if decide[1] and p == 1 else p, None if decide[2] and r == 1 else r)
    n_states = len(ground[2])
    if found.holds_ground_state:
        reason = (f"the ground state of the whole Sz = 0 space ({n_states} configurations, E0 = "
                  f"{found.ground_energy:.8f}) lies in this sector")
    else:
        reason = (f"no sector these fields can express holds the ground state of the whole Sz = 0 space (E0 = "
                  f"{found.ground_energy:.8f}); this one has the lowest energy of its own, {found.sector_energy:.8f}")
    return choice(fields, "exact diagonalization", reason, ground_energy=found.ground_energy,
                  sector_energy=found.sector_energy, holds_ground_state=found.holds_ground_state)


class Run(NamedTuple):
    """What :func:`build` makes: the pieces of one run and its first state."""

    recipe: Recipe
    lattice: Lattice
    hamiltonian: Any
    symmetry: Any
    model: Any
    sampler: Any
    vmc: Any
    state: Any
    n_params: int


def default_chains(samples: int, n_devices: int) -> int:
    """One chain per sample (each records one sample per step: independent samples),
    rounded down to a multiple of the device count (at least one per device)."""
    return max(n_devices, samples // n_devices * n_devices)


def _network(recipe: Recipe, lattice, ham, group, kind: str):
    """The network of ``recipe`` (its registered ``network`` with :meth:`Recipe.network_config`)
    with the head ``kind``, its phase rule and the projection on ``group``."""
    import jax.numpy as jnp

    from .models import make_network

    dtype = jnp.float32 if recipe.precision == "f32" else jnp.float64
    readout = "origin" if recipe.momentum_readout == "origin" and recipe.has_momentum() else None
    return make_network(lattice, group, recipe.network, recipe.network_config(lattice), amplitude=kind,
                        readout=readout, site_phases=recipe.site_phases(lattice),
                        final_scale=recipe.init_scale(lattice, ham), dtype=dtype)


def _param_layout(params):
    """``(tree structure, [(shape, dtype name), ...])`` of a parameter pytree (arrays or
    shape structs): what must agree for parameters to carry over between networks."""
    import jax

    leaves, treedef = jax.tree_util.tree_flatten(params)
    return treedef, [(tuple(x.shape), str(x.dtype)) for x in leaves]


def _check_sector_holds_states(recipe: Recipe, stage: str, lattice, ham, group) -> None:
    """``ValueError`` naming the sector's field when ``group``'s sector holds no state of the
    magnetization sector the run samples (Sz = 0 where ``ham`` conserves Sz): a
    wavefunction with that symmetry would vanish everywhere."""
    if group is None:
        return
    total_sz = 0 if ham.conserves_sz else None
    if group.sector_dimension(total_sz) == 0:
        field = next((f for f in ("spin_parity", "rotation_parity", "momentum") if getattr(recipe, f) is not None),
                     "symmetry")
        where = "with Sz = 0 " if total_sz == 0 else ""
        raise ValueError(f"{field}: the sector of {stage!r} (momentum {recipe.momentum}, spin_parity "
                         f"{recipe.spin_parity}, rotation_parity {recipe.rotation_parity}) holds no state {where}on "
                         f"{lattice.name}: every wavefunction with that symmetry vanishes; choose another sector.")


def _check_stages(recipe: Recipe) -> None:
    """Every stage of a staged ``symmetry`` has the same amplitude kind and parameter
    structure (shapes, dtypes), so its parameters and optimizer state carry over;
    ``ValueError`` naming ``symmetry`` otherwise."""
    import jax
    import jax.numpy as jnp

    shapes = {}
    for name, start in recipe.symmetry_stages():
        lattice, ham, group = recipe.system(start)
        _check_sector_holds_states(recipe, name, lattice, ham, group)
        kind = recipe.amplitude_kind(ham)
        try:
            model = _network(recipe, lattice, ham, group, kind)
        except ValueError as err:
            raise ValueError(f"symmetry: the stage {name!r} of {recipe.symmetry!r} cannot use the {kind} "
                             f"network of the run: {err}") from None
        s = jax.ShapeDtypeStruct((1, lattice.n_sites), jnp.int8)
        params = jax.eval_shape(model.init, jax.random.PRNGKey(0), s)
        shapes[name] = (kind, _param_layout(params))
    first, *rest = shapes.items()
    for name, found in rest:
        if found != first[1]:
            raise ValueError(f"symmetry: {recipe.symmetry!r}: the network of {name!r} has other parameters "
                             f"(or another amplitude kind) than that of {first[0]!r}, so they cannot carry over.")


def build(recipe: Recipe, iteration: int = 0) -> Run:
    """The model, sampler, driver and first state of ``recipe`` on every device, for the
    stage of its ``symmetry`` at ``iteration`` (:meth:`Recipe.symmetry_at`; the state is
    that of iteration 0 whatever the stage: :func:`switch_stage` carries a run's state over).

    Raises ``ValueError`` naming ``chains`` when the chains cannot be split over the
    devices, naming ``symmetry`` when the stages' networks differ in their parameters.
    Runs with ``jax_enable_x64`` on or off: the SR solve and statistics use float64 on
    CPUs when it is on, float32 otherwise and on accelerators (:mod:`quantax_lite.tuning`).
    """
    import jax
    import jax.numpy as jnp
    import optax

    from .models import count_params
    from .preconditioners import spring, sr
    from .sampler import Exchange, FullSumSampler, LocalFlip, MetropolisSampler
    from .vmc import VMC

    if not isinstance(recipe, Recipe):
        raise TypeError(f"recipe: expected a Recipe, got {type(recipe).__name__}.")
    recipe = recipe.resolved()  # every 'auto' decided once (the sector, network size, optimizer)
    n_devices = jax.device_count()
    chains = recipe.n_chains(n_devices)
    if recipe.sampling == "metropolis":
        if chains % n_devices:
            raise ValueError(f"chains: {chains} must be a multiple of the device count {n_devices} "
                             "(the chains are split over every device).")
        for name, n in (("samples", recipe.samples), ("full_stage_samples", recipe.full_stage_samples),
                        ("eval_samples", recipe.n_eval_samples)):
            if n is not None and n % chains:
                raise ValueError(f"{name}: {n} must be a multiple of chains ({chains}).")
    lattice, ham, group = recipe.system(iteration)
    if len(recipe.symmetry_stages()) > 1:
        _check_stages(recipe)  # every stage, its sector included
    else:
        _check_sector_holds_states(recipe, recipe.symmetry, lattice, ham, group)
    model = _network(recipe, lattice, ham, group, recipe.amplitude_kind(ham))
    k_params, k_chains = jax.random.split(seed_key(recipe.seed))
    params = model.init(k_params, jnp.ones((1, lattice.n_sites), jnp.int8))
    if ham.conserves_sz:
        rule = Exchange(lattice.bonds(1), anti_aligned=True)
        sweep = recipe.sweep_size or max(1, lattice.n_sites // 2)
    else:
        rule, sweep = LocalFlip(), recipe.sweep_size or lattice.n_sites
    # the sampler's calls (one configuration per chain) are chunked only by an int chunk_size
    fixed_chunk = None if recipe.chunk_size in (None, "auto") else recipe.chunk_size
    if recipe.sampling == "exact_sum":
        # one row per orbit of this stage's group (its network is symmetric under it)
        sampler = FullSumSampler(model.apply, lattice.n_sites, total_sz=0 if ham.conserves_sz else None,
                                 symmetry=group, chunk_size=fixed_chunk,
                                 max_states=MAX_EXACT_SUM_STATES)
    else:
        sampler = MetropolisSampler(model.apply, rule, n_chains=chains, n_sites=lattice.n_sites, sweep_size=sweep,
                                    chunk_size=fixed_chunk)
    schedule = recipe.learning_rate(iteration)
    sr_momentum, diag_shift = recipe.optimizer_settings(lattice)
    preconditioner = sr(diag_shift=diag_shift, diag_scale=recipe.diag_scale)
    if sr_momentum:
        preconditioner = spring(preconditioner, sr_momentum)
    n_samples = None if recipe.sampling == "exact_sum" else recipe.samples_at(iteration)
    vmc = VMC(ham, sampler, optax.sgd(schedule), n_samples, preconditioner=preconditioner,
              chunk_size=recipe.chunk_size, memory_budget=recipe.memory_budget)
    return Run(recipe, lattice, ham, group, model, sampler, vmc, vmc.init(k_chains, params), count_params(params))


def switch_stage(run: Run, state, *, thermalize: bool | None = None):
    """``state`` (a :class:`~quantax_lite.vmc.VMCState` of the same recipe, e.g. of its
    previous symmetry stage) continued by ``run`` (:func:`build` of the stage to go on in).

    Kept: the parameters, the optimizer state (the learning-rate schedule's step count
    continues), the preconditioner state, the iteration, the chains' configurations and
    PRNG key. Recomputed with ``run.model``: what the sampler state caches of the
    wavefunction (log psi of the chains' configurations). thermalize: run the sampler's
    thermalization sweeps again before its next samples, so the chains relax to the new
    ``|psi|^2``; default: when a stage of ``run.recipe`` begins at ``state.iteration`` (the
    group has just changed). ``ValueError`` naming ``state`` when its parameters do not fit
    ``run``'s network.
    """
    if _param_layout(state.params) != _param_layout(run.state.params):
        raise ValueError("state: its parameters do not fit the network of the run (another recipe's state?).")
    chains = state.sampler
    if dataclasses.is_dataclass(chains) and hasattr(chains, "log_psi"):  # Metropolis chains cache log psi
        fresh = run.sampler.init(chains.key, state.params, initial_states=chains.states)
        changes = {"log_psi": fresh.log_psi}
        if thermalize is None:
            thermalize = int(state.iteration) in {s for _, s in run.recipe.symmetry_stages() if s > 0}
        if thermalize and hasattr(chains, "thermalized"):
            changes["thermalized"] = fresh.thermalized  # False: thermalized again on the next call
        chains = dataclasses.replace(chains, **changes)
    return state._replace(sampler=chains)


def physical_basis(log_psi, hamiltonian):
    """``(log_psi, hamiltonian)`` in the plain spin basis, for observables that are not
    invariant under the basis rotation a run trains in.

    A Heisenberg / J1-J2 Hamiltonian with ``marshall_sign`` is ``U H U``, ``U = diag(u)``,
    ``u(s) = prod_{i in sublattice 1} s_i``: its wavefunction is ``u(s) psi(s)``, and the
    exchange part of ``<S_i . S_j>`` for ``i``, ``j`` on different sublattices changes sign in
    that basis. Returned then: ``log_psi(params, s) + i pi [u(s) = -1]`` (complex) and the
    Hamiltonian without the rotation (same energies). Otherwise both unchanged (the
    transverse-field Ising rotation ``prod_i sigma^z_i`` flips every ``S^x``, ``S^y``, which
    leaves ``S_i . S_j`` as it is).
    """
    if not getattr(hamiltonian, "marshall_sign", False):
        return log_psi, hamiltonian
    import numpy as np

    sub = tuple(int(i) for i in np.nonzero(np.asarray(hamiltonian.lattice.sublattice) == 1)[0])
    try:  # one function per wavefunction and sublattice: its compiled programs are reused
        plain = _unrotated(log_psi, sub)
    except TypeError:  # an unhashable log_psi
        plain = _unrotated.__wrapped__(log_psi, sub)
    return plain, dataclasses.replace(hamiltonian, marshall_sign=False)


@functools.lru_cache(maxsize=8)
def _unrotated(log_psi, sub: tuple):
    """``log_psi + i pi [prod_{i in sub} s_i = -1]``, jitted."""
    import jax
    import jax.numpy as jnp

    index = jnp.asarray(sub, jnp.int32)

    def plain_log_psi(params, s):
        lp = log_psi(params, s)
        minus = jnp.prod(jnp.asarray(s)[..., index].astype(jnp.int32), axis=-1) < 0
        return lp + jnp.where(minus, 1j * jnp.pi, 0.0).astype(jnp.result_type(lp.dtype, jnp.complex64))

    return jax.jit(plain_log_psi)


class LoadedRun(NamedTuple):
    """What :func:`load_run` returns: the recipe of a run folder, the run it builds, the
    state of the folder's newest readable checkpoint, that checkpoint's metadata and path."""

    recipe: Recipe
    run: Run
    state: Any
    metadata: dict
    path: str


def recipe_of_run(out_dir, *, chunk_size="auto", memory_budget=None) -> tuple[Recipe, str, dict]:
    """The :class:`Recipe` of a ``quantax-lite train`` run folder, read from the metadata
    of its newest readable checkpoint: ``(recipe, checkpoint path, metadata)``.

    chunk_size, memory_budget: how memory is bounded here (not part of the run: a run may
    be continued or measured on another machine). ``ValueError`` naming ``out_dir`` when the
    folder holds no readable checkpoint, or one without a recipe (written by
    :func:`quantax_lite.vmc.run` directly: rebuild its driver and call
    :func:`~quantax_lite.checkpoint.load_latest_checkpoint`).
    """
    import os

    from .checkpoint import list_checkpoints, newest_readable_checkpoint

    out_dir = os.fspath(out_dir)
    if not os.path.isdir(out_dir):
        raise ValueError(f"out_dir: {out_dir} is not a folder.")
    if not list_checkpoints(out_dir):
        raise ValueError(f"out_dir: {out_dir} holds no checkpoint (a run folder of quantax-lite train has "
                         "checkpoint-<step>.npz once its first checkpoint is written).")
    found = newest_readable_checkpoint(out_dir)
    if found is None:
        raise ValueError(f"out_dir: every checkpoint in {out_dir} is damaged.")
    path, metadata = found
    config = metadata.get("config")
    if not isinstance(config, dict) or "lattice" not in config:
        raise ValueError(f"out_dir: {path} records no recipe (written by vmc.run, not by quantax-lite train); "
                         "rebuild its driver and use checkpoint.load_latest_checkpoint.")
    names = {f.name for f in dataclasses.fields(Recipe)} - {"chunk_size", "memory_budget"}
    legacy = sorted(k for k in config if k in OPTIONS_OF_EARLIER_VERSIONS)
    unknown = sorted(k for k in config if k not in names and k not in OPTIONS_OF_EARLIER_VERSIONS
                     and k not in RUN_CONTROL_OPTIONS)
    if unknown:
        raise ValueError(f"out_dir: {path} records the option(s) {', '.join(f'`{k}`' for k in unknown)} "
                         f"({', '.join(f'{k}={config[k]!r}' for k in unknown)}), which this version does not "
                         "know, so it cannot rebuild that run; measure it with the version that made it.")
    if legacy:
        import warnings

        warnings.warn(f"{path}: the run records {', '.join(f'{k}={config[k]!r}' for k in legacy)}, option(s) of an "
                      "earlier version that this one chooses itself (quantax_lite.tuning); ignored.", stacklevel=2)
    fields = {**FIELDS_OF_EARLIER_RUNS, **{k: v for k, v in config.items() if k in names}}
    recipe = Recipe(**fields, chunk_size=chunk_size, memory_budget=memory_budget)
    if "momentum_readout" not in config and not recipe.has_momentum():  # at k = 0 no choice is recorded
        recipe = dataclasses.replace(recipe, momentum_readout=Recipe.momentum_readout)
    return recipe, path, metadata


def load_run(out_dir, *, chunk_size="auto", memory_budget=None) -> LoadedRun:
    """Rebuild a ``quantax-lite train`` run from its folder, through the recipe: the
    :class:`Recipe` its newest readable checkpoint records (:func:`recipe_of_run`), the
    :class:`Run` that :func:`build` makes of it, and that checkpoint's state (parameters,
    optimizer state, chains) in the run's structure and shardings.

    ``state.params`` is the trained wavefunction (``run.model.apply(state.params, s)``);
    ``run.vmc`` and ``state`` continue the training (:func:`~quantax_lite.vmc.run`).
    Errors name ``out_dir`` (see
    :func:`recipe_of_run`); a checkpoint that does not fit the rebuilt run (e.g. another
    device count with a chain count that depends on it) raises ``ValueError``.
    A staged ``symmetry`` (e.g. 'translations>full@200') gives the run of the checkpoint's
    stage (:meth:`Recipe.symmetry_at` its iteration), its state carried over by
    :func:`switch_stage`.
    """
    from .checkpoint import load_latest_checkpoint

    recipe = recipe_of_run(out_dir, chunk_size=chunk_size, memory_budget=memory_budget)[0]
    r = build(recipe)
    state, metadata, path = load_latest_checkpoint(out_dir, r.state)  # a damaged one is skipped
    if len(recipe.symmetry_stages()) > 1:  # every stage has the same state structure
        iteration = int(state.iteration)
        if recipe.symmetry_at(iteration) != recipe.symmetry_at(0):
            r = build(recipe, iteration)
        state = switch_stage(r, state)
    return LoadedRun(recipe, r, state, metadata, path)
