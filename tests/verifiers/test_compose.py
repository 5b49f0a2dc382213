"""Reward composition (docs/architecture.md §4) and cache (docs/verifiers.md §4) against hand-computed references."""

import numpy as np
import pytest

from rlvr.records.task import TaskSpec
from rlvr.verifiers.cache import RewardCache, cache_key
from rlvr.verifiers.compose import (RewardConfig, compose_reward, compose_rewards,
                                    shaped_rewards)
from rlvr.records.verdict import TIMEOUT_CLASSES, Verdict, env_error


def V(decision, **components):
    return Verdict(decision=decision, components=components)


def test_binary_and_validity():
    cfg = RewardConfig()
    assert compose_reward(V("pass"), cfg) == (1.0, True)
    assert compose_reward(V("fail"), cfg) == (0.0, True)
    assert compose_reward(env_error("sandbox down"), cfg) == (0.0, False)
    assert compose_reward(V("unknown"), cfg) == (0.0, True)
    assert compose_reward(V("unknown"), RewardConfig(unknown_policy="mask")) == (0.0, False)
    r, valid = compose_rewards([V("pass"), env_error("x"), V("fail")], cfg)
    np.testing.assert_array_equal(r, [1, 0, 0])
    np.testing.assert_array_equal(valid, [True, False, True])


def test_partial_eq61():
    cfg = RewardConfig(kind="partial", weights={"t1": 1, "t2": 3})
    assert compose_reward(V("fail", t1=1, t2=0), cfg)[0] == pytest.approx(0.25)
    assert compose_reward(V("fail", t1=0, t2=1), cfg)[0] == pytest.approx(0.75)


def test_weighted_scaling_clip_eq64_65():
    cfg = RewardConfig(kind="weighted", weights={"success": 1.0, "format": 0.1, "tool": -0.5},
                       scale={"tool": 10.0}, clip=(-0.2, 1.0))
    # tool calls 4 → c̃ = 0.4; R = 1 + 0.1 − 0.2 = 0.9
    assert compose_reward(V("pass", success=1, format=1, tool=4), cfg)[0] == pytest.approx(0.9)
    # tool calls 1000 → saturates at 1: R = 0 + 0 − 0.5 → clipped to −0.2
    assert compose_reward(V("fail", tool=1000), cfg)[0] == pytest.approx(-0.2)


def test_tiered_eq67():
    cfg = RewardConfig(kind="tiered", scale={"cost": 100.0},
                       tiers={"success_costs": {"cost": 0.5},
                              "failure_penalties": {"invalid": 0.25, "danger": 1.0}})
    assert compose_reward(V("pass", cost=40), cfg)[0] == pytest.approx(1 - 0.5 * 0.4)
    assert compose_reward(V("fail", cost=40, invalid=2, danger=1), cfg)[0] == \
        pytest.approx(-(0.25 * 2 + 1.0))
    # success always beats failure however costly (the "do nothing" trap of tiered rewards, docs/architecture.md §4)
    assert compose_reward(V("pass", cost=1e9), cfg)[0] > compose_reward(V("fail"), cfg)[0]


def test_gates_zero_not_penalty():
    cfg = RewardConfig(kind="weighted", weights={"success": 1.0, "len": -1.0},
                       gates=("safe",))
    assert compose_reward(V("pass", success=1, safe=1, len=0.5), cfg) == (0.5, True)
    assert compose_reward(V("pass", success=1, safe=0, len=5), cfg) == (0.0, True)
    assert compose_reward(V("pass", success=1, len=5), cfg) == (0.0, True)  # missing = closed


def test_config_validation_and_hash():
    for bad in [dict(kind="exp"), dict(unknown_policy="zero"), dict(kind="partial"),
                dict(kind="weighted", weights={"a": float("nan")}), dict(clip=(1, 0)),
                dict(scale={"c": 0}), dict(tiers={"bogus": 1}), dict(max_env_retries=-1)]:
        with pytest.raises(ValueError):
            RewardConfig(**bad)
    a = RewardConfig(kind="weighted", weights={"x": 1.0, "y": 2.0}, gates=["g"])
    b = RewardConfig(kind="weighted", weights={"y": 2, "x": 1}, gates=("g",))
    assert a.hash() == b.hash() and len(a.hash()) == 64
    assert a.hash() != RewardConfig(kind="weighted", weights={"x": 1.0, "y": 2.5}).hash()
    assert RewardConfig.from_dict(a.to_dict()) == a
    with pytest.raises(ValueError, match="unknown field"):
        RewardConfig.from_dict({"kind": "binary", "wieghts": {}})


def test_shaped_rewards_eq63_and_telescoping():
    rng = np.random.default_rng(0)
    r = rng.normal(size=(3, 5)).astype(np.float32)
    phi = rng.normal(size=(3, 6)).astype(np.float32)
    phi[:, -1] = 0.0  # terminal potential 0
    g = 0.9
    out = np.asarray(shaped_rewards(r, phi, g))
    ref = np.array([[r[b, t] + g * phi[b, t + 1] - phi[b, t] for t in range(5)] for b in range(3)])
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)
    # discounted return shifts by −Φ(s_0) only: the ranking of trajectories is unchanged
    disc = g ** np.arange(5)
    np.testing.assert_allclose((out * disc).sum(-1), (r * disc).sum(-1) - phi[:, 0], rtol=1e-5,
                               atol=1e-5)


def test_cache_key_and_counters():
    t1 = TaskSpec(task_id="a", prompt="p", task_type="code", reference_answer={"x": 1})
    t1b = TaskSpec(task_id="a", prompt="p", task_type="code", reference_answer={"x": 2})
    kw = dict(env_version="e1", verifier_version="v1", reward_config_hash="h")
    base = cache_key(t1, "out", **kw)
    assert base == cache_key(t1, "out", **kw)
    # never by output alone: every other part of docs/verifiers.md §4 changes the key
    assert base != cache_key(t1b, "out", **kw)
    assert base != cache_key(t1, "out", **{**kw, "env_version": "e2"})
    assert base != cache_key(t1, "out", **{**kw, "verifier_version": "v2"})
    assert base != cache_key(t1, "out", **{**kw, "reward_config_hash": "h2"})
    c = RewardCache(max_entries=2)
    assert c.get(t1, "out", **kw) is None
    assert c.put(t1, "out", V("pass"), **kw)
    assert c.get(t1, "out", **kw).decision == "pass"
    assert c.get(t1b, "out", **kw) is None
    assert not c.put(t1, "o2", env_error("x"), **kw)  # env_error is not cached
    assert not c.put(t1, "o3", Verdict("unknown", evidence={"timeout_class": "verifier_service"}),
                     **kw)
    assert (c.hits, c.misses) == (1, 2)
    c.put(t1, "o4", V("fail"), **kw)
    c.put(t1, "o5", V("fail"), **kw)
    assert len(c) == 2 and c.get(t1, "out", **kw) is None  # LRU evicted the oldest


def test_timeout_taxonomy():
    assert TIMEOUT_CLASSES == ("generation", "tool_call", "candidate_program",
                               "verifier_service", "environment_init", "infrastructure")
    with pytest.raises(ValueError):
        env_error("x", timeout_class="slow")
