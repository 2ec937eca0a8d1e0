"""Worker for the two-process tests: one JAX process of a gloo CPU run on 127.0.0.1.

Usage: python multiprocess_worker.py PORT PROCESS_ID OUT.npz
Each process has 2 simulated CPU devices; the mesh spans all 4.
"""
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_cpu_collectives_implementation", "gloo")

port, process_id, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
jax.distributed.initialize(
    coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process_id,
    initialization_timeout=60,
)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

from quantax_lite.utils import chunk_map, make_mesh, shard_batch_array  # noqa: E402

mesh = make_mesh()
x = np.random.default_rng(1234).normal(size=(36, 5))
w = np.random.default_rng(99).normal(size=(5, 3))
f = jax.vmap(lambda row, w: jnp.tanh(row @ w), in_axes=(0, None))
xs = shard_batch_array(x, mesh)
results = {"n_devices": np.array(len(mesh.devices.flat)), "n_local": np.array(jax.local_device_count())}
for shard_batch in (False, True):
    F = chunk_map(f, in_axes=(0, None), chunk_size=4, use_scan=True, shard_batch=shard_batch)
    y = F(xs, jnp.asarray(w))
    results[f"shard_batch_{shard_batch}"] = np.asarray(multihost_utils.process_allgather(y, tiled=True))
if process_id == 0:
    np.savez(out_path, **results)
jax.distributed.shutdown()
