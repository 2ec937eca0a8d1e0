"""The recipe's vocabulary: the values each field may take, the seed, and the command-line
forms of fields (``parse_symmetry``, ``int_or_auto``, ``network_option``, ...). Pure parsing,
no physics: :mod:`~quantax_lite.recipes.spec` checks a recipe's fields with these."""
from __future__ import annotations

import argparse
import re

import numpy as np

from quantax_lite.utils.errors import FieldError, FieldTypeError
from quantax_lite.hamiltonians import HAMILTONIAN_NAMES

# the registered models (quantax_lite.hamiltonians), a live view: ('heisenberg', 'j1j2', 'tfim') and any added
HAMILTONIANS = HAMILTONIAN_NAMES
# the recipe's coupling fields (a registered model names one of them, or none)
COUPLINGS = ("J2", "h")
SYMMETRIES = ("none", "translations", "full")
AMPLITUDES = ("auto", "positive", "signed", "sinh", "complex")
PHASE_RULES = ("auto", "none", "120")
PRECISIONS = ("f32", "f64")
NORMS = ("none", "layer")
MOMENTUM_READOUTS = ("plane_wave", "origin")
SAMPLINGS = ("metropolis", "exact_sum")
# the most configurations (of the Sz sector sampled) that sampling exact_sum sums over: 2**21 (22 sites at Sz = 0)
MAX_EXACT_SUM_STATES = 2**21
AUTO = "auto"
# seeds are 64-bit PRNG seeds: 0 <= seed < 2**63 (jax reads an int seed as an int64)
SEED_LIMIT = 2**63


def is_auto(value) -> bool:
    """Whether a field's value is the string 'auto' (decided by :mod:`~quantax_lite.recipes.resolve`)."""
    return isinstance(value, str) and value == AUTO


def check_choice(value, name, options):
    """``ValueError`` naming ``name`` unless ``value`` is one of ``options``."""
    if value not in options:
        raise FieldError(name, f"{name}: expected one of {options}, got {value!r}.")


def check_seed(seed, name: str = "seed") -> int:
    """``seed`` as an int in ``[0, 2**63)``; ``TypeError`` / ``ValueError`` naming ``name``
    otherwise (a larger int is refused, not folded: every seed names one key)."""
    wanted = f"{name}: expected an int >= 0 and < 2**63, got {seed!r}"
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise FieldTypeError(name, wanted)
    seed = int(seed)
    if not 0 <= seed < SEED_LIMIT:
        raise FieldError(name, wanted)
    return seed


def seed_key(seed: int):
    """The PRNG key of ``seed`` (:func:`check_seed`): ``jax.random.PRNGKey(seed)`` as jax
    makes it with ``jax_enable_x64`` on, the same with it off (where jax itself keeps only
    the low 32 bits of a seed, so seeds 2**32 apart would share a key)."""
    import jax
    import jax.numpy as jnp

    seed = check_seed(seed)
    if seed < 2**32 or jax.config.jax_enable_x64 or str(jax.config.jax_default_prng_impl) != "threefry2x32":
        return jax.random.PRNGKey(seed)
    return jnp.asarray([seed >> 32, seed & 0xFFFFFFFF], dtype=jnp.uint32)  # threefry's key of a 64-bit seed


def parse_symmetry(text) -> tuple[tuple[str, int], ...]:
    """The stages of a ``symmetry`` value: ``((group, first iteration), ...)``, the first
    at iteration 0. ``'full'`` -> ``(('full', 0),)``; ``'translations>full@200'`` ->
    ``(('translations', 0), ('full', 200))``: the state after N steps, and every step
    after it, is in the group of ``@N``. Each later group contains the earlier one
    (none < translations < full) and its N is larger; ``none`` is only a whole run (its
    network has no projection, so its parameters would not carry over). ``ValueError``
    naming ``symmetry`` otherwise."""
    if not isinstance(text, str):
        raise FieldError("symmetry", f"symmetry: expected one of {SYMMETRIES} or stages such as 'translations>full@200', "
                         f"got {text!r}.")
    parts = [p.strip() for p in text.split(">")]
    stages, rank = [], {name: i for i, name in enumerate(SYMMETRIES)}
    for i, part in enumerate(parts):
        m = re.fullmatch(r"([a-z]+)(?:\s*@\s*(\S+))?", part)
        if m is None or m.group(1) not in rank:
            raise FieldError("symmetry", f"symmetry: {text!r}: cannot read {part!r}; expected one of {SYMMETRIES}, or stages "
                             "'translations>full@N' (the full group from step N on).")
        name, at = m.group(1), m.group(2)
        if i == 0:
            if at is not None:
                raise FieldError("symmetry", f"symmetry: {text!r}: the first group holds from the start; no '@' on {part!r}.")
            stages.append((name, 0))
            continue
        if at is None or not re.fullmatch(r"\d+", at) or int(at) < 1:
            raise FieldError("symmetry", f"symmetry: {text!r}: {part!r} needs the step where it takes over, a positive int "
                             f"'@N', got {at!r}.")
        prev, start = stages[-1]
        if int(at) <= start:
            raise FieldError("symmetry", f"symmetry: {text!r}: the stages' steps must increase, got @{at} after @{start}.")
        if prev == "none":
            raise FieldError("symmetry", f"symmetry: {text!r}: 'none' cannot be followed by a group (the projected network's "
                             "parameters differ from the bare one's); start from 'translations', whose network "
                             "is the same translation-invariant one.")
        if rank[name] <= rank[prev]:
            raise FieldError("symmetry", f"symmetry: {text!r}: {name!r} is not larger than {prev!r}; each later group must "
                             f"contain the earlier one and more ({' < '.join(SYMMETRIES)}).")
        stages.append((name, int(at)))
    return tuple(stages)



def momentum_text(text: str):
    """Command-line form of ``momentum``: 'auto', or 'm1,m2' (or 'm' on a chain) -> a list of
    ints (checked by the recipe)."""
    if text.strip() == AUTO:
        return AUTO
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers m1,m2 (k = m1 b1/L1 + m2 b2/L2), got {text!r}") from None



def int_or_auto(text: str):
    """Command-line form of ``chunk_size``: 'auto' or an int (checked by the recipe)."""
    if text.strip() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive int or 'auto', got {text!r}") from None


def parity_or_auto(text: str):
    """Command-line form of ``spin_parity`` / ``rotation_parity``: 'auto' or an int (the
    parser's choices then allow +1 and -1)."""
    if text.strip() == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected +1, -1 or 'auto', got {text!r}") from None


def float_or_auto(text: str):
    """Command-line form of ``diag_shift`` / ``sr_momentum``: 'auto' or a number (checked by
    the recipe)."""
    if text.strip() == AUTO:
        return AUTO
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None


def int_or_float(text: str):
    """Command-line form of ``memory_budget``: an int or a float (checked by the recipe)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected bytes (a number > 1) or a fraction of the device's memory (<= 1), got {text!r}"
        ) from None


def network_option(text: str) -> dict:
    """Command-line form of one of ``network_options``: 'key=value' -> ``{key: value}``, the
    value read as an int, a float, true/false, none, or else a string."""
    key, sep, value = str(text).partition("=")
    if not sep or not key.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"expected an option of the network as key=value (e.g. alpha=4), got {text!r}")
    value = value.strip()
    words = {"true": True, "false": False, "none": None, "null": None}
    if value.lower() in words:
        return {key.strip(): words[value.lower()]}
    for kind in (int, float):
        try:
            return {key.strip(): kind(value)}
        except ValueError:
            pass
    return {key.strip(): value}

