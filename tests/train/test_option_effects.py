"""Every option that changes the update changes it: one learner step on a fixed batch with the
option flipped gives other parameters than the baseline; and the options whose *meaning* is easy
to break silently are checked against their formula (gradient clipping, value clipping, the
GRPO ε outside the square root)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rlvr.records.batch import TrainingBatch
from rlvr.algorithms import get_algorithm
from rlvr.learner import make_optimizer, make_update
from rlvr.records.state import create_train_state
from tests.algorithms.helpers import build, fixed_batch

# (algorithm, settings overrides of the baseline, overrides of the variant); the baseline of
# each row uses behaviour log-probs as π_old so ratios differ from 1 and clipping acts.
BASE = dict(recompute_old_logprobs=False)
SETTINGS_CASES = {
    "clip_low": ("grpo", {}, dict(clip_low=0.5)),
    "clip_high": ("grpo", {}, dict(clip_high=0.01)),
    "dual_clip": ("grpo", dict(clip_low=0.01), dict(clip_low=0.01, dual_clip=1.01)),
    "aggregation": ("grpo", {}, dict(aggregation="seq-mean-token-sum")),
    "entropy_coef": ("grpo", {}, dict(entropy_coef=0.5)),
    "scale_rewards": ("grpo", {}, dict(scale_rewards="none")),
    "adv_eps": ("grpo", {}, dict(adv_eps=1.0)),
    "normalize_advantages": ("reinforce", {}, dict(normalize_advantages=True)),
    "recompute_old_logprobs": ("grpo", {}, dict(recompute_old_logprobs=True)),
    "policy_loss": ("grpo", {}, dict(policy_loss="trust_region")),
    "advantage": ("grpo", dict(group_size=4), dict(group_size=4, advantage="rloo")),
    "epochs": ("grpo", {}, dict(epochs=2)),
    "num_minibatches": ("grpo", {}, dict(num_minibatches=2)),
    "gamma": ("ppo", dict(gae_lambda=0.9), dict(gae_lambda=0.9, gamma=0.5)),
    "gae_lambda": ("ppo", {}, dict(gae_lambda=0.5)),
    "skip_observations": ("ppo", dict(gamma=0.9), dict(gamma=0.9, skip_observations=False)),
    "value_coef": ("ppo", {}, dict(value_coef=2.0)),
    "value_clip": ("ppo", dict(critic_updates=3), dict(critic_updates=3, value_clip=0.0)),
    "critic_updates": ("ppo", {}, dict(critic_updates=3)),
    "critic_warmup_steps": ("ppo", {}, dict(critic_warmup_steps=1)),
    "sao value_clip": ("sao", dict(critic_updates=3), dict(critic_updates=3, value_clip=0.0)),
    "sao aggregation": ("sao", {}, dict(aggregation="seq-mean-token-sum")),
    "kl_estimator": ("grpo", dict(kl_mode="loss"), dict(kl_mode="loss", kl_estimator="k1")),
    "kl_mode": ("grpo", dict(kl_mode="loss"), dict(kl_mode="reward")),
    "temperature": ("grpo", {}, dict(temperature=0.5)),
}


def _observations(batch):
    """A multi-turn-like batch: a gap of observation tokens inside each row's policy tokens."""
    lm = np.asarray(batch.loss_mask).copy()
    lm[:, 5:7] = 0.0
    return batch.replace(loss_mask=jnp.asarray(lm), behavior_logprobs=batch.behavior_logprobs * lm)


_BASELINES = {}  # (algorithm, baseline overrides, steps) -> state: one compile per baseline


def _baseline(name, over, steps):
    key = (name, tuple(sorted(over.items())), steps)
    if key not in _BASELINES:
        _BASELINES[key] = _step(name, dict(over), steps)
    return _BASELINES[key]


def _step(name, over, steps=1):
    kl = over.pop("kl_mode", "none")
    # plain SGD: Adam's first step is the gradient's sign, blind to most changes of magnitude
    algo, state = build(name, kl_mode=kl, kl_coef=0.1 if kl != "none" else 0.0,
                        optimizer=optax.sgd(0.1), critic_optimizer=optax.sgd(0.1), **{**BASE, **over})
    batch = _observations(fixed_batch())
    if kl != "none":  # a reference that differs from the policy, so the KL term is not 0
        state = state.replace(ref_params=jax.tree.map(lambda x: x * 0.9, state.ref_params))
    step = jax.jit(algo.train_step)
    for _ in range(steps):
        state, _ = step(state, batch)
    return state


@pytest.mark.parametrize("option", sorted(SETTINGS_CASES))
def test_option_changes_the_update(option):
    name, base, variant = SETTINGS_CASES[option]
    steps = 2 if option in ("critic_warmup_steps",) else 1
    a, b = _baseline(name, base, steps), _step(name, dict(variant), steps)
    fields = ["params"] + (["critic_params"] if get_algorithm(name).uses_critic else [])
    diff = max(float(jnp.max(jnp.abs(x - y))) for f in fields
               for x, y in zip(jax.tree.leaves(getattr(a, f)), jax.tree.leaves(getattr(b, f))))
    assert diff > 1e-7, f"{option} did not change the update"


OPTIMIZER_CASES = {
    "name": dict(name="sgd"), "learning_rate": dict(learning_rate=3e-2),
    "warmup_steps": dict(warmup_steps=5), "schedule": dict(schedule="cosine", total_steps=2),
    "weight_decay": dict(weight_decay=0.5), "b1": dict(b1=0.5), "b2": dict(b2=0.5),
    "eps": dict(eps=1.0), "max_grad_norm": dict(max_grad_norm=1e-3),
}


def _optimizer_run(**kw):
    opt = make_optimizer(**{"learning_rate": 1e-2, **kw})
    algo, state = build("grpo", optimizer=opt, **BASE)
    batch = _observations(fixed_batch())
    step = jax.jit(algo.train_step)
    for _ in range(2):
        state, _ = step(state, batch)
    return state.params


@pytest.mark.parametrize("option", sorted(OPTIMIZER_CASES))
def test_optimizer_option_changes_the_update(option):
    if "optimizer" not in _BASELINES:
        _BASELINES["optimizer"] = _optimizer_run()
    a, b = _BASELINES["optimizer"], _optimizer_run(**OPTIMIZER_CASES[option])
    diff = max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    assert diff > 1e-7, f"optimizer.{option} did not change the update"


# ---------------------------------------------------------------------- meaning, not only effect
def test_gradient_clipping_bounds_the_update_norm():
    """SGD with learning rate 1 on ½|w|² at w = (3, 4): the update is −clip(g) with |g| = 5; its
    global norm is max_grad_norm = 1 with clipping on, and 5 with it off."""
    from flax import nnx

    class W(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.array([3.0, 4.0]))

    graphdef, params = nnx.split(W(), nnx.Param)
    batch = TrainingBatch(loss_mask=jnp.ones((1, 1)), valid=jnp.ones((1,), bool))
    for clip, expect in ((1.0, 1.0), (0.0, 5.0)):
        opt = make_optimizer(1.0, name="sgd", max_grad_norm=clip)
        update = make_update(graphdef, lambda m, mb, aux: (0.5 * jnp.sum(m.w[...] ** 2), {}), opt)
        new, met = update(create_train_state(params, opt, seed=0), batch, {}, jax.random.PRNGKey(0))
        delta = np.asarray(jax.tree.leaves(new.params)[0]) - np.array([3.0, 4.0])
        np.testing.assert_allclose(np.linalg.norm(delta), expect, rtol=1e-5)
        np.testing.assert_allclose(float(met["grad_norm"]), 5.0, rtol=1e-5)


def test_ppo_value_clipping_follows_the_clipped_loss():
    """value_clip ε: ℓ = ½ max((V − R)², (V_old + clip(V − V_old, −ε, ε) − R)²) on policy tokens."""
    algo, _ = build("ppo", value_clip=0.2, value_coef=1.0)
    v = np.array([[0.0, 1.0, 0.5, 2.0]], np.float32)
    v_old = np.array([[0.0, 0.0, 0.0, 0.0]], np.float32)
    ret = np.array([[0.0, 1.0, 1.0, -1.0]], np.float32)
    lm = np.array([[0, 1, 1, 1]], np.float32)
    aux = {"num_tokens": jnp.float32(3.0), "num_seqs": jnp.float32(1.0)}
    loss, _ = algo.critic_objective(jnp.asarray(v), TrainingBatch(loss_mask=lm, old_values=v_old,
                                                                  returns=ret), aux)
    clipped = v_old + np.clip(v - v_old, -0.2, 0.2)
    per = 0.5 * np.maximum((v - ret) ** 2, (clipped - ret) ** 2)
    np.testing.assert_allclose(float(loss), per[lm > 0].mean(), rtol=1e-6)
    unclipped, _ = build("ppo", value_clip=0.0, value_coef=1.0)[0].critic_objective(
        jnp.asarray(v), TrainingBatch(loss_mask=lm, old_values=v_old, returns=ret), aux)
    np.testing.assert_allclose(float(unclipped), (0.5 * (v - ret) ** 2)[lm > 0].mean(), rtol=1e-6)
    assert float(loss) > float(unclipped)


def test_grpo_eps_is_added_to_the_std_not_inside_the_square_root():
    """Â = (R − mean) / (std + δ) (docs/algorithms.md (A.2)): with δ = 1 and rewards [1, 0, 0, 0], Â_0 =
    0.75 / (0.4330 + 1) = 0.5234, not 0.75 / √(0.1875 + 1) = 0.6882."""
    algo, state = build("grpo", adv_eps=1.0, group_size=4)
    tb = TrainingBatch(rewards=jnp.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]),
                       valid=jnp.ones(8, bool))
    _, tb, _ = algo.compute_advantages(state, tb)
    std = np.sqrt(0.1875)
    np.testing.assert_allclose(float(tb.advantages[0]), 0.75 / (std + 1.0), rtol=1e-5)
    np.testing.assert_allclose(float(tb.advantages[4]), 0.5 / (0.5 + 1.0), rtol=1e-5)
