"""Resume: N steps straight == N/2 steps, stop, relaunch, N/2 more (params and metrics)."""

import jax
import numpy as np
import pytest

from rlvr.train import loop
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
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    ra = {r["step"]: r for r in read_metrics(tmp_path / "a")}
    rb = {r["step"]: r for r in read_metrics(tmp_path / "b")}
    assert sorted(ra) == sorted(rb)
    assert "eval/success" in ra[4]  # eval.every = 2
    for step in (3, 4):  # every logged value after the resume, bit for bit (timings aside)
        keys = {k for k in ra[step] if not k.startswith(("time", "throughput/"))}
        assert keys == {k for k in rb[step] if not k.startswith(("time", "throughput/"))}
        assert {"reward/mean", "policy/pg_loss", "policy/grad_norm"} <= keys
        for k in sorted(keys):
            assert ra[step][k] == rb[step][k], (step, k, ra[step][k], rb[step][k])


class _Killed(Exception):
    pass


def _kill_at_3_then_resume(tmp_path, monkeypatch, steps, **over):
    """Runs `steps` straight in a/, and in b/ a run killed after step 3's metrics row was
    written but before its checkpoint committed, then relaunched to `steps`."""
    straight = tmp_path / "a"
    _run(straight, steps, **over)
    save = loop.Checkpointer.save

    def dies_at_3(self, step, *a, **k):
        if step == 3:
            raise _Killed
        return save(self, step, *a, **k)

    monkeypatch.setattr(loop.Checkpointer, "save", dies_at_3)
    with pytest.raises(_Killed):
        _run(tmp_path / "b", 3, **over)
    assert 3 in {r["step"] for r in read_metrics(tmp_path / "b")}  # row written, no checkpoint
    monkeypatch.setattr(loop.Checkpointer, "save", save)
    _run(tmp_path / "b", steps, **over)
    return read_metrics(straight), read_metrics(tmp_path / "b")


def test_metrics_after_a_kill_between_checkpoints_fast(tmp_path, monkeypatch):
    """The default-suite variant of the check below (no warm start, no evaluation, 4 steps):
    the relaunch truncates metrics.jsonl back to the resumed checkpoint (step 2), so step 3 is
    logged once, with the uninterrupted run's values."""
    ra, rb = _kill_at_3_then_resume(tmp_path, monkeypatch, 4, train__sft_steps=0,
                                    eval__num_tasks=0, checkpoint__export=False)
    assert [r["step"] for r in ra] == [0, 1, 2, 3, 4]
    assert [r["step"] for r in rb] == [r["step"] for r in ra]
    for a, b in zip(ra[1:], rb[1:]):
        for k in ("reward/mean", "policy/pg_loss", "policy/entropy", "policy/grad_norm"):
            assert a[k] == b[k], (a["step"], k)


@pytest.mark.slow  # three short runs, ~40 s on 2 shared cores
def test_metrics_after_a_kill_between_checkpoints(tmp_path, monkeypatch):
    """Killed after step 3's metrics row was written but before its checkpoint committed
    (checkpoints every 2): the relaunch resumes from 2, and metrics.jsonl ends up exactly as an
    uninterrupted run's — one row per step, equal values."""
    straight = tmp_path / "a"
    _run(straight, 5)
    save = loop.Checkpointer.save

    def dies_at_3(self, step, *a, **k):
        if step == 3:
            raise _Killed
        return save(self, step, *a, **k)

    monkeypatch.setattr(loop.Checkpointer, "save", dies_at_3)
    with pytest.raises(_Killed):
        _run(tmp_path / "b", 3)
    assert 3 in {r["step"] for r in read_metrics(tmp_path / "b")}  # row written, no checkpoint
    monkeypatch.setattr(loop.Checkpointer, "save", save)
    _run(tmp_path / "b", 5)
    ra, rb = read_metrics(straight), read_metrics(tmp_path / "b")
    assert [r["step"] for r in rb] == [r["step"] for r in ra]
    assert [r["step"] for r in rb if r["step"] > 0] == [1, 2, 3, 4, 5]
    for a, b in zip(ra, rb):
        keys = {k for k in a if not k.startswith(("time", "throughput/"))}
        assert keys == {k for k in b if not k.startswith(("time", "throughput/"))}
        for k in keys:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6,
                                       err_msg=f"{k} at step {a['step']}")
