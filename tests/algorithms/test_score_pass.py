"""The no-grad π_old forward pass runs only when something needs it before the update.

With one optimiser step (epochs × minibatches = 1) and no KL penalty on π_old, the loss's own
forward pass sees the parameters π_old would be computed at, so `score` skips its pass; the
update, the entropy and the behaviour gap must equal those of the step that runs it.
"""

import jax
import numpy as np
import pytest

from tests.algorithms.helpers import build, fixed_batch


def _forward_passes(algo, state, batch) -> int:
    """How many times the policy's log-probs are traced in one train step."""
    calls = []
    original = algo._logprobs

    def counting(model, tb):
        calls.append(1)
        return original(model, tb)

    algo._logprobs = counting
    try:
        jax.eval_shape(algo.train_step, state, batch)
    finally:
        del algo._logprobs
    return len(calls)


@pytest.mark.parametrize("overrides, expected", [
    (dict(recompute_old_logprobs=True), 1),
    (dict(recompute_old_logprobs=False), 1),
    (dict(recompute_old_logprobs=True, epochs=2), 2),
    (dict(recompute_old_logprobs=True, num_minibatches=2), 2),
    (dict(recompute_old_logprobs=False, kl_mode="reward"), 3),   # π_old, π_ref, loss
    (dict(recompute_old_logprobs=True, kl_mode="loss"), 3),
    (dict(recompute_old_logprobs=False, kl_mode="loss"), 2),     # π_ref, loss
])
def test_score_pass_runs_only_when_needed(overrides, expected):
    over = dict(overrides)
    kl = over.pop("kl_mode", "none")
    algo, state = build("grpo", kl_mode=kl, kl_coef=0.1, **over)
    assert _forward_passes(algo, state, fixed_batch()) == expected


@pytest.mark.parametrize("name, recompute", [("grpo", True), ("grpo", False), ("ppo", True),
                                             ("sao", False)])
def test_skipped_score_pass_gives_the_same_update(name, recompute, monkeypatch):
    batch = fixed_batch()
    algo, state = build(name, recompute_old_logprobs=recompute)
    assert not algo.scores_before_update
    skipped_state, skipped = jax.jit(algo.train_step)(state, batch)

    ref_algo, ref_state = build(name, recompute_old_logprobs=recompute)
    monkeypatch.setattr(type(ref_algo), "scores_before_update", property(lambda self: True))
    full_state, full = jax.jit(ref_algo.train_step)(ref_state, batch)

    for a, b in zip(jax.tree.leaves(skipped_state.params), jax.tree.leaves(full_state.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    for key in ("policy/entropy", "policy/behavior_logprob_gap", "policy/pg_loss",
                "policy/ratio_mean", "policy/grad_norm"):
        if key in full:
            np.testing.assert_allclose(float(skipped[key]), float(full[key]), rtol=1e-5,
                                       atol=1e-6, err_msg=key)
    assert float(skipped["policy/behavior_logprob_gap"]) > 0.1  # the metric is really computed
    if recompute:
        assert float(skipped["policy/ratio_mean"]) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("epochs", [1, 2])  # 1: the score pass is skipped; 2: it runs
def test_stale_rows_keep_the_behaviour_policy_as_pi_old(epochs):
    """With asynchronous collection (`off_policy_rows`) and recompute_old_logprobs, rows an
    older policy sampled keep π_old = behaviour log-probs (an off-policy ratio ≠ 1); rows of the
    learner's own version are recomputed (ratio 1 at the first step)."""
    batch = fixed_batch()
    b = batch.batch_size
    stale = np.arange(b) % 2 == 0
    algo, state = build("grpo", recompute_old_logprobs=True, off_policy_rows=True, epochs=epochs)
    state = state.replace(policy_version=state.policy_version + 3)
    versions = np.where(stale, 1, 3).astype(np.int32)
    batch = batch.replace(policy_version=versions)
    tb = algo.make_train_batch(batch)
    np.testing.assert_array_equal(np.asarray(algo.stale_rows(state, tb)), stale)
    scored, _ = algo.score(state, tb)
    # the loss's π_old, as the policy objective sees it, for both paths
    logprobs, _ = algo._logprobs(algo.policy_model(state.params), tb)
    mb = scored.only(*[k for k in algo.policy_batch_keys(scored) if k != "advantages"])
    m = np.asarray(tb.loss_mask) > 0
    if mb.old_logprobs is not None:
        old = np.asarray(mb.old_logprobs)
    else:
        old = np.where(np.asarray(mb.stale_rows)[:, None], np.asarray(mb.behavior_logprobs),
                       np.where(m, np.asarray(logprobs), 0.0))
    behav = np.asarray(batch.behavior_logprobs)
    lp = np.where(m, np.asarray(logprobs), 0.0)
    np.testing.assert_allclose(old[stale], behav[stale])
    np.testing.assert_allclose(old[~stale], lp[~stale], atol=1e-5)
    ratio = np.exp(lp - old)
    assert np.all(np.abs(ratio[stale][m[stale]] - 1) > 1e-3)  # a real off-policy correction
    np.testing.assert_allclose(ratio[~stale][m[~stale]], 1.0, atol=1e-5)
    # the whole step runs and reports ratios away from 1 on the stale half
    _, metrics = jax.jit(algo.train_step)(state, batch)
    assert abs(float(metrics["policy/ratio_mean"]) - 1.0) > 1e-3


def test_synchronous_rows_are_never_stale():
    algo, state = build("grpo", recompute_old_logprobs=True)
    tb = algo.make_train_batch(fixed_batch())
    assert algo.stale_rows(state, tb) is None and tb.policy_version is None
