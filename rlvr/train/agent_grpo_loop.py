"""Full-trajectory GRPO on the multi-turn KV agent task: the baseline of ablations 1 and 4 (issue 6).

`run(config, workdir)` (`algorithm.name = "agent_grpo"`, configs/agent_grpo.py):
  1. the same tiny policy and SFT warm-start as PivotRL/SAO (`rlvr.train.agent_setup`); the
     warm policy is frozen as π_ref for an optional KL penalty;
  2. each step: `tasks_per_step` training tasks × G full episodes from the initial state through
     the agent loop (one token stream per episode, loss_mask 1 on action tokens only, R1.1);
  3. outcome reward from `KVOutcomeVerifier` on the authoritative final state; group-normalised
     Â_i = (R_i − R̄)/(σ_R + δ) broadcast to every action token of episode i (R3.1);
  4. token-level PPO clip (`rlvr.core.losses.ppo_token_loss`, token-mean) against the sampler's
     behaviour log-probs, on action tokens only (observations: loss_mask 0, no gradient); exact
     token-mean under gradient accumulation (learner aux `num_tokens`); optional β·KL to π_ref;
  5. rollout cost counted exactly as PivotRL counts it (`Budget`: one turn per sampled action,
     action tokens generated), so success-vs-rollout-tokens curves are comparable;
     `grpo.token_budget` stops training once that many action tokens were generated.
Checkpoints / resume as in the PivotRL loop (F's Checkpointer via `AgentCheckpoint`).
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr.algorithms.base import token_share
from rlvr.core.kl import kl_estimate
from rlvr.core.losses import ppo_token_loss
from rlvr.models.scoring import token_logprobs
from rlvr.rollout.agent_loop import episodes_to_batch
from rlvr.algorithms.pivotrl import local_advantages
from rlvr.train.agent_setup import (fit_batch, history_row, key_to_list, outcome_verify,
                                    periodic_eval, prepare_run, restore_run, rng_state)
from rlvr.train.learner import make_optimizer, make_update
from rlvr.train.metrics import MetricWriter
from rlvr.train.state import create_train_state, split_model
from rlvr.verifiers.kv_agent import KVOutcomeVerifier


def validate_grpo_config(config) -> None:
    g = config.grpo
    errs = []
    if g.group_size < 2:
        errs.append(f"config.grpo.group_size (G) must be > 1, got {g.group_size}")
    if g.tasks_per_step < 1:
        errs.append(f"config.grpo.tasks_per_step must be >= 1, got {g.tasks_per_step}")
    if g.token_budget < 0:
        errs.append(f"config.grpo.token_budget must be >= 0, got {g.token_budget}")
    if errs:
        raise ValueError("invalid agent GRPO config:\n  " + "\n  ".join(errs))


def agent_grpo_loss(logprobs, behavior_logprobs, advantages, loss_mask, *, clip_eps: float,
                    ref_logprobs=None, kl_coef: float = 0.0, aux=None):
    """Token-level PPO clip on action tokens + optional β·KL(π_θ‖π_ref) (R3.5, R3.7).

    Args:
      logprobs, behavior_logprobs, loss_mask: float [B, T] (loss_mask 1 on action tokens only).
      advantages: float [B] episode advantages (broadcast over the episode's action tokens).
      ref_logprobs: [B, T] under π_ref when kl_coef > 0.
      aux: learner aux (`num_tokens`): the token-mean becomes an exact micro-batch share.
    Returns: (loss, metrics).
    """
    loss, metrics = ppo_token_loss(logprobs, behavior_logprobs, advantages, loss_mask,
                                   clip_low=clip_eps, clip_high=clip_eps)
    metrics = dict(metrics)
    m = jnp.asarray(loss_mask, jnp.float32)
    if kl_coef > 0.0:
        kl = (kl_estimate(logprobs, ref_logprobs, "k3") * m).sum() / jnp.maximum(m.sum(), 1.0)
        loss = loss + kl_coef * kl
        metrics["kl"] = kl
    if aux is not None:
        sc = token_share(loss_mask, aux)
        loss = loss * sc
        metrics = {k: (x if k in ("ratio_max", "ratio_min", "num_tokens") else x * sc)
                   for k, x in metrics.items()}
    return loss, metrics


def run(config, workdir: str, *, progress: bool = True, warm_cache: str | None = None) -> dict:
    """Trains with full-trajectory GRPO; returns metrics (also written to workdir)."""
    import tqdm

    validate_grpo_config(config)
    g = config.grpo
    su = prepare_run(config, workdir, "grpo", warm_cache=warm_cache)
    tok, T, train_tasks, ck = su.tok, su.T, su.train_tasks, su.ckpt
    graphdef, params, rest = split_model(su.model)
    opt = make_optimizer(config.optimizer.learning_rate, max_grad_norm=config.optimizer.max_grad_norm)
    state = create_train_state(params, opt, seed=su.seed, ref_params=params)
    rng = np.random.default_rng(su.seed)
    state, host, budget, key = restore_run(su, state, rng)
    ref_model = nnx.merge(graphdef, state.ref_params, rest)
    writer = MetricWriter(workdir, tensorboard=config.logging.tensorboard)
    if host:
        before, hist = host["before"], host["history"]
    else:
        key, k0 = jax.random.split(key)
        before = su.evaluate(ref_model, k0)
        hist = [history_row(0, budget, **before)]
        writer.write(0, hist[0])
    temp = config.sampling.temperature
    verify = outcome_verify(KVOutcomeVerifier())

    def loss_fn(mdl, mb, aux):
        lp, _ = token_logprobs(mdl, mb["tokens"], positions=mb["positions"],
                               attention_mask=mb["attention_mask"], temperature=temp)
        return agent_grpo_loss(lp, mb["behavior_logprobs"], mb["advantages"], mb["loss_mask"],
                               clip_eps=g.clip_eps, ref_logprobs=mb["ref_logprobs"],
                               kl_coef=g.kl_coef, aux=aux)

    update = jax.jit(make_update(graphdef, loss_fn, opt, epochs=config.train.epochs,
                                 num_minibatches=config.train.num_minibatches,
                                 num_microbatches=config.train.num_microbatches, rest=rest))

    @jax.jit
    def ref_logprobs(tokens, positions, attention_mask):
        return token_logprobs(ref_model, tokens, positions=positions, attention_mask=attention_mask,
                              temperature=temp)[0]

    bar = tqdm.trange(int(state.step), config.train.num_steps,
                      disable=not (progress and config.train.progress), desc="agent_grpo")
    last = {}
    for step in bar:
        if budget.exhausted(g.token_budget):
            break
        t0 = time.monotonic()
        tasks = [train_tasks[i] for i in rng.choice(len(train_tasks), g.tasks_per_step,
                                                    replace=len(train_tasks) < g.tasks_per_step)]
        key, kr = jax.random.split(key)
        cur = nnx.merge(graphdef, state.params, rest)
        out = su.rollout(cur, tasks, kr, budget, group_size=g.group_size, verify=verify)
        b = episodes_to_batch(out.episodes, pad_id=tok.pad_id, seq_bucket=T,
                              policy_version=int(state.policy_version))
        rewards = np.asarray(b.rewards, np.float32)
        batch = fit_batch(b, T, tok.pad_id)
        batch["advantages"] = local_advantages(rewards, g.group_size, valid=batch["valid"])
        am = batch["attention_mask"]
        batch["positions"] = np.where(am, np.cumsum(am, 1) - 1, 0).astype(np.int32)
        if g.kl_coef > 0:
            batch["ref_logprobs"] = ref_logprobs(batch["tokens"], batch["positions"], am)
        else:
            batch["ref_logprobs"] = np.zeros_like(batch["behavior_logprobs"])
        key, ku = jax.random.split(key)
        state, met = update(state, batch, {}, ku)
        state = state.replace(step=state.step + 1, policy_version=state.policy_version + 1)
        last = {k: float(v) for k, v in met.items()}
        last.update({"reward/mean": float(rewards.mean()), "rollout_turns": budget.turns,
                     "rollout_tokens": budget.action_tokens, "time/step_s": time.monotonic() - t0})
        done = step + 1 == config.train.num_steps or budget.exhausted(g.token_budget)
        key = periodic_eval(su, config, step, done, key, lambda: nnx.merge(graphdef, state.params, rest),
                            last, hist, budget)
        writer.write(step + 1, last)
        ck.maybe_save(step + 1, state, {"budget": dataclasses.asdict(budget), "rng": rng_state(rng),
                                        "key": key_to_list(key), "before": before, "history": hist},
                      last=done)
        bar.set_postfix(reward=f"{last['reward/mean']:.2f}")
    writer.close()
    ck.close()
    return {"before": before, "history": hist, "last": last, "budget": dataclasses.asdict(budget),
            "step": int(state.step)}
