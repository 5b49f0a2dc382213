"""XLA's cost analysis of the compiled learner step and decode step: a proxy measurable on a CPU.

    python benchmarks/compiled_cost.py [--shapes small,qwen2.5-0.5b] [--out FILE]

For each shape it lowers and compiles, with abstract inputs only (`jax.ShapeDtypeStruct` from
`jax.eval_shape`: no weights are allocated), two programs and prints what XLA's
`cost_analysis()` and `memory_analysis()` report for them:

  learner step  `Algorithm.train_step` of GRPO (the program the training loop jits: the no-grad
                π_old pass when the settings need it, the advantages, then the learner's
                minibatch × micro-batch gradient steps through `rlvr.learner.make_update`).
  decode step   one iteration of the sampler's decode loop (`rlvr.rollout.sampler`): the choice of
                the next token from the last logits (greedy, or temperature + top-p), one cached
                forward of the new token and the LM head. `decode-top-p-bisect`: the same with
                the sort-free top-p threshold (`nucleus_threshold_bisect`) in place of the
                sampler's top-k / full-sort one.

Shapes:
  small         2 layers, d 64, vocab 512, fp32; 8 prompts × 4 samples, prompt 24 + 40 new;
                1 minibatch × 1 micro-batch (the quickstart's kind of run).
  qwen2.5-0.5b  `benchmarks/model_shapes.py` (24 layers, d 896, vocab 151,936), bf16 compute,
                fp32 master weights, remat; one group of 8 samples, prompt 256 + 512 new (the
                rows and lengths of benchmarks/hf_train_loop.py's GPU run, whose 64 groups cost
                64× these counts); decode at batch 256, prompt 128 + 256 (benchmarks/model.py's
                decode shape).

  learner-lengths  the learner's micro-steps over a batch with a long-tailed completion-length
                spread (`--rows` rows in micro-batches of `--micro-rows`, completion lengths
                drawn from a log-normal with median `--median-new` (default: a fifth of the limit) capped at the new-token
                limit, seed `--lengths-seed`): the padded path runs every micro-batch at the
                full width T; with `train.length_bucket` = `--bucket` (rows sorted by length,
                `rlvr.learner`) each runs at its longest row rounded up to the bucket. Each
                distinct width's micro-step (value and gradient of the GRPO loss over one
                micro-batch) is compiled once; the table gives Σ over micro-batches of its counts.

  shared-prompt-cache  one greedy decode step of U groups × G samples (U = 64 at the Qwen2
                shape: the 64 groups of 8 of hf_train_loop.py, prompt 256 + 512 new) with today's
                cache (each row's prompt repeated, [U·G, P + N] slots) and with one prompt cache
                per group plus per-row suffix caches ([U, P] + [U·G, N], `sample(shared_prefix=
                True)`); the printout adds each variant's decode KV-cache bytes.

  decode-segments  one greedy decode step attending to every cache slot, and the mean over the
                steps of a loop in `--decode-segments` parts whose attention reads only the
                slots written so far (`sample(decode_segments=k)`, `decode_windows`).

  logprob-head  the LM head + log-softmax + entropy alone at the learner step's rows (hidden
                states [rows, T, d] in the compute dtype, the fp32 LM head, the completion
                columns scored): value and gradient in hidden and head, and the forward alone,
                for each `train.logprob_impl` that runs on the CPU (chunked, vocab_tiled).

`--projections separate,fused` builds every program once per projection layout
(`ModelConfig.fused_projections`: one q/k/v and one gate/up kernel per layer, one matmul each)
and the table labels the rows with it. Each row also gives the compiled HLO's instruction counts:
`dot` (every matmul, inside fusions too) and `fusion` (the fused kernels the program launches).

XLA's cost analysis counts a loop body once, whatever its trip count. So the learner step is
measured as one optimiser step over one micro-batch (no learner loop) and every `lax.scan`
traced here is unrolled (the log-prob pass's scan over logits blocks), so the counts cover the
whole program; the decode step has no loop. Unrolled, XLA may schedule independent iterations
(e.g. the vocabulary tiles' matmuls) side by side, so temp bytes can exceed what the rolled loop
needs: `--rolled` keeps the loops and gives their memory figures (flops / bytes then count each
loop body once). The figures are the compiled programs' static
counts on the CPU backend: they compare programs before and after a change, not devices.
The learner step scores the completion columns only, as a single-turn training run does
(`--set completion_columns=0`: every column). `--set k=v` overrides an `AlgorithmSettings`
field of the learner step (e.g. `--set epochs=2`; a learner loop is then counted once).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

from benchmarks.model_shapes import QWEN2_SIZES  # noqa: E402
from benchmarks.output import emit  # noqa: E402
from rlvr.algorithms import AlgorithmSettings, get_algorithm  # noqa: E402
from rlvr.models import ModelConfig, Transformer  # noqa: E402
from rlvr.models.transformer import KVCache, jnp_dtype  # noqa: E402
from rlvr.records.batch import RolloutBatch  # noqa: E402
from rlvr.records.state import create_train_state, split_model  # noqa: E402
from rlvr.rollout import sampler as smp  # noqa: E402

_scan = jax.lax.scan


def _unrolled_scan(*args, **kwargs):
    """`jax.lax.scan` fully unrolled, so XLA's cost analysis counts every iteration."""
    kwargs["unroll"] = True
    return _scan(*args, **kwargs)


SHAPES = {
    "small": dict(model=dict(vocab_size=512, hidden_size=64, intermediate_size=256, num_layers=2,
                             num_heads=4, num_kv_heads=4, head_dim=16,
                             max_position_embeddings=512),
                  remat=False, prompts=8, prompts_decode=8, group=4, prompt_len=24,
                  new_tokens=40,
                  minibatches=1, microbatches=1, decode_batch=32, decode_prompt=24,
                  decode_new=40),
    "qwen2.5-0.5b": dict(model=dict(QWEN2_SIZES["qwen2.5-0.5b"], dtype="bfloat16",
                                    param_dtype="float32"),
                         remat=True, prompts=1, prompts_decode=64, group=8, prompt_len=256,
                         new_tokens=512,
                         minibatches=1, microbatches=1, decode_batch=256, decode_prompt=128,
                         decode_new=256),
}


def _abstract(tree):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)


def learner_program(shape: dict, overrides: dict):
    """(jitted GRPO train_step, abstract state, abstract RolloutBatch) at `shape`."""
    cfg = ModelConfig(**shape["model"])
    b = shape["prompts"] * shape["group"]
    t = shape["prompt_len"] + shape["new_tokens"]
    settings = dataclasses.replace(
        AlgorithmSettings(name="grpo", group_size=shape["group"], num_minibatches=shape["minibatches"],
                          num_microbatches=shape["microbatches"],
                          max_new_tokens=shape["new_tokens"],
                          completion_columns=shape["new_tokens"]), **overrides)
    opt = optax.adamw(1e-6)
    model = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0), remat=shape["remat"]))
    graphdef, params, rest = split_model(model)
    algo = get_algorithm("grpo")(settings, policy_graphdef=graphdef, policy_rest=rest,
                                 optimizer=opt)
    state = jax.eval_shape(lambda p: create_train_state(p, opt, seed=0), params)
    p = shape["prompt_len"]
    cols = np.arange(t)[None]
    loss_mask = np.broadcast_to(cols >= p, (b, t)).astype(np.float32)
    batch = RolloutBatch.create(tokens=np.ones((b, t), np.int32), loss_mask=loss_mask,
                                behavior_logprobs=np.zeros((b, t), np.float32),
                                rewards=np.zeros((b,), np.float32))
    return jax.jit(algo.train_step), state, _abstract(batch)


def head_program(shape: dict, impl: str, grad: bool = True):
    """(jitted LM head + log-softmax + entropy over the learner step's rows, its abstract
    arguments): Σ (log-probs + entropies) of the completion columns and, with `grad`, its
    gradient in the hidden states and the head (`rlvr.models.scoring.logprobs_from_hidden`)."""
    from rlvr.models.scoring import logprobs_from_hidden
    from rlvr.models.transformer import jnp_dtype

    cfg = ModelConfig(**shape["model"])
    b = shape["prompts"] * shape["group"]
    t = shape["prompt_len"] + shape["new_tokens"]
    S = jax.ShapeDtypeStruct
    dt = jnp_dtype(cfg.dtype)
    args = (S((b, t, cfg.hidden_size), dt), S((cfg.hidden_size, cfg.vocab_size), jnp.float32),
            S((b, t), jnp.int32), S((b, t), jnp.bool_))

    def value(h, w, tokens, mask):
        lp, ent = logprobs_from_hidden(h, w, tokens, mask, dtype=dt, impl=impl,
                                       start=shape["prompt_len"])
        return jnp.sum(lp) + jnp.sum(ent)

    fn = jax.value_and_grad(value, argnums=(0, 1)) if grad else value
    return (jax.jit(fn), *args)


def decode_program(shape: dict, sampling: smp.SamplingParams, bisect: bool = False,
                   kv_len=None):
    """(jitted decode step, its abstract arguments): one iteration of the sampler's loop body
    (kv_len: attention over the first kv_len cache slots only, `sample(decode_segments=...)`)."""
    cfg = ModelConfig(**shape["model"])
    model = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(model)
    b, p, n = shape["decode_batch"], shape["decode_prompt"], shape["decode_new"]
    stops = (0,)

    def step(state, cache, logits, keys, i, done, out_tok, out_lp, kv_mask, prompt_len):
        m = nnx.merge(graphdef, state)
        kv_mask = kv_mask.at[:, p + i].set(~done)
        tok, out_tok, out_lp, done = smp._decode_choice(
            logits, keys, i, sampling, done, out_tok, out_lp, pad_id=0,
            stops=jnp.asarray(stops, jnp.int32))
        hidden, cache = m.forward_cached(tok[:, None], (prompt_len + i)[:, None], kv_mask,
                                         cache, p + i, kv_len=kv_len)
        return cache, m.project(hidden[:, 0]), out_tok, out_lp, done, kv_mask

    cache = jax.eval_shape(lambda: KVCache.init(cfg, b, p + n))
    keys = jax.eval_shape(lambda: smp.per_sample_keys(jax.random.key(0), b))
    S = jax.ShapeDtypeStruct
    args = (state, cache, S((b, cfg.vocab_size), jnp.float32), keys, S((), jnp.int32),
            S((b,), jnp.bool_), S((b, n), jnp.int32), S((b, n), jnp.float32),
            S((b, p + n), jnp.bool_), S((b,), jnp.int32))
    fn = jax.jit(step)
    if bisect:  # the sort-free threshold in place of the top-k / full-sort one, while tracing
        def traced(*a):
            saved = smp.nucleus_threshold
            smp.nucleus_threshold = lambda z, top_p, candidates=0: smp.nucleus_threshold_bisect(
                z, top_p)
            try:
                return fn.lower(*a)
            finally:
                smp.nucleus_threshold = saved

        return (_Lowerable(traced), *args)
    return (fn, *args)


def long_tailed_lengths(rows: int, limit: int, median: float, seed: int) -> np.ndarray:
    """int [rows]: completion lengths, log-normal (σ 1) with this median, clipped to [1, limit]."""
    rng = np.random.default_rng(seed)
    return np.clip(np.round(rng.lognormal(np.log(median), 1.0, rows)), 1, limit).astype(int)


def micro_step_program(shape: dict, rows: int, width: int, overrides: dict):
    """(jitted value-and-gradient of the GRPO loss over one micro-batch [rows, width], its
    abstract arguments): the learner's micro-step (`rlvr.learner.accumulate_gradients`)."""
    from rlvr.learner import accumulate_gradients, batch_denominators
    from rlvr.records.batch import TrainingBatch

    cfg = ModelConfig(**shape["model"])
    n = shape["new_tokens"]
    settings = dataclasses.replace(
        AlgorithmSettings(name="grpo", group_size=shape["group"], max_new_tokens=n,
                          completion_columns=n), **overrides)
    model = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0), remat=shape["remat"]))
    graphdef, params, rest = split_model(model)
    algo = get_algorithm("grpo")(settings, policy_graphdef=graphdef, policy_rest=rest,
                                 optimizer=optax.adamw(1e-6))
    S = jax.ShapeDtypeStruct
    tok = lambda dt: S((rows, width), dt)  # noqa: E731
    mb = TrainingBatch(tokens=tok(jnp.int32), attention_mask=tok(jnp.bool_),
                       positions=tok(jnp.int32), loss_mask=tok(jnp.float32),
                       valid=S((rows,), jnp.bool_), behavior_logprobs=tok(jnp.float32),
                       advantages=S((rows,), jnp.float32))

    def step(params, mb):
        aux = {"kl_coef": jnp.zeros((), jnp.float32), **batch_denominators(mb)}
        loss, grads, _ = accumulate_gradients(graphdef, rest, algo.policy_loss, params, mb, aux, 1)
        return loss, grads

    return jax.jit(step), params, mb


def length_bucket_rows(shape: dict, args, overrides: dict) -> list:
    """Table rows (label, counts) of the `learner-lengths` program: padded vs length-bucketed."""
    from rlvr.learner import bucket_widths

    p, n = shape["prompt_len"], shape["new_tokens"]
    t = p + n
    median = args.median_new or n / 5
    lengths = np.sort(p + long_tailed_lengths(args.rows, n, median, args.lengths_seed))
    widths = bucket_widths(t, args.bucket)
    chosen = [next(w for w in widths if w >= m)
              for m in lengths.reshape(-1, args.micro_rows).max(axis=1)]
    counts = {}
    for w in sorted(set(chosen) | {t}):
        fn, *fargs = micro_step_program(shape, args.micro_rows, w, overrides)
        counts[w] = analyse(fn, *fargs)
    k = len(chosen)

    def total(ws, label):
        r = {key: (sum(counts[w][key] for w in ws) if counts[t][key] is not None else None)
             for key in ("flops", "bytes")}
        r.update(temp=max(counts[w]["temp"] or 0 for w in ws), args=counts[t]["args"],
                 compile_s=sum(c["compile_s"] for c in counts.values()), stage="compiled")
        return label, r

    spread = (f"{args.rows} rows, new-token lengths median {np.median(lengths) - p:.0f} / mean "
              f"{np.mean(lengths) - p:.0f} / max {np.max(lengths) - p}")
    print(f"learner-lengths: {spread}; micro-batch widths {chosen}", flush=True)
    return [total([t] * k, f"learner micro-steps, padded ({k} × T={t}; {spread})"),
            total(chosen, f"learner micro-steps, length_bucket={args.bucket} "
                          f"(widths {min(chosen)}–{max(chosen)}, mean {np.mean(chosen):.0f})")]


def decode_segment_rows(shape: dict, segments: int) -> list:
    """Table rows of the `decode-segments` program: one greedy decode step attending to every
    cache slot, and the step-weighted mean over the `decode_windows` parts of the loop."""
    p, n = shape["decode_prompt"], shape["decode_new"]
    sp = smp.SamplingParams(max_new_tokens=n, greedy=True)
    parts = smp.decode_windows(p, n, segments)
    full = analyse(*decode_program(shape, sp))
    per = [(end - first, analyse(*decode_program(shape, sp, kv_len=w))) for first, end, w in parts]
    mean = {k: sum(c * r[k] for c, r in per) / n for k in ("flops", "bytes")}
    mean.update(temp=max(r["temp"] for _, r in per), args=full["args"],
                compile_s=sum(r["compile_s"] for _, r in per), stage="compiled")
    widths = ", ".join(str(w) for _, _, w in parts)
    return [("decode step (greedy), every slot", full),
            (f"decode step (greedy), decode_segments={segments}: mean over steps "
             f"(windows {widths} of {p + n})", mean)]


def group_decode_program(shape: dict, shared: bool):
    """(jitted greedy decode step, its abstract arguments) of U = `prompts_decode` groups of G =
    `group` samples, prompt `prompt_len` + `new_tokens` new: shared=False, today's cache of every
    row's prompt repeated ([U*G, P + N] slots); shared=True, one [U, P] prompt cache per group
    and a [U*G, N] suffix cache (`sample(shared_prefix=True)`, `shared_prefix_attention`)."""
    cfg = ModelConfig(**shape["model"])
    model = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(model)
    u, g = shape["prompts_decode"], shape["group"]
    b, p, n = u * g, shape["prompt_len"], shape["new_tokens"]
    sampling = smp.SamplingParams(max_new_tokens=n, greedy=True)
    stops = jnp.asarray((0,), jnp.int32)

    def step(state, prefix, cache, logits, keys, i, done, out_tok, out_lp, kv_mask, prompt_len):
        m = nnx.merge(graphdef, state)
        kv_mask = kv_mask.at[:, p + i].set(~done)
        tok, out_tok, out_lp, done = smp._decode_choice(
            logits, keys, i, sampling, done, out_tok, out_lp, pad_id=0, stops=stops)
        pos = (prompt_len + i)[:, None]
        if shared:
            hidden, cache = m.forward_shared(tok[:, None], pos, prefix, kv_mask[::g, :p],
                                             kv_mask[:, p:], cache, i)
        else:
            hidden, cache = m.forward_cached(tok[:, None], pos, kv_mask, cache, p + i)
        return cache, m.project(hidden[:, 0]), out_tok, out_lp, done, kv_mask

    prefix = jax.eval_shape(lambda: KVCache.init(cfg, u, p)) if shared else None
    cache = jax.eval_shape(lambda: KVCache.init(cfg, b, n if shared else p + n))
    keys = jax.eval_shape(lambda: smp.per_sample_keys(jax.random.key(0), b))
    S = jax.ShapeDtypeStruct
    args = (state, prefix, cache, S((b, cfg.vocab_size), jnp.float32), keys, S((), jnp.int32),
            S((b,), jnp.bool_), S((b, n), jnp.int32), S((b, n), jnp.float32),
            S((b, p + n), jnp.bool_), S((b,), jnp.int32))
    return (jax.jit(step), *args)


def kv_cache_bytes(shape: dict, shared: bool) -> int:
    """Bytes of the decode KV cache (every layer's keys and values) of `group_decode_program`."""
    cfg = ModelConfig(**shape["model"])
    u, g, p, n = shape["prompts_decode"], shape["group"], shape["prompt_len"], shape["new_tokens"]
    slots = u * p + u * g * n if shared else u * g * (p + n)
    return (2 * cfg.num_layers * slots * cfg.num_kv_heads * cfg.head_dim
            * jnp.dtype(jnp_dtype(cfg.dtype)).itemsize)


def shared_cache_rows(shape: dict) -> list:
    """Table rows of the `shared-prompt-cache` program: today's repeated prompt cache and the
    shared one (`sample(shared_prefix=True)`), one greedy decode step each; `temp` is replaced
    by the decode KV cache's bytes (`kv_cache_bytes`)."""
    u, g = shape["prompts_decode"], shape["group"]
    out = []
    for shared, label in ((False, "repeated prompt cache"), (True, "shared prompt cache")):
        r = analyse(*group_decode_program(shape, shared))
        r["kv_cache"] = kv_cache_bytes(shape, shared)
        out.append((f"decode step (greedy), U={u} × G={g}, {label}", r))
    return out


class _Lowerable:
    """An object with `.lower(*args)` (what `analyse` calls)."""

    def __init__(self, lower):
        self.lower = lower


def analyse(fn, *args, compile_: bool = True) -> dict:
    """flops, bytes accessed (and temp / argument bytes when compiled) of `fn` at `args`."""
    t0 = time.perf_counter()
    lowered = fn.lower(*args)
    if not compile_:
        cost = lowered.cost_analysis() or {}
        return dict(flops=cost.get("flops"), bytes=cost.get("bytes accessed"), temp=None,
                    args=None, peak=None, compile_s=time.perf_counter() - t0, stage="lowered")
    compiled = lowered.compile()
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    cost = cost or {}
    mem = compiled.memory_analysis()
    dots, fusions = hlo_counts(compiled.as_text())
    return dict(flops=cost.get("flops"), bytes=cost.get("bytes accessed"),
                temp=getattr(mem, "temp_size_in_bytes", None),
                peak=getattr(mem, "peak_memory_in_bytes", None),
                args=getattr(mem, "argument_size_in_bytes", None), dots=dots, fusions=fusions,
                compile_s=time.perf_counter() - t0, stage="compiled")


def hlo_counts(hlo: str) -> tuple:
    """(dot instructions, fusion instructions) in a compiled module's HLO text: every `dot` of
    every computation (a matmul inside a fusion counts), and every `fusion` call (a kernel)."""
    dots = len(re.findall(r"=\s*[^=]*?\sdot\(", hlo))
    fusions = len(re.findall(r"=\s*[^=]*?\sfusion\(", hlo))
    return dots, fusions


def _print_row(name, label, r):
    print(f"{name:14s} {label:24s} flops {_fmt(r['flops'])}  bytes {_fmt(r['bytes'])}  "
          f"temp {_fmt(r['temp'])}  peak {_fmt(r.get('peak'))}  "
          f"dots {r.get('dots', '—')}  fusions {r.get('fusions', '—')}  "
          f"({r['stage']} in {r['compile_s']:.0f} s)", flush=True)


def _fmt(x):
    return "—" if x is None else f"{float(x):.4g}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shapes", default="small,qwen2.5-0.5b")
    ap.add_argument("--programs", default="learner,decode-greedy,decode-top-p",
                    help="comma list of learner, decode-greedy, decode-top-p, decode-top-p-bisect, "
                         "learner-lengths, decode-segments, logprob-head, shared-prompt-cache")
    ap.add_argument("--decode-segments", type=int, default=8,
                    help="decode-segments: parts of the decode loop")
    ap.add_argument("--rows", type=int, default=512, help="learner-lengths: rows of the batch")
    ap.add_argument("--micro-rows", type=int, default=16, help="learner-lengths: rows per micro-batch")
    ap.add_argument("--median-new", type=float, default=0.0,
                    help="learner-lengths: median completion length (0: a fifth of the limit)")
    ap.add_argument("--bucket", type=int, default=64, help="learner-lengths: train.length_bucket")
    ap.add_argument("--lengths-seed", type=int, default=0)
    ap.add_argument("--lower-only", action="store_true",
                    help="cost analysis of the lowered (unoptimised) programs, no compile")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="AlgorithmSettings override of the learner step (repeatable)")
    ap.add_argument("--projections", default="separate",
                    help="comma list of separate, fused (ModelConfig.fused_projections)")
    ap.add_argument("--rolled", action="store_true",
                    help="keep lax.scan loops rolled: the memory figures are then the loop's "
                         "(one iteration's buffers live at a time), while flops / bytes count "
                         "each loop body once")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    overrides = {}
    for kv in args.set:
        k, v = kv.split("=", 1)
        default = getattr(AlgorithmSettings(), k)
        overrides[k] = (v.lower() in ("1", "true", "yes")) if isinstance(default, bool) else type(default)(v)
    programs = args.programs.split(",")
    if not args.rolled:
        jax.lax.scan = _unrolled_scan
    rows = []
    layouts = args.projections.split(",")
    for layout in layouts:
        if layout not in ("separate", "fused"):
            ap.error(f"--projections: {layout!r} is not one of separate, fused")
    for name, layout in [(n, lay) for n in args.shapes.split(",") for lay in layouts]:
        shape = dict(SHAPES[name], model=dict(SHAPES[name]["model"],
                                              fused_projections=layout == "fused"))
        if len(layouts) > 1:
            name = f"{name} ({layout})"
        todo = []
        if "learner" in programs:
            todo.append(("learner step", lambda: learner_program(shape, overrides)))
        for prog, sp in (("decode-greedy", smp.SamplingParams(max_new_tokens=shape["decode_new"],
                                                               greedy=True)),
                         ("decode-top-p", smp.SamplingParams(max_new_tokens=shape["decode_new"],
                                                              temperature=1.0, top_p=0.95))):
            if prog in programs:
                todo.append((f"decode step ({prog[7:]})", lambda sp=sp: decode_program(shape, sp)))
        if "logprob-head" in programs:
            for impl in ("chunked", "vocab_tiled"):
                todo.append((f"LM head + log-softmax + entropy, value and gradient ({impl})",
                             lambda impl=impl: head_program(shape, impl)))
                todo.append((f"LM head + log-softmax + entropy, forward ({impl})",
                             lambda impl=impl: head_program(shape, impl, grad=False)))
        if "decode-top-p-bisect" in programs:
            sp = smp.SamplingParams(max_new_tokens=shape["decode_new"], temperature=1.0, top_p=0.95)
            todo.append(("decode step (top-p, bisection)",
                         lambda sp=sp: decode_program(shape, sp, bisect=True)))
        for label, build in todo:
            fn, *fargs = build()
            r = analyse(fn, *fargs, compile_=not args.lower_only)
            rows.append((name, label, r))
            _print_row(name, label, r)
        if "decode-segments" in programs:
            for label, r in decode_segment_rows(shape, args.decode_segments):
                rows.append((name, label, r))
                _print_row(name, label, r)
        if "shared-prompt-cache" in programs:
            for label, r in shared_cache_rows(shape):
                rows.append((name, label, r))
                _print_row(name, label, r)
                print(f"{'':14s} decode KV cache {_fmt(r['kv_cache'])} bytes", flush=True)
        if "learner-lengths" in programs:
            for label, r in length_bucket_rows(shape, args, overrides):
                rows.append((name, label, r))
                _print_row(name, label, r)
    lines = [f"Command: `python benchmarks/compiled_cost.py {' '.join(sys.argv[1:])}`; "
             f"{datetime.date.today()}, {platform.machine()} CPU backend, jax {jax.__version__}.",
             "",
             "| shape | program | flops | bytes accessed | temp bytes | argument bytes | peak bytes "
             "| dots | fusions |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, label, r in rows:
        lines.append(f"| {name} | {label} | {_fmt(r['flops'])} | {_fmt(r['bytes'])} | "
                     f"{_fmt(r['temp'])} | {_fmt(r['args'])} | {_fmt(r.get('peak'))} | "
                     f"{r.get('dots', '—')} | {r.get('fusions', '—')} |")
    table = "\n".join(lines)
    emit(table, args.out)


if __name__ == "__main__":
    main()
