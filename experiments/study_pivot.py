"""PivotRL vs full-trajectory GRPO, pivot selection, functional vs exact reward, and PivotRL then
end-to-end RL, on the checkout testbed (docs/algorithms.md §6 targets).

    python experiments/study_pivot.py --seeds 3
    python experiments/study_pivot.py --quick --out /tmp/x

Per seed every arm starts from the seed's warm start and runs through `rlvr.train.loop` until its
rollout-token budget (`cost/sampled_tokens`, probe included) is spent, evaluated on the held-out
set along the way. Measures (experiments/study/stats.py): the success level ℓ = 0.9 × GRPO's
plateau (mean over seeds of its last three evaluations); rollout tokens until each run first
reaches ℓ; seed-paired GRPO ÷ PivotRL token ratios (geometric mean, 95 % paired t-interval);
final success at the PivotRL budget with paired differences. Writes study_pivot.md/.json/.png.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.study import report  # noqa: E402

import numpy as np  # noqa: E402

SELECTION = ("pivotrl", "pivot_variance", "pivot_random", "pivot_all", "pivot_exact")


def main(argv=None):
    args = report.parser(__doc__.splitlines()[0]).parse_args(argv)
    ctx = report.setup("pivot", args)
    from experiments.study import arms, common

    lrs = report.chosen_lrs(ctx, common.method_default_lr)
    required = ("grpo", "pivotrl")
    recs = {a: {} for a in arms.PIVOT_FAMILY + ("two_stage",) if ctx.wants(a, required=required)}
    for seed in ctx.seeds:
        for a in arms.PIVOT_FAMILY:
            if a in recs:
                recs[a][seed] = common.run_arm(ctx, a, seed, lrs["lr"])
        if "two_stage" in recs:
            recs["two_stage"][seed] = common.run_stage2(ctx, seed, lrs["lr"], recs["pivotrl"][seed])
    analyse(ctx, recs, lrs)


def analyse(ctx, recs, lrs):
    from experiments.study import arms, common, stats

    seeds = ctx.seeds
    cur = {a: {s: common.arm_curve(r) for s, r in by.items()} for a, by in recs.items()}
    nan = float("nan")
    for s in seeds if "two_stage" in cur else ():  # the second stage's costs come after the first's
        p = cur["pivotrl"][s]
        cur["two_stage"][s] = stats.shift(cur["two_stage"][s], p["tokens"][-1], p["prompt_tokens"][-1],
                                          p["wall_s"][-1], p["turns"][-1] if "turns" in p else 0.0)
    grpo_plateau = [stats.plateau(cur["grpo"][s]) for s in seeds]
    warm_succ = [cur["grpo"][s]["success"][0] for s in seeds]
    level = 0.9 * float(np.mean(grpo_plateau))
    B = ctx.sc["budget"]["pivot"]

    def to_level(a, x="tokens"):
        return [stats.cost_to(cur[a][s], level, x) for s in seeds]

    tok = {a: to_level(a) for a in cur}
    turns = {a: to_level(a, "turns") for a in cur}
    both = {a: to_level(a, "prompt_tokens") for a in cur}
    wall = {a: to_level(a, "wall_s") for a in cur}
    n = {}
    not_run = [(nan, False)] * len(seeds)  # an arm this invocation did not run

    def ratio(a, b, measure):
        """GRPO-like arm b's cost ÷ arm a's cost to ℓ, per seed (censored runs at their last cost)."""
        num = [measure.get(b, not_run)[i][0] for i in range(len(seeds))]
        den = [measure.get(a, not_run)[i][0] for i in range(len(seeds))]
        return stats.paired_ratio(num, den)

    n["tokens_ratio"] = ratio("pivotrl", "grpo", tok)
    n["turns_ratio"] = ratio("pivotrl", "grpo", turns)
    n["prefill_ratio"] = ratio("pivotrl", "grpo", both)
    n["wall_ratio"] = ratio("pivotrl", "grpo", wall)
    n["two_stage_tokens_ratio"] = ratio("two_stage", "grpo", tok)

    def read_at(a, s):
        """The rollout tokens an arm's final success is read at: the PivotRL-family budget, or
        the end of a two-stage run (its second stage comes after the first's cost)."""
        return float(cur[a][s]["tokens"][-1]) if a == "two_stage" else B

    final = {a: [stats.at_budget(cur[a][s], read_at(a, s), last=2) for s in seeds] for a in cur}
    best = {a: [stats.best_at_budget(cur[a][s], read_at(a, s)) for s in seeds] for a in cur}
    if "two_stage" in cur:
        final["grpo_at_two_stage_budget"] = [
            stats.at_budget(cur["grpo"][s], read_at("two_stage", s), last=2) for s in seeds]
    for a in list(arms.PIVOT_FAMILY) + ["two_stage", "grpo_at_two_stage_budget"]:
        final.setdefault(a, [nan] * len(seeds))
    diffs = {
        "filter_minus_all": stats.paired_diff(final["pivotrl"], final["pivot_all"]),
        "filter_minus_random": stats.paired_diff(final["pivotrl"], final["pivot_random"]),
        "filter_minus_variance": stats.paired_diff(final["pivotrl"], final["pivot_variance"]),
        "all_minus_exact": stats.paired_diff(final["pivot_all"], final["pivot_exact"]),
        "functional_minus_exact": stats.paired_diff(final["pivotrl"], final["pivot_exact"]),
        "two_stage_minus_pivotrl": stats.paired_diff(final["two_stage"], final["pivotrl"]),
        "two_stage_minus_grpo_same_tokens": stats.paired_diff(final["two_stage"], final["grpo_at_two_stage_budget"]),
    }
    reached = {a: sum(r for _, r in tok[a]) for a in tok}
    not_run_arms = [a for a in list(arms.PIVOT_FAMILY) + ["two_stage"] if a not in cur]
    # --- tables
    labels = {**{a: arms.ARMS[a].label for a in arms.PIVOT_FAMILY},
              "two_stage": "PivotRL, then full-trajectory GRPO from its final policy"}
    rows = []
    shown = [a for a in list(arms.PIVOT_FAMILY) + ["two_stage"] if a in cur]
    for a in shown:
        fs = stats.t_interval(final[a])
        rows.append([a, labels[a], stats.fmt_costs(tok[a]), f"{reached[a]}/{len(seeds)}",
                     stats.fmt_ci(*fs), stats.fmt_ci(*stats.t_interval(best[a])),
                     f"{np.mean([cur[a][s]['tokens'][-1] for s in seeds]):.0f}",
                     f"{np.mean([common.clip_fraction(recs[a][s]) for s in seeds]):.4f}",
                     f"{np.mean([cur[a][s]['wall_s'][-1] for s in seeds]):.0f}"])
    kept = _kept(recs)
    body = [
        f"Seeds: {len(seeds)} (paired: every arm of a seed starts from the same warm start and "
        f"sees the same task pool and held-out set). Warm-start success "
        f"{np.mean(warm_succ):.3f}; GRPO's end level {np.mean(grpo_plateau):.3f} (mean of its last three "
        f"evaluations, per seed {', '.join(f'{v:.3f}' for v in grpo_plateau)}; a plateau only where "
        f"its curve has flattened, see the plot); level ℓ = 0.9 × that = {level:.3f}. "
        f"PivotRL-family budget {B} rollout tokens; GRPO budget {ctx.sc['budget']['grpo']}; "
        f"second stage {ctx.sc['budget']['stage2']}. Learning rates from {lrs['source']}: "
        + ", ".join(f"{m} {v:g}" for m, v in lrs["lr"].items()) + "."
        + (f" Arms not run in this invocation (their rows read n/a): {', '.join(not_run_arms)}."
           if not_run_arms else ""),
        report.table(["arm", "what", "rollout tokens to ℓ (per seed; > = not reached)", "reached ℓ",
                      f"final success at {B} tokens [95% CI over seeds]",
                      "best evaluation up to then [95% CI over seeds]", "tokens spent",
                      "clip fraction", "train wall-clock (s)"], rows),
        "PivotRL's filter, per seed (kept candidates / all, and the rollout tokens of its π_ref "
        "probe; which kinds of turn it keeps is measured on the warm start in study_testbed.md): "
        + "; ".join(kept) + ".",
        "## Paired comparisons (95 % paired t-intervals over seeds)",
        report.table(["measure", "point [95% CI]", "reading"], [
            ["GRPO ÷ PivotRL rollout tokens to ℓ (target ≥ 3×)", stats.fmt_ci(*n["tokens_ratio"], digits=2, unit="×"),
             stats.verdict(*n["tokens_ratio"], null=1.0, target=3.0)],
            ["GRPO ÷ PivotRL tokens read (prefill) to ℓ", stats.fmt_ci(*n["prefill_ratio"], digits=2, unit="×"),
             stats.verdict(*n["prefill_ratio"], null=1.0)],
            ["GRPO ÷ PivotRL training wall-clock to ℓ", stats.fmt_ci(*n["wall_ratio"], digits=2, unit="×"),
             stats.verdict(*n["wall_ratio"], null=1.0)],
            ["filter − all turns, final success (target > 0)", stats.fmt_ci(*diffs["filter_minus_all"]),
             stats.verdict(*diffs["filter_minus_all"], null=0.0)],
            ["filter − random turns", stats.fmt_ci(*diffs["filter_minus_random"]),
             stats.verdict(*diffs["filter_minus_random"], null=0.0)],
            ["filter − σ̂²>0 only", stats.fmt_ci(*diffs["filter_minus_variance"]),
             stats.verdict(*diffs["filter_minus_variance"], null=0.0)],
            ["no filter − exact-match reward (target > 0)", stats.fmt_ci(*diffs["all_minus_exact"]),
             stats.verdict(*diffs["all_minus_exact"], null=0.0)],
            ["functional − exact-match reward (both filtered)", stats.fmt_ci(*diffs["functional_minus_exact"]),
             stats.verdict(*diffs["functional_minus_exact"], null=0.0)],
            ["two stages − PivotRL alone, final success", stats.fmt_ci(*diffs["two_stage_minus_pivotrl"]),
             stats.verdict(*diffs["two_stage_minus_pivotrl"], null=0.0)],
            ["two stages − GRPO at the same total tokens", stats.fmt_ci(*diffs["two_stage_minus_grpo_same_tokens"]),
             stats.verdict(*diffs["two_stage_minus_grpo_same_tokens"], null=0.0)],
            ["GRPO ÷ two-stage rollout tokens to ℓ", stats.fmt_ci(*n["two_stage_tokens_ratio"], digits=2, unit="×"),
             stats.verdict(*n["two_stage_tokens_ratio"], null=1.0)],
        ]),
        "## Reading (generated from the numbers above)",
        reading(n, diffs, reached, len(seeds)) + peak_reading(best, final, shown),
    ]
    grid_t = np.linspace(0, max(ctx.sc["budget"]["grpo"], B), 60)
    grid_w = np.linspace(0, max(np.max(cur["grpo"][s]["wall_s"]) for s in seeds), 60)
    panels = [
        ("PivotRL vs GRPO (mean over seeds)", "rollout tokens",
         [(a, grid_t, report.mean_curve(list(cur[a].values()), "tokens", grid_t))
          for a in ("grpo", "pivotrl", "two_stage") if a in cur], level),
        ("pivot selection and reward (mean over seeds)", "rollout tokens",
         [(a, np.linspace(0, B, 40), report.mean_curve(list(cur[a].values()), "tokens", np.linspace(0, B, 40)))
          for a in SELECTION if a in cur], level),
        ("PivotRL vs GRPO: training wall-clock", "seconds",
         [(a, grid_w, report.mean_curve(list(cur[a].values()), "wall_s", grid_w)) for a in ("grpo", "pivotrl")],
         level),
    ]
    report.plot_curves(ctx.path(".png"), panels)
    numbers = {"level": level, "grpo_plateau": grpo_plateau, "warm_success": warm_succ, "ratios": n,
               "diffs": diffs, "final": final, "best": best, "tokens_to_level": tok, "turns_to_level": turns, "prefill_to_level": both,
               "wall_to_level": wall, "reached": reached, "lr": lrs,
               "curves": {a: {str(s): {k: v.tolist() for k, v in c.items()} for s, c in by.items()}
                          for a, by in cur.items()}}
    report.write(ctx, "PivotRL vs full-trajectory GRPO on the checkout testbed", "\n\n".join(body),
                 numbers, settings={"scale": ctx.sc, "lr": lrs})


def _kept(recs) -> list:
    out = []
    for s, rec in sorted(recs["pivotrl"].items()):
        row0 = next((r for r in rec["rows"] if r["step"] == 0), {})
        out.append(f"seed {s}: {row0.get('pivot/kept', float('nan')):.0f}/"
                   f"{row0.get('pivot/candidates', float('nan')):.0f} kept, probe "
                   f"{row0.get('pivot/probe_tokens', float('nan')):.0f} tokens")
    return out


def peak_reading(best: dict, final: dict, order: list, margin: float = 0.05) -> str:
    """A sentence naming the arms whose best evaluation lies well above their final success.

    The targets read final success; an arm that rose and fell again (or whose seeds split) looks
    the same there as one that never moved, so the reading says where the curves peaked.
    """
    peaked = [f"{a} best {np.mean(best[a]):.3f} vs final {np.mean(final[a]):.3f} (per seed "
              + ", ".join(f"{b:.2f} → {f:.2f}" for b, f in zip(best[a], final[a])) + ")"
              for a in order if np.mean(best[a]) - np.mean(final[a]) > margin]
    if not peaked:
        return ""
    return (f" Where the curves peaked above the final level (mean best evaluation − mean final "
            f"success > {margin}): " + "; ".join(peaked) + ".")


def reading(n, diffs, reached, n_seeds) -> str:
    from experiments.study import stats

    r, lo, hi = n["tokens_ratio"]
    lines = []
    if reached["pivotrl"] < n_seeds or reached["grpo"] < n_seeds:
        lines.append(f"Not every run reached ℓ (PivotRL {reached['pivotrl']}/{n_seeds}, GRPO "
                     f"{reached['grpo']}/{n_seeds}); unreached runs enter the ratio at their last "
                     "cost, so the ratio is a bound in that direction.")
    lines.append(f"Target 1 — PivotRL reaches GRPO's plateau level with ≥ 3× fewer rollout tokens: "
                 f"{stats.fmt_ci(r, lo, hi, 2, '×')}: {stats.verdict(r, lo, hi, null=1.0, target=3.0)}.")
    a = diffs["filter_minus_all"]
    b = diffs["all_minus_exact"]
    lines.append(f"Target 2 — full filter > no filter > exact-match reward in final success: filter − "
                 f"all turns {stats.fmt_ci(*a)} ({stats.verdict(*a, null=0.0)}); no filter − exact "
                 f"{stats.fmt_ci(*b)} ({stats.verdict(*b, null=0.0)}). The chain holds only if both "
                 f"hold: {'yes' if stats.excludes(a[1], a[2], 0) and a[0] > 0 and stats.excludes(b[1], b[2], 0) and b[0] > 0 else 'no'}.")
    t = diffs["two_stage_minus_pivotrl"]
    lines.append(f"PivotRL then end-to-end RL vs PivotRL alone: {stats.fmt_ci(*t)} "
                 f"({stats.verdict(*t, null=0.0)}).")
    if n_seeds < 5:
        lines.append(f"With {report.count(n_seeds, 'seed')} the t-intervals are wide (t quantile "
                     f"{stats.t_quantile(n_seeds):.2f} for 95 %).")
    return " ".join(lines)


if __name__ == "__main__":
    main()
