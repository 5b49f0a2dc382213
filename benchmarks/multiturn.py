"""Multi-turn rollout benchmark: the KV cache kept across turns vs the history re-prefilled.

Episodes of `--turns` turns (8 by default) in a scripted echo environment: every action is
exactly `--action-len` sampled tokens (no stop token, so both modes do the same decode work),
and the observation after it is `--obs-len` tokens echoing the action's tail. Per turn, both
modes run the agent loop's samplers on the same streams with the same per-episode keys
(fold_in(episode key, turn)):

  * re-prefill: `rlvr.rollout.agent_loop.sample_turn` (prompt = the whole history so far,
    left-padded to a multiple of `--prompt-bucket`), what `run_episodes(kv_reuse=False)` does;
  * kv reuse: `rlvr.rollout.session.KVSession.turn` (only the prompt, then each observation, is
    prefilled at the row's own offset), what `run_episodes(kv_reuse=True)` does.

A warm-up rollout compiles every shape (its wall time is reported: re-prefilling compiles one
sampler per history-length bucket); then `--repeats` timed rollouts give min / median / max
of action tokens/s (batch × turns × action-len / wall seconds) and turns/s (batch × turns / wall
seconds). "same streams" is the fraction of episodes whose token streams are identical in both
modes (random weights, sampling at temperature 1). kv reuse runs first (it compiles two shapes,
re-prefill one per history bucket), and the table is rewritten after each mode, so a run stopped
by a time limit keeps what it measured.

CPU:  python benchmarks/multiturn.py --out benchmarks/results/multiturn_cpu.md
GPU:  python benchmarks/multiturn.py --size qwen0.5b --dtype bfloat16 --batch 64 \
          --prompt-len 256 --obs-len 64 --action-len 64     (random Qwen2-0.5B-shaped weights)

No assertions: this prints a markdown table (and writes it to --out when given).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import datetime
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import numpy as np

from benchmarks.model import SIZES, make_config
from benchmarks.output import emit  # noqa: E402

T_START = time.time()
MODES = ("kv reuse", "re-prefill")  # kv reuse first: it compiles 2 shapes, re-prefill one per turn


def log(msg):
    print(f"[{time.time() - T_START:7.1f}s] {msg}", file=sys.stderr, flush=True)


class IdTokenizer:
    """Ids are the tokens (pad 0, bos 1, eos 2); decode writes them as numbers."""

    pad_id, bos_id, eos_id = 0, 1, 2

    def decode(self, ids):
        return " ".join(str(int(i)) for i in ids)


class EchoEnv:
    """Scripted echo environment: observation = a marker token, then the action's last tokens
    (cycled to `obs_len` tokens in all)."""

    MARK = 3

    def __init__(self, obs_len: int):
        self.obs_len = obs_len

    def step(self, action_ids):
        tail = list(action_ids)[-(self.obs_len - 1):] or [self.MARK]
        return [self.MARK] + [tail[j % len(tail)] for j in range(self.obs_len - 1)]


def rollout(model, mode, prompts, keys, params, args, max_tokens):
    """One batch of episodes; returns (streams, seconds, prefilled tokens)."""
    from rlvr.rollout.agent_loop import sample_turn, split_actions
    from rlvr.rollout.session import KVSession

    tok, env = IdTokenizer(), EchoEnv(args.obs_len)
    streams = [list(p) for p in prompts]
    ids = list(range(len(streams)))
    session = (KVSession(model, max_tokens=max_tokens, pad_id=tok.pad_id, batch_bucket=0,
                         chunk_bucket=args.prompt_bucket) if mode == "kv reuse" else None)
    prefilled = 0
    t0 = time.perf_counter()
    for t in range(args.turns):
        sub = jax.vmap(lambda k: jax.random.fold_in(k, t))(keys)
        if session is None:
            ts = sample_turn(model, streams, sub, params, tokenizer=tok, terminator_id=-1,
                             prompt_bucket=args.prompt_bucket, batch_bucket=0,
                             max_prompt_len=max_tokens - params.max_new_tokens)
            actions = ts.action_ids
            prefilled += sum(len(s) for s in streams)
        else:
            st = session.turn(ids, streams, sub, params)
            actions = st.action_ids
            split_actions(actions, tokenizer=tok, terminator_id=-1)  # the loop's host work
            prefilled += st.prefill_tokens
        for i, a in enumerate(actions):
            streams[i] = streams[i] + a + (env.step(a) if t < args.turns - 1 else [])
    return streams, time.perf_counter() - t0, prefilled


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="tiny", choices=sorted(SIZES))
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--batch", type=int, default=16, help="episodes per rollout")
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--obs-len", type=int, default=16)
    ap.add_argument("--action-len", type=int, default=16)
    ap.add_argument("--prompt-bucket", type=int, default=64,
                    help="history (re-prefill) / new-chunk (kv reuse) padding multiple")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="", help="also write the table to this file")
    args = ap.parse_args()

    from flax import nnx

    from rlvr.models import Transformer
    from rlvr.rollout.sampler import SamplingParams, per_sample_keys

    config = make_config(args.size, dtype=args.dtype)
    model = Transformer(config, rngs=nnx.Rngs(0))
    n_params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    need = args.prompt_len + args.turns * args.action_len + (args.turns - 1) * args.obs_len
    max_tokens = -(-need // args.prompt_bucket) * args.prompt_bucket
    rng = np.random.RandomState(0)
    prompts = [[1] + list(rng.randint(4, config.vocab_size, args.prompt_len - 1))
               for _ in range(args.batch)]
    params = SamplingParams(temperature=1.0, max_new_tokens=args.action_len)
    results, streams = {}, {}
    for mode in MODES:
        log(f"{mode}: warm-up (compiles)")
        keys = per_sample_keys(jax.random.PRNGKey(0), args.batch)
        _, warm, _ = rollout(model, mode, prompts, keys, params, args, max_tokens)
        log(f"{mode}: warm-up {warm:.1f}s")
        times = []
        for r in range(args.repeats):
            keys = per_sample_keys(jax.random.PRNGKey(r + 1), args.batch)
            s, dt, prefilled = rollout(model, mode, prompts, keys, params, args, max_tokens)
            times.append(dt)
            if r == 0:
                streams[mode] = s
            log(f"{mode}: repeat {r} {dt:.2f}s")
        results[mode] = (times, prefilled, warm)
        write_table(args, n_params, max_tokens, results, streams)  # a mode done is kept


def write_table(args, n_params, max_tokens, results, streams):
    """Prints the table of the modes measured so far and writes it to --out (when given)."""
    actions = args.batch * args.turns * args.action_len
    turns = args.batch * args.turns
    dev = jax.devices()[0]
    lines = [
        f"## rlvr multi-turn rollout benchmark — {datetime.date.today().isoformat()}",
        "",
        f"Backend {jax.default_backend()} ({dev.device_kind}), jax {jax.__version__}, python "
        f"{platform.python_version()}, {os.cpu_count()} CPU cores. Model `{args.size}` "
        f"({n_params / 1e6:.2f} M params, {args.dtype}, random weights); {args.batch} episodes × "
        f"{args.turns} turns; prompt {args.prompt_len}, action {args.action_len} (sampled, "
        f"temperature 1, no stop), observation {args.obs_len} tokens; cache / history cap "
        f"{max_tokens} tokens; prompt bucket {args.prompt_bucket}; {args.repeats} timed repeats "
        f"after a compiling warm-up.",
        "",
        f"Command: `python benchmarks/multiturn.py {' '.join(sys.argv[1:])}`",
        "",
        "| mode | prefilled tokens / rollout | warm-up s (compiles) | rollout s (min / median / "
        "max) | action tokens/s (min / median / max) | turns/s (median) |",
        "|---|---|---|---|---|---|",
    ]
    for mode, (times, prefilled, warm) in results.items():
        lo, med, hi = min(times), statistics.median(times), max(times)
        lines.append(f"| {mode} | {prefilled:,} | {warm:.1f} | {lo:.2f} / {med:.2f} / {hi:.2f} | "
                     f"{actions / hi:,.0f} / {actions / med:,.0f} / {actions / lo:,.0f} | "
                     f"{turns / med:,.1f} |")
    if len(results) == len(MODES):
        speed = statistics.median(results[MODES[1]][0]) / statistics.median(results[MODES[0]][0])
        same = np.mean([a == b for a, b in zip(streams[MODES[0]], streams[MODES[1]])])
        lines += ["", f"Median speed-up of kv reuse: {speed:.2f}×. Episodes with identical token "
                  f"streams in both modes (same keys): {same:.0%}.", ""]
    else:
        lines += ["", f"Not measured (stopped before): {', '.join(m for m in MODES if m not in results)}.", ""]
    text = "\n".join(lines)
    emit(text, args.out)


if __name__ == "__main__":
    main()
