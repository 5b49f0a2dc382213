"""Multi-turn tasks from a file (`episodes:PATH`): the registered kit running the records'
environment judges and demonstrates them; bad lines are named; files mix and train like the
other kits."""

import json

import pytest

from rlvr.tasks import kv_agent, shop
from rlvr.tasks.kit import build_kit, get_kit
from rlvr.tasks.loader import TaskFileError


def env_name_of(task):
    return task.environment_snapshot["env"]


def _write(path, tasks, patch=None):
    with open(path, "w") as f:
        for i, t in enumerate(tasks):
            rec = t.to_json()
            if patch and i in patch:
                patch[i](rec)
            f.write(json.dumps(rec) + "\n")
    return str(path)


def test_file_tasks_get_their_environments_kit(tmp_path):
    tasks = kv_agent.generate(6, seed=3) + kv_agent.generate(2, split="eval", seed=3)
    kit = get_kit("episodes:" + _write(tmp_path / "kv.jsonl", tasks))
    assert kit.multi_turn and kit.name.startswith("episodes:")
    drawn = kit.source.sample(4, seed=0)
    ids = {t.task_id for t in tasks}
    assert {t.task_id for t in drawn} <= ids
    assert len(kit.source.eval_set("eval", 2)) == 2
    for t in drawn:  # the kit's oracle solves the file's task in the kit's environment
        env = kit.env_factory()
        env.reset(t, seed=t.random_seed)
        for turn in kit.demonstration(t):
            env.step(turn.action.rstrip("\n"))
        assert kit.verifier.verify(t, kit.episode_output(env)).decision == "pass"


def test_bad_lines_are_named_with_the_problem(tmp_path):
    tasks = kv_agent.generate(4, seed=4)

    def tamper(rec):
        rec["environment_snapshot"]["sha256"] = "0" * 64

    def other_env(rec):
        rec["environment_snapshot"] = shop.generate(1, seed=1)[0].environment_snapshot

    path = _write(tmp_path / "bad.jsonl", tasks, {1: tamper, 3: other_env})
    with pytest.raises(TaskFileError) as err:
        get_kit("episodes:" + path)
    text = str(err.value)
    assert "line 2" in text and "environment_snapshot" in text
    assert "line 4" in text and "must run 'kv_store'" in text
    assert "line 1" not in text and "line 3" not in text


def test_an_environment_no_kit_runs_is_refused_naming_the_environments(tmp_path):
    def alien(rec):
        rec["environment_snapshot"]["env"] = "warehouse"

    path = _write(tmp_path / "alien.jsonl", kv_agent.generate(1, seed=0), {0: alien})
    with pytest.raises(ValueError, match=r"no registered multi-turn kit runs environment "
                                         r"'warehouse' \(environments: .*kv_store.*shop"):
        get_kit("episodes:" + path)


def test_two_files_mix_and_train_one_step(tmp_path):
    from tests.train.tiny import run_tiny, tiny_agent_config

    kv = _write(tmp_path / "kv.jsonl", kv_agent.generate(8, seed=5))
    sh = _write(tmp_path / "shop.jsonl", shop.generate(8, seed=5, difficulty="small"))
    names = ("episodes:" + kv, "episodes:" + sh)
    kit = build_kit(names)
    assert {env_name_of(t) for t in kit.source.sample(30, 0)} == {"kv_store", "shop"}
    c = tiny_agent_config("agent_grpo", train__num_steps=1, eval__every=0, eval__num_tasks=0,
                          checkpoint__every=1)
    c.task.names, c.task.weights, c.task.kwargs = names, (1.0, 1.0), {}
    r, result = run_tiny(c, tmp_path / "run")
    assert result["step"] == 1


def test_a_mixtures_environment_reports_its_tool_call_latency():
    """The continuous scheduler reads `busy_until`: a mixture's environment must pass on its
    current environment's, or a slow call would block the scheduler's thread instead."""
    import dataclasses
    import time

    from rlvr.envs.kv_store import KVStoreEnv
    from rlvr.envs.shop import ShopEnv
    from rlvr.tasks.kit import KIT_KEY, RoutingEnvironment

    env = RoutingEnvironment({"kv_agent": KVStoreEnv, "shop": lambda: ShopEnv(latency_s=0.3)})
    task = shop.generate(1, seed=0, difficulty="small")[0]
    task = dataclasses.replace(task, public_metadata={**task.public_metadata, KIT_KEY: "shop"})
    env.reset(task, seed=task.random_seed)
    assert env.busy_until <= time.monotonic()
    env.step("get a")
    assert env.busy_until > time.monotonic()
