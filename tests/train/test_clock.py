"""Modelled wall-clock: time model validation, hand-computed timelines, the event-loop collector
(toy engine with fixed durations, and real tiny runs), its config checks and resume."""
import dataclasses

import numpy as np
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


def test_calibration_entry_is_provenance_not_a_parameter(tmp_path):
    """A `calibration` object is accepted and returned by read_calibration; the TimeModel is the
    one of the parameters alone; any other unknown key, or a calibration that is not an object,
    is refused naming it."""
    import json

    params = dataclasses.asdict(_model(prefill_s_per_token=0.25))
    plain, cal = tmp_path / "plain.json", tmp_path / "cal.json"
    plain.write_text(json.dumps(params))
    entry = {"machine": "x86_64, 2 CPUs", "date": "2026-12-05",
             "parameters": {"decode_s_per_token": {"median": 1.0, "min": 0.9, "max": 1.1}}}
    cal.write_text(json.dumps(dict(params, calibration=entry)))
    assert clock.TimeModel.from_json(str(cal)) == clock.TimeModel.from_json(str(plain)) == _model(
        prefill_s_per_token=0.25)
    assert clock.read_calibration(str(cal)) == entry
    assert clock.read_calibration(str(plain)) is None
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(dict(params, calibration=entry, calibrated=True)))
    with pytest.raises(ValueError, match=r"unknown fields \['calibrated'\]"):
        clock.TimeModel.from_json(str(bad))
    bad.write_text(json.dumps(dict(params, calibration="by hand")))
    for read in (clock.TimeModel.from_json, clock.read_calibration):
        with pytest.raises(ValueError, match="'calibration' must be a JSON object"):
            read(str(bad))


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


# ----------------------------------------------------------------------------- the collector
T = 12  # toy rows: a duration of d virtual seconds is d generated tokens (decode 1 s / token)


class ToyEngine:
    """Rows of unit u (its task id is "u") generate durs[u] tokens each; records every call."""

    def __init__(self, durs):
        self.durs, self.calls = durs, []

    def run(self, params, tasks, group_size, keys, sampling, policy_version):
        from rlvr.records.batch import RolloutBatch
        from rlvr.train.collectors import Collected, RolloutCost

        u = int(tasks[0].task_id)
        self.calls.append((u, params, policy_version))
        d = self.durs[u]
        mask = np.zeros((group_size, T), np.float32)
        mask[:, 1:1 + d] = 1
        batch = RolloutBatch.create(tokens=np.ones((group_size, T), np.int32), loss_mask=mask,
                                    behavior_logprobs=np.zeros((group_size, T), np.float32),
                                    rewards=np.zeros(group_size, np.float32),
                                    attention_mask=np.pad(mask, ((0, 0), (1, 0)))[:, :-1] + mask > 0,
                                    policy_version=np.full(group_size, policy_version, np.int32))
        rows = [tasks[0]] * group_size
        return Collected(batch, tuple(range(group_size)), tuple(rows), group_size,
                         RolloutCost(turns=group_size, sampled_tokens=d * group_size))


class ToySampler:
    def draw(self, tag, n):
        from rlvr.records.task import TaskSpec

        u = int(str(tag).rsplit("/", 1)[1])
        return [TaskSpec(task_id=str(u), prompt="p", task_type="text")]

    def state_dict(self):
        return {}

    def load_state_dict(self, d):
        pass


class ToyInner:
    def __init__(self, durs, group_size=1, prompts_per_step=1):
        import jax

        self.engine, self.sampler = ToyEngine(durs), ToySampler()
        self.group_size, self.prompts_per_step = group_size, prompts_per_step
        self.rollout_key, self.sampling = jax.random.PRNGKey(0), None

    def state_dict(self):
        return {}

    def load_state_dict(self, d):
        pass

    def observe(self, c):
        pass


def _toy(durs, topology="disaggregated", mode="sao", max_staleness=10, staleness_decay=1.0):
    m = _model(prefill_s_per_token=0.0, tool_median_s=0.0, topology=topology)
    inner = ToyInner(durs)
    return clock.ModelledClockCollector(inner, m, mode=mode, seed=0, max_staleness=max_staleness,
                                        staleness_decay=staleness_decay, backpressure=False), inner


def _steps(c, n):
    out = []
    for s in range(n):
        got = c.collect(f"params{s}", s, s)
        out.append((got.stats["time/modelled_s"], [int(t.task_id) for t in got.tasks],
                    np.asarray(got.batch.policy_version).tolist()))
    return out


DURS = [3, 1, 4, 1, 5, 9, 2, 6]


def test_streaming_timeline_hand_computed_disaggregated():
    # slots 2, learner 1 s per row. t=0 start u0 (ends 3), u1 (ends 1); u1 arrives -> step 0 on
    # [1, 2]; during it u2 starts at 1 with params0 (ends 5); u0 arrives at 3 -> step 1 [3, 4];
    # u3 starts at 3 with params1 (ends 4) -> step 2 [4, 5]; u4 starts at 4 with params2;
    # u2 arrives at 5 -> step 3 [5, 6]
    c, inner = _toy(DURS)
    got = _steps(c, 4)
    assert [g[0] for g in got] == [2.0, 4.0, 5.0, 6.0]
    assert [g[1] for g in got] == [[1], [0], [3], [2]]
    assert [g[2] for g in got] == [[0], [0], [1], [0]]  # versions the units were sampled with
    assert [(u, p) for u, p, _ in inner.engine.calls] == [
        (0, "params0"), (1, "params0"), (2, "params0"), (3, "params1"), (4, "params2")]


def test_streaming_timeline_hand_computed_colocated():
    # the same units; rollout pauses while the learner steps: step 0 [1, 2] (u0 -> 4); at 2 u2
    # starts with params1 (ends 6); u0 at 4 -> step 1 [4, 5] (u2 -> 7); at 5 u3 starts with
    # params2 (ends 6) -> step 2 [6, 7] (u2 -> 8); at 7 u4 starts; u2 at 8 -> step 3 [8, 9]
    c, inner = _toy(DURS, topology="colocated")
    got = _steps(c, 4)
    assert [g[0] for g in got] == [2.0, 5.0, 7.0, 9.0]
    assert [g[1] for g in got] == [[1], [0], [3], [2]]
    assert [g[2] for g in got] == [[0], [0], [2], [1]]
    assert [(u, p) for u, p, _ in inner.engine.calls] == [
        (0, "params0"), (1, "params0"), (2, "params1"), (3, "params2"), (4, "params3")]


def test_streaming_collector_agrees_with_the_pure_timeline():
    # single episodes, no staleness gate: the event loop and `streaming_timeline` (episodes back
    # to back on the slots, arrivals shifted by every colocated learner step) give the same clock
    import random

    for topology in clock.TOPOLOGIES:
        for trial in range(10):
            durs = [random.Random(f"{trial}/{i}").randint(1, 9) for i in range(40)]
            c, _ = _toy(durs, topology=topology)
            got = [g[0] for g in _steps(c, 10)]
            m = _model(prefill_s_per_token=0.0, tool_median_s=0.0, topology=topology)
            assert got == clock.streaming_timeline(m, durs, step_every=1)[:10], (topology, trial)


class BatchToyEngine(ToyEngine):
    """ToyEngine that also samples several units in one call (`run_units`)."""

    def __init__(self, durs):
        super().__init__(durs)
        self.batches = []

    def run_units(self, params, tasks, group_size, keys, sampling, policy_version):
        self.batches.append([int(t.task_id) for t in tasks])
        return [self.run(params, [t], group_size, None, sampling, policy_version) for t in tasks]


@pytest.mark.parametrize("topology", clock.TOPOLOGIES)
def test_sampling_ahead_keeps_the_clock_rows_and_parameters(topology):
    # units drawn several at a time under the parameters current at the first one's start give
    # the run of units each sampled alone at its start: the same clock, rows, versions and
    # costs; every consumed unit was sampled with its own start's parameters; fewer engine calls
    import random

    for trial in range(6):
        durs = [random.Random(f"ahead{trial}/{i}").randint(1, 9) for i in range(80)]
        runs = {}
        for ahead in (1, 0, 3):
            m = _model(prefill_s_per_token=0.0, tool_median_s=0.0, topology=topology, slots=4)
            inner = ToyInner(durs, prompts_per_step=2)
            inner.engine = BatchToyEngine(durs)
            c = clock.ModelledClockCollector(inner, m, mode="sao", seed=0, max_staleness=2,
                                             backpressure=bool(trial % 2), sample_ahead=ahead)
            out = []
            for s in range(12):
                got = c.collect(f"params{s}", s, s)
                vers = np.asarray(got.batch.policy_version).tolist()
                used = {u: p for u, p, _ in inner.engine.calls}  # the last draw of each unit
                assert [used[int(t.task_id)] for t in got.tasks] == [f"params{v}" for v in vers]
                out.append((got.stats["time/modelled_s"], [int(t.task_id) for t in got.tasks],
                            vers, got.cost))
            runs[ahead] = (out, inner.engine, got.stats["clock/sampled_ahead_unused"])
        assert runs[0][0] == runs[1][0] == runs[3][0], (topology, trial)
        assert not runs[1][1].batches and runs[1][2] == 0.0
        assert 0 < len(runs[0][1].batches) < len(runs[1][1].calls)  # default: slots ÷ group = 4
        assert max(len(b) for b in runs[3][1].batches) == 3


def test_sample_ahead_refuses_a_negative_count():
    with pytest.raises(ValueError, match="sample_ahead"):
        clock.ModelledClockCollector(ToyInner(DURS), _model(), mode="sao", seed=0, sample_ahead=-1)


def test_streaming_staleness_tags_weights_and_drops():
    # unit 2 started during step 0's learner step with version 0: at step 3 (version 3) its lag
    # is 3 > max_staleness 2, so it is dropped and unit 4 (version 2) waits for its arrival
    c, _ = _toy(DURS, max_staleness=2, staleness_decay=0.5)
    got = [c.collect(f"params{s}", s, s) for s in range(4)]
    assert [int(g.tasks[0].task_id) for g in got[:3]] == [1, 0, 3]
    assert np.asarray(got[1].batch.sample_weights).tolist() == [0.5]  # lag 1
    assert int(got[3].tasks[0].task_id) != 2 and got[3].stats["clock/dropped_stale"] == 1.0


def test_streaming_grpo_async_groups_and_slots():
    # groups of 2 on 4 slots: two groups in flight; a group's rows free their slots together
    m = _model(prefill_s_per_token=0.0, tool_median_s=0.0, slots=4)
    inner = ToyInner(DURS, group_size=2)
    c = clock.ModelledClockCollector(inner, m, mode="grpo_async", seed=0, max_staleness=10,
                                     backpressure=False)
    got = c.collect("p0", 0, 0)
    assert got.batch.batch_size == 2 and got.tasks[0].task_id == "1"
    assert got.stats["time/modelled_s"] == 1.0 + 2.0  # arrival 1, learner 2 rows x 1 s
    with pytest.raises(ValueError, match="slots"):
        clock.ModelledClockCollector(inner, _model(slots=1), mode="grpo_async", seed=0)
    with pytest.raises(ValueError, match="group_size"):  # SAO with groups
        clock.ModelledClockCollector(inner, _model(slots=4), mode="sao", seed=0)


def test_streaming_deterministic_with_tool_latency():
    def run():
        m = _model(tool_tail_index=1.3, slots=3)
        inner = ToyInner(DURS * 4)

        class Tools(ToyEngine):  # every row calls 3 tools (turn ids 0..3)
            def run(self, *a):
                got = super().run(*a)
                tid = np.where(np.asarray(got.batch.loss_mask) > 0, 3, -1).astype(np.int32)
                return dataclasses.replace(got, batch=got.batch.replace(turn_ids=tid))

        inner.engine = Tools(DURS * 4)
        c = clock.ModelledClockCollector(inner, m, mode="sao", seed=0, max_staleness=3)
        return [(g.stats["time/modelled_s"], g.cost.sampled_tokens, g.tasks[0].task_id)
                for g in (c.collect(None, s, s) for s in range(6))]

    a = run()
    assert a == run()
    assert all(t > 3 for t, _, _ in a)  # tool latency counted


def test_heavier_tail_later_sync_end_not_later_first_sao_arrival():
    # one tool call per episode, 16 slots: the sync step waits for the largest draw (heavier
    # under a heavier tail at the same median), SAO's first step for the smallest (not heavier)
    light = _model(tool_tail_index=3.0, slots=16, learner_s_per_sample=0.0)
    heavy = dataclasses.replace(light, tool_tail_index=1.1)

    class OneTool(ToyEngine):
        def run(self, *a):
            got = super().run(*a)
            tid = np.where(np.asarray(got.batch.loss_mask) > 0, 1, -1).astype(np.int32)
            return dataclasses.replace(got, batch=got.batch.replace(turn_ids=tid))

    def run(m, mode):
        sync = mode == "grpo_sync"  # 8 groups of 2 rows; SAO: single episodes
        inner = ToyInner([1] * 16, group_size=2 if sync else 1, prompts_per_step=8 if sync else 1)
        inner.engine = OneTool([1] * 16)
        if sync:  # the sync path samples the batch through the wrapped collector
            inner.collect = lambda p, s, v, n=None: clock.Collected.concatenate(
                [inner.engine.run(p, inner.sampler.draw(f"x/{i}", 1), 2, None, None, v)
                 for i in range(8)])
        c = clock.ModelledClockCollector(inner, m, mode=mode, seed=0, max_staleness=20)
        return c.collect(None, 0, 0).stats["time/modelled_s"]

    assert run(heavy, "grpo_sync") > run(light, "grpo_sync")
    assert run(heavy, "sao") <= run(light, "sao")


def test_streaming_refuses_resume_sync_restores_clock():
    c, _ = _toy(DURS)
    c.collect(None, 0, 0)
    d = c.state_dict()
    fresh, _ = _toy(DURS)
    with pytest.raises(RuntimeError, match="cannot resume"):
        fresh.load_state_dict(d)
    fresh.load_state_dict({"clock": {"steps": 0}})  # a step-0 checkpoint holds nothing in flight
    sync, _ = _toy(DURS, mode="sao_sync")
    sync.load_state_dict({"clock": {"mode": "sao_sync", "steps": 3, "modelled_s": 17.5}})
    assert sync.l_end == 17.5 and sync.steps == 3


def test_config_refusals_name_the_field(tmp_path):
    from rlvr.train.config import ConfigError, validate_config
    from tests.train.tiny import tiny_agent_config, tiny_config

    tm = "experiments/study/system_model.json"
    cases = [
        (dict(rollout__clock="modelled"), "rollout.time_model"),
        (dict(rollout__clock="modelled", rollout__time_model=str(tmp_path / "none.json")),
         "rollout.time_model"),
        (dict(rollout__clock="modelled", rollout__time_model=tm, algorithm__dynamic_sampling=True),
         "algorithm.dynamic_sampling"),
        (dict(rollout__clock="nope"), "rollout.clock"),
        (dict(rollout__clock="modelled", rollout__time_model=tm, rollout__asynchronous=True,
              rollout__arrival="episode"), "algorithm.group_size"),  # SAO with groups
        (dict(rollout__time_model=tm), "rollout.time_model"),  # not read: allowed, see below
    ]
    for over, field in cases[:-1]:
        with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
            validate_config(tiny_config(**over))
    validate_config(tiny_config(**cases[-1][0]))  # an inactive field may keep any value
    for name, over, field in [
        ("pivotrl", {}, "rollout.collector"),
        ("agent_grpo", dict(rollout__kv_reuse=True), "rollout.kv_reuse"),
        ("agent_grpo", dict(rollout__env_executor="ray"), "rollout.env_executor"),
    ]:
        c = tiny_agent_config(name, rollout__clock="modelled", rollout__time_model=tm, **over)
        with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
            validate_config(c)


def _metrics(wd):
    import json

    return [json.loads(x) for x in open(wd / "metrics.jsonl")]


def _tiny_clock(**over):
    from tests.train.tiny import tiny_config

    kw = dict(train__num_steps=3, train__sft_steps=0, eval__num_tasks=0, checkpoint__every=-1)
    return tiny_config(**{**kw, **over})


def test_grpo_sync_modelled_equals_plain_run(tmp_path):
    from tests.train.tiny import run_tiny

    run_tiny(_tiny_clock(), tmp_path / "plain")
    run_tiny(_tiny_clock(rollout__clock="modelled",
                         rollout__time_model="experiments/study/system_model.json"),
             tmp_path / "clock")
    plain = [r for r in _metrics(tmp_path / "plain") if "time/step_s" in r]
    mod = [r for r in _metrics(tmp_path / "clock") if "time/step_s" in r]
    assert len(plain) == len(mod) == 3
    keys = [k for k in plain[0] if k.startswith(("loss/", "policy/", "cost/", "reward/"))]
    assert "cost/sampled_tokens" in keys and "policy/loss" in keys
    for a, b in zip(plain, mod):
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
    t = [r["time/modelled_s"] for r in mod]
    assert t[0] > 0 and t == sorted(t) and len(set(t)) == 3


# two end-to-end runs; `test_streaming_deterministic_with_tool_latency` checks the SAO collector's
# determinism in the default suite, and `test_modelled_clock_reads_every_field_it_does_not_refuse`
# runs the streaming modelled loop end to end
@pytest.mark.slow
def test_sao_modelled_run_deterministic(tmp_path):
    from tests.train.tiny import run_tiny

    over = dict(algorithm__name="reinforce", algorithm__group_size=1,
                sampling__prompts_per_step=2, rollout__asynchronous=True,
                rollout__clock="modelled", rollout__time_model="experiments/study/system_model.json")
    rows = []
    for name in ("a", "b"):
        run_tiny(_tiny_clock(**over), tmp_path / name)
        rows.append([(r["time/modelled_s"], r["cost/sampled_tokens"], r["policy/loss"])
                     for r in _metrics(tmp_path / name) if "time/modelled_s" in r])
    assert len(rows[0]) == 3 and rows[0] == rows[1]


@pytest.mark.slow  # three tiny runs; `test_streaming_refuses_resume_sync_restores_clock` is the fast check
def test_grpo_sync_modelled_resume_continues_the_clock(tmp_path):
    from tests.train.tiny import run_tiny

    tm = "experiments/study/system_model.json"
    over = dict(rollout__clock="modelled", rollout__time_model=tm)
    run_tiny(_tiny_clock(checkpoint__every=1, **over), tmp_path / "whole")
    run_tiny(_tiny_clock(checkpoint__every=1, train__num_steps=2, **over), tmp_path / "split")
    run_tiny(_tiny_clock(checkpoint__every=1, **over), tmp_path / "split")  # resumes at step 2
    whole = {r["step"]: r["time/modelled_s"] for r in _metrics(tmp_path / "whole") if "time/modelled_s" in r}
    split = {r["step"]: r["time/modelled_s"] for r in _metrics(tmp_path / "split") if "time/modelled_s" in r}
    assert sorted(whole) == [1, 2, 3] and split == whole


@pytest.mark.parametrize("asynchronous", [False, True])
def test_modelled_clock_reads_every_field_it_does_not_refuse(tmp_path, asynchronous):
    from rlvr.train import loop
    from rlvr.train.config import ConfigReads, flatten, inapplicable

    over = dict(rollout__clock="modelled", rollout__time_model="experiments/study/system_model.json",
                train__num_steps=1, checkpoint__every=1, rollout__asynchronous=asynchronous)
    if asynchronous:
        over.update(algorithm__group_size=1, algorithm__name="reinforce")
    c = _tiny_clock(**over)
    tracked = ConfigReads(c)
    loop.run(tracked, str(tmp_path))
    na = set(inapplicable(c, multi_turn=False))
    assert not sorted(set(flatten(c)) - tracked.reads - na)
    assert not sorted(tracked.reads & na)
