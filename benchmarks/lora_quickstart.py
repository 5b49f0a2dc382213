"""LoRA vs full fine-tuning on the quickstart (held-out gain, trainable fraction, step time).

    python benchmarks/lora_quickstart.py [--seeds 0 1 2] [--arms full lora lora_projections_only] [--workroot DIR]

Runs `configs/quickstart.py` (full fine-tuning) and `configs/quickstart_lora.py` (rank-8 adapters
on every block projection and trained norm scales, lr 3e-3; the same SFT warm start, then the same 1200 GRPO steps) for
each seed, unless DIR/<arm>_s<seed>/result.json already exists (runs can be launched separately
with launch.py into those folders). Reports per run the held-out sampled success before and after
RL, the gain, the fraction of parameters trained, and the median learner and whole-step seconds
over the RL steps after the first 10 (compilation excluded); then LoRA's mean gain as a
fraction of full fine-tuning's. Writes the table to --out.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

ARMS = {"full": "quickstart", "lora": "quickstart_lora", "qlora": "quickstart_lora",
        "lora_projections_only": "quickstart_lora"}
SKIP = 10


def arm_config(arm: str, seed: int, steps: int = 0):
    c = importlib.import_module(f"configs.{ARMS[arm]}").get_config()
    if steps:  # a shorter run (checks of this script; not the reported setting)
        c.train.num_steps, c.eval.every = steps, steps
    if arm == "qlora":
        c.model.lora.quantize = "nf4"
    if arm == "lora_projections_only":  # adapters alone: the norm scales stay frozen
        c.model.lora.train_norms = False
    c.seed = seed
    c.train.progress = False
    c.logging.tensorboard = False
    c.logging.plot = False
    c.checkpoint.every = -1
    return c


def trainable_fraction(c) -> float:
    import jax
    from flax import nnx

    from rlvr.models import lora as L
    from rlvr.train.setup import build_kit_checked, build_lora, build_policy, build_tokenizer

    tok = build_tokenizer(c, build_kit_checked(c))

    def make():
        policy = build_policy(c, tok.vocab_size)
        build_lora(c, policy)
        return nnx.split(policy, nnx.Param, ...)[1]

    params = jax.eval_shape(make)
    return L.param_counts(params)["fraction"] if c.model.lora.rank else 1.0


def summarize(workdir: str) -> dict:
    from rlvr.train.metrics import read_metrics

    with open(os.path.join(workdir, "result.json")) as f:
        res = json.load(f)
    rows = [r for r in read_metrics(workdir) if "time/learn_s" in r][SKIP:]
    return {"before": res["before"]["eval/success"], "after": res["after"]["eval/success"],
            "learn_s": float(np.median([r["time/learn_s"] for r in rows])),
            "step_s": float(np.median([r["time/step_s"] for r in rows]))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=["full", "lora"], choices=sorted(ARMS))
    ap.add_argument("--workroot", default="runs/lora_quickstart")
    ap.add_argument("--steps", type=int, default=0, help="override train.num_steps (0: 1200)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "results", "lora_quickstart_cpu.md"))
    a = ap.parse_args()
    from rlvr.train import loop

    lines = ["| arm | seed | success warm-start | after RL | gain | trainable | learn s/step | "
             "step s/step |", "|---|---|---|---|---|---|---|---|"]
    gains = {}
    for arm in a.arms:
        frac = trainable_fraction(arm_config(arm, 0))
        for seed in a.seeds:
            wd = os.path.join(a.workroot, f"{arm}_s{seed}")
            if not os.path.exists(os.path.join(wd, "result.json")):
                loop.run(arm_config(arm, seed, a.steps), wd)
            s = summarize(wd)
            gain = s["after"] - s["before"]
            gains.setdefault(arm, []).append(gain)
            lines.append(f"| {arm} | {seed} | {s['before']:.3f} | {s['after']:.3f} | {gain:+.3f} | "
                         f"{frac:.1%} | {s['learn_s']:.3f} | {s['step_s']:.3f} |")
    summary = []
    if "full" in gains:
        full = float(np.mean(gains["full"]))
        for arm in gains:
            if arm != "full":
                summary.append(f"{arm}: mean gain {np.mean(gains[arm]):+.3f} = "
                               f"{np.mean(gains[arm]) / full:.0%} of full fine-tuning's "
                               f"({full:+.3f}); per seed "
                               + ", ".join(f"{g / f:.0%}" for g, f in zip(gains[arm], gains["full"])))
    text = "\n".join(["# LoRA vs full fine-tuning on the quickstart", "",
                      f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared); "
                      f"seeds {a.seeds}; times are medians over RL steps {SKIP + 1}+. Command: "
                      f"`python benchmarks/lora_quickstart.py {' '.join(sys.argv[1:])}`", ""]
                     + lines + [""] + summary)
    print(text)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
