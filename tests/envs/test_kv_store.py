"""KVStoreEnv: protocol conformance, reset integrity (docs/architecture.md §4), snapshot/restore over whole
episodes (docs/algorithms.md §6), common random numbers (docs/architecture.md §4), fault injection, ALPHABET."""

import copy
import dataclasses
import random

import pytest

from rlvr.envs import ENVIRONMENTS, make_env
from rlvr.envs.base import (
    Environment,
    ResetIntegrityError,
    SnapshotError,
    StepResult,
    group_seeds,
    hash_state,
)
from rlvr.envs.kv_store import (
    ALPHABET,
    KVStoreEnv,
    eval_expr,
    initial_state,
    make_task_snapshot,
    parse_action,
    render_query,
)
from rlvr.records.task import TaskSpec


def make_task(registers=None, query=None, max_turns=5, seed=0):
    registers = registers or {"a": 5, "b": 1, "c": 3, "f": 9}
    query = query or [["+", "a"], ["+", "c"], ["+", "f"]]
    state = initial_state(registers, query, max_turns)
    return TaskSpec(task_id="t0", prompt=render_query(state["query"]), task_type="agent",
                    reference_answer=state["goal"], environment_snapshot=make_task_snapshot(state),
                    random_seed=seed)


def test_protocol_conformance_and_observations():
    task = make_task(max_turns=10)
    env = KVStoreEnv()
    assert isinstance(env, Environment) and env.name in ENVIRONMENTS
    assert isinstance(make_env(task), KVStoreEnv) and isinstance(make_env("kv_store"), KVStoreEnv)
    assert make_env(task, fault_prob=0.5).fault_prob == 0.5
    with pytest.raises(ValueError, match="environment name"):
        make_env("browser")
    with pytest.raises(RuntimeError):
        env.step("get a")
    assert env.reset(task, seed=0) == "a+c+f?\n" == task.prompt
    h0 = env.state_hash()
    assert h0 == hash_state(env.state()) == task.environment_snapshot["sha256"]
    s = env.state()
    s["registers"]["a"] = 0  # state() is a copy
    assert env.state_hash() == h0
    expected = [("get a", "=5\n"), ("get a\n", "=5\n"), ("get z", "!none\n"),
                ("get  a", "!bad\n"), ("GET a", "!bad\n"), ("get a\nget c", "!bad\n")]
    for action, obs in expected:
        r = env.step(action)
        assert isinstance(r, StepResult) and r.observation == obs, action
        assert r.error is None and not r.done and r.event["turn"] == env.state()["turn"] - 1
    assert env.state()["read"] == ["a"]  # re-read recorded once
    assert env.state_hash() != h0


def test_episode_end_by_answer_and_by_turn_limit():
    env = KVStoreEnv()
    env.reset(make_task(), seed=0)
    r = env.step("ans 1+2")  # a wrong answer still gets "ok": the tool's success is no proof
    assert (r.observation, r.done, r.info["stop_reason"]) == ("ok\n", True, "eos")
    assert env.state()["submitted"] == {"expr": "1+2", "value": 3}
    with pytest.raises(RuntimeError, match="done"):
        env.step("get a")
    env.reset(make_task(max_turns=2), seed=0)
    assert not env.step("get b").done
    r = env.step("get c")
    assert r.done and r.info["stop_reason"] == "max_turns" and env.state()["submitted"] is None


def test_delete_is_recorded_and_removes_the_register():
    env = KVStoreEnv()
    env.reset(make_task(), seed=0)
    r = env.step("del b")
    assert r.observation == "ok\n" and r.event["minefield"] is True
    assert "b" not in env.state()["registers"] and env.state()["deleted"] == ["b"]
    assert env.step("get b").observation == "!gone\n"
    assert env.step("del g").event == {"turn": 2, "tool": "del", "key": "g", "existed": False,
                                       "minefield": True}


@pytest.mark.parametrize("expr,value", [
    ("17", 17), ("5+3+9", 17), ("9+3+5", 17), ("20-3", 17), ("-3+20", 17), ("+17", 17),
    ("0", 0), ("5-9", -4), ("05", None), ("5+", None), ("5++3", None), ("5*3", None),
    ("(5)", None), ("5 +3", None), ("1e3", None), ("0x10", None), ("", None), ("1000", None),
    ("__import__('os')", None), ("+".join(["1"] * 17), None), ("+".join(["1"] * 16), 16),
])
def test_eval_expr_is_safe_and_exact(expr, value):
    assert eval_expr(expr) == value


def test_parse_action():
    assert parse_action("get a\n") == ("get", "a")
    assert parse_action("ans 5+3") == ("ans", "5+3")
    assert parse_action("del h") == ("del", "h")
    for bad in ["get", "get ab", "ans", "ans ", "put a 1", "get a\n\n", " get a", 3]:
        assert parse_action(bad) is None, bad


def test_reset_integrity_detects_tampered_snapshot():
    task = make_task()
    snap = copy.deepcopy(dict(task.environment_snapshot))
    good = snap["sha256"]
    snap["state"]["registers"]["a"] = 6  # tampered register, stale hash
    bad_task = dataclasses.replace(task, environment_snapshot=snap)
    with pytest.raises(ResetIntegrityError) as e:
        KVStoreEnv().reset(bad_task, seed=0)
    assert good in str(e.value) and hash_state(snap["state"]) in str(e.value)
    with pytest.raises(ValueError, match="prompt"):
        KVStoreEnv().reset(dataclasses.replace(task, prompt="a+b?\n"), seed=0)
    with pytest.raises(ValueError, match="sha256"):
        snap2 = dict(task.environment_snapshot)
        del snap2["sha256"]
        KVStoreEnv().reset(dataclasses.replace(task, environment_snapshot=snap2), seed=0)


def test_reset_after_an_episode_leaves_no_residue():
    task = make_task()
    env = KVStoreEnv()
    env.reset(task, seed=1)
    for a in ["get a", "del b", "ans 3"]:
        env.step(a)
    env.reset(task, seed=1)
    assert env.state_hash() == task.environment_snapshot["sha256"]
    assert env.state() == task.environment_snapshot["state"]


ACTIONS = ["get a", "get b", "xx", "get a", "del b", "get b", "get c", "get f", "ans 5+3+9"]


def run(env, actions):
    obs, hashes, errors = [], [], []
    for a in actions:
        if env.done:
            break
        r = env.step(a)
        obs.append(r.observation)
        errors.append(r.error)
        hashes.append(env.state_hash())
    return obs, hashes, errors


@pytest.mark.parametrize("fault_prob,seeds", [(0.0, [0]), (0.25, list(range(12)))])
def test_restore_at_every_turn_replays_the_same_future(fault_prob, seeds):
    task = make_task(max_turns=len(ACTIONS))
    n_faulted = 0
    for seed in seeds:
        env = KVStoreEnv(fault_prob=fault_prob)
        env.reset(task, seed=seed)
        snaps, obs, hashes, errors = [], [], [], []
        for a in ACTIONS:
            if env.done:
                break
            snaps.append(env.snapshot())
            r = env.step(a)
            obs.append(r.observation)
            errors.append(r.error)
            hashes.append(env.state_hash())
        n_faulted += any(errors)
        for t, snap in enumerate(snaps):
            other = KVStoreEnv(fault_prob=fault_prob)
            other.reset(make_task(registers={"a": 0}, query=[["+", "a"]]), seed=999)  # dirty env
            other.restore(snap)
            assert other.state_hash() == snap.state_hash and other.seed == seed
            assert run(other, ACTIONS[t:len(snaps)]) == (obs[t:], hashes[t:], errors[t:])
    if fault_prob:
        assert 0 < n_faulted < len(seeds)  # faults do happen, and are replayed exactly


def test_restore_refuses_foreign_snapshot():
    env = KVStoreEnv()
    env.reset(make_task(), seed=0)
    snap = env.snapshot()
    other = dataclasses.replace(snap, env_version="kv_store/0")
    with pytest.raises(SnapshotError, match="kv_store/0"):
        env.restore(other)
    with pytest.raises(SnapshotError):
        env.restore(snap.to_dict())


def test_faults_set_error_end_the_episode_and_follow_common_random_numbers():
    task = make_task(max_turns=40)
    actions = ["get b", "get a"] * 20

    def fault_turns(seed, p=0.3):
        env = KVStoreEnv(fault_prob=p)
        env.reset(task, seed=seed)
        out = []
        for t, a in enumerate(actions):
            read_before = env.state()["read"]
            r = env.step(a)
            if r.error is not None:
                assert r.done and r.observation == "!fault\n" and r.info["stop_reason"] == "env_error"
                assert r.event["tool"] == "fault" and env.state()["read"] == read_before
                out.append(t)
                break
            if r.done:
                break
        return out

    for base in range(5):
        common = [fault_turns(s) for s in group_seeds(base, 4, common=True)]
        assert all(c == common[0] for c in common)
    indep = [tuple(fault_turns(s)) for s in group_seeds(0, 8, common=False)]
    assert len(set(indep)) > 1
    # frequency of the counter-based fault stream over many (seed, turn) draws
    from rlvr.envs.kv_store import fault_draw
    hits = sum(fault_draw(s, t) < 0.3 for s in range(50) for t in range(40))
    assert abs(hits / 2000 - 0.3) < 0.04
    assert fault_turns(0, p=0.0) == [] and len(fault_turns(0, p=1.0)) == 1
    with pytest.raises(ValueError, match="fault_prob"):
        KVStoreEnv(fault_prob=1.5)


def test_alphabet_covers_every_text_the_env_can_emit():
    alphabet = set(ALPHABET)
    assert len(alphabet) == len(ALPHABET)
    rng = random.Random(0)
    env = KVStoreEnv(fault_prob=0.1)
    task = make_task(max_turns=30)
    tools = ["get ", "ans ", "del ", ""]
    for ep in range(40):
        assert set(env.reset(task, seed=ep)) <= alphabet
        while not env.done:
            a = rng.choice(tools) + "".join(rng.choice(ALPHABET.replace("\n", ""))
                                            for _ in range(rng.randint(0, 4)))
            if rng.random() < 0.3:
                a = rng.choice(["get a", "get c", "ans 17", "ans 5+3+9", "del f"])
            r = env.step(a + "\n")
            assert set(r.observation) <= alphabet and r.observation.endswith("\n")
    for text in ["get a\n", "ans 5+3-9\n", "del h\n", "=9\n", "ok\n", "!bad\n", "!gone\n",
                 "!none\n", "!fault\n", "a-b+h?\n"]:
        assert set(text) <= alphabet
