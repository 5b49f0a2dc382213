"""Guards against one-line bugs the rest of the default suite would let through."""

import dataclasses

import pytest

from rlvr.records.verdict import Verdict
from rlvr.train.judge import reward_config_from
from rlvr.verifiers.compose import compose_reward
from tests.train.tiny import tiny_config


def test_reward_clip_is_symmetric_and_keeps_negative_rewards():
    """reward.clip = c clips the composed reward to [-c, c]: a cost-weighted fail keeps its
    negative reward (floored at -c, not at 0) and a large pass is capped at c."""
    rc = reward_config_from(tiny_config(reward__clip=0.5))
    assert rc.clip == (-0.5, 0.5)
    costs = dataclasses.replace(rc, kind="weighted", pass_weight=3.0, weights={"time_cost": -2.0})
    fail = Verdict("fail", components={"time_cost": 0.1})
    assert compose_reward(fail, costs) == pytest.approx((-0.2, True))
    slow_fail = Verdict("fail", components={"time_cost": 1.0})
    assert compose_reward(slow_fail, costs) == (-0.5, True)
    assert compose_reward(Verdict("pass", components={"time_cost": 0.0}), costs) == (0.5, True)
    assert reward_config_from(tiny_config(reward__clip=0.0)).clip is None  # 0 turns clipping off
