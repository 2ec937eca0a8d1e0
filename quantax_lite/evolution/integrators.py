"""Explicit Runge-Kutta integrators of ``dθ/dt = f(θ, t)`` on flat parameter vectors.

A method is a Butcher tableau (:class:`Tableau`); an integrator is a fixed-step method
(:class:`Euler`, :class:`Heun`, :class:`RK4`) or an adaptive one (:class:`Adaptive`: an
embedded pair, Heun-Euler 2(1) or Bogacki-Shampine 3(2), whose step-size control measures
the difference of its two solutions in a norm given by the caller, for TDVP the S metric,
i.e. the distance between the quantum states the two solutions describe).

:func:`rk_stages` runs the stages in one ``lax.fori_loop`` (one copy of ``f`` in the
compiled program whatever the number of stages). ``f(y, t, carry) -> (k, aux, carry)``
threads a ``carry`` (e.g. Markov chains) through the stages; the ``aux`` of the first
stage (at the step's start) is returned.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from quantax_lite.utils.validate import finite_number

__all__ = ["Tableau", "Euler", "Heun", "RK4", "Adaptive", "Integrator", "rk_stages", "next_dt",
           "EULER", "HEUN", "RK4_TABLEAU", "HEUN_EULER", "BOGACKI_SHAMPINE"]


@dataclasses.dataclass(frozen=True)
class Tableau:
    """An explicit Butcher tableau: ``a`` (s, s) strictly lower, ``b`` (s,), ``c`` (s,), and
    for an embedded pair ``b_low`` (s,) of order ``order - 1`` (tuples: hashable)."""

    name: str
    a: tuple
    b: tuple
    c: tuple
    order: int
    b_low: tuple | None = None

    @property
    def stages(self) -> int:
        return len(self.b)


EULER = Tableau("euler", a=((0.0,),), b=(1.0,), c=(0.0,), order=1)
HEUN = Tableau("heun", a=((0.0, 0.0), (1.0, 0.0)), b=(0.5, 0.5), c=(0.0, 1.0), order=2)
RK4_TABLEAU = Tableau(
    "rk4",
    a=((0.0, 0.0, 0.0, 0.0), (0.5, 0.0, 0.0, 0.0), (0.0, 0.5, 0.0, 0.0), (0.0, 0.0, 1.0, 0.0)),
    b=(1 / 6, 1 / 3, 1 / 3, 1 / 6), c=(0.0, 0.5, 0.5, 1.0), order=4,
)
HEUN_EULER = dataclasses.replace(HEUN, name="heun_euler", b_low=(1.0, 0.0))
BOGACKI_SHAMPINE = Tableau(
    "bogacki_shampine",
    a=((0.0, 0.0, 0.0, 0.0), (0.5, 0.0, 0.0, 0.0), (0.0, 0.75, 0.0, 0.0), (2 / 9, 1 / 3, 4 / 9, 0.0)),
    b=(2 / 9, 1 / 3, 4 / 9, 0.0), c=(0.0, 0.5, 0.75, 1.0), order=3,
    b_low=(7 / 24, 1 / 4, 1 / 3, 1 / 8),
)
PAIRS = {"heun_euler": HEUN_EULER, "bogacki_shampine": BOGACKI_SHAMPINE}


@dataclasses.dataclass(frozen=True)
class _Fixed:
    tableau = None  # a class attribute of each method
    adaptive = False


@dataclasses.dataclass(frozen=True)
class Euler(_Fixed):
    """Forward Euler, order 1, one evaluation per step."""

    tableau = EULER


@dataclasses.dataclass(frozen=True)
class Heun(_Fixed):
    """Heun's method (explicit trapezoid), order 2, two evaluations per step."""

    tableau = HEUN


@dataclasses.dataclass(frozen=True)
class RK4(_Fixed):
    """The classical Runge-Kutta method, order 4, four evaluations per step."""

    tableau = RK4_TABLEAU


@dataclasses.dataclass(frozen=True)
class Adaptive:
    """An embedded pair with step-size control.

    tol: the largest accepted error per step, the norm of the difference of the pair's two
      solutions (for TDVP: the S-metric norm, the distance of the two normalized states;
      no unit beyond that of the norm), > 0.
    pair: "bogacki_shampine" (3(2), four evaluations; default: on the chain:8 quench it
      reached tol 1e-5 in 51 steps, Heun-Euler in 609) or "heun_euler" (2(1), two).
    dt_min, dt_max: bounds of the step (time units); a step at ``dt_min`` is accepted
      whatever its error.
    safety: the factor of the new-step formula ``dt (safety / err)^(1/order)``; the step
      changes by at most ``grow`` up and ``shrink`` down per attempt.
    max_attempts: attempts per step before the last one (at its smallest dt) is accepted.
    """

    tol: float = 1e-5
    pair: str = "bogacki_shampine"
    dt_min: float = 1e-6
    dt_max: float = 1.0
    safety: float = 0.9
    grow: float = 5.0
    shrink: float = 0.2
    max_attempts: int = 20
    adaptive = True

    def __post_init__(self):
        finite_number(self.tol, "tol", above=0)
        if self.pair not in PAIRS:
            raise ValueError(f"pair: expected one of {sorted(PAIRS)}, got {self.pair!r}")
        finite_number(self.dt_min, "dt_min", above=0)
        if finite_number(self.dt_max, "dt_max", above=0) < self.dt_min:
            raise ValueError(f"dt_max: expected a number >= dt_min = {self.dt_min:g}, got {self.dt_max!r}")
        if not 0 < finite_number(self.safety, "safety") <= 1:
            raise ValueError(f"safety: expected a number in (0, 1], got {self.safety!r}")
        if finite_number(self.grow, "grow") <= 1:
            raise ValueError(f"grow: expected a number > 1, got {self.grow!r}")
        if not 0 < finite_number(self.shrink, "shrink") < 1:
            raise ValueError(f"shrink: expected a number in (0, 1), got {self.shrink!r}")
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, (int, np.integer)) \
                or self.max_attempts < 1:
            raise ValueError(f"max_attempts: expected a positive int, got {self.max_attempts!r}")

    @property
    def tableau(self) -> Tableau:
        return PAIRS[self.pair]


Integrator = Euler | Heun | RK4 | Adaptive


def rk_stages(f: Callable, y: jax.Array, t, dt, carry: Any, tableau: Tableau, aux_template: Any):
    """One explicit RK step of ``dy/dt = f(y, t)`` from ``y`` (P,), jittable.

    ``f(y, t, carry) -> (k (P,), aux, carry)``; ``aux_template``: a pytree shaped like
    ``aux`` (zeros are fine; jax.eval_shape gives it). Returns ``(y_new, y_low, aux0,
    carry)``: the solution, the embedded lower-order one (``y_new`` itself without
    ``b_low``), the first stage's ``aux`` and the carry after the last stage. Every stage
    evaluates ``f`` once (no first-same-as-last reuse: with samples each evaluation draws
    its own batch).
    """
    s = tableau.stages
    dtype = jnp.result_type(y.dtype, dt)
    a = jnp.asarray(tableau.a, jnp.finfo(dtype).dtype)
    c = jnp.asarray(tableau.c, a.dtype)
    y = y.astype(dtype)
    ks = jnp.zeros((s,) + y.shape, dtype)

    def stage(i, state):
        ks, aux0, carry = state
        yi = y + dt * (a[i] @ ks)
        k, aux, carry = f(yi, t + c[i] * dt, carry)
        ks = ks.at[i].set(k.astype(dtype))
        aux0 = jax.tree.map(lambda new, old: jnp.where(i == 0, new, old), aux, aux0)
        return ks, aux0, carry

    ks, aux0, carry = lax.fori_loop(0, s, stage, (ks, aux_template, carry))
    b = jnp.asarray(tableau.b, a.dtype)
    y_new = y + dt * (b @ ks)
    if tableau.b_low is None:
        return y_new, y_new, aux0, carry
    b_low = jnp.asarray(tableau.b_low, a.dtype)
    return y_new, y + dt * (b_low @ ks), aux0, carry


def next_dt(integrator: Adaptive, dt, err):
    """The next step after one of ``dt`` with scaled error ``err`` (error / tol): ``dt
    (safety / err)^(1/q)`` (q = the lower order + 1 = the pair's order), limited to
    ``[shrink, grow]`` times ``dt`` and to ``[dt_min, dt_max]``."""
    q = integrator.tableau.order
    factor = integrator.safety * jnp.where(err > 0, err, 1e-10) ** (-1.0 / q)
    factor = jnp.where(jnp.isfinite(factor), factor, integrator.shrink)
    factor = jnp.clip(factor, integrator.shrink, integrator.grow)
    return jnp.clip(dt * factor, integrator.dt_min, integrator.dt_max)
