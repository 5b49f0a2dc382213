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
      "public_tests": [{"stdin": "1 2\\n", "stdout": "3\\n"}, ...],
      "stdout_compare": "lines"          # optional, stdio mode: "lines" (default: same lines
                                         # up to trailing whitespace), "tokens" (same
                                         # whitespace-separated tokens), "float" (tokens; those
                                         # that parse as numbers compared within float_tol),
                                         # "checker" (the "checker" program decides)
      "checker": "import json, sys\n..." # with stdout_compare "checker": a Python program run in
                                         # the sandbox on stdin {"input", "expected", "actual"}
                                         # (JSON); exit status 0 = the test passed

    or assertion tests (asserts mode, the HumanEval / MBPP layout; entry_point required):
      {"entry_point": "add", "test_code": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
       "public_test_code": "...", "setup_code": "import math"}
    test_code (hidden) / public_test_code hold either a `check(candidate)` function (its body
    is run with the candidate bound to the parameter; module-level lines around it are setup)
    or plain top-level asserts calling the entry point by name. Each top-level statement that
    contains an `assert` is one counted test; other statements run as setup (a failing one
    fails the tests after it). setup_code runs before the candidate is loaded.

A test may carry "weight" (default 1). Standard library only.
"""

from __future__ import annotations

import ast
import dataclasses
import math
from typing import Any, Mapping, Optional, Tuple


STDOUT_COMPARES = ("lines", "tokens", "float", "checker")


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
    stdout_compare: str = "lines"
    checker: str = ""
    setup_code: str = ""
    public_units: Tuple[Tuple[str, bool], ...] = ()
    hidden_units: Tuple[Tuple[str, bool], ...] = ()
    candidate_name: str = "candidate"
    asserts: bool = False

    @property
    def mode(self) -> str:
        return "asserts" if self.asserts else "function" if self.entry_point else "stdio"


def split_assert_units(source: str, where: str) -> Tuple[str, Tuple[Tuple[str, bool], ...], str]:
    """Splits assertion test code into (setup, units, candidate parameter name).

    With a top-level `def check(param)`: setup is the module-level code around it (a trailing
    `check(...)` call dropped), the units are check's top-level statements. Otherwise the units
    are the module's top-level statements. A unit is counted (one test) iff it contains an
    `assert`. Raises CodeTestsError naming `where` on a syntax error or no assert at all."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise CodeTestsError(where, f"is not valid Python: {e.msg} (line {e.lineno})") from None
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"),
                 None)
    setup, name = "", "candidate"
    body = tree.body
    if check is not None:
        if len(check.args.args) != 1:
            raise CodeTestsError(where, "check must take exactly one parameter (the candidate)")
        name = check.args.args[0].arg
        rest = [n for n in tree.body if n is not check and not (
            isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
            and isinstance(n.value.func, ast.Name) and n.value.func.id == "check")]
        setup = "\n".join(ast.unparse(n) for n in rest)
        body = check.body
    units = tuple((ast.unparse(n), any(isinstance(x, ast.Assert) for x in ast.walk(n)))
                  for n in body)
    if not any(c for _, c in units):
        raise CodeTestsError(where, "has no assert statement")
    return setup, units, name


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
    bad = set(ref) - {"entry_point", "public_tests", "hidden_tests", "float_tol", "stdout_compare",
                      "checker",
                      "test_code",
                      "public_test_code", "setup_code"}
    if bad:
        raise CodeTestsError("reference_answer", f"has unknown field(s) {sorted(bad)}; allowed "
                             "entry_point, public_tests, hidden_tests, float_tol, stdout_compare, checker, test_code, "
                             "public_test_code, setup_code")
    if any(k in ref for k in ("test_code", "public_test_code", "setup_code")):
        return _parse_asserts(ref)
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
    cmp = ref.get("stdout_compare", "lines")
    if cmp not in STDOUT_COMPARES or (cmp != "lines" and mode != "stdio"):
        raise CodeTestsError("reference_answer.stdout_compare",
                             f"must be one of {STDOUT_COMPARES} (stdio mode only), got {cmp!r}")
    checker = ref.get("checker", "")
    if (cmp == "checker") != bool(checker) or not isinstance(checker, str):
        raise CodeTestsError("reference_answer.checker", "must be a non-empty program string "
                             "exactly when stdout_compare is 'checker'")
    if checker:
        try:
            compile(checker, "checker.py", "exec")
        except SyntaxError as e:
            raise CodeTestsError("reference_answer.checker", f"is not valid Python: {e.msg}") \
                from None
    return CodeReference(ep, tests["public_tests"], tests["hidden_tests"], float(tol),
                         stdout_compare=cmp, checker=checker)


def _parse_asserts(ref: Mapping[str, Any]) -> CodeReference:
    ep = ref.get("entry_point")
    if not (isinstance(ep, str) and ep.isidentifier()):
        raise CodeTestsError("reference_answer.entry_point", f"must be an identifier with "
                             f"test_code, got {ep!r}")
    for k in ("public_tests", "hidden_tests"):
        if ref.get(k):
            raise CodeTestsError(f"reference_answer.{k}", "cannot be combined with test_code / "
                                 "public_test_code")
    for k in ("test_code", "public_test_code", "setup_code"):
        if k in ref and not isinstance(ref[k], str):
            raise CodeTestsError(f"reference_answer.{k}", f"must be a string, got {ref[k]!r}")
    if not ref.get("test_code") and not ref.get("public_test_code"):
        raise CodeTestsError("reference_answer.test_code", "is missing (or empty)")
    setup = ref.get("setup_code", "")
    try:
        ast.parse(setup)
    except SyntaxError as e:
        raise CodeTestsError("reference_answer.setup_code", f"is not valid Python: {e.msg}") \
            from None
    split, names = {}, set()
    for key, field in (("public", "public_test_code"), ("hidden", "test_code")):
        if ref.get(field):
            s, units, name = split_assert_units(ref[field], f"reference_answer.{field}")
            split[key] = (s, units)
            names.add(name)
        else:
            split[key] = ("", ())
    if len(names) > 1:
        raise CodeTestsError("reference_answer.test_code", "public and hidden check functions "
                             f"name their parameter differently: {sorted(names)}")
    setups = [setup] + [split[k][0] for k in ("public", "hidden") if split[k][0]]
    counted = lambda units: tuple({"weight": 1.0, "assert": src}  # noqa: E731
                                  for src, c in units if c)
    return CodeReference(ep, counted(split["public"][1]), counted(split["hidden"][1]),
                         setup_code="\n".join(setups), public_units=split["public"][1],
                         hidden_units=split["hidden"][1],
                         candidate_name=(names or {"candidate"}).pop(), asserts=True)
