"""Throughput of a Hugging Face run (configs/gsm8k.py) at tiny size on this machine.

    python benchmarks/hf_train_loop.py [--steps 20] [--tasks gsm8k:builtin,code:builtin]
        [--out benchmarks/results/hf_train_loop_cpu.md]

Builds the tiny random Qwen2 checkpoint of `rlvr.testing` (2 layers, width 32, BPE tokenizer
with 2048 tokens and a chat template), then runs `configs/gsm8k.py` on each task file with
4 prompts × 4 samples per step, up to 32 new tokens, float32, prompts padded to one 256-token
shape; held-out evaluation and checkpoints off. Reports min / median / max over the steps after
the first `SKIP` (compilation excluded) of samples/s, tokens/s (completion tokens) and the
generate / verify / learn seconds per step. The numbers are the loop's own overheads around a
toy model, not a model-size measurement. Prints a markdown table and writes it to --out.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from configs import gsm8k  # noqa: E402
from rlvr.testing import build_checkpoint  # noqa: E402
from rlvr.train import loop  # noqa: E402
from rlvr.train.metrics import read_metrics  # noqa: E402

SKIP = 3
KEYS = ("throughput/samples_per_s", "throughput/tokens_per_s", "time/generate_s",
        "time/verify_s", "time/learn_s", "time/step_s")


def run_one(checkpoint: str, task: str, steps: int) -> dict:
    c = gsm8k.get_config()
    c.model.init_from = checkpoint
    c.model.dtype, c.model.remat, c.model.max_seq_len = "float32", False, 288
    c.rollout.prompt_bucket = 256
    c.task.names = (task,)
    c.sampling.max_new_tokens, c.sampling.prompts_per_step = 32, 4
    c.algorithm.group_size = 4
    c.train.num_steps, c.train.progress = steps, False
    c.train.num_minibatches = c.train.num_microbatches = 1
    c.eval.num_tasks = 0
    c.checkpoint.every, c.checkpoint.export = -1, False
    c.logging.tensorboard = c.logging.plot = False
    c.logging.samples_every = 0
    with tempfile.TemporaryDirectory() as d:
        loop.run(c, d)
        rows = [r for r in read_metrics(d) if "time/step_s" in r][SKIP:]
    return {k: [float(r[k]) for r in rows] for k in KEYS}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tasks", default="gsm8k:builtin,code:builtin")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "hf_train_loop_cpu.md"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        ckpt = build_checkpoint(os.path.join(d, "tiny-qwen"))
        res = {t: run_one(ckpt, t, args.steps) for t in args.tasks.split(",")}
    fmt = lambda v, p: "/".join(f"{x:.{p}f}" for x in (min(v), np.median(v), max(v)))  # noqa: E731
    lines = [
        "# Hugging Face run throughput (tiny checkpoint)",
        "",
        f"Command: `python benchmarks/hf_train_loop.py --steps {args.steps}`; machine: "
        f"{platform.machine()}, {os.cpu_count()} CPU cores (shared), jax {jax.__version__}, "
        f"backend {jax.default_backend()}. `configs/gsm8k.py` with the tiny random Qwen2 of "
        f"rlvr.testing, 4 prompts × 4 samples per step, ≤ 32 new tokens, chat-template prompts "
        f"padded to 256 tokens, float32. min/median/max over steps {SKIP + 1}..{args.steps}.",
        "",
        "| task | samples/s | tokens/s | generate s | verify s | learn s | step s |",
        "|---|---|---|---|---|---|---|",
    ]
    for t, m in res.items():
        lines.append(f"| {t} | {fmt(m[KEYS[0]], 1)} | {fmt(m[KEYS[1]], 0)} | {fmt(m[KEYS[2]], 3)} | "
                     f"{fmt(m[KEYS[3]], 3)} | {fmt(m[KEYS[4]], 3)} | {fmt(m[KEYS[5]], 3)} |")
    table = "\n".join(lines)
    print(table)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()
