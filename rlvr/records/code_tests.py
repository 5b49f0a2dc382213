"""The tests record of a code task: `TaskSpec.reference_answer` for task_type "code" (docs/verifiers.md §3,
docs/architecture.md §3). Validated when a task file is loaded (`rlvr.records.task.validate_record`) and again by
the CodeVerifier (`rlvr.verifiers.code`), which runs the tests:

    {
      "entry_point": "add",              # function mode: call add(*args, **kwargs) per test
      "public_tests": [{"args": [1, 2], "kwargs": {}, "expected": 3}, ...],
      "hidden_tests": [{"args": [5, 5], "expected": 10}, ...],
      "float_tol": 1e-9                  # optional: |a-b| ≤ tol·max(1,|b|) for floats
    }
    or, with "entry_point": null (stdio mode: the program is run once per test):
      "public_tests": [{"stdin": "1 2\\n", "stdout": "3\\n"}, ...]

A test may carry "weight" (default 1). Standard library only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional, Tuple


class CodeTestsError(ValueError):
    """`task.reference_answer` is not a valid code-test record.

    Attributes:
      field: the offending field's path, e.g. "reference_answer.public_tests[0].args".
      message: what is wrong with it. str(error) is "<field> <message>".
    """

    def __init__(self, field: str, message: str):
        self.field, self.message = field, message
        super().__init__(f"{field} {message}")


@dataclasses.dataclass(frozen=True)
class CodeReference:
    entry_point: Optional[str]
    public_tests: Tuple[Mapping[str, Any], ...]
    hidden_tests: Tuple[Mapping[str, Any], ...]
    float_tol: float = 1e-9

    @property
    def mode(self) -> str:
        return "function" if self.entry_point else "stdio"


def _check_test(t: Any, where: str, mode: str) -> dict:
    if not isinstance(t, Mapping):
        raise CodeTestsError(where, f"must be an object, got {type(t).__name__}")
    w = t.get("weight", 1.0)
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not (w >= 0 and math.isfinite(w)):
        raise CodeTestsError(f"{where}.weight", f"must be a finite number ≥ 0, got {w!r}")
    if mode == "function":
        bad = set(t) - {"args", "kwargs", "expected", "weight"}
        if bad:
            raise CodeTestsError(where, f"has unknown field(s) {sorted(bad)}; allowed args, "
                                        "kwargs, expected, weight")
        if "expected" not in t:
            raise CodeTestsError(f"{where}.expected", "is missing")
        if not isinstance(t.get("args", []), list):
            raise CodeTestsError(f"{where}.args", f"must be a list, got {t.get('args')!r}")
        if not isinstance(t.get("kwargs", {}), Mapping):
            raise CodeTestsError(f"{where}.kwargs", f"must be an object, got {t.get('kwargs')!r}")
    else:
        bad = set(t) - {"stdin", "stdout", "weight"}
        if bad:
            raise CodeTestsError(where, f"has unknown field(s) {sorted(bad)}; allowed stdin, "
                                        "stdout, weight")
        for k in ("stdin", "stdout"):
            if not isinstance(t.get(k), str):
                raise CodeTestsError(f"{where}.{k}", f"must be a string, got {t.get(k)!r}")
    return dict(t)


def parse_code_reference(ref: Any) -> CodeReference:
    """Validates a code task's `reference_answer`; raises CodeTestsError naming the field."""
    if not isinstance(ref, Mapping):
        raise CodeTestsError("reference_answer", f"must be an object with public_tests / "
                             f"hidden_tests / entry_point, got {type(ref).__name__}")
    bad = set(ref) - {"entry_point", "public_tests", "hidden_tests", "float_tol"}
    if bad:
        raise CodeTestsError("reference_answer", f"has unknown field(s) {sorted(bad)}; allowed "
                             "entry_point, public_tests, hidden_tests, float_tol")
    ep = ref.get("entry_point")
    if ep is not None and not (isinstance(ep, str) and ep.isidentifier()):
        raise CodeTestsError("reference_answer.entry_point",
                             f"must be an identifier or null, got {ep!r}")
    mode = "function" if ep else "stdio"
    tests = {}
    for key in ("public_tests", "hidden_tests"):
        v = ref.get(key, [])
        if not isinstance(v, list):
            raise CodeTestsError(f"reference_answer.{key}", f"must be a list, got {type(v).__name__}")
        tests[key] = tuple(_check_test(t, f"reference_answer.{key}[{i}]", mode)
                           for i, t in enumerate(v))
    if not tests["public_tests"] and not tests["hidden_tests"]:
        raise CodeTestsError("reference_answer", "has no tests (public_tests and hidden_tests "
                             "empty)")
    tol = ref.get("float_tol", 1e-9)
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol < 1:
        raise CodeTestsError("reference_answer.float_tol", f"must be in [0, 1), got {tol!r}")
    return CodeReference(ep, tests["public_tests"], tests["hidden_tests"], float(tol))
