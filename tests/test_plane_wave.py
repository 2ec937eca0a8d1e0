"""The plane-wave readout: a network that is a momentum eigenstate by construction.

References: translations and momentum characters written from the sites' positions
(``test_bravais_models.group``), the explicit group sum of the unmerged base network,
and the parameter count formula.
"""
import itertools
import json
import os

import jax
import numpy as np
import pytest
from test_bravais_models import (KEY, assert_log_close, cell_translation, explicit_sum, generic_spins, group,
                                 random_params)
from test_cli import edit_run_config

from quantax_lite import Recipe
from quantax_lite.cli.command import main
from quantax_lite.geometry.lattice import Chain, Kagome, Square, Triangular
from quantax_lite.models import ConvResNet, conv_param_count, count_params, make_conv_nqs
from quantax_lite.models.factory import plane_wave_phases
from quantax_lite.recipes import load_run, make_run_network as _network
from grid import keeping

CASES = {"kagome:2x3 k=b1/2": (lambda: Kagome(2, 3), (1, 0)), "triangular:4x3 k=b1/2": (lambda: Triangular(4, 3), (2, 0)),
         "square:4x4 k=(1,3)": (lambda: Square(4), (1, 3)), "triangular:3x3 k=(1,2)": (lambda: Triangular(3), (1, 2))}


@pytest.mark.parametrize("name", keeping(sorted(CASES), keep=(0, 2)))
def test_plane_wave_base_is_a_momentum_eigenstate(rng, name):
    """psi_0(T_r s) = conj(chi_r) psi_0(s) for every cell translation T_r, with chi_r =
    exp(2 pi i m.r / L) the character of the sector (complex on 4x4 and 3x3), for random
    parameters; and the merged projection equals the explicit sum over every element."""
    make, m = CASES[name]
    lattice = make()
    table = group(lattice, momentum=m, parity=-1)
    model = make_conv_nqs(lattice, table, channels=3, depth=1, kernel_size=3)
    assert model.base.readout == "plane_wave" and model.n_elements == len(table.perms) // lattice.n_cells
    s = generic_spins(rng, table, 4)
    params = random_params(model, s, rng)
    base = jax.jit(lambda x: model.base.apply({"params": params["params"]["base"]}, x))
    log0 = np.asarray(base(s))
    for r in itertools.product(*(range(n) for n in lattice.shape)):
        chi = np.exp(2j * np.pi * np.dot(np.asarray(m) / np.asarray(lattice.shape), r))
        moved = np.asarray(base(s[:, cell_translation(lattice, r)]))
        assert_log_close(moved, log0 + np.log(np.conj(chi)), 1e-9)
    assert_log_close(np.asarray(jax.jit(model.apply)(params, s)), explicit_sum(model, params, table, s), 1e-9)


def test_plane_wave_phases_need_every_translation_with_a_momentum():
    lattice = Kagome(2, 3)
    table = group(lattice, momentum=(1, 0))
    phi, lam = plane_wave_phases(lattice, (table.perms, table.flips, table.characters))
    assert phi.shape == (6,) and np.allclose(np.abs(lam), 1)
    t01 = [i for i, (p, f) in enumerate(zip(table.perms, table.flips))
           if f == 1 and np.array_equal(p, cell_translation(lattice, (0, 1)))]
    keep = np.arange(len(table.perms)) != t01[0]  # one translation missing
    assert plane_wave_phases(lattice, (table.perms[keep], table.flips[keep], table.characters[keep])) is None
    bad = table.characters.copy()
    bad[t01[0]] *= 1j  # not a representation of the translations
    assert plane_wave_phases(lattice, (table.perms, table.flips, bad)) is None


def test_plane_wave_parameters_and_errors(rng):
    """Readout C -> 4 (two complex outputs per cell); bad combinations name the argument."""
    for lattice in (Square(4), Kagome(2, 3), Chain(8)):
        model = ConvResNet(lattice.shape, channels=5, depth=2, kernel_size=3, n_basis=lattice.n_basis,
                           readout="plane_wave")
        shapes = jax.eval_shape(model.init, KEY, np.ones((1, lattice.n_sites), np.int8))
        assert count_params(shapes) == conv_param_count(len(lattice.shape), 5, 2, 3, n_basis=lattice.n_basis,
                                                        readout="plane_wave")
    with pytest.raises(ValueError, match="^readout: 'plane_wave' needs a complex network"):
        ConvResNet((4,), readout="plane_wave", signed=True)
    with pytest.raises(ValueError, match="^readout: 'plane_wave' needs a complex network"):
        ConvResNet((4,), readout="plane_wave", complex_output=False)
    with pytest.raises(ValueError, match="^cell_phases: only the 'plane_wave' readout"):
        ConvResNet((4,), cell_phases=np.zeros(4))
    with pytest.raises(ValueError, match="^cell_phases: expected 4 finite angles"):
        ConvResNet((4,), readout="plane_wave", cell_phases=np.zeros(3))
    with pytest.raises(ValueError, match="^momentum_readout: "):
        Recipe(momentum_readout="sum")


def test_recipe_momentum_readout():
    """plane_wave by default in a nonzero-momentum sector, origin on request; at k = 0 the
    option changes nothing (the translation-invariant sum)."""
    recipe = Recipe(lattice="kagome:2x3", momentum=(1, 0), spin_parity=-1)
    lattice, ham, group_ = recipe.system()
    kind = recipe.amplitude_kind(ham)
    assert recipe.has_momentum() and _network(recipe, lattice, group_, kind).base.readout == "plane_wave"
    old = Recipe(lattice="kagome:2x3", momentum=(1, 0), spin_parity=-1, momentum_readout="origin")
    assert _network(old, lattice, group_, kind).base.readout == "origin"
    for readout in ("plane_wave", "origin"):
        zero = Recipe(lattice="kagome:2x3", momentum=(0, 0), momentum_readout=readout)
        assert not zero.has_momentum()
        lattice, ham, g0 = zero.system()
        assert _network(zero, lattice, g0, zero.amplitude_kind(ham)).base.readout == "sum"


@pytest.mark.slow  # three trainings from the command; a changed option on resume is refused by test_resume_options.py's
def test_a_run_from_before_the_plane_wave_readout_resumes_only_with_origin(tmp_path, capsys):
    """A nonzero-momentum run made before the option (its network: the origin readout)
    is refused naming --momentum-readout when given plane_wave, resumes with its own
    (origin) when it is left out, and load_run rebuilds its network; a new run records
    plane_wave."""
    out = str(tmp_path / "run")
    base = ["train", "--lattice", "chain:6", "--momentum", "3", "--channels", "2", "--depth", "1", "--samples", "32",
            "--chains", "32", "--eval-samples", "32", "--no-progress", "--out", out]
    assert main(base + ["--iters", "1", "--momentum-readout", "origin"]) == 0
    assert edit_run_config(out, lambda config: config.pop("momentum_readout"))["momentum_readout"] == "origin"
    assert load_run(out).run.model.base.readout == "origin"
    capsys.readouterr()
    assert main(base + ["--iters", "2", "--resume", "--momentum-readout", "plane_wave"]) == 2
    err = capsys.readouterr().err
    assert "--momentum-readout plane_wave (was origin)" in err and "Traceback" not in err
    assert main(base + ["--iters", "2", "--resume"]) == 0  # left out: the run's own, origin
    assert main(base + ["--iters", "1", "--restart"]) == 0
    assert load_run(out).run.model.base.readout == "plane_wave"
    assert json.load(open(os.path.join(out, "summary.json")))["momentum_readout"] == "plane_wave"


def test_plane_wave_starts_as_the_origin_readout(rng):
    """At initialization the a_r outputs are 0, so the plane-wave network is the origin
    network whose readout is the plane-wave one's b_r columns (same trunk), times the
    number of cells (each merged image carries the whole translation class)."""
    lattice = Triangular(4, 3)
    table = group(lattice, momentum=(2, 0), parity=1)
    plane = make_conv_nqs(lattice, table, channels=3, depth=1, final_scale=0.3)
    origin = make_conv_nqs(lattice, table, channels=3, depth=1, final_scale=0.3, readout="origin")
    s = generic_spins(rng, table, 4)
    params = plane.init(jax.random.PRNGKey(int(rng.integers(1 << 30))), s)
    kernel = np.asarray(params["params"]["base"]["readout_dense"]["kernel"])
    assert kernel.shape == (3, 4) and np.all(kernel[:, :2] == 0) and np.all(kernel[:, 2:] != 0)
    o_params = jax.tree_util.tree_map(lambda x: x, params)
    o_params["params"]["base"]["readout_dense"]["kernel"] = kernel[:, 2:]
    assert_log_close(np.asarray(plane.apply(params, s)),
                     np.asarray(origin.apply(o_params, s)) + np.log(lattice.n_cells), 1e-9)
