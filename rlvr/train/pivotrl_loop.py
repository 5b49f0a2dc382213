"""PivotRL training loop on the multi-turn KV agent task (SPEC R4, seed 000 §3, seed 003 §3).

`run(config, workdir)`:
  1. tiny char-level policy, SFT warm-start on demonstrations (loss on action tokens only, R1.1);
     the warm-started policy is frozen as π_ref;
  2. candidates = every demonstration turn (optionally + turns of the policy's own rollouts);
     probe each with m samples of π_ref, score with the functional verifier (or exact match, the
     ablation), keep by `pivot_filter`; the kept set + statistics go to `workdir/pivots.json`;
  3. each step: `states_per_step` kept states × K fresh actions of π_old, rescored,
     group-normalised, turn-level `sequence_clip_loss` + β KL to π_ref (R3.6); optional
     corrective hint on the local prefix only; optional re-profiling every N steps;
  4. metrics: rollout cost (turns, action tokens, probe included), held-out success through the
     agent loop + outcome verifier, pivot statistics.
`pivot.selection` = filter | variance | all | random is the pivot-selection ablation and
`pivot.reward` = functional | exact the reward ablation (issue 6). `algorithm.name = "grpo_full"`
style baselines live in experiments/.

Shared helpers (policy, SFT warm-start, evaluation, Budget, checkpoint glue) live in
`rlvr.train.agent_setup`. Checkpoints (F's
`Checkpointer`, `config.checkpoint.*`) hold the policy, its optimiser state and the frozen π_ref;
the host part holds the kept pivot keys, budget, history and RNG positions, so relaunching the
same command continues where it stopped (with candidates = demo+rollout the kept set is
re-probed on resume, since the old rollouts are not stored).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr.algorithms.pivotrl import (build_local_batch, demo_candidates, local_advantages,
                                     pivotrl_objective, probe_pivots, rollout_candidates,
                                     select_random)
from rlvr.models.scoring import token_logprobs
from rlvr.rollout.agent_loop import sample_turn
from rlvr.tasks import kv_agent
from rlvr.train.agent_setup import (Budget, history_row, key_to_list, periodic_eval, prepare_run,
                                    restore_run, rng_state)
from rlvr.train.learner import make_optimizer, make_update
from rlvr.train.metrics import MetricWriter
from rlvr.train.state import create_train_state, split_model
from rlvr.verifiers.kv_agent import ExactMatchTurnVerifier, KVFunctionalVerifier

SELECTIONS = ("filter", "variance", "all", "random")
REWARDS = ("functional", "exact")


def validate_pivot_config(config) -> None:
    p = config.pivot
    errs = []
    if p.m < 2:
        errs.append(f"config.pivot.m must be > 1, got {p.m}")
    if p.group_size < 2:
        errs.append(f"config.pivot.group_size (K) must be > 1, got {p.group_size}")
    if not 0.0 < p.lambda_diff <= 1.0:
        errs.append(f"config.pivot.lambda_diff must be in (0, 1], got {p.lambda_diff}")
    if p.selection not in SELECTIONS:
        errs.append(f"config.pivot.selection must be one of {SELECTIONS}, got {p.selection!r}")
    if p.reward not in REWARDS:
        errs.append(f"config.pivot.reward must be one of {REWARDS}, got {p.reward!r}")
    if not 0.0 <= p.get("hint_fraction", 1.0) <= 1.0:
        errs.append(f"config.pivot.hint_fraction must be in [0, 1], got {p.hint_fraction}")
    if p.get("token_budget", 0) < 0:
        errs.append(f"config.pivot.token_budget must be >= 0, got {p.token_budget}")
    if p.get("demo_style", "canonical") not in kv_agent.DEMO_STYLES:
        errs.append(f"config.pivot.demo_style must be one of {kv_agent.DEMO_STYLES}, got {p.demo_style!r}")
    if p.candidates not in ("demo", "demo+rollout"):
        errs.append(f"config.pivot.candidates must be 'demo' or 'demo+rollout', got {p.candidates!r}")
    if errs:
        raise ValueError("invalid PivotRL config:\n  " + "\n  ".join(errs))


def make_turn_scorer(kind: str):
    """score(candidate, action_text) -> 1.0/0.0 (R2.8 functional, or exact-match ablation)."""
    if kind == "functional":
        v = KVFunctionalVerifier()
        return lambda c, text: float(v.accepts(c.snapshot, text))
    v = ExactMatchTurnVerifier()
    return lambda c, text: float(v.accepts(c.snapshot, text, c.reference_action))


def _act_fn(model, sampling, tok, term_id, prompt_bucket):
    return lambda prefixes, key: sample_turn(model, prefixes, key, sampling, tokenizer=tok,
                                             terminator_id=term_id, prompt_bucket=prompt_bucket)


def select_pivots(cands, ref_act, score, key, p, budget: Budget, seed: int, save_path=None):
    """Kept set per `pivot.selection`; probe cost is added to `budget` (0 for all/random)."""
    if p.selection in ("all", "random"):
        if p.selection == "all":
            return list(cands), {"pivot/kept_fraction": 1.0}
        n = max(1, int(round(p.random_fraction * len(cands))))
        return select_random(cands, n, seed), {"pivot/kept_fraction": n / len(cands)}
    ps = probe_pivots(cands, ref_act, score, key, m=p.m,
                      lambda_diff=(p.lambda_diff if p.selection == "filter" else 1.0))
    budget.add(ps.probe_turns, ps.probe_tokens)
    if save_path:
        ps.save(save_path)  # kept set + statistics (R4.1)
    return ps.kept, ps.stats()


def hinted_rows(n_states: int, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """bool [n_states]: which kept states get the corrective hint this step (R4.3 mixing).

    exactly round(fraction · n_states) states, chosen at random, are hinted; the rest stay
    un-hinted, so every batch mixes hinted local continuations with plain ones.
    """
    k = int(round(fraction * n_states))
    out = np.zeros(n_states, bool)
    out[rng.choice(n_states, size=k, replace=False)] = True
    return out


def run(config, workdir: str, *, progress: bool = True, warm_cache: str | None = None) -> dict:
    """Trains with PivotRL; returns the final metrics (also written to workdir).

    warm_cache: optional directory caching the SFT warm-start keyed by config + seed (experiments
    share one warm start across arms). Resumes from `workdir/checkpoints` when one exists.
    """
    import os
    import time

    import tqdm

    validate_pivot_config(config)
    p = config.pivot
    su = prepare_run(config, workdir, "pivot", warm_cache=warm_cache)
    tok, term_id, seed, train_tasks, sampling, ck = (su.tok, su.term_id, su.seed, su.train_tasks,
                                                     su.sampling, su.ckpt)
    graphdef, params, rest = split_model(su.model)
    opt = make_optimizer(config.optimizer.learning_rate, max_grad_norm=config.optimizer.max_grad_norm)
    state = create_train_state(params, opt, seed=seed, ref_params=params)
    rng = np.random.default_rng(seed)
    state, host, budget, key = restore_run(su, state, rng)
    ref_model = nnx.merge(graphdef, state.ref_params, rest)  # frozen π_ref
    writer = MetricWriter(workdir, tensorboard=config.logging.tensorboard)
    score = make_turn_scorer(p.reward)
    pb = p.prompt_bucket
    token_budget = float(p.get("token_budget", 0))
    hint_fraction = float(p.get("hint_fraction", 1.0))

    def candidates(policy_model, k):
        demos = functools.partial(kv_agent.demonstrations, style=p.get("demo_style", "canonical"))
        cands = demo_candidates(train_tasks, tokenizer=tok, demonstrations=demos,
                                render_episode=kv_agent.render_episode)
        if p.candidates == "demo+rollout":
            out = su.rollout(policy_model, train_tasks, k, budget)
            cands += rollout_candidates(out.episodes)
        return cands

    if host is not None and p.candidates == "demo":
        by_key = {c.key: c for c in candidates(None, None)}
        kept = [by_key[k] for k in host["kept"]]
        pstats, before, hist = host["pivot_stats"], host["before"], host["history"]
    else:
        key, k0, k1, k2 = jax.random.split(key, 4)
        before = su.evaluate(ref_model, k0) if host is None else host["before"]
        ref_act = _act_fn(ref_model, sampling, tok, term_id, pb)
        kept, pstats = select_pivots(candidates(ref_model, k1), ref_act, score, k2, p, budget, seed,
                                     save_path=os.path.join(workdir, "pivots.json"))
        pstats = {k: v for k, v in pstats.items() if not isinstance(v, list)}
        hist = [history_row(0, budget, **before)] if host is None else host["history"]
        if host is None:
            writer.write(0, {**hist[0], **pstats})
    temp = config.sampling.temperature

    def loss_fn(mdl, mb, aux):
        lp, _ = token_logprobs(mdl, mb["tokens"], positions=mb["positions"],
                               attention_mask=mb["attention_mask"], temperature=temp)
        return pivotrl_objective(lp, mb["behavior_logprobs"], mb["advantages"], mb["loss_mask"],
                                 clip_eps=p.clip_eps, ref_logprobs=mb["ref_logprobs"],
                                 kl_coef=p.kl_coef, valid=mb["valid"], aux=aux)

    update = jax.jit(make_update(graphdef, loss_fn, opt, epochs=config.train.epochs,
                                 num_minibatches=config.train.num_minibatches,
                                 num_microbatches=config.train.num_microbatches, rest=rest))
    first = int(state.step)
    bar = tqdm.trange(first, config.train.num_steps, disable=not (progress and config.train.progress),
                      desc="pivotrl")
    last = {}
    for step in bar:
        if not kept or budget.exhausted(token_budget):
            break
        t0 = time.monotonic()
        idx = rng.choice(len(kept), size=p.states_per_step, replace=len(kept) < p.states_per_step)
        states = [kept[i] for i in idx]
        hinted = hinted_rows(len(states), hint_fraction, rng) if p.hint else np.zeros(len(states), bool)
        prefixes = []
        for c, h in zip(states, hinted):
            pre = list(c.prefix_tokens)
            if h:  # corrective hint on the local prefix only (loss_mask 0, never a target, R4.3)
                pre = pre + tok.encode(p.hint)
            prefixes += [pre] * p.group_size
        key, ks = jax.random.split(key)
        cur = nnx.merge(graphdef, state.params, rest)
        ts = sample_turn(cur, prefixes, ks, sampling, tokenizer=tok, terminator_id=term_id,
                         prompt_bucket=pb)
        rewards = np.array([score(c, t) for c, t in zip([s for s in states for _ in range(p.group_size)], ts.texts)],
                           np.float32)
        budget.add(len(prefixes), sum(len(a) for a in ts.action_ids))
        ref_lp, _ = token_logprobs(ref_model, jnp.asarray(ts.tokens), positions=jnp.asarray(ts.positions),
                                   attention_mask=jnp.asarray(ts.attention_mask), temperature=temp)
        b = build_local_batch(ts, rewards, policy_version=int(state.policy_version),
                              ref_logprobs=np.asarray(ref_lp) * ts.loss_mask)
        batch = {"tokens": b.tokens, "positions": b.positions, "attention_mask": b.attention_mask,
                 "loss_mask": b.loss_mask, "behavior_logprobs": b.behavior_logprobs,
                 "ref_logprobs": b.ref_logprobs, "valid": b.valid,
                 "advantages": local_advantages(rewards, p.group_size)}
        key, ku = jax.random.split(key)
        state, met = update(state, batch, {}, ku)
        state = state.replace(step=state.step + 1, policy_version=state.policy_version + 1)
        t_learn = time.monotonic() - t0
        last = {k: float(v) for k, v in met.items()}
        last.update({"reward/mean": float(rewards.mean()), "rollout_turns": budget.turns,
                     "rollout_tokens": budget.action_tokens, "time/step_s": t_learn,
                     "pivot/num_kept": float(len(kept)), "pivot/hinted_fraction": float(hinted.mean())})
        if p.reprofile_every and (step + 1) % p.reprofile_every == 0:
            key, k1, k2 = jax.random.split(key, 3)
            cur = nnx.merge(graphdef, state.params, rest)
            kept, pst = select_pivots(candidates(cur, k1), _act_fn(cur, sampling, tok, term_id, pb),
                                      score, k2, p, budget, seed + step)
            last.update({k: v for k, v in pst.items() if not isinstance(v, list)})
        done = step + 1 == config.train.num_steps or budget.exhausted(token_budget)
        key = periodic_eval(su, config, step, done, key, lambda: nnx.merge(graphdef, state.params, rest),
                            last, hist, budget)
        writer.write(step + 1, last)
        ck.maybe_save(step + 1, state, {
            "budget": dataclasses.asdict(budget), "rng": rng_state(rng), "key": key_to_list(key),
            "kept": [c.key for c in kept], "pivot_stats": pstats, "before": before,
            "history": hist}, last=done)
        bar.set_postfix(reward=f"{last['reward/mean']:.2f}", kept=len(kept))
    writer.close()
    ck.close()
    return {"before": before, "history": hist, "last": last, "pivot_stats": pstats,
            "budget": dataclasses.asdict(budget), "step": int(state.step)}
