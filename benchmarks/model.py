"""Model benchmarks: train-step tokens/s (forward + backward + AdamW) and the memory XLA plans for
it, sampler decode tokens/s; GPU suite adds transformers `generate` next to our sampler and
train-step MFU.

CPU (default):   python benchmarks/model.py --sizes tiny,small --out benchmarks/results/model_cpu.md
GPU (one H200):  python benchmarks/model.py --gpu-suite        (writes $OUT/model_gpu.md if OUT set)
Other families:  --gpu-train-size / --gpu-decode-size / --sizes take qwen3-0.6b, qwen3-1.7b,
                 gemma3-1b, qwen3moe-small (benchmarks/model_shapes.py; MFU counts a MoE's active
                 parameters).

No assertions: this prints markdown tables. Every measurement is wrapped in try/except so one
failure (e.g. out of memory, a missing torch) does not lose the rest; progress goes to stderr.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # PyTorch shares the GPU
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import datetime
import platform
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.model_shapes import FAMILY_SIZES, QWEN2_SIZES  # noqa: E402

T_START = time.time()

SIZES = {
    # name: (ModelConfig kwargs)
    "tiny": dict(vocab_size=256, hidden_size=128, intermediate_size=384, num_layers=2,
                 num_heads=4, num_kv_heads=2, head_dim=32),
    "small": dict(vocab_size=1024, hidden_size=256, intermediate_size=768, num_layers=4,
                  num_heads=8, num_kv_heads=4, head_dim=32),
    "qwen0.5b": QWEN2_SIZES["qwen2.5-0.5b"],  # Qwen2-0.5B shape (random weights)
    # Llama-3.2-1B shape: 16 layers, d 2048, 32 q / 8 kv heads, tied embeddings (1.24 B).
    "llama1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_layers=16,
                    num_heads=32, num_kv_heads=8, head_dim=64, tie_word_embeddings=True,
                    rope_theta=5e5, max_position_embeddings=131072),
    **FAMILY_SIZES,
}


def log(msg):
    print(f"[{time.time() - T_START:7.1f}s] {msg}", file=sys.stderr, flush=True)


def make_config(name, dtype="float32", param_dtype=None, **over):
    from rlvr.models import ModelConfig

    kw = dict(SIZES[name])
    kw.update(over)
    return ModelConfig(dtype=dtype, param_dtype=param_dtype or dtype, **kw)


def xla_memory_gb(compiled) -> str:
    """Device memory XLA plans for one call of a compiled function: its arguments, the outputs
    not aliased to (donated) arguments, and its temporaries."""
    try:
        m = compiled.memory_analysis()
        used = (m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
                + m.temp_size_in_bytes)
        return f"{used / 2**30:.2f}"
    except Exception:  # noqa: BLE001 (a backend without the analysis)
        return "n/a"


def peak_memory_gb():
    """The device's peak bytes in use since the process started (not per measurement)."""
    try:
        stats = jax.devices()[0].memory_stats() or {}
        peak = stats.get("peak_bytes_in_use")
        return f"{peak / 2**30:.2f}" if peak else "n/a"
    except Exception:
        return "n/a"


def block(x):
    jax.tree.map(lambda a: a.block_until_ready() if hasattr(a, "block_until_ready") else a, x)
    return x


def timed(fn, reps):
    """fn() once to compile, then `reps` timed calls: (list of seconds, last output)."""
    out = block(fn())
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = block(fn())
        times.append(time.perf_counter() - t0)
    return times, out


# --------------------------------------------------------------------------- train step
def train_step_bench(config, batch, seq, steps=3, remat=False):
    """Returns (tokens/s, seconds/step, XLA memory GB, N params active per token). Step = fwd +
    bwd + AdamW."""
    import optax
    from flax import nnx

    from rlvr.models import Transformer
    from rlvr.models.scoring import token_logprobs

    model = Transformer(config, rngs=nnx.Rngs(0), remat=remat)
    graphdef, params = nnx.split(model, nnx.Param)
    # a MoE model runs k of its E experts per token: FLOPs follow the active parameters
    n_params = (sum(x.size for x in jax.tree.leaves(params))
                - (config.num_params() - config.num_active_params()))
    tx = optax.adamw(1e-5)
    opt_state = tx.init(params)
    tokens = jax.random.randint(jax.random.key(0), (batch, seq), 0, config.vocab_size, jnp.int32)

    def loss_fn(p, toks):
        lp, _ = token_logprobs(nnx.merge(graphdef, p), toks, chunk_size=512)
        return -jnp.mean(lp)

    @jax.jit
    def step(p, o, toks):
        loss, g = jax.value_and_grad(loss_fn)(p, toks)
        upd, o = tx.update(g, o, p)
        return optax.apply_updates(p, upd), o, loss

    t0 = time.time()
    step = jax.jit(step.__wrapped__, donate_argnums=(0, 1)).lower(params, opt_state, tokens).compile()
    mem = xla_memory_gb(step)
    params, opt_state, loss = block(step(params, opt_state, tokens))
    log(f"  compile+first step {time.time() - t0:.1f}s (loss {float(loss):.3f})")
    params, opt_state, loss = block(step(params, opt_state, tokens))
    t0 = time.time()
    for _ in range(steps):
        params, opt_state, loss = step(params, opt_state, tokens)
    block(loss)
    dt = (time.time() - t0) / steps
    return batch * seq / dt, dt, mem, n_params


# --------------------------------------------------------------------------- decode
DECODE_MODES = {
    "greedy": dict(greedy=True),
    "sampled": dict(temperature=1.0, top_p=0.95),   # RL-style: temperature 1, nucleus 0.95
}


def decode_bench(config, batch, prompt_len, new_tokens, model=None, mode="greedy", repeats=1):
    """Our jitted sampler, no stop tokens (all rows run N steps), `mode` one of DECODE_MODES.

    Returns (tokens/s per timed call [repeats], seconds of the last call, model)."""
    from flax import nnx

    from rlvr.models import Transformer
    from rlvr.rollout.sampler import SamplingParams, sample

    if model is None:
        model = Transformer(config, rngs=nnx.Rngs(0))
    prompts = jax.random.randint(jax.random.key(1), (batch, prompt_len), 3, config.vocab_size,
                                 jnp.int32)
    mask = jnp.ones((batch, prompt_len), bool)
    params = SamplingParams(max_new_tokens=new_tokens, **DECODE_MODES[mode])
    t0 = time.time()
    out = block(sample(model, prompts, mask, jax.random.key(0), params, pad_id=0))
    log(f"  compile+first decode {time.time() - t0:.1f}s")
    rates = []
    for r in range(repeats):
        t0 = time.time()
        out = block(sample(model, prompts, mask, jax.random.key(1 + r), params, pad_id=0))
        dt = time.time() - t0
        rates.append(int(np.asarray(out.lengths).sum()) / dt)
    return rates, dt, model


def spread(rates) -> str:
    """min / median / max of a list of rates."""
    v = np.asarray(rates, float)
    return " / ".join(f"{x:,.0f}" for x in (v.min(), np.median(v), v.max()))


# --------------------------------------------------------------------------- suites
def cpu_suite(args):
    rows_train, rows_dec = [], []
    for name in args.sizes.split(","):
        cfg = make_config(name, dtype=args.dtype)
        log(f"{name}: train step batch {args.train_batch} x {args.seq}")
        try:
            tps, dt, mem, n = train_step_bench(cfg, args.train_batch, args.seq)
            rows_train.append(f"| {name} | {n / 1e6:.2f} M | {args.train_batch}×{args.seq} | "
                              f"{dt * 1e3:.0f} ms | {tps:,.0f} | {mem} |")
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            rows_train.append(f"| {name} | | {args.train_batch}×{args.seq} | failed: {e!r:.80} | | |")
        model = None
        for b in [int(x) for x in args.decode_batches.split(",")]:
            log(f"{name}: decode batch {b}, prompt {args.prompt}, new {args.new_tokens}")
            try:
                rates, dt, model = decode_bench(cfg, b, args.prompt, args.new_tokens, model)
                rows_dec.append(f"| {name} | {b} | {args.prompt} | {args.new_tokens} | "
                                f"{dt:.2f} s | {rates[0]:,.0f} | {peak_memory_gb()} |")
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                rows_dec.append(f"| {name} | {b} | {args.prompt} | {args.new_tokens} | "
                                f"failed: {e!r:.80} | | |")
    return "\n".join([
        "### Train step (forward + backward + AdamW, fp32)", "",
        "| size | params | batch×seq | time/step | tokens/s | XLA memory GB |",
        "|---|---|---|---|---|---|", *rows_train, "",
        "### Sampler decode (greedy, KV cache, no early stop)", "",
        "| size | batch | prompt | new tokens | time | tokens/s | process peak GB so far |",
        "|---|---|---|---|---|---|---|", *rows_dec])


# dense (no sparsity) bf16 tensor-core peaks, TFLOP/s, by device kind substring
DENSE_BF16_PEAK_TFLOPS = (("H200", 989.0), ("H100", 989.0), ("A100", 312.0))


def dense_bf16_peak_tflops(device):
    """The device's dense bf16 peak in TFLOP/s from its device kind, None when unknown."""
    kind = str(getattr(device, "device_kind", ""))
    return next((v for k, v in DENSE_BF16_PEAK_TFLOPS if k in kind), None)


def matmul_tflops(n=8192, iters=10):
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.bfloat16)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.bfloat16)
    f = jax.jit(lambda x, y: x @ y)
    block(f(a, b))
    t0 = time.time()
    for _ in range(iters):
        c = f(a, b)
    block(c)
    return 2 * n ** 3 * iters / (time.time() - t0) / 1e12


HF_MODES = ("eager", "static")


def hf_generate_bench(config, batch, prompt_len, new_tokens, model_cache, device="cuda",
                      mode="eager", repeats=1):
    """transformers `generate`, greedy, sdpa attention. mode "eager": the default dynamic cache;
    "static": a static KV cache, which makes `generate` compile the decode step with
    `torch.compile` (the fair baseline: no per-token Python/eager overhead). The warm-up call
    runs the full length so compilation is not timed. Returns (tokens/s [repeats], seconds)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if "model" not in model_cache:
        hf_cfg = AutoConfig.for_model(**config.to_hf())
        torch.manual_seed(0)
        m = AutoModelForCausalLM.from_config(hf_cfg, dtype=torch.bfloat16,
                                             attn_implementation="sdpa")
        model_cache["model"] = m.to(device).eval()
    m = model_cache["model"]
    ids = torch.randint(3, config.vocab_size, (batch, prompt_len), device=device)
    kw = dict(do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
              pad_token_id=0, eos_token_id=None)
    if mode == "static":
        kw["cache_implementation"] = "static"

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    rates = []
    with torch.no_grad():
        t0 = time.time()
        m.generate(ids, **(kw if mode == "static" else dict(kw, max_new_tokens=4, min_new_tokens=4)))
        sync()
        log(f"  transformers {mode} warm-up {time.time() - t0:.1f}s")
        for _ in range(repeats):
            t0 = time.time()
            out = m.generate(ids, **kw)
            sync()
            dt = time.time() - t0
            rates.append(batch * (out.shape[1] - prompt_len) / dt)
    return rates, dt


def gpu_suite(args):
    budget = args.budget_s
    lines = [f"Device: {jax.devices()[0].device_kind}; jax {jax.__version__}"]
    try:
        import flax
        lines[-1] += f", flax {flax.__version__}"
    except Exception:
        pass
    try:
        import torch
        import transformers
        lines[-1] += f", torch {torch.__version__}, transformers {transformers.__version__}"
    except Exception:
        lines[-1] += ", torch/transformers unavailable"
    lines.append("")

    def over(frac=1.0):
        return time.time() - T_START > budget * frac

    # 1) measured bf16 matmul rate; MFU is reported against the device's dense bf16 peak (989
    # TFLOP/s on H100 SXM / H200) and, for comparison with earlier tables, against 790 TFLOP/s
    peak = 790.0
    dense_peak = dense_bf16_peak_tflops(jax.devices()[0])
    mm = None
    try:
        log(f"matmul {args.matmul_n}^3 bf16")
        mm = matmul_tflops(args.matmul_n)
        log(f"  {mm:.0f} TFLOP/s")
    except Exception:
        traceback.print_exc()
    lines.append(f"bf16 {args.matmul_n}³ matmul: {mm:.1f} TFLOP/s" if mm else "bf16 matmul: failed")
    lines.append("")

    # 2) train step MFU, ~1B (Llama-3.2-1B shape), params fp32, compute bf16
    train_rows = []
    cudnn_mask = {"attention_impl": "cudnn", "attention_layout": "mask"}
    for label, over_kw, remat in (("cudnn attention, causal + lengths, no remat",
                                   {"attention_impl": "cudnn"}, False),
                                  ("cudnn attention, causal + lengths, remat",
                                   {"attention_impl": "cudnn"}, True),
                                  ("cudnn attention, dense mask, remat", cudnn_mask, True),
                                  ("xla attention, remat", {}, True)):
        if over(0.55):
            train_rows.append(f"| {label} | skipped (time budget) | | | | | |")
            continue
        try:
            cfg = make_config(args.gpu_train_size, dtype="bfloat16", param_dtype="float32",
                              **over_kw)
            log(f"train step {args.gpu_train_size} {label}, batch {args.gpu_train_batch} x {args.gpu_train_seq}")
            tps, dt, mem, n = train_step_bench(cfg, args.gpu_train_batch, args.gpu_train_seq,
                                               steps=5, remat=remat)
            flops = 6 * n * tps / 1e12
            mfu_mm = f"{100 * flops / mm:.1f} %" if mm else "n/a"
            mfu_dense = f"{100 * flops / dense_peak:.1f} %" if dense_peak else "n/a"
            train_rows.append(f"| {label} ({n / 1e9:.2f} B) | {dt * 1e3:.0f} ms | {tps:,.0f} | "
                              f"{mfu_dense} | {100 * flops / peak:.1f} % | {mfu_mm} | {mem} |")
            log(f"  {tps:,.0f} tok/s, MFU {mfu_dense} of {dense_peak}, "
                f"{100 * flops / peak:.1f} % of 790")
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            train_rows.append(f"| {label} | failed: {e!r:.120} | | | | | |")
    lines += [f"### Train step, {args.gpu_train_size} shape, batch {args.gpu_train_batch} × "
              f"{args.gpu_train_seq}, fwd + bwd + AdamW (6·N FLOPs/token)", "",
              f"| variant | time/step | tokens/s | MFU vs dense bf16 peak ({dense_peak} TFLOP/s) "
              "| MFU vs 790 TFLOP/s | MFU vs measured matmul | XLA memory GB |",
              "|---|---|---|---|---|---|---|", *train_rows, ""]

    # 3) decode: ours (greedy, sampled) vs transformers generate (eager, static + compile)
    cfg = make_config(args.gpu_decode_size, dtype="bfloat16")
    batches = [int(x) for x in args.gpu_decode_batches.split(",")]
    cells = {}
    model = None
    for b in batches:
        for mode in DECODE_MODES:
            if over(0.7):
                cells[b, mode] = "skipped (time)"
                continue
            try:
                log(f"our sampler {args.gpu_decode_size} batch {b} {mode}")
                rates, dt, model = decode_bench(cfg, b, args.gpu_prompt, args.gpu_new_tokens,
                                                model, mode=mode, repeats=args.repeats)
                cells[b, mode] = spread(rates)
                log(f"  {cells[b, mode]} tok/s")
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                cells[b, mode] = f"failed: {e!r:.60}"
    del model
    cache = {}
    for mode in HF_MODES:
        for b in batches:
            if over(0.9):
                cells[b, "hf " + mode] = "skipped (time)"
                continue
            try:
                log(f"transformers generate {mode} {args.gpu_decode_size} batch {b}")
                import torch

                dev = "cuda" if torch.cuda.is_available() else "cpu"
                rates, dt = hf_generate_bench(cfg, b, args.gpu_prompt, args.gpu_new_tokens, cache,
                                              dev, mode=mode, repeats=args.repeats)
                cells[b, "hf " + mode] = spread(rates)
                log(f"  {cells[b, 'hf ' + mode]} tok/s")
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                cells[b, "hf " + mode] = f"failed: {e!r:.60}"
    cols = list(DECODE_MODES) + ["hf " + m for m in HF_MODES]
    lines += [f"### Decode, {args.gpu_decode_size} shape (random init), bf16, prompt {args.gpu_prompt}, "
              f"{args.gpu_new_tokens} new tokens, tokens/s min / median / max of {args.repeats}", "",
              "rlvr greedy | rlvr sampled = temperature 1 + top-p 0.95 | transformers `generate` "
              "greedy (sdpa): eager dynamic cache | static cache + torch.compile", "",
              "| batch | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols),
              *[f"| {b} | " + " | ".join(cells.get((b, c), "") for c in cols) + " |"
                for b in batches], ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="tiny,small", help=f"comma list of {list(SIZES)}")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--train-batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--decode-batches", default="1,8,32")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--gpu-suite", "--device-suite", dest="gpu_suite", action="store_true",
                    help="H200 suite: MFU of a ~1B train step, decode vs transformers generate")
    ap.add_argument("--gpu-train-size", default="llama1b", help="GPU suite train-step model")
    ap.add_argument("--gpu-decode-size", default="qwen0.5b", help="GPU suite decode model")
    ap.add_argument("--matmul-n", type=int, default=8192)
    ap.add_argument("--gpu-train-batch", type=int, default=8)
    ap.add_argument("--gpu-train-seq", type=int, default=2048)
    ap.add_argument("--gpu-decode-batches", default="16,256")
    ap.add_argument("--gpu-prompt", type=int, default=128)
    ap.add_argument("--gpu-new-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3, help="GPU suite: timed decode calls")
    ap.add_argument("--budget-s", type=float, default=420.0,
                    help="GPU suite: later measurements are skipped past this wall time")
    ap.add_argument("--out", default=None, help="write the markdown here too")
    args = ap.parse_args()

    head = (f"## rlvr model benchmark — {datetime.date.today().isoformat()}\n\n"
            f"Backend {jax.default_backend()} ({jax.devices()[0].device_kind}, "
            f"{jax.device_count()} device(s)), jax {jax.__version__}, "
            f"python {platform.python_version()}, {os.cpu_count()} CPU cores.\n")
    body = gpu_suite(args) if args.gpu_suite else cpu_suite(args)
    text = head + "\n" + body + "\n"
    print(text, flush=True)
    out = args.out
    if out is None and args.gpu_suite and os.environ.get("OUT"):
        out = os.path.join(os.environ["OUT"], "model_gpu.md")
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            f.write(text)
        log(f"wrote {out}")


if __name__ == "__main__":
    main()
