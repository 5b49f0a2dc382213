"""Checkpoint + resume of the multi-turn algorithms in the one loop: an interrupted PivotRL or
agent-GRPO run resumed from its checkpoint continues exactly where the uninterrupted run would
be; docs/algorithms.md §6 hint mixing counts."""

import jax
import numpy as np
import pytest

from rlvr.train.metrics import read_metrics
from rlvr.train.pivots import hinted_rows
from tests.train.tiny import run_tiny, tiny_agent_config


def _tiny(name, num_steps):
    over = dict(train__num_steps=num_steps, eval__every=0, eval__num_tasks=0)
    if name == "pivotrl":
        over.update(pivot__hint="get", pivot__hint_fraction=0.5)
    return tiny_agent_config(name, **over)


@pytest.mark.parametrize("name", ["pivotrl", pytest.param("agent_grpo", marks=pytest.mark.slow)])
def test_resume_continues_exactly(tmp_path, name):
    cache = str(tmp_path / "warm")
    ra, a = run_tiny(_tiny(name, 3), tmp_path / "a", warm_cache=cache)
    _, b1 = run_tiny(_tiny(name, 2), tmp_path / "b", warm_cache=cache)
    assert b1["step"] == 2
    rb, b2 = run_tiny(_tiny(name, 3), tmp_path / "b", warm_cache=cache)
    assert b2["step"] == 3
    rows_a, rows_b = read_metrics(tmp_path / "a"), read_metrics(tmp_path / "b")
    assert [r["step"] for r in rows_b] == [0, 1, 2, 3]  # one row per step
    for k in ("policy/loss", "reward/mean", "cost/sampled_tokens", "cost/turns", "policy/grad_norm"):
        np.testing.assert_allclose(rows_b[-1][k], rows_a[-1][k], rtol=1e-5, err_msg=k)
    assert b2["cost"] == a["cost"]
    for x, y in zip(jax.tree.leaves(ra.state.params), jax.tree.leaves(rb.state.params)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)
    if name == "pivotrl":
        assert all(r["pivot/hinted_fraction"] == 0.5 for r in rows_a if r["step"] > 0)


def test_hinted_rows_mixes_exact_count():
    rng = np.random.default_rng(0)
    for n, f in [(8, 0.5), (5, 0.4), (4, 0.0), (3, 1.0)]:
        h = hinted_rows(n, f, rng)
        assert h.dtype == bool and h.sum() == round(n * f)
