"""Generation time under a long-tailed spread of stop lengths: the full decode loop, the
segmented loop (`decode_segments`) and the segmented loop with finished rows compacted out
(`compact_finished`); with `--group G >= 2` (batch / G prompts, G samples each) also the
segmented loop over a shared prompt cache (`shared_prefix`), with and without compaction.

Each row's stop length is drawn from a lognormal distribution (median `--median`, shape
`--sigma`), rounded up to >= 1 and capped at `--new-tokens`, and given to the sampler as the
row's budget (`max_new_tokens_per_row`); no stop tokens, so a row ends exactly at its drawn
length, as a trained policy's rows end at their EOS. The same draw is used by every mode at a
batch size. Random weights, temperature 1.

For every batch size the table gives min / median / max seconds of the whole `sample` call
(prefill + decode) per mode, the mean and max drawn length, and the ratio of the median time to
the median time of the full loop with every row's budget set to the max drawn length (the cost
when each row runs as long as the longest). Time tracking the mean length means that ratio
approaching mean / max.

CPU (default):   python benchmarks/decode_lengths.py --out benchmarks/results/decode_lengths_cpu.md
Shared prompt cache (CPU):  python benchmarks/decode_lengths.py --group 8 --batches 64 \
                     --prompt-len 128 --out benchmarks/results/decode_lengths_shared_cpu.md
GPU:             python benchmarks/decode_lengths.py --sizes qwen0.5b --vocab 0 --dtype bfloat16 \
                     --batches 64,256 --prompt-len 128 --new-tokens 512 --median 96
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import argparse  # noqa: E402
import datetime  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.model import SIZES, log, make_config, timed  # noqa: E402
from benchmarks.output import emit  # noqa: E402


def draw_lengths(rows: int, cap: int, median: float, sigma: float, seed: int) -> np.ndarray:
    """int32 [rows] lognormal stop lengths (median `median`, shape `sigma`) in [1, cap]."""
    rng = np.random.default_rng(seed)
    x = rng.lognormal(np.log(median), sigma, rows)
    return np.clip(np.ceil(x), 1, cap).astype(np.int32)


def fmt(times):
    return (f"{min(times):.3f} / {statistics.median(times):.3f} / {max(times):.3f}")


def rows_for(name, config, model, batch, args):
    from rlvr.rollout.sampler import SamplingParams, sample

    n, k, g = args.new_tokens, args.segments, args.group
    if batch % g:
        raise SystemExit(f"--batches must be multiples of --group={g}, got {batch}")
    toks = jax.random.randint(jax.random.key(1), (batch // g, args.prompt_len), 3,
                              config.vocab_size, jnp.int32)
    mask = jnp.ones_like(toks, bool)
    lengths = draw_lengths(batch, n, args.median, args.sigma, seed=batch)
    longest = np.full(batch, lengths.max(), np.int32)
    params = SamplingParams(temperature=1.0, max_new_tokens=n)
    key = jax.random.key(0)
    modes = (
        ("full, every row = max", longest, dict()),
        ("full", lengths, dict()),
        (f"segments ({k})", lengths, dict(decode_segments=k)),
        (f"compact ({k})", lengths, dict(decode_segments=k, compact_finished=True)),
    )
    if g > 1:
        modes += (
            (f"shared ({k})", lengths, dict(decode_segments=k, shared_prefix=True)),
            (f"shared + compact ({k})", lengths, dict(decode_segments=k, shared_prefix=True,
                                                      compact_finished=True)),
        )
    rows, base = [], None
    for label, budget, kw in modes:
        log(f"{name} batch {batch}: {label}")
        times, out = timed(lambda: sample(model, toks, mask, key, params, pad_id=0,
                                          num_samples=g, max_new_tokens_per_row=budget, **kw),
                           args.reps)
        got = np.asarray(out.lengths)
        if not np.array_equal(got, budget):
            raise AssertionError(f"{label}: rows did not end at their budgets")
        med = statistics.median(times)
        base = base or med
        rows.append(f"| {name} | {batch} | {label} | {got.mean():.1f} | {got.max()} | "
                    f"{fmt(times)} | {med / base:.2f} | {got.sum() / med:,.0f} |")
    return rows, float(lengths.mean()), int(lengths.max())


def run(args):
    from flax import nnx

    from rlvr.models import Transformer

    rows, notes = [], []
    for name in args.sizes.split(","):
        over = {"vocab_size": args.vocab} if args.vocab else {}
        config = make_config(name, dtype=args.dtype, **over)
        model = Transformer(config, rngs=nnx.Rngs(0))
        for batch in (int(b) for b in args.batches.split(",")):
            r, mean, longest = rows_for(name, config, model, batch, args)
            rows += r
            notes.append(f"{name} batch {batch}: mean / max drawn length = {mean:.1f} / "
                         f"{longest} = {mean / longest:.2f}")
    head = (f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
            f"{jax.devices()[0].device_kind} ({platform.machine()}, {os.cpu_count()} cores), "
            f"jax {jax.__version__}, dtype {args.dtype}, prompt {args.prompt_len}, "
            f"{args.group} sample(s) per prompt, "
            f"N = {args.new_tokens}, stop lengths lognormal(median {args.median}, sigma "
            f"{args.sigma}) capped at N, {args.reps} repeats; times are min / median / max "
            f"seconds of one `sample` call (prefill + decode); ratio = median time / median "
            f"time of the full loop with every row = max drawn length; tokens/s = generated "
            f"tokens / median time.")
    return "\n".join([head, "", "| size | batch | mode | mean length | max length | time (s) | "
                      "ratio | tokens/s |", "|---|---|---|---|---|---|---|---|", *rows, "",
                      *[f"- {n}" for n in notes]])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="small", help="comma list of benchmarks/model.py SIZES")
    ap.add_argument("--vocab", type=int, default=0, help="vocabulary override (0 = size's)")
    ap.add_argument("--batches", default="16,64")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--median", type=float, default=16.0, help="median drawn stop length")
    ap.add_argument("--sigma", type=float, default=1.0, help="lognormal shape (tail weight)")
    ap.add_argument("--segments", type=int, default=8, help="decode_segments of the segmented modes")
    ap.add_argument("--group", type=int, default=1,
                    help="samples per prompt G (num_samples); >= 2 adds the shared-cache modes")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if args.group < 1:
        raise SystemExit(f"--group must be >= 1, got {args.group}")
    if not all(s in SIZES for s in args.sizes.split(",")):
        raise SystemExit(f"--sizes must be names from {sorted(SIZES)}, got {args.sizes!r}")
    cmd = "python benchmarks/decode_lengths.py " + " ".join(sys.argv[1:])
    text = f"## Decode time under long-tailed stop lengths\n\n`{cmd.strip()}`\n\n{run(args)}\n"
    emit(text, args.out)


if __name__ == "__main__":
    main()
