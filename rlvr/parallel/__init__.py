"""rlvr.parallel: (data, fsdp, tensor[, expert]) meshes, logical-axis partition rules,
multi-host init."""

from rlvr.parallel.mesh import (BATCH_AXES, LOGICAL_RULES, MESH_AXES, batch_axes, batch_sharding,
                                initialize_distributed, kv_cache_sharding, logical_to_spec,
                                make_mesh, param_shardings, param_specs, shard_model)
from rlvr.parallel.generate import (GenerationSharding, generation_sharding, local_generation_sharding,
                                    local_mesh, replicate_locally)

__all__ = ["GenerationSharding", "generation_sharding", "local_generation_sharding", "local_mesh",
           "replicate_locally", "BATCH_AXES", "LOGICAL_RULES", "MESH_AXES", "batch_axes", "batch_sharding",
           "initialize_distributed", "kv_cache_sharding", "logical_to_spec", "make_mesh",
           "param_shardings", "param_specs", "shard_model"]
