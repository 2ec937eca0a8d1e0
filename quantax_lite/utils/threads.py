"""Thread pools on CPUs: keep LAPACK from competing with XLA.

XLA:CPU runs every computation on its own thread pool, one thread per core. Its
Cholesky and eigendecomposition kernels call LAPACK (scipy's OpenBLAS), which starts a
second pool of as many threads. Inside a VMC step the two pools run at once and
oversubscribe the cores: on a 2-core machine the W1 SR solve took 82-97 ms with both
pools and 60 ms with OpenBLAS limited to one thread (``benchmarks/vmc_step.py``).
"""
from __future__ import annotations

import jax

__all__ = ["limit_blas_threads"]


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
