"""The one reward path: outputs → `Verdict`s → rewards (docs/verifiers.md (V.1), docs/architecture.md §4, docs/verifiers.md §4, §1).

Every decision the training system pays for — a single-turn completion, a multi-turn episode's
final state, a PivotRL turn (probe or local sample) — goes through `Judge.judge(tasks, outputs)`:

  1. the verification pool (`rlvr.verifiers.pool.VerificationPool`, `reward.executor`) runs the
     verifier with a time limit; env_error verdicts (the verifier's own fault, a timeout, a
     crashed worker) are retried up to `reward.max_retries` times;
  2. `compose_reward(verdict, reward_config)` turns each verdict into (reward, valid): an
     env_error that survived its retries is masked (valid False), never paid as reward 0;
     `unknown` follows `reward.unknown_as`; a task's own `reward_config` overrides the run's
     fields where it sets them;
  3. optionally the reward cache (docs/verifiers.md §4, `reward.cache`), keyed by task, output, environment
     version, verifier version and reward-config hash.

`counters()` returns the pool's retries, timeouts and worker restarts since the last call.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Sequence

import numpy as np

from rlvr.records.task import TaskSpec
from rlvr.records.verdict import Verdict
from rlvr.verifiers.cache import RewardCache
from rlvr.verifiers.compose import RewardConfig, compose_reward
from rlvr.verifiers.pool import VerificationPool


def reward_config_from(config) -> RewardConfig:
    """The run's RewardConfig from `config.reward`: binary when a pass is worth 1 and format 0,
    else weighted R = correct_weight·1[pass] + format_weight·c_format; clipped to ±clip."""
    r = config.reward
    clip = (-r.clip, r.clip) if r.clip > 0 else None
    common = dict(clip=clip, unknown_policy=r.unknown_as, max_env_retries=r.max_retries)
    if r.correct_weight == 1.0 and r.format_weight == 0.0:
        return RewardConfig(kind="binary", **common)
    weights = {"format": r.format_weight} if r.format_weight else {}
    return RewardConfig(kind="weighted", pass_weight=r.correct_weight, weights=weights, **common)


@dataclasses.dataclass(frozen=True)
class Judgement:
    """Verdicts and composed rewards of a batch of outputs (aligned).

    verdicts: one per output; rewards: float32 [B] (0 where masked); valid: bool [B];
    reward_config_hashes: the RewardConfig hash each reward was composed with (docs/architecture.md §3).
    """

    verdicts: tuple
    rewards: np.ndarray
    valid: np.ndarray
    reward_config_hashes: tuple


class Judge:
    """Verification pool + reward composition for one verifier (see the module docstring)."""

    def __init__(self, verifier, reward_config: RewardConfig, *, executor: str = "inline",
                 num_workers: int = 2, timeout_s: float = 5.0, cache: bool = False,
                 env_version: str = "", ray_address: str = "local"):
        self.verifier = verifier
        self.reward_config = reward_config
        self._pool = VerificationPool(
            verifier, num_workers=num_workers, timeout_s=timeout_s,
            max_env_retries=reward_config.max_env_retries, executor=executor,
            cache=RewardCache() if cache else None, env_version=env_version or "0",
            reward_config_hash=reward_config.hash(), ray_address=ray_address)
        self._by_task_config: dict[str, RewardConfig] = {}
        self._last = self._totals()

    @property
    def pool(self) -> VerificationPool:
        return self._pool

    def config_for(self, task: TaskSpec) -> RewardConfig:
        """The run's reward config with `task.reward_config` fields overriding it."""
        if not task.reward_config:
            return self.reward_config
        key = json.dumps(task.reward_config, sort_keys=True, default=str)
        if key not in self._by_task_config:
            try:
                self._by_task_config[key] = RewardConfig.from_dict(
                    {**self.reward_config.to_dict(), **dict(task.reward_config)})
            except ValueError as e:
                raise ValueError(f"task {task.task_id!r}: bad reward_config: {e}") from None
        return self._by_task_config[key]

    def judge(self, tasks: Sequence[TaskSpec], outputs: Sequence[str]) -> Judgement:
        """Verdicts and rewards for (tasks[i], outputs[i]) pairs."""
        if len(tasks) != len(outputs):
            raise ValueError(f"Judge.judge: {len(tasks)} tasks but {len(outputs)} outputs")
        if not tasks:
            return Judgement((), np.zeros((0,), np.float32), np.zeros((0,), bool), ())
        verdicts = self._pool.verify_batch(list(tasks), list(outputs))
        return self.compose(tasks, verdicts)

    def compose(self, tasks: Sequence[TaskSpec], verdicts: Sequence[Verdict]) -> Judgement:
        """Rewards for verdicts already made (e.g. an episode that ended in an environment fault)."""
        configs = [self.config_for(t) for t in tasks]
        pairs = [compose_reward(v, c) for v, c in zip(verdicts, configs)]
        return Judgement(tuple(verdicts), np.array([p[0] for p in pairs], np.float32),
                         np.array([p[1] for p in pairs], bool), tuple(c.hash() for c in configs))

    def _totals(self) -> dict:
        s = self._pool.stats()
        return {"retries": s["retries"], "timeouts": sum(s["timeouts"].values()),
                "worker_restarts": s["worker_restarts"]}

    def counters(self) -> dict[str, float]:
        """Retries, timeouts and worker restarts since the previous call."""
        now = self._totals()
        out = {k: float(now[k] - self._last[k]) for k in now}
        self._last = now
        return out

    def close(self) -> None:
        self._pool.close()
