"""Speed of rlvr.core ops against straightforward numpy implementations of the same functions.

Times per call (best of --repeats, after compile and a warm-up call, `block_until_ready`) for
  - GAE, both forms (`lax.scan`, `lax.associative_scan`) x skip-observation on/off,
  - ppo_token_loss (token-mean) and sequence_clip_loss (PivotRL turn-level),
at a few [B, T] sizes on multi-turn masks (prompt, action/observation blocks, padding), next to a
numpy implementation on the same inputs (GAE: a reverse loop over tokens vectorised over the
batch; losses: vectorised numpy). `numpy/jax` > 1 means JAX is faster. `max|Δ|` checks that
both compute the same numbers.

Runs unchanged on CPU, GPU or TPU (whatever `jax.default_backend()` is):
  python benchmarks/core_ops.py --sizes 64x1024,256x2048,1024x8192 --repeats 5 \
      --out benchmarks/results/core_ops_<backend>.md
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402

from rlvr.core.gae import gae  # noqa: E402
from rlvr.core.losses import ppo_token_loss, sequence_clip_loss  # noqa: E402

GAMMA, LAM = 1.0, 0.95


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
    for _ in range(2):  # compile + warm-up
        out = fn()
        jax.block_until_ready(out)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        jax.block_until_ready(out)
        times.append(time.perf_counter() - t0)
    return min(times), out


def bench(sizes, repeats, np_repeats):
    rows = []
    for batch, length in sizes:
        x = make_inputs(batch, length)
        d = {k: jax.device_put(v) for k, v in x.items()}
        # All JAX timings of a size first, in two interleaved rounds (best kept), so that no
        # configuration pays for being measured first; then the numpy loops.
        jax_gae = {}
        fns = {
            (skip, method): jax.jit(lambda r, v, m, method=method, skip=skip: gae(
                r, v, m, gamma=GAMMA, lam=LAM, skip_observations=skip, method=method))
            for skip in (True, False) for method in ("scan", "associative")
        }
        for _ in range(2):
            for key, f in fns.items():
                t, out = time_fn(lambda: f(d["rewards"], d["values"], d["mask"]), repeats)
                if key not in jax_gae or t < jax_gae[key][0]:
                    jax_gae[key] = (t, out)
        for skip in (True, False):
            t_np, (ref_adv, _) = time_fn(lambda: np_gae(x["rewards"], x["values"], x["mask"], skip), np_repeats)
            for method in ("scan", "associative"):
                t, (adv, _) = jax_gae[skip, method]
                diff = float(np.max(np.abs(np.asarray(adv) - ref_adv)))
                name = f"gae {method} skip={'on' if skip else 'off'}"
                rows.append((name, batch, length, t, t_np, diff))
                print(_fmt_row(rows[-1]), flush=True)
        f = jax.jit(lambda lp, old, a, m: ppo_token_loss(lp, old, a, m)[0])
        t, out = time_fn(lambda: f(d["logp"], d["old"], d["adv"], d["mask"]), repeats)
        t_np, ref = time_fn(lambda: np_ppo(x["logp"], x["old"], x["adv"], x["mask"]), np_repeats)
        rows.append(("ppo_token_loss", batch, length, t, t_np, abs(float(out) - float(ref))))
        print(_fmt_row(rows[-1]), flush=True)
        f = jax.jit(lambda lp, old, a, m: sequence_clip_loss(lp, old, a, m, clip_eps=0.2)[0])
        t, out = time_fn(lambda: f(d["logp_seq"], d["old"], d["adv"], d["mask"]), repeats)
        t_np, ref = time_fn(lambda: np_seq(x["logp_seq"], x["old"], x["adv"], x["mask"]), np_repeats)
        rows.append(("sequence_clip_loss", batch, length, t, t_np, abs(float(out) - float(ref))))
        print(_fmt_row(rows[-1]), flush=True)
    return rows


HEADER = "| op | [B, T] | jax ms | numpy ms | numpy/jax | max abs diff |\n|---|---|---:|---:|---:|---:|"


def _fmt_row(r):
    name, b, t, tj, tn, diff = r
    return f"| {name} | [{b}, {t}] | {tj * 1e3:.3f} | {tn * 1e3:.2f} | {tn / tj:.1f}x | {diff:.1e} |"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="64x1024,256x2048,1024x8192",
                    help="comma-separated BxT sizes (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per op (best reported)")
    ap.add_argument("--np-repeats", type=int, default=None, help="timed numpy calls (default: --repeats)")
    ap.add_argument("--out", default=None, help="also write the markdown table to this file")
    args = ap.parse_args(argv)
    sizes = [tuple(int(v) for v in s.lower().split("x")) for s in args.sizes.split(",") if s]
    dev = jax.devices()[0]
    env = (
        f"backend: {jax.default_backend()} · device: {dev.device_kind} ({len(jax.devices())} visible) · "
        f"jax {jax.__version__} · numpy {np.__version__} · python {platform.python_version()} · "
        f"host CPUs: {os.cpu_count()}"
    )
    print(env)
    print(f"GAE gamma={GAMMA} lam={LAM}; best of {args.repeats} calls (GAE: of 2 interleaved rounds) after compile and warm-up; "
          "numpy/jax = speed-up of JAX over numpy.\n")
    print(HEADER, flush=True)
    rows = bench(sizes, args.repeats, args.np_repeats or args.repeats)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write("# rlvr.core ops: JAX vs straightforward numpy\n\n")
            f.write(f"Command: `python benchmarks/core_ops.py --sizes {args.sizes} --repeats {args.repeats}"
                    f"{' --np-repeats %d' % args.np_repeats if args.np_repeats else ''} --out {args.out}`\n\n")
            f.write(env + "\n\n")
            f.write(f"GAE gamma={GAMMA} lam={LAM} on multi-turn masks; best of {args.repeats} calls "
                    "after compile and warm-up (`block_until_ready`); numpy/jax = speed-up of JAX over numpy "
                    "(GAE numpy = reverse loop over tokens vectorised over the batch; losses = vectorised "
                    "numpy). max abs diff = agreement of the two implementations.\n\n")
            f.write(HEADER + "\n" + "\n".join(_fmt_row(r) for r in rows) + "\n")
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
