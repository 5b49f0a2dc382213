"""Runs study arms through the one loop, resumably, with a run cache keyed by code version.

* `warm_folder(config, seed, cache)`: the seed's SFT warm start (`rlvr.train.sft.warm_start`,
  cached like the loop's `warm_cache`), exported as a Hugging Face folder. Every arm of a seed
  starts from it through `model.init_from` (`train.sft_steps = 0`), so policy, reference and the
  critic's trunk (`ValueModel.from_policy` copies the policy it is built from) all start from
  the same warm-started weights.
* `run_config(config, ...)`: `validate_config` → `build_run` → `loop.train` in a work dir named
  by the run key (an interrupted run resumes from its latest checkpoint; a streaming run under
  the modelled clock, which cannot resume, starts over, and so does a run whose rollout pivots
  the checkpoint cannot restore, unless it stopped at a re-profile: `must_start_over`,
  `rebuilds_rollout_pivots`). The record (metrics
  rows, result, wall / CPU seconds, code version, `machine()`) is cached as `<cache>/runs/<key>.json`; the key
  hashes the code version (`rlvr.version.code_version()`), the full config (paths inside the
  cache relative to it, so a moved cache still hits) and this module's engine version, so a
  cached run is never reused for other code or settings. `export=True`
  also writes the final policy as a Hugging Face folder (`<cache>/models/<key>`: the start of a
  second stage).

Multi-turn engines sample with the active batch padded to a multiple of `batch_bucket` rows
(the loop's `rollout.batch_bucket`), so a run compiles a few sampler shapes instead of one per
number of still-active episodes. One thing is added around the loop, outside `rlvr/train`: each
held-out evaluation's duration is logged as `eval/wall_s` (wall-clock measures leave evaluation
out), and the preparation before the first step (PivotRL's probe) is timed as the record's
`probe_wall_s`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from typing import Any, Callable, Optional

ENGINE_VERSION = "loop-engines/2"


def content_key(obj: Any) -> str:
    """16 hex digits of sha256 over `obj`'s sorted JSON: the cache key of a run, warm start or breakdown."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cpu_model() -> str:
    """The CPU's model name (`/proc/cpuinfo`'s "model name", else `platform.processor()`), e.g.
    "AMD EPYC". XLA's CPU kernels differ between CPU models, so a run repeats bit for bit only on
    the same kind of CPU."""
    import platform

    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, e.g. under `taskset`): XLA sizes its CPU
    thread pool by it, and the thread count changes how reductions split, so training repeats
    bit for bit only at the same count (measured: a warm start trained pinned to one of two
    cores differs from the same one trained on both)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform
        return os.cpu_count() or 1


def machine() -> str:
    """The CPU model, logical CPU count (and the usable ones where fewer: `usable_cpus`) and jaxlib
    version this process runs on, e.g. `"AMD EPYC, 2 CPUs, jaxlib 0.10.2"` or `"AMD EPYC,
    2 CPUs (1 usable), jaxlib 0.10.2"`: what a run or warm start record carries, since it
    repeats bit for bit only on the same kind of machine and thread count."""
    from importlib import metadata

    try:
        jaxlib = metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        jaxlib = "unknown"
    usable = usable_cpus()
    cpus = f"{os.cpu_count()} CPUs" + (f" ({usable} usable)" if usable != os.cpu_count() else "")
    return f"{cpu_model()}, {cpus}, jaxlib {jaxlib}"


def write_json(path: str, data: Any) -> None:
    """Write `data` as JSON to `path` atomically (a temporary file, then a rename)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, default=float)
    os.replace(tmp, path)


def config_dict(config) -> dict:
    from rlvr.train.config import flatten

    return {k: (list(v) if isinstance(v, tuple) else v.to_dict() if hasattr(v, "to_dict") else v)
            for k, v in flatten(config).items()}


def portable_config(config, cache: str) -> dict:
    """`config_dict(config)` with every absolute path inside `cache` (a warm start, a first
    stage's exported policy) written as `"<cache>/<path relative to it>"`, so that a key hashed
    from it holds wherever the cache lies (a moved or copied repository, another work tree)."""
    root = os.path.abspath(cache) + os.sep
    return {k: ("<cache>/" + os.path.relpath(v, root) if isinstance(v, str) and os.path.isabs(v)
                and os.path.abspath(v).startswith(root) else v)
            for k, v in config_dict(config).items()}


def run_key(config, batch_bucket: int, cache: Optional[str] = None) -> str:
    """The cache key of a run: code version, config, engine version and batch bucket; paths inside
    `cache` relative to it (`portable_config`). Without `cache`: the key records written before
    keys were portable carry (absolute paths). A run under the modelled clock also keys on its
    time model's parameters (the config names only the file, whose numbers a re-measurement
    changes; its `calibration` entry is provenance and does not enter)."""
    from rlvr.version import code_version

    cfg = config_dict(config) if cache is None else portable_config(config, cache)
    spec = {"code": code_version(), "config": cfg, "engine": ENGINE_VERSION,
            "batch_bucket": batch_bucket}
    if config.rollout.get("clock", "real") == "modelled":
        from rlvr.train.clock import TimeModel

        spec["time_model"] = dataclasses.asdict(TimeModel.from_json(config.rollout.time_model))
    return content_key(spec)


def find_record(folder: str, key: str, legacy_key: str,
                ready: Callable[[str], bool] = lambda k: True) -> Optional[str]:
    """The path of the JSON record filed as `<folder>/<key>.json`, or None. A record filed under
    `legacy_key` (its absolute-path key, written before keys were portable) is found too and
    filed again under `key` (a copy), so the cache hits from wherever it lies next: a moved or
    copied repository, another work tree. `ready(k)`: whatever else a hit needs beside the
    record (an exported policy under the same key)."""
    path = os.path.join(folder, f"{key}.json")
    if os.path.exists(path) and ready(key):
        return path
    old = os.path.join(folder, f"{legacy_key}.json")
    if legacy_key == key or not os.path.exists(old) or not ready(legacy_key):
        return None
    import shutil

    tmp = f"{path}.tmp{os.getpid()}"
    shutil.copyfile(old, tmp)
    os.replace(tmp, path)
    return path


# ----------------------------------------------------------------------------- warm start
def warm_spec(config, seed: int) -> dict:
    """What a warm start depends on (its cache key): code version, the model / tokenizer / task
    settings, the `train.sft_*` settings, the LM head's `train.logprob_impl` and the seed."""
    from rlvr.version import code_version

    c = config
    return {"code": code_version(), "model": {k: v for k, v in config_dict(c).items()
                                              if k.startswith(("model.", "tokenizer.", "task."))},
            "sft": [c.train.sft_steps, c.train.sft_batch_size, c.train.sft_learning_rate,
                    c.train.sft_pool], "logprob_impl": c.train.logprob_impl, "seed": seed}


def warm_folder(config, seed: int, cache: str, *, log: Callable = print) -> str:
    """The Hugging Face folder of the seed's SFT warm start of `config`'s model shape, task and
    `train.sft_*` settings (computed once, cached under `<cache>/warm/<key>`)."""
    c = config
    spec = warm_spec(c, seed)
    folder = os.path.join(cache, "warm", content_key(spec))
    if os.path.exists(os.path.join(folder, "warm.json")):
        return folder
    return sft_to_folder(c, seed, folder, spec, log=log, label=f"warm start seed {seed}")


def sft_to_folder(config, seed: int, folder: str, spec: dict, *, log: Callable = print,
                  label: str = "warm start", length: Optional[int] = None) -> str:
    """Trains `config`'s policy (its random init, or `model.init_from`) for `train.sft_steps` SFT
    steps with demonstration draws from `seed`, and saves it to `folder` (a Hugging Face folder
    whose warm.json keeps `spec`, the last SFT NLL, wall and CPU seconds and the machine),
    written whole or not at all. length: the SFT rows' length (default `model.max_seq_len`; a
    task whose demonstrations are shorter than the model's context trains on shorter rows,
    the same loss at less compute)."""
    from flax import nnx

    from rlvr.models.hf import save_pretrained
    from rlvr.records.state import split_model
    from rlvr.train.setup import build_kit_checked, build_policy, build_tokenizer
    from rlvr.train.sft import warm_start

    c = config
    t0, c0 = time.time(), time.process_time()
    kit = build_kit_checked(c)
    tok = build_tokenizer(c, kit)
    policy = build_policy(c, tok.vocab_size)
    graphdef, params, rest = split_model(policy)
    params, m = warm_start(params, graphdef, rest, kit=kit, tokenizer=tok, steps=c.train.sft_steps,
                           batch_size=c.train.sft_batch_size, learning_rate=c.train.sft_learning_rate,
                           length=length or c.model.max_seq_len, seed=seed, pool=c.train.sft_pool,
                           logprob_impl=c.train.logprob_impl, progress=False)
    tmp = f"{folder}.tmp{os.getpid()}"
    save_pretrained(nnx.merge(graphdef, params, rest), tmp)
    write_json(os.path.join(tmp, "warm.json"), {
        "spec": spec, "sft_nll": float(m.get("sft/nll", float("nan"))),
        "wall_s": time.time() - t0, "cpu_s": time.process_time() - c0, "machine": machine()})
    if os.path.exists(folder):  # another process finished first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    else:
        os.replace(tmp, folder)
    log(f"  {label}: {time.time() - t0:.0f} s -> {folder}")
    return folder


def weights_sha256(folder: str) -> str:
    """The sha256 of a Hugging Face folder's `model.safetensors`: which weights it holds."""
    with open(os.path.join(folder, "model.safetensors"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def warm_info(folder: str) -> dict:
    with open(os.path.join(folder, "warm.json")) as f:
        return json.load(f)


def time_evaluations(r, after: Callable[[], None] = lambda: None) -> None:
    """Adds `eval/wall_s` (the evaluation's duration) to every evaluation's metrics, and calls
    `after()` when each evaluation ends."""
    if r.evaluator is None:
        return
    inner = r.evaluator.evaluate

    def timed(params):
        t0 = time.perf_counter()
        out = inner(params)
        wall = time.perf_counter() - t0
        after()
        return {**out, "eval/wall_s": wall}

    r.evaluator.evaluate = timed


def time_probe(r, spent: dict, after: Callable[[], None] = lambda: None) -> None:
    """Times the collector's preparation before the first step (PivotRL's probe: a one-time
    selection) into `spent["probe_wall_s"]`, then calls `after()`; a resumed run's preparation
    (restoring the kept pivots) leaves the first invocation's measurement."""
    inner = r.collector.prepare

    def timed(ref_params, restored=None):
        t0 = time.perf_counter()
        out = inner(ref_params, restored=restored)
        if restored is None:
            spent["probe_wall_s"] = time.perf_counter() - t0
            after()
        return out

    r.collector.prepare = timed


def rebuilds_rollout_pivots(config) -> bool:
    """Whether resuming a run of `config` rebuilds its PivotRL kept set instead of restoring it:
    rollout candidates (`pivot.candidates="demo+rollout"`) re-profiled every
    `pivot.reprofile_every` steps, under an `rlvr/` whose checkpoints do not keep rollout
    candidates (no `rlvr.train.pivots.candidate_to_dict`: versions before they did). There the
    collector's preparation on resume probes the start again with π_ref, so the run would train
    on the start's kept set until its next re-profile and charge the probe a second time."""
    from rlvr.train import pivots

    return (config.pivot.candidates == "demo+rollout" and int(config.pivot.reprofile_every) > 0
            and not hasattr(pivots, "candidate_to_dict"))


def must_start_over(config, workdir: str) -> Optional[str]:
    """Why an interrupted run of `config` in `workdir` has to start over instead of resuming, or
    None where it resumes (also when there is nothing to resume).

    * A streaming run under the modelled clock (`rollout.clock="modelled"` with asynchronous
      rollouts: modes GRPO-async and SAO) cannot resume from a checkpoint after step 0, since
      its episodes in flight were sampled with earlier parameters that a checkpoint does not
      keep (`rlvr.train.clock.ModelledClockCollector.load_state_dict`). Synchronous modes and
      the real clock resume.
    * A run that `rebuilds_rollout_pivots` resumes only from a checkpoint at a re-profile step
      (a multiple of `pivot.reprofile_every`, which the periodic checkpoints at
      `checkpoint.every` are when it divides; a hard kill leaves the last of them), where the
      step re-profiles before it samples, as the uninterrupted run does (`resume_at_reprofile`);
      from a checkpoint at any other step (a SIGTERM's) it starts over. The runner first drops
      checkpoints past an earlier re-profile step's (`drop_past_reprofile`), which it keeps
      beside a SIGTERM's (`keeping_last_reprofile`), so this is left for a checkpoint with none
      before it."""
    from rlvr.train.workdir import checkpoint_steps

    steps = checkpoint_steps(workdir)
    latest = max(steps, default=0)
    if config.rollout.clock == "modelled" and bool(config.rollout.asynchronous) and latest > 0:
        return "a streaming modelled-clock run cannot resume"
    every = int(config.pivot.reprofile_every)
    if rebuilds_rollout_pivots(config) and latest % every:
        return (f"its checkpoint at step {latest} is not at a re-profile (every {every} steps), and "
                f"this rlvr/ rebuilds its rollout pivots on resume from the start's probe")
    return None


def keeping_last_reprofile(config):
    """A copy of `config` to launch a run that `rebuilds_rollout_pivots` with: its checkpoints
    keep at least two steps (`checkpoint.max_to_keep` ≥ 2; checkpoint cadence is run-neutral, so
    the run's key and record keep `config` as given). When every periodic checkpoint falls on a
    re-profile step (`checkpoint.every` a multiple of `pivot.reprofile_every`), the checkpoint a
    SIGTERM saves at the step reached then leaves the last re-profile step's beside it, and
    `drop_past_reprofile` resumes the run from there. Other configs are returned as given."""
    if not rebuilds_rollout_pivots(config) or int(config.checkpoint.max_to_keep) >= 2:
        return config
    config = config.copy_and_resolve_references()
    config.checkpoint.max_to_keep = 2
    return config


def drop_past_reprofile(config, workdir: str) -> list:
    """For a run that `rebuilds_rollout_pivots` whose latest checkpoint in `workdir` is not at a
    re-profile step (a SIGTERM's) while an earlier one is: deletes the checkpoints after the last
    re-profile step and returns their steps, so the run resumes there exactly
    (`resume_at_reprofile`; the steps after it are redone, their metrics rows dropped by the
    resume). Returns [] and deletes nothing otherwise (then `must_start_over` decides)."""
    import shutil

    from rlvr.train.workdir import checkpoint_steps

    if not rebuilds_rollout_pivots(config):
        return []
    every = int(config.pivot.reprofile_every)
    steps = checkpoint_steps(workdir)
    at_reprofile = [s for s in steps if s % every == 0]
    if not at_reprofile or steps[-1] % every == 0:
        return []
    later = [s for s in steps if s > at_reprofile[-1]]
    for s in later:
        shutil.rmtree(os.path.join(workdir, "checkpoints", str(s)))
    return later


def resume_at_reprofile(r, config, workdir: str) -> None:
    """On a resume of a run that `rebuilds_rollout_pivots` from a checkpoint at a re-profile step
    after step 0, skips the collector's preparation: the first step re-profiles with the restored
    parameters and that step's key before it samples, so the run goes on exactly as the
    uninterrupted one, and the skipped re-probe of the start (its time, and its cost charged to
    that step) is not paid. A resume at step 0 prepares as usual: there the re-probe is the
    start's own, charged once as in the uninterrupted run."""
    from rlvr.train.workdir import checkpoint_steps

    latest = max(checkpoint_steps(workdir), default=0)
    if not (rebuilds_rollout_pivots(config) and config.checkpoint.resume and latest > 0
            and latest % int(config.pivot.reprofile_every) == 0):
        return
    inner = r.collector.prepare

    def prepare(ref_params, restored=None):
        return None if restored is not None else inner(ref_params)

    r.collector.prepare = prepare


def starting_over(config):
    """A copy of `config` that deletes the earlier run in its workdir and starts from step 0
    (`checkpoint.resume=False`, `checkpoint.overwrite=True`); the run's key and record keep the
    config as given."""
    config = config.copy_and_resolve_references()
    config.checkpoint.resume = False
    config.checkpoint.overwrite = True
    return config


def with_batch_bucket(config, batch_bucket: int):
    """A copy of `config` (a multi-turn study run) whose sampler calls pad the active episodes
    to a multiple of `batch_bucket` rows (`rollout.batch_bucket`)."""
    config = config.copy_and_resolve_references()
    config.rollout.batch_bucket = int(batch_bucket)
    return config


# ----------------------------------------------------------------------------- runs
def run_config(config, *, workdir_root: str, cache: str, batch_bucket: int = 32,
               export: bool = False, label: str = "", log: Callable = print) -> dict:
    """Runs (or resumes, or loads from the cache) one configured run; returns its record:
    key, label, code_version, config, rows (metrics.jsonl), result (the loop's result dict),
    wall_s / cpu_s (summed over invocations, an interrupted attempt that had to start over
    included; saved after the probe and after every evaluation too, so an invocation killed
    without clean-up counts up to its last save), restarts (how many times it started over: `must_start_over`), probe_wall_s (the preparation before the first
    step, `time_probe`), load_avg (the machine's 1-minute load average when the last invocation
    started and ended), from_cache, model (exported folder or None)."""
    from rlvr.version import code_version

    config = with_batch_bucket(config, batch_bucket)
    key, legacy_key = run_key(config, batch_bucket, cache), run_key(config, batch_bucket)

    def exported(k: str) -> bool:
        return os.path.exists(os.path.join(cache, "models", k, "config.json"))

    link = os.path.join(cache, "models", key)
    if not os.path.lexists(link) and exported(legacy_key):  # the portable key names it too
        os.symlink(legacy_key, link)
    found = find_record(os.path.join(cache, "runs"), key, legacy_key,
                        ready=lambda k: not export or exported(k))
    if found:
        with open(found) as f:
            rec = json.load(f)
        rec["from_cache"] = True
        if rec.get("model"):  # the exported policy, where the cache lies now
            rec["model"] = os.path.join(cache, "models", key)
        if label:  # the caller's name for the run, as a fresh run would carry it
            rec["label"] = label
        return rec
    path = os.path.join(cache, "runs", f"{key}.json")
    model_dir = os.path.join(cache, "models", key)
    from rlvr.train.config import validate_config
    from rlvr.train.loop import train
    from rlvr.train.metrics import read_metrics
    from rlvr.train.setup import build_run

    wd = os.path.join(workdir_root, key)
    os.makedirs(wd, exist_ok=True)
    spent_path = os.path.join(wd, "study_spent.json")
    spent = {"wall_s": 0.0, "cpu_s": 0.0, "invocations": 0}
    if os.path.exists(spent_path):
        with open(spent_path) as f:
            spent = json.load(f)
    log(f"  run {label or key} ({key}) in {wd}")
    validate_config(config)
    launch = keeping_last_reprofile(config)
    dropped = drop_past_reprofile(config, wd)
    if dropped:
        from rlvr.train.workdir import checkpoint_steps

        log(f"  {label or key}: its checkpoint at step {dropped[-1]} is not at a re-profile; "
            f"resuming from the one at step {max(checkpoint_steps(wd))}, its last re-profile")
    why = must_start_over(config, wd)
    if why:
        log(f"  {label or key}: {why}; starting it over")
        launch = starting_over(launch)
        spent = {**spent, "restarts": spent.get("restarts", 0) + 1}
    t0, c0, load0 = time.time(), time.process_time(), os.getloadavg()[0]

    def so_far() -> dict:  # the spent totals with this invocation's time up to now
        return {**spent, "wall_s": spent["wall_s"] + time.time() - t0,
                "cpu_s": spent["cpu_s"] + time.process_time() - c0,
                "invocations": spent["invocations"] + 1}

    def save() -> None:  # after the probe and each evaluation: a hard kill loses only the time since
        write_json(spent_path, so_far())

    r = build_run(launch, wd)
    try:
        resume_at_reprofile(r, launch, wd)
        time_evaluations(r, after=save)
        time_probe(r, spent, after=save)
        result = train(r)
        if export:
            from rlvr.models.hf import save_pretrained

            tmp = f"{model_dir}.tmp{os.getpid()}"
            save_pretrained(r.model_of(r.state.params), tmp)
            if os.path.exists(model_dir):
                import shutil

                shutil.rmtree(model_dir)
            os.replace(tmp, model_dir)
    finally:
        r.close()
        spent = so_far()
        write_json(spent_path, spent)
    rec = {"key": key, "label": label, "code_version": code_version(), "config": config_dict(config),
           "rows": read_metrics(wd), "result": result, **spent, "finished": time.time(),
           "model": model_dir if export else None, "batch_bucket": batch_bucket,
           "load_avg": [load0, os.getloadavg()[0]], "machine": machine()}
    write_json(path, rec)
    rec["from_cache"] = False
    return rec
