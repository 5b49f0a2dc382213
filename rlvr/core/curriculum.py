"""Curriculum sampling weights over tasks (docs/algorithms.md (A.20)).

All functions map per-task statistics (recent success rates p_x) to sampling weights that sum to
1. They are pure and jit-safe; the sampler (rlvr/tasks) draws tasks with them.

- docs/algorithms.md (A.20)  w_x ∝ [p_x (1 − p_x)]^α — favours tasks of medium success rate (where group methods
  get signal). A floor keeps all-solved / never-solved tasks sampled with a tiny weight, so their
  success estimates can still move (difficulty labels must not freeze).
- docs/algorithms.md (A.20)  Δp_x = p_x^(k) − p_x^(k−Δ) — learning progress; favour tasks still improving and not
  saturated.
- docs/algorithms.md (A.20)  D_train = λ_e D_easy + λ_m D_medium + λ_h D_hard + λ_o D_OOD — fixed bucket proportions,
  so easy tasks (against forgetting), hard ones and OOD monitors are never crowded out.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rlvr.core._util import check_ndim, check_range, check_same_shape, concrete_value, safe_div

__all__ = [
    "variance_weights",
    "learning_progress_weights",
    "difficulty_buckets",
    "mixture_weights",
    "BUCKETS",
]

BUCKETS = ("easy", "medium", "hard", "ood")


def _prep_rates(fn, name, p):
    p = jnp.asarray(p)
    if not jnp.issubdtype(p.dtype, jnp.floating):
        p = p.astype(jnp.float32)
    check_ndim(fn, name, p, 1, "[num_tasks]")
    return p


def variance_weights(success_rate, *, alpha=1.0, floor=1e-3):
    """Task weights ∝ [p (1 − p)]^α (docs/algorithms.md (A.20)).

    Args:
      success_rate: float [num_tasks], recent success rates p_x in [0, 1].
      alpha: α ≥ 0 (0 = uniform; larger = sharper preference for p ≈ 0.5).
      floor: ≥ 0, minimum unnormalised weight *relative to a p = 0.5 task* (whose weight is
        0.25^α); so a task with p ∈ {0, 1} keeps weight floor · 0.25^α before normalising.

    Returns:
      float [num_tasks], non-negative, summing to 1 (uniform if every weight is 0).
    """
    fn = "variance_weights"
    p = _prep_rates(fn, "success_rate", success_rate)
    check_range(fn, "alpha", alpha, lo=0.0)
    check_range(fn, "floor", floor, lo=0.0)
    base = jnp.clip(p * (1 - p), 0.0, 0.25)
    pos = base > 0
    w = jnp.where(pos, jnp.exp(alpha * jnp.log(jnp.where(pos, base, 1.0))), jnp.where(alpha == 0, 1.0, 0.0))
    w = jnp.maximum(w, floor * jnp.power(0.25, alpha))
    total = jnp.sum(w)
    return jnp.where(total > 0, w / jnp.where(total > 0, total, 1), 1.0 / p.shape[0])


def learning_progress_weights(
    success_rate, previous_success_rate, *, absolute=False, saturation=1.0, floor=1e-3
):
    """Task weights from learning progress Δp = p^(k) − p^(k−Δ) (docs/algorithms.md (A.20)).

    score_x = max(Δp_x, 0) (tasks still improving), or |Δp_x| with `absolute=True` (also
    revisit tasks being forgotten); tasks with p^(k) ≥ `saturation` get score 0 (saturated).
    weight ∝ max(score, floor).

    Args:
      success_rate: float [num_tasks], p^(k) now.
      previous_success_rate: float [num_tasks], p^(k−Δ) Δ steps ago.
      absolute: use |Δp| instead of its positive part.
      saturation: in (0, 1]; tasks at or above it count as saturated.
      floor: ≥ 0, minimum unnormalised weight (in units of Δp).

    Returns:
      float [num_tasks], summing to 1 (uniform when no task has progress and floor is 0).
    """
    fn = "learning_progress_weights"
    p = _prep_rates(fn, "success_rate", success_rate)
    prev = _prep_rates(fn, "previous_success_rate", previous_success_rate)
    check_same_shape(fn, success_rate=p, previous_success_rate=prev)
    check_range(fn, "saturation", saturation, lo=0.0, hi=1.0, lo_open=True)
    check_range(fn, "floor", floor, lo=0.0)
    delta = p - prev
    score = jnp.abs(delta) if absolute else jnp.maximum(delta, 0.0)
    score = jnp.where(p >= saturation, 0.0, score)
    w = jnp.maximum(score, floor)
    total = jnp.sum(w)
    return jnp.where(total > 0, w / jnp.where(total > 0, total, 1), 1.0 / p.shape[0])


def difficulty_buckets(success_rate, *, thresholds=(0.2, 0.8), ood=None):
    """Bucket ids for docs/algorithms.md (A.20): 0 easy (p > hi), 1 medium (lo ≤ p ≤ hi), 2 hard (p < lo), 3 OOD.

    Args:
      success_rate: float [num_tasks].
      thresholds: (lo, hi) with 0 ≤ lo ≤ hi ≤ 1.
      ood: optional bool [num_tasks]; True tasks go to bucket 3 whatever their p.

    Returns:
      int32 [num_tasks].
    """
    fn = "difficulty_buckets"
    p = _prep_rates(fn, "success_rate", success_rate)
    lo, hi = thresholds
    check_range(fn, "thresholds[0]", lo, lo=0.0, hi=1.0)
    check_range(fn, "thresholds[1]", hi, lo=0.0, hi=1.0)
    lo_c, hi_c = concrete_value(lo), concrete_value(hi)
    if lo_c is not None and hi_c is not None and lo_c > hi_c:
        raise ValueError(f"{fn}: thresholds must satisfy lo <= hi, got {thresholds}")
    ids = jnp.where(p > hi, 0, jnp.where(p < lo, 2, 1)).astype(jnp.int32)
    if ood is not None:
        check_same_shape(fn, success_rate=p, ood=ood)
        ids = jnp.where(jnp.asarray(ood).astype(bool), 3, ids)
    return ids


def mixture_weights(
    success_rate,
    *,
    proportions=(0.2, 0.5, 0.2, 0.1),
    thresholds=(0.2, 0.8),
    ood=None,
    within=None,
):
    """Per-task weights realising a fixed easy/medium/hard/OOD mixture (docs/algorithms.md (A.20)).

    Bucket b receives total mass λ_b (`proportions`, order easy, medium, hard, OOD); buckets with
    no task give their mass to the others in proportion (λ renormalised over non-empty buckets).
    Inside a bucket, mass is split uniformly, or ∝ `within` (e.g. `variance_weights`) when given
    (uniform again in a bucket whose `within` weights sum to 0).

    Args:
      success_rate: float [num_tasks].
      proportions: 4 non-negative numbers (λ_e, λ_m, λ_h, λ_o), not all 0.
      thresholds, ood: see `difficulty_buckets`.
      within: optional float [num_tasks] ≥ 0.

    Returns:
      float [num_tasks] summing to 1.
    """
    fn = "mixture_weights"
    p = _prep_rates(fn, "success_rate", success_rate)
    lam = jnp.asarray(proportions, p.dtype)
    if lam.shape != (4,):
        raise ValueError(f"{fn}: `proportions` must be 4 numbers (easy, medium, hard, ood), got {lam.shape}")
    lam_np = concrete_value(proportions)
    if lam_np is not None and (np.any(lam_np < 0) or float(np.sum(lam_np)) <= 0):
        raise ValueError(f"{fn}: `proportions` must be non-negative and not all 0, got {proportions}")
    ids = difficulty_buckets(p, thresholds=thresholds, ood=ood)
    onehot = jax.nn.one_hot(ids, 4, dtype=p.dtype)  # [N, 4]
    count = jnp.sum(onehot, axis=0)  # [4]
    lam_eff = jnp.where(count > 0, lam, 0.0)
    total = jnp.sum(lam_eff)
    # All the requested mass sits on empty buckets: fall back to uniform over tasks.
    lam_eff = jnp.where(total > 0, safe_div(lam_eff, total), count / p.shape[0])
    if within is None:
        inner = jnp.ones_like(p)
    else:
        check_same_shape(fn, success_rate=p, within=within)
        inner = jnp.asarray(within).astype(p.dtype)
    bucket_sum = onehot.T @ inner  # [4]
    uniform = jnp.take(bucket_sum, ids) <= 0
    inner = jnp.where(uniform, 1.0, inner)
    bucket_sum = onehot.T @ inner
    share = safe_div(inner, jnp.take(bucket_sum, ids))
    return share * jnp.take(lam_eff, ids)
