"""Throughput of a Hugging Face run (configs/gsm8k.py): one GRPO step end to end and its parts.

    python benchmarks/hf_train_loop.py [--steps 20] [--tasks gsm8k:builtin,code:builtin]
        [--out benchmarks/results/hf_train_loop_cpu.md]                     # CPU, tiny shape
    python benchmarks/hf_train_loop.py --size qwen2.5-0.5b --tasks gsm8k:builtin --steps 4
                                                                             # GPU

Builds a random Qwen2 checkpoint of the chosen shape with `rlvr.testing.build_checkpoint` (BPE
tokenizer with 2048 tokens and a chat template; at the Qwen2.5-0.5B shape the embedding is padded
to its 151,936 rows) — or, for the other families (qwen3-0.6b, qwen3-1.7b, gemma3-1b,
qwen3moe-small: `benchmarks/model_shapes.py`, run with the qwen2.5-0.5b settings), the same
tokenizer next to a random `rlvr.models` model of that shape — then runs `configs/gsm8k.py` on
each task file, prompts padded to one `--prompt-len` shape, sampling at temperature 1; held-out
evaluation and checkpoints off.

  tiny          2 layers, width 32; 4 prompts × 4 samples, ≤ 32 new tokens, float32, prompt 256.
                The numbers are the loop's own overheads around a toy model.
  qwen2.5-0.5b  24 layers, d 896; 64 prompts × 8 samples, prompt 256 + ≤ 512 new, bf16 compute
                with float32 master weights, remat, 4 minibatches × 4 microbatches (the
                no-grad π_old pass too runs 32 rows at a time). A random policy rarely samples
                a stop token, so nearly every sample runs the full 512: the longest step the
                settings allow.

Reports min / median / max over the steps after the first `--skip` (compilation excluded) of
samples/s, tokens/s (completion tokens), the generate / verify / learn seconds per step, and the
parts' sum as a share of the step (the rest is host time between them). Prints a markdown table
and writes it to --out (default: benchmarks/results/hf_train_loop_<backend>[_<size>].md, or
$OUT/ when set).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.model_shapes import FAMILY_SIZES, QWEN2_SIZES  # noqa: E402
from configs import gsm8k  # noqa: E402
from rlvr.testing import build_checkpoint, build_tokenizer  # noqa: E402
from rlvr.train import loop  # noqa: E402
from rlvr.train.metrics import read_metrics  # noqa: E402

_Q = QWEN2_SIZES["qwen2.5-0.5b"]
SIZES = {  # checkpoint shape (Hugging Face Qwen2Config fields) and the run's settings
    "tiny": dict(shape={}, prompts=4, group=4, prompt_len=256, new_tokens=32, dtype="float32",
                 remat=False, minibatches=1, microbatches=1),
    "qwen2.5-0.5b": dict(
        shape=dict(hidden_size=_Q["hidden_size"], intermediate_size=_Q["intermediate_size"],
                   num_hidden_layers=_Q["num_layers"], num_attention_heads=_Q["num_heads"],
                   num_key_value_heads=_Q["num_kv_heads"], tie_word_embeddings=True,
                   model_vocab_size=_Q["vocab_size"]),
        prompts=64, group=8, prompt_len=256, new_tokens=512, dtype="bfloat16", remat=True,
        minibatches=4, microbatches=4),
}
for _name, _kw in FAMILY_SIZES.items():  # rlvr.models.ModelConfig fields instead of a shape
    SIZES[_name] = dict(SIZES["qwen2.5-0.5b"], shape={}, model=_kw)
KEYS = ("throughput/samples_per_s", "throughput/tokens_per_s", "time/generate_s",
        "time/verify_s", "time/learn_s", "time/step_s")


def build_family_checkpoint(path: str, model_kw: dict, max_len: int) -> str:
    """`rlvr.testing.build_tokenizer`'s BPE tokenizer (ChatML template) next to a random
    `rlvr.models.Transformer` with `model_kw` (its vocabulary padded past the tokenizer's)."""
    import json

    from flax import nnx

    from rlvr.models import ModelConfig, Transformer, save_pretrained

    tok = build_tokenizer(path)
    kw = dict(model_kw, max_position_embeddings=max(model_kw.get("max_position_embeddings", 0),
                                                    max_len))
    save_pretrained(Transformer(ModelConfig(**kw), rngs=nnx.Rngs(0)), path)
    eos, eot = tok.convert_tokens_to_ids("<|endoftext|>"), tok.convert_tokens_to_ids("<|im_end|>")
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [eot, eos], "pad_token_id": eos}, f)
    return path


def run_one(checkpoint: str, task: str, steps: int, skip: int, s: dict) -> dict:
    c = gsm8k.get_config()
    c.model.init_from = checkpoint
    c.model.dtype, c.model.param_dtype, c.model.remat = s["dtype"], "float32", s["remat"]
    c.model.attention = s["attention"]
    c.model.max_seq_len = s["prompt_len"] + s["new_tokens"]
    c.rollout.prompt_bucket = s["prompt_len"]
    c.task.names = (task,)
    c.sampling.max_new_tokens, c.sampling.prompts_per_step = s["new_tokens"], s["prompts"]
    c.sampling.temperature = 1.0
    c.algorithm.group_size = s["group"]
    c.train.num_steps, c.train.progress = steps, False
    c.train.num_minibatches, c.train.num_microbatches = s["minibatches"], s["microbatches"]
    c.eval.num_tasks = 0
    c.checkpoint.every, c.checkpoint.export = -1, False
    c.logging.tensorboard = c.logging.plot = False
    c.logging.samples_every = 0
    with tempfile.TemporaryDirectory() as d:
        loop.run(c, d)
        rows = [r for r in read_metrics(d) if "time/step_s" in r][skip:]
    out = {k: [float(r[k]) for r in rows] for k in KEYS}
    parts = np.sum([out[k] for k in KEYS[2:5]], axis=0)
    out["share"] = list(parts / np.asarray(out["time/step_s"]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--size", default="tiny", choices=sorted(SIZES))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--skip", type=int, default=3, help="first steps excluded (compilation)")
    ap.add_argument("--tasks", default="gsm8k:builtin,code:builtin")
    ap.add_argument("--attention", default="xla", help="model.attention: xla | cudnn")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.steps <= args.skip:
        ap.error(f"--steps ({args.steps}) must exceed --skip ({args.skip})")
    s = dict(SIZES[args.size], attention=args.attention)
    shape = dict(s["shape"])
    if shape:
        shape["max_position_embeddings"] = max(1024, s["prompt_len"] + s["new_tokens"])
    with tempfile.TemporaryDirectory() as d:
        if "model" in s:
            ckpt = build_family_checkpoint(os.path.join(d, "checkpoint"), s["model"],
                                           s["prompt_len"] + s["new_tokens"])
        else:
            ckpt = build_checkpoint(os.path.join(d, "checkpoint"),
                                    saver="rlvr" if shape else "auto", **shape)
        res = {t: run_one(ckpt, t, args.steps, args.skip, s) for t in args.tasks.split(",")}
    fmt = lambda v, p: "/".join(f"{x:.{p}f}" for x in (min(v), np.median(v), max(v)))  # noqa: E731
    dev = jax.devices()[0]
    lines = [
        f"# Hugging Face run throughput ({args.size} checkpoint), {datetime.date.today().isoformat()}",
        "",
        f"Command: `python benchmarks/hf_train_loop.py {' '.join(sys.argv[1:])}`; machine: "
        f"{platform.machine()}, {os.cpu_count()} CPU cores, jax {jax.__version__}, backend "
        f"{jax.default_backend()} ({dev.device_kind}). `configs/gsm8k.py` with a random "
        f"checkpoint of the {args.size} shape, {s['prompts']} prompts × {s['group']} samples per "
        f"step, ≤ {s['new_tokens']} new tokens at temperature 1, chat-template prompts padded to "
        f"{s['prompt_len']} tokens, {s['dtype']} compute, remat {s['remat']}, attention "
        f"{s['attention']}, {s['minibatches']} minibatches × {s['microbatches']} microbatches. "
        f"min/median/max over steps {args.skip + 1}..{args.steps}; share = (generate + verify + "
        f"learn) / step.",
        "",
        "| task | samples/s | tokens/s | generate s | verify s | learn s | step s | share |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t, m in res.items():
        lines.append(f"| {t} | {fmt(m[KEYS[0]], 1)} | {fmt(m[KEYS[1]], 0)} | {fmt(m[KEYS[2]], 3)} | "
                     f"{fmt(m[KEYS[3]], 3)} | {fmt(m[KEYS[4]], 3)} | {fmt(m[KEYS[5]], 3)} | "
                     f"{fmt(m['share'], 3)} |")
    table = "\n".join(lines)
    print(table)
    out = args.out
    if out is None:
        name = f"hf_train_loop_{jax.default_backend()}" + ("" if args.size == "tiny" else f"_{args.size}")
        folder = os.environ.get("OUT") or os.path.join(os.path.dirname(__file__), "results")
        out = os.path.join(folder, name + ".md")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()
