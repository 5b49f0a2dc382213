"""Checkpoint + resume of the multi-turn algorithms in the one loop: an interrupted PivotRL or
agent-GRPO run resumed from its checkpoint continues exactly where the uninterrupted run would
be; docs/algorithms.md §6 hint mixing counts."""

import dataclasses

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


@pytest.mark.parametrize("candidates", ["demo", "demo+rollout"])
def test_a_pivotrl_run_stopped_before_its_first_step_charges_the_probe_once(tmp_path, monkeypatch,
                                                                           candidates):
    """The probe's cost is charged at the first step; a run stopped at step 0 (its checkpoint
    saved after the probe) and resumed charges it once, like the uninterrupted run, so its
    counters and token budget are the same."""
    from rlvr.train import pivots

    probe = pivots.probe_pivots  # a random tiny policy fails every probe: keep every state
    monkeypatch.setattr(pivots, "probe_pivots", lambda *a, **k: dataclasses.replace(
        probe(*a, **k), keep=np.ones(len(a[0]), bool)))
    cache = str(tmp_path / "warm")
    over = dict(train__num_steps=2, eval__every=0, eval__num_tasks=0, pivot__selection="variance",
                pivot__candidates=candidates)
    run_tiny(tiny_agent_config("pivotrl", **over), tmp_path / "a", warm_cache=cache)
    run_tiny(tiny_agent_config("pivotrl", **{**over, "train__num_steps": 0}), tmp_path / "b",
             warm_cache=cache)
    _, b = run_tiny(tiny_agent_config("pivotrl", **over), tmp_path / "b", warm_cache=cache)
    rows_a, rows_b = read_metrics(tmp_path / "a"), read_metrics(tmp_path / "b")
    assert [r["step"] for r in rows_b] == [0, 1, 2]
    assert rows_a[0]["cost/turns"] > 0  # the probe sampled
    for ra, rb in zip(rows_a, rows_b):
        for k in ("cost/sampled_tokens", "cost/turns", "cost/prompt_tokens", "cost/prefill_tokens"):
            assert rb[k] == ra[k], (ra["step"], k)
    assert rows_a[1]["cost/turns"] > rows_a[0]["cost/turns"]  # the first step adds to the probe


def _rollout_cfg(n):
    return tiny_agent_config("pivotrl", train__num_steps=n, eval__every=0, eval__num_tasks=0,
                             pivot__candidates="demo+rollout", pivot__reprofile_every=2)


def test_a_rollout_candidates_run_resumed_after_a_re_profile_continues_exactly(tmp_path):
    """Rollout candidates come from sampling with the re-profiling step's parameters; the
    checkpoint keeps the kept states' histories and snapshots, so a run stopped after a
    re-profile resumes on the same kept set and continues exactly, without sampling again."""
    cache = str(tmp_path / "warm")
    run_tiny(_rollout_cfg(4), tmp_path / "a", warm_cache=cache)  # re-profiles at steps 2 and 4
    run_tiny(_rollout_cfg(3), tmp_path / "b", warm_cache=cache)  # stopped after the re-profile
    _, b = run_tiny(_rollout_cfg(4), tmp_path / "b", warm_cache=cache)
    rows_a, rows_b = read_metrics(tmp_path / "a"), read_metrics(tmp_path / "b")
    assert [r["step"] for r in rows_b] == [0, 1, 2, 3, 4]
    for step in (3, 4):
        for k in ("policy/loss", "reward/mean", "cost/sampled_tokens", "cost/turns", "pivot/num_kept"):
            np.testing.assert_allclose(rows_b[step][k], rows_a[step][k], rtol=1e-5, err_msg=(step, k))


def test_a_rollout_candidates_checkpoint_without_its_states_resumes_only_where_they_rebuild(
        tmp_path, monkeypatch):
    """A checkpoint written before the collector kept its rollout states: a resume after a
    re-profile is refused at its first step unless that step re-profiles again; before the
    first re-profile it continues exactly (the start's states are sampled again)."""
    from rlvr.train import pivots

    state_dict = pivots.PivotCollector.state_dict
    monkeypatch.setattr(pivots.PivotCollector, "state_dict", lambda self: {
        k: v for k, v in state_dict(self).items() if k != "kept_rollout"})
    cache = str(tmp_path / "warm")
    run_tiny(_rollout_cfg(3), tmp_path / "a", warm_cache=cache)  # re-profiled at step 2
    with pytest.raises(RuntimeError, match="cannot resume at step 3: its kept set was re-profiled at step 2"):
        run_tiny(_rollout_cfg(4), tmp_path / "a", warm_cache=cache)
    run_tiny(_rollout_cfg(2), tmp_path / "b", warm_cache=cache)  # steps 0, 1: the start's kept set
    run_tiny(_rollout_cfg(3), tmp_path / "b", warm_cache=cache)  # step 2 re-profiles
    rows_a, rows_b = read_metrics(tmp_path / "a"), read_metrics(tmp_path / "b")
    assert [r["step"] for r in rows_b] == [0, 1, 2, 3]
    for k in ("policy/loss", "cost/sampled_tokens", "pivot/num_kept"):
        np.testing.assert_allclose(rows_b[-1][k], rows_a[3][k], rtol=1e-5, err_msg=k)


def test_a_resume_whose_pool_no_longer_yields_a_kept_demo_state_is_refused(tmp_path, monkeypatch):
    """A checkpoint's kept demonstration state that the pool no longer yields (the task pool or
    the kit changed) is refused by name, not silently re-selected with the start's policy."""
    from rlvr.train import pivots

    cache = str(tmp_path / "warm")
    cfg = lambda n: tiny_agent_config("pivotrl", train__num_steps=n, eval__every=0,  # noqa: E731
                                      eval__num_tasks=0)
    run_tiny(cfg(1), tmp_path / "a", warm_cache=cache)
    monkeypatch.setattr(pivots, "demo_candidates", lambda *a, **k: [])
    with pytest.raises(ValueError, match="is not among the pool's demonstration states"):
        run_tiny(cfg(2), tmp_path / "a", warm_cache=cache)


def test_a_rollout_candidate_round_trips_through_json():
    """`candidate_to_dict` / `candidate_from_dict` keep every field, and a snapshot whose hash
    does not match its payload is refused where it enters."""
    import json

    from rlvr.envs.base import EnvSnapshot, SnapshotError
    from rlvr.train.pivots import PivotCandidate, candidate_from_dict, candidate_to_dict

    @dataclasses.dataclass(frozen=True)
    class Task:
        task_id: str

    task = Task("t0")
    snap = EnvSnapshot.of("kv_store", "1", 3, {"a": 1})
    c = PivotCandidate(task=task, turn_index=2, prefix_tokens=(1, 5, 9), snapshot=snap,
                       state_hash=snap.state_hash, source="rollout", reference_action="get a")
    d = json.loads(json.dumps(candidate_to_dict(c)))
    assert candidate_from_dict(d, {"t0": task}) == c
    with pytest.raises(ValueError, match="'t0'"):
        candidate_from_dict(d, {})
    d["snapshot"]["state_json"] = '{"a":2}'
    with pytest.raises(SnapshotError):
        candidate_from_dict(d, {"t0": task})


def test_hinted_rows_mixes_exact_count():
    rng = np.random.default_rng(0)
    for n, f in [(8, 0.5), (5, 0.4), (4, 0.0), (3, 1.0)]:
        h = hinted_rows(n, f, rng)
        assert h.dtype == bool and h.sum() == round(n * f)
