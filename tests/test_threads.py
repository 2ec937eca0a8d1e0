"""Tests of quantax_lite.utils.limit_blas_threads (threadpoolctl around LAPACK)."""
import pytest
import scipy.linalg  # noqa: F401  (loads scipy's OpenBLAS, the LAPACK that XLA:CPU calls)
from threadpoolctl import threadpool_info

from quantax_lite.utils import limit_blas_threads


def blas_threads():
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def test_limits_and_restores_blas_threads():
    before = blas_threads()
    assert before, "no BLAS library found"
    with limit_blas_threads(1):
        assert blas_threads() == [1] * len(before)
    assert blas_threads() == before
    limiter = limit_blas_threads()
    assert blas_threads() == [1] * len(before)
    limiter.restore_original_limits()
    assert blas_threads() == before


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_thread_count(bad):
    with pytest.raises(ValueError, match="n_threads"):
        limit_blas_threads(bad)


def test_threads_for_a_solve_are_one_below_the_threshold_and_the_cores_per_device_above():
    import os

    from quantax_lite.utils.threads import THREADED_SOLVE, threads_for_solve, usable_cores

    cores = usable_cores()
    assert 1 <= cores <= (os.cpu_count() or cores)
    assert threads_for_solve(THREADED_SOLVE - 1, 1) == 1
    assert threads_for_solve(THREADED_SOLVE, 1) == cores
    assert threads_for_solve(4096, 2 * cores) == 1  # more devices than cores: one each
    assert threads_for_solve(4096, 2) == max(1, cores // 2)
