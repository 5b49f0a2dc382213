"""Configuration validation: bad settings fail at start with a message naming the field.

`validate_config(config)` checks, against the shared base (`configs/base.py`):
    * unknown keys (the base ConfigDict is locked, but an experiment may build its own dict),
    * ill-typed values (type of the base default; ints are accepted where floats are expected),
    * values outside the allowed set / range (the message lists what is allowed),
    * inconsistent settings (group_size 1 with GRPO/RLOO, GAE with a critic-free algorithm, ...).
It raises `ConfigError` (a ValueError) listing every problem found, not just the first.
"""

from __future__ import annotations

from typing import Any

import ml_collections

from rlvr.algorithms import get_algorithm, registered_algorithms

ADVANTAGES = ("", "grpo", "rloo", "reinforce", "gae")
# Algorithms with their own multi-turn training loop (launch.py dispatches on these names; each
# loop validates its own config section): name -> module with `run(config, workdir)`.
AGENT_LOOPS = {
        "pivotrl": "rlvr.train.pivotrl_loop",
        "agent_grpo": "rlvr.train.agent_grpo_loop",
        "sao": "rlvr.train.sao_loop",
}
CHOICES = {
        "model.dtype": ("float32", "bfloat16"),
        "tokenizer.kind": ("char",),
        "task.curriculum": ("none", "variance", "learning_progress"),
        "algorithm.advantage": ADVANTAGES,
        "algorithm.scale_rewards": ("group", "none"),
        "algorithm.aggregation": ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"),
        "optimizer.name": ("adamw", "adam", "sgd"),
        "optimizer.schedule": ("constant", "cosine"),
        "kl.mode": ("none", "reward", "loss"),
        "kl.estimator": ("k1", "k2", "k3"),
        "reward.unknown_as": ("fail", "mask"),
        "reward.executor": ("inline", "thread", "process"),
}
# field -> (lower bound, inclusive?) ; values must be >= / > the bound.
BOUNDS = {
        "model.num_layers": (1, True), "model.d_model": (1, True), "model.num_heads": (1, True),
        "model.num_kv_heads": (1, True), "model.d_ff": (1, True), "model.max_seq_len": (2, True),
        "model.vocab_size": (0, True),
        "task.curriculum_alpha": (0.0, True), "task.curriculum_pool": (1, True),
        "task.curriculum_floor": (0.0, True),
        "algorithm.group_size": (1, True), "algorithm.adv_eps": (0.0, True),
        "algorithm.clip_low": (0.0, True), "algorithm.clip_high": (0.0, True),
        "algorithm.dual_clip": (0.0, True), "algorithm.entropy_coef": (0.0, True),
        "algorithm.gamma": (0.0, True), "algorithm.gae_lambda": (0.0, True),
        "algorithm.value_coef": (0.0, True), "algorithm.value_clip": (0.0, True),
        "algorithm.critic_warmup_steps": (0, True), "algorithm.critic_learning_rate": (0.0, False),
        "algorithm.critic_updates": (1, True), "algorithm.dynamic_sampling_max_rounds": (0, True),
        "sampling.prompts_per_step": (1, True), "sampling.max_new_tokens": (1, True),
        "sampling.temperature": (0.0, False), "sampling.top_p": (0.0, False), "sampling.top_k": (0, True),
        "optimizer.learning_rate": (0.0, True), "optimizer.warmup_steps": (0, True),
        "optimizer.weight_decay": (0.0, True), "optimizer.max_grad_norm": (0.0, True),
        "train.num_steps": (0, True), "train.epochs": (1, True), "train.num_minibatches": (1, True),
        "train.num_microbatches": (1, True), "train.sft_steps": (0, True),
        "train.sft_batch_size": (1, True), "train.sft_learning_rate": (0.0, True),
        "kl.coef": (0.0, True), "kl.target": (0.0, True), "kl.horizon": (0.0, False),
        "reward.clip": (0.0, True), "reward.num_workers": (1, True), "reward.timeout_s": (0.0, False),
        "reward.max_retries": (0, True),
        "eval.every": (0, True), "eval.num_tasks": (0, True), "eval.samples_per_task": (1, True),
        "eval.temperature": (0.0, False),
        "checkpoint.every": (0, True), "checkpoint.max_to_keep": (1, True), "logging.every": (1, True),
        "mesh.fsdp": (1, True), "mesh.tensor": (1, True), "mesh.num_processes": (1, True),
        "mesh.process_id": (0, True),
}
FREE_FORM = ("task.kwargs",)  # subtrees forwarded verbatim to another component.


class ConfigError(ValueError):
    """Raised when a config is invalid; the message lists every offending field."""


def _flatten(cfg, prefix=""):
    out = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if key in FREE_FORM:
            out[key] = v
        elif isinstance(v, (ml_collections.ConfigDict, dict)):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _type_ok(default: Any, value: Any) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, str):
        return isinstance(value, str)
    if isinstance(default, tuple):
        return isinstance(value, (tuple, list))
    return True


def validate_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Checks `config` against the base schema and consistency rules; returns it unchanged.

    Raises:
        ConfigError: naming each bad field with its value and the allowed values.
    """
    from configs import base  # the schema: one place defines fields and their types.

    errors = []
    ref = _flatten(base.get_config())
    got = _flatten(config)
    for key in sorted(set(got) - set(ref)):
        errors.append(f"unknown config key {key!r}; known keys in that section: "
                                    f"{sorted(k for k in ref if k.rsplit('.', 1)[0] == key.rsplit('.', 1)[0])}")
    for key in sorted(set(ref) - set(got)):
        errors.append(f"missing config key {key!r}")
    for key, value in got.items():
        if key not in ref or key in FREE_FORM:
            continue
        if not _type_ok(ref[key], value):
            errors.append(f"config.{key} must be of type {type(ref[key]).__name__}, got {value!r}")
            continue
        if key in CHOICES and value not in CHOICES[key]:
            errors.append(f"config.{key} must be one of {CHOICES[key]}, got {value!r}")
        if key in BOUNDS:
            lo, inclusive = BOUNDS[key]
            if (value < lo) if inclusive else (value <= lo):
                errors.append(f"config.{key} must be {'>=' if inclusive else '>'} {lo}, got {value!r}")
    if errors:  # cross-field checks assume well-typed values
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))

    a = config.algorithm
    known = registered_algorithms()
    if a.name not in known:
        errors.append(f"config.algorithm.name must be a registered algorithm {known} (or one of "
                      f"the multi-turn loops {tuple(AGENT_LOOPS)}), got {a.name!r}")
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
    uses_critic = get_algorithm(a.name).uses_critic
    adv = a.advantage or {"grpo": "grpo", "rloo": "rloo", "reinforce": "reinforce", "ppo": "gae"}.get(a.name, "")
    if adv in ("grpo", "rloo") and a.group_size < 2:
        errors.append(f"config.algorithm.group_size must be >= 2 for {adv} advantages "
                                    f"(group baseline needs several samples per prompt), got {a.group_size}")
    if adv == "gae" and not uses_critic:
        critics = tuple(n for n in known if get_algorithm(n).uses_critic)
        errors.append(f"config.algorithm.advantage='gae' needs a critic; algorithm {a.name!r} is "
                                    f"critic-free (critic algorithms: {critics})")
    if a.dual_clip and a.dual_clip <= 1.0:
        errors.append(f"config.algorithm.dual_clip must be 0 (off) or > 1, got {a.dual_clip}")
    if a.clip_low >= 1.0:
        errors.append(f"config.algorithm.clip_low must be < 1 (ratio bound 1-clip_low > 0), got {a.clip_low}")
    if a.gamma > 1.0 or a.gae_lambda > 1.0:
        errors.append(f"config.algorithm.gamma and gae_lambda must be in [0, 1], got {a.gamma}, {a.gae_lambda}")
    if a.dynamic_sampling and a.group_size < 2:
        errors.append("config.algorithm.dynamic_sampling needs group_size >= 2 (it drops all-equal groups)")
    if not 0.0 <= config.task.curriculum_ema < 1.0:
        errors.append(f"config.task.curriculum_ema must be in [0, 1), got {config.task.curriculum_ema}")
    if len(config.task.names) == 0:
        errors.append("config.task.names must name at least one task source")
    if len(config.task.names) != len(config.task.weights):
        errors.append(f"config.task.weights needs one weight per task name: names {tuple(config.task.names)}, "
                                    f"weights {tuple(config.task.weights)}")
    elif any(w < 0 for w in config.task.weights) or sum(config.task.weights) <= 0:
        errors.append(f"config.task.weights must be >= 0 with a positive sum, got {tuple(config.task.weights)}")
    batch = config.sampling.prompts_per_step * a.group_size
    split = config.train.num_minibatches * config.train.num_microbatches
    if batch % split:
        errors.append(f"rollout batch prompts_per_step*group_size = {batch} must be divisible by "
                                    f"train.num_minibatches*train.num_microbatches = {split}")
    if config.kl.mode != "none" and config.kl.coef == 0.0 and not config.kl.adaptive:
        errors.append("config.kl.mode is set but kl.coef is 0 and kl.adaptive is False: set a coefficient or mode='none'")
    if config.kl.adaptive and config.kl.mode == "none":
        errors.append("config.kl.adaptive needs kl.mode 'reward' or 'loss'")
    if config.sampling.top_p > 1.0:
        errors.append(f"config.sampling.top_p must be in (0, 1], got {config.sampling.top_p}")
    if any(k < 1 or k > config.eval.samples_per_task for k in config.eval.pass_k):
        errors.append(f"config.eval.pass_k values must be in [1, eval.samples_per_task="
                                    f"{config.eval.samples_per_task}], got {tuple(config.eval.pass_k)}")
    m = config.mesh
    if m.data == 0 or m.data < -1:
        errors.append(f"config.mesh.data must be -1 (all remaining devices) or >= 1, got {m.data}")
    if m.process_id >= m.num_processes:
        errors.append(f"config.mesh.process_id must be < mesh.num_processes={m.num_processes}, got {m.process_id}")
    if config.model.num_heads % config.model.num_kv_heads:
        errors.append(f"config.model.num_heads ({config.model.num_heads}) must be a multiple of "
                                    f"model.num_kv_heads ({config.model.num_kv_heads})")
    if config.model.d_model % config.model.num_heads:
        errors.append(f"config.model.d_model ({config.model.d_model}) must be divisible by "
                                    f"model.num_heads ({config.model.num_heads})")
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
    return config


def advantage_kind(config) -> str:
    """The advantage estimator in use: the explicit override or the algorithm's default."""
    return config.algorithm.advantage or {
            "grpo": "grpo", "rloo": "rloo", "reinforce": "reinforce", "ppo": "gae"}[config.algorithm.name]
