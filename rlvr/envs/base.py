"""The `Environment` protocol: multi-turn tool environments with authoritative, restorable state.

docs/verifiers.md §2, docs/algorithms.md §6, docs/architecture.md §4, §2 (a_t = (tool, args), (s_{t+1}, o_{t+1}) =
EnvStep(s_t, a_t)), docs/verifiers.md §2 (goal / invariant / minefield over the state trajectory), docs/architecture.md §4
(reset integrity: H(s_0 after reset) = H(s_0 expected)); docs/algorithms.md §6 (a local continuation from
a pivot must see the pivot's exact executable state).

Contract of every environment:
  * `reset(task, seed=...)` loads `task.environment_snapshot`, checks docs/architecture.md §4 against the snapshot's
    recorded sha256 (raising `ResetIntegrityError` naming both hashes) and returns the initial
    observation text.
  * `step(action)` returns a `StepResult`; `event` is the authoritative record of what changed
    (verifiers read events and state, never observation text); `error` is set only for
    environment faults (tool service down, ...), which are env_error trials, not policy failures.
  * `state()` is the authoritative state (a deep copy of plain JSON types); `state_hash()` its
    sha256 over canonical JSON. `snapshot()` / `restore()` move the state and the seed of the
    environment's own randomness, so that a restored environment produces exactly the same
    future (same hashes, observations and faults) as the original.

Host-side code: nothing here runs under jit.
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import hashlib
import json
from typing import Any, Mapping, Optional

from rlvr.records.task import TaskSpec


class ResetIntegrityError(RuntimeError):
    """Raised when the state after reset does not hash to the task's expected hash (docs/architecture.md §4)."""


class SnapshotError(ValueError):
    """Raised when a snapshot is corrupt or belongs to a different environment/version."""


def canonical_json(obj: Any) -> str:
    """Canonical JSON text of a JSON-typed object (sorted keys, no spaces, no NaN)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def hash_state(state: Mapping[str, Any]) -> str:
    """sha256 hex digest of the canonical JSON of `state` (docs/architecture.md §4)."""
    return hashlib.sha256(canonical_json(state).encode("ascii")).hexdigest()


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed derived deterministically from `parts` (ints/strings), via sha256."""
    h = hashlib.sha256(canonical_json([str(p) for p in parts]).encode("ascii")).digest()
    return int.from_bytes(h[:8], "big") >> 1


def group_seeds(base_seed: int, group_size: int, *, common: bool = True) -> list[int]:
    """Environment seeds for the `group_size` candidates of one group (docs/architecture.md §4, §3).

    common=True gives common random numbers: every candidate of the group sees the same
    environment randomness (the same seed), so reward differences inside the group come from the
    policy, not from the environment. common=False gives independent derived seeds.
    """
    if not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    if not isinstance(base_seed, int) or isinstance(base_seed, bool):
        raise ValueError(f"base_seed must be an int, got {base_seed!r}")
    if common:
        return [base_seed] * group_size
    return [derive_seed("candidate", base_seed, i) for i in range(group_size)]


def retry_seed(seed: int, attempt: int) -> int:
    """Seed for the `attempt`-th retry of an env_error trial (attempt 0 is the original seed).

    A retry with the same seed would replay the same simulated fault; a retried trial therefore
    draws fresh environment randomness (the retry budget is fixed before the run, docs/verifiers.md §1).
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    return seed if attempt == 0 else derive_seed("retry", seed, attempt)


@dataclasses.dataclass(frozen=True)
class StepResult:
    """What one `Environment.step` returns.

    Attributes:
      observation: environment text appended to the token stream (never policy loss, docs/architecture.md §3).
      done: True when the episode is over (answer submitted, turn limit, or env fault).
      info: extra host-side facts, e.g. {"turn": 3, "stop_reason": "max_turns"}.
      event: the authoritative state-change record of this step (also appended to the state's
        event log); verifiers judge events and state, not the observation text (docs/verifiers.md §2).
      error: set only for environment faults (tool service failure, ...) → trial env_error
        (docs/verifiers.md (V.1)); policy mistakes (malformed actions) are observations, not errors.
    """

    observation: str
    done: bool
    info: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    event: Optional[Mapping[str, Any]] = None
    error: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class EnvSnapshot:
    """A frozen, serialisable copy of an environment's state and randomness.

    The state is held as canonical JSON text, so the snapshot is immutable and deep-copied by
    construction; `state()` returns a fresh dict. `state_hash` is checked against the payload on
    construction, so a corrupted snapshot is refused where it enters.

    Attributes:
      env_name: the environment's registry name (e.g. "kv_store").
      env_version: the environment's version string; restore refuses another version.
      seed: seed of the environment's own randomness (fault stream, ...).
      state_json: canonical JSON of the authoritative state.
      state_hash: sha256 of `state_json`.
    """

    env_name: str
    env_version: str
    seed: int
    state_json: str
    state_hash: str

    def __post_init__(self):
        actual = hashlib.sha256(self.state_json.encode("ascii")).hexdigest()
        if actual != self.state_hash:
            raise SnapshotError(
                f"EnvSnapshot.state_hash {self.state_hash} does not match the state payload "
                f"(sha256 {actual}): the snapshot is corrupt or was edited"
            )

    @classmethod
    def of(cls, env_name: str, env_version: str, seed: int, state: Mapping[str, Any]) -> "EnvSnapshot":
        text = canonical_json(state)
        return cls(env_name, env_version, int(seed), text,
                   hashlib.sha256(text.encode("ascii")).hexdigest())

    def state(self) -> dict:
        """A fresh copy of the authoritative state."""
        return json.loads(self.state_json)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "EnvSnapshot":
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in d]
        if missing:
            raise SnapshotError(f"EnvSnapshot.from_dict: missing fields {missing}")
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True)
class Turn:
    """One assistant turn of an episode: the action, the observation it produced, and the exact
    environment state the action was taken in (the PivotRL candidate state, docs/algorithms.md §6)."""

    action: str
    observation: str
    state_before: EnvSnapshot


class Environment(abc.ABC):
    """Protocol of a multi-turn tool environment (see module docstring).

    Subclasses set `name` and `version`, implement `reset`, `step`, `state` and `_load`; the base
    class gives `state_hash`, `snapshot`, `restore` and the docs/architecture.md §4 reset check.
    """

    name: str = "environment"
    version: str = "0"

    def __init__(self):
        self._seed: int = 0

    @property
    def seed(self) -> int:
        return self._seed

    @abc.abstractmethod
    def reset(self, task: TaskSpec, *, seed: int) -> str:
        """Load the task's initial state, check docs/architecture.md §4, return the initial observation text."""

    @abc.abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply one policy action."""

    @abc.abstractmethod
    def state(self) -> dict:
        """The authoritative state (a copy, plain JSON types)."""

    @abc.abstractmethod
    def _load(self, state: dict, seed: int) -> None:
        """Replace the internal state and seed (used by restore)."""

    def state_hash(self) -> str:
        """sha256 of the canonical authoritative state (docs/architecture.md §4's H)."""
        return hash_state(self.state())

    def snapshot(self) -> EnvSnapshot:
        return EnvSnapshot.of(self.name, self.version, self._seed, self.state())

    def restore(self, snapshot: EnvSnapshot) -> None:
        """Restore the exact state and randomness of `snapshot`; verified by hash."""
        if not isinstance(snapshot, EnvSnapshot):
            raise SnapshotError(f"restore expects an EnvSnapshot, got {type(snapshot).__name__}")
        if (snapshot.env_name, snapshot.env_version) != (self.name, self.version):
            raise SnapshotError(
                f"snapshot is for {snapshot.env_name}/{snapshot.env_version}, "
                f"this environment is {self.name}/{self.version}"
            )
        self._load(copy.deepcopy(snapshot.state()), snapshot.seed)
        if self.state_hash() != snapshot.state_hash:
            raise SnapshotError(
                f"state after restore hashes to {self.state_hash()}, snapshot says {snapshot.state_hash}"
            )

    def _check_reset_integrity(self, expected_hash: str) -> None:
        """docs/architecture.md §4: raise ResetIntegrityError unless H(s_0 after reset) == H(s_0 expected)."""
        actual = self.state_hash()
        if actual != expected_hash:
            raise ResetIntegrityError(
                f"{self.name}: state after reset hashes to {actual}, but the task's "
                f"environment_snapshot expects {expected_hash} (tampered or stale snapshot)"
            )
