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

The two primary endpoints are also read in the regime each claim is made for, from the run
records under `experiments/study/records/` (`regime_endpoints`): claim 1 on the local 3-basket
checkout block at its full scale, claim 3 on the wall-clock arms under the modelled clock at the
study scale, Holm-adjusted over the two; a block not yet run at that scale is reported as such,
never replaced by its quick pipeline check. `primary_block_text` puts them above the first
design's primary endpoints.

Everything is read from the result files and records; nothing is rerun.
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
    return ratio_values([(num, num_ok, den, den_ok) for (num, num_ok), (den, den_ok)
                         in zip(a[:n], b[:n])])


def ratio_values(pairs) -> tuple[list[tuple[float, str]], int, tuple[int, int]]:
    """(values with kinds, seeds left out, runs that reached ℓ per arm) of a cost ratio from its
    paired seeds, `pairs` = [(num_cost, num_reached, den_cost, den_reached)]: a seed's ratio is
    num ÷ den with the kind `stats.censored_ratio_kind` gives it; a seed censored in both arms,
    or with a cost that is not a positive number, is left out."""
    out, left_out = [], 0
    for num, num_ok, den, den_ok in pairs:
        kind = stats.censored_ratio_kind(bool(num_ok), bool(den_ok))
        if kind == stats.UNKNOWN or not (np.isfinite(num) and np.isfinite(den) and num > 0 and den > 0):
            left_out += 1
            continue
        out.append((float(num / den), kind))
    reached = (int(sum(bool(p[1]) for p in pairs)), int(sum(bool(p[3]) for p in pairs)))
    return out, left_out, reached


def reading(claim: Claim, block: str, per_seed, left_out: int, reached, versions) -> Reading:
    """The reading of `claim` from its per-seed values with kinds (`_per_seed`, `ratio_values`):
    the t-reading over them (log-ratios for a ratio claim) and its bound; no Holm p yet."""
    values = [math.log(v) if claim.kind == "ratio" else v for v, _ in per_seed]
    t = stats.t_reading(values, alpha=ALPHA)
    # a cost ratio with every seed censored in both arms: reported, not measurable
    bound = stats.combined_kind(k for _, k in per_seed) if per_seed else stats.UNKNOWN
    return Reading(claim, block, tuple(per_seed), t, bound, left_out, reached, None, tuple(versions))


def holm_adjusted(family: list[Reading], missing: int = 0) -> list[Reading]:
    """`family`'s readings with their Holm-adjusted p-values over the family: a reading that is a
    bound, or has no test, counts as p = 1, and so does each of `missing` further endpoints of
    the family that have no reading."""
    adjusted = stats.holm([r.t.p_value if r.bound == stats.EXACT else math.nan for r in family]
                          + [math.nan] * missing)
    return [dataclasses.replace(r, holm_p=p) for r, p in zip(family, adjusted)]


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
            drafts.append(reading(claim, b, per_seed, left_out, reached, d["run_code_versions"]))
    for b in found:  # Holm over the primary endpoints measured in the block (exact readings only)
        prim = [i for i, r in enumerate(drafts) if r.block == b and r.claim.primary]
        for i, r in zip(prim, holm_adjusted([drafts[i] for i in prim])):
            drafts[i] = r
    order = {c: i for i, c in enumerate(CLAIMS)}
    out = sorted(drafts, key=lambda r: (order[r.claim], found.index(r.block)))
    return out


def verdict(r: Reading) -> str:
    """The reading's plain verdict against no effect (the claims state a direction only)."""
    c = r.claim
    p, lo, hi = r.ci
    if r.bound == stats.UNKNOWN:
        return "not measurable (seeds censored in both directions)"
    if r.t.n == 1 and r.bound in (stats.AT_MOST, stats.AT_LEAST):
        return f"no test (one seed: {r.bound} its value, with no interval)"
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
        point = _point(r)
        rows.append([c.label, "primary" if c.primary else "exploratory", where, seeds,
                     ", ".join(_value(v, k, c) for v, k in r.per_seed), point,
                     _holm(r), verdict(r), allows(r),
                     ", ".join(f"`{v}`" for v in r.run_code_versions) or "unknown"])
    return report.table(["claim", "endpoint", "block", "paired seeds", "per-seed values",
                         "point [95% t-CI]", "Holm p", "verdict",
                         "largest effect the interval allows", "runs' code version"], rows)


def _point(r: Reading) -> str:
    """The reading's point and 95 % t-interval, "at most" / "at least" before a bound; with one
    seed the point alone (one value gives no interval)."""
    c = r.claim
    if r.t.n == 1:
        p = r.ci[0]
        point = f"{p:.{c.digits}f}{c.unit} (one seed: no interval)"
    else:
        point = stats.fmt_ci(*r.ci, digits=c.digits, unit=c.unit)
    return f"{r.bound} {point}" if r.bound in (stats.AT_MOST, stats.AT_LEAST) else point


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
        point = _point(r)
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
        point = _point(r)
        seeds = f"{r.seeds}" + (f" (reached ℓ: {c.arms[0]} {r.reached[0]}, {c.arms[1]} {r.reached[1]})"
                                if r.reached is not None else "")
        rows.append([c.label, "`results/`" if r.block == "." else f"`results/{r.block}/`", seeds,
                     ", ".join(_value(v, k, c) for v, k in r.per_seed), point, _holm(r), verdict(r)])
    return report.table(["primary endpoint", "block (regime: see its section)", "paired seeds",
                         "per-seed values", "point [95% t-CI]", "Holm p", "verdict"], rows)


# ----------------------------------------------------------------------------- each claim in its regime
# The second design measures each primary endpoint in the regime its claim is made for, from the
# committed run records under experiments/study/records/ (a quick, pipeline-check scale is never
# read as an endpoint):
# - claim 1 on the local 3-basket checkout (`experiments/study/shop_local.py`, its full scale):
#   GRPO ÷ PivotRL training turns (the probe left out) to 0.9 × the lower plateau, paired over
#   (warm start, RL seed) runs (`shop_local.endpoint_level`: an arm that did not learn makes its
#   pair's ratio a bound);
# - claim 3 on the wall-clock arms under the modelled clock (`experiments/study/wallclock.py`,
#   scale long512): GRPO-sync ÷ SAO modelled seconds to ℓ under the committed system model.
RECORDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "records")
SYSTEM_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "system_model.json")
LOCAL_SCALE = "full"
WALLCLOCK_SCALE = "long512"
LOCAL_CLAIM = Claim("1. GRPO ÷ PivotRL training turns to ℓ (claimed: lower rollout cost than "
                    "full-task RL; no size stated)", "shop_local", "ratio", "turns_to_level",
                    ("grpo", "pivotrl"), primary=True, digits=2)
WALLCLOCK_CLAIM = Claim("3. GRPO-sync ÷ SAO modelled wall-clock to ℓ (claimed: no wait for a "
                        "group's slowest rollout; no size stated)", "wallclock", "ratio",
                        "modelled_s_to_level", ("grpo_sync", "sao"), primary=True, digits=2)


@dataclasses.dataclass(frozen=True)
class RegimeEndpoint:
    """A primary endpoint in the regime its claim is made for.

    regime: the regime and its records folder, in words; units: what a paired unit is;
    reading: the endpoint's reading (its per-seed values, interval and Holm p over the design's
    two endpoints), or None where the block has not run at the study's scale, and then `not_run`
    says what is committed instead and the command that runs it; incomplete: how many of the
    block's declared units have run, where fewer than all (the reading so far is shown, with no
    verdict, and counts as p = 1 in the Holm adjustment)."""

    claim: Claim
    regime: str
    units: str
    reading: Optional[Reading]
    not_run: str = ""
    incomplete: str = ""


def _shown(folder: str) -> str:
    return os.path.relpath(folder, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _committed(records: str, prefix: str) -> str:
    """The committed records folders named `prefix*` (each labelled a pipeline check where its
    scale is quick), or "nothing"."""
    names = sorted(n for n in os.listdir(records) if n.startswith(prefix)) \
        if os.path.isdir(records) else []
    shown = [f"`study/records/{n}/`" + (" (quick scale: a pipeline check, not a reading)"
                                         if n[len(prefix):].startswith("quick") else "")
             for n in names]
    return ", ".join(shown) or "nothing"


def local_endpoint(records: str = RECORDS) -> RegimeEndpoint:
    """Claim 1 on the local checkout block at its full scale (`shop_local.records_folder`):
    per (warm start, RL seed) run both arms ran, GRPO's training turns to the level ÷ PivotRL's
    (`shop_local.primary_endpoint`), a run that never reached it censored as in `ratio_values`."""
    from experiments.study import shop_local

    name = os.path.basename(shop_local.records_folder(LOCAL_SCALE, "local"))
    folder = os.path.join(records, name)
    regime = (f"local 3-basket checkout (`{shop_local.LOCAL_DIFFICULTY}`), scale `{LOCAL_SCALE}`, "
              f"`study/records/{name}/`")
    units = "(warm start, RL seed) runs"
    if not os.path.exists(os.path.join(folder, "block.json")):
        return RegimeEndpoint(LOCAL_CLAIM, regime, units, None, (
            f"not yet run at the study scale: committed {_committed(records, 'shop_local_')} — "
            f"`python experiments/study/shop_local.py`"))
    block = shop_local.load_block(folder)
    if block.settings.get("scale") != LOCAL_SCALE:
        raise ValueError(f"{folder}/block.json: settings.scale is {block.settings.get('scale')!r}, "
                         f"but the folder holds the {LOCAL_SCALE!r} scale's block")
    by = {arm: {r.seeds: r.record for r in block.runs if r.arm == arm} for arm in LOCAL_CLAIM.arms}
    both = [s for s in by["grpo"] if s in by["pivotrl"]]
    if not both:  # no run where both arms ran: nothing to read yet
        ran = "; ".join(f"{a} {len(v)} runs" for a, v in by.items())
        failing = shop_local.failing_warm_starts(block.settings["difficulty"], block.premise)
        why = (f"; the warm-start check fails on {', '.join(failing)} (see "
               f"`results/shop_local/shop_local_{LOCAL_SCALE}_local.md`), so their runs do not start"
               if failing else "")
        return RegimeEndpoint(LOCAL_CLAIM, regime, units, None, (
            f"not yet run at the study scale: no (warm start, RL seed) run has both arms "
            f"(committed: {ran}){why} — `python experiments/study/shop_local.py`"))
    ep = shop_local.primary_endpoint([by["grpo"][s] for s in both], [by["pivotrl"][s] for s in both])
    pairs = [(g, kind in (stats.EXACT, stats.AT_MOST), p, kind in (stats.EXACT, stats.AT_LEAST))
             for g, p, kind in ep.per_run]
    per_seed, left_out, reached = ratio_values(pairs)
    versions = sorted({r.record.get("code_version", "?") for r in block.runs})
    declared = len(shop_local.block_seeds(shop_local.local_scale(LOCAL_SCALE, block.settings["difficulty"])))
    incomplete = (f"block incomplete: {len(both)} of its {declared} declared (warm start, RL seed) "
                  f"runs have both arms — `python experiments/study/shop_local.py` runs the rest "
                  f"on rlvr code version {', '.join(versions)}, the block's"
                  if len(both) < declared else "")
    return RegimeEndpoint(LOCAL_CLAIM, regime, units,
                          reading(LOCAL_CLAIM, _shown(folder), per_seed, left_out, reached, versions),
                          incomplete=incomplete)


def system_model_note(path: str = SYSTEM_MODEL) -> str:
    """The system model M as the file states it: its parameters, and whether it records a
    calibration (a `calibration` entry, `rlvr.train.clock.read_calibration`: what measured it,
    `time_model.describe`); without one its parameters are placeholders."""
    from experiments.study.time_model import describe
    from rlvr.train.clock import TimeModel, read_calibration

    m = TimeModel.from_json(path)
    params = (f"decode {m.decode_s_per_token:.3g} s/token, prefill "
              f"{m.prefill_s_per_token:.3g} s/token, learner {m.learner_s_per_sample:.3g} "
              f"s/sample, set-up {m.env_setup_s:.3g} s, tool latency median "
              f"{m.tool_median_s:.3g} s (tail index {m.tool_tail_index:g}, cap "
              f"{m.tool_cap_s:.3g} s), {m.slots} slots, {m.topology}")
    cal = read_calibration(path)
    status = (f"calibrated: {describe(cal)}" if cal else
              "the file records no calibration: its parameters are placeholders until measured "
              "(`python -m experiments.study.time_model`)")
    return f"M = `{_shown(path)}` ({params}); {status}"


def wallclock_endpoint(records: str = RECORDS, system_model: str = SYSTEM_MODEL) -> RegimeEndpoint:
    """Claim 3 on the wall-clock arms at the study scale (`wallclock.run_arms`' records in
    `<records>/wallclock_<WALLCLOCK_SCALE>/`): per seed both arms ran, GRPO-sync's modelled
    seconds to ℓ ÷ SAO's under M (the records' `time/modelled_s`; ℓ and the costs as
    `wallclock.measured_ratios` reads them), a run that never reached ℓ censored as in
    `ratio_values`."""
    name = f"wallclock_{WALLCLOCK_SCALE}"
    folder = os.path.join(records, name)
    regime = (f"modelled wall-clock arms (GRPO-sync, SAO on per-episode arrival), scale "
              f"`{WALLCLOCK_SCALE}`, `study/records/{name}/`, under {system_model_note(system_model)}")
    units = "seeds"
    if not os.path.isdir(folder):
        return RegimeEndpoint(WALLCLOCK_CLAIM, regime, units, None, (
            f"not yet run at the study scale: committed {_committed(records, 'wallclock_')} — "
            f"`python -m experiments.study.wallclock --run-arms --scale {WALLCLOCK_SCALE} --seeds 3 "
            f"--arm-records experiments/study/records/{name}`"))
    from experiments.study import wallclock

    recs = wallclock.load_arm_records(folder)
    m = wallclock.measured_ratios(recs)
    pairs = _wallclock_pairs(m)
    if not pairs:  # no seed where both arms ran: nothing to read yet
        ran = "; ".join(f"{a} seeds {sorted(v['seeds'])}" for a, v in m["arms"].items())
        return RegimeEndpoint(WALLCLOCK_CLAIM, regime, units, None, (
            f"not yet run at the study scale: no seed has both arms (committed runs: {ran}) — "
            f"`python -m experiments.study.wallclock --run-arms --scale {WALLCLOCK_SCALE} --seeds 3 "
            f"--arms grpo_sync,sao --arm-records experiments/study/records/{name}`"))
    per_seed, left_out, reached = ratio_values(pairs)
    versions = sorted({r.get("code_version", "?") for by in recs.values() for r in by.values()})
    regime += f"; ℓ = 0.9 × GRPO-sync's mean end success = {m['level']:.3f}"
    return RegimeEndpoint(WALLCLOCK_CLAIM, regime, units,
                          reading(WALLCLOCK_CLAIM, _shown(folder), per_seed, left_out, reached, versions))


def _wallclock_pairs(m: dict) -> list:
    """Claim 3's paired costs from `wallclock.measured_ratios`' reading `m`: per seed both arms
    ran, (GRPO-sync's modelled s to ℓ, reached, SAO's modelled s to ℓ, reached)."""
    ref, sao = m["arms"]["grpo_sync"], m["arms"].get("sao", {"seeds": []})
    at = {s: i for i, s in enumerate(ref["seeds"])}
    return [(ref["modelled_s"][at[s]], ref["reached"][at[s]], sao["modelled_s"][i], sao["reached"][i])
            for i, s in enumerate(sao["seeds"]) if s in at]


# Fixed success levels at which claim 3's ratio is also read (exploratory): the registered ℓ is
# 0.9 × GRPO-sync's mean end success over every seed, so a seed whose warm start never learns
# moves it for all; these show how the reading moves with ℓ.
SWEEP_LEVELS = (0.2, 0.3, 0.4, 0.5)


def wallclock_level_sweep(records: str = RECORDS, levels=SWEEP_LEVELS) -> list:
    """Claim 3 read at each fixed level of `levels` instead of the registered ℓ (exploratory):
    [(level, Reading)] from the same records and paired seeds as `wallclock_endpoint`, a run that
    never reached the level censored as in `ratio_values`; [] where claim 3's records are not
    there or no seed has both arms."""
    folder = os.path.join(records, f"wallclock_{WALLCLOCK_SCALE}")
    if not os.path.isdir(folder):
        return []
    from experiments.study import wallclock

    recs = wallclock.load_arm_records(folder)
    versions = sorted({r.get("code_version", "?") for by in recs.values() for r in by.values()})
    out = []
    for level in levels:
        pairs = _wallclock_pairs(wallclock.measured_ratios(recs, level=level))
        if not pairs:
            return []
        per_seed, left_out, reached = ratio_values(pairs)
        out.append((float(level), reading(WALLCLOCK_CLAIM, _shown(folder), per_seed, left_out,
                                          reached, versions)))
    return out


def level_sweep_text(sweep: list) -> str:
    """The table of `wallclock_level_sweep`: per fixed level the paired seeds, per-seed values and
    the reading (a bound where a run never reached the level; no test: exploratory)."""
    c = WALLCLOCK_CLAIM
    rows = []
    for level, r in sweep:
        seeds = (f"{len(r.per_seed)}" + (f" ({r.left_out} left out)" if r.left_out else "")
                 + f" (reached: {c.arms[0]} {r.reached[0]}, {c.arms[1]} {r.reached[1]})")
        values = ", ".join(_value(v, k, c) for v, k in r.per_seed) or "—"
        rows.append([f"{level:g}", seeds, values, _point(r) if r.per_seed else "—"])
    return report.table(["ℓ", "paired seeds", "per-seed GRPO-sync ÷ SAO modelled s", "point [95% t-CI]"],
                        rows)


def regime_endpoints(records: str = RECORDS, system_model: str = SYSTEM_MODEL) -> list[RegimeEndpoint]:
    """Both primary endpoints in their own regimes, Holm-adjusted over the two (an endpoint not
    yet run, incomplete, or read as a bound, counts as p = 1)."""
    ends = [local_endpoint(records), wallclock_endpoint(records, system_model)]
    read_ = [e for e in ends if e.reading is not None and not e.incomplete]
    adjusted = iter(holm_adjusted([e.reading for e in read_], missing=len(ends) - len(read_)))
    tested = {id(e) for e in read_}
    return [dataclasses.replace(e, reading=next(adjusted)) if id(e) in tested else e for e in ends]


def regime_text(ends: list[RegimeEndpoint]) -> str:
    """The table of `regime_endpoints`: one row per claim; a block not yet run at the study's
    scale says so, with no number."""
    rows = []
    for e in ends:
        c, r = e.claim, e.reading
        if r is None:
            rows.append([c.label, e.regime, e.units, "—", "—", "—", e.not_run])
            continue
        point = _point(r)
        seeds = (f"{r.seeds} {e.units}" + (f" ({r.left_out} left out)" if r.left_out else "")
                 + f" (reached ℓ: {c.arms[0]} {r.reached[0]}, {c.arms[1]} {r.reached[1]})")
        holm, said = ((_holm(r), verdict(r)) if not e.incomplete else  # the reading so far, untested
                      ("— (incomplete: counts as p = 1)", f"no verdict yet ({e.incomplete}); so far: {verdict(r)}"))
        rows.append([c.label, e.regime, seeds, ", ".join(_value(v, k, c) for v, k in r.per_seed),
                     point, holm, said])
    return report.table(["primary endpoint", "regime and records", "paired units",
                         "per-seed values", "point [95% t-CI]", "Holm p (these two)", "verdict"], rows)


def primary_block_text(ends: list[RegimeEndpoint], readings: list[Reading], sweep=()) -> str:
    """The table experiments/README.md opens with: each claim in its own regime (`regime_text`),
    claim 3 at fixed levels where `sweep` (`wallclock_level_sweep`) has them, then the first
    design's primary endpoints in every block (`primary_text`)."""
    swept = [] if not sweep else [
        "Claim 3 at fixed success levels instead of the registered ℓ (exploratory, no test: ℓ is "
        "0.9 × GRPO-sync's mean end success over every seed, so a seed whose warm start never "
        "learns lowers it for all; this shows how the reading moves with ℓ):",
        level_sweep_text(sweep)]
    return "\n\n".join([
        "Each claim in the regime it is made for:", regime_text(ends), *swept,
        "The first design (cannot test the claims: see \"What the committed readings below cannot "
        "show\"; Holm over the two endpoints within each block):", primary_text(readings)])
