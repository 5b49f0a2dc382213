"""Measures the modelled clock's system model M on the machine it runs on.

    python -m experiments.study.time_model [--scale long512] [--repeats 5] \\
        [--out experiments/study/system_model.json]

The modelled wall-clock (`rlvr.train.clock`, docs/algorithms.md §7) charges every episode
set-up + prefill + decode + tool latency and every learner step its samples × seconds per sample
(docs/algorithms.md (A.24)). This script measures those seconds for the study's model and
testbed at a scale (`arms.base_config("grpo", 0, arms.scale(scale))`: the checkout kit, the
scale's model shape, the GRPO batch), through the project's own code paths, and writes the time
model with a `calibration` entry saying what measured it (`rlvr.train.clock.read_calibration`):

  * the typical episode: the median prompt-side tokens P (prompt and observations) and generated
    tokens N of the kit's demonstrations of `--episodes` training tasks (the counts the clock
    multiplies, `rlvr.train.clock.row_counts`);
  * prefill_s_per_token = t_1 / P, t_1 the time of a batch-1, 1-new-token sample
    (`rlvr.rollout.sampler.sample`) of a P-token prompt;
  * decode_s_per_token = (t_N − t_1) / N, t_N the time of the same sample with N new tokens,
    greedy, no stop tokens (every step decodes): a slot decodes its own episode. With these two,
    prefill · P + decode · N = t_N: the model reproduces the measured episode-sized sample;
  * learner_s_per_sample: one learner step (`Run.learn` and fetching its metrics, what the
    loop's `time/learn_s` times) on a batch of the scale's rows (prompts_per_step × group_size
    demonstration episodes padded as the agent collector pads them) ÷ its rows, the first
    (compiling) step left out;
  * env_setup_s: building a training task (the kit's source) and resetting a fresh environment
    of the kit (`env_factory`), the mean over `--setups` episodes per repeat;
  * tool latency: not timed: the testbed's own latency model converted exactly (`tool_model`);
    a scale without tool latency keeps the committed file's values (the grid of
    experiments/study/wallclock.py sets the median to a multiple of the learner step anyway,
    keeping the file's cap ÷ median);
  * topology and slots: design choices, not measurements: the committed file's values.

Every timed call is compiled first; each parameter is the median of `--repeats` repeats (the
table shows median, min and max). The model's weights are its random initialisation: the time
of a forward pass does not depend on their values. Re-measure on another machine (e.g. an
accelerator) by running this there and committing the file it writes.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import statistics
import sys
import time
from typing import Optional, Sequence

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

OUT = os.path.join(ROOT, "experiments", "study", "system_model.json")
# fields of the time model that are design choices, kept from the committed file
DESIGN = ("topology", "slots")
TOOL_FIELDS = ("tool_median_s", "tool_tail_index", "tool_cap_s")


@dataclasses.dataclass(frozen=True)
class Measured:
    """One parameter's per-repeat estimates [repeats] (seconds) and how they were obtained; the
    parameter is their median."""

    name: str
    values: tuple
    method: str

    def __post_init__(self):
        v = np.asarray(self.values, float)
        if v.size == 0 or not np.all(np.isfinite(v)) or not np.median(v) > 0:
            raise ValueError(f"{self.name}: the repeats must give finite times with a median "
                             f"> 0 (a difference of two timings can fall below 0 by noise in "
                             f"one repeat, not in most), got {list(self.values)}")

    @property
    def median(self) -> float:
        return float(statistics.median(self.values))

    def spread(self) -> dict:
        return {"median": self.median, "min": float(min(self.values)),
                "max": float(max(self.values)), "repeats": len(self.values),
                "method": self.method}


# ----------------------------------------------------------------------------- the estimates
def prefill_estimate(t_1: float, prompt_tokens: int) -> float:
    """Seconds per prompt token: a 1-new-token sample of a `prompt_tokens` prompt ÷ its tokens."""
    if prompt_tokens < 1:
        raise ValueError(f"prompt_tokens must be >= 1, got {prompt_tokens}")
    return t_1 / prompt_tokens


def decode_estimate(t_n: float, t_1: float, new_tokens: int) -> float:
    """Seconds per generated token: (an N-token sample − the 1-token sample) ÷ N, so that
    prefill_estimate · P + decode_estimate · N = t_N."""
    if new_tokens < 2:
        raise ValueError(f"new_tokens must be >= 2 (one decode step beyond the prefill's), "
                         f"got {new_tokens}")
    return (t_n - t_1) / new_tokens


def tool_model(latency_s: float, alpha: float, cap: float) -> Optional[dict]:
    """The testbed's tool latency as the time model's fields, or None without latency.

    The checkout environment draws L = latency_s · min(cap, u^(−1/α)), u ~ Uniform(0, 1]
    (`rlvr.envs.shop.latency_draw`); the time model draws min(x_m · u^(−1/α), tool_cap_s) with
    x_m = tool_median_s / 2^(1/α) (`rlvr.train.clock.tool_latency`). They are the same law for
    tool_median_s = latency_s · 2^(1/α), tool_tail_index = α, tool_cap_s = latency_s · cap,
    provided the median lies below the cap (2^(1/α) <= cap); otherwise the time model cannot
    express it and a ValueError says so.
    """
    if latency_s == 0:
        return None
    if not (latency_s > 0 and alpha > 0 and cap >= 1):
        raise ValueError(f"tool latency latency_s={latency_s!r}, latency_alpha={alpha!r}, "
                         f"latency_cap={cap!r}: need latency_s >= 0, alpha > 0, cap >= 1")
    m = 2.0 ** (1.0 / alpha)
    if m > cap:
        raise ValueError(f"tool latency latency_alpha={alpha!r}, latency_cap={cap!r}: the "
                         f"uncapped median multiplier 2^(1/α) = {m:.3g} exceeds the cap, which "
                         f"the time model (median, tail index, cap) cannot express")
    return {"tool_median_s": latency_s * m, "tool_tail_index": float(alpha),
            "tool_cap_s": latency_s * cap}


# ----------------------------------------------------------------------------- the testbed
def build(scale: str, workdir: str):
    """The study's GRPO run at `scale` (`arms.base_config`), random initialisation, no SFT, no
    evaluation or checkpoints: (config, `rlvr.train.setup.Run`)."""
    from experiments.study import arms
    from rlvr.train.config import validate_config
    from rlvr.train.setup import build_run

    c = arms.base_config("grpo", 0, arms.scale(scale))
    c.train.sft_steps, c.eval.num_tasks, c.checkpoint.every = 0, 0, -1
    validate_config(c)
    return c, build_run(c, workdir)


def demo_streams(run, n: int, seed: int = 0) -> list:
    """(token ids, loss mask) of the kit's demonstrations of `n` training tasks, rendered as the
    agent loop renders them (`rlvr.train.sft.demo_stream`)."""
    from rlvr.train.sft import demo_stream

    tasks = run.kit.source.sample(n, seed)
    return [demo_stream(run.kit, t, run.tokenizer, run.renderer) for t in tasks]


def typical_episode(streams) -> tuple[int, int]:
    """(median prompt-side tokens, median generated tokens) of the streams: loss-mask 0 and 1."""
    gen = [int(round(sum(m))) for _, m in streams]
    prompt = [len(ids) - g for (ids, _), g in zip(streams, gen)]
    return int(statistics.median(prompt)), int(statistics.median(gen))


def _timed(fn) -> float:
    import jax

    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t0


def measure_sampler(model, prompt: Sequence[int], new_tokens: int, repeats: int, *,
                    pad_id: int) -> tuple[list, list]:
    """(t_1 per repeat, t_N per repeat): batch-1 greedy samples of `prompt` with 1 and
    `new_tokens` new tokens, no stop tokens; both compiled first, then timed alternately."""
    import jax
    import jax.numpy as jnp

    from rlvr.rollout.sampler import SamplingParams, sample

    toks = jnp.asarray([list(prompt)], jnp.int32)
    mask = jnp.ones_like(toks, bool)
    key = jax.random.key(0)
    calls = [lambda n=n: sample(model, toks, mask, key,
                                SamplingParams(greedy=True, max_new_tokens=n, stop_token_ids=()),
                                pad_id=pad_id).tokens
             for n in (1, new_tokens)]
    for fn in calls:
        _timed(fn)  # compiles
    t1, tn = [], []
    for _ in range(repeats):
        t1.append(_timed(calls[0]))
        tn.append(_timed(calls[1]))
    return t1, tn


def learner_batch(run, streams):
    """A RolloutBatch of the demonstration streams as the agent collector builds one
    (`episodes_to_batch`, padded to the model's max_seq_len), turn ids from the action runs,
    behaviour log-probs the policy's own, rewards alternately 0 and 1."""
    import jax.numpy as jnp

    from rlvr.models import scoring
    from rlvr.rollout.agent_loop import Episode, episodes_to_batch

    eps = []
    for ids, mask in streams:
        m = np.asarray(mask) > 0
        starts = m & ~np.concatenate([[False], m[:-1]])
        turn = np.where(m, np.cumsum(starts) - 1, -1)
        eps.append(Episode(task=None, env=None, tokens=list(ids), loss_mask=list(mask),
                           behavior_logprobs=[0.0] * len(ids), turn_ids=[int(x) for x in turn]))
    rewards = np.arange(len(eps)) % 2
    b = episodes_to_batch(eps, pad_id=run.tokenizer.pad_id, seq_bucket=run.config.model.max_seq_len,
                          rewards=rewards)
    lp, _ = scoring.token_logprobs(run.model_of(run.init_params), jnp.asarray(b.tokens),
                                   positions=jnp.asarray(b.positions),
                                   attention_mask=jnp.asarray(b.attention_mask), temperature=1.0)
    return dataclasses.replace(b, behavior_logprobs=np.asarray(lp) * np.asarray(b.loss_mask))


def measure_learner(run, batch, repeats: int) -> list:
    """Seconds of `repeats` learner steps (`Run.learn`, metrics fetched, as the loop times
    `time/learn_s`) after one compiling step that is not counted."""
    import jax

    state = run.init_state(run.init_params)
    out = []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        state, dev = run.learn(state, batch)
        jax.device_get(dev)
        if i:
            out.append(time.perf_counter() - t0)
    return out


def measure_env_setup(kit, repeats: int, per_repeat: int, seed: int = 0) -> list:
    """Per repeat, the mean seconds of building a training task (`kit.source.sample`) and
    resetting a fresh environment of the kit with it, over `per_repeat` episodes."""
    out = []
    for r in range(repeats):
        t0 = time.perf_counter()
        for i in range(per_repeat):
            task = kit.source.sample(1, seed + r * per_repeat + i)[0]
            env = kit.env_factory()
            env.reset(task, seed=task.random_seed)
        out.append((time.perf_counter() - t0) / per_repeat)
    return out


# ----------------------------------------------------------------------------- the whole
def machine() -> dict:
    """The machine and JAX device the numbers were measured on."""
    import jax

    from experiments.study.runner import cpu_model

    cpu = cpu_model()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    d = jax.devices()[0]
    return {"machine": f"{platform.machine()}, {cpu}, {os.cpu_count()} logical CPUs "
                       f"({usable} usable)",
            "device": (f"{d.platform}" + (f" ({kind})" if (kind := getattr(d, "device_kind", ""))
                                           and kind != d.platform else "")
                       + f" × {jax.device_count()}"),
            "jax": jax.__version__, "python": platform.python_version()}


@dataclasses.dataclass(frozen=True)
class Timings:
    """What `measure` timed (seconds; one entry per repeat) and the sizes it timed.

    prompt_tokens, generated_tokens: the typical episode (P, N); episodes: the demonstrations
    it is the median of. t_1, t_n: batch-1 samples with 1 and N new tokens. learner_step_s:
    learner steps of `rows` episodes padded to `seq_len` tokens. env_setup_s: per-episode
    set-up, the mean of `setups` per repeat.
    """

    prompt_tokens: int
    generated_tokens: int
    episodes: int
    t_1: tuple
    t_n: tuple
    learner_step_s: tuple
    rows: int
    seq_len: int
    env_setup_s: tuple
    setups: int


def measure(scale: str, repeats: int, *, episodes: int = 32, setups: int = 32,
            workdir: str = "/tmp/time_model_run", log=print):
    """Times the study's testbed at `scale` on this machine (module docstring):
    (the run's config, `Timings`)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    c, run = build(scale, workdir)
    try:
        streams = demo_streams(run, episodes)
        p, n = typical_episode(streams)
        if p + n > c.model.max_seq_len:
            raise ValueError(f"typical episode {p} + {n} tokens exceeds model.max_seq_len="
                             f"{c.model.max_seq_len}")
        prompt = next(ids[:p] for ids, _ in streams if len(ids) >= p)  # a demonstration's start
        log(f"typical episode: {p} prompt-side tokens, {n} generated tokens (median of "
            f"{episodes} demonstrations)")
        t1, tn = measure_sampler(run.model_of(run.init_params), prompt, n, repeats,
                                 pad_id=run.tokenizer.pad_id)
        rows = int(c.sampling.prompts_per_step) * int(c.algorithm.group_size)
        steps = measure_learner(run, learner_batch(run, demo_streams(run, rows, seed=1)), repeats)
        setup = measure_env_setup(run.kit, repeats, setups)
    finally:
        run.close()
    return c, Timings(prompt_tokens=p, generated_tokens=n, episodes=episodes, t_1=tuple(t1),
                      t_n=tuple(tn), learner_step_s=tuple(steps), rows=rows,
                      seq_len=int(c.model.max_seq_len), env_setup_s=tuple(setup), setups=setups)


def model_file(config, t: Timings, base: dict, *, scale: str, command: str) -> tuple[dict, list]:
    """The time-model file's JSON object from the timings: the measured parameters (medians),
    the tool latency of the config's testbed (`tool_model`; a scale without latency keeps
    `base`'s), the design choices of `base`, and the `calibration` entry. Returns (it, the list
    of `Measured`)."""
    from rlvr.train.clock import TimeModel
    from rlvr.version import code_version

    p, n = t.prompt_tokens, t.generated_tokens
    measured = [
        Measured("prefill_s_per_token", tuple(prefill_estimate(x, p) for x in t.t_1),
                 f"batch-1 sample of a {p}-token prompt with 1 new token (rlvr.rollout.sampler."
                 f"sample, compiled first) ÷ {p}"),
        Measured("decode_s_per_token",
                 tuple(decode_estimate(b, a, n) for a, b in zip(t.t_1, t.t_n)),
                 f"(batch-1 greedy sample of {n} new tokens, no stop tokens − the 1-token "
                 f"sample) ÷ {n}"),
        Measured("learner_s_per_sample", tuple(x / t.rows for x in t.learner_step_s),
                 f"learner step (Run.learn + metrics fetch, as time/learn_s) on {t.rows} "
                 f"demonstration episodes padded to {t.seq_len} tokens ÷ {t.rows}; first "
                 f"(compiling) step left out"),
        Measured("env_setup_s", t.env_setup_s,
                 f"build a training task and reset a fresh {'+'.join(config.task.names)} "
                 f"environment, mean of {t.setups} per repeat"),
    ]
    kw = config.task.kwargs
    lat = (float(kw.get("latency_s", 0.0)), float(kw.get("latency_alpha", 1.5)),
           float(kw.get("latency_cap", 30.0)))
    tool = tool_model(*lat)
    if tool is None:
        missing = [f for f in TOOL_FIELDS if f not in base]
        if missing:
            raise ValueError(f"scale {scale!r} has no tool latency: the base file must give "
                             f"{missing}")
        tool = {f: base[f] for f in TOOL_FIELDS}
        tool_method = (f"scale {scale!r} turns tool latency off: the base file's values kept "
                       f"(experiments/study/wallclock.py's grid sets the median to a multiple "
                       f"of the learner step, keeping cap ÷ median)")
    else:
        tool_method = (f"not timed: the testbed's latency model (task.kwargs latency_s="
                       f"{lat[0]:g}, latency_alpha={lat[1]:g}, latency_cap={lat[2]:g}: "
                       f"L = latency_s · min(cap, u^(−1/α))) converted exactly: median = "
                       f"latency_s · 2^(1/α), tail index = α, cap = latency_s · cap")
    missing = [f for f in DESIGN if f not in base]
    if missing:
        raise ValueError(f"the base file must give the design choices {missing}")
    fields = {m.name: m.median for m in measured}
    fields.update(tool)
    fields.update({f: base[f] for f in DESIGN})
    TimeModel(**fields)  # validates
    cal = dict(machine(), date=datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC"), command=command, scale=scale, code_version=code_version(),
        typical_episode={"prompt_tokens": p, "generated_tokens": n, "demonstrations": t.episodes},
        parameters={**{m.name: m.spread() for m in measured},
                    **{f: {"value": tool[f], "method": tool_method} for f in TOOL_FIELDS},
                    **{f: {"value": base[f], "method": "a design choice, not a measurement: "
                                                        "the base file's value kept"}
                       for f in DESIGN}})
    return dict(fields, calibration=cal), measured


def write_model_file(path: str, obj: dict) -> None:
    """Writes the time-model file atomically: a temporary file beside it, then a rename, so an
    interrupted write leaves the previous file whole."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def describe(calibration) -> str:
    """One line on a time-model file's `calibration` entry: "measured on <machine>, device
    <device>, jax <version>, <date>, by `<command>` (code <version>)"; an entry that is not
    this script's object is shown as it is."""
    if not isinstance(calibration, dict) or "date" not in calibration:
        return str(calibration)
    c = calibration
    return (f"measured on {c.get('machine', '?')}, device {c.get('device', '?')}, jax "
            f"{c.get('jax', '?')}, {c['date']}, by `{c.get('command', '?')}` (code "
            f"{c.get('code_version', '?')})")


def table(measured) -> str:
    """Markdown table: parameter, median, min, max, repeats."""
    lines = ["| parameter | median | min | max | repeats |", "|---|---:|---:|---:|---:|"]
    for m in measured:
        s = m.spread()
        lines.append(f"| {m.name} | {s['median']:.4g} | {s['min']:.4g} | {s['max']:.4g} | "
                     f"{s['repeats']} |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    from experiments.study import arms

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", default="long512", choices=sorted(arms.SCALES))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--episodes", type=int, default=32,
                    help="demonstrations whose median episode sets the prompt and decode lengths")
    ap.add_argument("--setups", type=int, default=32, help="environment set-ups per repeat")
    ap.add_argument("--base", default=OUT,
                    help="the file whose topology and slots (and tool latency, for a scale "
                         "without) are kept")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    with open(args.base) as f:
        base = json.load(f)
    t0 = time.perf_counter()
    config, timings = measure(args.scale, args.repeats, episodes=args.episodes,
                              setups=args.setups)
    command = " ".join(["python -m experiments.study.time_model"] + list(
        sys.argv[1:] if argv is None else argv))
    out, measured = model_file(config, timings, base, scale=args.scale, command=command)
    cal = out["calibration"]
    print(f"{cal['machine']}; {cal['device']}; jax {cal['jax']}")
    print(table(measured))
    for f in TOOL_FIELDS + DESIGN:
        print(f"{f} = {out[f]!r}: {cal['parameters'][f]['method']}")
    write_model_file(args.out, out)
    print(f"wrote {args.out} ({time.perf_counter() - t0:.0f} s)")
    return out


if __name__ == "__main__":
    main()
