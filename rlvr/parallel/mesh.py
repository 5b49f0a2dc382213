"""Device meshes, logical-axis partition rules and sharding helpers (docs/architecture.md §6).

Mesh axes: `data` (pure data parallel), `fsdp` (data parallel with parameters sharded),
`tensor` (Megatron-style tensor parallel), and `expert` (expert parallel: a mixture-of-experts
layer's stacked expert kernels are split over it, and the batch is split over it too, as a
further data-parallel axis for the rest of the model). The `expert` axis is part of the mesh
only when it is larger than 1, so dense runs keep their (data, fsdp, tensor) mesh.

Every model parameter carries `logical_axes` metadata (see rlvr/models/transformer.py);
`LOGICAL_RULES` maps each logical name to mesh axes. A dimension whose size is not divisible by
its mesh axes stays replicated, so any model runs on any mesh. Meshes use `AxisType.Auto`
(docs/architecture.md §8: the default Explicit type breaks indexing and shard_map on unsharded inputs).

Scale path: one CPU → a mesh on one host → many hosts after `initialize_distributed`.
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from rlvr.models.transformer import KV_CACHE_LOGICAL_AXES

MESH_AXES = ("data", "fsdp", "tensor", "expert")
BATCH_AXES = ("data", "fsdp", "expert")

# logical axis name -> mesh axis (or axes) it is sharded over; None = replicated.
LOGICAL_RULES = {
    "batch": BATCH_AXES,
    "vocab": "tensor",
    "embed": "fsdp",
    "q_heads": "tensor",
    "kv_heads": "tensor",
    "mlp": "tensor",
    "expert": "expert",
    "norm": None,
    "cache_length": None,
    "cache_kv_heads": "tensor",
    "head_dim": None,
    None: None,
}


def make_mesh(data: int = 1, fsdp: int = 1, tensor: int = 1, devices=None, *,
              expert: int = 1) -> Mesh:
    """A (data, fsdp, tensor) mesh, or (data, fsdp, tensor, expert) when expert > 1, over the
    first data*fsdp*tensor*expert devices (Auto axis types)."""
    for name, v in (("data", data), ("fsdp", fsdp), ("tensor", tensor), ("expert", expert)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"make_mesh: {name} must be an int >= 1, got {v!r}")
    devices = list(jax.devices() if devices is None else devices)
    n = data * fsdp * tensor * expert
    if n > len(devices):
        raise ValueError(f"make_mesh: data*fsdp*tensor*expert = {n} exceeds the {len(devices)} "
                         f"devices")
    sizes = (data, fsdp, tensor) + ((expert,) if expert > 1 else ())
    arr = np.array(devices[:n], dtype=object).reshape(sizes)
    return Mesh(arr, MESH_AXES[:len(sizes)], axis_types=(AxisType.Auto,) * len(sizes))


def batch_axes(mesh: Mesh) -> tuple:
    """The axes of `mesh` that split the batch: (data, fsdp) and expert when present."""
    return tuple(a for a in BATCH_AXES if a in mesh.shape)


def _axis_size(mesh: Mesh, axes) -> int:
    if axes is None:
        return 1
    if isinstance(axes, str):
        axes = (axes,)
    return int(np.prod([mesh.shape[a] for a in axes]))


def logical_to_spec(logical_axes: Sequence, shape: Sequence[int], mesh: Mesh,
                    rules: Optional[dict] = None) -> P:
    """PartitionSpec for an array with these logical axes; non-divisible dims replicate.

    A mesh axis is used at most once per array (the first dimension that claims it wins).
    """
    rules = LOGICAL_RULES if rules is None else rules
    if len(logical_axes) != len(shape):
        raise ValueError(f"logical axes {tuple(logical_axes)} do not match shape {tuple(shape)}")
    used, spec = set(), []
    for name, size in zip(logical_axes, shape):
        if name not in rules:
            raise ValueError(f"logical axis {name!r} has no partition rule; known: "
                             f"{sorted(k for k in rules if k)}")
        axes = rules[name]
        if isinstance(axes, str):
            axes = (axes,)
        if axes is not None:
            axes = tuple(a for a in axes if a in mesh.shape and a not in used)
            if not axes or size % _axis_size(mesh, axes):
                axes = None
        if axes is None:
            spec.append(None)
        else:
            used.update(axes)
            spec.append(axes[0] if len(axes) == 1 else axes)
    return P(*spec)


def param_specs(model_or_state, mesh: Mesh, rules: Optional[dict] = None):
    """nnx.State of PartitionSpecs mirroring the model's state (variables without
    `logical_axes` metadata are replicated)."""
    state = model_or_state if isinstance(model_or_state, nnx.State) else nnx.state(model_or_state)

    def spec(v):
        axes = getattr(v, "logical_axes", None) if isinstance(v, nnx.Variable) else None
        shape = np.shape(v.get_value() if isinstance(v, nnx.Variable) else v)
        if axes is None:
            return P()
        return logical_to_spec(axes, shape, mesh, rules)

    return jax.tree.map(spec, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def param_shardings(model_or_state, mesh: Mesh, rules: Optional[dict] = None):
    """nnx.State of NamedShardings for every variable of the model (or state)."""
    return jax.tree.map(lambda s: NamedSharding(mesh, s), param_specs(model_or_state, mesh, rules))


def shard_model(model, mesh: Mesh, rules: Optional[dict] = None):
    """Places the model's variables with `param_shardings` (in place); returns the model."""
    state = nnx.state(model)
    shardings = param_shardings(state, mesh, rules)
    nnx.update(model, jax.device_put(state, shardings))
    return model


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Sharding of a [B, ...] array: B over (data, fsdp[, expert]), other dims replicated."""
    return NamedSharding(mesh, P(batch_axes(mesh), *([None] * (ndim - 1))))


def kv_cache_sharding(mesh: Mesh, config=None, batch: Optional[int] = None) -> NamedSharding:
    """Sharding of one layer's KV cache [B, S, K, H] (batch over data/fsdp, heads over tensor).

    With `config` and `batch`, dims that do not divide replicate.
    """
    if config is None or batch is None:
        spec = logical_to_spec(KV_CACHE_LOGICAL_AXES, (0, 0, 0, 0), mesh)
    else:
        spec = logical_to_spec(KV_CACHE_LOGICAL_AXES,
                               (batch, 1, config.num_kv_heads, config.head_dim), mesh)
    return NamedSharding(mesh, spec)


def initialize_distributed(coordinator: str, num_processes: int, process_id: int, *,
                           cpu_collectives: bool = False) -> None:
    """Multi-host start: plain `jax.distributed.initialize` (call before any other JAX use).

    cpu_collectives=True selects gloo so CPU-only processes can run cross-process
    collectives (docs/architecture.md §8).
    """
    if num_processes < 1 or not 0 <= process_id < num_processes:
        raise ValueError(f"initialize_distributed: process_id {process_id} not in "
                         f"[0, num_processes={num_processes})")
    if cpu_collectives:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator, num_processes=num_processes, process_id=process_id)
