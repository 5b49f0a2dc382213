"""Finished rows compacted out of the decode batch (`sample(..., compact_finished=True)`) and
per-row length budgets (`max_new_tokens_per_row`): every row's tokens, masks, lengths and
log-probs are bitwise those of the uncompacted loop with the same decode segments, greedy and
sampled, with groups; the batch really shrinks; budgets end rows like a stop token."""

import jax
import numpy as np
import pytest
from flax import nnx

from rlvr.models import Transformer
from rlvr.rollout import sampler as smp
from rlvr.rollout.sampler import SamplingParams, compact_bucket, pad_prompts, sample
from tests.models.helpers import tiny_config

PAD = 0
PROMPTS = [[1, 5, 6, 7, 8], [1, 9], [1, 3, 4, 5, 6, 7, 9], [1, 4, 4], [1, 2, 3], [1, 7, 7, 7],
           [1, 8]]
# per output row (7 prompts x 2 samples): rows end at many different steps
BUDGETS = np.array([1, 16, 3, 9, 5, 2, 16, 4, 12, 7, 1, 2, 16, 8])
FIELDS = ("tokens", "attention_mask", "positions", "loss_mask", "lengths", "truncated",
          "behavior_logprobs")


@pytest.fixture(scope="module")
def model():
    return Transformer(tiny_config(), rngs=nnx.Rngs(0))


def _assert_identical(ref, got):
    for f in FIELDS:
        np.testing.assert_array_equal(np.asarray(getattr(got, f)), np.asarray(getattr(ref, f)),
                                      err_msg=f)


@pytest.fixture
def gathered(monkeypatch):
    """Records the row count of every compaction (the gathered batch sizes)."""
    sizes = []
    real = smp._gather_rows

    def spy(carry, index, pad, **kw):
        sizes.append(int(index.shape[0]))
        return real(carry, index, pad, **kw)

    monkeypatch.setattr(smp, "_gather_rows", spy)
    return sizes


def test_compact_bucket_is_the_smallest_power_of_two_multiple_of_the_shards():
    assert [compact_bucket(n, 14) for n in (1, 2, 3, 5, 8, 9, 14)] == [2, 2, 4, 8, 8, 14, 14]
    # at least two rows per shard, a multiple of the shards
    assert compact_bucket(3, 32, shards=8) == 16 and compact_bucket(17, 64, shards=8) == 32
    assert compact_bucket(5, 24, shards=3) == 9  # 8 rounded up to a multiple of 3
    with pytest.raises(ValueError, match="live"):
        compact_bucket(0, 4)


@pytest.mark.parametrize("params", [
    SamplingParams(greedy=True, max_new_tokens=16, stop_token_ids=(2,)),
    SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=16, stop_token_ids=(2, 3)),
], ids=["greedy", "top_p"])
def test_compacted_decode_is_identical_to_the_uncompacted_loop(model, params, gathered):
    toks, mask = pad_prompts(PROMPTS, PAD, bucket=4)
    kw = dict(pad_id=PAD, num_samples=2, decode_segments=4, max_new_tokens_per_row=BUDGETS)
    ref = sample(model, toks, mask, jax.random.key(3), params, **kw)
    got = sample(model, toks, mask, jax.random.key(3), params, compact_finished=True, **kw)
    _assert_identical(ref, got)
    lengths = np.asarray(ref.lengths)
    assert len(set(lengths.tolist())) >= 6 and lengths.max() == 16  # rows end at many steps
    assert gathered and gathered[-1] < len(BUDGETS)  # the batch shrank (14 -> 8 -> 4 ...)
    assert gathered == sorted(gathered, reverse=True)
    if not params.greedy:  # samples differ between rows (row keys kept through the gathers)
        assert len({tuple(r) for r in np.asarray(ref.tokens)}) > 7


def test_compaction_without_budgets_follows_stop_tokens(model, gathered):
    """Rows ending only at stop tokens (no budgets), one sample per prompt, one key per row
    given by the caller (still usable afterwards: the loop's donated buffers are its own)."""
    toks, mask = pad_prompts(PROMPTS * 2, PAD)
    params = SamplingParams(temperature=1.0, max_new_tokens=12, stop_token_ids=(2, 3, 4, 5))
    keys = jax.random.split(jax.random.key(1), 14)
    ref = sample(model, toks, mask, keys, params, pad_id=PAD, decode_segments=3)
    got = sample(model, toks, mask, keys, params, pad_id=PAD, decode_segments=3,
                 compact_finished=True)
    _assert_identical(ref, got)
    assert jax.random.key_data(keys).shape == (14, 2)  # not donated away
    assert np.asarray(ref.truncated).any() and not np.asarray(ref.truncated).all()
    assert gathered


def test_row_budgets_end_rows_like_a_stop_token(model):
    toks, mask = pad_prompts(PROMPTS, PAD)
    params = SamplingParams(greedy=True, max_new_tokens=10)  # no stop token: budgets only
    full = sample(model, toks, mask, jax.random.key(0), params, pad_id=PAD)
    bud = np.array([1, 10, 3, 7, 2, 5, 4])
    out = sample(model, toks, mask, jax.random.key(0), params, pad_id=PAD,
                 max_new_tokens_per_row=bud)
    p = toks.shape[1]
    np.testing.assert_array_equal(np.asarray(out.lengths), bud)
    assert np.asarray(out.truncated).all()  # no stop token: truncated, like max_new_tokens
    ft, ot = np.asarray(full.tokens), np.asarray(out.tokens)
    for r, n in enumerate(bud):  # the same prefix as the unbudgeted row, pad after the budget
        np.testing.assert_array_equal(ot[r, :p + n], ft[r, :p + n])
        assert (ot[r, p + n:] == PAD).all()
        np.testing.assert_array_equal(np.asarray(out.loss_mask)[r, p:], np.arange(10) < n)
    np.testing.assert_allclose(np.asarray(out.behavior_logprobs),
                               np.asarray(full.behavior_logprobs) * np.asarray(out.loss_mask),
                               atol=1e-6)


def test_a_stop_token_before_the_budget_is_not_truncated(model):
    toks, mask = pad_prompts(PROMPTS, PAD)
    probe = sample(model, toks, mask, jax.random.key(0), SamplingParams(greedy=True,
                   max_new_tokens=6), pad_id=PAD)
    stop = int(np.asarray(probe.tokens)[0, toks.shape[1] + 1])  # row 0's second token
    params = SamplingParams(greedy=True, max_new_tokens=6, stop_token_ids=(stop,))
    out = sample(model, toks, mask, jax.random.key(0), params, pad_id=PAD,
                 max_new_tokens_per_row=np.full(7, 4))
    assert int(out.lengths[0]) <= 2 and not bool(out.truncated[0])


def test_bad_arguments_are_refused(model):
    toks, mask = pad_prompts(PROMPTS[:2], PAD)
    params = SamplingParams(greedy=True, max_new_tokens=4)
    with pytest.raises(ValueError, match="decode_segments >= 2"):
        sample(model, toks, mask, jax.random.key(0), params, pad_id=PAD, compact_finished=True)
    with pytest.raises(ValueError, match="sharding=GenerationSharding"):
        sample(model, toks, mask, jax.random.key(0), params, pad_id=PAD, decode_segments=2,
               compact_finished=True, cache_sharding=object())
    for bad in (np.array([1, 5]), np.array([0, 2]), np.array([1, 2, 3]), np.array([1.0, 2.0])):
        with pytest.raises(ValueError, match="max_new_tokens_per_row"):
            sample(model, toks, mask, jax.random.key(0), params, pad_id=PAD,
                   max_new_tokens_per_row=bad)


def test_one_live_row_keeps_a_batch_of_two(model, gathered):
    """One row left: the loop goes on with two rows (a one-row batch would change the matmul's
    rounding), still bitwise equal. Sampled (top-p) only: the row keys must follow the gathered
    rows too; greedy against sampled compaction is covered by
    `test_compacted_decode_is_identical_to_the_uncompacted_loop`."""
    toks, mask = pad_prompts(PROMPTS[:4], PAD)
    params = SamplingParams(greedy=False, top_p=0.95, max_new_tokens=12)
    kw = dict(pad_id=PAD, decode_segments=6, max_new_tokens_per_row=np.array([3, 12, 3, 3]))
    ref = sample(model, toks, mask, jax.random.key(3), params, **kw)
    got = sample(model, toks, mask, jax.random.key(3), params, compact_finished=True, **kw)
    assert gathered == [2]
    _assert_identical(ref, got)
