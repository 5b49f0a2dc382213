"""The one verifier interface (docs/verifiers.md (V.1)).

A verifier maps (task, output) to a `Verdict`. Two rules every implementation keeps:

  * a bad *output* never raises: it is a `fail` (or `unknown` when the verifier cannot decide);
  * a fault of the verifier's own machinery (sandbox could not start, helper process died, a
    service is down) is a `trial="env_error"` verdict, never a fail: it says nothing about the
    policy and is retried, then masked (docs/verifiers.md (V.1), §1).

`version` is part of every verdict and of the reward-cache key (docs/verifiers.md §4): bump it whenever a
change could flip a decision.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Protocol, runtime_checkable

from rlvr.records.task import TaskSpec
from rlvr.records.verdict import Verdict, env_error


@runtime_checkable
class VerifierProtocol(Protocol):
    """Structural type: anything with `version` and `verify(task, output) -> Verdict`."""

    version: str

    def verify(self, task: TaskSpec, output: str) -> Verdict: ...


class Verifier(abc.ABC):
    """Base class for verifiers.

    Subclasses implement `_verify`; `verify` wraps it so that an unexpected exception from the
    verifier's own code becomes an env_error verdict (a bug or infrastructure fault must not be
    paid as reward 0 to the policy) and so that every verdict carries `version`.
    """

    version: str = "0"

    def verify(self, task: TaskSpec, output: str) -> Verdict:
        """Returns the verdict on `output` for `task`; never raises for a bad output."""
        if not isinstance(output, str):
            return Verdict(decision="fail", evidence={"reason": "output is not a string",
                                                       "type": type(output).__name__},
                           verifier_version=self.version)
        try:
            verdict = self._verify(task, output)
        except Exception as e:  # noqa: BLE001 — the verifier's own fault → env_error
            return env_error(f"verifier raised {type(e).__name__}: {e}"[:500],
                             verifier_version=self.version)
        if verdict.verifier_version != self.version:
            verdict = dataclasses.replace(verdict, verifier_version=self.version)
        return verdict

    def binary_verdict(self, correct: bool, fmt: bool, **evidence: Any) -> Verdict:
        """pass iff `correct`; components {"correct", "format"} kept apart (docs/verifiers.md §2), evidence as given."""
        return Verdict(
            decision="pass" if correct else "fail",
            components={"correct": float(correct), "format": float(fmt)},
            evidence=evidence,
            verifier_version=self.version,
        )

    @abc.abstractmethod
    def _verify(self, task: TaskSpec, output: str) -> Verdict:
        """Verdict for one output; may raise only for faults of the verifier itself."""
