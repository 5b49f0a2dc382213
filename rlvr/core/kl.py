"""KL(π_θ‖π_ref) estimators, KL reward penalty and KL-coefficient controllers (docs/algorithms.md (A.13)-(A.15)).

Per-token estimators of KL(π‖π_ref) from tokens sampled from π (Schulman, "Approximating KL
divergence"), with log r = log π_ref − log π at the sampled token:
  k1 = −log r            (unbiased, high variance, can be negative; docs/algorithms.md (A.13)'s per-token term)
  k2 = ½ (log r)²        (biased, low variance, ≥ 0)
  k3 = (r − 1) − log r   (unbiased, low variance, ≥ 0)
Summed over the policy tokens of a sequence they estimate the sequence KL of docs/algorithms.md (A.13).

The coefficient β is either fixed or adapted by docs/algorithms.md (A.15),
  β_{k+1} = β_k · exp[η_β (D̂_KL,k − D_target)],  η_β = n_steps / horizon,
kept in a small pytree (`KLControllerState`) updated by a pure function.
"""

from __future__ import annotations

import chex
import jax.numpy as jnp
from flax import struct

from rlvr.core._util import check_choice, check_range, check_same_shape

__all__ = [
    "KL_KINDS",
    "kl_estimate",
    "kl_penalty_rewards",
    "KLControllerState",
    "init_kl_controller",
    "update_kl_controller",
]

KL_KINDS = ("k1", "k2", "k3")


def kl_estimate(logprobs, ref_logprobs, kind, loss_mask=None):
    """Per-token estimate of KL(π_θ‖π_ref) on tokens sampled from π_θ (docs/algorithms.md (A.13)).

    Args:
      logprobs: float [...] log π_θ of the sampled tokens.
      ref_logprobs: float, same shape: log π_ref of the same tokens.
      kind: "k1" | "k2" | "k3" (module docstring).
      loss_mask: optional, same shape; the estimate is 0 where it is 0.

    Returns:
      float, same shape.
    """
    fn = "kl_estimate"
    check_choice(fn, "kind", kind, KL_KINDS)
    logprobs = jnp.asarray(logprobs)
    ref_logprobs = jnp.asarray(ref_logprobs)
    check_same_shape(fn, logprobs=logprobs, ref_logprobs=ref_logprobs, loss_mask=loss_mask)
    dtype = jnp.result_type(logprobs, ref_logprobs, jnp.float32)
    log_r = ref_logprobs.astype(dtype) - logprobs.astype(dtype)
    if loss_mask is not None:
        m = jnp.asarray(loss_mask) > 0
        log_r = jnp.where(m, log_r, 0)
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return 0.5 * jnp.square(log_r)
    return jnp.expm1(log_r) - log_r


def kl_penalty_rewards(rewards, logprobs, ref_logprobs, loss_mask, *, beta, kind="k1"):
    """KL as a reward penalty, R_total = R_task − β D̂_KL (docs/algorithms.md (A.14)).

    Args:
      rewards: float [B, T] token rewards (penalty applied per policy token), or [B] sequence
        rewards (penalty = β Σ_t m_t kl_t, the sequence estimate of docs/algorithms.md (A.13)).
      logprobs, ref_logprobs, loss_mask: [B, T].
      beta: KL coefficient β ≥ 0 (e.g. KLControllerState.coef).
      kind: estimator, see `kl_estimate`.

    Returns:
      float, rewards' shape. Token form: non-policy tokens keep their reward unchanged.
    """
    fn = "kl_penalty_rewards"
    check_choice(fn, "kind", kind, KL_KINDS)
    check_range(fn, "beta", beta, lo=0.0)
    rewards = jnp.asarray(rewards)
    logprobs = jnp.asarray(logprobs)
    if logprobs.ndim != 2:
        raise ValueError(f"{fn}: `logprobs` must be [B, T], got shape {logprobs.shape}")
    kl = kl_estimate(logprobs, ref_logprobs, kind, loss_mask=loss_mask)
    chex.assert_rank(kl, 2)
    dtype = jnp.result_type(rewards, kl)
    if rewards.shape == logprobs.shape:
        return rewards.astype(dtype) - beta * kl
    if rewards.shape == logprobs.shape[:1]:
        return rewards.astype(dtype) - beta * jnp.sum(kl, axis=-1)
    raise ValueError(
        f"{fn}: `rewards` must be [B, T]={logprobs.shape} or [B]={logprobs.shape[:1]}, got {rewards.shape}"
    )


@struct.dataclass
class KLControllerState:
    """KL coefficient controller state (a pytree; docs/algorithms.md (A.15)).

    Attributes:
      coef: float32 scalar, the current β.
      target: float32 scalar D_target (ignored when not adaptive).
      horizon: float32 scalar; η_β = n_steps / horizon.
      adaptive: static bool; False = fixed β.
    """

    coef: jnp.ndarray
    target: jnp.ndarray
    horizon: jnp.ndarray
    adaptive: bool = struct.field(pytree_node=False, default=False)


def init_kl_controller(init_coef, *, target=None, horizon=10000):
    """A fixed (target=None) or adaptive (docs/algorithms.md (A.15)) KL-coefficient controller.

    Args:
      init_coef: β_0 ≥ 0.
      target: None (fixed β) or D_target > 0, the per-sequence KL the controller aims for.
      horizon: > 0; larger = slower adaptation (η_β = n_steps / horizon).

    Returns:
      KLControllerState.
    """
    fn = "init_kl_controller"
    check_range(fn, "init_coef", init_coef, lo=0.0)
    check_range(fn, "horizon", horizon, lo=0.0, lo_open=True)
    if target is not None:
        check_range(fn, "target", target, lo=0.0, lo_open=True)
    return KLControllerState(
        coef=jnp.asarray(init_coef, jnp.float32),
        target=jnp.asarray(0.0 if target is None else target, jnp.float32),
        horizon=jnp.asarray(horizon, jnp.float32),
        adaptive=target is not None,
    )


def update_kl_controller(state: KLControllerState, observed_kl, n_steps):
    """One controller update (docs/algorithms.md (A.15)): β ← β·exp[(n_steps/horizon)(D̂ − D_target)].

    Fixed controllers return `state` unchanged.

    Args:
      state: KLControllerState.
      observed_kl: float scalar D̂_KL,k (e.g. mean per-sequence k1/k3 estimate of the batch).
      n_steps: number of samples (or steps) the observation covers.

    Returns:
      KLControllerState.
    """
    if not state.adaptive:
        return state
    observed_kl = jnp.asarray(observed_kl, jnp.float32)
    chex.assert_rank(observed_kl, 0)
    eta = jnp.asarray(n_steps, jnp.float32) / state.horizon
    coef = state.coef * jnp.exp(eta * (observed_kl - state.target))
    return state.replace(coef=coef)
