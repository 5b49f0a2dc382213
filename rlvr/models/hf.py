"""Hugging Face checkpoint import / export (docs/architecture.md §3, docs/algorithms.md §7; transformers 5 ships no Flax models).

Every family of `rlvr.models.config.ARCHITECTURES` uses the tensor names of its transformers
class; a mixture-of-experts layer's per-expert tensors (`mlp.experts.3.gate_proj.weight`,
Mixtral's `block_sparse_moe.experts.3.w1.weight`) are stacked into one [E, ...] kernel.

`from_pretrained(path)` reads a local folder holding `config.json` and `model.safetensors` (or a
sharded `model.safetensors.index.json` + shards) into a `Transformer`. `save_pretrained(model,
path)` writes `config.json` + `model.safetensors` that `transformers.AutoModelForCausalLM`
loads. HF Linear weights are `[out, in]`; ours are `[in, out]` (transposed on the way). A model
with `fused_projections` is loaded fused (`from_pretrained(..., fused_projections=True)`) and
saved with the separate q/k/v and gate/up tensors, so a round trip gives the same tensors.
A missing tensor, a wrong shape, an unknown architecture or a truncated / corrupt safetensors
file raises `ValueError` naming it.
"""

from __future__ import annotations

import json
import os
from typing import Dict, Iterator, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr.models.config import ModelConfig
from rlvr.models.fused import fuse_model, unfuse_model
from rlvr.models.transformer import Transformer, jnp_dtype

# Tensors a checkpoint may carry that we recompute or do not need.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def hf_param_names(config: ModelConfig) -> Dict[str, tuple]:
    """HF tensor name -> (our nnx state path, transpose?, expert index or None).

    An expert index e means the tensor is slice e of the stacked [E, ...] kernel at the path.
    The paths are those of the separate-kernel layout (`fused_projections` off); a fused model
    is converted on load and save (`rlvr.models.fused`)."""
    out = {"model.embed_tokens.weight": (("model", "embed_tokens"), False, None),
           "model.norm.weight": (("model", "norm", "scale"), False, None)}
    if not config.tie_word_embeddings:
        out["lm_head.weight"] = (("lm_head", "kernel"), True, None)
    norms = ["input_layernorm", "post_attention_layernorm"]
    if config.sandwich_norms:
        norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
    mixtral = config.architecture == "mixtral"
    for i in range(config.num_layers):
        pre = f"model.layers.{i}"
        base = ("model", "layers", i)
        for n in norms:
            out[f"{pre}.{n}.weight"] = (base + (n, "scale"), False, None)
        for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
            out[f"{pre}.self_attn.{p}.weight"] = (base + ("self_attn", p, "kernel"), True, None)
            if config.attention_bias and p != "o_proj":
                out[f"{pre}.self_attn.{p}.bias"] = (base + ("self_attn", p, "bias"), False, None)
        if config.qk_norm:
            for n in ("q_norm", "k_norm"):
                out[f"{pre}.self_attn.{n}.weight"] = (base + ("self_attn", n, "scale"), False, None)
        if config.is_moe(i):
            moe = f"{pre}.block_sparse_moe" if mixtral else f"{pre}.mlp"
            out[f"{moe}.gate.weight"] = (base + ("mlp", "gate", "kernel"), True, None)
            names = (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")) if mixtral else (
                ("gate_proj", "gate_proj"), ("up_proj", "up_proj"), ("down_proj", "down_proj"))
            for e in range(config.num_experts):
                for hf_name, ours in names:
                    out[f"{moe}.experts.{e}.{hf_name}.weight"] = (base + ("mlp", ours), True, e)
        else:
            for p in ("gate_proj", "up_proj", "down_proj"):
                out[f"{pre}.mlp.{p}.weight"] = (base + ("mlp", p, "kernel"), True, None)
    return out


def _safetensor_files(path: str) -> list:
    index = os.path.join(path, "model.safetensors.index.json")
    single = os.path.join(path, "model.safetensors")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ValueError(f"{index} has no 'weight_map'")
        files = sorted(set(weight_map.values()))
        for fn in files:
            if not os.path.exists(os.path.join(path, fn)):
                raise ValueError(f"checkpoint shard {fn!r} listed in {index} is missing")
        return [os.path.join(path, fn) for fn in files]
    if os.path.exists(single):
        return [single]
    raise ValueError(f"no model.safetensors or model.safetensors.index.json in {path!r}")


def _iter_tensors(files) -> Iterator[Tuple[str, jnp.ndarray]]:
    """(name, tensor) of every tensor in `files`; a file that is truncated or corrupt raises
    ValueError naming it (a partly copied or downloaded checkpoint)."""
    from safetensors import safe_open

    for fn in files:
        try:
            # framework="flax" reads bfloat16 too (numpy cannot).
            with safe_open(fn, framework="flax") as f:
                for name in f.keys():
                    yield name, f.get_tensor(name)
        except Exception as e:  # noqa: BLE001 — safetensors' own errors, with the file named
            raise ValueError(f"checkpoint file {fn} ({os.path.getsize(fn)} bytes) is truncated or "
                             f"corrupt (copy or download it again): {type(e).__name__}: {e}"
                             ) from None


def read_tensors(files) -> dict:
    """{name: tensor} of the safetensors `files`; a truncated or corrupt file raises ValueError
    naming it (`_iter_tensors`)."""
    return dict(_iter_tensors(files))


def load_config(path: str, *, dtype: str = "float32", param_dtype=None) -> ModelConfig:
    cfg_path = os.path.join(path, "config.json")
    if not os.path.exists(cfg_path):
        raise ValueError(f"no config.json in {path!r}")
    with open(cfg_path) as f:
        return ModelConfig.from_hf(json.load(f), dtype=dtype, param_dtype=param_dtype)


def from_pretrained(path: str, *, dtype: str = "float32", param_dtype=None,
                    remat: bool = False, fused_projections: bool = False) -> Transformer:
    """Loads a local HF folder (any of `ARCHITECTURES`) into a `Transformer`.

    dtype: compute dtype ("float32" | "bfloat16"); param_dtype defaults to dtype.
    fused_projections: store q/k/v and gate/up as one kernel each (`ModelConfig.
    fused_projections`); the checkpoint's separate tensors (and q/k/v biases) are fused exactly.
    """
    model = _load(path, dtype=dtype, param_dtype=param_dtype, remat=remat)
    if fused_projections:
        model = fuse_model(model)
    return model


def _load(path: str, *, dtype, param_dtype, remat) -> Transformer:
    config = load_config(path, dtype=dtype, param_dtype=param_dtype)
    files = _safetensor_files(path)
    names = hf_param_names(config)
    # Build the module abstractly (no random init), then fill every parameter.
    model = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0), remat=remat))
    graphdef, state = nnx.split(model)
    flat = dict(nnx.to_flat_state(state))
    pdt = jnp_dtype(config.param_dtype)
    seen = set()
    stacked = {}  # path of a stacked expert kernel -> numpy buffer being filled
    for name, tensor in _iter_tensors(files):
        if name not in names:
            if name.endswith(_IGNORED_SUFFIXES) or (name == "lm_head.weight"
                                                    and config.tie_word_embeddings):
                continue
            raise ValueError(f"checkpoint tensor {name!r} is not part of a "
                             f"{config.architecture} model with this config")
        target, transpose, expert = names[name]
        t = tensor.T if transpose else tensor
        var = flat[target]
        expected = tuple(var.get_value().shape)
        if expert is not None:
            expected = expected[1:]
        if tuple(t.shape) != expected:
            shown = tuple(tensor.shape)
            want = expected[::-1] if transpose else expected
            raise ValueError(f"checkpoint tensor {name!r} has shape {shown}, expected {want}")
        if expert is None:
            var.set_value(jnp.asarray(t, pdt))
        else:
            if target not in stacked:
                stacked[target] = np.zeros(var.get_value().shape, jnp.dtype(pdt))
            stacked[target][expert] = np.asarray(jnp.asarray(t, pdt))
        seen.add(name)
    missing = [n for n in names if n not in seen]
    if missing:
        raise ValueError(f"checkpoint is missing tensor {missing[0]!r}"
                         + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    for target, arr in stacked.items():
        flat[target].set_value(jnp.asarray(arr))
    state = nnx.from_flat_state(flat)
    return nnx.merge(graphdef, state)


def save_pretrained(model: Transformer, path: str) -> None:
    """Writes `config.json` + `model.safetensors` (transformers-loadable) into `path`."""
    from safetensors.numpy import save_file

    if not isinstance(model, Transformer):
        raise ValueError(f"save_pretrained expects a Transformer, got {type(model).__name__}")
    from rlvr.models.lora import has_adapters  # noqa: PLC0415 (lora imports this module)

    if has_adapters(model):
        raise ValueError("save_pretrained: the model carries LoRA adapters (and possibly a quantised base); "
                         "write rlvr.models.lora.merge(model) (adapters folded in) or use "
                         "rlvr.models.lora.save_merged / save_adapters")
    if model.config.fused_projections:  # checkpoints hold the separate tensors
        model = unfuse_model(model)
    config = model.config
    os.makedirs(path, exist_ok=True)
    flat = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
    tensors = {}
    host = {}  # one device-to-host copy per variable (a stacked expert kernel serves E tensors)
    for name, (target, transpose, expert) in hf_param_names(config).items():
        if target not in host:
            host[target] = np.asarray(jax.device_get(flat[target][...]))
        arr = host[target]
        if expert is not None:
            arr = arr[expert]
        if transpose:
            arr = arr.T
        tensors[name] = np.ascontiguousarray(arr)
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config.to_hf(), f, indent=2, sort_keys=True)
