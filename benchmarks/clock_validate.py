"""Validates the modelled clock (`rlvr.train.clock`) once against a real latency-dominated run.

The same episodes are timed twice:

  * measured: `--slots` rollout threads run episodes for real: each samples its episode with the
    quickstart's tiny policy (random weights, a few ms of compute), then sleeps its environment
    set-up and `--tools` tool calls whose latencies are drawn from the time model with the
    modelled clock's own seeds (`time.sleep`); the learner step is a sleep of
    `learner_s_per_sample` × rows (a stand-in: a real learner would share the 2 cores with the
    threads). Sync consumption: each step starts `--batch` episodes on the threads and waits for
    all of them; streaming: the threads start a new episode whenever one ends, with the latest
    published parameters, and the learner takes the first `--batch` arrivals.
  * modelled: `ModelledClockCollector` (modes "sao_sync" and "sao", no staleness gate) over the very same episodes (unit u: task and keys from (seed, u)), with the per-token
    compute calibrated on this machine before the timed runs (one thread, mean seconds per
    generated token) and the same set-up and tool-latency parameters.

The table reports modelled vs measured wall seconds at the end of `--steps` learner steps and
the difference in %. Target: within ±10 %. Takes about two minutes on 2 CPU cores.

    python benchmarks/clock_validate.py [--out benchmarks/results/clock_validate_cpu.md]

No assertions: this prints a markdown table (and writes it to --out when given).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import dataclasses
import datetime
import platform
import queue
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.output import emit  # noqa: E402

from rlvr.train import clock  # noqa: E402
from rlvr.train.collectors import Collected, Collector  # noqa: E402


class ToolEngine:
    """The tiny policy's real engine; every row then makes `tools` tool calls (turn ids)."""

    def __init__(self, engine, tools: int):
        self.engine, self.tools = engine, tools

    def run(self, params, tasks, group_size, keys, sampling, policy_version):
        got = self.engine.run(params, tasks, group_size, keys, sampling, policy_version)
        tid = np.where(np.asarray(got.batch.loss_mask) > 0, self.tools, -1).astype(np.int32)
        return dataclasses.replace(got, batch=got.batch.replace(turn_ids=tid))


class UnitInner(Collector):
    """A GroupCollector's pieces (single rollouts) whose synchronous batch of step s is units
    s·B .. s·B + B − 1, each sampled on its own, exactly as the threads sample them."""

    def __init__(self, gc, engine):
        self.sampler, self.rollout_key, self.sampling = gc.sampler, gc.rollout_key, gc.sampling
        self.group_size, self.prompts_per_step = 1, gc.prompts_per_step
        self.engine = engine

    def run_unit(self, params, u, version):
        tasks, keys = clock.unit_draw(self, u)
        return self.engine.run(params, tasks, 1, keys, self.sampling, version)

    def collect(self, params, step, version, n=None):
        n = n or self.prompts_per_step
        return Collected.concatenate([self.run_unit(params, step * n + j, version)
                                      for j in range(n)])


def sleep_s(model, got, seed) -> float:
    """The non-compute part of one single-rollout episode: set-up + its tool calls."""
    _, _, tools = clock.row_counts(got.batch)
    return model.env_setup_s + clock.tool_latency(model, seed, int(tools[0]))


def measured_sync(inner, model, params, steps, batch, seed) -> float:
    """Wall seconds of `steps` synchronous steps on `model.slots` threads."""
    from concurrent.futures import ThreadPoolExecutor

    def episode(step, j):
        got = inner.run_unit(params, step * batch + j, step)
        time.sleep(sleep_s(model, got, clock.sync_row_seed(seed, step, j)))

    t0 = time.perf_counter()
    with ThreadPoolExecutor(model.slots) as pool:
        for s in range(steps):
            list(pool.map(lambda j: episode(s, j), range(batch)))
            time.sleep(clock.learner_step_s(model, batch))
    return time.perf_counter() - t0


def _pausable_sleep(seconds: float, running: threading.Event) -> None:
    """Sleeps `seconds` of time during which `running` is set (colocated: episodes pause while
    the learner steps)."""
    left = seconds
    while left > 0:
        running.wait()
        t0 = time.perf_counter()
        time.sleep(min(0.005, left))
        left -= time.perf_counter() - t0


def measured_streaming(inner, model, params, steps, batch, seed) -> float:
    """Wall seconds of `steps` learner steps consuming single arrivals; colocated, no episode
    starts or advances while the learner steps."""
    arrivals: queue.Queue = queue.Queue()
    lock, stop, running = threading.Lock(), threading.Event(), threading.Event()
    running.set()
    colocated = model.topology == "colocated"
    state = {"next": 0, "version": 0}

    def worker():
        while not stop.is_set():
            running.wait()
            with lock:
                u, v = state["next"], state["version"]
                state["next"] += 1
            got = inner.run_unit(params, u, v)
            wait = sleep_s(model, got, clock.unit_row_seed(seed, u, 0))
            if colocated:
                _pausable_sleep(wait, running)
            else:
                time.sleep(wait)
            arrivals.put(u)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(model.slots)]
    for t in threads:
        t.start()
    for _ in range(steps):
        for _ in range(batch):
            arrivals.get()
        if colocated:
            running.clear()
        time.sleep(clock.learner_step_s(model, batch))
        with lock:
            state["version"] += 1
        running.set()
    wall = time.perf_counter() - t0
    stop.set()
    return wall


def modelled(inner, model, params, steps, mode, seed) -> float:
    c = clock.ModelledClockCollector(inner, model, mode=mode, seed=seed, max_staleness=10**6,
                                     backpressure=False)
    t = 0.0
    for s in range(steps):
        t = c.collect(params, s, s).stats["time/modelled_s"]
    return t


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8, help="episodes per learner step")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--tools", type=int, default=2, help="tool calls per episode")
    ap.add_argument("--tool-median", type=float, default=0.4)
    ap.add_argument("--tail", type=float, default=1.5, help="Pareto tail index of a tool call")
    ap.add_argument("--cap", type=float, default=4.0)
    ap.add_argument("--setup", type=float, default=0.05, help="environment set-up seconds")
    ap.add_argument("--learner", type=float, default=0.05, help="learner seconds per sample")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)

    from rlvr.configs import quickstart
    from rlvr.train.config import validate_config
    from rlvr.train.setup import build_run

    c = quickstart.get_config()  # its task kit at a tiny size: 1 layer, width 16
    c.model.num_layers, c.model.d_model, c.model.num_heads, c.model.num_kv_heads = 1, 16, 2, 2
    c.model.d_ff = 32
    c.algorithm.name, c.algorithm.group_size = "reinforce", 1
    c.sampling.prompts_per_step, c.rollout.prompt_bucket = args.batch, 0
    c.train.num_minibatches = 1
    validate_config(c)
    r = build_run(c, "/tmp/clock_validate")
    gc, params = r.collector, r.init_params
    inner = UnitInner(gc, ToolEngine(gc.engine, args.tools))
    # calibration: compile, then one thread's seconds per generated token
    inner.run_unit(params, 10**6, 0)
    secs, toks = 0.0, 0
    for u in range(10**6 + 1, 10**6 + 17):
        t0 = time.perf_counter()
        got = inner.run_unit(params, u, 0)
        secs += time.perf_counter() - t0
        toks += int(np.asarray(got.batch.loss_mask).sum())
    model = clock.TimeModel(prefill_s_per_token=0.0, decode_s_per_token=secs / toks,
                            learner_s_per_sample=args.learner, env_setup_s=args.setup,
                            tool_median_s=args.tool_median, tool_tail_index=args.tail,
                            tool_cap_s=args.cap, topology="disaggregated", slots=args.slots)
    rows = []
    for seed in args.seeds:
        for name, mode, fn, topo in (
                ("sync (SAO-sync)", "sao_sync", measured_sync, "disaggregated"),
                ("streaming (SAO), disaggregated", "sao", measured_streaming, "disaggregated"),
                ("streaming (SAO), colocated", "sao", measured_streaming, "colocated")):
            m_ = dataclasses.replace(model, topology=topo)
            m = modelled(inner, m_, params, args.steps, mode, seed)
            w = fn(inner, m_, params, args.steps, args.batch, seed)
            rows.append((name, seed, m, w, 100.0 * (m - w) / w))
            print(f"{name} seed {seed}: modelled {m:.2f} s, measured {w:.2f} s", file=sys.stderr)
    r.close()
    worst = max(abs(x[4]) for x in rows)
    lines = [
        f"{datetime.date.today()} · {platform.machine()} · {os.cpu_count()} CPU cores (shared) · "
        f"{args.slots} rollout threads, {args.batch} episodes per step, {args.steps} steps, "
        f"{args.tools} tool calls per episode (Pareto median {args.tool_median} s, tail index "
        f"{args.tail}, cap {args.cap} s), set-up {args.setup} s, learner "
        f"{args.learner} s/sample, calibrated compute {model.decode_s_per_token * 1e3:.2f} ms "
        f"per generated token",
        "",
        "| consumption | seed | modelled s | measured s | difference |",
        "|---|---:|---:|---:|---:|",
        *[f"| {a} | {b} | {m:.2f} | {w:.2f} | {d:+.1f} % |" for a, b, m, w, d in rows],
        "",
        f"largest |difference|: {worst:.1f} % ({'within' if worst <= 10 else 'outside'} ±10 %)",
    ]
    table = "\n".join(lines)
    emit(table, args.out)
    return table


if __name__ == "__main__":
    main()
