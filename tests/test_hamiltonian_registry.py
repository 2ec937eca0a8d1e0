"""The Hamiltonian registry: a newcomer's model registered in this file (an XXZ chain with a
next-nearest exchange, written through the public Hamiltonian contract, and one
registration) is taken by the recipe as a built-in one is: its coupling field, the Marshall
sign, the sector chosen by the sign rule or by exact diagonalization, the reference energy,
the summary's words and units, the command's choices, and a short run by exact sums to
the exact ground state. Registration in a test does not leak: the fixture unregisters it.
The built-in models' entries decide what the name branches of earlier versions did."""
import argparse
import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from quantax_lite.utils.errors import FieldError
from quantax_lite.exact.diagonalization import ground_state_energy
from quantax_lite.hamiltonians import (
    PAULI_UNITS, SPIN_UNITS, hamiltonian_entry, hamiltonian_names, marshall_rule, register_hamiltonian,
    unregister_hamiltonian,
)
from quantax_lite.hilbert.configurations import all_states
from quantax_lite.geometry.lattice import Chain, Lattice, Square
from quantax_lite.operators.hamiltonian import Heisenberg, SpinHamiltonian, TransverseFieldIsing
from quantax_lite.cli.options import build_parser
from quantax_lite.recipes import Recipe, build
from quantax_lite.cli.report import energy_unit, readable_title, system_title
from quantax_lite.driver.vmc import run


# ---- the new model: a Hamiltonian through the public contract, one registration
@dataclasses.dataclass(frozen=True)
class XXZChain(SpinHamiltonian):
    """Periodic XXZ chain with next-nearest exchange (spin-1/2 units):
    H = sum_i sum_{d = 1, 2} J_d (S^x_i S^x_{i+d} + S^y_i S^y_{i+d} + delta S^z_i S^z_{i+d}),
    J_1 = 1, J_2 = J2; marshall_sign: the basis rotated by prod_{i odd} sigma^z_i (the
    nearest-neighbour exchange elements change sign)."""

    lattice: Lattice
    J2: float = 0.0
    delta: float = 0.5
    marshall_sign: bool = False
    conserves_sz = True

    @property
    def max_conn(self):
        return 1 + 2 * self.lattice.n_sites  # the diagonal, then an exchange per bond (i, i + d)

    def connected(self, s):
        n = self.lattice.n_sites
        s = jnp.asarray(s, jnp.int8)
        sf = s.astype(jnp.result_type(float))
        i = np.arange(n)
        diag, s_conn, mels = 0.0, [s[..., None, :]], []
        for d, J, sign in ((1, 1.0, -1.0 if self.marshall_sign else 1.0), (2, self.J2, 1.0)):
            j = (i + d) % n
            diag = diag + J * self.delta / 4 * jnp.sum(sf[..., i] * sf[..., j], -1)
            flip = np.ones((n, n), np.int8)
            flip[i, i] = flip[i, j] = -1
            mel = jnp.where(s[..., i] != s[..., j], sign * J / 2, 0.0)  # swap an anti-aligned pair
            s_conn.append(jnp.where((mel != 0)[..., None], s[..., None, :] * flip, s[..., None, :]))
            mels.append(mel)
        return jnp.concatenate(s_conn, -2), jnp.concatenate([diag[..., None]] + mels, -1)


def xxz_chain(lattice, J2, marshall):
    return XXZChain(lattice, J2=J2, delta=0.5, marshall_sign=marshall)


XXZ = dict(title="XXZ chain", help="an XXZ chain (delta = 0.5) with next-nearest J2", coupling="J2", default=0.0,
           marshall=True, sign_free=marshall_rule,
           positive=lambda ham: ham.marshall_sign and ham.J2 == 0)
# ---- end of the new model


@pytest.fixture
def xxz():
    register_hamiltonian("xxz_chain", **XXZ)(xxz_chain)
    try:
        yield hamiltonian_entry("xxz_chain")
    finally:
        unregister_hamiltonian("xxz_chain")


def test_the_toy_model_is_the_xxz_model_of_the_library():
    """An independent check of the toy: its matrix is Heisenberg(delta=0.5) with the same J2."""
    lattice, states = Chain(8), all_states(8, 0)
    for J2, marshall in ((0.0, True), (0.3, False)):
        toy = XXZChain(lattice, J2=J2, marshall_sign=marshall)
        ref = Heisenberg(lattice, J2=J2, delta=0.5, marshall_sign=marshall)
        np.testing.assert_allclose(toy.to_dense(states), ref.to_dense(states), atol=1e-12)


def test_a_registered_model_is_a_choice_of_the_recipe_and_the_command(xxz):
    assert hamiltonian_names() == ("heisenberg", "j1j2", "tfim", "xxz_chain")
    assert build_parser().parse_args(["train", "--hamiltonian", "xxz_chain", "--J2", "0.2"]).hamiltonian == "xxz_chain"
    train_help = " ".join(next(a for a in build_parser()._subparsers._actions  # noqa: SLF001
                               if isinstance(a, argparse._SubParsersAction)).choices["train"].format_help().split())
    assert "xxz_chain: an XXZ chain (delta = 0.5) with next-nearest J2" in train_help  # listed with its phrase
    recipe = Recipe(lattice="chain:8", hamiltonian="xxz_chain", J2=0.2)
    lattice, ham, group = recipe.system()
    assert isinstance(ham, XXZChain) and ham.J2 == 0.2 and ham.marshall_sign and group.n_elements == 8
    assert not Recipe(lattice="chain:8", hamiltonian="xxz_chain", marshall=False).system()[1].marshall_sign
    assert Recipe(lattice="chain:8", hamiltonian="xxz_chain").system()[1].J2 == 0.0  # the registered default
    # the coupling field: J2 now belongs to two models, h still to tfim alone
    with pytest.raises(ValueError, match=r"^J2: applies to hamiltonian 'j1j2' or 'xxz_chain' only, not 'tfim'\.$"):
        Recipe(lattice="chain:8", hamiltonian="tfim", J2=0.2)
    with pytest.raises(ValueError, match=r"^h: applies to hamiltonian 'tfim' only, not 'xxz_chain'\.$"):
        Recipe(lattice="chain:8", hamiltonian="xxz_chain", h=0.2)
    with pytest.raises(ValueError, match="^lattice: chain:7 has 7 sites; the xxz_chain model is sampled in the Sz = 0"):
        Recipe(lattice="chain:7", hamiltonian="xxz_chain")
    with pytest.raises(ValueError, match=r"^phase_rule: '120' is a rule for the Heisenberg / J1-J2 models, not for "
                                         r"xxz_chain; use 'none' or 'auto'\.$"):
        Recipe(lattice="triangular:3x3", hamiltonian="xxz_chain", phase_rule="120", marshall=False)
    # the summary's words and units
    assert system_title("xxz_chain", "chain:8", J2=0.2) == "XXZ chain (J2 = 0.2), chain of 8 sites"
    assert readable_title("xxz_chain chain:8, step 5").startswith("XXZ chain, chain of 8 sites, step 5")
    assert energy_unit("xxz_chain") == SPIN_UNITS


def test_the_sector_and_reference_energy_of_a_registered_model(xxz):
    """At J2 = 0 the Marshall sign makes the ground state positive (the sector of
    characters 1, chosen by the lattice, amplitude positive); at J2 = 0.3 the sector is
    found by exact diagonalization of the toy. The reference energy is the toy's exact one."""
    sign_free = Recipe(lattice="chain:8", hamiltonian="xxz_chain", symmetry="full")
    choice = sign_free.sector_choice()
    assert choice.chosen_by == "lattice" and "Marshall's sign rule" in choice.reason
    assert sign_free.amplitude_kind(sign_free.system()[1]) == "positive"
    frustrated = Recipe(lattice="chain:8", hamiltonian="xxz_chain", J2=0.3, symmetry="full")
    choice = frustrated.sector_choice()
    exact = ground_state_energy(Heisenberg(Chain(8), J2=0.3, delta=0.5), total_sz=0)
    assert choice.chosen_by == "exact diagonalization" and choice.holds_ground_state
    assert abs(choice.ground_energy - exact) < 1e-9 and abs(frustrated.reference_energy() - exact) < 1e-9
    assert frustrated.amplitude_kind(frustrated.system()[1]) == "signed"
    assert "the whole Sz = 0 space" in frustrated.reference_source()
    assert frustrated.optimizer_settings() == (0.0, 1e-4) and frustrated.frustration() is None


def test_a_registered_model_trains_to_its_exact_ground_state(xxz):
    """chain:8, J2 = 0 (Marshall basis, positive network), translations, exact sums and
    SR through Recipe + build: within 1e-4 of the exact energy, never below it."""
    recipe = Recipe(lattice="chain:8", hamiltonian="xxz_chain", sampling="exact_sum", precision="f64", lr=0.05,
                    channels=4, depth=1)
    r = build(recipe)
    assert isinstance(r.hamiltonian, XXZChain) and r.recipe.amplitude_kind(r.hamiltonian) == "positive"
    exact = ground_state_energy(r.hamiltonian, total_sz=0)
    assert abs(exact - ground_state_energy(Heisenberg(Chain(8), delta=0.5), total_sz=0)) < 1e-10
    _, records = run(r.vmc, r.state, 150, progress=False)
    energies = np.array([rec["energy"] for rec in records])
    assert np.all(energies >= exact - 1e-9)
    assert (energies[-1] - exact) / abs(exact) < 1e-4, (energies[-1], exact)


def test_registration_does_not_leak_and_unknown_names_are_refused():
    register_hamiltonian("xxz_chain", **XXZ)(xxz_chain)
    try:
        assert Recipe(lattice="chain:8", hamiltonian="xxz_chain").hamiltonian == "xxz_chain"
    finally:
        assert unregister_hamiltonian("xxz_chain").builder is xxz_chain
    for name in ("xxz_chain", "ising", None, ["tfim"]):
        with pytest.raises(ValueError, match=r"^hamiltonian: expected one of \('heisenberg', 'j1j2', 'tfim'\), got ") as err:
            Recipe(hamiltonian=name)
        assert isinstance(err.value, FieldError) and err.value.field == "hamiltonian"
    with pytest.raises(ValueError, match="^hamiltonian: expected one of"):
        hamiltonian_entry("xxz_chain")
    with pytest.raises(ValueError, match="^name: no Hamiltonian 'xxz_chain' is registered"):
        unregister_hamiltonian("xxz_chain")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--hamiltonian", "xxz_chain"])


def test_register_hamiltonian_checks_its_arguments():
    for kwargs, error, match in (
        (dict(name="no good"), ValueError, "^name: expected an identifier"),
        (dict(title=""), ValueError, "^title: expected the model in words"),
        (dict(coupling="J 2"), ValueError, "^coupling: expected the name of a recipe field"),
        (dict(default=float("nan")), TypeError, "^default: expected a finite number"),
        (dict(marshall="yes"), TypeError, "^marshall: expected a bool"),
        (dict(positive=True), TypeError, "^positive: expected a function or None"),
        (dict(help=3), TypeError, "^help: expected a string"),
        (dict(units=""), TypeError, "^units: expected a string"),
    ):
        args = {"name": "bad_toy", "title": "toy", **kwargs}
        with pytest.raises(error, match=match) as err:
            register_hamiltonian(args.pop("name"), **args)
        assert err.value.field == match[1:].split(":")[0]  # errors that name their argument
    with pytest.raises(TypeError, match="^builder: expected a function") as err:
        register_hamiltonian("bad_toy", title="toy")(3)
    assert err.value.field == "builder"
    assert "bad_toy" not in hamiltonian_names()


def test_a_builder_that_breaks_the_contract_is_named():
    register_hamiltonian("broken_toy", title="broken toy")(lambda lattice, coupling, marshall: "H")
    register_hamiltonian("sites_toy", title="toy without a lattice")(
        lambda lattice, coupling, marshall: dataclasses.replace(XXZChain(lattice), lattice=Chain(4)))
    register_hamiltonian("field_toy", title="toy", coupling="delta")(xxz_chain)
    try:
        with pytest.raises(TypeError, match="^hamiltonian: the builder of 'broken_toy' returned str"):
            Recipe(lattice="chain:8", hamiltonian="broken_toy").system()
        with pytest.raises(ValueError, match="^hamiltonian: the builder of 'sites_toy' must give"):
            Recipe(lattice="chain:8", hamiltonian="sites_toy").system()
        with pytest.raises(ValueError, match="^hamiltonian: 'field_toy' takes its coupling from the field 'delta'"):
            Recipe(lattice="chain:8", hamiltonian="field_toy")
    finally:
        for name in ("broken_toy", "sites_toy", "field_toy"):
            unregister_hamiltonian(name)


def test_the_built_in_entries():
    """What the built-in models decide, as the name branches of earlier versions did."""
    heisenberg, j1j2, tfim = (hamiltonian_entry(n) for n in ("heisenberg", "j1j2", "tfim"))
    assert (heisenberg.coupling, j1j2.coupling, tfim.coupling) == (None, "J2", "h")
    assert (heisenberg.default, j1j2.default, tfim.default) == (0.0, 0.5, 1.0)
    assert heisenberg.sz_sector and j1j2.sz_sector and not tfim.sz_sector
    assert heisenberg.marshall and j1j2.marshall and not tfim.marshall
    assert heisenberg.antiferromagnet and j1j2.antiferromagnet and not tfim.antiferromagnet
    assert (heisenberg.frustration, j1j2.frustration, tfim.frustration) == (None, "j1j2", None)
    assert (heisenberg.units, tfim.units) == (SPIN_UNITS, PAULI_UNITS)
    assert j1j2.words(0.5) == "J1-J2 model (J2 = 0.5)" and heisenberg.words() == "Heisenberg model"
    assert tfim.words(1.0, units=True) == "transverse-field Ising model (h = 1, Pauli units)"
    square = Square(4)
    assert heisenberg.why_sign_free(square, 0.0, True).startswith("Marshall's sign rule on the bipartite lattice 4x4")
    assert j1j2.why_sign_free(square, 0.5, True) is None and heisenberg.why_sign_free(square, 0.0, False) is None
    assert "sign-rule basis" in tfim.why_sign_free(square, -1.0, False)
    ham = tfim.build(square, -1.0)
    assert isinstance(ham, TransverseFieldIsing) and ham.sign_rule and ham.field == 1.0 and tfim.picks_positive(ham)
    assert not tfim.picks_positive(TransverseFieldIsing(square, h=-1.0))
    ham = j1j2.build(square, None, True)
    assert isinstance(ham, Heisenberg) and ham.J2 == 0.5 and ham.marshall_sign and not j1j2.picks_positive(ham)
    assert heisenberg.picks_positive(heisenberg.build(square, None, True))


def test_a_registration_that_contradicts_its_hamiltonian_is_refused():
    """What the entry says and what its Hamiltonian does must agree (the sampler follows the
    one, sector sizes and exact sums the other); a model without a coupling takes none; an
    entry's functions key caches, so they must be hashable; its frustration kind must be one
    the optimizer settings know; a model registered again is planned again."""
    register_hamiltonian("sz_liar", title="toy", sz_sector=False)(xxz_chain)  # xxz_chain conserves Sz
    register_hamiltonian("bad_kind", title="toy", coupling="J2", default=0.3, frustration="j1-j2")(xxz_chain)
    try:
        with pytest.raises(ValueError, match=r"^hamiltonian: 'sz_liar' is registered with sz_sector=False"):
            hamiltonian_entry("sz_liar").build(Chain(8))
        with pytest.raises(ValueError, match="^hamiltonian: the model 'heisenberg' has no coupling, got 0.5"):
            hamiltonian_entry("heisenberg").build(Chain(8), 0.5)
        with pytest.raises(ValueError, match="^hamiltonian: the model 'bad_kind' is registered with frustration "):
            Recipe(lattice="chain:8", hamiltonian="bad_kind", J2=0.3).resolved()
    finally:
        unregister_hamiltonian("sz_liar")
        unregister_hamiltonian("bad_kind")

    class Unhashable:
        __hash__ = None

        def __call__(self, lattice, coupling, marshall):
            return xxz_chain(lattice, coupling, marshall)

    with pytest.raises(TypeError, match="^builder: expected a hashable function"):
        register_hamiltonian("unhashable_toy", title="toy")(Unhashable())
    assert "unhashable_toy" not in hamiltonian_names()

    register_hamiltonian("xxz_chain", **XXZ)(xxz_chain)
    try:
        recipe = Recipe(lattice="chain:8", hamiltonian="xxz_chain", channels=2, depth=1)
        first = recipe.plan()
        assert recipe.plan() is first
        register_hamiltonian("xxz_chain", **dict(XXZ, title="XXZ chain, again"))(xxz_chain)
        again = recipe.plan()
        assert again is not first and again.hamiltonian is hamiltonian_entry("xxz_chain")
    finally:
        unregister_hamiltonian("xxz_chain")
