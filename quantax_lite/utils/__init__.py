"""Batching engine and device meshes."""
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

__all__ = [
    "chunk_map",
    "make_mesh",
    "make_precompile_mesh",
    "mesh_size",
    "batch_sharding",
    "replicate",
    "replicated_sharding",
    "shard_batch_array",
]
