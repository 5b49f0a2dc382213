"""Calibration of the study on this machine: seconds and tokens per step per method, the cost of
an evaluation, how fast full-trajectory GRPO learns, and the resulting plan (arms × seeds ×
budgets → CPU-hours).

    python experiments/study_calibrate.py                 # full scale, seed 0
    python experiments/study_calibrate.py --quick --out /tmp/x

Pilots (seed 0, the study's warm start and settings): every method for a few steps, and one
longer full-trajectory GRPO run evaluated often (the learning speed that sets the budgets).
Wall-clock on a shared machine depends on its load: the tables give wall seconds, process CPU
seconds and the load average, and the plan is in CPU time. Writes study_calibrate.md/.json/.png.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.study import report  # noqa: E402

import numpy as np  # noqa: E402

PILOT_ARMS = {"grpo": "grpo", "pivotrl": "pivotrl", "sao": "sao", "reinforce": "reinforce"}


def _steps(rec):
    return [r for r in sorted(rec["rows"], key=lambda r: r["step"]) if "time/step_s" in r]


def pilot_numbers(rec) -> dict:
    rows = _steps(rec)
    steady = rows[2:] if len(rows) > 3 else rows
    step_s = [r["time/step_s"] for r in steady]
    tokens = rows[-1]["cost/sampled_tokens"] if rows else 0.0
    first = next((r for r in rec["rows"] if r["step"] == 0), {})
    probe = float(first.get("cost/sampled_tokens", 0.0))
    evals = [r["eval/wall_s"] for r in rec["rows"] if "eval/wall_s" in r]
    share = rec["cpu_s"] / max(rec["wall_s"], 1e-9)
    return {
        "steps": len(rows), "step_s": float(np.median(step_s)) if step_s else float("nan"),
        "first_step_s": float(rows[0]["time/step_s"]) if rows else float("nan"),
        "collect_s": float(np.median([r["time/collect_s"] for r in steady])) if steady else float("nan"),
        "learn_s": float(np.median([r["time/learn_s"] for r in steady])) if steady else float("nan"),
        "tokens_per_step": (tokens - probe) / max(len(rows), 1),
        "prompt_tokens_per_step": (rows[-1]["cost/prompt_tokens"] - float(first.get("cost/prompt_tokens", 0.0)))
        / max(len(rows), 1) if rows else 0.0,
        "probe_tokens": probe, "eval_s": float(np.median(evals)) if evals else float("nan"),
        "eval_tasks": int(rec["config"]["eval.num_tasks"]),
        "clip_frac": float(np.mean([r.get("policy/clip_frac", r.get("policy/masked_frac", np.nan)) for r in rows]))
        if rows else float("nan"),
        "cpu_share": share, "wall_s": rec["wall_s"], "cpu_s": rec["cpu_s"],
    }


def main(argv=None):
    ap = report.parser(__doc__.splitlines()[0])
    ap.add_argument("--pilot-steps", type=int, default=8, help="steps of each method's pilot")
    ap.add_argument("--grpo-steps", type=int, default=60, help="steps of the GRPO learning-speed pilot")
    args = ap.parse_args(argv)
    if args.quick:
        args.pilot_steps, args.grpo_steps = min(args.pilot_steps, 2), min(args.grpo_steps, 3)
    ctx = report.setup("calibrate", args)
    from experiments.study import arms, common, runner, stats

    lrs = {m: common.method_default_lr(m) for m in arms.METHODS}
    seed = 0
    folder = common.warm(ctx, seed)
    pil = {}
    for method, arm in PILOT_ARMS.items():
        c = arms.arm_config(arm, seed, ctx.sc, warm=folder, lr=lrs[method], budget=10**12)
        c.train.num_steps = args.pilot_steps
        c.eval.every = 0
        if method != "grpo":
            c.eval.num_tasks = max(8, ctx.sc["eval_tasks"] // 8)
        rec = runner.run_config(c, workdir_root=ctx.workdir, cache=ctx.cache, label=f"pilot/{method}",
                                log=ctx.log)
        ctx.records.append(rec)
        pil[method] = pilot_numbers(rec)
    # learning speed: full-trajectory GRPO, evaluated every few steps
    c = arms.arm_config("grpo", seed, ctx.sc, warm=folder, lr=lrs["grpo"], budget=10**12)
    c.train.num_steps = args.grpo_steps
    c.eval.every = max(1, args.grpo_steps // 6)
    c.eval.num_tasks = max(8, ctx.sc["eval_tasks"] // 2)
    rec = runner.run_config(c, workdir_root=ctx.workdir, cache=ctx.cache, label="pilot/grpo_speed", log=ctx.log)
    ctx.records.append(rec)
    speed = stats.curve(rec)
    plan = make_plan(ctx, pil)
    body = [
        "Pilots on seed 0 with the study's settings (model, task, warm start, 32 rows per step, "
        "2 epochs × 2 minibatches, KL), default learning rates. `s / step` is the median wall "
        "time of a step after the first two (the first compiles); CPU share = process CPU time ÷ "
        "wall time of the whole pilot (2 cores: up to 2.0; lower when other jobs share the machine).",
        report.table(["method", "steps", "s / step (wall)", "first step (s)", "collect s", "learn s",
                      "rollout tokens / step", "prompt tokens / step", "probe tokens", "eval s (tasks)",
                      "clip / mask fraction", "CPU share"],
                     [[m, p["steps"], f"{p['step_s']:.2f}", f"{p['first_step_s']:.1f}", f"{p['collect_s']:.2f}",
                       f"{p['learn_s']:.2f}", f"{p['tokens_per_step']:.0f}", f"{p['prompt_tokens_per_step']:.0f}",
                       f"{p['probe_tokens']:.0f}", f"{p['eval_s']:.1f} ({p['eval_tasks']})",
                       f"{p['clip_frac']:.4f}", f"{p['cpu_share']:.2f}"] for m, p in pil.items()]),
        "Full-trajectory GRPO learning speed (seed 0, default learning rate):",
        report.table(["step", "rollout tokens", "held-out success", "± 95%"],
                     [[int(s), f"{t:.0f}", f"{v:.3f}", f"{e:.3f}"] for s, t, v, e in
                      zip(speed["step"], speed["tokens"], speed["success"], speed["ci"])]),
        "## Plan (generated from the pilots)",
        plan["text"],
    ]
    report.plot_curves(ctx.path(".png"), [("GRPO learning speed (seed 0)", "rollout tokens",
                                           [("grpo", speed["tokens"], speed["success"])], None)])
    report.write(ctx, "Calibration and plan", "\n\n".join(body),
                 {"pilots": pil, "grpo_speed": {k: v.tolist() for k, v in speed.items()}, "plan": plan},
                 settings={"scale": ctx.sc, "pilot_steps": args.pilot_steps, "grpo_steps": args.grpo_steps})


def make_plan(ctx, pil) -> dict:
    """CPU-hours of every run of the study (arms × seeds + the learning-rate sweep) from the
    pilots' seconds per step (scaled to CPU time by each pilot's CPU share) and evaluation cost."""
    from experiments.study import arms

    sc = ctx.sc
    rows, total_cpu_h = [], 0.0
    eval_cpu_per_task = pil["grpo"]["eval_s"] * pil["grpo"]["cpu_share"] / max(pil["grpo"]["eval_tasks"], 1)

    def run_cost(method, budget):
        p = pil[method]
        steps = budget / max(p["tokens_per_step"], 1.0)
        step_cpu = p["step_s"] * p["cpu_share"]
        evals = sc["eval_points"] + 2
        cpu = steps * step_cpu + evals * eval_cpu_per_task * sc["eval_tasks"]
        return steps, cpu

    def add(name, method, budget, n):
        nonlocal total_cpu_h
        steps, cpu = run_cost(method, budget)
        total_cpu_h += n * cpu / 3600
        rows.append([name, method, budget, f"{steps:.0f}", n, f"{cpu / 60:.1f}", f"{n * cpu / 3600:.2f}"])

    n_seeds = len(ctx.seeds)
    for m in arms.METHODS:
        arm = arms.ARMS[{"grpo": "grpo", "pivotrl": "pivotrl", "sao": "sao", "reinforce": "reinforce"}[m]]
        add(f"lr sweep ({len(sc['lr_grid'][m])} rates)", m, sc["lr_budget"][arm.budget], len(sc["lr_grid"][m]))
    for name in dict.fromkeys(arms.PIVOT_FAMILY + arms.SAO_FAMILY):
        a = arms.ARMS[name]
        add(name, a.method, sc["budget"][a.budget], n_seeds)
    add("pivotrl_then_grpo (stage 2)", "grpo", sc["budget"]["stage2"], n_seeds)
    text = "\n\n".join([
        f"Seeds: {n_seeds}. Budgets (rollout tokens): " + ", ".join(f"{k} {v}" for k, v in sc["budget"].items())
        + f". Evaluations per run ≈ {sc['eval_points'] + 2} on {sc['eval_tasks']} tasks "
        f"({eval_cpu_per_task * sc['eval_tasks']:.0f} CPU-s each).",
        report.table(["run", "method", "budget (tokens)", "steps", "runs", "CPU-min per run", "CPU-hours"], rows),
        f"Total: {total_cpu_h:.1f} CPU-hours (≈ {total_cpu_h / 2:.1f} wall-hours on 2 otherwise idle "
        "cores; the SAO arms' tool-latency sleeps add wall time but no CPU time)."])
    return {"rows": rows, "total_cpu_h": total_cpu_h, "text": text}


if __name__ == "__main__":
    main()
