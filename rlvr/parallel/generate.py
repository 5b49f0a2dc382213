"""How generation is laid out on a mesh (docs/architecture.md, "Sharded generation").

The sampler takes a `GenerationSharding`: the prompt, key and per-row arrays and every layer's
KV cache are split on the batch dimension over the mesh's batch axes (data, fsdp[, expert]),
the cache's KV heads over `tensor`; the batch is padded to a multiple of the number of batch
shards (copies of row 0, dropped after decoding). Parameters stay as they are placed: on one
process the learner's shardings of the run's mesh; multi-host each process samples its own rows
on a mesh of its local devices (`local_generation_sharding`) with a replicated parameter copy
(`replicate_locally`), and the loop assembles the global batch from every process's rows.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from rlvr.parallel.mesh import batch_axes, kv_cache_sharding, make_mesh


@dataclasses.dataclass(frozen=True)
class GenerationSharding:
    """Placement of one sampler call on `mesh`.

    Attributes:
      mesh: the mesh the sampler runs on.
      batch: sharding of any [B, ...] array (B over the batch axes, other dims replicated).
      shards: the number of batch shards; B is padded to a multiple of it.
    """

    mesh: Mesh
    batch: NamedSharding
    shards: int

    def padded_rows(self, n: int) -> int:
        """n rounded up to a multiple of `shards`."""
        return -(-int(n) // self.shards) * self.shards

    def cache(self, config, batch: int) -> NamedSharding:
        """Sharding of one layer's KV cache [batch, S, K, H] for a model `config`."""
        return kv_cache_sharding(self.mesh, config, batch)


def generation_sharding(mesh: Mesh) -> GenerationSharding:
    """The `GenerationSharding` of `mesh` (batch over data × fsdp[ × expert])."""
    axes = batch_axes(mesh)
    shards = int(np.prod([mesh.shape[a] for a in axes])) if axes else 1
    return GenerationSharding(mesh, NamedSharding(mesh, P(axes)), shards)


def local_mesh() -> Mesh:
    """A data-parallel mesh over this process's local devices (the same mesh on every call)."""
    return make_mesh(data=jax.local_device_count(), devices=jax.local_devices())


def local_generation_sharding() -> GenerationSharding:
    """`generation_sharding` of `local_mesh()`: this process's rows on its own devices."""
    return generation_sharding(local_mesh())


def replicate_locally(tree):
    """A fully replicated array tree (every process holds every value) as arrays replicated
    over `local_mesh()`, built from the local copies without transfers."""
    mesh = local_mesh()
    sharding = NamedSharding(mesh, P())
    devices = list(mesh.devices.flat)

    def one(x):
        by_device = {s.device: s.data for s in x.addressable_shards}
        first = x.addressable_shards[0].data  # devices outside the run's mesh get a copy
        return jax.make_array_from_single_device_arrays(
            x.shape, sharding, [by_device[d] if d in by_device else jax.device_put(first, d)
                                for d in devices])

    return jax.tree.map(one, tree)
