"""The config schema's rules: every setting checked at start, every setting read or refused.

`validate_config(config)` checks a config against the schema of `configs/base.py`:
  * unknown and missing keys (the base ConfigDict is locked, but a config may be built from a dict);
  * types (the base default's type; ints are accepted where floats are expected);
  * allowed values (`CHOICES`) and ranges (`BOUNDS`), declaratively, naming what is allowed;
  * finiteness: no field anywhere in the config (nested sections, tuples, task.kwargs) may be
    NaN or ±inf;
  * cross-field consistency (group_size 1 with group advantages, GAE without a critic, ...);
  * applicability (`inapplicable`): a field that does not apply to the chosen algorithm,
    collector or task kit (e.g. `pivot.m` with GRPO, `algorithm.value_clip` without a critic) must
    keep its default, else the run is refused naming the field and why it does not apply. A
    field that only refines a feature switched off in this config (`kl.estimator` with
    `kl.mode = "none"`, `train.sft_batch_size` with `train.sft_steps = 0`) is inactive: it may
    keep any value and is not read.
It raises `ConfigError` (a ValueError) listing every problem found, not just the first.

Every applicable field is read by the run; `ConfigReads` wraps a config and records which
fields were read, so a test can check that each field of each shipped config is read or refused.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import ml_collections

from rlvr.algorithms import get_algorithm, registered_algorithms
from rlvr.algorithms.base import POLICY_LOSSES, SEQUENCE_LOSSES
from rlvr.core.importance import IS_CORRECTIONS, IS_LEVELS
from rlvr.core.losses import AGGREGATIONS
from rlvr.models.config import dtype_name
from rlvr.models.lora import QUANTIZATIONS, TARGETS, split_fused_targets
from rlvr.models.scoring import LOGPROB_IMPLS

ADVANTAGES = ("", "grpo", "rloo", "reinforce", "gae")
COLLECTORS = ("", "groups", "pivots")
CHOICES = {
    "model.attention": ("xla", "cudnn"),
    "model.lora.quantize": QUANTIZATIONS,
    "tokenizer.kind": ("char", "hf"),
    "task.curriculum": ("none", "variance", "learning_progress"),
    "algorithm.advantage": ADVANTAGES,
    "algorithm.policy_loss": ("",) + POLICY_LOSSES,
    "algorithm.scale_rewards": ("group", "none"),
    "algorithm.aggregation": AGGREGATIONS,
    "algorithm.is_correction": IS_CORRECTIONS,
    "algorithm.is_level": IS_LEVELS,
    "rollout.collector": COLLECTORS,
    "rollout.arrival": ("batch", "episode"),
    "rollout.env_executor": ("local", "ray"),
    "rollout.clock": ("real", "modelled"),
    "pivot.candidates": ("demo", "demo+rollout"),
    "pivot.selection": ("filter", "variance", "all", "random"),
    "pivot.reward": ("functional", "exact"),
    "agent.tool_format": ("auto", "hermes", "llama3"),
    "optimizer.name": ("adamw", "adam", "sgd"),
    "train.logprob_impl": LOGPROB_IMPLS,
    "optimizer.schedule": ("constant", "cosine"),
    "kl.mode": ("none", "reward", "loss"),
    "kl.estimator": ("k1", "k2", "k3"),
    "reward.unknown_as": ("fail", "mask"),
    "reward.executor": ("inline", "thread", "process", "ray"),
}
# field -> (lower bound, inclusive?, upper bound or None, inclusive?)
BOUNDS = {
    "seed": (0, True, None, True),
    "model.num_layers": (1, True, None, True), "model.d_model": (1, True, None, True),
    "model.num_heads": (1, True, None, True), "model.num_kv_heads": (1, True, None, True),
    "model.d_ff": (1, True, None, True), "model.max_seq_len": (2, True, None, True),
    "model.vocab_size": (0, True, None, True),
    "model.lora.rank": (0, True, None, True), "model.lora.alpha": (0.0, False, None, True),
    "model.lora.dropout": (0.0, True, 1.0, False),
    "task.pool_size": (0, True, None, True),
    "task.curriculum_alpha": (0.0, True, None, True), "task.curriculum_ema": (0.0, True, 1.0, False),
    "task.curriculum_floor": (0.0, True, None, True),
    "algorithm.group_size": (1, True, None, True), "algorithm.adv_eps": (0.0, True, None, True),
    "algorithm.clip_low": (0.0, True, 1.0, False), "algorithm.clip_high": (0.0, True, None, True),
    "algorithm.dual_clip": (0.0, True, None, True), "algorithm.entropy_coef": (0.0, True, None, True),
    "algorithm.baseline_momentum": (0.0, True, 1.0, False),
    "algorithm.gamma": (0.0, True, 1.0, True), "algorithm.gae_lambda": (0.0, True, 1.0, True),
    "algorithm.value_coef": (0.0, True, None, True), "algorithm.value_clip": (0.0, True, None, True),
    "algorithm.critic_warmup_steps": (0, True, None, True),
    "algorithm.critic_learning_rate": (0.0, False, None, True),
    "algorithm.critic_updates": (1, True, None, True),
    "algorithm.dynamic_sampling_max_rounds": (0, True, None, True),
    "algorithm.loss_length_normalizer": (0, True, None, True),
    "algorithm.is_threshold": (0.0, False, None, True),
    "algorithm.is_threshold_low": (0.0, True, None, True),
    "algorithm.overlong_buffer": (0, True, None, True),
    "algorithm.old_logprobs_gap_bound": (0.0, True, None, True),
    "algorithm.overlong_penalty": (0.0, True, None, True),
    "rollout.max_turns": (1, True, None, True), "rollout.prompt_bucket": (0, True, None, True),
    "rollout.episode_timeout_s": (0.0, True, None, True),
    "rollout.batch_bucket": (0, True, None, True), "rollout.decode_segments": (1, True, None, True),
    "rollout.producer_batch": (0, True, None, True), "rollout.queue_size": (1, True, None, True),
    "rollout.episode_slots": (0, True, None, True),
    "rollout.env_workers": (1, True, None, True), "rollout.env_call_timeout_s": (0.0, False, None, True),
    "rollout.max_staleness": (0, True, None, True),
    "rollout.clock_sample_ahead": (0, True, None, True),
    "rollout.staleness_decay": (0.0, False, 1.0, True),
    "pivot.m": (2, True, None, True), "pivot.lambda_diff": (0.0, False, 1.0, True),
    "pivot.random_fraction": (0.0, False, 1.0, True), "pivot.hint_fraction": (0.0, True, 1.0, True),
    "pivot.reprofile_every": (0, True, None, True),
    "sampling.prompts_per_step": (1, True, None, True), "sampling.max_new_tokens": (1, True, None, True),
    "sampling.temperature": (0.0, False, None, True), "sampling.top_p": (0.0, False, 1.0, True),
    "sampling.top_k": (0, True, None, True),
    "optimizer.learning_rate": (0.0, True, None, True), "optimizer.warmup_steps": (0, True, None, True),
    "optimizer.weight_decay": (0.0, True, None, True), "optimizer.b1": (0.0, True, 1.0, False),
    "optimizer.b2": (0.0, True, 1.0, False), "optimizer.eps": (0.0, False, None, True),
    "optimizer.max_grad_norm": (0.0, True, None, True),
    "train.num_steps": (0, True, None, True), "train.token_budget": (0, True, None, True),
    "train.epochs": (1, True, None, True), "train.num_minibatches": (1, True, None, True),
    "train.num_microbatches": (1, True, None, True), "train.sft_steps": (0, True, None, True),
    "train.length_bucket": (0, True, None, True),
    "train.sft_batch_size": (1, True, None, True), "train.sft_learning_rate": (0.0, False, None, True),
    "train.sft_pool": (0, True, None, True),
    "kl.coef": (0.0, True, None, True), "kl.target": (0.0, False, None, True),
    "kl.horizon": (0.0, False, None, True),
    "reward.correct_weight": (0.0, True, None, True), "reward.format_weight": (0.0, True, None, True),
    "reward.clip": (0.0, True, None, True), "reward.num_workers": (1, True, None, True),
    "reward.timeout_s": (0.0, False, None, True), "reward.max_retries": (0, True, None, True),
    "eval.every": (0, True, None, True), "eval.num_tasks": (0, True, None, True),
    "eval.dense_steps": (0, True, None, True), "eval.dense_every": (0, True, None, True),
    "eval.samples_per_task": (1, True, None, True), "eval.temperature": (0.0, False, None, True),
    "checkpoint.every": (-1, True, None, True), "checkpoint.max_to_keep": (1, True, None, True),
    "logging.every": (1, True, None, True), "logging.samples_every": (0, True, None, True),
    "logging.samples_per_step": (1, True, None, True),
    "mesh.fsdp": (1, True, None, True), "mesh.tensor": (1, True, None, True),
    "mesh.expert": (1, True, None, True),
    "mesh.num_processes": (1, True, None, True), "mesh.process_id": (0, True, None, True),
}
DTYPE_FIELDS = ("model.dtype", "model.param_dtype")
FREE_FORM = ("task.kwargs",)  # subtrees forwarded verbatim to another component.


class ConfigError(ValueError):
    """Raised when a config is invalid; the message lists every offending field."""


def _raw(config):
    return config._config if isinstance(config, ConfigReads) else config


def flatten(cfg, prefix: str = "") -> dict[str, Any]:
    """{dotted path: value} of every leaf (free-form subtrees are one leaf)."""
    out = {}
    for k, v in _raw(cfg).items():
        key = f"{prefix}{k}"
        if key in FREE_FORM:
            out[key] = v
        elif isinstance(v, (ml_collections.ConfigDict, dict)):
            out.update(flatten(v, key + "."))
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


def _bound_error(key, value) -> Optional[str]:
    lo, lo_inc, hi, hi_inc = BOUNDS[key]
    if (value < lo) if lo_inc else (value <= lo):
        return f"config.{key} must be {'>=' if lo_inc else '>'} {lo}, got {value!r}"
    if hi is not None and ((value > hi) if hi_inc else (value >= hi)):
        return f"config.{key} must be {'<=' if hi_inc else '<'} {hi}, got {value!r}"
    return None


# ------------------------------------------------------------------------------ applicability
def resolved(config) -> dict[str, Any]:
    """The algorithm-dependent choices a config resolves to: algorithm class, advantage,
    policy loss and collector (the class defaults where the config leaves them empty)."""
    c = config
    cls = get_algorithm(c.algorithm.name)
    return {"cls": cls,
            "advantage": c.algorithm.advantage or cls.default_advantage,
            "policy_loss": c.algorithm.policy_loss or cls.default_policy_loss,
            "collector": c.rollout.collector or cls.default_collector}


def inapplicable(config, *, multi_turn: Optional[bool] = None, strict_only: bool = False
                 ) -> dict[str, str]:
    """{field: why it is not read} for this config.

    multi_turn: whether the task kit is multi-turn (None: unknown, fields that depend on it are
    not judged). strict_only: only the fields that do not apply to the chosen algorithm,
    collector or kit (these must keep their defaults), not the inactive refinements of a feature
    this config switches off (module docstring).
    """
    c = _raw(config)
    r = resolved(c)
    a, ro, p = c.algorithm, c.rollout, c.pivot
    critic = r["cls"].uses_critic
    out: dict[str, str] = {}

    def na(fields, why, strict=False):
        if strict or not strict_only:
            for f in fields:
                out.setdefault(f, why)

    if c.tokenizer.kind != "hf":
        na(["tokenizer.path", "tokenizer.chat_template", "tokenizer.system_prompt",
            "tokenizer.instruction"], f"tokenizer.kind is {c.tokenizer.kind!r}, not 'hf'", True)
    tool_kit = any(str(n).partition(":")[0] in _tool_kits() for n in c.task.names)
    if not tool_kit:
        na(["agent.tool_format", "agent.trajectories"],
           f"task.names {tuple(c.task.names)} holds no tool kit ({', '.join(_tool_kits())})", True)
    else:
        na(["tokenizer.instruction"], "a tool kit's user message is the task itself", True)
    if c.model.init_from:
        na([f"model.{k}" for k in ("vocab_size", "num_layers", "d_model", "num_heads",
                                     "num_kv_heads", "d_ff")],
           "model.init_from is set (the checkpoint's config.json gives the shape)", True)
    if r["advantage"] != "reinforce":
        na(["algorithm.baseline_momentum"], f"advantage is {r['advantage']!r}, not 'reinforce'", True)
    if r["advantage"] != "grpo":
        na(["algorithm.scale_rewards", "algorithm.adv_eps"], f"advantage is {r['advantage']!r}, not 'grpo'", True)
    if not critic:
        na(["algorithm.gamma", "algorithm.gae_lambda", "algorithm.skip_observations",
            "algorithm.value_coef", "algorithm.value_clip", "algorithm.critic_warmup_steps",
            "algorithm.critic_learning_rate", "algorithm.critic_updates",
            "algorithm.critic_freeze_attention"], f"algorithm {a.name!r} has no critic", True)
    if r["policy_loss"] != "clip":
        na(["algorithm.dual_clip"], f"policy loss is {r['policy_loss']!r}, not 'clip'", True)
    if r["policy_loss"] in SEQUENCE_LOSSES and not critic:
        na(["algorithm.aggregation", "algorithm.loss_length_normalizer"],
           f"the {r['policy_loss']} objective averages over sequences", True)
    if critic:
        na(["algorithm.overlong_buffer", "algorithm.overlong_penalty"],
           f"algorithm {a.name!r} takes token rewards for its critic (overlong shaping acts on "
           f"the sequence rewards of critic-free algorithms)", True)
    if r["collector"] != "groups":
        na(["algorithm.dynamic_sampling", "algorithm.dynamic_sampling_max_rounds",
            "task.curriculum", "task.curriculum_alpha", "task.curriculum_ema", "task.curriculum_floor"],
           f"collector is {r['collector']!r}, not 'groups'", True)
    if not a.dynamic_sampling:
        na(["algorithm.dynamic_sampling_max_rounds"], "algorithm.dynamic_sampling is off")
    if a.aggregation != "seq-mean-token-sum-norm":
        na(["algorithm.loss_length_normalizer"], f"algorithm.aggregation is {a.aggregation!r}, "
           f"not 'seq-mean-token-sum-norm'")
    if a.is_correction == "none":
        na(["algorithm.is_level", "algorithm.is_threshold", "algorithm.is_threshold_low"],
           "algorithm.is_correction is 'none'")
    elif a.is_correction != "mis":
        na(["algorithm.is_threshold_low"], f"algorithm.is_correction is {a.is_correction!r}, not 'mis'")
    if not a.overlong_buffer:
        na(["algorithm.overlong_penalty"], "algorithm.overlong_buffer is 0 (overlong shaping off)")
    if c.task.curriculum == "none":
        na(["task.curriculum_alpha", "task.curriculum_ema", "task.curriculum_floor"], "task.curriculum is 'none'")
    elif c.task.curriculum != "variance":
        na(["task.curriculum_alpha"], f"task.curriculum is {c.task.curriculum!r}, not 'variance'")
    if not ro.asynchronous:
        na(["rollout.producer_batch", "rollout.queue_size", "rollout.max_staleness",
            "rollout.staleness_backpressure", "rollout.staleness_decay", "rollout.arrival",
            "rollout.episode_slots"], "rollout.asynchronous is off")
    elif ro.arrival != "episode":
        na(["rollout.episode_slots"], "rollout.arrival is 'batch'")
    else:
        na(["rollout.producer_batch"], "rollout.arrival is 'episode' (episode_slots in flight)")
    if ro.clock == "modelled":
        na(["rollout.producer_batch", "rollout.queue_size", "rollout.arrival",
            "rollout.episode_slots"], "rollout.clock is 'modelled' (the time model's slots run "
           "the episodes; each unit arrives on its own)")
    if multi_turn is True:
        na(["algorithm.score_completions_only"], "the task kit is multi-turn (a row is a whole "
           "episode, scored everywhere)")
        na(["rollout.shared_prompt_cache"], "the task kit is multi-turn (episodes are decoded "
           "turn by turn, one row per episode)", True)
    if multi_turn is False:
        na(["rollout.max_turns", "rollout.kv_reuse", "rollout.arrival", "rollout.episode_slots",
            "rollout.env_executor", "rollout.env_workers", "rollout.env_call_timeout_s",
            "rollout.episode_timeout_s"],
           "the task kit is single-turn", True)
        if r["collector"] != "pivots":
            na(["rollout.batch_bucket"], "the task kit is single-turn", True)
    if r["collector"] != "pivots":
        na([f"pivot.{k}" for k in p.keys()], f"collector is {r['collector']!r}, not 'pivots'", True)
    else:
        if p.selection not in ("filter", "variance"):
            na(["pivot.m", "pivot.lambda_diff"], f"pivot.selection is {p.selection!r} (no probe)")
        if p.selection != "filter":
            na(["pivot.lambda_diff"], f"pivot.selection is {p.selection!r}, not 'filter'")
        if p.selection != "random":
            na(["pivot.random_fraction"], f"pivot.selection is {p.selection!r}, not 'random'")
        if not p.hint:
            na(["pivot.hint_fraction"], "pivot.hint is empty")
    if not strict_only:
        out.update({k: v for k, v in _inactive(c).items() if k not in out})
    return out


def _inactive(c) -> dict[str, str]:
    """{field: why}: refinements of features this config switches off (kl, optimizer knobs of
    another optimizer, SFT, executor workers, evaluation, checkpoints, sample logs, multi-host)."""
    out: dict[str, str] = {}

    def na(fields, why):
        for f in fields:
            out.setdefault(f, why)

    if c.model.lora.rank == 0:
        na(["model.lora.alpha", "model.lora.dropout", "model.lora.targets", "model.lora.quantize",
            "model.lora.train_norms"],
           "model.lora.rank is 0 (LoRA off)")
    if c.kl.mode == "none":
        na(["kl.estimator", "kl.coef", "kl.adaptive"], "kl.mode is 'none'")
    if not c.kl.adaptive or c.kl.mode == "none":
        na(["kl.target", "kl.horizon"], "kl.adaptive is off")
    if c.optimizer.name == "sgd":
        na(["optimizer.b1", "optimizer.b2", "optimizer.eps"], "optimizer.name is 'sgd'")
    if c.optimizer.name != "adamw":
        na(["optimizer.weight_decay"], f"optimizer.name is {c.optimizer.name!r}, not 'adamw'")
    if c.train.sft_steps == 0:
        na(["train.sft_batch_size", "train.sft_learning_rate", "train.sft_pool"], "train.sft_steps is 0")
    if c.reward.executor == "inline":
        na(["reward.num_workers"], "reward.executor is 'inline'")
    if c.reward.executor != "ray" and c.rollout.env_executor != "ray":
        na(["reward.ray_address"], f"reward.executor is {c.reward.executor!r} and "
                                   f"rollout.env_executor {c.rollout.env_executor!r}, not 'ray'")
    if c.rollout.env_executor != "ray":
        na(["rollout.env_workers", "rollout.env_call_timeout_s"], "rollout.env_executor is 'local'")
    if c.rollout.clock != "modelled":
        na(["rollout.time_model", "rollout.clock_sample_ahead"],
           f"rollout.clock is {c.rollout.clock!r}, not 'modelled'")
    elif not c.rollout.asynchronous:
        na(["rollout.clock_sample_ahead"], "rollout.asynchronous is off (a synchronous step's "
           "batch is sampled at once)")
    if not c.tokenizer.chat_template:
        na(["tokenizer.system_prompt"], "tokenizer.chat_template is off")
    if c.eval.num_tasks == 0:
        na(["eval.every", "eval.samples_per_task", "eval.pass_k", "eval.temperature", "eval.seed",
            "eval.greedy", "eval.dense_steps", "eval.dense_every"], "eval.num_tasks is 0")
    elif c.eval.greedy:
        na(["eval.samples_per_task", "eval.pass_k", "eval.temperature"],
           "eval.greedy is on (one greedy sample per task)")
    if c.eval.num_tasks and c.eval.dense_steps == 0:
        na(["eval.dense_every"], "eval.dense_steps is 0 (no early-dense evaluations)")
    if c.checkpoint.every < 0:
        na(["checkpoint.max_to_keep", "checkpoint.resume", "checkpoint.allow_changes"],
           "checkpoint.every is -1 (never)")
    if c.logging.samples_every == 0:
        na(["logging.samples_per_step"], "logging.samples_every is 0")
    if not c.mesh.distributed:
        na(["mesh.coordinator", "mesh.num_processes", "mesh.process_id"], "mesh.distributed is off")
    return out


def _tool_kits() -> list:
    from rlvr.tasks.tool_agent import TOOL_KITS  # noqa: PLC0415

    return TOOL_KITS


def check_applicability(config, *, multi_turn: Optional[bool] = None) -> list[str]:
    """Errors for fields that do not apply to the algorithm / collector / kit but differ from
    the base default."""
    from rlvr.configs import base

    ref = flatten(base.get_config())
    got = flatten(config)
    errors = []
    for key, why in sorted(inapplicable(config, multi_turn=multi_turn, strict_only=True).items()):
        if key in got and key in ref and not _same(got[key], ref[key]):
            errors.append(f"config.{key} = {got[key]!r} does not apply: {why} "
                          f"(leave it at its default {ref[key]!r})")
    return errors


def _same(a, b) -> bool:
    if isinstance(b, tuple):
        return tuple(a) == b
    if isinstance(a, ml_collections.ConfigDict):
        return a.to_dict() == (b.to_dict() if isinstance(b, ml_collections.ConfigDict) else b)
    return a == b


# ------------------------------------------------------------------------------ validation
def validate_config(config) -> ml_collections.ConfigDict:
    """Checks `config` against the base schema, consistency and applicability; returns it.

    Raises:
        ConfigError: naming each bad field with its value and the allowed values.
    """
    from rlvr.configs import base  # the schema: one place defines fields and their types.

    raw = _raw(config)
    errors = []
    ref = flatten(base.get_config())
    got = flatten(raw)
    for key in sorted(set(got) - set(ref)):
        section = key.rsplit(".", 1)[0] if "." in key else ""
        errors.append(f"unknown config key {key!r}; known keys in that section: "
                      f"{sorted(k for k in ref if (k.rsplit('.', 1)[0] if '.' in k else '') == section)}")
    for key in sorted(set(ref) - set(got)):
        errors.append(f"missing config key {key!r}")
    for key, value in got.items():
        if key not in ref or key in FREE_FORM:
            continue
        if key in DTYPE_FIELDS:
            try:
                dtype_name(value, f"config.{key}")
            except ValueError as e:
                errors.append(str(e))
            continue
        if not _type_ok(ref[key], value):
            errors.append(f"config.{key} must be of type {type(ref[key]).__name__}, got {value!r}")
            continue
        if key in CHOICES and value not in CHOICES[key]:
            errors.append(f"config.{key} must be one of {CHOICES[key]}, got {value!r}")
        if key in BOUNDS:
            e = _bound_error(key, value)
            if e:
                errors.append(e)
    errors += _non_finite_errors(raw)
    errors += _allow_changes_errors(got, ref)
    if errors:  # cross-field checks assume well-typed values
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))

    if raw.algorithm.name not in registered_algorithms():
        raise ConfigError(f"invalid config:\n  config.algorithm.name must be a registered "
                          f"algorithm {registered_algorithms()}, got {raw.algorithm.name!r}")
    errors = _consistency_errors(raw) + _shape_errors(raw) + check_applicability(raw)
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
    return config


def _non_finite_errors(raw) -> list[str]:
    """NaN / ±inf anywhere in the config (every section, tuples and free-form subtrees
    included), each named by its dotted path: no field takes a non-finite value."""
    errors: list[str] = []

    def walk(value, path):
        if isinstance(value, (ml_collections.ConfigDict, dict)):
            for k, v in value.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(value, (tuple, list)):
            for i, v in enumerate(value):
                walk(v, f"{path}[{i}]")
        elif isinstance(value, float) and not math.isfinite(value):
            errors.append(f"config.{path} must be a finite number, got {value!r}")

    walk(raw, "")
    return errors


def _allow_changes_errors(got: dict, ref: dict) -> list[str]:
    """checkpoint.allow_changes must name config fields or sections."""
    allow = got.get("checkpoint.allow_changes", ())
    if not isinstance(allow, (tuple, list)):
        return []  # the type check reports it
    sections = {k.rsplit(".", i)[0] for k in ref for i in range(1, k.count(".") + 1)}
    bad = [a for a in allow if not isinstance(a, str) or (a not in ref and a not in sections)]
    if bad:
        return [f"config.checkpoint.allow_changes must name config fields or sections (e.g. "
                f"'optimizer.learning_rate', 'optimizer'), got unknown {bad}"]
    return []


def _consistency_errors(raw) -> list[str]:
    """Cross-field rules of a well-typed config (each message names the fields)."""
    errors: list[str] = []
    a = raw.algorithm
    known = registered_algorithms()
    r = resolved(raw)
    critic = r["cls"].uses_critic
    adv = r["advantage"]
    if raw.train.logprob_impl == "pallas":
        import jax

        if jax.default_backend() not in ("gpu", "cuda", "rocm", "tpu"):
            errors.append(f"config.train.logprob_impl 'pallas' needs a GPU or TPU backend, this "
                          f"one is {jax.default_backend()!r}; allowed here: "
                          f"{tuple(i for i in LOGPROB_IMPLS if i != 'pallas')}")
    for field, value in (("reward.executor", raw.reward.executor),
                         ("rollout.env_executor", raw.rollout.env_executor)):
        if value == "ray":
            import importlib.util

            if importlib.util.find_spec("ray") is None:
                errors.append(f'config.{field}="ray" needs the ray package: '
                              'pip install "rlvr[ray]"')
    if "ray" in (raw.reward.executor, raw.rollout.env_executor):
        if not raw.reward.ray_address.strip():
            errors.append("config.reward.ray_address must be 'local', 'auto' or a cluster "
                          f"address (host:port or ray://host:port), got {raw.reward.ray_address!r}")
    if adv in ("grpo", "rloo") and a.group_size < 2:
        errors.append(f"config.algorithm.group_size must be >= 2 for {adv} advantages "
                      f"(group baseline needs several samples per prompt), got {a.group_size}")
    if adv == "gae" and not critic:
        critics = tuple(n for n in known if get_algorithm(n).uses_critic)
        errors.append(f"config.algorithm.advantage='gae' needs a critic; algorithm {a.name!r} is "
                      f"critic-free (critic algorithms: {critics})")
    if critic and adv != "gae":
        errors.append(f"config.algorithm.advantage must be '' or 'gae' for the critic algorithm "
                      f"{a.name!r} (its advantages come from the critic), got {a.advantage!r}")
    if a.is_correction != "none":
        if not a.recompute_old_logprobs:
            errors.append(f"config.algorithm.is_correction={a.is_correction!r} needs "
                          f"algorithm.recompute_old_logprobs=True: with π_old = the behaviour "
                          f"log-probs every weight π_old/μ is 1 (set is_correction='none')")
        if a.old_logprobs_gap_bound > 0:
            errors.append(f"config.algorithm.old_logprobs_gap_bound must be 0 with "
                          f"is_correction={a.is_correction!r} (its weights π_old/μ need the "
                          f"recomputed π_old), got {a.old_logprobs_gap_bound}")
        if a.is_level == "token" and r["policy_loss"] in SEQUENCE_LOSSES:
            errors.append(f"config.algorithm.is_level must be 'sequence' with the sequence "
                          f"objective {r['policy_loss']!r} (one ratio per sequence), got 'token'")
        if a.is_correction == "mis" and a.is_threshold_low >= a.is_threshold:
            errors.append(f"config.algorithm.is_threshold_low ({a.is_threshold_low}) must be < "
                          f"algorithm.is_threshold ({a.is_threshold}) with is_correction='mis'")
    if r["policy_loss"] == "gspo" and critic:
        errors.append(f"config.algorithm.policy_loss='gspo' needs one advantage per sequence; "
                      f"the critic algorithm {a.name!r} gives token advantages (use clip, "
                      f"trust_region or cispo)")
    if a.overlong_buffer > raw.sampling.max_new_tokens:
        errors.append(f"config.algorithm.overlong_buffer ({a.overlong_buffer}) must be 0 (off) or "
                      f"<= sampling.max_new_tokens ({raw.sampling.max_new_tokens})")
    if a.dual_clip and a.dual_clip <= 1.0:
        errors.append(f"config.algorithm.dual_clip must be 0 (off) or > 1, got {a.dual_clip}")
    if r["collector"] == "pivots" and a.group_size < 2:
        errors.append(f"config.algorithm.group_size (K fresh samples per kept state) must be > 1 "
                      f"for the pivots collector, got {a.group_size}")
    if r["collector"] == "pivots" and raw.task.pool_size < 1:
        errors.append("config.task.pool_size must be >= 1 for the pivots collector (its candidate "
                      "states are the demonstration turns of a fixed pool of tasks)")
    if raw.task.curriculum != "none" and raw.task.pool_size < 1:
        errors.append(f"config.task.curriculum={raw.task.curriculum!r} needs a fixed task pool: "
                      f"set config.task.pool_size >= 1")
    lo = raw.model.lora
    if lo.rank:
        targets = tuple(lo.targets)
        bad = [t for t in targets if t not in TARGETS]
        if not targets or bad or len(set(targets)) != len(targets):
            errors.append(f"config.model.lora.targets must be distinct names from {TARGETS}, "
                          f"got {targets}")
        if raw.model.fused_projections:
            split = split_fused_targets(True, targets)
            if split:
                errors.append(f"config.model.lora.targets: {split} (config.model."
                              f"fused_projections=True)")
    elif lo.quantize != "none":
        errors.append(f"config.model.lora.quantize={lo.quantize!r} needs adapters to train: set "
                      f"model.lora.rank >= 1 (a quantised base is frozen)")
    if len(raw.task.names) == 0:
        errors.append("config.task.names must name at least one task kit")
    if len(raw.task.names) != len(raw.task.weights):
        errors.append(f"config.task.weights needs one weight per task name: names "
                      f"{tuple(raw.task.names)}, weights {tuple(raw.task.weights)}")
    elif any(w < 0 for w in raw.task.weights) or sum(raw.task.weights) <= 0:
        errors.append(f"config.task.weights must be >= 0 with a positive sum, got {tuple(raw.task.weights)}")
    batch = raw.sampling.prompts_per_step * a.group_size
    split = raw.train.num_minibatches * raw.train.num_microbatches
    if batch % split:
        errors.append(f"rollout batch prompts_per_step*group_size = {batch} must be divisible by "
                      f"train.num_minibatches*train.num_microbatches = {split}")
    if raw.kl.mode != "none" and raw.kl.coef == 0.0:
        errors.append("config.kl.mode is set but kl.coef is 0: set the (initial) coefficient β > 0 "
                      "(adaptive β multiplies it, so it cannot start at 0) or kl.mode='none'")
    if raw.kl.adaptive and raw.kl.mode == "none":
        errors.append("config.kl.adaptive needs kl.mode 'reward' or 'loss'")
    if r["policy_loss"] == "sequence_clip" and raw.kl.mode == "reward":
        errors.append("config.kl.mode='reward' does not apply to the sequence_clip objective (its "
                      "KL is a loss term): use kl.mode 'loss' or 'none'")
    if raw.eval.num_tasks and not raw.eval.greedy and any(k < 1 or k > raw.eval.samples_per_task for k in raw.eval.pass_k):
        errors.append(f"config.eval.pass_k values must be in [1, eval.samples_per_task="
                      f"{raw.eval.samples_per_task}], got {tuple(raw.eval.pass_k)}")
    # the early-dense evaluation schedule: both fields set, or neither
    if raw.eval.num_tasks and bool(raw.eval.dense_steps) != bool(raw.eval.dense_every):
        errors.append(f"config.eval.dense_steps={raw.eval.dense_steps} and eval.dense_every="
                      f"{raw.eval.dense_every}: set both >= 1 (evaluate every dense_every steps "
                      f"during the first dense_steps) or both 0 (off)")
    ro = raw.rollout
    if ro.compact_finished and ro.decode_segments < 2:
        errors.append(f"config.rollout.compact_finished=True needs rollout.decode_segments >= 2 "
                      f"(finished rows are compacted out between decode parts), got "
                      f"decode_segments={ro.decode_segments}")
    if ro.kv_reuse and (ro.decode_segments != 1 or ro.compact_finished):
        errors.append(f"config.rollout.decode_segments={ro.decode_segments} / "
                      f"rollout.compact_finished={ro.compact_finished} do not apply with "
                      f"rollout.kv_reuse=True (the KV session decodes each turn in one part): "
                      f"keep decode_segments=1 and compact_finished=False, or set kv_reuse=False")
    if ro.shared_prompt_cache:
        if a.group_size < 2:
            errors.append(f"config.rollout.shared_prompt_cache=True shares one prompt cache among "
                          f"a group's samples: it needs algorithm.group_size >= 2, got "
                          f"{a.group_size}; set rollout.shared_prompt_cache=False")
        if ro.kv_reuse:
            errors.append("config.rollout.shared_prompt_cache=True does not apply with "
                          "rollout.kv_reuse=True (multi-turn KV sessions keep their own caches): "
                          "set one of them to False")
        if r["collector"] != "groups":
            errors.append(f"config.rollout.shared_prompt_cache=True needs rollout.collector="
                          f"'groups', got {r['collector']!r}")
    if ro.asynchronous and raw.mesh.distributed:
        errors.append("config.rollout.asynchronous=True cannot run with config.mesh.distributed=True "
                      "yet: each process would take the global sampling.prompts_per_step from its "
                      "own queue (a multiple of the batch) and sample with the learner's "
                      "multi-process parameters; run asynchronous collection on one process, or "
                      "turn rollout.asynchronous off")
    if ro.asynchronous and raw.pivot.reprofile_every and r["collector"] == "pivots":
        errors.append(f"config.pivot.reprofile_every={raw.pivot.reprofile_every} does not apply with "
                      f"config.rollout.asynchronous=True (the rollout thread's draws have no step "
                      f"to re-profile at): set pivot.reprofile_every=0 or rollout.asynchronous=False")
    if ro.asynchronous and ro.arrival == "episode":
        if a.group_size != 1:
            errors.append(f"config.rollout.arrival='episode' trains single rollouts as each ends: "
                          f"it needs algorithm.group_size=1, got {a.group_size}")
        if r["collector"] != "groups":
            errors.append(f"config.rollout.arrival='episode' needs the groups collector, got "
                          f"rollout.collector={r['collector']!r}")
        if ro.kv_reuse:
            errors.append("config.rollout.arrival='episode' cannot keep KV caches across turns "
                          "yet (episodes join and leave the sampler's batch every round): set "
                          "rollout.kv_reuse=False")
    if ro.clock == "modelled":
        errors += _modelled_clock_errors(raw, r)
    if ro.asynchronous and ro.staleness_backpressure:
        # an episode of per-episode arrival is a producer batch of one
        producer = 1 if ro.arrival == "episode" else (ro.producer_batch or raw.sampling.prompts_per_step)
        if predicted_lag(0, producer, raw.sampling.prompts_per_step) > ro.max_staleness:
            errors.append(f"config.rollout.staleness_backpressure needs producer_batch <= "
                          f"prompts_per_step * max_staleness (else no batch can ever arrive fresh "
                          f"enough), got producer_batch={producer}, prompts_per_step="
                          f"{raw.sampling.prompts_per_step}, max_staleness={ro.max_staleness}")
    return errors


def _modelled_clock_errors(raw, r) -> list[str]:
    """rollout.clock='modelled': a readable time model and a collector it can model."""
    from rlvr.train.clock import TimeModel, clock_mode  # noqa: PLC0415

    ro, a = raw.rollout, raw.algorithm
    errors: list[str] = []
    mode = clock_mode(a.group_size, ro.asynchronous)
    if not ro.time_model:
        errors.append("config.rollout.time_model must name the time model's JSON file when "
                      "rollout.clock='modelled' (e.g. experiments/study/system_model.json)")
    else:
        try:
            model = TimeModel.from_json(ro.time_model)
        except (OSError, ValueError, TypeError) as e:
            errors.append(f"config.rollout.time_model={ro.time_model!r}: {e}")
        else:
            if ro.asynchronous and model.slots < a.group_size:
                errors.append(f"config.rollout.time_model={ro.time_model!r}: slots={model.slots} "
                              f"< algorithm.group_size={a.group_size} (the {mode} mode starts a "
                              f"group's episodes together)")
    why = "rollout.clock='modelled' "
    if r["collector"] != "groups":
        errors.append(f"config.rollout.collector={r['collector']!r}: {why}models the groups "
                      f"collector only (PivotRL's probed turns have no episode to time)")
    if ro.kv_reuse:
        errors.append(f"config.rollout.kv_reuse=True: {why}times prefill per episode from its "
                      f"token counts; set rollout.kv_reuse=False")
    if ro.env_executor != "local":
        errors.append(f"config.rollout.env_executor={ro.env_executor!r}: {why}runs the "
                      f"environments in this process (set rollout.env_executor='local')")
    if a.dynamic_sampling:
        errors.append(f"config.algorithm.dynamic_sampling=True: {why}does not time discarded "
                      f"refill rounds; set algorithm.dynamic_sampling=False")
    if raw.mesh.distributed:
        errors.append(f"config.mesh.distributed=True: {why}runs on one process")
    return errors


def _shape_errors(raw) -> list[str]:
    """Rules on the model, the mesh and the batch's split over processes."""
    errors: list[str] = []
    if raw.model.max_seq_len <= raw.sampling.max_new_tokens + 1:
        errors.append(f"config.model.max_seq_len ({raw.model.max_seq_len}) must exceed "
                      f"sampling.max_new_tokens ({raw.sampling.max_new_tokens}) by at least 2")
    m = raw.mesh
    if m.data == 0 or m.data < -1:
        errors.append(f"config.mesh.data must be -1 (all remaining devices) or >= 1, got {m.data}")
    if m.process_id >= m.num_processes:
        errors.append(f"config.mesh.process_id must be < mesh.num_processes={m.num_processes}, got {m.process_id}")
    if raw.sampling.prompts_per_step % m.num_processes:
        errors.append(f"config.sampling.prompts_per_step ({raw.sampling.prompts_per_step}) must be "
                      f"divisible by mesh.num_processes ({m.num_processes}): each host samples and "
                      f"verifies an equal share")
    if not raw.model.init_from:
        if raw.model.num_heads % raw.model.num_kv_heads:
            errors.append(f"config.model.num_heads ({raw.model.num_heads}) must be a multiple of "
                          f"model.num_kv_heads ({raw.model.num_kv_heads})")
        if raw.model.d_model % raw.model.num_heads:
            errors.append(f"config.model.d_model ({raw.model.d_model}) must be divisible by "
                          f"model.num_heads ({raw.model.num_heads})")
    return errors


def predicted_lag(depth: int, producer_batch: int, learn_batch: int) -> int:
    """Worst-case policy-version lag of a producer batch started now with the published policy.

    The learner consumes the queue in arrival order, `learn_batch` units per step, one version
    per step. The batch's last unit lands at queue position depth + producer_batch − 1. The
    learner has either already taken a whole batch it is still training on (its update
    publishes one more version before its next `get`) or taken k < learn_batch units of its
    current batch (positions shift by k); either way the lag is at most
    ⌊(depth + producer_batch − 1) / learn_batch⌋ + 1. Units consumed while the batch is being
    generated only lower it.
    """
    return (depth + producer_batch - 1) // learn_batch + 1


# ------------------------------------------------------------------------------ read recording
class ConfigReads:
    """A read-only view of a ConfigDict that records the dotted path of every leaf read.

        tracked = ConfigReads(config)
        run(tracked, workdir)
        tracked.reads   # {"seed", "model.d_model", ...}

    Sub-configs come back wrapped (reads below them are recorded too); `to_dict()` /
    `to_json_best_effort()` of a free-form subtree (task.kwargs) count as reading it.
    Whole-config serialisation (`to_json_best_effort` on the root, for config.json) does not count.
    """

    def __init__(self, config, prefix: str = "", reads: Optional[set] = None):
        object.__setattr__(self, "_config", config)
        object.__setattr__(self, "_prefix", prefix)
        object.__setattr__(self, "reads", set() if reads is None else reads)

    def _get(self, name):
        value = self._config[name]
        path = self._prefix + name
        if isinstance(value, ml_collections.ConfigDict) and path not in FREE_FORM:
            return ConfigReads(value, path + ".", self.reads)
        self.reads.add(path)
        return value

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self._get(name)
        except KeyError:
            raise AttributeError(f"config has no field {self._prefix + name!r}") from None

    def __getitem__(self, name):
        return self._get(name)

    def __setattr__(self, name, value):
        raise TypeError(f"config is read-only here (tried to set {self._prefix + name!r})")

    def get(self, name, default=None):
        return self._get(name) if name in self._config else default

    def __contains__(self, name):
        return name in self._config

    def keys(self):
        return self._config.keys()

    def to_dict(self):
        if self._prefix:
            self.reads.update(k for k in flatten(self._config, self._prefix))
        return self._config.to_dict()

    def to_json_best_effort(self, **kw):
        return self._config.to_json_best_effort(**kw)

    def unwrap(self):
        return self._config
