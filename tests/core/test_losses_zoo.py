"""The loss-zoo pieces against hand-computed cases: TIS / MIS importance weights (token and
sequence level), CISPO, Dr. GRPO's constant-length aggregation, stop-gradient loss weights, and
DAPO's overlong penalty and filter."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr.core.importance import importance_weights
from rlvr.core.losses import (
    aggregate,
    cispo_token_loss,
    gspo_sequence_loss,
    ppo_token_loss,
    trust_region_token_loss,
    value_loss,
)
from rlvr.core.shaping import overlong_filter, overlong_penalty

# two rows of three tokens; the last token of row 0 is off the mask (garbage log-probs there)
OLD = np.array([[-1.0, -2.0, 9.0], [-0.6, -1.0, -0.4]], np.float32)
BEHAV = np.array([[-1.5, -1.0, 3.0], [-1.0, -1.4, -0.5]], np.float32)
MASK = np.array([[1, 1, 0], [1, 1, 1]], np.float32)
# δ = old − behav on the mask: row 0: 0.5, −1.0; row 1: 0.4, 0.4, 0.1


def test_tis_token_truncates_each_ratio_at_c():
    w, met = importance_weights(OLD, BEHAV, MASK, correction="tis", level="token", threshold=1.5)
    e = math.exp
    # ρ = e^.5 = 1.65 is capped at 1.5; e^−1, e^.4 = 1.49, e^.1 are kept
    expect = np.array([[1.5, e(-1.0), 0.0], [e(0.4), e(0.4), e(0.1)]])
    np.testing.assert_allclose(np.asarray(w), expect, rtol=1e-6)
    np.testing.assert_allclose(float(met["weight_mean"]), (1.5 + e(-1.0) + 2 * e(0.4) + e(0.1)) / 5,
                               rtol=1e-6)
    np.testing.assert_allclose(float(met["truncated_fraction"]), 1 / 5)
    assert float(met["masked_fraction"]) == 0.0
    np.testing.assert_allclose(float(met["log_ratio_mean"]), (0.5 - 1.0 + 0.4 + 0.4 + 0.1) / 5, rtol=1e-6)


def test_tis_sequence_truncates_the_product_of_ratios():
    w, met = importance_weights(OLD, BEHAV, MASK, correction="tis", level="sequence", threshold=2.0)
    # row 0: Σδ = −0.5 → e^−0.5; row 1: Σδ = 0.9 → e^0.9 = 2.46 > 2 → 2
    np.testing.assert_allclose(np.asarray(w), [math.exp(-0.5), 2.0], rtol=1e-6)
    np.testing.assert_allclose(float(met["truncated_fraction"]), 0.5)
    np.testing.assert_allclose(float(met["weight_mean"]), (math.exp(-0.5) + 2.0) / 2, rtol=1e-6)


def test_mis_token_masks_ratios_outside_the_band_and_keeps_the_others():
    w, met = importance_weights(OLD, BEHAV, MASK, correction="mis", level="token",
                                threshold=1.5, threshold_low=0.5)
    # ρ = e^.5 = 1.65 (out), e^−1 = 0.37 (out), e^.4 = 1.49 (in) ×2, e^.1 = 1.105 (in)
    e = math.exp
    np.testing.assert_allclose(np.asarray(w), [[0, 0, 0], [e(0.4), e(0.4), e(0.1)]], rtol=1e-6)
    np.testing.assert_allclose(float(met["masked_fraction"]), 2 / 5)
    assert float(met["truncated_fraction"]) == 0.0


def test_mis_sequence_masks_whole_rows():
    w, met = importance_weights(OLD, BEHAV, MASK, correction="mis", level="sequence",
                                threshold=2.0, threshold_low=0.0)
    np.testing.assert_allclose(np.asarray(w), [math.exp(-0.5), 0.0], rtol=1e-6)  # e^.9 > 2 out
    np.testing.assert_allclose(float(met["masked_fraction"]), 0.5)


def test_importance_weights_are_stable_on_long_sequences_and_carry_no_gradient():
    old = jnp.full((1, 400), -0.5)
    beh = jnp.full((1, 400), -1.5)  # Σδ = 400: exp overflows float32 without the log-space cap
    w, _ = importance_weights(old, beh, jnp.ones((1, 400)), correction="tis", level="sequence")
    np.testing.assert_allclose(np.asarray(w), [2.0])
    g = jax.grad(lambda o: jnp.sum(importance_weights(o, BEHAV, MASK, correction="mis",
                                                       level="token")[0]))(jnp.asarray(OLD))
    assert np.all(np.asarray(g) == 0)


def test_importance_weights_jit_matches_eager_and_rejects_bad_settings():
    f = jax.jit(importance_weights, static_argnames=("correction", "level", "threshold",
                                                     "threshold_low"))
    for corr in ("tis", "mis"):
        for level in ("token", "sequence"):
            a, _ = importance_weights(OLD, BEHAV, MASK, correction=corr, level=level)
            b, _ = f(OLD, BEHAV, MASK, correction=corr, level=level)
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
    with pytest.raises(ValueError, match="correction"):
        importance_weights(OLD, BEHAV, MASK, correction="none")
    with pytest.raises(ValueError, match="level"):
        importance_weights(OLD, BEHAV, MASK, correction="tis", level="row")
    with pytest.raises(ValueError, match="threshold"):
        importance_weights(OLD, BEHAV, MASK, correction="tis", threshold=0.0)


def test_token_weights_scale_each_tokens_loss_without_gradient():
    """ℓ'_t = sg(w_t) ℓ_t: with ratio 1 (logp = old) ℓ_t = −Â, so the token-mean loss is
    −Σ w Â / N and d loss / d w = 0."""
    lp = jnp.asarray(OLD)
    adv = jnp.array([1.0, -2.0])
    w = jnp.array([[0.5, 2.0, 7.0], [1.0, 0.0, 3.0]])
    expect = -(0.5 * 1 + 2.0 * 1 + 1.0 * -2 + 0.0 + 3.0 * -2) / 5
    for fn in (ppo_token_loss, trust_region_token_loss):
        loss, _ = fn(lp, OLD, adv, MASK, clip_low=0.2, clip_high=0.2, token_weights=w)
        np.testing.assert_allclose(float(loss), expect, rtol=1e-6)
        gw = jax.grad(lambda x: fn(lp, OLD, adv, MASK, clip_low=0.2, clip_high=0.2,
                                   token_weights=x)[0])(w)
        assert np.all(np.asarray(gw) == 0)
    # a [B] weight is one per row
    loss, _ = ppo_token_loss(lp, OLD, adv, MASK, token_weights=jnp.array([2.0, 0.5]))
    np.testing.assert_allclose(float(loss), -(2 * 1 * 2 + 0.5 * -2 * 3) / 5, rtol=1e-6)


def test_sequence_weights_scale_each_sequence_objective():
    """GSPO with ratio 1: J = mean_i w_i Â_i."""
    adv = jnp.array([1.0, -2.0])
    loss, _ = gspo_sequence_loss(jnp.asarray(OLD), OLD, adv, MASK, seq_weights=jnp.array([0.5, 2.0]))
    np.testing.assert_allclose(float(loss), -(0.5 * 1.0 + 2.0 * -2.0) / 2, rtol=1e-6)


def test_cispo_gradient_is_the_clipped_weight_times_advantage():
    """ℓ_t = −sg(clip(ρ_t, 1−ε_l, 1+ε_h)) Â logp_t; token 0: ρ = e^0.5 → 1.2, token 1: ρ = 1."""
    lp = jnp.array([[-1.0, -0.2]])
    old = jnp.array([[-1.5, -0.2]])
    adv = jnp.array([2.0])
    m = jnp.ones((1, 2))
    loss, met = cispo_token_loss(lp, old, adv, m, clip_low=0.2, clip_high=0.2)
    np.testing.assert_allclose(float(loss), -(1.2 * 2 * -1.0 + 1.0 * 2 * -0.2) / 2, rtol=1e-6)
    g = jax.grad(lambda x: cispo_token_loss(x, old, adv, m, clip_low=0.2, clip_high=0.2)[0])(lp)
    np.testing.assert_allclose(np.asarray(g), [[-1.2 * 2 / 2, -1.0 * 2 / 2]], rtol=1e-6)
    np.testing.assert_allclose(float(met["clip_fraction_high"]), 0.5)
    # PPO's clip drops the first token's gradient (Â > 0, ρ > 1 + ε); CISPO keeps it
    gp = jax.grad(lambda x: ppo_token_loss(x, old, adv, m, clip_low=0.2, clip_high=0.2)[0])(lp)
    assert float(gp[0, 0]) == 0.0 and float(g[0, 0]) != 0.0


def test_constant_length_aggregation_divides_row_sums_by_l():
    x = jnp.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    m = jnp.array([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # the empty row is left out of the mean
    np.testing.assert_allclose(float(aggregate(x, m, "seq-mean-token-sum-norm", 4)),
                               (3 / 4 + 4 / 4) / 2, rtol=1e-6)
    with pytest.raises(ValueError, match="length_normalizer"):
        aggregate(x, m, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="length_normalizer"):
        aggregate(x, m, "seq-mean-token-sum-norm", 0)
    # through a loss: ratio 1 → ℓ_t = −Â_b; rows: −2·1/4 and −1·(−3)/4
    loss, _ = ppo_token_loss(x, x, jnp.array([1.0, -3.0, 5.0]), m,
                             aggregation="seq-mean-token-sum-norm", length_normalizer=4)
    np.testing.assert_allclose(float(loss), (-2 / 4 + 3 / 4) / 2, rtol=1e-6)
    v, _ = value_loss(x, x, x + 2.0, m, aggregation="seq-mean-token-sum-norm", length_normalizer=4)
    np.testing.assert_allclose(float(v), 0.5 * (8 / 4 + 4 / 4) / 2, rtol=1e-6)


def test_overlong_penalty_worked_example():
    """L_max = 10, L_cache = 4: no penalty up to 6, linear to −1 at 10, −1 beyond."""
    got = overlong_penalty(jnp.array([5, 6, 7, 9, 10, 11]), max_length=10, buffer=4)
    np.testing.assert_allclose(np.asarray(got), [0, 0, -0.25, -0.75, -1.0, -1.0], rtol=1e-6)
    half = jax.jit(lambda n: overlong_penalty(n, max_length=10, buffer=4, factor=0.5))(jnp.array([8]))
    np.testing.assert_allclose(np.asarray(half), [-0.25], rtol=1e-6)
    with pytest.raises(ValueError, match="buffer"):
        overlong_penalty(jnp.array([1]), max_length=10, buffer=11)


def test_overlong_filter_zeroes_truncated_rows():
    m = jnp.array([[1.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    got = overlong_filter(m, jnp.array([False, True, False]))
    np.testing.assert_array_equal(np.asarray(got), [[1, 1], [0, 0], [1, 0]])
    assert got.dtype == m.dtype
