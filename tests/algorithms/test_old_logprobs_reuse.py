"""π_old from the behaviour log-probs when a probe shows the sampler and the learner agree.

With `old_logprobs_gap_bound` > 0 and several optimiser steps, `score` runs the policy's pass on
one micro-batch of rows; within the bound π_old = the behaviour log-probs (the rest of the pass
skipped), else the pass is completed and the update equals the one without the bound.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from configs import base
from rlvr.algorithms import AlgorithmSettings
from rlvr.train.config import ConfigError, validate_config
from tests.algorithms.helpers import build, fixed_batch

SETTINGS = dict(recompute_old_logprobs=True, num_minibatches=2, epochs=2)


def on_policy_batch():
    """fixed_batch with behaviour log-probs equal to the initial policy's own (gap 0)."""
    batch = fixed_batch()
    algo, state = build("grpo", **SETTINGS)
    tb = algo.make_train_batch(batch)
    lp, _ = algo._logprobs(algo.policy_model(state.params), tb)
    lp = jnp.where(tb.loss_mask > 0, lp, 0.0)
    return dataclasses.replace(batch, behavior_logprobs=np.asarray(lp, np.float32))


def _step(batch, bound):
    # Plain SGD, so the update is linear in the gradients: Adam's g/√v would turn a float
    # rounding difference in a near-zero gradient entry into a step of size lr, and the
    # comparison would test rounding, not the loss.
    algo, state = build("grpo", old_logprobs_gap_bound=bound, optimizer=optax.sgd(0.1),
                        **SETTINGS)
    return jax.jit(algo.train_step)(state, batch)


def _assert_same_update(a, b):
    (sa, ma), (sb, mb) = a, b
    for x, y in zip(jax.tree.leaves(sa.params), jax.tree.leaves(sb.params)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)
    for key in ("policy/pg_loss", "policy/ratio_mean", "policy/grad_norm", "policy/approx_kl"):
        np.testing.assert_allclose(float(ma[key]), float(mb[key]), rtol=1e-5, atol=1e-6,
                                   err_msg=key)


def test_reuse_within_the_bound_changes_no_loss_value():
    batch = on_policy_batch()
    reused = _step(batch, 1e-3)
    assert float(reused[1]["policy/old_logprobs_reused"]) == 1.0
    assert float(reused[1]["policy/behavior_logprob_gap"]) <= 1e-5
    _assert_same_update(reused, _step(batch, 0.0))


def test_recompute_when_the_gap_exceeds_the_bound():
    batch = fixed_batch()  # random behaviour log-probs: a large gap
    probed = _step(batch, 1e-3)
    assert float(probed[1]["policy/old_logprobs_reused"]) == 0.0
    assert float(probed[1]["policy/behavior_logprob_gap"]) > 1e-3
    _assert_same_update(probed, _step(batch, 0.0))
    # and reusing μ here would have moved the update: the recompute is what keeps it
    reused = _step(batch, 1e3)
    assert float(reused[1]["policy/old_logprobs_reused"]) == 1.0
    assert not np.allclose(float(reused[1]["policy/ratio_mean"]),
                           float(probed[1]["policy/ratio_mean"]), rtol=1e-4)


def test_the_bound_is_validated():
    with pytest.raises(ValueError, match="old_logprobs_gap_bound"):
        AlgorithmSettings(old_logprobs_gap_bound=-1.0)
    with pytest.raises(ValueError, match="old_logprobs_gap_bound"):
        AlgorithmSettings(old_logprobs_gap_bound=0.1, is_correction="tis")
    c = base.get_config()
    c.algorithm.old_logprobs_gap_bound = -0.5
    with pytest.raises(ConfigError, match="old_logprobs_gap_bound"):
        validate_config(c)
    c.algorithm.old_logprobs_gap_bound = 0.1
    c.algorithm.is_correction = "tis"
    with pytest.raises(ConfigError, match="old_logprobs_gap_bound"):
        validate_config(c)
