"""Every algorithm runs two steps with finite losses; GRPO step == hand computation; PPO critic learns."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from rlvr.core.advantages import grpo_advantages
from rlvr.core.losses import ppo_token_loss
from rlvr.models import scoring
from tests.algorithms.helpers import build, fixed_batch


@pytest.mark.parametrize("name,kw", [
    ("grpo", dict(kl_mode="loss", kl_coef=0.1, dual_clip=3.0, clip_high=0.28)),
    ("rloo", dict(kl_mode="reward", kl_coef=0.05, aggregation="seq-mean-token-mean")),
    ("reinforce", dict(aggregation="seq-mean-token-sum", num_microbatches=2)),
    ("ppo", dict(kl_mode="reward", kl_coef=0.05, num_minibatches=2, epochs=2)),
    ("grpo", dict(kl_mode="loss", kl_coef=0.1, num_minibatches=2, num_microbatches=2, remat=True)),
    ("ppo", dict(num_minibatches=2, num_microbatches=2, epochs=2, remat=True)),
])
def test_two_steps_finite(name, kw):
    algo, state = build(name, **kw)
    step = jax.jit(algo.train_step, donate_argnums=0)
    for i in range(2):
        state, metrics = step(state, fixed_batch(seed=i))
        for k, v in metrics.items():
            assert np.isfinite(np.asarray(v)).all(), (name, k, v)
        assert float(metrics["policy/skipped"]) == 0
    assert int(state.step) == 2 and int(state.policy_version) == 2
    if name == "reinforce":
        assert float(state.extras["baseline"]) != 0.0
    if name == "ppo":
        assert "critic/value_loss" in metrics and "critic/explained_variance" in metrics


def test_grpo_step_matches_hand_computation():
    """One GRPO step (SGD, 1 epoch) == grad of core ppo_token_loss on core grpo_advantages."""
    lr = 0.1
    algo, state = build("grpo", optimizer=optax.sgd(lr), clip_low=0.2, clip_high=0.3,
                        recompute_old_logprobs=False)
    batch = fixed_batch(seed=3)
    params0 = jax.tree.map(jnp.copy, state.params)
    new_state, metrics = jax.jit(algo.train_step)(state, batch)

    adv = grpo_advantages(batch.rewards.reshape(-1, 2), scale_by_std=True, eps=1e-6).reshape(-1)

    def loss(p):
        model = nnx.merge(algo.policy_graphdef, p, algo.policy_rest)
        lp, _ = scoring.token_logprobs(model, batch.tokens, positions=batch.positions,
                                       attention_mask=batch.attention_mask, temperature=1.0)
        val, _ = ppo_token_loss(lp, batch.behavior_logprobs, adv, batch.loss_mask,
                                clip_low=0.2, clip_high=0.3, aggregation="token-mean")
        return val

    ref_loss, g = jax.value_and_grad(loss)(params0)
    expected = jax.tree.map(lambda p, gg: p - lr * gg, params0, g)
    np.testing.assert_allclose(float(metrics["policy/pg_loss"]), float(ref_loss), rtol=1e-5)
    for a, b in zip(jax.tree.leaves(expected), jax.tree.leaves(new_state.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
    np.testing.assert_allclose(float(metrics["advantage/mean"]),
                               float((np.asarray(adv)[:, None] * batch.loss_mask).sum() / batch.loss_mask.sum()),
                               atol=1e-6)


def test_ppo_value_loss_falls_on_fixed_batch():
    algo, state = build("ppo", lr=3e-3, critic_warmup_steps=100)
    batch = fixed_batch(seed=5, rewards=np.array([1, 0, 1, 1, 0, 0, 1, 0], np.float32))
    step = jax.jit(algo.train_step, donate_argnums=0)
    losses = []
    p0 = jax.tree.map(jnp.copy, state.params)
    for _ in range(6):
        state, metrics = step(state, batch)
        losses.append(float(metrics["critic/value_loss"]))
        assert float(metrics["policy/frozen"]) == 1.0
    assert losses[-1] < 0.7 * losses[0], losses
    # critic warm-up: the policy did not move
    for a, b in zip(jax.tree.leaves(p0), jax.tree.leaves(state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_policy_version_advances_only_when_the_policy_changed():
    """A step whose update is skipped as non-finite, or a critic-only warm-up step, publishes no
    new policy version (docs/architecture.md §3: the version names the parameters that sampled)."""
    algo, state = build("grpo")
    batch = fixed_batch()
    step = jax.jit(algo.train_step)
    ok, m = step(state, batch)
    assert int(ok.policy_version) == 1 and float(m["policy/skipped"]) == 0
    poisoned = state.replace(params=jax.tree.map(lambda x: x * jnp.nan, state.params))
    bad, m = step(poisoned, batch)
    assert float(m["policy/skipped"]) == 1 and int(bad.policy_version) == 0 and int(bad.step) == 1
    ppo, pstate = build("ppo", critic_warmup_steps=1)
    warm, m = jax.jit(ppo.train_step)(pstate, batch)
    assert float(m["policy/frozen"]) == 1 and int(warm.policy_version) == 0
    for a, b in zip(jax.tree.leaves(warm.params), jax.tree.leaves(pstate.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("name,remat", [("grpo", False), ("ppo", False), ("grpo", True),
                                        ("ppo", True)])
def test_no_grad_passes_in_micro_batch_chunks_equal_one_pass(name, remat):
    """With num_microbatches > 1, π_old, π_ref and the critic's values are scored one learner
    micro-batch of rows at a time (B / (minibatches · microbatches)): same numbers as one pass,
    rematerialised blocks (an nnx transform inside each chunk's `lax.map` body) included."""
    kw = dict(kl_mode="loss", kl_coef=0.1, epochs=2, num_minibatches=2, remat=remat)
    one, state = build(name, **kw, num_microbatches=1)
    chunked, _ = build(name, **kw, num_microbatches=2)
    assert one.score_chunks() == 1 and chunked.score_chunks() == 4
    if name == "ppo":  # a fresh critic's head is zero: move it so the values differ per token
        leaves, tree = jax.tree.flatten(state.critic_params)
        noise = [0.3 * jax.random.normal(jax.random.key(i), x.shape, x.dtype)
                 for i, x in enumerate(leaves)]
        state = state.replace(critic_params=jax.tree.unflatten(
            tree, [x + n for x, n in zip(leaves, noise)]))
    tb = one.make_train_batch(fixed_batch(seed=7))
    got = {}
    for label, algo in (("one", one), ("chunked", chunked)):
        scored, metrics = jax.jit(algo.score)(state, tb)
        if name == "ppo":
            scored, _ = jax.jit(algo.shape_rewards)(state, scored)
            _, scored, _ = jax.jit(algo.compute_advantages)(state, scored)
        got[label] = scored, metrics
    keys = ["old_logprobs", "ref_logprobs"] + (["old_values"] if name == "ppo" else [])
    for k in keys:
        np.testing.assert_allclose(np.asarray(getattr(got["chunked"][0], k)), np.asarray(getattr(got["one"][0], k)),
                                   atol=1e-6, err_msg=k)
        assert np.abs(np.asarray(getattr(got["one"][0], k))).max() > 0, k
    for k, v in got["one"][1].items():
        np.testing.assert_allclose(float(got["chunked"][1][k]), float(v), atol=1e-6, err_msg=k)
