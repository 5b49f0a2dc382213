"""SAO vs group-synchronous GRPO in wall-clock under tool latency, and SAO's ablations
(skip-observation vs naive GAE, critic updates 1 vs 2, value pre-training none / small / large,
frozen vs trained critic attention, running-mean baseline instead of a critic) — docs/algorithms.md §7 targets.

    python experiments/study_sao.py --seeds 3
    python experiments/study_sao.py --quick --out /tmp/x

Every arm: the seed's warm start, the same task pool, latency, held-out set, KL and rows per step
(32 episodes), the same rollout-token budget. Measures: training wall-clock (evaluations
excluded; experiments/study/stats.py) and rollout tokens until held-out success first reaches
ℓ = 0.9 × GRPO's plateau; seed-paired GRPO ÷ SAO ratios; final success at the budget with paired
differences. Arms of a seed run back to back, so paired wall-clock shares the machine's load
(a run taken from the cache may not have: the reading then says how long passed between the GRPO
and SAO runs).
Writes study_sao.md/.json/.png.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.study import report  # noqa: E402

import numpy as np  # noqa: E402


def main(argv=None):
    args = report.parser(__doc__.splitlines()[0]).parse_args(argv)
    ctx = report.setup("sao", args)
    from experiments.study import arms, common

    lrs = report.chosen_lrs(ctx, common.method_default_lr)
    recs = {a: {} for a in arms.SAO_FAMILY if ctx.wants(a, required=("grpo", "sao"))}
    for seed in ctx.seeds:
        for a in recs:
            recs[a][seed] = common.run_arm(ctx, a, seed, lrs["lr"])
    analyse(ctx, recs, lrs)


def _mean_row(rec, key):
    v = [r[key] for r in rec["rows"] if key in r]
    return float(np.mean(v)) if v else float("nan")


def analyse(ctx, recs, lrs):
    from experiments.study import arms, common, stats

    seeds = ctx.seeds
    cur = {a: {s: common.arm_curve(r) for s, r in by.items()} for a, by in recs.items()}
    grpo_plateau = [stats.plateau(cur["grpo"][s]) for s in seeds]
    level = 0.9 * float(np.mean(grpo_plateau))
    B = ctx.sc["budget"]["sao"]
    wall = {a: [stats.cost_to(cur[a][s], level, "wall_s") for s in seeds] for a in cur}
    tok = {a: [stats.cost_to(cur[a][s], level, "tokens") for s in seeds] for a in cur}
    reached = {a: sum(r for _, r in wall[a]) for a in cur}
    apart_h = gap_hours(recs["grpo"], recs["sao"])
    nan = float("nan")
    not_run = [(nan, False)] * len(seeds)  # an arm this invocation did not run
    not_run_arms = [a for a in arms.SAO_FAMILY if a not in cur]

    def ratio(a, b, m):
        return stats.paired_ratio([m.get(b, not_run)[i][0] for i in range(len(seeds))],
                                  [m.get(a, not_run)[i][0] for i in range(len(seeds))])

    n = {"wall_ratio": ratio("sao", "grpo", wall), "tokens_ratio": ratio("sao", "grpo", tok),
         "reinforce_wall_ratio": ratio("sao", "reinforce", wall)}
    final = {a: [stats.at_budget(cur[a][s], B, last=2) for s in seeds] for a in cur}
    for a in not_run_arms:
        final[a] = [nan] * len(seeds)
    pairs = [("sao", "grpo", "SAO − GRPO"),
             ("sao", "sao_naive_gae", "skip-observation − naive GAE"),
             ("sao", "sao_k1", "2 − 1 critic updates"),
             ("sao", "sao_pretrain_none", "small − no value pre-training"),
             ("sao_pretrain_large", "sao", "large − small value pre-training"),
             ("sao", "sao_unfrozen", "frozen − trained critic attention"),
             ("sao", "reinforce", "critic − running-mean baseline (target > 0, clearly)")]
    diffs = {f"{a}-{b}": stats.paired_diff(final[a], final[b]) for a, b, _ in pairs}
    rows = []
    for a in [a for a in arms.SAO_FAMILY if a in cur]:
        rec = recs[a]
        rows.append([a, arms.ARMS[a].label,
                     stats.fmt_costs(wall[a]),
                     stats.fmt_costs(tok[a]),
                     f"{reached[a]}/{len(seeds)}", stats.fmt_ci(*stats.t_interval(final[a])),
                     f"{np.mean([_mean_row(rec[s], 'time/step_s') for s in seeds]):.2f}",
                     f"{np.mean([common.clip_fraction(rec[s]) for s in seeds]):.4f}",
                     f"{np.mean([_mean_row(rec[s], 'critic/explained_variance') for s in seeds]):.3f}",
                     f"{np.mean([_mean_row(rec[s], 'sample/mean_lag') for s in seeds]):.2f}",
                     f"{np.mean([np.mean(rec[s].get('load_avg', [float('nan')])) for s in seeds]):.1f}"])
    body = [
        f"Seeds: {len(seeds)} (paired). Tool latency scale {ctx.sc['latency_s']} s (Pareto α = 1.5, "
        f"see study_testbed.md). GRPO's end level (mean of its last three evaluations; a plateau only where its curve has "
        f"flattened) {np.mean(grpo_plateau):.3f}; level ℓ = 0.9 × that = {level:.3f}. "
        f"Budget {B} rollout tokens per arm. Learning rates from {lrs['source']}: "
        + ", ".join(f"{m} {v:g}" for m, v in lrs["lr"].items()) + "."
        + (f" Arms not run in this invocation (their rows read n/a): {', '.join(not_run_arms)}."
           if not_run_arms else ""),
        report.table(["arm", "what", "train wall-clock to ℓ, s (per seed)", "rollout tokens to ℓ",
                      "reached ℓ", f"final success at {B} tokens [95% CI]", "s / learner step",
                      "clip / mask fraction", "critic EV (mean)", "sample lag", "load avg"], rows),
        "## Paired comparisons (95 % paired t-intervals over seeds)",
        report.table(["measure", "point [95% CI]", "reading"], [
            ["GRPO ÷ SAO train wall-clock to ℓ (target ≥ 1.5×)", stats.fmt_ci(*n["wall_ratio"], digits=2, unit="×"),
             stats.verdict(*n["wall_ratio"], null=1.0, target=1.5)],
            ["GRPO ÷ SAO rollout tokens to ℓ", stats.fmt_ci(*n["tokens_ratio"], digits=2, unit="×"),
             stats.verdict(*n["tokens_ratio"], null=1.0)],
            ["running-mean ÷ SAO train wall-clock to ℓ", stats.fmt_ci(*n["reinforce_wall_ratio"], digits=2, unit="×"),
             stats.verdict(*n["reinforce_wall_ratio"], null=1.0)],
        ] + [[f"{label}, final success", stats.fmt_ci(*diffs[f"{a}-{b}"]),
              stats.verdict(*diffs[f"{a}-{b}"], null=0.0)] for a, b, label in pairs]),
        "## Reading (generated from the numbers above)",
        reading(n, diffs, reached, len(seeds), apart_h),
    ]
    gw = np.linspace(0, max(np.max(cur[a][s]["wall_s"]) for a in ("grpo", "sao") for s in seeds), 60)
    gt = np.linspace(0, B, 50)
    panels = [
        ("SAO vs GRPO: training wall-clock (tool latency on)", "seconds",
         [(a, gw, report.mean_curve(list(cur[a].values()), "wall_s", gw)) for a in ("grpo", "sao", "reinforce") if a in cur],
         level),
        ("SAO ablations (mean over seeds)", "rollout tokens",
         [(a, gt, report.mean_curve(list(cur[a].values()), "tokens", gt)) for a in arms.SAO_FAMILY if a in cur], level),
    ]
    report.plot_curves(ctx.path(".png"), panels)
    numbers = {"level": level, "grpo_plateau": grpo_plateau, "ratios": n, "diffs": diffs, "final": final,
               "wall_to_level": wall, "tokens_to_level": tok, "reached": reached, "lr": lrs,
               "grpo_sao_gap_hours": apart_h,
               "curves": {a: {str(s): {k: v.tolist() for k, v in c.items()} for s, c in by.items()}
                          for a, by in cur.items()}}
    report.write(ctx, "SAO vs group-synchronous GRPO, and SAO's ablations", "\n\n".join(body), numbers,
                 settings={"scale": ctx.sc, "lr": lrs})


BACK_TO_BACK_HOURS = 1.0  # GRPO and SAO runs of a seed further apart share no load


def gap_hours(grpo_by_seed: dict, sao_by_seed: dict) -> list:
    """Per seed, the hours between the GRPO and the SAO run: from the last logged row of the
    earlier one to the first of the later one (0 where they overlap). One invocation runs them
    back to back; a record taken from the cache may come from another day and load, which the
    wall-clock ratio then mixes in."""
    def span(rec):
        return rec["rows"][0]["time"], rec["rows"][-1]["time"]

    out = []
    for s in sorted(grpo_by_seed):
        (a0, a1), (b0, b1) = sorted([span(grpo_by_seed[s]), span(sao_by_seed[s])])
        out.append(max(0.0, b0 - a1) / 3600.0)
    return out


def reading(n, diffs, reached, n_seeds, apart_h=()) -> str:
    from experiments.study import stats

    w = n["wall_ratio"]
    lines = []
    if apart_h and max(apart_h) > BACK_TO_BACK_HOURS:
        lines.append(f"GRPO's and SAO's runs of a seed were not made back to back (the later started "
                     f"{min(apart_h):.1f}–{max(apart_h):.1f} h after the earlier ended), "
                     "so the wall-clock ratio also holds any change in the machine's speed between them: "
                     "compare the seconds per learner step and load average beside each arm.")
    if reached["sao"] < n_seeds or reached["grpo"] < n_seeds:
        lines.append(f"Not every run reached ℓ (SAO {reached['sao']}/{n_seeds}, GRPO {reached['grpo']}/{n_seeds}): "
                     "unreached runs enter the ratios at their last cost (a bound).")
    lines.append(f"Target 3 — SAO needs ≥ 1.5× less wall-clock than group-synchronous GRPO to the same "
                 f"success: {stats.fmt_ci(*w, digits=2, unit='×')}: {stats.verdict(*w, null=1.0, target=1.5)}.")
    d = diffs["sao-reinforce"]
    lines.append(f"Target 4 — the running-mean baseline does clearly worse than the critic: SAO − "
                 f"running mean {stats.fmt_ci(*d)}: {stats.verdict(*d, null=0.0)}.")
    for key, what in (("sao-sao_naive_gae", "skip-observation vs naive GAE"), ("sao-sao_k1", "2 vs 1 critic updates"),
                      ("sao-sao_pretrain_none", "value pre-training vs none"),
                      ("sao-sao_unfrozen", "frozen vs trained critic attention")):
        lines.append(f"{what}: {stats.fmt_ci(*diffs[key])} ({stats.verdict(*diffs[key], null=0.0)}).")
    if n_seeds < 5:
        lines.append(f"With {report.count(n_seeds, 'seed')} the t-intervals are wide (t quantile "
                     f"{stats.t_quantile(n_seeds):.2f} for 95 %).")
    return " ".join(lines)


if __name__ == "__main__":
    main()
