"""The Vision Transformer on lattice patches: parameter count, equivariance under
translations by whole patches (and not under others), the projection on every
translation, agreement of its factored attention with a loop over token pairs, and
training to the exact ground state by exact sums."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from quantax_lite import Chain, Heisenberg, Square, Triangular, VMC, ground_state_energy, translations
from quantax_lite.models import ViT, count_params, make_vit_nqs, vit_param_count
from quantax_lite.models.vit import _displacement_index, patch_tokens
from quantax_lite.optimizer.preconditioners import sr
from quantax_lite.sampler import FullSumSampler


def _spins(rng, batch, n):
    return jnp.asarray(rng.choice([-1, 1], size=(batch, n)), jnp.int8)


def _random_params(model, s, rng):
    params = model.init(jax.random.key(int(rng.integers(1 << 30))), s)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    noisy = [x + 0.3 * jnp.asarray(rng.normal(size=x.shape), x.dtype) for x in leaves]
    return jax.tree_util.tree_unflatten(treedef, noisy)


@pytest.mark.parametrize("shape, n_basis, patch, complex_output", [
    ((4, 4), 1, 2, True), ((6,), 1, 3, False), ((2, 2), 3, 1, True)])
def test_param_count(rng, shape, n_basis, patch, complex_output):
    model = ViT(shape, n_basis=n_basis, patch=patch, dim=8, depth=2, heads=2, complex_output=complex_output)
    params = model.init(jax.random.key(0), _spins(rng, 2, int(np.prod(shape)) * n_basis))
    expected = vit_param_count(shape, n_basis, patch, dim=8, depth=2, heads=2, complex_output=complex_output)
    assert count_params(params) == expected


def test_patch_tokens_and_displacements():
    tokens = patch_tokens((4, 4), 1, 2)
    assert tokens.shape == (4, 4) and sorted(tokens.reshape(-1).tolist()) == list(range(16))
    assert tokens[0].tolist() == [0, 1, 4, 5] and tokens[3].tolist() == [10, 11, 14, 15]
    assert patch_tokens((2,), 3, 1).tolist() == [[0, 1, 2], [3, 4, 5]]
    d = _displacement_index((2, 3))  # tokens (0,0), (0,1), (0,2), (1,0), ...
    assert d[0, 0] == 0 and d[1, 0] == 1 and d[0, 1] == 2 and d[3, 0] == 3 and d[4, 5] == 2
    with pytest.raises(ValueError, match="patch"):
        ViT((4, 4), patch=3)
    with pytest.raises(ValueError, match="heads"):
        ViT((4, 4), dim=10, heads=4)


def _translate(s, shape, shift):
    """Spins moved by ``shift`` cells on a periodic grid (one site per cell)."""
    grid = np.arange(int(np.prod(shape))).reshape(shape)
    source = np.roll(grid, shift, axis=tuple(range(len(shape)))).reshape(-1)
    return s[:, source]


def test_equivariant_under_whole_patch_translations_only(rng):
    shape = (4, 4)
    model = ViT(shape, patch=2, dim=8, depth=2, heads=2, dtype=jnp.float64)
    s = _spins(rng, 6, 16)
    params = _random_params(model, s, rng)
    base = np.asarray(model.apply(params, s))
    for shift in ((2, 0), (0, 2), (2, 2)):
        np.testing.assert_allclose(np.asarray(model.apply(params, _translate(s, shape, shift))), base, atol=1e-12)
    moved = np.asarray(model.apply(params, _translate(s, shape, (1, 0))))
    assert np.max(np.abs(moved - base)) > 1e-3  # one cell is not a symmetry of the bare network


def test_projection_on_every_translation(rng):
    lattice = Square(4, 4)
    model = make_vit_nqs(lattice, translations(lattice), dim=8, depth=1, heads=2, dtype=jnp.float64)
    s = _spins(rng, 5, 16)
    params = _random_params(model, s, rng)
    base = np.asarray(model.apply(params, s))
    for shift in ((1, 0), (0, 3), (1, 1)):
        np.testing.assert_allclose(np.asarray(model.apply(params, _translate(s, (4, 4), shift))), base, atol=1e-10)
    tri = Triangular(2, 2)  # a lattice with a basis-free grid of cells, another geometry
    model = make_vit_nqs(tri, None, patch=1, dim=8, depth=1, heads=2)
    assert model.apply(model.init(jax.random.key(0), _spins(rng, 2, 4)), _spins(rng, 3, 4)).shape == (3,)


@pytest.mark.parametrize("group", ["translations", "full", "momentum_pi"])
def test_projection_merges_the_images_whole_patches_relate(rng, group):
    """On a 4x4 lattice with patches of 2x2 cells the projection evaluates one image per class
    of group elements that differ by whole patches (4 of the 16 translations; 32 of the full
    group's 256 elements with spin flips), with the class's summed characters: log psi equals
    the projection over every element written out, for the registry's ViT and the ViT of
    make_vit_nqs, at zero momentum and at k = (pi, 0); a momentum the patch shifts cancel is
    refused for the registry's."""
    from quantax_lite import full_symmetry
    from quantax_lite.geometry.symmetry import translations as sym_translations
    from quantax_lite.models import Symmetrized, make_network
    from quantax_lite.models.factory import _symmetry_table

    lattice = Square(4, 4)
    sym = {"translations": lambda: sym_translations(lattice), "full": lambda: full_symmetry(lattice),
           "momentum_pi": lambda: sym_translations(lattice, momentum=(np.pi, 0.0))}[group]()
    table = _symmetry_table(lattice, sym)
    s = _spins(rng, 6, 16)
    for model in (make_network(lattice, sym, "vit", dict(dim=8, depth=1, heads=2), amplitude="complex",
                               dtype=jnp.float64),
                  make_vit_nqs(lattice, sym, dim=8, depth=1, heads=2, dtype=jnp.float64)):
        assert isinstance(model, Symmetrized)
        n_images = len(np.asarray(model.perms))
        assert n_images * 4 == len(table[0])  # 4 patch translations per class
        params = _random_params(model, s, rng)
        every = Symmetrized(model.base, *table)  # the same base over every element
        np.testing.assert_allclose(np.exp(np.asarray(model.apply(params, s))),
                                   np.exp(np.asarray(every.apply(params, s))), rtol=1e-10)
    # a phase rule is not invariant under the patch shifts: every element, as written out
    phases = rng.uniform(0, 2 * np.pi, 16)
    ruled = make_network(lattice, sym, "vit", dict(dim=8, depth=1, heads=2), amplitude="complex",
                         site_phases=phases, dtype=jnp.float64)
    assert len(np.asarray(ruled.perms)) == len(table[0])
    # k = (pi/2, 0): the patch shifts' characters cancel; the readout falls back to one token
    quarter = sym_translations(lattice, momentum=(np.pi / 2, 0.0))
    with pytest.raises(ValueError, match="^readout: 'sum' of this network is invariant under translations by 2"):
        make_network(lattice, quarter, "vit", dict(dim=8, depth=1, heads=2), amplitude="complex", readout="sum")
    origin = make_network(lattice, quarter, "vit", dict(dim=8, depth=1, heads=2), amplitude="complex",
                          dtype=jnp.float64)
    assert origin.base.readout == "origin" and len(np.asarray(origin.perms)) == 16
    params = _random_params(origin, s, rng)
    assert np.all(np.isfinite(np.asarray(origin.apply(params, s)))) and np.ptp(np.asarray(origin.apply(params, s)).real) > 1e-3
    with pytest.raises(ValueError, match="^symmetry: a ViT on patches of 2 cells"):
        make_vit_nqs(lattice, quarter, dim=8, depth=1, heads=2)


def test_factored_attention_equals_a_loop_over_token_pairs(rng):
    """The first block's attention output against an explicit double loop over tokens
    with weights a[(t - u) mod grid]."""
    model = ViT((4,), patch=1, dim=4, depth=1, heads=2, dtype=jnp.float64)
    s = _spins(rng, 3, 4)
    params = _random_params(model, s, rng)
    p = params["params"]
    _, inter = model.apply(params, s, capture_intermediates=lambda mdl, name: mdl.name == "attention_out_0")
    mixed = np.asarray(inter["intermediates"]["attention_out_0"]["__call__"][0])  # Dense output
    x = np.asarray(s, np.float64)[:, :, None] @ np.asarray(p["embed"]["kernel"]) + np.asarray(p["embed"]["bias"])
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    h = (x - mean) / np.sqrt(var + 1e-6) * np.asarray(p["norm_attention_0"]["scale"]) + np.asarray(
        p["norm_attention_0"]["bias"])
    v = h @ np.asarray(p["values_0"]["kernel"]) + np.asarray(p["values_0"]["bias"])  # (b, T, 4), heads of 2
    a = np.asarray(p["attention_0"])  # (heads, T)
    out = np.zeros_like(v)
    for t in range(4):
        for u in range(4):
            for head in range(2):
                out[:, t, 2 * head:2 * head + 2] += a[head, (t - u) % 4] * v[:, u, 2 * head:2 * head + 2]
    expect = out @ np.asarray(p["attention_out_0"]["kernel"]) + np.asarray(p["attention_out_0"]["bias"])
    np.testing.assert_allclose(mixed, expect, rtol=1e-10, atol=1e-12)


@pytest.mark.slow  # a training
def test_trains_to_the_exact_ground_state_by_exact_sums():
    """chain:8 Heisenberg (with the Marshall sign; a complex network),
    projected on the translations: exact sums, SR, 150 steps to 1e-4 of the exact energy."""
    lattice = Chain(8)
    ham = Heisenberg(lattice, marshall_sign=True)
    group = translations(lattice)
    model = make_vit_nqs(lattice, group, patch=2, dim=16, depth=1, heads=2, dtype=jnp.float64)
    sampler = FullSumSampler(model.apply, lattice.n_sites, total_sz=0, symmetry=group)
    vmc = VMC(ham, sampler, optax.sgd(0.05), None, preconditioner=sr(1e-3))
    params = model.init(jax.random.key(0), jnp.ones((1, 8), jnp.int8))
    state = vmc.init(jax.random.key(1), params)
    for _ in range(150):
        state, metrics = vmc.step(state)
    exact = ground_state_energy(ham, total_sz=0)
    energy = float(np.real(metrics["energy"]))
    assert energy >= exact - 1e-9 and (energy - exact) / abs(exact) < 1e-4, (energy, exact)
