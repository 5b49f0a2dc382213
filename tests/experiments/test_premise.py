"""The premise check: payment success by layout agrees within 0.05 for the demonstration policy on
the local checkout variant, and disagrees on the control for a policy that reads prices by
position (right only when every price was read first)."""

import math
import re

import pytest

from experiments.study.premise import demonstration_pay, payments_by_layout, premise_check
from rlvr.tasks.shop import generate


def positional_pay(prompt, observations):
    """Pays the sum of the prices among the first n observations (n = ordered items): right
    when all reads came first, wrong when reads and adds are interleaved."""
    n = len(prompt.split())
    prices = [int(m.group(1)) for o in observations[:n] for m in [re.match(r"^=([0-9]+)\n$", o)] if m]
    return f"pay {sum(prices)}\n"


def test_local_variant_demonstration_policy_agrees():
    res = payments_by_layout(generate(40, split="eval", seed=0, difficulty="local"), demonstration_pay)
    assert min(res.payments.values()) >= 5          # both layouts occur
    assert res.pay_right == {"reads_first": 1.0, "interleaved": 1.0} and res.agree


def test_control_positional_policy_disagrees():
    tasks = generate(40, split="eval", seed=0, difficulty="standard")
    res = payments_by_layout(tasks, positional_pay)
    assert res.pay_right["reads_first"] == 1.0 and res.pay_right["interleaved"] < 0.5
    assert not res.agree and res.difference > 0.5
    # the last-observation rule, right on the local variant, cannot pay the control at all
    assert payments_by_layout(tasks, demonstration_pay).pay_right["reads_first"] == 0.0


def test_premise_check_bounds_and_missing_layout():
    lay = ["reads_first"] * 20 + ["interleaved"] * 20
    assert premise_check(lay, [True] * 20 + [True] * 19 + [False]).agree        # 1.0 vs 0.95
    assert not premise_check(lay, [True] * 20 + [True] * 18 + [False] * 2).agree  # 1.0 vs 0.90
    res = premise_check(["reads_first"] * 3, [True] * 3)
    assert math.isnan(res.difference) and not res.agree
    with pytest.raises(ValueError, match="layouts"):
        premise_check(["pairs"], [True])


def test_three_basket_local_variant_demonstration_policy_agrees_on_every_basket():
    tasks = generate(20, split="eval", seed=0, difficulty="local3")
    res = payments_by_layout(tasks, demonstration_pay)
    assert sum(res.payments.values()) == 3 * len(tasks)   # one payment per basket
    assert min(res.payments.values()) >= 5
    assert res.pay_right == {"reads_first": 1.0, "interleaved": 1.0} and res.agree


def test_layout_reads_the_current_basket_only():
    from experiments.study.premise import layout

    # first basket interleaved, second reads first
    acts = ["get a\n", "add a1\n", "get b\n", "add b1\n", "pay 9\n", "get c\n", "get d\n", "add c1\n"]
    assert layout(acts[:4]) == "interleaved" and layout(acts) == "reads_first"
