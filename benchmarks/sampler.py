"""Sampler benchmarks: one prefill per group (`sample(..., num_samples=G)`) against passing each
prompt G times, and the top-p fast path (threshold from the top-K logits) against a
full-vocabulary sort. Random weights; sampling at temperature 1 with no stop tokens, so every
row decodes `new_tokens` tokens. Prints markdown tables (min / median / max over repeats).

CPU (default):   python benchmarks/sampler.py --out benchmarks/results/sampler_cpu.md
GPU (one H200):  python benchmarks/sampler.py --gpu    (Qwen2-0.5B shape, bf16, prompt 1024,
                 G = 8; writes $OUT/sampler_gpu.md if OUT is set)

Top-p: random-weight logits are nearly flat, so at temperature 1 the 0.95 nucleus holds most of
the vocabulary and the full-sort branch runs; `--fit-temperature` (default 0.05) sharpens them
so the nucleus fits in the candidates, as for a trained model. The tables report the nucleus
size at the first decode step so the branch taken is visible.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import argparse  # noqa: E402
import datetime  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import traceback  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.model import SIZES, log, make_config, timed  # noqa: E402
from benchmarks.output import emit  # noqa: E402
from rlvr.rollout.sampler import filter_logits_by_sort  # noqa: E402


class use_filter:
    """Context: the sampler's `filter_logits` replaced by `fn` (compiled caches cleared so the
    jitted sampler retraces); counts the traces through `fn` to prove it was used."""

    def __init__(self, fn):
        self.fn, self.traces = fn, 0

    def __enter__(self):
        from rlvr.rollout import sampler

        self.saved = sampler.filter_logits

        def counted(*a, **kw):
            self.traces += 1
            return self.fn(*a, **kw)

        sampler.filter_logits = counted
        jax.clear_caches()
        return self

    def __exit__(self, *exc):
        from rlvr.rollout import sampler

        sampler.filter_logits = self.saved
        jax.clear_caches()


def fmt(times, scale=1.0, unit="s", digits=3):
    lo, med, hi = min(times) * scale, statistics.median(times) * scale, max(times) * scale
    return f"{lo:.{digits}f} / {med:.{digits}f} / {hi:.{digits}f} {unit}"


def tokens_per_s(times, out) -> str:
    """Generated tokens of a sampler output per second of its median time."""
    return f"{int(np.asarray(out.lengths).sum()) / statistics.median(times):,.0f}"


def timed_row(cells, fn, reps, measure, width: int) -> str:
    """A table row: `cells`, then the `width` cells `measure(times, out)` of timing `fn`; a
    failure is printed and written in place of the measurement (blank cells after it)."""
    try:
        times, out = timed(fn, reps)
        filled = list(measure(times, out))
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        filled = [f"failed: {e!r:.80}"] + [""] * (width - 1)
    return "| " + " | ".join(str(c) for c in [*cells, *filled]) + " |"


def prompts_for(config, u, p):
    toks = jax.random.randint(jax.random.key(1), (u, p), 3, config.vocab_size, jnp.int32)
    return toks, jnp.ones((u, p), bool)


# --------------------------------------------------------------------------- shared prefill
def shared_prefill_rows(name, config, model, args):
    from rlvr.rollout.sampler import SamplingParams, sample

    u, g, p, n = args.prompts, args.group, args.prompt_len, args.new_tokens
    toks, mask = prompts_for(config, u, p)
    rep_toks, rep_mask = jnp.repeat(toks, g, 0), jnp.repeat(mask, g, 0)
    params = SamplingParams(temperature=1.0, max_new_tokens=n)
    key = jax.random.key(0)
    rows = []
    for label, fn in (
            (f"each prompt {g}× ([{u * g}, {p}] prefill)",
             lambda: sample(model, rep_toks, rep_mask, key, params, pad_id=0)),
            (f"num_samples={g} ([{u}, {p}] prefill)",
             lambda: sample(model, toks, mask, key, params, pad_id=0, num_samples=g))):
        log(f"{name}: {label}")
        rows.append(timed_row([name, f"{u}×{g}", p, n, label], fn, args.reps,
                              lambda times, out: [fmt(times), tokens_per_s(times, out)], 2))
    return rows


# --------------------------------------------------------------------------- top-p decode
def nucleus_sizes(model, toks, mask, params):
    """Nucleus size of every row's first decode step (from a plain forward pass)."""
    from flax import nnx

    from rlvr.models import KVCache
    from rlvr.rollout.sampler import filter_logits

    graphdef, state = nnx.split(model)

    @jax.jit
    def last_logits(state, t, m):
        mdl = nnx.merge(graphdef, state)
        pos = jnp.where(m, jnp.cumsum(m, 1) - 1, 0).astype(jnp.int32)
        cache = KVCache.init(mdl.config, t.shape[0], t.shape[1])
        hidden, _ = mdl.forward_cached(t, pos, m, cache, 0)
        return mdl.project(hidden[:, -1]).astype(jnp.float32)

    z = filter_logits(last_logits(state, toks, mask), params)
    return np.asarray(jnp.sum(z > jnp.finfo(z.dtype).min, axis=-1))


def top_p_rows(name, config, model, args):
    from rlvr.rollout.sampler import NUCLEUS_CANDIDATES, SamplingParams, filter_logits, sample

    b, p, n = args.prompts * args.group, args.prompt_len, args.new_tokens
    toks, mask = prompts_for(config, b, p)
    key = jax.random.key(0)
    rows = []
    for temp in (args.fit_temperature, 1.0):
        params = SamplingParams(temperature=temp, top_p=args.top_p, max_new_tokens=n)
        try:
            sizes = nucleus_sizes(model, toks, mask, params)
            nuc = f"{int(sizes.min())}–{int(sizes.max())}"
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            nuc = f"failed: {e!r:.40}"
        for label, fn in (("full sort", filter_logits_by_sort),
                          (f"top-{NUCLEUS_CANDIDATES} candidates", filter_logits)):
            log(f"{name}: top-p {args.top_p}, temperature {temp}, {label}")
            try:
                with use_filter(fn) as used:
                    times, out = timed(
                        lambda: sample(model, toks, mask, key, params, pad_id=0), args.reps)
                assert used.traces > 0, "the sampler did not trace the filter under test"
                rows.append(f"| {name} | {b} | {p} | {n} | {temp} | {nuc} | {label} | "
                            f"{fmt(times)} | {tokens_per_s(times, out)} |")
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                rows.append(f"| {name} | {b} | {p} | {n} | {temp} | {nuc} | {label} | "
                            f"failed: {e!r:.80} | |")
    return rows


# --------------------------------------------------------------------------- choose step alone
def filter_step_rows(name, config, args):
    """filter + categorical on synthetic [B, V] logits: 'peaked' (8 tokens +20 above N(0, 1):
    nucleus fits the candidates) and 'flat' (N(0, 1): nucleus > candidates, full-sort branch)."""
    from rlvr.rollout.sampler import NUCLEUS_CANDIDATES, SamplingParams, filter_logits

    b, v = args.prompts * args.group, config.vocab_size
    params = SamplingParams(top_p=args.top_p)
    flat = jax.random.normal(jax.random.key(2), (b, v), jnp.float32)
    idx = jax.random.randint(jax.random.key(3), (b, 8), 0, v)
    peaked = flat.at[jnp.arange(b)[:, None], idx].add(20.0)
    keys = jax.random.split(jax.random.key(4), b)
    rows = []
    for kind, logits in (("peaked", peaked), ("flat", flat)):
        for label, filt in (("full sort", filter_logits_by_sort),
                            (f"top-{NUCLEUS_CANDIDATES} candidates", filter_logits)):
            step = jax.jit(lambda x, k, f=filt: jax.vmap(jax.random.categorical)(k, f(x, params)))
            log(f"{name}: filter step {kind} {label}")
            rows.append(timed_row([name, f"{b}×{v}", kind, label],
                                  lambda s=step, x=logits: s(x, keys), args.reps * 5,
                                  lambda times, _: [fmt(times, 1e3, "ms", 2)], 1))
    return rows


def run(args):
    from flax import nnx

    from rlvr.models import Transformer

    pre, topp, step = [], [], []
    for name in args.sizes.split(","):
        over = {"vocab_size": args.vocab} if args.vocab else {}
        config = make_config(name, dtype=args.dtype, **over)
        model = Transformer(config, rngs=nnx.Rngs(0))
        pre += shared_prefill_rows(name, config, model, args)
        topp += top_p_rows(name, config, model, args)
        step += filter_step_rows(name, config, args)
        del model
    head = (f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
            f"{jax.devices()[0].device_kind} ({platform.machine()}), jax {jax.__version__}, "
            f"dtype {args.dtype}, {args.reps} repeats (filter step: {args.reps * 5}); "
            f"times are min / median / max, tokens/s = generated tokens / median time.")
    return "\n".join([
        head, "",
        "### Shared prefill per group (temperature 1, no stop: all rows decode N tokens)", "",
        "| size | prompts×G | prompt | N | prompts passed | time (prefill + decode) | tokens/s |",
        "|---|---|---|---|---|---|---|", *pre, "",
        f"### Top-p {args.top_p} decode: full-vocabulary sort vs top-K candidates", "",
        "| size | batch | prompt | N | temperature | nucleus at step 0 | top-p filter | time | "
        "tokens/s |",
        "|---|---|---|---|---|---|---|---|---|", *topp, "",
        f"### Filter + categorical alone, top-p {args.top_p} (one decode step's choice)", "",
        "| size | B×V | logits | top-p filter | time |", "|---|---|---|---|---|", *step])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="small", help="comma list of benchmarks/model.py SIZES")
    ap.add_argument("--vocab", type=int, default=16384, help="vocabulary override (0 = size's)")
    ap.add_argument("--prompts", type=int, default=2, help="U unique prompts")
    ap.add_argument("--group", type=int, default=8, help="G samples per prompt")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=8)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--fit-temperature", type=float, default=0.05)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--gpu", action="store_true",
                    help="Qwen2-0.5B shape in bf16: 8 prompts × G 8, prompt 1024, 128 new tokens")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if args.gpu:
        args.sizes, args.vocab, args.dtype = "qwen0.5b", 0, "bfloat16"
        args.prompts, args.group, args.prompt_len, args.new_tokens = 8, 8, 1024, 128
        args.reps = max(args.reps, 5)
        if not args.out and os.environ.get("OUT"):
            args.out = os.path.join(os.environ["OUT"], "sampler_gpu.md")
    if args.sizes not in SIZES and not all(s in SIZES for s in args.sizes.split(",")):
        raise SystemExit(f"--sizes must be names from {sorted(SIZES)}, got {args.sizes!r}")
    cmd = "python benchmarks/sampler.py " + " ".join(sys.argv[1:])
    text = f"## Sampler: shared prefill and top-p\n\n`{cmd.strip()}`\n\n{run(args)}\n"
    emit(text, args.out)


if __name__ == "__main__":
    main()
