"""Learner step time of full fine-tuning vs LoRA vs QLoRA (one jitted GRPO update, KL on).

    python benchmarks/lora_step.py [--repeats 20] [--out benchmarks/results/lora_step_cpu.md]

Two policy shapes: the quickstart's (2 layers, d 64, batch 256 × 12 tokens) and a larger one
(4 layers, d 256, batch 64 × 128 tokens). For each arm, one compile, then `--repeats` timed steps
on a fixed batch; prints min / median / max milliseconds and the trainable fraction. Full
fine-tuning keeps a reference copy for the KL term; LoRA (rank 8, every block projection) scores
the base with the adapters off.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

from rlvr.algorithms import AlgorithmSettings, get_algorithm  # noqa: E402
from rlvr.core.kl import init_kl_controller  # noqa: E402
from rlvr.models import ModelConfig, Transformer  # noqa: E402
from rlvr.models import lora as L  # noqa: E402
from rlvr.records.batch import RolloutBatch  # noqa: E402
from rlvr.records.state import create_train_state, split_model  # noqa: E402

SHAPES = {"quickstart (L2 d64, 256×12)": (dict(num_layers=2, hidden_size=64, intermediate_size=128,
                                                num_heads=4, num_kv_heads=4, head_dim=16), 256, 12),
          "larger (L4 d256, 64×128)": (dict(num_layers=4, hidden_size=256, intermediate_size=1024,
                                             num_heads=4, num_kv_heads=4, head_dim=64), 64, 128)}
ARMS = {"full": None, "LoRA r8": "none", "QLoRA int8 r8": "int8", "QLoRA nf4 r8": "nf4"}


def time_arm(shape, rows, seq, quant, repeats):
    cfg = ModelConfig(vocab_size=32, max_position_embeddings=256, **shape)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    pol = None if quant is None else L.apply_lora(model, L.LoRAConfig(rank=8, quantize=quant))
    graphdef, params, rest = split_model(model)
    opt = optax.adamw(1e-3)
    settings = dataclasses.replace(AlgorithmSettings(name="grpo", group_size=8, kl_mode="loss"))
    algo = get_algorithm("grpo")(settings, policy_graphdef=graphdef, policy_rest=rest,
                                 optimizer=opt, lora=pol)
    state = create_train_state(params, opt, seed=0, ref_params=None if pol else params,
                               kl_controller=init_kl_controller(0.05),
                               trainable=pol.trainable if pol else None)
    frac = L.param_counts(params)["fraction"] if pol else 1.0
    rng = np.random.default_rng(0)
    mask = np.repeat((np.arange(seq)[None] >= seq // 2).astype(np.float32), rows, 0)
    batch = RolloutBatch.create(tokens=rng.integers(3, 32, (rows, seq)).astype(np.int32),
                                loss_mask=mask, behavior_logprobs=-mask,
                                rewards=rng.integers(0, 2, (rows,)).astype(np.float32),
                                attention_mask=np.ones((rows, seq), bool))
    step = jax.jit(algo.train_step, donate_argnums=0)
    state, m = step(state, batch)
    jax.block_until_ready(m)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        state, m = step(state, batch)
        jax.block_until_ready(m)
        times.append(1e3 * (time.perf_counter() - t))
    return frac, times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "results", "lora_step_cpu.md"))
    a = ap.parse_args()
    lines = ["| shape | arm | trainable | min ms | median ms | max ms |", "|---|---|---|---|---|---|"]
    for name, (shape, rows, seq) in SHAPES.items():
        for arm, quant in ARMS.items():
            frac, t = time_arm(shape, rows, seq, quant, a.repeats)
            lines.append(f"| {name} | {arm} | {frac:.1%} | {min(t):.1f} | {np.median(t):.1f} | "
                         f"{max(t):.1f} |")
            print(lines[-1], flush=True)
    text = "\n".join([f"# Learner step time: full vs LoRA vs QLoRA ({jax.default_backend()})", "",
                      f"{platform.machine()}, {os.cpu_count()} cores (shared with other jobs: "
                      f"compare arms within one table, not across machines); {a.repeats} steps "
                      f"after one compile; GRPO with a KL loss term.", ""] + lines)
    print(text)
    with open(a.out, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
