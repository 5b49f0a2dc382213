"""Modelled wall-clock of the study's arms under a fixed grid of system models.

    python -m experiments.study.wallclock            # profiles from results/wallclock/profiles.json
    python -m experiments.study.wallclock --quick    # measure the profiles first (tiny runs, ~1 min)

On 2 shared CPU cores a real run cannot show wall-clock effects (rollout and learner share the
cores), so the study reports wall-clock in virtual time (`rlvr.train.clock`):

    modelled wall-clock to a level, arm ÷ GRPO-sync, under system model M
        = measured token ratio (arm ÷ GRPO-sync sampled tokens to the level)
          ÷ modelled throughput ratio (arm ÷ GRPO-sync sampled tokens per modelled second under M)

The grid is fixed before running: tool-call latency median {0.1, 1, 10} × the GRPO-sync learner
step, Pareto tail index {1.2, 1.5, 2.5}, rollout slots {32, 128}, topology colocated /
disaggregated; the other parameters (per-token prefill and decode, environment set-up, learner
seconds per sample) are those of `experiments/study/system_model.json`, and each cell's
tool-latency cap keeps that file's cap ÷ median.
Arms: GRPO-sync (groups, a barrier per step), GRPO-async (groups on arrival, staleness bound),
SAO (single rollouts on arrival), SAO-sync (single rollouts, a barrier per step).

Throughput under M comes from `ModelledClockCollector` itself, run for `--steps` learner steps
over replayed episodes: unit u's rows take their (prompt tokens, generated tokens, tool calls)
from the arm's measured per-episode profile (row drawn with a seed from (u, row)), so no model
is sampled here. Profiles: per episode, the counts of the study's testbed episodes sampled by
the quick-scale warm-started policy (`--quick`: the GRPO and SAO configs, tool latency off), the
mean episode of each study run record (`--records`: files or folders of compressed records;
cost/turns, cost/sampled_tokens, cost/prompt_tokens of its last step), or a JSON file
(`--profiles`) of the same fields. Token ratios (sampled tokens to the level, arm ÷ GRPO-sync):
from the four arms' own runs (`--run-arms` runs them through the study runner under the modelled
clock and writes their compressed records to `--arm-records`, default
experiments/study/records/wallclock_quick/, which the table then reads), else SAO's from a
study_sao.json (`--token-ratios`, GRPO ÷ SAO); an arm measured in neither is shown as not
measured, with the reason where its runs give no ratio.

    python -m experiments.study.wallclock --run-arms --scale wallclock_quick --seeds 1

Writes `<out>/wallclock.md` (the table) and `<out>/wallclock.json` (every number).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from rlvr.train import clock  # noqa: E402
from rlvr.train.collectors import Collected, Collector, RolloutCost, stream_seed  # noqa: E402

GRID = dict(latency_x=(0.1, 1.0, 10.0), tail=(1.2, 1.5, 2.5), slots=(32, 128),
            topology=("colocated", "disaggregated"))
ARMS = ("grpo_sync", "grpo_async", "sao", "sao_sync")
LABELS = {"grpo_sync": "GRPO-sync", "grpo_async": "GRPO-async", "sao": "SAO", "sao_sync": "SAO-sync"}
METHOD = {"grpo_sync": "grpo", "grpo_async": "grpo", "sao": "sao", "sao_sync": "sao"}
SYSTEM_MODEL = os.path.join(ROOT, "experiments", "study", "system_model.json")
OUT = os.path.join(ROOT, "experiments", "results", "wallclock")
STUDY_SAO = os.path.join(ROOT, "experiments", "results", "long512_lr_sao", "study_sao.json")


@dataclasses.dataclass(frozen=True)
class Profile:
    """A method's measured episodes: per-episode counts [N] and its batch shape."""

    prompt_tokens: tuple
    sampled_tokens: tuple
    tool_calls: tuple
    group_size: int
    prompts_per_step: int
    max_staleness: int
    source: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------- profiles
def quick_profiles(steps: int = 2) -> dict:
    """Per-method episode counts of the study's testbed at quick scale (the scale's SFT warm
    start, tool latency off): `steps` synchronous batches of the method's collector."""
    from experiments.study import arms
    from rlvr.train.config import validate_config
    from rlvr.train.setup import build_run

    out = {}
    for method in ("grpo", "sao"):
        c = arms.base_config(method, 0, arms.scale("quick"))
        c.task.kwargs.latency_s = 0.0
        c.eval.num_tasks, c.checkpoint.every = 0, -1
        staleness = int(c.rollout.max_staleness)
        c.rollout.asynchronous = False  # the plain group collector samples the episodes
        from rlvr.configs import base as base_config

        ref = base_config.get_config()  # fields of asynchronous collection back at their defaults
        for k in ("arrival", "episode_slots", "queue_size", "producer_batch", "max_staleness",
                  "staleness_backpressure", "staleness_decay"):
            c.rollout[k] = ref.rollout[k]
        validate_config(c)
        r = build_run(c, os.path.join("/tmp", f"wallclock_profile_{method}"))
        try:
            from rlvr.train.loop import _sft

            params = _sft(r, None)[0]  # the quick scale's SFT warm start
            rows = []
            for s in range(steps):
                got = r.collector.collect(params, s, 0)
                rows.append(np.stack(clock.row_counts(got.batch), axis=1))
        finally:
            r.close()
        rows = np.concatenate(rows)
        out[method] = Profile(tuple(int(x) for x in rows[:, 0]), tuple(int(x) for x in rows[:, 1]),
                              tuple(int(x) for x in rows[:, 2]), int(c.algorithm.group_size),
                              int(c.sampling.prompts_per_step), staleness,
                              f"--quick: {len(rows)} episodes of the {method} config at quick "
                              f"scale, SFT warm-started policy")
    return out


def record_profiles(paths) -> dict:
    """Per-method mean episodes from study run records (`experiments.study.runner` records:
    `config` flattened, `rows` the metrics rows): per episode, generated tokens
    (cost/sampled_tokens), tool calls (cost/turns − 1 per episode) and prompt-side tokens
    (cost/prompt_tokens per action); episodes = steps × prompts_per_step × group_size. Several
    records of a method are pooled (one mean episode per record)."""
    from experiments.study.records import SUFFIX, read_record

    out: dict = {}
    files = []
    for path in paths:  # a folder: its compressed records
        files += ([os.path.join(path, n) for n in sorted(os.listdir(path)) if n.endswith(SUFFIX)]
                  if os.path.isdir(path) else [path])
    for path in files:
        if path.endswith(SUFFIX):
            rec = read_record(path)
        else:
            opener = __import__("gzip").open if path.endswith(".gz") else open
            with opener(path, "rt") as f:
                rec = json.load(f)
        c, rows = rec["config"], [r for r in rec["rows"] if "cost/turns" in r and r.get("step")]
        if not rows:
            raise ValueError(f"{path}: no metrics row with cost/turns after step 0")
        last = rows[-1]
        method = "sao" if int(c["algorithm.group_size"]) == 1 else "grpo"
        g, p = int(c["algorithm.group_size"]), int(c["sampling.prompts_per_step"])
        episodes = int(last["step"]) * g * p
        turns = last["cost/turns"] / episodes
        ep = (round(last["cost/prompt_tokens"] / max(last["cost/turns"], 1)),
              round(last["cost/sampled_tokens"] / episodes), max(round(turns - 1), 0))
        prev = out.get(method)
        cols = [list(x) for x in ((prev.prompt_tokens, prev.sampled_tokens, prev.tool_calls)
                                  if prev else ((), (), ()))]
        for col, v in zip(cols, ep):
            col.append(int(v))
        out[method] = Profile(*(tuple(x) for x in cols), g, p,
                              int(c.get("rollout.max_staleness", 2)),
                              f"run records ({len(cols[0])}), mean episode per record")
    return out


def load_profiles(path: str) -> dict:
    with open(path) as f:
        raw = json.load(f)
    return {m: Profile(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})
            for m, d in raw.items()}


# ----------------------------------------------------------------------------- replay
class _ReplaySampler:
    def draw(self, tag, n):
        from rlvr.records.task import TaskSpec

        return [TaskSpec(task_id=str(tag), prompt="", task_type="agent") for _ in range(n)]

    def state_dict(self):
        return {}

    def load_state_dict(self, d):
        pass


class _ReplayEngine:
    """Rows whose counts are episodes of the profile (drawn by a seed from the unit's task tag
    and the row)."""

    def __init__(self, profile: Profile, seed: int):
        self.p, self.seed = profile, seed
        self.n = len(profile.sampled_tokens)
        self.width = max(a + b for a, b in zip(profile.prompt_tokens, profile.sampled_tokens)) + 1

    def run(self, params, tasks, group_size, keys, sampling, policy_version):
        from rlvr.records.batch import RolloutBatch

        tag = tasks[0].task_id
        rows = len(tasks) * group_size
        w = self.width
        loss = np.zeros((rows, w), np.float32)
        attn = np.zeros((rows, w), bool)
        turns = np.full((rows, w), -1, np.int32)
        tokens = 0
        for i in range(rows):
            j = stream_seed("wallclock", self.seed, tag, i) % self.n
            p, g, t = self.p.prompt_tokens[j], self.p.sampled_tokens[j], self.p.tool_calls[j]
            attn[i, :p + g] = True
            loss[i, p:p + g] = 1.0
            turns[i, p:p + g] = t
            tokens += g
        batch = RolloutBatch.create(tokens=np.ones((rows, w), np.int32), loss_mask=loss,
                                    behavior_logprobs=np.zeros((rows, w), np.float32),
                                    rewards=np.zeros(rows, np.float32), attention_mask=attn,
                                    turn_ids=turns,
                                    policy_version=np.full(rows, policy_version, np.int32))
        all_tasks = tuple(t for t in tasks for _ in range(group_size))
        return Collected(batch, tuple(range(rows)), all_tasks, group_size,
                         RolloutCost(turns=rows, sampled_tokens=tokens))


class _ReplayInner(Collector):
    """Replays a profile's episode counts as a synchronous collector (the seam's no-op defaults
    for everything but `collect`)."""

    def __init__(self, profile: Profile, seed: int):
        import jax

        self.engine, self.sampler = _ReplayEngine(profile, seed), _ReplaySampler()
        self.group_size, self.prompts_per_step = profile.group_size, profile.prompts_per_step
        self.rollout_key, self.sampling = jax.random.PRNGKey(seed), None

    def collect(self, params, step, version, n=None):
        n = n or self.prompts_per_step
        return self.engine.run(params, self.sampler.draw(f"sync/{step}", n), self.group_size,
                               None, None, version)


def modelled_throughput(profile: Profile, model: clock.TimeModel, mode: str, *, steps: int,
                        seed: int) -> dict:
    """Sampled tokens per modelled second over `steps` learner steps of `mode` under `model`."""
    inner = _ReplayInner(profile, seed)
    c = clock.ModelledClockCollector(inner, model, mode=mode, seed=seed,
                                     max_staleness=profile.max_staleness, backpressure=True)
    tokens, t, lag = 0, 0.0, []
    for s in range(steps):
        got = c.collect(None, s, s)
        tokens += got.cost.sampled_tokens
        t = got.stats["time/modelled_s"]
        lag.append(got.stats.get("sample/mean_lag", 0.0))
    return {"tokens": tokens, "modelled_s": t, "tokens_per_s": tokens / t,
            "mean_lag": float(np.mean(lag)), "dropped": float(c.dropped)}


# ----------------------------------------------------------------------------- measured runs
RECORDS = os.path.join(ROOT, "experiments", "study", "records", "wallclock_quick")


def records_scale(folder: str) -> str:
    """The study scale (`arms.SCALES`) of the wall-clock arms' records in `folder`, from its name:
    the name itself where it is a scale (`wallclock_quick`), else the scale after `wallclock_`
    (`wallclock_long512` → `long512`); "" where the name names no scale."""
    from experiments.study import arms

    name = os.path.basename(os.path.normpath(folder))
    if name in arms.SCALES:
        return name
    rest = name[len("wallclock_"):] if name.startswith("wallclock_") else ""
    return rest if rest in arms.SCALES else ""


def scale_words(folder: str) -> str:
    """`folder`'s scale as the tables name it: "scale `<name>`", or that the folder names none."""
    scale = records_scale(folder)
    return f"scale `{scale}`" if scale else "scale not named by the folder"


def record_name(mode: str, seed: int) -> str:
    """File name of the compressed record of wall-clock arm `mode` (a key of ARMS) for `seed`."""
    from experiments.study.records import SUFFIX

    return f"{mode}.s{seed}{SUFFIX}"


def run_arms(folder: str, *, scale: str = "quick", seeds=(0,), cache: str, workdir: str,
             modes=ARMS, log=print) -> dict:
    """Runs the four wall-clock arms (`arms.WALLCLOCK_ARMS`: GRPO-sync, GRPO-async, SAO,
    SAO-sync under the modelled clock and `arms.SYSTEM_MODEL`) for each seed through the study
    runner (cached, resumable; each method at its config's learning rate, each seed from its
    SFT warm start) and writes each record compressed to `<folder>/<mode>.s<seed>.jsonl.gz`.
    `modes`: the arms to run (a subset of ARMS, in ARMS order; GRPO-sync is every ratio's
    reference). Returns {mode: {seed: record}}."""
    from experiments.study import arms, common, records, runner

    unknown = sorted(set(modes) - set(ARMS))
    if unknown:
        raise ValueError(f"--arms: {unknown} are not wall-clock arms; allowed {list(ARMS)}")
    sc = arms.scale(scale)
    out: dict = {m: {} for m in ARMS if m in modes}
    for seed in seeds:
        warm = runner.warm_folder(arms.base_config("grpo", seed, sc), seed, cache, log=log)
        for mode in (m for m in ARMS if m in modes):
            name = arms.WALLCLOCK_ARMS[mode]
            arm = arms.ARMS[name]
            c = arms.arm_config(name, seed, sc, warm=warm, lr=common.method_default_lr(arm.method))
            rec = runner.run_config(c, workdir_root=workdir, cache=cache,
                                    label=f"{name}/seed{seed}", log=log)
            records.write_record(os.path.join(folder, record_name(mode, seed)), rec)
            out[mode][seed] = rec
    return out


def load_arm_records(folder: str) -> dict:
    """{mode: {seed: record}} of the compressed records `run_arms` wrote to `folder`."""
    from experiments.study.records import SUFFIX, read_record

    out: dict = {}
    for name in sorted(os.listdir(folder)):
        if not name.endswith(SUFFIX):
            continue
        mode, _, seed = name[:-len(SUFFIX)].rpartition(".s")
        if mode not in ARMS:
            raise ValueError(f"{folder}/{name}: {mode!r} is not a wall-clock arm ({ARMS})")
        out.setdefault(mode, {})[int(seed)] = read_record(os.path.join(folder, name))
    if "grpo_sync" not in out:
        raise ValueError(f"{folder}: no GRPO-sync record (the reference of every ratio)")
    return out


def measured_ratios(recs: dict, level: float | None = None) -> dict:
    """What the wall-clock arms' runs measured, from their records ({mode: {seed: record}}):
    the level ℓ = 0.9 × GRPO-sync's mean end success (mean of its last 3 evaluations), or
    `level` where given (a fixed level, for readings of how the costs move with ℓ); per arm
    and seed the sampled tokens and modelled seconds (`time/modelled_s`) to ℓ (a run that never
    reached it: its last cost, a bound) and its sampled tokens per modelled second over the whole
    run; per arm the ratios arm ÷ GRPO-sync over the seeds both ran (geometric mean with a paired
    t-interval on the log-ratios; NaN interval with one seed), the cost ratios leaving out a seed
    where neither run reached ℓ (its ratio is unknown, as `claims.ratio_values` does).
    {"level", "seeds", "arms": {mode: {"tokens": [...], "modelled_s": [...], "reached": [...],
    "tokens_per_modelled_s": [...], "ratio_seeds": the seeds of the cost ratios, "ratio_bound":
    what the cost ratios are (`ratio_bound` over those seeds), "tokens_ratio",
    "modelled_ratio", "throughput_ratio": (p, lo, hi)}}}."""
    from experiments.study import stats

    nan = float("nan")
    cur = {m: {s: stats.curve(r) for s, r in by.items()} for m, by in recs.items()}
    ref = cur["grpo_sync"]
    if level is None:
        level = 0.9 * float(np.mean([stats.plateau(c) for c in ref.values()]))
    elif not (np.isfinite(level) and 0.0 < level <= 1.0):
        raise ValueError(f"level must be a success rate in (0, 1], got {level}")
    runs = [r for by in recs.values() for r in by.values()]
    out = {"level": level, "seeds": sorted(ref), "arms": {},
           "compute": {"runs": len(runs), "wall_s": float(sum(r.get("wall_s", 0.0) for r in runs)),
                       "cpu_s": float(sum(r.get("cpu_s", 0.0) for r in runs))}}
    for m in ARMS:
        if m not in cur:
            continue
        seeds = [s for s in sorted(cur[m]) if s in ref]
        tok = [stats.cost_to(cur[m][s], level, "tokens") for s in seeds]
        mod = [stats.cost_to(cur[m][s], level, "modelled_s") for s in seeds]
        ref_tok = [stats.cost_to(ref[s], level, "tokens")[0] for s in seeds]
        ref_mod = [stats.cost_to(ref[s], level, "modelled_s")[0] for s in seeds]
        def ratio(num, den):
            p, lo, hi = stats.paired_ratio(num, den)
            return (p, lo, hi) if len(stats.log_ratios(num, den)) > 1 else (p, nan, nan)

        # the run's own modelled throughput: sampled tokens per modelled second at its end
        tps = [float(cur[m][s]["tokens"][-1] / cur[m][s]["modelled_s"][-1]) for s in seeds]
        ref_tps = [float(ref[s]["tokens"][-1] / ref[s]["modelled_s"][-1]) for s in seeds]
        ref_ok = [bool(stats.cost_to(ref[s], level, "tokens")[1]) for s in seeds]
        keep = [i for i, (_, ok) in enumerate(tok) if ok or ref_ok[i]]  # known in one arm at least
        bound = ratio_bound([tok[i][1] for i in keep], [ref_ok[i] for i in keep])
        out["arms"][m] = {
            "tokens_per_modelled_s": tps, "throughput_ratio": ratio(tps, ref_tps),
            "seeds": seeds, "tokens": [t for t, _ in tok], "modelled_s": [t for t, _ in mod],
            "reached": [bool(r) for _, r in tok], "ratio_seeds": [seeds[i] for i in keep],
            "ratio_bound": bound,
            "tokens_ratio": ratio([tok[i][0] for i in keep], [ref_tok[i] for i in keep]),
            "modelled_ratio": ratio([mod[i][0] for i in keep], [ref_mod[i] for i in keep])}
    return out


# ----------------------------------------------------------------------------- the table
BOUND_MARK = {"": "", "at least": "≥", "at most": "≤", "unknown": "?"}


def ratio_bound(arm_reached, ref_reached) -> str:
    """What a ratio arm ÷ GRPO-sync of costs to ℓ is when some runs never reached ℓ (their cost
    is their last one, a lower bound): "" (every run reached it), "at least" (only the arm's
    runs fell short), "at most" (only GRPO-sync's) or "unknown" (both): the seeds' kinds
    (`stats.censored_ratio_kind`) combined as the claims combine them."""
    from experiments.study import stats

    kind = stats.combined_kind(stats.censored_ratio_kind(bool(a), bool(r))
                               for a, r in zip(arm_reached, ref_reached))
    return "" if kind == stats.EXACT else kind


def token_ratios(path: str, arm_records: str = "") -> tuple[dict, dict, dict]:
    """({arm: (point, lo, hi)} of measured sampled tokens to the level, arm ÷ GRPO-sync;
    {arm: where it was measured}; {arm: `ratio_bound`} for the ratios that are bounds). From the
    wall-clock arms' runs in `arm_records` (a folder `run_arms` wrote: every arm they ran,
    `measured_ratios`) where given, else SAO's from a study_sao.json (`path`: GRPO ÷ SAO,
    inverted); an arm neither measured is left out."""
    out, src, bounds = {"grpo_sync": (1.0, 1.0, 1.0)}, {"grpo_sync": "the reference"}, {}
    if path and os.path.exists(path):
        with open(path) as f:
            r = json.load(f).get("ratios", {}).get("tokens_ratio")
        if r:  # GRPO ÷ SAO: invert (the interval's ends swap)
            out["sao"] = (1.0 / r[0], 1.0 / r[2], 1.0 / r[1])
            src["sao"] = (f"`{os.path.relpath(path, ROOT)}` (real clock, SAO with producer "
                          f"batches, not per-episode arrival)")
    if arm_records and os.path.isdir(arm_records):
        m = measured_ratios(load_arm_records(arm_records))
        where = os.path.relpath(arm_records, ROOT)
        for a, v in m["arms"].items():
            if a == "grpo_sync":
                continue
            if not np.isfinite(v["tokens_ratio"][0]):  # e.g. the warm start was already at ℓ
                if a in out:  # measured elsewhere (the study_sao.json): that reading stands
                    continue
                src[a] = (f"its runs ({scale_words(arm_records)}, `{where}`) give no token ratio "
                          f"(GRPO-sync's cost to ℓ = {m['level']:.3f} is "
                          f"{', '.join(f'{t:.0f}' for t in m['arms']['grpo_sync']['tokens'])} "
                          f"tokens: ℓ lies at or below the warm start's success)")
                continue
            out[a] = tuple(float(x) for x in v["tokens_ratio"])
            n, left = len(v["ratio_seeds"]), len(v["seeds"]) - len(v["ratio_seeds"])
            b = v["ratio_bound"]
            if b:
                bounds[a] = b
            bound = f", {b}: a run never reached ℓ" if b else ""
            out_of = (f"; {left} left out: neither run reached ℓ" if left else "")
            src[a] = (f"runs under the modelled clock ({scale_words(arm_records)}), `{where}` ({n} seed"
                      f"{'s' if n != 1 else ''}{bound}{out_of})")
    return out, src, bounds


def run_grid(profiles: dict, base: clock.TimeModel, *, steps: int, seed: int) -> list:
    ref = profiles["grpo"]
    learner_step = clock.learner_step_s(base, ref.group_size * ref.prompts_per_step)
    cells = []
    for lx, tail, slots, topo in itertools.product(*GRID.values()):
        median = lx * learner_step  # the cap keeps the system model's cap ÷ median
        model = dataclasses.replace(base, tool_median_s=median, tool_tail_index=tail, slots=slots,
                                    topology=topo,
                                    tool_cap_s=base.tool_cap_s * median / base.tool_median_s)
        arms = {a: modelled_throughput(profiles[METHOD[a]], model, a, steps=steps, seed=seed)
                for a in ARMS}
        ref_tps = arms["grpo_sync"]["tokens_per_s"]
        for a in ARMS:
            arms[a]["throughput_ratio"] = arms[a]["tokens_per_s"] / ref_tps
        cells.append({"latency_x": lx, "tool_median_s": model.tool_median_s, "tail": tail,
                      "slots": slots, "topology": topo, "arms": arms})
    return cells


def _fmt_ratio(tok, thr, bound: str = "") -> str:
    """The wall-clock ratio of a cell: the token ratio `tok` over the throughput ratio `thr`,
    marked ≥ / ≤ where the token ratio is a bound."""
    if tok is None:
        return "not measured"
    p, lo, hi = (x / thr for x in tok)
    mark = BOUND_MARK[bound]
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return f"{mark}{p:.2f} (one seed: no interval)"
    return f"{mark}{p:.2f} [{lo:.2f}, {hi:.2f}]"


def _fmt_tok(v, bound: str = "") -> str:
    p, lo, hi = v
    if not np.isfinite(p):
        return "n/a"
    return BOUND_MARK[bound] + f"{p:.2f}" + (
        f" [{lo:.2f}, {hi:.2f}]" if np.isfinite(lo) and np.isfinite(hi) else "")


def runs_section(folder: str) -> list:
    """Lines on the wall-clock arms' own runs (`measured_ratios`): per arm its sampled tokens
    and modelled seconds to ℓ (under the committed system model) and both ratios to GRPO-sync."""
    recs = load_arm_records(folder)
    m = measured_ratios(recs)
    lines = ["", f"## The arms' runs under the modelled clock ({scale_words(folder)}, "
                 f"`{os.path.relpath(folder, ROOT)}`)",
             "",
             f"The four arms run through the study runner (`python -m experiments.study.wallclock "
             f"--run-arms`) under the system model their config named when they ran "
             f"(`rollout.time_model`, not a grid cell; the records keep its path, not its numbers, "
             f"and a run's cache key holds them); "
             f"ℓ = 0.9 × GRPO-sync's end success = {m['level']:.3f}. Per seed: sampled tokens and "
             f"modelled seconds to ℓ (≥: never reached, the last cost). Ratios arm ÷ GRPO-sync "
             f"(geometric mean over seeds, paired t-interval where there are several; ≥ / ≤: a "
             f"bound, where a run never reached ℓ; a seed neither run reached is left out).",
             "",
             "| arm | seeds | end success (mean of the last 3 evaluations) | sampled tokens to ℓ | modelled s to ℓ | token ratio | "
             "modelled wall-clock ratio | tokens per modelled s (run) | throughput ratio (run) |",
             "|---|---:|---|---|---|---|---|---|---|"]
    from experiments.study import stats

    for a, v in m["arms"].items():
        ends = [stats.plateau(stats.curve(recs[a][s])) for s in v["seeds"]]
        mark = ["" if r else "≥" for r in v["reached"]]
        bound = v["ratio_bound"]
        lines.append(
            f"| {LABELS[a]} | {len(v['seeds'])} | {', '.join(f'{e:.3f}' for e in ends)} | "
            f"{', '.join(f'{k}{t:.0f}' for k, t in zip(mark, v['tokens']))} | "
            f"{', '.join(f'{k}{t:.1f}' for k, t in zip(mark, v['modelled_s']))} | "
            f"{_fmt_tok(v['tokens_ratio'], bound)} | {_fmt_tok(v['modelled_ratio'], bound)} | "
            f"{', '.join(f'{t:.2f}' for t in v['tokens_per_modelled_s'])} | "
            f"{_fmt_tok(v['throughput_ratio'])} |")
    return lines


def calibration_words(path: str) -> str:
    """What measured the time model at `path` (its `calibration` entry), or that it records
    none (its parameters are placeholders)."""
    from experiments.study.time_model import describe

    cal = clock.read_calibration(path)
    return (describe(cal) if cal else
            "no calibration recorded: placeholders until measured by "
            "`python -m experiments.study.time_model`")


def write_results(cells, profiles, ratios, base, args, out: str, seconds: float,
                  sources: dict = None, bounds: dict = None) -> str:
    os.makedirs(out, exist_ok=True)
    lines = [
        "# Modelled wall-clock under the system model grid",
        "",
        f"Generated by `python -m experiments.study.wallclock{' --quick' if args.quick else ''}` "
        f"({seconds:.0f} s). System model M: `{os.path.relpath(args.system_model, ROOT)}` "
        f"(prefill {base.prefill_s_per_token:.3g} s/token, decode {base.decode_s_per_token:.3g} "
        f"s/token, set-up {base.env_setup_s:.3g} s, learner {base.learner_s_per_sample:.3g} "
        f"s/sample, tool cap {base.tool_cap_s / base.tool_median_s:.3g} × the median; "
        f"{calibration_words(args.system_model)}) with the grid's tool latency median (× the "
        f"GRPO-sync learner step), tail index, slots and topology. {args.steps} learner steps "
        f"per arm and cell.",
        "",
        "Throughput: sampled tokens per modelled second, arm ÷ GRPO-sync (> 1: faster). "
        "Modelled wall-clock to the level, arm ÷ GRPO-sync = measured token ratio ÷ throughput "
        "ratio (< 1: the arm reaches the level sooner), with the token ratio's interval carried "
        "through.",
        "",
        "Profiles: " + "; ".join(f"{m}: {p.source}, mean {np.mean(p.sampled_tokens):.1f} "
                                  f"generated tokens, {np.mean(p.tool_calls):.2f} tool calls per "
                                  f"episode" for m, p in profiles.items()),
        "",
        "Measured token ratios (arm ÷ GRPO-sync, sampled tokens to the level): " +
        "; ".join(f"{LABELS[a]} {_fmt_tok(v, (bounds or {}).get(a, ''))} "
                  f"(from {(sources or {}).get(a, 'the reference')})"
                  for a, v in ratios.items() if a != "grpo_sync") +
        ("" if set(ratios) >= set(ARMS) else
         "; not measured: " + ", ".join(
             LABELS[a] + (f" ({(sources or {})[a]})" if a in (sources or {}) else "")
             for a in ARMS if a not in ratios)) + ".",
        "",
        "| latency × step | tail | slots | topology | " +
        " | ".join(f"{LABELS[a]} throughput" for a in ARMS[1:]) + " | " +
        " | ".join(f"{LABELS[a]} wall-clock ratio" for a in ARMS[1:]) + " |",
        "|---:|---:|---:|---|" + "---:|" * (2 * (len(ARMS) - 1)),
    ]
    for c in cells:
        thr = [c["arms"][a]["throughput_ratio"] for a in ARMS[1:]]
        wall = [_fmt_ratio(ratios.get(a), c["arms"][a]["throughput_ratio"], (bounds or {}).get(a, ""))
                for a in ARMS[1:]]
        lines.append(f"| {c['latency_x']:g} | {c['tail']:g} | {c['slots']} | {c['topology']} | "
                     + " | ".join(f"{x:.2f}" for x in thr) + " | " + " | ".join(wall) + " |")
    if getattr(args, "arm_records", "") and os.path.isdir(args.arm_records):
        lines += runs_section(args.arm_records)
    table = "\n".join(lines) + "\n"
    with open(os.path.join(out, "wallclock.md"), "w") as f:
        f.write(table)
    with open(os.path.join(out, "wallclock.json"), "w") as f:
        json.dump({"grid": {k: list(v) for k, v in GRID.items()}, "arms": list(ARMS),
                   "system_model": dataclasses.asdict(base),
                   "system_model_calibration": clock.read_calibration(args.system_model),
                   "steps": args.steps,
                   "token_ratios": ratios, "token_ratio_sources": sources or {},
                   "token_ratio_bounds": bounds or {}, "cells": cells,
                   "arm_runs": (dict(measured_ratios(load_arm_records(args.arm_records)),
                                     records=os.path.relpath(args.arm_records, ROOT),
                                     scale=records_scale(args.arm_records))
                                if getattr(args, "arm_records", "") and os.path.isdir(args.arm_records)
                                else None),
                   "profiles": {m: p.to_dict() for m, p in profiles.items()}}, f, indent=1)
    return table


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="measure the episode profiles first")
    ap.add_argument("--profiles", default=os.path.join(OUT, "profiles.json"))
    ap.add_argument("--records", nargs="*", default=(),
                    help="study run records (JSON, optionally .gz) to take the profiles from")
    ap.add_argument("--token-ratios", default=STUDY_SAO)
    ap.add_argument("--arm-records", default=RECORDS,
                    help="folder of the wall-clock arms' compressed run records (--run-arms "
                         "writes it): their measured token ratios fill the table ('' : none)")
    ap.add_argument("--run-arms", action="store_true",
                    help="run the four wall-clock arms first (study runner, cached), writing "
                         "their records to --arm-records")
    ap.add_argument("--scale", default="wallclock_quick", help="--run-arms: the study scale")
    ap.add_argument("--seeds", type=int, default=1,
                    help="--run-arms: how many seeds (first-seed … first-seed + n − 1)")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="--run-arms: the first seed (a later sitting adds seeds after those run)")
    ap.add_argument("--arms", default=",".join(ARMS),
                    help="--run-arms: comma-separated arms to run (default: all four)")
    ap.add_argument("--cache", default=os.path.join(ROOT, "experiments", "results", ".study_cache"))
    ap.add_argument("--system-model", default=SYSTEM_MODEL)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.run_arms:
        if args.seeds < 1 or args.first_seed < 0:
            raise SystemExit(f"--seeds must be ≥ 1 and --first-seed ≥ 0 "
                             f"(got {args.seeds}, {args.first_seed})")
        run_arms(args.arm_records, scale=args.scale,
                 seeds=tuple(range(args.first_seed, args.first_seed + args.seeds)),
                 cache=args.cache, workdir=os.path.join(args.cache, "work"),
                 modes=tuple(a for a in args.arms.split(",") if a))
    if args.records:
        profiles = record_profiles(args.records)
        missing = sorted({"grpo", "sao"} - set(profiles))
        if missing:
            raise SystemExit(f"--records: no record of {missing} (group_size > 1: grpo, 1: sao)")
    elif args.quick:
        profiles = quick_profiles()
        os.makedirs(os.path.dirname(args.profiles) or ".", exist_ok=True)
        with open(args.profiles, "w") as f:
            json.dump({m: p.to_dict() for m, p in profiles.items()}, f)
    elif os.path.exists(args.profiles):
        profiles = load_profiles(args.profiles)
    else:
        raise SystemExit(f"no episode profiles at {args.profiles}: run with --quick or --profiles")
    base = clock.TimeModel.from_json(args.system_model)
    cells = run_grid(profiles, base, steps=args.steps, seed=args.seed)
    ratios, sources, bounds = token_ratios(args.token_ratios, args.arm_records)
    table = write_results(cells, profiles, ratios, base, args, args.out,
                          time.perf_counter() - t0, sources, bounds)
    print(table)
    return table


if __name__ == "__main__":
    main()
