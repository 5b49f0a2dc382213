"""Mixtures of multi-turn kits: tasks of every kit, each routed to its own environment,
verifier, turn verifiers and demonstrations; a mixture trains through the loop; mixtures that
cannot work are refused naming task.names."""

import json

import pytest

from rlvr.envs.base import EnvSnapshot
from rlvr.tasks.episode_mixture import MixedEnvironment, env_name_of
from rlvr.tasks.kit import build_kit, get_kit, turn_task
from rlvr.tasks.registry import heldout_tasks


@pytest.fixture(scope="module")
def kit():
    return build_kit(["kv_agent", "shop"], [1.0, 3.0])


def test_tasks_come_from_every_kit_by_weight(kit):
    tasks = kit.source.sample(200, seed=0)
    envs = [env_name_of(t) for t in tasks]
    assert set(envs) == {"kv_store", "shop"}
    assert 0.6 < envs.count("shop") / len(envs) < 0.9  # weight 3 of 4
    held = heldout_tasks(kit.source, 40, 0)
    assert len(held) == 40 and {env_name_of(t) for t in held} == {"kv_store", "shop"}


def test_each_task_runs_in_its_own_environment_and_is_judged_by_its_kit(kit):
    parts = {"kv_store": get_kit("kv_agent"), "shop": get_kit("shop")}
    for task in kit.source.sample(6, seed=1):
        own = parts[env_name_of(task)]
        env = kit.env_factory()
        assert isinstance(env, MixedEnvironment)
        env.reset(task, seed=task.random_seed)
        assert env.name == env_name_of(task)
        turns = kit.demonstration(task)
        assert kit.render_episode(task, turns) == own.render_episode(task, own.demonstration(task))
        for turn in turns:
            env.step(turn.action.rstrip("\n"))
        out = kit.episode_output(env)
        assert kit.verifier.verify(task, out).decision == "pass"
        assert kit.verifier.verify(task, out).verifier_version == \
            own.verifier.verify(task, out).verifier_version
        # a wrong final state fails: the first state again
        fresh = kit.env_factory()
        fresh.reset(task, seed=task.random_seed)
        assert kit.verifier.verify(task, kit.episode_output(fresh)).decision == "fail"


def test_turn_states_restore_and_turn_verifiers_route_by_environment(kit):
    for task in kit.source.sample(4, seed=2):
        env = kit.env_factory()
        env.reset(task, seed=task.random_seed)
        turns = kit.demonstration(task)
        snap = env.snapshot()
        restored = kit.env_factory()
        restored.restore(EnvSnapshot.from_dict(json.loads(json.dumps(snap.to_dict()))))
        assert restored.state_hash() == env.state_hash()
        tt = turn_task(task, snapshot=snap, turn_index=0, reference_action=turns[0].action,
                       key=task.task_id + "/0")
        for mode in ("functional", "exact"):
            assert kit.turn_verifiers[mode].verify(tt, turns[0].action).decision == "pass"


@pytest.mark.parametrize("names,match", [
    (["kv_agent", "arithmetic"], r"task.names: a mixture holds single-turn kits or multi-turn"),
    (["shop", "shop"], r"both run environment 'shop'"),
])
def test_mixtures_that_cannot_work_are_refused_naming_task_names(names, match):
    with pytest.raises(ValueError, match=match):
        build_kit(names)


def test_a_mixture_of_multi_turn_kits_trains_one_step(tmp_path):
    from tests.train.tiny import run_tiny, tiny_agent_config

    c = tiny_agent_config("agent_grpo", train__num_steps=1, eval__every=1, checkpoint__every=1)
    c.task.names = ("kv_agent", "shop")
    c.task.weights = (1.0, 1.0)
    c.task.kwargs = {"demo_style": "diverse"}
    r, result = run_tiny(c, tmp_path)
    assert result["step"] == 1
    rows = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
    assert any("advantage/mean" in x for x in rows)
    envs = {env_name_of(t) for t in r.collector.sampler.draw(0, 16)}
    assert envs == {"kv_store", "shop"}
