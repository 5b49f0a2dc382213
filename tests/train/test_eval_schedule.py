"""The early-dense evaluation schedule (eval.dense_steps / eval.dense_every): evaluations every
dense_every steps during the first dense_steps, then every eval.every; both set or neither."""

import pytest

from configs import base
from rlvr.train.config import ConfigError, validate_config
from rlvr.train.loop import eval_due
from rlvr.train.metrics import read_metrics
from tests.train.tiny import run_tiny, tiny_config


def test_eval_due_dense_first_then_every():
    due = [d for d in range(1, 31) if eval_due(d, every=10, dense_steps=6, dense_every=2)]
    assert due == [2, 4, 6, 10, 20, 30]
    assert [d for d in range(1, 31) if eval_due(d, every=10)] == [10, 20, 30]
    assert [d for d in range(1, 8) if eval_due(d, every=0, dense_steps=3, dense_every=1, last=d == 7)] == [1, 2, 3, 7]


@pytest.mark.parametrize("steps,every,pattern", [
    (5, 0, r"eval.dense_steps=5 and eval.dense_every=0: set both"),
    (0, 2, r"eval.dense_steps=0 and eval.dense_every=2: set both"),
    (-1, 1, r"eval.dense_steps must be >= 0"),
])
def test_half_a_schedule_is_refused_naming_the_fields(steps, every, pattern):
    c = base.get_config()
    c.eval.dense_steps, c.eval.dense_every = steps, every
    with pytest.raises(ConfigError, match=pattern):
        validate_config(c)


def test_loop_evaluates_densely_early(tmp_path):
    # dense through step 2 (not 3), then every 4 (step 4), and after the last step (5)
    c = tiny_config(train__num_steps=5, eval__every=4, eval__dense_steps=2, eval__dense_every=1,
                    checkpoint__every=0)
    run_tiny(c, tmp_path)
    assert [r["step"] for r in read_metrics(str(tmp_path)) if "eval/success" in r] == [0, 1, 2, 4, 5]
