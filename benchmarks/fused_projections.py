"""Separate vs fused q/k/v and gate/up kernels (`model.fused_projections`), timed side by side.

    python benchmarks/fused_projections.py                      # CPU: tiny shape, seconds
    python benchmarks/fused_projections.py --size qwen0.5b --dtype bfloat16 \\
        --batches 16,256 --prompt 128 --new-tokens 256 --train-size llama1b --train-batch 8 \\
        --train-seq 2048 --out fused.md                       # one accelerator

One process, one device. The fused model is the separate model's weights fused
(`rlvr.models.fused.fuse_model`), so both decode the same function: the table gives decode tokens
per second (greedy and temperature 1 + top-p 0.95, no stop tokens: every row runs
`--new-tokens` steps; min / median / max over `--repeats` timed calls after a compile call), the
share of greedy tokens on which the two agree (1.0 in float32; bf16 rounding may flip a near
tie), and, with `--train-size`, a fwd + bwd + AdamW train step (`benchmarks/model.py`'s
`train_step_bench`) of each layout. Device kind, JAX version and date head the table.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from benchmarks.model import decode_bench, log, make_config, spread, train_step_bench  # noqa: E402
from benchmarks.output import emit  # noqa: E402
from rlvr.models import Transformer  # noqa: E402
from rlvr.models.fused import fuse_model  # noqa: E402


def decode_rows(args) -> list:
    cfg = make_config(args.size, dtype=args.dtype)
    separate = Transformer(cfg, rngs=nnx.Rngs(0))
    models = {"separate": separate, "fused": fuse_model(separate)}
    rows = []
    for batch in [int(b) for b in args.batches.split(",")]:
        tokens = {}
        for mode in ("greedy", "sampled"):
            for layout, model in models.items():
                log(f"decode {args.size} batch {batch} {mode} {layout}")
                rates, _, _ = decode_bench(model.config, batch, args.prompt, args.new_tokens,
                                           model=model, mode=mode, repeats=args.repeats)
                rows.append(f"| decode {mode} | {batch} | {layout} | {spread(rates)} |")
        for layout, model in models.items():  # the greedy tokens of one more call, compared
            from rlvr.rollout.sampler import SamplingParams, sample

            prompts = jax.random.randint(jax.random.key(1), (batch, args.prompt), 3,
                                         cfg.vocab_size)
            out = sample(model, prompts, np.ones((batch, args.prompt), bool), jax.random.key(0),
                         SamplingParams(max_new_tokens=args.new_tokens, greedy=True), pad_id=0)
            tokens[layout] = np.asarray(out.tokens)
        agree = float(np.mean(tokens["separate"] == tokens["fused"]))
        rows.append(f"| greedy tokens equal | {batch} | fused vs separate | {agree:.4f} |")
    return rows


def train_rows(args) -> list:
    rows = []
    for layout in ("separate", "fused"):
        cfg = make_config(args.train_size, dtype=args.dtype, param_dtype="float32",
                          fused_projections=layout == "fused")
        log(f"train step {args.train_size} {layout}")
        tps, dt, mem, _ = train_step_bench(cfg, args.train_batch, args.train_seq, steps=3,
                                           remat=args.remat)
        rows.append(f"| train step {args.train_batch} × {args.train_seq} | — | {layout} | "
                    f"{tps:,.0f} tok/s ({dt * 1e3:.0f} ms/step, XLA memory {mem}) |")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--size", default="tiny", help="benchmarks/model.py SIZES name (decode)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--train-size", default="", help="SIZES name of a train step ('' = none)")
    ap.add_argument("--train-batch", type=int, default=8)
    ap.add_argument("--train-seq", type=int, default=2048)
    ap.add_argument("--remat", action="store_true", help="train step: rematerialise blocks")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    dev = jax.devices()[0]
    rows = decode_rows(args) + (train_rows(args) if args.train_size else [])
    lines = [f"`python benchmarks/fused_projections.py {' '.join(sys.argv[1:])}`: "
             f"{datetime.date.today()}, {dev.platform} {getattr(dev, 'device_kind', '')}, "
             f"jax {jax.__version__}; {args.size} {args.dtype}, prompt {args.prompt} + "
             f"{args.new_tokens} new.", "",
             "| program | batch | layout | tokens/s min / median / max |", "|---|---|---|---|",
             *rows]
    table = "\n".join(lines)
    emit(table, args.out)


if __name__ == "__main__":
    main()
