"""Off-policy correction weights between π_old and the behaviour (sampler) policy.

The rows of a batch were sampled by a behaviour policy μ (the sampler: another numeric
implementation of the same parameters, or an older policy version) whose log-probs were saved at
sampling time (`behavior_logprobs`); the loss's trust region is taken against π_old (the
learner's own recomputed log-probs). The mismatch π_old / μ is corrected by a stop-gradient
importance weight on each token's loss ("Your Efficient RL Framework Secretly Brings You
Off-Policy RL Training", Yao et al.):

  ℓ'_t = sg(w_t) ℓ_t,  with the log-ratio δ_t = log π_old(y_t) − log μ(y_t) on loss tokens.

Two weightings ("tis" and "mis"), at two levels:
  token level:    ρ_t = exp(δ_t), one weight per token;
  sequence level: ρ = exp(Σ_t m_t δ_t), one weight per row (the product of token ratios).
  "tis" (truncated IS):  w = min(ρ, C)                           — bounded variance, biased;
  "mis" (masked IS):     w = ρ · 1[lo ≤ ρ ≤ C]                   — tokens / rows whose ratio
                          leaves [lo, C] are dropped from the loss, the others keep ρ.
Both are computed in log space (no overflow of exp on long sequences).

`importance_weights` is pure and jit-safe; its result feeds the `token_weights` / `seq_weights`
argument of the losses in `rlvr.core.losses`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlvr.core._util import check_choice, check_ndim, check_range, check_same_shape, masked_mean

__all__ = ["IS_CORRECTIONS", "IS_LEVELS", "importance_weights"]

IS_CORRECTIONS = ("none", "tis", "mis")
IS_LEVELS = ("token", "sequence")


def importance_weights(old_logprobs, behavior_logprobs, loss_mask, *, correction, level="token",
                       threshold=2.0, threshold_low=0.0):
    """Stop-gradient importance weights π_old / μ, truncated ("tis") or masked ("mis").

    Args:
      old_logprobs: float [B, T], log π_old of the sampled tokens.
      behavior_logprobs: float [B, T], log μ of the same tokens (saved by the sampler).
      loss_mask: [B, T] 0/1 or bool; other positions are ignored (may hold garbage).
      correction: "tis" | "mis" ("none" is not a weighting: do not call).
      level: "token" (w [B, T]) | "sequence" (w [B], one per row).
      threshold: C > 0, the truncation cap (tis) / upper bound of the kept ratios (mis).
      threshold_low: lo ≥ 0, the lower bound of the kept ratios (mis only; 0 = no lower bound).

    Returns:
      (weights, metrics): weights float [B, T] (token level, 0 off the mask) or [B] (sequence
      level, 0 for rows with no loss token); metrics, scalars with stable keys:
        "weight_mean":         mean weight over loss tokens (token level) or non-empty rows;
        "truncated_fraction":  fraction of them with ρ > C under tis (0 under mis);
        "masked_fraction":     fraction of them with ρ outside [lo, C] under mis (0 under tis);
        "log_ratio_mean":      mean δ (token level) or Σ_t δ_t (sequence level).
    """
    fn = "importance_weights"
    check_choice(fn, "correction", correction, ("tis", "mis"))
    check_choice(fn, "level", level, IS_LEVELS)
    check_range(fn, "threshold", threshold, lo=0.0, lo_open=True)
    check_range(fn, "threshold_low", threshold_low, lo=0.0)
    old = jnp.asarray(old_logprobs)
    check_ndim(fn, "old_logprobs", old, 2, "[B, T]")
    check_same_shape(fn, old_logprobs=old, behavior_logprobs=behavior_logprobs, loss_mask=loss_mask)
    m = jnp.asarray(loss_mask) > 0
    dtype = jnp.result_type(old, jnp.float32)
    delta = jnp.where(m, old.astype(dtype) - jnp.asarray(behavior_logprobs).astype(dtype), 0)
    if level == "sequence":
        delta = jnp.sum(delta, axis=-1)
        keep = jnp.any(m, axis=-1)
    else:
        keep = m
    delta = jax.lax.stop_gradient(delta)
    log_hi = jnp.log(jnp.asarray(threshold, dtype))
    zero = jnp.zeros((), dtype)
    if correction == "tis":
        over = delta > log_hi
        w = jnp.exp(jnp.minimum(delta, log_hi))
        truncated, masked = over, jnp.zeros_like(over)
    else:
        log_lo = jnp.log(jnp.asarray(threshold_low, dtype))  # -inf for lo = 0
        inside = (delta >= log_lo) & (delta <= log_hi)
        w = jnp.where(inside, jnp.exp(jnp.clip(delta, log_lo, log_hi)), zero)
        truncated, masked = jnp.zeros_like(inside), ~inside
    w = jnp.where(keep, w, zero)
    metrics = {
        "weight_mean": masked_mean(w, keep),
        "truncated_fraction": masked_mean(truncated.astype(dtype), keep),
        "masked_fraction": masked_mean(masked.astype(dtype), keep),
        "log_ratio_mean": masked_mean(delta, keep),
    }
    return w, metrics
