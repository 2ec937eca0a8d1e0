"""Joining JAX's multi-controller runtime: every process of a run, one coordinator."""
from __future__ import annotations

import os
import threading
from typing import Callable

import jax

__all__ = ["check_process_options", "join_processes"]


def join_processes(
    coordinator: str | None, num_processes: int | None, process_id: int | None, *, timeout: int,
    on_timeout: Callable[[], None],
) -> None:
    """``jax.distributed.initialize`` for ``coordinator`` ("HOST:PORT"), or with the runtime's
    auto-detection (SLURM, Open MPI, ...) when ``coordinator`` is None.

    CPU backends use gloo collectives. ``on_timeout()`` is called from a timer thread when
    the processes have not all joined within ``timeout`` seconds (JAX's own timeout,
    set 60 s later, aborts the process with a C++ stack trace); it should end the process.
    Raises ``ConnectionError`` with the runtime's first message line when joining fails.
    """
    if jax.config.jax_platforms in (None, "", "cpu") or os.environ.get("JAX_PLATFORMS", "") == "cpu":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if coordinator is None:
        jax.distributed.initialize(initialization_timeout=timeout)
        return
    watchdog = threading.Timer(timeout, on_timeout)
    watchdog.daemon = True
    watchdog.start()
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator, num_processes=num_processes, process_id=process_id,
            initialization_timeout=timeout + 60,
        )
    except Exception as err:  # the runtime raises XlaRuntimeError / RuntimeError kinds
        raise ConnectionError((str(err).strip().splitlines() or [type(err).__name__])[0][:200]) from None
    finally:
        watchdog.cancel()


def check_process_options(coordinator: str | None, num_processes: int | None, process_id: int | None) -> None:
    """``ValueError`` naming the argument for options that cannot form a multi-process run
    (checked before any process waits)."""
    import re

    given = [v is not None for v in (coordinator, num_processes, process_id)]
    if any(given) and not all(given):
        raise ValueError("coordinator: `coordinator`, `num_processes` and `process_id` go together.")
    if coordinator is None:
        return
    m = re.fullmatch(r"(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.\-]+):(\d+)", coordinator)
    if not m or not 0 < int(m.group(2)) < 65536:
        raise ValueError(f"coordinator: expected HOST:PORT with a port in 1..65535, got {coordinator!r}.")
    if num_processes < 1:
        raise ValueError(f"num_processes: expected a positive int, got {num_processes}.")
    if not 0 <= process_id < num_processes:
        raise ValueError(f"process_id: expected 0 .. {num_processes - 1} (`num_processes` {num_processes}), "
                         f"got {process_id}.")
