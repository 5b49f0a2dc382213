"""`IntegerAnswerVerifier`: exact integer answers (docs/verifiers.md (V.1), §2).

The completion passes iff, after stripping surrounding whitespace, it is *exactly* the canonical
decimal form of the reference integer: optional "-", ASCII digits, no leading zeros, no "+",
no "-0". Everything else fails, never "unknown":

  "68", " 68\\n"      → pass (whitespace around the answer is not junk)
  "68abc", "68 69"   → fail (junk after the number)
  "", "   "          → fail (empty)
  "--5", "+5", "5.0" → fail (unparseable as a canonical integer)
  "068", "-0"        → fail (non-canonical; the answer grammar has exactly one spelling)
  "６８", "6_8"       → fail (Python's int() accepts these; we do not)

There are no floats anywhere, so NaN / inf / tolerance false positives are impossible. Outputs
longer than `max_chars` fail without being parsed (bounded time; Python refuses int() of more
than 4300 digits anyway).

Components: {"correct": 0/1, "format": 0/1}; "format" is 1 when the completion is a canonical
integer at all (right or wrong). Verdict.decision is "pass" iff correct. A task whose
reference_answer is not an int is a fault of the task, not of the policy: `_verify` raises and
the `Verifier` base class reports an env_error (masked, never paid as reward 0).
"""

from __future__ import annotations

import re

from rlvr.verifiers.base import Verifier
from rlvr.records.verdict import Verdict

_CANONICAL_INT = re.compile(r"-?(?:0|[1-9][0-9]*)", re.ASCII)


def canonical_int_text(text: str) -> str | None:
    """Returns `text` stripped if it is a canonical decimal integer, else None.

    No int() conversion happens, so arbitrarily long digit strings cost linear time and never
    hit Python's int-string conversion limit.
    """
    s = text.strip()
    if not _CANONICAL_INT.fullmatch(s) or s == "-0":
        return None
    return s


class IntegerAnswerVerifier(Verifier):
    """Verifier for tasks whose `reference_answer` is an int (arithmetic tasks).

    Args:
      max_chars: completions longer than this fail unparsed (evidence reason "too_long").
    """

    version = "integer_answer/1"

    def __init__(self, max_chars: int = 1000):
        if not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"IntegerAnswerVerifier.max_chars must be an int >= 1, got {max_chars!r}")
        self.max_chars = max_chars

    def _verify(self, task, output: str) -> Verdict:
        ref = task.reference_answer
        if not isinstance(ref, int) or isinstance(ref, bool):
            raise ValueError(
                f"IntegerAnswerVerifier: task {task.task_id!r} reference_answer must be an int, "
                f"got {ref!r}")
        if len(output) > self.max_chars:
            return self.binary_verdict(False, False, reason="too_long", length=len(output))
        answer = canonical_int_text(output)
        if answer is None:
            reason = "empty" if not output.strip() else "not_an_integer"
            return self.binary_verdict(False, False, reason=reason, answer=output.strip()[:64])
        correct = answer == str(ref)
        return self.binary_verdict(correct, True, reason="correct" if correct else "wrong_value",
                             answer=answer[:64])
