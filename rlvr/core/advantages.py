"""Sequence-level advantages from scalar rewards: GRPO, RLOO, REINFORCE (docs/algorithms.md (A.2), (A.3)-(A.4)).

All functions are pure and jit/vmap/grad-safe. Rewards come in the group view
`[num_groups, group_size]` (RolloutBatch.group_view); `valid` (bool, same shape) marks samples
that take part — env_error / masked samples (docs/verifiers.md (V.1)) are excluded from every statistic and get
advantage exactly 0. A group whose valid rewards are all equal gets exactly 0 (docs/architecture.md §7): the
test is `max == min` over the valid rewards, not `std < eps`, so float rounding can never turn
an all-equal group into noise.
"""

from __future__ import annotations

import chex
import jax.numpy as jnp

from rlvr.core._util import check_ndim, check_range, check_same_shape, safe_div, safe_sqrt, valid_or_ones

__all__ = [
    "grpo_advantages",
    "rloo_advantages",
    "reinforce_advantages",
    "update_running_baseline",
]


def _group_stats(rewards, valid):
    """Per-group count, mean, population variance and an exact all-equal flag over valid samples."""
    v = valid
    n = jnp.sum(v, axis=-1).astype(rewards.dtype)  # [G]
    total = jnp.sum(jnp.where(v, rewards, 0), axis=-1)
    mean = safe_div(total, n)
    centered = jnp.where(v, rewards - mean[..., None], 0)
    var = safe_div(jnp.sum(centered * centered, axis=-1), n)
    big = jnp.finfo(rewards.dtype).max
    rmax = jnp.max(jnp.where(v, rewards, -big), axis=-1)
    rmin = jnp.min(jnp.where(v, rewards, big), axis=-1)
    all_equal = (rmax <= rmin)  # also True for groups with no valid sample
    return n, mean, var, all_equal


def _prep_group_rewards(fn, rewards, valid):
    rewards = jnp.asarray(rewards)
    if not jnp.issubdtype(rewards.dtype, jnp.floating):
        rewards = rewards.astype(jnp.float32)
    check_ndim(fn, "rewards", rewards, 2, "[num_groups, group_size]")
    if valid is not None:
        check_same_shape(fn, rewards=rewards, valid=valid)
    valid = valid_or_ones(valid, rewards.shape)
    chex.assert_rank([rewards, valid], 2)
    return rewards, valid


def grpo_advantages(rewards, valid=None, *, scale_by_std=True, eps=1e-6):
    """GRPO group-relative advantages (docs/algorithms.md (A.2)).

    Â_i = (R_i − R̄) / (σ_R + eps) with R̄ and the *population* std σ_R taken over the valid
    samples of the group. `scale_by_std=False` gives Â_i = R_i − R̄ (the no-std, Dr. GRPO-style
    variant).

    Args:
      rewards: float [num_groups, group_size].
      valid: optional bool [num_groups, group_size]; False samples are excluded from the
        group's mean and std and get advantage 0.
      scale_by_std: divide by σ_R + eps (True) or not (False).
      eps: δ of docs/algorithms.md (A.2), a divide-by-zero guard only.

    Returns:
      float [num_groups, group_size]. Exactly 0 for invalid samples, for groups whose valid
      rewards are all equal, and for groups with no valid sample.
    """
    fn = "grpo_advantages"
    rewards, valid = _prep_group_rewards(fn, rewards, valid)
    check_range(fn, "eps", eps, lo=0.0)
    _, mean, var, all_equal = _group_stats(rewards, valid)
    adv = rewards - mean[..., None]
    if scale_by_std:
        adv = adv / (safe_sqrt(var) + eps)[..., None]
    keep = valid & ~all_equal[..., None]
    return jnp.where(keep, adv, 0).astype(rewards.dtype)


def rloo_advantages(rewards, valid=None):
    """RLOO leave-one-out advantages (docs/algorithms.md (A.3)).

    b_i = mean of the other valid rewards of the group, Â_i = R_i − b_i. Groups with fewer than
    two valid samples, and groups whose valid rewards are all equal, get exactly 0.

    Args:
      rewards: float [num_groups, group_size].
      valid: optional bool [num_groups, group_size].

    Returns:
      float [num_groups, group_size]; 0 on invalid samples.
    """
    fn = "rloo_advantages"
    rewards, valid = _prep_group_rewards(fn, rewards, valid)
    n, _, _, all_equal = _group_stats(rewards, valid)
    total = jnp.sum(jnp.where(valid, rewards, 0), axis=-1, keepdims=True)
    others = jnp.maximum(n[..., None] - 1, 1)
    baseline = (total - rewards) / others
    keep = valid & (n[..., None] >= 2) & ~all_equal[..., None]
    return jnp.where(keep, rewards - baseline, 0).astype(rewards.dtype)


def reinforce_advantages(rewards, baseline, valid=None):
    """REINFORCE advantages with an external (global or running) baseline (docs/algorithms.md (A.4)).

    Â_i = R_i − b, where b is a scalar or anything broadcastable to `rewards` (e.g. a per-task
    running baseline). Keep b independent of R_i (a running baseline from *earlier* batches, see
    `update_running_baseline`) for an unbiased gradient.

    Args:
      rewards: float [...] (e.g. [B] or [num_groups, group_size]).
      baseline: float scalar or broadcastable to rewards.
      valid: optional bool, rewards' shape; invalid samples get 0.

    Returns:
      float, rewards' shape.
    """
    fn = "reinforce_advantages"
    rewards = jnp.asarray(rewards)
    if not jnp.issubdtype(rewards.dtype, jnp.floating):
        rewards = rewards.astype(jnp.float32)
    baseline = jnp.asarray(baseline, rewards.dtype)
    try:
        jnp.broadcast_shapes(baseline.shape, rewards.shape)
    except ValueError:
        raise ValueError(
            f"{fn}: `baseline` shape {baseline.shape} does not broadcast to rewards {rewards.shape}"
        ) from None
    if valid is not None:
        check_same_shape(fn, rewards=rewards, valid=valid)
    valid = valid_or_ones(valid, rewards.shape)
    return jnp.where(valid, rewards - baseline, 0).astype(rewards.dtype)


def update_running_baseline(baseline, rewards, valid=None, decay=0.9):
    """Exponential-moving-average baseline for REINFORCE (docs/algorithms.md (A.3)-(A.4)).

    b' = decay · b + (1 − decay) · mean(valid rewards). With no valid reward, b' = b.

    Args:
      baseline: float scalar, the current baseline.
      rewards: float [...], this batch's rewards.
      valid: optional bool, rewards' shape.
      decay: in [0, 1].

    Returns:
      float scalar, the new baseline.
    """
    fn = "update_running_baseline"
    check_range(fn, "decay", decay, lo=0.0, hi=1.0)
    rewards = jnp.asarray(rewards)
    if not jnp.issubdtype(rewards.dtype, jnp.floating):
        rewards = rewards.astype(jnp.float32)
    if valid is not None:
        check_same_shape(fn, rewards=rewards, valid=valid)
    valid = valid_or_ones(valid, rewards.shape)
    baseline = jnp.asarray(baseline, rewards.dtype)
    chex.assert_rank(baseline, 0)
    n = jnp.sum(valid).astype(rewards.dtype)
    batch_mean = safe_div(jnp.sum(jnp.where(valid, rewards, 0)), n)
    new = decay * baseline + (1 - decay) * batch_mean
    return jnp.where(n > 0, new, baseline)
