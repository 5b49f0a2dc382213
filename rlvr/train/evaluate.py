"""Held-out evaluation (docs/algorithms.md (A.21), docs/architecture.md §7).

An `Evaluator` samples `samples_per_task` rows per task of a fixed held-out set with the same
engine the collectors use (single-turn completions or multi-turn episodes), judges them through
the same reward path, and reports:

  eval/success          pass rate over *valid* samples (env_error / masked samples excluded: a
                        broken trial says nothing about the policy), with eval/success_ci95, the
                        half-width of a 95 % interval clustered by task (normal approximation
                        over the per-task pass rates);
  eval/valid_rate       fraction of samples whose trial was valid;
  eval/pass@k           unbiased pass@k (docs/algorithms.md (A.21)) over each task's valid samples (tasks with fewer
                        than k valid samples left out);
  eval/reward, eval/tokens, eval/truncation_rate, eval/unknown_rate, eval/env_error_rate,
  eval/turns (multi-turn), eval/hidden_success and eval/gap = success − hidden success (docs/architecture.md §7)
                        where a hidden check exists.
  eval/success_<kit>     a multi-turn mixture: eval/success of each kit's tasks (task family)
  eval/stop/<reason>_frac  the share of samples that ended for each stop reason present (eos,
                        max_length, max_turns, timeout, env_error, ...), as `stop/*` in training.

The held-out key is fixed (`eval.seed`), so successive evaluations of one run differ only by
the policy.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import jax
import numpy as np

from rlvr.core.metrics import pass_at_k
from rlvr.records.task import TaskSpec
from rlvr.rollout.sampler import SamplingParams, per_sample_keys
from rlvr.train.samples import stop_fractions


def exact_hidden_check(task: TaskSpec, output: str) -> float:
    """Fallback hidden check for single-turn tasks (docs/architecture.md §7): strict exact match of the stripped
    output to the reference answer (NaN when the task has none)."""
    if task.reference_answer is None:
        return float("nan")
    return float(output.strip() == str(task.reference_answer).strip())


class Evaluator:
    """Evaluates parameters on a fixed held-out task set (see the module docstring)."""

    def __init__(self, engine, tasks: Sequence[TaskSpec], *, samples_per_task: int,
                 sampling: SamplingParams, pass_k: Sequence[int], seed: int,
                 hidden: Optional[Callable[[TaskSpec, str], float]] = None):
        self.engine, self.tasks = engine, list(tasks)
        self.n, self.sampling, self.pass_k = samples_per_task, sampling, tuple(pass_k)
        self.key = jax.random.PRNGKey(seed)
        self.hidden = hidden

    def evaluate(self, params) -> dict:
        if not self.tasks:
            return {}
        return self.summarize(self.collect(params))

    def collect(self, params):
        """The judged held-out rows (`rlvr.train.collectors.Collected`, `samples_per_task` rows
        per task, task-major)."""
        keys = per_sample_keys(self.key, len(self.tasks) * self.n)
        return self.engine.run(params, self.tasks, self.n, keys, self.sampling, -1)

    def summarize(self, got) -> dict:
        """The eval/* metrics of collected held-out rows (module docstring)."""
        n = self.n
        s = got.samples
        valid = np.array([x.trial == "valid" and x.valid for x in s])
        passed = np.array([x.decision == "pass" and x.trial == "valid" for x in s], float)
        lengths = np.asarray(got.batch.loss_mask).sum(-1)
        res = {"eval/success": float(passed[valid].mean()) if valid.any() else float("nan"),
               "eval/valid_rate": float(valid.mean()),
               "eval/reward": float(np.asarray(got.batch.rewards)[valid].mean()) if valid.any() else float("nan"),
               "eval/tokens": float(lengths.mean()),
               "eval/truncation_rate": float(np.asarray(got.batch.truncated).mean()),
               "eval/unknown_rate": float(np.mean([x.decision == "unknown" and x.trial == "valid" for x in s])),
               "eval/env_error_rate": float(np.mean([x.trial == "env_error" for x in s]))}
        if any(x.num_turns != 1 for x in s) or getattr(self.engine, "kit", None) is not None:
            res["eval/turns"] = float(np.mean([x.num_turns for x in s]))
        res.update(stop_fractions(s, prefix="eval/stop/"))
        v = valid.reshape(-1, n)
        p = passed.reshape(-1, n)
        n_valid = v.sum(1)
        has = n_valid > 0
        per_task = np.where(has, (p * v).sum(1) / np.maximum(n_valid, 1), 0.0)[has]
        if len(per_task) > 1:
            res["eval/success_ci95"] = float(1.96 * per_task.std(ddof=1) / np.sqrt(len(per_task)))
        c = (p * v).sum(1)
        for k in self.pass_k:
            ok = n_valid >= k
            if ok.any():
                res[f"eval/pass@{k}"] = float(np.mean(np.asarray(pass_at_k(n_valid[ok], c[ok], k))))
        kits = [t.public_metadata.get("kit") for t in self.tasks]
        if len(set(kits) - {None}) > 1:  # a multi-turn mixture: success per task family
            fam = np.repeat(np.asarray([str(k) for k in kits]), n)
            for k in sorted(set(kits) - {None}):
                sel = valid & (fam == k)
                res[f"eval/success_{k}"] = float(passed[sel].mean()) if sel.any() else float("nan")
        if self.hidden is not None:
            hidden = np.array([self.hidden(self.tasks[i // n], x.text) for i, x in enumerate(s)])
            if np.all(np.isfinite(hidden[valid])) and valid.any():
                res["eval/hidden_success"] = float(hidden[valid].mean())
                res["eval/gap"] = res["eval/success"] - res["eval/hidden_success"]
        return res
