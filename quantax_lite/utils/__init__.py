"""Batching engine, device meshes, CPU thread pools."""
from .chunk import chunk_map
from .mesh import (
    batch_sharding,
    make_mesh,
    make_precompile_mesh,
    mesh_size,
    replicate,
    replicated_sharding,
    shard_batch_array,
)
from .threads import limit_blas_threads

__all__ = [
    "chunk_map",
    "limit_blas_threads",
    "make_mesh",
    "make_precompile_mesh",
    "mesh_size",
    "batch_sharding",
    "replicate",
    "replicated_sharding",
    "shard_batch_array",
]
