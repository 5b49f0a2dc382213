"""Speed of rlvr.core ops against straightforward numpy implementations of the same functions.

Times per call (min / median / max of --repeats, after compile and a warm-up call,
`block_until_ready`) for
  - GAE, every form (`lax.scan`, `lax.associative_scan`, the closed-form "blocked") x
    skip-observation on/off,
  - ppo_token_loss (token-mean) and sequence_clip_loss (PivotRL turn-level),
at a few [B, T] sizes on multi-turn masks (prompt, action/observation blocks, padding), next to a
numpy implementation on the same inputs (GAE: a reverse loop over tokens vectorised over the
batch; losses: vectorised numpy). `numpy/jax` > 1 means JAX is faster (from the JAX min).
`max abs diff` checks that both compute the same numbers.

Next to the times, three proxies read from the compiled program on the backend that ran, which
need no accelerator to compare forms: `HLO ops` = instructions in the optimised HLO module (all
computations, fusion bodies included); `top-level ops` = instructions of its entry computation
other than parameters, constants, bitcasts and tuples (roughly the kernels launched per call;
"+loop" marks a while loop whose body runs once per token); `HLO MB` = XLA's cost-analysis
estimate of bytes accessed (a while body counted once).

Runs unchanged on CPU, GPU or TPU (whatever `jax.default_backend()` is):
  python benchmarks/core_ops.py --sizes 64x1024,256x2048,1024x8192 --repeats 5 \
      --out benchmarks/results/core_ops_<backend>.md
and, to choose the block length of method="blocked" on an accelerator (the default is 256 tokens):
  python benchmarks/core_ops.py --sizes 1024x8192 \
      --methods associative,blocked:64,blocked:128,blocked:256,blocked:512
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402

from rlvr.core.gae import GAE_METHODS, gae  # noqa: E402
from rlvr.core.losses import ppo_token_loss, sequence_clip_loss  # noqa: E402

GAMMA, LAM = 1.0, 0.95
METHODS = tuple(m for m in GAE_METHODS if m != "auto")


def make_inputs(batch, length, seed=0):
    """Multi-turn loss masks (vectorised over rows), rewards on the last policy token, values."""
    rng = np.random.default_rng(seed)
    t = np.arange(length)
    prompt = rng.integers(8, max(9, length // 16), batch)[:, None]
    end = length - rng.integers(0, max(1, length // 8), batch)[:, None]
    period = rng.integers(16, 64, batch)[:, None]  # action + observation block length per row
    act = (period * rng.uniform(0.3, 0.7, (batch, 1))).astype(int)
    mask = ((t >= prompt) & (t < end) & (((t - prompt) % period) < act)).astype(np.float32)
    last = np.max(np.where(mask > 0, t, -1), axis=1)
    rewards = np.zeros((batch, length), np.float32)
    rows = np.nonzero(last >= 0)[0]
    rewards[rows, last[rows]] = rng.integers(0, 2, rows.size).astype(np.float32)
    values = rng.normal(size=(batch, length)).astype(np.float32) * 0.1
    old = (-rng.random((batch, length)) * 2).astype(np.float32)
    logp = (old + rng.normal(size=(batch, length)) * 0.1).astype(np.float32)
    # Whole-action ratios exp(Σ_t Δlogp) stay O(1) only for small per-token changes.
    logp_seq = (old + rng.normal(size=(batch, length)) * (0.2 / np.sqrt(length))).astype(np.float32)
    adv = rng.normal(size=(batch,)).astype(np.float32)
    return dict(mask=mask, rewards=rewards, values=values, old=old, logp=logp, logp_seq=logp_seq, adv=adv)


# ---------------- straightforward numpy implementations ----------------

def np_gae(rewards, values, mask, skip):
    b, length = mask.shape
    step = mask > 0
    if not skip:
        idx = np.arange(length)
        last = np.max(np.where(step, idx, -1), axis=1, keepdims=True)
        step = idx <= last
    next_v = np.zeros(b, np.float32)
    next_a = np.zeros(b, np.float32)
    adv = np.zeros((b, length), np.float32)
    for t in range(length - 1, -1, -1):
        m = step[:, t]
        v = values[:, t]
        delta = rewards[:, t] + GAMMA * next_v - v
        a = delta + GAMMA * LAM * next_a
        adv[:, t] = np.where(m, a, 0)
        next_v = np.where(m, v, next_v)
        next_a = np.where(m, a, next_a)
    pol = mask > 0
    return np.where(pol, adv, 0), np.where(pol, adv + values, 0)


def np_ppo(logp, old, adv, mask, eps=0.2):
    m = mask > 0
    ratio = np.exp(np.where(m, logp - old, 0))
    a = adv[:, None]
    per = np.maximum(-a * ratio, -a * np.clip(ratio, 1 - eps, 1 + eps))
    return np.sum(per * m) / max(np.sum(m), 1)


def np_seq(logp, old, adv, mask, eps=0.2):
    m = mask > 0
    r = np.exp(np.sum(np.where(m, logp - old, 0), axis=1))
    obj = np.minimum(r * adv, np.clip(r, 1 - eps, 1 + eps) * adv)
    keep = m.any(axis=1)
    return -np.sum(obj * keep) / max(keep.sum(), 1)


# ---------------- timing ----------------

def time_fn(fn, repeats):
    """All `repeats` timed calls (seconds) after compile + warm-up, and the last output."""
    for _ in range(2):  # compile + warm-up
        out = fn()
        jax.block_until_ready(out)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        jax.block_until_ready(out)
        times.append(time.perf_counter() - t0)
    return times, out


_OPCODE = re.compile(r"\b([a-z][\w-]*)\(")
_NOT_KERNELS = {"parameter", "constant", "bitcast", "tuple", "get-tuple-element"}


def hlo_stats(jitted, *args):
    """(HLO ops, top-level ops, MB accessed) of the optimised program `jitted` compiles to."""
    compiled = jitted.lower(*args).compile()
    ops, top, loop, in_entry = 0, 0, False, False
    for line in compiled.as_text().splitlines():
        s = line.strip()
        if s.startswith("ENTRY"):
            in_entry = True
            continue
        if in_entry and s == "}":
            in_entry = False
        if " = " not in s or not s.startswith(("%", "ROOT")):
            continue
        ops += 1
        m = _OPCODE.search(s.split(" = ", 1)[1])
        if in_entry and m and m.group(1) not in _NOT_KERNELS:
            top += 1
            loop = loop or m.group(1) == "while"
    cost = compiled.cost_analysis()
    cost = (cost[0] if cost else {}) if isinstance(cost, (list, tuple)) else (cost or {})
    mb = cost.get("bytes accessed", float("nan")) / 1e6
    return ops, f"{top}{' +loop' if loop else ''}", mb


def _gae_kwargs(method):
    """"blocked:128" → method="blocked", block_size=128; any other name → method=name."""
    name, _, block = method.partition(":")
    return dict(method=name, block_size=int(block)) if block else dict(method=name)


def bench(sizes, repeats, np_repeats, methods=METHODS):
    rows = []
    for batch, length in sizes:
        x = make_inputs(batch, length)
        d = {k: jax.device_put(v) for k, v in x.items()}
        # All JAX timings of a size first, in two interleaved rounds (best kept), so that no
        # configuration pays for being measured first; then the numpy loops.
        jax_gae = {}
        fns = {
            (skip, method): jax.jit(lambda r, v, m, method=method, skip=skip: gae(
                r, v, m, gamma=GAMMA, lam=LAM, skip_observations=skip, **_gae_kwargs(method)))
            for skip in (True, False) for method in methods
        }
        gae_args = (d["rewards"], d["values"], d["mask"])
        for _ in range(2):
            for key, f in fns.items():
                ts, out = time_fn(lambda: f(*gae_args), repeats)
                jax_gae.setdefault(key, [[], out])[0].extend(ts)
        for skip in (True, False):
            ts_np, (ref_adv, _) = time_fn(lambda: np_gae(x["rewards"], x["values"], x["mask"], skip), np_repeats)
            for method in methods:
                ts, (adv, _) = jax_gae[skip, method]
                diff = float(np.max(np.abs(np.asarray(adv) - ref_adv)))
                name = f"gae {method} skip={'on' if skip else 'off'}"
                rows.append((name, batch, length, ts, min(ts_np), diff, hlo_stats(fns[skip, method], *gae_args)))
                print(_fmt_row(rows[-1]), flush=True)
        f = jax.jit(lambda lp, old, a, m: ppo_token_loss(lp, old, a, m)[0])
        args = (d["logp"], d["old"], d["adv"], d["mask"])
        ts, out = time_fn(lambda: f(*args), repeats)
        ts_np, ref = time_fn(lambda: np_ppo(x["logp"], x["old"], x["adv"], x["mask"]), np_repeats)
        rows.append(("ppo_token_loss", batch, length, ts, min(ts_np), abs(float(out) - float(ref)),
                     hlo_stats(f, *args)))
        print(_fmt_row(rows[-1]), flush=True)
        f = jax.jit(lambda lp, old, a, m: sequence_clip_loss(lp, old, a, m, clip_eps=0.2)[0])
        args = (d["logp_seq"], d["old"], d["adv"], d["mask"])
        ts, out = time_fn(lambda: f(*args), repeats)
        ts_np, ref = time_fn(lambda: np_seq(x["logp_seq"], x["old"], x["adv"], x["mask"]), np_repeats)
        rows.append(("sequence_clip_loss", batch, length, ts, min(ts_np), abs(float(out) - float(ref)),
                     hlo_stats(f, *args)))
        print(_fmt_row(rows[-1]), flush=True)
    return rows


HEADER = ("| op | [B, T] | jax ms min / med / max | numpy ms | numpy/jax | max abs diff | HLO ops | top-level ops "
          "| HLO MB |\n|---|---|---:|---:|---:|---:|---:|---:|---:|")


def _fmt_row(r):
    name, b, t, ts, tn, diff, (ops, top, mb) = r
    tj = min(ts)
    times = f"{tj * 1e3:.3f} / {float(np.median(ts)) * 1e3:.3f} / {max(ts) * 1e3:.3f}"
    return (f"| {name} | [{b}, {t}] | {times} | {tn * 1e3:.2f} | {tn / tj:.1f}x | {diff:.1e} | "
            f"{ops} | {top} | {mb:.1f} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="64x1024,256x2048,1024x8192",
                    help="comma-separated BxT sizes (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per op (min / median / max reported)")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help="comma-separated GAE methods to time; blocked:N = method blocked with "
                         "block_size N, to tune the block length (default: %(default)s)")
    ap.add_argument("--np-repeats", type=int, default=None, help="timed numpy calls (default: --repeats)")
    ap.add_argument("--out", default=None, help="also write the markdown table to this file")
    args = ap.parse_args(argv)
    sizes = [tuple(int(v) for v in s.lower().split("x")) for s in args.sizes.split(",") if s]
    methods = tuple(m for m in args.methods.split(",") if m)
    bad = [m for m in methods if m not in METHODS and not re.fullmatch(r"blocked:[1-9]\d*", m)]
    if bad:
        ap.error(f"--methods: unknown {bad}; allowed: {METHODS} and blocked:N (N ≥ 1)")
    dev = jax.devices()[0]
    env = (
        f"backend: {jax.default_backend()} · device: {dev.device_kind} ({len(jax.devices())} visible) · "
        f"jax {jax.__version__} · numpy {np.__version__} · python {platform.python_version()} · "
        f"host CPUs: {os.cpu_count()} · load average at start: {os.getloadavg()[0]:.1f}"
    )
    print(env)
    about = (f"GAE gamma={GAMMA} lam={LAM} on multi-turn masks; JAX times over {args.repeats} calls (GAE: "
             f"{2 * args.repeats}, two interleaved rounds) after compile and warm-up (`block_until_ready`); "
             "numpy ms = best call; numpy/jax = speed-up of the best JAX call over numpy (GAE numpy = "
             "reverse loop over tokens vectorised over the batch; losses = vectorised numpy); max abs "
             "diff = agreement of the two implementations. HLO ops = instructions in the optimised HLO "
             "module; top-level ops = entry-computation instructions other than parameters, constants, "
             "bitcasts and tuples (~kernels per call; +loop: a while loop whose body runs per token); "
             "HLO MB = XLA's estimate of bytes accessed (a while body counted once). The three proxies "
             "are those of the backend above.")
    print(about + "\n")
    print(HEADER, flush=True)
    rows = bench(sizes, args.repeats, args.np_repeats or args.repeats, methods)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write("# rlvr.core ops: JAX vs straightforward numpy\n\n")
            f.write(f"Command: `python benchmarks/core_ops.py --sizes {args.sizes} --repeats {args.repeats}"
                    f"{' --np-repeats %d' % args.np_repeats if args.np_repeats else ''}"
                    f"{' --methods ' + args.methods if methods != METHODS else ''} --out {args.out}`\n\n")
            f.write(env + "\n\n")
            f.write(about + "\n\n")
            f.write(HEADER + "\n" + "\n".join(_fmt_row(r) for r in rows) + "\n")
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
