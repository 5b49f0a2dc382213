"""Host-side per-sample monitoring: the docs/architecture.md §7 metrics of a batch's `SampleMeta`s and the
`samples.jsonl` audit log (docs/architecture.md §3, §7).

`sample_metrics(collected)` is the same set for every algorithm and collector:
  verify/pass_rate, verify/unknown_rate, verify/env_error_rate, verify/masked_count,
  verify/masked_frac; sampling/unique_ratio (distinct outputs per group); stop/<reason>_frac
  (eos, max_length, max_turns, timeout, env_error, ...); sample/turns (mean actions per sample);
  reward/component_<name>_mean and reward/corr_<name> (each verdict component's correlation with
  the reward); reward/hidden_mean (the hidden check, docs/architecture.md §7, where one exists).
Group outcome fractions, reward and advantage statistics and lengths come from the learner
step (`Algorithm.batch_metrics`).

`write_samples(path, step, collected, n, seed)` appends n records — half the highest-reward
samples (the tail a reward-hacking audit reads first, docs/architecture.md §7), half drawn at random — each the
full `SampleMeta` (prompt, output, verdict evidence, reward, versions) plus the step.

Every JSONL log of samples (`samples.jsonl` here, `eval_samples.jsonl` of `--mode=eval`) is
written by `write_jsonl_rows` / `dumps_record`: any row writes, whatever text a model produced.
Non-ASCII text stays readable UTF-8; a lone surrogate (a half of a UTF-16 pair, e.g. "\\ud800"
decoded from a model's bytes) is written as its JSON escape, so `json.loads` gives back the same
string; NaN / Infinity become strings and values that are not JSON data their `repr`.
"""

from __future__ import annotations

import json
import math
from typing import Callable, Optional

import numpy as np

# per-process metrics every host computes: mean (rates) or sum (counts) over hosts
GLOBAL_MEAN = ("verify/unknown_rate", "verify/env_error_rate", "verify/pass_rate",
               "verify/masked_frac", "sampling/unique_ratio")
GLOBAL_SUM = ("verify/masked_count",)


def stop_fractions(samples, prefix: str = "stop/") -> dict:
    """`{prefix}<reason>_frac`: the share of `samples` (SampleMeta) that ended for each stop
    reason present (eos, max_length, max_turns, timeout, env_error, ...)."""
    reasons = [x.stop_reason for x in samples]
    return {f"{prefix}{r}_frac": float(np.mean([x == r for x in reasons])) for r in sorted(set(reasons))}


def sample_metrics(collected, hidden: Optional[Callable] = None) -> dict:
    """docs/architecture.md §7 host metrics of one collected batch (module docstring)."""
    s = collected.samples
    g = collected.group_size
    valid = np.array([x.valid for x in s])
    out = {
        "verify/pass_rate": float(np.mean([x.decision == "pass" and x.trial == "valid" for x in s])),
        "verify/unknown_rate": float(np.mean([x.decision == "unknown" and x.trial == "valid" for x in s])),
        "verify/env_error_rate": float(np.mean([x.trial == "env_error" for x in s])),
        "verify/masked_count": float(np.sum(~valid)),
        "verify/masked_frac": float(np.mean(~valid)),
        "sampling/unique_ratio": float(np.mean([len({x.text for x in s[i:i + g]}) / g
                                                for i in range(0, len(s), g)])),
        "sample/turns": float(np.mean([x.num_turns for x in s])),
    }
    out.update(stop_fractions(s))
    rewards = np.array([x.reward for x in s])
    for k in sorted({k for x in s for k in x.components}):
        c = np.array([float(x.components.get(k, 0.0)) for x in s])
        out[f"reward/component_{k}_mean"] = float(c.mean())
        if c.std() > 0 and rewards.std() > 0:
            out[f"reward/corr_{k}"] = float(np.corrcoef(c, rewards)[0, 1])
    if hidden is not None:
        h = np.array([hidden(t, x.text) for t, x in zip(collected.tasks, s)])
        if np.all(np.isfinite(h)):
            out["reward/hidden_mean"] = float(h.mean())
    return out


def global_sample_metrics(m: dict, num_processes: int) -> dict:
    """Multi-host: the per-process sample metrics every process has, combined (equal shares: the
    mean of per-host means is the global mean; counts are summed). Others stay process 0's."""
    if num_processes == 1:
        return m
    from jax.experimental import multihost_utils

    keys = GLOBAL_MEAN + GLOBAL_SUM
    local = np.array([m.get(k, 0.0) for k in keys], np.float64)
    allv = np.asarray(multihost_utils.process_allgather(local)).reshape(num_processes, len(keys))
    m = dict(m)
    for j, k in enumerate(keys):
        m[k] = float(allv[:, j].mean() if k in GLOBAL_MEAN else allv[:, j].sum())
    return m


def _json_safe(v):
    if isinstance(v, np.generic):  # numpy scalars: the Python number / bool
        v = v.item()
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    if isinstance(v, (str, int, bool)) or v is None or isinstance(v, float):
        return v
    return repr(v)


def dumps_record(row) -> str:
    """One JSONL line (no newline) of `row` that always encodes as UTF-8 (module docstring)."""
    text = json.dumps(_json_safe(row), ensure_ascii=False, allow_nan=False)
    # Only lone surrogates cannot encode; backslashreplace writes them as \uXXXX, which is the
    # JSON escape of the same code point (they only occur inside JSON strings).
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def write_jsonl_rows(path: str, rows, *, append: bool = False) -> int:
    """Writes `rows` (dicts) to `path` as JSONL, one `dumps_record` line each; every line is
    built before the file is opened, so a row that cannot be written leaves no partial file.
    append: add to the file instead of replacing it. Returns the number of rows written."""
    lines = [dumps_record(r) + "\n" for r in rows]
    with open(path, "a" if append else "w", encoding="utf-8") as f:
        f.writelines(lines)
    return len(lines)


def write_samples(path: str, step: int, collected, n: int, seed: int) -> int:
    """Appends up to n records of `collected` (half top reward, half random) to `path`."""
    s = collected.samples
    if not s:
        return 0
    order = np.argsort([-x.reward for x in s], kind="stable")
    top = list(order[: (n + 1) // 2])
    rest = [i for i in range(len(s)) if i not in set(top)]
    rng = np.random.default_rng([seed, step])
    extra = list(rng.choice(rest, size=min(n - len(top), len(rest)), replace=False)) if rest else []
    rows = [{"step": int(step), "selected": tag, **s[int(i)].to_json()}
            for tag, idx in (("top_reward", top), ("random", extra)) for i in idx]
    return write_jsonl_rows(path, rows, append=True)
