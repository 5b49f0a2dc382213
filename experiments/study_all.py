"""The whole PivotRL / SAO study, resumable: every script in order, then the summary.

    nohup nice -n 10 python experiments/study_all.py --seeds 3 > /tmp/rlvr_study.log 2>&1 &
    python experiments/study_all.py --quick --out /tmp/x        # every code path in minutes

Order: study_testbed → study_calibrate → study_lr (learning rates, chosen before the main runs)
→ study_pivot → study_sao → study_summary.md (the four targets, total compute). Every run is
cached by code version + config and every unfinished run resumes from its last checkpoint, so
re-running the same command after an interruption (or with more seeds) only computes what is
missing, and regenerates every result file from the numbers.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.study import report  # noqa: E402

STEPS = ("study_testbed", "study_calibrate", "study_lr", "study_pivot", "study_sao")


def main(argv=None):
    ap = report.parser(__doc__.splitlines()[0])
    ap.add_argument("--skip", default="", help="comma-separated steps to skip (e.g. study_calibrate)")
    args = ap.parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--skip" in argv:
        i = argv.index("--skip")
        del argv[i:i + 2]
    argv = [a for a in argv if not a.startswith("--skip=")]
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    import importlib

    from experiments.study.arms import scale

    inherited = () if args.quick else scale(args.scale).get("skip_steps", ())
    if inherited:  # the scale shares the session's testbed, warm start and learning rates
        print(f"scale {args.scale}: {', '.join(inherited)} not run (their session-scale results apply)",
              flush=True)
    skip |= set(inherited)

    t0 = time.time()
    for name in STEPS:
        if name in skip:
            continue
        print(f"=== {name} {time.strftime('%H:%M:%S')}", flush=True)
        module = importlib.import_module(f"experiments.{name}")
        module.main(argv)
    ctx = report.setup("summary", args)
    summary(ctx, time.time() - t0)


def _load(ctx, name):
    p = os.path.join(ctx.out, f"study_{name}.json")
    if not os.path.exists(p):
        return None
    with open(p) as f:
        numbers = json.load(f)
    md = p[:-len(".json")] + ".md"
    text = open(md).read() if os.path.exists(md) else ""
    # written before the json recorded provenance: read it from the .md's provenance lines
    if "run_code_versions" not in numbers:
        m = re.search(r"runs computed with: (.*)", text)
        numbers["run_code_versions"] = re.findall(r"`([0-9a-f]+)`", m.group(1)) if m else []
    if "compute" not in numbers:
        runs = re.search(r"^Runs: (\d+)", text, re.M)
        m = re.search(r"Compute of these runs.*?: ([\d.]+) wall-hours, ([\d.]+) CPU-hours", text)
        numbers["compute"] = ({"runs": int(runs.group(1)) if runs else 0, "wall_h": float(m.group(1)),
                               "cpu_h": float(m.group(2))} if m else None)
    return numbers


def total_compute(cache: str) -> dict:
    """Wall / CPU seconds of every run and warm start in the cache (each counted once)."""
    wall = cpu = 0.0
    n = 0
    for p in glob.glob(os.path.join(cache, "runs", "*.json")):
        with open(p) as f:
            rec = json.load(f)
        wall += rec.get("wall_s", 0.0)
        cpu += rec.get("cpu_s", 0.0)
        n += 1
    for p in glob.glob(os.path.join(cache, "warm", "*", "warm.json")):
        with open(p) as f:
            w = json.load(f)
        wall += w.get("wall_s", 0.0)
        cpu += w.get("cpu_s", 0.0)
    return {"runs": n, "wall_h": wall / 3600, "cpu_h": cpu / 3600}


def distinct_compute(results) -> dict:
    """Runs, wall-hours and CPU-hours behind several result files, each run counted once: files
    share runs (the GRPO reference of study_pivot and study_sao). A file written before result
    files recorded per-run compute adds its own total (`overlap_unknown` then says so)."""
    per_run, older = {}, []
    for numbers in results:
        if numbers.get("run_compute") is not None:
            per_run.update(numbers["run_compute"])
        else:
            older.append(numbers["compute"])
    return {"runs": len(per_run) + sum(c["runs"] for c in older),
            "wall_h": (sum(r["wall_s"] for r in per_run.values()) / 3600
                       + sum(c["wall_h"] for c in older)),
            "cpu_h": (sum(r["cpu_s"] for r in per_run.values()) / 3600
                      + sum(c["cpu_h"] for c in older)),
            "overlap_unknown": bool(older)}


def summary(ctx, elapsed_s: float) -> None:
    from experiments.study import stats

    piv, sao = _load(ctx, "pivot"), _load(ctx, "sao")
    lr = _load(dataclasses.replace(ctx, out=report.lr_source(ctx)[1]), "lr")  # where its rates come from
    rows = []

    def row(target, measure, ci, null, source, goal=None, better="greater", digits=3, unit=""):
        p, lo, hi = ci
        runs = source.get("run_code_versions") or ["not recorded"]
        rows.append([target, measure, stats.fmt_ci(p, lo, hi, digits, unit),
                     stats.verdict(p, lo, hi, null=null, target=goal, better=better),
                     ", ".join(f"`{v}`" for v in runs)])

    if piv:
        row("1. PivotRL reaches GRPO's plateau with ≥ 3× fewer rollout tokens",
            "GRPO ÷ PivotRL rollout tokens to 0.9 × GRPO plateau", piv["ratios"]["tokens_ratio"], 1.0, piv, 3.0,
            digits=2, unit="×")
        row("2a. full filter > no filter (final success)", "filter − all turns",
            piv["diffs"]["filter_minus_all"], 0.0, piv)
        row("2b. no filter > exact-match reward (final success)", "all turns − exact match",
            piv["diffs"]["all_minus_exact"], 0.0, piv)
    if sao:
        row("3. SAO ≥ 1.5× less wall-clock than group-synchronous GRPO to the same success",
            "GRPO ÷ SAO training wall-clock to 0.9 × GRPO plateau", sao["ratios"]["wall_ratio"], 1.0, sao, 1.5,
            digits=2, unit="×")
        row("4. running-mean baseline clearly worse than the critic", "SAO − running mean (final success)",
            sao["diffs"]["sao-reinforce"], 0.0, sao)
    comp = total_compute(ctx.cache)
    files = {n: d for n, d in (("lr", lr), ("pivot", piv), ("sao", sao)) if d and d.get("compute")}
    behind = {n: d["compute"] for n, d in files.items()}
    total = distinct_compute(files.values())
    behind_line = ""
    if behind:
        shared = (" (a run shared by result files that predate per-run records is counted in each)."
                  if total["overlap_unknown"] else " (a run that several result files share counted once).")
        behind_line = ("Compute of the runs behind these results (as each result file records it, warm "
                       "starts excluded): " + ", ".join(
                           f"study_{n} {c['runs']} runs, {c['wall_h']:.2f} wall-hours, {c['cpu_h']:.2f} "
                           f"CPU-hours" for n, c in behind.items())
                       + f"; in all {total['runs']} runs, {total['wall_h']:.2f} wall-hours, "
                       f"{total['cpu_h']:.2f} CPU-hours" + shared)
    body = [
        "The targets of the seeds (000: PivotRL; 003: SAO) as measured by study_pivot and study_sao "
        "(details, per-seed numbers and plots there). A verdict reads the 95 % seed-paired "
        "bootstrap interval against no effect and against the paper's effect size.",
        report.table(["target", "measure", "point [95% CI]", "verdict", "runs' code version"], rows) if rows else
        "No result files yet (run the study scripts first).",
        f"Learning rates: {lr['chosen'] if lr else 'not swept'}.",
        behind_line,
        f"Compute in the cache `{report.shown_path(ctx.cache)}`: {comp['runs']} runs, {comp['wall_h']:.2f} wall-hours, "
        f"{comp['cpu_h']:.2f} CPU-hours (warm starts included); this invocation took "
        f"{elapsed_s / 3600:.2f} wall-hours.",
    ]
    report.write(ctx, "Study summary: which of the papers' claims hold on the checkout testbed",
                 "\n\n".join(body), {"targets": rows, "cache_compute": comp, "behind": behind,
                                                "behind_distinct": total})
    arms_run = ", ".join(sorted(ctx.arms)) if ctx.arms else "all"
    report.update_readme(ctx, "\n\n".join([
        f"Last run: scale `{'quick' if ctx.args.quick else ctx.args.scale}`, {len(ctx.seeds)} seeds, "
        f"arms: {arms_run} (command and provenance in `{os.path.relpath(ctx.path('.md'), os.path.dirname(report.RESULTS))}`). Each row comes "
        f"from its script's latest result file, computed with the code version it names.",
        report.table(["target", "measure", "point [95% CI]", "verdict", "runs' code version"], rows) if rows else
        "No result files yet.",
        behind_line,
        f"Compute of the runs in the cache: {comp['runs']} runs, {comp['wall_h']:.2f} wall-hours, "
        f"{comp['cpu_h']:.2f} CPU-hours (warm starts included)."]))


if __name__ == "__main__":
    main()
