"""Thread pools on CPUs: keep LAPACK from competing with XLA.

XLA:CPU runs every computation on its own thread pool, one thread per core. Its
Cholesky and eigendecomposition kernels call LAPACK (scipy's OpenBLAS), which starts a
second pool of as many threads. Inside a VMC step the two pools run at once and
oversubscribe the cores: on a 2-core machine the W1 SR solve took 82-97 ms with both
pools and 60 ms with OpenBLAS limited to one thread (``benchmarks/vmc_step.py``).
"""
from __future__ import annotations

import os

import jax

__all__ = ["limit_blas_threads", "usable_cores", "threads_for_solve"]

# the size of a solve (an eigendecomposition or Cholesky factorization) from which LAPACK
# gets more than one thread: between the sizes measured for TDVP, 256 (slower with two: its
# threads spin against XLA's) and 2048 (faster with two; docs/benchmarks.md)
THREADED_SOLVE = 1024


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_for_solve(size: int, n_devices: int) -> int:
    """LAPACK's threads for a loop whose steps are mostly one solve of ``size`` on each of
    ``n_devices`` CPU devices: the cores each device has to itself from ``THREADED_SOLVE``
    on, one below (small solves only lose time to threads spinning)."""
    if size < THREADED_SOLVE:
        return 1
    return max(1, usable_cores() // max(1, n_devices))


def limit_blas_threads(n_threads: int = 1):
    """Limit the BLAS/LAPACK thread pools of this process to ``n_threads`` on CPU backends.

    Returns a ``threadpoolctl.threadpool_limits`` object: use it as a context manager,
    or call its ``restore_original_limits()`` to undo. On other backends (GPU, TPU,
    whose linear algebra does not use these pools) nothing is changed.
    """
    from threadpoolctl import threadpool_limits

    if isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1:
        raise ValueError(f"n_threads: expected a positive int, got {n_threads!r}")
    limits = n_threads if jax.default_backend() == "cpu" else None
    return threadpool_limits(limits=limits, user_api="blas")
