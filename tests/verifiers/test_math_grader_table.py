"""The math verifier agrees with a careful grader on real-format answers.

Each row: (model output, gold, the careful grader's decision). The rows cover the answer
normalisation policy stated in rlvr/verifiers/math.py's docstring: LaTeX spacing and thousands
separators, currency, percentages, scientific notation, text-wrapped signs and units, several
boxed answers against a set-valued gold, a final-answer statement after the box, nested and
repeated boxes, plus ordinary forms and answers that must fail.
"""

import pytest

from rlvr.tasks.files import math_verifiers
from rlvr.verifiers.math import MathVerifier, normalize_answer
from tests.verifiers.test_math import task

TABLE = [
    # LaTeX spacing inside numbers and thousands separators
    (r"\boxed{1\,000}", "1000", "pass"),
    (r"\boxed{1\,000}", "0", "fail"),
    (r"\boxed{1\;000}", "1000", "pass"),
    (r"\boxed{1\!000}", "1000", "pass"),
    (r"\boxed{1\ 000}", "1000", "pass"),
    (r"\boxed{1{,}000}", "1000", "pass"),
    (r"The answer is 1 000.", "1000", "pass"),
    (r"\boxed{1,000,000}", "1000000", "pass"),
    (r"$\boxed{1\,234.5}$", "1234.5", "pass"),
    # currency
    (r"\boxed{\$18}", "18", "pass"),
    (r"\boxed{\$1,500}", "1500", "pass"),
    (r"She pays \$18 in total, so the answer is \$18.", "18", "pass"),
    (r"The answer is 18 dollars.", "18", "pass"),
    (r"\boxed{18 \text{ dollars}}", "18", "pass"),
    (r"\boxed{\$17}", "18", "fail"),
    # percentages: 50% is accepted for a gold of 50, 50% or 0.5; a bare 50 is not 0.5
    (r"\boxed{50\%}", "50", "pass"),
    (r"\boxed{50\%}", r"50\%", "pass"),
    (r"The answer is 50%", "0.5", "pass"),
    (r"\boxed{25 percent}", "25", "pass"),
    (r"\boxed{50}", "0.5", "fail"),
    (r"\boxed{0.5}", r"50\%", "pass"),
    (r"\boxed{50}", r"50\%", "pass"),
    (r"\boxed{40\%}", "50", "fail"),
    # scientific notation
    (r"\boxed{3e3}", "3000", "pass"),
    (r"The answer is 3e3", "3000", "pass"),
    (r"\boxed{3e3}", "9e", "fail"),
    (r"\boxed{3\times10^3}", "3000", "pass"),
    (r"\boxed{1.5e-3}", "0.0015", "pass"),
    (r"\boxed{2 \times 10^{-2}}", "0.02", "pass"),
    # text-wrapped signs, numbers and units
    (r"\boxed{\text{-}5}", "-5", "pass"),
    (r"\boxed{\text{-}5}", "5", "fail"),
    (r"\boxed{\text{5 cm}}", "5", "pass"),
    (r"\boxed{\mathrm{5\ cm}}", "5", "pass"),
    (r"\boxed{\textbf{12}}", "12", "pass"),
    (r"\boxed{5\text{ cm}^2}", "5", "pass"),
    (r"\boxed{\text{(\frac{1}{2})+1}}", r"\frac{1}{2}", "fail"),
    (r"\boxed{\mathrm{\frac{1}{2}}}", "0.5", "pass"),
    (r"The answer is 12 apples.", "12", "pass"),
    (r"\boxed{−5}", "-5", "pass"),
    (r"\boxed{90^\circ}", "90", "pass"),
    (r"\boxed{2 million}", "2", "fail"),
    (r"\boxed{\text{3 thousand}}", "3", "fail"),
    (r"The answer is 4 dozen.", "4", "fail"),
    # several boxed answers against a set-valued gold (sets are unordered)
    (r"The roots are \boxed{2} and \boxed{3}.", "2, 3", "pass"),
    (r"\boxed{3} and \boxed{2}", r"\{2, 3\}", "pass"),
    (r"\boxed{x=2} or \boxed{x=3}", "x=2, x=3", "pass"),
    (r"\boxed{2} and \boxed{3}", "(2, 3)", "fail"),
    (r"\boxed{2} and \boxed{5}", "2, 3", "fail"),
    (r"\boxed{2}", "2, 3", "fail"),
    (r"\boxed{2}, \boxed{3} and \boxed{4}", "2, 3", "fail"),
    (r"It is \boxed{4} or maybe \boxed{5}", "4", "fail"),
    # a final-answer statement after the box counts too
    (r"\boxed{42}. The correct answer is 43.", "42", "fail"),
    (r"\boxed{42}. The correct answer is 43.", "43", "fail"),
    (r"\boxed{42}. So the final answer is 42.", "42", "pass"),
    (r"\boxed{\frac{1}{2}}. The answer is $0.5$.", "1/2", "pass"),
    (r"\boxed{42}. I believe this answer is correct.", "42", "pass"),
    # nested and repeated boxes
    (r"\boxed{\boxed{42}}", "42", "pass"),
    (r"\boxed{42} ... so again \boxed{42}", "42", "pass"),
    # ordinary forms
    (r"\boxed{\frac{3}{4}}", "0.75", "pass"),
    (r"\boxed{\dfrac{3}{4}}", "3/4", "pass"),
    (r"\boxed{0.75}", r"\frac{3}{4}", "pass"),
    (r"\boxed{2.50}", "2.5", "pass"),
    (r"\boxed{-7}", "-7", "pass"),
    (r"\boxed{7}", "-7", "fail"),
    (r"\boxed{(0, 1]}", "(0,1]", "pass"),
    (r"\boxed{[0, 1]}", "(0,1]", "fail"),
    (r"\boxed{\{1, 2, 3\}}", r"\{3,2,1\}", "pass"),
    (r"\boxed{\sqrt{2}/2}", r"\frac{\sqrt{2}}{2}", "pass"),
    (r"\boxed{2\pi}", r"2\pi", "pass"),
    (r"The answer is 12", "12", "pass"),
    (r"<answer>The result is $5$</answer>", "5", "pass"),
    (r"The answer is $18.", "18", "pass"),
    (r"The answer is 13", "12", "fail"),
    (r"<think>\boxed{7}</think> The answer is 8", "7", "fail"),
    # NaN and infinities
    (r"\boxed{nan}", "5", "fail"),
    (r"\boxed{\text{NaN}}", "5", "fail"),
    (r"\boxed{\infty}", "5", "fail"),
    (r"The answer is inf", "5", "fail"),
]


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(timeout_s=10.0)
    yield v
    v.close()


def test_table_is_large_and_two_sided():
    assert len(TABLE) >= 40
    decisions = [d for _, _, d in TABLE]
    assert decisions.count("pass") >= 15 and decisions.count("fail") >= 15


@pytest.mark.parametrize("output,gold,expected", TABLE)
def test_verifier_agrees_with_the_careful_grader(verifier, output, gold, expected):
    v = verifier.verify(task(gold), output)
    assert v.trial == "valid", v.evidence
    assert v.decision == expected, v.evidence


HIDDEN_TABLE = [  # the strict held-out verifier of math task files
    (r"\boxed{\boxed{42}}", "42", "pass"),
    (r"\boxed{42} and once more \boxed{42}", "42", "pass"),
    (r"\boxed{1\,000}", "1000", "pass"),
    (r"\boxed{2} and \boxed{3}", "2, 3", "pass"),
    (r"\boxed{42} and \boxed{42.0}", "42", "fail"),
    (r"\boxed{42}. The correct answer is 43.", "42", "fail"),
    ("42", "42", "fail"),  # no plain-number fallback
]


@pytest.mark.parametrize("output,gold,expected", HIDDEN_TABLE)
def test_hidden_verifier_agrees(output, gold, expected):
    _, hidden = math_verifiers()
    hidden.isolation = "none"
    v = hidden.verify(task(gold), output)
    assert v.trial == "valid" and v.decision == expected, v.evidence


@pytest.mark.parametrize("raw,normalized", [
    (r"1\,000", "1000"), (r"\$1,500", "1,500"), (r"\text{-}5", "-5"), ("3e3", r"3\times10^{3}"),
    (r"\boxed{\boxed{42}}", "42"), ("18 dollars", "18"), ("25 percent", r"25\%"),
    (r"\text{5 cm}", "5"), (r"2\pi", r"2\pi"), ("3 pi", "3 pi"), (r"x \in [1, 2]", r"x \in [1, 2]"),
    ("5 cm^2", "5"), ("2 million", "2 million"), ("5 m", "5 m"), ("$18", "18"),
    ("the result is $5$", "the result is $5$"),
])
def test_normalize_answer(raw, normalized):
    assert normalize_answer(raw) == normalized


def test_policy_last_lets_the_last_stated_answer_win():
    last = MathVerifier(boxed_policy="last", isolation="none")
    out = r"\boxed{42}. The correct answer is 43."
    assert last.verify(task("43"), out).decision == "pass"
    assert last.verify(task("42"), out).decision == "fail"
