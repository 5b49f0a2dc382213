"""Fused q/k/v and gate/up projection kernels (`ModelConfig.fused_projections`).

A fused attention layer holds one kernel `qkv_proj` [D, K·(G + 2)·H] (G = N / K query heads per
kv head) instead of `q_proj` [D, N·H], `k_proj` and `v_proj` [D, K·H]; a fused dense MLP one
`gate_up_proj` [D, 2F] instead of `gate_proj` and `up_proj` [D, F]. Each runs as one matmul.
The column layouts keep every tensor-parallel shard whole (`rlvr.parallel.mesh` splits the
columns into contiguous blocks, logical axes `kv_heads` and `mlp`):

    qkv:     [ q_0 .. q_{G-1} | k_0 | v_0 | q_G .. q_{2G-1} | k_1 | v_1 | ... ]  (H columns each)
             group g = kv head g with its query heads gG .. gG + G - 1 (HF's GQA assignment
             n // G = g), so a block of whole groups holds each query head with its key / value;
    gate_up: column 2f = gate column f, column 2f + 1 = up column f, so a block of 2F / t
             columns holds F / t whole (gate, up) pairs.

A plain concatenation [q | k | v] split over t devices would put all of q on the first shards
and k, v on the last. The functions here convert between the layouts exactly (a permutation of
columns, no arithmetic), on kernels [..., columns] and biases [columns] alike: Hugging Face
checkpoints keep the separate tensors (`rlvr.models.hf` fuses on load and splits on save).
Mixture-of-experts layers keep their stacked expert kernels unfused.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from rlvr.models.config import ModelConfig
from rlvr.models.transformer import Transformer

# fused kernel name -> its members in column order (an attention layer's, a dense MLP's).
QKV_MEMBERS = ("q_proj", "k_proj", "v_proj")
GATE_UP_MEMBERS = ("gate_proj", "up_proj")
FUSED_GROUPS = {"qkv_proj": QKV_MEMBERS, "gate_up_proj": GATE_UP_MEMBERS}


def fuse_qkv(q, k, v, config: ModelConfig):
    """q [..., N·H], k, v [..., K·H] -> [..., K·(G + 2)·H] in the per-kv-head group layout."""
    n, kh, h = config.num_heads, config.num_kv_heads, config.head_dim
    g = n // kh
    lead = q.shape[:-1]
    qg = q.reshape(*lead, kh, g, h)
    kg = k.reshape(*lead, kh, 1, h)
    vg = v.reshape(*lead, kh, 1, h)
    return jnp.concatenate([qg, kg, vg], axis=-2).reshape(*lead, kh * (g + 2) * h)


def split_qkv(w, config: ModelConfig):
    """Inverse of `fuse_qkv`: [..., K·(G + 2)·H] -> (q [..., N·H], k [..., K·H], v [..., K·H])."""
    n, kh, h = config.num_heads, config.num_kv_heads, config.head_dim
    g = n // kh
    lead = w.shape[:-1]
    y = w.reshape(*lead, kh, g + 2, h)
    return (y[..., :g, :].reshape(*lead, n * h), y[..., g, :].reshape(*lead, kh * h),
            y[..., g + 1, :].reshape(*lead, kh * h))


def fuse_gate_up(gate, up):
    """gate, up [..., F] -> [..., 2F] with gate column f at 2f and up column f at 2f + 1."""
    return jnp.stack([gate, up], axis=-1).reshape(*gate.shape[:-1], 2 * gate.shape[-1])


def split_gate_up(w):
    """Inverse of `fuse_gate_up`: [..., 2F] -> (gate [..., F], up [..., F])."""
    y = w.reshape(*w.shape[:-1], w.shape[-1] // 2, 2)
    return y[..., 0], y[..., 1]


def fuse_columns(name: str, parts, config: ModelConfig):
    """The fused `name` ("qkv_proj" | "gate_up_proj") array from its members' arrays."""
    return fuse_qkv(*parts, config) if name == "qkv_proj" else fuse_gate_up(*parts)


def split_columns(name: str, w, config: ModelConfig) -> tuple:
    """The members' arrays (in `FUSED_GROUPS[name]` order) of the fused `name` array."""
    return split_qkv(w, config) if name == "qkv_proj" else split_gate_up(w)


def _converted(model: Transformer, fused: bool) -> Transformer:
    from rlvr.models.lora import has_adapters  # noqa: PLC0415 (lora imports the transformer)

    if not isinstance(model, Transformer):
        raise ValueError(f"expected a Transformer, got {type(model).__name__}")
    if model.config.fused_projections == fused:
        return model
    if has_adapters(model):
        raise ValueError("a model with LoRA adapters cannot change its projection layout: "
                         "merge the adapters first (rlvr.models.lora.merge)")
    cfg = model.config.replace(fused_projections=fused)
    fresh = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0), remat=model.model.remat))
    graphdef, state = nnx.split(fresh)
    flat = dict(nnx.to_flat_state(state))
    src = {p: v.get_value() for p, v in nnx.to_flat_state(nnx.state(model))}
    member_of = {m: f for f, ms in FUSED_GROUPS.items() for m in ms}
    for path, var in flat.items():
        if path in src:
            var.set_value(src[path])
            continue
        *base, name, leaf = path  # ("model", "layers", i, "self_attn", name, "kernel" | "bias")
        if name in FUSED_GROUPS:  # fuse the members
            parts = [src[(*base, m, leaf)] for m in FUSED_GROUPS[name]]
            var.set_value(fuse_columns(name, parts, cfg))
        else:  # one member of a fused kernel
            group = member_of[name]
            parts = split_columns(group, src[(*base, group, leaf)], cfg)
            var.set_value(parts[FUSED_GROUPS[group].index(name)])
    return nnx.merge(graphdef, nnx.from_flat_state(flat))


def fuse_model(model: Transformer) -> Transformer:
    """A `Transformer` with `fused_projections` on and the same function as `model` (its
    q/k/v and gate/up kernels and biases fused exactly; every other parameter shared). `model`
    itself is returned when already fused. A model carrying LoRA adapters raises ValueError."""
    return _converted(model, True)


def unfuse_model(model: Transformer) -> Transformer:
    """Inverse of `fuse_model`: the separate-kernel `Transformer` of a fused one."""
    return _converted(model, False)
