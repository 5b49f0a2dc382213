"""The study runner's resume rules for PivotRL with re-profiled rollout candidates under an
`rlvr/` whose checkpoints do not keep rollout candidates (experiments/study/runner.py:
`rebuilds_rollout_pivots`, `keeping_last_reprofile`, `drop_past_reprofile`, `must_start_over`,
`resume_at_reprofile`)."""

import jax
import numpy as np
import pytest

from tests.train.tiny import tiny_agent_config

COUNTERS = ("policy/loss", "reward/mean", "cost/sampled_tokens", "cost/turns", "cost/prompt_tokens",
            "pivot/num_kept")


def _config():
    # re-profiles at steps 2 and 4; a checkpoint after every step, one kept (as the study's runs)
    return tiny_agent_config("pivotrl", train__num_steps=5, eval__every=0, eval__num_tasks=0,
                             pivot__candidates="demo+rollout", pivot__reprofile_every=2,
                             checkpoint__max_to_keep=1)


@pytest.fixture
def collector_without_rollout_checkpoints(monkeypatch):
    """PivotRL's collector as in the `rlvr/` versions before checkpoints kept rollout
    candidates: no `candidate_to_dict`, and a resume's preparation probes the start again."""
    from rlvr.train.collectors import stream_seed
    from rlvr.train import pivots

    def prepare(self, ref_params, restored=None):
        self._select(ref_params, jax.random.PRNGKey(stream_seed(self.seed, "pivot-probe")), "start")

    monkeypatch.setattr(pivots.PivotCollector, "prepare", prepare)
    monkeypatch.setattr(pivots.PivotCollector, "state_dict",
                        lambda self: {"kept": [c.key for c in self.kept], "stats": self.pivot_stats})
    monkeypatch.delattr(pivots, "candidate_to_dict", raising=False)


def _stopped_at(monkeypatch, step, how):
    """Makes the next run stop when it starts `step`: how="kill" dies there (KeyboardInterrupt,
    no clean-up, like a hard kill); how="sigterm" sends this process a real SIGTERM, so the
    loop finishes the step, saves its checkpoint and exits (SystemExit, status 143)."""
    import os
    import signal

    from rlvr.train import pivots

    collect = pivots.PivotCollector.collect

    def stopping(self, params, s, *a, **k):
        if s == step:
            monkeypatch.setattr(pivots.PivotCollector, "collect", collect)
            if how == "kill":
                raise KeyboardInterrupt(f"killed at step {s}")
            os.kill(os.getpid(), signal.SIGTERM)
        return collect(self, params, s, *a, **k)

    monkeypatch.setattr(pivots.PivotCollector, "collect", stopping)


def test_runner_resumes_a_run_that_rebuilds_rollout_pivots_only_at_a_re_profile(
        tmp_path, monkeypatch, collector_without_rollout_checkpoints):
    """Killed with its last checkpoint at a re-profile step (2), the run resumes there without
    re-probing the start and ends with every counter and loss equal to the uninterrupted run's.
    Killed with its last checkpoint at step 3 (as a SIGTERM leaves it), resuming there would
    train step 3 on the start's kept set: the runner's launch keeps two checkpoints, so it drops
    step 3's and resumes from step 2's, and the run ends equal with no restart. With no
    re-profile step's checkpoint beside step 3's, it starts over (one restart) and ends equal.
    A real SIGTERM during step 2 finishes the step and saves step 3's checkpoint beside step 2's:
    the next launch too drops step 3's and resumes at step 2, equal with no restart."""
    import json
    import shutil
    import signal

    from experiments.study import runner
    from rlvr.train.workdir import checkpoint_steps

    config = _config()
    assert runner.rebuilds_rollout_pivots(config) and config.checkpoint.max_to_keep == 1
    quiet = lambda *a: None  # noqa: E731
    whole = runner.run_config(config, workdir_root=str(tmp_path / "a"), cache=str(tmp_path / "ca"),
                              log=quiet)
    logs = {}
    for name, how, stop, saved, kept in (("b", "kill", 2, [1, 2], [1, 2]),
                                         ("c", "kill", 3, [2, 3], [2, 3]),
                                         ("d", "kill", 3, [2, 3], [3]),
                                         ("e", "sigterm", 2, [2, 3], [2, 3])):
        root, cache = str(tmp_path / name), str(tmp_path / f"c{name}")
        _stopped_at(monkeypatch, stop, how)
        with pytest.raises(KeyboardInterrupt if how == "kill" else SystemExit) as stopped:
            runner.run_config(config, workdir_root=root, cache=cache, log=quiet)
        if how == "sigterm":
            assert stopped.value.code == 128 + signal.SIGTERM
        key = runner.run_key(runner.with_batch_bucket(config, 32), 32, cache)
        with open(f"{root}/{key}/config.json") as f:
            assert json.load(f)["checkpoint"]["max_to_keep"] == 2
        assert checkpoint_steps(f"{root}/{key}") == saved, name
        for step in set(checkpoint_steps(f"{root}/{key}")) - set(kept):
            shutil.rmtree(f"{root}/{key}/checkpoints/{step}")
        logs[name] = []
        rec = runner.run_config(config, workdir_root=root, cache=cache, log=logs[name].append)
        assert [r["step"] for r in rec["rows"]] == [r["step"] for r in whole["rows"]]
        for ra, rb in zip(whole["rows"], rec["rows"]):
            for k in COUNTERS:
                if k in ra:
                    np.testing.assert_allclose(rb[k], ra[k], rtol=1e-5, err_msg=(name, ra["step"], k))
        assert rec["result"]["cost"] == whole["result"]["cost"], name
        assert rec.get("restarts", 0) == (name == "d"), name
        assert rec["config"]["checkpoint.max_to_keep"] == 1, name  # the record keeps the config
    assert not any("starting it over" in line or "not at a re-profile" in line
                   for line in logs["b"])
    for name in ("c", "e"):
        assert any("checkpoint at step 3 is not at a re-profile; resuming from the one at step 2"
                   in line for line in logs[name]), name
        assert not any("starting it over" in line for line in logs[name]), name
    assert any("checkpoint at step 3 is not at a re-profile (every 2 steps)" in line
               for line in logs["d"])


def test_must_start_over_reads_the_latest_checkpoint_against_the_re_profile_period(
        tmp_path, monkeypatch, collector_without_rollout_checkpoints):
    """Only a run that rebuilds its rollout pivots on resume is started over, and only from a
    checkpoint after step 0 that is not a multiple of `pivot.reprofile_every`."""
    from experiments.study import runner

    config = _config()
    wd = tmp_path / "w"
    assert runner.must_start_over(config, str(wd)) is None  # nothing to resume
    for steps, over in (((0,), False), ((0, 2), False), ((4,), False), ((2, 3), True), ((5,), True)):
        wd = tmp_path / "-".join(map(str, steps))
        for step in steps:
            (wd / "checkpoints" / str(step)).mkdir(parents=True)
        assert bool(runner.must_start_over(config, str(wd))) is over, steps
    demo = tiny_agent_config("pivotrl", pivot__reprofile_every=2)  # demo states restore by key
    never = tiny_agent_config("pivotrl", pivot__candidates="demo+rollout")  # no re-profile
    assert not runner.rebuilds_rollout_pivots(demo) and not runner.rebuilds_rollout_pivots(never)
    assert runner.must_start_over(demo, str(wd)) is None
    assert runner.must_start_over(never, str(wd)) is None


def test_drop_past_reprofile_keeps_the_checkpoints_up_to_the_last_re_profile_step(
        tmp_path, collector_without_rollout_checkpoints):
    """Checkpoints after the last re-profile step's are deleted only when one at a re-profile
    step is there; otherwise nothing is touched. Launch configs keep two checkpoints."""
    from experiments.study import runner
    from rlvr.train.workdir import checkpoint_steps

    config = _config()
    for steps, dropped in (((2, 3), [3]), ((0, 3), [3]), ((2, 4, 5), [5]), ((3,), []), ((4,), []),
                           ((2, 4), []), ((), [])):
        wd = tmp_path / ("w" + "-".join(map(str, steps)))
        for step in steps:
            (wd / "checkpoints" / str(step)).mkdir(parents=True)
        assert runner.drop_past_reprofile(config, str(wd)) == dropped, steps
        assert checkpoint_steps(str(wd)) == [s for s in steps if s not in dropped], steps
        assert (runner.must_start_over(config, str(wd)) is None) is (steps != (3,)), steps
    assert runner.keeping_last_reprofile(config).checkpoint.max_to_keep == 2
    assert config.checkpoint.max_to_keep == 1
    demo = tiny_agent_config("pivotrl", pivot__reprofile_every=2)
    wd = tmp_path / "demo"
    for step in (2, 3):
        (wd / "checkpoints" / str(step)).mkdir(parents=True)
    assert runner.drop_past_reprofile(demo, str(wd)) == [] and checkpoint_steps(str(wd)) == [2, 3]
    assert runner.keeping_last_reprofile(demo) is demo


def test_an_rlvr_that_checkpoints_rollout_pivots_resumes_anywhere():
    """Where checkpoints keep rollout candidates (this `rlvr/`), nothing is rebuilt on resume."""
    from experiments.study import runner
    from rlvr.train import pivots

    assert hasattr(pivots, "candidate_to_dict")
    assert not runner.rebuilds_rollout_pivots(_config())
