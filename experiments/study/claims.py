"""Every committed block's readings of the papers' claims, side by side, recomputed from the
per-seed values the result files record.

A block is one folder of study results (`experiments/results/` itself, or a subfolder such as
`long512/`) with its `study_pivot.json` and / or `study_sao.json`. For each claim and each block
where both of the claim's arms ran, a reading gives the per-seed values, their mean with a 95 %
paired Student-t interval (on log-ratios for cost ratios), and a verdict:

- Two claims are the pre-registered *primary endpoints*: PivotRL's rollout cost to a success level
  (claim 1) and SAO's training wall-clock to it (claim 3). Their p-values (two-sided paired t-test
  against no effect) are Holm-adjusted over the primary endpoints of the block, and their verdict
  reads the adjusted p-value. Every other reading is *exploratory*: its verdict reads the
  unadjusted interval and says so.
- A cost ratio needs both runs of a seed to reach the level. A run that never did is censored at
  its last evaluation's cost (a lower bound), so that seed's ratio is a bound: at most its value
  when only the numerator's run reached the level, at least when only the denominator's did, and
  unknown when neither did (such seeds are left out). A reading with bounds in one direction is
  that bound (its interval end in that direction is kept, the other is not a limit); bounds in
  both directions leave it unmeasurable.
- Each claim's label says what its source claims: the descriptions of PivotRL and SAO state a
  direction (lower cost, no wait for a group's slowest rollout, better credit assignment), not an
  effect size, so every reading is checked against no effect only.

Everything is read from the result files; nothing is rerun.
"""

from __future__ import annotations

import dataclasses
import glob
import math
import os
from typing import Optional

import numpy as np

from experiments.study import report, stats

SCRIPTS = ("pivot", "sao")
ALPHA = 0.05


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim read from `<script>.json`.

    kind "ratio": arms[0]'s cost ÷ arms[1]'s cost to the level, per seed, from `measure` (a
    `*_to_level` list of (cost, reached) per seed); kind "diff": arms[0] − arms[1] of `measure`
    (a per-seed list, e.g. final success). `primary` marks a pre-registered primary endpoint."""

    label: str
    script: str
    kind: str
    measure: str
    arms: tuple[str, str]
    primary: bool = False
    digits: int = 3

    @property
    def null(self) -> float:
        return 1.0 if self.kind == "ratio" else 0.0

    @property
    def unit(self) -> str:
        return "×" if self.kind == "ratio" else ""


def _diff(label, script, arms):
    return Claim(label, script, "diff", "final", arms)


CLAIMS = (
    Claim("1. GRPO ÷ PivotRL rollout tokens to ℓ (claimed: lower cost than full-task RL; no size stated)",
          "pivot", "ratio", "tokens_to_level", ("grpo", "pivotrl"), primary=True, digits=2),
    _diff("2a. full filter − all turns, final success (claimed: > 0)", "pivot", ("pivotrl", "pivot_all")),
    _diff("2a. full filter − random turns", "pivot", ("pivotrl", "pivot_random")),
    _diff("2a. full filter − σ̂² > 0 only", "pivot", ("pivotrl", "pivot_variance")),
    _diff("2b. all turns − exact-match reward (claimed: functional reward > exact match)", "pivot",
          ("pivot_all", "pivot_exact")),
    _diff("functional − exact-match reward, both filtered", "pivot", ("pivotrl", "pivot_exact")),
    _diff("two stages − PivotRL alone", "pivot", ("two_stage", "pivotrl")),
    Claim("3. GRPO ÷ SAO training wall-clock to ℓ (claimed: no wait for a group's slowest rollout; "
          "no size stated)", "sao", "ratio", "wall_to_level", ("grpo", "sao"), primary=True, digits=2),
    _diff("4. SAO − running-mean REINFORCE, final success (claimed: a critic assigns credit better "
          "on long trajectories)", "sao", ("sao", "reinforce")),
    _diff("skip-observation − naive GAE", "sao", ("sao", "sao_naive_gae")),
    _diff("2 − 1 critic updates", "sao", ("sao", "sao_k1")),
    _diff("small value pre-training − none", "sao", ("sao", "sao_pretrain_none")),
    _diff("large − small value pre-training", "sao", ("sao_pretrain_large", "sao")),
    _diff("frozen − trained critic attention", "sao", ("sao", "sao_unfrozen")),
)


@dataclasses.dataclass(frozen=True)
class Reading:
    """One claim read in one block.

    per_seed: (value, kind) per seed used, kind one of stats.EXACT / AT_MOST / AT_LEAST; t: the
    t-reading over the values (log-ratios for a ratio claim); bound: the reading's kind (EXACT, or
    the one direction its censored seeds bound it in, or UNKNOWN); holm_p: the Holm-adjusted
    p-value of a primary endpoint (None for an exploratory reading)."""

    claim: Claim
    block: str            # the folder, relative to the results root ("." for the root itself)
    per_seed: tuple[tuple[float, str], ...]
    t: stats.TReading
    bound: str
    left_out: int         # seeds with the value missing, or censored in both arms
    reached: Optional[tuple[int, int]]  # runs of each arm that reached ℓ (ratio claims)
    holm_p: Optional[float]
    run_code_versions: tuple[str, ...]  # the code versions the block's runs were computed with

    @property
    def seeds(self) -> int:
        return len(self.per_seed)

    @property
    def ci(self) -> tuple[float, float, float]:
        """(point, lo, hi) in the claim's units (ratios back from logs)."""
        if self.claim.kind == "ratio":
            return tuple(math.exp(v) if np.isfinite(v) else v for v in self.t.ci)
        return self.t.ci


def blocks(results: str) -> list[str]:
    """The folders under `results` (itself included) holding a study_pivot or study_sao file,
    the root first, then by name."""
    found = {os.path.relpath(os.path.dirname(p), results)
             for s in SCRIPTS for p in glob.glob(os.path.join(results, "**", f"study_{s}.json"),
                                                 recursive=True)}
    return sorted(found, key=lambda b: (b != ".", b))


def _per_seed(claim: Claim, d: dict) -> tuple[list[tuple[float, str]], int, Optional[tuple[int, int]]]:
    """(values with kinds, seeds left out, runs that reached ℓ per arm) of a claim in one file;
    ([], 0, None) where an arm did not run."""
    got = d.get(claim.measure, {})
    if not all(a in got for a in claim.arms):
        return [], 0, None
    a, b = (got[x] for x in claim.arms)
    n = min(len(a), len(b))
    out, left_out = [], 0
    if claim.kind == "diff":
        for x, y in zip(a[:n], b[:n]):
            if np.isfinite(x) and np.isfinite(y):
                out.append((float(x - y), stats.EXACT))
            else:
                left_out += 1
        return out, left_out, None
    for (num, num_ok), (den, den_ok) in zip(a[:n], b[:n]):
        kind = stats.censored_ratio_kind(bool(num_ok), bool(den_ok))
        if kind == stats.UNKNOWN or not (np.isfinite(num) and np.isfinite(den) and num > 0 and den > 0):
            left_out += 1
            continue
        out.append((float(num / den), kind))
    reached = tuple(int(sum(bool(ok) for _, ok in x[:n])) for x in (a, b))
    return out, left_out, reached


def _bound(kinds) -> str:
    ks = set(kinds) - {stats.EXACT}
    if not ks:
        return stats.EXACT
    return ks.pop() if len(ks) == 1 else stats.UNKNOWN


def read(results: str = report.RESULTS) -> list[Reading]:
    """Every claim's reading in every block under `results` where it was measured, in the order of
    CLAIMS, then of `blocks`; the primary endpoints of a block Holm-adjusted together."""
    found = blocks(results)
    loaded = {(b, s): report.load_result(os.path.join(results, b, f"study_{s}.json"))
              for b in found for s in SCRIPTS}
    drafts = []
    for claim in CLAIMS:
        for b in found:
            d = loaded[b, claim.script]
            if d is None:
                continue
            per_seed, left_out, reached = _per_seed(claim, d)
            if not per_seed and (claim.kind != "ratio" or not left_out):
                continue  # the claim's arms did not run (or left no values) in this block
            values = [math.log(v) if claim.kind == "ratio" else v for v, _ in per_seed]
            t = stats.t_reading(values, alpha=ALPHA)
            # a cost ratio with every seed censored in both arms: reported, not measurable
            bound = _bound(k for _, k in per_seed) if per_seed else stats.UNKNOWN
            drafts.append(Reading(claim, b, tuple(per_seed), t, bound,
                                  left_out, reached, None, tuple(d["run_code_versions"])))
    for b in found:  # Holm over the primary endpoints measured in the block (exact readings only)
        prim = [i for i, r in enumerate(drafts) if r.block == b and r.claim.primary]
        adjusted = stats.holm([drafts[i].t.p_value if drafts[i].bound == stats.EXACT else math.nan
                               for i in prim])
        for i, p in zip(prim, adjusted):
            drafts[i] = dataclasses.replace(drafts[i], holm_p=p)
    order = {c: i for i, c in enumerate(CLAIMS)}
    out = sorted(drafts, key=lambda r: (order[r.claim], found.index(r.block)))
    return out


def verdict(r: Reading) -> str:
    """The reading's plain verdict against no effect (the claims state a direction only)."""
    c = r.claim
    p, lo, hi = r.ci
    if r.bound == stats.UNKNOWN:
        return "not measurable (seeds censored in both directions)"
    if r.bound == stats.AT_MOST:
        if np.isfinite(hi) and hi < c.null:
            return "FAILS (even the upper bound lies below no effect; censored seeds)"
        return "UNRESOLVED (censored seeds: only an upper bound is known, and it allows no effect)"
    if r.bound == stats.AT_LEAST:
        if np.isfinite(lo) and lo > c.null:
            return "HOLDS (even the lower bound exceeds no effect; censored seeds)"
        return "UNRESOLVED (censored seeds: only a lower bound is known, and it allows no effect)"
    if c.primary:
        if r.holm_p is None or not np.isfinite(r.t.p_value):
            return "no test (one seed, or every seed gave the same value)"
        if r.holm_p < ALPHA:
            return ("HOLDS" if p > c.null else "FAILS (the opposite direction)") + \
                f" at Holm-adjusted p = {r.holm_p:.3f}"
        return f"UNRESOLVED (Holm-adjusted p = {r.holm_p:.3f})"
    return "exploratory: " + stats.verdict(p, lo, hi, null=c.null)


def allows(r: Reading) -> str:
    """The largest effect in the claimed direction that the interval (or bound) allows: its
    upper end; n/a for a lower bound, an unmeasurable reading, or no spread."""
    p, lo, hi = r.ci
    c = r.claim
    if r.bound in (stats.AT_LEAST, stats.UNKNOWN) or not np.isfinite(hi) or lo == hi:
        return "n/a"
    return f"{hi:.{c.digits}f}{c.unit}" if c.unit else f"{hi:+.{c.digits}f}"


def _value(v: float, kind: str, c: Claim) -> str:
    mark = {stats.AT_MOST: "≤", stats.AT_LEAST: "≥"}.get(kind, "")
    return mark + (f"{v:.{c.digits}f}" if c.kind == "ratio" else f"{v:+.{c.digits}f}")


def block_text(readings: list[Reading]) -> str:
    """The README table of `read`'s readings."""
    if not readings:
        return "No study_pivot or study_sao result files yet."
    rows = []
    for r in readings:
        c = r.claim
        seeds = str(r.seeds)
        if r.left_out:
            seeds += f" ({r.left_out} left out)"
        if r.reached is not None:
            seeds += f" (reached ℓ: {c.arms[0]} {r.reached[0]}, {c.arms[1]} {r.reached[1]})"
        where = "`results/`" if r.block == "." else f"`results/{r.block}/`"
        point = stats.fmt_ci(*r.ci, digits=c.digits, unit=c.unit)
        if r.bound in (stats.AT_MOST, stats.AT_LEAST):
            point = f"{r.bound} {point}"
        rows.append([c.label, "primary" if c.primary else "exploratory", where, seeds,
                     ", ".join(_value(v, k, c) for v, k in r.per_seed), point,
                     _holm(r), verdict(r), allows(r),
                     ", ".join(f"`{v}`" for v in r.run_code_versions) or "unknown"])
    return report.table(["claim", "endpoint", "block", "paired seeds", "per-seed values",
                         "point [95% t-CI]", "Holm p", "verdict",
                         "largest effect the interval allows", "runs' code version"], rows)


def _holm(r: Reading) -> str:
    if r.holm_p is None:
        return ""
    return f"{r.holm_p:.3f}" if r.bound == stats.EXACT else "n/a (a bound)"


def summary_text(readings: list[Reading]) -> str:
    """A folder's summary table: its primary endpoints and the claims 2a, 2b and 4 (the first
    reading of each numbered label), from `read`'s readings of that folder."""
    rows = []
    seen = set()
    for r in readings:
        number = r.claim.label.split(" ", 1)[0]
        if not number[0].isdigit() or number in seen:
            continue
        seen.add(number)
        c = r.claim
        point = stats.fmt_ci(*r.ci, digits=c.digits, unit=c.unit)
        if r.bound in (stats.AT_MOST, stats.AT_LEAST):
            point = f"{r.bound} {point}"
        rows.append([c.label, "primary" if c.primary else "exploratory",
                     ", ".join(_value(v, k, c) for v, k in r.per_seed), point, _holm(r), verdict(r),
                     ", ".join(f"`{v}`" for v in r.run_code_versions) or "unknown"])
    return report.table(["claim", "endpoint", "per-seed values", "point [95% t-CI]", "Holm p",
                         "verdict", "runs' code version"], rows)


def primary_text(readings: list[Reading]) -> str:
    """The primary endpoints in every block: the table experiments/README.md opens with."""
    prim = [r for r in readings if r.claim.primary]
    if not prim:
        return "No study_pivot or study_sao result files yet."
    rows = []
    for r in prim:
        c = r.claim
        point = stats.fmt_ci(*r.ci, digits=c.digits, unit=c.unit)
        if r.bound in (stats.AT_MOST, stats.AT_LEAST):
            point = f"{r.bound} {point}"
        seeds = f"{r.seeds}" + (f" (reached ℓ: {c.arms[0]} {r.reached[0]}, {c.arms[1]} {r.reached[1]})"
                                if r.reached is not None else "")
        rows.append([c.label, "`results/`" if r.block == "." else f"`results/{r.block}/`", seeds,
                     ", ".join(_value(v, k, c) for v, k in r.per_seed), point, _holm(r), verdict(r)])
    return report.table(["primary endpoint", "block (regime: see its section)", "paired seeds",
                         "per-seed values", "point [95% t-CI]", "Holm p", "verdict"], rows)
