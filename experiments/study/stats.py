"""Curves and the measures the papers use, with seed-paired bootstrap intervals.

A run's *curve* is its held-out evaluations in order: step, success, its 95 % half-width, and
the cumulative cost at that point — rollout tokens (`cost/sampled_tokens`: tokens the policy
generated, probes and value pre-training included), tokens the samples were conditioned on
(`cost/prompt_tokens`: the prompt, or the whole history at every call), and training wall-clock
(seconds of the loop's steps, evaluations excluded).

Training wall-clock of a run at step s is Σ time/step_s over steps ≤ s, with one correction for
asynchronous runs: while the learner evaluates, the rollout thread keeps filling its queue (up
to the staleness bound), so the steps right after an evaluation find their batch ready. Those
steps (the first `max_staleness` + 1 after each evaluation) are charged the median step time
of the other steps instead of their measured time. Synchronous runs are unaffected (their steps
after an evaluation are ordinary).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np


def curve(rec: dict, *, async_lag: int = 0) -> dict:
    """{step, success, ci, tokens, prompt_tokens, wall_s} arrays at each evaluation of a run
    record (`runner.run_config`), in step order (the warm-start evaluation is step 0)."""
    rows = sorted(rec["rows"], key=lambda r: r["step"])
    step_s = {r["step"]: float(r["time/step_s"]) for r in rows if "time/step_s" in r}
    evals = [r for r in rows if "eval/success" in r]
    eval_steps = [r["step"] for r in evals]
    charged = dict(step_s)
    if async_lag and step_s:
        after = {s + k for s in eval_steps for k in range(1, async_lag + 2)}
        normal = [v for s, v in step_s.items() if s not in after]
        med = float(np.median(normal)) if normal else float(np.median(list(step_s.values())))
        for s in after:
            if s in charged:
                charged[s] = max(charged[s], med)
    cum = {}
    total = 0.0
    for s in sorted(charged):
        total += charged[s]
        cum[s] = total
    out = {k: [] for k in ("step", "success", "ci", "tokens", "prompt_tokens", "wall_s")}
    for r in evals:
        s = r["step"]
        out["step"].append(s)
        out["success"].append(float(r["eval/success"]))
        out["ci"].append(float(r.get("eval/success_ci95", float("nan"))))
        out["tokens"].append(float(r.get("cost/sampled_tokens", 0.0)))
        out["prompt_tokens"].append(float(r.get("cost/prompt_tokens", 0.0)))
        out["wall_s"].append(max((v for k, v in cum.items() if k <= s), default=0.0))
    return {k: np.asarray(v, float) for k, v in out.items()}


def shift(c: dict, tokens: float = 0.0, prompt_tokens: float = 0.0, wall_s: float = 0.0) -> dict:
    """A curve moved right by an earlier stage's cost (two-stage runs)."""
    out = dict(c)
    out["tokens"] = c["tokens"] + tokens
    out["prompt_tokens"] = c["prompt_tokens"] + prompt_tokens
    out["wall_s"] = c["wall_s"] + wall_s
    return out


BUDGET_TOL = 0.05  # an evaluation at ≤ budget × (1 + BUDGET_TOL) counts as at the budget


def at_budget(c: dict, budget: float, x: str = "tokens", last: int = 1, tol: float = BUDGET_TOL) -> float:
    """Success at `budget` of measure `x`: the mean of the last `last` evaluations at or below
    budget × (1 + tol) (the final success of a run truncated to a common budget; `tol` admits the
    final evaluation of a run stopped by its budget, whose last step overshoots it)."""
    ok = np.nonzero(c[x] <= budget * (1 + tol))[0]
    if len(ok) == 0:
        return float("nan")
    return float(np.mean(c["success"][ok[-last:]]))


def best_at_budget(c: dict, budget: float, x: str = "tokens", tol: float = BUDGET_TOL) -> float:
    """Highest success among the evaluations at or below budget × (1 + tol) of measure `x` (the
    same evaluations `at_budget` reads final success from)."""
    ok = c[x] <= budget * (1 + tol)
    return float(np.max(c["success"][ok])) if ok.any() else float("nan")


def plateau(c: dict, last: int = 3) -> float:
    """Mean success of the last `last` evaluations."""
    return float(np.mean(c["success"][-last:]))


def cost_to(c: dict, level: float, x: str = "tokens") -> tuple[float, bool]:
    """(cost, reached): measure `x` at which success first reaches `level`, linearly
    interpolated between the evaluation before and the first at or above it; (cost at the last
    evaluation, False) when it never does (right-censored)."""
    s, v = c["success"], c[x]
    hit = np.nonzero(s >= level)[0]
    if len(hit) == 0:
        return float(v[-1]), False
    i = int(hit[0])
    if i == 0:
        return float(v[0]), True
    f = (level - s[i - 1]) / max(s[i] - s[i - 1], 1e-12)
    return float(v[i - 1] + f * (v[i] - v[i - 1])), True


# ----------------------------------------------------------------------------- intervals
def bootstrap(values: Sequence[float], stat=np.mean, *, n: int = 10_000, seed: int = 0,
              alpha: float = 0.05) -> tuple[float, float, float]:
    """(point, lo, hi): the statistic and its percentile bootstrap interval over the values
    (seeds resampled with replacement). NaN when there are no values; with one value the
    interval is the point (no spread can be estimated)."""
    x = np.asarray([v for v in values if np.isfinite(v)], float)
    if len(x) == 0:
        return float("nan"), float("nan"), float("nan")
    point = float(stat(x))
    if len(x) == 1:
        return point, point, point
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(n, len(x)))
    boots = np.array([stat(x[i]) for i in idx])
    return point, float(np.quantile(boots, alpha / 2)), float(np.quantile(boots, 1 - alpha / 2))


def paired_diff(a: Sequence[float], b: Sequence[float], **kw) -> tuple[float, float, float]:
    """Mean of the per-seed differences a − b with its bootstrap interval."""
    d = [x - y for x, y in zip(a, b) if np.isfinite(x) and np.isfinite(y)]
    return bootstrap(d, **kw)


def paired_ratio(num: Sequence[float], den: Sequence[float], **kw) -> tuple[float, float, float]:
    """Geometric mean of the per-seed ratios num / den with its bootstrap interval (on logs)."""
    logs = [math.log(x / y) for x, y in zip(num, den) if x > 0 and y > 0 and np.isfinite(x / y)]
    p, lo, hi = bootstrap(logs, **kw)
    return (math.exp(p), math.exp(lo), math.exp(hi)) if np.isfinite(p) else (p, lo, hi)


def excludes(lo: float, hi: float, value: float) -> bool:
    return bool(np.isfinite(lo) and np.isfinite(hi) and (lo > value or hi < value))


def fmt_costs(costs) -> str:
    """Per-seed (cost, reached) pairs of `cost_to` as text, ">" before a cost that never reached
    the level (the run's cost at its last evaluation, a lower bound)."""
    return ", ".join(f"{v:.0f}" if ok else f">{v:.0f}" for v, ok in costs)


def fmt_ci(p: float, lo: float, hi: float, digits: int = 3, unit: str = "") -> str:
    if not np.isfinite(p):
        return "n/a"
    return f"{p:.{digits}f}{unit} [{lo:.{digits}f}, {hi:.{digits}f}]"


def verdict(p: float, lo: float, hi: float, *, null: float, target: Optional[float] = None,
            better: str = "greater") -> str:
    """Plain reading of an interval against the no-effect value `null` and the paper's effect
    size `target` (both in the same direction `better`)."""
    if not np.isfinite(p):
        return "not measurable (missing runs)"
    sgn = 1 if better == "greater" else -1
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo == hi:
        return "no interval (one seed, or every seed gave the same value)"
    beats_null = (lo > null) if sgn > 0 else (hi < null)
    worse_null = (hi < null) if sgn > 0 else (lo > null)
    if target is not None:
        meets = (lo >= target) if sgn > 0 else (hi <= target)
        ruled_out = (hi < target) if sgn > 0 else (lo > target)
        if meets:
            return "HOLDS (the interval lies beyond the paper's effect size)"
        if beats_null and ruled_out:
            return "direction holds, the paper's effect size is ruled out (interval below it)"
        if beats_null:
            return "direction holds (interval excludes no effect); effect size not resolved"
        if worse_null:
            return "FAILS (the interval excludes no effect in the opposite direction)"
        if ruled_out:
            return "FAILS to show: the paper's effect size is ruled out, no effect is not"
        return "UNRESOLVED (the interval contains both no effect and the paper's effect size)"
    if beats_null:
        return "HOLDS (the interval excludes no effect)"
    if worse_null:
        return "FAILS (the interval excludes no effect in the opposite direction)"
    return "UNRESOLVED (the interval contains no effect)"
