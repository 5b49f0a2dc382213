"""Token scoring for the learner: log-probs of the taken tokens and per-token entropy (docs/architecture.md §3, docs/algorithms.md (A.19)).

Alignment (rlvr-wide, see rlvr/records/batch.py): `logprobs[:, t] = log p(tokens[:, t] |
tokens[:, :t])`, and `entropy[:, t]` is the entropy of that same next-token distribution.
Both are 0 at t = 0, where `attention_mask` is 0, and at the first real token of a row (it has
no real context, e.g. after left padding).

Memory: the logits are computed from the final hidden states and the LM head in chunks over T
inside a `lax.scan` whose body is rematerialised (`jax.checkpoint`), so only one
[B, chunk, V] float32 logits block is alive at a time, in the forward and the backward pass.
The default chunk (`default_chunk_size`) is 256 positions, fewer when B·256·V would exceed
2^28 elements (1 GiB of float32): a no-grad pass over a whole rollout batch at a large vocabulary
(512 rows × 151,936 tokens: 3 positions per block) stays as small as a learner micro-batch's.

`impl` chooses how the head runs (the config's `train.logprob_impl`): "chunked" (the default,
above), "vocab_tiled" (`rlvr.models.fused_head`: per block of rows, a scan over vocabulary tiles
with an online log-sum-exp that also yields the target logit and the entropy, and a custom
backward that recomputes each tile; never more than [rows, tile] logits, and none saved for the
backward; given a `mesh` whose `tensor` axis splits the head along the vocabulary, each tensor
shard runs its own slice of the vocabulary and the shards combine by pmax / psum) or "pallas" (the same forward and backward as Pallas kernels, GPU / TPU). All three give the same
values and gradients up to float summation order.

`temperature` divides the logits, so the sampler's behaviour log-probs at temperature τ
(top-k / top-p off) are reproduced by `token_logprobs(..., temperature=τ)`.
"""

from __future__ import annotations

from typing import Optional

import chex
import jax
import jax.numpy as jnp
from flax import nnx

from rlvr.models import fused_head
from rlvr.models.transformer import _check_inputs, jnp_dtype, softcap

LOGPROB_IMPLS = fused_head.IMPLS  # "chunked" | "vocab_tiled" | "pallas"
DEFAULT_CHUNK = 256
MAX_BLOCK_LOGITS = 2**28  # float32 logits elements per block under the default chunk (1 GiB)


def default_chunk_size(batch: int, vocab: int, positions: int) -> int:
    """min(positions, 256, max(1, ⌊2^28 / (batch · vocab)⌋)): positions per logits block."""
    return max(1, min(positions, DEFAULT_CHUNK, MAX_BLOCK_LOGITS // max(1, batch * vocab)))


def _chunk_stats(h, w, targets, temperature, dtype, logit_softcap=None):
    """h [B, c, D], w [D, V], targets [B, c] -> (logprob [B, c], entropy [B, c]) in float32."""
    logits = jnp.dot(h.astype(dtype), w.astype(dtype), preferred_element_type=jnp.float32)
    logits = softcap(logits, logit_softcap) / temperature
    logz = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    p = jnp.exp(logits - logz[..., None])
    entropy = logz - jnp.sum(p * logits, axis=-1)
    return picked - logz, entropy


def logprobs_from_hidden(hidden, lm_head, tokens, attention_mask, *, temperature=1.0,
                         chunk_size: Optional[int] = None, dtype=jnp.float32,
                         logit_softcap: Optional[float] = None, start: int = 0,
                         impl: str = "chunked", interpret: bool = False, mesh=None):
    """Pure core of `token_logprobs`.

    Only the target columns t >= max(start, 1) are scored: the LM head and the log-softmax run
    on the hidden states of positions start-1 .. T-2 alone, and columns t < start are 0 (as if
    masked). With `start` at a batch's first completion column (the sampler's layout: prompt
    in columns < P, completion in P..T-1) the log-probs and entropies of the completion equal
    those of start = 0 while the head's work shrinks by P / (T - 1).

    Args:
      hidden: [B, T, D] final hidden states.
      lm_head: [D, V] LM head kernel.
      tokens: int [B, T]; attention_mask: bool [B, T].
      temperature: scalar dividing the logits.
      chunk_size: positions per logits block (default `default_chunk_size(B, V, T - 1)`).
      logit_softcap: c: logits z -> c·tanh(z / c) before the temperature (Gemma 2); None off.
      start: static int in [0, T), the first target column scored (0 and 1: all of them).
      impl: "chunked" (position chunks of [B, chunk, V] logits), "vocab_tiled" or "pallas"
        (`rlvr.models.fused_head.head_logprobs_entropy` over the B·(T − start') scored rows;
        chunk_size is then unused; temperature and logit_softcap must be static).
      interpret: run the "pallas" kernel in Pallas's interpreter (tests on CPU).
      mesh: the device mesh the LM head is sharded on, or None (`fused_head.head_logprobs_entropy`:
        "vocab_tiled" runs vocabulary-parallel over its `tensor` axis; other impls ignore it).
    Returns:
      (logprobs [B, T], entropy [B, T]) float32, aligned with tokens.
    """
    chex.assert_rank([hidden, tokens, attention_mask], [3, 2, 2])
    fused_head.check_impl(impl, interpret=interpret)
    b, t, d = hidden.shape
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < max(t, 1):
        raise ValueError(f"start must be an int in [0, T={t}), got {start!r}")
    if t < 2:
        z = jnp.zeros((b, t), jnp.float32)
        return z, z
    s0 = max(start, 1)  # first scored target column
    n = t - s0
    if chunk_size is not None and chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    if impl != "chunked":
        lp, ent = fused_head.head_logprobs_entropy(
            hidden[:, s0 - 1:-1].reshape(b * n, d), lm_head, tokens[:, s0:].reshape(b * n),
            temperature=temperature, logit_softcap=logit_softcap, dtype=dtype, impl=impl,
            interpret=interpret, mesh=mesh)
        return _aligned(lp.reshape(b, n), ent.reshape(b, n), attention_mask, s0)
    c = min(n, chunk_size) if chunk_size else default_chunk_size(b, lm_head.shape[-1], n)
    num = -(-n // c)
    pad = num * c - n
    h = jnp.pad(hidden[:, s0 - 1:-1], ((0, 0), (0, pad), (0, 0)))
    tg = jnp.pad(tokens[:, s0:].astype(jnp.int32), ((0, 0), (0, pad)))
    h = h.reshape(b, num, c, d).swapaxes(0, 1)
    tg = tg.reshape(b, num, c).swapaxes(0, 1)

    @jax.checkpoint
    def body_fn(hc, tc):
        return _chunk_stats(hc, lm_head, tc, temperature, dtype, logit_softcap)

    if num == 1:
        lp, ent = body_fn(h[0], tg[0])
    else:
        _, (lp, ent) = jax.lax.scan(lambda carry, x: (carry, body_fn(*x)), None, (h, tg))
        lp = lp.swapaxes(0, 1).reshape(b, num * c)
        ent = ent.swapaxes(0, 1).reshape(b, num * c)
    return _aligned(lp[:, :n], ent[:, :n], attention_mask, s0)


def _aligned(lp, ent, attention_mask, s0: int):
    """[B, n] scores of target columns s0..T-1 -> [B, T], zero where unscored or invalid."""
    b = lp.shape[0]
    zero = jnp.zeros((b, s0), jnp.float32)
    lp = jnp.concatenate([zero, lp], axis=1)
    ent = jnp.concatenate([zero, ent], axis=1)
    am = attention_mask.astype(bool)
    has_context = jnp.concatenate(
        [jnp.zeros((b, 1), bool), jnp.cumsum(am, axis=1)[:, :-1] > 0], axis=1)
    valid = am & has_context
    return jnp.where(valid, lp, 0.0), jnp.where(valid, ent, 0.0)


def token_logprobs(model, tokens, *, positions=None, attention_mask=None, temperature=1.0,
                   chunk_size: Optional[int] = None, with_router_loss: bool = False,
                   start: int = 0, impl: str = "chunked", interpret: bool = False, mesh=None):
    """(logprobs [B, T], entropy [B, T]) of `tokens` under `model` (a `Transformer`).

    tokens int32 [B, T]; positions int32 [B, T] (default 0..T-1); attention_mask bool [B, T]
    (default all True). Works under `jax.jit` / `jax.grad` with `nnx.split` / `nnx.merge`
    (see `token_logprobs_from_state`). with_router_loss: also returns the mixture-of-experts
    load-balancing loss of the same forward pass over the real tokens (a scalar, 0.0 for a
    dense model; `Transformer.router_aux_loss`): (logprobs, entropy, router_loss). start: the
    first target column scored (`logprobs_from_hidden`; earlier columns are 0). impl, interpret,
    mesh: how the LM head and log-softmax run (`logprobs_from_hidden`).
    """
    tokens, positions, attention_mask = _check_inputs(tokens, positions, attention_mask)
    if with_router_loss:
        hidden, router_loss = model.router_aux_loss(tokens, positions=positions,
                                                    attention_mask=attention_mask)
    else:
        hidden = model.hidden_states(tokens, positions=positions, attention_mask=attention_mask)
    out = logprobs_from_hidden(hidden, model.lm_head_kernel(), tokens, attention_mask,
                               temperature=temperature, chunk_size=chunk_size,
                               dtype=jnp_dtype(model.config.dtype),
                               logit_softcap=model.config.final_logit_softcapping, start=start,
                               impl=impl, interpret=interpret, mesh=mesh)
    return (*out, router_loss) if with_router_loss else out


def token_logprobs_from_state(graphdef, state, tokens, **kwargs):
    """`token_logprobs` on `nnx.merge(graphdef, state)`: a pure function of the param state."""
    return token_logprobs(nnx.merge(graphdef, state), tokens, **kwargs)
