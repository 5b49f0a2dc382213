"""Reward cache keyed by H(task, output, environment version, verifier version, reward config)
(docs/verifiers.md §4).

Never keyed by the output alone: the same program can pass under one test set or environment
snapshot and fail under another. The task enters the key through *all* of its fields (tests,
snapshot, limits, seed …), not only its id.

Only sound, deterministic verdicts are stored: env_error verdicts (to be retried) and verdicts
that ended in a timeout (machine-load dependent) are not cached.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import threading
from typing import Any, Optional

from rlvr.records.task import TaskSpec
from rlvr.records.verdict import Verdict


def _canon(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _canon(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _canon(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canon(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return {"__repr__": repr(value)}


def task_fingerprint(task: TaskSpec) -> str:
    """sha256 over every field of the task (canonical JSON)."""
    blob = json.dumps(_canon(task), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def cache_key(task: TaskSpec, output: str, *, env_version: str, verifier_version: str,
              reward_config_hash: str) -> str:
    """K = H(x, y, environment version, verifier version, reward config) (docs/verifiers.md §4)."""
    for name, v in (("env_version", env_version), ("verifier_version", verifier_version),
                    ("reward_config_hash", reward_config_hash)):
        if not isinstance(v, str):
            raise ValueError(f"cache_key: {name} must be a string, got {v!r}")
    blob = json.dumps([task_fingerprint(task), output, env_version, verifier_version,
                       reward_config_hash], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def is_cacheable(verdict: Verdict) -> bool:
    return verdict.trial == "valid" and "timeout_class" not in verdict.evidence


class RewardCache:
    """Thread-safe in-memory LRU cache of verdicts with hit/miss counters.

    Args:
      max_entries: LRU capacity (≥ 1).
    """

    def __init__(self, max_entries: int = 100_000):
        if not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"RewardCache.max_entries must be an int ≥ 1, got {max_entries!r}")
        self.max_entries = max_entries
        self._data: "collections.OrderedDict[str, Verdict]" = collections.OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, task: TaskSpec, output: str, *, env_version: str, verifier_version: str,
            reward_config_hash: str) -> Optional[Verdict]:
        key = cache_key(task, output, env_version=env_version, verifier_version=verifier_version,
                        reward_config_hash=reward_config_hash)
        return self.get_by_key(key)

    def put(self, task: TaskSpec, output: str, verdict: Verdict, *, env_version: str,
            verifier_version: str, reward_config_hash: str) -> bool:
        key = cache_key(task, output, env_version=env_version, verifier_version=verifier_version,
                        reward_config_hash=reward_config_hash)
        return self.put_by_key(key, verdict)

    def get_by_key(self, key: str) -> Optional[Verdict]:
        with self._lock:
            v = self._data.get(key)
            if v is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return v

    def put_by_key(self, key: str, verdict: Verdict) -> bool:
        """Stores `verdict` if it is cacheable; returns whether it was stored."""
        if not is_cacheable(verdict):
            return False
        with self._lock:
            self._data[key] = verdict
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)
        return True

    def __len__(self) -> int:
        return len(self._data)

    def stats(self) -> dict:
        total = self.hits + self.misses
        return {"hits": self.hits, "misses": self.misses, "entries": len(self._data),
                "hit_rate": self.hits / total if total else 0.0}
