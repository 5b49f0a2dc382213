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

The helpers at the top (policy, SFT warm-start, evaluation) are shared with `sao_loop`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr.envs.kv_store import ALPHABET, KVStoreEnv
from rlvr.models import ModelConfig, Transformer
from rlvr.models.scoring import token_logprobs
from rlvr.models.tokenizer import CharTokenizer
from rlvr.rollout.agent_loop import EpisodeStart, run_episodes
from rlvr.rollout.sampler import SamplingParams
from rlvr.tasks import kv_agent
from rlvr.train.learner import make_optimizer, make_update
from rlvr.train.state import create_train_state, split_model
from rlvr.verifiers.kv_agent import KVOutcomeVerifier


def make_tokenizer() -> CharTokenizer:
    return CharTokenizer(ALPHABET)


def make_policy(config, tok, seed: int) -> Transformer:
    m = config.model
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=m.d_model, intermediate_size=m.d_ff,
                      num_layers=m.num_layers, num_heads=m.num_heads, num_kv_heads=m.num_kv_heads,
                      head_dim=m.d_model // m.num_heads, max_position_embeddings=m.max_seq_len)
    return Transformer(cfg, rngs=nnx.Rngs(seed))


def demo_stream(task, tok) -> tuple[list[int], list[float]]:
    """bos + prompt + (action, observation)*: loss mask 1 on action tokens only."""
    toks = [tok.bos_id] + tok.encode(task.prompt)
    mask = [0.0] * len(toks)
    for t in kv_agent.demonstrations(task):
        a, o = tok.encode(t.action), tok.encode(t.observation)
        toks += a + o
        mask += [1.0] * len(a) + [0.0] * len(o)
    return toks, mask


def _pad(rows, width, fill):
    out = np.full((len(rows), width), fill, np.float32 if isinstance(fill, float) else np.int32)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def sft_warm_start(model: Transformer, tasks, tok, *, steps: int, batch_size: int, lr: float,
                   seq_len: int, seed: int) -> tuple[Transformer, list[float]]:
    """Supervised warm-start on demonstration streams (NLL on action tokens). Returns losses."""
    if steps <= 0:
        return model, []
    streams = [demo_stream(t, tok) for t in tasks]
    toks = _pad([s[0] for s in streams], seq_len, tok.pad_id)
    mask = _pad([s[1] for s in streams], seq_len, 0.0)
    am = _pad([[1] * len(s[0]) for s in streams], seq_len, 0).astype(bool)
    graphdef, params, rest = split_model(model)
    opt = make_optimizer(lr, max_grad_norm=1.0)
    state = create_train_state(params, opt, seed=seed)

    def loss_fn(mdl, mb, aux):
        lp, _ = token_logprobs(mdl, mb["tokens"], attention_mask=mb["attention_mask"])
        nll = -(lp * mb["loss_mask"]).sum() / jnp.maximum(aux["num_tokens"], 1.0)
        return nll, {"nll": nll}

    update = jax.jit(make_update(graphdef, loss_fn, opt, rest=rest))
    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(steps):
        idx = rng.choice(len(streams), size=batch_size, replace=len(streams) < batch_size)
        batch = {"tokens": jnp.asarray(toks[idx]), "loss_mask": jnp.asarray(mask[idx]),
                 "attention_mask": jnp.asarray(am[idx]), "valid": jnp.ones((batch_size,), bool)}
        state, met = update(state, batch, {}, jax.random.PRNGKey(0))
        losses.append(float(met["nll"]))
    return nnx.merge(graphdef, state.params, rest), losses


def starts_for(tasks, tok, group_size: int = 1) -> list[EpisodeStart]:
    return [EpisodeStart(task=t, prefix_tokens=tuple([tok.bos_id] + tok.encode(t.prompt)),
                         seed=t.random_seed) for t in tasks for _ in range(group_size)]


def outcome_verify(verifier: KVOutcomeVerifier):
    return lambda e: verifier.verify_env(e.task, e.env)


def evaluate(model, tasks, tok, key, *, max_turns: int, max_new_tokens: int, max_tokens: int,
             temperature: float = 1.0, samples: int = 1) -> dict:
    """Held-out sampled success through the agent loop + outcome verifier (R7.1)."""
    out = run_episodes(model, starts_for(tasks, tok, samples), lambda: KVStoreEnv(fault_prob=0.0),
                       key, tokenizer=tok,
                       sampling=SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens),
                       max_turns=max_turns, max_tokens=max_tokens,
                       verify=outcome_verify(KVOutcomeVerifier()))
    return {"eval/success": out.stats["rollout/success"], "eval/turns": out.stats["rollout/turns"] / len(out.episodes)}


@dataclasses.dataclass
class Budget:
    """Rollout cost counters (actions sampled and tokens generated/consumed), ablation 1."""

    turns: float = 0.0
    action_tokens: float = 0.0

    def add(self, turns, tokens):
        self.turns += float(turns)
        self.action_tokens += float(tokens)


# ================================================================================ PivotRL loop
from rlvr.algorithms.pivotrl import (PivotSet, build_local_batch, demo_candidates,  # noqa: E402
                                     local_advantages, pivotrl_objective, probe_pivots,
                                     rollout_candidates, select_random)
from rlvr.rollout.agent_loop import sample_turn  # noqa: E402
from rlvr.train.metrics import MetricWriter  # noqa: E402
from rlvr.verifiers.kv_agent import ExactMatchTurnVerifier, KVFunctionalVerifier  # noqa: E402

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


def run(config, workdir: str, *, progress: bool = True) -> dict:
    """Trains with PivotRL; returns the final metrics (also written to workdir)."""
    import os
    import time

    import tqdm

    validate_pivot_config(config)
    p = config.pivot
    os.makedirs(workdir, exist_ok=True)
    writer = MetricWriter(workdir, tensorboard=config.logging.tensorboard)
    tok = make_tokenizer()
    term_id = tok.encode("\n")[0]
    seed = config.seed
    key = jax.random.PRNGKey(seed)
    train_tasks = kv_agent.generate(p.num_tasks, split="train", seed=seed, difficulty=p.difficulty)
    eval_tasks = kv_agent.generate(config.eval.num_tasks, split="eval", seed=config.eval.seed,
                                   difficulty=p.difficulty)
    model = make_policy(config, tok, seed)
    sft_tasks = kv_agent.generate(p.sft_tasks, split="train", seed=seed + 1000, difficulty=p.difficulty)
    model, _ = sft_warm_start(model, sft_tasks, tok, steps=config.train.sft_steps,
                              batch_size=config.train.sft_batch_size,
                              lr=config.train.sft_learning_rate, seq_len=config.model.max_seq_len,
                              seed=seed)
    graphdef, params, rest = split_model(model)
    ref_model = nnx.merge(graphdef, jax.tree.map(jnp.copy, params), rest)  # frozen π_ref
    sampling = SamplingParams(temperature=config.sampling.temperature,
                              max_new_tokens=config.sampling.max_new_tokens,
                              stop_token_ids=(term_id, tok.eos_id))
    ev = dict(max_turns=p.max_turns, max_new_tokens=config.sampling.max_new_tokens,
              max_tokens=config.model.max_seq_len, temperature=config.eval.temperature,
              samples=config.eval.samples_per_task)
    key, k0 = jax.random.split(key)
    before = evaluate(model, eval_tasks, tok, k0, **ev)
    budget = Budget()
    score = make_turn_scorer(p.reward)
    pb = p.prompt_bucket

    def candidates(policy_model, k):
        cands = demo_candidates(train_tasks, tokenizer=tok, demonstrations=kv_agent.demonstrations,
                                render_episode=kv_agent.render_episode)
        if p.candidates == "demo+rollout":
            out = run_episodes(policy_model, starts_for(train_tasks, tok), lambda: KVStoreEnv(fault_prob=0.0),
                               k, tokenizer=tok, sampling=sampling, max_turns=p.max_turns,
                               max_tokens=config.model.max_seq_len)
            budget.add(out.stats["rollout/turns"], out.stats["rollout/action_tokens"])
            cands += rollout_candidates(out.episodes)
        return cands

    key, k1, k2 = jax.random.split(key, 3)
    ref_act = _act_fn(ref_model, sampling, tok, term_id, pb)
    kept, pstats = select_pivots(candidates(model, k1), ref_act, score, k2, p, budget, seed,
                                 save_path=os.path.join(workdir, "pivots.json"))
    opt = make_optimizer(config.optimizer.learning_rate, max_grad_norm=config.optimizer.max_grad_norm)
    state = create_train_state(params, opt, seed=seed)
    temp = config.sampling.temperature

    def loss_fn(mdl, mb, aux):
        lp, _ = token_logprobs(mdl, mb["tokens"], positions=mb["positions"],
                               attention_mask=mb["attention_mask"], temperature=temp)
        loss, met = pivotrl_objective(lp, mb["behavior_logprobs"], mb["advantages"], mb["loss_mask"],
                                      clip_eps=p.clip_eps, ref_logprobs=mb["ref_logprobs"],
                                      kl_coef=p.kl_coef, valid=mb["valid"])
        return loss, met

    update = jax.jit(make_update(graphdef, loss_fn, opt, epochs=config.train.epochs,
                                 num_minibatches=config.train.num_minibatches, rest=rest))
    rng = np.random.default_rng(seed)
    hist = [{"step": 0, "rollout_turns": budget.turns, "rollout_tokens": budget.action_tokens, **before}]
    writer.write(0, {**hist[0], **{k: v for k, v in pstats.items() if not isinstance(v, list)}})
    bar = tqdm.trange(config.train.num_steps, disable=not (progress and config.train.progress),
                      desc="pivotrl")
    last = {}
    for step in bar:
        if not kept:
            break
        t0 = time.monotonic()
        idx = rng.choice(len(kept), size=p.states_per_step, replace=len(kept) < p.states_per_step)
        states = [kept[i] for i in idx]
        prefixes = []
        for c in states:
            pre = list(c.prefix_tokens)
            if p.hint:  # corrective hint on the local prefix only (never a target, R4.3)
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
                     "pivot/num_kept": float(len(kept))})
        if p.reprofile_every and (step + 1) % p.reprofile_every == 0:
            key, k1, k2 = jax.random.split(key, 3)
            cur = nnx.merge(graphdef, state.params, rest)
            kept, pst = select_pivots(candidates(cur, k1), _act_fn(cur, sampling, tok, term_id, pb),
                                      score, k2, p, budget, seed + step)
            last.update({k: v for k, v in pst.items() if not isinstance(v, list)})
        if config.eval.every and ((step + 1) % config.eval.every == 0 or step + 1 == config.train.num_steps):
            key, ke = jax.random.split(key)
            last.update(evaluate(nnx.merge(graphdef, state.params, rest), eval_tasks, tok, ke, **ev))
            hist.append({"step": step + 1, "rollout_turns": budget.turns,
                         "rollout_tokens": budget.action_tokens, "eval/success": last["eval/success"]})
        writer.write(step + 1, last)
        bar.set_postfix(reward=f"{last['reward/mean']:.2f}", kept=len(kept))
    writer.close()
    return {"before": before, "history": hist, "last": last, "pivot_stats": pstats}
