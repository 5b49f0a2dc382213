"""Decoder-only transformer in flax.nnx: every family of `rlvr.models.config.ARCHITECTURES`.

RMSNorm, rotary position embeddings (theta and `default` / `linear` / `llama3` scaling),
grouped-query attention through `jax.nn.dot_product_attention`, SwiGLU MLP, optional q/k/v
biases (Qwen2), tied or untied LM head. Configuration switches the family features on:
per-head q/k RMSNorm (Qwen3, Gemma 3), Gemma's (1 + w) norms, sandwich norms, GeGLU, scaled
embeddings, query scaling, attention and final logit soft-capping, sliding-window layers with
their own RoPE base, and mixture-of-experts MLPs (`MoE`: top-k routing, dropless dispatch).
Parameter names mirror Hugging Face's (`model.layers.3.self_attn.q_proj`), kernels are stored
`[in, out]`.

Every parameter carries `logical_axes` metadata (`vocab`, `embed`, `q_heads`, `kv_heads`, `mlp`,
`expert`, `norm`); `rlvr.parallel` maps those names to mesh axes. With
`ModelConfig.fused_projections` an attention layer holds one `qkv_proj` (logical `kv_heads`,
columns grouped per kv head: `qkv_width`) and a dense MLP one `gate_up_proj` (logical `mlp`,
gate and up columns interleaved) in place of the separate kernels. The KV cache's logical axes are
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
_NEG = -0.7 * float(np.finfo(np.float32).max)

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def jnp_dtype(name: str):
    return _DTYPES[name]


# --------------------------------------------------------------------------- RoPE
def rope_frequencies(config: ModelConfig, local: bool = False) -> np.ndarray:
    """Inverse frequencies [head_dim / 2] (float32), following HF's rope_type conventions.

    local=True: the sliding layers' frequencies (base `local_rope_theta`, no scaling)."""
    d = config.head_dim
    if local:
        return (1.0 / (config.local_rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
                ).astype(np.float32)
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
def causal_mask(attention_mask: jnp.ndarray, window=None) -> jnp.ndarray:
    """bool [B, 1, T, T]: causal over the index, padding keys masked, diagonal always on.

    window W: a query at index i also only sees keys at index j > i - W (sliding window)."""
    t = attention_mask.shape[1]
    idx = jnp.arange(t)
    causal = idx[None, :] <= idx[:, None]
    if window is not None:
        causal = causal & (idx[None, :] > idx[:, None] - window)
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


def cached_mask(kv_mask: jnp.ndarray, cache_index, t: int, window=None) -> jnp.ndarray:
    """bool [B, 1, t, S] for t queries written at cache slots cache_index .. cache_index + t - 1.

    kv_mask [B, S] is True on cache slots holding real tokens (including the new ones).
    cache_index: a scalar (every row writes at the same slots) or int [B] (row b's queries sit at
    slots cache_index[b] + j): query j of row b sees key slot k iff k <= its slot and
    kv_mask[b, k], and always sees its own slot. window W: also k > its slot - W.
    """
    s = kv_mask.shape[1]
    k_slot = jnp.arange(s)
    if jnp.ndim(cache_index) == 1:
        q_slot = jnp.asarray(cache_index)[:, None] + jnp.arange(t)[None, :]  # [B, t]
        causal = k_slot[None, None, :] <= q_slot[:, :, None]
        if window is not None:
            causal = causal & (k_slot[None, None, :] > q_slot[:, :, None] - window)
        m = causal & kv_mask[:, None, :].astype(bool)
        m = m | (k_slot[None, None, :] == q_slot[:, :, None])
        return m[:, None]
    q_slot = cache_index + jnp.arange(t)
    causal = k_slot[None, :] <= q_slot[:, None]
    if window is not None:
        causal = causal & (k_slot[None, :] > q_slot[:, None] - window)
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
    zero-initialised trainable offset (`rlvr.models.lora` with `train_norms`), None otherwise.
    unit_offset=True (Gemma): y = (x / sqrt(mean(x²) + eps)) · (1 + scale) in float32, then
    cast to dtype."""

    def __init__(self, dim, *, eps, dtype, param_dtype, unit_offset=False):
        init = jnp.zeros if unit_offset else jnp.ones
        self.scale = nnx.Param(init((dim,), param_dtype), logical_axes=("norm",))
        self.scale_delta = nnx.data(None)
        self.eps = eps
        self.dtype = dtype
        self.unit_offset = unit_offset

    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        scale = self.scale[...].astype(jnp.float32)
        if self.scale_delta is not None:
            scale = scale + self.scale_delta[...].astype(jnp.float32)
        if self.unit_offset:
            return (y * (1.0 + scale)).astype(self.dtype)
        return scale.astype(self.dtype) * y.astype(self.dtype)


def softcap(x: jnp.ndarray, cap) -> jnp.ndarray:
    """c · tanh(x / c) (identity when cap is None)."""
    if cap is None:
        return x
    return cap * jnp.tanh(x / cap)


def softcapped_attention(q, k, v, mask, *, scale: float, cap: float, window=None):
    """Grouped-query attention with soft-capped scores (Gemma 2), written out in jnp.

    q [B, T, N, H]; k, v [B, S, K, H] (N % K == 0, query head n uses kv head n // (N / K));
    mask bool [B, 1, T, S], or int [B] per-row lengths (causal over the index, keys past the
    length masked; `window` W then also masks keys at j <= i - W).
    out[b, i, n] = Σ_j softmax_j(mask ? c·tanh(q·k_j · scale / c) : -inf) v_j, [B, T, N, H].
    """
    b, t, n, h = q.shape
    s, kh = k.shape[1], k.shape[2]
    if mask.ndim == 1:
        qi, kj = jnp.arange(t)[:, None], jnp.arange(s)[None, :]
        m = (kj <= qi)[None] & (kj[None] < mask[:, None, None])
        if window is not None:
            m = m & (kj > qi - window)[None]
        mask = m[:, None]
    qg = q.reshape(b, t, kh, n // kh, h)
    scores = jnp.einsum("btkgh,bskh->bkgts", qg, k, preferred_element_type=jnp.float32)
    scores = softcap(scores * scale, cap)
    scores = jnp.where(mask[:, :, None], scores, _NEG)
    p = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgts,bskh->btkgh", p, v)
    return out.reshape(b, t, n, h)


def _partial_attention(qg, k, v, mask, *, scale: float, cap):
    """One partial attention: (m, l, o) with m the row max of the masked (soft-capped) scores,
    l = Σ_j e^{s_j - m} over the allowed keys and o = Σ_j e^{s_j - m} v_j (unnormalised).

    qg [B, T, K, R, H] (R = N / K query heads per kv head); k, v [B, S, K, H];
    mask bool [B, T, S]. Returns m, l f32 [B, T, K, R] and o f32 [B, T, K, R, H]; a query with
    no allowed key gets l = 0, o = 0 and m = a large negative number.
    """
    s = jnp.einsum("btkrh,bskh->btkrs", qg, k, preferred_element_type=jnp.float32)
    s = softcap(s * scale, cap)
    allowed = mask[:, :, None, None, :]
    s = jnp.where(allowed, s, _NEG)
    m = jnp.max(s, axis=-1)
    e = jnp.where(allowed, jnp.exp(s - m[..., None]), 0.0)
    o = jnp.einsum("btkrs,bskh->btkrh", e, v.astype(jnp.float32))
    return m, jnp.sum(e, axis=-1), o


@struct.dataclass
class PrefixRows:
    """Which rows of a group-major batch a shared-prefix query batch holds, when it is not the
    whole batch in order (a decode batch with finished rows compacted out).

    index: int32 [B'] distinct places u·G + j in the group-major layout of U·G rows: query row
      b' is sample j of group u and reads prefix row u = index[b'] // G.
    group_size: G (static).
    """

    index: jnp.ndarray
    group_size: int = struct.field(pytree_node=False)


def shared_prefix_attention(q, prefix_k, prefix_v, prefix_mask, suffix_k, suffix_v, suffix_mask,
                            *, scale: float, cap=None, rows: PrefixRows | None = None):
    """Attention of G samples per group over their group's shared prefix and their own suffix.

    q [U*G, T, N, H]: row u*G + j is sample j of group u (group-major); prefix_k, prefix_v
    [U, P, K, H]: one cache per group; prefix_mask bool [U, P]: real prefix slots (every prefix
    slot precedes every query, so no causal term); suffix_k, suffix_v [U*G, S, K, H]: each row's
    own keys; suffix_mask bool [U*G, T, S]: which suffix slots query t of the row sees.
    N % K == 0; query head n uses kv head n // (N / K). cap: optional score soft-cap c
    (s -> c·tanh(s / c), Gemma 2).

    The softmax over [prefix_u ; suffix_(u,j)] is computed as two partial attentions merged by
    log-sum-exp: with (m1, l1, o1) over the prefix (queries of the G rows of group u batched
    against the group's prefix once, [U, G·T, ...]) and (m2, l2, o2) over the suffix,
    each m_i = max score, l_i = Σ e^{s - m_i}, o_i = Σ e^{s - m_i} v (`_partial_attention`):
        m = max(m1, m2)
        out = (e^{m1-m} o1 + e^{m2-m} o2) / (e^{m1-m} l1 + e^{m2-m} l2),
    equal to softmax(concat scores) · concat(v) — the same output as one attention over the
    prompt repeated G times, without reading G copies of the prefix. Every query must see at
    least one key (its own suffix slot in decoding). Returns [U*G, T, N, H] in q's dtype.

    rows: optional `PrefixRows`: q (and the suffix arrays) hold B' rows at the places
    rows.index of the group-major U·G layout instead. Their queries are scattered into that
    layout (other places zero), the prefix partial attention runs over it as above and each
    row reads its place back: the prefix is neither gathered nor copied, and row b' gets
    bitwise the prefix terms it gets in the whole batch. Returns [B', T, N, H].
    """
    b, t, n, h = q.shape
    u, p, kh = prefix_k.shape[0], prefix_k.shape[1], prefix_k.shape[2]
    r = n // kh
    qg = q.reshape(b, t, kh, r, h)
    if rows is None:
        if b % u:
            raise ValueError(f"q rows ({b}) must be a multiple of the prefix groups ({u})")
        g, qall = b // u, qg
    else:
        if rows.index.shape != (b,):
            raise ValueError(f"rows.index must be [B'={b}], got shape {rows.index.shape}")
        g = rows.group_size
        qall = jnp.zeros((u * g,) + qg.shape[1:], qg.dtype).at[rows.index].set(
            qg, unique_indices=True)
    # prefix: the G·T queries of a group against the group's prefix, one read of its keys
    qp = qall.reshape(u, g * t, kh, r, h)
    pm = jnp.broadcast_to(prefix_mask.astype(bool)[:, None, :], (u, g * t, p))
    m1, l1, o1 = _partial_attention(qp, prefix_k.astype(q.dtype), prefix_v, pm, scale=scale,
                                    cap=cap)
    m1, l1, o1 = (x.reshape((u * g, t) + x.shape[2:]) for x in (m1, l1, o1))
    if rows is not None:
        m1, l1, o1 = (jnp.take(x, rows.index, axis=0) for x in (m1, l1, o1))
    m2, l2, o2 = _partial_attention(qg, suffix_k.astype(q.dtype), suffix_v,
                                    suffix_mask.astype(bool), scale=scale, cap=cap)
    m = jnp.maximum(m1, m2)
    a1, a2 = jnp.exp(m1 - m), jnp.exp(m2 - m)
    out = (a1[..., None] * o1 + a2[..., None] * o2) / (a1 * l1 + a2 * l2)[..., None]
    return out.reshape(b, t, n, h).astype(q.dtype)


def qkv_width(config: ModelConfig) -> int:
    """Output width of the fused q/k/v kernel: K · (N/K + 2) · H (`ModelConfig.fused_projections`).

    Column layout: K groups of (N/K + 2)·H columns; group g holds query heads g·N/K .. (g+1)·N/K
    - 1, then key head g, then value head g (H columns each), so a split of the columns into
    whole groups (tensor parallelism over kv heads) keeps each query head with its key and value.
    """
    return config.num_kv_heads * (config.num_heads // config.num_kv_heads + 2) * config.head_dim


class Attention(nnx.Module):
    def __init__(self, config: ModelConfig, *, rngs, sliding: bool = False):
        c = config
        dt, pdt = jnp_dtype(c.dtype), jnp_dtype(c.param_dtype)
        kw = dict(dtype=dt, param_dtype=pdt, rngs=rngs)
        if c.fused_projections:  # per kv head: its N/K query heads, its key, its value
            self.qkv_proj = Linear(c.hidden_size, qkv_width(c), axes=("embed", "kv_heads"),
                                   use_bias=c.attention_bias, **kw)
            self.q_proj = self.k_proj = self.v_proj = None
        else:
            self.qkv_proj = None
            self.q_proj = Linear(c.hidden_size, c.num_heads * c.head_dim,
                                 axes=("embed", "q_heads"), use_bias=c.attention_bias, **kw)
            self.k_proj = Linear(c.hidden_size, c.num_kv_heads * c.head_dim,
                                 axes=("embed", "kv_heads"), use_bias=c.attention_bias, **kw)
            self.v_proj = Linear(c.hidden_size, c.num_kv_heads * c.head_dim,
                                 axes=("embed", "kv_heads"), use_bias=c.attention_bias, **kw)
        self.o_proj = Linear(c.num_heads * c.head_dim, c.hidden_size, axes=("q_heads", "embed"),
                             use_bias=False, **kw)
        if c.qk_norm:
            nk = dict(eps=c.rms_norm_eps, dtype=dt, param_dtype=pdt, unit_offset=c.norm_unit_offset)
            self.q_norm = RMSNorm(c.head_dim, **nk)
            self.k_norm = RMSNorm(c.head_dim, **nk)
        else:
            self.q_norm = self.k_norm = None
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.impl = c.attention_impl
        self.scale = float((c.query_pre_attn_scalar or c.head_dim) ** -0.5)
        self.cap = c.attn_logit_softcapping
        self.window = c.sliding_window if sliding else None

    def __call__(self, x, cos, sin, mask, cache_kv=None, cache_index=None, prefix=None):
        """(output [B, T, D], new (k, v) cache or None).

        prefix: optional (prefix_k, prefix_v [U, P, K, H], prefix_mask bool [U, P], rows), a
        group's shared prompt cache (`shared_prefix_attention`; rows: None or the `PrefixRows`
        the batch holds): cache_kv is then each row's suffix cache and mask ([B, 1, T, S]) its
        suffix mask. Refused on sliding-window layers.
        """
        b, t, _ = x.shape
        if self.qkv_proj is not None:  # one matmul; columns grouped per kv head (qkv_width)
            g = self.num_heads // self.num_kv_heads
            y = self.qkv_proj(x).reshape(b, t, self.num_kv_heads, g + 2, self.head_dim)
            q = y[:, :, :, :g].reshape(b, t, self.num_heads, self.head_dim)
            k, v = y[:, :, :, g], y[:, :, :, g + 1]
        else:
            q = self.q_proj(x).reshape(b, t, self.num_heads, self.head_dim)
            k = self.k_proj(x).reshape(b, t, self.num_kv_heads, self.head_dim)
            v = self.v_proj(x).reshape(b, t, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        new_kv = None
        if cache_kv is not None:
            ck, cv = cache_kv
            ck, cv = write_cache(ck, k, cache_index), write_cache(cv, v, cache_index)
            k, v, new_kv = ck, cv, (ck, cv)
            w = mask.shape[-1] if mask.ndim == 4 else k.shape[1]
            if w < k.shape[1]:  # a mask over the first w slots only: attend to those alone
                k, v = k[:, :w], v[:, :w]
        if prefix is not None:
            if self.window is not None or mask.ndim != 4:
                raise ValueError("shared-prefix attention needs a full-attention layer with a "
                                 "[B, 1, T, S] suffix mask (sliding windows are not supported)")
            pk, pv, pmask, rows = prefix
            out = shared_prefix_attention(q, pk, pv, pmask, k, v, mask[:, 0], scale=self.scale,
                                          cap=self.cap, rows=rows)
            return self.o_proj(out.reshape(b, t, self.num_heads * self.head_dim)), new_kv
        if self.cap is not None:
            out = softcapped_attention(q, k.astype(q.dtype), v.astype(q.dtype), mask,
                                       scale=self.scale, cap=self.cap, window=self.window)
            return self.o_proj(out.reshape(b, t, self.num_heads * self.head_dim)), new_kv
        kw = dict(mask=mask)
        if mask.ndim == 1:  # per-row lengths of a contiguous layout (`contiguous_layout`);
            # padding queries (past the length) see the real keys: finite, ignored by losses
            kw = dict(is_causal=True, key_value_seq_lengths=mask)
            if self.window is not None:
                kw["local_window_size"] = (self.window - 1, 0)
        out = jax.nn.dot_product_attention(
            q, k.astype(q.dtype), v.astype(q.dtype), scale=self.scale,
            implementation=None if self.impl == "xla" else self.impl, **kw)
        return self.o_proj(out.reshape(b, t, self.num_heads * self.head_dim)), new_kv


def _act(name):
    if name == "silu":
        return jax.nn.silu
    return lambda x: jax.nn.gelu(x, approximate=True)


class MLP(nnx.Module):
    def __init__(self, config: ModelConfig, *, rngs):
        c = config
        kw = dict(dtype=jnp_dtype(c.dtype), param_dtype=jnp_dtype(c.param_dtype), rngs=rngs,
                  use_bias=False)
        if c.fused_projections:  # gate column f at 2f, up column f at 2f + 1
            self.gate_up_proj = Linear(c.hidden_size, 2 * c.intermediate_size,
                                       axes=("embed", "mlp"), **kw)
            self.gate_proj = self.up_proj = None
        else:
            self.gate_up_proj = None
            self.gate_proj = Linear(c.hidden_size, c.intermediate_size, axes=("embed", "mlp"),
                                    **kw)
            self.up_proj = Linear(c.hidden_size, c.intermediate_size, axes=("embed", "mlp"), **kw)
        self.down_proj = Linear(c.intermediate_size, c.hidden_size, axes=("mlp", "embed"), **kw)
        self.act = c.hidden_act

    def __call__(self, x):
        """down(act(x W_gate) ⊙ (x W_up)); fused: one matmul x W_gate_up [.., 2F] whose even /
        odd columns are the gate / up pre-activations."""
        if self.gate_up_proj is not None:
            y = self.gate_up_proj(x)
            y = y.reshape(*y.shape[:-1], y.shape[-1] // 2, 2)
            return self.down_proj(_act(self.act)(y[..., 0]) * y[..., 1])
        return self.down_proj(_act(self.act)(self.gate_proj(x)) * self.up_proj(x))


def route(router_logits: jnp.ndarray, k: int, normalize: bool):
    """Top-k routing: (weights [N, k] float32, experts int32 [N, k]).

    p = softmax(router_logits [N, E]) in float32; experts = the k largest p; weights = their
    p, divided by their sum when `normalize` (Qwen3-MoE `norm_topk_prob`, Mixtral)."""
    p = jax.nn.softmax(router_logits.astype(jnp.float32), axis=-1)
    w, idx = jax.lax.top_k(p, k)
    if normalize:
        w = w / jnp.sum(w, axis=-1, keepdims=True)
    return w, idx.astype(jnp.int32)


def moe_dispatch(x, weights, experts, w_gate, w_up, w_down, *, act: str, dtype):
    """Dropless mixture-of-experts MLP: every token reaches each of its k experts.

    x [N, D]; weights [N, k], experts int [N, k] (`route`); w_gate, w_up [E, D, F];
    w_down [E, F, D]. The N·k (token, expert) pairs are sorted by expert and each expert's
    contiguous group runs through `jax.lax.ragged_dot` (no capacity, no dropped tokens):
        y[n] = Σ_j weights[n, j] · down_e(act(x[n] W_gate[e]) ⊙ (x[n] W_up[e])),
        e = experts[n, j].
    Returns [N, D] in `dtype`.
    """
    n, k = experts.shape
    e = w_gate.shape[0]
    flat = experts.reshape(-1)
    order = jnp.argsort(flat, stable=True)
    token = order // k
    xs = jnp.take(x.astype(dtype), token, axis=0)
    sizes = jnp.bincount(flat, length=e).astype(jnp.int32)

    def rd(lhs, w):
        return jax.lax.ragged_dot(lhs, w.astype(dtype), sizes, preferred_element_type=dtype)

    h = _act(act)(rd(xs, w_gate)) * rd(xs, w_up)
    y = rd(h, w_down)
    y = y * jnp.take(weights.reshape(-1), order).astype(dtype)[:, None]
    return jnp.zeros((n, x.shape[-1]), dtype).at[token].add(y)


class MoE(nnx.Module):
    """Mixture-of-experts MLP (Qwen3-MoE, Mixtral): router `gate` [D, E]; stacked expert
    SwiGLU kernels `gate_proj`, `up_proj` [E, D, F] and `down_proj` [E, F, D] (expert axis
    first, logical axis `expert`). `__call__(x [B, T, D]) -> (y [B, T, D], router logits
    [B, T, E] float32)`."""

    def __init__(self, config: ModelConfig, *, rngs):
        c = config
        dt, pdt = jnp_dtype(c.dtype), jnp_dtype(c.param_dtype)
        d, f, e = c.hidden_size, c.moe_intermediate_size, c.num_experts
        self.gate = Linear(d, e, axes=("embed", None), use_bias=False, dtype=dt, param_dtype=pdt,
                           rngs=rngs)
        self.gate_proj = _param(rngs, (e, d, f), ("expert", "embed", "mlp"), pdt, 0.02)
        self.up_proj = _param(rngs, (e, d, f), ("expert", "embed", "mlp"), pdt, 0.02)
        self.down_proj = _param(rngs, (e, f, d), ("expert", "mlp", "embed"), pdt, 0.02)
        self.k, self.normalize, self.act, self.dtype = (c.num_experts_per_tok, c.norm_topk_prob,
                                                        c.hidden_act, dt)

    def __call__(self, x):
        b, t, d = x.shape
        flat = x.reshape(b * t, d)
        logits = self.gate(flat)
        w, idx = route(logits, self.k, self.normalize)
        w = w.astype(logits.dtype)
        y = moe_dispatch(flat, w, idx, self.gate_proj[...], self.up_proj[...],
                         self.down_proj[...], act=self.act, dtype=self.dtype)
        return y.reshape(b, t, d), logits.astype(jnp.float32).reshape(b, t, -1)


def load_balancing_loss(router_logits: jnp.ndarray, attention_mask: jnp.ndarray, k: int):
    """Switch-Transformer load-balancing loss over the MoE layers (as transformers computes it).

    router_logits [L, B, T, E] (float32); attention_mask bool [B, T] (real tokens); k experts
    per token. With p = softmax(logits), f[j, e] = mean over real tokens and layers of
    [e is the token's j-th choice], P[e] = mean of p[e]:
        loss = E · Σ_{j, e} f[j, e] · P[e]     (1 when routing is uniform and balanced).
    """
    e = router_logits.shape[-1]
    p = jax.nn.softmax(router_logits.astype(jnp.float32), axis=-1)
    _, idx = jax.lax.top_k(p, k)
    onehot = jax.nn.one_hot(idx, e, dtype=jnp.float32)  # [L, B, T, k, E]
    m = jnp.broadcast_to(attention_mask.astype(jnp.float32), p.shape[:-1])  # [L, B, T]
    denom = jnp.maximum(jnp.sum(m), 1.0)
    f = jnp.einsum("lbtke,lbt->ke", onehot, m) / denom
    pe = jnp.einsum("lbte,lbt->e", p, m) / denom
    return e * jnp.sum(f * pe[None, :])


class Block(nnx.Module):
    def __init__(self, config: ModelConfig, *, rngs, layer: int = 0):
        c = config
        dt, pdt = jnp_dtype(c.dtype), jnp_dtype(c.param_dtype)
        nk = dict(eps=c.rms_norm_eps, dtype=dt, param_dtype=pdt, unit_offset=c.norm_unit_offset)
        self.input_layernorm = RMSNorm(c.hidden_size, **nk)
        self.self_attn = Attention(c, rngs=rngs, sliding=c.is_sliding(layer))
        self.post_attention_layernorm = RMSNorm(c.hidden_size, **nk)
        if c.sandwich_norms:
            self.pre_feedforward_layernorm = RMSNorm(c.hidden_size, **nk)
            self.post_feedforward_layernorm = RMSNorm(c.hidden_size, **nk)
        else:
            self.pre_feedforward_layernorm = self.post_feedforward_layernorm = None
        self.mlp = MoE(c, rngs=rngs) if c.is_moe(layer) else MLP(c, rngs=rngs)
        self.sliding = c.is_sliding(layer)

    def __call__(self, x, cos, sin, mask, cache_kv=None, cache_index=None, prefix=None):
        """(x', new_kv) — also records a MoE layer's router logits (`forward_router`).
        prefix: a shared prompt cache (`Attention.__call__`)."""
        x, new_kv, _ = self.forward_router(x, cos, sin, mask, cache_kv, cache_index, prefix)
        return x, new_kv

    def forward_router(self, x, cos, sin, mask, cache_kv=None, cache_index=None, prefix=None):
        """(x', new_kv, router logits [B, T, E] of a MoE layer or None)."""
        a, new_kv = self.self_attn(self.input_layernorm(x), cos, sin, mask, cache_kv, cache_index,
                                   prefix)
        router = None
        if self.pre_feedforward_layernorm is None:
            x = x + a
            h = self.post_attention_layernorm(x)
        else:  # Gemma: post-norm on the attention output, norms before and after the MLP
            x = x + self.post_attention_layernorm(a)
            h = self.pre_feedforward_layernorm(x)
        if isinstance(self.mlp, MoE):
            h, router = self.mlp(h)
        else:
            h = self.mlp(h)
        if self.post_feedforward_layernorm is not None:
            h = self.post_feedforward_layernorm(h)
        return x + h, new_kv, router


def _block_apply(block, x, cos, sin, mask):
    return block(x, cos, sin, mask)[0]


def _block_apply_router(block, x, cos, sin, mask):
    x, _, router = block.forward_router(x, cos, sin, mask)
    return x, router


class Decoder(nnx.Module):
    """Embedding, L blocks, final norm: the trunk shared by the policy and the value model."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs, remat: bool = False):
        c = config
        dt, pdt = jnp_dtype(c.dtype), jnp_dtype(c.param_dtype)
        self.embed_tokens = _param(rngs, (c.vocab_size, c.hidden_size), ("vocab", "embed"), pdt, 0.02)
        self.layers = nnx.List([Block(c, rngs=rngs, layer=i) for i in range(c.num_layers)])
        self.norm = RMSNorm(c.hidden_size, eps=c.rms_norm_eps, dtype=dt, param_dtype=pdt,
                            unit_offset=c.norm_unit_offset)
        self._inv_freq_tuple = tuple(float(f) for f in rope_frequencies(c))
        self._local_inv_freq_tuple = (tuple(float(f) for f in rope_frequencies(c, local=True))
                                      if c.local_rope_theta is not None else None)
        self.embed_scale = math.sqrt(c.hidden_size) if c.scale_embeddings else None
        self.window = c.sliding_window
        self.dtype = dt
        self.remat = remat
        layout = c.attention_layout
        self.lengths_layout = layout == "lengths" or (layout == "auto" and c.attention_impl == "cudnn")

    def _embed(self, tokens, positions):
        inv = np.asarray(self._inv_freq_tuple, np.float32)
        x = jnp.take(self.embed_tokens[...], tokens, axis=0).astype(self.dtype)
        if self.embed_scale is not None:
            x = x * jnp.asarray(self.embed_scale, self.dtype)
        cos, sin = rope_cos_sin(positions, inv, self.dtype)
        return x, cos, sin

    def _local_rope(self, positions, cos, sin):
        """(cos, sin) of the sliding layers (their own RoPE base when the config has one)."""
        if self._local_inv_freq_tuple is None:
            return cos, sin
        return rope_cos_sin(positions, np.asarray(self._local_inv_freq_tuple, np.float32),
                            self.dtype)

    def __call__(self, tokens, positions, attention_mask, *, with_router_logits: bool = False):
        """Final hidden states [B, T, D]; with_router_logits: (hidden, router logits
        [L_moe, B, T, E] float32 of the MoE layers, or None for a dense model)."""
        if self.lengths_layout:
            gather, scatter, lengths, contiguous = contiguous_layout(attention_mask)
            tokens = jnp.take_along_axis(tokens, gather, axis=1)
            positions = jnp.take_along_axis(positions, gather, axis=1)
            h, router = self._blocks(tokens, positions, lengths, lengths, with_router_logits)
            h = jnp.take_along_axis(h, scatter[:, :, None], axis=1)
            h = jnp.where(contiguous[:, None, None], h, jnp.nan)
            if router is not None:
                router = jnp.take_along_axis(router, scatter[None, :, :, None], axis=2)
        else:
            local = (causal_mask(attention_mask, self.window)
                     if any(b.sliding for b in self.layers) else None)
            h, router = self._blocks(tokens, positions, causal_mask(attention_mask), local,
                                     with_router_logits)
        return (h, router) if with_router_logits else h

    def _blocks(self, tokens, positions, mask, local_mask, with_router_logits=False):
        """Embedding, blocks and final norm; mask (full layers) / local_mask (sliding layers):
        [B, 1, T, T] or per-row lengths [B]. Returns (hidden, router logits or None)."""
        x, cos, sin = self._embed(tokens, positions)
        lcos, lsin = (self._local_rope(positions, cos, sin)
                      if any(b.sliding for b in self.layers) else (cos, sin))
        routers = []
        if with_router_logits:
            apply = nnx.remat(_block_apply_router) if self.remat else _block_apply_router
        else:
            apply = nnx.remat(_block_apply) if self.remat else _block_apply
        for block in self.layers:
            args = (lcos, lsin, local_mask) if block.sliding else (cos, sin, mask)
            if with_router_logits:
                x, router = apply(block, x, *args)
                if router is not None:
                    routers.append(router)
            else:
                x = apply(block, x, *args)
        return self.norm(x), (jnp.stack(routers) if routers else None)

    def forward_cached(self, tokens, positions, kv_mask, cache: KVCache, cache_index,
                       kv_len: int | None = None):
        """Runs T new tokens written at cache slots [cache_index, cache_index + T).

        cache_index: a scalar, or int [B] per-row start slots (`cached_mask`, `write_cache`).
        kv_len: static W: attention reads cache slots [0, W) only (the caller keeps every slot
        a query may see, its own included, below W); None: every slot.
        """
        x, cos, sin = self._embed(tokens, positions)
        if kv_len is not None:
            kv_mask = kv_mask[:, :kv_len]
        mask = cached_mask(kv_mask, cache_index, tokens.shape[1])
        if any(b.sliding for b in self.layers):
            local = cached_mask(kv_mask, cache_index, tokens.shape[1], self.window)
            lcos, lsin = self._local_rope(positions, cos, sin)
        ks, vs = [], []
        for i, block in enumerate(self.layers):
            args = (lcos, lsin, local) if block.sliding else (cos, sin, mask)
            x, (k, v) = block(x, *args, (cache.k[i], cache.v[i]), cache_index)
            ks.append(k)
            vs.append(v)
        return self.norm(x), KVCache(k=tuple(ks), v=tuple(vs))

    def forward_shared(self, tokens, positions, prefix: KVCache, prefix_mask, suffix_mask,
                       cache: KVCache, cache_index, kv_len: int | None = None,
                       rows: PrefixRows | None = None):
        """Runs T new tokens of B = U*G rows against a shared per-group prompt cache.

        prefix: KVCache of U rows of P slots (one per group, never written); prefix_mask bool
        [U, P]; cache: each row's suffix KVCache [B, S]; the tokens are written at suffix slots
        [cache_index, cache_index + T) (a scalar); suffix_mask bool [B, S] real suffix slots.
        kv_len: static W: attention reads suffix slots [0, W) only. rows: None (the B rows are
        the group-major U*G rows in order) or the `PrefixRows` the B rows are (a compacted
        batch). Sliding-window layers are refused (`shared_prefix_attention`).
        """
        if any(b.sliding for b in self.layers):
            raise ValueError("a shared prompt cache does not support sliding-window layers")
        x, cos, sin = self._embed(tokens, positions)
        if kv_len is not None:
            suffix_mask = suffix_mask[:, :kv_len]
        mask = cached_mask(suffix_mask, cache_index, tokens.shape[1])
        ks, vs = [], []
        for i, block in enumerate(self.layers):
            x, (k, v) = block(x, cos, sin, mask, (cache.k[i], cache.v[i]), cache_index,
                              (prefix.k[i], prefix.v[i], prefix_mask, rows))
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
        """hidden [..., D] -> float32 logits [..., V] (soft-capped when the config says so)."""
        dt = jnp_dtype(self.config.dtype)
        return softcap(jnp.dot(hidden.astype(dt), self.lm_head_kernel().astype(dt),
                               preferred_element_type=jnp.float32),
                       self.config.final_logit_softcapping)

    def router_aux_loss(self, tokens, *, positions=None, attention_mask=None):
        """(hidden [B, T, D], load-balancing loss scalar) of a MoE model
        (`load_balancing_loss` over its MoE layers; 0.0 for a dense model)."""
        tokens, positions, attention_mask = _check_inputs(tokens, positions, attention_mask)
        hidden, router = self.model(tokens, positions, attention_mask, with_router_logits=True)
        if router is None:
            return hidden, jnp.zeros((), jnp.float32)
        return hidden, load_balancing_loss(router, attention_mask, self.config.num_experts_per_tok)

    def __call__(self, tokens, *, positions=None, attention_mask=None) -> jnp.ndarray:
        return self.project(self.hidden_states(tokens, positions=positions,
                                               attention_mask=attention_mask))

    def forward_cached(self, tokens, positions, kv_mask, cache: KVCache, cache_index,
                       kv_len: int | None = None):
        """(hidden [B, T, D], new cache) for T tokens written at slots cache_index.. (sampler).

        cache_index: a scalar (all rows) or int [B] (row b writes at cache_index[b]..; slots past
        the cache's end are dropped), e.g. episodes whose histories have different lengths.
        kv_len: static W: attention reads only cache slots [0, W) (`Decoder.forward_cached`).
        """
        return self.model.forward_cached(tokens, positions, kv_mask, cache, cache_index, kv_len)

    def forward_shared(self, tokens, positions, prefix: KVCache, prefix_mask, suffix_mask,
                       cache: KVCache, cache_index, kv_len: int | None = None,
                       rows: PrefixRows | None = None):
        """(hidden [B, T, D], new suffix cache): decoding B rows (the U*G group-major rows, or
        the `PrefixRows` rows) against U shared prompt caches (`Decoder.forward_shared`,
        `shared_prefix_attention`)."""
        return self.model.forward_shared(tokens, positions, prefix, prefix_mask, suffix_mask,
                                         cache, cache_index, kv_len, rows)
