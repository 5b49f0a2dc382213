"""The training loop — the only one (docs/architecture.md (B.1), §7).

    setup → warm start (SFT) → restore → for each step:
        collected = collector.collect(params, step, version)    # host: sample, act, verify
        state, metrics = step_fn(state, collected.batch)        # device: one jitted learner step
        evaluate · log · checkpoint

Every algorithm (GRPO, RLOO, REINFORCE, PPO, PivotRL, SAO, a registered one) and every task kit
(single-turn or multi-turn) runs through it; what differs is the collector (`rlvr.train.setup`
picks groups / pivots, optionally asynchronous) and the algorithm's pure pieces.

`run(config, workdir)` is what `launch.py` calls. Determinism and resume: the tasks and keys
of step s derive from (seed, s), the learner's PRNG lives in TrainState, and a checkpoint holds
the TrainState plus a JSON host dict (step, rollout cost so far, the collector's state — curriculum
statistics, kept pivots (a rollout state with its history and snapshot) and the probe's cost not yet
charged — and the warm-start evaluation), so relaunching the same command
continues with exactly the metrics it would have had (asynchronous collection excepted: its
arrival order depends on timing).

Per step, `metrics.jsonl` (and TensorBoard) get the algorithm's docs/architecture.md §7 metrics, the host sample
metrics (`rlvr.train.samples.sample_metrics`), the verification pool's retries / timeouts /
restarts, the time split (generate / verify / learn), throughput, cumulative rollout cost
(`cost/*`: policy calls, sampled tokens, prompt tokens conditioned on, prefill tokens; probes
included) and, every
`eval.every` steps (and every `eval.dense_every` steps during the first `eval.dense_steps`:
`eval_due`), the held-out evaluation (`rlvr.train.evaluate`). Every
`logging.samples_every` steps sampled records go to `samples.jsonl`. `train.token_budget`
stops the run once that many tokens were sampled. With `checkpoint.export` the trained policy
ends as a Hugging Face folder in `<workdir>/export` (`rlvr.train.modes`).

Safety (`rlvr.train.workdir`, `rlvr.train.preempt`): a run holds the workdir's lock; before
anything is written it checks that a resume does not change what the run computes (the
checkpoint keeps its config) and that a launch starting over does not mix with or delete an
earlier run; each launch's config is kept as `config.<n>.json`. SIGTERM / SIGINT stop the run
at the next step boundary (all processes at the same one) with a checkpoint and the metrics row
of the step reached, then `Preempted` (exit status 128 + signal). The progress bar shows the
compile and evaluation phases and ends where the run stopped.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from rlvr.train.checkpoint import CheckpointError, Checkpointer
from rlvr.train.collectors import RolloutCost
from rlvr.train.config import validate_config
from rlvr.train.metrics import MetricWriter, read_metrics
from rlvr.train.preempt import Preempted, StopSignals, agreed_stop
from rlvr.train.samples import global_sample_metrics, sample_metrics, write_samples
from rlvr.train.setup import Run, build_run
from rlvr.train.sft import warm_start
from rlvr.train.workdir import (WorkdirLock, changed_fields, clear_run, config_dict, earlier_run,
                                last_launch_config, refuse_changes, refuse_start_over,
                                write_launch_config)


def run(config, workdir: str, *, warm_cache: str | None = None) -> dict:
    """Runs (or resumes) the experiment of `config` in `workdir`; returns the result dict
    (`before` / `after` evaluation, `history` of evaluations with their rollout cost, `last`
    step metrics, `cost`, `step`). `warm_cache`: a directory caching the SFT warm start.

    Raises `WorkdirBusy` at once when another live run holds the workdir, `WorkdirError` when
    the launch would mix or delete another run (`rlvr.train.workdir`), and `Preempted` (a
    SystemExit, status 128 + signal) when SIGTERM / SIGINT stopped it (`rlvr.train.preempt`)."""
    validate_config(config)
    # single host: the lock is taken before anything is built, so a busy workdir fails at once;
    # multi-host, process 0 takes it in `train` (the process index is known after build_run)
    lock = None if config.mesh.distributed else WorkdirLock(workdir).acquire()
    try:
        r = build_run(config, workdir)
        try:
            return train(r, warm_cache=warm_cache)
        finally:
            r.close()
    finally:
        if lock is not None:
            lock.release()


def _sft(r: Run, warm_cache):
    """Warm-started parameters (and the SFT metrics row) of a fresh run."""
    c = r.config
    t = c.train
    if t.sft_steps == 0:
        return r.init_params, {}
    t0 = time.perf_counter()
    spec = None
    if warm_cache:
        from rlvr.version import code_version

        from rlvr.train.config import flatten

        spec = {"model": flatten(c.model), "tokenizer": flatten(c.tokenizer),
                "task": flatten(c.task), "code": code_version()}
    # the warm start trains the whole model (with LoRA, adapters attach after it)
    init, graphdef, rest = r.policy.warm_start_view(r.init_params)
    params, m = warm_start(
        init, graphdef, rest, kit=r.kit, tokenizer=r.tokenizer, steps=t.sft_steps,
        batch_size=t.sft_batch_size, learning_rate=t.sft_learning_rate, length=c.model.max_seq_len,
        seed=c.seed, pool=t.sft_pool, num_microbatches=t.num_microbatches,
        progress=c.train.progress and r.is_main, cache_dir=warm_cache, cache_spec=spec,
        renderer=r.renderer, logprob_impl=r.algorithm.settings.logprob_impl,
        logprob_interpret=r.algorithm.settings.logprob_interpret, logprob_mesh=r.algorithm.mesh)
    params = r.policy.after_warm_start(params)
    params = jax.device_put(params, jax.tree.map(lambda x: x.sharding, r.init_params))
    return params, {"sft/nll": m.get("sft/nll", np.nan), "time/sft_s": time.perf_counter() - t0}


def _open_workdir(r: Run):
    """(checkpointer or None, the step to resume from or None, this config as a dict): the
    workdir checks of `rlvr.train.workdir` (a resume may not change what the run computes; a
    launch that starts over may not mix with or delete an earlier run), then this launch's
    config files. Nothing is written to the workdir before the checks pass."""
    c = r.config
    workdir = r.workdir
    ckpt = None
    if c.checkpoint.every >= 0:
        ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), max_to_keep=c.checkpoint.max_to_keep)
    overwrite = c.checkpoint.overwrite
    resume = ckpt is not None and c.checkpoint.resume
    latest = ckpt.latest_step() if resume else None
    cfg = config_dict(c)
    allow = tuple(c.checkpoint.allow_changes) if ckpt is not None else ()
    if latest is not None:
        try:
            old = ckpt.read_host(latest).get("config")
        except CheckpointError:
            old = None  # restore_latest reports it and falls back to an older checkpoint
        if old is None:  # a checkpoint from before configs were kept in it
            old = last_launch_config(workdir)
        if old is not None:
            refuse_changes(workdir, latest, changed_fields(old, cfg, allow))
    else:
        why = ("checkpoint.resume is False" if ckpt is not None and not resume else
               "checkpoint.every is -1: no checkpoint to resume from" if ckpt is None else
               "no checkpoint to resume from")
        refuse_start_over(workdir, why, overwrite)
        if overwrite and earlier_run(workdir):
            if ckpt is not None:
                ckpt.close()
            _barrier(r, "rlvr_workdir_checked")
            if r.is_main:
                print(f"checkpoint.overwrite: deleting the earlier run in {workdir}", file=sys.stderr)
                clear_run(workdir)
            _barrier(r, "rlvr_workdir_cleared")
            if ckpt is not None:
                ckpt = Checkpointer(os.path.join(workdir, "checkpoints"),
                                    max_to_keep=c.checkpoint.max_to_keep)
    _barrier(r, "rlvr_workdir_checked")  # every process checked before process 0 writes
    if r.is_main:
        write_launch_config(workdir, c)
    return ckpt, latest, cfg


def _barrier(r: Run, name: str) -> None:
    if r.num_processes > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def _start(r: Run, ckpt, latest, warm_cache):
    """(state, host, start step, resumed?): the latest checkpoint, or a fresh warm start."""
    if latest is not None:  # the newest checkpoint that loads; unreadable newer ones reported
        state, host, start, problems = ckpt.restore_latest(r.init_state(r.init_params))
        for p in problems:
            print(f"skipped {p}", file=sys.stderr)
        if r.is_main:
            print(f"resumed from step {start} ({ckpt.directory})", file=sys.stderr)
        r.collector.load_state_dict(host.get("collector", {}))
        r.collector.prepare(r.reference_params(state), restored=host.get("collector"))
        return state, host, start, True
    params, sft_metrics = _sft(r, warm_cache)
    state = r.init_state(params)
    r.collector.prepare(r.reference_params(state))  # PivotRL: probe the candidates with π_ref
    before = r.evaluator.evaluate(state.params) if r.evaluator else {}
    pending = r.collector.pending_cost()  # PivotRL's probe
    first = {**sft_metrics, **before, **r.collector.pivot_stats,
             **{f"cost/{k}": float(v) for k, v in pending.to_dict().items()}}
    host = {"before": before, "cost": RolloutCost().to_dict(), "first": first}
    return state, host, 0, False


def _host(r: Run, host: dict, cost: RolloutCost) -> dict:
    return {**host, "cost": cost.to_dict(), "collector": r.collector.state_dict()}


def train(r: Run, *, warm_cache: str | None = None) -> dict:
    """The loop over an already built `Run` (see the module docstring). Holds the workdir lock
    (process 0) and stops cleanly on SIGTERM / SIGINT (`rlvr.train.preempt`)."""
    os.makedirs(r.workdir, exist_ok=True)
    lock = WorkdirLock(r.workdir).acquire() if r.is_main else None
    stop = StopSignals().install()
    try:
        return _train(r, warm_cache, stop)
    finally:
        stop.restore()
        if lock is not None:
            lock.release()


def eval_due(done: int, *, every: int, dense_steps: int = 0, dense_every: int = 0,
             last: bool = False) -> bool:
    """Whether the held-out evaluation runs after `done` steps: every `every` steps (0: never
    in between), every `dense_every` steps while done ≤ `dense_steps` (the early-dense
    schedule; 0: off), and after the last step."""
    return bool(last or (every and done % every == 0)
                or (dense_every and done <= dense_steps and done % dense_every == 0))


def _phase(bar, text: str) -> None:
    """Shows what the run is doing now (compiling, evaluating, ...) on the progress bar."""
    bar.set_postfix_str(text, refresh=True)


def _train(r: Run, warm_cache, stop: StopSignals) -> dict:
    c = r.config
    workdir = r.workdir
    ckpt, latest, cfg = _open_workdir(r)
    state, host, start, resumed = _start(r, ckpt, latest, warm_cache)
    host["config"] = cfg  # the config the checkpoints of this launch are trained with
    # rows (and TensorBoard events) after the restored step are dropped; a fresh run starts over
    writer = MetricWriter(workdir, tensorboard=c.logging.tensorboard, enabled=r.is_main,
                          resume_step=start if resumed else -1)
    if not resumed:
        writer.write(0, host.pop("first"))
        if ckpt is not None:
            ckpt.save(0, state, _host(r, host, RolloutCost()))
    cost = RolloutCost(**host["cost"])
    budget = c.train.token_budget
    samples_path = os.path.join(workdir, "samples.jsonl")
    every, samples_every = c.eval.every if r.evaluator else 0, c.logging.samples_every
    dense = (dict(dense_steps=c.eval.dense_steps, dense_every=c.eval.dense_every)
             if r.evaluator and c.eval.dense_steps else {})
    bar = tqdm(initial=start, total=c.train.num_steps, desc=c.algorithm.name,
               disable=not (c.train.progress and r.is_main))
    metrics: dict[str, Any] = {}
    done = written = saved = start
    stopped = None
    _phase(bar, "compiling")  # the first step of a process compiles the sampler and the learner
    try:
        for step in range(start, c.train.num_steps):
            if budget and cost.sampled_tokens >= budget:
                break
            stopped = agreed_stop(stop, r.num_processes)
            if stopped:
                break
            t0 = time.perf_counter()
            got = r.collector.collect(r.sampling_params(state.params), step, int(state.policy_version))
            t1 = time.perf_counter()
            state, dev = r.learn(state, got.batch)
            dev = jax.device_get(dev)
            t2 = time.perf_counter()
            r.collector.publish(state.params, int(state.policy_version))  # the rollout thread (async)
            r.collector.observe(got)
            cost = cost + _global_cost(r, got.cost)
            done = step + 1
            metrics = {**dev, **got.stats,
                       **global_sample_metrics(sample_metrics(got, r.hidden), r.num_processes),
                       **{f"verify/{k}": v for k, v in r.judges[0].counters().items()},
                       **{f"cost/{k}": float(v) for k, v in cost.to_dict().items()}}
            n_tok = float(got.cost.sampled_tokens) * r.num_processes
            metrics.update({"time/collect_s": t1 - t0, "time/learn_s": t2 - t1, "time/step_s": t2 - t0,
                            "throughput/tokens_per_s": n_tok / max(t2 - t0, 1e-9),
                            "throughput/samples_per_s": got.batch.batch_size * r.num_processes / max(t2 - t0, 1e-9)})
            last = done == c.train.num_steps or bool(budget and cost.sampled_tokens >= budget)
            if r.evaluator and eval_due(done, every=every, last=last, **dense):
                _phase(bar, "evaluating")
                metrics.update(r.evaluator.evaluate(state.params))
            if done % c.logging.every == 0 or "eval/success" in metrics or last:
                writer.write(done, metrics)
                written = done
            if r.is_main and samples_every and done % samples_every == 0:
                write_samples(samples_path, done, got, c.logging.samples_per_step, c.seed)
            bar.update(1)
            bar.set_postfix(reward=f"{metrics.get('reward/mean', 0):.3f}",
                            **({"eval": f"{metrics['eval/success']:.3f}"} if "eval/success" in metrics else {}))
            if ckpt is not None and ((c.checkpoint.every and done % c.checkpoint.every == 0) or last):
                ckpt.save(done, state, _host(r, host, cost))
                saved = done
            if last:
                break
        if stopped is None:  # a signal during the last step: stop before the end-of-run work
            stopped = agreed_stop(stop, r.num_processes)
        if stopped:  # the reached step's metrics row and checkpoint, if the loop did not write them
            _phase(bar, f"stopping ({signal.Signals(stopped).name})")
            if written != done and metrics:
                writer.write(done, metrics)
            if ckpt is not None and saved != done:
                ckpt.save(done, state, _host(r, host, cost))
    finally:
        if not bar.disable and bar.n != bar.total:  # stopped early: the bar ends where the run did
            bar.total = bar.n
            bar.refresh()
        bar.close()
        if ckpt is not None:
            ckpt.close()
        writer.close()
    if stopped:
        e = Preempted(stopped, done, workdir)
        if r.is_main:
            print(str(e) if ckpt is not None else
                  f"stopped by {signal.Signals(stopped).name} at step {done}; checkpoints are off "
                  f"(checkpoint.every = -1), nothing to resume from", file=sys.stderr)
        raise e
    return _finish(r, state, host, metrics, cost, done)


def _global_cost(r: Run, cost: RolloutCost) -> RolloutCost:
    """Multi-host: the cost summed over processes (each collected its share)."""
    if r.num_processes == 1:
        return cost
    from jax.experimental import multihost_utils

    v = np.asarray(multihost_utils.process_allgather(np.array(dataclasses.astuple(cost), np.int64)))
    return RolloutCost(*(int(x) for x in v.reshape(r.num_processes, -1).sum(0)))


def _finish(r: Run, state, host: dict, metrics: dict, cost: RolloutCost, step: int) -> dict:
    c = r.config
    rows = read_metrics(r.workdir) if r.is_main else []
    history = [{"step": row["step"], **{k: row[k] for k in row if k.startswith(("eval/", "cost/"))}}
               for row in rows if "eval/success" in row]
    before = host.get("before", {})
    after = {k: v for k, v in (history[-1] if history else {}).items() if k.startswith("eval/")}
    result = {"before": before, "after": after, "history": history,
              "last": {k: float(v) for k, v in metrics.items() if np.ndim(v) == 0},
              "cost": cost.to_dict(), "step": int(state.step)}
    if r.is_main:
        table = format_before_after(before, after)
        print(table)
        with open(os.path.join(r.workdir, "before_after.md"), "w") as f:
            f.write(table + "\n")
        with open(os.path.join(r.workdir, "result.json"), "w") as f:
            json.dump(result, f, indent=2, default=float)
        if c.logging.plot:
            from rlvr.train.plot import plot_metrics

            print("plot:", plot_metrics(r.workdir))
    if c.checkpoint.export:  # every process takes part (multi-host gather); process 0 writes
        from rlvr.train.modes import export_run

        path = export_run(r, state.params, {"trained_steps": int(state.step)})
        if path:
            print("export:", path)
    r.live.state = state
    return result


def format_before_after(before: dict, after: dict) -> str:
    """Markdown table of the held-out `eval/*` metrics at the warm start and after RL, or one line
    saying that no held-out evaluation ran (e.g. `eval.num_tasks` = 0)."""
    keys = [k for k in before if k.startswith("eval/")] or [k for k in after if k.startswith("eval/")]
    if not keys:
        return "no held-out evaluation ran (eval.num_tasks = 0): no before / after table"
    lines = ["| metric | warm-start | after RL | change |", "|---|---|---|---|"]
    for k in keys:
        b, a = before.get(k, float("nan")), after.get(k, float("nan"))
        lines.append(f"| {k[5:]} | {b:.3f} | {a:.3f} | {a - b:+.3f} |")
    return "\n".join(lines)
