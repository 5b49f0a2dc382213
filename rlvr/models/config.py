"""`ModelConfig`: the shape and numerics of a decoder-only transformer (docs/architecture.md §3, docs/algorithms.md §7).

One frozen dataclass describes every supported family (`ARCHITECTURES`): Llama (3.x RoPE
scaling), Qwen2, Qwen3 (q/k norms), Mistral (sliding window), Gemma 2 / Gemma 3 text (sandwich
norms, GeGLU, scaled embeddings, soft-capping, local/global layers), and the mixture-of-experts
Qwen3-MoE and Mixtral. The families differ only in these fields; one decoder runs them all.
`from_hf` reads a Hugging Face `config.json` dict (transformers 4 style `rope_theta` /
`rope_scaling` keys and transformers 5 style `rope_parameters` both work); `to_hf` writes one
that transformers 5 loads. Bad values raise `ValueError` naming the field and the allowed
values, here where they enter.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

ARCHITECTURES = ("llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3_text", "qwen3_moe",
                 "mixtral")
HIDDEN_ACTS = ("silu", "gelu_pytorch_tanh")
LAYER_TYPES = ("full_attention", "sliding_attention")
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

_HF_CLASS = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
             "qwen3": "Qwen3ForCausalLM", "mistral": "MistralForCausalLM",
             "gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM",
             "qwen3_moe": "Qwen3MoeForCausalLM", "mixtral": "MixtralForCausalLM"}
_HF_MODEL_TYPES = {**{a: a for a in ARCHITECTURES}, **{c: a for a, c in _HF_CLASS.items()}}
# Families whose checkpoints use Gemma's conventions (norm scale 1 + w, GeGLU, scaled
# embeddings, sandwich norms).
GEMMA_FAMILIES = ("gemma2", "gemma3_text")
MOE_FAMILIES = ("qwen3_moe", "mixtral")


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
      architecture: one of ARCHITECTURES (names the HF class on export).
      attention_impl: "xla" (any backend) | "cudnn" (fused GPU kernel; bf16 only).
      attention_layout: how the full-sequence forward (training, scoring) masks attention:
        "mask" a dense [B, 1, T, T] mask (any real-token pattern); "lengths" each row's real
        tokens moved to its start, then causal attention with per-row lengths, which fused
        kernels run without materialising a mask (rows whose real tokens are not contiguous
        come out NaN); "auto" = lengths with cudnn, mask with xla. The KV-cache path always
        uses a mask.
      qk_norm: RMSNorm over head_dim on every query and key head before RoPE (Qwen3, Gemma 3).
      norm_unit_offset: RMSNorm multiplies by (1 + w) in float32 (Gemma) instead of w.
      sandwich_norms: a norm on the attention output and around the MLP
        (`post_attention_layernorm` after attention, `pre_/post_feedforward_layernorm`; Gemma).
      hidden_act: MLP gate activation, "silu" (SwiGLU) | "gelu_pytorch_tanh" (GeGLU).
      scale_embeddings: token embeddings are multiplied by sqrt(D) (Gemma).
      query_pre_attn_scalar: attention scale is query_pre_attn_scalar**-0.5 (None: head_dim).
      attn_logit_softcapping: c > 0: attention scores s -> c·tanh(s / c) (Gemma 2); None off.
      final_logit_softcapping: c > 0: LM logits z -> c·tanh(z / c) (Gemma 2); None off.
      sliding_window: W: a sliding layer's query at index i sees keys at i - W < j <= i.
      layer_types: per layer "full_attention" | "sliding_attention"; None: every layer is
        sliding when sliding_window is set (Mistral), else full.
      local_rope_theta: RoPE base of the sliding layers (no scaling; Gemma 3); None: rope_theta.
      num_experts: E > 0 makes the MLP of the sparse layers a mixture of experts.
      num_experts_per_tok: k experts per token (top-k of the router's softmax).
      moe_intermediate_size: each expert's SwiGLU width.
      norm_topk_prob: the k routing weights are renormalised to sum to 1.
      decoder_sparse_step, mlp_only_layers: layer i is sparse iff (i + 1) % step == 0 and i is
        not in mlp_only_layers (Qwen3-MoE's convention; Mixtral: every layer).
      router_aux_loss_coef: the checkpoint's load-balancing loss coefficient (exported as is).
      fused_projections: each attention layer stores one `qkv_proj` kernel for q/k/v and each
        dense MLP one `gate_up_proj` kernel for gate/up, each run as one matmul (mixture-of-
        experts layers keep their experts unfused). The layouts keep a tensor-parallel shard's
        columns whole: `qkv_proj` [D, K·(N/K + 2)·H] holds, per kv head g, its N/K query heads,
        then key head g, then value head g; `gate_up_proj` [D, 2F] interleaves gate column f
        (2f) and up column f (2f + 1). Same function as the separate kernels
        (`rlvr.models.fused`); checkpoints keep the separate Hugging Face tensors.
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
    qk_norm: bool = False
    norm_unit_offset: bool = False
    sandwich_norms: bool = False
    hidden_act: str = "silu"
    scale_embeddings: bool = False
    query_pre_attn_scalar: Optional[float] = None
    attn_logit_softcapping: Optional[float] = None
    final_logit_softcapping: Optional[float] = None
    sliding_window: Optional[int] = None
    layer_types: Optional[tuple] = None
    local_rope_theta: Optional[float] = None
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple = ()
    router_aux_loss_coef: float = 0.0
    fused_projections: bool = False

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
        if not isinstance(self.fused_projections, bool):
            raise ValueError(f"ModelConfig.fused_projections must be True or False, "
                             f"got {self.fused_projections!r}")
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
        if self.hidden_act not in HIDDEN_ACTS:
            raise ValueError(f"ModelConfig.hidden_act must be one of {HIDDEN_ACTS}, "
                             f"got {self.hidden_act!r}")
        for name in ("query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                     "local_rope_theta"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                      and v > 0):
                raise ValueError(f"ModelConfig.{name} must be None or a number > 0, got {v!r}")
        w = self.sliding_window
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w <= 0):
            raise ValueError(f"ModelConfig.sliding_window must be None or a positive int, "
                             f"got {w!r}")
        if self.layer_types is not None:
            lt = tuple(self.layer_types)
            if len(lt) != self.num_layers or any(t not in LAYER_TYPES for t in lt):
                raise ValueError(f"ModelConfig.layer_types must list one of {LAYER_TYPES} per "
                                 f"layer ({self.num_layers}), got {self.layer_types!r}")
            if "sliding_attention" in lt and w is None:
                raise ValueError("ModelConfig.layer_types has sliding_attention layers but "
                                 "ModelConfig.sliding_window is None")
            object.__setattr__(self, "layer_types", lt)
        for name in ("num_experts", "num_experts_per_tok", "moe_intermediate_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"ModelConfig.{name} must be an int >= 0, got {v!r}")
        if self.num_experts:
            if not 1 <= self.num_experts_per_tok <= self.num_experts:
                raise ValueError(f"ModelConfig.num_experts_per_tok must be in [1, num_experts="
                                 f"{self.num_experts}], got {self.num_experts_per_tok!r}")
            if self.moe_intermediate_size <= 0:
                raise ValueError("ModelConfig.moe_intermediate_size must be > 0 when "
                                 "num_experts > 0")
            if self.architecture == "mixtral" and self.intermediate_size != \
                    self.moe_intermediate_size:
                raise ValueError(f"ModelConfig.intermediate_size ({self.intermediate_size}) must "
                                 f"equal moe_intermediate_size ({self.moe_intermediate_size}) "
                                 f"for mixtral (its config.json has one intermediate_size)")
            st = self.decoder_sparse_step
            if isinstance(st, bool) or not isinstance(st, int) or st < 1:
                raise ValueError(f"ModelConfig.decoder_sparse_step must be an int >= 1, got {st!r}")
        only = tuple(self.mlp_only_layers)
        if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.num_layers
               for i in only):
            raise ValueError(f"ModelConfig.mlp_only_layers must hold layer indices in "
                             f"[0, {self.num_layers}), got {self.mlp_only_layers!r}")
        object.__setattr__(self, "mlp_only_layers", only)
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

    def is_sliding(self, layer: int) -> bool:
        """Whether layer `layer` attends through the sliding window."""
        if self.sliding_window is None:
            return False
        if self.layer_types is None:
            return True
        return self.layer_types[layer] == "sliding_attention"

    def is_moe(self, layer: int) -> bool:
        """Whether layer `layer`'s MLP is a mixture of experts."""
        return (self.num_experts > 0 and (layer + 1) % self.decoder_sparse_step == 0
                and layer not in self.mlp_only_layers)

    def num_params(self) -> int:
        """Parameter count (embedding counted once when tied)."""
        d, f, h = self.hidden_size, self.intermediate_size, self.head_dim
        attn = d * h * (self.num_heads * 2 + self.num_kv_heads * 2)
        if self.attention_bias:
            attn += h * (self.num_heads + 2 * self.num_kv_heads)
        if self.qk_norm:
            attn += 2 * h
        norms = (4 if self.sandwich_norms else 2) * d
        total = 0
        for i in range(self.num_layers):
            if self.is_moe(i):
                mlp = d * self.num_experts + self.num_experts * 3 * d * self.moe_intermediate_size
            else:
                mlp = 3 * d * f
            total += attn + mlp + norms
        emb = self.vocab_size * d * (1 if self.tie_word_embeddings else 2)
        return total + emb + d

    def num_active_params(self) -> int:
        """Parameters used per token (a MoE layer counts its router and k experts)."""
        if not self.num_experts:
            return self.num_params()
        unused = self.num_experts - self.num_experts_per_tok
        moe_layers = sum(self.is_moe(i) for i in range(self.num_layers))
        return self.num_params() - moe_layers * unused * 3 * self.hidden_size * \
            self.moe_intermediate_size

    def replace(self, **kw) -> "ModelConfig":
        return dataclasses.replace(self, **kw)

    # ------------------------------------------------------------------ HF
    @classmethod
    def from_hf(cls, config: dict, *, dtype: str = "float32",
                param_dtype: Optional[str] = None) -> "ModelConfig":
        """Builds a config from a Hugging Face `config.json` dict (one of ARCHITECTURES).

        A field this decoder does not implement (a vision tower, an unknown `rope_type`,
        `use_sliding_window` on Qwen, bidirectional Gemma 3, router jitter, ...) raises
        ValueError naming the field."""
        if not isinstance(config, dict):
            raise ValueError(f"ModelConfig.from_hf expects a dict, got {type(config).__name__}")
        if config.get("vision_config") is not None:
            raise ValueError(
                f"config.json has a vision tower (vision_config; model_type "
                f"{config.get('model_type')!r}): only text-only models are supported; for "
                f"Gemma 3 use the text model (model_type 'gemma3_text', Gemma3ForCausalLM)")
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

        def refuse_if(key, bad, allowed):
            if key in config and config[key] is not None and bad(config[key]):
                raise ValueError(f"config.json {key}={config[key]!r} is not supported for "
                                 f"{arch} (supported: {allowed})")

        hidden = need("hidden_size")
        heads = need("num_attention_heads")
        head_dim = config.get("head_dim") or hidden // heads
        rope_params = dict(config.get("rope_parameters") or {})
        local_theta = None
        if arch == "gemma3_text" and isinstance(rope_params.get("full_attention"), dict):
            # transformers 5 keys Gemma 3's RoPE by layer type.
            local = dict(rope_params.get("sliding_attention") or {})
            if local.get("rope_type", "default") != "default":
                raise ValueError(f"config.json rope_parameters.sliding_attention.rope_type="
                                 f"{local.get('rope_type')!r} is not supported (supported: "
                                 f"'default')")
            local_theta = float(local.get("rope_theta", 10000.0))
            rope_params = dict(rope_params["full_attention"])
        elif arch == "gemma3_text":
            local_theta = float(config.get("rope_local_base_freq", 10000.0))
        theta = config.get("rope_theta", rope_params.pop("rope_theta", 10000.0))
        rope_params.pop("rope_theta", None)
        scaling = config.get("rope_scaling") or rope_params or None
        if scaling is not None:
            scaling = dict(scaling)
            if "type" in scaling and "rope_type" not in scaling:
                scaling["rope_type"] = scaling.pop("type")
            if scaling.get("rope_type", "default") == "default":
                scaling = None
        kw: dict[str, Any] = {}
        gemma = arch in GEMMA_FAMILIES
        if arch == "qwen2":
            bias = True
            if config.get("use_sliding_window"):
                raise ValueError("config.json use_sliding_window=True is not supported")
        else:
            bias = bool(config.get("attention_bias", False))
            if config.get("mlp_bias"):
                raise ValueError("config.json mlp_bias=True is not supported")
        if arch in ("qwen3", "qwen3_moe"):
            refuse_if("use_sliding_window", bool, "False")
            kw["qk_norm"] = True
        if arch in ("mistral", "mixtral") and config.get("sliding_window") is not None:
            kw["sliding_window"] = int(config["sliding_window"])
        if gemma:
            act = config.get("hidden_activation") or config.get("hidden_act") or "gelu_pytorch_tanh"
            if act != "gelu_pytorch_tanh":
                raise ValueError(f"config.json hidden_activation must be 'gelu_pytorch_tanh' for "
                                 f"{arch}, got {act!r}")
            refuse_if("use_bidirectional_attention", bool, "False")
            n = need("num_hidden_layers")
            lt = config.get("layer_types")
            if lt is None:
                if arch == "gemma2":
                    lt = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
                else:
                    pat = int(config.get("sliding_window_pattern", 6))
                    lt = ["sliding_attention" if (i + 1) % pat else "full_attention"
                          for i in range(n)]
            kw.update(norm_unit_offset=True, sandwich_norms=True, scale_embeddings=True,
                      qk_norm=arch == "gemma3_text", hidden_act=act,
                      query_pre_attn_scalar=config.get("query_pre_attn_scalar") or head_dim,
                      attn_logit_softcapping=config.get("attn_logit_softcapping"),
                      final_logit_softcapping=config.get("final_logit_softcapping"),
                      sliding_window=config.get("sliding_window"),
                      layer_types=tuple(lt), local_rope_theta=local_theta)
            if kw["sliding_window"] is None and "sliding_attention" in lt:
                raise ValueError("config.json layer_types has sliding_attention layers but "
                                 "sliding_window is null")
        else:
            act = config.get("hidden_act", "silu")
            if act != "silu":
                raise ValueError(f"config.json hidden_act must be 'silu', got {act!r}")
            lt = config.get("layer_types")
            if lt is not None and any(t != "full_attention" for t in lt) and arch not in (
                    "mistral", "mixtral"):
                raise ValueError(f"config.json layer_types={lt!r} is not supported for {arch} "
                                 f"(supported: every layer 'full_attention')")
        if arch == "qwen3_moe":
            # transformers 5 writes num_local_experts; the Hub's configs say num_experts
            experts = config.get("num_experts", config.get("num_local_experts"))
            if experts is None:
                raise ValueError("config.json is missing the field 'num_experts'")
            kw.update(num_experts=experts,
                      num_experts_per_tok=need("num_experts_per_tok"),
                      moe_intermediate_size=need("moe_intermediate_size"),
                      norm_topk_prob=bool(config.get("norm_topk_prob", False)),
                      decoder_sparse_step=int(config.get("decoder_sparse_step", 1)),
                      mlp_only_layers=tuple(config.get("mlp_only_layers") or ()),
                      router_aux_loss_coef=float(config.get("router_aux_loss_coef", 0.0)))
            if kw["num_experts"] == 0:
                raise ValueError("config.json num_experts=0: a qwen3_moe model needs experts")
        if arch == "mixtral":
            refuse_if("router_jitter_noise", lambda v: v != 0, "0.0")
            kw.update(num_experts=need("num_local_experts"),
                      num_experts_per_tok=need("num_experts_per_tok"),
                      moe_intermediate_size=need("intermediate_size"), norm_topk_prob=True,
                      router_aux_loss_coef=float(config.get("router_aux_loss_coef", 0.0)))
        tie_default = gemma
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
            tie_word_embeddings=bool(config.get("tie_word_embeddings", tie_default)),
            attention_bias=bias,
            max_position_embeddings=config.get("max_position_embeddings", 2048),
            dtype=dtype,
            param_dtype=param_dtype or dtype,
            architecture=arch,
            **kw,
        )

    def to_hf(self) -> dict:
        """A `config.json` dict that transformers 5 loads as the matching *ForCausalLM."""
        rope = {"rope_type": "default", "rope_theta": float(self.rope_theta)}
        if self.rope_scaling is not None:
            rope.update(self.rope_scaling)
            rope["rope_type"] = self.rope_type
            rope.pop("type", None)
        arch = self.architecture
        out: dict[str, Any] = {
            "architectures": [_HF_CLASS[arch]],
            "model_type": arch,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": self.hidden_act,
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
            "rope_parameters": rope,
            "torch_dtype": self.param_dtype,
            "dtype": self.param_dtype,
        }
        if arch == "llama":
            out["attention_bias"] = self.attention_bias
            out["mlp_bias"] = False
        elif arch == "qwen2":
            out["use_sliding_window"] = False
        elif arch in ("qwen3", "qwen3_moe"):
            out.update(attention_bias=self.attention_bias, use_sliding_window=False,
                       sliding_window=None)
        elif arch in ("mistral", "mixtral"):
            out["sliding_window"] = self.sliding_window
        if arch in GEMMA_FAMILIES:
            del out["hidden_act"]
            out.update(hidden_activation=self.hidden_act, attention_bias=self.attention_bias,
                       query_pre_attn_scalar=(int(self.query_pre_attn_scalar)
                                              if float(self.query_pre_attn_scalar).is_integer()
                                              else self.query_pre_attn_scalar),
                       attn_logit_softcapping=self.attn_logit_softcapping,
                       final_logit_softcapping=self.final_logit_softcapping,
                       sliding_window=self.sliding_window,
                       layer_types=list(self.layer_types or ["full_attention"] * self.num_layers))
            if arch == "gemma3_text":
                local = {"rope_type": "default",
                         "rope_theta": float(self.local_rope_theta or self.rope_theta)}
                out["rope_parameters"] = {"full_attention": rope, "sliding_attention": local}
                out["use_bidirectional_attention"] = False
        if arch == "qwen3_moe":
            out.update(num_experts=self.num_experts, num_experts_per_tok=self.num_experts_per_tok,
                       moe_intermediate_size=self.moe_intermediate_size,
                       norm_topk_prob=self.norm_topk_prob,
                       decoder_sparse_step=self.decoder_sparse_step,
                       mlp_only_layers=list(self.mlp_only_layers),
                       router_aux_loss_coef=self.router_aux_loss_coef)
        if arch == "mixtral":
            out.update(num_local_experts=self.num_experts,
                       num_experts_per_tok=self.num_experts_per_tok,
                       router_aux_loss_coef=self.router_aux_loss_coef, router_jitter_noise=0.0)
        return out

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)
