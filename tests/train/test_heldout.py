"""The held-out set is drawn from the training distribution, restricted to the eval split."""

import collections

from rlvr.tasks import splits
from rlvr.tasks.registry import MixtureSource, get_task_source, heldout_tasks

MIXED = {"num_operands": (2, 3), "num_digits": 1, "operators": "+-"}  # 200 vs 4000 instances


def _operands(tasks):
    c = collections.Counter(t.prompt.count("+") + t.prompt.count("-") + 1 for t in tasks)
    return c[2] / len(tasks)


def test_heldout_matches_training_mix_and_is_eval_split():
    src = get_task_source("arithmetic", difficulty=MIXED)
    held = heldout_tasks(src, 400, seed=7)
    assert all(splits.split_of(t.prompt) == "eval" for t in held)
    train = [t for s in range(40) for t in src.sample(10, seed=s)]  # training draws, 10 per step
    # the generator picks 2 or 3 operands with probability 1/2 each
    assert abs(_operands(held) - 0.5) < 0.08 and abs(_operands(train) - 0.5) < 0.08
    # forcing distinct instances (eval_set) over-represents the large 3-operand sub-space
    assert _operands(src.eval_set("eval", 100, 7)) < 0.3
    assert heldout_tasks(src, 50, seed=7) == held[:50]  # fixed per seed


def test_heldout_mixture_splits_by_weight():
    a = get_task_source("arithmetic", difficulty="easy")
    b = get_task_source("countdown")
    held = heldout_tasks(MixtureSource([(a, 3.0), (b, 1.0)]), 200, seed=0)
    frac = sum(t.public_metadata["source"] == "arithmetic" for t in held) / len(held)
    assert len(held) == 200 and abs(frac - 0.75) < 0.1
