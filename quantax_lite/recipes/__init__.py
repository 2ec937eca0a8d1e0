"""A complete, fast VMC run from physics-level choices: the library's recipe.

:class:`Recipe` holds what a physicist chooses (lattice, Hamiltonian, symmetry sector,
network size, amplitude kind, samples, optimisation, precision); :func:`build` turns it
into the model, the sampler with its rule and sweep, the driver and its first state.
The ``quantax-lite train`` command is this recipe plus a run folder: its options are the
fields below (``--lr-half-life`` is ``lr_half_life``) with the same defaults, by
construction. How fast the run goes is decided inside the library
(:mod:`quantax_lite.utils.tuning`)::

    import jax; jax.config.update("jax_enable_x64", True)  # float64 SR solve on CPUs
    from quantax_lite import Recipe, build, run
    r = build(Recipe(lattice="4x4", samples=1024))
    state, log = run(r.vmc, r.state, 300)

Energies are in spin-1/2 units (Heisenberg, J1-J2) or Pauli units (tfim).

The package, one concept per module (each imports only those above it):

- :mod:`.fields`: the values fields take and their command-line forms (``parse_symmetry``,
  ``network_option``, ``check_seed``, ...);
- :mod:`.resources`: :class:`Resources`, how a run bounds its memory (``chunk_size``,
  ``memory_budget``), apart from the physics;
- :mod:`.stages`: the stage schedule (group, samples, chains, learning rate per step);
- :mod:`.sector`: symmetry sectors and how an 'auto' one is chosen (:class:`SectorChoice`);
- :mod:`.resolve`: every 'auto' decided, and the checks across fields;
- :mod:`.energies`: reference energies and the sector's lowest energy;
- :mod:`.plan`: :class:`Plan`, every decision of a recipe made once (:func:`make_plan`,
  ``Recipe.plan()``), which :func:`build` reads;
- :mod:`.schema`: the recorded form (``config()``), its version and migrations;
- :mod:`.spec`: :class:`Recipe`, the data, each field checked on its own;
- :mod:`.build`: :func:`build`, :func:`switch_stage`, :class:`Run`, :func:`physical_basis`;
- :mod:`.persist`: run folders read back (:func:`recipe_of_run`, :func:`load_run`);
- :mod:`.presets`: the named recipes of the published accuracy rows.
"""
from __future__ import annotations


from quantax_lite.geometry.lattice import Lattice, parse_lattice
from . import presets
from .assembly import Run, build, make_run_network, physical_basis, switch_stage
from .energies import LITERATURE_ENERGY_PER_SITE, MAX_ED_SITES
from .fields import (AMPLITUDES, AUTO, HAMILTONIANS, MAX_EXACT_SUM_STATES, MOMENTUM_READOUTS, NORMS, PHASE_RULES,
                     PRECISIONS, SAMPLINGS, SEED_LIMIT, SYMMETRIES, check_seed, float_or_auto, int_or_auto,
                     int_or_float, network_option, parity_or_auto, parse_symmetry, seed_key)
from .persist import LoadedRun, load_run, recipe_of_run
from .resolve import AUTO_FIELDS, FRUSTRATED_INIT_SCALE, MEASURED_OPTIMIZER
from .schema import (FIELDS_OF_EARLIER_RUNS, OPTIONS_OF_EARLIER_VERSIONS, RUN_CONTROL_OPTIONS, SCHEMA_VERSION)
from .plan import Plan, make_plan
from .resources import Resources
from .sector import SectorChoice
from .spec import Recipe
from .stages import default_chains

__all__ = ["Recipe", "Run", "build", "parse_lattice", "network_option", "LITERATURE_ENERGY_PER_SITE", "LoadedRun", "load_run",
           "recipe_of_run", "physical_basis", "parse_symmetry", "switch_stage", "SectorChoice", "AUTO_FIELDS",
           "MEASURED_OPTIMIZER", "SCHEMA_VERSION", "presets", "Resources", "Plan", "make_plan"]

