"""The study runner's resume rules for PivotRL with re-profiled rollout candidates under an
`rlvr/` whose checkpoints do not keep rollout candidates (experiments/study/runner.py:
`rebuilds_rollout_pivots`, `must_start_over`, `resume_at_reprofile`)."""

import jax
import numpy as np
import pytest

from tests.train.tiny import tiny_agent_config

COUNTERS = ("policy/loss", "reward/mean", "cost/sampled_tokens", "cost/turns", "cost/prompt_tokens",
            "pivot/num_kept")


def _config():
    # re-profiles at steps 2 and 4; a checkpoint after every step
    return tiny_agent_config("pivotrl", train__num_steps=5, eval__every=0, eval__num_tasks=0,
                             pivot__candidates="demo+rollout", pivot__reprofile_every=2)


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


def _killed_at(monkeypatch, step):
    """Makes the next run die (no clean-up, like a hard kill) when it starts `step`."""
    from rlvr.train import pivots

    collect = pivots.PivotCollector.collect

    def dying(self, params, s, *a, **k):
        if s == step:
            monkeypatch.setattr(pivots.PivotCollector, "collect", collect)
            raise KeyboardInterrupt(f"killed at step {s}")
        return collect(self, params, s, *a, **k)

    monkeypatch.setattr(pivots.PivotCollector, "collect", dying)


def test_runner_resumes_a_run_that_rebuilds_rollout_pivots_only_at_a_re_profile(
        tmp_path, monkeypatch, collector_without_rollout_checkpoints):
    """Killed with its last checkpoint at a re-profile step (2), the run resumes there without
    re-probing the start and ends with every counter and loss equal to the uninterrupted run's;
    killed with its last checkpoint at step 3, resuming would train step 3 on the start's kept
    set, so the runner starts it over (one restart) and it too ends equal."""
    from experiments.study import runner
    from rlvr.train.workdir import checkpoint_steps

    config = _config()
    assert runner.rebuilds_rollout_pivots(config)
    quiet = lambda *a: None  # noqa: E731
    whole = runner.run_config(config, workdir_root=str(tmp_path / "a"), cache=str(tmp_path / "ca"),
                              log=quiet)
    logs = {}
    for name, kill in (("b", 2), ("c", 3)):
        root, cache = str(tmp_path / name), str(tmp_path / f"c{name}")
        _killed_at(monkeypatch, kill)
        with pytest.raises(KeyboardInterrupt):
            runner.run_config(config, workdir_root=root, cache=cache, log=quiet)
        key = runner.run_key(runner.with_batch_bucket(config, 32), 32, cache)
        assert max(checkpoint_steps(f"{root}/{key}")) == kill
        logs[name] = []
        rec = runner.run_config(config, workdir_root=root, cache=cache, log=logs[name].append)
        assert [r["step"] for r in rec["rows"]] == [r["step"] for r in whole["rows"]]
        for ra, rb in zip(whole["rows"], rec["rows"]):
            for k in COUNTERS:
                if k in ra:
                    np.testing.assert_allclose(rb[k], ra[k], rtol=1e-5, err_msg=(name, ra["step"], k))
        assert rec["result"]["cost"] == whole["result"]["cost"], name
        assert rec.get("restarts", 0) == (name == "c"), name
    assert not any("starting it over" in line for line in logs["b"])
    assert any("checkpoint at step 3 is not at a re-profile (every 2 steps)" in line
               for line in logs["c"])


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


def test_an_rlvr_that_checkpoints_rollout_pivots_resumes_anywhere():
    """Where checkpoints keep rollout candidates (this `rlvr/`), nothing is rebuilt on resume."""
    from experiments.study import runner
    from rlvr.train import pivots

    assert hasattr(pivots, "candidate_to_dict")
    assert not runner.rebuilds_rollout_pivots(_config())
