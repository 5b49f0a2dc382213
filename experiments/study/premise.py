"""PivotRL's premise on a checkout testbed: is the decisive payment's success independent of the
earlier, functionally equivalent layout choice?

PivotRL trains the decisive turn from demonstration prefixes judged turn by turn; that transfers
to whole episodes only if the decisive turn's success does not depend on earlier choices the turn
verifier accepts either way. On the checkout task those choices are the layout of the turns
before the payment: every price read before the first add ("reads_first") or reads and adds
interleaved ("interleaved"). The premise holds for a policy when

    |P(payment right | reads_first) − P(payment right | interleaved)| ≤ tol   (tol = 0.05),

P over the policy's payments made with the cart complete (`premise_check`). Measure it on the
warm start before training:

    python experiments/study/premise.py --difficulty local     # the testbed (premise expected)
    python experiments/study/premise.py --difficulty standard  # its control
    python experiments/study/premise.py --difficulty local --quick

Policies given as Python rules run through `payments_by_layout` (tests: the demonstration
policy on the local variant agrees; a constructed policy on the control does not).
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from typing import Callable, Sequence

LAYOUTS = ("reads_first", "interleaved")
TOLERANCE = 0.05


def layout(actions: Sequence[str]) -> str:
    """"reads_first" when every price read comes before the first add in `actions` (the turns
    before a payment, from the previous payment on: one basket's turns), else "interleaved"."""
    from rlvr.verifiers.shop import turn_kind

    kinds = [turn_kind(a) for a in actions]
    pays = [i for i, k in enumerate(kinds) if k == "pay"]
    if pays:  # several baskets: this basket's turns only
        kinds = kinds[pays[-1] + 1:]
    gets = [i for i, k in enumerate(kinds) if k == "get"]
    adds = [i for i, k in enumerate(kinds) if k == "add"]
    return "reads_first" if not gets or not adds or max(gets) < min(adds) else "interleaved"


@dataclasses.dataclass(frozen=True)
class PremiseResult:
    """Payment success by layout and whether the two agree within `tolerance`.

    Attributes:
      pay_right: layout → fraction of that layout's payments the functional verifier accepts
        (nan when the layout never occurs).
      payments: layout → number of payments seen with that layout.
      difference: pay_right["reads_first"] − pay_right["interleaved"] (nan if one is missing).
      tolerance: the agreement bound (0.05).
      agree: |difference| ≤ tolerance; False when a layout is missing (the premise is untested).
    """

    pay_right: dict
    payments: dict
    difference: float
    tolerance: float
    agree: bool

    def line(self) -> str:
        r, n = self.pay_right, self.payments
        return (f"payment right: reads first {r['reads_first']:.3f} (n={n['reads_first']}), "
                f"interleaved {r['interleaved']:.3f} (n={n['interleaved']}); difference "
                f"{self.difference:+.3f}; "
                + (("agree" if self.agree else "DISAGREE") + f" within {self.tolerance:g}"
                   if math.isfinite(self.difference) else "untested (a layout never occurred)"))


def premise_check(layouts: Sequence[str], oks: Sequence[bool],
                  tolerance: float = TOLERANCE) -> PremiseResult:
    """The premise check over payments: `layouts[i]` ∈ LAYOUTS is the layout before payment i,
    `oks[i]` whether it was right."""
    if len(layouts) != len(oks):
        raise ValueError(f"layouts and oks must have the same length, got {len(layouts)}, {len(oks)}")
    bad = sorted({la for la in layouts if la not in LAYOUTS})
    if bad:
        raise ValueError(f"layouts must be in {LAYOUTS}, got {bad}")
    if not (isinstance(tolerance, (int, float)) and tolerance >= 0):
        raise ValueError(f"tolerance must be a number >= 0, got {tolerance!r}")
    pay, count = {}, {}
    for lay in LAYOUTS:
        sel = [bool(ok) for la, ok in zip(layouts, oks) if la == lay]
        count[lay] = len(sel)
        pay[lay] = sum(sel) / len(sel) if sel else float("nan")
    diff = pay["reads_first"] - pay["interleaved"]
    agree = not math.isnan(diff) and abs(diff) <= tolerance + 1e-12
    return PremiseResult(pay_right=pay, payments=count, difference=diff,
                         tolerance=float(tolerance), agree=agree)


# A payment rule sees the order text and the observations so far; it returns the pay action.
PayRule = Callable[[str, Sequence[str]], str]


def demonstration_pay(prompt: str, observations: Sequence[str]) -> str:
    """The local variant's decisive action from the last observation alone (``ok S`` → ``pay S``)."""
    from rlvr.envs.shop import local_pay_from_observation

    return local_pay_from_observation(observations[-1]) or "pay 0\n"


def payments_by_layout(tasks, pay_rule: PayRule, tolerance: float = TOLERANCE) -> PremiseResult:
    """Premise check of a rule-based policy: the turns before each payment (every basket's)
    follow each task's diverse demonstration (both layouts occur), the payment is
    `pay_rule(prompt, observations)`, judged by the functional verifier at the exact state
    before it."""
    from rlvr.envs.shop import ShopEnv
    from rlvr.tasks.shop import decisive_turns, demonstrations
    from rlvr.verifiers.shop import ShopFunctionalVerifier

    fv = ShopFunctionalVerifier()
    layouts, oks = [], []
    for task in tasks:
        turns = demonstrations(task, style="diverse")
        for i in decisive_turns(turns):
            env = ShopEnv()
            env.restore(turns[i].state_before)
            obs = [t.observation for t in turns[:i]]
            action = pay_rule(task.prompt, obs)
            layouts.append(layout([t.action for t in turns[:i]]))
            oks.append(fv.accepts(env.snapshot(), action))
    return premise_check(layouts, oks, tolerance)


def policy_payments(episodes) -> tuple[list, list]:
    """(layouts, oks) of a model's judged episodes (objects with `.actions`, `.snapshots`): each
    payment made with the cart complete, judged by the functional verifier."""
    from rlvr.envs.shop import cart_complete
    from rlvr.verifiers.shop import ShopFunctionalVerifier, turn_kind

    fv = ShopFunctionalVerifier()
    layouts, oks = [], []
    for e in episodes:
        for i, a in enumerate(e.actions[:len(e.snapshots)]):
            if turn_kind(a) == "pay" and cart_complete(e.snapshots[i].state()):
                layouts.append(layout(e.actions[:i]))
                oks.append(fv.accepts(e.snapshots[i], a))
    return layouts, oks


def warm_start_premise(config, workdir: str, tolerance: float = TOLERANCE) -> PremiseResult:
    """The premise check on the policy a run config starts from (its warm start), sampled on the
    run's held-out evaluation (the evaluator's tasks, repeats and sampling keys)."""
    from experiments.study.common import sample_evaluation
    from rlvr.train.setup import build_run

    r = build_run(config, workdir)
    try:
        episodes, _ = sample_evaluation(r, r.init_params)
        return premise_check(*policy_payments(episodes), tolerance)
    finally:
        r.close()


def main(argv=None) -> int:
    import argparse
    import shutil
    import tempfile

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from experiments.study import arms, runner
    from experiments.study.shop_local import local_scale

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--difficulty", default="local", choices=("local", "standard"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cache", default=os.path.join("experiments", "results", ".study_cache"))
    a = ap.parse_args(argv)
    sc = local_scale("quick" if a.quick else "full", difficulty=a.difficulty)
    warm = runner.warm_folder(arms.base_config("grpo", a.seed, sc), a.seed, a.cache)
    c = arms.with_warm(arms.base_config("pivotrl", a.seed, sc), warm)
    wd = tempfile.mkdtemp(prefix="premise_")
    try:
        res = warm_start_premise(c, wd)
    finally:
        shutil.rmtree(wd, ignore_errors=True)
    print(f"{a.difficulty}: {res.line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
