"""Log-probs and entropies computed on the completion columns only equal today's full pass.

`AlgorithmSettings.completion_columns = N` scores only each row's last N columns (after
`rlvr.core.layout.align_completions` moves right-padded rows' completions there); the update,
its metrics and the scoring gradients must equal those of scoring every column.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import base
from rlvr.core.layout import align_completions, completion_shift
from rlvr.models import scoring
from rlvr.records.batch import RolloutBatch
from rlvr.train.config import validate_config
from rlvr.train.setup import algorithm_settings
from tests.algorithms.helpers import VOCAB, assert_same_step, build

T, N = 12, 7


def sampler_layout_batch(seed=0):
    """8 rows of T columns: [left pad][prompt][N completion columns][right pad]; rows 4..7 come
    from a part with a 2-column narrower prompt, right-padded by 2 (a concatenated batch)."""
    rng = np.random.default_rng(seed)
    b = 8
    tokens = np.zeros((b, T), np.int32)
    attn = np.zeros((b, T), bool)
    loss = np.zeros((b, T), np.float32)
    behav = np.zeros((b, T), np.float32)
    for i in range(b):
        width = T - N - (2 if i >= 4 else 0)  # the row's prompt columns
        plen = int(rng.integers(1, width + 1))
        clen = int(rng.integers(1, N + 1))
        real = list(range(width - plen, width + clen))
        tokens[i, real] = rng.integers(3, VOCAB, len(real))
        attn[i, real] = True
        loss[i, width:width + clen] = 1
        behav[i, width:width + clen] = -rng.uniform(1.5, 3.0, clen)
    rewards = rng.integers(0, 2, (b,)).astype(np.float32)
    rewards[:2] = [1, 0]
    return RolloutBatch.create(tokens=tokens, loss_mask=loss, behavior_logprobs=behav,
                               rewards=rewards, attention_mask=attn)


def test_logprobs_from_start_equal_the_full_pass_with_gradients():
    rng = np.random.default_rng(0)
    b, t, d, v, start = 3, 9, 8, 13, 4
    hidden = jnp.asarray(rng.normal(size=(b, t, d)), jnp.float32)
    head = jnp.asarray(rng.normal(size=(d, v)), jnp.float32)
    tokens = jnp.asarray(rng.integers(0, v, (b, t)), jnp.int32)
    am = jnp.ones((b, t), bool).at[0, :2].set(False)
    w = jnp.asarray(rng.normal(size=(b, t)), jnp.float32) * (jnp.arange(t) >= start)

    def loss(h, wh, s):
        lp, ent = scoring.logprobs_from_hidden(h, wh, tokens, am, start=s, chunk_size=2)
        return jnp.sum(w * lp) + 0.3 * jnp.sum(w * ent), (lp, ent)

    (l0, (lp0, ent0)), g0 = jax.value_and_grad(loss, (0, 1), has_aux=True)(hidden, head, 0)
    (l1, (lp1, ent1)), g1 = jax.value_and_grad(loss, (0, 1), has_aux=True)(hidden, head, start)
    np.testing.assert_allclose(lp1[:, start:], lp0[:, start:], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ent1[:, start:], ent0[:, start:], rtol=1e-6, atol=1e-6)
    assert not np.any(np.asarray(lp1[:, :start])) and not np.any(np.asarray(ent1[:, :start]))
    np.testing.assert_allclose(float(l1), float(l0), rtol=1e-6)
    for a, c in zip(g1, g0):
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="start"):
        scoring.logprobs_from_hidden(hidden, head, tokens, am, start=t)


def test_align_completions_moves_each_completion_to_the_last_columns():
    batch = sampler_layout_batch()
    shift = np.asarray(completion_shift(batch.loss_mask, N))
    assert shift.tolist() == [0] * 4 + [2] * 4
    out = align_completions({"tokens": batch.tokens, "loss_mask": batch.loss_mask,
                             "rewards": batch.rewards}, batch.loss_mask, N)
    lm = np.asarray(out["loss_mask"])
    assert not lm[:, :T - N].any() and (lm.sum(1) == np.asarray(batch.loss_mask).sum(1)).all()
    # each row's real tokens keep their order; padding moved to the front
    for i in range(8):
        real = np.asarray(batch.attention_mask[i])
        np.testing.assert_array_equal(np.asarray(out["tokens"][i])[np.roll(real, shift[i])],
                                      np.asarray(batch.tokens[i])[real])
    np.testing.assert_array_equal(out["rewards"], batch.rewards)


@pytest.mark.parametrize("overrides", [dict(), dict(epochs=2, recompute_old_logprobs=True),
                                       dict(kl_mode="loss")])
def test_completion_only_scoring_gives_the_same_update(overrides):
    batch = sampler_layout_batch()
    over = dict(overrides)
    kl = over.pop("kl_mode", "none")
    runs = []
    for cols in (0, N):
        algo, state = build("grpo", kl_mode=kl, kl_coef=0.1, completion_columns=cols, **over)
        runs.append(jax.jit(algo.train_step)(state, batch))
    (full_state, full), (cut_state, cut) = runs
    assert_same_step((cut_state.params, cut), (full_state.params, full), rtol=1e-5, atol=1e-6)


def test_single_turn_runs_score_the_completion_columns():
    c = validate_config(base.get_config())
    assert algorithm_settings(c, single_turn=True).completion_columns == c.sampling.max_new_tokens
    assert algorithm_settings(c).completion_columns == 0
    c.algorithm.score_completions_only = False
    assert algorithm_settings(c, single_turn=True).completion_columns == 0
