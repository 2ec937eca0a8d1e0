"""The evolution loop: steps of a :class:`~quantax_lite.evolution.TDVP` up to a final
time, with records, callbacks, a progress bar and a guard against non-finite steps."""
from __future__ import annotations

import time
from typing import Callable, Sequence

import jax
import numpy as np
from tqdm.auto import tqdm

from quantax_lite.utils.validate import finite_number
from quantax_lite.utils import limit_blas_threads, mesh_size
from quantax_lite.utils.threads import threads_for_solve
from .tdvp import TDVP, EvolutionState

__all__ = ["evolve", "EvolutionDiverged", "EvolutionStalled", "info_to_record"]

# a remaining time below this fraction of the final time (or of 1) ends the run: the sum
# of many float steps lands within rounding of t_end, not on it
_END_TOLERANCE = 1e-10
# ... or below this many units in the last place of the state's time dtype at t_end: a time
# held in float32 (accelerators) lands within about one unit of t_end (0.02 + 0.02 is
# float32(0.04) = 0.04 - 8.9e-10), and a step shorter than half a unit does not move it
_END_ULPS = 4


def _end_tolerance(t_end: float, dtype) -> float:
    """The remaining time below which a run to ``t_end`` has arrived, for a time held in
    ``dtype``: the larger of ``_END_TOLERANCE * max(1, |t_end|)`` and ``_END_ULPS`` units in the
    last place of ``dtype`` at ``t_end`` (float64: the first; float32: the second)."""
    ulp = float(np.spacing(np.abs(np.asarray(t_end, dtype))))
    return max(_END_TOLERANCE * max(1.0, abs(t_end)), _END_ULPS * ulp)


class EvolutionDiverged(RuntimeError):
    """A step gave a non-finite energy, error estimate or parameters; it was not taken.

    Attributes: ``state`` (the last good :class:`EvolutionState`: finite parameters whose
    energy was finite), ``step`` (its step count), ``t`` (its time), ``records`` (this
    call's records, all finite).
    """

    def __init__(self, state, step: int, t: float, records):
        self.state, self.step, self.t, self.records = state, step, t, records
        super().__init__(
            f"the evolution became non-finite after step {step} (t = {t:g}); it stopped with its last good state "
            "(this exception's .state). Likely cause: a step too large (lower dt or the tolerance) or a "
            "regularization too weak for a singular S (raise rcond or the shift)."
        )


class EvolutionStalled(RuntimeError):
    """A step did not advance the time: shorter than the resolution of the state's time dtype
    there (float32 on accelerators). Attributes: ``state`` (the last state, not advanced),
    ``t``, ``dt`` (the step asked for), ``records`` (this call's records)."""

    def __init__(self, state, t: float, dt: float, dtype, records):
        self.state, self.t, self.dt, self.records = state, t, dt, records
        resolution = float(np.spacing(np.asarray(t, dtype)))
        super().__init__(f"at t = {t:.9g} a step of dt = {dt:g} does not move the time, held in {np.dtype(dtype).name} "
                         f"(its resolution there: {resolution:g}); the run stopped before it.")


def _number(x) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


def info_to_record(info: dict, step: int, wall_time: float) -> dict:
    """One record (plain Python numbers; None where not finite) of a step's ``info``: the
    energy and TDVP residual at the step's start time ``t``, the step ``dt`` taken."""
    m = jax.device_get(info)
    energy = complex(m["energy"])
    return {
        "step": step, "t": float(m["t"]), "dt": float(m["dt"]),
        "energy": _number(energy.real), "energy_imag": _number(energy.imag),
        "energy_error": _number(m["energy_error"]), "variance": _number(m["variance"]),
        "residual": _number(m["residual"]), "kept": int(m["kept"]),
        "error": _number(m["error"]), "attempts": int(m["attempts"]), "wall_time_s": wall_time,
    }


def _lapack_threads(tdvp: TDVP, params) -> int:
    """LAPACK's threads while ``tdvp`` steps ``params`` on a CPU
    (:func:`~quantax_lite.utils.threads.threads_for_solve`): the solve is the smaller of the
    parameter count and the rows (twice the samples for real parameters)."""
    leaves = jax.tree_util.tree_leaves(params)
    n_par = sum(int(np.size(x)) for x in leaves)
    real = not any(np.iscomplexobj(x) for x in leaves)
    size = min(n_par, tdvp.n_samples * (2 if real else 1))
    return threads_for_solve(size, mesh_size(tdvp.sampler.resolved_mesh()))


def evolve(
    tdvp: TDVP,
    state: EvolutionState,
    t_end: float,
    *,
    callbacks: Sequence[Callable[[dict, EvolutionState], bool | None]] = (),
    progress: bool = True,
    max_steps: int | None = None,
) -> tuple[EvolutionState, list[dict]]:
    """Advance ``state`` to the time ``t_end`` (the last step shortened to land on it).

    Args:
      tdvp: the :class:`TDVP`. state: its :class:`EvolutionState` (``tdvp.init(...)``, or
        one loaded from a checkpoint: the run continues bit for bit).
      t_end: the final time (time units, > ``state.t``).
      callbacks: ``callback(record, state)`` after every step with that step's record and
        the new state; returning True stops the run there.
      progress: a tqdm bar over time.
      max_steps: stop after this many steps of this call (None: no limit).

    On CPUs the BLAS/LAPACK thread pools are limited while the loop runs (as in
    :func:`quantax_lite.driver.vmc.run`).
    Returns:
      ``(state, records)``: the final state and one record per step
      (:func:`info_to_record`: ``t``, ``dt``, ``energy`` ± ``energy_error``, ``variance``,
      ``residual``, ``kept``, ``error``, ``attempts``, ``wall_time_s``).
    The run has arrived when less than rounding is left (:func:`_end_tolerance`: a few
    units in the last place where the state's time is float32, as on accelerators).
    Raises:
      ValueError naming ``t_end`` when it is not after ``state.t``;
      :class:`EvolutionDiverged` (carrying the last good state) on a non-finite step;
      :class:`EvolutionStalled` when a step does not advance the time (a step below the
      resolution of the state's time dtype there, e.g. an adaptive ``dt_min`` at a large
      float32 time).
    """
    if not isinstance(tdvp, TDVP):
        raise TypeError(f"tdvp: expected a TDVP, got {type(tdvp).__name__}")
    if not isinstance(state, EvolutionState):
        raise TypeError(f"state: expected an EvolutionState (tdvp.init(...)), got {type(state).__name__}")
    t0 = float(state.t)
    t_end = finite_number(t_end, "t_end")
    if not t_end > t0:
        raise ValueError(f"t_end: expected a time after the state's t = {t0:g}, got {t_end!r}")
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer))
                                  or max_steps < 1):
        raise ValueError(f"max_steps: expected a positive int or None, got {max_steps!r}")
    records: list[dict] = []
    time_dtype = np.dtype(state.t.dtype)
    stop_at = _end_tolerance(t_end, time_dtype)
    bar = tqdm(total=t_end, initial=t0, disable=not progress or jax.process_index() != 0, desc="TDVP",
               dynamic_ncols=True, bar_format="{l_bar}{bar}| t={n:.4g}/{total:.4g} [{elapsed}<{remaining}{postfix}]")
    start = time.perf_counter()
    blas = limit_blas_threads(_lapack_threads(tdvp, state.params))
    try:
        t = t0
        before = None  # the state before ``state``: the last good one if ``state``'s energy is not finite
        while t_end - t > stop_at and (max_steps is None or len(records) < max_steps):
            new, info = tdvp.step(state, t_end - t)
            step = int(new.step)
            if not bool(info["finite"]):
                # finite parameters whose energy is not finite are not a good state either
                good = state if before is None or np.isfinite(complex(info["energy"])) else before
                raise EvolutionDiverged(good, int(good.step), float(good.t), records)
            if not float(new.t) > t:
                raise EvolutionStalled(state, t, float(info["dt"]), time_dtype, records)
            before, state = state, new
            rec = info_to_record(info, step, time.perf_counter() - start)
            records.append(rec)
            t = float(state.t)
            bar.n = min(t, t_end)
            bar.set_postfix_str(f"E={rec['energy']:.6f} dt={rec['dt']:.2e} r2={rec['residual']:.1e}")
            bar.refresh()
            if any(bool(cb(rec, state)) for cb in callbacks):
                break
    finally:
        blas.restore_original_limits()
        bar.close()
    return state, records
