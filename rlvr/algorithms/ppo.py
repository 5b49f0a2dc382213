"""PPO with a critic and GAE (docs/algorithms.md (A.5), (A.7), (A.8)).

Token rewards: the sequence reward on each row's last policy token, minus the per-token KL penalty
when kl.mode == "reward" (docs/algorithms.md (A.14)). Values: V(s_t) for the action at token t, aligned by
`rlvr.algorithms.critic.token_values` (the critic output at position t−1), so the baseline never
sees the action it judges. Advantages and returns from
`rlvr.core.gae.gae` (Skip-Observation form: observation tokens are skipped, docs/algorithms.md (A.6); the naive
token form with `skip_observations = False`).

Critic: `critic_updates` learner passes per RL step on the clipped value loss (value_clip); the
policy is frozen for the first `critic_warmup_steps` steps (critic warm-up). Explained variance of
the rollout values against the returns is reported (docs/algorithms.md (A.5)-(A.7)).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlvr.algorithms.base import Algorithm, exact_scale, last_token_rewards, token_share
from rlvr.algorithms.critic import token_values
from rlvr.core import kl as core_kl
from rlvr.core._util import masked_mean
from rlvr.core.gae import gae
from rlvr.core.losses import explained_variance, value_loss
from rlvr.learner import make_update


class PPO(Algorithm):
    name = "ppo"
    uses_critic = True
    default_advantage = "gae"

    def __init__(self, settings, **kw):
        super().__init__(settings, **kw)
        if self.critic_graphdef is None or self.critic_optimizer is None:
            raise ValueError("PPO needs critic_graphdef and critic_optimizer")
        s = settings
        self.critic_update = make_update(
            self.critic_graphdef, self.critic_loss, self.critic_optimizer, epochs=s.epochs,
            num_minibatches=s.num_minibatches, num_microbatches=s.num_microbatches,
            params_field="critic_params", opt_field="critic_opt_state", rest=self.critic_rest,
            prefix="critic/", trainable=self.critic_trainable)

    def token_rewards(self, state, tb):
        s = self.settings
        r = tb.token_rewards if tb.token_rewards is not None else last_token_rewards(tb.task_rewards, tb.loss_mask)
        if s.kl_mode == "reward":
            r = core_kl.kl_penalty_rewards(r, tb.old_logprobs, tb.ref_logprobs, tb.loss_mask,
                                           beta=self.kl_coef(state), kind=s.kl_estimator)
        return r

    def shape_rewards(self, state, tb):
        shaped = self.token_rewards(state, tb.replace(task_rewards=tb.rewards))
        tb = tb.replace(task_rewards=tb.rewards, token_rewards_shaped=shaped,
                        rewards=jnp.sum(shaped, axis=-1))
        return tb, {}

    def compute_advantages(self, state, tb):
        s = self.settings
        m = tb.loss_mask > 0
        values = jax.lax.stop_gradient(self.score_rows(
            lambda: self.critic_model(state.critic_params),
            lambda critic, x: token_values(critic, x.tokens, x.positions, x.attention_mask),
            tb))
        values = jnp.where(m, values, 0.0)
        adv, ret = gae(tb.token_rewards_shaped, values, m, gamma=s.gamma, lam=s.gae_lambda,
                       skip_observations=s.skip_observations)
        tb = tb.replace(advantages=adv, returns=ret, old_values=values)
        metrics = {"critic/explained_variance": explained_variance(values, ret, m),
                   "critic/value_mean": masked_mean(values, m),
                   "critic/return_mean": masked_mean(ret, m)}
        return state, tb, metrics

    def critic_loss(self, model, mb, aux):
        """The critic learner's loss: token-aligned values on the micro-batch, then
        `critic_objective`."""
        values = token_values(model, mb.tokens, mb.positions, mb.attention_mask)
        return self.critic_objective(values, mb, aux)

    def critic_objective(self, values, mb, aux):
        """value_coef × the (clipped, value_clip) value loss against the GAE returns on policy
        tokens, aggregated like the policy loss and exact under accumulation. Pure in its arrays:
        values [B, T]; mb holds loss_mask, old_values, returns."""
        s = self.settings
        m = mb.loss_mask > 0
        loss, vm = value_loss(values, mb.old_values, mb.returns, m,
                              clip_eps=s.value_clip if s.value_clip > 0 else None,
                              aggregation=s.aggregation,
                              length_normalizer=s.loss_length_normalizer or None)
        loss = loss * exact_scale(m, aux, s.aggregation)  # exact share of the minibatch loss
        share = token_share(m, aux)
        return s.value_coef * loss, {"value_loss": loss,
                                     "value_clip_frac": vm["value_clip_fraction"] * share}

    def update_critic(self, state, tb, key):
        batch = tb.only("tokens", "attention_mask", "positions", "loss_mask", "valid",
                        "old_values", "returns")
        metrics = {}
        for i, k in enumerate(jax.random.split(key, self.settings.critic_updates)):
            state, metrics = self.critic_update(state, batch, {}, k)
        return state, metrics

    def update_policy(self, state, tb, key):
        do = state.step >= self.settings.critic_warmup_steps
        new_state, metrics = super().update_policy(state, tb, key)
        state = jax.tree.map(lambda a, b: jnp.where(do, a, b), new_state, state)
        metrics = dict(metrics)
        metrics["policy/frozen"] = 1.0 - do.astype(jnp.float32)
        return state, metrics

