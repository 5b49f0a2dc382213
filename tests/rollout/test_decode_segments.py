"""Decode attention over the live cache prefix (`sample(..., decode_segments=k)`): the same
tokens as attending to every cache slot, log-probs within float rounding."""

import jax
import numpy as np
import pytest
from flax import nnx

from rlvr.models import Transformer
from rlvr.rollout.sampler import SamplingParams, decode_windows, pad_prompts, sample
from tests.models.helpers import jit_logprobs, tiny_config

PAD = 0
PROMPTS = [[1, 5, 6, 7, 8], [1, 9], [1, 3, 4, 5, 6, 7, 9], [1, 4, 4]]


@pytest.fixture(scope="module")
def model():
    return Transformer(tiny_config(), rngs=nnx.Rngs(0))


def test_decode_windows_cover_each_step_and_grow():
    assert decode_windows(8, 10, 1) == ((0, 10, 18),)
    w = decode_windows(8, 10, 4)
    assert w == ((0, 3, 11), (3, 5, 13), (5, 8, 16), (8, 10, 18))
    # every step i writes slot 8 + i, inside its part's window; parts tile 0..N
    for first, end, width in w:
        assert all(8 + i < width for i in range(first, end))
    assert [a for a, _, _ in w[1:]] == [b for _, b, _ in w[:-1]]
    assert decode_windows(4, 2, 5) == ((0, 1, 5), (1, 2, 6))
    with pytest.raises(ValueError, match="segments"):
        decode_windows(4, 2, 0)


@pytest.mark.parametrize("params", [
    SamplingParams(greedy=True, max_new_tokens=12, stop_token_ids=(2,)),
    SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=12, stop_token_ids=(2,)),
])
def test_segmented_decode_equals_full_cache_attention(model, params):
    toks, mask = pad_prompts(PROMPTS, PAD, bucket=4)
    full = sample(model, toks, mask, jax.random.key(3), params, pad_id=PAD, num_samples=2)
    for k in (3, 12):
        seg = sample(model, toks, mask, jax.random.key(3), params, pad_id=PAD, num_samples=2,
                     decode_segments=k)
        for f in ("tokens", "attention_mask", "loss_mask", "lengths", "truncated"):
            np.testing.assert_array_equal(np.asarray(getattr(seg, f)),
                                          np.asarray(getattr(full, f)), err_msg=f)
        np.testing.assert_allclose(np.asarray(seg.behavior_logprobs),
                                   np.asarray(full.behavior_logprobs), atol=1e-5)
    assert np.asarray(full.lengths).max() > 3  # the later windows were used
    if params.greedy:  # and the log-probs are the model's own
        lp, _ = jit_logprobs(model, seg.tokens, seg.positions, seg.attention_mask)
        np.testing.assert_allclose(np.asarray(lp * seg.loss_mask),
                                   np.asarray(seg.behavior_logprobs), atol=1e-5)


def test_a_window_that_misses_written_slots_changes_the_result(model):
    """The windows matter: attending to a cache prefix that omits the newest slots (what a
    wrong window would do) gives other log-probs, so the equality above is not vacuous."""
    toks, mask = pad_prompts(PROMPTS, PAD)
    params = SamplingParams(greedy=True, max_new_tokens=6)
    full = sample(model, toks, mask, jax.random.key(0), params, pad_id=PAD)
    from rlvr.rollout import sampler as smp

    saved = smp.decode_windows
    smp.decode_windows = lambda p, n, k: ((0, n, p + 1),)
    try:
        jax.clear_caches()
        bad = sample(model, toks, mask, jax.random.key(0), params, pad_id=PAD,
                     decode_segments=2)
    finally:
        smp.decode_windows = saved
        jax.clear_caches()
    assert not np.allclose(np.asarray(bad.behavior_logprobs), np.asarray(full.behavior_logprobs),
                           atol=1e-3)
