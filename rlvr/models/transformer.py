"""Decoder-only transformer (Llama / Qwen2 family) in flax.nnx (SPEC R1, R5.2; DESIGN.md models/).

RMSNorm, rotary position embeddings (theta and `default` / `linear` / `llama3` scaling),
grouped-query attention through `jax.nn.dot_product_attention`, SwiGLU MLP, optional q/k/v
biases (Qwen2), tied or untied LM head. Parameter names mirror Hugging Face's
(`model.layers.3.self_attn.q_proj`), kernels are stored `[in, out]`.

Every parameter carries `logical_axes` metadata (`vocab`, `embed`, `q_heads`, `kv_heads`, `mlp`,
`norm`); `rlvr.parallel` maps those names to mesh axes. The KV cache's logical axes are
`KV_CACHE_LOGICAL_AXES`.

Masking convention: `attention_mask` [B, T] is True on real tokens. A query attends to keys at
sequence index <= its own (causal over the index, not the position id) that are real; each query
always sees itself, so padding queries produce finite (ignored) outputs.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from rlvr.models.config import ModelConfig

KV_CACHE_LOGICAL_AXES = ("batch", "cache_length", "cache_kv_heads", "head_dim")

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def jnp_dtype(name: str):
    return _DTYPES[name]


# --------------------------------------------------------------------------- RoPE
def rope_frequencies(config: ModelConfig) -> np.ndarray:
    """Inverse frequencies [head_dim / 2] (float32), following HF's rope_type conventions."""
    d = config.head_dim
    inv = 1.0 / (config.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
    rtype = config.rope_type
    rs = config.rope_scaling or {}
    if rtype == "linear":
        inv = inv / float(rs["factor"])
    elif rtype == "llama3":
        factor = float(rs["factor"])
        low, high = float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
        old = float(rs["original_max_position_embeddings"])
        low_wl, high_wl = old / low, old / high
        wl = 2 * math.pi / inv
        scaled = np.where(wl > low_wl, inv / factor, inv)
        smooth = (old / wl - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wl < high_wl) & ~(wl > low_wl)
        inv = np.where(medium, smoothed, scaled)
    return inv.astype(np.float32)


def rope_cos_sin(positions: jnp.ndarray, inv_freq: np.ndarray, dtype):
    """cos, sin [B, T, head_dim] for int positions [B, T] (angles in float32)."""
    freqs = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)[None, None, :]
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb).astype(dtype), jnp.sin(emb).astype(dtype)


def apply_rope(x: jnp.ndarray, cos: jnp.ndarray, sin: jnp.ndarray) -> jnp.ndarray:
    """x [B, T, N, H] rotated with HF's rotate_half convention."""
    h = x.shape[-1] // 2
    rot = jnp.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    return x * cos[:, :, None, :] + rot * sin[:, :, None, :]


# --------------------------------------------------------------------------- masks
def causal_mask(attention_mask: jnp.ndarray) -> jnp.ndarray:
    """bool [B, 1, T, T]: causal over the index, padding keys masked, diagonal always on."""
    t = attention_mask.shape[1]
    idx = jnp.arange(t)
    causal = idx[None, :] <= idx[:, None]
    m = causal[None] & attention_mask[:, None, :].astype(bool)
    m = m | jnp.eye(t, dtype=bool)[None]
    return m[:, None]


def contiguous_layout(attention_mask: jnp.ndarray):
    """Moves each row's real tokens to its start, for causal attention with per-row lengths.

    attention_mask bool [B, T] with each row's real tokens contiguous. Returns
      gather: int32 [B, T], take_along_axis(x, gather) puts real token j of row b at index j;
      scatter: int32 [B, T], take_along_axis(y, scatter) puts it back;
      lengths: int32 [B], real tokens per row (at least 1, so an empty row stays finite);
      contiguous: bool [B], False for a row whose real tokens have a gap.
    """
    m = attention_mask.astype(bool)
    t = m.shape[1]
    idx = jnp.arange(t, dtype=jnp.int32)
    start = jnp.argmax(m, axis=1).astype(jnp.int32)
    count = jnp.sum(m, axis=1).astype(jnp.int32)
    last = jnp.max(jnp.where(m, idx[None, :], -1), axis=1)
    contiguous = (count == 0) | (last - start + 1 == count)
    gather = (idx[None, :] + start[:, None]) % t
    scatter = (idx[None, :] - start[:, None]) % t
    return gather, scatter, jnp.maximum(count, 1), contiguous


def cached_mask(kv_mask: jnp.ndarray, cache_index, t: int) -> jnp.ndarray:
    """bool [B, 1, t, S] for t queries written at cache slots cache_index .. cache_index + t - 1.

    kv_mask [B, S] is True on cache slots holding real tokens (including the new ones).
    cache_index: a scalar (every row writes at the same slots) or int [B] (row b's queries sit at
    slots cache_index[b] + j): query j of row b sees key slot k iff k <= its slot and
    kv_mask[b, k], and always sees its own slot.
    """
    s = kv_mask.shape[1]
    k_slot = jnp.arange(s)
    if jnp.ndim(cache_index) == 1:
        q_slot = jnp.asarray(cache_index)[:, None] + jnp.arange(t)[None, :]  # [B, t]
        causal = k_slot[None, None, :] <= q_slot[:, :, None]
        m = causal & kv_mask[:, None, :].astype(bool)
        m = m | (k_slot[None, None, :] == q_slot[:, :, None])
        return m[:, None]
    q_slot = cache_index + jnp.arange(t)
    causal = k_slot[None, :] <= q_slot[:, None]
    m = causal[None] & kv_mask[:, None, :].astype(bool)
    m = m | (k_slot[None, :] == q_slot[:, None])[None]
    return m[:, None]


def write_cache(cache: jnp.ndarray, new: jnp.ndarray, cache_index) -> jnp.ndarray:
    """Writes new [B, t, K, H] into cache [B, S, K, H] at slots cache_index .. + t - 1.

    cache_index: a scalar (`dynamic_update_slice`; the caller keeps the slots inside S) or
    int [B], one start slot per row (a scatter; slots >= S are dropped, so a row's padding
    beyond the end of the cache is discarded instead of shifting the write).
    """
    new = new.astype(cache.dtype)
    if jnp.ndim(cache_index) == 1:
        b, t = new.shape[:2]
        slots = jnp.asarray(cache_index)[:, None] + jnp.arange(t)[None, :]
        return cache.at[jnp.arange(b)[:, None], slots].set(new, mode="drop")
    return jax.lax.dynamic_update_slice(cache, new, (0, cache_index, 0, 0))


# --------------------------------------------------------------------------- cache
@struct.dataclass
class KVCache:
    """Per-layer key/value cache; k[l], v[l]: [B, S, K, H] in the compute dtype."""

    k: tuple
    v: tuple

    @classmethod
    def init(cls, config: ModelConfig, batch: int, length: int, sharding=None) -> "KVCache":
        shape = (batch, length, config.num_kv_heads, config.head_dim)
        dt = jnp_dtype(config.dtype)

        def z():
            x = jnp.zeros(shape, dt)
            if sharding is not None:
                x = jax.lax.with_sharding_constraint(x, sharding)
            return x

        return cls(k=tuple(z() for _ in range(config.num_layers)),
                   v=tuple(z() for _ in range(config.num_layers)))


# --------------------------------------------------------------------------- layers
def _param(rngs, shape, axes, dtype, std):
    if std is None:
        value = jnp.ones(shape, dtype)
    elif std == 0:
        value = jnp.zeros(shape, dtype)
    else:
        value = (std * jax.random.normal(rngs.params(), shape, jnp.float32)).astype(dtype)
    return nnx.Param(value, logical_axes=axes)


class Linear(nnx.Module):
    """y = x @ kernel (+ bias) (+ lora(x)); kernel [in, out] stored in param_dtype, computed in
    dtype. `lora` is an optional low-rank adapter returning the update to add (attached by
    `rlvr.models.lora.apply_lora`, which may also store the frozen kernel quantised)."""

    def __init__(self, din, dout, *, axes, use_bias, dtype, param_dtype, rngs, std=0.02,
                 out_dtype=None):
        self.kernel = _param(rngs, (din, dout), axes, param_dtype, std)
        self.bias = _param(rngs, (dout,), (axes[1],), param_dtype, 0) if use_bias else None
        self.dtype = dtype
        self.out_dtype = out_dtype
        self.lora = nnx.data(None)

    def __call__(self, x):
        y = jnp.dot(x.astype(self.dtype), self.kernel[...].astype(self.dtype),
                    preferred_element_type=self.out_dtype or self.dtype)
        if self.bias is not None:
            y = y + self.bias[...].astype(y.dtype)
        if self.lora is not None:
            y = y + self.lora(x).astype(y.dtype)
        return y


class RMSNorm(nnx.Module):
    """y = (scale (+ scale_delta)) · x / sqrt(mean(x²) + eps). `scale_delta` is an optional
    zero-initialised trainable offset (`rlvr.models.lora` with `train_norms`), None otherwise."""

    def __init__(self, dim, *, eps, dtype, param_dtype):
        self.scale = nnx.Param(jnp.ones((dim,), param_dtype), logical_axes=("norm",))
        self.scale_delta = nnx.data(None)
        self.eps = eps
        self.dtype = dtype

    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        scale = self.scale[...].astype(jnp.float32)
        if self.scale_delta is not None:
            scale = scale + self.scale_delta[...].astype(jnp.float32)
        return scale.astype(self.dtype) * y.astype(self.dtype)


class Attention(nnx.Module):
    def __init__(self, config: ModelConfig, *, rngs):
        c = config
        dt, pdt = jnp_dtype(c.dtype), jnp_dtype(c.param_dtype)
        kw = dict(dtype=dt, param_dtype=pdt, rngs=rngs)
        self.q_proj = Linear(c.hidden_size, c.num_heads * c.head_dim, axes=("embed", "q_heads"),
                             use_bias=c.attention_bias, **kw)
        self.k_proj = Linear(c.hidden_size, c.num_kv_heads * c.head_dim,
                             axes=("embed", "kv_heads"), use_bias=c.attention_bias, **kw)
        self.v_proj = Linear(c.hidden_size, c.num_kv_heads * c.head_dim,
                             axes=("embed", "kv_heads"), use_bias=c.attention_bias, **kw)
        self.o_proj = Linear(c.num_heads * c.head_dim, c.hidden_size, axes=("q_heads", "embed"),
                             use_bias=False, **kw)
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.impl = c.attention_impl

    def __call__(self, x, cos, sin, mask, cache_kv=None, cache_index=None):
        b, t, _ = x.shape
        q = self.q_proj(x).reshape(b, t, self.num_heads, self.head_dim)
        k = self.k_proj(x).reshape(b, t, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).reshape(b, t, self.num_kv_heads, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        new_kv = None
        if cache_kv is not None:
            ck, cv = cache_kv
            ck, cv = write_cache(ck, k, cache_index), write_cache(cv, v, cache_index)
            k, v, new_kv = ck, cv, (ck, cv)
        kw = dict(mask=mask)
        if mask.ndim == 1:  # per-row lengths of a contiguous layout (`contiguous_layout`);
            # padding queries (past the length) see the real keys: finite, ignored by losses
            kw = dict(is_causal=True, key_value_seq_lengths=mask)
        out = jax.nn.dot_product_attention(
            q, k.astype(q.dtype), v.astype(q.dtype), scale=self.head_dim ** -0.5,
            implementation=None if self.impl == "xla" else self.impl, **kw)
        return self.o_proj(out.reshape(b, t, self.num_heads * self.head_dim)), new_kv


class MLP(nnx.Module):
    def __init__(self, config: ModelConfig, *, rngs):
        c = config
        kw = dict(dtype=jnp_dtype(c.dtype), param_dtype=jnp_dtype(c.param_dtype), rngs=rngs,
                  use_bias=False)
        self.gate_proj = Linear(c.hidden_size, c.intermediate_size, axes=("embed", "mlp"), **kw)
        self.up_proj = Linear(c.hidden_size, c.intermediate_size, axes=("embed", "mlp"), **kw)
        self.down_proj = Linear(c.intermediate_size, c.hidden_size, axes=("mlp", "embed"), **kw)

    def __call__(self, x):
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nnx.Module):
    def __init__(self, config: ModelConfig, *, rngs):
        c = config
        dt, pdt = jnp_dtype(c.dtype), jnp_dtype(c.param_dtype)
        self.input_layernorm = RMSNorm(c.hidden_size, eps=c.rms_norm_eps, dtype=dt, param_dtype=pdt)
        self.self_attn = Attention(c, rngs=rngs)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, eps=c.rms_norm_eps, dtype=dt,
                                                param_dtype=pdt)
        self.mlp = MLP(c, rngs=rngs)

    def __call__(self, x, cos, sin, mask, cache_kv=None, cache_index=None):
        a, new_kv = self.self_attn(self.input_layernorm(x), cos, sin, mask, cache_kv, cache_index)
        x = x + a
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x, new_kv


def _block_apply(block, x, cos, sin, mask):
    return block(x, cos, sin, mask)[0]


class Decoder(nnx.Module):
    """Embedding, L blocks, final norm: the trunk shared by the policy and the value model."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs, remat: bool = False):
        c = config
        dt, pdt = jnp_dtype(c.dtype), jnp_dtype(c.param_dtype)
        self.embed_tokens = _param(rngs, (c.vocab_size, c.hidden_size), ("vocab", "embed"), pdt, 0.02)
        self.layers = nnx.List([Block(c, rngs=rngs) for _ in range(c.num_layers)])
        self.norm = RMSNorm(c.hidden_size, eps=c.rms_norm_eps, dtype=dt, param_dtype=pdt)
        self._inv_freq_tuple = tuple(float(f) for f in rope_frequencies(c))
        self.dtype = dt
        self.remat = remat
        layout = c.attention_layout
        self.lengths_layout = layout == "lengths" or (layout == "auto" and c.attention_impl == "cudnn")

    def _embed(self, tokens, positions):
        inv = np.asarray(self._inv_freq_tuple, np.float32)
        x = jnp.take(self.embed_tokens[...], tokens, axis=0).astype(self.dtype)
        cos, sin = rope_cos_sin(positions, inv, self.dtype)
        return x, cos, sin

    def __call__(self, tokens, positions, attention_mask):
        if self.lengths_layout:
            gather, scatter, lengths, contiguous = contiguous_layout(attention_mask)
            tokens = jnp.take_along_axis(tokens, gather, axis=1)
            positions = jnp.take_along_axis(positions, gather, axis=1)
            h = self._blocks(tokens, positions, lengths)
            h = jnp.take_along_axis(h, scatter[:, :, None], axis=1)
            return jnp.where(contiguous[:, None, None], h, jnp.nan)
        return self._blocks(tokens, positions, causal_mask(attention_mask))

    def _blocks(self, tokens, positions, mask):
        """Embedding, blocks and final norm; mask: [B, 1, T, T] or per-row lengths [B]."""
        x, cos, sin = self._embed(tokens, positions)
        apply = nnx.remat(_block_apply) if self.remat else _block_apply
        for block in self.layers:
            x = apply(block, x, cos, sin, mask)
        return self.norm(x)

    def forward_cached(self, tokens, positions, kv_mask, cache: KVCache, cache_index):
        """Runs T new tokens written at cache slots [cache_index, cache_index + T).

        cache_index: a scalar, or int [B] per-row start slots (`cached_mask`, `write_cache`).
        """
        x, cos, sin = self._embed(tokens, positions)
        mask = cached_mask(kv_mask, cache_index, tokens.shape[1])
        ks, vs = [], []
        for i, block in enumerate(self.layers):
            x, (k, v) = block(x, cos, sin, mask, (cache.k[i], cache.v[i]), cache_index)
            ks.append(k)
            vs.append(v)
        return self.norm(x), KVCache(k=tuple(ks), v=tuple(vs))


def _check_inputs(tokens, positions, attention_mask):
    tokens = jnp.asarray(tokens)
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be [B, T], got shape {tokens.shape}")
    if not jnp.issubdtype(tokens.dtype, jnp.integer):
        raise ValueError(f"tokens must be integer, got {tokens.dtype}")
    b, t = tokens.shape
    if positions is None:
        positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    positions = jnp.asarray(positions, jnp.int32)
    if positions.shape != (b, t):
        raise ValueError(f"positions must have shape {(b, t)}, got {positions.shape}")
    if attention_mask is None:
        attention_mask = jnp.ones((b, t), bool)
    attention_mask = jnp.asarray(attention_mask).astype(bool)
    if attention_mask.shape != (b, t):
        raise ValueError(f"attention_mask must have shape {(b, t)}, got {attention_mask.shape}")
    return tokens.astype(jnp.int32), positions, attention_mask


class Transformer(nnx.Module):
    """Causal LM: `model(tokens, *, positions=None, attention_mask=None) -> logits [B, T, V]`.

    tokens int32 [B, T]; positions int32 [B, T] (default 0..T-1); attention_mask bool [B, T]
    (True on real tokens, default all True). Logits are float32 whatever the compute dtype.
    """

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs, remat: bool = False):
        if not isinstance(config, ModelConfig):
            raise ValueError(f"config must be a ModelConfig, got {type(config).__name__}")
        self.config = config
        self.model = Decoder(config, rngs=rngs, remat=remat)
        if config.tie_word_embeddings:
            self.lm_head = None
        else:
            self.lm_head = Linear(config.hidden_size, config.vocab_size, axes=("embed", "vocab"),
                                  use_bias=False, dtype=jnp_dtype(config.dtype),
                                  param_dtype=jnp_dtype(config.param_dtype), rngs=rngs,
                                  out_dtype=jnp.float32)

    def hidden_states(self, tokens, *, positions=None, attention_mask=None) -> jnp.ndarray:
        """Final-norm hidden states [B, T, D] in the compute dtype."""
        tokens, positions, attention_mask = _check_inputs(tokens, positions, attention_mask)
        return self.model(tokens, positions, attention_mask)

    def lm_head_kernel(self) -> jnp.ndarray:
        """The LM head as a [D, V] array (the embedding's transpose when tied)."""
        if self.lm_head is None:
            return self.model.embed_tokens[...].T
        return self.lm_head.kernel[...]

    def project(self, hidden: jnp.ndarray) -> jnp.ndarray:
        """hidden [..., D] -> float32 logits [..., V]."""
        dt = jnp_dtype(self.config.dtype)
        return jnp.dot(hidden.astype(dt), self.lm_head_kernel().astype(dt),
                       preferred_element_type=jnp.float32)

    def __call__(self, tokens, *, positions=None, attention_mask=None) -> jnp.ndarray:
        return self.project(self.hidden_states(tokens, positions=positions,
                                               attention_mask=attention_mask))

    def forward_cached(self, tokens, positions, kv_mask, cache: KVCache, cache_index):
        """(hidden [B, T, D], new cache) for T tokens written at slots cache_index.. (sampler).

        cache_index: a scalar (all rows) or int [B] (row b writes at cache_index[b]..; slots past
        the cache's end are dropped), e.g. episodes whose histories have different lengths.
        """
        return self.model.forward_cached(tokens, positions, kv_mask, cache, cache_index)
