"""IntegerAnswerVerifier: exact, strict integer answers (docs/verifiers.md (V.1), §2)."""

import pytest

from rlvr.records.task import TaskSpec
from rlvr.verifiers.arithmetic import IntegerAnswerVerifier

V = IntegerAnswerVerifier()


def task(ans):
    return TaskSpec("t", "x=", "math", reference_answer=ans)


@pytest.mark.parametrize("out", ["68", " 68", "68 ", "\n68\n", "\t68"])
def test_correct(out):
    v = V.verify(task(68), out)
    assert v.decision == "pass" and v.trial == "valid"
    assert v.components == {"correct": 1.0, "format": 1.0}
    assert v.verifier_version == V.version


@pytest.mark.parametrize("ans,out", [(-7, "-7"), (0, "0"), (10**30, str(10**30))])
def test_negative_zero_and_big(ans, out):
    assert V.verify(task(ans), out).passed


def test_wrong_value_keeps_format():
    v = V.verify(task(68), "69")
    assert v.decision == "fail" and v.components == {"correct": 0.0, "format": 1.0}
    assert v.evidence["reason"] == "wrong_value"


@pytest.mark.parametrize("out", [
    "", "   ", "68abc", "68 69", "68.0", "6.8e1", "--5", "+68", "068", "-0", "6_8",
    "\uff16\uff18",  # fullwidth digits: int() accepts them, we must not
    "٦٨",            # Arabic-Indic digits
    "nan", "inf", "68=", "= 68", "(68)", "68\n69",
])
def test_malformed_fails_never_unknown(out):
    v = V.verify(task(68 if out not in ("-0",) else 0), out)
    assert v.decision == "fail" and v.trial == "valid"
    assert v.components["correct"] == 0.0 and v.components["format"] == 0.0


def test_minus_zero_and_double_minus_against_matching_refs():
    assert not V.verify(task(0), "-0").passed
    assert not V.verify(task(5), "--5").passed
    assert not V.verify(task(-5), "--5").passed


def test_huge_outputs_bounded():
    v = V.verify(task(1), "1" * 100_000)
    assert v.decision == "fail" and v.evidence["reason"] == "too_long"
    big = IntegerAnswerVerifier(max_chars=20_000)
    # beyond Python's 4300-digit int() limit: still a plain fail, no exception
    assert big.verify(task(1), "9" * 10_000).decision == "fail"


def test_bad_reference_is_env_error_and_bad_output_type_fails():
    for ref in ("68", True, None, 6.8):
        v = V.verify(task(ref), "68")
        assert v.is_env_error and not v.passed and "reference_answer" in v.evidence["reason"]
    assert V.verify(task(1), None).decision == "fail"
    assert V.verify(task(1), b"1").decision == "fail"
    with pytest.raises(ValueError, match="max_chars"):
        IntegerAnswerVerifier(max_chars=0)
