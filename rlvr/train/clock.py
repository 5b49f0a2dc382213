"""Modelled wall-clock: a time model and a deterministic virtual timeline.

On a few shared CPU cores a real asynchronous run cannot show wall-clock
effects (rollout and learner share cores), so wall-clock claims are made in
*virtual* time: every episode's duration is a pure function of its counts
(prompt tokens, completion tokens, tool calls) and a seed, and a discrete-event
timeline places episode arrivals and learner steps on a virtual clock.

Pure functions only; no engine, no threads. The time model is loaded from a
committed JSON file (``experiments/study/system_model.json``).
"""
from __future__ import annotations

import dataclasses
import heapq
import json
import math

import numpy as np

from rlvr.train.collectors import stream_seed

TOPOLOGIES = ("colocated", "disaggregated")


@dataclasses.dataclass(frozen=True)
class TimeModel:
    """Seconds per unit of work.

    Fields: prefill_s_per_token, decode_s_per_token (per generated token),
    learner_s_per_sample (one learner step costs this times its samples),
    env_setup_s (per episode), tool_median_s / tool_tail_index / tool_cap_s
    (per tool call: Pareto with median m, tail index alpha, capped),
    topology ("colocated": rollout pauses while the learner steps;
    "disaggregated": they run in parallel), slots (concurrent episodes).
    """

    prefill_s_per_token: float
    decode_s_per_token: float
    learner_s_per_sample: float
    env_setup_s: float
    tool_median_s: float
    tool_tail_index: float
    tool_cap_s: float
    topology: str
    slots: int

    def __post_init__(self):
        for f in ("prefill_s_per_token", "decode_s_per_token", "learner_s_per_sample",
                  "env_setup_s", "tool_median_s", "tool_cap_s"):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"time model field {f}={v!r}: must be a finite number >= 0")
        if not self.tool_tail_index > 0:
            raise ValueError(f"time model field tool_tail_index={self.tool_tail_index!r}: must be > 0")
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"time model field topology={self.topology!r}: allowed {TOPOLOGIES}")
        if not (isinstance(self.slots, int) and self.slots >= 1):
            raise ValueError(f"time model field slots={self.slots!r}: must be an int >= 1")

    @classmethod
    def from_json(cls, path: str) -> "TimeModel":
        with open(path) as fh:
            raw = json.load(fh)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - names)
        if unknown:
            raise ValueError(f"time model {path}: unknown fields {unknown}; allowed {sorted(names)}")
        return cls(**raw)


def tool_latency(model: TimeModel, seed: int, n_calls: int) -> float:
    """Total seconds of ``n_calls`` tool calls, each Pareto(x_m, alpha) capped.

    Pareto with scale x_m and index alpha has median x_m * 2**(1/alpha), so
    x_m = m / 2**(1/alpha); a draw is x_m * U**(-1/alpha), U ~ Uniform(0, 1].
    Deterministic in ``seed``.
    """
    if n_calls <= 0:
        return 0.0
    rng = np.random.default_rng(seed)
    u = 1.0 - rng.random(n_calls)  # (0, 1]
    x_m = model.tool_median_s / 2.0 ** (1.0 / model.tool_tail_index)
    draws = np.minimum(x_m * u ** (-1.0 / model.tool_tail_index), model.tool_cap_s)
    return float(draws.sum())


def episode_duration(model: TimeModel, prompt_tokens: int, completion_tokens: int,
                     tool_calls: int, seed: int) -> float:
    """Virtual seconds of one episode: set-up + prefill + decode + tool latency."""
    return (model.env_setup_s + model.prefill_s_per_token * prompt_tokens
            + model.decode_s_per_token * completion_tokens
            + tool_latency(model, seed, tool_calls))


def learner_step_s(model: TimeModel, n_samples: int) -> float:
    """Virtual seconds of one learner step over ``n_samples`` samples."""
    return model.learner_s_per_sample * n_samples


def arrival_times(durations, slots: int, start: float = 0.0) -> list[float]:
    """Arrival time of each episode when started in order on ``slots`` slots.

    Episode i starts as soon as a slot is free (the earliest free slot) and
    arrives at start + duration. Returns arrivals in episode order.
    """
    free = [start] * slots
    heapq.heapify(free)
    out = []
    for d in durations:
        t = heapq.heappop(free)
        out.append(t + float(d))
        heapq.heappush(free, t + float(d))
    return out


def sync_timeline(model: TimeModel, batches) -> list[float]:
    """Modelled clock after each synchronous step (GRPO-sync).

    ``batches``: a sequence of per-step episode-duration sequences. Each step
    samples its whole batch on ``model.slots`` slots, then the learner steps
    over it. Sync training waits for the learner in both topologies (the next
    batch needs the new parameters), so topology does not change this
    timeline. Returns the cumulative modelled seconds after each step.
    """
    t, out = 0.0, []
    for durs in batches:
        done = max(arrival_times(durs, model.slots, start=t), default=t)
        t = done + learner_step_s(model, len(durs))
        out.append(t)
    return out


def streaming_timeline(model: TimeModel, durations, step_every: int) -> list[float]:
    """Modelled clock after each learner step when consuming single arrivals.

    Episodes run back to back on ``model.slots`` slots; the learner steps
    once every ``step_every`` arrivals (in arrival order). Disaggregated: the
    learner runs in parallel with rollout (a step starts at max(its last
    arrival, previous step end)). Colocated: rollout pauses while the learner
    steps, so every episode not yet arrived is delayed by the step time.
    Returns the modelled clock at the end of each step.
    """
    arr = sorted(arrival_times(durations, model.slots))
    ends, prev_end, shift = [], 0.0, 0.0
    for k in range(len(arr) // step_every):
        last = arr[(k + 1) * step_every - 1] + shift
        start = max(last, prev_end)
        end = start + learner_step_s(model, step_every)
        if model.topology == "colocated":
            shift += end - start
        ends.append(end)
        prev_end = end
    return ends


def row_counts(batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-row (prompt-side tokens, generated tokens, tool calls) of a RolloutBatch [B, T].

    Generated tokens: loss_mask sum; prompt-side tokens: the other real tokens
    (prompt and observations); tool calls: turns - 1 (turn_ids), 0 single-turn.
    """
    gen = np.asarray(batch.loss_mask).sum(axis=1).astype(np.int64)
    real = np.asarray(batch.attention_mask).sum(axis=1).astype(np.int64)
    if getattr(batch, "turn_ids", None) is not None:
        tools = np.maximum(np.asarray(batch.turn_ids).max(axis=1), 0).astype(np.int64)
    else:
        tools = np.zeros_like(gen)
    return real - gen, gen, tools


class SyncModelledClock:
    """Wraps a synchronous collector (GRPO-sync) and adds the modelled clock.

    Samples are the wrapped collector's, untouched; each collected step adds
    ``time/modelled_s`` (cumulative virtual seconds: the step's episodes on
    ``model.slots`` slots, then the learner step) to the step's stats. Every
    other collector method is delegated. Deterministic: tool latencies are
    seeded from (seed, step, row).
    """

    def __init__(self, inner, model: TimeModel, *, seed: int):
        self.inner, self.model, self.seed = inner, model, seed
        self.modelled_s = 0.0

    def collect(self, params, step, policy_version: int, num_groups=None):
        got = self.inner.collect(params, step, policy_version, num_groups)
        prompt, gen, tools = row_counts(got.batch)
        durs = [episode_duration(self.model, int(p), int(g), int(t),
                                 seed=stream_seed("clock", self.seed, str(step), i))
                for i, (p, g, t) in enumerate(zip(prompt, gen, tools))]
        self.modelled_s = sync_timeline(self.model, [durs])[0] + self.modelled_s
        return dataclasses.replace(got, stats={**got.stats, "time/modelled_s": self.modelled_s})

    def state_dict(self) -> dict:
        return {**self.inner.state_dict(), "modelled_s": self.modelled_s}

    def load_state_dict(self, d: dict) -> None:
        self.modelled_s = float(d.get("modelled_s", 0.0))
        self.inner.load_state_dict({k: v for k, v in d.items() if k != "modelled_s"})

    def __getattr__(self, name):
        return getattr(self.inner, name)
