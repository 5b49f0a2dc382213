"""Curves and the measures the papers use, with seed-paired Student-t intervals.

A run's *curve* is its held-out evaluations in order: step, success, its 95 % half-width, and
the cumulative cost at that point — rollout tokens (`cost/sampled_tokens`: tokens the policy
generated, probes and value pre-training included), tokens the samples were conditioned on
(`cost/prompt_tokens`: the prompt, or the whole history at every call), rollout turns
(`cost/turns`: policy calls, one per single-turn sample or multi-turn action), and training wall-clock
(seconds of the loop's steps, evaluations excluded), and for a run under the modelled clock
(`rollout.clock="modelled"`) its modelled wall-clock (`time/modelled_s`, the virtual time at the
end of the step: a system model's seconds, not this machine's).

Training wall-clock of a run at step s is Σ time/step_s over steps ≤ s, with one correction for
asynchronous runs: while the learner evaluates, the rollout thread keeps filling its queue (up
to the staleness bound), so the steps right after an evaluation find their batch ready. Those
steps (the first `max_staleness` + 1 after each evaluation) are charged the median step time
of the other steps instead of their measured time. Synchronous runs are unaffected (their steps
after an evaluation are ordinary).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np

nan = float("nan")


@dataclasses.dataclass(frozen=True)
class OneTimeCost:
    """What a run spent before its first training step: PivotRL's pivot profiling (the probe of
    the candidate states with the reference policy), a one-time selection; zero for other methods.

    Attributes:
      tokens, prompt_tokens, turns: its rollout cost (the `cost/*` of the run's step-0 row, which
        the loop charges to the first step, so every later cumulative cost includes it).
      wall_s: its duration in seconds (`probe_wall_s` of the record, timed by `runner.run_config`;
        NaN where the record predates it, or where the invocation that probed was killed before
        it saved its times).
    """

    tokens: float
    prompt_tokens: float
    turns: float
    wall_s: float

    def line(self) -> str:
        wall = "not recorded" if not math.isfinite(self.wall_s) else f"{self.wall_s:.1f} s"
        return (f"{self.tokens:.0f} rollout tokens, {self.turns:.0f} turns, "
                f"{self.prompt_tokens:.0f} prompt tokens, {wall} wall-clock")


def one_time_cost(rec: dict) -> OneTimeCost:
    """The run record's one-time cost before training (see OneTimeCost)."""
    rows = [r for r in rec["rows"] if r["step"] == 0]
    r0 = rows[0] if rows else {}
    return OneTimeCost(tokens=float(r0.get("cost/sampled_tokens", 0.0)),
                       prompt_tokens=float(r0.get("cost/prompt_tokens", 0.0)),
                       turns=float(r0.get("cost/turns", 0.0)),
                       wall_s=float(rec.get("probe_wall_s", nan)))


def carries_one_time_cost(rec: dict) -> bool:
    """Whether the record's cumulative cost counters after step 0 include its one-time cost
    (the step-0 row's). They do unless the run was resumed from its step-0 checkpoint by a loop
    that dropped the probe's pending cost there: then the first later row's counter lies below
    step 0's, which a cumulative counter cannot. `curve` adds the one-time cost back to such
    a record's later rows."""
    rows = sorted((r for r in rec["rows"] if "cost/sampled_tokens" in r), key=lambda r: r["step"])
    first = [r for r in rows if r["step"] == 0]
    later = [r for r in rows if r["step"] > 0]
    return not (first and later and later[0]["cost/sampled_tokens"] < first[0]["cost/sampled_tokens"])


def curve(rec: dict, *, async_lag: int = 0, one_time: str = "include") -> dict:
    """{step, success, ci, tokens, prompt_tokens, turns, wall_s, modelled_s} arrays at each
    evaluation of a run record (`runner.run_config`), in step order (the warm-start evaluation
    is step 0); `turns` is the cumulative count of policy calls (`cost/turns`; NaN in records
    that predate it); `modelled_s` the modelled clock's time at the end of the evaluated step
    (`time/modelled_s` of the latest row at or before it, 0 before the first step; NaN
    throughout for a run on the real clock).

    one_time: "include" (the costs as the loop counts them, PivotRL's probe inside) or
    "exclude" (the run's `one_time_cost` taken off every cost: training cost only, the probe a
    one-time selection reported on its own). Wall-clock never includes the probe. A record
    whose later counters dropped the one-time cost (`carries_one_time_cost`) has it added back
    first, so both readings mean the same for every record."""
    if one_time not in ("include", "exclude"):
        raise ValueError(f"one_time must be 'include' or 'exclude', got {one_time!r}")
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
    modelled = {r["step"]: float(r["time/modelled_s"]) for r in rows if "time/modelled_s" in r}
    out = {k: [] for k in ("step", "success", "ci", "tokens", "prompt_tokens", "turns", "wall_s",
                           "modelled_s")}
    for r in evals:
        s = r["step"]
        out["step"].append(s)
        out["success"].append(float(r["eval/success"]))
        out["ci"].append(float(r.get("eval/success_ci95", float("nan"))))
        out["tokens"].append(float(r.get("cost/sampled_tokens", 0.0)))
        out["prompt_tokens"].append(float(r.get("cost/prompt_tokens", 0.0)))
        out["turns"].append(float(r.get("cost/turns", float("nan"))))
        out["wall_s"].append(max((v for k, v in cum.items() if k <= s), default=0.0))
        out["modelled_s"].append(max((v for k, v in modelled.items() if k <= s), default=0.0)
                                 if modelled else nan)
    out = {k: np.asarray(v, float) for k, v in out.items()}
    once = one_time_cost(rec)
    if len(out["step"]) and not carries_one_time_cost(rec):
        after = out["step"] > 0
        out["tokens"] = out["tokens"] + after * once.tokens
        out["prompt_tokens"] = out["prompt_tokens"] + after * once.prompt_tokens
        out["turns"] = out["turns"] + after * once.turns
    if one_time == "exclude" and len(out["step"]):
        out["tokens"] = out["tokens"] - once.tokens
        out["prompt_tokens"] = out["prompt_tokens"] - once.prompt_tokens
        out["turns"] = out["turns"] - once.turns
    return out


def shift(c: dict, tokens: float = 0.0, prompt_tokens: float = 0.0, wall_s: float = 0.0,
          turns: float = 0.0) -> dict:
    """A curve moved right by an earlier stage's cost (two-stage runs)."""
    out = dict(c)
    if "turns" in c:
        out["turns"] = c["turns"] + turns
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
# Seeds are few (3 to 5): a percentile bootstrap over n values can only return values between their
# minimum and maximum, which covers the mean about 75 % of the time at n = 3. Intervals here are
# Student-t intervals over the per-seed values (paired: over the per-seed differences or log-ratios),
# exact under normal per-seed errors and honest about their width at small n.


@dataclasses.dataclass(frozen=True)
class TReading:
    """A Student-t reading of per-seed values: n finite values, their mean (`point`), the
    1 − alpha interval [lo, hi] = mean ± t_{n−1, 1−alpha/2} · s / √n, and the two-sided p-value of
    the one-sample t-test against `null` (NaN with fewer than 2 values or no spread)."""

    n: int
    point: float
    lo: float
    hi: float
    p_value: float

    @property
    def ci(self) -> tuple[float, float, float]:
        return self.point, self.lo, self.hi


def t_reading(values: Sequence[float], *, null: float = 0.0, alpha: float = 0.05) -> TReading:
    """The t-interval and t-test of the finite values (see TReading). With one value the interval
    is the point (no spread can be estimated); with none every field is NaN."""
    from scipy import stats as sps

    x = np.asarray([v for v in values if np.isfinite(v)], float)
    if len(x) == 0:
        return TReading(0, nan, nan, nan, nan)
    point = float(np.mean(x))
    if len(x) == 1:
        return TReading(1, point, point, point, nan)
    se = float(np.std(x, ddof=1)) / math.sqrt(len(x))
    if se == 0.0:
        return TReading(len(x), point, point, point, nan)
    half = float(sps.t.ppf(1 - alpha / 2, len(x) - 1)) * se
    p = float(2 * sps.t.sf(abs(point - null) / se, len(x) - 1))
    return TReading(len(x), point, point - half, point + half, p)


def t_quantile(n: int, alpha: float = 0.05) -> float:
    """t_{n−1, 1−alpha/2}: the multiplier of the standard error in a 1 − alpha interval over n seeds."""
    from scipy import stats as sps

    return float(sps.t.ppf(1 - alpha / 2, n - 1)) if n > 1 else nan


def t_interval(values: Sequence[float], **kw) -> tuple[float, float, float]:
    """(point, lo, hi): the mean of the finite values and its 95 % Student-t interval."""
    return t_reading(values, **kw).ci


def paired_diff(a: Sequence[float], b: Sequence[float], **kw) -> tuple[float, float, float]:
    """Mean of the per-seed differences a − b with its paired t-interval."""
    return t_interval(diffs(a, b), **kw)


def diffs(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Per-seed differences a − b over the seeds where both are finite."""
    return [x - y for x, y in zip(a, b) if np.isfinite(x) and np.isfinite(y)]


def log_ratios(num: Sequence[float], den: Sequence[float]) -> list[float]:
    """Per-seed log(num / den) over the seeds where both are positive and finite."""
    return [math.log(x / y) for x, y in zip(num, den)
            if np.isfinite(x) and np.isfinite(y) and x > 0 and y > 0]


def paired_ratio(num: Sequence[float], den: Sequence[float], **kw) -> tuple[float, float, float]:
    """Geometric mean of the per-seed ratios num / den with its paired t-interval (on logs)."""
    p, lo, hi = t_interval(log_ratios(num, den), **kw)
    return (math.exp(p), math.exp(lo), math.exp(hi)) if np.isfinite(p) else (p, lo, hi)


# The kinds of a per-seed cost ratio num / den when runs may not reach the level (`cost_to`'s
# censoring: a run that never reached it contributes its cost at the last evaluation, a lower bound).
EXACT, AT_MOST, AT_LEAST, UNKNOWN = "exact", "at most", "at least", "unknown"


def censored_ratio_kind(num_reached: bool, den_reached: bool) -> str:
    """What a per-seed ratio num_cost / den_cost is when some runs are censored: exact when both
    reached the level; at most its value when only the numerator's run did (the denominator's true
    cost is larger); at least when only the denominator's did; unknown when neither did."""
    if num_reached and den_reached:
        return EXACT
    if num_reached:
        return AT_MOST
    if den_reached:
        return AT_LEAST
    return UNKNOWN


def combined_kind(kinds) -> str:
    """The kind of a reading over seeds of the given per-seed kinds: exact when all are (or there
    are none), the one bound when every inexact seed is that bound, unknown when they differ."""
    ks = set(kinds) - {EXACT}
    if not ks:
        return EXACT
    return ks.pop() if len(ks) == 1 else UNKNOWN


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error control over the given tests):
    sort p ascending, p̃_(i) = max_{j ≤ i} min(1, (m − j + 1) · p_(j)), returned in input order. A
    NaN p-value (no test possible) counts as 1."""
    p = np.asarray([1.0 if not np.isfinite(v) else float(v) for v in p_values], float)
    m = len(p)
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted.tolist()


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
