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

from quantax_lite import symmetry as sym
from quantax_lite.exact import ground_state_energy
from quantax_lite.lattice import Chain, Honeycomb, Kagome, Square, Triangular
from quantax_lite.models import (
    check_network, derivative_form, make_conv_nqs, make_network, network_names, network_options, options_config,
    register_network, sublattice_phases,
)
from quantax_lite.operators import Heisenberg
from quantax_lite.preconditioners import sr
from quantax_lite.sampler import FullSumSampler
from quantax_lite.vmc import VMC


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
    if name != "pair_toy" and not (name == "vit" and options["patch"] > 1):
        assert shape[1] == lattice.n_cells


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
