"""rlvr.envs: the `Environment` protocol and multi-turn tool environments (docs/verifiers.md §2, docs/architecture.md §4).

`make_env(name_or_task, **kwargs)` builds an environment by registry name, or for a task from its
`environment_snapshot["env"]`.
"""

from __future__ import annotations

from typing import Any

from rlvr.envs.base import (
    EnvSnapshot,
    Environment,
    ResetIntegrityError,
    SnapshotError,
    StepResult,
    Turn,
    canonical_json,
    derive_seed,
    group_seeds,
    hash_state,
    retry_seed,
)
from rlvr.envs.kv_store import KVStoreEnv
from rlvr.envs.shop import ShopEnv
from rlvr.records.task import TaskSpec

ENVIRONMENTS = {KVStoreEnv.name: KVStoreEnv, ShopEnv.name: ShopEnv}


def make_env(name_or_task: Any, **kwargs) -> Environment:
    """A fresh environment for a registry name or for a TaskSpec (by its snapshot's "env")."""
    if isinstance(name_or_task, TaskSpec):
        snap = name_or_task.environment_snapshot or {}
        name = snap.get("env") if hasattr(snap, "get") else None
    else:
        name = name_or_task
    if name not in ENVIRONMENTS:
        raise ValueError(f"environment name must be one of {sorted(ENVIRONMENTS)}, got {name!r}")
    return ENVIRONMENTS[name](**kwargs)


__all__ = [
    "ENVIRONMENTS", "EnvSnapshot", "Environment", "KVStoreEnv", "ResetIntegrityError",
    "SnapshotError", "ShopEnv", "StepResult", "Turn", "canonical_json", "derive_seed", "group_seeds",
    "hash_state", "make_env", "retry_seed",
]
