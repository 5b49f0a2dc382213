"""PivotRL's collector: candidate turn states → π_ref probe → filter → K local samples (docs/algorithms.md §6).

docs/algorithms.md §6:
  1. Candidates: every assistant turn of the pool tasks' demonstrations (000) and optionally
     turns of the policy's own rollouts (docs/algorithms.md §6). A candidate is the full history before one
     model call (prefix tokens) + the environment's exact state there (snapshot, hash), judged
     as a *turn task* (`rlvr.tasks.kit.turn_task`).
  2. Probe: m > 1 actions from the frozen reference policy π_ref per candidate, scored by the
     kit's turn verifier (functional R(s, a) = 1[a ∈ M(s)], docs/algorithms.md §6, or the exact-match ablation)
     through the one reward path (`Judge`: env_error retried, then masked); μ̂ = mean, σ̂² =
     population variance over the valid probes; keep s iff σ̂² > 0 and μ̂ < λ_diff
     (`rlvr.core.pivot.pivot_filter`, docs/algorithms.md (A.17)). Probe samples are never training labels (docs/algorithms.md §6).
  3. Each step: `prompts_per_step` kept states × K fresh actions of the current policy, rescored
     (a group of K rows per state); the update (group-normalised advantages, turn-level ratio,
     KL to π_ref) is `rlvr.algorithms.pivotrl.PivotRL`.
  4. Optional corrective hint appended to the local prefix only (loss_mask 0, never a target),
     mixed with un-hinted states (docs/algorithms.md §6); optional re-profiling of the kept set every N
     steps with the current policy (docs/algorithms.md §6). The kept set and statistics go to `pivots.json`;
     a checkpoint keeps the kept set (rollout states with their histories and snapshots), so a
     resumed run trains on the same states.
Rollout cost (probes included) is charged to the step that spent it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rlvr.core.pivot import pivot_filter
from rlvr.rollout.sampler import SamplingParams, per_sample_keys
from rlvr.tasks.kit import turn_task
from rlvr.train.collectors import Collected, Collector, RolloutCost, stream_seed


# ------------------------------------------------------------------------------- candidates
@dataclasses.dataclass(frozen=True)
class PivotCandidate:
    """A turn state s: the history before one model call and the environment state there.

    Attributes:
      task: the TaskSpec of the episode.
      turn_index: index of the action taken at s in its episode.
      prefix_tokens: token ids of the full history before the action (prompt + earlier turns).
      snapshot: EnvSnapshot of the environment state before the action.
      state_hash: the environment's state hash at s (checked when restoring, docs/algorithms.md §6).
      source: "demo" (docs/algorithms.md §6) or "rollout" (the policy's own trajectories).
      reference_action: the action the source trajectory took (used only by the exact-match
        ablation verifier; never a training label).
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

    @property
    def turn_task(self):
        """The task a turn verifier judges at this state (`rlvr.tasks.kit.turn_task`)."""
        return turn_task(self.task, snapshot=self.snapshot, turn_index=self.turn_index,
                         reference_action=self.reference_action, key=self.key)


def encode_with_bos(tokenizer, text: str) -> list[int]:
    """`[bos] + encode(text)` (bos not repeated), as prompts are encoded; a Hugging Face
    tokenizer without a bos token (`add_bos` False, Qwen's) gets none."""
    ids = list(tokenizer.encode(text))
    if getattr(tokenizer, "add_bos", True) and (not ids or ids[0] != tokenizer.bos_id):
        ids = [tokenizer.bos_id] + ids
    return ids


def demo_candidates(tasks: Sequence[Any], *, tokenizer, demonstrations: Callable,
                    render_episode: Callable) -> list[PivotCandidate]:
    """Every assistant turn of every task's demonstration is a candidate (docs/algorithms.md §6).

    `demonstrations(task) -> list[Turn(action, observation, state_before)]` and
    `render_episode(task, turns) -> str` (the agent loop's exact text layout) come from the task
    kit. The prefix of turn i is `render_episode(task, turns[:i])`.
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


def candidate_to_dict(c: PivotCandidate) -> dict:
    """A candidate as JSON-ready data: its task by id, the history tokens and the environment
    snapshot (what a checkpoint keeps of a rollout candidate, which no later sampling rebuilds)."""
    return {"task_id": c.task.task_id, "turn_index": int(c.turn_index),
            "prefix_tokens": [int(t) for t in c.prefix_tokens],
            "snapshot": dataclasses.asdict(c.snapshot), "state_hash": c.state_hash,
            "source": c.source, "reference_action": c.reference_action}


def candidate_from_dict(d: dict, tasks_by_id: dict) -> PivotCandidate:
    """The inverse of `candidate_to_dict`, its task looked up in `tasks_by_id`; the snapshot's
    hash is checked against its payload (`EnvSnapshot`)."""
    from rlvr.envs.base import EnvSnapshot

    if d["task_id"] not in tasks_by_id:
        raise ValueError(f"pivot candidate of task {d['task_id']!r}, which the run's pool does not hold")
    return PivotCandidate(task=tasks_by_id[d["task_id"]], turn_index=int(d["turn_index"]),
                          prefix_tokens=tuple(int(t) for t in d["prefix_tokens"]),
                          snapshot=EnvSnapshot(**d["snapshot"]), state_hash=d["state_hash"],
                          source=d["source"], reference_action=d["reference_action"])


# ---------------------------------------------------------------------------------- probing
@dataclasses.dataclass(frozen=True)
class PivotSet:
    """The probed candidates with their statistics and the kept subset (docs/algorithms.md (A.17)).

    Attributes:
      candidates: all probed candidates (N).
      rewards: float [N, m] probe rewards from π_ref; valid: bool [N, m] (env_error probes False).
      keep, mean, var: outputs of `pivot_filter` ([N] bool, [N], [N]).
      lambda_diff: the difficulty threshold used.
      cost: rollout cost of the probe.
    """

    candidates: tuple
    rewards: np.ndarray
    valid: np.ndarray
    keep: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    lambda_diff: float
    cost: RolloutCost = RolloutCost()

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
            "pivot/probe_valid_rate": float(self.valid.mean()) if n else 0.0,
            "pivot/probe_turns": float(self.cost.turns),
            "pivot/probe_tokens": float(self.cost.sampled_tokens),
            "pivot/hist_mean": mh.tolist(), "pivot/hist_mean_edges": medges.tolist(),
            "pivot/hist_var": vh.tolist(), "pivot/hist_var_edges": vedges.tolist(),
        }

    def save(self, path: str) -> None:
        """Writes the kept set and statistics as JSON (task ids, turns, hashes, μ̂, σ̂²)."""
        rows = [{"key": c.key, "task_id": c.task.task_id, "turn_index": c.turn_index,
                 "source": c.source, "state_hash": c.state_hash, "mean": float(mu),
                 "var": float(v), "kept": bool(k), "rewards": r.tolist(), "valid": ok.tolist()}
                for c, mu, v, k, r, ok in zip(self.candidates, self.mean, self.var, self.keep,
                                              self.rewards, self.valid)]
        _write_json(path, {"selection": "probe", "lambda_diff": self.lambda_diff,
                           "stats": self.stats(), "candidates": rows})


def _write_json(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def probe_pivots(candidates: Sequence[PivotCandidate], run: Callable, key: jax.Array, *, m: int,
                 lambda_diff: float, chunk: int = 256) -> PivotSet:
    """Probes each candidate with m actions of the reference policy and filters (docs/algorithms.md (A.17)).

    Args:
      candidates: N pivot candidates.
      run: `run(prefixes, turn_tasks, keys) -> Collected` — one action per prefix from π_ref,
        judged by the turn verifier (e.g. `TurnEngine.run` bound to π_ref's parameters); the
        prefixes come as consecutive groups of m copies of each candidate's prefix.
      m: probe samples per candidate (> 1).
      lambda_diff: keep iff σ̂² > 0 and μ̂ < lambda_diff (over the valid probes).
    """
    if m < 2:
        raise ValueError(f"probe_pivots: m must be > 1, got {m}")
    if not candidates:
        raise ValueError("probe_pivots: no candidates")
    rows = [c for c in candidates for _ in range(m)]
    chunk = max(m, chunk // m * m)  # whole groups of m probes per call: one prefill per candidate
    rewards = np.zeros(len(rows), np.float32)
    valid = np.zeros(len(rows), bool)
    cost = RolloutCost()
    keys = per_sample_keys(key, len(rows))
    for lo in range(0, len(rows), chunk):
        part = rows[lo:lo + chunk]
        got = run([list(c.prefix_tokens) for c in part], [c.turn_task for c in part],
                  keys[lo:lo + len(part)])
        rewards[lo:lo + len(part)] = np.asarray(got.batch.rewards)
        valid[lo:lo + len(part)] = np.asarray(got.batch.valid)
        cost = cost + got.cost
    rewards, valid = rewards.reshape(len(candidates), m), valid.reshape(len(candidates), m)
    keep, mean, var = pivot_filter(jnp.asarray(rewards), lambda_diff=lambda_diff,
                                   valid=jnp.asarray(valid))
    return PivotSet(candidates=tuple(candidates), rewards=rewards, valid=valid,
                    keep=np.asarray(keep, bool), mean=np.asarray(mean), var=np.asarray(var),
                    lambda_diff=float(lambda_diff), cost=cost)


def select_random(candidates: Sequence[PivotCandidate], n: int, seed: int) -> list[PivotCandidate]:
    """Ablation baseline: n candidates uniformly at random (no probe)."""
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(candidates), size=min(n, len(candidates)), replace=False)
    return [candidates[i] for i in sorted(idx)]


def hinted_rows(n_states: int, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """bool [n_states]: which states get the corrective hint this step (docs/algorithms.md §6 mixing): exactly
    round(fraction · n_states), chosen at random; the rest stay un-hinted."""
    k = int(round(fraction * n_states))
    out = np.zeros(n_states, bool)
    out[rng.choice(n_states, size=k, replace=False)] = True
    return out


# --------------------------------------------------------------------------------- collector
@dataclasses.dataclass(frozen=True)
class PivotSettings:
    """The `config.pivot` section (configs/base.py documents each field)."""

    candidates: str = "demo"
    selection: str = "filter"
    m: int = 4
    lambda_diff: float = 0.75
    random_fraction: float = 0.3
    hint: str = ""
    hint_fraction: float = 0.5
    reprofile_every: int = 0


class PivotCollector(Collector):
    """Kept pivot states × K local samples per step (module docstring).

    `prepare(ref_params)` builds and probes the candidates (or restores the kept set from a
    checkpoint's `state_dict`); `collect` returns `prompts_per_step` groups of K rows.
    """

    def __init__(self, engine, *, kit, tokenizer, pool: Sequence[Any], settings: PivotSettings,
                 group_size: int, prompts_per_step: int, sampling: SamplingParams, seed: int,
                 workdir: Optional[str] = None, episode_engine=None, process_index: int = 0,
                 num_processes: int = 1):
        if not kit.multi_turn:
            raise ValueError(f"the pivots collector needs a multi-turn task kit; {kit.name!r} is "
                             f"single-turn")
        self.engine, self.kit, self.tokenizer, self.pool = engine, kit, tokenizer, list(pool)
        self.s, self.group_size, self.prompts_per_step = settings, group_size, prompts_per_step
        self.sampling, self.seed, self.workdir = sampling, seed, workdir
        self.episode_engine = episode_engine
        self.process_index, self.num_processes = process_index, num_processes
        self.rollout_key = jax.random.PRNGKey(seed + 17)
        self.kept: list[PivotCandidate] = []
        self.pivot_stats: dict = {}
        self._pending = RolloutCost()
        self._selected_at = 0  # the step whose selection made the kept set (0: the start's)
        self._unrestored = 0  # a re-profile's step whose kept set a restore could not rebuild

    # -- kept set
    def _demo_candidates(self) -> list[PivotCandidate]:
        return demo_candidates(self.pool, tokenizer=self.tokenizer,
                               demonstrations=self.kit.demonstration,
                               render_episode=self.kit.render_episode)

    def _candidates(self, params, key) -> list[PivotCandidate]:
        cands = self._demo_candidates()
        if self.s.candidates == "demo+rollout":
            episodes, cost, _ = self.episode_engine.sample_episodes(params, self.pool, key, self.sampling)
            self._pending = self._pending + cost
            cands += rollout_candidates(episodes)
        limit = self.engine.max_tokens - self.sampling.max_new_tokens
        return [c for c in cands if len(c.prefix_tokens) <= limit]

    def _select(self, params, key, tag) -> None:
        self._selected_at = 0 if tag == "start" else int(tag)
        kc, kp = jax.random.split(key)
        cands = self._candidates(params, kc)
        s = self.s
        if s.selection in ("all", "random"):
            self.kept = (list(cands) if s.selection == "all" else
                         select_random(cands, max(1, int(round(s.random_fraction * len(cands)))),
                                       stream_seed(self.seed, "pivot-random", tag)))
            self.pivot_stats = {"pivot/candidates": float(len(cands)),
                                "pivot/kept": float(len(self.kept)),
                                "pivot/kept_fraction": len(self.kept) / max(len(cands), 1)}
            if self.workdir and self.process_index == 0:
                kept = {c.key for c in self.kept}
                _write_json(os.path.join(self.workdir, "pivots.json"), {
                    "selection": s.selection, "stats": self.pivot_stats,
                    "candidates": [{"key": c.key, "task_id": c.task.task_id, "turn_index": c.turn_index,
                                    "source": c.source, "state_hash": c.state_hash,
                                    "kept": c.key in kept} for c in cands]})
        else:
            run = lambda prefixes, tasks, keys: self.engine.run(  # noqa: E731
                params, prefixes, tasks, keys, self.sampling, -1, s.m)
            ps = probe_pivots(cands, run, kp, m=s.m,
                              lambda_diff=s.lambda_diff if s.selection == "filter" else 1.0)
            self._pending = self._pending + ps.cost
            self.kept = ps.kept
            self.pivot_stats = {k: v for k, v in ps.stats().items() if not isinstance(v, list)}
            if self.workdir and self.process_index == 0:
                ps.save(os.path.join(self.workdir, "pivots.json"))
        if not self.kept:
            raise RuntimeError(f"PivotRL kept no candidate state of {len(cands)} (selection "
                               f"{s.selection!r}, λ_diff {s.lambda_diff}): every probed state was "
                               f"all-pass or all-fail; lower pivot.lambda_diff, raise pivot.m or "
                               f"use pivot.selection='variance' / 'all'")

    def _restore_kept(self, restored: dict) -> Optional[list[PivotCandidate]]:
        """The kept set of a `state_dict`, or None where it cannot be rebuilt: demo candidates
        are rebuilt from the pool by key, rollout candidates read from `kept_rollout` (a
        checkpoint written before it kept them has none). A demo state the pool no longer
        yields is refused: the pool or the kit changed since the checkpoint."""
        if not restored.get("kept"):
            return None
        by_key = {c.key: c for c in self._demo_candidates()}
        stored = restored.get("kept_rollout") or [None] * len(restored["kept"])
        tasks = {t.task_id: t for t in self.pool}
        kept = []
        for k, d in zip(restored["kept"], stored):
            if d is not None:
                kept.append(candidate_from_dict(d, tasks))
            elif k in by_key:
                kept.append(by_key[k])
            elif k.rsplit("/", 3)[1] == "demo":  # key: task_id/source/turn/hash
                raise ValueError(f"the checkpoint's kept pivot state {k!r} is not among the pool's "
                                 f"demonstration states: the task pool or the kit changed since "
                                 f"the checkpoint; resume with the run's own config or start over")
            else:  # a rollout candidate the checkpoint does not hold
                return None
        return kept

    def prepare(self, ref_params, restored: Optional[dict] = None) -> None:
        """Builds the kept set with π_ref (`ref_params`), or restores it from `restored` (a
        `state_dict`: demo candidates by key, rollout candidates from their stored histories and
        snapshots). The probe's cost is pending until the first `collect` charges it; a restored
        collector takes the pending cost from `restored`, so a run stopped before its first step
        still charges the probe once. A checkpoint without its rollout candidates (written before
        the collector kept them) is re-probed at the start, which charges nothing the
        uninterrupted run did not, and refused after a re-profile (`collect`)."""
        kept = self._restore_kept(restored) if restored else None
        if kept is not None:
            self.kept = kept
            self.pivot_stats = dict(restored.get("stats", {}))
            self._selected_at = int(restored.get("selected_at", 0))
        else:
            self._select(ref_params, jax.random.PRNGKey(stream_seed(self.seed, "pivot-probe")), "start")
            # an older checkpoint's rollout candidates came from sampling with the parameters
            # of the step that re-profiled, which it does not keep: only that step rebuilds them
            self._unrestored = int((restored or {}).get("selected_at", 0))
        if restored:
            self._pending = RolloutCost(**restored.get("pending", {}))

    # -- per step
    def collect(self, params, step, policy_version: int, num_groups: Optional[int] = None) -> Collected:
        s, k = self.s, self.group_size
        extra = {}
        if s.reprofile_every and isinstance(step, int) and step > 0 and step % s.reprofile_every == 0:
            self._select(params, jax.random.PRNGKey(stream_seed(self.seed, "pivot-reprofile", step)), step)
            extra = dict(self.pivot_stats)
        elif self._unrestored:
            raise RuntimeError(
                f"PivotRL with pivot.candidates={s.candidates!r} cannot resume at step {step}: its "
                f"kept set was re-profiled at step {self._unrestored} from rollouts only that "
                f"step's parameters reproduce, and the checkpoint (written before checkpoints kept rollout "
                f"candidates) does not hold them; resume from "
                f"a checkpoint at a multiple of pivot.reprofile_every ({s.reprofile_every}) or "
                f"start the run over (checkpoint.overwrite=True)")
        self._unrestored = 0
        n = num_groups or self.prompts_per_step
        rng = np.random.default_rng(stream_seed(self.seed, "pivot-draw", step))
        idx = rng.choice(len(self.kept), size=n, replace=len(self.kept) < n)
        states = [self.kept[i] for i in idx]
        hinted = hinted_rows(n, s.hint_fraction, rng) if s.hint else np.zeros(n, bool)
        hint_ids = list(self.tokenizer.encode(s.hint)) if s.hint else []
        local = slice(self.process_index * (n // self.num_processes),
                      (self.process_index + 1) * (n // self.num_processes))
        prefixes, tasks = [], []
        for c, h in list(zip(states, hinted))[local]:
            pre = list(c.prefix_tokens) + (hint_ids if h else [])  # hint: prefix only, docs/algorithms.md §6
            prefixes += [pre] * k
            tasks += [c.turn_task] * k
        fold = step if isinstance(step, int) else stream_seed(step) % 2**31  # async: "async/<n>"
        keys = per_sample_keys(jax.random.fold_in(self.rollout_key, fold), n * k)
        keys = keys[local.start * k:local.stop * k]
        got = self.engine.run(params, prefixes, tasks, keys, self.sampling, policy_version, k)
        cost, self._pending = got.cost + self._pending, RolloutCost()
        stats = {**got.stats, **extra, "pivot/num_kept": float(len(self.kept)),
                 "pivot/hinted_fraction": float(hinted.mean())}
        return dataclasses.replace(got, cost=cost, stats=stats)

    def pending_cost(self) -> RolloutCost:
        return self._pending

    def observe(self, collected: Collected) -> None:
        pass

    def state_dict(self) -> dict:
        """The kept set (keys; with rollout candidates also `kept_rollout`, each kept state's
        history and snapshot, None for a demo state), its statistics, the pending cost and the
        step of the selection."""
        out = {"kept": [c.key for c in self.kept], "stats": self.pivot_stats,
               "pending": self._pending.to_dict(), "selected_at": self._selected_at}
        if any(c.source != "demo" for c in self.kept):
            out["kept_rollout"] = [None if c.source == "demo" else candidate_to_dict(c)
                                   for c in self.kept]
        return out

    def load_state_dict(self, d: dict) -> None:
        pass  # the kept set is restored by `prepare(ref_params, restored=d)`

    def close(self) -> None:
        pass
