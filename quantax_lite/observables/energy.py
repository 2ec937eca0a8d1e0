"""The energy ``<H>`` of the Hamiltonian handed to ``measure`` (reported only with one)."""
from __future__ import annotations

import numpy as np

from .checks import host
from .contract import Observable, Part
from .json_values import number
from .programs import local_values


def _evaluate(inputs, values) -> Part | None:
    if inputs.hamiltonian is None:
        return None
    e_loc = host(local_values(inputs.log_psi, inputs.params, inputs.samples, inputs.hamiltonian,
                              inputs.chunk_size, inputs.mesh, inputs.log_psi_samples))
    return Part(np.real(e_loc)[:, None], e_loc)


def _finish(inputs, stats, e_loc) -> dict:
    n, n_sites = inputs.n_samples, inputs.n_sites
    w = np.full(n, 1.0 / n) if inputs.weights is None else inputs.weights
    e_mean = w @ e_loc
    mean, error = stats.mean[0], stats.error[0]
    out = {
        "mean": number(mean), "error": number(error),
        "variance": number(w @ np.abs(e_loc - e_mean) ** 2), "tau": number(stats.tau[0]),
        "r_hat": number(stats.r_hat[0]),
        "per_site": number(mean / n_sites), "per_site_error": number(error / n_sites),
    }
    if np.iscomplexobj(e_loc):
        out["imag"] = number(np.imag(e_mean))
    return {"energy": out}


ENERGY = Observable("energy", _evaluate, _finish)
