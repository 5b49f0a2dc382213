"""Learning-rate sweep per method on seed 0, run before the main runs (light tuning).

    python experiments/study_lr.py            # full scale
    python experiments/study_lr.py --quick --out /tmp/x

Each method's main arm (GRPO, PivotRL, SAO, running-mean REINFORCE) runs once per learning rate
of its grid on seed 0 with the scale's sweep budget (`lr_budget`: shorter than the main runs',
except at the lr-check presets, `lr_check` in experiments/study/arms.py); the chosen rate
maximises the mean held-out success of the last two evaluations (ties: the smaller rate). Every
ablation arm uses its method's chosen rate, so an ablation changes one thing only. `--arms`
limits the sweep to the methods whose main arm it names. When GRPO runs, each run's rollout
tokens and training wall-clock to ℓ = 0.9 × the end level of GRPO's chosen-rate run are tabled
too (the main scripts' measures, on seed 0). Writes study_lr.md/.json (the json's "chosen" is
what the main scripts read) and study_lr.png.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.study import report  # noqa: E402

import numpy as np  # noqa: E402

MAIN_ARM = {"grpo": "grpo", "pivotrl": "pivotrl", "sao": "sao", "reinforce": "reinforce"}


def main(argv=None):
    args = report.parser(__doc__.splitlines()[0]).parse_args(argv)
    ctx = report.setup("lr", args)
    from experiments.study import arms, common, stats

    rows, panels, budgets = [], [], {}
    numbers = {"scale": "quick" if args.quick else args.scale, "runs": {}, "chosen": {}}
    for method in swept_methods(ctx.arms):
        arm = arms.ARMS[MAIN_ARM[method]]
        budget = budgets[method] = int(ctx.sc["lr_budget"][arm.budget])
        series, scores = [], {}
        for lr in ctx.sc["lr_grid"][method]:
            rec = common.run_arm(ctx, arm.name, 0, {method: lr}, budget=budget,
                                 label=f"{arm.name}/seed0/lr{lr:g}")
            c = common.arm_curve(rec)
            score = float(np.mean(c["success"][-2:]))
            scores[lr] = score
            clip = common.clip_fraction(rec)
            rows.append([method, f"{lr:g}", f"{c['success'][0]:.3f}", f"{score:.3f}",
                         f"{c['success'].max():.3f}", f"{c['tokens'][-1]:.0f}", len(c["step"]),
                         f"{clip:.4f}"])
            numbers["runs"][f"{method}/{lr:g}"] = {"score": score, "clip_frac": clip, "budget": budget,
                                                   "curve": {k: v.tolist() for k, v in c.items()}}
            series.append((f"lr {lr:g}", c["tokens"], c["success"]))
        best = max(scores.values())
        chosen = min(lr for lr, s in scores.items() if s == best)
        numbers["chosen"][method] = chosen
        panels.append((f"{method}: seed 0, {budget} tokens", "rollout tokens", series, None))
    to_level = _cost_to_level(numbers)
    body = [
        f"Seed 0, the sweep's token budget per family (`lr_budget`: {', '.join(f'{m} {b}' for m, b in budgets.items())}), held-out "
        f"success ({ctx.sc['eval_tasks']} tasks) at the last two evaluations. "
        + ("A check made after the main runs, at their budgets: the rates it picks are not used by "
           "the other scales' runs." if ctx.sc.get("lr_check") else
           "Chosen before the main runs; every arm of a method uses its method's rate."),
        report.table(["method", "learning rate", "success at start", "success (mean of last 2 evals)",
                      "best evaluation", "rollout tokens", "evaluations", "clip fraction (mean)"], rows),
        "Chosen: " + ", ".join(f"{m} {lr:g}" for m, lr in numbers["chosen"].items()) + ".",
    ]
    if to_level:
        numbers["level"] = to_level["level"]
        numbers["tokens_to_level"] = to_level["tokens"]
        numbers["wall_to_level"] = to_level["wall"]
        body += [f"Rollout tokens and training wall-clock (evaluations excluded; the runs ran one after "
                 f"another) to ℓ = 0.9 × the end level of GRPO's chosen-rate run (mean of its last "
                 f"three evaluations, {to_level['end']:.3f}) = {to_level['level']:.3f}; > = not reached "
                 "within the run's budget:",
                 report.table(["method", "learning rate", "rollout tokens to ℓ", "training wall-clock to ℓ, s"],
                              [[*k.split("/"), stats.fmt_costs([to_level["tokens"][k]]),
                                stats.fmt_costs([to_level["wall"][k]])] for k in to_level["tokens"]])]
    body += ["## Reading (generated)", " ".join(_reading(numbers, ctx))]
    report.plot_curves(ctx.path(".png"), panels)
    report.write(ctx, "Learning-rate sweep (seed 0)", "\n\n".join(body), numbers,
                 settings={"grid": ctx.sc["lr_grid"], "budgets": ctx.sc["lr_budget"]})


def swept_methods(wanted) -> list:
    """The methods the sweep runs, in `arms.METHODS` order: those whose main arm is in `wanted`
    (the `--arms` set), all of them when `wanted` is None."""
    from experiments.study import arms

    methods = [m for m in arms.METHODS if wanted is None or MAIN_ARM[m] in wanted]
    if not methods:
        raise SystemExit(f"--arms: names none of the swept methods' main arms {sorted(MAIN_ARM.values())}")
    return methods


def _cost_to_level(numbers) -> dict:
    """{end, level, tokens: {"method/lr": (tokens, reached)}, wall: {"method/lr": (seconds, reached)}}:
    every run's rollout tokens and training wall-clock until held-out success first reaches
    ℓ = 0.9 × the end level of GRPO's chosen-rate run; {} without GRPO."""
    from experiments.study import stats

    if "grpo" not in numbers["chosen"]:
        return {}
    curves = {k: {f: np.asarray(v, float) for f, v in r["curve"].items()} for k, r in numbers["runs"].items()}
    end = stats.plateau(curves[f"grpo/{numbers['chosen']['grpo']:g}"])
    level = 0.9 * end
    return {"end": end, "level": level, "tokens": {k: stats.cost_to(c, level) for k, c in curves.items()},
            "wall": {k: stats.cost_to(c, level, "wall_s") for k, c in curves.items()}}


def _reading(numbers, ctx):
    out = []
    for m, lr in numbers["chosen"].items():
        grid = ctx.sc["lr_grid"][m]
        edge = lr in (min(grid), max(grid))
        clip = numbers["runs"][f"{m}/{lr:g}"]["clip_frac"]
        out.append(f"{m}: {lr:g}" + (" (one rate, not swept)" if len(grid) == 1 else "")
                   + (" (at the edge of the grid: the optimum may lie outside it)"
                      if edge and len(grid) > 2 else "")
                   + (f", ratio clipping active (mean clip fraction {clip:.4f})" if clip > 0 else
                      ", clipping never acted") + ".")
    reached = numbers.get("tokens_to_level", {})
    for m in numbers["chosen"]:
        if m == "grpo" or not reached:
            continue
        runs = {k: v for k, v in reached.items() if k.startswith(f"{m}/")}
        hits = [k.split("/")[1] for k, (_, hit) in runs.items() if hit]
        out.append(f"{m} reaches ℓ ({numbers['level']:.3f}) within its budget at "
                   + (f"rate(s) {', '.join(hits)}" if hits else f"none of its {len(runs)} rates") + ".")
        grpo, own = f"grpo/{numbers['chosen']['grpo']:g}", f"{m}/{numbers['chosen'][m]:g}"
        out.append(f"GRPO ÷ {m} at its chosen rate, to ℓ on seed 0: "
                   f"{_ratio_text(numbers['tokens_to_level'], grpo, own)} in rollout tokens, "
                   f"{_ratio_text(numbers['wall_to_level'], grpo, own)} in training wall-clock.")
    return out


def _ratio_text(costs: dict, grpo: str, other: str) -> str:
    """GRPO's cost to ℓ over the other run's as text: "<" when the other run never reached ℓ (its
    cost then exceeds its budget), "n/a" when GRPO's run did not."""
    (g, g_hit), (o, o_hit) = costs[grpo], costs[other]
    if not g_hit or o <= 0:
        return "n/a"
    return ("" if o_hit else "< ") + f"{g / o:.2f}×"


if __name__ == "__main__":
    main()
