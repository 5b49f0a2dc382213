"""Length-aware reward shaping and loss filtering of DAPO ("DAPO: An Open-Source LLM
Reinforcement Learning System at Scale"): soft overlong punishment and overlong filtering.

Pure and jit-safe. A response's length |y| is its number of policy (loss) tokens; L_max is the
generation's length limit (`sampling.max_new_tokens`); L_cache the punishment buffer before it.
"""

from __future__ import annotations

import jax.numpy as jnp

from rlvr.core._util import check_ndim, check_range, check_same_shape

__all__ = ["overlong_penalty", "overlong_filter"]


def overlong_penalty(lengths, *, max_length, buffer, factor=1.0):
    """DAPO's soft overlong punishment, added to the task reward.

              ⎧ 0                                   |y| ≤ L_max − L_cache
    R(y) = f ·⎨ ((L_max − L_cache) − |y|) / L_cache  L_max − L_cache < |y| ≤ L_max
              ⎩ −1                                  L_max < |y|

    Args:
      lengths: int or float [B], response lengths |y|.
      max_length: L_max ≥ 1.
      buffer: L_cache in [1, L_max].
      factor: f ≥ 0, the penalty at L_max (1 in the paper).

    Returns:
      float32 [B], ≤ 0.
    """
    fn = "overlong_penalty"
    check_range(fn, "max_length", max_length, lo=1.0)
    check_range(fn, "buffer", buffer, lo=1.0, hi=float(max_length))
    check_range(fn, "factor", factor, lo=0.0)
    lengths = jnp.asarray(lengths).astype(jnp.float32)
    check_ndim(fn, "lengths", lengths, 1, "[B]")
    expected = float(max_length - buffer)
    ramp = (expected - lengths) / float(buffer)
    pen = jnp.where(lengths <= expected, 0.0, jnp.where(lengths <= max_length, ramp, -1.0))
    return (factor * pen).astype(jnp.float32)


def overlong_filter(loss_mask, truncated):
    """DAPO's overlong filtering: the loss mask with truncated rows' tokens removed.

    Args:
      loss_mask: [B, T] 0/1 (any dtype).
      truncated: bool [B], True where generation hit the length limit.

    Returns:
      loss_mask's shape and dtype, 0 on every token of a truncated row.
    """
    fn = "overlong_filter"
    loss_mask = jnp.asarray(loss_mask)
    check_ndim(fn, "loss_mask", loss_mask, 2, "[B, T]")
    truncated = jnp.asarray(truncated).astype(bool)
    check_same_shape(fn, rows=loss_mask[:, 0], truncated=truncated)
    return jnp.where(truncated[:, None], jnp.zeros_like(loss_mask), loss_mask)
