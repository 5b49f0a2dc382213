"""Modelled wall-clock: a time model and a deterministic virtual timeline.

On a few shared CPU cores a real asynchronous run cannot show wall-clock
effects (rollout and learner share cores), so wall-clock claims are made in
*virtual* time: every episode's duration is a pure function of its counts
(prompt tokens, completion tokens, tool calls) and a seed, and a discrete-event
timeline places episode arrivals and learner steps on a virtual clock.

The time model is loaded from a JSON file (the study's is
``experiments/study/system_model.json``); the file's optional ``calibration`` object records
what measured its parameters (`read_calibration`) and is not a parameter. The pure functions below place
durations on slots; `ModelledClockCollector` is the collector that runs a
training loop under the modelled clock (docs/algorithms.md §7): a
single-threaded discrete-event loop in virtual time in which every episode is
sampled for real, at its virtual start, with the parameters published by then.
"""
from __future__ import annotations

import dataclasses
import heapq
import json
import math
from typing import Optional

import numpy as np

import jax
import jax.numpy as jnp

from rlvr.rollout.sampler import per_sample_keys
from rlvr.train.collectors import Collected, Collector, RolloutCost, stream_seed
from rlvr.train.config import predicted_lag

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
        """The time model of the JSON file at `path`: an object of the fields above, and
        optionally a `CALIBRATION` object (provenance, not a parameter: dropped here, read by
        `read_calibration`). Any other key is refused, naming it."""
        raw = _read_model_file(path)
        raw.pop(CALIBRATION, None)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - names)
        if unknown:
            raise ValueError(f"time model {path}: unknown fields {unknown}; allowed "
                             f"{sorted(names | {CALIBRATION})}")
        return cls(**raw)


# The optional top-level entry of a time-model file that records what measured its parameters
# (machine, device, library versions, date, command, scale, code version, per-parameter method
# and spread; experiments/study/time_model.py writes it). Provenance only: the TimeModel is the
# same with or without it.
CALIBRATION = "calibration"


def _read_model_file(path: str) -> dict:
    with open(path) as fh:
        raw = json.load(fh)
    if not isinstance(raw, dict):
        raise ValueError(f"time model {path}: must hold a JSON object, got {type(raw).__name__}")
    cal = raw.get(CALIBRATION)
    if cal is not None and not isinstance(cal, dict):
        raise ValueError(f"time model {path}: {CALIBRATION!r} must be a JSON object (what "
                         f"measured the parameters), got {type(cal).__name__}")
    return raw


def read_calibration(path: str) -> Optional[dict]:
    """The `CALIBRATION` entry of the time-model file at `path` (a dict), or None when the
    file records none (its parameters were typed in, not measured)."""
    return _read_model_file(path).get(CALIBRATION)


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
    """Virtual seconds of one episode: set-up + prefill + decode + tool latency
    (docs/algorithms.md (A.24))."""
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


# ----------------------------------------------------------------------------- the collector
MODES = ("grpo_sync", "grpo_async", "sao", "sao_sync")


def clock_mode(group_size: int, asynchronous: bool) -> str:
    """The modelled-clock mode a run's fields resolve to.

    Synchronous collection: a barrier per batch ("grpo_sync" with groups, "sao_sync" with single
    rollouts); asynchronous: each unit (a group, or one episode with group_size 1) trains on
    arrival ("grpo_async", "sao").
    """
    if asynchronous:
        return "grpo_async" if group_size > 1 else "sao"
    return "grpo_sync" if group_size > 1 else "sao_sync"


def sync_row_seed(seed: int, step, row: int) -> int:
    """Tool-latency seed of row `row` of synchronous step `step`."""
    return stream_seed("clock", seed, str(step), row)


def unit_row_seed(seed: int, unit: int, row: int) -> int:
    """Tool-latency seed of row `row` of streaming unit `unit`."""
    return stream_seed("clock", seed, "unit", unit, row)


def unit_draw(inner, unit: int):
    """(tasks, keys) of streaming unit `unit` of a `GroupCollector`: one task drawn under the tag
    "clock/<unit>" and `group_size` sampling keys, both from (seed, unit) only."""
    tasks = inner.sampler.draw(f"clock/{unit}", 1)
    key = jax.random.fold_in(inner.rollout_key, stream_seed("clock-unit", unit) % 2**31)
    return tasks, per_sample_keys(key, inner.group_size)


@dataclasses.dataclass(frozen=True)
class ClockUnit:
    """One sampled unit in virtual time: the `group_size` episodes of one task.

    index: the unit's number (its task draw and keys derive from it); version: the policy
    version current at its virtual start (the parameters it was sampled with); start_s /
    arrival_s: virtual start and arrival (its slowest episode's end); collected: its rows.
    """

    index: int
    version: int
    start_s: float
    arrival_s: float
    collected: Collected


@dataclasses.dataclass(frozen=True)
class _Event:
    time: float
    seq: int
    unit: Optional[ClockUnit]  # None: one slot frees; else: the unit arrives

    def __lt__(self, other: "_Event") -> bool:
        return (self.time, self.seq) < (other.time, other.seq)


class ModelledClockCollector(Collector):
    """Training batches gathered in virtual time (`rollout.clock = "modelled"`).

    A deterministic, single-threaded discrete-event loop. `model.slots` episodes run at once;
    each episode is sampled for real through the wrapped `GroupCollector`'s engine when it
    starts, with the parameters published at that virtual instant, and arrives
    `episode_duration` (its token counts and a seeded tool latency) later. A learner step over
    B rows takes `learner_step_s(B)` and publishes new parameters at its virtual end. Modes
    (`clock_mode`):

      * "grpo_sync" / "sao_sync": the step's whole batch is sampled at the step's start by the
        wrapped collector (the very rows of a plain synchronous run), its rows run on the slots
        in order, the learner steps after the last arrival. Topology does not matter (the next
        batch needs the new parameters).
      * "grpo_async" / "sao": a unit (one task's `group_size` episodes) starts whenever
        `group_size` slots are free (rows free their slots one by one) and the staleness gate
        allows (`backpressure`: `rlvr.train.config.predicted_lag` of the units buffered and in
        flight must stay within `max_staleness`); the learner takes the first
        `prompts_per_step` units in arrival order as soon as it is free, drops units whose lag
        exceeds `max_staleness` and weights the rest `staleness_decay ** lag`. A unit started
        during a learner step was sampled with the old parameters and carries the old version.
        Colocated: rollout pauses while the learner steps (no unit starts, every unit in flight
        arrives later by the step's length); disaggregated: both run at once.

    Sampling ahead (streaming modes). A unit's task and keys derive from its index alone and its
    rows from those and its parameters, so units are drawn up to `sample_ahead` at a time (default
    slots ÷ group_size) in one engine batch (`run_units`, each unit costed on its own) with the
    parameters current at the first one's start, and each is used at its own start if the
    parameters are still those; otherwise it is drawn again. Between learner steps every launch
    sees the same parameters, so on hardware where a batch of k costs about one episode the run
    is about k times faster. Each row is a draw from the same distribution as when sampled alone,
    with its own key; floating-point results can differ in the last bits with the batch's shape.
    `sample_ahead=1` samples each unit alone at its start.

    `collect` returns the batch with `time/modelled_s` (virtual clock at the end of the learner
    step this batch feeds), `time/modelled_step_s` (since the previous step's end) and
    `time/modelled_wait_s` (the learner idle, waiting for samples). Units already sampled
    and not yet consumed are kept for the next call. The cost of a call is that of the units
    that arrived during it (consumed, buffered or dropped). Keys and tasks of unit u derive from
    (seed, u); tool latencies from (seed, u, row) — two runs give identical clocks and rows.
    """

    def __init__(self, inner, model: TimeModel, *, mode: str, seed: int, max_staleness: int = 0,
                 staleness_decay: float = 1.0, backpressure: bool = True, sample_ahead: int = 0):
        if mode not in MODES:
            raise ValueError(f"modelled clock mode must be one of {MODES}, got {mode!r}")
        if int(sample_ahead) < 0:
            raise ValueError(f"modelled clock sample_ahead must be >= 0 (0: the time model's "
                             f"slots ÷ group_size), got {sample_ahead}")
        if mode.startswith("sao") and inner.group_size != 1:
            raise ValueError(f"modelled clock mode {mode!r} trains single rollouts: it needs "
                             f"algorithm.group_size=1, got {inner.group_size}")
        if mode in ("grpo_async", "sao") and model.slots < inner.group_size:
            raise ValueError(f"time model field slots={model.slots}: the {mode} mode starts a "
                             f"group of {inner.group_size} episodes at once, it needs slots >= "
                             f"algorithm.group_size")
        self.inner, self.model, self.mode, self.seed = inner, model, mode, seed
        self.streaming = mode in ("grpo_async", "sao")
        self.group_size = inner.group_size
        self.max_staleness, self.staleness_decay = max_staleness, staleness_decay
        self.backpressure = backpressure
        self.steps = 0
        self.l_end = 0.0           # virtual end of the last learner step
        # streaming state
        self.now = 0.0             # every event up to `now` handled; starts at `now` pending
        self.free = model.slots
        self.events: list = []     # heap of _Event
        self.ready: list = []      # arrived units not yet consumed (arrival order)
        self.in_flight = 0
        self.units = 0
        self.dropped = 0
        self._seq = 0
        self._old = self._new = None  # (params, version) before / after the switch
        self._switch = 0.0            # when `_new` was published
        self._times = {"time/generate_s": 0.0, "time/verify_s": 0.0}
        # units sampled ahead of their launch (`_sample`)
        self.sample_ahead = int(sample_ahead) if sample_ahead else max(1, model.slots // self.group_size)
        self._ahead: dict = {}        # unit index -> Collected, all drawn under _ahead_version
        self._ahead_version = None
        self._launches: dict = {}     # version -> units launched under it
        self._unused = 0

    # ------------------------------------------------------------------ synchronous modes
    def _collect_sync(self, params, step, policy_version, num_groups):
        start = self.l_end
        got = self.inner.collect(params, step, policy_version, num_groups)
        prompt, gen, tools = row_counts(got.batch)
        durs = [episode_duration(self.model, int(p), int(g), int(t),
                                 seed=sync_row_seed(self.seed, step, i))
                for i, (p, g, t) in enumerate(zip(prompt, gen, tools))]
        ready = max(arrival_times(durs, self.model.slots, start=start), default=start)
        return got, ready, {}

    # ------------------------------------------------------------------ streaming modes
    def _push(self, time_s: float, unit: Optional[ClockUnit]) -> None:
        heapq.heappush(self.events, _Event(float(time_s), self._seq, unit))
        self._seq += 1

    def _ahead_count(self, version: int) -> int:
        """How many units to sample in one batch from unit `self.units` under `version`: the
        launches the previous version saw, less those this version has made, in 1 … sample_ahead
        (sample_ahead for the first version)."""
        prev = self._launches.get(version - 1)
        want = self.sample_ahead if prev is None else prev - self._launches.get(version, 0)
        return max(1, min(self.sample_ahead, want))

    def _sample(self, params, version: int) -> Collected:
        """Unit `self.units` sampled with the parameters of `version`.

        Its task and keys derive from its index alone, so it may be sampled before its virtual
        start: units are drawn `_ahead_count` at a time in one engine batch and kept; a unit
        whose launch comes under another version than it was drawn with is drawn again (the
        ones kept are discarded, `clock/sampled_ahead_unused`)."""
        inner, g, u = self.inner, self.group_size, self.units
        if self._ahead_version != version or u not in self._ahead:
            self._unused += len(self._ahead)
            run_units = getattr(inner.engine, "run_units", None)  # an engine without it: alone
            k = self._ahead_count(version) if run_units is not None else 1
            draws = [unit_draw(inner, i) for i in range(u, u + k)]
            if k == 1:
                tasks, keys = draws[0]
                parts = [inner.engine.run(params, tasks, g, keys, inner.sampling, version)]
            else:
                parts = run_units(params, [t for tasks, _ in draws for t in tasks], g,
                                  jnp.concatenate([keys for _, keys in draws]), inner.sampling,
                                  version)
            for part in parts:  # real seconds spent sampling and judging, used or not
                for key in self._times:
                    self._times[key] += part.stats.get(key, 0.0)
            self._ahead = dict(zip(range(u, u + k), parts))
            self._ahead_version = version
        self._launches[version] = self._launches.get(version, 0) + 1
        return self._ahead.pop(u)

    def _launch(self, t: float, params, version: int) -> None:
        """Starts unit `self.units` at virtual time t, sampled with `params` (`_sample`)."""
        g, u = self.group_size, self.units
        got = self._sample(params, version)
        prompt, gen, tools = row_counts(got.batch)
        ends = [t + episode_duration(self.model, int(p), int(n), int(c),
                                     seed=unit_row_seed(self.seed, u, i))
                for i, (p, n, c) in enumerate(zip(prompt, gen, tools))]
        for e in ends:  # each row frees its slot when it ends
            self._push(e, None)
        self._push(max(ends), ClockUnit(u, int(version), t, max(ends), got))
        self.units += 1
        self.in_flight += 1
        self.free -= g

    def _gate(self, n: int) -> bool:
        return not (self.backpressure and predicted_lag(len(self.ready) + self.in_flight, 1, n)
                    > self.max_staleness)

    def _collect_streaming(self, params, step, policy_version, n):
        if self._new is None:
            self._old = self._new = (params, int(policy_version))
        else:
            self._old, self._new = self._new, (params, int(policy_version))
        self._switch = self.l_end
        colocated = self.model.topology == "colocated"
        cost = RolloutCost()
        while True:
            t = self.now
            if t >= self._switch:  # the learner is free: take a batch if one is there
                kept = [u for u in self.ready if policy_version - u.version <= self.max_staleness]
                self.dropped += len(self.ready) - len(kept)
                self.ready = kept
                if len(self.ready) >= n:
                    break
            if not (colocated and t < self._switch):  # colocated: paused while the learner steps
                p, v = self._new if t >= self._switch else self._old
                while self.free >= self.group_size and self._gate(n):
                    self._launch(t, p, v)
            nxt = self.events[0].time if self.events else math.inf
            if t < self._switch:
                nxt = min(nxt, self._switch)
            if nxt == math.inf:
                raise RuntimeError(f"modelled clock: no episode in flight and {len(self.ready)} "
                                   f"of {n} units ready (time model slots={self.model.slots}, "
                                   f"rollout.max_staleness={self.max_staleness})")
            self.now = nxt
            while self.events and self.events[0].time == nxt:
                e = heapq.heappop(self.events)
                if e.unit is None:
                    self.free += 1
                else:
                    self.in_flight -= 1
                    self.ready.append(e.unit)
                    cost = cost + e.unit.collected.cost
        taken, self.ready = self.ready[:n], self.ready[n:]
        parts, lags = [], []
        for u in taken:
            lag = max(int(policy_version) - u.version, 0)
            c = u.collected
            b = c.batch.replace(
                policy_version=np.full(c.batch.batch_size, u.version, np.int32),
                sample_weights=np.full(c.batch.batch_size, self.staleness_decay ** lag, np.float32))
            parts.append(dataclasses.replace(c, batch=b))
            lags.append(lag)
        got = Collected.concatenate(parts, cost=cost)
        stats = {**self._times, "sample/mean_lag": float(np.mean(lags)),
                 "clock/dropped_stale": float(self.dropped), "clock/in_flight": float(self.in_flight),
                 "clock/sampled_ahead_unused": float(self._unused),
                 "clock/buffered": float(len(self.ready))}
        self._times = dict.fromkeys(self._times, 0.0)
        return got, self.now, stats

    # ------------------------------------------------------------------ the seam
    def collect(self, params, step, policy_version: int, num_groups: Optional[int] = None) -> Collected:
        n = num_groups or self.inner.prompts_per_step
        prev = self.l_end
        if self.streaming:
            got, ready, extra = self._collect_streaming(params, step, policy_version, n)
        else:
            got, ready, extra = self._collect_sync(params, step, policy_version, n)
        start = max(ready, prev)
        self.l_end = start + learner_step_s(self.model, got.batch.batch_size)
        if self.streaming and self.model.topology == "colocated":
            # rollout pauses for the step: every episode in flight ends later by its length
            d = self.l_end - start
            self.events = [dataclasses.replace(e, time=e.time + d) for e in self.events]
            heapq.heapify(self.events)
        self.steps += 1
        stats = {**got.stats, **extra, "time/modelled_s": self.l_end,
                 "time/modelled_step_s": self.l_end - prev, "time/modelled_wait_s": start - prev}
        return dataclasses.replace(got, stats=stats)

    def observe(self, collected: Collected) -> None:
        self.inner.observe(collected)

    def state_dict(self) -> dict:
        return {**self.inner.state_dict(),
                "clock": {"mode": self.mode, "steps": self.steps, "modelled_s": self.l_end}}

    def load_state_dict(self, d: dict) -> None:
        """Restores the virtual clock of a synchronous mode (nothing is in flight between its
        steps). A streaming mode refuses to resume after its first step: its units in flight
        and buffered were sampled with earlier parameters that a checkpoint does not keep."""
        c = d.get("clock", {})
        if self.streaming and c.get("steps", 0):
            raise RuntimeError(
                f"rollout.clock='modelled' in mode {self.mode!r} cannot resume from a checkpoint "
                f"after step 0 (its episodes in flight were sampled with earlier parameters the "
                f"checkpoint does not keep): start the run over (checkpoint.overwrite=True) or "
                f"use a synchronous mode (rollout.asynchronous=False)")
        self.steps = int(c.get("steps", 0))
        self.l_end = float(c.get("modelled_s", 0.0))
        self.inner.load_state_dict({k: v for k, v in d.items() if k != "clock"})

    def prepare(self, ref_params, restored: Optional[dict] = None) -> None:
        self.inner.prepare(ref_params, restored=restored)

    def pending_cost(self) -> RolloutCost:
        return self.inner.pending_cost()

    def close(self) -> None:
        self.inner.close()
