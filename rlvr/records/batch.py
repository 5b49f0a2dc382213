"""`RolloutBatch`: the device-side record of a batch of rollouts (docs/architecture.md §2, §3).

A rollout is one token stream: prompt, then policy actions interleaved with environment
observations (multi-turn). `loss_mask` is 1 exactly on policy-generated tokens; prompt,
observation and padding tokens get 0 and never receive policy loss or advantage (docs/architecture.md §3).

Alignment convention (used everywhere in rlvr): every per-token array is aligned with `tokens`.
`behavior_logprobs[b, t]` is log π_behaviour(tokens[b, t] | tokens[b, :t]), the log-prob the
sampler saved when it produced token t; it is 0 where `loss_mask` is 0. The learner's scorer
returns log-probs with the same alignment, so ratios are `exp(logprobs - behavior_logprobs)`.

Groups are laid out group-major: samples `g * group_size ... (g + 1) * group_size - 1` belong to
group `g`, so `rewards.reshape(num_groups, group_size)` is the group view.

Host-side per-sample metadata (versions, stop reason, sampling params, verdict evidence) lives in
`SampleMeta`, one per row, beside the batch (docs/architecture.md §3).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

STOP_REASONS = ("eos", "max_length", "max_turns", "timeout", "env_error", "gate", "stop_token")


@struct.dataclass
class RolloutBatch:
    """A batch of B rollouts padded to length T (a pytree; jit/vmap/shard friendly).

    Attributes:
      tokens: int32 [B, T] token ids (prompt, actions, observations, padding).
      attention_mask: bool [B, T]; True on real (non-padding) tokens.
      loss_mask: float32 [B, T]; 1 on policy-generated tokens only (docs/architecture.md §3).
      behavior_logprobs: float32 [B, T]; log-probs saved at sampling time (docs/architecture.md §3, docs/algorithms.md (A.19)).
      rewards: float32 [B]; scalar sequence reward (sum of composed components).
      valid: bool [B]; False for samples masked out (env_error after retries, unknown-as-mask).
      truncated: bool [B]; True when generation hit a length/turn limit.
      policy_version: int32 [B]; the policy version that produced the sample.
      positions: int32 [B, T]; position ids (0-based over real tokens; padding gets 0).
      ref_logprobs: optional float32 [B, T]; reference-policy log-probs, same alignment.
      values: optional float32 [B, T]; critic values at sampling time.
      token_rewards: optional float32 [B, T]; per-token rewards (PPO/SAO), on policy tokens.
      turn_ids: optional int32 [B, T]; index of the action (turn) a token belongs to, -1 elsewhere.
      sample_weights: optional float32 [B]; per-sample weight on the advantage (e.g. the
        staleness down-weighting `decay ** lag` of an asynchronous queue); None = all 1.
    """

    tokens: jnp.ndarray
    attention_mask: jnp.ndarray
    loss_mask: jnp.ndarray
    behavior_logprobs: jnp.ndarray
    rewards: jnp.ndarray
    valid: jnp.ndarray
    truncated: jnp.ndarray
    policy_version: jnp.ndarray
    positions: jnp.ndarray
    ref_logprobs: Optional[jnp.ndarray] = None
    values: Optional[jnp.ndarray] = None
    token_rewards: Optional[jnp.ndarray] = None
    turn_ids: Optional[jnp.ndarray] = None
    sample_weights: Optional[jnp.ndarray] = None

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def seq_len(self) -> int:
        return self.tokens.shape[1]

    def group_view(self, group_size: int) -> jnp.ndarray:
        """rewards as [num_groups, group_size] (group-major layout)."""
        if self.batch_size % group_size:
            raise ValueError(
                f"batch_size {self.batch_size} is not a multiple of group_size {group_size}"
            )
        return self.rewards.reshape(-1, group_size)

    @classmethod
    def create(
        cls,
        *,
        tokens,
        loss_mask,
        behavior_logprobs,
        rewards,
        attention_mask=None,
        valid=None,
        truncated=None,
        policy_version=None,
        positions=None,
        ref_logprobs=None,
        values=None,
        token_rewards=None,
        turn_ids=None,
        sample_weights=None,
    ) -> "RolloutBatch":
        """Builds a batch from host arrays, validating shapes, dtypes and masks.

        Raises ValueError naming the field when a shape or value is wrong: this is where bad
        batches enter the system.
        """
        tokens = np.asarray(tokens)
        if tokens.ndim != 2:
            raise ValueError(f"RolloutBatch.tokens must be [B, T], got shape {tokens.shape}")
        if not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(f"RolloutBatch.tokens must be integer, got {tokens.dtype}")
        b, t = tokens.shape

        def per_token(name, x, dtype, default=None):
            if x is None:
                if default is None:
                    return None
                x = default
            x = np.asarray(x)
            if x.shape != (b, t):
                raise ValueError(f"RolloutBatch.{name} must have shape {(b, t)}, got {x.shape}")
            if dtype is not bool and np.issubdtype(x.dtype, np.floating) and not np.all(np.isfinite(x)):
                raise ValueError(f"RolloutBatch.{name} contains NaN or inf")
            return jnp.asarray(x, dtype)

        def per_sample(name, x, dtype, default):
            x = np.asarray(default if x is None else x)
            if x.shape != (b,):
                raise ValueError(f"RolloutBatch.{name} must have shape {(b,)}, got {x.shape}")
            if np.issubdtype(x.dtype, np.floating) and not np.all(np.isfinite(x)):
                raise ValueError(f"RolloutBatch.{name} contains NaN or inf")
            return jnp.asarray(x, dtype)

        attention_mask = per_token("attention_mask", attention_mask, bool, np.ones((b, t), bool))
        loss_mask_np = np.asarray(loss_mask)
        if loss_mask_np.shape == (b, t) and not np.all((loss_mask_np == 0) | (loss_mask_np == 1)):
            raise ValueError("RolloutBatch.loss_mask must be 0/1")
        if loss_mask_np.shape == (b, t) and np.any(loss_mask_np.astype(bool) & ~np.asarray(attention_mask)):
            raise ValueError("RolloutBatch.loss_mask is 1 on a padding token (attention_mask 0)")
        if positions is None:
            am = np.asarray(attention_mask)
            positions = np.where(am, np.cumsum(am, axis=1) - 1, 0)
        return cls(
            tokens=jnp.asarray(tokens, jnp.int32),
            attention_mask=attention_mask,
            loss_mask=per_token("loss_mask", loss_mask, jnp.float32),
            behavior_logprobs=per_token("behavior_logprobs", behavior_logprobs, jnp.float32),
            rewards=per_sample("rewards", rewards, jnp.float32, None),
            valid=per_sample("valid", valid, bool, np.ones((b,), bool)),
            truncated=per_sample("truncated", truncated, bool, np.zeros((b,), bool)),
            policy_version=per_sample("policy_version", policy_version, jnp.int32, np.zeros((b,), np.int32)),
            positions=per_token("positions", positions, jnp.int32),
            ref_logprobs=per_token("ref_logprobs", ref_logprobs, jnp.float32),
            values=per_token("values", values, jnp.float32),
            token_rewards=per_token("token_rewards", token_rewards, jnp.float32),
            turn_ids=per_token("turn_ids", turn_ids, jnp.int32),
            sample_weights=(None if sample_weights is None else
                            per_sample("sample_weights", sample_weights, jnp.float32, None)),
        )

    # ------------------------------------------------------------------ host-side reshaping
    _PER_TOKEN = ("tokens", "attention_mask", "loss_mask", "behavior_logprobs", "positions",
                  "ref_logprobs", "values", "token_rewards", "turn_ids")

    def take(self, rows) -> "RolloutBatch":
        """The batch of rows `rows` (int indices or a bool mask [B]), every field alike."""
        rows = np.asarray(rows)
        return jax.tree.map(lambda x: jnp.asarray(np.asarray(x)[rows]), self)

    def pad_to(self, length: int) -> "RolloutBatch":
        """Right-padded to `length` tokens (padding: token 0, masks 0, turn id -1)."""
        t = self.seq_len
        if length < t:
            raise ValueError(f"RolloutBatch.pad_to: length {length} < current length {t}")
        if length == t:
            return self

        def pad(name, x):
            if x is None or name not in self._PER_TOKEN:
                return x
            fill = -1 if name == "turn_ids" else 0
            x = np.asarray(x)
            return jnp.asarray(np.concatenate(
                [x, np.full((x.shape[0], length - t), fill, x.dtype)], axis=1))

        return self.replace(**{f.name: pad(f.name, getattr(self, f.name))
                               for f in dataclasses.fields(self)})

    @classmethod
    def concatenate(cls, batches: Sequence["RolloutBatch"]) -> "RolloutBatch":
        """Rows of `batches` in order, right-padded to the longest (optional fields must be set
        in all or none of them)."""
        batches = list(batches)
        if not batches:
            raise ValueError("RolloutBatch.concatenate: no batches")
        t = max(b.seq_len for b in batches)
        batches = [b.pad_to(t) for b in batches]
        out = {}
        for f in dataclasses.fields(cls):
            vals = [getattr(b, f.name) for b in batches]
            present = [v is not None for v in vals]
            if any(present) and not all(present):
                raise ValueError(f"RolloutBatch.concatenate: field {f.name!r} is set in some "
                                 f"batches and None in others")
            out[f.name] = (jnp.asarray(np.concatenate([np.asarray(v) for v in vals], 0))
                           if all(present) else None)
        return cls(**out)


@dataclasses.dataclass(frozen=True)
class SampleMeta:
    """Host-side record of one sample (docs/architecture.md §3).

    Everything needed to audit or reproduce a reward: which task, which versions of policy,
    verifier and environment, which reward config (by hash), how it was sampled, why it stopped,
    and the verdict's components and evidence.
    """

    task_id: str
    policy_version: int
    verifier_version: str
    environment_version: str
    reward_config_hash: str
    sampling_params: dict
    stop_reason: str
    num_turns: int = 1
    decision: str = "unknown"
    trial: str = "valid"
    components: dict = dataclasses.field(default_factory=dict)
    evidence: dict = dataclasses.field(default_factory=dict)
    text: str = ""
    extra: dict = dataclasses.field(default_factory=dict)
    prompt: str = ""
    reward: float = 0.0
    valid: bool = True

    def to_json(self) -> dict:
        """Plain-JSON form (for `samples.jsonl`)."""
        return dataclasses.asdict(self)

    def __post_init__(self):
        if self.stop_reason not in STOP_REASONS:
            raise ValueError(
                f"SampleMeta.stop_reason must be one of {STOP_REASONS}, got {self.stop_reason!r}"
            )



@struct.dataclass
class TrainingBatch:
    """The batch an algorithm trains on (a pytree: the learner slices every array field by rows;
    a field that is None is absent and slices to None).

    Built from a `RolloutBatch` by `Algorithm.make_train_batch`, then filled in stage by stage
    (score → shape_rewards → compute_advantages → weight_advantages); shapes are [B] per row and
    [B, T] per token.

    Attributes:
      tokens, attention_mask, positions: [B, T] model inputs.
      loss_mask: [B, T] float, the loss tokens with invalid rows zeroed.
      valid: [B] bool, rows whose verification succeeded.
      behavior_logprobs: [B, T] log-probs of the policy that sampled the rows.
      rewards: [B] sequence rewards (after `shape_rewards`: the shaped ones).
      truncated: [B] bool, rows cut at the length limit.
      sample_weights: [B] float row weights (ones unless the collector weighs rows).
      ref_logprobs: [B, T] π_ref log-probs (KL), from the rollout or `score`.
      token_rewards: [B, T] per-token rewards of the rollout (multi-turn kits), or None.
      policy_version: [B] int policy version that sampled each row (off-policy rows only).
      old_logprobs: [B, T] π_old of the ratio (`score`), or None when the loss uses its own
        log-probs under stop-gradient.
      stale_rows: [B] bool rows older than the learner's policy (π_old = behaviour policy).
      task_rewards: [B] the rewards before shaping (`shape_rewards`).
      token_rewards_shaped: [B, T] shaped per-token rewards (critic algorithms).
      advantages: [B] or [B, T] (`compute_advantages`, weighted by `weight_advantages`).
      returns, old_values: [B, T] GAE returns and the critic's values (critic algorithms).
      sampled_loss_mask: [B, T] the loss mask before overlong filtering, or None.
    """

    tokens: Optional[jax.Array] = None
    attention_mask: Optional[jax.Array] = None
    positions: Optional[jax.Array] = None
    loss_mask: Optional[jax.Array] = None
    valid: Optional[jax.Array] = None
    behavior_logprobs: Optional[jax.Array] = None
    rewards: Optional[jax.Array] = None
    truncated: Optional[jax.Array] = None
    sample_weights: Optional[jax.Array] = None
    ref_logprobs: Optional[jax.Array] = None
    token_rewards: Optional[jax.Array] = None
    policy_version: Optional[jax.Array] = None
    old_logprobs: Optional[jax.Array] = None
    stale_rows: Optional[jax.Array] = None
    task_rewards: Optional[jax.Array] = None
    token_rewards_shaped: Optional[jax.Array] = None
    advantages: Optional[jax.Array] = None
    returns: Optional[jax.Array] = None
    old_values: Optional[jax.Array] = None
    sampled_loss_mask: Optional[jax.Array] = None

    def only(self, *names: str) -> "TrainingBatch":
        """This batch with every field not in `names` absent (None): what a learner is handed."""
        return self.replace(**{f.name: None for f in dataclasses.fields(self) if f.name not in names})
