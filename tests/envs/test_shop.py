"""ShopEnv: protocol, reset integrity (docs/architecture.md §4), snapshot/restore replaying the same future
(docs/algorithms.md §6), observations, minefield events, and the simulated tool latency (seeded,
heavy-tailed, concurrent within a turn: a batch waits for its slowest call)."""

import dataclasses

import numpy as np
import pytest

from rlvr.envs import ENVIRONMENTS, make_env
from rlvr.envs.base import Environment, ResetIntegrityError, SnapshotError, hash_state
from rlvr.envs import shop as shop_mod
from rlvr.envs.shop import (
    ALPHABET,
    ShopEnv,
    initial_state,
    latency_draw,
    make_task_snapshot,
    oracle_action,
    parse_action,
    render_order,
)
from rlvr.records.task import TaskSpec


def make_task(prices=None, order=None, max_turns=8, seed=0, task_id="t0"):
    prices = prices or {"a": 4, "b": 7, "c": 2, "e": 9}
    order = order or [["b", 2], ["a", 1], ["e", 3]]
    state = initial_state(prices, order, max_turns)
    return TaskSpec(task_id=task_id, prompt=render_order(state["order"]), task_type="agent",
                    reference_answer=state["total"], environment_snapshot=make_task_snapshot(state),
                    random_seed=seed)


class FakeClock:
    """Replaces time.monotonic / time.sleep in rlvr.envs.shop: sleeping advances the clock."""

    def __init__(self):
        self.now, self.slept, self.calls = 100.0, 0.0, 0

    def monotonic(self):
        return self.now

    def sleep(self, s):
        self.calls += 1
        self.slept += s
        self.now += s


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(shop_mod.time, "monotonic", c.monotonic)
    monkeypatch.setattr(shop_mod.time, "sleep", c.sleep)
    return c


def test_protocol_observations_and_total():
    task = make_task()
    env = ShopEnv()
    assert isinstance(env, Environment) and ENVIRONMENTS["shop"] is ShopEnv
    assert isinstance(make_env(task), ShopEnv)
    with pytest.raises(RuntimeError):
        env.step("get a")
    assert env.reset(task, seed=0) == "b2 a1 e3\n" == task.prompt
    assert env.state()["total"] == 2 * 7 + 4 + 3 * 9 == task.reference_answer == 45
    assert env.state_hash() == task.environment_snapshot["sha256"]
    steps = [("get b", "=7\n"), ("get z", "!none\n"), ("get  b", "!bad\n"), ("add b2", "ok\n"),
             ("add b2", "ok\n"), ("pay 1+", "!bad\n")]
    for action, obs in steps:
        assert env.step(action).observation == obs, action
    s = env.state()
    assert s["read"] == ["b"] and s["cart"] == {"b": 4} and s["turn"] == 6
    assert [e["tool"] for e in s["events"]] == ["get", "get", "invalid", "add", "add", "invalid"]
    assert s["events"][3]["correct"] and not s["events"][4]["correct"]  # the second add is a mine
    r = env.step("pay 45")
    assert r.done and r.observation == "ok\n" and env.state()["paid"] == {"expr": "45", "value": 45}
    with pytest.raises(RuntimeError):
        env.step("get a")


def test_turn_limit_and_parse():
    env = ShopEnv()
    env.reset(make_task(max_turns=7), seed=0)
    for _ in range(6):
        assert not env.step("get a").done
    r = env.step("get a")
    assert r.done and env.state()["stop_reason"] == "max_turns"
    assert parse_action("add b2\n") == ("add", ("b", 2)) and parse_action("add b") is None
    assert parse_action("pay 3+4") == ("pay", "3+4") and parse_action("get b\nget c") is None
    with pytest.raises(ValueError, match="max_turns"):
        initial_state({"a": 1}, [["a", 1]], 2)
    with pytest.raises(ValueError, match="distinct"):
        initial_state({"a": 1}, [["a", 1], ["a", 2]], 9)


def test_reset_integrity_and_snapshot_checks():
    task = make_task()
    bad = dict(task.environment_snapshot)
    bad["state"] = dict(bad["state"], prices={"a": 1, "b": 7, "c": 2, "e": 9})
    with pytest.raises(ResetIntegrityError):
        ShopEnv().reset(dataclasses.replace(task, environment_snapshot=bad), seed=0)
    env = ShopEnv()
    env.reset(task, seed=0)
    snap = env.snapshot()
    with pytest.raises(SnapshotError):
        type(snap)(snap.env_name, snap.env_version, snap.seed, snap.state_json.replace("7", "8"),
                   snap.state_hash)
    other = make_env("kv_store")
    with pytest.raises(SnapshotError):
        other.restore(snap)


def test_restore_replays_the_same_future_including_latency():
    """A continuation from a restored snapshot sees exactly the original state, observations,
    hashes and latency draws (docs/algorithms.md §6)."""
    task = make_task()
    env = ShopEnv(latency_s=1e-9)
    env.reset(task, seed=123)
    env.step("get b")
    env.step("add e3")
    snap = env.snapshot()
    tail = ["get a", "add b2", "get e", "add a1", "pay 45"]
    first = [(env.step(a).observation, env.state_hash(), env.last_latency_s) for a in tail]
    again = ShopEnv(latency_s=1e-9)
    again.restore(snap)
    assert again.state_hash() == snap.state_hash
    second = [(again.step(a).observation, again.state_hash(), again.last_latency_s) for a in tail]
    assert first == second
    assert hash_state(again.state()) == hash_state(env.state())


def test_oracle_and_alphabet_cover_an_episode():
    task = make_task()
    env = ShopEnv()
    env.reset(task, seed=0)
    text = task.prompt
    while not env.done:
        a = oracle_action(env.state())
        text += a + env.step(a).observation
    assert env.state()["paid"]["value"] == 45
    assert set(text) <= set(ALPHABET)


def test_latency_draw_is_seeded_heavy_tailed_and_capped():
    draws = np.array([latency_draw(s, t, "get a", 1.5, 30.0) for s in range(200) for t in range(20)])
    assert draws.min() >= 1.0 and draws.max() <= 30.0
    assert latency_draw(5, 3, "get a", 1.5, 30.0) == latency_draw(5, 3, "get a", 1.5, 30.0)
    assert latency_draw(5, 3, "get a", 1.5, 30.0) != latency_draw(5, 3, "get b", 1.5, 30.0)
    # Pareto(1.5) capped at 30: median 2^(1/1.5) = 1.59, mean ≈ 2.64; a heavy tail: p99 ≫ median
    assert abs(np.median(draws) - 2 ** (1 / 1.5)) < 0.1
    assert 2.3 < draws.mean() < 3.0
    assert np.quantile(draws, 0.99) > 10 * np.median(draws) / 2


def test_latency_is_slept_until_the_calls_deadline(clock):
    env = ShopEnv(latency_s=0.01)
    env.reset(make_task(), seed=7)
    env.step("get b")
    lat = env.last_latency_s
    assert lat == pytest.approx(0.01 * latency_draw(7, 0, "get b", 1.5, 30.0))
    assert clock.slept == 0.0  # the call returns its observation at once ...
    env.state()  # ... but the environment is busy until its deadline
    assert clock.slept == pytest.approx(lat)
    env.snapshot()
    env.state_hash()
    assert clock.slept == pytest.approx(lat)  # no second wait for the same call
    env.step("get a")
    env.step("add b2")  # the next call waits for the previous one first
    assert clock.slept == pytest.approx(lat + 0.01 * latency_draw(7, 1, "get a", 1.5, 30.0))


def test_calls_of_one_turn_overlap_so_a_batch_waits_for_its_slowest(clock):
    """The agent loop steps every active episode, then reads their snapshots: the turn costs
    the largest latency, not the sum (concurrent tool calls; the group barrier)."""
    envs = []
    for i in range(8):
        e = ShopEnv(latency_s=0.01)
        e.reset(make_task(task_id=f"t{i}"), seed=i)
        envs.append(e)
    for e in envs:
        e.step("get b")
    lats = [e.last_latency_s for e in envs]
    for e in envs:
        e.snapshot()
    assert clock.slept == pytest.approx(max(lats))
    assert max(lats) < sum(lats)


def test_no_latency_never_sleeps(clock):
    env = ShopEnv()
    env.reset(make_task(), seed=0)
    for a in ["get b", "add b2", "get a"]:
        env.step(a)
        env.snapshot()
    assert clock.calls == 0 and env.total_latency_s == 0.0


@pytest.mark.parametrize("kw, field", [({"latency_s": -1.0}, "latency_s"),
                                       ({"latency_alpha": 0.0}, "latency_alpha"),
                                       ({"latency_cap": 0.5}, "latency_cap")])
def test_bad_latency_settings_are_refused(kw, field):
    with pytest.raises(ValueError, match=field):
        ShopEnv(**kw)
