"""The stage schedule of a recipe: the symmetry group, samples per step, chains and learning
rate at each step (a staged ``symmetry`` such as 'translations>full@200'). Functions of the
recipe's fields; :class:`~quantax_lite.recipes.spec.Recipe`'s methods of the same names call them."""
from __future__ import annotations

import functools

from quantax_lite.utils.validate import positive_int
from .fields import parse_symmetry


def _halving_schedule(lr: float, half_life: float, start: int, count):
    """The learning rate at step ``count``: ``lr`` until ``start``, then halving every
    ``half_life`` steps, never below ``lr / 10`` (optax's ``exponential_decay`` with
    ``decay_rate=0.5``, computed in :func:`~quantax_lite.utils.tuning.wide_dtype`)."""
    import jax.numpy as jnp

    from quantax_lite.utils import tuning

    dt = tuning.wide_dtype()
    elapsed = jnp.maximum(jnp.asarray(count, dt) - jnp.asarray(start, dt), jnp.zeros((), dt))
    value = jnp.asarray(lr, dt) * jnp.asarray(0.5, dt) ** (elapsed / jnp.asarray(half_life, dt))
    return jnp.maximum(value, jnp.asarray(lr / 10, dt))



def default_chains(samples: int, n_devices: int) -> int:
    """One chain per sample (each records one sample per step: independent samples),
    rounded down to a multiple of the device count (at least one per device)."""
    return max(n_devices, samples // n_devices * n_devices)



def n_eval_samples(recipe) -> int:
    """Fresh samples of the final estimate."""
    if recipe.eval_samples is not None:
        return recipe.eval_samples
    return 32 * samples_at(recipe, symmetry_stages(recipe)[-1][1])


def samples_at(recipe, iteration: int) -> int:
    """Samples per step of the stage at ``iteration`` (:meth:`symmetry_at`):
    ``full_stage_samples`` in the full-group stage of a staged symmetry, where given,
    else ``samples``."""
    if in_full_stage(recipe, iteration) and recipe.full_stage_samples is not None:
        return recipe.full_stage_samples
    return recipe.samples


def in_full_stage(recipe, iteration: int) -> bool:
    """Whether ``iteration`` lies in the full-group stage of a staged symmetry (the last
    stage, from its first step on); ``ValueError`` naming ``iteration`` if negative."""
    positive_int(iteration, "iteration", minimum=0)
    stages = symmetry_stages(recipe)
    return len(stages) > 1 and iteration >= stages[-1][1]


def n_chains(recipe, n_devices: int) -> int:
    """Markov chains: ``chains``, or one per sample of the stage with the fewest samples
    per step (:func:`default_chains`); the same in every stage, so that a run's state
    keeps its shape (the stage with more samples draws several per chain)."""
    if recipe.chains is not None:
        return recipe.chains
    return default_chains(min(recipe.samples, recipe.full_stage_samples or recipe.samples), n_devices)


def learning_rate(recipe, iteration: int = 0):
    """The learning-rate schedule (an optax schedule of the step count) of the stage at
    ``iteration``: ``lr`` halving every ``lr_half_life`` steps down to ``lr / 10``; in the
    full-group stage of a staged symmetry with ``full_stage_lr``, that value at the
    stage's first step, halving from there down to a tenth of it."""
    lr, start = recipe.lr, 0
    if in_full_stage(recipe, iteration) and recipe.full_stage_lr is not None:
        lr, start = recipe.full_stage_lr, symmetry_stages(recipe)[-1][1]
    return functools.partial(_halving_schedule, lr, float(recipe.lr_half_life), start)


def symmetry_stages(recipe) -> tuple[tuple[str, int], ...]:
    """``((group, first iteration), ...)`` of ``symmetry`` (:func:`parse_symmetry`):
    one stage ``((symmetry, 0),)`` unless it is staged, e.g. 'translations>full@200'."""
    return parse_symmetry(recipe.symmetry)


def symmetry_at(recipe, iteration: int) -> str:
    """The group ('none', 'translations' or 'full') of the state after ``iteration``
    steps, which the next step trains: that of the last stage starting at or before it."""
    positive_int(iteration, "iteration", minimum=0)
    return [name for name, start in symmetry_stages(recipe) if start <= iteration][-1]

