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
import re
import tempfile

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# the width rule of tuning.conv_form, not timings (tests of the timing turn it on themselves)
os.environ.setdefault("QUANTAX_LITE_AUTOTUNE", "0")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), "quantax_lite_test_jax_cache"))
if not os.environ["JAX_COMPILATION_CACHE_DIR"]:
    # no cache: nor the command's own (quantax_lite.utils.compile_cache), which would fill ~/.cache
    os.environ.setdefault("QUANTAX_LITE_COMPILE_CACHE", "0")
else:  # the command leaves a cache set up with JAX's own option as it is
    # every program, however small or quick to compile
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import pytest  # noqa: E402


SEED_ENV = "QUANTAX_TEST_SEED"


def draw_seed() -> int:
    """The seed of a test's ``rng``: ``$QUANTAX_TEST_SEED`` when set (to reproduce a
    failure), else fresh OS entropy (a 128-bit int), so every run tries new data."""
    given = os.environ.get(SEED_ENV, "").strip()
    if given:
        return int(given, 0)
    return int(np.random.SeedSequence().entropy)


@pytest.fixture
def rng(request):
    """A numpy generator seeded with :func:`draw_seed`; the seed is recorded in the test's
    ``user_properties`` (``("rng_seed", seed)``, also in a ``--junitxml`` report) and
    printed in the report of a failing test, with the command that reruns it on the same
    data::

        QUANTAX_TEST_SEED=<seed> pytest -n 0 -p no:cacheprovider "tests/test_x.py::test_y[param]"

    (With the variable set every test that takes ``rng`` uses that seed.)
    """
    seed = draw_seed()
    request.node.user_properties.append(("rng_seed", seed))
    return np.random.default_rng(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Add the ``rng`` seed of a failing test (setup, call or teardown) to its report."""
    outcome = yield
    report = outcome.get_result()
    seeds = [value for name, value in item.user_properties if name == "rng_seed"]
    if report.failed and seeds:
        report.sections.append((
            "rng seed",
            f"rng seed {seeds[-1]}; rerun on the same data with\n"
            f"    {SEED_ENV}={seeds[-1]} pytest -n 0 -p no:cacheprovider \"{item.nodeid}\"",
        ))


@pytest.fixture
def saved_figures(monkeypatch):
    """Every matplotlib Figure saved during the test, as ``(file name, figure)`` in order;
    the files are still written."""
    import matplotlib.figure

    saved, real = [], matplotlib.figure.Figure.savefig

    def savefig(self, path, **kw):
        name = os.path.basename(str(getattr(path, "name", path)))  # a file (written whole, then renamed)
        saved.append((re.sub(r"\.tmp-\d+$", "", name), self))
        return real(self, path, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return saved
