"""Shared plumbing of the PivotRL / SAO ablations: configs, seeds, tables, plots.

Every ablation script builds arms as (name, make_config(seed)), runs each arm for each seed
in-process through the one training loop (`rlvr.train.loop.run`), one at a time, shares one SFT
warm start per seed across arms and scripts (cached under `experiments/results/.cache`, keyed by
the model / task / SFT settings, seed and code version), and writes
`experiments/results/<name>.md` (command, settings, mean ± std table over seeds, which arms came
from the cache) and `<name>.png`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

RESULTS = os.path.join(ROOT, "experiments", "results")
CACHE = os.path.join(RESULTS, ".cache")


def parse(description: str):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/rlvr_experiments")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies steps / budgets")
    return ap.parse_args()


def quiet():
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.ERROR)


def _sweep_config(module: str, seed: int):
    """configs/<module>.py defaults, CPU-sized for sweeps: smaller eval set, no checkpoints."""
    import importlib

    c = importlib.import_module(f"configs.{module}").get_config()
    c.seed = seed
    c.train.progress = False
    c.eval.num_tasks = 32
    c.eval.samples_per_task = 2
    c.checkpoint.every = -1  # sweeps: no checkpoints
    c.logging.plot = False
    return c


def base_pivot_config(seed: int):
    return _sweep_config("pivotrl", seed)


def base_grpo_config(seed: int):
    return _sweep_config("agent_grpo", seed)


def base_sao_config(seed: int):
    return _sweep_config("sao", seed)


def _run_cached(config, wd):
    """loop.run(config) unless an identical (config, code version) ran before: results are cached
    in results/.cache/run_<hash>.json so arms shared by several scripts run once."""
    import hashlib

    from rlvr.train import loop
    from rlvr.train.metrics import read_metrics
    from rlvr.version import code_version

    spec = json.dumps({"config": config.to_dict(), "code": code_version()}, sort_keys=True, default=str)
    path = os.path.join(CACHE, "run_" + hashlib.sha1(spec.encode()).hexdigest()[:16] + ".json")
    if os.path.exists(path):
        with open(path) as f:
            res = json.load(f)
        res["cached"] = True
        return res
    t0 = time.time()
    res = loop.run(config, wd, warm_cache=CACHE)
    res["wall_s"] = time.time() - t0
    rows = read_metrics(wd)
    res["pivot_stats"] = {k: v for k, v in rows[0].items() if k.startswith("pivot/")} if rows else {}
    os.makedirs(CACHE, exist_ok=True)
    with open(path, "w") as f:
        json.dump(res, f, default=float)
    return res


def run_arms(name: str, arms, seeds: int, workdir: str) -> dict:
    """arms: list of (arm_name, make_config(seed)). Returns {arm: [result per seed]}."""
    quiet()
    out = {a[0]: [] for a in arms}
    for seed in range(seeds):
        for arm, make in arms:
            wd = os.path.join(workdir, name, arm.replace(" ", "_"), f"seed{seed}")
            res = _run_cached(make(seed), wd)
            out[arm].append(res)
            last = res["history"][-1]
            print(f"[{name}] seed={seed} arm={arm} before={res['before']['eval/success']:.3f} "
                  f"final={last['eval/success']:.3f} tokens={last.get('cost/sampled_tokens', 0):.0f} "
                  f"steps={res['step']} wall={res['wall_s']:.0f}s{' (cached)' if res.get('cached') else ''}",
                  flush=True)
    return out


def cache_note(results: dict) -> str:
    """Which arms' runs came from the run cache (a line for the report)."""
    hits = {arm: sum(bool(r.get("cached")) for r in runs) for arm, runs in results.items()}
    from rlvr.version import code_version

    return (f"Code version {code_version()}; runs taken from the cache (same config and code): "
            + ", ".join(f"{a}: {n}/{len(results[a])}" for a, n in hits.items()) + ".")


def mean_std(xs) -> str:
    xs = np.asarray(xs, float)
    return f"{xs.mean():.3f} ± {xs.std():.3f}"


def table(rows: list[list[str]], header: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def write_report(name: str, title: str, body: str, settings: dict, started: float,
                 results: dict = None) -> str:
    """results/<name>.md: the command, the compute the runs took (cached runs count the time
    they took when they ran), the body and the settings."""
    cmd = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"{name}.md")
    runs = [r for rs in (results or {}).values() for r in rs]
    with open(path, "w") as f:
        f.write(f"# {title}\n\nCommand (from the repository root): `{cmd}`\n\n")
        if runs:
            f.write(f"Compute: {sum(r.get('wall_s', 0.0) for r in runs):.0f} s of training runs "
                    f"({len(runs)} runs) on the shared 2-core CPU; this invocation took "
                    f"{time.time() - started:.0f} s.\n\n")
        else:
            f.write(f"Wall time: {time.time() - started:.0f} s on the shared 2-core CPU.\n\n")
        f.write(body.rstrip() + "\n\n")
        f.write("Settings:\n\n```json\n" + json.dumps(settings, indent=1, default=str) + "\n```\n")
    print(open(path).read())
    return path


def success_curves(ax, results: dict, xkey: str = "cost/sampled_tokens"):
    """Mean (± std band) eval success vs `xkey` per arm, interpolated on a common grid."""
    for arm, runs in results.items():
        hs = [r["history"] for r in runs]
        xmax = min(h[-1].get(xkey, 0.0) for h in hs)
        grid = np.linspace(0, xmax, 30)
        ys = np.stack([np.interp(grid, [p.get(xkey, 0.0) for p in h], [p["eval/success"] for p in h])
                       for h in hs])
        m, s = ys.mean(0), ys.std(0)
        ax.plot(grid, m, label=arm)
        ax.fill_between(grid, m - s, m + s, alpha=0.2)
    ax.set_xlabel(xkey.split("/")[-1].replace("_", " "))
    ax.set_ylabel("held-out success")
    ax.legend()


def final(runs, key="eval/success"):
    return [r["history"][-1].get(key, 0.0) for r in runs]


def before(runs):
    return [r["before"]["eval/success"] for r in runs]
