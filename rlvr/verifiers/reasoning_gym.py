"""`ReasoningGymVerifier`: reasoning-gym's own scorers as a Verifier (docs/verifiers.md (V.1), docs/architecture.md §4).

A reasoning-gym task (built by `rlvr.tasks.reasoning_gym`) keeps in `reference_answer`
{"generator", "config", "answer", "metadata"}: everything the generator's `score_answer(answer,
entry)` needs. The verifier rebuilds the entry, extracts the answer from the completion and maps
the score to a Verdict:

  score == 1.0          → pass,    components {"correct": 1, "partial": 1}
  0 <= score < 1        → fail,    components {"correct": 0, "partial": score}
                          (reasoning-gym gives partial credit e.g. when the oracle answer is
                          contained in a longer answer; the partial value is kept, not paid as
                          a pass — reward composition decides what it is worth, docs/architecture.md §4)
  1 < score <= 1 + 1e-6 → fail,    components {"correct": 0, "partial": 1} (float-rounding
                          overshoot of a partial-credit sum; seen in spell_backward)
  scorer raises, or returns a non-number / NaN / a value outside [0, 1 + 1e-6]
                        → decision "unknown", trial "valid", evidence {"reason", "error"}.

Why "unknown" and not env_error: the scorer is deterministic library code run in-process on this
(task, answer) pair; an exception is a property of the pair (an answer format the scorer cannot
handle), not a transient infrastructure fault, so retrying it (what env_error triggers, docs/verifiers.md (V.1))
would give the same result. "unknown" keeps it apart from fail and lets the reward config decide
to fail or mask it, and it is counted (docs/architecture.md §7 unknown rate).

A malformed reference_answer, or a generator config reasoning-gym refuses, is the task's
fault: `_verify` raises and the `Verifier` base class reports an env_error.

Answer extraction: the content of the LAST <answer>...</answer> block if the completion has one
(reasoning-gym's convention), else the whole completion stripped of surrounding whitespace.
Completions longer than `max_chars` fail unscored. Wall-time bounds on a slow scorer belong to
the verification pool that runs verifiers (per-call timeouts), not here.
"""

from __future__ import annotations

import json
import math
import numbers
from typing import Any

from rlvr.verifiers.base import Verifier
from rlvr.records.verdict import Verdict

# Scores in (1, 1 + _ROUNDING] come from partial-credit sums that overshoot by float rounding
# (spell_backward scores "ekilekipsxx" against "ekilekips" as 1.0000000000000002): they are a
# fail with partial 1.0, never a pass. Only an exact 1.0 passes.
_ROUNDING = 1e-6


def extract_answer(output: str, tag: str = "answer") -> str:
    """Last <tag>...</tag> block's content (stripped), or the whole output stripped."""
    from reasoning_gym.utils import extract_answer as rg_extract

    found = rg_extract(output, tag_name=tag)
    return found if found is not None else output.strip()


class ReasoningGymVerifier(Verifier):
    """Scores completions of reasoning-gym tasks with the generator's own `score_answer`.

    Args:
      max_chars: completions longer than this fail without being scored.
      tag: answer tag used for extraction ("answer" → <answer>...</answer>).
    """

    def __init__(self, max_chars: int = 20_000, tag: str = "answer"):
        import reasoning_gym

        if not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"ReasoningGymVerifier.max_chars must be an int >= 1, got {max_chars!r}")
        self.max_chars = max_chars
        self.tag = tag
        self.version = f"reasoning_gym/{getattr(reasoning_gym, '__version__', '?')}/adapter-1"
        self._datasets: dict[str, Any] = {}

    def _dataset(self, generator: str, config: dict):
        """The generator's dataset object (its score_answer may read its config), cached."""
        import reasoning_gym

        key = json.dumps([generator, config], sort_keys=True)
        if key not in self._datasets:
            self._datasets[key] = reasoning_gym.create_dataset(generator, size=1, seed=0, **config)
        return self._datasets[key]

    def _verdict(self, decision: str, components: dict, **evidence: Any) -> Verdict:
        return Verdict(decision=decision, components=components, evidence=evidence,
                       verifier_version=self.version)

    def _verify(self, task, output: str) -> Verdict:
        ref = task.reference_answer
        if not (isinstance(ref, dict) and isinstance(ref.get("generator"), str)
                and isinstance(ref.get("config", {}), dict) and "answer" in ref):
            raise ValueError(
                f"ReasoningGymVerifier: task {task.task_id!r} reference_answer must be "
                f'{{"generator": str, "config": dict, "answer": ..., "metadata": dict}}, got {ref!r:.200}')
        if len(output) > self.max_chars:
            return self._verdict("fail", {"correct": 0.0, "partial": 0.0}, reason="too_long",
                                 length=len(output))
        dataset = self._dataset(ref["generator"], ref.get("config", {}))
        answer = extract_answer(output, self.tag)
        entry = {"question": task.prompt, "answer": ref["answer"],
                 "metadata": ref.get("metadata", {})}
        try:
            score = dataset.score_answer(answer, entry)
        except Exception as e:  # noqa: BLE001 — any scorer failure is classified, not raised
            return self._verdict("unknown", {}, reason="scorer_exception",
                                 error=f"{type(e).__name__}: {e}"[:300], answer=answer[:200])
        if (not isinstance(score, numbers.Real) or isinstance(score, bool)
                or not math.isfinite(score) or not 0.0 <= score <= 1.0 + _ROUNDING):
            return self._verdict("unknown", {}, reason="bad_score", error=repr(score)[:100],
                                 answer=answer[:200])
        if 1.0 < score:  # a partial-credit sum that overshot 1.0 by float rounding: not a pass
            return self._verdict("fail", {"correct": 0.0, "partial": 1.0}, reason="partial_rounding",
                                 raw_score=repr(score), answer=answer[:200])
        score = float(score)
        if score == 1.0:
            return self._verdict("pass", {"correct": 1.0, "partial": 1.0}, reason="correct",
                                 answer=answer[:200])
        return self._verdict("fail", {"correct": 0.0, "partial": score},
                             reason="partial" if score > 0 else "wrong", answer=answer[:200])
