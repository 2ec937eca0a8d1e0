"""Fresh samples of a driver's wavefunction, kept: what a final estimate and ``measure`` draw.

:func:`draw_samples` draws as :func:`quantax_lite.driver.vmc.energy_estimate` does (blocks of at
most a step's samples, so the memory is that of a training step; the same local
energies) and keeps the samples, so that observables can be measured on them. They are
samples of |psi|^2 also when the driver trains on samples of |psi|^(2 power)
(``MetropolisSampler(power=...)``): the same chains, thermalized again at power 1.
"""
from __future__ import annotations

import jax.numpy as jnp

from quantax_lite.sampler import of_psi_squared, per_chain

__all__ = ["draw_samples"]


def draw_samples(vmc, chains, params, n_samples: int, *, local_energies: bool = True, progress=None):
    """Fresh samples of ``vmc``'s sampler from ``chains``: ``(samples (n, n_sites) chain-major
    over the whole draw, log_psi (n,), local energies (n_chains, n / n_chains) or None
    without ``local_energies``, the advanced chains)``.

    n_samples: at most the step's samples, or a multiple of them (``ValueError`` naming
      ``n_samples`` otherwise). progress: None, or a callable ``progress(done, total)``
      called after every block (e.g. a tqdm bar's update).
    """
    block = min(n_samples, vmc.n_samples)
    if n_samples % block:
        raise ValueError(f"n_samples: {n_samples} must be a multiple of the step's {block} samples.")
    # a driver that trains on |psi|^(2 power): |psi|^2 here, from chains at home in
    # |psi|^(2 power), so the first block thermalizes them again
    sampler, rethermalize = of_psi_squared(vmc.sampler)
    n_chains = sampler.n_chains
    parts, n_blocks = [], n_samples // block
    for i in range(n_blocks):
        again = {"thermalize": True} if rethermalize and i == 0 else {}  # (a Metropolis sampler's option)
        s, lp, chains = sampler.sample(chains, params, block, **again)
        e = vmc.local_energies(params, s, lp) if local_energies else jnp.zeros(block)
        parts.append((per_chain(s, n_chains), per_chain(lp, n_chains), per_chain(e, n_chains)))
        if progress is not None:
            progress((i + 1) * block, n_samples)
    s, lp, e = (jnp.concatenate(x, axis=1) for x in zip(*parts))
    return s.reshape(n_samples, s.shape[-1]), lp.reshape(n_samples), e if local_energies else None, chains
