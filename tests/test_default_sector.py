"""Right by default: the recipe's 'auto' sector holds the ground state of the whole space.

References computed here, independently of the search (quantax_lite.exact.ground_sector): the
whole Sz = 0 space's lowest energy by dense ``numpy.linalg.eigh`` of the plain Heisenberg
matrix (no symmetry, no sign rule), and a sector's lowest energy from an explicit dense
projector ``P = (1/|G|) sum_g chi_g E_g`` built by applying every element of the recipe's
group to the basis (the lowest eigenvalue of ``H`` on the range of ``P``).
"""
import json

import numpy as np
import pytest

from quantax_lite import Recipe
from quantax_lite.hilbert.configurations import all_states, states_to_codes
from quantax_lite.models import conv_param_count
from quantax_lite.operators.hamiltonian import Heisenberg
from quantax_lite.recipes import AUTO_FIELDS, FIELDS_OF_EARLIER_RUNS, parse_lattice


def whole_space_energy(lattice) -> float:
    """The lowest energy of the plain Heisenberg model in Sz = 0 (dense eigh)."""
    states = all_states(lattice.n_sites, 0)
    return float(np.linalg.eigvalsh(Heisenberg(lattice, marshall_sign=False).to_sparse(states).toarray())[0])


def dense_sector_energy(hamiltonian, group) -> float:
    """The lowest energy of ``hamiltonian`` on the range of the dense projector of ``group``
    (a range that is not empty)."""
    states = all_states(hamiltonian.n_sites, 0)
    codes = states_to_codes(states)
    order = np.argsort(codes)
    n = len(states)
    P = np.zeros((n, n), complex)
    for g in range(group.n_elements):  # (E_g psi)(s) = psi(g s)
        images = group.flips[g] * states[:, group.perms[g]]
        cols = order[np.searchsorted(codes[order], states_to_codes(images))]
        P[np.arange(n), cols] += group.characters[g] / group.n_elements
    P = (P + P.conj().T) / 2
    assert np.allclose(P @ P, P, atol=1e-10)  # a projector: the characters form a representation
    H = hamiltonian.to_sparse(states).toarray()
    # H on range(P), every state outside it pushed far up (eigenvalues only: no vectors needed)
    shift = 10 * np.abs(H).sum(axis=1).max()
    return float(np.linalg.eigvalsh(P @ H @ P + shift * (np.eye(n) - P))[0])


@pytest.mark.parametrize("name, symmetry", [
    ("triangular:4x3", "translations"), ("triangular:3x4", "translations"), ("triangular:4x3", "full"),
    ("kagome:2x2", "full"), ("honeycomb:2x2", "translations"), ("honeycomb:2x2", "full")])
def test_the_default_sector_holds_the_whole_space_ground_state(name, symmetry):
    """The sector 'auto' picks has the whole space's ground energy (dense references), the
    recipe's reference energy is that energy, and its sector energy too."""
    lattice = parse_lattice(name)
    e0 = whole_space_energy(lattice)
    recipe = Recipe(lattice=name, symmetry=symmetry)
    _, ham, group = recipe.system()
    assert abs(dense_sector_energy(ham, group) - e0) < 1e-9
    assert abs(recipe.reference_energy() - e0) < 1e-9 and abs(recipe.sector_energy() - e0) < 1e-9
    choice = recipe.sector_choice()
    assert choice.holds_ground_state
    if lattice.kind == "honeycomb":  # bipartite: Marshall's rule, no diagonalization
        assert choice.chosen_by == "lattice" and choice.ground_energy is None and recipe.trivial_sector()
    else:
        assert choice.chosen_by == "exact diagonalization" and abs(choice.ground_energy - e0) < 1e-9
    summary = recipe.sector_summary()
    assert summary["sector_energy"] is None and summary["sector"]["holds_ground_state"] is True


def test_triangular_4x3_default_is_not_the_trivial_sector():
    """The ground state of triangular 4x3 lies at k = b1/2 (m = (2, 0)), odd under the
    rotation by pi: the trivial sector (the default before 'auto') lies 0.3 higher, and
    a user's choice of it is kept and reported beside the whole space's energy."""
    lattice = parse_lattice("triangular:4x3")
    e0 = whole_space_energy(lattice)
    auto = Recipe(lattice="triangular:4x3", symmetry="full")
    assert auto.resolved().momentum == (2, 0) and auto.resolved().rotation_parity == -1
    for kwargs in (dict(momentum=None), dict(momentum=(0, 0))):
        user = Recipe(lattice="triangular:4x3", symmetry="translations", **kwargs)
        _, ham, group = user.system()
        e_trivial = dense_sector_energy(ham, group)
        assert e_trivial > e0 + 0.3
        assert user.resolved().momentum == kwargs["momentum"] and user.sector_choice().chosen_by == "user"
        summary = user.sector_summary()
        assert summary["sector"]["holds_ground_state"] is False
        assert abs(summary["sector_energy"] - e_trivial) < 1e-9
        assert abs(user.reference_energy() - e0) < 1e-9  # the relative error stays against the whole space
        assert summary["sector"]["momentum"] == [0, 0] and summary["sector"]["chosen_by"] == "user"


def test_fixed_momentum_with_auto_parities_takes_the_lowest_sector_it_allows():
    """A momentum the user fixes away from the ground state's, with the parities of the full
    group left 'auto': no sector holds the ground state, so the one of the four (spin parity,
    rotation parity) with the lowest energy of its own is taken (dense references of all)."""
    lattice = parse_lattice("triangular:4x3")
    e0 = whole_space_energy(lattice)
    recipe = Recipe(lattice="triangular:4x3", symmetry="full", momentum=(1, 0))
    energies = {}
    for p in (1, -1):
        for r in (1, -1):
            fixed = Recipe(lattice="triangular:4x3", symmetry="full", momentum=(1, 0), spin_parity=p,
                           rotation_parity=r)
            try:
                _, ham, group = fixed.system()
            except ValueError:  # characters this little group does not have
                continue
            if group.sector_dimension(0):
                energies[(p, r)] = dense_sector_energy(ham, group)
    choice = recipe.sector_choice()
    assert choice.chosen_by == "exact diagonalization" and choice.holds_ground_state is False
    best = min(energies.values())
    assert abs(choice.sector_energy - best) < 1e-9 and best > e0 + 1e-3
    assert abs(recipe.sector_summary()["sector_energy"] - best) < 1e-9
    assert recipe.resolved().momentum == (1, 0)


def test_sign_rules_and_large_lattices_choose_without_diagonalization():
    """tfim and Marshall-sign Heisenberg: characters 1 by the lattice's rule; beyond 24 sites
    (triangular 6x6): the trivial sector, said so."""
    for name, kwargs in (("4x4", {}), ("chain:8", {}), ("triangular:3x3", dict(hamiltonian="tfim"))):
        choice = Recipe(lattice=name, symmetry="full", **kwargs).sector_choice()
        assert choice.chosen_by == "lattice" and choice.fields == (None, None, None) and choice.holds_ground_state
    big = Recipe(lattice="triangular:6x6", symmetry="full").sector_choice()
    assert big.chosen_by == "lattice" and big.fields == (None, None, None) and big.holds_ground_state is None
    assert "no exact diagonalization above 24 sites" in big.reason
    # the Marshall rule off on the bipartite 4x2 cluster: found by diagonalization instead (plain basis)
    plain = Recipe(lattice="4x2", symmetry="full", marshall=False)
    assert plain.sector_choice().chosen_by == "exact diagonalization"
    _, ham, group = plain.system()
    assert abs(dense_sector_energy(ham, group) - whole_space_energy(parse_lattice("4x2"))) < 1e-9


def test_auto_settings_follow_the_measured_rows():
    """Network size and optimizer by Hamiltonian and lattice, as benchmarks/accuracy.py
    measured them; explicit values are kept."""
    cases = {  # (lattice, hamiltonian): ((channels, depth), (sr_momentum, diag_shift))
        ("4x4", "heisenberg"): ((8, 2), (0.0, 1e-4)),
        ("4x4", "j1j2"): ((8, 2), (0.9, 1e-3)),
        ("6x6", "heisenberg"): ((8, 3), (0.0, 1e-4)),
        ("6x6", "j1j2"): ((8, 3), (0.9, 1e-3)),
        ("triangular:6x6", "heisenberg"): ((8, 3), (0.9, 1e-3)),
        ("kagome:2x3", "heisenberg"): ((12, 2), (0.0, 1e-3)),
        ("chain:20", "heisenberg"): ((8, 2), (0.0, 1e-4)),
        ("10x10", "heisenberg"): ((16, 4), (0.0, 1e-4)),
    }
    for (name, ham), (size, optimizer) in cases.items():
        recipe = Recipe(lattice=name, hamiltonian=ham)
        assert recipe.network_size() == size and recipe.optimizer_settings() == optimizer, name
    # the kagome 2x3 row's network: 5,592 parameters (two real outputs per cell)
    assert conv_param_count(2, 12, 2, 3, complex_output=True, n_basis=3) == 5592
    given = Recipe(lattice="6x6", hamiltonian="j1j2", channels=16, depth=4, sr_momentum=0.0, diag_shift=1e-4)
    assert given.network_size() == (16, 4) and given.optimizer_settings() == (0.0, 1e-4)
    assert Recipe(lattice="6x6", channels=None, depth=None).network_size() == (None, None)  # the network's own
    lines = Recipe(lattice="triangular:4x3", symmetry="translations").auto_decisions()
    assert lines[0].startswith("sector momentum (2, 0), spin parity not imposed (symmetry translations): chosen "
                               "by exact diagonalization")
    assert "sr-momentum 0.9, diag-shift 0.001" in lines[1] and "channels 12, depth 2" in lines[1]


def test_config_records_what_auto_decided_and_round_trips():
    """config() holds the decided values (plain JSON), rebuilds an equal recipe with nothing
    'auto' left; the configs of earlier runs (explicit values, no sector fields) load as
    they were."""
    recipe = Recipe(lattice="triangular:4x3", symmetry="full")
    config = json.loads(json.dumps(recipe.config()))
    assert not any(config[k] == "auto" for k in AUTO_FIELDS)
    assert config["momentum"] == [2, 0] and config["spin_parity"] is None and config["rotation_parity"] == -1
    assert (config["channels"], config["depth"], config["sr_momentum"], config["diag_shift"]) == (12, 2, 0.9, 1e-3)
    again = Recipe(**config)
    assert again == recipe and hash(again) == hash(recipe) and again.config() == config
    assert again.resolved() is again and again.sector_choice().chosen_by == "user"
    assert recipe != Recipe(lattice="triangular:4x3", symmetry="full", momentum=None)
    # a run of an earlier version: no sector fields recorded, explicit optimizer and network
    old = {"lattice": "triangular:4x3", "hamiltonian": "heisenberg", "symmetry": "translations", "channels": None,
           "depth": None, "diag_shift": 1e-4, "sr_momentum": 0.0}
    loaded = Recipe(**{**FIELDS_OF_EARLIER_RUNS, **old})
    assert loaded.resolved() is loaded and loaded.trivial_sector()
    assert loaded.network_size() == (None, None) and loaded.optimizer_settings() == (0.0, 1e-4)
    # the command's spelling of auto
    from quantax_lite.cli.command import build_parser

    args = build_parser().parse_args(["train", "--diag-shift", "auto", "--channels", "auto", "--sr-momentum", "0.5"])
    assert args.diag_shift == args.channels == "auto" and args.sr_momentum == 0.5


def test_resolution_errors_name_the_field():
    with pytest.raises(ValueError, match="^spin_parity: expected"):
        Recipe(lattice="4x4", spin_parity=2)
    with pytest.raises(TypeError, match="^spin_parity: expected the int"):
        Recipe(lattice="4x4", spin_parity="odd")
    with pytest.raises(ValueError, match="^sr_momentum: expected a number in"):
        Recipe(lattice="4x4", sr_momentum=1.5)
    with pytest.raises(TypeError, match="^channels: expected"):
        Recipe(lattice="4x4", channels="wide")


@pytest.mark.slow  # a training; the sector's choice: the tests above
def test_a_short_default_run_trains_below_the_trivial_sector():
    """triangular 4x3 with the recipe's defaults (sector, network, optimizer all 'auto'),
    by exact sums: 40 steps take the energy below the lowest energy of the trivial sector,
    which no wavefunction of that sector can reach (dense reference)."""
    import jax

    from quantax_lite.recipes import build
    from quantax_lite.driver.vmc import run

    jax.config.update("jax_enable_x64", True)
    recipe = Recipe(lattice="triangular:4x3", symmetry="translations", sampling="exact_sum", precision="f64", lr=0.05)
    r = build(recipe)
    assert r.recipe.momentum == (2, 0) and r.recipe.sr_momentum == 0.9
    trivial = Recipe(lattice="triangular:4x3", symmetry="translations", momentum=None)
    _, ham, group = trivial.system()
    e_trivial = dense_sector_energy(ham, group)
    e0 = whole_space_energy(parse_lattice("triangular:4x3"))
    _, records = run(r.vmc, r.state, 40, progress=False)
    energies = np.array([rec["energy"] for rec in records])
    assert np.all(energies >= e0 - 1e-9)
    assert energies[-1] < e_trivial - 0.05, (energies[-1], e_trivial, e0)


@pytest.mark.slow  # a training from the command (30 s cold); the sector's choice: the tests above
def test_the_command_says_which_sector_and_records_it(tmp_path, capsys):
    """`quantax-lite train --lattice triangular:4x3` with the defaults: the first printed
    lines name the sector and how it was chosen, summary.json holds it, the relative error is
    against the whole space's ground energy (dense reference), the run folder records the
    decided values (reloaded as the same recipe) and resumes with the same options."""
    from quantax_lite.cli.command import main
    from quantax_lite.recipes import recipe_of_run

    out = str(tmp_path / "run")
    common = ["train", "--lattice", "triangular:4x3", "--symmetry", "translations", "--sampling", "exact_sum", "--out", out, "--channels", "2",
              "--depth", "1", "--checkpoint-every", "1"]
    assert main(common + ["--iters", "2"]) == 0
    err = capsys.readouterr().err
    first = [line for line in err.splitlines() if line.startswith("quantax-lite:")][:3]
    assert any("sector momentum (2, 0), spin parity not imposed (symmetry translations): chosen by exact "
               "diagonalization" in line for line in first), err
    assert any("sr-momentum 0.9, diag-shift 0.001" in line for line in first), err
    with open(f"{out}/summary.json") as fh:
        summary = json.load(fh)
    e0 = whole_space_energy(parse_lattice("triangular:4x3"))
    assert summary["sector"]["momentum"] == [2, 0] and summary["sector"]["chosen_by"] == "exact diagonalization"
    assert summary["sector"]["holds_ground_state"] is True and summary["sector_energy"] is None
    assert abs(summary["exact_energy"] - e0) < 1e-9
    assert summary["relative_error"] == pytest.approx(abs((summary["energy"] - e0) / e0), rel=1e-12)
    recipe, _, metadata = recipe_of_run(out)
    assert metadata["config"]["momentum"] == [2, 0] and metadata["config"]["sr_momentum"] == 0.9
    # (the command records the phase rule 'auto' picked: none on this cluster)
    assert recipe == Recipe(lattice="triangular:4x3", symmetry="translations", sampling="exact_sum", channels=2, depth=1,
                           phase_rule="none")
    assert recipe.resolved() is recipe  # nothing left to decide: the run reloads as it was made
    assert main(common + ["--iters", "3", "--resume", "--no-progress"]) == 0


@pytest.mark.slow
def test_kagome_2x3_default_sector():
    """18-site kagome: 'auto' picks k = b1/2 (m = (1, 0)), and with symmetry full spin parity
    -1 and rotation parity -1; the sector's energy (sparse diagonalization in the sector) is
    the whole space's (Lanczos without symmetry, plain basis), k = 0 lies 0.03 higher."""
    import scipy.sparse.linalg as spla

    from quantax_lite.exact.diagonalization import ground_state_energy

    lattice = parse_lattice("kagome:2x3")
    H = Heisenberg(lattice, marshall_sign=False).to_sparse(all_states(18, 0))
    e0 = float(spla.eigsh(H, k=1, which="SA", v0=np.ones(H.shape[0]) + np.arange(H.shape[0]) * 1e-6,
                          tol=1e-12)[0][0])
    for symmetry, fields in (("translations", ((1, 0), None, None)), ("full", ((1, 0), -1, -1))):
        recipe = Recipe(lattice="kagome:2x3", symmetry=symmetry)
        assert recipe.sector_choice().fields == fields
        _, ham, group = recipe.system()
        assert abs(ground_state_energy(ham, symmetry=group) - e0) < 1e-8
        assert abs(recipe.reference_energy() - e0) < 1e-8
    assert Recipe(lattice="kagome:2x3", momentum=None).sector_energy() > e0 + 0.03
