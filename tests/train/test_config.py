"""Config validation: unknown, ill-typed and inconsistent settings fail naming the field."""

import ml_collections
import pytest

from configs import base, quickstart
from rlvr.train.config import ConfigError, validate_config


def test_base_and_quickstart_valid():
    validate_config(base.get_config())
    validate_config(quickstart.get_config())


def test_locked_config_rejects_unknown_key_and_bad_type():
    c = base.get_config()
    with pytest.raises(AttributeError, match="clip_hihg"):
        c.algorithm.clip_hihg = 0.3
    with pytest.raises(TypeError, match="num_steps"):
        c.train.num_steps = "ten"


@pytest.mark.parametrize("edit,pattern", [
    (lambda c: setattr(c.algorithm, "name", "ppo2"), r"algorithm.name must be a registered algorithm"),
    (lambda c: setattr(c.kl, "estimator", "k4"), r"kl.estimator must be one of \('k1', 'k2', 'k3'\)"),
    (lambda c: setattr(c.algorithm, "aggregation", "mean"), r"algorithm.aggregation must be one of"),
    (lambda c: setattr(c.algorithm, "group_size", 1), r"group_size must be >= 2 for grpo"),
    (lambda c: setattr(c.algorithm, "advantage", "gae"), r"needs a critic; algorithm 'grpo' is critic-free"),
    (lambda c: setattr(c.algorithm, "clip_low", -0.1), r"algorithm.clip_low must be >= 0"),
    (lambda c: setattr(c.algorithm, "dual_clip", 0.5), r"dual_clip must be 0 \(off\) or > 1"),
    (lambda c: setattr(c.train, "num_minibatches", 3), r"divisible by train.num_minibatches"),
    (lambda c: setattr(c.task, "weights", (0.5, 0.5)), r"one weight per task name"),
    (lambda c: setattr(c.eval, "pass_k", (1, 8)), r"pass_k values must be in"),
    (lambda c: setattr(c.kl, "mode", "reward"), r"kl.coef is 0"),
    (lambda c: setattr(c.reward, "executor", "ray"), r"reward.executor must be one of \('inline', 'thread', 'process'\)"),
    (lambda c: setattr(c.reward, "num_workers", 0), r"reward.num_workers must be >= 1"),
])
def test_inconsistent_settings_named(edit, pattern):
    c = base.get_config()
    edit(c)
    with pytest.raises(ConfigError, match=pattern):
        validate_config(c)


def test_unknown_key_in_unlocked_dict_named():
    d = base.get_config().to_dict()
    d["algorithm"]["clip_hihg"] = 0.3
    d["train"]["num_steps"] = "x"
    c = ml_collections.ConfigDict(d)
    with pytest.raises(ConfigError) as e:
        validate_config(c)
    assert "unknown config key 'algorithm.clip_hihg'" in str(e.value)
    assert "config.train.num_steps must be of type int" in str(e.value)


@pytest.mark.parametrize("name", ["quickstart", "grpo", "rloo", "reinforce", "ppo"])
def test_experiment_configs_valid(name):
    import importlib

    validate_config(importlib.import_module(f"configs.{name}").get_config())


def test_registered_algorithm_validates_and_critic_check_follows_the_class():
    from rlvr.algorithms import GRPO, PPO, register_algorithm
    from rlvr.algorithms import _REGISTRY

    class MyGRPO(GRPO):
        name = "my_grpo_for_config_test"

    class MyCritic(PPO):
        name = "my_ppo_for_config_test"

    register_algorithm(MyGRPO.name, MyGRPO)
    register_algorithm(MyCritic.name, MyCritic)
    try:
        c = base.get_config()
        c.algorithm.name = MyGRPO.name
        validate_config(c)
        c.algorithm.advantage = "gae"
        with pytest.raises(ConfigError, match=r"critic-free \(critic algorithms: .*my_ppo_for_config_test"):
            validate_config(c)
        c.algorithm.name = MyCritic.name
        validate_config(c)
    finally:
        _REGISTRY.pop(MyGRPO.name)
        _REGISTRY.pop(MyCritic.name)
