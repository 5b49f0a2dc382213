"""README's main job (configs/quickstart.py) over several seeds: held-out success before and after RL.

    python benchmarks/quickstart.py [--seeds 0,1,2] [--out benchmarks/results/quickstart_cpu.md]

Runs the quickstart config unchanged but for `seed` (and progress bars off), one seed after
the other, and writes a markdown table of held-out sampled success and pass@4 at the warm start
and after RL, the change, the wall time, and each run's held-out success at every evaluation
point. The numbers depend on the machine's floating-point kernels (the CPU model is recorded):
the same seed on another CPU follows another, equally valid, trajectory.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402

from configs import quickstart  # noqa: E402
from experiments.study.runner import cpu_model  # noqa: E402
from rlvr.train import loop  # noqa: E402
from rlvr.train.metrics import read_metrics  # noqa: E402
from rlvr.version import code_version  # noqa: E402


def run_seed(seed: int) -> dict:
    c = quickstart.get_config()
    c.seed = seed
    c.train.progress = False
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        result = loop.run(c, d)
        wall = time.perf_counter() - t0
        curve = [(int(r["step"]), float(r["eval/success"])) for r in read_metrics(d)
                 if "eval/success" in r]
    before, after = result["before"], result["after"]
    return {"seed": seed, "before": before["eval/success"], "after": after["eval/success"],
            "pass4_before": before.get("eval/pass@4"), "pass4_after": after.get("eval/pass@4"),
            "wall": wall, "curve": curve}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "quickstart_cpu.md"))
    args = ap.parse_args()
    c = quickstart.get_config()
    rows = []
    for s in (int(x) for x in args.seeds.split(",")):
        print(f"seed {s} ...", file=sys.stderr, flush=True)
        rows.append(run_seed(s))
    f3 = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731
    lines = [
        "# Quickstart: held-out success before and after GRPO (CPU)", "",
        f"Command: `python benchmarks/quickstart.py --seeds {args.seeds}` (README's main job, "
        f"configs/quickstart.py with `seed` set); {datetime.date.today().isoformat()}, "
        f"{cpu_model()}, {os.cpu_count()} CPU cores, load average at the end "
        f"{os.getloadavg()[0]:.1f}, jax {jax.__version__}, code version {code_version()}.", "",
        f"Settings (from configs/quickstart.py): {c.train.sft_steps} SFT steps, then "
        f"{c.train.num_steps} {c.algorithm.name.upper()} steps of {c.sampling.prompts_per_step} "
        f"prompts × {c.algorithm.group_size} samples, learning rate {c.optimizer.learning_rate:g}. "
        f"Held-out set: {c.eval.num_tasks} eval-split tasks, {c.eval.samples_per_task} samples each "
        f"at temperature {c.sampling.temperature:g}, the same before and after RL; success = mean "
        "sampled success, pass@4 from the same samples.", "",
        "| seed | success warm-start | success after RL | change | pass@4 before → after | wall (s) |",
        "|---|---|---|---|---|---|",
        *[f"| {r['seed']} | {r['before']:.3f} | {r['after']:.3f} | {r['after'] - r['before']:+.3f} | "
          f"{f3(r['pass4_before'])} → {f3(r['pass4_after'])} | {r['wall']:.0f} |" for r in rows],
        "", "Held-out success at the evaluation points (step: success):", "",
        *[f"- seed {r['seed']}: " + ", ".join(f"{s}: {v:.3f}" for s, v in r["curve"]) for r in rows],
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
