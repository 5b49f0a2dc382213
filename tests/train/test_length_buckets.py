"""Length-aware learner micro-batches (`train.length_bucket`): rows sorted by live length,
right-aligned and cut to their micro-batch's longest row (rounded to the bucket) give the same
loss, metrics and gradients as the padded path on a batch with a long-tailed length spread."""

import jax
import numpy as np
import optax
import pytest

from configs import base
from rlvr.algorithms import AlgorithmSettings
from rlvr.learner import bucket_widths, last_columns, length_sorted, live_lengths, width_index
from rlvr.records.batch import RolloutBatch, TrainingBatch
from rlvr.train.config import ConfigError, validate_config
from tests.algorithms.helpers import VOCAB, assert_same_step, build

B, T, N = 16, 40, 24  # rows, columns, completion columns (prompt ≤ 16)


def long_tailed_batch(seed=0):
    """Sampler layout: [left pad][prompt 4..16][completion][trailing pad], completion lengths
    long-tailed (most rows stop within a few tokens, two run to the limit N)."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(4, T - N + 1, B)
    comp = np.minimum(1 + rng.geometric(0.3, B), N)
    comp[[3, 12]] = N
    col = np.arange(T)[None]
    start = (T - N - prompt)[:, None]
    attn = (col >= start) & (col < T - N + comp[:, None])
    loss = (col >= T - N) & attn
    tokens = np.where(attn, rng.integers(3, VOCAB, (B, T)), 0)
    behav = np.where(loss, -rng.uniform(1.5, 3.0, (B, T)), 0.0)
    rewards = rng.integers(0, 2, B).astype(np.float32)
    rewards[:2] = [1, 0]
    positions = np.where(attn, np.cumsum(attn, 1) - 1, 0)
    return RolloutBatch.create(tokens=tokens, loss_mask=loss.astype(np.float32),
                               behavior_logprobs=behav.astype(np.float32), rewards=rewards,
                               attention_mask=attn, positions=positions)


def step_delta(**settings):
    """(parameter change, metrics) of one jitted GRPO step (SGD, lr 1) on `long_tailed_batch`
    under the algorithm settings given."""
    algo, state = build("grpo", optimizer=optax.sgd(1.0), **settings)
    new, metrics = jax.jit(algo.train_step)(state, long_tailed_batch())
    delta = jax.tree.map(lambda a, b: np.asarray(a) - np.asarray(b), new.params, state.params)
    return delta, metrics


@pytest.mark.parametrize("over", [
    dict(num_microbatches=4),
    dict(num_microbatches=4, completion_columns=N, aggregation="seq-mean-token-mean"),
    dict(num_microbatches=2, num_minibatches=2, epochs=2, recompute_old_logprobs=True,
         entropy_coef=0.01),
    dict(num_microbatches=1),
])
def test_bucketed_micro_batches_give_the_padded_loss_and_gradients(over):
    assert_same_step(step_delta(length_bucket=8, **over), step_delta(length_bucket=0, **over),
                     rtol=2e-5, atol=2e-6)


def test_sorted_rows_fit_the_widths_their_micro_batches_get():
    batch = long_tailed_batch()
    tb = TrainingBatch(tokens=batch.tokens, attention_mask=batch.attention_mask,
                       positions=batch.positions, loss_mask=batch.loss_mask, rewards=batch.rewards)
    lengths0 = np.asarray(live_lengths(tb.attention_mask))
    out, lengths = length_sorted(tb)
    lengths = np.asarray(lengths)
    assert (np.diff(lengths) >= 0).all() and sorted(lengths0.tolist()) == lengths.tolist()
    widths = bucket_widths(T, 8)
    assert widths == (8, 16, 24, 32, 40)
    chosen = []
    for rows in np.split(np.arange(B), 4):
        w = widths[int(width_index(lengths[rows], 8, len(widths)))]
        chosen.append(w)
        part = last_columns(jax.tree.map(lambda x: x[rows], out), w)
        # every real and loss token of the micro-batch survives the cut, in order
        np.testing.assert_array_equal(np.asarray(part.attention_mask).sum(1), lengths[rows])
        assert float(np.asarray(part.loss_mask).sum()) == float(np.asarray(out.loss_mask)[rows].sum())
        assert w >= lengths[rows].max() and (w == 8 or w - 8 < lengths[rows].max())
    assert chosen[0] < T and chosen[-1] == T  # the long tail alone pays the full width
    # each row's real tokens are its original ones, in order, ending in the last column
    order = np.argsort(lengths0, kind="stable")
    for i, r in enumerate(order):
        real = np.asarray(batch.attention_mask[r])
        np.testing.assert_array_equal(np.asarray(out.tokens[i])[T - lengths[i]:],
                                      np.asarray(batch.tokens[r])[real])
        assert np.asarray(out.attention_mask[i])[T - lengths[i]:].all()


def test_length_bucket_is_validated():
    with pytest.raises(ValueError, match="length_bucket"):
        AlgorithmSettings(length_bucket=-8)
    c = base.get_config()
    c.train.length_bucket = -1
    with pytest.raises(ConfigError, match="length_bucket"):
        validate_config(c)
    c.train.length_bucket = 64
    validate_config(c)
