"""Resume: N steps straight == N/2 steps, stop, relaunch, N/2 more (params and metrics)."""

import jax
import numpy as np

from rlvr.train.metrics import read_metrics
from tests.train.tiny import run_tiny, tiny_config


def _run(workdir, steps, **over):
    r, _ = run_tiny(tiny_config(train__num_steps=steps, **over), workdir)
    return r.state


def test_resume_is_bit_for_bit(tmp_path):
    straight = _run(tmp_path / "a", 4)
    _run(tmp_path / "b", 2)            # "killed" after step 2 (checkpoint at 2)
    resumed = _run(tmp_path / "b", 4)  # relaunch of the same run, now to 4
    assert int(resumed.step) == 4
    for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    ra = {r["step"]: r for r in read_metrics(tmp_path / "a")}
    rb = {r["step"]: r for r in read_metrics(tmp_path / "b")}
    assert sorted(ra) == sorted(rb)
    for step in (3, 4):
        for k in ("reward/mean", "policy/loss", "eval/success"):
            if k in ra[step]:
                np.testing.assert_allclose(ra[step][k], rb[step][k], rtol=1e-5, atol=1e-6)
