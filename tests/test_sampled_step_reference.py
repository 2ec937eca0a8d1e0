"""An independent reference for one sampled (Metropolis) VMC step.

The driver's step on a small lattice is checked number by number against NumPy, from the
same samples: the step's samples are drawn again by calling its sampler on the same chain
state and parameters (the step's new chains must then be those of that call), and
everything else is recomputed without the library's local energies, Jacobian, SR solve or
statistics:

* the Hamiltonian as a dense matrix built here from the lattice's bonds (spin-1/2 units,
  ``J (S^z S^z + (S^+ S^- + S^- S^+) / 2)``), compared once with ``to_sparse``;
* psi on every configuration of the Sz = 0 sector (the network's ``apply``), so the local
  energies are rows of ``H psi`` divided by psi;
* the per-sample Jacobian from ``jax.jacrev`` on one configuration at a time (real and
  imaginary parts of log psi separately), checked against central finite differences;
* mean energy and variance (``mean |E_loc - <E_loc>|^2``, the library's convention), and
  the SR direction ``(S + eps) x = F`` and the MinSR one ``x = Ō^T (T + eps)^-1 ē`` by
  dense float64 linear algebra (real parameters: the rows of Ō and ē stacked as [Re; Im]).

The step tested is the second of a run (thermalized chains whose cached log psi belong to
the parameters before the first update), with ``optax.sgd(lr)``: the direction is
``(params - new_params) / lr``.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

from quantax_lite.geometry import symmetry as sym
from quantax_lite.hilbert.configurations import all_states, state_index, states_to_codes
from quantax_lite.geometry.lattice import Chain, Square
from quantax_lite.models import make_conv_nqs, make_rbm_nqs
from quantax_lite.operators.hamiltonian import Heisenberg
from quantax_lite.optimizer.preconditioners import sr
from quantax_lite.sampler import Exchange, MetropolisSampler
from quantax_lite.driver.vmc import VMC

RTOL = 1e-8  # float64 throughout: the step and the reference agree to rounding (measured 1e-12 or below)
LR = 0.5  # a power of two: (params - new_params) / LR loses nothing to the division
N_CHAINS, N_SAMPLES = 16, 64  # 2 chains per simulated device, 4 sweeps each


def _chain_j1j2_complex():
    """Chain of 8, J1-J2 (J2 = 0.5), complex conv network projected on the translations."""
    lattice = Chain(8)
    model = make_conv_nqs(lattice, sym.translations(lattice), channels=3, depth=1, kernel_size=3)
    return lattice, Heisenberg(lattice, J2=0.5), model


def _square_rbm():
    """4 x 2 square, Heisenberg, complex RBM (real parameters, no symmetry)."""
    lattice = Square(4, 2)
    return lattice, Heisenberg(lattice), make_rbm_nqs(lattice, alpha=1)


def _square_signed_full():
    """4 x 2 square, J1-J2 (J2 = 0.3), signed conv network (real psi, learned sign) projected
    on the full group: a real Jacobian (the driver differentiates Re log psi)."""
    lattice = Square(4, 2)
    model = make_conv_nqs(lattice, sym.full_symmetry(lattice), channels=2, depth=1, kernel_size=3, signed=True)
    return lattice, Heisenberg(lattice, J2=0.3), model


SYSTEMS = {"chain8 j1j2 complex conv": _chain_j1j2_complex, "square4x2 complex rbm": _square_rbm,
           "square4x2 j1j2 signed conv full": _square_signed_full}
# (system, the step's method, diag_shift, diag_scale); the other method of each is checked on the
# step's Jacobian in test_step_parts, so every pair (real / complex Jacobian, SR / MinSR) is covered
CASES = [
    ("chain8 j1j2 complex conv", "sr", 1e-3, 0.0),
    ("square4x2 complex rbm", "minsr", 1e-4, 1e-2),
    ("square4x2 j1j2 signed conv full", "minsr", 1e-3, 1e-2),
]


# --------------------------------------------------------------------------- #
# the NumPy reference                                                          #
# --------------------------------------------------------------------------- #


def dense_heisenberg(lattice, J1, J2, states):
    """H in the basis ``states`` (n, n_sites) of +-1 spins, from the lattice's bonds:
    sum over bonds of J (s_i s_j / 4 on the diagonal, 1/2 between configurations that differ
    by exchanging the antiparallel spins of the bond)."""
    states = np.asarray(states)
    n = len(states)
    codes = states_to_codes(states)
    order = np.argsort(codes)
    H = np.zeros((n, n))
    for J, order_ in ((J1, 1), (J2, 2)):
        if J == 0:
            continue
        for i, j in lattice.bonds(order_):
            si, sj = states[:, i].astype(np.int64), states[:, j].astype(np.int64)
            H[np.arange(n), np.arange(n)] += J * si * sj / 4
            anti = np.nonzero(si != sj)[0]
            flipped = states[anti].copy()
            flipped[:, [i, j]] = flipped[:, [j, i]]
            target = order[np.searchsorted(codes[order], states_to_codes(flipped))]
            H[anti, target] += J / 2
    return H


def reference_jacobian(model, params, samples):
    """(N, P) complex d log psi / d theta, ``jax.jacrev`` of one configuration at a time."""
    flat, unravel = ravel_pytree(params)

    def part(f):
        g = jax.jit(jax.jacrev(lambda th, s: f(model.apply(unravel(th), s[None])[0])))
        return np.stack([np.asarray(g(flat, s)) for s in np.asarray(samples)])

    return part(jnp.real) + 1j * part(jnp.imag)


def finite_difference_jacobian(model, params, samples, h=1e-5):
    """(N, P) complex central differences of log psi in every parameter."""
    flat, unravel = ravel_pytree(params)
    f = jax.jit(lambda th: model.apply(unravel(th), jnp.asarray(samples)))
    cols = []
    for k in range(flat.shape[0]):
        e = np.zeros(flat.shape[0])
        e[k] = h
        cols.append((np.asarray(f(flat + e)) - np.asarray(f(flat - e))) / (2 * h))
    return np.stack(cols, axis=1)


def reference_step(log_psi_all, H, index, jac, diag_shift, diag_scale):
    """From psi on every configuration (``log_psi_all``), the dense H, the samples' rows
    ``index`` and their Jacobian: local energies, mean energy, variance, and the SR and MinSR
    directions (real parameters), all in NumPy float64."""
    lp = np.asarray(log_psi_all, np.complex128)
    psi = np.exp(lp - lp.real.max())
    e_loc = (H @ psi)[index] / psi[index]
    n = len(index)
    energy = e_loc.mean()
    variance = np.mean(np.abs(e_loc - energy) ** 2)
    o_bar = (jac - jac.mean(axis=0)) / np.sqrt(n)
    e_bar = (e_loc - energy) / np.sqrt(n)
    a = np.concatenate([o_bar.real, o_bar.imag])  # (2N, P): the real formulation
    b = np.concatenate([e_bar.real, e_bar.imag])
    s, f = a.T @ a, a.T @ b
    eps = diag_shift + diag_scale * np.trace(s) / s.shape[0]
    x_sr = np.linalg.solve(s + eps * np.eye(s.shape[0]), f)
    t = a @ a.T
    x_minsr = a.T @ np.linalg.solve(t + eps * np.eye(t.shape[0]), b)
    return dict(e_loc=e_loc, energy=energy, variance=variance, sr=x_sr, minsr=x_minsr, eps=eps)


def close(found, expect, rtol=RTOL):
    """Relative agreement in the 2-norm (for vectors) or of the numbers."""
    found, expect = np.asarray(found), np.asarray(expect)
    return np.linalg.norm(found - expect) <= rtol * np.linalg.norm(expect)


# --------------------------------------------------------------------------- #
# the step, and its samples drawn again                                        #
# --------------------------------------------------------------------------- #


@functools.lru_cache(maxsize=None)
def _run(name, method, diag_shift, diag_scale):
    """The tested step (the second of a run) and everything the checks need."""
    lattice, ham, model = SYSTEMS[name]()
    n_sites = lattice.n_sites
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), jnp.ones((1, n_sites), jnp.int8))
    rng = np.random.default_rng(7)
    # a state far from uniform (large local-energy variance, a well-conditioned S)
    params = jax.tree_util.tree_map(lambda x: rng.normal(scale=0.5, size=x.shape).astype(x.dtype), shapes)
    sampler = MetropolisSampler(model.apply, Exchange(lattice.bonds(1), anti_aligned=True), n_chains=N_CHAINS,
                                n_sites=n_sites, n_thermalize=5)
    vmc = VMC(ham, sampler, optax.sgd(LR), N_SAMPLES,
              preconditioner=sr(diag_shift, diag_scale=diag_scale, method=method))
    state, _ = vmc.step(vmc.init(jax.random.PRNGKey(11), params))  # the first step: the chains thermalize
    new, metrics = vmc.step(state)
    # the step's samples: its sampler on the same chains, key and parameters
    samples, log_psi_s, chains = vmc.sampler.sample(state.sampler, state.params, vmc.n_samples)
    return dict(lattice=lattice, ham=ham, model=model, vmc=vmc, state=state, new=new,
                metrics=jax.device_get(metrics), samples=np.asarray(samples), log_psi_s=np.asarray(log_psi_s),
                chains=chains)


@functools.lru_cache(maxsize=None)
def _reference(name, method, diag_shift, diag_scale):
    r = _run(name, method, diag_shift, diag_scale)
    lattice, ham, model = r["lattice"], r["ham"], r["model"]
    params = r["state"].params
    states = all_states(lattice.n_sites, 0)
    index = state_index(r["samples"], states_to_codes(states))
    H = dense_heisenberg(lattice, ham.J1, ham.J2, states)
    log_psi_all = np.asarray(jax.jit(model.apply)(params, jnp.asarray(states)))
    jac = reference_jacobian(model, params, r["samples"])
    ref = reference_step(log_psi_all, H, index, jac, diag_shift, diag_scale)
    return dict(ref, H=H, states=states, index=index, log_psi_all=log_psi_all, jac=jac)


@pytest.fixture(params=CASES, ids=[f"{c[0]} {c[1]}" for c in CASES])
def case(request):
    return _run(*request.param), _reference(*request.param), request.param


def test_reference_pieces_agree(case):
    """The reference's own pieces: the dense H built here equals the library's
    ``to_sparse``, the jacrev Jacobian equals finite differences, and SR equals MinSR (the
    push-through identity) for the same shift."""
    r, ref, (name, *_) = case
    np.testing.assert_allclose(r["ham"].to_sparse(ref["states"]).toarray(), ref["H"], rtol=0, atol=1e-14)
    fd = finite_difference_jacobian(r["model"], r["state"].params, r["samples"])
    np.testing.assert_allclose(fd, ref["jac"], rtol=1e-6, atol=1e-7 * np.abs(ref["jac"]).max())
    assert close(ref["minsr"], ref["sr"], 1e-10)
    assert np.linalg.norm(ref["sr"]) > 1e-3  # a direction worth comparing
    assert len(np.unique(ref["index"])) > 8  # the samples visit many configurations


def test_step_draws_the_samples_drawn_again(case):
    """The step's new chains are those of its sampler called again on the same state: the
    samples reproduced are the step's. Their log psi (as sampled, from the chains' cache)
    equal the network's on them, and so do the new chains' cached values."""
    r, ref, _ = case
    new, chains = r["new"], r["chains"]
    np.testing.assert_array_equal(np.asarray(new.sampler.states), np.asarray(chains.states))
    np.testing.assert_array_equal(np.asarray(new.sampler.n_accepted), np.asarray(chains.n_accepted))
    assert int(new.iteration) == int(r["state"].iteration) + 1 == 2
    log_psi = r["log_psi_s"]
    np.testing.assert_allclose(log_psi, ref["log_psi_all"][ref["index"]], rtol=1e-12, atol=1e-12)
    direct = np.asarray(jax.jit(r["model"].apply)(r["state"].params, jnp.asarray(r["samples"])))
    np.testing.assert_allclose(log_psi, direct, rtol=1e-12, atol=1e-12)
    # the chains' cache after the step belongs to the parameters that drew them
    cached = np.asarray(new.sampler.log_psi)
    np.testing.assert_allclose(
        cached, np.asarray(jax.jit(r["model"].apply)(r["state"].params, new.sampler.states)), rtol=1e-12, atol=1e-12)


def test_step_energy_and_variance(case):
    """The step's energy is the mean of the reference local energies (complex) and its
    variance their mean |E - <E>|^2, to 1e-8 relative."""
    r, ref, _ = case
    m = r["metrics"]
    assert complex(m["energy"]) == pytest.approx(complex(ref["energy"]), rel=RTOL)
    assert float(m["variance"]) == pytest.approx(float(ref["variance"]), rel=RTOL)
    assert float(ref["variance"]) > 1e-2  # far from an eigenstate: the check has teeth
    assert bool(m["finite_energy"]) and bool(m["finite_direction"]) and not bool(m["sr_fallback"])


def test_step_direction_is_the_dense_solve(case):
    """The parameter update divided by the learning rate is the dense SR (= MinSR)
    direction, to 1e-8 relative; so is the logged step norm."""
    r, ref, (_, method, *_) = case
    before = np.asarray(ravel_pytree(r["state"].params)[0])
    after = np.asarray(ravel_pytree(r["new"].params)[0])
    direction = (before - after) / LR
    assert close(direction, ref[method])
    assert close(direction, ref["sr" if method == "minsr" else "minsr"])
    assert float(r["metrics"]["step_norm"]) == pytest.approx(np.linalg.norm(ref["sr"]), rel=RTOL)


def test_step_parts(case):
    """The parts of the step, called alone: the library's Jacobian of the samples (in the
    derivative form the step uses: Re log psi for a signed network) equals jacrev's, and
    SR and MinSR (``sr(method=...)``, the step's and the other) on it and the reference
    local energies return the dense direction, with the shift the reference adds."""
    from quantax_lite.optimizer.log_derivatives import jacobian
    from quantax_lite.models import derivative_form

    r, ref, (name, method, diag_shift, diag_scale) = case
    vmc, state = r["vmc"], r["state"]
    jac = np.asarray(jacobian(derivative_form(vmc.log_psi), state.params, jnp.asarray(r["samples"])))
    if np.iscomplexobj(jac):
        assert close(jac, ref["jac"])
    else:  # a signed network: d log psi / d theta is real
        assert np.abs(ref["jac"].imag).max() <= 1e-12 * np.abs(ref["jac"]).max()
        assert close(jac, ref["jac"].real)
    for other in ("sr", "minsr"):
        p = sr(diag_shift, diag_scale=diag_scale, method=other)
        x, _, info = jax.jit(lambda j, e: p.update(j, e, None, step=jnp.int32(1)))(
            jnp.asarray(jac), jnp.asarray(ref["e_loc"]))
        assert close(np.asarray(x), ref["sr"]), other
        assert float(info["sr_eps"]) == pytest.approx(ref["eps"], rel=1e-10)
