"""sample(..., shared_prefix=True): one [U, P] prompt cache per group plus per-row suffix caches
gives the tokens and (within 1e-5) the log-probs of today's repeated-prompt cache, greedy and
sampled with fixed keys, G in {2, 4}, left- and right-padded prompts of different lengths, a GQA
model, with decode segments, and sharded over 8 simulated devices; refused where it cannot apply
(with G = 1, sliding-window models). With compaction: tests/rollout/test_shared_compaction.py."""

import jax
import numpy as np
import pytest
from flax import nnx

from rlvr.models import Transformer
from rlvr.rollout.sampler import SamplingParams, pad_prompts, sample
from tests.models.helpers import tiny_config

PAD = 0
PROMPTS = [[1, 5, 6, 7, 8], [1, 9], [1, 3, 4, 5, 6, 7, 9]]


@pytest.fixture(scope="module")
def model():  # GQA: 4 query heads over 2 kv heads
    cfg = tiny_config()
    assert cfg.num_heads > cfg.num_kv_heads
    return Transformer(cfg, rngs=nnx.Rngs(0))


def _assert_same(ref, got):
    for name in ("tokens", "attention_mask", "positions", "loss_mask", "lengths", "truncated"):
        np.testing.assert_array_equal(np.asarray(getattr(got, name)),
                                      np.asarray(getattr(ref, name)), err_msg=name)
    np.testing.assert_allclose(np.asarray(got.behavior_logprobs),
                               np.asarray(ref.behavior_logprobs), atol=1e-5, rtol=0)


@pytest.mark.parametrize("g", [2, 4])
@pytest.mark.parametrize("greedy", [True, False])
def test_shared_prompt_cache_equals_repeated_cache(model, g, greedy):
    toks, mask = pad_prompts(PROMPTS, PAD)  # left-padded, lengths 5, 2, 7
    params = (SamplingParams(greedy=True, max_new_tokens=6) if greedy else
              SamplingParams(temperature=0.9, top_p=0.95, max_new_tokens=6, stop_token_ids=(2,)))
    keys = jax.random.split(jax.random.key(3), len(PROMPTS) * g)
    ref = sample(model, toks, mask, keys, params, pad_id=PAD, num_samples=g)
    got = sample(model, toks, mask, keys, params, pad_id=PAD, num_samples=g, shared_prefix=True)
    _assert_same(ref, got)
    if not greedy:  # the samples of a group really differ (the test is not trivially equal)
        t = np.asarray(got.tokens).reshape(len(PROMPTS), g, -1)
        assert any(len({tuple(r) for r in grp}) > 1 for grp in t)


def test_right_padding_segments_and_budgets(model):
    toks, mask = pad_prompts(PROMPTS, PAD)
    # right-pad the same prompts: the sampler normalises to left padding
    rt = np.zeros_like(toks)
    rm = np.zeros_like(mask)
    for i, p in enumerate(PROMPTS):
        rt[i, :len(p)], rm[i, :len(p)] = p, True
    g = 2
    params = SamplingParams(temperature=1.0, max_new_tokens=7, stop_token_ids=(2,))
    budget = np.array([7, 3, 5, 1, 7, 2], np.int32)
    kw = dict(pad_id=PAD, num_samples=g, decode_segments=3, max_new_tokens_per_row=budget)
    ref = sample(model, rt, rm, jax.random.key(1), params, **kw)
    got = sample(model, rt, rm, jax.random.key(1), params, shared_prefix=True, **kw)
    _assert_same(ref, got)


def test_shared_prefix_refusals(model):
    toks, mask = pad_prompts(PROMPTS, PAD)
    params = SamplingParams(greedy=True, max_new_tokens=2)
    with pytest.raises(ValueError, match="num_samples >= 2"):
        sample(model, toks, mask, jax.random.key(0), params, pad_id=PAD, shared_prefix=True)
    with pytest.raises(ValueError, match="shared_prefix must be a bool"):
        sample(model, toks, mask, jax.random.key(0), params, pad_id=PAD, num_samples=2,
               shared_prefix="yes")
    sliding = Transformer(tiny_config(architecture="gemma2", sliding_window=4,
                                      attention_bias=False), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="sliding-window"):
        sample(sliding, toks, mask, jax.random.key(0), params, pad_id=PAD, num_samples=2,
               shared_prefix=True)


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
@pytest.mark.parametrize("greedy", [True, False])
def test_sharded_shared_prompt_cache_equals_one_device(model, greedy):
    """8 data shards, 3 prompts x 2 samples (padded to 8 groups): the one-device rows."""
    from rlvr.parallel import generation_sharding, make_mesh

    sharding = generation_sharding(make_mesh(data=8))
    toks, mask = pad_prompts(PROMPTS, PAD)
    params = (SamplingParams(greedy=True, max_new_tokens=5) if greedy else
              SamplingParams(temperature=0.9, max_new_tokens=5))
    ref = sample(model, toks, mask, jax.random.key(2), params, pad_id=PAD, num_samples=2)
    got = sample(model, toks, mask, jax.random.key(2), params, pad_id=PAD, num_samples=2,
                 shared_prefix=True, sharding=sharding)
    _assert_same(ref, got)


@pytest.mark.parametrize("over", [dict(architecture="qwen3", qk_norm=True, attention_bias=False),
                                  dict(fused_projections=True, num_kv_heads=1)])
def test_other_families_qk_norm_and_fused_projections(over):
    m = Transformer(tiny_config(**over), rngs=nnx.Rngs(1))
    toks, mask = pad_prompts(PROMPTS, PAD)
    params = SamplingParams(temperature=0.8, max_new_tokens=5)
    ref = sample(m, toks, mask, jax.random.key(4), params, pad_id=PAD, num_samples=2)
    got = sample(m, toks, mask, jax.random.key(4), params, pad_id=PAD, num_samples=2,
                 shared_prefix=True)
    _assert_same(ref, got)
