"""rlvr.records: the records that cross layer boundaries (docs/architecture.md §3).

  task     `TaskSpec` — one verifiable task, the docs/architecture.md §3 record (JSON in, validated on load).
  verdict  `Verdict` — what a verifier says about one output (docs/verifiers.md (V.1)), `env_error`, timeout classes.
  batch    `RolloutBatch` — the device-side batch of rollouts (docs/architecture.md §3); `SampleMeta` — the host-side
           record of one sample (docs/architecture.md §3).
  state    `TrainState` — everything the learner carries between steps.

This package imports nothing else of rlvr, so every layer (core, models, rollout, envs,
verifiers, tasks, algorithms, train) can use these records without importing a higher layer.
Names are imported lazily (PEP 562): a verifier worker process that needs only `Verdict` does
not import JAX.
"""

import importlib

_EXPORTS = {
    "TaskSpec": "task", "TaskSpecError": "task", "TASK_TYPES": "task",
    "Verdict": "verdict", "env_error": "verdict", "DECISIONS": "verdict", "TRIALS": "verdict",
    "TIMEOUT_CLASSES": "verdict",
    "RolloutBatch": "batch", "SampleMeta": "batch", "STOP_REASONS": "batch",
    "TrainState": "state", "create_train_state": "state", "split_model": "state",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'rlvr.records' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"rlvr.records.{mod}"), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
