"""The evaluation and export modes of `launch.py` (`--mode=eval`, `--mode=export`).

Both load the policy the run in `workdir` would continue from: the latest checkpoint in
`<workdir>/checkpoints` that loads, or, when there is none, the checkpoint of `model.init_from`
(said on stderr). With neither they refuse (ConfigError naming the workdir): a mistyped
`--workdir` would otherwise evaluate or export a random policy.

`evaluate(config, workdir)` runs the configured held-out set (`eval.num_tasks` tasks, the
"eval" split of the task source; `eval.greedy` or `eval.samples_per_task` samples at
`eval.temperature`) through the run's own engine and reward path (`rlvr.train.evaluate`) and
writes
  * `<workdir>/eval.json`: what was evaluated (checkpoint step or starting policy, mode, task
    count) and the metrics: eval/success with eval/success_ci95 (95 % interval, clustered by
    task), eval/pass@k (unbiased, docs/algorithms.md (A.21)), eval/tokens, eval/truncation_rate, eval/unknown_rate,
    eval/env_error_rate, eval/valid_rate, eval/hidden_success and eval/gap where the kit has a
    hidden check; and `by_verifier`: per verifier (by version) n, success, unknown and
    env_error rates;
  * `<workdir>/eval_samples.jsonl`: one row per sample (task, prompt, output, decision, trial,
    reward, tokens, stop reason, verifier, components, evidence).

`export(config, workdir)` writes `<workdir>/export/` (`rlvr.models.export.export_hf`).
"""

from __future__ import annotations


import json
import os
import sys
from typing import Any, Optional

import jax
import numpy as np

from rlvr.train.config import ConfigError, validate_config
from rlvr.train.workdir import checkpoint_steps


def verifier_name(verifier, task) -> str:
    """The version string of the verifier that judges `task` (the routed one for a router)."""
    if hasattr(verifier, "verifier_for"):
        try:
            verifier = verifier.verifier_for(task)
        except ValueError:
            return "unrouted"
    return str(getattr(verifier, "version", type(verifier).__name__))


def load_policy_params(r) -> tuple[Any, dict]:
    """(params, origin) of the run in `r.workdir`: its latest loadable checkpoint, else the
    starting parameters. origin: {"checkpoint_step": s, "checkpoint_dir": ...} or
    {"init_from": path or "random init"}."""
    from rlvr.train.checkpoint import Checkpointer

    ckdir = os.path.join(r.workdir, "checkpoints")
    if os.path.isdir(ckdir):
        ckpt = Checkpointer(ckdir, max_to_keep=max(1, r.config.checkpoint.max_to_keep))
        try:
            if ckpt.latest_step() is not None:
                state, _, step, problems = ckpt.restore_latest(r.init_state(r.init_params))
                for p in problems:
                    print(f"skipped {p}", file=sys.stderr)
                return state.params, {"checkpoint_step": int(step), "checkpoint_dir": ckdir}
        finally:
            ckpt.close()
    return r.init_params, {"init_from": r.config.model.init_from or "random init"}


def _host_params(r, params):
    return jax.device_get(r.sampling_params(params))


def export_run(r, params, origin: dict, path: Optional[str] = None) -> str:
    """Writes the Hugging Face folder of `params` to `path` (default `<workdir>/export`).
    Every process calls it (multi-host: the parameters are gathered); process 0 writes and
    returns the path, the others return ""."""
    host = _host_params(r, params)
    if not r.is_main:
        return ""
    meta = {"origin": origin, "task": list(r.config.task.names)}
    path = path or os.path.join(r.workdir, "export")
    return r.policy.export(r.model_of(host), r.tokenizer, r.renderer, path, meta,
                           r.config.model.init_from)


def _sample_rows(r, got) -> list[dict]:
    tokens = np.asarray(got.batch.loss_mask).sum(-1)
    rows = []
    for i, (s, t) in enumerate(zip(got.samples, got.tasks)):
        rows.append({"task_id": s.task_id, "split": t.public_metadata.get("split"),
                     "sample": i % r.evaluator.n,
                     "prompt": s.prompt, "output": s.text, "decision": s.decision, "trial": s.trial,
                     "reward": s.reward, "valid": s.valid, "tokens": int(tokens[i]),
                     "stop_reason": s.stop_reason, "verifier": verifier_name(r.kit.verifier, t),
                     "components": s.components, "evidence": s.evidence})
    return rows


def by_verifier(rows: list[dict]) -> dict:
    """{verifier: {n, success (over valid samples), unknown_rate, env_error_rate}}."""
    out = {}
    for name in sorted({x["verifier"] for x in rows}):
        xs = [x for x in rows if x["verifier"] == name]
        valid = [x for x in xs if x["trial"] == "valid" and x["valid"]]
        out[name] = {
            "n": len(xs),
            "success": (float(np.mean([x["decision"] == "pass" for x in valid])) if valid
                        else float("nan")),
            "unknown_rate": float(np.mean([x["decision"] == "unknown" and x["trial"] == "valid"
                                           for x in xs])),
            "env_error_rate": float(np.mean([x["trial"] == "env_error" for x in xs]))}
    return out


def _no_policy(workdir: str, mode: str, what: str) -> ConfigError:
    return ConfigError(f"--mode={mode}: {what} in {os.path.join(workdir, 'checkpoints')} and "
                       f"config.model.init_from is empty, so there is no policy to {mode} (only a "
                       f"random init); check --workdir={workdir}, or set "
                       f"--config.model.init_from=<Hugging Face checkpoint folder>")


def require_policy(config, workdir: str, mode: str) -> None:
    """Refuses (ConfigError) when `workdir` has no checkpoint and `model.init_from` is empty."""
    if not config.model.init_from and not checkpoint_steps(workdir):
        raise _no_policy(workdir, mode, "no checkpoint found")


def _loaded_policy(r, mode: str) -> tuple[Any, dict]:
    """`load_policy_params`, refusing a random init and saying when `model.init_from` stands in
    for a missing checkpoint."""
    params, origin = load_policy_params(r)
    if origin.get("init_from") == "random init":
        raise _no_policy(r.workdir, mode, "no loadable checkpoint")
    if "init_from" in origin and r.is_main:
        print(f"no checkpoint in {os.path.join(r.workdir, 'checkpoints')}: using "
              f"model.init_from={origin['init_from']}", file=sys.stderr)
    return params, origin


def write_eval(workdir: str, result: dict, rows: list[dict]) -> None:
    """Writes `<workdir>/eval.json` (`result`) and `<workdir>/eval_samples.jsonl` (`rows`, any
    model output: `rlvr.train.samples.write_jsonl_rows`)."""
    from rlvr.train.samples import write_jsonl_rows

    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "eval.json"), "w") as f:
        json.dump(result, f, indent=2, default=float)
    write_jsonl_rows(os.path.join(workdir, "eval_samples.jsonl"), rows)


def evaluate(config, workdir: str) -> dict:
    """`launch.py --mode=eval` (module docstring); returns the eval.json dict."""
    from rlvr.train.setup import build_run

    validate_config(config)
    if not config.eval.num_tasks:
        raise ConfigError("--mode=eval needs a held-out set: set config.eval.num_tasks > 0")
    require_policy(config, workdir, "eval")
    r = build_run(config, workdir)
    try:
        params, origin = _loaded_policy(r, "eval")
        got = r.evaluator.collect(params)
        metrics = r.evaluator.summarize(got)
        rows = _sample_rows(r, got)
        e = r.config.eval
        result = {"origin": origin, "task": list(r.config.task.names),
                  "mode": "greedy" if e.greedy else "sampled",
                  **({} if e.greedy else {"temperature": e.temperature,
                                          "samples_per_task": e.samples_per_task}),
                  "num_tasks": len(r.evaluator.tasks), "num_samples": len(rows),
                  "metrics": {k: float(v) for k, v in metrics.items()},
                  "by_verifier": by_verifier(rows)}
        if r.is_main:
            write_eval(workdir, result, rows)
            print(json.dumps({"origin": origin, **result["metrics"]}, indent=2))
        return result
    finally:
        r.close()


def export(config, workdir: str) -> str:
    """`launch.py --mode=export`: `<workdir>/export/` from the latest checkpoint (or
    `model.init_from`); returns its path."""
    from rlvr.train.setup import build_run

    validate_config(config)
    require_policy(config, workdir, "export")
    r = build_run(config, workdir)
    try:
        params, origin = _loaded_policy(r, "export")
        path = export_run(r, params, origin)
        if path:
            print(f"exported {origin} to {path}")
        return path
    finally:
        r.close()
