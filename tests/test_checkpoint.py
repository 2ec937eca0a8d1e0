"""Checkpoints keyed by parameter path: round trip, renamed parameters refused, old files read."""
import json
import os
import re
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from quantax_lite.driver.checkpoint import (
    FORMAT, checkpoint_path, load_checkpoint, load_latest_checkpoint, read_checkpoint_metadata, save_checkpoint,
)


class State(NamedTuple):  # shaped like the driver's VMCState, without the driver
    params: Any
    opt_state: Any
    sampler: Any
    iteration: jax.Array


def _state(names=("a", "b"), seed=0) -> State:
    rng = np.random.default_rng(seed)
    params = {n: jnp.asarray(rng.normal(size=(3, 4))) for n in names}  # equal shapes
    params["bias"] = jnp.asarray(rng.normal(size=4).astype(np.float32))
    return State(params=params, opt_state=(jnp.zeros(()), {"mu": jax.tree.map(jnp.zeros_like, params)}),
                 sampler={"key": jax.random.key(seed), "chains": jnp.asarray(rng.choice([-1, 1], (2, 6)), jnp.int8)},
                 iteration=jnp.asarray(seed, jnp.int32))


def _assert_same(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b) and len(la) == len(lb)
    for x, y in zip(la, lb):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_a_checkpoint_round_trips_with_its_leaves_keyed_by_path(tmp_path):
    state = _state(seed=3)
    path = tmp_path / "ck.npz"
    save_checkpoint(path, state, {"note": "x"})
    with np.load(path) as data:
        names = set(data.files)
        assert int(data["checkpoint_format"]) == FORMAT
    assert {".params['a']", ".params['b']", ".opt_state[1]['mu']['a']", ".sampler['key']", ".iteration"} <= {
        n.removeprefix("state") for n in names}
    restored, meta = load_checkpoint(path, _state(seed=5))
    assert meta == {"note": "x"} and read_checkpoint_metadata(path) == {"note": "x"}
    _assert_same(restored, state)


def test_renamed_equal_shaped_parameters_are_refused_naming_the_paths(tmp_path):
    """Parameters 'a' and 'b' of equal shapes saved; a refactored model names them 'b' and
    'z' (so 'z' sorts after 'b': by position the arrays would land swapped). Matched by
    path, the load is refused, naming what is missing and what is unexpected."""
    save_checkpoint(tmp_path / "ck.npz", _state(("a", "b")))
    template = _state(("b", "z"), seed=1)
    with pytest.raises(ValueError, match="different model") as info:
        load_checkpoint(tmp_path / "ck.npz", template)
    msg = str(info.value)
    assert re.search(r"missing from the file: .*state\.params\['z'\]", msg)
    assert re.search(r"not in this run's state: .*state\.params\['a'\]", msg)
    # a leaf of another shape at the same path is named too
    other = _state(seed=1)._replace(params={**_state(seed=1).params, "bias": jnp.zeros(5, jnp.float32)})
    with pytest.raises(ValueError, match=r"state\.params\['bias'\] of .* has shape \(4,\).*expected \(5,\)"):
        load_checkpoint(tmp_path / "ck.npz", other)


def _save_first_format(path, state, metadata=None):
    """A checkpoint as quantax_lite wrote them before leaves were keyed by path: the
    leaves in flattening order as leaf_00000, leaf_00001, ..., PRNG keys as raw data."""
    raw = jax.tree.map(lambda x: jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x,
                       state)
    arrays = {f"leaf_{i:05d}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(raw))}
    arrays["metadata"] = np.frombuffer(json.dumps(metadata or {}).encode(), dtype=np.uint8)
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


def test_a_checkpoint_of_the_first_format_still_loads_by_position(tmp_path):
    state = _state(seed=7)
    out = tmp_path / "run"
    os.makedirs(out)
    _save_first_format(checkpoint_path(out, 12), state, {"config": {"lattice": "chain"}})
    restored, meta = load_checkpoint(checkpoint_path(out, 12), _state(seed=2))
    assert meta == {"config": {"lattice": "chain"}}
    _assert_same(restored, state)
    resumed, _, path = load_latest_checkpoint(out, _state(seed=2))  # as a resumed run reads it
    assert path == checkpoint_path(out, 12)
    _assert_same(resumed, state)
    with pytest.raises(ValueError, match="holds 10 arrays, but this run.s state has 8"):
        load_checkpoint(checkpoint_path(out, 12), _state(("a",), seed=2))
