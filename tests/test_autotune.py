"""quantax_lite.utils.autotune: the fastest candidate is picked, cached per machine and
version, skipped when off, and failures are left out."""
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from quantax_lite.utils import autotune


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    """Autotuning on, no in-memory choices, no cache folder from the environment."""
    monkeypatch.delenv("QUANTAX_LITE_AUTOTUNE", raising=False)
    monkeypatch.delenv("QUANTAX_LITE_AUTOTUNE_DIR", raising=False)
    autotune.forget()
    yield
    autotune.forget()


def sleeper(seconds, calls, name):
    """A builder counting its calls in ``calls[name]``; its runner sleeps ``seconds``."""
    def build():
        calls[name] = calls.get(name, 0) + 1
        return lambda: time.sleep(seconds)
    return build


def fake(calls, fast="fast"):
    """Three candidates; ``fast`` sleeps not at all, the others 20 ms and 40 ms."""
    slow = [n for n in ("fast", "slow", "slower") if n != fast]
    return {fast: sleeper(0.0, calls, fast), slow[0]: sleeper(0.02, calls, slow[0]),
            slow[1]: sleeper(0.04, calls, slow[1])}


def failing(message):
    def build():
        raise ValueError(message)
    return build


def test_fastest_is_picked_in_any_order(tmp_path):
    calls = {}
    candidates = fake(calls, fast="slower")  # the name says nothing; the time does
    assert autotune.pick("k", ("a", 1), candidates, default="fast", cache_dir=tmp_path, repeats=2) == "slower"
    assert calls == {"fast": 1, "slow": 1, "slower": 1}  # each built once


def test_cache_file_is_read_by_a_new_process_without_timing(tmp_path):
    calls = {}
    assert autotune.pick("k", (6, 6, "float32"), fake(calls), default="slow", cache_dir=tmp_path) == "fast"
    path = autotune.cache_file(tmp_path)
    assert os.path.dirname(path) == str(tmp_path) and os.path.exists(path)
    data = json.loads(open(path).read())
    assert data["environment"] == autotune.environment()
    (record,) = data["choices"].values()
    assert record["choice"] == "fast" and set(record["median_seconds"]) == {"fast", "slow", "slower"}
    assert os.listdir(tmp_path) == [os.path.basename(path)]  # no temporary file left

    autotune.forget()  # as in a new process: memory empty, same folder
    calls.clear()
    assert autotune.pick("k", (6, 6, "float32"), fake(calls, fast="slow"), default="slow",
                         cache_dir=tmp_path) == "fast"
    assert calls == {}
    # in memory too: the file is not needed any more in this process
    os.remove(path)
    assert autotune.pick("k", (6, 6, "float32"), fake(calls), default="slow", cache_dir=tmp_path) == "fast"
    assert calls == {}
    # another key or kind is timed anew, and added to the file
    assert autotune.pick("k", (8, 8, "float32"), fake(calls, fast="slow"), default="fast",
                         cache_dir=tmp_path) == "slow"
    assert calls == {"fast": 1, "slow": 1, "slower": 1}


def test_choices_accumulate_in_one_file(tmp_path):
    calls = {}
    autotune.pick("k", (1,), fake(calls), default="slow", cache_dir=tmp_path, repeats=1)
    autotune.pick("other", (1,), fake(calls), default="slow", cache_dir=tmp_path, repeats=1)
    data = json.loads(open(autotune.cache_file(tmp_path)).read())
    assert sorted(json.loads(k)[0] for k in data["choices"]) == ["k", "other"]


def test_default_folder_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("QUANTAX_LITE_AUTOTUNE_DIR", str(tmp_path / "tune"))
    assert autotune.pick("k", (), fake({}), default="slow", repeats=1) == "fast"
    assert os.path.exists(autotune.cache_file()) and autotune.cache_file().startswith(str(tmp_path / "tune"))


@pytest.mark.parametrize("change", ["jax", "library"])
def test_another_version_misses_the_cache(tmp_path, monkeypatch, change):
    calls = {}
    autotune.pick("k", (1,), fake(calls), default="slow", cache_dir=tmp_path, repeats=1)
    old = autotune.cache_file(tmp_path)
    if change == "jax":
        monkeypatch.setattr(jax, "__version__", jax.__version__ + ".post999")
    else:
        monkeypatch.setattr(autotune, "_library_version", lambda: "999.0")
    assert autotune.cache_file(tmp_path) != old
    calls.clear()
    # no forget(): the in-memory choice is keyed by the version as well
    assert autotune.pick("k", (1,), fake(calls, fast="slow"), default="fast", cache_dir=tmp_path,
                         repeats=1) == "slow"
    assert calls == {"fast": 1, "slow": 1, "slower": 1}
    new = autotune.cache_file(tmp_path)
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in (old, new))


def test_library_version_falls_back_to_unknown(monkeypatch):
    def missing(name):
        raise autotune.importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(autotune.importlib.metadata, "version", missing)
    assert autotune._library_version() == "unknown"


@pytest.mark.parametrize("how", ["argument", "0", "off", "False"])
def test_disabled_returns_default_and_builds_nothing(tmp_path, monkeypatch, how):
    calls = {}
    if how == "argument":
        result = autotune.pick("k", (1,), fake(calls), default="slower", enabled=False, cache_dir=tmp_path)
    else:
        monkeypatch.setenv("QUANTAX_LITE_AUTOTUNE", how)
        result = autotune.pick("k", (1,), fake(calls), default="slower", cache_dir=tmp_path)
    assert result == "slower" and calls == {} and os.listdir(tmp_path) == []
    # the argument wins over the environment
    monkeypatch.setenv("QUANTAX_LITE_AUTOTUNE", "0")
    assert autotune.pick("k", (1,), fake(calls), default="slower", enabled=True, cache_dir=tmp_path,
                         repeats=1) == "fast"


def test_bad_setting_is_named(monkeypatch):
    monkeypatch.setenv("QUANTAX_LITE_AUTOTUNE", "maybe")
    with pytest.raises(ValueError, match="QUANTAX_LITE_AUTOTUNE"):
        autotune.pick("k", (1,), fake({}), default="fast")


def test_failing_candidates_are_skipped(tmp_path):
    calls = {"runs": 0}

    def late_runner():
        calls["runs"] += 1
        if calls["runs"] > 1:  # the warm-up passes, the first timed run fails
            raise FloatingPointError("late")

    candidates = {"broken": failing("no"), "late": lambda: late_runner, "ok": sleeper(0.01, calls, "ok"),
                  "not_a_runner": lambda: 42}
    assert autotune.pick("k", (1,), candidates, default="broken", cache_dir=tmp_path) == "ok"
    assert calls["runs"] == 2  # dropped after its first failure


def test_all_failing_raises_naming_kind(tmp_path):
    candidates = {"a": failing("first reason"), "b": failing("second reason")}
    with pytest.raises(RuntimeError, match="conv_form.*first reason.*second reason"):
        autotune.pick("conv_form", (1,), candidates, default="a", cache_dir=tmp_path)
    assert os.listdir(tmp_path) == []  # nothing cached


def test_a_single_candidate_is_not_built(tmp_path):
    calls = {}
    only = {"only": sleeper(0, calls, "only")}
    assert autotune.pick("k", (1,), only, default="only", cache_dir=tmp_path) == "only"
    assert calls == {}


@pytest.mark.parametrize("content", ["{not json", "", "[1, 2]", '{"format": 1, "environment": {}, "choices": {}}',
                                     b"\xff\xfe\x00"])
def test_corrupt_cache_file_is_ignored_and_rewritten(tmp_path, content):
    path = autotune.cache_file(tmp_path)
    with open(path, "wb") as fh:
        fh.write(content if isinstance(content, bytes) else content.encode())
    calls = {}
    assert autotune.pick("k", (1,), fake(calls), default="slow", cache_dir=tmp_path, repeats=1) == "fast"
    assert calls == {"fast": 1, "slow": 1, "slower": 1}
    data = json.loads(open(path).read())
    assert [r["choice"] for r in data["choices"].values()] == ["fast"]


def test_a_stale_choice_not_among_the_candidates_is_timed_again(tmp_path):
    calls = {}
    autotune.pick("k", (1,), fake(calls), default="slow", cache_dir=tmp_path, repeats=1)
    autotune.forget()
    calls.clear()
    candidates = {"slow": sleeper(0.02, calls, "slow"), "new": sleeper(0, calls, "new")}
    assert autotune.pick("k", (1,), candidates, default="slow", cache_dir=tmp_path, repeats=1) == "new"
    assert calls == {"slow": 1, "new": 1}


def test_unwritable_folder_still_picks(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert autotune.pick("k", (1,), fake({}), default="slow", cache_dir=blocker / "sub", repeats=1) == "fast"


def test_arguments_are_checked(tmp_path):
    ok = fake({})
    with pytest.raises(ValueError, match="default"):
        autotune.pick("k", (1,), ok, default="missing", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="default"):
        autotune.pick("k", (1,), ok, default="missing", enabled=False, cache_dir=tmp_path)
    with pytest.raises(TypeError, match="kind"):
        autotune.pick(3, (1,), ok, default="fast", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="kind"):
        autotune.pick("", (1,), ok, default="fast", cache_dir=tmp_path)
    with pytest.raises(TypeError, match="key"):
        autotune.pick("k", [1], ok, default="fast", cache_dir=tmp_path)
    with pytest.raises(TypeError, match=r"key\[1\]"):
        autotune.pick("k", (1, np.float32), ok, default="fast", cache_dir=tmp_path)
    with pytest.raises(TypeError, match="candidates"):
        autotune.pick("k", (1,), [("fast", ok["fast"])], default="fast", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="candidates"):
        autotune.pick("k", (1,), {}, default="fast", cache_dir=tmp_path)
    with pytest.raises(TypeError, match="candidates"):
        autotune.pick("k", (1,), {"fast": 3}, default="fast", cache_dir=tmp_path)
    with pytest.raises(TypeError, match="repeats"):
        autotune.pick("k", (1,), ok, default="fast", cache_dir=tmp_path, repeats=1.0)
    with pytest.raises(ValueError, match="repeats"):
        autotune.pick("k", (1,), ok, default="fast", cache_dir=tmp_path, repeats=0)
    with pytest.raises(TypeError, match="enabled"):
        autotune.pick("k", (1,), ok, default="fast", cache_dir=tmp_path, enabled="no")
    with pytest.raises(TypeError, match="cache_dir"):
        autotune.pick("k", (1,), ok, default="fast", cache_dir=3)


def _jitted(f, *args):
    """A builder: ``f`` compiled for ``args``; its runner runs it once and waits."""
    def build():
        compiled = jax.jit(f).lower(*args).compile()
        return lambda: jax.block_until_ready(compiled(*args))
    return build


def test_real_jax_candidates(tmp_path):
    x = jnp.asarray(np.random.default_rng(0).normal(size=(64, 64)))

    def by_matmul(a):
        return a @ a.T

    def by_sum(a):
        return jnp.sum(a[:, None, :] * a[None, :, :], axis=-1)

    np.testing.assert_allclose(by_matmul(x), by_sum(x), rtol=1e-10, atol=1e-10)
    candidates = {"matmul": _jitted(by_matmul, x), "sum": _jitted(by_sum, x),
                  "bad": _jitted(lambda a: a @ jnp.ones((3, 3)), x)}  # a shape error when built
    choice = autotune.pick("gram", (64, str(x.dtype)), candidates, default="sum", cache_dir=tmp_path)
    assert choice in ("matmul", "sum")

    # called while another function is traced (as a model layer choosing its form would)
    @jax.jit
    def outer(a):
        autotune.forget()
        name = autotune.pick("gram_in_trace", (64,), candidates, default="sum", cache_dir=tmp_path)
        return (by_matmul if name == "matmul" else by_sum)(a)

    np.testing.assert_allclose(outer(x), by_matmul(x), rtol=1e-10, atol=1e-10)


def test_several_processes_follow_process_zero(tmp_path, monkeypatch):
    """Simulated: process 0 has no cached choice (-1), then its winner is "slower"."""
    sent, answers = [], [-1, 2]

    def broadcast(index):
        sent.append(index)
        return answers[len(sent) - 1]

    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(autotune, "_process_zero", broadcast)
    calls = {}
    assert autotune.pick("k", (1,), fake(calls), default="slow", cache_dir=tmp_path, repeats=1) == "slower"
    assert sent == [-1, 0] and calls == {"fast": 1, "slow": 1, "slower": 1}
    # this process remembers process 0's choice; the next call still asks process 0 first
    sent.clear()
    answers[:] = [2]
    assert autotune.pick("k", (1,), fake(calls), default="slow", cache_dir=tmp_path, repeats=1) == "slower"
    assert sent == [2]


def test_broadcast_in_one_process_is_the_identity():
    assert autotune._process_zero(2) == 2 and autotune._process_zero(-1) == -1


def test_conv_form_for_times_the_forms_and_keeps_the_function(tmp_path, monkeypatch):
    """With autotune on, the network's form is one of the timed candidates, recorded in the
    cache, and the network computes the same log psi as with the width rule."""
    import jax.numpy as jnp

    from quantax_lite import Square, make_conv_nqs, translations
    from quantax_lite.utils import tuning
    from quantax_lite.models.conv import _TIMED_FORMS, conv_form_for

    monkeypatch.setenv("QUANTAX_LITE_AUTOTUNE", "1")
    monkeypatch.setenv("QUANTAX_LITE_AUTOTUNE_DIR", str(tmp_path))
    autotune.forget()
    lattice = Square(4, 4)
    model = make_conv_nqs(lattice, translations(lattice), channels=4, depth=1, dtype=jnp.float32)
    s = jnp.asarray(np.random.default_rng(0).choice([-1, 1], size=(8, 16)), jnp.int8)
    with tuning.override(autotune=False):
        params = model.init(jax.random.key(0), s)
        rule = model.apply(params, s)
        ruled_form = conv_form_for((4, 4), 3, 4, np.float32)
    form = conv_form_for((4, 4), 3, 4, np.float32)
    assert form in _TIMED_FORMS and ruled_form == "dense"
    assert form in open(autotune.cache_file(str(tmp_path))).read()
    np.testing.assert_allclose(np.asarray(model.apply(params, s)), np.asarray(rule), rtol=0, atol=1e-5)
    autotune.forget()
