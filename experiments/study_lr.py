"""Learning-rate sweep per method on seed 0, run before the main runs (light tuning).

    python experiments/study_lr.py            # full scale
    python experiments/study_lr.py --quick --out /tmp/x

Each method's main arm (GRPO, PivotRL, SAO, running-mean REINFORCE) runs once per learning rate
of its grid on seed 0 with a shorter token budget (`lr_budget` of the scale); the chosen rate maximises the
mean held-out success of the last two evaluations (ties: the smaller rate). Every ablation arm
uses its method's chosen rate, so an ablation changes one thing only. Writes study_lr.md/.json
(the json's "chosen" is what the main scripts read) and study_lr.png.
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

    rows, panels = [], []
    numbers = {"scale": "quick" if args.quick else args.scale, "runs": {}, "chosen": {}}
    for method in arms.METHODS:
        arm = arms.ARMS[MAIN_ARM[method]]
        budget = int(ctx.sc["lr_budget"][arm.budget])
        series, scores = [], {}
        for lr in ctx.sc["lr_grid"][method]:
            rec = common.run_arm(ctx, arm.name, 0, {method: lr}, budget=budget)
            c = common.arm_curve(rec)
            score = float(np.mean(c["success"][-2:]))
            scores[lr] = score
            clip = common.clip_fraction(rec)
            rows.append([method, f"{lr:g}", f"{c['success'][0]:.3f}", f"{score:.3f}",
                         f"{c['success'].max():.3f}", f"{c['tokens'][-1]:.0f}", len(c["step"]),
                         f"{clip:.4f}"])
            numbers["runs"][f"{method}/{lr:g}"] = {"score": score, "clip_frac": clip,
                                                   "curve": {k: v.tolist() for k, v in c.items()}}
            series.append((f"lr {lr:g}", c["tokens"], c["success"]))
        best = max(scores.values())
        chosen = min(lr for lr, s in scores.items() if s == best)
        numbers["chosen"][method] = chosen
        panels.append((f"{method}: seed 0, {budget} tokens", "rollout tokens", series, None))
    body = [
        "Seed 0, a shorter token budget per family (`lr_budget`), held-out success (512 tasks at full "
        "scale) at the last two evaluations. Chosen before the main runs; every arm of a method "
        "uses its method's rate.",
        report.table(["method", "learning rate", "success at start", "success (mean of last 2 evals)",
                      "best evaluation", "rollout tokens", "evaluations", "clip fraction (mean)"], rows),
        "Chosen: " + ", ".join(f"{m} {lr:g}" for m, lr in numbers["chosen"].items()) + ".",
        "## Reading (generated)",
        " ".join(_reading(numbers, ctx)),
    ]
    report.plot_curves(ctx.path(".png"), panels)
    report.write(ctx, "Learning-rate sweep (seed 0)", "\n\n".join(body), numbers,
                 settings={"grid": ctx.sc["lr_grid"], "budgets": ctx.sc["lr_budget"]})


def _reading(numbers, ctx):
    out = []
    for m, lr in numbers["chosen"].items():
        grid = ctx.sc["lr_grid"][m]
        edge = lr in (min(grid), max(grid))
        clip = numbers["runs"][f"{m}/{lr:g}"]["clip_frac"]
        out.append(f"{m}: {lr:g}" + (" (at the edge of the grid: the optimum may lie outside it)"
                                     if edge and len(grid) > 2 else "")
                   + (f", ratio clipping active (mean clip fraction {clip:.4f})" if clip > 0 else
                      ", clipping never acted") + ".")
    return out


if __name__ == "__main__":
    main()
