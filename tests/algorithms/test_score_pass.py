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
