"""`Verdict`: what a verifier says about one output (docs/verifiers.md (V.1)).

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

    # --- helpers (added with the verifier layer; the fields above are the contract) ----------

    def to_dict(self) -> dict:
        """Plain-JSON form (for caches, logs and process boundaries)."""
        return {
            "decision": self.decision,
            "trial": self.trial,
            "components": dict(self.components),
            "evidence": dict(self.evidence),
            "verifier_version": self.verifier_version,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Verdict":
        return cls(
            decision=d["decision"],
            trial=d.get("trial", "valid"),
            components=dict(d.get("components", {})),
            evidence=dict(d.get("evidence", {})),
            verifier_version=d.get("verifier_version", "0"),
        )

    def with_evidence(self, **extra: Any) -> "Verdict":
        """A copy with `extra` merged into the evidence."""
        return dataclasses.replace(self, evidence={**self.evidence, **extra})


# Timeout taxonomy (docs/architecture.md §4, docs/verifiers.md §1). "candidate_program" is the policy's fault (a
# fail); every other class is a fault of the system (an env_error, retried then masked).
TIMEOUT_CLASSES = (
    "generation",
    "tool_call",
    "candidate_program",
    "verifier_service",
    "environment_init",
    "infrastructure",
)


def env_error(reason: str, *, verifier_version: str = "0", timeout_class: str | None = None,
              **evidence: Any) -> Verdict:
    """An env_error verdict (the trial says nothing about the policy; docs/verifiers.md (V.1)).

    `timeout_class`, when given, must be one of TIMEOUT_CLASSES and is recorded in the evidence.
    """
    ev = {"reason": reason, **evidence}
    if timeout_class is not None:
        if timeout_class not in TIMEOUT_CLASSES:
            raise ValueError(
                f"timeout_class must be one of {TIMEOUT_CLASSES}, got {timeout_class!r}")
        ev["timeout_class"] = timeout_class
    return Verdict(decision="unknown", trial="env_error", evidence=ev,
                   verifier_version=verifier_version)
