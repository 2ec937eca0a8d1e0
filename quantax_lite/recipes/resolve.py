"""Every 'auto' of a recipe decided, and the checks that involve more than one field.

Functions of a :class:`~quantax_lite.recipes.spec.Recipe` (its methods of the same names call
them): the sector (:func:`sector_choice`), the network's size and options
(:func:`network_size`, :func:`network_config`), the optimizer settings
(:func:`optimizer_settings`), the amplitude kind, the phase rule and the initialization
scale; :func:`~quantax_lite.recipes.plan.make_plan` decides them once into a plan (with the
recipe a run records); :func:`check` runs the cross-field checks a recipe makes on construction."""
from __future__ import annotations

import argparse
import dataclasses
import re

import numpy as np

from quantax_lite.utils.errors import FieldError, FieldTypeError
from quantax_lite.utils.validate import finite_number, positive_int
from quantax_lite.operators import sign_rules
from quantax_lite.hamiltonians import hamiltonian_entry, hamiltonian_names
from quantax_lite.geometry.lattice import parse_lattice
from .fields import AUTO, COUPLINGS, MAX_EXACT_SUM_STATES, is_auto, momentum_text
from quantax_lite.driver.memory import check_budget_applies
from .sector import SectorChoice, choose_sector, sector_group, wave_vector
from .stages import n_eval_samples, symmetry_stages

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


# sampling 'auto' sums exactly over sectors of at most this many configurations on frustrated
# models: kagome:2x2 and triangular:4x3 (924 each) stalled at 3.2e-2 and 7.3e-4 with the sampled
# defaults and reached 3.1e-8 and 2.2e-6 in 11-14 s by exact sums with the full group
# (docs/research_log.md, 2026-12-07); the 4x4 J1-J2 sector (12,870) stays sampled
AUTO_EXACT_SUM_STATES = 4096
# options that only samples have: given one, sampling 'auto' is metropolis
SAMPLING_OPTIONS = ("chains", "sweep_size", "eval_samples", "full_stage_samples")


def decide_sampling(recipe) -> None:
    """Decide 'auto' ``sampling`` and ``symmetry`` in place (at construction: they depend on
    the lattice and model only, and a run records the decision): exact sums
    (``exact_sum``) for a frustrated model (:func:`frustration`) on a periodic lattice whose
    Sz sector holds at most :data:`AUTO_EXACT_SUM_STATES` configurations, with no sampling
    option given and ``sampling_power`` 1, ``metropolis`` otherwise; ``symmetry`` 'full'
    where that exact sum was chosen, 'translations' otherwise."""
    sampling_auto, symmetry_auto = is_auto(recipe.sampling), is_auto(recipe.symmetry)
    if not (sampling_auto or symmetry_auto):
        return
    small_frustrated = False
    try:
        lattice = parse_lattice(recipe.lattice)
        small_frustrated = (lattice.pbc and frustration(recipe, lattice) is not None
                            and sector_states(recipe, lattice) <= AUTO_EXACT_SUM_STATES)
    except (TypeError, ValueError):  # a lattice or coupling the checks below name
        pass
    if sampling_auto:
        sampled = recipe.sampling_power != 1 or any(getattr(recipe, k) is not None for k in SAMPLING_OPTIONS)
        object.__setattr__(recipe, "sampling", "exact_sum" if small_frustrated and not sampled else "metropolis")
    if symmetry_auto:
        full = small_frustrated and recipe.sampling == "exact_sum"
        object.__setattr__(recipe, "symmetry", "full" if full else "translations")


def sector_states(recipe, lattice) -> int:
    """How many configurations the run's Sz sector holds (Sz = 0 for an Sz-conserving model on
    an even number of sites, every configuration otherwise)."""
    from quantax_lite.hilbert.configurations import sector_size

    n = lattice.n_sites
    return sector_size(n, 0 if model_entry(recipe).sz_sector and n % 2 == 0 else None)


def model_entry(recipe):
    """The registered model of ``hamiltonian`` (:func:`~quantax_lite.hamiltonians.hamiltonian_entry`)."""
    return hamiltonian_entry(recipe.hamiltonian)


def coupling(recipe) -> float:
    """The model's coupling: its field (``J2``, ``h``) as given, else the model's default
    (0.0 for a model without one)."""
    entry = model_entry(recipe)
    value = None if entry.coupling is None else getattr(recipe, entry.coupling)
    return float(entry.default if value is None else value)


def check_couplings(recipe) -> None:
    """Each coupling field given only for the model that takes it."""
    entry = model_entry(recipe)
    if entry.coupling is not None and entry.coupling not in COUPLINGS:
        raise FieldError("hamiltonian", f"hamiltonian: {recipe.hamiltonian!r} takes its coupling from the field "
                         f"{entry.coupling!r}, which a recipe does not have (its couplings: {COUPLINGS}).")
    for field in COUPLINGS:
        if getattr(recipe, field) is not None and entry.coupling != field:
            owners = " or ".join(repr(n) for n in hamiltonian_names() if hamiltonian_entry(n).coupling == field)
            raise FieldError(field, f"{field}: applies to hamiltonian {owners or 'none registered'} only, not "
                             f"{recipe.hamiltonian!r}.")


def check(recipe) -> None:
    """The checks of a recipe that involve more than one field (``ValueError`` /
    ``TypeError`` naming a field); normalizes the network options and the sector fields."""
    check_couplings(recipe)
    check_budget_applies(recipe.chunk_size, recipe.memory_budget)
    check_full_stage(recipe)
    lattice = parse_lattice(recipe.lattice)
    check_network(recipe)
    check_exact_sum(recipe, lattice)
    check_sector(recipe, lattice)
    check_phase_rule(recipe, lattice)
    if model_entry(recipe).sz_sector and lattice.n_sites % 2:
        raise FieldError("lattice",
            f"lattice: {lattice.name} has {lattice.n_sites} sites; the {recipe.hamiltonian} model is "
            "sampled in the Sz = 0 sector, which needs an even number of sites."
        )
    n_eval = n_eval_samples(recipe)
    for name, n in (("samples", recipe.samples), ("full_stage_samples", recipe.full_stage_samples)):
        if n is not None and n_eval > n and n_eval % n:
            raise FieldError("eval_samples",
                f"eval_samples: {n_eval} must be a multiple of {name} ({n}): the final estimate is "
                "drawn in blocks of one step's samples."
            )


def check_network(recipe) -> None:
    """``network`` registered; ``network_options`` that network's (``ValueError`` /
    ``TypeError`` starting ``network_options: <option>:``), stored as a plain dict (None
    when empty). The conv network's options are the fields ``channels``, ``depth``,
    ``kernel_size`` and ``norm``: given in ``network_options`` they move there (once); for
    another network those fields keep their defaults (``ValueError`` naming the field)."""
    from quantax_lite.models import network_entry, network_options

    network_entry(recipe.network)
    given = recipe.network_options
    if given is not None and not isinstance(given, dict):
        if not hasattr(given, "items"):
            raise FieldTypeError("network_options", f"network_options: expected a mapping of option names to values, got {given!r}.")
        given = dict(given.items())
    given = dict(given or {})
    network_options(recipe.network, given)  # the network's own check of every option
    defaults = {f.name: f.default for f in dataclasses.fields(type(recipe))}
    if recipe.network == "conv":
        for key in list(given):
            if getattr(recipe, key) != defaults[key]:
                raise FieldError("network_options", f"network_options: {key}: given twice, as the field {key} "
                                 f"({getattr(recipe, key)!r}) and in network_options ({given[key]!r}).")
            object.__setattr__(recipe, key, given.pop(key))
    else:
        for key in ("channels", "depth", "kernel_size", "norm"):
            if getattr(recipe, key) not in (defaults[key], None):
                raise FieldError(key, f"{key}: an option of the conv network, not of {recipe.network!r}; give that "
                                 f"network's options in network_options.")
    object.__setattr__(recipe, "network_options", given or None)


def network_config(recipe, lattice=None) -> dict:
    """The options of the network (``network_options``; for the conv network its fields,
    ``channels`` and ``depth`` as :meth:`network_size` decides an 'auto' one)."""
    if recipe.network != "conv":
        return dict(recipe.network_options or {})
    channels, depth = network_size(recipe, lattice)
    return dict(channels=channels, depth=depth, kernel_size=recipe.kernel_size, norm=recipe.norm)


def check_full_stage(recipe) -> None:
    """``full_stage_samples`` / ``full_stage_lr``: positive, only with a staged symmetry, and
    (with the default chains) ``samples`` and ``full_stage_samples`` multiples of one another."""
    if recipe.full_stage_samples is not None:
        positive_int(recipe.full_stage_samples, "full_stage_samples")
    if recipe.full_stage_lr is not None:
        finite_number(recipe.full_stage_lr, "full_stage_lr", above=0)
    for name in ("full_stage_samples", "full_stage_lr"):
        if getattr(recipe, name) is not None and len(symmetry_stages(recipe)) == 1:
            raise FieldError(name, f"{name}: applies to the full-group stage of a staged symmetry such as "
                             f"'translations>full@200'; symmetry is {recipe.symmetry!r}.")
    m, n = recipe.full_stage_samples, recipe.samples
    if m is not None and recipe.chains is None and max(m, n) % min(m, n):
        raise FieldError("full_stage_samples", f"full_stage_samples: {m} and samples {n}: the larger must be a multiple of the "
                         "smaller, since both stages draw from the same chains, one per sample of the "
                         "smaller count (or give chains).")


def check_exact_sum(recipe, lattice) -> None:
    """With ``sampling`` exact_sum: no sampling options, and a sector small enough to sum."""
    if recipe.sampling != "exact_sum":
        return
    for name in ("chains", "sweep_size", "eval_samples", "full_stage_samples"):
        if getattr(recipe, name) is not None:
            raise FieldError(name, f"{name}: sampling 'exact_sum' draws no samples; leave {name} unset.")
    n_states = sector_states(recipe, lattice)
    if n_states > MAX_EXACT_SUM_STATES:
        raise FieldError("sampling", f"sampling: 'exact_sum' on {lattice.name} would sum over {n_states} configurations, "
                         f"more than {MAX_EXACT_SUM_STATES}; use 'metropolis'.")


def check_sector(recipe, lattice) -> None:
    """Validate (and normalize to a tuple) ``momentum``, ``spin_parity``; ``amplitude``
    'positive' only in the sector of characters 1. An 'auto' field is decided later
    (:meth:`sector_choice`), never here: constructing a recipe diagonalizes nothing."""
    m = recipe.momentum
    if isinstance(m, str) and m.strip() == AUTO:
        m = AUTO
        object.__setattr__(recipe, "momentum", AUTO)
    elif isinstance(m, str):
        try:
            m = momentum_text(m)
        except argparse.ArgumentTypeError as err:
            raise FieldError("momentum", f"momentum: {err}") from None
    if m is not None and m != AUTO:
        if isinstance(m, (int, np.integer)) and not isinstance(m, bool):
            m = (m,)
        m = tuple(m) if isinstance(m, (list, tuple, np.ndarray)) else m
        if (not isinstance(m, tuple) or len(m) != lattice.ndim
                or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in m)):
            raise FieldError("momentum", f"momentum: expected {lattice.ndim} integer(s) m_d (k = sum_d m_d b_d / L_d, on "
                             f"the reciprocal lattice of {lattice.name}), got {recipe.momentum!r}.")
        m = tuple(int(x) for x in m)
        object.__setattr__(recipe, "momentum", m)
    groups = set(re.findall(r"[a-z]+", str(recipe.symmetry)))
    if m != AUTO and sector_momentum(recipe, lattice) is not None:
        if "none" in groups:
            raise FieldError("momentum", f"momentum: {m} needs a group with translations; symmetry is {recipe.symmetry!r}.")
        if not lattice.pbc:
            raise FieldError("momentum", f"momentum: the open lattice {lattice.name} has no translations, so no momentum "
                             f"sector; got {m}.")
    for name in ("spin_parity", "rotation_parity"):
        value = getattr(recipe, name)
        if isinstance(value, str) and value.strip() == AUTO:
            object.__setattr__(recipe, name, AUTO)
            continue
        if value is not None and (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer))):
            raise FieldTypeError(name, f"{name}: expected the int +1 or -1 (or 'auto'), got {value!r}.")
    if recipe.spin_parity not in (None, AUTO):
        if recipe.spin_parity not in (1, -1):
            raise FieldError("spin_parity", f"spin_parity: expected +1 or -1, got {recipe.spin_parity!r}.")
        if "none" in groups:
            raise FieldError("spin_parity", f"spin_parity: {recipe.spin_parity} needs a group; symmetry is {recipe.symmetry!r} "
                             "(translations adds spin inversion with this character).")
    if recipe.rotation_parity not in (None, AUTO):
        if recipe.rotation_parity not in (1, -1):
            raise FieldError("rotation_parity", f"rotation_parity: expected +1 or -1, got {recipe.rotation_parity!r}.")
        if "full" not in groups:
            raise FieldError("rotation_parity", f"rotation_parity: {recipe.rotation_parity} sets the characters of the point group, "
                             f"which only symmetry 'full' holds; symmetry is {recipe.symmetry!r}.")
    if recipe.amplitude == "positive" and not given_sector_trivial(recipe, lattice):
        raise FieldError("amplitude", f"amplitude: 'positive' (a real log psi) cannot carry the characters of the sector "
                         f"momentum {m}, spin_parity {recipe.spin_parity}, rotation_parity {recipe.rotation_parity}; use 'complex' or 'signed' (or 'auto').")


def check_phase_rule(recipe, lattice) -> None:
    if recipe.phase_rule != "120":
        return
    if not model_entry(recipe).antiferromagnet:
        models = " / ".join(hamiltonian_entry(n).title.removesuffix(" model") for n in hamiltonian_names()
                            if hamiltonian_entry(n).antiferromagnet)
        raise FieldError("phase_rule", f"phase_rule: '120' is a rule for the {models} models, not for "
                         f"{recipe.hamiltonian}; use 'none' or 'auto'.")
    if recipe.amplitude in ("positive", "signed", "sinh"):
        raise FieldError("phase_rule", f"phase_rule: '120' gives complex amplitudes, which amplitude {recipe.amplitude!r} "
                         "cannot hold; use amplitude 'complex' or 'auto', or phase_rule 'none'.")
    if not sign_rules.phase_rule_fits(lattice):
        raise FieldError("phase_rule", f"phase_rule: '120' needs three sublattices that colour every nearest-neighbour bond "
                         f"of {lattice.name} (triangular clusters: both extents divisible by 3; kagome); "
                         "use 'none' or 'auto'.")


def has_momentum(recipe) -> bool:
    """Whether the sector has a nonzero momentum (where ``momentum_readout`` matters);
    an 'auto' momentum as :meth:`sector_choice` decides it."""
    m = sector_fields(recipe)[0]
    return m is not None and any(int(x) != 0 for x in np.atleast_1d(m))


def phase_rule_kind(recipe, lattice=None) -> str:
    """'120' or 'none': ``phase_rule``, or what 'auto' picks for ``lattice``."""
    if recipe.phase_rule != "auto":
        return recipe.phase_rule
    lattice = parse_lattice(recipe.lattice) if lattice is None else lattice
    if (model_entry(recipe).antiferromagnet and recipe.amplitude in ("auto", "complex")
            and sign_rules.default_rule(lattice) == "120"):
        return "120"
    return "none"


def site_phases(recipe, lattice=None):
    """The network's phase rule, ``(n_sites,)`` radians (:func:`~quantax_lite.operators.sign_rules.sublattice_phases`),
    or None."""
    lattice = parse_lattice(recipe.lattice) if lattice is None else lattice
    return sign_rules.sublattice_phases(lattice) if phase_rule_kind(recipe, lattice) == "120" else None


def sector_momentum(recipe, lattice=None):
    """The Cartesian wave vector ``k = sum_d m_d b_d / L_d`` of ``momentum`` (float64
    ``(ndim,)``), or None for ``k = 0`` (every ``m_d`` a multiple of ``L_d``); an 'auto'
    momentum as :meth:`sector_choice` decides it."""
    lattice = parse_lattice(recipe.lattice) if lattice is None else lattice
    m = recipe.momentum if recipe.momentum != AUTO else sector_fields(recipe, lattice)[0]
    return wave_vector(lattice, m)


def trivial_sector(recipe, lattice=None) -> bool:
    """True when every character of the group is 1 (k = 0, spin and rotation parity not -1);
    'auto' fields as :meth:`sector_choice` decides them."""
    m, p, r = sector_fields(recipe, lattice)
    lattice = parse_lattice(recipe.lattice) if lattice is None else lattice
    return wave_vector(lattice, m) is None and p != -1 and r != -1


def given_sector_trivial(recipe, lattice) -> bool:
    """:meth:`trivial_sector` of the fields as given, an 'auto' one counted as trivial
    (what it becomes where ``amplitude`` is 'positive'); decides nothing."""
    m = None if recipe.momentum == AUTO else recipe.momentum
    return wave_vector(lattice, m) is None and recipe.spin_parity != -1 and recipe.rotation_parity != -1


def frustration(recipe, lattice=None) -> str | None:
    """The kind of frustration that picks the 'auto' optimizer settings
    (:data:`MEASURED_OPTIMIZER`): the model's own with a nonzero coupling ('j1j2': hamiltonian
    j1j2 with J2 != 0), else 'triangular' or 'kagome' (an antiferromagnet, Heisenberg, on
    those lattices), None otherwise (tfim included)."""
    lattice = parse_lattice(recipe.lattice) if lattice is None else lattice
    entry = model_entry(recipe)
    if entry.frustration is not None and entry.frustration not in MEASURED_OPTIMIZER:
        raise FieldError("hamiltonian", f"hamiltonian: the model {entry.name!r} is registered with frustration "
                         f"{entry.frustration!r}; expected one of {[k for k in MEASURED_OPTIMIZER if k]}.")
    if entry.frustration is not None and coupling(recipe) != 0:
        return entry.frustration
    if not entry.antiferromagnet:
        return None
    return lattice.kind if lattice.frustrated and lattice.kind in MEASURED_OPTIMIZER else None


def optimizer_settings(recipe, lattice=None) -> tuple[float, float]:
    """``(sr_momentum, diag_shift)``: each as given, or what 'auto' picks by
    :meth:`frustration` (:data:`MEASURED_OPTIMIZER`)."""
    momentum, shift = MEASURED_OPTIMIZER[frustration(recipe, lattice)]
    return (momentum if is_auto(recipe.sr_momentum) else float(recipe.sr_momentum),
            shift if is_auto(recipe.diag_shift) else float(recipe.diag_shift))


def network_size(recipe, lattice=None) -> tuple[int | None, int | None]:
    """``(channels, depth)`` of the network: each as given (None: the network's own
    default, :func:`~quantax_lite.models.default_conv_architecture`), or what 'auto' picks
    from the measured rows (benchmarks/accuracy.py): up to 20 sites the network's default
    (8 channels, depth 2: the 4x4 and chain rows), but 12 channels on triangular and
    kagome clusters (the kagome 2x3 row, 5,592 parameters); 2D lattices of 21-36 sites 8
    channels, depth 3 (the 6x6 Heisenberg, J1-J2 and triangular rows, which the default
    16 x 4 network lost to within their time budgets); beyond, and chains beyond 20 sites,
    the network's default (16 channels, depth 4)."""
    from quantax_lite.models import default_conv_architecture

    lattice = parse_lattice(recipe.lattice) if lattice is None else lattice
    default = default_conv_architecture(lattice)
    n, two_d = lattice.n_sites, lattice.ndim == 2
    if n <= 20:
        auto = (12, 2) if lattice.frustrated else (8, 2)
    elif n <= 36 and two_d:
        auto = (8, 3)
    else:
        auto = (default["channels"], default["depth"])
    return tuple(a if is_auto(v) else v for v, a in ((recipe.channels, auto[0]), (recipe.depth, auto[1])))


def stage_group(lattice, stage: str, fields: tuple):
    """The group of the stage ``stage`` in the sector ``fields`` (``(momentum, spin_parity,
    rotation_parity)``, decided), or None for 'none'; ``ValueError`` naming ``symmetry``
    when it does not fit the lattice."""
    m, p, r = fields
    try:
        return sector_group(lattice, stage, wave_vector(lattice, m), p, r)
    except ValueError as err:
        raise FieldError("symmetry", f"symmetry: {stage!r} does not fit the lattice {lattice.name}: {err}") from None


def system_key(recipe, lattice) -> tuple:
    """``(lattice, model, coupling, marshall)``: hashable, what the Hamiltonian is made of
    (:func:`~quantax_lite.recipes.sector.hamiltonian_of`): the registered model, its :func:`coupling`, and whether the
    Marshall sign is on (a model it applies to, a bipartite lattice, ``marshall``)."""
    entry = model_entry(recipe)
    marshall = entry.marshall and sign_rules.has_marshall_rule(lattice) and recipe.marshall
    return lattice, entry, coupling(recipe), bool(marshall)


def sector_fields(recipe, lattice=None, hamiltonian=None) -> tuple:
    """``(momentum, spin_parity, rotation_parity)`` as the network's group takes them:
    each as given, or as :meth:`sector_choice` decides an 'auto' one."""
    fields = (recipe.momentum, recipe.spin_parity, recipe.rotation_parity)
    if AUTO not in fields:
        return fields
    return sector_choice(recipe, lattice, hamiltonian).fields


def sector_choice(recipe, lattice=None, hamiltonian=None) -> "SectorChoice":
    """The symmetry sector of the network (:class:`SectorChoice`): the fields as given,
    each 'auto' one decided so that the sector holds the ground state of the whole space.

    With a group that has translations (symmetry translations or full, of the last stage
    of a staged one), an 'auto' momentum is that of the ground state; with symmetry full,
    'auto' spin and rotation parities are its characters (with translations they are not
    imposed: the momentum sector holds the ground state whatever its parity). Decided:
    by the lattice where a sign rule makes the ground state positive in the network's
    basis (tfim; Heisenberg with the Marshall sign): every character 1; by exact
    diagonalization up to :data:`~quantax_lite.exact.ground_sector.MAX_SEARCH_SITES` sites
    (the whole Sz = 0 space once, then the ground state's weight in each candidate
    sector, :func:`~quantax_lite.exact.ground_sector.find_ground_sector`; where no sector the
    fields express holds it, the one with the lowest energy of its own); above that the
    sector of characters 1 (k = 0), which is said. Computed once per process for each
    system and sector fields (the lattice and Hamiltonian default to those of
    :func:`system_key`)."""
    plan = getattr(recipe, "_plan", None)
    if plan is not None:  # planned (plan.make_plan): the sector as it was decided
        return plan.sector
    lattice = parse_lattice(recipe.lattice) if lattice is None else lattice
    stage = symmetry_stages(recipe)[-1][0]
    return choose_sector(system_key(recipe, lattice), stage, recipe.momentum, recipe.spin_parity,
                          recipe.rotation_parity, recipe.amplitude == "positive")


def amplitude_kind(recipe, hamiltonian) -> str:
    """'positive', 'signed' or 'complex': ``amplitude``, or what 'auto' picks for ``hamiltonian``."""
    if recipe.amplitude != "auto":
        return recipe.amplitude
    lattice = hamiltonian.lattice if getattr(hamiltonian, "lattice", None) is not None else parse_lattice(recipe.lattice)
    if not trivial_sector(recipe, lattice):
        # characters other than 1: no positive wavefunction; a free phase (complex
        # characters need one anyway)
        return "complex"
    if model_entry(recipe).picks_positive(hamiltonian):  # a basis that makes the ground state positive
        return "positive"
    if phase_rule_kind(recipe, lattice) == "120":
        return "complex"
    if init_scale(recipe, lattice, hamiltonian) is not None:
        # frustrated lattices, from a random start: a free phase went far lower than
        # the signed network in short runs on 12-site triangular and kagome clusters
        return "complex"
    return "signed"  # a real Hamiltonian, a sector with characters 1: a real ground state


def init_scale(recipe, lattice, hamiltonian) -> float | None:
    """The network's readout initialization: None (nearly uniform, the library's
    default) unless a Heisenberg / J1-J2 model without a sign rule lives on a
    triangular or kagome lattice: there the uniform state of the Sz = 0 sector is
    in the ferromagnetic multiplet, the highest eigenstate, where the energy
    gradient vanishes, so the network starts from a random state
    (:data:`FRUSTRATED_INIT_SCALE`). With the 120-degree phase rule the uniform state
    is the coplanar ordered state instead, a good start: None there."""
    if (not model_entry(recipe).antiferromagnet or getattr(hamiltonian, "marshall_sign", False)
            or phase_rule_kind(recipe, lattice) == "120"):
        return None
    return FRUSTRATED_INIT_SCALE if lattice.frustrated else None

