"""Memory of full fine-tuning vs LoRA vs QLoRA policies.

    python benchmarks/lora_memory.py                         # TrainState bytes (any machine)
    python benchmarks/lora_memory.py --peak --shape qwen2.5-1.5b --budget-gib 16   # a GPU

Default (`state`): the bytes of the learner's TrainState (params, optimiser state, reference copy)
for Qwen2.5-0.5B and -1.5B shapes, built abstractly with jax.eval_shape (no weights, no device
memory): full fine-tuning (float32 params, AdamW, reference copy for KL) against LoRA and QLoRA
(rank 16 on every block projection, bfloat16 / int8 / nf4 frozen base, float32 adapters and
their AdamW moments, no reference copy: π_ref is the base with the adapters off). Writes
benchmarks/results/lora_memory_cpu.md.

`--peak` (needs a GPU): for each arm, random weights of the shape, one jitted GRPO learner step
(KL loss to the reference, remat) on B rows × T tokens with B = 1, 2, 4, ... until the step no
longer fits in `--budget-gib` (XLA's client memory fraction is set to budget / device memory);
prints the device's peak bytes in use per B and the largest B that fit. Writes
benchmarks/results/lora_memory_gpu.md.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.model_shapes import QWEN2_SIZES  # noqa: E402

SHAPES = {
    **QWEN2_SIZES,
    "tiny": dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                 num_kv_heads=2, head_dim=16, tie_word_embeddings=True, attention_bias=True,
                 architecture="qwen2", max_position_embeddings=32768),
}
# arm -> (param dtype, LoRA quantize or None for full fine-tuning)
ARMS = {"full f32 + KL": ("float32", None), "full bf16 + KL": ("bfloat16", None),
        "LoRA bf16 base + KL": ("bfloat16", "none"), "QLoRA int8 + KL": ("bfloat16", "int8"),
        "QLoRA nf4 + KL": ("bfloat16", "nf4")}
RANK = 16


def model_config(shape: str, param_dtype: str, dtype: str = "bfloat16"):
    from rlvr.models import ModelConfig

    return ModelConfig(**SHAPES[shape], dtype=dtype, param_dtype=param_dtype)


def build(shape, arm, *, remat=False):
    """(model, LoRAPolicy or None) for an arm."""
    from flax import nnx

    from rlvr.models import Transformer
    from rlvr.models import lora as L

    pdt, quant = ARMS[arm]
    model = Transformer(model_config(shape, pdt), rngs=nnx.Rngs(0), remat=remat)
    pol = None if quant is None else L.apply_lora(model, L.LoRAConfig(rank=RANK, quantize=quant))
    return model, pol


def state_table(shapes) -> str:
    import jax
    import optax
    from flax import nnx

    from rlvr.models import lora as L
    from rlvr.records.state import create_train_state

    lines = ["| shape | arm | params | optimiser state | reference copy | TrainState | vs full f32 | "
             "trainable |", "|---|---|---|---|---|---|---|---|"]
    for shape in shapes:
        full = None
        for arm in ARMS:
            def make():
                model, pol = build(shape, arm)
                _, p, _ = nnx.split(model, nnx.Param, ...)
                return create_train_state(p, optax.adamw(1e-5), seed=0,
                                          ref_params=None if pol else p,
                                          trainable=pol.trainable if pol else None)

            s = jax.eval_shape(make)
            total = L.tree_bytes(s)
            full = full or total
            counts = L.param_counts(s.params)
            frac = counts["fraction"] if ARMS[arm][1] is not None else 1.0
            g = 2 ** 30
            lines.append(f"| {shape} | {arm} | {L.tree_bytes(s.params) / g:.2f} GiB | "
                         f"{L.tree_bytes(s.opt_state) / g:.3f} GiB | "
                         f"{L.tree_bytes(s.ref_params) / g:.2f} GiB | {total / g:.2f} GiB | "
                         f"{total / full:.2f}× | {frac:.2%} |")
    return "\n".join(lines)


PEAK_ARMS = ("full bf16 + KL", "LoRA bf16 base + KL", "QLoRA nf4 + KL")


def peak_ladder(shape, arm, seq, max_rows) -> list:
    """[(rows, peak bytes or None)] for B = 2, 4, ... until a step does not fit (one process per
    arm: the device's peak counter never goes down)."""
    import dataclasses

    import jax
    import numpy as np
    import optax

    from rlvr.algorithms import AlgorithmSettings, get_algorithm
    from rlvr.core.kl import init_kl_controller
    from rlvr.records.batch import RolloutBatch
    from rlvr.records.state import create_train_state, split_model

    out, rows = [], 2
    while rows <= max_rows:
        try:
            model, pol = build(shape, arm, remat=True)
            graphdef, params, rest = split_model(model)
            settings = dataclasses.replace(AlgorithmSettings(name="grpo", group_size=2,
                                                             kl_mode="loss"))
            opt = optax.adamw(1e-5)
            algo = get_algorithm("grpo")(settings, policy_graphdef=graphdef, policy_rest=rest,
                                         optimizer=opt, lora=pol)
            state = create_train_state(params, opt, seed=0, ref_params=None if pol else params,
                                       kl_controller=init_kl_controller(0.05),
                                       trainable=pol.trainable if pol else None)
            del model, params
            rng = np.random.default_rng(0)
            t = seq
            tokens = rng.integers(0, SHAPES[shape]["vocab_size"], (rows, t)).astype(np.int32)
            mask = np.repeat((np.arange(t)[None] >= min(128, t // 2)).astype(np.float32), rows, 0)
            batch = RolloutBatch.create(
                tokens=tokens, loss_mask=mask, behavior_logprobs=-mask,
                rewards=rng.integers(0, 2, (rows,)).astype(np.float32),
                attention_mask=np.ones((rows, t), bool))
            state, m = jax.jit(algo.train_step, donate_argnums=0)(state, batch)
            jax.block_until_ready(m)
            out.append((rows, jax.devices()[0].memory_stats().get("peak_bytes_in_use", 0)))
            del state, algo
        except Exception as e:  # out of memory ends the ladder
            out.append((rows, None, str(e).splitlines()[0][:100]))
            break
        finally:
            jax.clear_caches()
        rows *= 2
    return out


def peak_table(shape, budget_gib, seq, max_rows) -> str:
    import json
    import subprocess

    lines = [f"Shape {shape}, T = {seq} tokens per row, one GRPO learner step with KL loss, remat, "
             f"XLA client memory limited to {budget_gib} GiB.", "",
             "| arm | rows B | peak bytes in use | fits |", "|---|---|---|---|"]
    largest = {}
    for arm in PEAK_ARMS:
        cmd = [sys.executable, os.path.abspath(__file__), "--peak", "--arm", arm, "--shape", shape,
               "--seq", str(seq), "--max-rows", str(max_rows), "--budget-gib", str(budget_gib)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        got = [json.loads(x[5:]) for x in res.stdout.splitlines() if x.startswith("PEAK ")]
        if not got:
            lines.append(f"| {arm} | — | — | failed: {res.stderr.strip().splitlines()[-1:]} |")
        for row in got:
            if row[1] is None:
                lines.append(f"| {arm} | {row[0]} | — | no ({row[2]}) |")
            else:
                lines.append(f"| {arm} | {row[0]} | {row[1] / 2**30:.2f} GiB | yes |")
                largest[arm] = row[0]
    lines += ["", "Largest B that fit: " + (", ".join(f"{k}: {v}" for k, v in largest.items())
                                            or "none")]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peak", action="store_true", help="measure peak device memory (GPU)")
    ap.add_argument("--shape", default="qwen2.5-1.5b", choices=sorted(SHAPES))
    ap.add_argument("--budget-gib", type=float, default=16.0)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--max-rows", type=int, default=256)
    ap.add_argument("--out", default=None)
    ap.add_argument("--arm", default=None, help=argparse.SUPPRESS)  # one peak ladder (subprocess)
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    if a.peak and a.arm:
        import json

        os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
        import jax

        total = jax.devices()[0].memory_stats()["bytes_limit"]
        if "XLA_PYTHON_CLIENT_MEM_FRACTION" not in os.environ:
            # must be set before the backend starts: re-exec with it
            frac = min(1.0, a.budget_gib * 2 ** 30 / total)
            os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{frac:.4f}"
            os.execv(sys.executable, [sys.executable] + sys.argv)
        for row in peak_ladder(a.shape, a.arm, a.seq, a.max_rows):
            print("PEAK " + json.dumps(row), flush=True)
        return
    if a.peak:
        import jax

        text = f"# LoRA memory, peak on {jax.devices()[0].device_kind}\n\n" + peak_table(
            a.shape, a.budget_gib, a.seq, a.max_rows)
        out = a.out or os.path.join(here, "results", "lora_memory_gpu.md")
    else:
        text = ("# LoRA memory: TrainState bytes (jax.eval_shape, no weights)\n\n"
                f"Rank {RANK} adapters on all 7 block projections; AdamW; KL on (full fine-tuning "
                "keeps a reference copy, LoRA uses the base with adapters off). nf4 counts half a "
                "byte per weight plus one float32 scale per 64 inputs.\n\n"
                + state_table(["qwen2.5-0.5b", "qwen2.5-1.5b"]))
        out = a.out or os.path.join(here, "results", "lora_memory_cpu.md")
    print(text)
    with open(out, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
