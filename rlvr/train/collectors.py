"""Collectors: how a training batch is gathered (docs/architecture.md §2).

The loop asks a collector for `Collected` — a `RolloutBatch` of whole groups (group-major:
`group_size` rows per task or state), one `SampleMeta` per row (docs/architecture.md §3), the rollout cost it
took and host statistics — and hands the batch to the learner. Collectors differ in how rows
are produced, never in what they return:

  * `GroupCollector`: tasks from a `TaskSampler` (fresh or a fixed pool, optional curriculum,
    docs/algorithms.md (A.20)) × `group_size` samples each, produced by an *engine*; optional dynamic sampling (drop
    all-equal groups and refill within a round budget).
  * `rlvr.train.pivots.PivotCollector`: PivotRL's probed turn states × K local samples.
  * `AsyncCollector`: a rollout thread around any collector, a bounded queue with a staleness
    bound and back-pressure (docs/algorithms.md §7, docs/architecture.md §1); each row records the policy version that sampled it.

Engines turn (tasks, group size, keys) into judged rows:
  * `TextEngine`: single-turn — prompt → completion → outcome verifier;
  * `EpisodeEngine`: multi-turn — episodes in the kit's environment (`rlvr.rollout.agent_loop`)
    → outcome verifier on the final state; episodes that end in an environment fault are re-run
    (fresh environment randomness, `reward.max_retries` times) and then masked;
  * `TurnEngine` (PivotRL): one action per (prefix, restored state) → turn verifier.
Every decision goes through a `rlvr.train.judge.Judge` (the one reward path).

Randomness: the keys of step s are derived from (seed, s) and sliced per process, so a
multi-host run samples exactly the rows of the single-process run, and a resumed run repeats
them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
import types
from typing import Any, Callable, Mapping, Optional, Sequence

import jax
import numpy as np

from rlvr.core.curriculum import learning_progress_weights, variance_weights
from rlvr.envs.base import retry_seed
from rlvr.models.prompts import PromptRenderer
from rlvr.records.batch import RolloutBatch, SampleMeta
from rlvr.records.faults import EnvironmentLost
from rlvr.records.task import TaskSpec
from rlvr.records.verdict import env_error
from rlvr.rollout.agent_loop import EpisodeStart, episodes_to_batch, run_episodes, sample_turn
from rlvr.rollout.queue import QueueClosed, SampleQueue
from rlvr.rollout.sampler import (DecodeSchedule, SamplingParams, pad_prompts, per_sample_keys,
                                  sample)
from rlvr.train.judge import Judge


def stream_seed(*parts) -> int:
    """A stable int seed for a named stream, e.g. stream_seed(seed, "train", step)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") % (2**62)


# ----------------------------------------------------------------------------- records
@dataclasses.dataclass(frozen=True)
class RolloutCost:
    """What producing a batch cost: policy calls (`turns`: one per single-turn sample, one per
    multi-turn action), tokens the policy generated (`sampled_tokens`), prompt tokens the samples
    were conditioned on (`prompt_tokens`: a prompt shared by G samples counts G times, a
    multi-turn history once per action) and tokens actually run through prefill
    (`prefill_tokens`: a shared prompt counts once; with a KV cache kept across turns only the
    new observation)."""

    turns: int = 0
    sampled_tokens: int = 0
    prompt_tokens: int = 0
    prefill_tokens: int = 0

    def __add__(self, other: "RolloutCost") -> "RolloutCost":
        return RolloutCost(*(a + b for a, b in zip(dataclasses.astuple(self),
                                                    dataclasses.astuple(other))))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def episode_row_cost(episode) -> RolloutCost:
    """What producing one `rlvr.rollout.agent_loop.Episode` cost: its actions, generated tokens
    and its own prompt-side and prefilled tokens (`run_episodes`' stats are their sums)."""
    return RolloutCost(episode.num_turns, episode.num_action_tokens, episode.prompt_tokens,
                       episode.prefill_tokens)


@dataclasses.dataclass(frozen=True)
class Collected:
    """A batch of whole groups: rows group-major, `group_size` rows per group.

    batch: RolloutBatch [num_groups · group_size, T]; samples: one SampleMeta per row; tasks:
    the TaskSpec of each row; cost: what producing it took (discarded rounds and probes
    included); stats: host metrics of the collection (time split, rounds, queue or pivot
    statistics).
    """

    batch: RolloutBatch
    samples: tuple
    tasks: tuple
    group_size: int
    cost: RolloutCost = RolloutCost()
    stats: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        n = self.batch.batch_size
        if n != len(self.samples) or n != len(self.tasks) or n % self.group_size:
            raise ValueError(f"Collected: {n} rows, {len(self.samples)} samples, {len(self.tasks)} "
                             f"tasks, group_size {self.group_size}")

    @property
    def num_groups(self) -> int:
        return self.batch.batch_size // self.group_size

    def groups(self, idx: Sequence[int]) -> "Collected":
        """The groups `idx` (rows of each, in order); cost and stats stay with the original."""
        g = self.group_size
        rows = [i * g + j for i in idx for j in range(g)]
        return Collected(self.batch.take(rows), tuple(self.samples[r] for r in rows),
                         tuple(self.tasks[r] for r in rows), g)

    @staticmethod
    def concatenate(parts: Sequence["Collected"], *, cost: RolloutCost = None,
                    stats: Mapping[str, float] = None) -> "Collected":
        parts = list(parts)
        if not parts:
            raise ValueError("Collected.concatenate: nothing to concatenate")
        return Collected(RolloutBatch.concatenate([p.batch for p in parts]),
                         tuple(s for p in parts for s in p.samples),
                         tuple(t for p in parts for t in p.tasks), parts[0].group_size,
                         cost if cost is not None else sum((p.cost for p in parts), RolloutCost()),
                         dict(stats or {}))


def split_units(got: Collected, costs: Sequence[RolloutCost]) -> list:
    """`got` as one Collected per group, group i costing `costs[i]`; `got`'s seconds
    (`time/*` stats) split evenly among them."""
    n = got.num_groups
    if len(costs) != n:
        raise ValueError(f"split_units: {len(costs)} costs for {n} groups")
    times = {k: v / n for k, v in got.stats.items() if k.startswith("time/")}
    return [dataclasses.replace(got.groups([i]), cost=c, stats=dict(times))
            for i, c in enumerate(costs)]


def make_samples(tasks: Sequence[TaskSpec], outputs: Sequence[str], judgement, *,
                 stop_reasons: Sequence[str], policy_versions, sampling: SamplingParams,
                 environment_version: str, prompts: Sequence[str], num_turns=None,
                 extra: Optional[Sequence[dict]] = None) -> tuple:
    """One SampleMeta per row (docs/architecture.md §3) from the judged rows."""
    n = len(outputs)
    versions = np.broadcast_to(np.asarray(policy_versions, np.int64), (n,))
    turns = np.ones(n, int) if num_turns is None else np.asarray(num_turns)
    sp = sampling.to_dict()
    return tuple(
        SampleMeta(task_id=t.task_id, policy_version=int(versions[i]),
                   verifier_version=v.verifier_version, environment_version=environment_version,
                   reward_config_hash=judgement.reward_config_hashes[i], sampling_params=sp,
                   stop_reason=stop_reasons[i], num_turns=int(turns[i]), decision=v.decision,
                   trial=v.trial, components=dict(v.components), evidence=dict(v.evidence),
                   text=outputs[i], prompt=prompts[i], reward=float(judgement.rewards[i]),
                   valid=bool(judgement.valid[i]), extra=dict(extra[i]) if extra else {})
        for i, (t, v) in enumerate(zip(tasks, judgement.verdicts)))


# ----------------------------------------------------------------------------- task sampling
class TaskSampler:
    """Training tasks per step: fresh draws from the source, or draws from a fixed pool,
    optionally weighted by a curriculum over the pool (docs/algorithms.md (A.20): variance learning
    progress). Deterministic in (seed, step); the curriculum statistics are `state_dict()`.
    """

    def __init__(self, source, *, seed: int, pool_size: int = 0, curriculum: str = "none",
                 alpha: float = 1.0, ema: float = 0.5, floor: float = 0.05):
        self.source, self.seed, self.curriculum = source, seed, curriculum
        self.alpha, self.ema, self.floor = alpha, ema, floor
        self.pool: list = []
        if pool_size:
            try:
                self.pool = list(source.sample(pool_size, seed=stream_seed(seed, "pool")))
            except ValueError as e:
                raise ValueError(f"config.task.pool_size={pool_size}: the task source cannot give "
                                 f"that many distinct training tasks ({e})") from None
        self._index = {t.task_id: i for i, t in enumerate(self.pool)}
        self.p = np.full(len(self.pool), 0.5)
        self.p_prev = np.full(len(self.pool), 0.5)

    def weights(self) -> np.ndarray:
        if self.curriculum == "variance":
            w = variance_weights(self.p, alpha=self.alpha, floor=self.floor)
        elif self.curriculum == "learning_progress":
            w = learning_progress_weights(self.p, self.p_prev, floor=self.floor)
        else:
            return np.full(len(self.pool), 1.0 / len(self.pool))
        w = np.asarray(w, np.float64)
        return w / w.sum()

    def draw(self, tag, n: int) -> list[TaskSpec]:
        """The n training tasks of step `tag` (an int or a string such as "7/refill/1")."""
        if not self.pool:
            return list(self.source.sample(n, seed=stream_seed(self.seed, "train", tag)))
        rng = np.random.default_rng(stream_seed(self.seed, "pool-draw", tag))
        if self.curriculum == "none":
            idx = rng.choice(len(self.pool), size=n, replace=len(self.pool) < n)
        else:
            idx = rng.choice(len(self.pool), size=n, replace=True, p=self.weights())
        return [self.pool[i] for i in idx]

    def update(self, task_ids: Sequence[str], success: Sequence[float]) -> None:
        """EMA of per-task success on the pool (the curriculum's p_x)."""
        if self.curriculum == "none":
            return
        self.p_prev = self.p.copy()
        for tid, s in zip(task_ids, success):
            i = self._index.get(tid)
            if i is not None:
                self.p[i] = self.ema * self.p[i] + (1 - self.ema) * s

    def state_dict(self) -> dict:
        return {"p": self.p.tolist(), "p_prev": self.p_prev.tolist()} if self.pool else {}

    def load_state_dict(self, d: dict) -> None:
        if d:
            self.p, self.p_prev = np.asarray(d["p"], float), np.asarray(d["p_prev"], float)


# ----------------------------------------------------------------------------- engines
class TextEngine:
    """Single-turn rows: rendered prompt (`rlvr.models.prompts.PromptRenderer`; default
    [bos] + prompt) → completion (sampler) → outcome verifier (`Judge`)."""

    def __init__(self, *, model_of: Callable, tokenizer, judge: Judge, prompt_len: int,
                 prompt_bucket: int = 0, environment_version: str = "", renderer=None,
                 sharding=None, decode: DecodeSchedule = DecodeSchedule()):
        self.model_of, self.tokenizer, self.judge = model_of, tokenizer, judge
        self.sharding = sharding  # rlvr.parallel.GenerationSharding of the sampler (None: as placed)
        self.decode = decode  # the sampler's decode segments / compaction of finished rows
        self.prompt_len, self.prompt_bucket = prompt_len, prompt_bucket
        self.environment_version = environment_version
        self.renderer = renderer or PromptRenderer(tokenizer)

    def encode(self, task: TaskSpec) -> list[int]:
        ids = self.renderer.encode(task.prompt)
        if len(ids) > self.prompt_len:
            raise ValueError(f"prompt of task {task.task_id!r} has {len(ids)} tokens > "
                             f"model.max_seq_len - sampling.max_new_tokens = {self.prompt_len}")
        return ids

    def run(self, params, tasks: Sequence[TaskSpec], group_size: int, keys,
            sampling: SamplingParams, policy_version: int) -> Collected:
        """`group_size` completions of each task; rows are group-major (row i*G + j is sample
        j of task i) and `keys` are one key or one per row. Each prompt is encoded and
        prefilled once (the sampler's `num_samples`)."""
        return self._run(params, tasks, group_size, keys, sampling, policy_version)[0]

    def run_units(self, params, tasks: Sequence[TaskSpec], group_size: int, keys,
                  sampling: SamplingParams, policy_version: int) -> list:
        """`run`, returned as one Collected per task (its group), each with its own cost; the
        batch's seconds are split evenly among them."""
        got, lengths, prompt_lengths = self._run(params, tasks, group_size, keys, sampling,
                                                 policy_version)
        g = group_size
        return split_units(got, [
            RolloutCost(turns=g, sampled_tokens=int(lengths[i * g:(i + 1) * g].sum()),
                        prompt_tokens=g * n, prefill_tokens=n)
            for i, n in enumerate(prompt_lengths)])

    def _run(self, params, tasks, group_size, keys, sampling, policy_version):
        ids = [self.encode(t) for t in tasks]
        # allowed padded lengths: multiples of prompt_bucket, capped at the longest prompt
        step = self.prompt_bucket or self.prompt_len
        buckets = tuple(range(step, self.prompt_len, step)) + (self.prompt_len,)
        tokens, mask = pad_prompts(ids, self.tokenizer.pad_id, bucket=buckets)
        t0 = time.perf_counter()
        out = jax.device_get(sample(self.model_of(params), tokens, mask, keys, sampling,
                                    pad_id=self.tokenizer.pad_id, num_samples=group_size,
                                    sharding=self.sharding, **self.decode.sample_kwargs(),
                                    shared_prefix=self.decode.shared_prefix and group_size > 1))
        t1 = time.perf_counter()
        texts = [self.tokenizer.decode(c) for c in out.completions(tokens.shape[1])]
        rows = [t for t in tasks for _ in range(group_size)]
        j = self.judge.judge(rows, texts)
        t2 = time.perf_counter()
        batch = RolloutBatch.create(
            tokens=out.tokens, loss_mask=out.loss_mask, behavior_logprobs=out.behavior_logprobs,
            rewards=j.rewards, attention_mask=out.attention_mask, valid=j.valid,
            truncated=out.truncated, positions=out.positions,
            policy_version=np.full(len(rows), policy_version, np.int32))
        truncated = np.asarray(out.truncated)
        samples = make_samples(rows, texts, j, stop_reasons=["max_length" if x else "eos" for x in truncated],
                               policy_versions=policy_version, sampling=sampling,
                               environment_version=self.environment_version,
                               prompts=[t.prompt for t in rows])
        prompt_tokens = sum(len(i) for i in ids)
        lengths = np.asarray(out.lengths)
        cost = RolloutCost(turns=len(rows), sampled_tokens=int(lengths.sum()),
                           prompt_tokens=group_size * prompt_tokens, prefill_tokens=prompt_tokens)
        return (Collected(batch, samples, tuple(rows), group_size, cost,
                          {"time/generate_s": t1 - t0, "time/verify_s": t2 - t1}),
                lengths, [len(i) for i in ids])


class EpisodeEngine:
    """Multi-turn rows: `group_size` episodes per task from its initial state in the kit's
    environment, judged by the outcome verifier on the authoritative final state.

    `batch_bucket` and `kv_reuse` go to `run_episodes`: the active episodes of each sampler
    call are padded to a bucketed batch size, and with `kv_reuse` each episode's KV cache is
    kept across turns (only the new observation is prefilled). `episode_timeout_s` (0: none)
    bounds an episode's wall-clock time: past it the episode stops as `timeout`."""

    def __init__(self, *, model_of: Callable, tokenizer, judge: Judge, kit, max_turns: int,
                 max_tokens: int, prompt_bucket: int = 0, batch_bucket: int = 0,
                 kv_reuse: bool = False, max_env_retries: int = 2, renderer=None, sharding=None,
                 decode: DecodeSchedule = DecodeSchedule(), episode_timeout_s: float = 0.0):
        self.model_of, self.tokenizer, self.judge, self.kit = model_of, tokenizer, judge, kit
        self.sharding = sharding  # rlvr.parallel.GenerationSharding of the sampler (None: as placed)
        self.decode = decode  # the sampler's decode segments / compaction (re-prefill turns)
        self.renderer = renderer or PromptRenderer(tokenizer)
        self.max_turns, self.max_tokens, self.prompt_bucket = max_turns, max_tokens, prompt_bucket
        self.batch_bucket, self.kv_reuse = batch_bucket, kv_reuse
        self.max_env_retries = max_env_retries
        self.episode_timeout_s = episode_timeout_s  # wall-clock bound per episode (0: none)
        self.environment_version = kit.environment_version()

    def start(self, task: TaskSpec, attempt: int = 0) -> EpisodeStart:
        return EpisodeStart(task=task, prefix_tokens=tuple(self.renderer.encode(task.prompt)),
                            seed=retry_seed(task.random_seed, attempt))

    def episodes(self, params, starts: Sequence[EpisodeStart], keys, sampling: SamplingParams):
        return run_episodes(self.model_of(params), starts, self.kit.env_factory, keys,
                            tokenizer=self.tokenizer, sampling=sampling,
                            terminator=self.kit.action_terminator, max_turns=self.max_turns,
                            max_tokens=self.max_tokens, seq_bucket=self.max_tokens,
                            prompt_bucket=self.prompt_bucket, batch_bucket=self.batch_bucket,
                            kv_reuse=self.kv_reuse, sharding=self.sharding, decode=self.decode,
                            wall_time_s=self.episode_timeout_s)

    def sample_episodes(self, params, rows: Sequence[TaskSpec], keys, sampling: SamplingParams):
        """One episode per row (no judging); episodes that end in an environment fault are
        re-run with fresh environment randomness up to `max_env_retries` times.
        Returns (episodes, cost, seconds spent generating and stepping environments)."""
        episodes, row_costs, t_gen = self.sample_episode_rows(params, rows, keys, sampling)
        return episodes, sum(row_costs, RolloutCost()), t_gen

    def sample_episode_rows(self, params, rows: Sequence[TaskSpec], keys, sampling: SamplingParams):
        """`sample_episodes` with the cost of each row apart (its faulted attempts included):
        (episodes, [RolloutCost] per row, seconds)."""
        keys = per_sample_keys(keys, len(rows))
        out = self.episodes(params, [self.start(t) for t in rows], keys, sampling)
        episodes, stats = list(out.episodes), dict(out.stats)
        row_costs = [episode_row_cost(e) for e in episodes]
        t_gen = stats["time/generate_s"] + stats["time/env_s"]
        for attempt in range(1, self.max_env_retries + 1):
            bad = [i for i, e in enumerate(episodes) if e.env_error is not None]
            if not bad:
                break
            retry_keys = jax.vmap(lambda k: jax.random.fold_in(k, 10_000 + attempt))(keys[np.array(bad)])
            again = self.episodes(params, [self.start(rows[i], attempt) for i in bad], retry_keys, sampling)
            for i, e in zip(bad, again.episodes):
                episodes[i] = e
                row_costs[i] = row_costs[i] + episode_row_cost(e)
            s = again.stats
            t_gen += s["time/generate_s"] + s["time/env_s"]
        return episodes, row_costs, t_gen

    def run(self, params, tasks: Sequence[TaskSpec], group_size: int, keys,
            sampling: SamplingParams, policy_version: int) -> Collected:
        rows = [t for t in tasks for _ in range(group_size)]
        episodes, cost, t_gen = self.sample_episodes(params, rows, keys, sampling)
        return self.judged(rows, episodes, group_size, cost, t_gen, sampling, policy_version)

    def run_units(self, params, tasks: Sequence[TaskSpec], group_size: int, keys,
                  sampling: SamplingParams, policy_version: int) -> list:
        """`run`'s episodes sampled in one batch, returned as one Collected per task (its group),
        each judged on its own with its own cost; the sampling seconds are split evenly."""
        g, rows = group_size, [t for t in tasks for _ in range(group_size)]
        episodes, row_costs, t_gen = self.sample_episode_rows(params, rows, keys, sampling)
        return [self.judged(rows[i * g:(i + 1) * g], episodes[i * g:(i + 1) * g], g,
                            sum(row_costs[i * g:(i + 1) * g], RolloutCost()), t_gen / len(tasks),
                            sampling, policy_version) for i in range(len(tasks))]

    def judged(self, rows: Sequence[TaskSpec], episodes, group_size: int, cost: RolloutCost,
               t_gen: float, sampling: SamplingParams, policy_version) -> Collected:
        """The ended `episodes` of `rows` judged (an environment fault: env_error, masked) into
        a Collected of groups of `group_size`; policy_version: an int or one per row."""
        t1 = time.perf_counter()
        outputs = []
        for e in episodes:  # the final state, read once; a lost environment is a fault
            out = ""
            if e.env_error is None:
                try:
                    out = self.kit.episode_output(e.env)
                except EnvironmentLost as err:
                    e.done, e.stop_reason, e.env_error = True, "env_error", str(err)
            outputs.append(out)
        faulted = [e.env_error is not None for e in episodes]
        judged = self.judge.judge([r for r, f in zip(rows, faulted) if not f],
                                  [o for o, f in zip(outputs, faulted) if not f])
        verdicts, it = [], iter(judged.verdicts)
        for e, f in zip(episodes, faulted):
            verdicts.append(env_error(f"environment fault: {e.env_error}", timeout_class="tool_call")
                            if f else next(it))
        j = self.judge.compose(rows, verdicts)
        batch = episodes_to_batch(episodes, pad_id=self.tokenizer.pad_id, seq_bucket=self.max_tokens,
                                  rewards=j.rewards, valid=j.valid, policy_version=policy_version)
        texts = [self.tokenizer.decode(e.tokens) for e in episodes]
        samples = make_samples(rows, texts, j, stop_reasons=[e.stop_reason for e in episodes],
                               policy_versions=policy_version, sampling=sampling,
                               environment_version=self.environment_version,
                               prompts=[t.prompt for t in rows],
                               num_turns=[e.num_turns for e in episodes])
        return Collected(batch, samples, tuple(rows), group_size, cost,
                         {"time/generate_s": t_gen, "time/verify_s": time.perf_counter() - t1,
                          "rollout/turns_per_episode": float(np.mean([e.num_turns for e in episodes]))})


class TurnEngine:
    """One action per (prefix, state) row, judged by a turn verifier (PivotRL probes and local
    samples): `run(params, prefixes, turn_tasks, keys, sampling, policy_version, group_size)`.
    When the rows are groups of `group_size` copies of one prefix, each prefix is prefilled once."""

    def __init__(self, *, model_of: Callable, tokenizer, judge: Judge, terminator: str,
                 max_tokens: int, prompt_bucket: int = 0, batch_bucket: int = 0,
                 environment_version: str = "", policy: Optional[Callable] = None,
                 sharding=None, decode: DecodeSchedule = DecodeSchedule()):
        self.model_of, self.tokenizer, self.judge = model_of, tokenizer, judge
        self.sharding = sharding  # rlvr.parallel.GenerationSharding of the sampler (None: as placed)
        self.decode = decode  # the sampler's decode segments / compaction of finished rows
        self.policy = policy  # optional scripted replacement of `sample_turn` (tests)
        term = tokenizer.encode(terminator)
        if len(term) != 1:
            raise ValueError(f"TurnEngine: the action terminator {terminator!r} must be one token")
        self.terminator_id = term[0]
        self.max_tokens, self.prompt_bucket = max_tokens, prompt_bucket
        self.batch_bucket = batch_bucket
        self.environment_version = environment_version

    def sampling(self, sampling: SamplingParams) -> SamplingParams:
        stops = tuple(sorted(set(sampling.stop_token_ids) | {self.terminator_id, self.tokenizer.eos_id}))
        return dataclasses.replace(sampling, stop_token_ids=stops)

    def run(self, params, prefixes: Sequence[Sequence[int]], tasks: Sequence[TaskSpec], keys,
            sampling: SamplingParams, policy_version: int, group_size: int) -> Collected:
        sampling = self.sampling(sampling)
        t0 = time.perf_counter()
        keys = per_sample_keys(keys, len(prefixes))
        unique = list(prefixes)  # the prefixes prefilled
        if self.policy is not None:
            ts = self.policy(prefixes, keys, sampling, tokenizer=self.tokenizer,
                             terminator_id=self.terminator_id, prompt_bucket=self.prompt_bucket)
        else:
            # rows in groups of `group_size` copies of one prefix (m probes or K samples of a
            # pivot state): each prefix is prefilled once for its group
            shared = group_size > 1 and len(prefixes) % group_size == 0 and all(
                list(prefixes[i]) == list(prefixes[i - i % group_size]) for i in range(len(prefixes)))
            if shared:
                unique = list(prefixes[::group_size])
            ts = sample_turn(self.model_of(params), unique, keys, sampling,
                             tokenizer=self.tokenizer, terminator_id=self.terminator_id,
                             prompt_bucket=self.prompt_bucket, batch_bucket=self.batch_bucket,
                             max_prompt_len=self.max_tokens - sampling.max_new_tokens,
                             num_samples=group_size if shared else 1, sharding=self.sharding,
                             decode=self.decode)
        t1 = time.perf_counter()
        j = self.judge.judge(tasks, ts.texts)
        t2 = time.perf_counter()
        batch = RolloutBatch.create(
            tokens=ts.tokens, attention_mask=ts.attention_mask, positions=ts.positions,
            loss_mask=ts.loss_mask, behavior_logprobs=ts.behavior_logprobs, rewards=j.rewards,
            valid=j.valid, truncated=np.asarray(ts.truncated),
            policy_version=np.full(len(prefixes), policy_version, np.int32))
        stop = ["max_length" if tr else ("eos" if e else "stop_token")
                for tr, e in zip(ts.truncated, ts.eos)]
        samples = make_samples(tasks, ts.texts, j, stop_reasons=stop, policy_versions=policy_version,
                               sampling=sampling, environment_version=self.environment_version,
                               prompts=[self.tokenizer.decode(p) for p in prefixes])
        cost = RolloutCost(len(prefixes), int(sum(len(a) for a in ts.action_ids)),
                           int(sum(len(p) for p in prefixes)), int(sum(len(p) for p in unique)))
        return Collected(batch, samples, tuple(tasks), group_size, cost,
                         {"time/generate_s": t1 - t0, "time/verify_s": t2 - t1})


# ----------------------------------------------------------------------------- collectors
class Collector:
    """What the training loop calls on every collector; each method has a no-op default, and a
    wrapper (the asynchronous one) passes every call through to the collector it wraps, so the
    loop never asks which kind it holds.

        prepare(ref_params, restored=None)  once before the first step (PivotRL probes its pivot
                                            candidates with π_ref; `restored` is the checkpoint's
                                            `state_dict` on resume)
        pending_cost() -> RolloutCost       rollout cost spent in `prepare` (the probe)
        pivot_stats                         a mapping of metrics from `prepare` ({} by default)
        collect(params, step, policy_version, num_groups=None) -> Collected
        publish(params, version)            new learner parameters (asynchronous collection)
        observe(collected)                  a step's global samples (curricula)
        state_dict() / load_state_dict(d)   the host state a checkpoint keeps
        close()
    """

    pivot_stats: Mapping = types.MappingProxyType({})

    def prepare(self, ref_params, restored: Optional[dict] = None) -> None:
        pass

    def pending_cost(self) -> RolloutCost:
        return RolloutCost()

    def collect(self, params, step, policy_version: int, num_groups: Optional[int] = None) -> Collected:
        raise NotImplementedError

    def publish(self, params, version: int) -> None:
        pass

    def observe(self, collected: Collected) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, d: dict) -> None:
        pass

    def close(self) -> None:
        pass


class GroupCollector(Collector):
    """`prompts_per_step` tasks × `group_size` rows from an engine, with dynamic sampling.

    Multi-host: every process draws the same global task list and keys and keeps its
    contiguous share (`process_index` of `num_processes`), so the global batch is the one a
    single process would collect.
    """

    def __init__(self, engine, sampler: TaskSampler, *, group_size: int, prompts_per_step: int,
                 sampling: SamplingParams, seed: int, dynamic_sampling: bool = False,
                 max_rounds: int = 0, process_index: int = 0, num_processes: int = 1):
        self.engine, self.sampler = engine, sampler
        self.group_size, self.prompts_per_step, self.sampling = group_size, prompts_per_step, sampling
        self.rollout_key = jax.random.PRNGKey(seed + 17)
        self.dynamic_sampling, self.max_rounds = dynamic_sampling, max_rounds
        self.process_index, self.num_processes = process_index, num_processes

    def collect(self, params, step, policy_version: int, num_groups: Optional[int] = None) -> Collected:
        n = num_groups or self.prompts_per_step
        g = self.group_size
        k = n // self.num_processes
        local = slice(self.process_index * k, (self.process_index + 1) * k)
        key = jax.random.fold_in(self.rollout_key, step if isinstance(step, int) else stream_seed(step) % 2**31)
        rounds = 1 + (self.max_rounds if self.dynamic_sampling else 0)
        kept, spare, cost = [], [], RolloutCost()
        times = {"time/generate_s": 0.0, "time/verify_s": 0.0}
        r = 0
        for r in range(rounds):
            tasks = self.sampler.draw(step if r == 0 else f"{step}/refill/{r}", n)[local]
            keys = per_sample_keys(jax.random.fold_in(key, r), n * g)[local.start * g:local.stop * g]
            got = self.engine.run(params, tasks, g, keys, self.sampling, policy_version)
            cost = cost + got.cost
            for t in times:
                times[t] += got.stats.get(t, 0.0)
            rewards = np.asarray(got.batch.rewards).reshape(-1, g)
            valid = np.asarray(got.batch.valid).reshape(-1, g)
            for i in range(got.num_groups):
                rv = rewards[i][valid[i]]
                equal = len(rv) == 0 or np.all(rv == rv[0])
                if self.dynamic_sampling and equal:
                    spare.append(got.groups([i]))
                elif len(kept) < k:
                    kept.append(got.groups([i]))
            if len(kept) >= k:
                break
        filled = len(kept)
        kept += spare[:k - filled]  # budget exhausted: pad with zero-advantage groups
        stats = {**times, "sampling/rounds": float(r + 1), "sampling/kept_group_frac": filled / k}
        return Collected.concatenate(kept, cost=cost, stats=stats)

    def observe(self, collected: Collected) -> None:
        """Curriculum update from a step's (global) samples."""
        g = collected.group_size
        s = collected.samples
        ids = [s[i * g].task_id for i in range(collected.num_groups)]
        succ = [float(np.mean([x.decision == "pass" and x.trial == "valid" for x in s[i * g:(i + 1) * g]]))
                for i in range(collected.num_groups)]
        self.sampler.update(ids, succ)

    def state_dict(self) -> dict:
        return {"sampler": self.sampler.state_dict()}

    def load_state_dict(self, d: dict) -> None:
        self.sampler.load_state_dict(d.get("sampler", {}))

    def close(self) -> None:
        pass


ARRIVALS = ("batch", "episode")  # rollout.arrival: how the rollout thread's samples arrive


@dataclasses.dataclass(frozen=True)
class _Published:
    version: int
    params: Any


class AsyncCollector(Collector):
    """A rollout thread around `inner` (any collector) feeding a bounded `SampleQueue`.

    The thread repeatedly collects `producer_batch` groups with the latest published policy and
    puts each group into the queue tagged with that policy's version; `collect` takes
    `prompts_per_step` groups in arrival order (docs/algorithms.md §7: each sample trains on arrival, no group
    barrier). Groups whose version lag exceeds `max_staleness` are dropped by the queue; the rest
    get weight `staleness_decay ** lag` (`RolloutBatch.sample_weights`). With `backpressure` the
    thread waits while a batch it would start now could arrive staler than `max_staleness`
    (`rlvr.train.config.predicted_lag`). The learner `publish`es new parameters after each step.
    Not bit-reproducible across runs: arrival order depends on timing.
    """

    def __init__(self, inner, *, prompts_per_step: int, producer_batch: int, queue_size: int,
                 max_staleness: int, staleness_decay: float, backpressure: bool,
                 timeout_s: float = 600.0, arrival: str = "batch", slots: int = 0):
        from rlvr.train.config import predicted_lag

        if arrival not in ARRIVALS:
            raise ValueError(f"rollout.arrival must be one of {', '.join(ARRIVALS)}, got {arrival!r}")
        if arrival == "episode" and not (isinstance(getattr(inner, "engine", None), EpisodeEngine)
                                         and inner.group_size == 1):
            raise ValueError("rollout.arrival='episode' needs single-rollout multi-turn collection "
                             "(an episode kit, sampling.group_size=1)")
        self.arrival = arrival
        self.slots = slots or producer_batch or prompts_per_step
        self.inner = inner
        self.learn_batch = prompts_per_step
        self.producer_batch = producer_batch or prompts_per_step
        self.max_staleness, self.backpressure = max_staleness, backpressure
        self.timeout_s = timeout_s
        self._lag = predicted_lag
        self.queue = SampleQueue(queue_size, max_staleness, staleness_decay)
        self._lock = threading.Lock()
        self._published: Optional[_Published] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        self._times = {"time/generate_s": 0.0, "time/verify_s": 0.0, "time/producer_gate_wait_s": 0.0}
        self._cost = RolloutCost()

    def publish(self, params, version: int) -> None:
        with self._lock:
            self._published = _Published(int(version), params)
        if self._thread is None:
            target = self._produce_episodes if self.arrival == "episode" else self._produce
            self._thread = threading.Thread(target=target, daemon=True, name="rlvr-rollout")
            self._thread.start()

    def _produce_episodes(self) -> None:
        """Per-episode arrival (`arrival="episode"`, SAO): `rlvr.rollout.continuous` keeps
        `slots` episodes in flight; each ended episode is judged on its own and queued at once,
        tagged with the policy version of its first action. An episode that ended in an
        environment fault is started again with fresh environment randomness up to the engine's
        `max_env_retries` times before it is queued (masked)."""
        import collections

        from rlvr.rollout.continuous import run_continuous

        inner, engine = self.inner, self.inner.engine
        key = jax.random.fold_in(inner.rollout_key, stream_seed("async-episodes") % 2**31)
        starts: dict = {}            # index -> (task, attempt)
        retries = collections.deque()  # (task, attempt) to run before new draws
        drawn = [0]

        def next_start(i: int):
            # the new episode arrives behind the queued ones and the ones in flight
            in_flight = len(starts)
            if self.backpressure and self._lag(len(self.queue) + in_flight, 1,
                                               self.learn_batch) > self.max_staleness:
                return None
            if retries:
                task, attempt = retries.popleft()
            else:
                task, attempt = inner.sampler.draw(f"async-episode/{drawn[0]}", 1)[0], 0
                drawn[0] += 1
            starts[i] = (task, attempt)
            return engine.start(task, attempt)

        def current():
            with self._lock:
                pub = self._published
            return pub.params, pub.version

        def on_round(gen_s: float, env_s: float) -> None:
            with self._lock:
                self._times["time/generate_s"] += gen_s + env_s

        def on_arrival(a) -> None:
            task, attempt = starts.pop(a.index)
            e = a.episode
            cost = RolloutCost(turns=e.num_turns, sampled_tokens=e.num_action_tokens,
                               prompt_tokens=sum(e.turn_starts), prefill_tokens=sum(e.turn_starts))
            if e.env_error is not None and attempt < engine.max_env_retries:
                with self._lock:
                    self._cost = self._cost + cost
                retries.append((task, attempt + 1))
                return
            got = engine.judged([task], [e], 1, cost, 0.0, inner.sampling,
                                max(a.policy_version, 0))
            with self._lock:
                self._cost = self._cost + got.cost
                self._times["time/verify_s"] += got.stats.get("time/verify_s", 0.0)
            if not self.queue.put(got, policy_version=max(a.policy_version, 0)):
                self._stop.set()

        try:
            stats = run_continuous(
                model_of=engine.model_of, current_params=current, next_start=next_start,
                on_arrival=on_arrival, make_env=engine.kit.env_factory, key=key,
                tokenizer=engine.tokenizer, sampling=inner.sampling, slots=self.slots,
                terminator=engine.kit.action_terminator, max_turns=engine.max_turns,
                max_tokens=engine.max_tokens, prompt_bucket=engine.prompt_bucket,
                batch_bucket=engine.batch_bucket, should_stop=self._stop.is_set,
                stop_when_idle=False, on_round=on_round, wall_time_s=engine.episode_timeout_s)
            del stats
        except BaseException as e:  # noqa: BLE001 — surfaced to the learner by `collect`
            with self._lock:
                self._error = e
        finally:
            self.queue.close()

    def _produce(self) -> None:
        calls = 0
        try:
            while not self._stop.is_set():
                t0 = time.monotonic()
                while (self.backpressure and not self._stop.is_set() and self._lag(
                        len(self.queue), self.producer_batch, self.learn_batch) > self.max_staleness):
                    time.sleep(0.002)
                waited = time.monotonic() - t0
                if self._stop.is_set():
                    break
                with self._lock:
                    pub = self._published
                got = self.inner.collect(pub.params, f"async/{calls}", pub.version,
                                         num_groups=self.producer_batch)
                calls += 1
                with self._lock:
                    self._cost = self._cost + got.cost
                    self._times["time/producer_gate_wait_s"] += waited
                    for k in ("time/generate_s", "time/verify_s"):
                        self._times[k] += got.stats.get(k, 0.0)
                for i in range(got.num_groups):
                    if not self.queue.put(got.groups([i]), policy_version=pub.version):
                        return
        except BaseException as e:  # noqa: BLE001 — surfaced to the learner by `collect`
            with self._lock:
                self._error = e
        finally:
            self.queue.close()

    def collect(self, params, step, policy_version: int, num_groups: Optional[int] = None) -> Collected:
        if self._published is None:
            self.publish(params, policy_version)
        got = self.queue.get_batch(num_groups or self.learn_batch, policy_version, timeout=self.timeout_s)
        with self._lock:
            err, cost, times = self._error, self._cost, dict(self._times)
            self._cost = RolloutCost()
            self._times = dict.fromkeys(self._times, 0.0)
        if err is not None:
            raise RuntimeError(f"the rollout thread failed: {type(err).__name__}: {err}") from err
        if len(got) < (num_groups or self.learn_batch):
            raise RuntimeError(f"the rollout queue delivered {len(got)} of "
                               f"{num_groups or self.learn_batch} groups within {self.timeout_s} s")
        parts = []
        for q in got:
            c = q.payload
            b = c.batch.replace(policy_version=np.full(c.batch.batch_size, q.policy_version, np.int32),
                                sample_weights=np.full(c.batch.batch_size, q.weight, np.float32))
            parts.append(dataclasses.replace(c, batch=b))
        stats = {**times, **self.queue.stats(), "sample/mean_lag": float(np.mean([q.lag for q in got]))}
        return Collected.concatenate(parts, cost=cost, stats=stats)

    def prepare(self, ref_params, restored: Optional[dict] = None) -> None:
        """The inner collector's preparation (PivotRL's probe), before the thread starts."""
        self.inner.prepare(ref_params, restored=restored)

    def pending_cost(self) -> RolloutCost:
        return self.inner.pending_cost()

    @property
    def pivot_stats(self) -> Mapping:
        return self.inner.pivot_stats

    def observe(self, collected: Collected) -> None:
        pass  # the inner collector's curriculum runs in the thread's draws only

    def state_dict(self) -> dict:
        return self.inner.state_dict()

    def load_state_dict(self, d: dict) -> None:
        self.inner.load_state_dict(d)

    def close(self) -> None:
        self._stop.set()
        self.queue.close()
        try:  # drain so a producer blocked on a full queue can exit
            while self.queue.get(10**9, timeout=0) is not None:
                pass
        except QueueClosed:
            pass
        if self._thread is not None:
            self._thread.join(timeout=120)
        self.inner.close()
