"""Row layout of single-turn batches: completions moved to the last columns (pure, jit-safe).

A single-turn row is [left padding][prompt][completion: N columns] and, once rows of batches
with different prompt widths are concatenated, [right padding] after it. The learner scores
only the last N columns of a row (`AlgorithmSettings.completion_columns`); `align_completions`
makes that hold for every row by rotating it right by its trailing padding, so the padding
moves to the front (left padding, which masks and explicit positions already describe).
"""

from __future__ import annotations

import jax.numpy as jnp


def completion_shift(loss_mask, completion_columns: int):
    """int32 [B]: how far each row must rotate right for its loss to lie in the last N columns.

    loss_mask [B, T]; N = completion_columns (static, 1 <= N <= T). A row's completion starts at
    its first loss column f, so shift = T - N - f (clipped at 0); rows with no loss token keep
    their place (shift 0).
    """
    m = jnp.asarray(loss_mask) > 0
    t = m.shape[1]
    first = jnp.argmax(m, axis=1)
    shift = jnp.where(jnp.any(m, axis=1), t - completion_columns - first, 0)
    return jnp.maximum(shift, 0).astype(jnp.int32)


def rotate_rows(x, shift):
    """[B, T, ...] -> row b rotated right by shift[b] (out[b, (t + shift[b]) % T] = x[b, t])."""
    t = x.shape[1]
    src = (jnp.arange(t)[None, :] - shift[:, None]) % t  # [B, T] source column of each output
    idx = src.reshape(src.shape + (1,) * (x.ndim - 2))
    return jnp.take_along_axis(x, idx, axis=1)


def align_completions(arrays: dict, loss_mask, completion_columns: int) -> dict:
    """Every [B, T, ...] array of `arrays` (T = loss_mask's columns) rotated by
    `completion_shift(loss_mask, completion_columns)`; other entries unchanged. Each row keeps
    its tokens in order and contiguous, so with explicit positions and masks the model's
    outputs on real tokens are unchanged."""
    b, t = jnp.shape(loss_mask)
    shift = completion_shift(loss_mask, completion_columns)
    return {k: (rotate_rows(v, shift) if getattr(v, "ndim", 0) >= 2 and v.shape[:2] == (b, t)
                else v) for k, v in arrays.items()}
