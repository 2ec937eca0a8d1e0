"""Set-up shared by the benchmark scripts (imported before jax)."""
import os


def simulate_cpu_devices(n: int | None) -> None:
    """Ask XLA for ``n`` simulated CPU devices; must run before jax is imported. None: leave as is."""
    if not n:
        return
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    os.environ["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={n}"])
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def timed(fn, repeats):
    """Median and minimum seconds of ``repeats`` calls of ``fn`` (after one call to compile
    and warm up); ``fn`` returns jax arrays, waited for with ``block_until_ready``."""
    import statistics
    import time

    import jax

    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return statistics.median(times), min(times)
