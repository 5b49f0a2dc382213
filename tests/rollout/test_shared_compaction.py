"""A shared prompt cache with finished rows compacted out (`sample(..., shared_prefix=True,
compact_finished=True)`): every row's tokens, masks, lengths and log-probs are bitwise those of
the uncompacted shared call with the same decode segments (greedy and top-p, rows of one group
ending at different steps, a group ending entirely early), the tokens of the compacted call
without the shared cache (log-probs within float rounding); the prompt cache stays whole and the
gathered rows point at their own group's prompt; sharded over 8 simulated devices."""

import jax
import numpy as np
import pytest
from flax import nnx

from rlvr.models import Transformer
from rlvr.rollout import sampler as smp
from rlvr.rollout.sampler import SamplingParams, pad_prompts, sample
from tests.models.helpers import tiny_config
from tests.rollout.test_compaction import BUDGETS, FIELDS, PAD, PROMPTS, _assert_identical

EXACT = ("tokens", "attention_mask", "positions", "loss_mask", "lengths", "truncated")


@pytest.fixture(scope="module")
def model():  # GQA: 4 query heads over 2 kv heads
    return Transformer(tiny_config(), rngs=nnx.Rngs(0))


@pytest.fixture
def gathered(monkeypatch):
    """Records every shared-cache compaction: (gathered rows, their `PrefixRows` places, prompt cache rows)."""
    calls = []
    real = smp._gather_rows

    def spy(carry, index, pad, **kw):
        out = real(carry, index, pad, **kw)
        if out.prefix is not None:  # not the calls without a shared prompt cache
                calls.append((int(index.shape[0]), np.asarray(out.prefix_rows.index),
                          int(out.prefix.k[0].shape[0])))
        return out

    monkeypatch.setattr(smp, "_gather_rows", spy)
    return calls


def _assert_close(ref, got):
    for f in EXACT:
        np.testing.assert_array_equal(np.asarray(getattr(got, f)), np.asarray(getattr(ref, f)),
                                      err_msg=f)
    np.testing.assert_allclose(np.asarray(got.behavior_logprobs),
                               np.asarray(ref.behavior_logprobs), atol=1e-5, rtol=0)


@pytest.mark.parametrize("params", [
    SamplingParams(greedy=True, max_new_tokens=16, stop_token_ids=(2,)),
    SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=16, stop_token_ids=(2, 3)),
], ids=["greedy", "top_p"])
def test_shared_compacted_decode_is_identical_to_the_uncompacted_shared_loop(model, params,
                                                                              gathered):
    toks, mask = pad_prompts(PROMPTS, PAD, bucket=4)
    kw = dict(pad_id=PAD, num_samples=2, decode_segments=4, max_new_tokens_per_row=BUDGETS)
    ref = sample(model, toks, mask, jax.random.key(3), params, shared_prefix=True, **kw)
    got = sample(model, toks, mask, jax.random.key(3), params, shared_prefix=True,
                 compact_finished=True, **kw)
    _assert_identical(ref, got)
    lengths = np.asarray(ref.lengths).reshape(len(PROMPTS), 2)
    assert (lengths[:, 0] != lengths[:, 1]).sum() >= 5  # a group's rows end at different steps
    sizes = [s for s, _, _ in gathered]
    assert sizes and sizes[-1] < len(BUDGETS) and sizes == sorted(sizes, reverse=True)
    for size, places, prompts in gathered:
        assert prompts == len(PROMPTS)  # the prompt cache is never gathered
        assert len(set(places.tolist())) == size and places.max() < len(BUDGETS)
    # without the shared cache: the same rows, log-probs within float rounding
    plain = sample(model, toks, mask, jax.random.key(3), params, compact_finished=True, **kw)
    _assert_close(plain, got)
    if not params.greedy:  # samples differ between rows (row keys kept through the gathers)
        assert len({tuple(r) for r in np.asarray(ref.tokens)}) > 7


def test_a_group_ending_early_and_rows_ending_at_stop_tokens(model, gathered):
    """Groups 0 and 2 end entirely after their first tokens; the others' rows end at stop tokens
    (G = 4, sampled): the live rows keep pointing at their own group's prompt, and the padding
    rows at prompts of finished rows."""
    toks, mask = pad_prompts(PROMPTS[:4], PAD)
    g = 4
    budgets = np.full(4 * g, 12)
    budgets[0:g] = [1, 2, 1, 1]
    budgets[2 * g:3 * g] = 1
    params = SamplingParams(temperature=1.0, max_new_tokens=12, stop_token_ids=(2, 3, 4, 5))
    kw = dict(pad_id=PAD, num_samples=g, decode_segments=4, max_new_tokens_per_row=budgets)
    ref = sample(model, toks, mask, jax.random.key(7), params, shared_prefix=True, **kw)
    got = sample(model, toks, mask, jax.random.key(7), params, shared_prefix=True,
                 compact_finished=True, **kw)
    _assert_identical(ref, got)
    lengths = np.asarray(ref.lengths)
    live = np.flatnonzero(lengths > 3)  # rows still running after the first part (3 steps)
    assert gathered and not {0, 1, 2, 3, 8, 9, 10, 11} & set(live.tolist())
    size, places, _ = gathered[0]
    assert live.size < size <= 8  # the first gather keeps padding rows
    np.testing.assert_array_equal(places[:live.size], live)  # each live row: its own place
    assert not set(places[live.size:].tolist()) & set(live.tolist())  # padding: finished places
    plain = sample(model, toks, mask, jax.random.key(7), params, compact_finished=True, **kw)
    _assert_close(plain, got)


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
def test_sharded_shared_compaction_equals_the_sharded_shared_loop(model, gathered):
    """8 data shards, 15 prompts x 2 samples (padded to 16 groups): bitwise the sharded shared
    call without compaction, and the one-device rows (log-probs within 1e-5)."""
    from rlvr.parallel import generation_sharding, make_mesh

    prompts = [[1] + [2 + (i * 7 + j) % 40 for j in range(1 + i % 4)] for i in range(15)]
    toks, mask = pad_prompts(prompts, PAD)
    budgets = np.tile(np.array([1, 12, 3, 2, 5, 2, 12, 4, 11, 1]), 3)
    params = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.95)
    gs = generation_sharding(make_mesh(data=8))
    kw = dict(pad_id=PAD, num_samples=2, decode_segments=3, max_new_tokens_per_row=budgets,
              shared_prefix=True)
    ref = sample(model, toks, mask, jax.random.key(5), params, **kw)
    seg = sample(model, toks, mask, jax.random.key(5), params, sharding=gs, **kw)
    got = sample(model, toks, mask, jax.random.key(5), params, sharding=gs,
                 compact_finished=True, **kw)
    assert [s for s, _, _ in gathered] == [16]
    assert gathered[0][2] == 16  # the padded prompt cache, whole
    np.testing.assert_array_equal(np.asarray(got.lengths), budgets)
    for f in FIELDS:
        np.testing.assert_array_equal(np.asarray(getattr(got, f)), np.asarray(getattr(seg, f)),
                                      err_msg=f)
    _assert_close(ref, got)
