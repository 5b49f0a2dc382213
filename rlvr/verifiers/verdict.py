"""`Verdict`: what a verifier says about one output (SPEC R2.1, seed 002 eq.2, §5.2).

A verdict separates two questions that a plain reward conflates:
  * `decision` — did the *policy* succeed? pass / fail / unknown (the verifier could not decide,
    e.g. an unparseable answer format it does not support). unknown is never silently fail.
  * `trial` — was the *trial itself* sound? valid / env_error (sandbox crashed, tool service
    down, verifier timed out on its own machinery). An env_error says nothing about the policy:
    it is retried within a budget and then the sample is masked, never rewarded 0.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

DECISIONS = ("pass", "fail", "unknown")
TRIALS = ("valid", "env_error")


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One verifier decision with its raw reward components and evidence.

    Attributes:
      decision: "pass" | "fail" | "unknown".
      trial: "valid" | "env_error".
      components: raw reward components, e.g. {"correct": 1.0, "format": 1.0} or for code
        {"compile": 1, "public": 0.5, "hidden": 0.25, "time_cost": 0.1}. Kept unscaled: reward
        composition (verifiers/compose) turns them into a scalar.
      evidence: what the decision rests on (extracted answer, failing test, state diff, ...).
      verifier_version: version string of the verifier that produced this verdict.
    """

    decision: str
    trial: str = "valid"
    components: Mapping[str, float] = dataclasses.field(default_factory=dict)
    evidence: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    verifier_version: str = "0"

    def __post_init__(self):
        if self.decision not in DECISIONS:
            raise ValueError(f"Verdict.decision must be one of {DECISIONS}, got {self.decision!r}")
        if self.trial not in TRIALS:
            raise ValueError(f"Verdict.trial must be one of {TRIALS}, got {self.trial!r}")
        for k, v in self.components.items():
            if not isinstance(v, (int, float)) or v != v:
                raise ValueError(f"Verdict.components[{k!r}] must be a finite number, got {v!r}")

    @property
    def passed(self) -> bool:
        return self.trial == "valid" and self.decision == "pass"

    @property
    def is_env_error(self) -> bool:
        return self.trial == "env_error"
