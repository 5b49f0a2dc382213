"""Token-aligned critic values (rlvr.algorithms.critic): one convention for PPO and SAO."""

import jax
import numpy as np
from flax import nnx

from rlvr.algorithms import critic as critic_mod
from rlvr.models import ValueModel
from tests.algorithms.helpers import tiny_config


def test_align_values_matches_numpy_shift():
    raw = np.random.default_rng(0).normal(size=(3, 6)).astype(np.float32)
    expect = np.zeros_like(raw)
    for b in range(3):
        for t in range(1, 6):
            expect[b, t] = raw[b, t - 1]
    np.testing.assert_array_equal(np.asarray(critic_mod.align_values(raw)), expect)


def test_value_of_an_action_does_not_see_the_action():
    model = ValueModel(tiny_config(), rngs=nnx.Rngs(0))
    # a non-zero head so values depend on the input
    model.value_head.kernel.set_value(jax.random.normal(jax.random.key(1), model.value_head.kernel.shape))
    tokens = np.random.default_rng(0).integers(3, 11, (2, 7)).astype(np.int32)
    changed = tokens.copy()
    changed[:, 4] = np.where(tokens[:, 4] == 3, 4, 3)
    v0 = np.asarray(critic_mod.token_values(model, tokens))
    v1 = np.asarray(critic_mod.token_values(model, changed))
    np.testing.assert_allclose(v0[:, :5], v1[:, :5], rtol=0, atol=0)  # V(s_t), t ≤ 4: token 4 unseen
    assert np.all(np.abs(v0[:, 5] - v1[:, 5]) > 0)                     # V(s_5) reads token 4
    np.testing.assert_allclose(v0[:, 1:], np.asarray(model(tokens))[:, :-1], rtol=1e-6)
