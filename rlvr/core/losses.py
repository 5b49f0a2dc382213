"""Policy and value losses, loss aggregation, entropy, explained variance (docs/algorithms.md (A.5)-(A.7), (A.8)-(A.9), (A.10), (A.11)-(A.12)).

Per-token inputs are aligned `[B, T]` arrays (RolloutBatch convention): `logprobs[b, t]` is the
learner's log π_θ(tokens[b, t] | tokens[b, :t]), `old_logprobs` the same under π_old (the
behaviour policy's saved log-probs for async/SAO), `loss_mask` 1 on policy tokens. Values at
masked positions are never used (they may hold garbage; they are selected away before `exp`).

Every loss returns `(loss, metrics)`: `loss` is a scalar to *minimise*; `metrics` is a dict of
scalar arrays with stable keys. Token-level metrics are token means over the loss mask,
independent of the aggregation mode.

Aggregation (docs/algorithms.md (A.11)-(A.12), docs/architecture.md §3) lives in one place, `aggregate`:
  "token-mean":          Σ_{b,t} m x / Σ_{b,t} m — long sequences weigh more.
  "seq-mean-token-mean": mean over non-empty rows of (Σ_t m x / Σ_t m) — every sequence weighs
                         the same (docs/algorithms.md (A.8)'s 1/|y_i| then 1/G).
  "seq-mean-token-sum":  mean over non-empty rows of Σ_t m x.
  "seq-mean-token-sum-norm": mean over non-empty rows of Σ_t m x / L with a constant L
                         (`length_normalizer`, e.g. the generation's max length): Dr. GRPO's
                         normaliser ("Understanding R1-Zero-Like Training: A Critical
                         Perspective"), free of the per-response 1/|y_i| length bias.
Rows with no loss token (fully masked, e.g. invalid samples) are left out of the row mean.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from rlvr.core._util import (
    check_choice,
    check_ndim,
    check_range,
    check_same_shape,
    masked_mean,
    safe_div,
    valid_or_ones,
)

__all__ = [
    "AGGREGATIONS",
    "aggregate",
    "ppo_token_loss",
    "trust_region_token_loss",
    "sequence_clip_loss",
    "gspo_sequence_loss",
    "cispo_token_loss",
    "value_loss",
    "entropy_from_logits",
    "explained_variance",
]

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def aggregate(per_token, loss_mask, mode, length_normalizer=None):
    """Reduces a per-token quantity to a scalar under an explicit aggregation (docs/algorithms.md (A.11)-(A.12), docs/architecture.md §3).

    Args:
      per_token: float [B, T].
      loss_mask: [B, T] 0/1 or bool.
      mode: "token-mean" | "seq-mean-token-mean" | "seq-mean-token-sum" |
        "seq-mean-token-sum-norm" (see module docstring).
      length_normalizer: the constant L > 0 of "seq-mean-token-sum-norm" (required there,
        ignored by the other modes).

    Returns:
      float scalar; 0 when the mask is empty.
    """
    fn = "aggregate"
    check_choice(fn, "aggregation", mode, AGGREGATIONS)
    if mode == "seq-mean-token-sum-norm":
        if length_normalizer is None:
            raise ValueError(f"{fn}: aggregation 'seq-mean-token-sum-norm' needs `length_normalizer` "
                             f"(the constant length L > 0)")
        check_range(fn, "length_normalizer", length_normalizer, lo=0.0, lo_open=True)
    per_token = jnp.asarray(per_token)
    check_ndim(fn, "per_token", per_token, 2, "[B, T]")
    check_same_shape(fn, per_token=per_token, loss_mask=loss_mask)
    m = jnp.asarray(loss_mask) > 0
    if mode == "token-mean":
        return masked_mean(per_token, m)
    dtype = jnp.result_type(per_token, jnp.float32)
    row_sum = jnp.sum(jnp.where(m, per_token, 0), axis=-1)
    row_n = jnp.sum(m, axis=-1).astype(dtype)
    if mode == "seq-mean-token-mean":
        row_val = safe_div(row_sum, row_n)
    elif mode == "seq-mean-token-sum-norm":
        row_val = row_sum / jnp.asarray(length_normalizer, dtype)
    else:
        row_val = row_sum
    return masked_mean(row_val, row_n > 0)


def _token_weights(fn, token_weights, shape, dtype):
    """Stop-gradient per-token weights [B, T] from None (ones), [B] (per row) or [B, T]."""
    if token_weights is None:
        return None
    w = jnp.asarray(token_weights)
    if w.shape == shape[:1]:
        w = w[:, None]
    elif w.shape != shape:
        raise ValueError(f"{fn}: `token_weights` must be [B]={shape[:1]} or [B, T]={shape}, "
                         f"got {w.shape}")
    return jax.lax.stop_gradient(jnp.broadcast_to(w.astype(dtype), shape))


def _prep_token_inputs(fn, logprobs, old_logprobs, advantages, loss_mask):
    logprobs = jnp.asarray(logprobs)
    old_logprobs = jnp.asarray(old_logprobs)
    loss_mask = jnp.asarray(loss_mask)
    check_ndim(fn, "logprobs", logprobs, 2, "[B, T]")
    check_same_shape(fn, logprobs=logprobs, old_logprobs=old_logprobs, loss_mask=loss_mask)
    advantages = jnp.asarray(advantages)
    b, _ = logprobs.shape
    if advantages.shape == (b,):
        advantages = advantages[:, None]
    elif advantages.shape != logprobs.shape:
        raise ValueError(
            f"{fn}: `advantages` must be [B]={b} or [B, T]={logprobs.shape}, got {advantages.shape}"
        )
    chex.assert_rank([logprobs, old_logprobs, loss_mask], 2)
    m = loss_mask > 0
    dtype = jnp.result_type(logprobs, jnp.float32)
    log_ratio = jnp.where(m, logprobs.astype(dtype) - old_logprobs.astype(dtype), 0)
    return log_ratio, jnp.broadcast_to(advantages.astype(dtype), logprobs.shape), m


def _ratio_metrics(ratio, log_ratio, m):
    """Shared token metrics: ratio stats and approx KL(π_old‖π_θ) (k3 on samples of π_old)."""
    big = jnp.finfo(ratio.dtype).max
    any_tok = jnp.any(m)
    return {
        "ratio_mean": masked_mean(ratio, m),
        "ratio_max": jnp.where(any_tok, jnp.max(jnp.where(m, ratio, -big)), 0.0),
        "ratio_min": jnp.where(any_tok, jnp.min(jnp.where(m, ratio, big)), 0.0),
        "approx_kl": masked_mean((ratio - 1) - log_ratio, m),
        "num_tokens": jnp.sum(m).astype(ratio.dtype),
    }


def ppo_token_loss(
    logprobs,
    old_logprobs,
    advantages,
    loss_mask,
    *,
    clip_low=0.2,
    clip_high=0.2,
    dual_clip=None,
    aggregation="token-mean",
    length_normalizer=None,
    token_weights=None,
):
    """PPO/GRPO clipped surrogate at token level (docs/algorithms.md (A.11)-(A.12), (A.8)).

    ρ_t = exp(logp_t − old_t); per-token loss ℓ_t = −min(ρ_t Â_t, clip(ρ_t, 1−ε_low, 1+ε_high) Â_t)
    (asymmetric ε allows "clip-higher"). With `dual_clip = c > 1`, tokens with Â_t < 0 use
    min(ℓ_t, −c Â_t), bounding the loss of very large ratios on negative advantages.

    Args:
      logprobs, old_logprobs: float [B, T].
      advantages: float [B] (broadcast over tokens) or [B, T].
      loss_mask: [B, T] 0/1 or bool.
      clip_low, clip_high: ε_low in [0, 1), ε_high ≥ 0.
      dual_clip: None or c > 1.
      aggregation, length_normalizer: see `aggregate`.
      token_weights: optional float [B] or [B, T]: a stop-gradient weight w_t on each token's
        loss, w_t ℓ_t (off-policy correction, `rlvr.core.importance`); None = 1.

    Returns:
      (loss, metrics): loss scalar; metrics keys "pg_loss", "clip_fraction",
      "clip_fraction_low", "clip_fraction_high", "dual_clip_fraction", "ratio_mean",
      "ratio_max", "ratio_min", "approx_kl", "num_tokens".
    """
    fn = "ppo_token_loss"
    check_choice(fn, "aggregation", aggregation, AGGREGATIONS)
    check_range(fn, "clip_low", clip_low, lo=0.0, hi=1.0, hi_open=True)
    check_range(fn, "clip_high", clip_high, lo=0.0)
    if dual_clip is not None:
        check_range(fn, "dual_clip", dual_clip, lo=1.0, lo_open=True)
    log_ratio, adv, m = _prep_token_inputs(fn, logprobs, old_logprobs, advantages, loss_mask)
    ratio = jnp.exp(log_ratio)
    clipped = jnp.clip(ratio, 1 - clip_low, 1 + clip_high)
    loss1 = -adv * ratio
    loss2 = -adv * clipped
    per_token = jnp.maximum(loss1, loss2)
    is_clipped = loss2 > loss1
    if dual_clip is not None:
        loss3 = -adv * dual_clip
        dual = (adv < 0) & (per_token > loss3)
        per_token = jnp.where(adv < 0, jnp.minimum(per_token, loss3), per_token)
    else:
        dual = jnp.zeros_like(m)
    w = _token_weights(fn, token_weights, m.shape, ratio.dtype)
    if w is not None:
        per_token = w * per_token
    loss = aggregate(per_token, m, aggregation, length_normalizer)
    metrics = {
        "pg_loss": loss,
        "clip_fraction": masked_mean(is_clipped.astype(ratio.dtype), m),
        "clip_fraction_low": masked_mean((is_clipped & (ratio < 1)).astype(ratio.dtype), m),
        "clip_fraction_high": masked_mean((is_clipped & (ratio > 1)).astype(ratio.dtype), m),
        "dual_clip_fraction": masked_mean(dual.astype(ratio.dtype), m),
        **_ratio_metrics(ratio, log_ratio, m),
    }
    return loss, metrics


def trust_region_token_loss(
    logprobs,
    old_logprobs,
    advantages,
    loss_mask,
    *,
    clip_low,
    clip_high,
    aggregation="token-mean",
    length_normalizer=None,
    token_weights=None,
):
    """SAO's strict double-sided token trust region (docs/algorithms.md (A.19), (A.9)).

    ρ_t = exp(logp_t − old_t) against the *behaviour* log-probs saved at sampling time. Tokens
    whose ratio lies outside [1−ε_low, 1+ε_high] are masked out entirely — whatever the sign of
    Â_t (unlike PPO, which keeps the un-clipped side) — so they give neither loss nor gradient.
    Inside the region ℓ_t = −ρ_t Â_t. Aggregation uses the original `loss_mask` as denominator,
    so a masked-out token counts as a zero contribution (the scale of in-region gradients does not
    depend on how many tokens left the region).

    Args:
      logprobs, old_logprobs: float [B, T].
      advantages: float [B] or [B, T].
      loss_mask: [B, T].
      clip_low: ε_low in [0, 1); clip_high: ε_high ≥ 0.
      aggregation, length_normalizer: see `aggregate`.
      token_weights: optional stop-gradient weights [B] or [B, T] (see `ppo_token_loss`).

    Returns:
      (loss, metrics): metrics keys "pg_loss", "masked_fraction", "masked_fraction_low",
      "masked_fraction_high", "ratio_mean", "ratio_max", "ratio_min", "approx_kl", "num_tokens".
    """
    fn = "trust_region_token_loss"
    check_choice(fn, "aggregation", aggregation, AGGREGATIONS)
    check_range(fn, "clip_low", clip_low, lo=0.0, hi=1.0, hi_open=True)
    check_range(fn, "clip_high", clip_high, lo=0.0)
    log_ratio, adv, m = _prep_token_inputs(fn, logprobs, old_logprobs, advantages, loss_mask)
    ratio = jnp.exp(log_ratio)
    low = ratio < 1 - clip_low
    high = ratio > 1 + clip_high
    inside = ~(low | high)
    per_token = jnp.where(inside, -adv * ratio, 0)
    w = _token_weights(fn, token_weights, m.shape, ratio.dtype)
    if w is not None:
        per_token = w * per_token
    loss = aggregate(per_token, m, aggregation, length_normalizer)
    f = ratio.dtype
    metrics = {
        "pg_loss": loss,
        "masked_fraction": masked_mean((~inside).astype(f), m),
        "masked_fraction_low": masked_mean(low.astype(f), m),
        "masked_fraction_high": masked_mean(high.astype(f), m),
        **_ratio_metrics(ratio, log_ratio, m),
    }
    return loss, metrics


def _sequence_inputs(fn, logprobs, old_logprobs, advantages, loss_mask, valid):
    logprobs = jnp.asarray(logprobs)
    old_logprobs = jnp.asarray(old_logprobs)
    loss_mask = jnp.asarray(loss_mask)
    advantages = jnp.asarray(advantages)
    check_ndim(fn, "logprobs", logprobs, 2, "[B, T]")
    check_same_shape(fn, logprobs=logprobs, old_logprobs=old_logprobs, loss_mask=loss_mask)
    b = logprobs.shape[0]
    if advantages.shape != (b,):
        raise ValueError(f"{fn}: `advantages` must be [B]={b} (one per action), got {advantages.shape}")
    if valid is not None and jnp.shape(valid) != (b,):
        raise ValueError(f"{fn}: `valid` must be [B]={b}, got {jnp.shape(valid)}")
    chex.assert_rank([logprobs, old_logprobs, loss_mask], 2)
    m = loss_mask > 0
    dtype = jnp.result_type(logprobs, jnp.float32)
    log_ratio = jnp.where(m, logprobs.astype(dtype) - old_logprobs.astype(dtype), 0)
    valid = valid_or_ones(valid, (b,)) & jnp.any(m, axis=-1)
    return log_ratio, advantages.astype(dtype), m, valid


def _sequence_weights(fn, seq_weights, b, dtype):
    if seq_weights is None:
        return None
    w = jnp.asarray(seq_weights)
    if w.shape != (b,):
        raise ValueError(f"{fn}: `seq_weights` must be [B]={b}, got {w.shape}")
    return jax.lax.stop_gradient(w.astype(dtype))


def _clipped_sequence_objective(seq_log_ratio, adv, valid, lo, hi, max_log_ratio, weights=None):
    seq_log_ratio = jnp.clip(seq_log_ratio, -max_log_ratio, max_log_ratio)
    ratio = jnp.exp(seq_log_ratio)
    clipped = jnp.clip(ratio, lo, hi)
    obj = jnp.minimum(ratio * adv, clipped * adv)
    if weights is not None:
        obj = weights * obj
    is_clipped = clipped * adv < ratio * adv
    j = masked_mean(obj, valid)
    f = ratio.dtype
    metrics = {
        "objective": j,
        "clip_fraction": masked_mean(is_clipped.astype(f), valid),
        "seq_ratio_mean": masked_mean(ratio, valid),
        "seq_log_ratio_mean": masked_mean(seq_log_ratio, valid),
        "approx_kl": masked_mean((ratio - 1) - seq_log_ratio, valid),
        "num_sequences": jnp.sum(valid).astype(f),
    }
    return -j, metrics


def sequence_clip_loss(
    logprobs, old_logprobs, advantages, loss_mask, *, clip_eps, clip_high=None, valid=None,
    max_log_ratio=20.0, seq_weights=None
):
    """PivotRL turn-level clipped objective (docs/algorithms.md (A.10), (A.18), §6).

    r_i = π_θ(a_i|s)/π_old(a_i|s) = exp(Σ_t m_t (logp_t − old_t)) over the whole action — the
    product of token probabilities, *no* 1/T_i root (that is `gspo_sequence_loss`).
    J = (1/K) Σ_i min(r_i Â_i, clip(r_i, 1−ε, 1+ε) Â_i) over valid samples; loss = −J.
    The reference-KL term of docs/algorithms.md (A.10) is added separately (rlvr.core.kl).

    Args:
      logprobs, old_logprobs: float [K, T], one action per row.
      advantages: float [K], one per action (e.g. grpo_advantages of the group, flattened).
      loss_mask: [K, T]; 1 on the action's tokens.
      clip_eps: ε in (0, 1) (the lower bound 1 − ε, and the upper bound unless clip_high).
      clip_high: optional ε_high ≥ 0 for an asymmetric upper bound 1 + ε_high (None: ε).
      valid: optional bool [K]; invalid rows and rows with no action token are excluded.
      max_log_ratio: numerical guard: the summed log-ratio is clipped to ±this before exp.
      seq_weights: optional float [K]: a stop-gradient weight w_i on each action's objective,
        J = (1/K) Σ_i w_i min(...) (sequence-level off-policy correction); None = 1.

    Returns:
      (loss, metrics): loss = −J (scalar); metrics keys "objective", "clip_fraction",
      "seq_ratio_mean", "seq_log_ratio_mean", "approx_kl", "num_sequences".
    """
    fn = "sequence_clip_loss"
    check_range(fn, "clip_eps", clip_eps, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    if clip_high is None:
        clip_high = clip_eps
    check_range(fn, "clip_high", clip_high, lo=0.0)
    log_ratio, adv, m, valid = _sequence_inputs(fn, logprobs, old_logprobs, advantages, loss_mask, valid)
    seq_lr = jnp.sum(log_ratio, axis=-1)
    w = _sequence_weights(fn, seq_weights, adv.shape[0], log_ratio.dtype)
    return _clipped_sequence_objective(seq_lr, adv, valid, 1 - clip_eps, 1 + clip_high, max_log_ratio, w)


def gspo_sequence_loss(
    logprobs,
    old_logprobs,
    advantages,
    loss_mask,
    *,
    clip_low=3e-4,
    clip_high=4e-4,
    valid=None,
    max_log_ratio=20.0,
    seq_weights=None,
):
    """GSPO sequence loss with the geometric-mean ratio (a separate option; docs/algorithms.md (A.10) note).

    s_i = exp((1/|y_i|) Σ_t m_t (logp_t − old_t)) — the length-normalised (geometric mean) ratio;
    J = mean_i min(s_i Â_i, clip(s_i, 1−ε_low, 1+ε_high) Â_i); loss = −J. Defaults follow the
    GSPO paper's small clip range ("Group Sequence Policy Optimization"). Not the PivotRL
    objective (that is `sequence_clip_loss`).

    Args / Returns: as `sequence_clip_loss`, with asymmetric `clip_low`, `clip_high` and optional
    stop-gradient `seq_weights` [B].
    """
    fn = "gspo_sequence_loss"
    check_range(fn, "clip_low", clip_low, lo=0.0, hi=1.0, hi_open=True)
    check_range(fn, "clip_high", clip_high, lo=0.0)
    log_ratio, adv, m, valid = _sequence_inputs(fn, logprobs, old_logprobs, advantages, loss_mask, valid)
    n = jnp.sum(m, axis=-1).astype(log_ratio.dtype)
    seq_lr = safe_div(jnp.sum(log_ratio, axis=-1), n)
    w = _sequence_weights(fn, seq_weights, adv.shape[0], log_ratio.dtype)
    return _clipped_sequence_objective(seq_lr, adv, valid, 1 - clip_low, 1 + clip_high, max_log_ratio, w)


def cispo_token_loss(
    logprobs,
    old_logprobs,
    advantages,
    loss_mask,
    *,
    clip_low=0.2,
    clip_high=0.2,
    aggregation="token-mean",
    length_normalizer=None,
    token_weights=None,
):
    """CISPO: clipped importance-sampling weight times a REINFORCE term ("MiniMax-M1: Scaling
    Test-Time Compute Efficiently with Lightning Attention").

    ρ_t = exp(logp_t − old_t), r̂_t = clip(ρ_t, 1−ε_low, 1+ε_high);
    ℓ_t = −sg(r̂_t) Â_t logp_t, so ∇ℓ_t = −r̂_t Â_t ∇logp_t. Unlike the PPO clip, no token is
    dropped from the gradient: clipping bounds the weight, every token keeps its gradient.
    (The paper leaves the lower bound open: a large ε_low, e.g. clip_low close to 1.)

    Args:
      logprobs, old_logprobs: float [B, T].
      advantages: float [B] or [B, T].
      loss_mask: [B, T].
      clip_low: ε_low in [0, 1); clip_high: ε_high ≥ 0.
      aggregation, length_normalizer: see `aggregate`.
      token_weights: optional stop-gradient weights [B] or [B, T] (see `ppo_token_loss`).

    Returns:
      (loss, metrics): metrics keys "pg_loss", "clip_fraction", "clip_fraction_low",
      "clip_fraction_high", "ratio_mean", "ratio_max", "ratio_min", "approx_kl", "num_tokens".
      The loss's value is −Σ sg(r̂) Â logp (its gradient is the objective's; its value is not a
      surrogate of the return).
    """
    fn = "cispo_token_loss"
    check_choice(fn, "aggregation", aggregation, AGGREGATIONS)
    check_range(fn, "clip_low", clip_low, lo=0.0, hi=1.0, hi_open=True)
    check_range(fn, "clip_high", clip_high, lo=0.0)
    log_ratio, adv, m = _prep_token_inputs(fn, logprobs, old_logprobs, advantages, loss_mask)
    ratio = jnp.exp(log_ratio)
    weight = jax.lax.stop_gradient(jnp.clip(ratio, 1 - clip_low, 1 + clip_high))
    lp = jnp.where(m, jnp.asarray(logprobs).astype(ratio.dtype), 0)
    per_token = -weight * adv * lp
    w = _token_weights(fn, token_weights, m.shape, ratio.dtype)
    if w is not None:
        per_token = w * per_token
    loss = aggregate(per_token, m, aggregation, length_normalizer)
    low = ratio < 1 - clip_low
    high = ratio > 1 + clip_high
    f = ratio.dtype
    metrics = {
        "pg_loss": loss,
        "clip_fraction": masked_mean((low | high).astype(f), m),
        "clip_fraction_low": masked_mean(low.astype(f), m),
        "clip_fraction_high": masked_mean(high.astype(f), m),
        **_ratio_metrics(ratio, log_ratio, m),
    }
    return loss, metrics


def value_loss(values, old_values, returns, loss_mask, *, clip_eps=None, aggregation="token-mean",
               length_normalizer=None):
    """Critic regression loss, optionally clipped (docs/algorithms.md (A.7), (A.12)).

    ℓ_t = ½ (V_t − R_t)²; with clip_eps: V^clip_t = clip(V_t, V^old_t − ε, V^old_t + ε) (the same
    as V^old_t + clip(V_t − V^old_t, −ε, ε) in exact arithmetic, but a value inside the range stays
    bit-identical instead of being rounded through the difference) and
    ℓ_t = ½ max((V_t − R_t)², (V^clip_t − R_t)²). "value_clip_fraction" is the fraction of masked
    tokens where the clipped term is the larger one (so it is 0 when every V_t lies in range).

    Args:
      values: float [B, T] current critic values; old_values: [B, T] values at rollout time;
      returns: [B, T] targets (e.g. from `gae`); loss_mask: [B, T].
      clip_eps: None or ε > 0.
      aggregation, length_normalizer: see `aggregate`.

    Returns:
      (loss, metrics): keys "value_loss", "value_clip_fraction", "value_mean", "return_mean",
      "explained_variance".
    """
    fn = "value_loss"
    check_choice(fn, "aggregation", aggregation, AGGREGATIONS)
    values = jnp.asarray(values)
    check_ndim(fn, "values", values, 2, "[B, T]")
    check_same_shape(fn, values=values, old_values=old_values, returns=returns, loss_mask=loss_mask)
    if clip_eps is not None:
        check_range(fn, "clip_eps", clip_eps, lo=0.0, lo_open=True)
    m = jnp.asarray(loss_mask) > 0
    dtype = jnp.result_type(values, jnp.float32)
    v = jnp.where(m, values.astype(dtype), 0)
    r = jnp.where(m, jnp.asarray(returns).astype(dtype), 0)
    err = jnp.square(v - r)
    if clip_eps is not None:
        old = jnp.where(m, jnp.asarray(old_values).astype(dtype), 0)
        v_clip = jnp.clip(v, old - clip_eps, old + clip_eps)
        err_clip = jnp.square(v_clip - r)
        clip_frac = masked_mean((err_clip > err).astype(dtype), m)
        err = jnp.maximum(err, err_clip)
    else:
        clip_frac = jnp.zeros((), dtype)
    loss = 0.5 * aggregate(err, m, aggregation, length_normalizer)
    metrics = {
        "value_loss": loss,
        "value_clip_fraction": clip_frac,
        "value_mean": masked_mean(v, m),
        "return_mean": masked_mean(r, m),
        "explained_variance": explained_variance(jax.lax.stop_gradient(v), r, m),
    }
    return loss, metrics


def entropy_from_logits(logits):
    """Entropy of softmax(logits) over the last axis (docs/algorithms.md (A.11)-(A.12) entropy bonus, docs/algorithms.md (A.12)).

    H = −Σ_v p_v log p_v, computed from log_softmax; -inf logits (masked vocabulary) contribute 0
    and give no NaN in value or gradient.

    Args:
      logits: float [..., V].

    Returns:
      float [...].
    """
    logits = jnp.asarray(logits)
    if logits.ndim < 1:
        raise ValueError(f"entropy_from_logits: `logits` must be [..., V], got shape {logits.shape}")
    logp = jax.nn.log_softmax(logits.astype(jnp.result_type(logits, jnp.float32)), axis=-1)
    finite = jnp.isfinite(logp)
    logp_safe = jnp.where(finite, logp, 0)
    p = jnp.where(finite, jnp.exp(logp_safe), 0)
    return -jnp.sum(p * logp_safe, axis=-1)


def explained_variance(values, returns, mask):
    """Explained variance 1 − Var[R − V] / Var[R] over masked tokens (docs/algorithms.md (A.5)-(A.7), docs/architecture.md §7).

    Args:
      values, returns: float [...] (same shape); mask: same shape, 0/1 or bool.

    Returns:
      float scalar; 0 when the mask is empty or Var[R] = 0 (never NaN).
    """
    fn = "explained_variance"
    check_same_shape(fn, values=values, returns=returns, mask=mask)
    m = jnp.asarray(mask) > 0
    dtype = jnp.result_type(jnp.asarray(values), jnp.float32)
    v = jnp.asarray(values).astype(dtype)
    r = jnp.asarray(returns).astype(dtype)

    def var(x):
        mu = masked_mean(x, m)
        return masked_mean(jnp.square(x - mu), m)

    var_r = var(r)
    return jnp.where(var_r > 0, 1 - safe_div(var(r - v), var_r), 0.0)
