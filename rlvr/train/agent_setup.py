"""Shared pieces of the multi-turn agent loops (PivotRL, SAO, full-trajectory GRPO; issue 6).

One place for what `pivotrl_loop`, `sao_loop` and `agent_grpo_loop` all need:
  * the tiny char-level policy over the KV task alphabet (`make_tokenizer`, `make_policy`);
  * the SFT warm-start on multi-turn demonstration streams (`demo_stream`, `sft_warm_start`):
    loss on action tokens only (R1.1), observations masked — F's `rlvr.train.sft.sft_loss`
    (exact token-mean under accumulation) through the shared learner `make_update`;
  * episode starts, the outcome verifier hook and held-out evaluation through the agent loop
    (`starts_for`, `outcome_verify`, `evaluate`, R7.1);
  * the rollout-cost counter (`Budget`) every loop charges the same way (ablation 1:
    actions sampled = turns, action tokens generated; probes included);
  * checkpoint/resume glue over F's `rlvr.train.checkpoint.Checkpointer` (`AgentCheckpoint`);
  * the common `run()` preamble of the three loops (`prepare_run` -> `AgentRunSetup`: workdir,
    checkpointer, tokenizer, seed/key, task lists, sampling, the starting policy;
    `restore_run`: resume from the latest checkpoint), the rollout/eval steps they share
    (`AgentRunSetup.rollout`, `periodic_eval`) and the batch width helper `fit_width`.

`rlvr.train.sft.run_sft` is single-turn (prompt + completion, loss on the whole completion), so
the multi-turn stream builder stays here; the loss and learner are F's.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr.envs.kv_store import ALPHABET, KVStoreEnv
from rlvr.models import ModelConfig, Transformer
from rlvr.models.tokenizer import CharTokenizer
from rlvr.rollout.agent_loop import EpisodeStart, run_episodes
from rlvr.rollout.sampler import SamplingParams
from rlvr.tasks import kv_agent
from rlvr.train.learner import make_optimizer, make_update
from rlvr.train.sft import sft_loss
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


def demo_stream(task, tok, demo_style: str = "canonical") -> tuple[list[int], list[float]]:
    """bos + prompt + (action, observation)*: loss mask 1 on action tokens only.

    demo_style: `kv_agent.demonstrations` style ("canonical" | "diverse": per-episode seeded
    key order and answer form)."""
    toks = [tok.bos_id] + tok.encode(task.prompt)
    mask = [0.0] * len(toks)
    for t in kv_agent.demonstrations(task, style=demo_style):
        a, o = tok.encode(t.action), tok.encode(t.observation)
        toks += a + o
        mask += [1.0] * len(a) + [0.0] * len(o)
    return toks, mask


def _pad(rows, width, fill):
    out = np.full((len(rows), width), fill, np.float32 if isinstance(fill, float) else np.int32)
    for i, r in enumerate(rows):
        r = r[:width]
        out[i, :len(r)] = r
    return out


def sft_warm_start(model: Transformer, tasks, tok, *, steps: int, batch_size: int, lr: float,
                   seq_len: int, seed: int, num_microbatches: int = 1,
                   demo_style: str = "canonical") -> tuple[Transformer, list[float]]:
    """Supervised warm-start on demonstration streams (NLL on action tokens). Returns losses."""
    if steps <= 0:
        return model, []
    streams = [demo_stream(t, tok, demo_style) for t in tasks]
    toks = _pad([s[0] for s in streams], seq_len, tok.pad_id)
    mask = _pad([s[1] for s in streams], seq_len, 0.0)
    am = _pad([[1] * len(s[0]) for s in streams], seq_len, 0).astype(bool)
    pos = np.where(am, np.cumsum(am, 1) - 1, 0).astype(np.int32)
    graphdef, params, rest = split_model(model)
    opt = make_optimizer(lr, max_grad_norm=1.0)
    state = create_train_state(params, opt, seed=seed)
    update = jax.jit(make_update(graphdef, sft_loss, opt, num_microbatches=num_microbatches,
                                 rest=rest))
    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(steps):
        idx = rng.choice(len(streams), size=batch_size, replace=len(streams) < batch_size)
        batch = {"tokens": jnp.asarray(toks[idx]), "loss_mask": jnp.asarray(mask[idx]),
                 "attention_mask": jnp.asarray(am[idx]), "positions": jnp.asarray(pos[idx]),
                 "valid": jnp.ones((batch_size,), bool)}
        state, met = update(state, batch, {}, jax.random.PRNGKey(0))
        losses.append(float(met["nll"]))
    return nnx.merge(graphdef, state.params, rest), losses


def warm_policy(config, tok, *, seed: int, difficulty: str, sft_tasks: int,
                cache_dir: Optional[str] = None, demo_style: str = "canonical") -> Transformer:
    """Fresh policy + SFT warm-start; with `cache_dir`, params are cached keyed by config + seed.

    demo_style: the demonstrations' style (`kv_agent.DEMO_STYLES`); part of the cache key
    (canonical keeps the key it had before the option existed).

    The cache (used by experiments/ to share one warm start across arms) is an .npz of the Param
    leaves, keyed by a hash of (model, SFT settings, difficulty, sft_tasks, seed).
    """
    import hashlib
    import json

    model = make_policy(config, tok, seed)
    t = config.train
    spec = {"model": config.model.to_dict(), "sft_steps": t.sft_steps, "bs": t.sft_batch_size,
            "lr": t.sft_learning_rate, "difficulty": difficulty, "sft_tasks": sft_tasks, "seed": seed}
    if demo_style != "canonical":
        spec["demo_style"] = demo_style
    path = None
    if cache_dir:
        h = hashlib.sha1(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]
        path = os.path.join(cache_dir, f"warm_{h}.npz")
        if os.path.exists(path):
            graphdef, params, rest = split_model(model)
            leaves, treedef = jax.tree.flatten(params)
            data = np.load(path)
            new = [jnp.asarray(data[f"p{i}"]) for i in range(len(leaves))]
            return nnx.merge(graphdef, jax.tree.unflatten(treedef, new), rest)
    tasks = kv_agent.generate(sft_tasks, split="train", seed=seed + 1000, difficulty=difficulty)
    model, _ = sft_warm_start(model, tasks, tok, steps=t.sft_steps, batch_size=t.sft_batch_size,
                              lr=t.sft_learning_rate, seq_len=config.model.max_seq_len, seed=seed,
                              num_microbatches=t.num_microbatches, demo_style=demo_style)
    if path:
        os.makedirs(cache_dir, exist_ok=True)
        leaves = jax.tree.leaves(split_model(model)[1])
        tmp = path + ".tmp.npz"
        np.savez(tmp, **{f"p{i}": np.asarray(x) for i, x in enumerate(leaves)})
        os.replace(tmp, path)
    return model


def fit_width(x, width: int, fill) -> np.ndarray:
    """[B, L] -> [B, width]: truncate, or right-pad with `fill` (dtype kept)."""
    x = np.asarray(x)
    if x.shape[1] >= width:
        return x[:, :width]
    return np.concatenate([x, np.full((x.shape[0], width - x.shape[1]), fill, x.dtype)], 1)


def fit_batch(b, width: int, pad_id: int) -> dict:
    """The learner fields of an agent-loop `RolloutBatch`, fitted to `width`.

    tokens / attention_mask / behavior_logprobs / valid, and loss_mask zeroed on invalid rows
    (env_error). The loops add positions, advantages and their own fields.
    """
    valid = np.asarray(b.valid)
    return {"tokens": fit_width(b.tokens, width, pad_id),
            "attention_mask": fit_width(b.attention_mask, width, False),
            "loss_mask": fit_width(b.loss_mask, width, 0.0) * valid[:, None].astype(np.float32),
            "behavior_logprobs": fit_width(b.behavior_logprobs, width, 0.0), "valid": valid}


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

    def exhausted(self, token_budget: float) -> bool:
        return bool(token_budget) and self.action_tokens >= token_budget


# ------------------------------------------------------------------------- checkpoint / resume
def key_to_list(key) -> list[int]:
    return [int(x) for x in np.asarray(jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key).reshape(-1)]


def key_from_list(v) -> jax.Array:
    return jnp.asarray(np.asarray(v, np.uint32))


class AgentCheckpoint:
    """Checkpoint + resume for the agent loops over F's `Checkpointer` (state + host JSON).

    The host dict holds the loop's own position: budget, history, numpy Generator state, the
    jax key, and anything loop-specific (the kept pivot keys). `config.checkpoint.every` /
    `max_to_keep` / `resume` are honoured (base config); `every < 0` turns checkpoints off
    (experiments/ sweeps).
    """

    def __init__(self, config, workdir: str):
        from rlvr.train.checkpoint import Checkpointer

        c = config.checkpoint
        self.every = int(c.every)
        self.ckpt = None
        if self.every >= 0:
            self.ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), max_to_keep=c.max_to_keep)
        self.resume_enabled = bool(c.resume) and self.ckpt is not None

    def latest_step(self):
        return None if self.ckpt is None else self.ckpt.latest_step()

    def restore(self, state_like):
        """(state, host, step) from the newest checkpoint that loads (skipped ones reported)."""
        state, host, step, problems = self.ckpt.restore_latest(state_like)
        for p in problems:
            print(f"skipped {p}", file=sys.stderr)
        return state, host, step

    def maybe_save(self, step: int, state, host: dict, *, last: bool) -> None:
        if self.ckpt is not None and (last or (self.every and step % self.every == 0)):
            self.ckpt.save(step, state, host)

    def close(self):
        if self.ckpt is not None:
            self.ckpt.close()


def rng_state(rng: np.random.Generator) -> dict:
    return rng.bit_generator.state


def set_rng_state(rng: np.random.Generator, state: dict) -> None:
    rng.bit_generator.state = state


# ------------------------------------------------------------------------- shared run() preamble
@dataclasses.dataclass(frozen=True)
class AgentRunSetup:
    """What every agent loop's `run()` starts from (built by `prepare_run`).

    section: the loop's config section (`config.pivot` / `config.sao` / `config.grpo`): it gives
    num_tasks, difficulty, sft_tasks, max_turns and demo_style.
    model: the starting policy: SFT warm-started (optionally from `warm_cache`), or a fresh
    skeleton when `resuming` (the checkpoint then carries the weights; no SFT again).
    """

    workdir: str
    ckpt: AgentCheckpoint
    resuming: bool
    tok: CharTokenizer
    term_id: int
    seed: int
    key: jax.Array
    T: int
    train_tasks: list
    eval_tasks: list
    sampling: SamplingParams
    eval_kwargs: dict
    max_turns: int
    model: Transformer

    def rollout(self, model, tasks, key, budget: Budget, *, group_size: int = 1, verify=None):
        """`group_size` full episodes per task through the agent loop (fault-free env); their
        turns and action tokens are charged to `budget`."""
        out = run_episodes(model, starts_for(tasks, self.tok, group_size),
                           lambda: KVStoreEnv(fault_prob=0.0), key, tokenizer=self.tok,
                           sampling=self.sampling, max_turns=self.max_turns, max_tokens=self.T,
                           verify=verify)
        budget.add(out.stats["rollout/turns"], out.stats["rollout/action_tokens"])
        return out

    def evaluate(self, model, key) -> dict:
        """Held-out success on `eval_tasks` (`evaluate` with the config's eval settings)."""
        return evaluate(model, self.eval_tasks, self.tok, key, **self.eval_kwargs)


def prepare_run(config, workdir: str, section: str, *,
                warm_cache: Optional[str] = None) -> AgentRunSetup:
    """The common `run()` preamble: workdir, `AgentCheckpoint`, tokenizer, seed and key,
    train/eval tasks, sampling/eval settings and the starting policy (see `AgentRunSetup`).

    Train tasks: `kv_agent.generate(section.num_tasks, "train", seed=config.seed)`; eval tasks:
    `config.eval.num_tasks` with `config.eval.seed`; key = PRNGKey(config.seed).
    """
    sec = config[section]
    os.makedirs(workdir, exist_ok=True)
    ck = AgentCheckpoint(config, workdir)
    resuming = ck.resume_enabled and ck.latest_step() is not None
    tok = make_tokenizer()
    term_id = tok.encode("\n")[0]
    seed = config.seed
    T = config.model.max_seq_len
    train_tasks = kv_agent.generate(sec.num_tasks, split="train", seed=seed, difficulty=sec.difficulty)
    eval_tasks = kv_agent.generate(config.eval.num_tasks, split="eval", seed=config.eval.seed,
                                   difficulty=sec.difficulty)
    if resuming:  # the checkpoint carries the warm-started weights: no SFT again
        model = make_policy(config, tok, seed)
    else:
        model = warm_policy(config, tok, seed=seed, difficulty=sec.difficulty, sft_tasks=sec.sft_tasks,
                            cache_dir=warm_cache, demo_style=sec.get("demo_style", "canonical"))
    sampling = SamplingParams(temperature=config.sampling.temperature,
                              max_new_tokens=config.sampling.max_new_tokens,
                              stop_token_ids=(term_id, tok.eos_id))
    ev = dict(max_turns=sec.max_turns, max_new_tokens=config.sampling.max_new_tokens, max_tokens=T,
              temperature=config.eval.temperature, samples=config.eval.samples_per_task)
    return AgentRunSetup(workdir=workdir, ckpt=ck, resuming=resuming, tok=tok, term_id=term_id,
                         seed=seed, key=jax.random.PRNGKey(seed), T=T, train_tasks=train_tasks,
                         eval_tasks=eval_tasks, sampling=sampling, eval_kwargs=ev,
                         max_turns=sec.max_turns, model=model)


def restore_run(setup: AgentRunSetup, state, rng: Optional[np.random.Generator] = None):
    """(state, host, budget, key) to continue from: the latest checkpoint when resuming (metrics
    after its step truncated; `rng` set to its saved position when given), else
    (state, None, Budget(), setup.key)."""
    if not setup.resuming:
        return state, None, Budget(), setup.key
    from rlvr.train.metrics import MetricWriter

    state, host, start_step = setup.ckpt.restore(state)
    # drop metric rows and TensorBoard events after the restored step (the loop then appends)
    MetricWriter(setup.workdir, resume_step=start_step,
                 tensorboard=os.path.isdir(os.path.join(setup.workdir, "tb"))).close()
    if rng is not None:
        set_rng_state(rng, host["rng"])
    return state, host, Budget(**host["budget"]), key_from_list(host["key"])


def history_row(step: int, budget: Budget, **extra) -> dict:
    """One `history` entry: step, rollout cost so far, and `extra` (eval metrics)."""
    return {"step": step, "rollout_turns": budget.turns, "rollout_tokens": budget.action_tokens,
            **extra}


def periodic_eval(setup: AgentRunSetup, config, step: int, done: bool, key, make_model,
                  last: dict, hist: list, budget: Budget):
    """Every `config.eval.every` steps and at the last one: held-out success of `make_model()`
    into `last` and a row into `hist`. `step` is the 0-based loop index. Returns the new key."""
    if config.eval.every and ((step + 1) % config.eval.every == 0 or done):
        key, ke = jax.random.split(key)
        last.update(setup.evaluate(make_model(), ke))
        hist.append(history_row(step + 1, budget, **{"eval/success": last["eval/success"]}))
    return key
