"""Jitted batched sampler with a KV cache (docs/architecture.md §3, docs/algorithms.md (A.19)).

`sample(model, prompt_tokens, prompt_mask, key, params, pad_id=...)` generates up to
`params.max_new_tokens` tokens for every row of a padded prompt batch in one jitted function:
prefill writes the prompt into a KV cache, then a `lax.while_loop` decodes one token per step
and exits early once every row has emitted a stop token.

Prompts may be left- or right-padded (`prompt_mask` True on real tokens; real tokens must be
contiguous); they are normalised to left padding, so `SampleOutput.tokens` is
`[B, P + N]`: the prompt left-padded to P, then the completion (pad_id after the stop token).

Log-probs (docs/architecture.md §3, docs/algorithms.md (A.19)): `behavior_logprobs[:, t]` is the log-prob of token t under the
distribution actually sampled from — logits / temperature, then top-k, then top-p, renormalised.
With top-k / top-p off, `rlvr.models.scoring.token_logprobs(..., temperature=τ)` on the output
reproduces them. Greedy decoding is a deterministic argmax; its recorded log-prob is the
temperature-1 log-softmax of the chosen token (the policy's own probability of it).
Top-p reads its threshold off the `NUCLEUS_CANDIDATES` largest logits when they hold the nucleus
mass, and sorts the whole vocabulary only otherwise (same result either way).

Randomness: one key per sample; step i of sample b uses `fold_in(key_b, i)`, so a sample does
not depend on the batch it is in. A single key is expanded with `fold_in(key, b)`.
The sampler is generic: a multi-turn agent passes the whole history so far as the prompt.

Groups (GRPO): `sample(..., num_samples=G)` takes U unique prompts and returns U*G rows,
group-major (rows u*G .. u*G+G-1 continue prompt u), exactly the layout of passing every prompt
G times; the prompt is prefilled once and its KV cache repeated G times before decoding.
`shared_prefix=True` keeps one [U, P] prompt cache per group instead: each row's generated
tokens go to its own [B, N] suffix cache and decode attention merges the two by log-sum-exp
(`rlvr.models.transformer.shared_prefix_attention`), reading each prompt's keys once per group.
With compaction (below) the prompt cache stays whole and each gathered row keeps its place
u*G + j among the group rows (`DecodeState.prefix_rows`).

Decode schedule (`DecodeSchedule`, the config's rollout.decode_segments / compact_finished):
`decode_segments=k` splits the decode loop into k parts, each attending only to the cache slots
written so far (`decode_windows`); `compact_finished=True` then drives the parts from the host
and, between parts, continues only the rows that have not ended, gathered into a smaller batch
(`compact_bucket`), so decoding costs the rows still running rather than B rows up to the
longest. Row b's computation never involves another row (its own key stream, its own attention
row), so compaction leaves every row's tokens, masks and log-probs bitwise as without it.
`max_new_tokens_per_row` gives each row its own length budget.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from rlvr.models.transformer import KVCache, PrefixRows


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How to sample (hashable: a static argument of the jitted sampler).

    temperature: > 0, divides the logits. top_k: 0 = off, else keep the k largest logits.
    top_p: in (0, 1], nucleus mass (1 = off). greedy: argmax (ignores temperature/top-k/top-p).
    max_new_tokens: N >= 1. stop_token_ids: generation of a row ends after emitting one of these
    (the stop token is kept and gets loss_mask 1).
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    greedy: bool = False
    max_new_tokens: int = 256
    stop_token_ids: tuple = ()

    def __post_init__(self):
        if not (isinstance(self.temperature, (int, float)) and self.temperature > 0):
            raise ValueError(f"SamplingParams.temperature must be > 0, got {self.temperature!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"SamplingParams.top_k must be an int >= 0, got {self.top_k!r}")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p!r}")
        if (isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int)
                or self.max_new_tokens < 1):
            raise ValueError(
                f"SamplingParams.max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}")
        try:
            stops = tuple(int(s) for s in self.stop_token_ids)
        except TypeError:
            raise ValueError(f"SamplingParams.stop_token_ids must be a sequence of ints, "
                             f"got {self.stop_token_ids!r}") from None
        if any(s < 0 for s in stops):
            raise ValueError(f"SamplingParams.stop_token_ids must be >= 0, got {stops}")
        object.__setattr__(self, "stop_token_ids", stops)
        object.__setattr__(self, "temperature", float(self.temperature))
        object.__setattr__(self, "top_p", float(self.top_p))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class DecodeSchedule:
    """How the decode loop is run (`sample`'s decode_segments and compact_finished; the config's
    rollout.decode_segments and rollout.compact_finished).

    segments: k >= 1 decode parts, each attending to the cache prefix written so far (1: one
    part over every slot). compact_finished: between parts, continue only the unfinished rows
    (needs segments >= 2). shared_prefix: single-turn groups decode against one prompt cache
    per group (`sample`'s shared_prefix; passed by the group engine, not in `sample_kwargs`).
    """

    segments: int = 1
    compact_finished: bool = False
    shared_prefix: bool = False

    def __post_init__(self):
        if isinstance(self.segments, bool) or not isinstance(self.segments, int) or self.segments < 1:
            raise ValueError(f"DecodeSchedule.segments must be an int >= 1, got {self.segments!r}")
        if not isinstance(self.compact_finished, bool):
            raise ValueError(f"DecodeSchedule.compact_finished must be a bool, got "
                             f"{self.compact_finished!r}")
        if self.compact_finished and self.segments < 2:
            raise ValueError(f"DecodeSchedule.compact_finished=True needs segments >= 2, got "
                             f"segments={self.segments}")
        if not isinstance(self.shared_prefix, bool):
            raise ValueError(f"DecodeSchedule.shared_prefix must be a bool, got "
                             f"{self.shared_prefix!r}")

    @property
    def is_default(self) -> bool:
        """One decode part, no compaction (the single-program loop over every cache slot)."""
        return self.segments == 1 and not self.compact_finished

    def sample_kwargs(self) -> dict:
        """The keyword arguments of `sample` this schedule sets."""
        return dict(decode_segments=self.segments, compact_finished=self.compact_finished)


@struct.dataclass
class SampleOutput:
    """Result of `sample` (a pytree). P = padded prompt length, N = max_new_tokens.

    tokens: int32 [B, P+N] left-padded prompt then completion (pad_id after the stop).
    attention_mask: bool [B, P+N] real tokens (prompt and generated up to the stop).
    positions: int32 [B, P+N] 0-based over real tokens, 0 on padding.
    loss_mask: float32 [B, P+N] 1 on generated tokens up to and including the stop token.
    behavior_logprobs: float32 [B, P+N] sampled-distribution log-probs, 0 off loss_mask.
    lengths: int32 [B] generated tokens (stop included).
    truncated: bool [B] True when the row's length budget (max_new_tokens, or its own
      `max_new_tokens_per_row`) ran out before a stop token.
    """

    tokens: jnp.ndarray
    attention_mask: jnp.ndarray
    positions: jnp.ndarray
    loss_mask: jnp.ndarray
    behavior_logprobs: jnp.ndarray
    lengths: jnp.ndarray
    truncated: jnp.ndarray

    def completions(self, prompt_len: int) -> list:
        """Host-side list of generated id lists (stop token included)."""
        toks = np.asarray(self.tokens)[:, prompt_len:]
        lens = np.asarray(self.lengths)
        return [toks[i, : lens[i]].tolist() for i in range(toks.shape[0])]


def pad_prompts(prompts: Sequence[Sequence[int]], pad_id: int, bucket=None):
    """Left-pads id lists to a common length P.

    bucket: None (P = longest prompt), an int (P rounded up to a multiple of it), or a sequence
    of allowed lengths (the smallest that fits), so jitted shapes stay in a few buckets.
    Returns (tokens int32 [B, P], prompt_mask bool [B, P]) as numpy arrays.
    """
    if not prompts:
        raise ValueError("pad_prompts: prompts is empty")
    lens = [len(p) for p in prompts]
    if min(lens) == 0:
        raise ValueError(f"pad_prompts: prompt {lens.index(0)} is empty")
    longest = max(lens)
    if bucket is None:
        p = longest
    elif isinstance(bucket, int):
        if bucket <= 0:
            raise ValueError(f"pad_prompts: bucket must be positive, got {bucket}")
        p = -(-longest // bucket) * bucket
    else:
        fits = sorted(b for b in bucket if b >= longest)
        if not fits:
            raise ValueError(f"pad_prompts: longest prompt ({longest}) exceeds every bucket {tuple(bucket)}")
        p = fits[0]
    tokens = np.full((len(prompts), p), pad_id, np.int32)
    mask = np.zeros((len(prompts), p), bool)
    for i, ids in enumerate(prompts):
        tokens[i, p - len(ids):] = np.asarray(ids, np.int32)
        mask[i, p - len(ids):] = True
    return tokens, mask


def per_sample_keys(key, batch: int):
    """One typed PRNG key per sample: [B] keys as given, or fold_in(key, b) for a single key."""
    if not jnp.issubdtype(jnp.asarray(key).dtype if not hasattr(key, "dtype") else key.dtype,
                          jax.dtypes.prng_key):
        raw = jnp.asarray(key, jnp.uint32)
        if raw.shape == (2,) or raw.shape == (batch, 2):
            key = jax.random.wrap_key_data(raw)
        else:
            raise ValueError(f"key must be one PRNG key or [B={batch}] keys, got shape {raw.shape}")
    if key.ndim == 0:
        return jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(batch))
    if key.shape != (batch,):
        raise ValueError(f"key must be one PRNG key or [B={batch}] keys, got shape {key.shape}")
    return key


# Top-p candidates: the nucleus threshold is found among the NUCLEUS_CANDIDATES largest logits
# (`lax.top_k`) when they hold the nucleus mass in every row, else from a full sort.
NUCLEUS_CANDIDATES = 256
# The candidates' cumulative mass must exceed top_p by this many machine epsilons of the logits'
# dtype for the fast path, so float rounding in the rest of the cumulative sum (at most about
# two epsilons) cannot keep a token outside them (see `nucleus_threshold`).
_NUCLEUS_MARGIN_EPS = 8


def filter_logits(logits: jnp.ndarray, params: SamplingParams, *,
                  candidates: int = NUCLEUS_CANDIDATES) -> jnp.ndarray:
    """[..., V] logits -> the sampled distribution's logits (temperature, top-k, top-p; -inf off).

    z = logits / temperature; top-k keeps z >= the k-th largest; top-p keeps z >= z_(j*), the
    smallest sorted logit whose mass strictly above it is < top_p (`nucleus_threshold`).
    Removed entries are set to the dtype's most negative finite value. `candidates` (static)
    is the top-p fast path's K: for a given K both branches agree bitwise; different K can
    differ only where a cumulative mass rounds across top_p.
    """
    z, neg = _scaled_top_k(logits, params)
    if params.top_p < 1.0:
        thresh = nucleus_threshold(z, params.top_p, candidates)
        z = jnp.where(z < thresh, neg, z)
    return z


def filter_logits_by_sort(logits: jnp.ndarray, params: SamplingParams) -> jnp.ndarray:
    """`filter_logits` computed by its definition: a full-vocabulary sort on every call.

    The reference the fast path reproduces bitwise (tests) and the baseline it is timed
    against (benchmarks/sampler.py); not used for sampling.
    """
    z, neg = _scaled_top_k(logits, params)
    if params.top_p < 1.0:
        srt = jnp.sort(z, axis=-1)[..., ::-1]
        probs = jax.nn.softmax(srt, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # mass strictly above each sorted entry
        thresh = jnp.min(jnp.where(before < params.top_p, srt, jnp.inf), axis=-1, keepdims=True)
        z = jnp.where(z < thresh, neg, z)
    return z


def _scaled_top_k(logits, params: SamplingParams):
    """(logits / temperature with entries below the k-th largest removed, the removal value)."""
    z = logits / params.temperature
    neg = jnp.finfo(z.dtype).min
    if params.top_k > 0 and params.top_k < z.shape[-1]:
        kth = jax.lax.top_k(z, params.top_k)[0][..., -1:]
        z = jnp.where(z < kth, neg, z)
    return z, neg


def nucleus_threshold(z: jnp.ndarray, top_p: float, candidates: int = NUCLEUS_CANDIDATES):
    """[..., V] logits -> [..., 1] top-p threshold: the smallest kept sorted logit.

    With s the logits sorted descending, q_j = exp(s_j - s_0) / sum_v exp(z_v - s_0) (normalised
    over the full vocabulary) and c_j = q_0 + ... + q_j, entry j is kept when c_j - q_j < top_p.
    Fast path: s_0..s_{K-1} from `lax.top_k(z, K)`, K = min(candidates, V). When every row's
    c_{K-1} >= top_p + margin (8 epsilons of z's dtype), no later entry can be kept (for j >= K,
    c_j - q_j >= c_{K-1} up to about two epsilons of rounding), so the threshold is read off
    the K candidates; otherwise (`lax.cond`) the full sort continues the cumulative sum from
    c_{K-1} over s_K..s_{V-1}. Both branches compute the first K entries with the same
    operations, so they return bitwise the same threshold, and a row's result does not depend
    on which branch its batch took. Under `vmap` the cond becomes a select (both branches run;
    same result).
    """
    if isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 1:
        raise ValueError(f"candidates must be an int >= 1, got {candidates!r}")
    v = z.shape[-1]
    k = min(candidates, v)
    # [..., K] descending. The barrier keeps XLA from folding later slices of `head` into the
    # top-k (on CPU that turns the partial top-k into a full sort of V).
    head = jax.lax.optimization_barrier(jax.lax.top_k(z, k)[0])
    top = head[..., :1]
    total = jnp.sum(jnp.exp(z - top), axis=-1, keepdims=True)
    q_head = jnp.exp(head - top) / total
    c_head = jnp.cumsum(q_head, axis=-1)
    keep_head = (c_head - q_head) < top_p
    t_head = jnp.min(jnp.where(keep_head, head, jnp.inf), axis=-1, keepdims=True)
    if k == v:
        return t_head

    def full(_):
        tail = jnp.sort(z, axis=-1)[..., ::-1][..., k:]  # s_K .. s_{V-1}
        q_tail = jnp.exp(tail - top) / total
        c_tail = c_head[..., -1:] + jnp.cumsum(q_tail, axis=-1)
        keep_tail = (c_tail - q_tail) < top_p
        t_tail = jnp.min(jnp.where(keep_tail, tail, jnp.inf), axis=-1, keepdims=True)
        return jnp.minimum(t_head, t_tail)

    margin = _NUCLEUS_MARGIN_EPS * float(jnp.finfo(z.dtype).eps)  # ~1e-6 for float32
    fits = jnp.all(c_head[..., -1] >= top_p + margin)
    return jax.lax.cond(fits, lambda _: t_head, full, None)


def _ordered_key(x):
    """float32 -> uint32 with the same order (negative floats: all bits flipped; others: the
    sign bit set)."""
    u = jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
    return jnp.where(u >> 31 == 1, ~u, u | jnp.uint32(0x80000000))


def _from_ordered_key(k):
    u = jnp.where(k >> 31 == 1, k & jnp.uint32(0x7FFFFFFF), ~k)
    return jax.lax.bitcast_convert_type(u, jnp.float32)


def nucleus_threshold_bisect(z: jnp.ndarray, top_p: float) -> jnp.ndarray:
    """[..., V] finite float32 logits -> [..., 1] top-p threshold without a sort.

    The same definition as `nucleus_threshold` (the smallest kept sorted logit): with
    q = softmax(z) and M(x) = Σ_{u: z_u > x} q_u (the mass strictly above x, non-increasing in
    x), token v is kept iff M(z_v) < top_p. Bisection over the float32 values in their bit
    order (32 steps, exact on the representable values) finds the smallest x with M(x) < top_p;
    the threshold is the smallest logit >= x. Each step is one masked sum over V, so the work
    is 32 passes over the row and no [V] sort. The masses are plain sums rather than a sorted
    cumulative sum: the kept set can differ from the sort's only where a cumulative mass lies
    within float rounding of top_p.
    """
    z = z.astype(jnp.float32)
    top = jnp.max(z, axis=-1, keepdims=True)
    e = jnp.exp(z - top)
    q = e / jnp.sum(e, axis=-1, keepdims=True)
    lo = _ordered_key(jnp.min(z, axis=-1, keepdims=True)) - jnp.uint32(1)  # M(lo) = 1: not kept
    hi = _ordered_key(top)                                                 # M(hi) = 0: kept

    def step(_, bounds):
        lo, hi = bounds
        mid = lo + (hi - lo) // jnp.uint32(2)
        x = _from_ordered_key(mid)
        kept = jnp.sum(jnp.where(z > x, q, 0.0), axis=-1, keepdims=True) < top_p
        return jnp.where(kept, lo, mid), jnp.where(kept, mid, hi)

    _, hi = jax.lax.fori_loop(0, 32, step, (lo, hi), unroll=True)
    x = _from_ordered_key(hi)
    return jnp.min(jnp.where(z >= x, z, jnp.inf), axis=-1, keepdims=True)


def _choose(logits, keys, step, params: SamplingParams):
    """logits [B, V] f32, keys [B] -> (tokens [B] int32, logprobs [B] f32)."""
    if params.greedy:
        tok = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        lp = jax.nn.log_softmax(logits, axis=-1)
        return tok, jnp.take_along_axis(lp, tok[:, None], axis=-1)[:, 0]
    z = filter_logits(logits, params)
    step_keys = jax.vmap(lambda k: jax.random.fold_in(k, step))(keys)
    tok = jax.vmap(jax.random.categorical)(step_keys, z).astype(jnp.int32)
    lp = jax.nn.log_softmax(z, axis=-1)
    return tok, jnp.take_along_axis(lp, tok[:, None], axis=-1)[:, 0]


def _decode_choice(logits, keys, i, params: SamplingParams, done, out_tok, out_lp, *, pad_id: int,
                   stops):
    """Decode step i's choice for every row: the token and its log-prob (`pad_id` and 0 on rows
    already done) written at column i of out_tok / out_lp [B, N]; done becomes true on a stop
    token. Returns (token [B], out_tok, out_lp, done)."""
    tok, lp = _choose(logits, keys, i, params)
    tok = jnp.where(done, pad_id, tok)
    lp = jnp.where(done, 0.0, lp)
    done = done | jnp.any(tok[:, None] == stops[None, :], axis=1)
    return tok, out_tok.at[:, i].set(tok), out_lp.at[:, i].set(lp), done


def _repeat_rows(x, g: int):
    """[U, ...] -> [U*g, ...]: row u repeated g times (group-major, rows u*g .. u*g+g-1)."""
    return x if g == 1 else jnp.repeat(x, g, axis=0)


def decode_windows(prompt_width: int, max_new_tokens: int, segments: int) -> tuple:
    """((first step, end step, attended slots W), ...) of a decode loop in `segments` parts.

    Steps [first, end) of part j attend to cache slots [0, W) with W = prompt_width + end (the
    last slot any of them writes, plus one): attention reads the live prefix of the cache, not
    all prompt_width + max_new_tokens slots. segments = 1: one part over the whole cache.
    """
    if isinstance(segments, bool) or not isinstance(segments, int) or segments < 1:
        raise ValueError(f"decode segments must be an int >= 1, got {segments!r}")
    n = max_new_tokens
    bounds = sorted({-(-n * j // segments) for j in range(segments + 1)})
    return tuple((a, b, prompt_width + b) for a, b in zip(bounds[:-1], bounds[1:]))


@struct.dataclass
class DecodeState:
    """The decode loop's carry between steps (a pytree; R = rows in the loop, N = max_new_tokens,
    S = P + N cache slots).

    step: int32 [] the next decode step i (every row is at the same step).
    cache: KVCache with R rows of S slots.
    logits: float32 [R, V] next-token logits of each row.
    out_tok: int32 [R, N] generated tokens (pad_id after a row's end).
    out_lp: float32 [R, N] their sampled-distribution log-probs (0 after a row's end).
    done: bool [R] the row has ended (stop token emitted or its budget reached).
    kv_mask: bool [R, S] real cache slots (prompt, then generated tokens).
    keys: [R] typed PRNG keys of the rows (step i draws with fold_in(keys[r], i)).
    prompt_len: int32 [R] real prompt tokens of each row.
    budget: int32 [R] each row's most new tokens (N for every row when not given).
    prefix: None, or with a shared prompt cache (`sample(..., shared_prefix=True)`) the KVCache
      of the U = R / G prompts ([U, P] slots, never written); `cache` then holds only each
      row's generated tokens ([R, N] slots: generated token i at slot i).
    prefix_mask: None, or bool [U, P] the real slots of `prefix`.
    prefix_rows: None (the R rows are the U*G group-major rows in order), or with `prefix` in a
      compacted batch the `PrefixRows` of its rows: row r is sample j of prompt u for
      prefix_rows.index[r] = u*G + j (the prompt cache stays whole, [U, P]).
    """

    step: jnp.ndarray
    cache: KVCache
    logits: jnp.ndarray
    out_tok: jnp.ndarray
    out_lp: jnp.ndarray
    done: jnp.ndarray
    kv_mask: jnp.ndarray
    keys: jnp.ndarray
    prompt_len: jnp.ndarray
    budget: jnp.ndarray
    prefix: KVCache | None = None
    prefix_mask: jnp.ndarray | None = None
    prefix_rows: PrefixRows | None = None


def _prefill(model, prompt_tokens, prompt_mask, keys, budget, *, params: SamplingParams,
             pad_id: int, cache_sharding, num_samples: int, shared_prefix: bool = False):
    """Prefill of U unique prompts, repeated G times: (left-padded prompt tokens [B, P], prompt
    mask [B, P], the DecodeState at step 0 with B = U * G rows). shared_prefix: the prompt
    cache stays [U, P] (`DecodeState.prefix`) and the decode cache holds [B, N] suffix slots."""
    config = model.config
    u, p = prompt_tokens.shape
    g = num_samples
    b = u * g
    n = params.max_new_tokens
    s = p + n
    # Normalise to left padding (stable sort puts padding first, keeps token order).
    order = jnp.argsort(prompt_mask.astype(jnp.int32), axis=1, stable=True)
    prompt_tokens = jnp.take_along_axis(prompt_tokens, order, axis=1)
    prompt_mask = jnp.take_along_axis(prompt_mask, order, axis=1)
    prompt_tokens = jnp.where(prompt_mask, prompt_tokens, pad_id).astype(jnp.int32)
    prompt_len = jnp.sum(prompt_mask, axis=1).astype(jnp.int32)
    positions = jnp.where(prompt_mask, jnp.cumsum(prompt_mask, axis=1) - 1, 0).astype(jnp.int32)

    # Prefill once per unique prompt ([U, S] cache), then repeat every per-row array g times
    # along the batch axis so decoding sees the [B = U*g] batch of the repeated-prompt call.
    # `cache_sharding` constrains both the prefill cache and the repeated decode cache.
    kv_mask = jnp.concatenate([prompt_mask, jnp.zeros((u, n), bool)], axis=1)
    prefix = prefix_mask = None
    if shared_prefix:  # one [U, P] prompt cache per group, a [B, N] suffix cache per row
        prefix = KVCache.init(config, u, p, cache_sharding)
        hidden, prefix = model.forward_cached(prompt_tokens, positions, prompt_mask, prefix, 0)
        prefix_mask = prompt_mask
        cache = KVCache.init(config, b, n, cache_sharding)
    else:
        cache = KVCache.init(config, u, s, cache_sharding)
        hidden, cache = model.forward_cached(prompt_tokens, positions, kv_mask, cache, 0)
    logits = model.project(hidden[:, -1])
    if shared_prefix:
        prompt_tokens, prompt_mask, prompt_len, kv_mask, logits = (
            _repeat_rows(x, g) for x in (prompt_tokens, prompt_mask, prompt_len, kv_mask, logits))
    elif g > 1:
        def grow(x):
            x = _repeat_rows(x, g)
            return x if cache_sharding is None else jax.lax.with_sharding_constraint(
                x, cache_sharding)

        cache = jax.tree.map(grow, cache)
        prompt_tokens, prompt_mask, prompt_len, kv_mask, logits = (
            _repeat_rows(x, g) for x in (prompt_tokens, prompt_mask, prompt_len, kv_mask, logits))
    budget = jnp.full((b,), n, jnp.int32) if budget is None else budget.astype(jnp.int32)
    state = DecodeState(step=jnp.int32(0), cache=cache, logits=logits,
                        out_tok=jnp.full((b, n), pad_id, jnp.int32),
                        out_lp=jnp.zeros((b, n), jnp.float32), done=jnp.zeros((b,), bool),
                        kv_mask=kv_mask, keys=keys, prompt_len=prompt_len, budget=budget,
                        prefix=prefix, prefix_mask=prefix_mask)
    return prompt_tokens, prompt_mask, state


def _decode_segment(model, state: DecodeState, end, *, width: int, prompt_width: int,
                    params: SamplingParams, pad_id: int, budgets: bool) -> DecodeState:
    """Decode steps state.step .. end - 1 (a `lax.while_loop` that exits early once every row is
    done); attention reads cache slots [0, width) (all of them when width >= S). `budgets`
    (static): rows also end at their own `budget`."""
    p = prompt_width
    s = state.kv_mask.shape[1]
    stops = jnp.asarray(params.stop_token_ids or (-1,), jnp.int32)

    def cond(c):
        return (c.step < end) & ~jnp.all(c.done)

    def body(c):
        i = c.step
        kv_mask = c.kv_mask.at[:, p + i].set(~c.done)
        tok, out_tok, out_lp, done = _decode_choice(c.logits, c.keys, i, params, c.done,
                                                    c.out_tok, c.out_lp, pad_id=pad_id,
                                                    stops=stops)
        if budgets:  # a row that has now generated its budget ends like at a stop token
            done = done | (i + 1 >= c.budget)
        if c.prefix is not None:  # shared prompt cache: the token goes to suffix slot i
            hidden, cache = model.forward_shared(tok[:, None], (c.prompt_len + i)[:, None],
                                                 c.prefix, c.prefix_mask, kv_mask[:, p:], c.cache,
                                                 i, kv_len=None if width >= s else width - p,
                                                 rows=c.prefix_rows)
        else:
            hidden, cache = model.forward_cached(tok[:, None], (c.prompt_len + i)[:, None],
                                                 kv_mask, c.cache, p + i,
                                                 kv_len=None if width >= s else width)
        logits = model.project(hidden[:, 0])
        return c.replace(step=i + 1, cache=cache, logits=logits, out_tok=out_tok, out_lp=out_lp,
                         done=done, kv_mask=kv_mask)

    return jax.lax.while_loop(cond, body, state)


def _finish(prompt_tokens, prompt_mask, out_tok, out_lp, gen_mask, *, params: SamplingParams):
    """The SampleOutput of B rows from the prompts [B, P] and the generated tokens, log-probs
    and real-token mask [B, N]; truncated: no stop token among a row's generated tokens."""
    b, p = prompt_tokens.shape
    stops = jnp.asarray(params.stop_token_ids or (-1,), jnp.int32)
    lengths = jnp.sum(gen_mask, axis=1).astype(jnp.int32)
    stopped = jnp.any(gen_mask & jnp.any(out_tok[..., None] == stops, axis=-1), axis=1)
    tokens = jnp.concatenate([prompt_tokens, out_tok], axis=1)
    attention_mask = jnp.concatenate([prompt_mask, gen_mask], axis=1)
    loss_mask = jnp.concatenate([jnp.zeros((b, p), bool), gen_mask], axis=1)
    pos = jnp.where(attention_mask, jnp.cumsum(attention_mask, axis=1) - 1, 0).astype(jnp.int32)
    blp = jnp.concatenate([jnp.zeros((b, p), jnp.float32), jnp.where(gen_mask, out_lp, 0.0)], 1)
    return SampleOutput(tokens=tokens, attention_mask=attention_mask, positions=pos,
                        loss_mask=loss_mask.astype(jnp.float32), behavior_logprobs=blp,
                        lengths=lengths, truncated=~stopped)


@partial(jax.jit, static_argnames=("graphdef", "params", "pad_id", "cache_sharding",
                                   "num_samples", "decode_segments", "shared_prefix"))
def _sample_impl(graphdef, state, prompt_tokens, prompt_mask, keys, budget=None, *,
                 params: SamplingParams, pad_id: int, cache_sharding=None, num_samples: int = 1,
                 decode_segments: int = 1, shared_prefix: bool = False):
    model = nnx.merge(graphdef, state)
    p = prompt_tokens.shape[1]
    prompt_tokens, prompt_mask, carry = _prefill(
        model, prompt_tokens, prompt_mask, keys, budget, params=params, pad_id=pad_id,
        cache_sharding=cache_sharding, num_samples=num_samples, shared_prefix=shared_prefix)
    # decode_segments > 1: step i of part j attends to the slots [0, p + end_j) only
    for _, end, width in decode_windows(p, params.max_new_tokens, decode_segments):
        carry = _decode_segment(model, carry, end, width=width, prompt_width=p, params=params,
                                pad_id=pad_id, budgets=budget is not None)
    return _finish(prompt_tokens, prompt_mask, carry.out_tok, carry.out_lp, carry.kv_mask[:, p:],
                   params=params)


# ----------------------------------------------------------------------------- compaction
def compact_bucket(live: int, rows: int, shards: int = 1) -> int:
    """Rows the decode batch keeps for `live` unfinished rows out of `rows`: the smallest power
    of two >= live and >= 2 * shards, rounded up to a multiple of `shards` (the mesh's batch
    shards), never more than `rows` (then the batch is not compacted).

    At least two rows per shard: XLA computes a one-row matrix product as a matrix-vector
    product, whose float rounding differs from the batched product's, so a batch of one would
    break the bitwise equality with the uncompacted loop.
    """
    if live < 1 or rows < live or shards < 1:
        raise ValueError(f"compact_bucket: need 1 <= live <= rows and shards >= 1, got "
                         f"live={live}, rows={rows}, shards={shards}")
    b = 1 << (max(live, 2 * shards) - 1).bit_length()
    b = -(-b // shards) * shards
    return min(b, rows)


@partial(jax.jit, static_argnames=("graphdef", "params", "pad_id", "cache_sharding",
                                   "num_samples", "shared_prefix"))
def _prefill_jit(graphdef, state, prompt_tokens, prompt_mask, keys, budget, *, params, pad_id,
                 cache_sharding, num_samples, shared_prefix=False):
    return _prefill(nnx.merge(graphdef, state), prompt_tokens, prompt_mask, keys, budget,
                    params=params, pad_id=pad_id, cache_sharding=cache_sharding,
                    num_samples=num_samples, shared_prefix=shared_prefix)


@partial(jax.jit, static_argnames=("graphdef", "width", "prompt_width", "params", "pad_id",
                                   "budgets"), donate_argnames=("carry",))
def _segment_jit(graphdef, state, carry, end, *, width, prompt_width, params, pad_id, budgets):
    return _decode_segment(nnx.merge(graphdef, state), carry, end, width=width,
                           prompt_width=prompt_width, params=params, pad_id=pad_id,
                           budgets=budgets)


@partial(jax.jit, static_argnames=("prompt_width",), donate_argnames=("out",))
def _scatter_rows(out, carry: DecodeState, rows, *, prompt_width: int):
    """Writes the loop's rows into the full [B, N] outputs (out_tok, out_lp, gen_mask) at
    `rows` [R] (an index >= B: a padding row, dropped)."""
    tok, lp, gen = out
    return (tok.at[rows].set(carry.out_tok, mode="drop"),
            lp.at[rows].set(carry.out_lp, mode="drop"),
            gen.at[rows].set(carry.kv_mask[:, prompt_width:], mode="drop"))


@partial(jax.jit, static_argnames=("batch_sharding", "cache_sharding"))
def _gather_rows(carry: DecodeState, index, pad, *, batch_sharding=None, cache_sharding=None,
                 prefix_rows: PrefixRows | None = None):
    """The loop state of rows `index` [R'] (pad [R']: padding rows, set done). With a shared
    prompt cache the (suffix) cache is gathered like every per-row array, the prompt cache is
    kept as is and `prefix_rows` ([R']) says which group row each gathered row is."""
    def place(x, sharding):
        return x if sharding is None else jax.lax.with_sharding_constraint(x, sharding)

    def take(x, sharding):
        return place(jnp.take(x, index, axis=0), sharding)

    rows = {f: take(getattr(carry, f), batch_sharding)
            for f in ("logits", "out_tok", "out_lp", "done", "kv_mask", "keys", "prompt_len",
                      "budget")}
    rows["done"] = rows["done"] | pad
    if prefix_rows is not None:
        rows["prefix_rows"] = prefix_rows.replace(index=place(prefix_rows.index, batch_sharding))
    return carry.replace(cache=jax.tree.map(lambda x: take(x, cache_sharding), carry.cache), **rows)


_finish_jit = jax.jit(_finish, static_argnames=("params",))


def _sample_compacted(graphdef, state, config, prompt_tokens, prompt_mask, keys, budget, *,
                      params: SamplingParams, pad_id: int, num_samples: int, segments: int,
                      sharding=None, real_rows=None, shared_prefix: bool = False) -> SampleOutput:
    """The segmented decode loop driven from the host, finished rows compacted out between
    segments (`sample(..., compact_finished=True)`).

    After each segment the host reads `done`; when the unfinished rows fit a smaller
    `compact_bucket`, their loop state (cache, logits, outputs, masks, keys, prompt lengths,
    budgets) is gathered into that many rows (padding rows: copies of the first unfinished row,
    marked done) and the next segments run on them; every row's outputs are scattered back to
    its place in the full [B, N] arrays. A row's computation does not involve the other rows
    (per-row keys fold_in(key_b, i), per-row attention), so each row's tokens and log-probs are
    those of the uncompacted loop with the same segments.

    shared_prefix: the [U, P] prompt cache stays whole through every segment (never gathered);
    each gathered row carries its place u*G + j among the group rows (`DecodeState.prefix_rows`)
    and its own suffix cache. The padding rows take the places of finished rows, distinct from
    the live rows' (their prompts are real ones; their outputs are dropped).
    """
    u, p = prompt_tokens.shape
    b = u * num_samples
    n = params.max_new_tokens
    shards = 1 if sharding is None else sharding.shards
    batch_sh = None if sharding is None else sharding.batch
    prompt_tokens, prompt_mask, carry = _prefill_jit(
        graphdef, state, prompt_tokens, prompt_mask, keys, budget, params=params, pad_id=pad_id,
        cache_sharding=None if sharding is None else sharding.cache(config, u),
        num_samples=num_samples, shared_prefix=shared_prefix)
    # the segments donate their carry: its keys must not be the caller's buffer (prefill may
    # forward its `keys` argument as is)
    carry = carry.replace(keys=jnp.array(carry.keys, copy=True))
    out = (jnp.full((b, n), pad_id, jnp.int32), jnp.zeros((b, n), jnp.float32),
           jnp.zeros((b, n), bool))
    if sharding is not None:
        out = jax.device_put(out, batch_sh)
    # rows[r]: the output row of loop row r; b marks a padding row (never kept, not written):
    # the sharded call's copies of row 0 beyond `real_rows`, and the compacted batch's padding
    real = b if real_rows is None else int(real_rows)
    rows = np.where(np.arange(b) < real, np.arange(b), b)
    places = np.arange(b)  # each loop row's place u*G + j among the group rows (shared_prefix)
    for _, end, width in decode_windows(p, n, segments):
        carry = _segment_jit(graphdef, state, carry, jnp.int32(end), width=width, prompt_width=p,
                             params=params, pad_id=pad_id, budgets=budget is not None)
        done = np.asarray(jax.device_get(carry.done))
        live = np.flatnonzero(~done & (rows < b))
        if live.size == 0 or end == n:
            break
        size = compact_bucket(live.size, rows.size, shards)
        if size < rows.size:
            out = _scatter_rows(out, carry, jnp.asarray(rows), prompt_width=p)
            index = np.concatenate([live, np.full(size - live.size, live[0])])
            pad = np.arange(size) >= live.size
            prefix_rows = None
            if shared_prefix:  # padding rows: distinct places of finished rows
                free = np.setdiff1d(np.arange(b), places[live])[:size - live.size]
                places = np.concatenate([places[live], free])
                prefix_rows = PrefixRows(index=jnp.asarray(places, jnp.int32),
                                         group_size=num_samples)
            carry = _gather_rows(
                carry, jnp.asarray(index), jnp.asarray(pad), batch_sharding=batch_sh,
                cache_sharding=None if sharding is None else sharding.cache(config, size),
                prefix_rows=prefix_rows)
            rows = np.where(pad, b, rows[index])
    out = _scatter_rows(out, carry, jnp.asarray(rows), prompt_width=p)
    return _finish_jit(prompt_tokens, prompt_mask, *out, params=params)


def sample(model, prompt_tokens, prompt_mask, key, params: SamplingParams, *, pad_id: int,
           cache_sharding=None, num_samples: int = 1, decode_segments: int = 1,
           compact_finished: bool = False, max_new_tokens_per_row=None,
           sharding=None, shared_prefix: bool = False) -> SampleOutput:
    """Samples completions for a padded prompt batch (see the module docstring).

    Args:
      model: an `rlvr.models.Transformer`.
      prompt_tokens: int [U, P] (left- or right-padded); prompt_mask: bool [U, P], True on real
        tokens (contiguous, at least one per row).
      key: one PRNG key (expanded per output row: fold_in(key, b), b < B) or [B] keys,
        B = U * num_samples.
      params: SamplingParams (static: each distinct value compiles once).
      pad_id: id written on padding and after the stop token.
      cache_sharding: optional sharding for each layer's decode KV cache [B, S, K, H]
        (`rlvr.parallel.kv_cache_sharding(mesh)`).
      num_samples: G >= 1 completions per prompt (static). The prompts are prefilled once
        ([U, P]); the KV cache, last-position logits and per-row state are then repeated G times
        along the batch axis. Output row u*G + j is sample j of prompt u (group-major): the same
        layout, keys and distribution as passing each prompt G times with num_samples=1.
      decode_segments: static k >= 1: the decode loop runs in k consecutive parts, part j's
        attention reading only the cache slots written so far by its last step (prompt + its
        end step, `decode_windows`) instead of all P + max_new_tokens slots; the same tokens
        and log-probs up to float rounding, k compiled copies of the decode step. 1: one part.
      compact_finished: with decode_segments k > 1: the host runs the k parts one by one and,
        after each, reads which rows are done and continues only the unfinished ones, gathered
        into the smallest `compact_bucket` (a power of two, a multiple of the mesh's batch
        shards when sharded) that holds them; finished rows' outputs are scattered back in
        place. Each row's tokens, log-probs and lengths equal those of the same call without
        compaction (same decode_segments), bitwise on one device; decode time then follows the
        rows still running instead of the longest row. Compiles one decode program per
        (part, bucket size) met, and synchronises with the host once per part.
      max_new_tokens_per_row: optional int [B] in [1, max_new_tokens]: row b ends after
        generating max_new_tokens_per_row[b] tokens (like a stop token, but `truncated` stays
        True: no stop token was emitted). None: every row's budget is max_new_tokens.
      sharding: optional `rlvr.parallel.GenerationSharding`: prompts, keys, per-row state and
        the KV cache are split on the batch dimension over its mesh (U padded to a multiple of
        its batch shards with copies of row 0, dropped from the output); each row's tokens and
        keys are those of the unsharded call. Overrides `cache_sharding`.
      shared_prefix: with num_samples G >= 2: the prompt cache stays one [U, P] cache per group
        and each row's generated tokens go to its own [B, max_new_tokens] suffix cache; decode
        attention merges the group's prefix (read once for its G rows) and the row's suffix by
        log-sum-exp (`rlvr.models.transformer.shared_prefix_attention`). Same tokens, log-probs
        equal up to float rounding; the decode KV cache shrinks from B·(P + N) to U·P + B·N
        slots per layer. With compact_finished the prompt cache stays whole and the gathered
        rows keep their suffix caches and their place in the groups (bitwise the rows of the
        uncompacted shared call on one device). Refused with G = 1 and on models with
        sliding-window layers.

    Returns:
      SampleOutput with B = U * num_samples rows of length P + max_new_tokens.
    """
    if not isinstance(params, SamplingParams):
        raise ValueError(f"params must be SamplingParams, got {type(params).__name__}")
    if (isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer))
            or num_samples < 1):
        raise ValueError(f"num_samples must be an int >= 1, got {num_samples!r}")
    num_samples = int(num_samples)
    prompt_tokens = jnp.asarray(prompt_tokens)
    prompt_mask = jnp.asarray(prompt_mask).astype(bool)
    chex.assert_rank([prompt_tokens, prompt_mask], 2)
    chex.assert_equal_shape([prompt_tokens, prompt_mask])
    if not jnp.issubdtype(prompt_tokens.dtype, jnp.integer):
        raise ValueError(f"prompt_tokens must be integer, got {prompt_tokens.dtype}")
    if not isinstance(prompt_mask, jax.core.Tracer) and not bool(jnp.all(jnp.any(prompt_mask, 1))):
        raise ValueError("prompt_mask has a row with no real token")
    b = prompt_tokens.shape[0] * num_samples
    keys = per_sample_keys(key, b)
    decode_windows(1, 1, decode_segments)  # validates decode_segments
    if not isinstance(compact_finished, (bool, np.bool_)):
        raise ValueError(f"compact_finished must be a bool, got {compact_finished!r}")
    if compact_finished and decode_segments < 2:
        raise ValueError(f"compact_finished=True needs decode_segments >= 2 (rows are compacted "
                         f"between decode parts), got decode_segments={decode_segments}")
    if compact_finished and cache_sharding is not None and sharding is None:
        raise ValueError("compact_finished=True places the compacted batches itself: pass "
                         "sharding=GenerationSharding(...) instead of cache_sharding")
    if not isinstance(shared_prefix, (bool, np.bool_)):
        raise ValueError(f"shared_prefix must be a bool, got {shared_prefix!r}")
    shared_prefix = bool(shared_prefix)
    if shared_prefix:
        if num_samples < 2:
            raise ValueError(f"shared_prefix=True shares one prompt cache among a group's "
                             f"samples: needs num_samples >= 2, got {num_samples}")
        config = model.config
        if any(config.is_sliding(layer) for layer in range(config.num_layers)):
            raise ValueError("shared_prefix=True does not support models with sliding-window "
                             "attention layers")
    budget = _row_budgets(max_new_tokens_per_row, b, params.max_new_tokens)
    graphdef, state = nnx.split(model)
    if sharding is not None:
        return _sample_sharded(graphdef, state, model.config, prompt_tokens.astype(jnp.int32),
                               prompt_mask, keys, budget, params=params, pad_id=int(pad_id),
                               num_samples=num_samples, sharding=sharding,
                               decode_segments=decode_segments,
                               compact_finished=bool(compact_finished),
                               shared_prefix=shared_prefix)
    if compact_finished:
        return _sample_compacted(graphdef, state, model.config, prompt_tokens.astype(jnp.int32),
                                 prompt_mask, keys, budget, params=params, pad_id=int(pad_id),
                                 num_samples=num_samples, segments=decode_segments,
                                 shared_prefix=shared_prefix)
    return _sample_impl(graphdef, state, prompt_tokens.astype(jnp.int32), prompt_mask, keys,
                        budget, params=params, pad_id=int(pad_id), cache_sharding=cache_sharding,
                        num_samples=num_samples, decode_segments=decode_segments,
                        shared_prefix=shared_prefix)


def _row_budgets(budget, rows: int, max_new_tokens: int):
    """max_new_tokens_per_row checked: None, or an int32 [rows] array in [1, max_new_tokens]."""
    if budget is None:
        return None
    if isinstance(budget, jax.core.Tracer):
        raise ValueError("max_new_tokens_per_row must be a concrete array (host values), "
                         "not a traced value")
    arr = np.asarray(budget)
    if arr.shape != (rows,) or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise ValueError(f"max_new_tokens_per_row must be an int array of shape [B={rows}], got "
                         f"shape {arr.shape} dtype {arr.dtype}")
    if arr.min() < 1 or arr.max() > max_new_tokens:
        raise ValueError(f"max_new_tokens_per_row must lie in [1, max_new_tokens="
                         f"{max_new_tokens}], got values in [{arr.min()}, {arr.max()}]")
    return jnp.asarray(arr, jnp.int32)


def _sample_sharded(graphdef, state, config, prompt_tokens, prompt_mask, keys, budget=None, *,
                    params, pad_id, num_samples, sharding, decode_segments: int = 1,
                    compact_finished: bool = False, shared_prefix: bool = False) -> SampleOutput:
    """`_sample_impl` (or `_sample_compacted`) with the batch split over `sharding`'s mesh: U
    prompts padded to a multiple of its batch shards (copies of prompt 0, its keys and budgets),
    placed with `sharding.batch`, the KV cache constrained to `sharding.cache`; the padding rows
    are dropped from the output (and never kept alive by compaction)."""
    u, g = prompt_tokens.shape[0], num_samples
    extra = sharding.padded_rows(u) - u
    if extra:
        prompt_tokens = jnp.concatenate([prompt_tokens, jnp.repeat(prompt_tokens[:1], extra, 0)])
        prompt_mask = jnp.concatenate([prompt_mask, jnp.repeat(prompt_mask[:1], extra, 0)])
        keys = jnp.concatenate([keys, jnp.repeat(keys[:1], extra * g, 0)])
        if budget is not None:
            budget = jnp.concatenate([budget, jnp.repeat(budget[:1], extra * g, 0)])
    prompt_tokens, prompt_mask, keys = jax.device_put((prompt_tokens, prompt_mask, keys),
                                                      sharding.batch)
    if budget is not None:
        budget = jax.device_put(budget, sharding.batch)
    if compact_finished:
        out = _sample_compacted(graphdef, state, config, prompt_tokens, prompt_mask, keys, budget,
                                params=params, pad_id=pad_id, num_samples=g,
                                segments=decode_segments, sharding=sharding, real_rows=u * g,
                                shared_prefix=shared_prefix)
    else:
        out = _sample_impl(graphdef, state, prompt_tokens, prompt_mask, keys, budget,
                           params=params, pad_id=pad_id,
                           cache_sharding=sharding.cache(config, u + extra), num_samples=g,
                           decode_segments=decode_segments, shared_prefix=shared_prefix)
    return jax.tree.map(lambda x: x[:u * g], out) if extra else out
