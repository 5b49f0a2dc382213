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
    (lambda c: setattr(c.pivot, "m", 8), r"config.pivot.m = 8 does not apply: collector is 'groups'"),
    (lambda c: setattr(c.algorithm, "value_clip", 0.5), r"algorithm.value_clip = 0.5 does not apply: algorithm 'grpo' has no critic"),
    (lambda c: (setattr(c.algorithm, "name", "ppo"), setattr(c.algorithm, "advantage", "grpo")),
     r"algorithm.advantage must be '' or 'gae' for the critic algorithm 'ppo'"),
    (lambda c: (setattr(c.kl, "mode", "loss"), setattr(c.kl, "adaptive", True)), r"kl.coef is 0"),
    (lambda c: setattr(c.task, "curriculum", "variance"), r"needs a fixed task pool: set config.task.pool_size"),
    (lambda c: setattr(c.algorithm, "name", "pivotrl"), r"task.pool_size must be >= 1 for the pivots collector"),
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
    (lambda c: setattr(c.reward, "executor", "cluster"), r"reward.executor must be one of \('inline', 'thread', 'process', 'ray'\)"),
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


SHIPPED = ["quickstart", "grpo", "rloo", "reinforce", "ppo", "pivotrl", "agent_grpo", "sao"]


@pytest.mark.parametrize("name", SHIPPED)
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


def test_every_base_field_is_documented():
    """Every leaf assignment in configs/base.py carries a comment (on its line or just above)."""
    import inspect
    import re

    lines = inspect.getsource(base).splitlines()
    undocumented = []
    for i, line in enumerate(lines):
        m = re.match(r"\s*c\.(\w+(?:\.\w+)*) = (?!ml_collections.ConfigDict\(\))", line)
        if m and "#" not in line and not lines[i - 1].strip().startswith("#"):
            undocumented.append(m.group(1))
    assert not undocumented, undocumented


def test_inactive_refinements_of_a_switched_off_feature_are_accepted():
    c = base.get_config()
    c.kl.estimator = "k1"          # kl.mode is "none": inactive, not an error
    c.train.sft_batch_size = 7     # train.sft_steps is 0
    c.rollout.queue_size = 4       # rollout.asynchronous is off
    validate_config(c)
    from rlvr.train.config import inapplicable

    na = inapplicable(c)
    assert {"kl.estimator", "train.sft_batch_size", "rollout.queue_size"} <= set(na)
    assert not {"kl.estimator", "train.sft_batch_size"} & set(inapplicable(c, strict_only=True))


def test_inapplicable_field_at_default_is_accepted_and_named_when_changed():
    c = base.get_config()
    c.algorithm.name = "ppo"
    validate_config(c)  # dual_clip applies (clip objective); pivot.* keep defaults
    c.algorithm.name = "sao"  # trust-region objective: dual clip does not apply
    c.algorithm.dual_clip = 2.0
    with pytest.raises(ConfigError, match=r"algorithm.dual_clip = 2.0 does not apply: policy loss is 'trust_region'"):
        validate_config(c)


def test_model_dtype_accepts_jax_dtypes():
    import jax.numpy as jnp

    c = base.get_config()
    c.model.dtype = jnp.bfloat16
    validate_config(c)
    c.model.dtype = "float16"
    with pytest.raises(ConfigError, match=r"config.model.dtype must be one of \('float32', 'bfloat16'\)"):
        validate_config(c)


def _float_fields(c, prefix=""):
    out = []
    for k, v in c.items():
        if isinstance(v, ml_collections.ConfigDict):
            out += _float_fields(v, f"{prefix}{k}.")
        elif isinstance(v, float):
            out.append(prefix + k)
    return out


def _set(c, path, value):
    *sections, name = path.split(".")
    for s in sections:
        c = c[s]
    setattr(c, name, value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_every_float_field_refuses_non_finite_values(value):
    fields = _float_fields(base.get_config())
    assert len(fields) >= 20 and "optimizer.learning_rate" in fields
    for path in fields:
        c = base.get_config()
        _set(c, path, value)
        with pytest.raises(ConfigError, match=rf"config\.{path} must be a finite number, got {value}"):
            validate_config(c)


def test_non_finite_values_in_tuples_and_free_form_fields_are_named():
    c = base.get_config()
    c.task.names, c.task.weights = ("arithmetic", "arithmetic"), (1.0, float("nan"))
    c.task.kwargs.difficulty = float("inf")
    with pytest.raises(ConfigError) as e:
        validate_config(c)
    assert r"config.task.weights[1] must be a finite number, got nan" in str(e.value)
    assert r"config.task.kwargs.difficulty must be a finite number, got inf" in str(e.value)


def test_allow_changes_must_name_fields_or_sections():
    c = base.get_config()
    c.checkpoint.allow_changes = ("optimizer.learning_rate", "optimizer", "model.lora.rank")
    validate_config(c)
    c.checkpoint.allow_changes = ("optimizer.learning_rat",)
    with pytest.raises(ConfigError, match=r"allow_changes must name config fields or sections.*"
                                          r"optimizer.learning_rat"):
        validate_config(c)


def test_shipped_sao_resolves_to_the_strict_token_trust_region():
    """SAO's objective is the token-level double-sided trust region (masking tokens outside it),
    not PPO's clipped surrogate; PivotRL's is the turn-level sequence clip."""
    import importlib

    from rlvr.train.config import resolved

    sao = importlib.import_module("configs.sao").get_config()
    assert resolved(sao)["policy_loss"] == "trust_region"
    assert resolved(sao)["advantage"] == "gae" and sao.algorithm.skip_observations
    plain = importlib.import_module("configs.base").get_config()
    plain.algorithm.name = "sao"  # the algorithm's own default, without the shipped config
    assert resolved(plain)["policy_loss"] == "trust_region"
    piv = importlib.import_module("configs.pivotrl").get_config()
    assert resolved(piv)["policy_loss"] == "sequence_clip"
    assert resolved(importlib.import_module("configs.quickstart").get_config())["policy_loss"] == "clip"
