"""The network contract and registry: a newcomer's network registered in this file (its
options dataclass, a backbone, one decorator line), checked against the contract and
trained by exact sums to the exact ground state; the registered conv, rbm and vit
backbones under the same contract; the conv network of the registry is the one of
make_conv_nqs, parameter for parameter."""
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from quantax_lite.geometry import symmetry as sym
from quantax_lite.exact.diagonalization import ground_state_energy
from quantax_lite.geometry.lattice import Chain, Honeycomb, Kagome, Square, Triangular
from quantax_lite.models import (
    check_network, derivative_form, make_conv_nqs, make_network, network_names, network_options, options_config,
    register_network, sublattice_phases,
)
from quantax_lite.operators.hamiltonian import Heisenberg
from quantax_lite.optimizer.preconditioners import sr
from quantax_lite.sampler import FullSumSampler
from quantax_lite.driver.vmc import VMC


# ---- the new network: an options dataclass, a backbone, one line to register it
@dataclasses.dataclass(frozen=True)
class PairOptions:
    width: int = 6

    def __post_init__(self):
        if isinstance(self.width, bool) or not isinstance(self.width, int) or self.width < 1:
            raise ValueError(f"width: expected a positive int, got {self.width!r}")


class PairFeatures(nn.Module):
    """Features of the whole configuration at one position: tanh(W s + b), (batch, 1, width)."""

    width: int
    dtype: object = jnp.float64
    equivariance = "none"

    @nn.compact
    def __call__(self, s):
        x = jnp.asarray(s).astype(self.dtype)
        return jnp.tanh(nn.Dense(self.width, dtype=self.dtype, param_dtype=self.dtype)(x))[:, None, :]


@register_network("pair_toy", options=PairOptions)
def pair_toy(lattice, options, dtype):
    return PairFeatures(options.width, dtype)
# ---- end of the new network


def exact_sum_energy(lattice, model, ham, group, steps, lr=0.05, seed=0):
    sampler = FullSumSampler(model.apply, lattice.n_sites, total_sz=0, symmetry=group)
    vmc = VMC(ham, sampler, optax.sgd(lr), None, preconditioner=sr(1e-3))
    params = model.init(jax.random.key(seed), jnp.ones((1, lattice.n_sites), jnp.int8))
    state = vmc.init(jax.random.key(1), params)
    for _ in range(steps):
        state, metrics = vmc.step(state)
    return float(np.real(metrics["energy"]))


def test_registered_names_and_options():
    assert {"conv", "rbm", "vit", "pair_toy"} <= set(network_names())
    assert options_config(network_options("conv", {"channels": 4})) == dict(channels=4, depth=None, kernel_size=None,
                                                                            norm="none")
    assert network_options("vit", None).patch == 2 and network_options("pair_toy", {"width": 3}).width == 3


@pytest.mark.parametrize("name, given, error, match", [
    ("conv", {"chanels": 4}, ValueError, "^network_options: chanels: not an option of the network 'conv'"),
    ("conv", {"channels": 2.5}, TypeError, "^network_options: channels: expected int or None"),
    ("conv", {"channels": True}, TypeError, "^network_options: channels: expected int or None"),
    ("conv", {"norm": "batch"}, ValueError, "^network_options: norm: expected one of"),
    ("conv", {"depth": -1}, ValueError, "^network_options: depth"),
    ("vit", {"dim": 6, "heads": 4}, ValueError, "^network_options: heads: 4 must divide dim = 6"),
    ("pair_toy", {"width": 0}, ValueError, "^network_options: width: expected a positive int"),
    ("pair_toy", {"width": [1]}, TypeError, "^network_options: width: expected a plain value"),
    ("pair_toy", [("width", 1)], TypeError, "^network_options: expected a mapping"),
    ("gcnn", {}, ValueError, "^network: expected one of"),
])
def test_options_errors_name_the_option(name, given, error, match):
    with pytest.raises(error, match=match):
        network_options(name, given)


def test_register_network_checks_its_arguments():
    @dataclasses.dataclass(frozen=True)
    class NoDefault:
        width: int

    with pytest.raises(ValueError, match="^options: every option needs a default"):
        register_network("bad", options=NoDefault)
    with pytest.raises(TypeError, match="^options: expected a dataclass type"):
        register_network("bad", options=dict)
    with pytest.raises(ValueError, match="^name: expected an identifier"):
        register_network("no good", options=PairOptions)
    assert "bad" not in network_names()


@pytest.mark.parametrize("name, lattice, options", [
    ("conv", Square(4, 2), dict(channels=3, depth=1)),
    ("conv", Kagome(2, 2), dict(channels=2, depth=1, norm="layer")),
    ("rbm", Honeycomb(2, 2), dict(alpha=2)),
    ("rbm", Chain(6, pbc=False), None),
    ("vit", Square(4, 2), dict(patch=1, dim=8, heads=2, depth=1)),
    ("vit", Chain(8), dict(patch=2, dim=8, heads=2, depth=1)),
    ("pair_toy", Chain(6), None),
])
def test_every_registered_network_keeps_the_contract(name, lattice, options):
    shape = check_network(name, lattice, options)
    by_cell = not (name == "pair_toy" or (name == "vit" and options["patch"] > 1) or (name == "rbm" and not lattice.pbc))
    assert (shape[1] == lattice.n_cells) if by_cell else (shape[1] in (1, lattice.n_cells // 2))


def test_a_broken_declaration_is_caught():
    """A backbone that declares translation equivariance but breaks it (a dense layer over
    all sites at every cell) fails the check, naming the network."""

    class Liar(nn.Module):
        n_cells: int

        @nn.compact
        def __call__(self, s):
            h = nn.Dense(3, dtype=jnp.float64, param_dtype=jnp.float64)(jnp.asarray(s, jnp.float64))
            return jnp.broadcast_to(h[:, None, :], (s.shape[0], self.n_cells, 3)) * jnp.arange(1.0, self.n_cells + 1)[:, None]

    register_network("liar_toy", options=PairOptions)(lambda lattice, options, dtype: Liar(lattice.n_cells))
    with pytest.raises(ValueError, match="^network: 'liar_toy' declares equivariance 'cells'"):
        check_network("liar_toy", Chain(4))

    class StrideLiar(Liar):  # claims its summed features survive shifts by 2 cells
        equivariance = "none"
        translation_stride = 2

    register_network("stride_liar_toy", options=PairOptions)(lambda lattice, options, dtype: StrideLiar(lattice.n_cells))
    with pytest.raises(ValueError, match="^network: 'stride_liar_toy' declares translation_stride 2"):
        check_network("stride_liar_toy", Chain(4))


def _flat(params):
    return {jax.tree_util.keystr(k): np.asarray(v) for k, v in jax.tree_util.tree_flatten_with_path(params)[0]}


@pytest.mark.parametrize("case", ["positive", "signed", "plane_wave", "origin", "phase_rule", "bare", "layer"])
def test_the_registry_conv_network_is_make_conv_nqs_parameter_for_parameter(case):
    """Same parameter paths and values from the same key, same log psi: the wrappers add no
    level to the paths and change no operation (checkpoints of conv runs load either way)."""
    lattice = {"phase_rule": Triangular(3, 2 * 3), "layer": Kagome(2, 2)}.get(case, Chain(8))
    momentum = np.array([np.pi / 2]) if case in ("plane_wave", "origin") else None
    group = None if case == "bare" else sym.translations(lattice, momentum)
    amplitude = {"positive": "positive", "signed": "signed"}.get(case, "complex")
    kw = dict(channels=3, depth=1, norm="layer" if case == "layer" else "none")
    phases = sublattice_phases(lattice) if case == "phase_rule" else None
    readout = "origin" if case == "origin" else None
    old = make_conv_nqs(lattice, group, dtype=jnp.float64, complex_output=amplitude != "positive",
                        signed=amplitude == "signed", site_phases=phases, readout=readout, **kw)
    new = make_network(lattice, group, "conv", kw, amplitude=amplitude, site_phases=phases, readout=readout,
                       dtype=jnp.float64)
    s = jnp.asarray(np.random.default_rng(1).choice(np.array([-1, 1], np.int8), size=(6, lattice.n_sites)))
    p_old, p_new = (m.init(jax.random.key(2), s) for m in (old, new))
    a, b = _flat(p_old), _flat(p_new)
    assert sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)
    np.testing.assert_array_equal(np.asarray(old.apply(p_old, s)), np.asarray(new.apply(p_new, s)))
    assert getattr(new, "real_jacobian", False) == getattr(old, "real_jacobian", False) == (amplitude == "signed")


def test_the_jacobian_form_is_declared_by_the_head():
    """derivative_form differentiates the real part for a signed head on any backbone, and
    for nothing else (no isinstance on a network class)."""
    lattice, group = Chain(6), sym.translations(Chain(6))
    for name, options in (("rbm", None), ("pair_toy", None), ("conv", dict(channels=2, depth=1))):
        signed = make_network(lattice, group, name, options, amplitude="signed", dtype=jnp.float64)
        complex_ = make_network(lattice, group, name, options, amplitude="complex", dtype=jnp.float64)
        assert derivative_form(signed.apply).__wrapped__ == signed.apply
        assert derivative_form(complex_.apply) == complex_.apply
    odd = make_network(lattice, sym.translations(lattice, np.array([np.pi / 3])), "rbm", amplitude="complex",
                       dtype=jnp.float64)
    assert derivative_form(odd.apply) == odd.apply


def test_make_network_errors():
    with pytest.raises(ValueError, match="^readout: 'plane_wave' needs a network equivariant"):
        make_network(Chain(6), sym.translations(Chain(6), np.array([np.pi / 3])), "pair_toy", readout="plane_wave")
    with pytest.raises(ValueError, match="^amplitude: a real .positive. network needs a sector with all characters 1"):
        make_network(Chain(6), sym.translations(Chain(6), np.array([np.pi / 3])), "rbm", amplitude="positive")
    with pytest.raises(ValueError, match="^amplitude: expected one of"):
        make_network(Chain(6), None, "rbm", amplitude="real")
    with pytest.raises(ValueError, match="^lattice: periodic convolutions need periodic boundaries"):
        make_network(Chain(6, pbc=False), None, "conv")
    with pytest.raises(ValueError, match="^site_phases: a phase rule needs a complex network"):
        make_network(Chain(6), None, "rbm", amplitude="signed", site_phases=np.zeros(6))


@pytest.mark.slow
@pytest.mark.parametrize("name, options, amplitude, steps", [
    ("pair_toy", dict(width=8), "positive", 150),
    ("rbm", dict(alpha=2), "positive", 150),
    ("vit", dict(patch=2, dim=16, depth=1, heads=2), "complex", 150),
])
def test_registered_networks_train_chain8_to_the_exact_energy(name, options, amplitude, steps):
    """chain:8 Heisenberg in the Marshall basis, projected on the translations, exact sums
    and SR: within 1e-4 of the exact energy, never below it."""
    lattice = Chain(8)
    ham = Heisenberg(lattice, marshall_sign=True)
    group = sym.translations(lattice)
    model = make_network(lattice, group, name, options, amplitude=amplitude, dtype=jnp.float64)
    energy = exact_sum_energy(lattice, model, ham, group, steps)
    exact = ground_state_energy(ham, total_sz=0)
    assert energy >= exact - 1e-9 and (energy - exact) / abs(exact) < 1e-4, (energy, exact)


# weighted sums (sum_k (k+1) x_k) of the parameters that make_conv_nqs drew from key 2
# before the conv net was split into a registered backbone and a head (commit 792ef9f)
BEFORE_THE_SPLIT = {
    "['params']['base']['blocks_0']['conv1']['bias']": 0.0,
    "['params']['base']['blocks_0']['conv1']['kernel']": 73.32863392350505,
    "['params']['base']['blocks_0']['conv2']['bias']": 0.0,
    "['params']['base']['blocks_0']['conv2']['kernel']": 26.13660015880385,
    "['params']['base']['input_conv']['bias']": 0.0,
    "['params']['base']['input_conv']['kernel']": -23.638536176451275,
    "['params']['base']['readout_dense']['kernel']": 0.029891013576284108,
}


@pytest.mark.parametrize("through", ["make_conv_nqs", "make_network"])
def test_conv_parameters_are_those_drawn_before_the_split(through):
    """Paths and values of the default conv network's parameters, and its log psi, as the
    version before the registry made them: old runs rebuild the same initial state and
    their checkpoints (keyed by parameter path) load."""
    lattice = Chain(8)
    group = sym.translations(lattice)
    if through == "make_conv_nqs":
        model = make_conv_nqs(lattice, group, channels=3, depth=1, dtype=jnp.float64, signed=True)
    else:
        model = make_network(lattice, group, "conv", dict(channels=3, depth=1), amplitude="signed", dtype=jnp.float64)
    params = model.init(jax.random.key(2), jnp.ones((1, 8), jnp.int8))
    found = {k: float(np.sum(v * np.arange(1, v.size + 1).reshape(v.shape))) for k, v in _flat(params).items()}
    assert sorted(found) == sorted(BEFORE_THE_SPLIT)
    for key, value in BEFORE_THE_SPLIT.items():
        assert found[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
    s = jnp.asarray(np.array([[1, -1, 1, 1, -1, -1, 1, -1]], np.int8))
    assert complex(model.apply(params, s)[0]) == pytest.approx(2.108124693957463, rel=1e-12)


class GroupAveraged(nn.Module):
    """Features averaged over the images g s of a group (all characters 1): (batch, 1, width)."""

    perms: tuple
    flips: tuple
    width: int = 4
    equivariance = "projects"

    @nn.compact
    def __call__(self, s):
        images = jnp.asarray(s)[:, np.asarray(self.perms)] * jnp.asarray(self.flips, jnp.int8)[None, :, None]
        h = jnp.tanh(nn.Dense(self.width, param_dtype=jnp.float64, dtype=jnp.float64)(images.astype(jnp.float64)))
        return h.mean(axis=1)[:, None, :]


@register_network("averaged_toy", options=PairOptions)
def averaged_toy(lattice, options, dtype, symmetry):
    group = symmetry if symmetry is not None else sym.translations(lattice)
    return GroupAveraged(tuple(map(tuple, np.asarray(group.perms).tolist())), tuple(np.asarray(group.flips).tolist()),
                         options.width)


def test_a_network_that_projects_itself_gets_no_projection():
    lattice = Chain(6)
    group = sym.full_symmetry(lattice)
    model = make_network(lattice, group, "averaged_toy", amplitude="positive", dtype=jnp.float64)
    assert type(model).__name__ == "Network" and model.backbone.perms == tuple(map(tuple, group.perms.tolist()))
    s = jnp.asarray(np.random.default_rng(0).choice(np.array([-1, 1], np.int8), size=(3, 6)))
    params = model.init(jax.random.key(0), s)
    base = np.asarray(model.apply(params, s))
    for g in range(len(group.perms)):
        moved = np.asarray(model.apply(params, s[:, group.perms[g]] * group.flips[g]))
        np.testing.assert_allclose(moved, base, atol=1e-12)


# ---------------------------------------------------------------- through the recipe
import argparse  # noqa: E402
import json  # noqa: E402

from quantax_lite.exact.diagonalization import exact_expectation  # noqa: E402
from quantax_lite.recipes import Recipe, build, make_run_network as _network, network_option  # noqa: E402
from quantax_lite.driver.vmc import run  # noqa: E402
from grid import keeping  # noqa: E402

EXACT_SUM = dict(sampling="exact_sum", precision="f64", lr=0.05, seed=0)


def _trained_relative_error(recipe, steps):
    r = build(recipe)
    e0 = ground_state_energy(r.hamiltonian)
    state, records = run(r.vmc, r.state, steps, progress=False)
    energy = exact_expectation(r.hamiltonian, r.model.apply, state.params)
    assert all(rec["energy"] >= e0 - 1e-10 * abs(e0) for rec in records)  # variational, step by step
    return (energy - e0) / abs(e0)


# bounds: about 10x the relative error measured when the test was written (deterministic
# exact sums, seed 0): pair_toy 5.7e-9, rbm chain:8 9.0e-10, vit 1.3e-9, rbm 4x2 2.5e-11
@pytest.mark.parametrize("network, options, lattice, steps, bound", keeping([
    ("pair_toy", {"width": 8}, "chain:8", 150, 6e-8),  # the network of this file
    ("rbm", {"alpha": 2}, "chain:8", 150, 1e-8),
    ("vit", {"patch": 2, "dim": 16, "depth": 1, "heads": 2}, "chain:8", 150, 1.5e-8),
    ("rbm", {"alpha": 2}, "4x2", 150, 3e-10),
], keep=(0, 3)))
def test_a_registered_network_trains_to_the_exact_energy_through_the_recipe(network, options, lattice, steps, bound):
    """Selected by name with its own options: the recipe adds the head (positive, by the
    Marshall basis), the projection on the translations and exact sums; the trained
    energy (dense sum over the sector) lies within ``bound`` of the exact ground state."""
    recipe = Recipe(lattice=lattice, network=network, network_options=options, **EXACT_SUM)
    error = _trained_relative_error(recipe, steps)
    assert -1e-12 <= error < bound, (network, lattice, error)


def test_network_fields_are_checked_naming_the_option():
    with pytest.raises(ValueError, match="^network: expected one of"):
        Recipe(network="gcnn")
    with pytest.raises(ValueError, match="^network_options: alpah: not an option of the network 'rbm'"):
        Recipe(lattice="chain:8", network="rbm", network_options={"alpah": 2})
    with pytest.raises(TypeError, match="^network_options: alpha: expected int"):
        Recipe(lattice="chain:8", network="rbm", network_options={"alpha": "many"})
    with pytest.raises(ValueError, match="^network_options: heads: 4 must divide dim = 6"):
        Recipe(lattice="chain:8", network="vit", network_options={"dim": 6})
    with pytest.raises(ValueError, match="^channels: an option of the conv network, not of 'rbm'"):
        Recipe(lattice="chain:8", network="rbm", channels=4)
    with pytest.raises(ValueError, match="^network_options: channels: given twice"):
        Recipe(lattice="chain:8", channels=8, network_options={"channels": 4})
    with pytest.raises(TypeError, match="^network_options: expected a mapping"):
        Recipe(lattice="chain:8", network="rbm", network_options=[("alpha", 2)])
    # the conv network's options are its fields: given in network_options they move there
    moved = Recipe(lattice="chain:8", network_options={"channels": 4, "norm": "layer"})
    assert moved.channels == 4 and moved.norm == "layer" and moved.network_options is None
    assert moved == Recipe(lattice="chain:8", channels=4, norm="layer")


def test_network_option_of_the_command():
    assert network_option("alpha=4") == {"alpha": 4} and network_option("scale=0.5") == {"scale": 0.5}
    assert network_option("norm=layer") == {"norm": "layer"} and network_option("flag=true") == {"flag": True}
    assert network_option("kernel_size=none") == {"kernel_size": None}
    for bad in ("alpha", "=4", "two words=1"):
        with pytest.raises(argparse.ArgumentTypeError):
            network_option(bad)


def test_configs_round_trip_and_old_ones_build_the_same_network():
    """config() records the network and its options as JSON and reads back; a config
    written before the fields existed builds the default conv network with the same
    parameters, path for path."""
    recipe = Recipe(lattice="chain:8", network="rbm", network_options={"alpha": 3})
    config = json.loads(json.dumps(recipe.config()))
    assert config["network"] == "rbm" and config["network_options"] == {"alpha": 3}
    assert Recipe(**config) == recipe and hash(Recipe(**config)) == hash(recipe)
    assert Recipe(**config) != Recipe(lattice="chain:8", network="rbm")
    default = Recipe(lattice="chain:8", channels=3, depth=1)
    config = json.loads(json.dumps(default.config()))
    assert config["network"] == "conv" and config["network_options"] is None
    old = {k: v for k, v in config.items() if k not in ("network", "network_options")}
    assert Recipe(**old) == default
    models = []
    for r in (Recipe(**old), default):
        lattice, ham, group = r.system()
        model = _network(r, lattice, group, r.amplitude_kind(ham))
        models.append(_flat(model.init(jax.random.key(0), jnp.ones((1, 8), jnp.int8))))
    assert sorted(models[0]) == sorted(models[1]) and all(np.array_equal(models[0][k], models[1][k]) for k in models[0])


@pytest.mark.parametrize("lattice", [Square(4, pbc=False), Chain(8, pbc=False), Honeycomb(2, 2, pbc=False),
                                     Square(4, 2)])
def test_recipes_on_open_lattices_read_back(lattice):
    recipe = Recipe(lattice=lattice, symmetry="none", network="rbm")
    config = json.loads(json.dumps(recipe.config()))
    assert config["lattice"] == lattice.name and Recipe(**config) == recipe
    assert parse_back(config) == lattice


def parse_back(config):
    return Recipe(**config).system()[0]


def test_an_open_lattice_trains_with_a_network_that_needs_no_periodic_grid():
    recipe = Recipe(lattice=Chain(8, pbc=False), symmetry="none", network="rbm", network_options={"alpha": 2},
                    **EXACT_SUM)
    assert _trained_relative_error(recipe, 150) < 3e-5  # measured 2.9e-6
    with pytest.raises(ValueError, match="^lattice: periodic convolutions need periodic boundaries"):
        build(Recipe(lattice=Chain(8, pbc=False), symmetry="none"))


def test_make_conv_nqs_takes_the_registry_options_and_its_older_keywords():
    """``make_conv_nqs(lattice, g, ConvOptions(...) or a mapping, amplitude=...)`` is the
    network of the older keywords (channels=..., complex_output / signed) parameter for
    parameter; unknown keywords, an unknown amplitude and both spellings at once are refused
    naming them."""
    from quantax_lite.models import ConvOptions, make_conv_nqs

    lattice = Chain(6)
    group = sym.translations(lattice)
    s = jnp.asarray(np.random.default_rng(3).choice(np.array([-1, 1], np.int8), size=(4, 6)))
    for amplitude, legacy in (("complex", {}), ("positive", dict(complex_output=False)),
                              ("signed", dict(signed=True))):
        nets = [make_conv_nqs(lattice, group, ConvOptions(channels=3, depth=1), amplitude=amplitude),
                make_conv_nqs(lattice, group, {"channels": 3, "depth": 1}, amplitude=amplitude),
                make_conv_nqs(lattice, group, channels=3, depth=1, **legacy)]
        params = [m.init(jax.random.key(0), s) for m in nets]
        for m, p in zip(nets[1:], params[1:]):
            assert _flat(p).keys() == _flat(params[0]).keys()
            assert all(np.array_equal(_flat(p)[k], _flat(params[0])[k]) for k in _flat(p))
            np.testing.assert_array_equal(np.asarray(m.apply(p, s)), np.asarray(nets[0].apply(params[0], s)))
    with pytest.raises(TypeError, match="unexpected keyword 'chanels'"):
        make_conv_nqs(lattice, group, chanels=3)
    with pytest.raises(ValueError, match="^amplitude: expected one of"):
        make_conv_nqs(lattice, group, amplitude="real")
    with pytest.raises(ValueError, match="^amplitude: give the amplitude or complex_output"):
        make_conv_nqs(lattice, group, amplitude="signed", complex_output=True)
    with pytest.raises(ValueError, match="^network_options: depth"):
        make_conv_nqs(lattice, group, {"depth": -1})
