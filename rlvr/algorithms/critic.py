"""Token-aligned critic values: the ONE place that decides which critic output judges which token
(docs/algorithms.md (A.6), (A.5), §6 Skip-Observation GAE).

Convention. A causal `ValueModel` returns at position t a value computed from tokens[:t+1],
i.e. *after* reading token t. The action at token t is taken in state s_t = tokens[:t], so its
value V(s_t) is the critic output at position t−1:

    token_values(critic, tokens)[:, t] = critic(tokens)[:, t-1]   (t ≥ 1),   0 at t = 0.

Position 0 is always the BOS/prompt start, never a policy token, so the 0 there is never used.
With this alignment the baseline of an action never sees the action it judges (an unshifted
critic would leak the sampled token into its own baseline and bias the advantage toward 0).
Every critic user — PPO's GAE and value loss (`rlvr.algorithms.ppo`), SAO's advantages and value
loss — must obtain values through `token_values` / `align_values`.
"""

from __future__ import annotations

import chex
import jax.numpy as jnp


def align_values(raw_values: jnp.ndarray) -> jnp.ndarray:
    """[B, T] raw critic outputs (value after token t) → [B, T] V(s_t) for the action at token t.

    Pure shift right by one along time with 0 at t = 0; jit/vmap safe.
    """
    chex.assert_rank(raw_values, 2)
    return jnp.concatenate([jnp.zeros_like(raw_values[:, :1]), raw_values[:, :-1]], axis=1)


def token_values(critic, tokens, positions=None, attention_mask=None) -> jnp.ndarray:
    """[B, T] float32 V(s_t) for the action at token t (see the module docstring).

    Args:
      critic: a `rlvr.models.ValueModel` (or any callable with its signature).
      tokens: int [B, T]; positions, attention_mask: optional [B, T] as for the policy.
    """
    chex.assert_rank(tokens, 2)
    raw = critic(tokens, positions=positions, attention_mask=attention_mask)
    return align_values(raw)


__all__ = ["align_values", "token_values"]
