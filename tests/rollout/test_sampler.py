"""Sampler: KV cache = recomputation, greedy = step-by-step argmax, log-probs = scorer,
padding invariance, per-sample keys, stop tokens, filters, helpers; shared prefill per group
(num_samples) = the repeated-prompt call; the top-p fast path = the full-sort filter bitwise."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr.models import KVCache, Transformer
from rlvr.rollout.sampler import (NUCLEUS_CANDIDATES, SamplingParams, filter_logits,
                                  filter_logits_by_sort, pad_prompts, sample)
from tests.models.helpers import jit_forward, jit_logprobs, np_log_softmax, tiny_config

PAD = 0
PROMPTS = [[1, 5, 6, 7, 8], [1, 9], [1, 3, 4, 5, 6, 7, 9]]


@pytest.fixture(scope="module")
def model():
    return Transformer(tiny_config(), rngs=nnx.Rngs(0))


def test_kv_cache_decoding_equals_full_recomputation(model):
    toks, mask = pad_prompts(PROMPTS, PAD)
    b, p = toks.shape
    extra = np.random.RandomState(0).randint(3, 48, (b, 4)).astype(np.int32)
    full_tokens = np.concatenate([toks, extra], 1)
    full_mask = np.concatenate([mask, np.ones_like(extra, bool)], 1)
    pos = np.where(full_mask, np.cumsum(full_mask, 1) - 1, 0)
    ref = np.asarray(jit_forward(model, full_tokens, pos, full_mask))
    s = p + 4
    cache = KVCache.init(model.config, b, s)
    kv_mask = jnp.asarray(np.concatenate([mask, np.zeros((b, 4), bool)], 1))
    graphdef, state = nnx.split(model)

    @jax.jit
    def step(state, tokens, positions, kv_mask, cache, index):
        m = nnx.merge(graphdef, state)
        h, cache = m.forward_cached(tokens, positions, kv_mask, cache, index)
        return m.project(h[:, -1]), cache

    logits, cache = step(state, jnp.asarray(toks), jnp.asarray(pos[:, :p]), kv_mask, cache, 0)
    got = [np.asarray(logits)]
    for i in range(4):
        kv_mask = kv_mask.at[:, p + i].set(True)
        logits, cache = step(state, jnp.asarray(extra[:, i:i + 1]),
                             jnp.asarray(pos[:, p + i:p + i + 1]), kv_mask, cache, p + i)
        got.append(np.asarray(logits))
    for i, g in enumerate(got):
        np.testing.assert_allclose(g, ref[:, p - 1 + i], atol=1e-5)


def test_greedy_equals_stepwise_argmax(model):
    toks, mask = pad_prompts(PROMPTS, PAD)
    n = 6
    out = sample(model, toks, mask, jax.random.key(0), SamplingParams(greedy=True, max_new_tokens=n),
                 pad_id=PAD)
    assert out.tokens.shape == (3, toks.shape[1] + n)
    width = max(map(len, PROMPTS)) + n  # right-padded fixed width: one compile, causal
    for i, prompt in enumerate(PROMPTS):
        seq = list(prompt)
        for _ in range(n):
            buf = np.zeros((1, width), np.int32)
            buf[0, :len(seq)] = seq
            logits = np.asarray(jit_forward(model, buf))[0, len(seq) - 1]
            seq.append(int(np.argmax(logits)))
        np.testing.assert_array_equal(np.asarray(out.tokens[i, -n:]), seq[len(prompt):])
        # greedy records the temperature-1 log-prob of the chosen token
        lp = np.asarray(jit_logprobs(model, np.asarray([seq]))[0])[0, len(prompt):]
        np.testing.assert_allclose(np.asarray(out.behavior_logprobs[i, -n:]), lp, atol=1e-5)
    assert np.all(np.asarray(out.truncated)) and np.all(np.asarray(out.lengths) == n)


@pytest.fixture(scope="module")
def sampled(model):
    """Temperature 0.8 samples with a stop token; computed once for several tests."""
    toks, mask = pad_prompts(PROMPTS, PAD)
    keys = jax.random.split(jax.random.key(42), len(PROMPTS))
    params = SamplingParams(temperature=0.8, max_new_tokens=10, stop_token_ids=(2, 7))
    return toks, mask, keys, params, sample(model, toks, mask, keys, params, pad_id=PAD)


def test_sampler_logprobs_equal_scorer(model, sampled):
    _, _, _, params, out = sampled
    lp, _ = jit_logprobs(model, out.tokens, out.positions, out.attention_mask,
                         temperature=params.temperature)
    np.testing.assert_allclose(np.asarray(lp * out.loss_mask), np.asarray(out.behavior_logprobs),
                               atol=1e-5)
    assert np.all(np.asarray(out.behavior_logprobs)[np.asarray(out.loss_mask) == 0] == 0)
    assert np.all(np.asarray(out.behavior_logprobs)[np.asarray(out.loss_mask) == 1] < 0)


def test_stop_tokens_masks_and_lengths(sampled):
    toks, mask, _, params, out = sampled
    p, n = toks.shape[1], params.max_new_tokens
    gen = np.asarray(out.tokens)[:, p:]
    lengths, trunc = np.asarray(out.lengths), np.asarray(out.truncated)
    lm, am = np.asarray(out.loss_mask), np.asarray(out.attention_mask)
    for i in range(gen.shape[0]):
        stops = [j for j in range(n) if gen[i, j] in params.stop_token_ids]
        if stops:
            assert lengths[i] == stops[0] + 1 and not trunc[i]
            assert np.all(gen[i, lengths[i]:] == PAD)
        else:
            assert lengths[i] == n and trunc[i]
        assert lm[i, :p].sum() == 0 and lm[i, p:].sum() == lengths[i]
        np.testing.assert_array_equal(am[i], np.concatenate([mask[i], np.arange(n) < lengths[i]]))
    np.testing.assert_array_equal(np.asarray(out.positions),
                                  np.where(am, np.cumsum(am, 1) - 1, 0))
    assert not np.all(trunc)  # the stop set was chosen so that some row stops


def test_padding_keys_and_batch_independence(model, sampled):
    toks, mask, keys, params, out = sampled
    p = toks.shape[1]
    gen = np.asarray(out.tokens)[:, p:]
    blp = np.asarray(out.behavior_logprobs)[:, p:]
    # same keys -> same samples
    again = sample(model, toks, mask, keys, params, pad_id=PAD)
    np.testing.assert_array_equal(np.asarray(again.tokens), np.asarray(out.tokens))
    # more left padding (bucket 12), right padding, and a different batch (reversed, row alone)
    t12, m12 = pad_prompts(PROMPTS, PAD, bucket=12)
    right_t = np.full_like(t12, PAD)
    right_m = np.zeros_like(m12)
    for i, pr in enumerate(PROMPTS):
        right_t[i, :len(pr)] = pr
        right_m[i, :len(pr)] = True
    for tt, mm, order in ((t12, m12, [0, 1, 2]), (right_t, right_m, [0, 1, 2]),
                          (t12[::-1], m12[::-1], [2, 1, 0])):
        o = sample(model, tt, mm, keys[np.array(order)], params, pad_id=PAD)
        g = np.asarray(o.tokens)[:, tt.shape[1]:]
        lp = np.asarray(o.behavior_logprobs)[:, tt.shape[1]:]
        np.testing.assert_array_equal(g, gen[order])
        np.testing.assert_allclose(lp, blp[order], atol=1e-5)
    alone = sample(model, toks[1:2], mask[1:2], keys[1:2], params, pad_id=PAD)
    np.testing.assert_array_equal(np.asarray(alone.tokens)[0, p:], gen[1])
    # a single key is expanded per sample: rows differ, deterministic
    single = sample(model, toks, mask, jax.random.key(3), params, pad_id=PAD)
    single2 = sample(model, toks, mask, jax.random.key(3), params, pad_id=PAD)
    np.testing.assert_array_equal(np.asarray(single.tokens), np.asarray(single2.tokens))


def test_filter_logits_reference():
    rs = np.random.RandomState(0)
    logits = rs.randn(4, 16).astype(np.float32) * 2
    for k, p, temp in ((3, 1.0, 1.0), (0, 0.7, 0.5), (5, 0.5, 2.0)):
        z = np.asarray(filter_logits(jnp.asarray(logits), SamplingParams(temperature=temp, top_k=k,
                                                                          top_p=p)))
        for row, zr in zip(logits / temp, z):
            order = np.argsort(-row)
            keep = np.ones(16, bool) if k == 0 else np.isin(np.arange(16), order[:k])
            probs = np.exp(np_log_softmax(np.where(keep, row, -np.inf)))
            cum, nucleus = 0.0, set()
            for j in order:
                if not keep[j]:
                    continue
                if cum < p:
                    nucleus.add(j)
                cum += probs[j]
            kept = set(np.nonzero(zr > np.finfo(np.float32).min)[0])
            assert kept == nucleus
            np.testing.assert_allclose(zr[list(kept)], row[list(kept)], rtol=1e-6)


def test_top_k_samples_stay_in_top_k(model):
    toks, mask = pad_prompts(PROMPTS, PAD)
    params = SamplingParams(temperature=1.5, top_k=2, max_new_tokens=5)
    out = sample(model, toks, mask, jax.random.key(7), params, pad_id=PAD)
    seqs = np.asarray(out.tokens)
    p = toks.shape[1]
    full = np.asarray(jit_forward(model, out.tokens, out.positions, out.attention_mask))
    for i in range(seqs.shape[0]):
        for j in range(p, seqs.shape[1]):
            top2 = np.argsort(-full[i, j - 1])[:2]
            assert seqs[i, j] in top2
    # log-probs are those of the renormalised top-2 distribution: both > log(1/2) possible, all <= 0
    blp = np.asarray(out.behavior_logprobs)[:, p:]
    assert np.all(blp <= 0) and np.all(blp > np.log(1e-6))


def test_pad_prompts_and_params_validation():
    t, m = pad_prompts([[5, 6], [7]], pad_id=9, bucket=4)
    np.testing.assert_array_equal(t, [[9, 9, 5, 6], [9, 9, 9, 7]])
    np.testing.assert_array_equal(m, [[0, 0, 1, 1], [0, 0, 0, 1]])
    assert pad_prompts([[1] * 5], 0, bucket=(4, 8, 16))[0].shape == (1, 8)
    with pytest.raises(ValueError, match="exceeds every bucket"):
        pad_prompts([[1] * 20], 0, bucket=(4, 8))
    with pytest.raises(ValueError, match="empty"):
        pad_prompts([[1], []], 0)
    for kw, field in (({"temperature": 0}, "temperature"), ({"top_p": 1.5}, "top_p"),
                      ({"top_k": -1}, "top_k"), ({"max_new_tokens": 0}, "max_new_tokens"),
                      ({"stop_token_ids": 3}, "stop_token_ids")):
        with pytest.raises(ValueError, match=f"SamplingParams.{field}"):
            SamplingParams(**kw)
    assert SamplingParams(stop_token_ids=[2, 3]).stop_token_ids == (2, 3)
    assert hash(SamplingParams()) == hash(SamplingParams())


def _repeated(toks, mask, g):
    return np.repeat(toks, g, axis=0), np.repeat(mask, g, axis=0)


@pytest.mark.parametrize("right_pad", [False, True])
def test_shared_prefill_greedy_equals_repeated_prompts(model, right_pad):
    """num_samples=G on U prompts = the same U prompts each passed G times (greedy: exact
    tokens and masks; log-probs within float noise of a different prefill batch size)."""
    toks, mask = pad_prompts(PROMPTS, PAD, bucket=4)  # mixed lengths, extra left padding
    if right_pad:  # same prompts right-padded: normalised inside the sampler
        toks = np.stack([np.roll(t, -int((~m).sum())) for t, m in zip(toks, mask)])
        mask = np.stack([np.roll(m, -int((~m).sum())) for m in mask])
    g = 3
    params = SamplingParams(greedy=True, max_new_tokens=6, stop_token_ids=(2, 7))
    shared = sample(model, toks, mask, jax.random.key(0), params, pad_id=PAD, num_samples=g)
    rt, rm = _repeated(toks, mask, g)
    ref = sample(model, rt, rm, jax.random.key(0), params, pad_id=PAD)
    assert shared.tokens.shape == (len(PROMPTS) * g, toks.shape[1] + 6)
    for f in ("tokens", "attention_mask", "positions", "loss_mask", "lengths", "truncated"):
        np.testing.assert_array_equal(np.asarray(getattr(shared, f)), np.asarray(getattr(ref, f)),
                                      err_msg=f)
    np.testing.assert_allclose(np.asarray(shared.behavior_logprobs),
                               np.asarray(ref.behavior_logprobs), atol=1e-6)
    # group-major: the G rows of a prompt are identical under greedy, prompts differ
    gen = np.asarray(shared.tokens).reshape(len(PROMPTS), g, -1)
    assert np.all(gen == gen[:, :1])
    assert not np.array_equal(gen[0, 0], gen[1, 0])


@pytest.mark.parametrize("single_key", [True, False])
def test_shared_prefill_sampling_equals_repeated_prompts(model, single_key):
    """Temperature-1 sampling with the same keys (one key folded over the U*G output rows, or
    U*G explicit keys): same tokens as the repeated-prompt call, log-probs within 1e-5.

    Token equality is the strong property the test pins: the prefill runs on a batch of U
    instead of U*G rows, so logits may differ by float rounding (~1e-7); a different token
    would need a uniform draw to land within that distance of a CDF boundary."""
    toks, mask = pad_prompts(PROMPTS, PAD)
    g = 4
    key = jax.random.key(11)
    keys = key if single_key else jax.random.split(key, len(PROMPTS) * g)
    params = SamplingParams(temperature=1.0, max_new_tokens=8, stop_token_ids=(2,))
    shared = sample(model, toks, mask, keys, params, pad_id=PAD, num_samples=g)
    rt, rm = _repeated(toks, mask, g)
    ref = sample(model, rt, rm, keys, params, pad_id=PAD)
    np.testing.assert_array_equal(np.asarray(shared.tokens), np.asarray(ref.tokens))
    np.testing.assert_array_equal(np.asarray(shared.lengths), np.asarray(ref.lengths))
    np.testing.assert_allclose(np.asarray(shared.behavior_logprobs),
                               np.asarray(ref.behavior_logprobs), atol=1e-5)
    # the samples of one prompt differ (independent keys), and match the scorer
    gen = np.asarray(shared.tokens)[:, toks.shape[1]:].reshape(len(PROMPTS), g, -1)
    assert all(len({tuple(r) for r in grp}) > 1 for grp in gen)
    lp, _ = jit_logprobs(model, shared.tokens, shared.positions, shared.attention_mask)
    np.testing.assert_allclose(np.asarray(lp * shared.loss_mask),
                               np.asarray(shared.behavior_logprobs), atol=1e-5)


def test_num_samples_and_keys_validation(model):
    toks, mask = pad_prompts(PROMPTS, PAD)
    params = SamplingParams(max_new_tokens=2)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="num_samples must be an int >= 1"):
            sample(model, toks, mask, jax.random.key(0), params, pad_id=PAD, num_samples=bad)
    # keys are per output row: U keys for U*G rows is an error naming `key` and B
    with pytest.raises(ValueError, match=r"key must be .*\[B=6\]"):
        sample(model, toks, mask, jax.random.split(jax.random.key(0), 3), params, pad_id=PAD,
               num_samples=2)
    out = sample(model, toks, mask, jax.random.split(jax.random.key(0), 6), params, pad_id=PAD,
                 num_samples=2)
    assert out.tokens.shape == (6, toks.shape[1] + 2)


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
def test_shared_prefill_with_cache_sharding_matches_one_device(model):
    """A sharded model on a (2 data x 2 fsdp x 2 tensor) mesh with the decode cache sharded:
    U = 2 prompts (fewer than the 4-way batch axes) x G = 4 rows gives the one-device
    repeated-prompt samples."""
    from rlvr.parallel import batch_sharding, kv_cache_sharding, make_mesh, shard_model

    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    cfg = model.config
    sharded = shard_model(Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
    toks, mask = pad_prompts(PROMPTS[:2], PAD)
    g = 4
    params = SamplingParams(temperature=0.9, max_new_tokens=6, stop_token_ids=(2,))
    keys = jax.random.split(jax.random.key(5), 2 * g)
    rt, rm = _repeated(toks, mask, g)
    ref = sample(model, rt, rm, keys, params, pad_id=PAD)
    cs = kv_cache_sharding(mesh, cfg, 2 * g)
    assert cs.spec[0] is not None  # the decode cache's batch axis really is sharded
    with jax.set_mesh(mesh):
        got = sample(sharded, toks, mask, keys, params, pad_id=PAD, cache_sharding=cs,
                     num_samples=g)
    np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(ref.tokens))
    np.testing.assert_allclose(np.asarray(got.behavior_logprobs),
                               np.asarray(ref.behavior_logprobs), atol=1e-5)


def _filters(params, candidates):
    fast = jax.jit(lambda x: filter_logits(x, params, candidates=candidates))
    ref = jax.jit(lambda x: filter_logits_by_sort(x, params))
    return fast, ref


def _top_mass(logits, params, k):
    """numpy: per-row probability mass (full-vocabulary normalisation) of the k largest."""
    z = np.asarray(logits, np.float64) / params.temperature
    if params.top_k:
        kth = np.sort(z, -1)[:, -params.top_k][:, None]
        z = np.where(z < kth, -np.inf, z)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.sort(p, -1)[:, ::-1][:, :k].sum(-1)


V = 1000
K = 16
RS = np.random.RandomState(0)
PEAKED = RS.randn(6, V).astype(np.float32)              # 8 tokens 20 above the rest:
PEAKED[np.arange(6)[:, None], RS.randint(0, V, (6, 8))] += 20  # top-16 hold > 0.99
FLAT = (RS.randn(6, V) * 0.5).astype(np.float32)        # top-16 hold < 0.1 of the mass
TIED = RS.randint(0, 5, (6, V)).astype(np.float32) * 3  # big tie blocks at the K boundary
CASES = [SamplingParams(top_p=p, top_k=k, temperature=t)
         for p, k, t in ((0.9, 0, 1.0), (0.5, 0, 0.7), (0.95, 0, 1.3), (0.99, 40, 1.0),
                         (0.6, 10, 1.0), (0.3, 400, 2.0))]


@pytest.mark.parametrize("params", CASES, ids=lambda p: f"p{p.top_p}-k{p.top_k}-t{p.temperature}")
def test_top_p_fast_path_and_fallback_equal_full_sort_bitwise(params):
    """filter_logits (K = 16 candidates of V = 1000) returns bitwise the full-sort filter's
    logits when the candidates hold the nucleus (fast path), when they do not (full-sort
    fallback), on tie blocks straddling the K-th entry, with and without top-k, and with
    K >= V (no fast path)."""
    fast, ref = _filters(params, K)
    whole, _ = _filters(params, V)
    for name, x in (("peaked", PEAKED), ("flat", FLAT), ("tied", TIED),
                    ("tied peaked", np.round(PEAKED)),  # ties at K while the nucleus fits
                    ("mixed", np.concatenate([PEAKED[:3], FLAT[:3]]))):
        want = np.asarray(ref(jnp.asarray(x)))
        got = np.asarray(fast(jnp.asarray(x)))
        assert np.array_equal(got, want), name
        assert np.array_equal(np.asarray(whole(jnp.asarray(x))), want), name
        kept = (want > np.finfo(np.float32).min).sum(-1)
        assert np.all(kept >= 1)
    # the inputs exercise both branches: flat rows' nuclei do not fit in 16 candidates, peaked
    # rows' do (unless top-k already cut the distribution down to <= 16 tokens)
    if params.top_k == 0 or params.top_k > K:
        assert np.all(_top_mass(FLAT, params, K) < params.top_p)
    assert np.all(_top_mass(PEAKED, params, K) >= params.top_p + 1e-4)
    assert np.all(_top_mass(np.round(PEAKED), params, K) >= params.top_p + 1e-4)
    # ties: the 16th and 17th largest are equal in every row, so the boundary is a tie block
    for x in (TIED, np.round(PEAKED)):
        srt = np.sort(x, -1)[:, ::-1]
        assert np.all(srt[:, K - 1] == srt[:, K])


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_top_p_row_result_does_not_depend_on_the_batch_branch(dtype):
    """Peaked rows filtered alone (every row fits: fast path) equal the same rows filtered in
    a batch whose flat row forces the full-sort branch, bitwise (float32 and bfloat16)."""
    params = SamplingParams(top_p=0.9)
    fast, _ = _filters(params, K)
    assert np.all(_top_mass(PEAKED, params, K) >= 0.9 + 1e-4)
    assert np.all(_top_mass(FLAT[:1], params, K) < 0.9)
    alone = np.asarray(fast(jnp.asarray(PEAKED, dtype)).astype(jnp.float32))
    mixed = fast(jnp.asarray(np.concatenate([PEAKED, FLAT[:1]]), dtype))
    kept = np.asarray(mixed > jnp.finfo(dtype).min).sum(-1)
    mixed = np.asarray(mixed.astype(jnp.float32))
    assert np.array_equal(alone, mixed[:-1])
    # the nuclei of the peaked rows are small, of the flat row larger than the 16 candidates
    assert np.all(kept[:-1] < K) and kept[-1] > K


def test_filter_logits_candidates_validation():
    with pytest.raises(ValueError, match="candidates must be an int >= 1"):
        filter_logits(jnp.zeros((1, 8)), SamplingParams(top_p=0.5), candidates=0)


@pytest.mark.parametrize("temperature", [0.02, 1.0])
def test_top_p_samples_stay_in_the_full_sort_nucleus(temperature):
    """Sampler with top-p 0.8 on a 600-token vocabulary (more than NUCLEUS_CANDIDATES): every
    generated token lies in the full-sort nucleus of its step's logits, and its log-prob is
    that of the full-sort filtered distribution. Temperature 0.02 makes the nucleus fit in the
    candidates (fast path), 1.0 makes it larger (full-sort branch); both are checked."""
    m = Transformer(tiny_config(vocab_size=600), rngs=nnx.Rngs(1))
    toks, mask = pad_prompts(PROMPTS, PAD)
    params = SamplingParams(temperature=temperature, top_p=0.8, max_new_tokens=4)
    out = sample(m, toks, mask, jax.random.key(9), params, pad_id=PAD)
    p = toks.shape[1]
    full = jit_forward(m, out.tokens, out.positions, out.attention_mask)[:, p - 1:-1]
    ref = np.asarray(filter_logits_by_sort(full, params))
    gen = np.asarray(out.tokens)[:, p:]
    zref = np.take_along_axis(ref, gen[..., None], -1)[..., 0]
    assert np.all(zref > np.finfo(np.float32).min)  # in the nucleus
    np.testing.assert_allclose(np.asarray(out.behavior_logprobs)[:, p:],
                               zref - np.log(np.exp(ref - ref.max(-1, keepdims=True)).sum(-1))
                               - ref.max(-1), atol=1e-4)
    nucleus = (ref > np.finfo(np.float32).min).sum(-1)
    if temperature < 0.1:
        assert np.all(nucleus < NUCLEUS_CANDIDATES)
    else:
        assert np.all(nucleus > NUCLEUS_CANDIDATES)
