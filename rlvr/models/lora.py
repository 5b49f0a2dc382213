"""LoRA and QLoRA policies: low-rank adapters on a frozen (optionally quantised) base.

A LoRA policy is the same `Transformer` with an adapter on each target projection
(`q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`, `up_proj`, `down_proj`):

    y = x W (+ b) + (alpha / rank) · dropout(x) A B,     A [in, rank], B [rank, out]

A and B are flax's own `nnx.LoRA` (parameters of type `nnx.LoRAParam`, A he-uniform, B zero, so
the adapted policy starts equal to its base); `Adapter` adds the alpha / rank scale and dropout,
and `rlvr.models.transformer.Linear` adds the adapter's output when one is attached. Only
`nnx.LoRAParam` leaves are trained (`LoRAPolicy.trainable`, the learner's filter); the base
weights are frozen and may be stored in bfloat16 (`model.param_dtype`).

With `train_norms`, every RMSNorm also gets a zero-initialised `LoRAParam` offset on its scale
(`scale + scale_delta`, L·2 + 1 vectors of d_model). Adapters on the projections cannot change how
peaked the next-token distribution is: the final RMSNorm divides out the residual stream's norm,
so the logits' scale is set by the frozen final norm and LM head alone, and a policy that must
become nearly deterministic (RL sharpening) cannot. Trained norm scales restore that freedom for a
few thousand parameters (LoRA with and without them against full fine-tuning on the quickstart:
benchmarks/results/lora_quickstart_cpu.md). PEFT exports them as `modules_to_save` (the trained
norm weights in full).

QLoRA stores every block projection's frozen kernel quantised with qwix (`QuantizedKernel`):
int8 with one absmax scale per output channel, or 4-bit NormalFloat (nf4) with one absmax scale
per block of 64 inputs of each output channel (two 4-bit codes packed per uint8, which is also
how checkpoints store them). `kernel[...]` dequantises, so sampling (KV cache), scoring and the
learner run unchanged on the quantised base; embeddings, norms and the LM head stay in
`param_dtype`; adapters are float32.

The reference policy comes for free: π_ref is the base with the adapters off. With LoRA the
TrainState holds no reference copy (`ref_params = None`); `LoRAPolicy.reference_params(params)`
is `params` with every adapter parameter replaced by zeros, which computes x W + 0 exactly, and
the KL term (`rlvr.algorithms.base.Algorithm.score`) and PivotRL's probe use it.

Why not qwix's own LoRA (`qwix.apply_lora_to_model`, what Tunix uses): it intercepts only the
model's `__call__`, while our scoring (`hidden_states`) and sampler (`forward_cached`) enter the
model through other methods and would silently run without adapters; it copies the kernel's
`logical_axes` onto A and B unchanged (A [in, rank] labelled (in, out): wrong sharding rules);
its dropout is always on (sampling and scoring too) and draws from rngs it unsets after init;
and its quantised weights replace `nnx.Param`s with non-Param nodes our learner would carry as
constants. qwix's quantisation numerics (calibration, int8 rounding, the nf4 code book) are
used as they are.

Export: `save_merged` writes the merged weights (adapters folded in, base dequantised) through
`rlvr.models.save_pretrained`; `save_adapters` writes `adapter_config.json` +
`adapter_model.safetensors` in the PEFT layout that `peft.PeftModel.from_pretrained` loads onto
the base checkpoint (PEFT's scaling is also lora_alpha / r).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr.models.fused import FUSED_GROUPS, fuse_columns, split_columns
from rlvr.models.transformer import Linear, MoE, Transformer, jnp_dtype

ATTENTION_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_TARGETS = ("gate_proj", "up_proj", "down_proj")
TARGETS = ATTENTION_TARGETS + MLP_TARGETS
QUANTIZATIONS = ("none", "int8", "nf4")
NF4_BLOCK = 64  # inputs per nf4 scale (bitsandbytes' QLoRA block size)


@dataclasses.dataclass(frozen=True)
class LoRAConfig:
    """Adapter settings (config `model.lora.*`, see configs/base.py).

    Attributes:
      rank: r, the adapters' inner width (> 0).
      alpha: the update is scaled by alpha / rank.
      dropout: dropout rate on the adapters' input while the learner trains (0 = off).
      targets: projections that get an adapter (subset of TARGETS).
      quantize: "none" | "int8" | "nf4": storage of the frozen block projections (QLoRA).
      seed: seed of the adapters' initialisation.
      train_norms: also train every RMSNorm scale (as a zero-initialised offset).
    """

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple = TARGETS
    quantize: str = "none"
    seed: int = 0
    train_norms: bool = False

    def __post_init__(self):
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"LoRAConfig.rank must be an int >= 1, got {self.rank!r}")
        if not (isinstance(self.alpha, (int, float)) and self.alpha > 0):
            raise ValueError(f"LoRAConfig.alpha must be > 0, got {self.alpha!r}")
        if not (isinstance(self.dropout, (int, float)) and 0 <= self.dropout < 1):
            raise ValueError(f"LoRAConfig.dropout must be in [0, 1), got {self.dropout!r}")
        targets = tuple(self.targets)
        bad = [t for t in targets if t not in TARGETS]
        if not targets or bad or len(set(targets)) != len(targets):
            raise ValueError(f"LoRAConfig.targets must be distinct names from {TARGETS}, "
                             f"got {targets!r}")
        object.__setattr__(self, "targets", targets)
        if not isinstance(self.train_norms, bool):
            raise ValueError(f"LoRAConfig.train_norms must be a bool, got {self.train_norms!r}")
        if self.quantize not in QUANTIZATIONS:
            raise ValueError(f"LoRAConfig.quantize must be one of {QUANTIZATIONS}, "
                             f"got {self.quantize!r}")

    @property
    def scale(self) -> float:
        return float(self.alpha) / self.rank


def lora_targets(model_config) -> tuple:
    """The projections a LoRA of this model may target: every one of TARGETS for the dense
    families (Llama, Qwen2/3, Mistral, Gemma 2/3 share the Hugging Face names); for a
    mixture-of-experts model the attention projections, plus the MLP ones when some layers
    are dense (Qwen3-MoE `mlp_only_layers`) — experts and routers are never adapted."""
    if not model_config.num_experts or any(not model_config.is_moe(i)
                                           for i in range(model_config.num_layers)):
        return TARGETS
    return ATTENTION_TARGETS


def split_fused_targets(fused_projections: bool, targets) -> str:
    """"" when `targets` suit a model with this `fused_projections`; else why not: fused, q/k/v and
    gate/up are one kernel each, so an adapter covers all of a group or none of it (an adapter
    on the fused kernel is x A B with one A and B's columns per member; `save_adapters` writes
    it as PEFT adapters of the members sharing A)."""
    if not fused_projections:
        return ""
    for fused, members in FUSED_GROUPS.items():
        chosen = [m for m in members if m in targets]
        if chosen and len(chosen) != len(members):
            return (f"LoRA targets {tuple(targets)} split the fused kernel {fused} "
                    f"({' + '.join(members)}) of a model with fused_projections=True: target "
                    f"all of {members} or none of them, or turn fused_projections off")
    return ""


# ------------------------------------------------------------------------------- modules
class Adapter(nnx.LoRA):
    """(alpha / rank) · dropout(x) A B: flax's `nnx.LoRA` (A `lora_a` [in, rank], B `lora_b`
    [rank, out], `nnx.LoRAParam`, float32) with PEFT's scaling and input dropout.

    A carries the kernel's input logical axis and B its output axis (the rank axis is
    replicated), so adapters shard by the same rules as the projection they adapt. Dropout is
    active only while `dropout_key` is set (the learner's `train_mode`); sampling, scoring and
    the reference never drop.
    """

    def __init__(self, din: int, dout: int, *, rank: int, alpha: float, dropout: float, axes,
                 dtype, rngs: nnx.Rngs):
        super().__init__(din, rank, dout, dtype=dtype, param_dtype=jnp.float32, rngs=rngs,
                         a_metadata={"logical_axes": (axes[0], None)},
                         b_metadata={"logical_axes": (None, axes[1])})
        self.scale = float(alpha) / rank
        self.dropout = float(dropout)
        self.dropout_key = nnx.data(None)

    def __call__(self, x):
        if self.dropout_key is not None:
            x = nnx.Dropout(self.dropout)(x, deterministic=False, rngs=self.dropout_key[...])
        return super().__call__(x) * self.scale


class DropoutKey(nnx.Variable):
    """PRNG key of one adapter's dropout during a learner step (never saved: set on the
    throw-away module the learner merges for each micro-batch)."""


def _pack4(codes):
    """uint4 codes [in, out] -> uint8 [in / 2, out] (row 2i in the low nibble, 2i+1 high)."""
    c = codes.astype(jnp.uint8)
    return c[0::2] | (c[1::2] << 4)


def _unpack4(packed):
    """Inverse of `_pack4`: uint8 [in / 2, out] -> uint4 codes [in, out]."""
    lo, hi = packed & 0xF, packed >> 4
    return jnp.stack([lo, hi], axis=1).reshape(-1, packed.shape[1]).astype(jnp.uint4)


class QuantizedKernel(nnx.Module):
    """A frozen [in, out] kernel stored quantised by qwix; `kernel[...]` dequantises it (float32),
    so it stands in for the kernel `nnx.Param` of a `Linear`.

    int8: per-output-channel absmax scale [1, out]. nf4: 4-bit NormalFloat codes, two per
    uint8 along the input axis ([in / 2, out]), absmax scale per block of `NF4_BLOCK` inputs
    ([in / 64, out]; one block when `in` is not a multiple of 64). Codes and scales are
    `nnx.Param`s with the kernel's logical axes (sharded like it; never trained).
    """

    def __init__(self, kernel, *, qtype: str, axes):
        import qwix

        if qtype not in ("int8", "nf4"):
            raise ValueError(f"QuantizedKernel qtype must be 'int8' or 'nf4', got {qtype!r}")
        din, dout = kernel.shape
        w = jnp.asarray(kernel, jnp.float32)
        if qtype == "int8":
            q = qwix.quantize(w, jnp.int8, channelwise_axes=(1,))
            codes = q.qvalue
        else:
            if din % 2:
                raise ValueError(f"nf4 packs two codes per byte: the kernel's input size must be "
                                 f"even, got {din}")
            block = NF4_BLOCK if din % NF4_BLOCK == 0 else din
            q = qwix.quantize(w, "nf4", channelwise_axes=(1,), tiled_axes={0: block})
            codes = _pack4(q.qvalue)
        self.codes = nnx.Param(codes, logical_axes=tuple(axes))
        self.scale = nnx.Param(q.scale.astype(jnp.float32), logical_axes=tuple(axes))
        self.qtype = qtype
        self.shape = (din, dout)

    def dequantize(self) -> jnp.ndarray:
        """The float32 [in, out] kernel the codes stand for."""
        import qwix

        codes = self.codes[...]
        if self.qtype == "nf4":
            return qwix.dequantize(qwix.QArray(_unpack4(codes), self.scale[...], qtype="nf4"))
        return qwix.dequantize(qwix.QArray(codes, self.scale[...]))

    def __getitem__(self, index):
        return self.dequantize()[index]


# ------------------------------------------------------------------------------- surgery
def _projections(model: Transformer):
    """(layer index, name, Linear) of every block projection, in a fixed order. A
    mixture-of-experts layer contributes its attention projections only (its experts and
    router are not adapted). A fused model (`ModelConfig.fused_projections`) yields
    `qkv_proj` and `gate_up_proj` in place of their members (`FUSED_GROUPS`)."""
    for i, block in enumerate(model.model.layers):
        for name in ("qkv_proj",) + ATTENTION_TARGETS:
            if getattr(block.self_attn, name) is not None:
                yield i, name, getattr(block.self_attn, name)
        if isinstance(block.mlp, MoE):
            continue
        for name in ("gate_up_proj",) + MLP_TARGETS:
            if getattr(block.mlp, name) is not None:
                yield i, name, getattr(block.mlp, name)


def _norms(model: Transformer):
    """(Hugging Face module path, RMSNorm) of every norm, in a fixed order."""
    for i, block in enumerate(model.model.layers):
        yield f"model.layers.{i}.input_layernorm", block.input_layernorm
        yield f"model.layers.{i}.post_attention_layernorm", block.post_attention_layernorm
        for name in ("pre_feedforward_layernorm", "post_feedforward_layernorm"):  # Gemma
            if getattr(block, name) is not None:
                yield f"model.layers.{i}.{name}", getattr(block, name)
    yield "model.norm", model.model.norm


NORM_MODULES = ("input_layernorm", "post_attention_layernorm", "norm")  # PEFT modules_to_save
GEMMA_NORM_MODULES = ("pre_feedforward_layernorm", "post_feedforward_layernorm")


def _kernel_axes(linear: Linear) -> tuple:
    k = linear.kernel
    return tuple(k.logical_axes) if isinstance(k, nnx.Variable) else tuple(k.codes.logical_axes)


def has_adapters(model) -> bool:
    """Whether any projection of `model` carries an adapter."""
    return isinstance(model, Transformer) and any(
        lin.lora is not None for _, _, lin in _projections(model))


def _attach(model: Transformer, config: LoRAConfig) -> None:
    """Quantises the block projections (QLoRA) and attaches adapters, in place."""
    if has_adapters(model):
        raise ValueError("apply_lora: the model already carries adapters")
    key = jax.random.fold_in(jax.random.PRNGKey(config.seed), 0x4C6F5241)
    rngs = nnx.Rngs(params=key)
    dtype = jnp_dtype(model.config.dtype)
    for _, name, lin in _projections(model):
        axes = _kernel_axes(lin)
        if config.quantize != "none":
            lin.kernel = QuantizedKernel(lin.kernel[...], qtype=config.quantize, axes=axes)
        if all(m in config.targets for m in FUSED_GROUPS.get(name, (name,))):
            din, dout = lin.kernel.shape
            lin.lora = Adapter(din, dout, rank=config.rank, alpha=config.alpha,
                               dropout=config.dropout, axes=axes, dtype=dtype, rngs=rngs)
    if config.train_norms:
        for _, norm in _norms(model):
            norm.scale_delta = nnx.LoRAParam(jnp.zeros(norm.scale.shape, jnp.float32),
                                             logical_axes=("norm",))


def merge(model: Transformer) -> Transformer:
    """A plain `Transformer` equal to `model` with its adapters folded into the kernels
    (W + (alpha / rank) A B, in float32, stored in `param_dtype`) and quantised kernels
    dequantised. `model` is not modified; unadapted parameters are shared, not copied."""
    plain = nnx.clone(model)
    pdt = jnp_dtype(model.config.param_dtype)
    for _, _, lin in _projections(plain):
        quantised = not isinstance(lin.kernel, nnx.Variable)
        if lin.lora is None and not quantised:
            continue
        axes = _kernel_axes(lin)
        w = lin.kernel[...].astype(jnp.float32)
        if lin.lora is not None:
            a, b = lin.lora.lora_a[...], lin.lora.lora_b[...]
            w = w + lin.lora.scale * jnp.dot(a.astype(jnp.float32), b.astype(jnp.float32))
            lin.lora = None
        lin.kernel = nnx.Param(w.astype(pdt), logical_axes=axes)
    for _, norm in _norms(plain):
        if norm.scale_delta is not None:
            merged = norm.scale[...].astype(jnp.float32) + norm.scale_delta[...]
            norm.scale = nnx.Param(merged.astype(norm.scale.get_value().dtype), logical_axes=("norm",))
            norm.scale_delta = None
    return plain


# ------------------------------------------------------------------------------- the policy
def _split(model):
    return nnx.split(model, nnx.Param, ...)


@dataclasses.dataclass
class LoRAPolicy:
    """What a run needs from a LoRA policy (`apply_lora`).

    Attributes:
      model: the policy with adapters (its base frozen, possibly quantised).
      config: the `LoRAConfig`.
      graphdef, rest: the adapted model's graph and non-Param state.
      base_graphdef, base_rest: the plain model's graph (warm start, export).
      initial_adapters: the adapters' initial values (`attach` reuses them).
    """

    model: Transformer
    config: LoRAConfig
    graphdef: Any
    rest: Any
    base_graphdef: Any
    base_rest: Any
    initial_adapters: Any

    # the learner trains these leaves only (an nnx filter)
    trainable = nnx.LoRAParam

    @property
    def train_mode(self) -> Optional[Callable]:
        """`train_mode(model, key)` for the learner (dropout on), or None when dropout is 0."""
        return train_mode if self.config.dropout > 0 else None

    def reference_params(self, params):
        """π_ref's parameters: `params` with every adapter parameter zero (the base alone).
        Pure; under jit the zeros are constants and the base buffers are shared."""
        adapters, base = nnx.split_state(params, nnx.LoRAParam, ...)
        return nnx.merge_state(jax.tree.map(jnp.zeros_like, adapters), base)

    def model_of(self, params) -> Transformer:
        return nnx.merge(self.graphdef, params, self.rest)

    def merged_params(self, params):
        """The plain model's parameters (adapters folded in, base dequantised)."""
        _, plain, _ = _split(merge(self.model_of(params)))
        return plain

    def attach(self, base_params):
        """Adapted parameters from a plain model's parameters: the base quantised as configured
        and the adapters at their initial values (e.g. after a full-model warm start)."""
        model = nnx.merge(self.base_graphdef, base_params, self.base_rest)
        _attach(model, self.config)
        _, params, _ = _split(model)
        adapters, base = nnx.split_state(params, nnx.LoRAParam, ...)
        return nnx.merge_state(self.initial_adapters, base)


def apply_lora(model: Transformer, config: LoRAConfig) -> LoRAPolicy:
    """Attaches adapters to `model` (in place; its block projections quantised when
    `config.quantize` is set) and returns the `LoRAPolicy` a run needs. Works on an abstract
    model (`nnx.eval_shape`) too."""
    if not isinstance(model, Transformer):
        raise ValueError(f"apply_lora expects a Transformer, got {type(model).__name__}")
    if not isinstance(config, LoRAConfig):
        raise ValueError(f"apply_lora expects a LoRAConfig, got {type(config).__name__}")
    allowed = lora_targets(model.config)
    bad = [t for t in config.targets if t not in allowed]
    if bad:
        raise ValueError(f"LoRAConfig.targets {bad} do not exist in a {model.config.architecture} "
                         f"model (its experts are not adapted); allowed targets: {allowed} "
                         f"(config: model.lora.targets)")
    split = split_fused_targets(model.config.fused_projections, config.targets)
    if split:
        raise ValueError(split + " (config: model.lora.targets, model.fused_projections)")
    base_graphdef, _, base_rest = _split(model)
    _attach(model, config)
    graphdef, params, rest = _split(model)
    adapters, _ = nnx.split_state(params, nnx.LoRAParam, ...)
    return LoRAPolicy(model=model, config=config, graphdef=graphdef, rest=rest,
                      base_graphdef=base_graphdef, base_rest=base_rest,
                      initial_adapters=adapters)


def train_mode(model, key) -> None:
    """Turns adapter dropout on for one learner micro-batch: adapter i draws its mask from
    fold_in(key, i). Mutates `model` (the learner's per-micro-batch merge, thrown away after)."""
    i = 0
    for _, module in nnx.iter_modules(model):
        if isinstance(module, Adapter) and module.dropout > 0:
            module.dropout_key = DropoutKey(jax.random.fold_in(key, i))
            i += 1


# ------------------------------------------------------------------------------- accounting
def _leaf_bytes(x) -> float:
    dt = np.dtype(x.dtype)
    bits = 4 if dt.name in ("int4", "uint4") else 8 * dt.itemsize
    return int(np.prod(x.shape)) * bits / 8


def tree_bytes(tree) -> int:
    """Bytes of every array leaf of `tree` (abstract or concrete; 4-bit types at half a byte)."""
    return int(sum(_leaf_bytes(x) for x in jax.tree.leaves(tree) if hasattr(x, "dtype")))


def param_counts(params) -> dict:
    """{"trainable": adapter elements, "total": all parameter elements (base + adapters, a
    packed nf4 byte counted as two), "fraction": trainable / total}."""
    adapters, base = nnx.split_state(params, nnx.LoRAParam, ...)
    n_train = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(adapters))
    n_base = 0
    for path, v in nnx.to_flat_state(base):
        if path[-2:] == ("kernel", "scale"):
            continue  # a quantised kernel's scales: not weights of the model
        n = int(np.prod(np.shape(v.get_value())))
        n_base += 2 * n if path[-2:] == ("kernel", "codes") and v.get_value().dtype == jnp.uint8 \
            else n
    total = n_train + n_base
    return {"trainable": n_train, "total": total, "fraction": n_train / max(total, 1)}


# ------------------------------------------------------------------------------- export
def save_merged(model: Transformer, path: str) -> None:
    """Writes the merged model (adapters folded in, base dequantised) as a Hugging Face
    checkpoint (`rlvr.models.save_pretrained`: config.json + model.safetensors)."""
    from rlvr.models.hf import save_pretrained

    save_pretrained(merge(model), path)


def _peft_prefix(i: int, name: str) -> str:
    group = "self_attn" if name in ATTENTION_TARGETS else "mlp"
    return f"base_model.model.model.layers.{i}.{group}.{name}"


def save_adapters(model: Transformer, path: str, *, base_model_name_or_path: str = "",
                  config: Optional[LoRAConfig] = None) -> None:
    """Writes the adapters alone in the PEFT layout: `adapter_config.json` +
    `adapter_model.safetensors` (lora_A.weight [r, in], lora_B.weight [out, r]), which
    `peft.PeftModel.from_pretrained(base, path)` loads onto the base checkpoint."""
    from safetensors.numpy import save_file

    tensors, targets, ref = {}, [], None
    for i, name, lin in _projections(model):
        if lin.lora is None:
            continue
        a = np.asarray(jax.device_get(lin.lora.lora_a[...]), np.float32)
        b = np.asarray(jax.device_get(lin.lora.lora_b[...]), np.float32)
        members = FUSED_GROUPS.get(name, (name,))  # a fused kernel: its members share A
        parts = (split_columns(name, b, model.config) if name in FUSED_GROUPS else (b,))
        for member, bm in zip(members, parts):
            pre = _peft_prefix(i, member)
            tensors[f"{pre}.lora_A.weight"] = np.ascontiguousarray(a.T)
            tensors[f"{pre}.lora_B.weight"] = np.ascontiguousarray(np.asarray(bm).T)
            if member not in targets:
                targets.append(member)
        ref = lin.lora
    if ref is None:
        raise ValueError("save_adapters: the model carries no adapters")
    norms = [(name, norm) for name, norm in _norms(model) if norm.scale_delta is not None]
    for name, norm in norms:  # PEFT modules_to_save: the trained module's weights in full
        w = norm.scale[...].astype(jnp.float32) + norm.scale_delta[...]
        tensors[f"base_model.model.{name}.weight"] = np.asarray(jax.device_get(w), np.float32)
    rank = int(ref.lora_a.shape[1])
    alpha = ref.scale * rank
    dropout = ref.dropout if config is None else config.dropout
    os.makedirs(path, exist_ok=True)
    save_file(tensors, os.path.join(path, "adapter_model.safetensors"), metadata={"format": "pt"})
    peft_config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model_name_or_path or None,
        "r": rank, "lora_alpha": alpha, "lora_dropout": dropout,
        "target_modules": sorted(targets), "bias": "none", "fan_in_fan_out": False,
        "use_rslora": False, "use_dora": False, "init_lora_weights": True,
        "modules_to_save": (list(NORM_MODULES) + [m for m in GEMMA_NORM_MODULES if any(
            n.endswith(m) for n, _ in norms)]) if norms else None, "inference_mode": True,
    }
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        json.dump(peft_config, f, indent=2, sort_keys=True)


def load_adapters(model: Transformer, path: str) -> None:
    """Loads PEFT adapters (`save_adapters`' layout) into `model`'s adapters, in place. Raises
    ValueError naming a missing tensor, an unexpected one or a shape that does not match."""
    from rlvr.models.hf import read_tensors  # noqa: PLC0415 (hf imports this module lazily)

    file = os.path.join(path, "adapter_model.safetensors")
    if not os.path.isfile(file):
        raise ValueError(f"{path}: no adapter_model.safetensors (a folder written by "
                         f"rlvr.models.lora.save_adapters or PEFT's save_pretrained)")
    tensors = {k: np.asarray(v) for k, v in read_tensors([file]).items()}
    seen = set()
    for i, name, lin in _projections(model):
        if lin.lora is None:
            continue
        members = FUSED_GROUPS.get(name, (name,))
        found = {}
        for member in members:
            for part in ("lora_A", "lora_B"):
                key = f"{_peft_prefix(i, member)}.{part}.weight"
                if key not in tensors:
                    raise ValueError(f"{path}: adapter tensor {key!r} is missing")
                found[member, part] = tensors[key].T
                seen.add(key)
        a = found[members[0], "lora_A"]
        if any(not np.array_equal(found[m, "lora_A"], a) for m in members[1:]):
            raise ValueError(f"{path}: the adapters of {' / '.join(members)} in layer {i} have "
                             f"different lora_A, which the fused kernel {name} of a model with "
                             f"fused_projections=True cannot hold (load them into a model with "
                             f"fused_projections=False)")
        b = found[members[0], "lora_B"]
        if name in FUSED_GROUPS:
            b = np.asarray(fuse_columns(name, [found[m, "lora_B"] for m in members], model.config))
        for key, t, var in ((f"{_peft_prefix(i, members[0])}.lora_A.weight", a, lin.lora.lora_a),
                            (f"{_peft_prefix(i, members[0])}.lora_B.weight", b, lin.lora.lora_b)):
            if t.shape != tuple(var.shape):
                raise ValueError(f"{path}: adapter tensor {key!r} has shape {t.shape[::-1]}, "
                                 f"expected {tuple(var.shape)[::-1]}")
            var.set_value(jnp.asarray(t, var.get_value().dtype))
    for name, norm in _norms(model):
        if norm.scale_delta is None:
            continue
        key = f"base_model.model.{name}.weight"
        if key not in tensors:
            raise ValueError(f"{path}: trained norm {key!r} is missing (saved without train_norms?)")
        if tensors[key].shape != tuple(norm.scale.shape):
            raise ValueError(f"{path}: norm {key!r} has shape {tensors[key].shape}, "
                             f"expected {tuple(norm.scale.shape)}")
        delta = jnp.asarray(tensors[key], jnp.float32) - norm.scale[...].astype(jnp.float32)
        norm.scale_delta.set_value(delta)
        seen.add(key)
    extra = sorted(set(tensors) - seen)
    if extra:
        raise ValueError(f"{path}: adapter tensor {extra[0]!r} has no adapter in this model")


__all__ = ["LoRAConfig", "LoRAPolicy", "Adapter", "QuantizedKernel", "apply_lora", "merge",
           "has_adapters", "train_mode", "save_merged", "save_adapters", "load_adapters",
           "param_counts", "tree_bytes", "TARGETS", "QUANTIZATIONS", "lora_targets"]
