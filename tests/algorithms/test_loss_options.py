"""The loss options through the algorithm: one SGD step of a tiny model per option, checked
against what the option means (plain SGD makes the update linear in the loss's gradient), and
the config's refusal of combinations that make no sense."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rlvr.configs import base
from rlvr.train.config import ConfigError, validate_config
from rlvr.train.setup import algorithm_settings
from tests.algorithms.helpers import build, fixed_batch

BATCH = fixed_batch()


def _step(name="grpo", batch=BATCH, lr=1.0, **over):
    algo, state = build(name, optimizer=optax.sgd(lr), **over)
    new, metrics = jax.jit(algo.train_step)(state, batch)
    delta = [np.asarray(b - a) for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(new.params))]
    return delta, metrics


def _close(a, b, scale=1.0, rtol=2e-4):
    big = max(float(np.max(np.abs(x))) for x in b)
    assert big > 1e-6  # the reference update is not empty
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, scale * y, rtol=rtol, atol=rtol * big * abs(scale))


_BASE = {}


def _base(name="grpo", **over):
    key = (name, tuple(sorted(over.items())))
    if key not in _BASE:
        _BASE[key] = _step(name, **over)[0]
    return _BASE[key]


@pytest.mark.parametrize("policy_loss,level", [("clip", "token"), ("clip", "sequence"),
                                                ("gspo", "sequence")])
def test_tis_with_every_ratio_over_the_cap_scales_the_update_by_the_cap(policy_loss, level):
    """π_old is recomputed (ratio 1 in the loss), so ℓ' = C ℓ on every token when every
    π_old/μ > C: the SGD update is C times the uncorrected one (compared at learning rate 1/C,
    so both updates are well above float32 rounding of the parameters)."""
    cap = 1e-4 if level == "sequence" else 0.05
    delta, met = _step(policy_loss=policy_loss, is_correction="tis", is_level=level,
                       is_threshold=cap, lr=1 / cap)
    assert float(met["policy/is/truncated_fraction"]) == pytest.approx(1.0)
    assert float(met["policy/is/weight_mean"]) == pytest.approx(cap, rel=1e-5)
    _close(delta, _base(policy_loss=policy_loss))


def test_tis_weights_use_the_score_pass_pi_old_with_several_optimiser_steps():
    """Two minibatches: π_old comes from the score pass and the behaviour log-probs travel to the
    learner for the weights; every ratio over the cap gives weight C in both steps."""
    _, met = _step(num_minibatches=2, is_correction="tis", is_threshold=0.05)
    assert float(met["policy/is/truncated_fraction"]) == pytest.approx(1.0)
    assert float(met["policy/is/weight_mean"]) == pytest.approx(0.05, rel=1e-5)


def test_tis_with_a_large_cap_is_plain_importance_weighting():
    delta, met = _step(is_correction="tis", is_threshold=1e6)
    assert float(met["policy/is/truncated_fraction"]) == 0.0
    mis, met2 = _step(is_correction="mis", is_threshold=1e6)
    assert float(met2["policy/is/masked_fraction"]) == 0.0
    _close(delta, mis)  # nothing truncated, nothing masked: the same weights ρ
    w = float(met["policy/is/weight_mean"])
    assert w != pytest.approx(1.0, abs=1e-3)  # the behaviour log-probs differ from π_old


def test_mis_masks_every_token_outside_the_band():
    delta, met = _step(is_correction="mis", is_threshold=1e-3)
    assert float(met["policy/is/masked_fraction"]) == 1.0
    assert all(np.all(x == 0) for x in delta)


def test_gspo_at_ratio_one_is_the_clip_objective_with_per_sequence_means():
    """With π_old recomputed (s_i = 1), ∇J_GSPO = mean_i Â_i ∇(1/|y_i|) Σ_t log π: the clip
    objective's gradient under seq-mean-token-mean."""
    delta, met = _step(policy_loss="gspo")
    assert "policy/seq_ratio_mean" not in met and np.isfinite(float(met["policy/pg_loss"]))
    _close(delta, _base(aggregation="seq-mean-token-mean"))


def test_cispo_matches_clip_at_ratio_one_and_keeps_the_clipped_tokens_gradient():
    _close(_step(policy_loss="cispo")[0], _base())
    # π_old = the behaviour log-probs: ratios leave [0.8, 1.2] and the clip objective drops
    # the gradient of some tokens that CISPO keeps (with a clipped weight)
    cispo, met = _step(policy_loss="cispo", recompute_old_logprobs=False)
    clip, met_clip = _step(recompute_old_logprobs=False)
    assert float(met["policy/clip_frac"]) > 0 and float(met_clip["policy/clip_frac"]) > 0
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(cispo, clip)) > 1e-5


def test_constant_length_aggregation_is_the_token_sum_over_l():
    delta, _ = _step(aggregation="seq-mean-token-sum-norm", loss_length_normalizer=5)
    _close(delta, _base(aggregation="seq-mean-token-sum"), 1 / 5)


def test_overlong_shaping_adds_the_penalty_to_the_rewards():
    lengths = np.asarray(BATCH.loss_mask).sum(-1)  # 2..7 policy tokens
    _, met = _step(overlong_buffer=3, max_new_tokens=7)
    # L_max = 7, L_cache = 3: 0 up to 4 tokens, (4 − |y|)/3 up to 7
    pen = np.where(lengths <= 4, 0.0, (4 - lengths) / 3)
    assert np.any(pen < 0)
    np.testing.assert_allclose(float(met["reward/overlong_penalty_mean"]), pen.mean(), rtol=1e-5)
    np.testing.assert_allclose(float(met["reward/shaped_mean"]),
                               float(met["reward/mean"]) + pen.mean(), rtol=1e-5)


def test_overlong_filter_removes_truncated_rows_from_the_loss():
    trunc = np.array([True, False, True, False, False, False, False, True])
    batch = BATCH.replace(truncated=jnp.asarray(trunc))
    _, met = _step(batch=batch, overlong_filter=True)
    kept = float(np.asarray(BATCH.loss_mask)[~trunc].sum())
    assert float(met["batch/num_tokens"]) == kept
    _, met_off = _step(batch=batch)
    assert float(met_off["batch/num_tokens"]) == float(np.asarray(BATCH.loss_mask).sum())
    assert float(met["length/mean"]) == float(met_off["length/mean"])  # the sampled lengths
    delta, _ = _step(batch=BATCH.replace(truncated=jnp.ones((8,), bool)), overlong_filter=True)
    assert all(np.all(x == 0) for x in delta)


def test_settings_refuse_combinations_the_algorithm_cannot_honour():
    with pytest.raises(ValueError, match="is_level must be 'sequence'"):
        build("pivotrl", is_correction="tis")
    with pytest.raises(ValueError, match="recompute_old_logprobs"):
        build("grpo", is_correction="tis", recompute_old_logprobs=False)
    with pytest.raises(ValueError, match="overlong_buffer must be 0 for the critic algorithm"):
        build("ppo", overlong_buffer=2, max_new_tokens=7)


# ------------------------------------------------------------------------------ config
@pytest.mark.parametrize("edit,msg", [
    (dict(is_correction="tis", recompute_old_logprobs=False), "needs algorithm.recompute_old_logprobs=True"),
    (dict(is_correction="mis", policy_loss="gspo"), "is_level must be 'sequence'"),
    (dict(is_correction="mis", is_threshold_low=2.0), r"is_threshold_low \(2.0\) must be <"),
    (dict(is_correction="weighted"), r"is_correction must be one of \('none', 'tis', 'mis'\)"),
    (dict(overlong_buffer=10_000), "overlong_buffer .* must be 0 .* <= sampling.max_new_tokens"),
    (dict(name="ppo", policy_loss="gspo"), "policy_loss='gspo' needs one advantage per sequence"),
    (dict(name="ppo", overlong_buffer=4), "overlong_buffer = 4 does not apply"),
    (dict(is_threshold_low=0.5), r"is_threshold_low = 0.5 does not apply"),  # inactive: accepted
])
def test_config_refuses_nonsense_combinations(edit, msg):
    c = base.get_config()
    for k, v in edit.items():
        setattr(c.algorithm, k, v)
    if msg.endswith("does not apply") and "is_threshold_low" in msg:
        validate_config(c)  # a refinement of a feature that is off is inactive, not an error
        return
    with pytest.raises(ConfigError, match=msg):
        validate_config(c)


def test_config_threads_the_options_into_the_settings():
    c = base.get_config()
    c.algorithm.aggregation = "seq-mean-token-sum-norm"
    c.algorithm.is_correction = "mis"
    c.algorithm.is_threshold_low = 0.25
    c.algorithm.overlong_buffer = 4
    c.algorithm.overlong_filter = True
    c.algorithm.policy_loss = "cispo"
    s = algorithm_settings(validate_config(c))
    assert s.loss_length_normalizer == c.sampling.max_new_tokens  # 0 = max_new_tokens
    assert (s.is_correction, s.is_threshold_low, s.overlong_buffer, s.overlong_filter,
            s.max_new_tokens, s.policy_loss) == ("mis", 0.25, 4, True, c.sampling.max_new_tokens,
                                                 "cispo")
    c.algorithm.loss_length_normalizer = 100
    assert algorithm_settings(validate_config(c)).loss_length_normalizer == 100


@pytest.mark.parametrize("over", [
    dict(policy_loss="gspo", is_correction="tis", is_level="sequence"),
    dict(policy_loss="cispo", is_correction="mis", is_threshold_low=0.5),
    dict(aggregation="seq-mean-token-sum-norm", loss_length_normalizer=5, overlong_filter=True),
], ids=["gspo+tis-seq", "cispo+mis", "norm+filter"])
def test_options_are_exact_under_gradient_accumulation(over):
    """Two micro-batches give the one-batch update (minibatch-wide denominators)."""
    batch = BATCH.replace(truncated=jnp.asarray(np.arange(8) % 3 == 0))
    one, m1 = _step(batch=batch, **over)
    two, m2 = _step(batch=batch, num_microbatches=2, **over)
    _close(two, one, rtol=1e-4)
    for k in [k for k in m1 if k.startswith("policy/is/")]:
        np.testing.assert_allclose(float(m2[k]), float(m1[k]), rtol=1e-5, atol=1e-7)
