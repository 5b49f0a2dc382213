"""Asynchronous collection around every collector: the wrapper passes the loop's calls through
(PivotRL's probe runs before the rollout thread starts), async rows keep their off-policy
correction, and a multi-process asynchronous run is refused at start."""

import json

import jax
import pytest

from rlvr.train.collectors import AsyncCollector, Collector, GroupCollector
from rlvr.train.config import ConfigError, validate_config
from rlvr.train.pivots import PivotCollector
from rlvr.train.setup import algorithm_settings, build_run
from tests.train.tiny import run_tiny, tiny_agent_config, tiny_config


def test_every_collector_answers_the_loops_calls():
    for cls in (GroupCollector, PivotCollector, AsyncCollector):
        assert issubclass(cls, Collector)
        for name in ("prepare", "pending_cost", "collect", "publish", "observe", "state_dict",
                     "load_state_dict", "close"):
            assert callable(getattr(cls, name)), (cls, name)


def test_asynchronous_pivotrl_probes_its_pivots_and_trains(tmp_path):
    c = tiny_agent_config("pivotrl", rollout__asynchronous=True, rollout__producer_batch=2,
                          rollout__queue_size=4, rollout__max_staleness=2, train__num_steps=2,
                          eval__every=2, checkpoint__every=2)
    r, result = run_tiny(c, tmp_path)
    assert isinstance(r.collector, AsyncCollector) and isinstance(r.collector.inner, PivotCollector)
    assert r.collector.inner.kept, "the probe ran and kept pivots"
    rows = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
    assert rows[0]["pivot/candidates"] > 0
    assert result["step"] == 2
    assert r.collector.state_dict()["kept"], "the kept set reaches the checkpoint"


def test_asynchronous_grpo_marks_rows_off_policy():
    c = tiny_config(rollout__asynchronous=True)
    assert algorithm_settings(c).off_policy_rows
    assert not algorithm_settings(tiny_config()).off_policy_rows


def test_asynchronous_multiprocess_is_refused_at_start(tmp_path, monkeypatch):
    c = tiny_config(rollout__asynchronous=True, mesh__distributed=True)
    with pytest.raises(ConfigError, match=r"rollout.asynchronous.*mesh.distributed"):
        validate_config(c)
    c = tiny_config(rollout__asynchronous=True)
    validate_config(c)
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    with pytest.raises(ConfigError, match=r"rollout.asynchronous=True cannot run on 2 processes"):
        build_run(c, str(tmp_path))


def test_asynchronous_pivotrl_refuses_reprofiling():
    c = tiny_agent_config("pivotrl", rollout__asynchronous=True, pivot__reprofile_every=2)
    with pytest.raises(ConfigError, match=r"pivot.reprofile_every=2 does not apply"):
        validate_config(c)


def test_sao_with_per_episode_arrival_trains_on_single_episodes(tmp_path, monkeypatch):
    """rollout.arrival='episode': the rollout thread keeps episode_slots episodes in flight and
    queues each as it ends (one group of one episode), the learner trains on them."""
    import rlvr.rollout.continuous as continuous

    arrived, real = [], continuous.run_continuous

    def spy(**kw):
        on_arrival = kw["on_arrival"]
        kw["on_arrival"] = lambda a: (arrived.append(a), on_arrival(a))
        assert kw["slots"] == 3
        return real(**kw)

    monkeypatch.setattr(continuous, "run_continuous", spy)
    c = tiny_agent_config("sao", rollout__arrival="episode", rollout__episode_slots=3,
                          train__num_steps=2, eval__every=2, checkpoint__every=2)
    r, result = run_tiny(c, tmp_path)
    assert isinstance(r.collector, AsyncCollector) and r.collector.arrival == "episode"
    assert r.collector._thread.name == "rlvr-rollout"
    assert result["step"] == 2
    rows = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
    train = [x for x in rows if "advantage/mean" in x]  # the learner steps
    assert train and all(x["cost/turns"] > 0 for x in train)
    assert not r.collector._thread.is_alive(), "close() ends the rollout thread"
    assert len(arrived) >= 2 * 4  # two learner steps of prompts_per_step=4 single episodes


@pytest.mark.parametrize("over,match", [
    (dict(algorithm__group_size=2, algorithm__advantage="grpo"), r"arrival='episode'.*group_size=1"),
    (dict(rollout__kv_reuse=True), r"arrival='episode'.*kv_reuse"),
    (dict(rollout__arrival="stream"), r"rollout.arrival must be one of"),
])
def test_per_episode_arrival_combinations_that_cannot_work_are_refused_at_start(over, match):
    c = tiny_agent_config("sao", **{"rollout__arrival": "episode", **over})
    with pytest.raises(ConfigError, match=match):
        validate_config(c)


def test_per_episode_arrival_is_refused_for_a_single_turn_kit():
    c = tiny_config(rollout__asynchronous=True, rollout__arrival="episode")
    with pytest.raises(ConfigError, match=r"rollout.arrival"):
        validate_config(c)
