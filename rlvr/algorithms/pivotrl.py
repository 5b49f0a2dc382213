"""PivotRL: turn-level pivot selection + local GRPO with a functional verifier (SPEC R4, R3.6).

Seed 000 §2-3 and seed 003 §3:
  1. Candidates: every assistant turn of the demonstrations (000) and optionally turns of the
     policy's own rollouts (003 §3.1). A candidate is the full history before one model call
     (prefix tokens) + the environment's exact state there (snapshot, hash).
  2. Probe: m > 1 actions from the frozen reference policy π_ref per candidate, scored by the
     functional verifier R(s, a) = 1[a ∈ M(s)] (R2.8); μ̂ = mean, σ̂² = population variance;
     keep s iff σ̂² > 0 and μ̂ < λ_diff (`rlvr.core.pivot.pivot_filter`, R4.1).
     Probe samples are never training labels (R4.2).
  3. Train on kept states: K fresh actions from π_old per state, rescored, group-normalised
     Â_i = (R_i − R̄)/(σ_R + δ), turn-level objective with the whole-action ratio
     r_i = π_θ(a_i|s)/π_old(a_i|s) (product of token probabilities, no T-th root):
     J = 1/K Σ min(r_i Â_i, clip(r_i, 1−ε, 1+ε) Â_i) − β KL(π_θ(·|s) ‖ π_ref(·|s))
     (`rlvr.core.losses.sequence_clip_loss` + `rlvr.core.kl.kl_estimate`, R3.6, 000 §3.3).
  4. Optional corrective hint appended to the local prefix only (not a prediction target: its
     tokens have loss_mask 0), mixed with un-hinted full tasks (R4.3, 003 §3.4); optional
     re-profiling of the kept set every N steps (000 §5).

Host-side orchestration (candidates, probing, batch building) lives here next to the pure
loss; the training loop is `rlvr.train.pivotrl_loop`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Optional, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np

from rlvr.core.advantages import grpo_advantages
from rlvr.core.kl import kl_estimate
from rlvr.core.losses import sequence_clip_loss
from rlvr.core.pivot import pivot_filter
from rlvr.rollout.batch import RolloutBatch


# ------------------------------------------------------------------------------- candidates
@dataclasses.dataclass(frozen=True)
class PivotCandidate:
    """A turn state s: the history before one model call and the environment state there.

    Attributes:
      task: the TaskSpec of the episode.
      turn_index: index of the action taken at s in its episode.
      prefix_tokens: token ids of the full history before the action (prompt + earlier turns).
      snapshot: EnvSnapshot of the environment state before the action.
      state_hash: the environment's state hash at s (checked when restoring, 003 §7.2).
      source: "demo" (000) or "rollout" (the policy's own trajectories, 003 §3.1).
      reference_action: the action the source trajectory took (the demonstration's, used only by
        the exact-match ablation verifier; never a training label).
    """

    task: Any
    turn_index: int
    prefix_tokens: tuple
    snapshot: Any
    state_hash: str
    source: str = "demo"
    reference_action: Optional[str] = None

    @property
    def key(self) -> str:
        return f"{self.task.task_id}/{self.source}/{self.turn_index}/{self.state_hash[:12]}"


def demo_candidates(tasks: Sequence[Any], *, tokenizer, demonstrations: Callable,
                    render_episode: Callable) -> list[PivotCandidate]:
    """Every assistant turn of every task's demonstration is a candidate (000 §2).

    `demonstrations(task) -> list[Turn(action, observation, state_before)]` and
    `render_episode(task, turns) -> str` (the agent loop's exact text layout) come from the task
    module (e.g. rlvr.tasks.kv_agent). The prefix of turn i is `render_episode(task, turns[:i])`.
    """
    out = []
    for task in tasks:
        turns = demonstrations(task)
        for i, turn in enumerate(turns):
            prefix = encode_with_bos(tokenizer, render_episode(task, turns[:i]))
            out.append(PivotCandidate(task=task, turn_index=i, prefix_tokens=tuple(prefix),
                                      snapshot=turn.state_before,
                                      state_hash=turn.state_before.state_hash,
                                      source="demo", reference_action=turn.action))
    return out


def rollout_candidates(episodes: Sequence[Any]) -> list[PivotCandidate]:
    """Every action turn of the policy's own episodes (agent_loop.Episode) is a candidate."""
    out = []
    for e in episodes:
        for i, start in enumerate(e.turn_starts):
            out.append(PivotCandidate(task=e.task, turn_index=e.first_turn + i,
                                      prefix_tokens=tuple(e.tokens[:start]),
                                      snapshot=e.snapshots[i], state_hash=e.state_hashes[i],
                                      source="rollout",
                                      reference_action=e.actions[i] if i < len(e.actions) else None))
    return out


def encode_with_bos(tokenizer, text: str) -> list[int]:
    ids = list(tokenizer.encode(text))
    if not ids or ids[0] != tokenizer.bos_id:
        ids = [tokenizer.bos_id] + ids
    return ids


# ---------------------------------------------------------------------------------- probing
@dataclasses.dataclass(frozen=True)
class PivotSet:
    """The probed candidates with their statistics and the kept subset (R4.1).

    Attributes:
      candidates: all probed candidates (N).
      rewards: float [N, m] probe rewards from π_ref.
      keep, mean, var: outputs of `pivot_filter` ([N] bool, [N], [N]).
      lambda_diff: the difficulty threshold used.
      probe_turns / probe_tokens: rollout cost of the probe (actions sampled, action tokens).
    """

    candidates: tuple
    rewards: np.ndarray
    keep: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    lambda_diff: float
    probe_turns: int = 0
    probe_tokens: int = 0

    @property
    def kept(self) -> list[PivotCandidate]:
        return [c for c, k in zip(self.candidates, self.keep) if k]

    def stats(self, bins: int = 5) -> dict:
        """Kept fraction and histograms of μ̂ and σ̂² (counts over `bins` equal bins)."""
        n = len(self.candidates)
        mh, medges = np.histogram(self.mean, bins=bins, range=(0.0, 1.0))
        vh, vedges = np.histogram(self.var, bins=bins, range=(0.0, 0.25))
        return {
            "pivot/candidates": float(n),
            "pivot/kept": float(self.keep.sum()),
            "pivot/kept_fraction": float(self.keep.mean()) if n else 0.0,
            "pivot/mean_mu": float(self.mean.mean()) if n else 0.0,
            "pivot/frac_all_fail": float((self.mean == 0).mean()) if n else 0.0,
            "pivot/frac_all_pass": float((self.mean == 1).mean()) if n else 0.0,
            "pivot/probe_turns": float(self.probe_turns),
            "pivot/probe_tokens": float(self.probe_tokens),
            "pivot/hist_mean": mh.tolist(), "pivot/hist_mean_edges": medges.tolist(),
            "pivot/hist_var": vh.tolist(), "pivot/hist_var_edges": vedges.tolist(),
        }

    def save(self, path: str) -> None:
        """Writes the kept set and statistics as JSON (task ids, turns, hashes, μ̂, σ̂²)."""
        rows = [{"key": c.key, "task_id": c.task.task_id, "turn_index": c.turn_index,
                 "source": c.source, "state_hash": c.state_hash, "mean": float(mu),
                 "var": float(v), "kept": bool(k), "rewards": r.tolist()}
                for c, mu, v, k, r in zip(self.candidates, self.mean, self.var, self.keep, self.rewards)]
        with open(path, "w") as f:
            json.dump({"lambda_diff": self.lambda_diff, "stats": self.stats(), "candidates": rows}, f,
                      indent=1)


def probe_pivots(
    candidates: Sequence[PivotCandidate],
    act: Callable,
    score: Callable[[PivotCandidate, str], float],
    key: jax.Array,
    *,
    m: int,
    lambda_diff: float,
    chunk: int = 256,
) -> PivotSet:
    """Probes each candidate with m actions from the reference policy and filters (R4.1).

    Args:
      candidates: N pivot candidates.
      act: `act(prefixes: list[list[int]], key) -> TurnSamples` (or any object with `.texts` and
        `.action_ids`), one action per prefix; the frozen reference policy.
      score: `score(candidate, action_text) -> reward in {0, 1}`: the functional verifier at the
        candidate's exact state (e.g. KVFunctionalVerifier.accepts(snapshot, text)).
      m: probe samples per candidate (> 1).
      lambda_diff: keep iff σ̂² > 0 and μ̂ < lambda_diff.
    """
    if m < 2:
        raise ValueError(f"probe_pivots: m must be > 1, got {m}")
    if not candidates:
        raise ValueError("probe_pivots: no candidates")
    rows = [c for c in candidates for _ in range(m)]
    rewards = np.zeros(len(rows), np.float32)
    turns = tokens = 0
    for lo in range(0, len(rows), chunk):
        part = rows[lo:lo + chunk]
        key, sub = jax.random.split(key)
        ts = act([list(c.prefix_tokens) for c in part], sub)
        for j, (c, text) in enumerate(zip(part, ts.texts)):
            rewards[lo + j] = float(score(c, text))
        turns += len(part)
        tokens += sum(len(a) for a in ts.action_ids)
    rewards = rewards.reshape(len(candidates), m)
    keep, mean, var = pivot_filter(jnp.asarray(rewards), lambda_diff=lambda_diff)
    return PivotSet(candidates=tuple(candidates), rewards=rewards, keep=np.asarray(keep, bool),
                    mean=np.asarray(mean), var=np.asarray(var), lambda_diff=float(lambda_diff),
                    probe_turns=turns, probe_tokens=tokens)


def select_random(candidates: Sequence[PivotCandidate], n: int, seed: int) -> list[PivotCandidate]:
    """Ablation baseline: n candidates uniformly at random (no probe)."""
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(candidates), size=min(n, len(candidates)), replace=False)
    return [candidates[i] for i in sorted(idx)]


# ------------------------------------------------------------------------- local batch + loss
def local_advantages(rewards: np.ndarray, group_size: int, valid=None, eps: float = 1e-6) -> jnp.ndarray:
    """Group-normalised advantages for [N*K] rewards laid out group-major (000 §3.3) → [N*K]."""
    r = jnp.asarray(rewards, jnp.float32).reshape(-1, group_size)
    v = None if valid is None else jnp.asarray(valid, bool).reshape(-1, group_size)
    return grpo_advantages(r, v, scale_by_std=True, eps=eps).reshape(-1)


def build_local_batch(ts, rewards: np.ndarray, *, policy_version: int = 0,
                      ref_logprobs=None, valid=None) -> RolloutBatch:
    """TurnSamples of K actions per kept state (group-major) → RolloutBatch (loss on actions)."""
    return RolloutBatch.create(
        tokens=ts.tokens, attention_mask=ts.attention_mask, positions=ts.positions,
        loss_mask=ts.loss_mask, behavior_logprobs=ts.behavior_logprobs,
        rewards=np.asarray(rewards, np.float32), valid=valid,
        truncated=np.asarray(ts.truncated), ref_logprobs=ref_logprobs,
        policy_version=np.full((ts.tokens.shape[0],), policy_version, np.int32))


def pivotrl_objective(logprobs, old_logprobs, advantages, loss_mask, *, clip_eps: float,
                      ref_logprobs=None, kl_coef: float = 0.0, kl_estimator: str = "k3",
                      valid=None, aux=None):
    """Loss = −J of R3.6 for a batch of turn-level actions (pure, jit-safe).

    Args:
      logprobs, old_logprobs: float [B, T] token log-probs under π_θ and π_old (aligned).
      advantages: float [B] per-action advantages (group-normalised).
      loss_mask: float [B, T], 1 on the action tokens.
      ref_logprobs: float [B, T] under π_ref, required when kl_coef > 0.
      kl_coef: β; the KL of the whole action is the sum of per-token estimates over the action,
        averaged over valid samples.
      valid: optional bool [B]; invalid samples are left out.
      aux: optional learner aux with the minibatch-wide `num_seqs` (rlvr.train.learner). Given,
        the per-action means are rescaled by (actions in this micro-batch) / num_seqs, so losses
        and mean metrics summed over micro-batches equal the whole-minibatch values exactly.
    Returns: (loss, metrics).
    """
    chex.assert_rank([logprobs, old_logprobs, loss_mask], 2)
    chex.assert_rank(advantages, 1)
    b = logprobs.shape[0]
    valid = jnp.ones((b,), bool) if valid is None else jnp.asarray(valid, bool)
    v = (valid & jnp.any(loss_mask > 0, axis=-1)).astype(jnp.float32)
    loss, metrics = sequence_clip_loss(logprobs, old_logprobs, advantages, loss_mask,
                                       clip_eps=clip_eps, valid=valid)
    metrics = dict(metrics)
    if kl_coef > 0.0:
        if ref_logprobs is None:
            raise ValueError("pivotrl_objective: kl_coef > 0 needs ref_logprobs")
        kl_tok = kl_estimate(logprobs, ref_logprobs, kl_estimator) * loss_mask
        kl_seq = kl_tok.sum(-1)
        kl = (kl_seq * v).sum() / jnp.maximum(v.sum(), 1e-8)
        loss = loss + kl_coef * kl
        metrics["kl"] = kl
    metrics["pg_loss"] = loss if kl_coef == 0.0 else loss - kl_coef * metrics["kl"]
    if aux is not None:  # exact share of the minibatch mean over actions
        scale = v.sum() / jnp.maximum(aux["num_seqs"], 1.0)
        loss = loss * scale
        metrics = {k: (x if k == "num_sequences" else x * scale) for k, x in metrics.items()}
    return loss, metrics
