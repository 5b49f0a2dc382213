"""SAO training loop: single rollouts, async queue, critic + Skip-Observation GAE (SPEC R5).

Seed 003 §4-5. `run(config, workdir)`:
  1. tiny policy, SFT warm-start on demonstrations (shared helpers of `pivotrl_loop`); critic =
     `ValueModel.from_policy` (trunk copied); optional value pre-training on rollouts of the
     warm policy (R5.4) — otherwise a cold critic;
  2. a rollout thread runs one rollout per prompt (agent loop, outcome verifier) with the latest
     published policy and puts each finished episode into a bounded `SampleQueue`
     (back-pressure, staleness bound: older samples dropped, optional down-weighting); with
     `sao.staleness_backpressure` the thread also waits before a rollout while the batch would
     arrive staler than `max_staleness` (`predicted_lag`), so it does not produce work that the
     queue would only drop;
  3. the learner takes `learn_batch` samples in arrival order, computes critic values,
     Skip-Observation GAE advantages (or naive token GAE, the ablation), runs `critic_updates`
     critic steps (attention optionally frozen) and one policy step with the trust-region token
     loss against the saved behaviour log-probs, then publishes a new policy version;
  4. metrics: reward, losses, queue depth / drops / lag, time split (generate vs learn vs wait),
     rollout cost, held-out success.

Critic values for GAE are computed by the learner when a batch is taken (not by the rollout
thread at sampling time): with an asynchronous queue the learner's critic is the freshest
estimate, and the rollout thread then never needs critic parameters. `old_values` of the value
clip are these learn-time values. Policy and critic losses are exact token means under gradient
accumulation (`config.train.num_microbatches`, learner aux `num_tokens`); rows marked invalid
(env_error) get loss_mask 0. Checkpoints (F's Checkpointer) hold policy + critic + optimiser
states; on resume value pre-training is skipped and training continues from the saved step
(the asynchronous producer is not bit-reproducible, so resume is "continue", not "replay").
"""

from __future__ import annotations

import threading
import time

import jax
import numpy as np
from flax import nnx

from rlvr.algorithms.critic import token_values
from rlvr.algorithms.sao import sao_advantages, sao_critic_loss, sao_policy_loss
from rlvr.models.scoring import token_logprobs
from rlvr.models.value import ValueModel, trainable_filter
from rlvr.rollout.agent_loop import episodes_to_batch
from rlvr.rollout.queue import QueueClosed, SampleQueue
from rlvr.train.learner import make_optimizer, make_update
from rlvr.train.metrics import MetricWriter
from rlvr.train.agent_setup import (fit_batch, fit_width, history_row, key_to_list, outcome_verify,
                                    periodic_eval, prepare_run, restore_run)
from rlvr.train.state import create_train_state, split_model
from rlvr.verifiers.kv_agent import KVOutcomeVerifier


def validate_sao_config(config) -> None:
    s = config.sao
    errs = []
    if s.critic_updates < 1:
        errs.append(f"config.sao.critic_updates must be >= 1, got {s.critic_updates}")
    if s.queue_size < 1:
        errs.append(f"config.sao.queue_size must be >= 1, got {s.queue_size}")
    if s.max_staleness < 0:
        errs.append(f"config.sao.max_staleness must be >= 0, got {s.max_staleness}")
    if not 0.0 < s.staleness_decay <= 1.0:
        errs.append(f"config.sao.staleness_decay must be in (0, 1], got {s.staleness_decay}")
    if (s.get("staleness_backpressure", False)
            and predicted_lag(0, s.rollout_batch, s.learn_batch) > s.max_staleness):
        errs.append(f"config.sao.staleness_backpressure needs rollout_batch <= learn_batch * "
                    f"max_staleness (else no batch can ever be produced fresh enough), got "
                    f"rollout_batch={s.rollout_batch}, learn_batch={s.learn_batch}, "
                    f"max_staleness={s.max_staleness}")
    if errs:
        raise ValueError("invalid SAO config:\n  " + "\n  ".join(errs))


def predicted_lag(depth: int, rollout_batch: int, learn_batch: int) -> int:
    """Worst-case policy-version lag of a rollout batch started now with the published policy.

    The learner consumes the queue in arrival order, `learn_batch` samples per step, one version
    per step. The batch's last sample lands at queue position depth + rollout_batch − 1. The
    learner has either already taken a whole batch it is still training on (its update
    publishes one more version before its next `get`) or taken k < learn_batch samples of its
    current batch (positions shift by k); either way the lag is at most
    ⌊(depth + rollout_batch − 1) / learn_batch⌋ + 1. Samples consumed while the batch is being
    generated only lower it.
    """
    return (depth + rollout_batch - 1) // learn_batch + 1


def _batch_dict(batch, seq_len):
    """Learner fields of a rollout batch fitted to `seq_len` (`agent_setup.fit_batch`, tokens
    padded with 0), plus its positions and rewards."""
    return {**fit_batch(batch, seq_len, 0), "positions": fit_width(batch.positions, seq_len, 0),
            "rewards": np.asarray(batch.rewards)}


def run(config, workdir: str, *, progress: bool = True, warm_cache: str | None = None) -> dict:
    """Trains with SAO; returns metrics. warm_cache: SFT warm-start cache dir (agent_setup)."""
    import dataclasses

    import tqdm

    validate_sao_config(config)
    s = config.sao
    su = prepare_run(config, workdir, "sao", warm_cache=warm_cache)
    tok, seed, T, train_tasks, ck = su.tok, su.seed, su.T, su.train_tasks, su.ckpt
    model = su.model
    critic = ValueModel.from_policy(model, rngs=nnx.Rngs(seed + 1))
    graphdef, params, rest = split_model(model)
    cgraph, cparams, crest = nnx.split(critic, trainable_filter(s.freeze_attention), ...)
    opt = make_optimizer(config.optimizer.learning_rate, max_grad_norm=config.optimizer.max_grad_norm)
    copt = make_optimizer(config.algorithm.critic_learning_rate, max_grad_norm=config.optimizer.max_grad_norm)
    state = create_train_state(params, opt, seed=seed, critic_params=cparams, critic_optimizer=copt)
    state, host, budget, key = restore_run(su, state)
    if host:
        before = host["before"]
        model = nnx.merge(graphdef, state.params, rest)
    else:
        key, k0 = jax.random.split(key)
        before = su.evaluate(model, k0)
    writer = MetricWriter(workdir, tensorboard=config.logging.tensorboard)
    nmb = config.train.num_microbatches
    token_budget = float(s.get("token_budget", 0))
    temp = config.sampling.temperature

    def policy_loss(mdl, mb, aux):
        lp, ent = token_logprobs(mdl, mb["tokens"], positions=mb["positions"],
                                 attention_mask=mb["attention_mask"], temperature=temp)
        return sao_policy_loss(lp, mb["behavior_logprobs"], mb["advantages"], mb["loss_mask"],
                               clip_low=config.algorithm.clip_low, clip_high=config.algorithm.clip_high,
                               weights=mb["weights"], entropy=ent,
                               entropy_coef=config.algorithm.entropy_coef, aux=aux)

    pupdate = jax.jit(make_update(graphdef, policy_loss, opt, rest=rest, num_microbatches=nmb))
    cupdate = jax.jit(make_update(cgraph, sao_critic_loss, copt, params_field="critic_params",
                                  num_microbatches=nmb,
                                  opt_field="critic_opt_state", rest=crest, prefix="critic/"))

    @jax.jit
    def values_of(cp, tokens, positions, attention_mask):
        # V(s_t) for the action at token t = critic output at t-1 (the state before the token)
        return token_values(nnx.merge(cgraph, cp, crest), tokens, positions=positions,
                            attention_mask=attention_mask)

    adv_kw = dict(gamma=config.algorithm.gamma, lam=config.algorithm.gae_lambda,
                  skip_observations=s.skip_observations, normalize=s.normalize_advantages)

    def critic_step(state, bd, k):
        vals = values_of(state.critic_params, bd["tokens"], bd["positions"], bd["attention_mask"])
        adv, ret = sao_advantages(bd["rewards"], vals, bd["loss_mask"], valid=bd["valid"], **adv_kw)
        cb = dict(bd, old_values=vals, returns=ret)
        cb.pop("rewards")
        return cupdate(state, cb, {}, k), adv

    verify = outcome_verify(KVOutcomeVerifier())

    def rollout(mdl, tasks, k):
        return su.rollout(mdl, tasks, k, budget, verify=verify)

    # ---- value pre-training on rollouts of the warm policy (R5.4)
    rng = np.random.default_rng(seed)
    vp_metrics = {}
    for i in range(0 if host else s.value_pretrain_steps):
        key, kr, ku = jax.random.split(key, 3)
        tasks = [train_tasks[j] for j in rng.choice(len(train_tasks), s.learn_batch)]
        bd = _batch_dict(rollout(model, tasks, kr).batch, T)
        (state, vp_metrics), _ = critic_step(state, bd, ku)

    # ---- asynchronous rollout thread → queue → learner
    queue = SampleQueue(s.queue_size, s.max_staleness, s.staleness_decay)
    published = {"version": 0, "params": state.params}
    lock = threading.Lock()
    stop = threading.Event()
    backpressure = bool(s.get("staleness_backpressure", False))
    gate_wait = [0.0]
    gen_time = [0.0]
    err = []

    def producer(k):
        try:
            prng = np.random.default_rng(seed + 7)
            while not stop.is_set():
                if backpressure:  # wait rather than produce work that would arrive stale
                    t0 = time.monotonic()
                    while not stop.is_set() and predicted_lag(
                            len(queue), s.rollout_batch, s.learn_batch) > s.max_staleness:
                        time.sleep(0.002)
                    gate_wait[0] += time.monotonic() - t0
                    if stop.is_set():
                        break
                with lock:
                    v, p_ = published["version"], published["params"]
                mdl = nnx.merge(graphdef, p_, rest)
                k, kr = jax.random.split(k)
                tasks = [train_tasks[j] for j in prng.choice(len(train_tasks), s.rollout_batch)]
                t0 = time.monotonic()
                out = rollout(mdl, tasks, kr)
                gen_time[0] += time.monotonic() - t0
                for e in out.episodes:  # one rollout per prompt, enters on arrival
                    if not queue.put(e, policy_version=v):
                        return
        except Exception as ex:  # surfaced in the learner
            err.append(ex)
        finally:
            queue.close()

    key, kp = jax.random.split(key)
    th = threading.Thread(target=producer, args=(kp,), daemon=True)
    t_start = time.monotonic()
    th.start()
    if host:
        hist = host["history"]
    else:
        hist = [history_row(0, budget, **before)]
        writer.write(0, {**hist[0], **{k: float(v) for k, v in vp_metrics.items()}})
    last = {}
    learn_time = 0.0
    bar = tqdm.trange(int(state.step), config.train.num_steps,
                      disable=not (progress and config.train.progress), desc="sao")
    try:
        for step in bar:
            if budget.exhausted(token_budget):
                break
            version = int(state.policy_version)
            got = queue.get_batch(s.learn_batch, version, timeout=600)
            if err:
                raise err[0]
            if len(got) < s.learn_batch:
                break
            t0 = time.monotonic()
            eps = [g.payload for g in got]
            b = episodes_to_batch(eps, pad_id=tok.pad_id, seq_bucket=T, policy_version=version)
            bd = _batch_dict(b, T)
            bd["weights"] = np.array([g.weight for g in got], np.float32)
            cm = {}
            adv = None
            for c in range(s.critic_updates):  # critic updated more often than the actor (R5.4)
                key, ku = jax.random.split(key)
                (state, cm), a = critic_step(state, {k: v for k, v in bd.items() if k != "weights"}, ku)
                adv = a if adv is None else adv  # advantages from the pre-update critic
            pb = {k: v for k, v in bd.items() if k != "rewards"}
            pb["advantages"] = adv
            key, ku = jax.random.split(key)
            state, pm = pupdate(state, pb, {}, ku)
            state = state.replace(step=state.step + 1, policy_version=state.policy_version + 1)
            with lock:
                published["version"] = int(state.policy_version)
                published["params"] = state.params
            learn_time += time.monotonic() - t0
            last = {k: float(v) for k, v in {**pm, **cm}.items()}
            last.update(queue.stats())
            last.update({"reward/mean": float(np.mean(bd["rewards"])), "rollout_turns": budget.turns,
                         "rollout_tokens": budget.action_tokens, "time/generate_s": gen_time[0],
                         "time/learn_s": learn_time,
                         "time/producer_gate_wait_s": gate_wait[0], "time/wall_s": time.monotonic() - t_start,
                         "sample/mean_lag": float(np.mean([g.lag for g in got]))})
            done = step + 1 == config.train.num_steps or budget.exhausted(token_budget)
            key = periodic_eval(su, config, step, done, key,
                                lambda: nnx.merge(graphdef, state.params, rest), last, hist, budget)
            writer.write(step + 1, last)
            ck.maybe_save(step + 1, state, {"budget": dataclasses.asdict(budget), "key": key_to_list(key),
                                            "before": before, "history": hist}, last=done)
            bar.set_postfix(reward=f"{last['reward/mean']:.2f}", q=int(last["queue/depth"]))
    finally:
        stop.set()
        queue.close()
        # drain so a blocked producer can exit
        try:
            while queue.get(10**9, timeout=0) is not None:
                pass
        except QueueClosed:
            pass
        th.join(timeout=120)
        writer.close()
        ck.close()
    return {"before": before, "history": hist, "last": last, "budget": dataclasses.asdict(budget),
            "step": int(state.step)}
