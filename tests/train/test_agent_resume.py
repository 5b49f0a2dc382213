"""Checkpoint + resume of the agent loops (issue 6): an interrupted PivotRL run resumed from its
checkpoint continues exactly where the uninterrupted run would be; R4.3 hint mixing counts."""

import json

import numpy as np

from configs import pivotrl
from rlvr.train import pivotrl_loop


def _tiny(num_steps):
    c = pivotrl.get_config()
    c.train.num_steps = num_steps
    c.train.sft_steps = 2
    c.train.progress = False
    c.eval.num_tasks = 2
    c.eval.samples_per_task = 1
    c.eval.every = 0
    c.checkpoint.every = 1
    c.pivot.num_tasks = 3
    c.pivot.sft_tasks = 8
    c.pivot.selection = "all"
    c.pivot.states_per_step = 2
    c.pivot.hint = "get"
    c.pivot.hint_fraction = 0.5
    return c


def _rows(wd):
    return [json.loads(x) for x in open(wd / "metrics.jsonl")]


def test_pivotrl_resume_continues_exactly(tmp_path):
    cache = str(tmp_path / "warm")
    a = pivotrl_loop.run(_tiny(3), str(tmp_path / "a"), progress=False, warm_cache=cache)
    b1 = pivotrl_loop.run(_tiny(2), str(tmp_path / "b"), progress=False, warm_cache=cache)
    assert b1["step"] == 2
    b2 = pivotrl_loop.run(_tiny(3), str(tmp_path / "b"), progress=False, warm_cache=cache)
    assert b2["step"] == 3
    assert [r["step"] for r in _rows(tmp_path / "b")] == [0, 1, 2, 3]  # one history per step
    for k in ("loss", "reward/mean", "rollout_tokens", "rollout_turns", "grad_norm"):
        np.testing.assert_allclose(b2["last"][k], a["last"][k], rtol=1e-5, err_msg=k)
    assert b2["budget"] == a["budget"]
    assert all(r["pivot/hinted_fraction"] == 0.5 for r in _rows(tmp_path / "a") if r["step"] > 0)


def test_hinted_rows_mixes_exact_count():
    rng = np.random.default_rng(0)
    for n, f in [(8, 0.5), (5, 0.4), (4, 0.0), (3, 1.0)]:
        h = pivotrl_loop.hinted_rows(n, f, rng)
        assert h.dtype == bool and h.sum() == round(n * f)
