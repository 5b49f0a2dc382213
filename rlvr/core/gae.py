"""Generalised Advantage Estimation with Skip-Observation (SPEC R3.3, R3.4; 002 eq.68-69, 003 §4.2).

A row is a token stream [prompt, a_0, o_0, a_1, o_1, ...]; `loss_mask` is 1 on policy tokens
only. Token rewards live on policy tokens (typically the terminal reward on the last policy token,
plus optional per-token penalties such as KL, eq.22).

Skip-Observation GAE (`skip_observations=True`) equals: delete every token with loss_mask 0,
run textbook GAE on the remaining policy tokens (the value after the last policy token is
`bootstrap_value`, default 0 = terminal), scatter the result back; non-policy tokens get 0.
So the TD error at the last token of action i uses the value at the first token of action i+1
across the observation: δ = r + γ V(a_{i+1,0}) − V(a_{i,N}), Â(a_{i,N}) = δ + γλ Â(a_{i+1,0}).
Rewards placed on non-policy tokens are ignored in this mode.

Naive GAE (`skip_observations=False`, the SAO ablation baseline): every token from the start of
the row up to and including the last policy token is an ordinary step (observation tokens carry
their own values and rewards); tokens after the last policy token (trailing padding) are not
steps. Outputs are still reported on policy tokens only (0 elsewhere).

Both modes are the same computation over a step mask m: two reverse affine recurrences
  x_t = m_t V_t + (1 − m_t) x_{t+1},   x_T = bootstrap   (value of the next step),
  y_t = m_t (δ_t + γλ y_{t+1}) + (1 − m_t) y_{t+1},  y_T = 0,  δ_t = r_t + γ x_{t+1} − V_t,
and advantages = m · y. `method="scan"` runs them as one fused reverse `lax.scan` over T
(fast on CPU); `method="associative"` runs each as a `lax.associative_scan` over composed affine
maps, depth O(log T) (fast on GPU/TPU). `method="auto"` picks by `jax.default_backend()` at
trace time.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from rlvr.core._util import check_choice, check_ndim, check_range, check_same_shape

__all__ = ["gae", "GAE_METHODS"]

GAE_METHODS = ("auto", "scan", "associative")


def _resolve_method(method: str) -> str:
    if method == "auto":
        return "scan" if jax.default_backend() == "cpu" else "associative"
    return method


def _step_mask(loss_mask, skip_observations: bool):
    policy = loss_mask > 0
    if skip_observations:
        return policy
    t = loss_mask.shape[-1]
    idx = jnp.arange(t)
    last = jnp.max(jnp.where(policy, idx, -1), axis=-1, keepdims=True)  # -1: no policy token
    return idx <= last


def _gae_scan(rewards, values, m, bootstrap, gamma, lam):
    """One fused reverse lax.scan over time; carries (next step value, next step advantage)."""
    mf = m.astype(values.dtype)

    def step(carry, xs):
        next_v, next_a = carry  # [B]
        r, v, mt = xs
        delta = r + gamma * next_v - v
        a = delta + gamma * lam * next_a
        new_v = mt * v + (1 - mt) * next_v
        new_a = mt * a + (1 - mt) * next_a
        return (new_v, new_a), mt * a

    init = (bootstrap, jnp.zeros_like(bootstrap))
    xs = (rewards.T, values.T, mf.T)
    _, adv_t = jax.lax.scan(step, init, xs, reverse=True)
    return adv_t.T


def _affine_combine(e1, e2):
    # Same combine as the forward scan of x_t = a_t x_{t-1} + b_t (FACTS.md: associative_scan with
    # reverse=True takes the forward combine unchanged).
    a1, b1 = e1
    a2, b2 = e2
    return a2 * a1, a2 * b1 + b2


def _reverse_affine(a, b, x_end):
    """Solves x_t = a_t x_{t+1} + b_t for t = T-1..0 with x_T = x_end ([B]); returns x [B, T]."""
    a_cum, b_cum = jax.lax.associative_scan(_affine_combine, (a, b), reverse=True, axis=1)
    return a_cum * x_end[:, None] + b_cum


def _shift_left(x, fill):
    """x_{t+1} with x_T = fill ([B])."""
    return jnp.concatenate([x[:, 1:], fill[:, None]], axis=-1)


def _gae_associative(rewards, values, m, bootstrap, gamma, lam):
    mf = m.astype(values.dtype)
    # x_t: value of the first step at or after t.
    x = _reverse_affine(1 - mf, mf * values, bootstrap)
    next_v = _shift_left(x, bootstrap)
    delta = rewards + gamma * next_v - values
    # y_t: advantage of the first step at or after t.
    y = _reverse_affine(mf * (gamma * lam) + (1 - mf), mf * delta, jnp.zeros_like(bootstrap))
    return mf * y


def gae(
    rewards,
    values,
    loss_mask,
    *,
    gamma,
    lam,
    skip_observations=True,
    bootstrap_value=None,
    method="auto",
):
    """(Skip-Observation) GAE advantages and returns (SPEC R3.3, R3.4; 002 eq.68-69, 003 §4.2).

    Args:
      rewards: float [B, T] token rewards, on policy tokens (aligned with RolloutBatch.tokens).
      values: float [B, T] critic values V(s_t) at each token.
      loss_mask: [B, T] 0/1 (or bool); 1 on policy tokens.
      gamma: discount γ in [0, 1].
      lam: GAE λ in [0, 1].
      skip_observations: True → Skip-Observation GAE; False → observations are ordinary steps.
      bootstrap_value: optional float scalar or [B]: the value after the last step (default 0,
        a terminal state; pass V of the next state for a truncated rollout).
      method: "auto" | "scan" | "associative" (see module docstring).

    Returns:
      (advantages, returns), both float [B, T]; returns = advantages + values on policy tokens;
      both are 0 on non-policy tokens and on rows with no policy token.
    """
    fn = "gae"
    check_choice(fn, "method", method, GAE_METHODS)
    rewards = jnp.asarray(rewards)
    values = jnp.asarray(values)
    loss_mask = jnp.asarray(loss_mask)
    check_ndim(fn, "values", values, 2, "[B, T]")
    check_same_shape(fn, values=values, rewards=rewards, loss_mask=loss_mask)
    check_range(fn, "gamma", gamma, lo=0.0, hi=1.0)
    check_range(fn, "lam", lam, lo=0.0, hi=1.0)
    dtype = jnp.result_type(values.dtype, rewards.dtype, jnp.float32)
    rewards = rewards.astype(dtype)
    values = values.astype(dtype)
    b = values.shape[0]
    if bootstrap_value is None:
        bootstrap = jnp.zeros((b,), dtype)
    else:
        bootstrap = jnp.asarray(bootstrap_value, dtype)
        if bootstrap.ndim == 0:
            bootstrap = jnp.broadcast_to(bootstrap, (b,))
        if bootstrap.shape != (b,):
            raise ValueError(f"{fn}: `bootstrap_value` must be a scalar or [B]={b}, got {bootstrap.shape}")
    chex.assert_rank([rewards, values, loss_mask], 2)

    m = _step_mask(loss_mask, skip_observations)
    # Non-step rewards/values never enter (and cannot leak NaN/inf garbage into) the result.
    rewards = jnp.where(m, rewards, 0)
    values = jnp.where(m, values, 0)
    gamma = jnp.asarray(gamma, dtype)
    lam = jnp.asarray(lam, dtype)
    resolved = _resolve_method(method)
    if resolved == "scan":
        adv = _gae_scan(rewards, values, m, bootstrap, gamma, lam)
    else:
        adv = _gae_associative(rewards, values, m, bootstrap, gamma, lam)
    policy = loss_mask > 0
    advantages = jnp.where(policy, adv, 0)
    returns = jnp.where(policy, adv + values, 0)
    return advantages, returns
