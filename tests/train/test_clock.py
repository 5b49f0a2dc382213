"""Modelled wall-clock: time model validation and hand-computed timelines."""
import dataclasses

import pytest

from rlvr.train import clock


def _model(**kw):
    base = dict(prefill_s_per_token=0.0, decode_s_per_token=1.0, learner_s_per_sample=1.0,
                env_setup_s=0.0, tool_median_s=1.0, tool_tail_index=2.0, tool_cap_s=100.0,
                topology="disaggregated", slots=2)
    base.update(kw)
    return clock.TimeModel(**base)


def test_committed_model_loads():
    m = clock.TimeModel.from_json("experiments/study/system_model.json")
    assert m.slots >= 1 and m.topology in clock.TOPOLOGIES


def test_bad_field_names_field():
    with pytest.raises(ValueError, match="topology"):
        _model(topology="shared")
    with pytest.raises(ValueError, match="slots"):
        _model(slots=0)


def test_episode_duration_counts_and_seed():
    m = _model(prefill_s_per_token=0.5, env_setup_s=2.0)
    assert clock.episode_duration(m, 4, 3, 0, seed=0) == 2.0 + 2.0 + 3.0
    a = clock.episode_duration(m, 4, 3, 5, seed=7)
    assert a == clock.episode_duration(m, 4, 3, 5, seed=7)
    assert a != clock.episode_duration(m, 4, 3, 5, seed=8)


def test_tool_latency_cap_and_median():
    m = _model(tool_median_s=2.0, tool_tail_index=1.2, tool_cap_s=5.0)
    import numpy as np
    draws = np.array([clock.tool_latency(m, s, 1) for s in range(2000)])
    assert draws.max() <= 5.0
    assert abs(np.median(draws) - 2.0) < 0.2


def test_arrivals_two_slots_hand_computed():
    # slot A: 3 -> then 1 (free at 3) ; slot B: 1 -> then 4 (free at 1)
    assert clock.arrival_times([3, 1, 4, 1], slots=2) == [3, 1, 5, 4]


def test_sync_timeline_hand_computed():
    m = _model()
    # step 1: arrivals [3,1] -> done 3, learner 2 samples = 2 s -> 5
    # step 2 starts at 5: arrivals [7,6] -> done 7, +2 -> 9
    assert clock.sync_timeline(m, [[3, 1], [2, 1]]) == [5.0, 9.0]


def test_streaming_colocated_vs_disaggregated():
    durs = [1, 1, 1, 1]  # two slots: arrivals 1,1,2,2
    dis = clock.streaming_timeline(_model(), durs, step_every=2)
    col = clock.streaming_timeline(_model(topology="colocated"), durs, step_every=2)
    # disaggregated: step1 [1,3], step2 starts max(2,3)=3 -> 5
    assert dis == [3.0, 5.0]
    # colocated: step1 [1,3]; rollout paused 2 s, arrivals 2 -> 4, step2 [4,6]
    assert col == [3.0, 6.0]


def test_heavier_tail_delays_sync_not_first_arrival():
    light = _model(tool_tail_index=3.0, slots=4)
    heavy = dataclasses.replace(light, tool_tail_index=1.1)
    def durs(m):
        return [clock.episode_duration(m, 0, 1, 3, seed=s) for s in range(16)]
    sync_l = clock.sync_timeline(light, [durs(light)])[0]
    sync_h = clock.sync_timeline(heavy, [durs(heavy)])[0]
    first_l = min(clock.arrival_times(durs(light), light.slots))
    first_h = min(clock.arrival_times(durs(heavy), heavy.slots))
    assert sync_h > sync_l
    assert first_h <= first_l


def test_sync_wrapper_keeps_samples_and_adds_clock():
    import numpy as np
    from types import SimpleNamespace

    batch = SimpleNamespace(loss_mask=np.array([[0, 1, 1, 0], [0, 1, 0, 0]], np.float32),
                            attention_mask=np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool),
                            turn_ids=None)

    @dataclasses.dataclass(frozen=True)
    class Got:
        batch: object
        stats: dict

    got = Got(batch, {"time/generate_s": 0.1})

    class Inner:
        def collect(self, params, step, version, n=None):
            return got
        def state_dict(self):
            return {}

    m = _model(prefill_s_per_token=1.0, decode_s_per_token=2.0, learner_s_per_sample=0.5)
    w = clock.SyncModelledClock(Inner(), m, seed=0)
    a = w.collect(None, 0, 0)
    # rows: (prompt 1, gen 2) -> 5 s; (1, 1) -> 3 s; two slots -> done 5, learner 1 s -> 6
    assert a.batch is batch and a.stats["time/modelled_s"] == 6.0
    assert w.collect(None, 1, 1).stats["time/modelled_s"] == 12.0
    assert w.state_dict()["modelled_s"] == 12.0


def test_sync_wrapper_deterministic_in_seed():
    import numpy as np
    from types import SimpleNamespace

    batch = SimpleNamespace(loss_mask=np.ones((4, 6), np.float32),
                            attention_mask=np.ones((4, 8), bool),
                            turn_ids=np.array([[0, 1, 2, 3, -1, -1, -1, -1]] * 4))

    @dataclasses.dataclass(frozen=True)
    class Got:
        batch: object
        stats: dict

    class Inner:
        def collect(self, params, step, version, n=None):
            return Got(batch, {})

    def run(seed):
        w = clock.SyncModelledClock(Inner(), _model(tool_tail_index=1.3), seed=seed)
        return [w.collect(None, s, s).stats["time/modelled_s"] for s in range(3)]

    assert run(0) == run(0)
    assert run(0) != run(1)
