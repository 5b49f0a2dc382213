"""The running-mean baseline b of REINFORCE reaches the update: moving b moves the parameters
(without whitening), and whitening over the batch cancels it exactly ((R − b) − mean(R − b) =
R − mean R), which is why the study's running-mean arm turns whitening off."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from tests.algorithms.helpers import build, fixed_batch


def _params_after_step(baseline: float, normalize: bool):
    algo, state = build("reinforce", optimizer=optax.sgd(0.1), recompute_old_logprobs=False,
                        normalize_advantages=normalize)
    state = state.replace(extras=dict(state.extras, baseline=jnp.asarray(baseline, jnp.float32)))
    state, metrics = jax.jit(algo.train_step)(state, fixed_batch())
    assert float(metrics["reward/baseline"]) == np.float32(baseline)
    return np.concatenate([np.ravel(x) for x in jax.tree.leaves(state.params)])


def test_moving_the_running_baseline_moves_the_update():
    a, b = _params_after_step(0.0, False), _params_after_step(0.8, False)
    assert np.max(np.abs(a - b)) > 1e-4


def test_whitening_cancels_the_running_baseline():
    a, b = _params_after_step(0.0, True), _params_after_step(0.8, True)
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_study_running_mean_arm_does_not_whiten():
    from experiments.study import arms

    c = arms.arm_config("reinforce", 0, arms.scale("quick"), warm="/w", lr=1e-4)
    assert c.algorithm.name == "reinforce" and c.algorithm.normalize_advantages is False
    assert arms.arm_config("sao", 0, arms.scale("quick"), warm="/w", lr=1e-4).algorithm.normalize_advantages
