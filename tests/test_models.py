"""Tests of quantax_lite.models: periodic convolutions, ConvResNet, Symmetrized, RBM, factory.

References are independent of the code under test: explicit numpy loops for the
convolution and the group sum, symmetry groups written here with numpy (and those of
quantax_lite.geometry.symmetry), closed-form parameter counts.
"""
import functools
import itertools

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from quantax_lite.geometry.lattice import Chain, Square
from quantax_lite.models import (
    RBM,
    ConvResNet,
    PeriodicConv,
    Symmetrized,
    count_params,
    make_conv_nqs,
    make_rbm_nqs,
    merge_translation_images,
)
from quantax_lite.geometry import symmetry as qsym
from quantax_lite.utils import tuning
from quantax_lite.utils import chunk_map
from grid import covering, keeping

KEY = jax.random.PRNGKey(0)
TINY64 = np.log(np.finfo(np.float64).tiny)


# --------------------------------------------------------------------------- #
# symmetry groups written directly with numpy: (perms, flips, characters)       #
# convention: (g s)[i] = flips[g] * s[perms[g, i]],  psi(s) = sum_g chi_g psi_0(g s) #
# --------------------------------------------------------------------------- #


def _coords(shape):
    return np.indices(shape).reshape(len(shape), -1).T


def _perm(shape, new_coords):
    return np.ravel_multi_index(tuple(np.mod(new_coords, shape).T), shape)


def _translations(shape, k):
    """(T_r s)[x] = s[x + r], chi(T_r) = exp(i k.r)."""
    c = _coords(shape)
    return [(_perm(shape, c + r), 1, np.exp(1j * np.dot(k, r))) for r in c]


def _point_group(shape, rep):
    """Chain: reflection x -> -x with character rep (+1/-1). Square: C4v about site 0 in irrep rep."""
    c = _coords(shape)
    if len(shape) == 1:
        return [(_perm(shape, c), 1, 1.0), (_perm(shape, -c), 1, float(rep))]
    out = []
    for M in [np.array(m) for m in itertools.product([-1, 0, 1], repeat=4)]:
        M = M.reshape(2, 2)
        if abs(np.linalg.det(M)) != 1 or np.count_nonzero(M) != 2:
            continue
        det, axial = round(np.linalg.det(M)), M[0, 1] == 0
        chi = {"A1": 1, "A2": det, "B1": 1 if axial else -1, "B2": det * (1 if axial else -1)}[rep]
        out.append((_perm(shape, c @ M.T), 1, float(chi)))
    assert len(out) == 8
    return out


def _inversion(n, parity):
    e = np.arange(n)
    return [(e, 1, 1.0), (e, -1, float(parity))]


def _product(*groups):
    """Elements a(b(c s)): perm p_c[p_b[p_a]], flips and characters multiplied."""
    out = {}
    for combo in itertools.product(*groups):
        p, f, chi = np.arange(len(combo[0][0])), 1, 1.0 + 0j
        for q, fq, cq in combo:
            p, f, chi = q[p], f * fq, chi * cq
        out[(tuple(p), f)] = chi
    perms = np.array([k[0] for k in out], np.int32)
    flips = np.array([k[1] for k in out], np.int8)
    chars = np.array(list(out.values()), np.complex128)
    return perms, flips, chars


def chain_group(L, momentum_pi, reflection, parity):
    k = np.array([np.pi if momentum_pi else 0.0])
    return _product(_translations((L,), k), _point_group((L,), reflection), _inversion(L, parity))


def square_group(L, momentum_pi, rep, parity):
    k = np.array([np.pi, np.pi]) if momentum_pi else np.zeros(2)
    return _product(_translations((L, L), k), _point_group((L, L), rep), _inversion(L * L, parity))


def act(group, s):
    perms, flips, _ = group
    return flips[:, None] * s[perms]  # (G, N) images of one configuration


def random_spins(rng, n, batch):
    return rng.choice(np.array([-1, 1], np.int8), size=(batch, n))


def neel(shape):
    return np.where(_coords(shape).sum(axis=1) % 2 == 0, 1, -1).astype(np.int8)


def assert_log_close(a, b, atol):
    """log-amplitudes equal: real parts equal, imaginary parts equal mod 2 pi."""
    a, b = np.asarray(a, np.complex128), np.asarray(b, np.complex128)
    np.testing.assert_allclose(a.real, b.real, atol=atol, rtol=0)
    dphi = np.angle(np.exp(1j * (a.imag - b.imag)))
    np.testing.assert_allclose(dphi, 0, atol=atol)


# --------------------------------------------------------------------------- #
# periodic convolution                                                          #
# --------------------------------------------------------------------------- #


def conv_reference(x, kernel, bias, shape):
    """out[r, o] = bias[o] + sum_{a, c} kernel[a, c, o] * x[(r + a - k // 2) mod L, c], by loops."""
    k = kernel.shape[0]
    out = np.zeros(x.shape[:-1] + (kernel.shape[-1],))
    for r in itertools.product(*[range(L) for L in shape]):
        for a in itertools.product(range(k), repeat=len(shape)):
            src = tuple((ri + ai - k // 2) % L for ri, ai, L in zip(r, a, shape))
            out[(slice(None),) + r] += x[(slice(None),) + src] @ kernel[a]
    return out + bias


@pytest.mark.parametrize(*covering(("shape,k", [((3, 4), 3), ((5,), 4), ((3,), 7), ((2, 3), 2)]),
                                    ("conv", tuning.CONV_FORMS)))
def test_periodic_conv_matches_loop(rng, shape, k, conv):
    layer = PeriodicConv(3, k, shape, dtype=jnp.float64)
    x = rng.normal(size=(2, *shape, 2))
    kernel = rng.normal(size=jax.eval_shape(layer.init, KEY, x)["params"]["kernel"].shape)
    bias = rng.normal(size=(3,))
    params = {"params": {"kernel": jnp.asarray(kernel), "bias": jnp.asarray(bias)}}
    ref = conv_reference(x, kernel, bias, shape)
    with tuning.override(conv_form=conv):  # every form, traced here (a fresh function)
        out = jax.jit(lambda p, x: layer.apply(p, x))(params, x)
        # channel-major maps (batch, channels, n_sites), the dense form's layout
        x_cm = np.moveaxis(x.reshape(2, -1, 2), -1, 1)
        out_cm = jax.jit(lambda p, x: layer.apply(p, x, True))(params, x_cm)
        # the derivative in the kernel (the patch-form custom JVP of dense / lax_patch)
        dk = rng.normal(size=kernel.shape)
        _, tangent = jax.jvp(lambda kk: layer.apply({"params": {"kernel": kk, "bias": jnp.asarray(bias)}}, x_cm, True),
                             (jnp.asarray(kernel),), (jnp.asarray(dk),))
    np.testing.assert_allclose(out, ref, atol=1e-12)
    np.testing.assert_allclose(out_cm, np.moveaxis(ref.reshape(2, -1, 3), -1, 1), atol=1e-12)
    ref_t = conv_reference(x, dk, 0 * bias, shape).reshape(2, -1, 3)
    np.testing.assert_allclose(tangent, np.moveaxis(ref_t, -1, 1), atol=1e-12)


def test_banded_form_in_float32_matches_gather_on_6x6(rng):
    """The row-banded form (the fast path above the dense width) on the default 6x6
    network shape in float32: log psi and per-sample Jacobians within 1e-5 relative of
    the gather form."""
    from quantax_lite.optimizer.log_derivatives import jacobian

    lattice = Square(6)
    model = make_conv_nqs(lattice, qsym.translations(lattice), channels=4, depth=2, dtype=jnp.float32,
                          complex_output=False)
    s = random_spins(rng, lattice.n_sites, 6)
    params = random_params(model, s, rng, scale=0.2)
    out = {}
    for form in ("gather", "banded"):
        with tuning.override(conv_form=form):  # traced here: a fresh function per form
            f = jax.jit(lambda p, x: (model.apply(p, x), jacobian(model.apply, p, x)))
            out[form] = [np.asarray(a, np.float64) for a in f(params, s)]
    (log_g, jac_g), (log_b, jac_b) = out["gather"], out["banded"]
    # float32 rounding is relative to the terms' size, not to a log psi that happens to be
    # near 0 (one at 0.046 differed by 4.8e-7 in a CI run, against values near 3)
    np.testing.assert_allclose(log_b, log_g, rtol=1e-5, atol=1e-5 * np.abs(log_g).max())
    scale = np.abs(jac_g).max(axis=0, keepdims=True) + 1e-3
    np.testing.assert_array_less(np.abs(jac_b - jac_g) / scale, 1e-5)
    assert np.abs(jac_g).max() > 1e-2  # not a vacuous comparison


def test_channel_major_maps_are_checked():
    with pytest.raises(ValueError, match="channel-major"):
        PeriodicConv(2, 3, (4,)).init(KEY, np.ones((1, 4, 1)), True)
    with pytest.raises(ValueError, match="feature maps"):
        PeriodicConv(2, 3, (4,)).init(KEY, np.ones((1, 1, 4)))


# --------------------------------------------------------------------------- #
# ConvResNet                                                                    #
# --------------------------------------------------------------------------- #


def random_params(model, s, rng, scale=0.3):
    """Random, non-tiny parameters of ``model`` (built from the shapes of ``model.init``,
    so that no jax random-number kernel has to be compiled)."""
    shapes = jax.eval_shape(model.init, KEY, s)
    return jax.tree_util.tree_map(lambda x: (scale * rng.normal(size=x.shape)).astype(x.dtype), shapes)


def jitted(model, method=None):
    return jax.jit(functools.partial(model.apply, method=method) if method else model.apply)


@pytest.mark.parametrize(*covering(("shape,k", [((3, 4), 3), ((6,), 5)]),
                                    ("other", ["lax", "lax_patch", "lax_gather", "dense", "banded"]),
                                    ("norm", ["none", "layer"])))
def test_conv_forms_agree(rng, shape, k, other, norm):
    # (the dense form runs on channel-major maps internally, the others channels-last)
    n = int(np.prod(shape))
    s = random_spins(rng, n, 5)
    model = ConvResNet(shape, channels=3, depth=1, kernel_size=k, norm=norm)
    with tuning.override(conv_form="gather"):
        params = random_params(model, s, rng)
    with tuning.override(conv_form=other):
        assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(jax.eval_shape(model.init, KEY, s))

    def values_and_grads(form):
        # one gradient of a batch sum: a per-sample (or vmapped-cotangent) lax.conv
        # gradient is a grouped convolution, very slow on XLA:CPU in float64
        def loss(p):
            out = model.apply(p, s)
            return jnp.sum(out.real * weights[0] + out.imag * weights[1]), out

        with tuning.override(conv_form=form):  # traced here: a fresh function per form
            grads, out = jax.jit(lambda p: jax.grad(loss, has_aux=True)(p))(params)
        return out, jax.tree_util.tree_leaves(grads)

    weights = rng.normal(size=(2, len(s)))

    (out_g, grads_g), (out_l, grads_l) = values_and_grads("gather"), values_and_grads(other)
    np.testing.assert_allclose(out_g, out_l, atol=1e-12)
    for a, b in zip(grads_g, grads_l):
        np.testing.assert_allclose(a, b, atol=1e-11)


@pytest.mark.parametrize(*covering(("shape,k", [((3, 4), 3), ((5,), 4)]),
                                    ("form", ["dense", "lax_patch", "lax_gather", "banded"]),
                                    ("norm", ["none", "layer"])))
def test_custom_jvp_forms_derivatives(rng, shape, k, form, norm):
    """The custom JVPs of the dense, lax_patch and lax_gather forms: per-sample gradients
    (reverse mode) and forward-mode derivatives equal those of the gather form, in both
    arguments of the convolution."""
    n = int(np.prod(shape))
    s = random_spins(rng, n, 4)
    model = ConvResNet(shape, channels=2, depth=1, kernel_size=k, norm=norm)
    params = random_params(model, s, rng)

    def derivatives(conv_form):
        def real_log_psi(p, x):
            out = model.apply(p, x[None])[0]
            return out.real + 0.7 * out.imag

        def both(params):
            per_sample = jax.vmap(jax.grad(real_log_psi), in_axes=(None, 0))(params, s)
            tangent = jax.tree_util.tree_map(lambda x: jnp.ones_like(x) * 0.3, params)
            forward = jax.jvp(lambda p: model.apply(p, s), (params,), (tangent,))[1]
            return jax.tree_util.tree_leaves(per_sample), forward

        with tuning.override(conv_form=conv_form):
            return jax.jit(both)(params)

    (ps_d, fw_d), (ps_g, fw_g) = derivatives(form), derivatives("gather")
    for a, b in zip(ps_d, ps_g):
        np.testing.assert_allclose(a, b, atol=1e-11)
    np.testing.assert_allclose(fw_d, fw_g, atol=1e-11)
    # and the input derivative of one layer against the loop
    layer = PeriodicConv(2, k, shape, dtype=jnp.float64)
    x = rng.normal(size=(1, *shape, 2))
    lp = layer.init(KEY, x)
    dx = rng.normal(size=x.shape)
    with tuning.override(conv_form=form):
        _, jvp_x = jax.jvp(lambda x: layer.apply(lp, x), (x,), (dx,))
    kernel, bias = np.asarray(lp["params"]["kernel"]), np.asarray(lp["params"]["bias"])
    np.testing.assert_allclose(jvp_x, conv_reference(dx, kernel, 0 * bias, shape), atol=1e-12)


def test_conv_form_choice():
    assert tuning.conv_form(16, 8, jnp.float32) == "dense"
    assert tuning.conv_form(64, 16, jnp.float32) == "lax_gather"
    assert tuning.conv_form(64, 16, jnp.float64) == "dense"
    assert tuning.conv_form(36, 16, jnp.float32) == "lax_gather"  # the default 6x6 network
    assert tuning.conv_form(36, 16, jnp.float64) == "dense"
    assert tuning.conv_form(100, 16, jnp.float64) == "gather"
    with tuning.override(conv_form="gather"):
        assert tuning.conv_form(16, 8, jnp.float32) == "gather"
    assert tuning.conv_form(16, 8, jnp.float32) == "dense"
    with pytest.raises(ValueError, match="dtype"):
        tuning.conv_form(16, 8, jnp.int32)
    with pytest.raises(TypeError, match="conv_shape"):
        with tuning.override(conv_shape="dense"):
            pass
    with pytest.raises(ValueError, match="conv_form"):
        with tuning.override(conv_form="fft"):
            pass

@pytest.mark.parametrize("shape", [(3, 4), (6,)])
def test_trunk_is_translation_equivariant(rng, shape):
    n = int(np.prod(shape))
    model = ConvResNet(shape, channels=3, depth=1, kernel_size=3)
    s = random_spins(rng, n, 3)
    params = random_params(model, s, rng)
    features, positions = jitted(model, "features"), jitted(model, "position_log_amplitudes")
    perms = np.array([perm for perm, _, _ in _translations(shape, np.zeros(len(shape)))])
    shifted = s[:, perms].reshape(-1, n)  # rows (b, r): (T_r s_b)[x] = s_b[x + r]
    feats = np.asarray(features(params, np.concatenate([s, shifted])))
    f_pos = np.asarray(positions(params, np.concatenate([s, shifted])))
    feats, feats_shifted = feats[:3], feats[3:].reshape(3, n, *shape, 3)
    f_pos, f_pos_shifted = f_pos[:3], f_pos[3:].reshape(3, n, n)
    assert feats.shape == (3, *shape, 3)
    for r_index, r in enumerate(_coords(shape)):
        expect = np.roll(feats, shift=tuple(-r), axis=tuple(range(1, len(shape) + 1)))
        np.testing.assert_allclose(feats_shifted[:, r_index], expect, atol=1e-12)
        np.testing.assert_allclose(f_pos_shifted[:, r_index], f_pos[:, perms[r_index]], atol=1e-12)
    # the "sum" readout is translation-invariant, the "origin" readout is f_0
    np.testing.assert_allclose(jitted(model)(params, s), f_pos.sum(axis=1), atol=1e-12)
    origin = ConvResNet(shape, channels=3, depth=1, kernel_size=3, readout="origin")
    np.testing.assert_allclose(jitted(origin)(params, s), f_pos[:, 0], atol=1e-12)


@pytest.mark.parametrize("norm", ["none", "layer"])
@pytest.mark.parametrize("shape,C,depth,k", [((4, 4), 8, 2, 3), ((3, 5), 5, 0, 2), ((7,), 6, 3, 5)])
def test_conv_param_count(shape, C, depth, k, norm):
    from quantax_lite.models import conv_param_count

    K = k ** len(shape)
    ln = 2 * C if norm == "layer" else 0  # scale and bias of one LayerNorm
    # input conv (kernel + bias) + blocks of 2 x (norm + conv) + final norm + readout (C -> 2)
    expected = (K * C + C) + depth * 2 * (ln + K * C * C + C) + ln + 2 * C
    model = ConvResNet(shape, channels=C, depth=depth, kernel_size=k, norm=norm)
    s = np.ones((1, int(np.prod(shape))), np.int8)
    assert count_params(jax.eval_shape(model.init, KEY, s)) == expected
    assert conv_param_count(len(shape), C, depth, k, norm=norm) == expected


def test_make_conv_nqs_defaults():
    for lattice, expected in [(Square(4), 2432), (Square(6), 18752)]:
        model = make_conv_nqs(lattice, qsym.full_symmetry(lattice))
        s = np.ones((1, lattice.n_sites), np.int8)
        shapes = jax.eval_shape(model.init, KEY, s)
        assert count_params(shapes) == expected
        assert model.n_elements == 16  # one image per translation coset of the full group
        with tuning.override(merge_translations=False):
            assert make_conv_nqs(lattice, qsym.full_symmetry(lattice)).n_elements == lattice.n_sites * 16
        out = jax.eval_shape(model.apply, shapes, s)
        assert out.shape == (1,) and out.dtype == jnp.complex128
    # readout chosen by the sector; an explicit invariant readout in a k != 0 sector is refused
    chain = Chain(6)
    sym = qsym.translations(chain, momentum=[np.pi])
    pw = make_conv_nqs(chain, sym)
    assert pw.base.readout == "plane_wave" and pw.n_elements == 1  # a momentum eigenstate: one image
    assert make_conv_nqs(chain, sym, signed=True).base.readout == "origin"  # signed: no plane wave
    assert make_conv_nqs(chain, sym, readout="origin").n_elements == 6
    assert make_conv_nqs(chain, qsym.translations(chain)).base.readout == "sum"
    with pytest.raises(ValueError, match="^readout: 'plane_wave' needs a symmetry that holds every translation"):
        make_conv_nqs(chain, qsym.spin_inversion(chain), readout="plane_wave")
    with pytest.raises(ValueError, match="readout"):
        make_conv_nqs(chain, sym, readout="sum")
    assert isinstance(make_conv_nqs(chain, None), ConvResNet)
    # a Symmetry may be passed to Symmetrized directly
    direct = Symmetrized(ConvResNet((6,)), sym)
    assert direct.n_elements == 6 and np.allclose(direct.characters, sym.characters)
    assert Symmetrized.from_symmetry(ConvResNet((6,)), sym) == direct


def test_initial_state_is_nearly_uniform(rng):
    model = ConvResNet((4, 4), channels=4, depth=1)
    s = random_spins(rng, 16, 64)
    log_psi = jax.jit(model.apply)(jax.jit(model.init)(KEY, s), s)
    assert np.ptp(log_psi.real) < 0.2 and np.ptp(log_psi.imag) < 0.2


# --------------------------------------------------------------------------- #
# symmetrization                                                                #
# --------------------------------------------------------------------------- #


def forced_zero(group, s):
    """True where psi(s) = 0 by symmetry: some g with g s = s has chi_g != 1."""
    perms, flips, chars = group
    fixed = np.all(flips[None, :, None] * s[:, perms] == s[:, None, :], axis=-1)  # (batch, G)
    return np.any(fixed & ~np.isclose(chars, 1)[None, :], axis=1)


def generic_spins(rng, group, n, batch):
    """Random configurations whose amplitude is not forced to zero by the sector."""
    out = []
    while len(out) < batch:
        s = random_spins(rng, n, 4 * batch)
        out.extend(s[~forced_zero(group, s)])
    return np.stack(out[:batch])


def _symmetry_module_group():
    lattice = Square(4)
    g = qsym.product(
        qsym.translations(lattice, momentum=[np.pi, np.pi]),
        qsym.point_group(lattice, characters=[1, -1, 1, -1, 1, -1, 1, -1]),  # B1
        qsym.spin_inversion(lattice, parity=-1),
    )
    return g.perms, g.flips, g.characters


SECTORS = {
    # name: (shape, group, readout, merge_translations, n_random_configs)
    "chain k=0 refl+ parity-": ((8,), lambda: chain_group(8, False, +1, -1), "sum", False, 3),
    "chain k=pi refl- parity+": ((8,), lambda: chain_group(8, True, -1, +1), "origin", False, 3),
    "chain k=pi/4 parity+ (complex characters)": ((8,), lambda: chain_momentum_group(8, np.pi / 4, 1), "origin", False, 3),
    "square A1 k=0 parity+ (merged)": ((4, 4), lambda: square_group(4, False, "A1", +1), "sum", True, 2),
    "square B1 k=(pi,pi) parity- (symmetry module)": ((4, 4), _symmetry_module_group, "origin", False, 1),
}


@pytest.mark.parametrize("name", list(SECTORS))
def test_invariance_in_sector(rng, name):
    shape, make_group, readout, merge, batch = SECTORS[name]
    group = make_group()
    n = int(np.prod(shape))
    table = merge_translation_images(shape, *group) if merge else group
    model = Symmetrized(ConvResNet(shape, channels=4, depth=1, kernel_size=3, readout=readout), *table)
    s = generic_spins(rng, group, n, batch)
    params = random_params(model, s, rng)
    G = len(group[0])
    images = np.concatenate([act(group, x) for x in s])  # (batch G, N), every element of the group
    log_psi = np.asarray(jax.jit(model.apply)(params, np.concatenate([s, images])))
    # log psi(g s) = log psi(s) - log chi_g
    expect = np.repeat(log_psi[:batch], G) - np.log(np.tile(group[2], batch))
    assert_log_close(log_psi[batch:], expect, atol=1e-9)


def chain_momentum_group(L, k, parity):
    """Translations with momentum k (complex characters) x spin inversion."""
    return _product(_translations((L,), np.array([k])), _inversion(L, parity))


LOOP_CASES = {
    # name: (group, base network)
    "conv k=pi refl- parity-": (lambda: chain_group(8, True, -1, -1), lambda: ConvResNet((8,), 3, 1, 3, readout="origin")),
    "conv trivial sector": (lambda: chain_group(8, False, 1, 1), lambda: ConvResNet((8,), 3, 1, 3)),
    "conv k=3pi/4 parity-": (lambda: chain_momentum_group(8, 3 * np.pi / 4, -1), lambda: ConvResNet((8,), 3, 1, 3, readout="origin")),
    "real rbm trivial sector": (lambda: chain_group(8, False, 1, 1), lambda: RBM(1, complex_output=False)),
    "signed conv refl- parity+": (lambda: chain_group(8, False, -1, 1), lambda: ConvResNet((8,), 3, 1, 3, signed=True)),
}


@pytest.mark.parametrize("name", list(LOOP_CASES))
def test_symmetrized_equals_python_loop(rng, name):
    make_group, make_base = LOOP_CASES[name]
    group, base = make_group(), make_base()
    model = Symmetrized(base, *group)
    s = generic_spins(rng, group, 8, 8)
    params = random_params(model, s, rng)
    base_apply = jax.jit(base.apply)
    base_params = {"params": params["params"]["base"]}
    psi = np.zeros(len(s), np.complex128)
    for perm, flip, chi in zip(*group):
        psi += chi * np.exp(np.asarray(base_apply(base_params, flip * s[:, perm])))
    out = jax.jit(model.apply)(params, s)
    if isinstance(base, RBM):
        assert out.dtype == jnp.float64  # real base, positive characters: the real log-sum-exp
    assert_log_close(out, np.log(psi), atol=1e-10)
    # configurations whose amplitude vanishes by symmetry: zero in the loop, finite and tiny here
    zero = np.stack([neel((8,)), np.zeros(8, np.int8)])
    if np.all(forced_zero(group, zero[:1])):
        out = np.asarray(jax.jit(model.apply)(params, zero))
        assert np.all(np.isfinite(out)) and np.all(out.real < np.max(np.log(np.abs(psi))) - 25)


def test_merge_translations_matches_full_group(rng):
    lattice = Square(4)
    full_group = qsym.full_symmetry(lattice)
    with tuning.override(merge_translations=False):
        full = make_conv_nqs(lattice, full_group, channels=3, depth=1)
    merged = make_conv_nqs(lattice, full_group, channels=3, depth=1)  # merged by default
    assert merged.n_elements == 16 and full.n_elements == 256
    s = random_spins(rng, 16, 4)
    params = random_params(full, s, rng)
    assert_log_close(jitted(merged)(params, s), jitted(full)(params, s), atol=1e-10)
    with pytest.raises(ValueError, match="momentum"):
        merge_translation_images((6,), *chain_group(6, True, 1, 1))
    # by multiples of 2 cells only: 4 of the 16 translations per class, the class weight 4
    perms, flips, weights = merge_translation_images((4, 4), full_group.perms, full_group.flips,
                                                     full_group.characters, stride=2)
    assert len(perms) == 64 and np.allclose(weights, 4)
    with pytest.raises(ValueError, match="^stride: 3 must divide"):
        merge_translation_images((4, 4), full_group.perms, stride=3)
    with pytest.raises(ValueError, match="^translation_factors: only with stride 1"):
        merge_translation_images((4, 4), full_group.perms, stride=2, translation_factors=np.ones(16))


def test_no_nan_or_inf_on_special_rows(rng):
    L = 8
    up = np.ones(L, np.int8)
    # k = pi with parity +1: the Neel state has zero amplitude; the zero row's characters sum to 0
    group = chain_group(L, True, 1, 1)
    rows = np.stack([up, -up, neel((L,)), np.zeros(L, np.int8), generic_spins(rng, group, L, 1)[0]])
    assert np.all(forced_zero(group, rows[2:4]))
    model = Symmetrized(ConvResNet((L,), channels=3, depth=1, readout="origin"), *group)
    params64 = random_params(model, rows, rng)
    readout = params64["params"]["base"]["readout_dense"]
    readout["kernel"] = 0.03 * readout["kernel"]  # a tiny readout layer, as initialized
    for dtype in (jnp.float64, jnp.float32):
        model = Symmetrized(ConvResNet((L,), channels=3, depth=1, readout="origin", dtype=dtype), *group)
        params = jax.tree_util.tree_map(lambda x: np.asarray(x).astype(dtype), params64)

        def real_imag(p, x):
            out = model.apply(p, x[None])[0]
            return jnp.stack([out.real, out.imag])

        log_psi, grads = jax.jit(lambda p, x: (model.apply(p, x), jax.vmap(jax.jacrev(real_imag), (None, 0))(p, x)))(
            params, rows
        )
        assert np.all(np.isfinite(log_psi)), (dtype, log_psi)
        if dtype == jnp.float64:  # zero by symmetry: far below a generic amplitude (float32: rounding)
            assert log_psi.real[2] < log_psi.real[4] - 10 and log_psi.real[3] < log_psi.real[4] - 10
        assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(grads)), dtype
    # a 4x4 network in the full group
    lattice = Square(4)
    model = make_conv_nqs(lattice, qsym.full_symmetry(lattice), channels=3, depth=1)
    up = np.ones(16, np.int8)
    rows = np.stack([up, -up, neel((4, 4)), np.zeros(16, np.int8)])
    assert np.all(np.isfinite(jitted(model)(random_params(model, rows, rng), rows)))


def test_negative_amplitudes(rng):
    # forced by the sector: spin-inversion parity -1 gives psi(-s) = -psi(s)
    L = 8
    group = chain_group(L, False, 1, -1)
    model = Symmetrized(ConvResNet((L,), channels=3, depth=1), *group)
    s = generic_spins(rng, group, L, 6)
    params = random_params(model, s, rng)
    ratio = np.exp(jitted(model)(params, -s) - jitted(model)(params, s))
    np.testing.assert_allclose(ratio, -1, atol=1e-10)
    # constructed parameters: Im log psi_0 = (pi/2) sum_r s_r, so psi_0 < 0 when sum_r s_r = 2 mod 4
    net = ConvResNet((4,), channels=2, depth=0, kernel_size=1, norm="layer")
    a = 1 / np.sqrt(1 + 1e-5)  # LayerNorm of (s, -s)
    gelu = lambda x: np.asarray(flax.linen.gelu(x))
    c = (np.pi / 2) / (gelu(a) - gelu(-a))
    p = {
        "input_conv": {"kernel": np.array([[[1.0, -1.0]]]), "bias": np.zeros(2)},
        "final_norm": {"scale": np.ones(2), "bias": np.zeros(2)},
        "readout_dense": {"kernel": np.array([[0.0, c], [0.0, -c]])},
    }
    configs = np.array(list(itertools.product([-1, 1], repeat=4)), np.int8)
    psi = np.exp(np.asarray(jitted(net)({"params": p}, configs)))
    negative = configs.sum(axis=1) % 4 == 2
    assert np.all(psi.real[negative] < -0.99 * np.abs(psi[negative]))
    assert np.all(psi.real[~negative] > 0.99 * np.abs(psi[~negative]))


def test_float32_and_float64(rng):
    L = 8
    group = chain_group(L, False, 1, 1)  # no cancellation: float32 rounding stays small
    s = generic_spins(rng, group, L, 5)
    m64 = Symmetrized(ConvResNet((L,), channels=3, depth=1, dtype=jnp.float64), *group)
    m32 = Symmetrized(ConvResNet((L,), channels=3, depth=1, dtype=jnp.float32), *group)
    p64 = random_params(m64, s, rng)
    p32 = jax.eval_shape(m32.init, KEY, s)
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree_util.tree_leaves(p32))
    assert all(leaf.dtype == jnp.float64 for leaf in jax.tree_util.tree_leaves(p64))
    out64 = jitted(m64)(p64, s)
    out32 = jitted(m32)(jax.tree_util.tree_map(lambda x: np.asarray(x, np.float32), p64), s)
    assert out64.dtype == jnp.complex128 and out32.dtype == jnp.complex64
    assert_log_close(out32, out64, atol=1e-5)
    r32 = RBM(1, dtype=jnp.float32)
    assert jax.eval_shape(r32.apply, jax.eval_shape(r32.init, KEY, s), s).dtype == jnp.complex64


# --------------------------------------------------------------------------- #
# RBM                                                                           #
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("complex_output", [True, False])
def test_rbm_matches_formula(rng, complex_output):
    N, alpha = 6, 2
    model = RBM(alpha, complex_output=complex_output)
    s = random_spins(rng, N, 7)
    params = random_params(model, s, rng, scale=1.0)
    p = params["params"]
    get = (lambda k: np.asarray(p[k + "_re"]) + 1j * np.asarray(p[k + "_im"])) if complex_output else (lambda k: np.asarray(p[k]))
    W, b, a = get("kernel"), get("hidden_bias"), get("visible_bias")
    expect = s @ a + np.log(np.cosh(s @ W + b)).sum(axis=1)
    out = jitted(model)(params, s)
    assert out.dtype == (jnp.complex128 if complex_output else jnp.float64)
    assert_log_close(out, expect, atol=1e-10)
    assert count_params(params) == (N * alpha * N + alpha * N + N) * (2 if complex_output else 1)


def test_symmetrized_rbm_in_momentum_sector(rng):
    L = 6
    lattice = Chain(L)
    sym = qsym.product(qsym.translations(lattice, momentum=[2 * np.pi / 3]), qsym.spin_inversion(lattice, -1))
    model = make_rbm_nqs(lattice, sym, alpha=1)
    s = generic_spins(rng, (sym.perms, sym.flips, sym.characters), L, 4)
    params = random_params(model, s, rng, scale=0.5)
    G = sym.n_elements
    images = (sym.flips[None, :, None] * s[:, sym.perms]).reshape(-1, L)  # rows (b, g)
    log_psi = np.asarray(jitted(model)(params, np.concatenate([s, images])))
    expect = np.repeat(log_psi[:4], G) - np.log(np.tile(sym.characters, 4))
    assert_log_close(log_psi[4:], expect, atol=1e-9)
    real = make_rbm_nqs(lattice, qsym.translations(lattice), complex_output=False)
    out = jitted(real)(random_params(real, s, rng), s)
    assert out.dtype == jnp.float64  # real base, positive characters: a real log psi


# --------------------------------------------------------------------------- #
# through chunk_map (zero padding rows), errors                                 #
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("shard_batch", [False, True])
def test_through_chunk_map(rng, shard_batch):
    L = 8
    group = chain_group(L, False, -1, -1)
    model = Symmetrized(ConvResNet((L,), channels=3, depth=1), *group)
    s = generic_spins(rng, group, L, 21)
    params = random_params(model, s, rng)
    f = chunk_map(model.apply, in_axes=(None, 0), chunk_size=2, shard_batch=shard_batch, use_scan=True)
    out = f(params, s)
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, jitted(model)(params, s), atol=1e-12)


def test_errors():
    with pytest.raises(ValueError, match="dtype"):
        ConvResNet((4,), dtype=jnp.int32)
    with pytest.raises(ValueError, match="readout"):
        ConvResNet((4,), readout="mean")
    with pytest.raises(ValueError, match="norm"):
        ConvResNet((4,), norm="batch")
    with pytest.raises(TypeError, match="channels"):
        ConvResNet((4,), channels=2.5)
    model = ConvResNet((4,), channels=2, depth=0)
    with pytest.raises(ValueError, match=r"s: expected spin configurations of shape \(batch, 4\)"):
        model.init(KEY, np.ones((2, 5), np.int8))
    with pytest.raises(ValueError, match="perms"):
        Symmetrized(model, [[0, 0, 1, 2]])
    with pytest.raises(ValueError, match="flips"):
        Symmetrized(model, [[0, 1, 2, 3]], flips=[2])
    with pytest.raises(ValueError, match="characters"):
        Symmetrized(model, [[0, 1, 2, 3]], characters=[0.0])
    with pytest.raises(ValueError, match="pbc"):
        make_conv_nqs(Chain(4, pbc=False), None)
    with pytest.raises(ValueError, match="perms"):
        make_conv_nqs(Chain(6), qsym.translations(Chain(4)))
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(ValueError, match="jax_enable_x64"):
            ConvResNet((4,), dtype=jnp.float64)
    finally:
        jax.config.update("jax_enable_x64", True)


def test_real_output_network_is_positive_symmetric_and_counted():
    import jax
    import jax.numpy as jnp
    import numpy as np
    import pytest

    from quantax_lite.geometry.lattice import Square
    from quantax_lite.models import conv_param_count, count_params, make_conv_nqs
    from quantax_lite.geometry.symmetry import full_symmetry

    lattice = Square(4)
    group = full_symmetry(lattice)
    model = make_conv_nqs(lattice, group, channels=4, depth=1, complex_output=False)
    s = jnp.asarray(np.random.default_rng().choice(np.array([-1, 1], np.int8), size=(5, 16)))
    params = model.init(jax.random.PRNGKey(0), s)
    assert count_params(params) == conv_param_count(2, 4, 1, 3, complex_output=False)
    params = jax.tree_util.tree_map(lambda x: x * 30.0, params)  # far from uniform
    out = model.apply(params, s)
    assert out.dtype == jnp.float64 and out.shape == (5,)
    images = group.apply(np.asarray(s))  # (5, G, 16): log psi(g s) = log psi(s)
    for g in range(0, group.n_elements, 37):
        np.testing.assert_allclose(model.apply(params, jnp.asarray(images[:, g])), out, rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="complex_output"):
        from quantax_lite.geometry.symmetry import translations as tr
        make_conv_nqs(lattice, tr(lattice, momentum=(np.pi, 0.0)), complex_output=False)


# --------------------------------------------------------------------------- #
# signed networks                                                               #
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("readout", ["sum", "origin"])
def test_signed_network_matches_formula(rng, readout):
    """psi_0 = exp(sum_r a_r) (1 + sum_r g_r) ("sum") or exp(a_0)(1 + g_0) ("origin"),
    evaluated from the readout outputs; the sign is learned, the phase is 0 or pi."""
    shape = (3, 4)
    model = ConvResNet(shape, channels=3, depth=1, signed=True, readout=readout)
    s = random_spins(rng, 12, 64)
    params = random_params(model, s, rng, scale=0.6)
    # rescale the sign readout so that the median of 1 + sum g is 0: both signs occur
    g = np.asarray(jitted(model, "position_outputs")(params, s))[..., 1]
    g = g.sum(axis=1) if readout == "sum" else g[:, 0]
    kernel = np.array(params["params"]["readout_dense"]["kernel"])
    kernel[:, 1] *= -1 / np.median(g[g != 0])  # (the origin readout can give g = 0 on half the rows)
    params["params"]["readout_dense"]["kernel"] = kernel
    out = np.asarray(jitted(model)(params, s))
    a, g = np.moveaxis(np.asarray(jitted(model, "position_outputs")(params, s)), -1, 0)
    factor = 1 + (g.sum(axis=1) if readout == "sum" else g[:, 0])
    psi = np.exp(a.sum(axis=1) if readout == "sum" else a[:, 0]) * factor
    assert np.any(psi < 0) and np.any(psi > 0)  # both signs occur: the test can fail
    ok = np.abs(factor) > 1e-9  # (the median row itself sits on the node: 1 + g is rounding noise there)
    np.testing.assert_allclose(np.exp(out.real[ok]), np.abs(psi[ok]), rtol=1e-8)
    np.testing.assert_allclose(np.exp(1j * out.imag[ok]).real, np.sign(psi[ok]), atol=1e-12)
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(np.exp(1j * out.imag).imag, 0, atol=1e-12)


def test_signed_network_at_a_node_is_finite():
    # readout weights zero and g's weights chosen so that 1 + sum_r g_r = 0 exactly
    model = ConvResNet((4,), channels=2, depth=0, kernel_size=1, signed=True, norm="layer")
    s = np.array([[1, -1, 1, -1]], np.int8)
    params = jax.tree_util.tree_map(jnp.zeros_like, jax.eval_shape(model.init, KEY, s))
    params = flax.core.unfreeze(params)
    params["params"]["final_norm"]["scale"] = jnp.zeros(2)
    params["params"]["final_norm"]["bias"] = jnp.ones(2)  # features = gelu(1) at every site
    w = -1.0 / (4 * float(flax.linen.gelu(1.0)))
    params["params"]["readout_dense"]["kernel"] = jnp.array([[0.0, w], [0.0, 0.0]])
    out = jitted(model)(params, s)
    assert np.isfinite(out).all() and out.real[0] <= np.log(np.finfo(np.float64).tiny) + 1e-6
    grad = jax.grad(lambda p: jnp.real(model.apply(p, s)).sum())(params)
    assert all(np.isfinite(x).all() for x in jax.tree_util.tree_leaves(grad))


def test_signed_network_jacobian_is_that_of_its_real_part(rng):
    from quantax_lite.optimizer.log_derivatives import jacobian
    from quantax_lite.models import derivative_form, real_part

    lattice = Square(4)
    model = make_conv_nqs(lattice, qsym.translations(lattice), channels=3, depth=1, signed=True)
    # the driver differentiates the real part of a signed network, and only of one
    assert derivative_form(model.apply).__wrapped__ == model.apply
    complex_model = make_conv_nqs(lattice, qsym.translations(lattice), channels=3, depth=1)
    assert derivative_form(complex_model.apply) == complex_model.apply
    momentum = make_conv_nqs(lattice, qsym.translations(lattice, momentum=(np.pi / 2, 0)), channels=3, depth=1,
                             signed=True)
    assert derivative_form(momentum.apply) == momentum.apply  # complex characters: a complex psi
    s = random_spins(rng, 16, 16)
    params = random_params(model, s, rng, scale=0.6)
    full = np.asarray(jacobian(model.apply, params, jnp.asarray(s)))
    real = np.asarray(jacobian(real_part(model.apply), params, jnp.asarray(s)))
    assert np.iscomplexobj(full) and not np.iscomplexobj(real)
    np.testing.assert_allclose(full.imag, 0, atol=1e-12)
    np.testing.assert_allclose(full.real, real, rtol=1e-10, atol=1e-12)
    # against jax.jacrev of log|psi| written out
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    ref = jax.jacrev(lambda q: jnp.real(model.apply(unravel(q), jnp.asarray(s))))(flat)
    np.testing.assert_allclose(real, np.asarray(ref), rtol=1e-9, atol=1e-11)


# --------------------------------------------------------------------------- #
# sinh networks (psi_0 = sum_r sum_k (sinh(y_rk) + c))                          #
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("readout,offset", [("sum", None), ("origin", None), ("sum", 1.0), ("origin", 0.0),
                                            ("sum", 2.5)])
def test_sinh_network_matches_formula(rng, readout, offset):
    """log psi_0 of the sinh head against sum_{r,k} (sinh(y_rk) + c) written out in float64
    from the readout outputs y (every cell with "sum", cell 0 with "origin"; c as given,
    None the library's 0.1), with rows of both signs; its parameters are those of the
    make_network path, value for value."""
    from quantax_lite.models import make_network
    from quantax_lite.models.heads import SINH_OFFSET

    lattice = Square(4)
    c = SINH_OFFSET if offset is None else offset
    model = make_conv_nqs(lattice, None, channels=3, depth=1, amplitude="sinh", readout=readout, sinh_offset=offset)
    again = make_network(lattice, None, "conv", dict(channels=3, depth=1), amplitude="sinh", readout=readout,
                         sinh_offset=offset, dtype=jnp.float64)
    s = random_spins(rng, 16, 64)
    params = random_params(model, s, rng, scale=0.6)
    assert jax.tree.structure(params) == jax.tree.structure(again.init(KEY, jnp.asarray(s)))
    kernel = np.array(params["params"]["readout_dense"]["kernel"])
    y = np.asarray(jitted(model, "position_outputs")(params, s))
    # readout weights scaled so that the largest |y| is 12 (sinh(12) = 8e4 outweighs the sum of
    # ones), then of either sign: y -> -y turns a row's dominant term over, both signs occur
    signs = []
    for sign in (1, -1):
        params["params"]["readout_dense"]["kernel"] = sign * kernel * 12 / np.abs(y).max()
        y_now = np.asarray(jitted(model, "position_outputs")(params, s))
        y_now = y_now if readout == "sum" else y_now[:, :1]
        psi = (np.sinh(y_now) + c).sum(axis=(1, 2))
        # rounding relative to the terms, not to psi (log psi near a node is ill-conditioned): a
        # sum of terms up to 8e4 that cancels, and each y itself a sum of size up to max|y| (12)
        # that may cancel, its rounding carried by cosh y
        scale = (np.abs(np.sinh(y_now) + c) + np.cosh(y_now) * np.abs(y_now).max()).sum(axis=(1, 2))
        out = np.asarray(jitted(model)(params, s))
        np.testing.assert_array_less(np.abs(np.exp(out) - psi), 1e-12 * scale)
        clear = np.abs(psi) > 1e-9 * scale  # rows whose sign rounding cannot turn over
        np.testing.assert_allclose(np.exp(1j * out.imag)[clear], np.sign(psi)[clear], atol=1e-12)
        # the same function by the make_network path
        np.testing.assert_array_less(np.abs(np.exp(np.asarray(again.apply(params, jnp.asarray(s)))) - np.exp(out)),
                                     1e-12 * scale)
        signs += list(np.sign(psi))
    assert -1 in signs and 1 in signs  # the test can fail


def test_sinh_sum_log_in_float32_does_not_overflow():
    """Terms of e^300 in float32 (whose largest number is about e^88) of either sign, a pair
    that cancels to 2 exactly, and a row on a node: against float64 written out."""
    from quantax_lite.models.heads import sinh_sum_log

    y = np.array([[300.0, -299.0, 1.0], [250.0, 1.0, -3.0], [-300.0, 2.0, 0.0]], np.float32)
    out = np.asarray(jax.jit(sinh_sum_log)(jnp.asarray(y)[:, :, None]))
    psi = (np.sinh(y.astype(np.float64)) + 1).sum(axis=1)
    assert out.dtype == np.complex64 and np.all(np.isfinite(out))
    np.testing.assert_allclose(out.real, np.log(np.abs(psi)), rtol=1e-6)
    np.testing.assert_allclose(np.cos(out.imag), np.sign(psi), atol=1e-6)
    pair = np.asarray(sinh_sum_log(jnp.array([[[2.5], [-2.5]]], jnp.float64)))
    assert pair[0] == pytest.approx(np.log(2.0), rel=1e-14)
    node = np.asarray(sinh_sum_log(jnp.array([[[np.arcsinh(-1.0)]]], jnp.float64)))  # sinh(y) + 1 = 0
    grad = jax.grad(lambda y: jnp.real(sinh_sum_log(y)).sum())(jnp.array([[[np.arcsinh(-1.0)]]], jnp.float64))
    assert np.isfinite(node).all() and np.isfinite(np.asarray(grad)).all()


def test_sinh_offset_is_refused_where_it_does_not_apply():
    """An offset below 0, not finite or not a number, or given to another head: errors
    naming sinh_offset."""
    from quantax_lite.models import make_network
    from quantax_lite.models.heads import Head

    lattice = Square(4)
    for bad, error in ((-0.1, ValueError), (float("nan"), ValueError), ("1", TypeError), (True, TypeError)):
        with pytest.raises(error, match="^sinh_offset: "):
            make_conv_nqs(lattice, None, channels=2, depth=1, amplitude="sinh", sinh_offset=bad)
    for amplitude in ("signed", "complex", "positive"):
        with pytest.raises(ValueError, match="^sinh_offset: only the 'sinh' amplitude"):
            make_network(lattice, None, "conv", dict(channels=2, depth=1), amplitude=amplitude, sinh_offset=1.0)
    with pytest.raises(ValueError, match="^sinh_offset: only the 'sinh' amplitude"):
        Head("signed", offset=0.5)


def test_sinh_network_jacobian_is_that_of_its_real_part(rng):
    from quantax_lite.models import derivative_form, real_part
    from quantax_lite.optimizer.log_derivatives import jacobian

    lattice = Square(4)
    model = make_conv_nqs(lattice, qsym.translations(lattice), channels=3, depth=1, amplitude="sinh")
    assert derivative_form(model.apply).__wrapped__ == model.apply
    s = random_spins(rng, 16, 16)
    params = random_params(model, s, rng, scale=0.6)
    full = np.asarray(jacobian(model.apply, params, jnp.asarray(s)))
    real = np.asarray(jacobian(real_part(model.apply), params, jnp.asarray(s)))
    np.testing.assert_allclose(full.imag, 0, atol=1e-12)
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    ref = jax.jacrev(lambda q: jnp.real(model.apply(unravel(q), jnp.asarray(s))))(flat)
    np.testing.assert_allclose(real, np.asarray(ref), rtol=1e-9, atol=1e-11)
    with pytest.raises(ValueError, match="^site_phases: a phase rule needs a complex network"):
        make_conv_nqs(lattice, None, channels=2, depth=1, amplitude="sinh", site_phases=np.zeros(16))


def test_signed_needs_complex_output():
    with pytest.raises(ValueError, match="signed"):
        ConvResNet((4,), signed=True, complex_output=False)
    with pytest.raises(ValueError, match="signed"):
        ConvResNet((4,), signed=True).bind({}).position_log_amplitudes(np.ones((1, 4), np.int8))


# --------------------------------------------------------------------------- #
# input checks at the public boundary                                          #
# --------------------------------------------------------------------------- #

SPIN_CHECK_MODELS = {
    "rbm": lambda: (RBM(1), 6),
    "real rbm": lambda: (RBM(0.5, complex_output=False), 6),
    "conv": lambda: (make_conv_nqs(Chain(6), None, channels=2, depth=1), 6),
    "conv 2d": lambda: (make_conv_nqs(Square(2, 3), None, channels=2, depth=1), 6),
    "symmetrized conv": lambda: (make_conv_nqs(Square(2, 4), qsym.full_symmetry(Square(2, 4)), channels=2, depth=1), 8),
    "symmetrized rbm": lambda: (make_rbm_nqs(Chain(6, pbc=False), qsym.point_group(Chain(6, pbc=False))), 6),
}


@pytest.mark.parametrize("name", keeping(list(SPIN_CHECK_MODELS), keep=(0, 2, 4)))
def test_apply_rejects_non_spin_configurations(rng, name):
    model, n = SPIN_CHECK_MODELS[name]()
    s = random_spins(rng, n, int(rng.integers(2, 6)))
    params = random_params(model, s, rng)
    bad = s.astype(np.float64 if rng.random() < 0.5 else np.int8)
    bad[rng.integers(len(s)), rng.integers(n)] = rng.choice([0, 2, -3])
    for arr in (bad, jnp.asarray(bad)):
        with pytest.raises(ValueError, match=r"^s: entries must be \+1 or -1"):
            model.apply(params, arr)
        with pytest.raises(ValueError, match=r"^s: entries must be \+1 or -1"):
            model.init(KEY, arr)
    with pytest.raises(ValueError, match=rf"^s: expected spin configurations of shape \(batch, {n}\)"):
        model.apply(params, s[:, :-1])
    with pytest.raises(ValueError, match=rf"^s: expected spin configurations of shape \(batch, {n}\)"):
        model.apply(params, np.concatenate([s, s[:, :1]], axis=1))
    with pytest.raises(ValueError, match=rf"^s: expected spin configurations of shape \(batch, {n}\)"):
        model.apply(params, s[0])
    with pytest.raises(TypeError, match=r"^s: expected an integer"):
        model.apply(params, s > 0)
    # valid input: eager (numpy / jax, int8 / float) and jitted give the same numbers
    ref = np.asarray(jitted(model)(params, s))
    for arr in (s, jnp.asarray(s), s.astype(np.float32)):
        np.testing.assert_allclose(np.asarray(model.apply(params, arr)), ref, rtol=1e-12, atol=1e-12)


def test_symmetry_of_another_lattice_is_rejected():
    sq = Square(4)
    for other in (Chain(16), Square(2, 8), Square(8, 2)):
        with pytest.raises(ValueError, match=r"^symmetry: built for the lattice 4x4, not for the model's lattice"):
            make_conv_nqs(other, qsym.translations(sq), channels=2, depth=1)
        with pytest.raises(ValueError, match=r"^symmetry: built for the lattice 4x4"):
            make_rbm_nqs(other, qsym.spin_inversion(sq))
    with pytest.raises(ValueError, match=r"^symmetry: built for the lattice chain:16, not for the model's lattice 4x4"):
        make_conv_nqs(sq, qsym.full_symmetry(Chain(16)), channels=2, depth=1)
    with pytest.raises(ValueError, match=r"^symmetry: built for the lattice 4x4:open"):
        make_rbm_nqs(sq, qsym.point_group(Square(4, pbc=False)))
    # the lattice the group was built for (also an equal copy, and products of its groups)
    group = qsym.translations(sq) * qsym.spin_inversion(Square(4, 4))
    assert make_conv_nqs(Square(4, 4), group, channels=2, depth=1).n_elements == 2  # accepted; merged to one image per translation coset
    assert make_rbm_nqs(sq, group).n_elements == 32
