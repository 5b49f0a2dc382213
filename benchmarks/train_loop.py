"""Throughput of the quickstart training loop on this machine.

    python benchmarks/train_loop.py [--steps 150] [--out benchmarks/results/train_loop_cpu.md]

Runs `configs/quickstart.py` (SFT warm-start, then `--steps` GRPO steps, 32 prompts × 8 samples
per step) once per verification executor (inline / thread / process, 2 workers) and reports, over
the RL steps after the first 10 (compilation excluded): samples/s, tokens/s (completion tokens)
and the split of a step into generate / verify / learn (median seconds per step). Held-out
evaluation and checkpoints are off so only the loop itself is timed. Prints a markdown table and
writes it to --out.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from configs import quickstart  # noqa: E402
from rlvr.train import loop  # noqa: E402
from rlvr.train.metrics import read_metrics  # noqa: E402

SKIP = 10  # first steps (compilation) excluded


def run_one(executor: str, steps: int) -> dict:
    c = quickstart.get_config()
    c.train.num_steps = steps
    c.train.progress = False
    c.eval.every = 0
    c.eval.num_tasks = 0
    c.checkpoint.every = 0
    c.logging.tensorboard = False
    c.logging.plot = False
    c.reward.executor = executor
    c.reward.num_workers = 2
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        loop.run(c, d)
        wall = time.perf_counter() - t0
        rows = [r for r in read_metrics(d) if "time/step_s" in r][SKIP:]
    med = {k: float(np.median([r[k] for r in rows]))
           for k in ("time/generate_s", "time/verify_s", "time/learn_s", "time/step_s",
                     "throughput/samples_per_s", "throughput/tokens_per_s")}
    med["wall_s"] = wall
    med["steps"] = len(rows)
    return med


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--executors", default="inline,thread,process")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "train_loop_cpu.md"))
    args = ap.parse_args()
    res = {e: run_one(e, args.steps) for e in args.executors.split(",")}
    c = quickstart.get_config()
    lines = [
        "# Quickstart training loop throughput",
        "",
        f"Command: `python benchmarks/train_loop.py --steps {args.steps}`; machine: {platform.machine()}, "
        f"{os.cpu_count()} CPU cores (shared), jax {jax.__version__}, backend {jax.default_backend()}.",
        f"Config `configs/quickstart.py`: {c.model.num_layers} layers, d_model {c.model.d_model}, "
        f"{c.sampling.prompts_per_step} prompts × {c.algorithm.group_size} samples per step, "
        f"max {c.sampling.max_new_tokens} new tokens. Medians over steps {SKIP + 1}..{args.steps} "
        f"(compilation excluded); tokens = completion tokens; wall = whole run incl. SFT and compiles.",
        "",
        "| verify executor | samples/s | tokens/s | step s | generate s | verify s | learn s | wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e, m in res.items():
        lines.append(f"| {e} | {m['throughput/samples_per_s']:.0f} | {m['throughput/tokens_per_s']:.0f} | "
                     f"{m['time/step_s']:.3f} | {m['time/generate_s']:.3f} | {m['time/verify_s']:.4f} | "
                     f"{m['time/learn_s']:.3f} | {m['wall_s']:.0f} |")
    table = "\n".join(lines)
    print(table)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()
