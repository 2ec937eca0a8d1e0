"""Device meshes: the run's mesh over every device, and compile-only meshes.

The batch of every chunked evaluation is split over all axes of a mesh. The
default mesh is one-dimensional with the axis name ``"batch"``.
"""
from __future__ import annotations

import math
from typing import Sequence

import jax
import numpy as np
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec

BATCH_AXIS = "batch"

# A minimal GPU target description for the compile-only H100 topology. It holds
# only fields that the XLA of jax 0.10/0.11 parses; the numbers describe an
# NVIDIA H100 SXM (compute capability 9.0, 132 SMs, 80 GiB HBM3).
H100_TARGET_CONFIG = """
gpu_device_info {
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: 3352320000000
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: 84929216512
  shared_memory_per_block_optin: 232448
  cuda_compute_capability {
    major: 9
  }
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}
platform_name: "CUDA"
dnn_version_info {
  major: 9
  minor: 1
}
device_description_str: "NVIDIA H100 80GB HBM3"
"""


def make_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A one-dimensional mesh (axis ``"batch"``) over ``devices``.

    Args:
      devices: the devices to span; default ``jax.devices()``, i.e. every
        device of every process of the run (call ``jax.distributed.initialize``
        first in a multi-process run).

    Returns:
      A ``jax.sharding.Mesh`` of shape ``(n_devices,)`` with automatic
      (GSPMD) axis type.
    """
    if devices is None:
        devices = jax.devices()
    devices = list(devices)
    if not devices:
        raise ValueError("make_mesh: `devices` is empty; expected at least one device.")
    return Mesh(np.array(devices), (BATCH_AXIS,), axis_types=(AxisType.Auto,))


def mesh_size(mesh: Mesh | AbstractMesh) -> int:
    """Number of devices of a (concrete or abstract) mesh."""
    return int(math.prod(mesh.axis_sizes))


def batch_spec(mesh: Mesh | AbstractMesh, ndim: int = 1, axis: int = 0) -> PartitionSpec:
    """PartitionSpec splitting dimension ``axis`` of an ``ndim`` array over all mesh axes."""
    entries = [None] * ndim
    entries[axis] = tuple(mesh.axis_names)
    return PartitionSpec(*entries)


def batch_sharding(mesh: Mesh | AbstractMesh, ndim: int = 1, axis: int = 0) -> NamedSharding:
    """Sharding that splits dimension ``axis`` over every device of ``mesh``."""
    return NamedSharding(mesh, batch_spec(mesh, ndim, axis))


def replicated_sharding(mesh: Mesh | AbstractMesh) -> NamedSharding:
    """Sharding that keeps a full copy on every device of ``mesh``."""
    return NamedSharding(mesh, PartitionSpec())


def shard_batch_array(x, mesh: Mesh | None = None):
    """Place a host array (or a jax array) on ``mesh``, split along its first axis.

    In a multi-process run every process must pass the same full array.
    The first dimension must be divisible by the mesh size.
    """
    mesh = make_mesh() if mesh is None else mesh
    n = mesh_size(mesh)
    if np.ndim(x) == 0 or np.shape(x)[0] % n:
        raise ValueError(
            f"shard_batch_array: the first dimension of `x` (shape {np.shape(x)}) must be "
            f"divisible by the {n} devices of the mesh."
        )
    sharding = batch_sharding(mesh, np.ndim(x))
    if jax.process_count() == 1:
        return jax.device_put(x, sharding)
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


def replicate(tree, mesh: Mesh | None = None):
    """Place every array leaf of ``tree`` on every device of ``mesh`` (e.g. parameters).

    In a multi-process run every process must pass the same values.
    """
    mesh = make_mesh() if mesh is None else mesh
    sharding = replicated_sharding(mesh)

    def put(x):
        if jax.process_count() == 1:
            return jax.device_put(x, sharding)
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])

    return jax.tree_util.tree_map(put, tree)


def make_precompile_mesh(
    n_devices: int | None = None,
    *,
    topology: str | None = None,
    platform: str = "cpu",
    target_config: str | None = None,
) -> AbstractMesh | Mesh:
    """A compile-only mesh, for staging a computation for devices this machine lacks.

    Two kinds:

    * ``make_precompile_mesh(n)``: an ``AbstractMesh`` of ``n`` devices (axis
      ``"batch"``). Lower with an explicit platform, e.g.
      ``jax.jit(F).trace(*shape_dtype_structs).lower(lowering_platforms=("cuda",))``;
      the lowered program can be compiled by the CPU compiler onto one CPU device
      repeated, ``lowered.compile(device_assignment=(jax.devices()[0],) * n)``,
      which yields the partitioned HLO (collectives can be counted), not a
      runnable program.
    * ``make_precompile_mesh(topology="1x2x4", platform="cuda")``: a concrete
      ``Mesh`` over compile-only GPU devices (partitions x hosts x devices per
      host) described by ``target_config`` (a ``GpuTargetConfigProto`` in text
      form; default: an H100). Needs the CUDA PJRT plugin matching the jax
      version (``jax-cuda12-plugin``, ``jax-cuda12-pjrt``) and ``ptxas``, and
      ``JAX_PLATFORMS=cpu``. ``jit(F).lower(...).compile()`` then gives real GPU
      HLO.

    Raises:
      ValueError: bad arguments.
      RuntimeError: the platform cannot provide compile-only devices here (the
        message says why).
    """
    if topology is None:
        if n_devices is None or not isinstance(n_devices, int) or n_devices <= 0:
            raise ValueError(
                f"make_precompile_mesh: `n_devices` must be a positive int, got {n_devices!r}."
            )
        return AbstractMesh((n_devices,), (BATCH_AXIS,), axis_types=(AxisType.Auto,))

    platform = platform.lower()
    if platform == "gpu":
        platform = "cuda"
    if platform == "cpu":
        raise RuntimeError(
            "make_precompile_mesh: JAX has no compile-only CPU topologies "
            "(jax.experimental.topologies.get_topology_desc(platform='cpu') is not "
            "implemented). Use make_precompile_mesh(n_devices) for an AbstractMesh, or "
            "topology=... with platform='cuda' or 'tpu'."
        )
    from jax.experimental import topologies

    kwargs = {}
    if platform == "cuda":
        kwargs["target_config"] = H100_TARGET_CONFIG if target_config is None else target_config
        kwargs["topology"] = topology
        name = "cuda"
    elif platform == "tpu":
        name = topology
    else:
        raise ValueError(
            f"make_precompile_mesh: `platform` must be 'cpu', 'cuda'/'gpu' or 'tpu', got {platform!r}."
        )
    try:
        desc = topologies.get_topology_desc(name, platform, **kwargs)
    except Exception as err:  # the plugin is missing or rejects the description
        raise RuntimeError(
            f"make_precompile_mesh: could not create the compile-only {platform} topology "
            f"{topology!r}: {err}. For CUDA install the PJRT plugin matching jax "
            f"{jax.__version__} (pip install 'jax-cuda12-plugin=={jax.__version__}' "
            f"'jax-cuda12-pjrt=={jax.__version__}' nvidia-cuda-nvcc-cu12) and set "
            "JAX_PLATFORMS=cpu."
        ) from err
    devices = list(desc.devices)
    if n_devices is not None and n_devices != len(devices):
        raise ValueError(
            f"make_precompile_mesh: topology {topology!r} has {len(devices)} devices, "
            f"but n_devices={n_devices}."
        )
    return Mesh(np.array(devices), (BATCH_AXIS,), axis_types=(AxisType.Auto,))
