"""Math verifier (docs/verifiers.md §2): equivalent forms accepted, the known traps rejected."""

import threading
import time

import pytest

from rlvr.records.task import TaskSpec
from rlvr.verifiers.math import MathVerifier, extract_final_answers, find_boxed


@pytest.fixture(scope="module")
def mv():
    v = MathVerifier(timeout_s=5.0)
    yield v
    v.close()


def task(gold):
    return TaskSpec(task_id="m", prompt="?", task_type="math", reference_answer=gold)


@pytest.mark.parametrize("gold,output", [
    ("1/2", "So the result is \\boxed{0.5}."),
    ("0.5", "\\boxed{\\frac{1}{2}}"),
    ("\\frac{1}{2}", "\\boxed{\\frac{2}{4}}"),
    ("\\frac12", "<answer>2/4</answer>"),
    ("\\{1, 2, 3\\}", "\\boxed{\\{3, 1, 2\\}}"),
    ("(0, 1]", "The set is \\boxed{(0,1]}"),
    ("[2, \\infty)", "\\boxed{[2,\\infty)}"),
    ("50\\%", "\\boxed{50\\%}"),
    ("7", "The length is \\boxed{7 \\text{ cm}}"),
    ("1000", "Final answer: 1,000"),
    ("-3", "lots of work\n-3"),
    ("x^2+2x+1", "\\boxed{(x+1)^2}"),
    ("\\frac{\\sqrt{2}}{2}", "\\boxed{\\sqrt{2}/2}"),
    (12, "The answer is 12."),
])
def test_equivalent_forms_pass(mv, gold, output):
    v = mv.verify(task(gold), output)
    assert v.decision == "pass", v.evidence
    assert v.components == {"correct": 1.0, "format": 1.0}


@pytest.mark.parametrize("gold,output,reason", [
    ("1/2", "\\boxed{0.6}", "not_equivalent"),
    ("(0, 1]", "\\boxed{(0,1)}", "not_equivalent"),
    ("\\{1, 2, 3\\}", "\\boxed{\\{1, 2\\}}", "not_equivalent"),
    ("2", "\\boxed{2.0001}", "not_equivalent"),
    # NaN / inf traps
    ("5", "\\boxed{nan}", "nan_answer"),
    ("5", "\\boxed{NaN}", "nan_answer"),
    ("5", "\\boxed{\\infty}", "infinite_answer"),
    ("5", "The answer: inf", "infinite_answer"),
    # several boxed answers: only one may count
    ("4", "It is \\boxed{4} or maybe \\boxed{5}", "conflicting_boxed"),
    ("4", "\\boxed{5} ... \\boxed{4}", "conflicting_boxed"),
    # answer only in the reasoning, not in the final slot
    ("4", "<think>2+2 = \\boxed{4}</think> The answer is 5", "not_equivalent"),
    ("4", "<think>we get 4</think> I am not sure.", "no_final_answer"),
    ("4", "2 + 2 = 4, so hmm, let me think again about the problem", "no_final_answer"),
    ("4", "<answer>5</answer> although \\boxed{4}", "not_equivalent"),
    ("4", "", "no_final_answer"),
])
def test_traps_fail(mv, gold, output, reason):
    v = mv.verify(task(gold), output)
    assert v.decision == "fail" and v.trial == "valid", v.evidence
    assert v.evidence["reason"] == reason
    assert v.components["correct"] == 0.0


def test_boxed_policies():
    out = "\\boxed{4} and \\boxed{4}"  # one answer stated twice is one answer
    strict = MathVerifier(boxed_policy="reject_multiple", isolation="none")
    assert strict.verify(task("4"), out).decision == "pass"
    v = strict.verify(task("4"), "\\boxed{4} and \\boxed{4.0}")
    assert v.decision == "fail" and v.evidence["reason"] == "multiple_boxed"
    assert MathVerifier(isolation="none").verify(task("4"), out).decision == "pass"
    assert MathVerifier(boxed_policy="last", isolation="none").verify(
        task("4"), "\\boxed{5} no wait \\boxed{4}").decision == "pass"
    with pytest.raises(ValueError, match="boxed_policy"):
        MathVerifier(boxed_policy="first")


def test_absurdly_long_output_bounded(mv):
    t0 = time.monotonic()
    v = mv.verify(task("4"), "1+" * 500_000 + "\\boxed{4}")
    assert v.decision == "fail" and v.evidence["reason"] == "output_too_long"
    v2 = mv.verify(task("4"), "\\boxed{" + "9" * 5000 + "}")
    assert v2.decision == "fail" and v2.evidence["reason"] == "answer_too_long"
    assert time.monotonic() - t0 < 60  # a bound against hangs, not a speed assertion


def test_own_timeout_from_a_worker_thread():
    # a tiny limit makes even a normal check time out: the helper is killed, the verdict is
    # "unknown" with a classified timeout, and it works off the main thread (signal-free)
    v = MathVerifier(timeout_s=0.001)
    v.verify(task("1"), "\\boxed{1}")  # starts the helper (startup is not under the limit)
    res = {}
    th = threading.Thread(target=lambda: res.update(v=v.verify(
        task("x^2+2x+1"), "\\boxed{(x+1)^2 + \\sin(x)^2 + \\cos(x)^2 - 1}")))
    th.start()
    th.join(60)
    got = res["v"]
    assert got.decision == "unknown" and got.trial == "valid"
    assert got.evidence["timeout_class"] == "verifier_service"
    # the verifier recovers with a fresh helper
    v.timeout_s = 10.0
    assert v.verify(task("1/2"), "\\boxed{0.5}").decision == "pass"
    v.close()


def test_extraction_helpers():
    assert find_boxed("a \\boxed{\\frac{1}{2}} b \\fbox{3}") == ["\\frac{1}{2}", "3"]
    assert extract_final_answers("<answer> 7 </answer>") == (["7"], "answer_tag")
    assert extract_final_answers("so\n$42$.")[0] == ["42"]
    assert extract_final_answers("x = 42 is what I think")[1] == "none"


def test_extraction_takes_the_last_answer_tag_and_the_last_marker():
    """A draft answer early in the output never counts over the final one."""
    assert extract_final_answers("<answer>1</answer> wait, no. <answer>2</answer>") == \
        (["2"], "answer_tag")
    got, how = extract_final_answers("The answer is 3. Checking again... The answer is 4.")
    assert got == ["4"], (got, how)


def test_bad_gold_is_env_error(mv):
    v = mv.verify(task(None), "\\boxed{1}")
    assert v.trial == "env_error"


PATHOLOGICAL = {  # each 32,000 characters (the default max_output_chars): no final answer
    "unclosed_fbox": "\\fbox{" * 5333 + "ab",
    "unclosed_boxed_nested": ("\\boxed{{" * 4000)[:32_000],
    "unclosed_answer_tags": "<answer>" * 4000,
    "unclosed_think_tags": "x<think>" * 4000,
}


@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_pathological_output_gets_a_verdict(mv, name):
    out = PATHOLOGICAL[name]
    assert len(out) == 32_000
    v = mv.verify(task("4"), out)
    assert v.trial == "valid" and v.decision == "fail", v.evidence
    assert v.evidence["reason"] == "no_final_answer"
    # the same flood with a closed box at the end: the box is found, except after an unclosed
    # <think>, which swallows the rest of the output
    v2 = mv.verify(task("4"), out[:31_000] + " \\boxed{4}")
    if name == "unclosed_think_tags":
        assert v2.decision == "fail" and v2.evidence["reason"] == "no_final_answer"
    else:
        assert v2.decision == "pass", v2.evidence


def _line_events(fn, *args):
    """Python line events executed by fn(*args): a machine-independent operation count."""
    import sys

    n = [0]

    def tracer(frame, event, arg):
        if event == "line":
            n[0] += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn(*args)
    finally:
        sys.settrace(None)
    return n[0]


@pytest.mark.parametrize("unit", ["\\fbox{", "\\boxed{{", "{", "<answer>", "x<think>",
                                  "\\boxed{1} ", "<answer>1</answer>"])
def test_extraction_work_grows_linearly(unit):
    # doubling the input at most doubles the work (+ a constant): quadratic scanning of
    # unclosed boxes would quadruple it
    small = _line_events(extract_final_answers, unit * 1000)
    large = _line_events(extract_final_answers, unit * 2000)
    assert large <= 2.2 * small + 50, (small, large)


def test_extraction_runs_inside_the_time_limit(monkeypatch):
    import rlvr.verifiers.math as vm

    def not_here(*a, **k):
        raise AssertionError("extraction ran in the calling process")

    monkeypatch.setattr(vm, "_extract", not_here)
    inline = MathVerifier(isolation="none")
    assert inline.verify(task("4"), "\\boxed{4}").trial == "env_error"  # the patch bites inline
    helper = MathVerifier(timeout_s=10.0)
    try:  # in the helper process (a fresh interpreter) extraction is the real one
        v = helper.verify(task("4"), PATHOLOGICAL["unclosed_fbox"][:31_000] + "\\boxed{4}")
        assert v.decision == "pass" and v.evidence["slot"] == "boxed", v.evidence
    finally:
        helper.close()
