"""CountdownVerifier: whitelisted ast evaluation, numbers at most once, exact target."""

import builtins

import pytest

from rlvr.records.task import TaskSpec
from rlvr.verifiers.countdown import CountdownVerifier, safe_eval

V = CountdownVerifier()


def task(numbers=(3, 7, 25), target=68, operators="+-*/"):
    return TaskSpec("c", "p", "math", reference_answer={
        "numbers": list(numbers), "target": target, "operators": operators})


@pytest.mark.parametrize("out", ["25*3-7", " 25*3-7 ", "(25*3)-7", "3*25-7", "((25)*(3))-7", "25 * 3 - 7"])
def test_correct(out):
    v = V.verify(task(), out)
    assert v.passed and v.components == {"correct": 1.0, "format": 1.0}


def test_exact_division_and_fractional_intermediates():
    assert V.verify(task((6, 4, 3), 8), "6/3*4").passed
    assert V.verify(task((1, 3, 3, 3), 10), "(1/3+3)*3").passed  # 1/3 intermediate, exact
    assert not V.verify(task((7, 2), 3), "7/2").passed        # 3.5 != 3, no rounding


def test_wrong_value_is_well_formed_fail():
    v = V.verify(task(), "25+3+7")
    assert v.decision == "fail" and v.components == {"correct": 0.0, "format": 1.0}


@pytest.mark.parametrize("out,reason", [
    ("25*3-7+7", "number_not_available"),   # reuses 7
    ("25*3*3-7", "number_not_available"),   # reuses 3
    ("68", "number_not_available"),         # the target itself is not a given number
    ("75-7", "number_not_available"),
])
def test_reusing_or_inventing_numbers_fails(out, reason):
    v = V.verify(task(), out)
    assert v.decision == "fail" and v.evidence["reason"] == reason and v.components["format"] == 0.0


def test_number_given_twice_may_be_used_twice():
    assert V.verify(task((5, 5, 2), 50), "5*5*2").passed
    assert not V.verify(task((5, 2), 50), "5*5*2").passed


@pytest.mark.parametrize("out", [
    "", "   ", "--5", "-7+25*3", "25**3", "25*3-7=68", "25*3-7 68", "2_5*3-7", "025*3-7",
    "25.0*3-7", "1e1", "__import__('os').system('echo hacked')", "abs(-68)", "25*3-7;",
    "[68]", "(25*3-7", "25*3-7)", "25 3", "(3)(7)", "25//3", "25%3", "x",
    "\uff12\uff15*3-7", "(" * 150 + "68" + ")" * 150,
])
def test_malformed_fails(out, monkeypatch):
    calls = []
    monkeypatch.setattr(builtins, "eval", lambda *a, **k: calls.append(a))
    v = V.verify(task(), out)
    assert v.decision == "fail" and v.trial == "valid" and v.components["format"] == 0.0
    assert not calls  # never eval


def test_operator_set_is_enforced():
    assert not V.verify(task((6, 3), 2, operators="+-*"), "6/3").passed
    assert V.verify(task((6, 3), 2, operators="/"), "6/3").passed


def test_division_by_zero_is_fail():
    v = V.verify(task((5, 3, 3), 1), "5/(3-3)")
    assert v.decision == "fail" and v.evidence["reason"] == "division_by_zero"


def test_long_output_bounded():
    v = V.verify(task(), "3+" * 100_000 + "7")
    assert v.decision == "fail" and "too long" in v.evidence["detail"]


def test_safe_eval_matches_python_on_trusted_strings():
    for s in ["1+2*3", "(1+2)*3", "8-3-2", "8-(3-2)", "8/4/2", "8/(4/2)", "2*3-4*5"]:
        assert safe_eval(s) == eval(s)


def test_bad_reference_is_env_error():
    for ref in ({"numbers": [1], "target": "2"}, {"numbers": [1], "target": 1, "operators": "^"},
                [1, 2], None):
        v = V.verify(TaskSpec("c", "p", "math", reference_answer=ref), "1")
        assert v.is_env_error and "reference_answer" in v.evidence["reason"]
    assert V.verify(task(), None).decision == "fail"


@pytest.mark.parametrize("out", ["(" * 100_000 + "3" + ")" * 100_000, "3+" * 100_000 + "3",
                                 "3*" * 1_000 + "3", "-" * 100_000 + "3"])
def test_pathological_nesting_is_a_plain_fail(out):
    # with the length gate lifted, the parser's own limits must still give a fail, not a crash
    t = task(numbers=[3] * 10, target=30)
    v = CountdownVerifier(max_chars=10**6).verify(t, out)
    assert v.decision == "fail" and v.trial == "valid" and v.evidence["reason"] == "malformed"


def test_nesting_verdict_does_not_depend_on_recursion_limit():
    # sympy/math-verify raise the interpreter's recursion limit; the verdict must not change.
    import sys
    t = task(numbers=[3] * 10, target=30)
    old = sys.getrecursionlimit()
    try:
        for limit in (1000, 100_000):
            sys.setrecursionlimit(limit)
            v = CountdownVerifier(max_chars=10**6).verify(t, "3*" * 1_000 + "3")
            assert v.decision == "fail" and v.evidence["reason"] == "malformed"
    finally:
        sys.setrecursionlimit(old)
