"""Cross-turn KV cache: per-row cache indices in the model, and KVSession (chunked prefill at
each row's offset, empty chunks, compaction as episodes end, bounds) against re-prefilling."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr.models import KVCache, Transformer
from rlvr.models.transformer import cached_mask
from rlvr.rollout.agent_loop import sample_turn
from rlvr.rollout.sampler import SamplingParams, per_sample_keys
from rlvr.rollout.session import KVSession, chunk_length_bucket
from tests.models.helpers import tiny_config


@pytest.fixture(scope="module")
def model():
    return Transformer(tiny_config(), rngs=nnx.Rngs(0))


def _cached_step(model):
    graphdef, state = nnx.split(model)

    @jax.jit
    def step(state, tokens, positions, kv_mask, cache, index):
        m = nnx.merge(graphdef, state)
        return m.forward_cached(tokens, positions, kv_mask, cache, index)

    return lambda *a: step(state, *a)


def test_per_row_index_with_equal_rows_is_the_scalar_path(model):
    """A [B] index whose entries agree writes and masks exactly like the scalar index."""
    rng = np.random.RandomState(0)
    b, s, t = 3, 12, 4
    toks = jnp.asarray(rng.randint(3, 48, (b, t)), jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(5, 5 + t), (b, t))
    kv_mask = jnp.asarray(np.arange(s)[None] < 9).repeat(b, 0)
    cache = KVCache.init(model.config, b, s)
    cache = jax.tree.map(lambda x: jnp.asarray(rng.randn(*x.shape), x.dtype), cache)
    step = _cached_step(model)
    h_s, c_s = step(toks, pos, kv_mask, cache, 5)
    h_v, c_v = step(toks, pos, kv_mask, cache, jnp.full((b,), 5, jnp.int32))
    np.testing.assert_array_equal(np.asarray(h_s), np.asarray(h_v))
    for a, v in zip(jax.tree.leaves(c_s), jax.tree.leaves(c_v)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(v))
    np.testing.assert_array_equal(np.asarray(cached_mask(kv_mask, 5, t)),
                                  np.asarray(cached_mask(kv_mask, jnp.full((b,), 5), t)))


def test_per_row_index_chunks_equal_full_forward(model):
    """Rows of different lengths fed in two chunks at their own offsets (right-padded chunks,
    the second one running past the cache's end for one row) give the full forward's hidden
    states on every real token."""
    rng = np.random.RandomState(1)
    lens1, lens2 = [2, 5, 3], [4, 1, 3]
    s = 7  # row 1: 5 + 1 real tokens; its padded second chunk (4 slots) would end at slot 8 > 6
    streams = [list(rng.randint(3, 48, a + b)) for a, b in zip(lens1, lens2)]
    step = _cached_step(model)
    cache = KVCache.init(model.config, 3, s)
    got = [[] for _ in streams]
    start = np.zeros(3, np.int32)
    for lens in (lens1, lens2):
        c = max(lens)
        toks = np.zeros((3, c), np.int32)
        for i, (st, n) in enumerate(zip(streams, lens)):
            toks[i, :n] = st[start[i]:start[i] + n]
        pos = start[:, None] + np.arange(c)[None]
        kv_mask = np.arange(s)[None] < (start + np.asarray(lens))[:, None]
        h, cache = step(jnp.asarray(toks), jnp.asarray(pos), jnp.asarray(kv_mask), cache,
                        jnp.asarray(start))
        for i, n in enumerate(lens):
            got[i].append(np.asarray(h)[i, :n])
        start = start + np.asarray(lens)
    for i, st in enumerate(streams):
        ref_h = np.asarray(model.hidden_states(jnp.asarray([st])))[0]
        np.testing.assert_allclose(np.concatenate(got[i]), ref_h, atol=1e-5, rtol=1e-5)


def _reprefill(model, streams, keys, params):
    ts = sample_turn(model, streams, keys, params, tokenizer=_Tok(), terminator_id=99,
                     prompt_bucket=4)
    p = ts.tokens.shape[1] - params.max_new_tokens
    return ts.action_ids, [list(ts.behavior_logprobs[i, p:p + len(a)]) for i, a in enumerate(ts.action_ids)]


class _Tok:
    pad_id, eos_id = 0, 2

    def decode(self, ids):
        return " ".join(map(str, ids))


def test_session_turns_equal_reprefill_with_empty_chunks_and_compaction(model):
    """Three turns of 5 episodes: episodes leave (rows compacted to the next bucket), one gets
    an empty observation (its last token is fed again); every action equals the re-prefill
    sampler's for the same key."""
    params = SamplingParams(max_new_tokens=5, temperature=1.0, stop_token_ids=(7, 11))
    rng = np.random.RandomState(2)
    streams = {i: [1] + list(rng.randint(3, 48, 2 + i)) for i in range(5)}
    keys = per_sample_keys(jax.random.PRNGKey(3), 5)
    sess = KVSession(model, max_tokens=64, pad_id=0, batch_bucket=0, chunk_bucket=4)
    schedule = [[0, 1, 2, 3, 4], [0, 2, 3, 4], [2, 4]]  # rows 5 -> 4 -> 2 (buckets 8, 4, 2)
    prefilled = []
    for t, ids in enumerate(schedule):
        k = jax.vmap(lambda x: jax.random.fold_in(x, t))(keys[np.asarray(ids)])
        st = [list(streams[i]) for i in ids]
        got = sess.turn(ids, st, k, params)
        ref_ids, ref_lps = _reprefill(model, st, k, params)
        assert got.action_ids == ref_ids
        for a, r in zip(got.logprobs, ref_lps):
            np.testing.assert_allclose(a, r, atol=1e-5, rtol=0)
        assert sess.cache.k[0].shape[0] == {5: 8, 4: 4, 2: 2}[len(ids)]
        prefilled.append(got.prefill_tokens)
        for j, i in enumerate(ids):
            obs = [] if (t == 0 and i == 2) else list(rng.randint(3, 48, 1 + (i + t) % 3))
            streams[i] = streams[i] + got.action_ids[j] + obs
    assert prefilled[0] == sum(3 + i for i in range(5))  # the prompts
    assert prefilled[1] < sum(len(streams[i]) for i in schedule[1])


def test_session_bounds_are_named(model):
    params = SamplingParams(max_new_tokens=4)
    sess = KVSession(model, max_tokens=8, pad_id=0)
    keys = per_sample_keys(jax.random.PRNGKey(0), 1)
    with pytest.raises(ValueError, match="max_new_tokens=4"):
        sess.turn([0], [[1, 2, 3, 4, 5]], keys, params)
    sess.turn([0], [[1, 2]], keys, params)
    with pytest.raises(ValueError, match="shrank"):
        sess.turn([0], [[1]], keys, params)
    with pytest.raises(ValueError, match="batch_bucket"):
        KVSession(model, max_tokens=8, pad_id=0, batch_bucket=-1)
    assert [chunk_length_bucket(n, 0) for n in (1, 3, 5, 9)] == [1, 4, 8, 16]
    assert [chunk_length_bucket(n, 4) for n in (1, 4, 5)] == [4, 4, 8]
