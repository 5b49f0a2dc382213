"""SAO: single-rollout asynchronous optimisation with token-level credit (SPEC R5, R3.4, R3.5).

Seed 003 §4-5. One rollout per prompt (no group baseline, R5.1); a critic V gives token values
and Skip-Observation GAE gives token advantages that flow between actions across observations
(R3.4, `rlvr.core.gae.gae(..., skip_observations=True)`):

    δ = r_t + γ V(a_{i+1,0}) − V(a_{i,N}),   Â(a_{i,N}) = δ + γλ Â(a_{i+1,0});

the policy loss is the strict double-sided token trust region against the behaviour log-probs
saved at sampling time (R5.3, `rlvr.core.losses.trust_region_token_loss`): tokens whose ratio
leaves [1−ε_low, 1+ε_high] give neither loss nor gradient; stale samples within the staleness
bound may be down-weighted (weight multiplies their advantages). The critic is trained more
often than the actor (`critic_updates`, default 2), can be pre-trained on rollouts before RL,
and can be trained with attention frozen (R5.4; `rlvr.models.value.trainable_filter`).

Everything here is pure array math over RolloutBatch fields; the asynchronous loop (rollout
thread → `rlvr.rollout.queue.SampleQueue` → learner) is `rlvr.train.sao_loop`.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from rlvr.algorithms.critic import token_values
from rlvr.core.gae import gae
from rlvr.core.losses import trust_region_token_loss, value_loss


def _token_share(loss_mask, aux):
    """(policy tokens in this micro-batch) / aux["num_tokens"]: exact token-mean share."""
    if aux is None:
        return 1.0
    return jnp.sum(jnp.asarray(loss_mask) > 0).astype(jnp.float32) / jnp.maximum(aux["num_tokens"], 1.0)


_NON_MEAN = ("ratio_max", "ratio_min", "num_tokens")


def terminal_token_rewards(rewards, loss_mask):
    """Places each row's scalar reward on its last policy token (others 0).

    Args: rewards float [B]; loss_mask [B, T]. Returns float [B, T].
    """
    chex.assert_rank(rewards, 1)
    chex.assert_rank(loss_mask, 2)
    m = jnp.asarray(loss_mask) > 0
    t = m.shape[1]
    last = jnp.max(jnp.where(m, jnp.arange(t)[None, :], -1), axis=1)  # -1: no policy token
    onehot = (jnp.arange(t)[None, :] == last[:, None]) & m
    return jnp.where(onehot, jnp.asarray(rewards, jnp.float32)[:, None], 0.0)


def sao_advantages(rewards, values, loss_mask, *, gamma: float = 1.0, lam: float = 1.0,
                   skip_observations: bool = True, normalize: bool = True, valid=None):
    """Token advantages and value targets for single rollouts (R5.2, R3.4).

    Args:
      rewards: float [B] outcome rewards (placed on the last policy token).
      values: float [B, T] critic values V(s_t) of the state BEFORE token t
        (`rlvr.algorithms.critic.token_values`: the critic's output at t−1), at sampling time.
      loss_mask: [B, T] 1 on policy tokens.
      skip_observations: True = Skip-Observation GAE; False = naive token GAE (ablation: the
        observation tokens become ordinary steps with their own values).
      normalize: whiten advantages over the batch's valid policy tokens (mean 0, std 1).
    Returns: (advantages [B, T] (0 off policy tokens), returns [B, T]).
    """
    chex.assert_rank(values, 2)
    m = jnp.asarray(loss_mask, jnp.float32)
    if valid is not None:
        m = m * jnp.asarray(valid, jnp.float32)[:, None]
    token_rewards = terminal_token_rewards(rewards, m)
    adv, ret = gae(token_rewards, values, m, gamma=gamma, lam=lam,
                   skip_observations=skip_observations)
    if normalize:
        n = jnp.maximum(m.sum(), 1.0)
        mean = (adv * m).sum() / n
        var = (jnp.square(adv - mean) * m).sum() / n
        adv = (adv - mean) / jnp.sqrt(var + 1e-8) * m
    return jax.lax.stop_gradient(adv), jax.lax.stop_gradient(ret)


def sao_policy_loss(logprobs, behavior_logprobs, advantages, loss_mask, *, clip_low: float = 0.2,
                    clip_high: float = 0.2, aggregation: str = "token-mean", weights=None,
                    entropy=None, entropy_coef: float = 0.0, aux=None):
    """Trust-region token loss vs the saved behaviour log-probs (R3.5, R5.3).

    Args:
      logprobs, behavior_logprobs, loss_mask: float [B, T].
      advantages: float [B, T] (from `sao_advantages`).
      weights: optional float [B] staleness weights (queue down-weighting); multiply advantages.
      entropy: optional [B, T] token entropies for an entropy bonus (eq.72).
      aux: optional learner aux (`num_tokens` of the whole minibatch): token means become exact
        shares so that sums over micro-batches equal the minibatch token-mean (token-mean only).
    Returns: (loss, metrics).
    """
    adv = jnp.asarray(advantages, jnp.float32)
    if weights is not None:
        adv = adv * jnp.asarray(weights, jnp.float32)[:, None]
    loss, metrics = trust_region_token_loss(logprobs, behavior_logprobs, adv, loss_mask,
                                            clip_low=clip_low, clip_high=clip_high,
                                            aggregation=aggregation)
    metrics = dict(metrics)
    if entropy is not None:
        m = jnp.asarray(loss_mask, jnp.float32)
        ent = (entropy * m).sum() / jnp.maximum(m.sum(), 1.0)
        metrics["entropy"] = ent
        loss = loss - entropy_coef * ent
    if aux is not None:
        if aggregation != "token-mean":
            raise ValueError(f"sao_policy_loss: aux (exact accumulation) needs aggregation='token-mean', got {aggregation!r}")
        sc = _token_share(loss_mask, aux)
        loss = loss * sc
        metrics = {k: (x if k in _NON_MEAN else x * sc) for k, x in metrics.items()}
    return loss, metrics


def sao_value_loss(values, old_values, returns, loss_mask, *, clip_eps=None, aux=None):
    """Critic regression on policy tokens (where `gae` defines returns) (R3.3, R5.4).

    aux: optional learner aux (`num_tokens`): exact token-mean share under accumulation.
    """
    loss, metrics = value_loss(values, old_values, returns, loss_mask, clip_eps=clip_eps)
    if aux is not None:
        sc = _token_share(loss_mask, aux)
        loss = loss * sc
        metrics = {k: (x if k == "explained_variance" else x * sc) for k, x in metrics.items()}
    return loss, metrics


def sao_critic_loss(critic, batch, aux=None):
    """Critic loss on a learner batch: token-aligned values (`token_values`, V(s_t) = critic
    output at t−1) regressed on the Skip-Observation GAE returns over policy tokens (R5.4).

    batch: tokens, positions, attention_mask, loss_mask [B, T]; old_values, returns [B, T]
    (both from `sao_advantages` over `token_values` of the pre-update critic).
    """
    v = token_values(critic, batch["tokens"], positions=batch["positions"],
                     attention_mask=batch["attention_mask"])
    return sao_value_loss(v, batch["old_values"], batch["returns"], batch["loss_mask"], aux=aux)
