"""Test set-up: 8 simulated CPU devices and float64, fixed before jax is imported.

Compiled programs go to a persistent compilation cache shared by the test workers and
the commands the tests start (``JAX_COMPILATION_CACHE_DIR``, inherited by subprocesses):
the suite compiles the same small programs many times over (every ``quantax-lite
train`` a test runs compiles its step anew), and XLA compilation dominates its time.
The cache is keyed by the program, its options and the jax version, so it changes
which work is repeated, never a result. Set ``JAX_COMPILATION_CACHE_DIR`` to choose its
folder (an empty value turns it off).
"""
import os
import tempfile

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), "quantax_lite_test_jax_cache"))
if os.environ["JAX_COMPILATION_CACHE_DIR"]:
    # every program, however small or quick to compile
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng():
    """A fresh numpy generator; the seed is printed on failure via the test id."""
    return np.random.default_rng()
