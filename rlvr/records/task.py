"""`TaskSpec`: one verifiable task (docs/architecture.md §3).

The record separates what the policy may see (`prompt`, `public_metadata`) from what only the
verifier may see (`reference_answer`, `hidden_verifier_id`), and pins everything a reward depends
on (environment snapshot, resource limits, reward config, random seed) so that a verdict can be
reproduced.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Mapping, Optional

from rlvr.records.code_tests import CodeTestsError, parse_code_reference

TASK_TYPES = ("math", "code", "structured", "agent", "text")

# JSON field order (docs/architecture.md §3); the first three are required in a JSON record.
FIELDS = (
    "task_id",
    "prompt",
    "task_type",
    "reference_answer",
    "public_metadata",
    "hidden_verifier_id",
    "environment_snapshot",
    "resource_limits",
    "reward_config",
    "random_seed",
)
REQUIRED_FIELDS = ("task_id", "prompt", "task_type")


class TaskSpecError(ValueError):
    """A record is not a valid TaskSpec. `errors` lists every (field, message) problem found."""

    def __init__(self, errors):
        self.errors = list(errors)
        super().__init__("; ".join(f"{field}: {msg}" for field, msg in self.errors))


def _json_problem(value: Any, path: str) -> Optional[str]:
    """Returns why `value` is not plain JSON data (dict[str, ...], list, str, int, finite float,
    bool, None), or None when it is."""
    if value is None or isinstance(value, (str, bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path} is {value!r}; only finite numbers allowed"
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            p = _json_problem(v, f"{path}[{i}]")
            if p:
                return p
        return None
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"{path} has a non-string key {k!r}"
            p = _json_problem(v, f"{path}.{k}")
            if p:
                return p
        return None
    return f"{path} has a value of type {type(value).__name__}, which is not JSON data"


def validate_record(record: Any) -> list[tuple[str, str]]:
    """Checks one decoded JSON record against the TaskSpec schema (docs/architecture.md §3).

    Returns every problem as (field, message); an empty list means the record is valid.
    Unknown fields are errors (a typo such as "reference_anwser" must not silently vanish).
    A code task's reference_answer must be the tests record of `rlvr.records.code_tests` (the
    field is reported as its path, e.g. "reference_answer.public_tests[0].args").
    """
    if not isinstance(record, Mapping):
        return [("<record>", f"expected a JSON object, got {type(record).__name__}")]
    errors: list[tuple[str, str]] = []
    for key in record:
        if key not in FIELDS:
            errors.append((str(key), f"unknown field; allowed fields are {FIELDS}"))
    for key in REQUIRED_FIELDS:
        if key not in record:
            errors.append((key, "missing required field"))

    def check(key, ok, expected):
        if key in record and not ok(record[key]):
            errors.append((key, f"expected {expected}, got {record[key]!r:.80}"))

    check("task_id", lambda v: isinstance(v, str) and v != "", "a non-empty string")
    check("prompt", lambda v: isinstance(v, str), "a string")
    check("task_type", lambda v: v in TASK_TYPES, f"one of {TASK_TYPES}")
    check("public_metadata", lambda v: isinstance(v, Mapping), "a JSON object")
    check("hidden_verifier_id", lambda v: v is None or isinstance(v, str), "a string or null")
    check("environment_snapshot", lambda v: v is None or isinstance(v, Mapping),
          "a JSON object or null")
    check("resource_limits",
          lambda v: isinstance(v, Mapping) and all(
              isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
              and x >= 0 for x in v.values()),
          "a JSON object of non-negative numbers (e.g. {\"time_s\": 2, \"memory_mb\": 256})")
    check("reward_config", lambda v: isinstance(v, Mapping), "a JSON object")
    check("random_seed", lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer")
    for key in FIELDS:
        if key in record and not any(f == key for f, _ in errors):
            problem = _json_problem(record[key], key)
            if problem:
                errors.append((key, problem))
    if record.get("task_type") == "code" and not any(f == "reference_answer" for f, _ in errors):
        # the tests the CodeVerifier runs: a malformed test fails here, not at verification
        try:
            parse_code_reference(record.get("reference_answer"))
        except CodeTestsError as e:
            errors.append((e.field, e.message))
    return errors


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """A verifiable task.

    Attributes:
      task_id: unique id (string).
      prompt: the text shown to the policy.
      task_type: one of TASK_TYPES; selects the verifier family.
      reference_answer: gold answer / tests / goal spec; never shown to the policy.
      public_metadata: information the policy may see (difficulty, tool list, ...).
      hidden_verifier_id: id of a held-out verifier (hidden tests) used for evaluation (docs/architecture.md §7).
      environment_snapshot: serialisable initial environment state for agent tasks (or None).
      resource_limits: e.g. {"time_s": 2, "memory_mb": 256}.
      reward_config: name → value settings for reward composition of this task.
      random_seed: seed for any stochasticity of the environment (common random numbers, docs/architecture.md §4).
    """

    task_id: str
    prompt: str
    task_type: str
    reference_answer: Any = None
    public_metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    hidden_verifier_id: Optional[str] = None
    environment_snapshot: Optional[Mapping[str, Any]] = None
    resource_limits: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    reward_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    random_seed: int = 0

    def __post_init__(self):
        if not isinstance(self.task_id, str) or not self.task_id:
            raise ValueError(f"TaskSpec.task_id must be a non-empty string, got {self.task_id!r}")
        if not isinstance(self.prompt, str):
            raise ValueError(f"TaskSpec.prompt must be a string, got {type(self.prompt).__name__}")
        if self.task_type not in TASK_TYPES:
            raise ValueError(
                f"TaskSpec.task_type must be one of {TASK_TYPES}, got {self.task_type!r}"
            )
        if not isinstance(self.random_seed, int) or isinstance(self.random_seed, bool):
            raise ValueError(f"TaskSpec.random_seed must be an int, got {self.random_seed!r}")

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON data (all docs/architecture.md §3 fields, in FIELDS order).

        Raises TaskSpecError naming the field when a value is not JSON data (a tuple is written
        as a list; NaN/inf, sets and objects are refused rather than silently mangled).
        """
        record = {k: getattr(self, k) for k in FIELDS}
        errors = [(k, p) for k in FIELDS if (p := _json_problem(record[k], k))]
        if errors:
            raise TaskSpecError([(f"task {self.task_id!r}: {k}", p) for k, p in errors])
        return json.loads(json.dumps(record, allow_nan=False))

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> "TaskSpec":
        """Builds a TaskSpec from a decoded JSON record, validating every field first.

        Raises TaskSpecError listing every problem (unknown, missing or mistyped fields).
        """
        errors = validate_record(record)
        if errors:
            raise TaskSpecError(errors)
        return cls(**record)
