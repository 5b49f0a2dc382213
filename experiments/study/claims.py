"""Every committed block's readings of the papers' claims, side by side.

A block is one folder of study results (`experiments/results/` itself, or a subfolder such as
`long512/`) with its `study_pivot.json` and / or `study_sao.json`. For each claim and each block
where both of the claim's arms ran, the table gives the paired seeds, the point and 95 %
seed-paired bootstrap interval the block's script computed, the verdict of `stats.verdict`, and
the largest effect in the paper's direction that the interval still allows: the bound that an
UNRESOLVED or failing reading rules out beyond. Everything is read from the result files; nothing
is rerun.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from typing import Optional

import numpy as np

from experiments.study import report, stats

SCRIPTS = ("pivot", "sao")


@dataclasses.dataclass(frozen=True)
class Claim:
    """One reading of a result file: `<script>.json[group][key]` = (point, lo, hi) over the seeds
    where both `arms` have a final success; `target` is the paper's effect size, if it names one."""

    label: str
    script: str
    group: str
    key: str
    arms: tuple[str, str]
    null: float
    target: Optional[float] = None
    digits: int = 3
    unit: str = ""


def _diff(label, script, key, arms):
    return Claim(label, script, "diffs", key, arms, null=0.0)


CLAIMS = (
    Claim("1. GRPO ÷ PivotRL rollout tokens to ℓ (paper: ≥ 3×)", "pivot", "ratios", "tokens_ratio",
          ("grpo", "pivotrl"), null=1.0, target=3.0, digits=2, unit="×"),
    _diff("2a. full filter − all turns, final success (paper: > 0)", "pivot", "filter_minus_all",
          ("pivotrl", "pivot_all")),
    _diff("2a. full filter − random turns", "pivot", "filter_minus_random", ("pivotrl", "pivot_random")),
    _diff("2a. full filter − σ̂² > 0 only", "pivot", "filter_minus_variance", ("pivotrl", "pivot_variance")),
    _diff("2b. all turns − exact-match reward (paper: > 0)", "pivot", "all_minus_exact",
          ("pivot_all", "pivot_exact")),
    _diff("functional − exact-match reward, both filtered", "pivot", "functional_minus_exact",
          ("pivotrl", "pivot_exact")),
    _diff("two stages − PivotRL alone", "pivot", "two_stage_minus_pivotrl", ("two_stage", "pivotrl")),
    Claim("3. GRPO ÷ SAO training wall-clock to ℓ (paper: ≥ 1.5×)", "sao", "ratios", "wall_ratio",
          ("grpo", "sao"), null=1.0, target=1.5, digits=2, unit="×"),
    _diff("4. SAO − running-mean baseline, final success (paper: > 0)", "sao", "sao-reinforce",
          ("sao", "reinforce")),
    _diff("skip-observation − naive GAE", "sao", "sao-sao_naive_gae", ("sao", "sao_naive_gae")),
    _diff("2 − 1 critic updates", "sao", "sao-sao_k1", ("sao", "sao_k1")),
    _diff("small value pre-training − none", "sao", "sao-sao_pretrain_none", ("sao", "sao_pretrain_none")),
    _diff("large − small value pre-training", "sao", "sao_pretrain_large-sao", ("sao_pretrain_large", "sao")),
    _diff("frozen − trained critic attention", "sao", "sao-sao_unfrozen", ("sao", "sao_unfrozen")),
)


@dataclasses.dataclass(frozen=True)
class Reading:
    """One claim read in one block."""

    claim: Claim
    block: str            # the folder, relative to the results root ("." for the root itself)
    seeds: int            # seeds where both arms have a final success
    reached: Optional[tuple[int, int]]  # runs of each arm that reached ℓ (ratio claims), if recorded
    ci: tuple[float, float, float]
    run_code_versions: tuple[str, ...]  # the code versions the block's runs were computed with


def blocks(results: str) -> list[str]:
    """The folders under `results` (itself included) holding a study_pivot or study_sao file,
    the root first, then by name."""
    found = {os.path.relpath(os.path.dirname(p), results)
             for s in SCRIPTS for p in glob.glob(os.path.join(results, "**", f"study_{s}.json"),
                                                 recursive=True)}
    return sorted(found, key=lambda b: (b != ".", b))


def _paired_seeds(final: dict, arms) -> int:
    a, b = (np.asarray(final.get(x, []), float) for x in arms)
    n = min(a.size, b.size)
    return int(np.sum(np.isfinite(a[:n]) & np.isfinite(b[:n])))


def read(results: str = report.RESULTS) -> list[Reading]:
    """Every claim's reading in every block under `results` where it was measured, in the order of
    CLAIMS, then of `blocks`."""
    found = blocks(results)
    loaded = {(b, s): report.load_result(os.path.join(results, b, f"study_{s}.json"))
              for b in found for s in SCRIPTS}
    out = []
    for claim in CLAIMS:
        for b in found:
            d = loaded[b, claim.script]
            if d is None:
                continue
            ci = tuple(float(x) for x in d.get(claim.group, {}).get(claim.key, (np.nan,) * 3))
            seeds = _paired_seeds(d.get("final", {}), claim.arms)
            if not np.isfinite(ci[0]) or seeds == 0:
                continue
            reached = None
            if claim.group == "ratios" and all(a in d.get("reached", {}) for a in claim.arms):
                reached = tuple(int(d["reached"][a]) for a in claim.arms)
            out.append(Reading(claim, b, seeds, reached, ci, tuple(d["run_code_versions"])))
    return out


def allows(r: Reading) -> str:
    """The largest effect in the paper's direction that the interval allows (its upper end)."""
    hi, c = r.ci[2], r.claim
    if not np.isfinite(hi) or r.ci[1] == hi:
        return "n/a"
    return f"{hi:.{c.digits}f}{c.unit}" if c.unit else f"{hi:+.{c.digits}f}"


def block_text(readings: list[Reading]) -> str:
    """The README table of `read`'s readings."""
    if not readings:
        return "No study_pivot or study_sao result files yet."
    rows = []
    for r in readings:
        c = r.claim
        seeds = str(r.seeds)
        if r.reached is not None:
            seeds += f" (reached ℓ: {c.arms[0]} {r.reached[0]}, {c.arms[1]} {r.reached[1]})"
        where = "`results/`" if r.block == "." else f"`results/{r.block}/`"
        rows.append([c.label, where, seeds, stats.fmt_ci(*r.ci, digits=c.digits, unit=c.unit),
                     stats.verdict(*r.ci, null=c.null, target=c.target), allows(r),
                     ", ".join(f"`{v}`" for v in r.run_code_versions) or "unknown"])
    return report.table(["claim", "block", "paired seeds", "point [95% CI]", "verdict",
                         "largest effect the interval allows", "runs' code version"], rows)
