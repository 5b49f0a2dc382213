"""The whole PivotRL / SAO study, resumable: every script in order, then the summary.

    nohup nice -n 10 python experiments/study_all.py --seeds 3 > /tmp/rlvr_study.log 2>&1 &
    python experiments/study_all.py --quick --out /tmp/x        # every code path in minutes

Order: study_testbed → study_calibrate → study_lr (learning rates, chosen before the main runs)
→ study_pivot → study_failures (where the pivot arms' final policies fail) → study_sao →
study_summary.md (the four targets, total compute). Every run is
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
import subprocess
import sys
import time
from typing import Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.study import claims, report, runner  # noqa: E402

STEPS = ("study_testbed", "study_calibrate", "study_lr", "study_pivot", "study_failures", "study_sao")


def main(argv=None):
    ap = report.parser(__doc__.splitlines()[0])
    ap.add_argument("--skip", default="", help="comma-separated steps to skip (e.g. study_calibrate)")
    ap.add_argument("--from-results", action="store_true", help="only rewrite the README's blocks "
                    "read from every committed result file: the readings by block and the total "
                    "compute (runs nothing)")
    args = ap.parse_args(argv)
    if args.from_results:
        write_results_blocks()
        return
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--skip" in argv:
        i = argv.index("--skip")
        del argv[i:i + 2]
    argv = [a for a in argv if not a.startswith("--skip=")]
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    import importlib

    from experiments.study.arms import scale

    inherited = () if args.quick else scale(args.scale).get("skip_steps", ())
    if inherited:  # e.g. the scale shares the session's testbed, warm start and learning rates
        print(f"scale {args.scale}: {', '.join(inherited)} not run at this scale (its preset in "
              "experiments/study/arms.py says why)", flush=True)
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
    return report.load_result(os.path.join(ctx.out, f"study_{name}.json"))


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
    share runs (the GRPO reference of study_pivot and study_sao). A run is its config's key and
    its measured seconds, so a config run again (the same key, its own wall and CPU seconds, e.g.
    GRPO rerun in place beside SAO while study_pivot.json keeps the first run) counts as the
    second run it was. A file written
    before result files recorded per-run compute adds its own total (`overlap_unknown` then says
    so)."""
    per_run, older = {}, []
    for numbers in results:
        if numbers.get("run_compute") is not None:
            per_run.update({(k, r.get("wall_s", 0.0), r.get("cpu_s", 0.0)): r
                            for k, r in numbers["run_compute"].items()})
        else:
            older.append(numbers["compute"])
    return {"runs": len(per_run) + sum(c["runs"] for c in older),
            "wall_h": (sum(r["wall_s"] for r in per_run.values()) / 3600
                       + sum(c["wall_h"] for c in older)),
            "cpu_h": (sum(r["cpu_s"] for r in per_run.values()) / 3600
                      + sum(c["cpu_h"] for c in older)),
            "overlap_unknown": bool(older)}


EARLIER_COMPUTE = re.compile(r"^Compute: ([\d.]+) s of training runs \((\d+) runs\)", re.M)


NOT_RUN_FILES = ("study_summary.json", "study_testbed.json")


def committed_versions(results: str) -> Optional[list]:
    """The numbers of every version of every study result file under `results` that the git
    history of its repository holds (oldest first), or None where `results` is not in a git
    work tree (or git is missing). A result file regenerated or rerun in place keeps its earlier
    versions there: the runs they record that the current files no longer do were computed too."""
    def git(*argv, where=results):
        return subprocess.run(["git", "-C", where, *argv], capture_output=True, text=True,
                              check=True).stdout

    try:
        top = git("rev-parse", "--show-toplevel").strip()
        log = git("log", "--reverse", "--format=@%H", "--name-only", "--",
                  os.path.relpath(os.path.realpath(results), os.path.realpath(top)), where=top)
    except (OSError, subprocess.CalledProcessError):
        return None
    versions, commit = [], None
    for line in log.splitlines():
        if line.startswith("@"):
            commit = line[1:]
            continue
        name = os.path.basename(line)
        if not (name.startswith("study_") and name.endswith(".json")) or name in NOT_RUN_FILES:
            continue
        try:
            versions.append(json.loads(git("show", f"{commit}:{line}", where=top)))
        except subprocess.CalledProcessError:  # the commit deleted the file
            continue
        except json.JSONDecodeError as e:
            raise SystemExit(f"{line} at commit {commit[:12]} is not JSON: {e}") from e
    return versions


def distinct_warm(results, earlier=(), testbeds=()) -> dict:
    """SFT warm starts behind result files and their earlier versions, each counted once: a warm
    start is its key and its measured seconds (files record them as `warm_compute`;
    study_testbed.json per seed as `warm`). `unrecorded` counts the current files with runs
    written before files recorded warm starts."""
    seen = {}
    unrecorded = sum(n.get("warm_compute") is None for n in results)
    for numbers in list(results) + list(earlier):
        for k, w in (numbers.get("warm_compute") or {}).items():
            seen[(k, w.get("wall_s", 0.0), w.get("cpu_s", 0.0))] = w
    for tb in testbeds:
        for s in tb.get("per_seed", []):
            w = s.get("warm") or {}
            if "spec" in w:
                seen[(runner.content_key(w["spec"]), w.get("wall_s", 0.0), w.get("cpu_s", 0.0))] = w
    return {"warm_starts": len(seen), "wall_h": sum(w.get("wall_s", 0.0) for w in seen.values()) / 3600,
            "cpu_h": sum(w.get("cpu_s", 0.0) for w in seen.values()) / 3600, "unrecorded": unrecorded}


def replaced_compute(current, history) -> dict:
    """Runs that earlier versions of the result files record and the current files do not (a run
    is its key and its measured seconds, as in `distinct_compute`): reruns in place and runs
    computed at an earlier code version, counted once."""
    def runs(files):
        return {(k, r.get("wall_s", 0.0), r.get("cpu_s", 0.0)): r
                for n in files for k, r in (n.get("run_compute") or {}).items()}

    now = runs(current)
    gone = {k: r for k, r in runs(history).items() if k not in now}
    return {"runs": len(gone), "wall_h": sum(r.get("wall_s", 0.0) for r in gone.values()) / 3600,
            "cpu_h": sum(r.get("cpu_s", 0.0) for r in gone.values()) / 3600}


def records_compute(records: str) -> dict:
    """Compute behind the per-run records under `records` (`<folder>/*.jsonl.gz`, each run once
    by its key and measured seconds) and the SFT warm starts their blocks record (`block.json`:
    every round of every warm start). By folder and in all; the records as they stand (a record
    rewritten in place counts its last run)."""
    from experiments.study import records as rec_io
    from experiments.study import shop_local

    folders, runs, warms = {}, {}, []
    for folder in sorted(glob.glob(os.path.join(records, "*"))):
        mine = {}
        for p in sorted(glob.glob(os.path.join(folder, "*" + rec_io.SUFFIX))):
            head = rec_io.read_header(p)
            mine[(head.get("key", p), head.get("wall_s", 0.0), head.get("cpu_s", 0.0))] = head
        if os.path.exists(os.path.join(folder, "block.json")):
            warms.append(shop_local.warm_compute(shop_local.read_block_meta(folder)["premise"]))
        if mine:
            folders[os.path.basename(folder)] = {
                "runs": len(mine), "wall_h": sum(k[1] for k in mine) / 3600,
                "cpu_h": sum(k[2] for k in mine) / 3600}
            runs.update(mine)
    warm = {k: sum(w[k] for w in warms) for k in ("warm_starts", "wall_h", "cpu_h")}
    return {"folders": folders, "runs": len(runs), "wall_h": sum(k[1] for k in runs) / 3600,
            "cpu_h": sum(k[2] for k in runs) / 3600, "warm": warm}


def committed_compute(results: str, *, history: bool = True, records: Optional[str] = None) -> dict:
    """Compute behind every result file under `results` (the folder and its subfolders).

    Study files (`study_*.json` with runs) go through `distinct_compute` together, so a run that
    several files or folders share is counted once, and a file copied into another folder
    (identical compute and code versions) once; the earlier ablation scripts' `<name>.md` files
    record the wall seconds of their runs only. With `history`, the git history of the result
    files adds the runs their earlier versions record and the current ones do not (`replaced`;
    None without a repository). Warm starts: those the files (and their earlier versions)
    record, each once (`warm`). With `records`, the per-run records there too (`records_compute`;
    None without)."""
    folders = [results] + sorted(p for p in glob.glob(os.path.join(results, "*"))
                                 if os.path.isdir(p) and not os.path.basename(p).startswith("."))
    per_folder, everything, seen_older, testbeds = {}, [], set(), []
    for folder in folders:
        files = []
        for p in sorted(glob.glob(os.path.join(folder, "study_*.json"))):
            if os.path.basename(p) == "study_testbed.json":
                with open(p) as f:
                    testbeds.append(json.load(f))
            if os.path.basename(p) in NOT_RUN_FILES:
                continue
            numbers = report.load_result(p)
            if not numbers or not numbers.get("compute"):
                continue
            files.append(numbers)
            if numbers.get("run_compute") is None:
                key = (os.path.basename(p), json.dumps(numbers["compute"], sort_keys=True),
                       tuple(numbers.get("run_code_versions") or ()))
                if key in seen_older:
                    continue
                seen_older.add(key)
            everything.append(numbers)
        if files:
            per_folder[os.path.relpath(folder, results)] = distinct_compute(files)
    earlier = {"files": 0, "runs": 0, "wall_h": 0.0}
    for p in sorted(glob.glob(os.path.join(results, "*.md"))):
        with open(p) as f:
            m = EARLIER_COMPUTE.search(f.read())
        if m:
            earlier["files"] += 1
            earlier["runs"] += int(m.group(2))
            earlier["wall_h"] += float(m.group(1)) / 3600
    past = committed_versions(results) if history else None
    return {"folders": per_folder, "study": distinct_compute(everything), "earlier": earlier,
            "replaced": None if past is None else replaced_compute(everything, past),
            "warm": distinct_warm(everything, past or (), testbeds),
            "records": None if records is None else records_compute(records)}


def compute_block(total: dict) -> str:
    """The README's total-compute block, from `committed_compute`."""
    study, earlier, replaced, warm = total["study"], total["earlier"], total["replaced"], total["warm"]
    folders = "; ".join(
        f"`results/{'' if rel == '.' else rel + '/'}` {c['runs']} runs, {c['wall_h']:.2f} wall-hours, "
        f"{c['cpu_h']:.2f} CPU-hours" for rel, c in total["folders"].items())
    if replaced is None:
        replaced_line = ("Runs that earlier versions of the result files recorded are not counted "
                         "(no git history of the result files here). ")
        replaced = {"runs": 0, "wall_h": 0.0, "cpu_h": 0.0}
    else:
        replaced_line = (f"Runs that earlier versions of the result files record and the current ones "
                         f"do not (reruns in place, runs at earlier code versions; read from the git "
                         f"history): {replaced['runs']} runs, {replaced['wall_h']:.2f} wall-hours, "
                         f"{replaced['cpu_h']:.2f} CPU-hours. ")
    warm_line = (f"SFT warm starts the result files record: {warm['warm_starts']}, "
                 f"{warm['wall_h']:.2f} wall-hours, {warm['cpu_h']:.2f} CPU-hours"
                 + (f" ({report.count(warm['unrecorded'], 'current result file')} with runs predate "
                    f"these records; their warm starts are counted only where a study_testbed.json "
                    f"or another file records them). " if warm["unrecorded"] else ". "))
    wall = study["wall_h"] + replaced["wall_h"] + warm["wall_h"] + earlier["wall_h"]
    cpu = study["cpu_h"] + replaced["cpu_h"] + warm["cpu_h"]
    recs, records_line = total.get("records"), ""
    if recs is not None:
        by = "; ".join(f"`study/records/{name}/` {c['runs']} runs, {c['wall_h']:.2f} wall-hours, "
                       f"{c['cpu_h']:.2f} CPU-hours" for name, c in recs["folders"].items())
        rw = recs["warm"]
        records_line = (f"The per-run records (`study/records/`: the local checkout blocks and the "
                        f"wall-clock arms, as committed now): {recs['runs']} runs, {recs['wall_h']:.2f} "
                        f"wall-hours, {recs['cpu_h']:.2f} CPU-hours (by folder: {by or 'none'}); the "
                        f"local blocks' SFT warm starts (every round): {rw['warm_starts']}, "
                        f"{rw['wall_h']:.2f} wall-hours, {rw['cpu_h']:.2f} CPU-hours (the wall-clock "
                        f"arms' warm starts are not recorded there). ")
        wall += recs["wall_h"] + rw["wall_h"]
        cpu += recs["cpu_h"] + rw["cpu_h"]
    return (
        "Total compute of the committed results, summed from the result files"
        + (" and the per-run records" if recs is not None else "") + ": the study "
        f"{study['runs']} runs, {study['wall_h']:.2f} wall-hours, {study['cpu_h']:.2f} CPU-hours "
        + ("(a run shared by files that record per-run compute counted once; files older than those "
           "records add their own totals). " if study["overlap_unknown"] else "(each run counted once). ")
        + f"By folder: {folders}. " + replaced_line + warm_line + records_line
        + f"The earlier ablation scripts: {earlier['runs']} runs in "
        f"{report.count(earlier['files'], 'result file')}, "
        f"{earlier['wall_h']:.2f} wall-hours (they record wall seconds only). In all {wall:.2f} "
        f"wall-hours on the shared 2-core CPU ({cpu:.2f} CPU-hours without the earlier scripts).")


STUDY_RECORDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "study", "records")
WALLCLOCK_JSON = os.path.join(report.RESULTS, "wallclock", "wallclock.json")


def _local_runs_table(runs: dict) -> str:
    """A local block's runs (`shop_local.run_numbers` by "<arm>/<run>"), one row each."""
    from experiments.study import shop_local

    f = shop_local.fmt_num
    rows = [f"| {key.split('/')[0]} | {key.split('/')[1]} | {f(r['start_success'])} → "
            f"{f(r['final_success'])} ({f(r['plateau'])}) | {r['steps']} | {f(r['training_turns'], 0)} | "
            f"{f(r['one_time_turns'], 0)} | {shop_local.pivots_text(r)} | "
            f"{f(r['reward_first'])} → {f(r['reward_last'])} | "
            f"{f(r['wall_h'], 2)} |" for key, r in runs.items()]
    return ("| arm | run | success: step 0 → final (plateau) | steps | training turns | one-time "
            "turns | pivots kept / probed | training reward, first → last tenth of steps | "
            "wall-hours |\n|---|---|---|---:|---:|---:|---|---|---:|\n" + "\n".join(rows))


def _shared_runs(folder: str, other: str) -> int:
    """How many of the run records in `folder` have a run key that a record in `other` has."""
    from experiments.study import records as rec_io

    def keys(f):
        return {rec_io.read_header(p).get("key") for p in glob.glob(os.path.join(f, "*" + rec_io.SUFFIX))}

    return len(keys(folder) & keys(other)) if os.path.isdir(other) else 0


def local_block_text(records_root: str = STUDY_RECORDS) -> str:
    """The README's local-block table: one row per committed local checkout block
    (`<records_root>/shop_local_<scale>_<difficulty>/`, read through `shop_local.load_block` and
    `block_report`, as its own report is): runs, the premise on each warm start, the primary
    endpoint (GRPO ÷ PivotRL training turns to the level) and what the row is (a quick-scale
    block is a pipeline check, not a reading)."""
    from experiments.study import shop_local

    rows, run_tables = [], []
    names = sorted(n for n in os.listdir(records_root) if n.startswith("shop_local_")) \
        if os.path.isdir(records_root) else []
    for name in names:
        _, n = shop_local.block_report(shop_local.load_block(os.path.join(records_root, name)))
        if n["runs"] and n["settings"]["scale"] != "quick":
            run_tables.append(f"Runs of `study/records/{name}/` (training cost, the probe left out):\n\n"
                              + _local_runs_table(n["runs"]))
        st, ep = n["settings"], n["primary_endpoint"]
        prem = [p for p in n["premise"].values()]
        premise = ("untested (no payment with the cart complete)" if not prem or any(
            not np.isfinite(p["difference"]) for p in prem) else
            "holds on every warm start" if all(p["agree"] for p in prem) else "FAILS on a warm start")
        per = ", ".join(f"{shop_local.fmt_num(g, 0, '—')}/{shop_local.fmt_num(q, 0, '—')} ({kind})"
                        for g, q, kind in ep["per_run"]) or "none"
        failing = shop_local.failing_warm_starts(n["settings"]["difficulty"], n["premise"])
        what = ("pipeline check (quick scale), not a reading" if st["scale"] == "quick"
                else f"reading at scale `{st['scale']}`" if n["compute"]["runs"] else
                f"no runs yet at scale `{st['scale']}`")
        if shop_local.lr_departures(st):
            what += f"; exploratory: {shop_local.departures_text(shop_local.lr_departures(st))}"
            declared = os.path.join(records_root, shop_local.block_name(st["scale"], st["difficulty"]))
            shared = _shared_runs(os.path.join(records_root, name), declared)
            if shared:
                what += (f"; {shared} of its runs are the declared block's (the same config, read "
                         f"back from the cache; their wall-hours are counted in both rows)")
        if failing and st["scale"] != "quick":
            what += f"; the warm-start check fails on {', '.join(failing)}: their runs do not start"
        rows.append(f"| `study/records/{name}/` | `{st['difficulty']}` | {n['compute']['runs']} | "
                    f"{premise} | {shop_local.endpoint_text(ep['ratio'], ep['lo'], ep['hi'], ep['pairs'], ep['kind'])} | "
                    f"{per} | {n['compute']['wall_h']:.2f} | {what} |")
    if not rows:
        return "No local block has committed records yet."
    head = ("| records | difficulty | runs | premise (payment success by layout) | GRPO ÷ PivotRL "
            "training turns to ℓ [95% t-CI] | GRPO/PivotRL turns per run | wall-hours | what it is |\n"
            "|---|---|---:|---|---|---|---:|---|")
    return (head + "\n" + "\n".join(rows) + "".join("\n\n" + t for t in run_tables)
            + "\n\nEach block's full report (one-time costs, every "
            "run, exploratory differences): `results/shop_local/shop_local_<scale>_<difficulty>.md`, "
            "regenerated from the records by `python experiments/study/shop_local.py "
            "[--quick] --from-records`.")


def wallclock_text(path: str = WALLCLOCK_JSON) -> str:
    """The README's modelled wall-clock block, from the grid's result file
    (`experiments/study/wallclock.py`): per arm the range over the fixed grid of its modelled
    throughput and wall-clock to the level (÷ GRPO-sync), where its token ratio was measured and,
    where the wall-clock arms ran, their own readings."""
    if not os.path.exists(path):
        return "The modelled wall-clock grid has not run (`python -m experiments.study.wallclock`)."
    with open(path) as f:
        d = json.load(f)
    labels = {"grpo_sync": "GRPO-sync", "grpo_async": "GRPO-async", "sao": "SAO", "sao_sync": "SAO-sync"}
    ratios, sources, cells = d["token_ratios"], d.get("token_ratio_sources", {}), d["cells"]
    from experiments.study.wallclock import BOUND_MARK

    rows = []
    for a in d["arms"][1:]:
        thr = [c["arms"][a]["throughput_ratio"] for c in cells]
        mark = BOUND_MARK[d.get("token_ratio_bounds", {}).get(a, "")]
        if a in ratios:
            wall = [ratios[a][0] / t for t in thr]
            wall_txt = (f"{mark}{min(wall):.2f} – {mark}{max(wall):.2f} (median "
                        f"{mark}{float(np.median(wall)):.2f})")
        else:
            wall_txt = "not measured"
        rows.append(f"| {labels[a]} | {min(thr):.2f} – {max(thr):.2f} (median "
                    f"{float(np.median(thr)):.2f}) | "
                    + (f"{mark}{ratios[a][0]:.2f}" if a in ratios else "—")
                    + f" | {wall_txt} | {sources.get(a, 'see results/wallclock/wallclock.md')} |")
    from experiments.study.time_model import describe

    cal = d.get("system_model_calibration")
    out = [f"Over the fixed grid ({len(cells)} cells: tool-latency median × the GRPO-sync learner "
           f"step, tail index, rollout slots, topology) under the system model "
           f"`experiments/study/system_model.json` ("
           + (describe(cal) if cal else "no calibration recorded: placeholder parameters")
           + f"), {d['steps']} learner steps per arm and cell; "
           f"ratios arm ÷ GRPO-sync (throughput > 1: faster; wall-clock < 1: sooner at ℓ). Every "
           f"cell: `results/wallclock/wallclock.md`.", "",
           "| arm | modelled throughput ratio over the grid | measured token ratio to ℓ | "
           "modelled wall-clock ratio to ℓ over the grid | token ratio: where measured, or why not |",
           "|---|---|---:|---|---|"] + rows
    runs = d.get("arm_runs")
    if runs:
        comp = runs.get("compute", {})
        out += ["", f"The wall-clock arms' own runs ({_runs_scale(runs)}, under the system model their "
                f"config named when they ran: the records keep its path, not its numbers; ℓ = "
                f"{runs['level']:.3f}; {comp.get('runs', 0)} runs, "
                f"{comp.get('wall_s', 0.0) / 60:.1f} wall-minutes, "
                f"{comp.get('cpu_s', 0.0) / 60:.1f} CPU-minutes, warm start not included):", "",
                "| arm | seeds | sampled tokens to ℓ | modelled s to ℓ | throughput ratio (run) |",
                "|---|---:|---|---|---|"]
        for a, v in runs["arms"].items():
            mark = ["" if r else "≥" for r in v["reached"]]
            out.append(f"| {labels[a]} | {len(v['seeds'])} | "
                       f"{', '.join(f'{k}{t:.0f}' for k, t in zip(mark, v['tokens']))} | "
                       f"{', '.join(f'{k}{t:.1f}' for k, t in zip(mark, v['modelled_s']))} | "
                       f"{v['throughput_ratio'][0]:.2f} |")
    return "\n".join(out)


def _runs_scale(runs: dict) -> str:
    """The scale of the wall-clock arms' runs a wallclock.json records (`arm_runs`: the scale its
    records folder names, and the folder), in words; a quick scale is a pipeline check."""
    scale, folder = runs.get("scale"), runs.get("records")
    if not folder:
        return "scale not recorded in the result file"
    where = f"records `{folder}`"
    if not scale:
        return f"scale not named by the folder, {where}"
    check = ": a pipeline check, not a reading" if "quick" in scale else ""
    return f"scale `{scale}`{check}; {where}"


def write_results_blocks(results: str = report.RESULTS, records: str = STUDY_RECORDS) -> None:
    """Rewrites experiments/README.md's blocks read from every result file under `results` and
    the run records under `records`: the primary endpoints (each claim in its own regime from the
    records, then the first design's blocks), each claim's reading in each block
    (`experiments.study.claims`), the claims table of every folder's summary block, the local
    checkout blocks (their committed records), the modelled wall-clock grid
    (`results/wallclock/wallclock.json`) and the total compute."""
    readings = claims.read(results)
    report.replace_readme_block("primary endpoints", claims.primary_block_text(
        claims.regime_endpoints(records), readings, claims.wallclock_level_sweep(records)))
    report.replace_readme_block("readings by block", claims.block_text(readings))
    for block in claims.blocks(results):
        refresh_summary_table(block, [r for r in readings if r.block == block])
    report.replace_readme_block("local block", local_block_text(records))
    report.replace_readme_block("modelled wall-clock", wallclock_text(
        os.path.join(results, "wallclock", "wallclock.json")))
    report.replace_readme_block("compute total", compute_block(committed_compute(results, records=records)))


def refresh_summary_table(block: str, readings: list, readme: str = "") -> None:
    """Replaces the table (its contiguous lines starting with "|") inside a folder's summary block
    of experiments/README.md with the folder's claims table; a folder without a summary block, or
    a block without a table, is left alone."""
    tag = "study summary" if block == "." else f"study summary {block}"
    begin, end = report._markers(tag)
    path = readme or os.path.join(os.path.dirname(report.RESULTS), "README.md")
    with open(path) as f:
        text = f.read()
    if begin not in text or end not in text:
        return
    head, rest = text.split(begin, 1)
    body, tail = rest.split(end, 1)
    lines = body.split("\n")
    rows = [i for i, line in enumerate(lines) if line.startswith("|")]
    if not rows:
        return
    first, last = rows[0], rows[-1]
    if rows != list(range(first, last + 1)):
        raise SystemExit(f"{path}: the {tag!r} block holds more than one table")
    table = claims.summary_text(readings).split("\n")
    with open(path, "w") as f:
        f.write(head + begin + "\n".join(lines[:first] + table + lines[last + 1:]) + end + tail)


def summary(ctx, elapsed_s: float) -> None:
    piv, sao, fails = _load(ctx, "pivot"), _load(ctx, "sao"), _load(ctx, "failures")
    lr = _load(dataclasses.replace(ctx, out=report.lr_source(ctx)[1]), "lr")  # where its rates come from
    readings = [r for r in claims.read(ctx.out) if r.block == "."]
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
        "The claims of PivotRL and SAO as measured by study_pivot and study_sao (details, per-seed "
        "numbers and plots there). Claims 1 and 3 are the primary endpoints (paired t-test, Holm "
        "correction over the two); every other reading is exploratory (its unadjusted 95 % paired "
        "t-interval against no effect).",
        claims.summary_text(readings) if readings else "No result files yet (run the study scripts first).",
        f"Learning rates: {lr['chosen'] if lr else 'not swept'}.",
        (f"Where the pivot arms' final policies fail (study_failures): {fails['reading']}"
         if fails and fails.get("reading") else ""),
        behind_line,
        f"Compute in the cache `{report.shown_path(ctx.cache)}`: {comp['runs']} runs, {comp['wall_h']:.2f} wall-hours, "
        f"{comp['cpu_h']:.2f} CPU-hours (warm starts included); this invocation took "
        f"{elapsed_s / 3600:.2f} wall-hours.",
    ]
    report.write(ctx, "Study summary: which of the papers' claims hold on the checkout testbed",
                 "\n\n".join(body), {"targets": [[r.claim.label, *r.ci, r.holm_p, claims.verdict(r)] for r in readings], "cache_compute": comp, "behind": behind,
                                                "behind_distinct": total})
    arms_run = ", ".join(sorted(ctx.arms)) if ctx.arms else "all"
    report.update_readme(ctx, "\n\n".join([
        f"Last run: scale `{'quick' if ctx.args.quick else ctx.args.scale}`, {report.count(len(ctx.seeds), 'seed')}, "
        f"arms: {arms_run} (command and provenance in `{os.path.relpath(ctx.path('.md'), os.path.dirname(report.RESULTS))}`). Each row comes "
        f"from its script's latest result file, computed with the code version it names.",
        claims.summary_text(readings) if readings else
        "No study_pivot or study_sao result files in this folder yet.",
        (f"Learning rates chosen by the sweep in "
         f"`{os.path.relpath(os.path.join(report.lr_source(ctx)[1], 'study_lr.md'), os.path.dirname(report.RESULTS))}`: "
         + ", ".join(f"{m} {v:g}" for m, v in lr["chosen"].items()) + "." if lr else ""),
        (f"Where the pivot arms' final policies fail, by cause and by the layout before the payment: "
         f"`{os.path.relpath(os.path.join(ctx.out, 'study_failures.md'), os.path.dirname(report.RESULTS))}`."
         if fails else ""),
        behind_line,
        f"Compute of the runs in the cache: {comp['runs']} runs, {comp['wall_h']:.2f} wall-hours, "
        f"{comp['cpu_h']:.2f} CPU-hours (warm starts included)."]))
    if report.readme_markers(ctx.out) is not None:
        write_results_blocks()


if __name__ == "__main__":
    main()
