"""`TaskSpec`: one verifiable task (SPEC R6.5, seed 002 §4.1).

The record separates what the policy may see (`prompt`, `public_metadata`) from what only the
verifier may see (`reference_answer`, `hidden_verifier_id`), and pins everything a reward depends
on (environment snapshot, resource limits, reward config, random seed) so that a verdict can be
reproduced.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

TASK_TYPES = ("math", "code", "structured", "agent", "text")


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """A verifiable task.

    Attributes:
      task_id: unique id (string).
      prompt: the text shown to the policy.
      task_type: one of TASK_TYPES; selects the verifier family.
      reference_answer: gold answer / tests / goal spec; never shown to the policy.
      public_metadata: information the policy may see (difficulty, tool list, ...).
      hidden_verifier_id: id of a held-out verifier (hidden tests) used for evaluation (R7.3).
      environment_snapshot: serialisable initial environment state for agent tasks (or None).
      resource_limits: e.g. {"time_s": 2, "memory_mb": 256}.
      reward_config: name → value settings for reward composition of this task.
      random_seed: seed for any stochasticity of the environment (common random numbers, R6.6).
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
