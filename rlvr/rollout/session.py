"""Cross-turn sampler: each episode's KV cache lives across the turns of a multi-turn rollout.

The re-prefill sampler (`rlvr.rollout.sampler.sample` through `agent_loop.sample_turn`) re-runs
an episode's whole history every turn: turn t costs O(history_t) prefill tokens, an episode
O(turns²·turn length). `KVSession` keeps one cache row per episode instead: every turn it
prefills only the tokens appended since that row's last forward pass (on the first turn the
prompt, later the observation that followed the action) at the row's own offset, then decodes
the action, whose tokens are written into the same cache as they are generated.

Layout. A row's cache slots 0 .. len_b - 1 hold the episode stream in order (no left padding),
so the slot of a token equals its position id. The cache has S = max_tokens slots. The appended
chunk of row b (n_b tokens, n_b >= 1) is right-padded to a common length C (a multiple of
`chunk_bucket`, or a power of two when it is 0) and written at slots len_b .. len_b + C - 1:
padding lands beyond the row's real tokens, is masked out (kv_mask[b, k] = k < len_b + n_b) and
later overwritten; writes past slot S - 1 are dropped (`rlvr.models.transformer.write_cache`).
When a row has nothing new (an empty observation), its last token is fed again at its own slot
so the next-token logits exist.

Per turn, for row b with cached length L_b and chunk x_b (n_b tokens):

    prefill   h = forward(x_b at positions L_b + j, j < C;  keys: slots k <= L_b + j, k < L_b + n_b)
    logits_0  = project(h[n_b - 1])
    decode    token i chosen from logits_i (`sampler._choose`: key fold_in(key_b, i)), then
              forwarded at slot/position L_b + n_b + i while the row is live

which is the computation of the re-prefill sampler on the same stream up to floating-point
reassociation (the cached keys/values were produced by earlier, differently shaped passes).

Batch. Active episodes occupy rows 0 .. n-1 of a cache of `batch_size_bucket(n, batch_bucket)`
rows; padding rows repeat the first active episode (chunk, key and cache) and are ignored.
When an episode ends the cache is compacted (a row gather) before the next turn, so the jitted
turn function sees a bounded set of (rows, C) shapes. Randomness is the sampler's: the caller
passes one key per episode per turn (the agent loop: fold_in(episode key, turn)).

Sharding. With a `rlvr.parallel.GenerationSharding` the row count is also a multiple of its
batch shards, and the cache, chunks, offsets and keys are split on the row dimension over its
mesh (the cache's KV heads over `tensor`), as the single-turn sampler splits its batch: each row's
tokens and keys are those of the unsharded session.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr.models.transformer import KVCache
from rlvr.rollout.sampler import SamplingParams, _decode_choice


def chunk_length_bucket(n: int, bucket: int) -> int:
    """Padded chunk length for a longest new chunk of `n` tokens: the next multiple of `bucket`
    (bucket > 0) or the next power of two (bucket 0)."""
    if n < 1:
        raise ValueError(f"chunk_length_bucket: n must be >= 1, got {n}")
    if bucket <= 0:
        return 1 << (n - 1).bit_length()
    return -(-n // bucket) * bucket


@dataclasses.dataclass(frozen=True)
class SessionTurn:
    """One decoded action per active episode (host arrays), in the order the episodes were given.

    Attributes:
      action_ids: list of n lists of generated ids (stop token included when emitted).
      logprobs: list of n lists of the sampled distribution's log-probs of those ids.
      truncated: bool [n]: `max_new_tokens` ran out before a stop token.
      row_prefill_tokens: [n] the real tokens prefilled for each episode this turn (its chunk,
        no padding); `prefill_tokens` is their sum.
    """

    action_ids: list
    logprobs: list
    truncated: np.ndarray
    row_prefill_tokens: tuple

    @property
    def prefill_tokens(self) -> int:
        return int(sum(self.row_prefill_tokens))


@partial(jax.jit, static_argnames=("graphdef", "params", "pad_id"), donate_argnames=("cache",))
def _turn_impl(graphdef, state, cache, starts, chunk, chunk_len, keys, *, params: SamplingParams,
               pad_id: int):
    """Prefills chunk [R, C] (right-padded, chunk_len [R] >= 1 real tokens) at per-row slots
    starts [R], then decodes up to N = params.max_new_tokens tokens per row.

    Returns (cache, out_tokens int32 [R, N], out_logprobs f32 [R, N], generated int32 [R],
    done bool [R]); the generated tokens (stop included) are in the cache at slots
    starts + chunk_len + i.
    """
    model = nnx.merge(graphdef, state)
    r, c = chunk.shape
    s = cache.k[0].shape[1]
    n = params.max_new_tokens
    rows = jnp.arange(r)
    new_len = starts + chunk_len
    chunk_mask = jnp.arange(c)[None, :] < chunk_len[:, None]
    tokens = jnp.where(chunk_mask, chunk, pad_id).astype(jnp.int32)
    positions = starts[:, None] + jnp.arange(c, dtype=jnp.int32)[None, :]
    kv_mask = jnp.arange(s)[None, :] < new_len[:, None]
    hidden, cache = model.forward_cached(tokens, positions, kv_mask, cache, starts)
    last = jnp.take_along_axis(hidden, (chunk_len - 1)[:, None, None], axis=1)[:, 0]
    logits = model.project(last)
    stops = jnp.asarray(params.stop_token_ids or (-1,), jnp.int32)

    def cond(carry):
        i, _, _, _, _, done, _, _ = carry
        return (i < n) & ~jnp.all(done)

    def body(carry):
        i, cache, logits, out_tok, out_lp, done, kv_mask, generated = carry
        live = ~done
        slot = new_len + i
        kv_mask = kv_mask.at[rows, slot].set(live, mode="drop")
        generated = generated + live.astype(jnp.int32)
        tok, out_tok, out_lp, done = _decode_choice(logits, keys, i, params, done, out_tok, out_lp,
                                                    pad_id=pad_id, stops=stops)
        hidden, cache = model.forward_cached(tok[:, None], slot[:, None], kv_mask, cache, slot)
        logits = model.project(hidden[:, 0])
        return i + 1, cache, logits, out_tok, out_lp, done, kv_mask, generated

    init = (jnp.int32(0), cache, logits, jnp.full((r, n), pad_id, jnp.int32),
            jnp.zeros((r, n), jnp.float32), jnp.zeros((r,), bool), kv_mask,
            jnp.zeros((r,), jnp.int32))
    _, cache, _, out_tok, out_lp, done, _, generated = jax.lax.while_loop(cond, body, init)
    return cache, out_tok, out_lp, generated, done


@jax.jit
def _gather_rows(cache: KVCache, src: jnp.ndarray) -> KVCache:
    """cache rows reordered / compacted: row j of the result is row src[j] of `cache`."""
    return jax.tree.map(lambda x: jnp.take(x, src, axis=0), cache)


class KVSession:
    """The KV caches of a batch of episodes across turns (module docstring).

    `turn(episode_ids, streams, keys, params)` samples one action for each given episode, whose
    full token stream so far is `streams[j]`; the session feeds only the part of each stream it
    has not yet seen. An episode absent from a call has ended: its row is dropped.
    """

    def __init__(self, model, *, max_tokens: int, pad_id: int, batch_bucket: int = 0,
                 chunk_bucket: int = 0, sharding=None):
        from rlvr.rollout.agent_loop import batch_size_bucket  # noqa: PLC0415 (no import cycle)

        batch_size_bucket(1, batch_bucket)  # validates
        if max_tokens < 2:
            raise ValueError(f"KVSession: max_tokens must be >= 2, got {max_tokens}")
        if chunk_bucket < 0:
            raise ValueError(f"KVSession: chunk_bucket must be >= 0, got {chunk_bucket}")
        self._bucket = partial(batch_size_bucket, bucket=batch_bucket)
        self.graphdef, self.state = nnx.split(model)
        self.config = model.config
        self.max_tokens, self.pad_id, self.chunk_bucket = max_tokens, pad_id, chunk_bucket
        self.sharding = sharding  # rlvr.parallel.GenerationSharding (None: as the model is placed)
        self.cache: Optional[KVCache] = None
        self.row_of: dict = {}  # episode id -> cache row
        self.cached: dict = {}  # episode id -> stream tokens already in its cache row

    def _arrange(self, ids: Sequence) -> int:
        """Puts the episodes `ids` in rows 0..n-1 of a bucketed cache; returns its row count."""
        n = len(ids)
        rows = self._bucket(n)
        if self.sharding is not None:
            rows = self.sharding.padded_rows(rows)
        cache_sharding = None if self.sharding is None else self.sharding.cache(self.config, rows)
        if self.cache is None:
            self.cache = KVCache.init(self.config, rows, self.max_tokens, sharding=cache_sharding)
        else:
            # padding rows must copy a live row (the decode loop runs until every row stops);
            # after a turn they already do: it fed them row 0's chunk and key
            src = [self.row_of[i] for i in ids] + [self.row_of[ids[0]]] * (rows - n)
            if rows != self.cache.k[0].shape[0] or src != list(range(n)) + [0] * (rows - n):
                self.cache = _gather_rows(self.cache, jnp.asarray(src, jnp.int32))
                if cache_sharding is not None:
                    self.cache = jax.device_put(self.cache, cache_sharding)
        self.row_of = {i: j for j, i in enumerate(ids)}
        self.cached = {i: self.cached.get(i, 0) for i in ids}
        return rows

    def turn(self, ids: Sequence, streams: Sequence[Sequence[int]], keys,
             params: SamplingParams) -> SessionTurn:
        """One action per episode. ids: n distinct episode ids; streams: their token streams
        (each extends what the session saw of it); keys: [n] typed PRNG keys (the action's key).
        Raises ValueError when a stream plus one action would not fit in `max_tokens` slots."""
        n = len(ids)
        if n == 0 or len(streams) != n or len(set(ids)) != n:
            raise ValueError(f"KVSession.turn: need n >= 1 distinct ids and n streams, got "
                             f"{len(ids)} ids ({len(set(ids))} distinct), {len(streams)} streams")
        for i, st in zip(ids, streams):
            if not st or len(st) + params.max_new_tokens > self.max_tokens:
                raise ValueError(f"KVSession.turn: episode {i!r} has {len(st)} tokens; with "
                                 f"max_new_tokens={params.max_new_tokens} it needs 1 .. "
                                 f"{self.max_tokens - params.max_new_tokens}")
            if i in self.cached and self.cached[i] > len(st):
                raise ValueError(f"KVSession.turn: episode {i!r}'s stream shrank "
                                 f"({len(st)} < {self.cached[i]} tokens already cached)")
        rows = self._arrange(list(ids))
        starts = [min(self.cached[i], len(st) - 1) for i, st in zip(ids, streams)]
        chunks = [st[s:] for st, s in zip(streams, starts)]
        c = chunk_length_bucket(max(len(x) for x in chunks), self.chunk_bucket)
        chunk = np.full((rows, c), self.pad_id, np.int32)
        chunk_len = np.zeros(rows, np.int32)
        start_arr = np.zeros(rows, np.int32)
        for j in range(rows):
            src = j if j < n else 0
            chunk[j, :len(chunks[src])] = chunks[src]
            chunk_len[j], start_arr[j] = len(chunks[src]), starts[src]
        if keys.shape[0] != n:
            raise ValueError(f"KVSession.turn: got {keys.shape[0]} keys for {n} episodes")
        if rows > n:
            keys = jnp.concatenate([keys, jnp.repeat(keys[:1], rows - n)])
        per_row = (jnp.asarray(start_arr), jnp.asarray(chunk), jnp.asarray(chunk_len), keys)
        if self.sharding is not None:
            per_row = jax.device_put(per_row, self.sharding.batch)
        self.cache, out_tok, out_lp, generated, done = _turn_impl(
            self.graphdef, self.state, self.cache, *per_row, params=params,
            pad_id=int(self.pad_id))
        out_tok, out_lp = np.asarray(out_tok), np.asarray(out_lp, np.float32)
        generated, done = np.asarray(generated), np.asarray(done)
        action_ids, logprobs = [], []
        for j, (i, st) in enumerate(zip(ids, streams)):
            g = int(generated[j])
            action_ids.append([int(x) for x in out_tok[j, :g]])
            logprobs.append([float(x) for x in out_lp[j, :g]])
            self.cached[i] = len(st) + g
        return SessionTurn(action_ids=action_ids, logprobs=logprobs, truncated=~done[:n],
                           row_prefill_tokens=tuple(len(x) for x in chunks))
