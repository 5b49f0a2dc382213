"""stdin/stdout suites with the checker options of competitive-programming sets: whitespace-
insensitive tokens and float tolerance (stdout_compare)."""

import dataclasses

import pytest

from rlvr.records.code_tests import CodeTestsError, parse_code_reference
from rlvr.records.task import TaskSpec
from rlvr.verifiers.code import CodeVerifier, stdout_tokens_equal
from rlvr.verifiers.sandbox import SandboxLimits

V = CodeVerifier(limits=SandboxLimits(cpu_s=1, wall_s=2, memory_mb=256, max_processes=16,
                                      max_file_mb=1))


def test_tokens_and_float_tolerance():
    assert stdout_tokens_equal("1  2\n3\n\n", "1 2 3")
    assert not stdout_tokens_equal("1 2", "1 2 3")
    assert not stdout_tokens_equal("0.3333", "0.333333")  # no tolerance: text
    assert stdout_tokens_equal("0.333333 x", "0.3333334 x", 1e-6)
    assert not stdout_tokens_equal("0.33 x", "0.3333334 x", 1e-6)
    assert stdout_tokens_equal("1000000.5", "1000000.0", 1e-6)  # relative above 1
    assert not stdout_tokens_equal("inf", "inf0", 1e-6)


def _task(compare, tol=1e-6):
    return TaskSpec(task_id="d", prompt="p", task_type="code", reference_answer={
        "entry_point": None, "stdout_compare": compare, "float_tol": tol,
        "hidden_tests": [{"stdin": "1 3\n", "stdout": "0.333333333\n"}]})


PROG = "a, b = map(int, input().split())\nprint('  %.7f  ' % (a / b))\n"


def test_verdict_follows_the_compare_option():
    assert V.verify(_task("lines"), PROG).decision == "fail"
    assert V.verify(_task("tokens"), PROG).decision == "fail"
    v = V.verify(_task("float"), PROG)
    assert v.decision == "pass", v.evidence
    assert V.verify(_task("float", 1e-9), PROG).decision == "fail"


def test_bad_compare_named():
    with pytest.raises(CodeTestsError, match="reference_answer.stdout_compare"):
        parse_code_reference(dict(_task("fuzzy").reference_answer))
    with pytest.raises(CodeTestsError, match="reference_answer.stdout_compare"):
        parse_code_reference({"entry_point": "f", "stdout_compare": "tokens",
                              "hidden_tests": [{"args": [], "expected": 1}]})


CHECKER = ("import json, sys\nd = json.load(sys.stdin)\n"
           "a, b = map(int, d['input'].split())\n"
           "x, y = map(int, d['actual'].split())\n"  # any pair summing to a + b is right
           "sys.exit(0 if x + y == a + b else 1)\n")


def test_custom_checker_program_decides():
    task = TaskSpec(task_id="c", prompt="p", task_type="code", reference_answer={
        "entry_point": None, "stdout_compare": "checker", "checker": CHECKER,
        "hidden_tests": [{"stdin": "3 4\n", "stdout": "3 4\n"},
                         {"stdin": "1 1\n", "stdout": "1 1\n"}]})
    prog = "a, b = map(int, input().split())\nprint(a + b, 0)\n"
    assert V.verify(task, prog).decision == "pass"  # not the expected text, accepted
    v = V.verify(task, "print(1, 1)\n")
    assert v.decision == "fail" and v.evidence["hidden_passed"] == "1/2", v.evidence
    with pytest.raises(CodeTestsError, match="reference_answer.checker"):
        parse_code_reference({**task.reference_answer, "checker": ""})


def _checker_task(checker):
    return TaskSpec(task_id="c", prompt="p", task_type="code", reference_answer={
        "entry_point": None, "stdout_compare": "checker", "checker": checker,
        "hidden_tests": [{"stdin": "3 4\n", "stdout": "3 4\n"}]})


PAIR = "a, b = map(int, input().split())\nprint(a + b, 0)\n"


@pytest.mark.parametrize("checker,why", [
    ("def broken(:\n", "not valid Python"),  # refused when the task is read
    ("import sys\nsys.exit(3)\n", "its own failure"),
])
def test_a_checker_that_fails_whatever_the_output_is_env_error(checker, why):
    v = V.verify(_checker_task(checker), PAIR)
    assert v.trial == "env_error", v.evidence
    assert why in str(v.evidence), v.evidence


def test_a_checker_sandbox_fault_is_env_error(monkeypatch):
    import rlvr.verifiers.code as code

    real = code.run_sandboxed

    def faulty(source, **kw):
        r = real(source, **kw)
        if source == CHECKER:  # the checker's run only; the candidate's runs as usual
            return dataclasses.replace(r, status="sandbox_error", error="not ready")
        return r

    monkeypatch.setattr(code, "run_sandboxed", faulty)
    v = V.verify(_checker_task(CHECKER), PAIR)
    assert v.trial == "env_error" and "sandbox failed" in str(v.evidence), v.evidence


@pytest.mark.parametrize("actual", ["print('x y')\n", "print('1 2 3 4 ' * 5)\n",
                                    "while True: print(7, end=' ')\n"])
def test_output_that_breaks_the_checker_is_the_candidates_failure(actual):
    """The checker raises on non-numbers or too many fields (exit status 1): a fail, never a
    mask the policy could hide behind."""
    v = V.verify(_checker_task(CHECKER), actual)
    assert v.decision == "fail", v.evidence
