"""`ModelConfig`: the shape and numerics of a Llama / Qwen2-family decoder (SPEC R1, R5.2).

One frozen dataclass describes both architectures. `from_hf` reads a Hugging Face
`config.json` dict (transformers 4 style `rope_theta` / `rope_scaling` keys and transformers 5
style `rope_parameters` both work); `to_hf` writes one that transformers 5 loads. Bad values raise
`ValueError` naming the field and the allowed values, here where they enter.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

ARCHITECTURES = ("llama", "qwen2")
DTYPES = ("float32", "bfloat16")


def dtype_name(dtype, field: str = "dtype") -> str:
    """The name ("float32" | "bfloat16") of a dtype given by name or as a JAX / numpy dtype
    (`jnp.bfloat16`, `np.float32`, `np.dtype("bfloat16")`). Raises ValueError naming `field`."""
    if isinstance(dtype, str):
        name = dtype
    else:
        try:
            import numpy as np

            name = np.dtype(dtype).name
        except TypeError:
            name = repr(dtype)
    if name not in DTYPES:
        raise ValueError(f"{field} must be one of {DTYPES} (or the JAX / numpy dtype), got {dtype!r}")
    return name

ATTENTION_IMPLS = ("xla", "cudnn")
ATTENTION_LAYOUTS = ("auto", "mask", "lengths")
# rope_type values we implement (see rlvr.models.transformer.rope_frequencies).
ROPE_TYPES = ("default", "linear", "llama3")

_HF_CLASS = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}
_HF_MODEL_TYPES = {"llama": "llama", "qwen2": "qwen2", "LlamaForCausalLM": "llama",
                   "Qwen2ForCausalLM": "qwen2"}


def _freeze(x):
    if isinstance(x, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(_freeze(v) for v in x)
    return x


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Decoder-only transformer configuration.

    Attributes:
      vocab_size: V, rows of the embedding table (and of the LM head).
      hidden_size: D, the residual stream width.
      intermediate_size: F, the SwiGLU hidden width.
      num_layers: L.
      num_heads: query heads N.
      num_kv_heads: key/value heads K (grouped-query attention; N % K == 0).
      head_dim: H per head (need not equal D / N).
      rope_theta: RoPE base.
      rope_scaling: None or a dict with `rope_type` in ROPE_TYPES and its parameters
        (`factor`; llama3 also `low_freq_factor`, `high_freq_factor`,
        `original_max_position_embeddings`).
      rms_norm_eps: RMSNorm epsilon.
      tie_word_embeddings: LM head shares the embedding table.
      attention_bias: q/k/v projections carry a bias (Qwen2: True).
      max_position_embeddings: longest position the checkpoint was trained for.
      dtype: compute dtype of activations ("float32" | "bfloat16"); logits are always float32.
      param_dtype: storage dtype of parameters ("float32" | "bfloat16").
      architecture: "llama" | "qwen2" (names the HF class on export).
      attention_impl: "xla" (any backend) | "cudnn" (fused GPU kernel; bf16 only).
      attention_layout: how the full-sequence forward (training, scoring) masks attention:
        "mask" a dense [B, 1, T, T] mask (any real-token pattern); "lengths" each row's real
        tokens moved to its start, then causal attention with per-row lengths, which fused
        kernels run without materialising a mask (rows whose real tokens are not contiguous
        come out NaN); "auto" = lengths with cudnn, mask with xla. The KV-cache path always
        uses a mask.
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rope_scaling: Optional[dict] = None
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    max_position_embeddings: int = 2048
    dtype: str = "float32"
    param_dtype: str = "float32"
    architecture: str = "llama"
    attention_impl: str = "xla"
    attention_layout: str = "auto"

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim", "max_position_embeddings"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"ModelConfig.{name} must be a positive int, got {v!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"ModelConfig.num_heads ({self.num_heads}) must be a multiple of "
                f"ModelConfig.num_kv_heads ({self.num_kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"ModelConfig.head_dim must be even for RoPE, got {self.head_dim}")
        if not (isinstance(self.rope_theta, (int, float)) and self.rope_theta > 0):
            raise ValueError(f"ModelConfig.rope_theta must be > 0, got {self.rope_theta!r}")
        if not (isinstance(self.rms_norm_eps, (int, float)) and self.rms_norm_eps > 0):
            raise ValueError(f"ModelConfig.rms_norm_eps must be > 0, got {self.rms_norm_eps!r}")
        object.__setattr__(self, "dtype", dtype_name(self.dtype, "ModelConfig.dtype"))
        object.__setattr__(self, "param_dtype", dtype_name(self.param_dtype, "ModelConfig.param_dtype"))
        if self.architecture not in ARCHITECTURES:
            raise ValueError(
                f"ModelConfig.architecture must be one of {ARCHITECTURES}, got {self.architecture!r}")
        if self.attention_impl not in ATTENTION_IMPLS:
            raise ValueError(f"ModelConfig.attention_impl must be one of {ATTENTION_IMPLS}, "
                             f"got {self.attention_impl!r}")
        if self.attention_layout not in ATTENTION_LAYOUTS:
            raise ValueError(f"ModelConfig.attention_layout must be one of {ATTENTION_LAYOUTS}, "
                             f"got {self.attention_layout!r}")
        rs = self.rope_scaling
        if rs is not None:
            if not isinstance(rs, dict):
                raise ValueError(f"ModelConfig.rope_scaling must be None or a dict, got {rs!r}")
            rtype = rs.get("rope_type", rs.get("type", "default"))
            if rtype not in ROPE_TYPES:
                raise ValueError(f"ModelConfig.rope_scaling.rope_type must be one of {ROPE_TYPES}, "
                                 f"got {rtype!r}")
            needed = {"linear": ("factor",),
                      "llama3": ("factor", "low_freq_factor", "high_freq_factor",
                                 "original_max_position_embeddings")}.get(rtype, ())
            for k in needed:
                if k not in rs:
                    raise ValueError(f"ModelConfig.rope_scaling.{k} is required for rope_type {rtype!r}")

    def __hash__(self):
        return hash(tuple(_freeze(getattr(self, f.name)) for f in dataclasses.fields(self)))

    # ------------------------------------------------------------------ derived
    @property
    def rope_type(self) -> str:
        if self.rope_scaling is None:
            return "default"
        return self.rope_scaling.get("rope_type", self.rope_scaling.get("type", "default"))

    def num_params(self) -> int:
        """Parameter count (embedding counted once when tied)."""
        d, f, h = self.hidden_size, self.intermediate_size, self.head_dim
        attn = d * h * (self.num_heads * 2 + self.num_kv_heads * 2)
        if self.attention_bias:
            attn += h * (self.num_heads + 2 * self.num_kv_heads)
        per_layer = attn + 3 * d * f + 2 * d
        emb = self.vocab_size * d * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * per_layer + emb + d

    def replace(self, **kw) -> "ModelConfig":
        return dataclasses.replace(self, **kw)

    # ------------------------------------------------------------------ HF
    @classmethod
    def from_hf(cls, config: dict, *, dtype: str = "float32",
                param_dtype: Optional[str] = None) -> "ModelConfig":
        """Builds a config from a Hugging Face `config.json` dict (Llama / Qwen2)."""
        if not isinstance(config, dict):
            raise ValueError(f"ModelConfig.from_hf expects a dict, got {type(config).__name__}")
        arch = None
        mt = config.get("model_type")
        if mt in _HF_MODEL_TYPES:
            arch = _HF_MODEL_TYPES[mt]
        else:
            for a in config.get("architectures") or ():
                if a in _HF_MODEL_TYPES:
                    arch = _HF_MODEL_TYPES[a]
        if arch is None:
            raise ValueError(
                f"config.json model_type {mt!r} / architectures {config.get('architectures')!r} "
                f"is not supported; known model_type values: {ARCHITECTURES}")

        def need(key):
            if key not in config:
                raise ValueError(f"config.json is missing the field {key!r}")
            return config[key]

        hidden = need("hidden_size")
        heads = need("num_attention_heads")
        head_dim = config.get("head_dim") or hidden // heads
        rope_params = dict(config.get("rope_parameters") or {})
        theta = config.get("rope_theta", rope_params.pop("rope_theta", 10000.0))
        rope_params.pop("rope_theta", None)
        scaling = config.get("rope_scaling") or rope_params or None
        if scaling is not None:
            scaling = dict(scaling)
            if "type" in scaling and "rope_type" not in scaling:
                scaling["rope_type"] = scaling.pop("type")
            if scaling.get("rope_type", "default") == "default":
                scaling = None
        if arch == "qwen2":
            bias = True
            if config.get("use_sliding_window"):
                raise ValueError("config.json use_sliding_window=True is not supported")
        else:
            bias = bool(config.get("attention_bias", False))
            if config.get("mlp_bias"):
                raise ValueError("config.json mlp_bias=True is not supported")
        act = config.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"config.json hidden_act must be 'silu', got {act!r}")
        return cls(
            vocab_size=need("vocab_size"),
            hidden_size=hidden,
            intermediate_size=need("intermediate_size"),
            num_layers=need("num_hidden_layers"),
            num_heads=heads,
            num_kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            rope_theta=float(theta),
            rope_scaling=scaling,
            rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            attention_bias=bias,
            max_position_embeddings=config.get("max_position_embeddings", 2048),
            dtype=dtype,
            param_dtype=param_dtype or dtype,
            architecture=arch,
        )

    def to_hf(self) -> dict:
        """A `config.json` dict that transformers 5 loads as the matching *ForCausalLM."""
        rope = {"rope_type": "default", "rope_theta": float(self.rope_theta)}
        if self.rope_scaling is not None:
            rope.update(self.rope_scaling)
            rope["rope_type"] = self.rope_type
            rope.pop("type", None)
        out: dict[str, Any] = {
            "architectures": [_HF_CLASS[self.architecture]],
            "model_type": self.architecture,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
            "rope_parameters": rope,
            "torch_dtype": self.param_dtype,
            "dtype": self.param_dtype,
        }
        if self.architecture == "llama":
            out["attention_bias"] = self.attention_bias
            out["mlp_bias"] = False
        else:
            out["use_sliding_window"] = False
        return out

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)
