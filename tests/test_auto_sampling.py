"""Right by default on small frustrated clusters: 'auto' sampling and symmetry.

A frustrated model (J1-J2, triangular or kagome Heisenberg) whose Sz = 0 sector holds at
most ``AUTO_EXACT_SUM_STATES`` configurations is summed exactly with the full group unless a
sampling option asks for samples; everything else keeps Metropolis samples and the
translations, as before. References: the whole Sz = 0 space's ground energy by dense
``numpy.linalg.eigh`` of the plain Heisenberg matrix.
"""
import json

import numpy as np
import pytest

from quantax_lite import Recipe
from quantax_lite.hilbert.configurations import all_states, sector_size
from quantax_lite.operators.hamiltonian import Heisenberg
from quantax_lite.recipes import parse_lattice
from quantax_lite.recipes.resolve import AUTO_EXACT_SUM_STATES, SAMPLING_OPTIONS


@pytest.mark.parametrize("lattice, hamiltonian, expected", [
    ("kagome:2x2", "heisenberg", ("exact_sum", "full")),
    ("triangular:4x3", "heisenberg", ("exact_sum", "full")),
    ("chain:12", "j1j2", ("exact_sum", "full")),
    ("4x4", "heisenberg", ("metropolis", "translations")),  # not frustrated: the README's main job
    ("honeycomb:3x2", "heisenberg", ("metropolis", "translations")),  # bipartite
    ("chain:12", "heisenberg", ("metropolis", "translations")),
    ("4x4", "j1j2", ("metropolis", "translations")),  # 12,870 configurations
    ("kagome:2x3", "heisenberg", ("metropolis", "translations")),  # 48,620
])
def test_auto_decides_by_frustration_and_sector_size(lattice, hamiltonian, expected):
    recipe = Recipe(lattice=lattice, hamiltonian=hamiltonian)
    assert (recipe.sampling, recipe.symmetry) == expected
    if expected[0] == "exact_sum":
        assert sector_size(parse_lattice(lattice).n_sites, 0) <= AUTO_EXACT_SUM_STATES


def test_a_sampling_option_or_an_explicit_choice_is_kept():
    """Any option only samples have makes 'auto' Metropolis with the translations; a given
    sampling or symmetry is kept; the recorded config holds the decision and reloads equal."""
    values = {"chains": 64, "sweep_size": 6, "eval_samples": 2048, "full_stage_samples": 512}
    for name in SAMPLING_OPTIONS:
        extra = {"symmetry": "translations>full@10"} if name == "full_stage_samples" else {}
        recipe = Recipe(lattice="kagome:2x2", **{name: values[name]}, **extra)
        assert recipe.sampling == "metropolis", name
    powered = Recipe(lattice="kagome:2x2", sampling_power=0.5)
    assert (powered.sampling, powered.symmetry) == ("metropolis", "translations")
    assert Recipe(lattice="kagome:2x2", sampling="metropolis").symmetry == "translations"
    assert Recipe(lattice="kagome:2x2", symmetry="translations").sampling == "exact_sum"
    assert Recipe(lattice="4x4", sampling="exact_sum").symmetry == "translations"
    recipe = Recipe(lattice="kagome:2x2")
    config = json.loads(json.dumps(recipe.config()))
    assert (config["sampling"], config["symmetry"]) == ("exact_sum", "full")
    assert Recipe(**config) == recipe
    with pytest.raises(ValueError, match="^sampling: expected one of"):
        Recipe(lattice="kagome:2x2", sampling="exact")


def test_the_command_samples_when_asked_for_samples():
    """On the command, --samples asks for samples: 'auto' sampling is then Metropolis with
    the translations; without it, the exact sum with the full group."""
    from quantax_lite.cli.command import build_parser, recipe_of_args

    parse = build_parser().parse_args
    asked = recipe_of_args(parse(["train", "--lattice", "kagome:2x2", "--samples", "64"]))
    assert (asked.sampling, asked.symmetry, asked.samples) == ("metropolis", "translations", 64)
    default = recipe_of_args(parse(["train", "--lattice", "kagome:2x2"]))
    assert (default.sampling, default.symmetry) == ("exact_sum", "full")
    summed = recipe_of_args(parse(["train", "--lattice", "kagome:2x2", "--sampling", "exact_sum", "--samples", "64"]))
    assert summed.sampling == "exact_sum"  # refused by the command with one line (test_option_errors)


@pytest.mark.slow  # two trainings from the command with every default (about 25 s each)
@pytest.mark.parametrize("lattice, bound", [("kagome:2x2", 1e-2), ("triangular:4x3", 7.3e-4)])
def test_defaults_reach_the_ground_state(tmp_path, lattice, bound):
    """`quantax-lite train --lattice L` with all defaults ends within ``bound`` of the whole
    Sz = 0 space's ground energy (dense reference): kagome:2x2 within 1e-2 (3.2e-2 with the
    sampled defaults of before), triangular:4x3 no worse than its sampled 7.3e-4."""
    from quantax_lite.cli.command import main

    out = tmp_path / "run"
    assert main(["train", "--lattice", lattice, "--out", str(out), "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    lat = parse_lattice(lattice)
    e0 = float(np.linalg.eigvalsh(Heisenberg(lat, marshall_sign=False).to_sparse(all_states(lat.n_sites, 0))
                                  .toarray())[0])
    assert summary["energy"] >= e0 - 1e-9
    assert (summary["energy"] - e0) / abs(e0) < bound, summary["energy"]


@pytest.mark.slow  # two short trainings from the command (about 40 s)
def test_a_run_made_before_auto_resumes_with_its_own_sampling(tmp_path):
    """A kagome:2x2 run made with the sampled defaults of before (Metropolis, translations,
    recorded so) resumes without those options: 'auto' takes the run's own, not exact sums."""
    from quantax_lite.cli.command import build_parser, main, recipe_of_args
    from quantax_lite.recipes import recipe_of_run

    out = str(tmp_path / "run")
    common = ["train", "--lattice", "kagome:2x2", "--channels", "2", "--depth", "1", "--out", out, "--no-progress"]
    assert main(common + ["--symmetry", "translations", "--sampling", "metropolis", "--iters", "1"]) == 0
    resumed = recipe_of_args(build_parser().parse_args(common + ["--iters", "2", "--resume"]))
    assert (resumed.sampling, resumed.symmetry) == ("metropolis", "translations")
    assert main(common + ["--iters", "2", "--resume"]) == 0
    recorded = recipe_of_run(out)[0]
    assert (recorded.sampling, recorded.symmetry) == ("metropolis", "translations")
    # a new run in another folder decides afresh
    fresh = recipe_of_args(build_parser().parse_args(common[:-3] + ["--out", str(tmp_path / "new")]))
    assert (fresh.sampling, fresh.symmetry) == ("exact_sum", "full")
