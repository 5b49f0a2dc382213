"""PivotRL pivot selection (docs/algorithms.md (A.17), (A.18), §6).

For each candidate state s, m > 1 actions are sampled from π_ref and scored; with
μ̂ = (1/m) Σ R_i and the population variance σ̂² = (1/m) Σ (R_i − μ̂)², the state is kept iff
σ̂² > 0 (the probes contain both successes and failures) and μ̂ < λ_diff (hard enough).
For binary rewards σ̂² = μ̂(1 − μ̂). Probe rewards only select states; they are never training
labels (docs/algorithms.md §6).
"""

from __future__ import annotations

import chex
import jax.numpy as jnp

from rlvr.core._util import check_ndim, check_range, check_same_shape, safe_div, valid_or_ones

__all__ = ["pivot_filter"]


def pivot_filter(probe_rewards, *, lambda_diff, valid=None):
    """Selects pivot states from probe rewards (docs/algorithms.md (A.17), §6).

    Args:
      probe_rewards: float [num_states, m] rewards of m probe actions per state, m > 1.
      lambda_diff: difficulty threshold λ_diff in (0, 1].
      valid: optional bool [num_states, m]; invalid probes (env_error) are left out of μ̂ and
        σ̂² (which then use the valid count); a state with fewer than 2 valid probes is dropped.

    Returns:
      (keep, mean, var): bool [num_states], float [num_states] μ̂, float [num_states] σ̂².
      σ̂² is exactly 0 when the valid probe rewards are all equal.
    """
    fn = "pivot_filter"
    probe_rewards = jnp.asarray(probe_rewards)
    if not jnp.issubdtype(probe_rewards.dtype, jnp.floating):
        probe_rewards = probe_rewards.astype(jnp.float32)
    check_ndim(fn, "probe_rewards", probe_rewards, 2, "[num_states, m]")
    if probe_rewards.shape[1] < 2:
        raise ValueError(f"{fn}: need m > 1 probes per state, got m = {probe_rewards.shape[1]}")
    check_range(fn, "lambda_diff", lambda_diff, lo=0.0, hi=1.0, lo_open=True)
    if valid is not None:
        check_same_shape(fn, probe_rewards=probe_rewards, valid=valid)
    v = valid_or_ones(valid, probe_rewards.shape)
    chex.assert_rank([probe_rewards, v], 2)
    n = jnp.sum(v, axis=-1).astype(probe_rewards.dtype)
    mean = safe_div(jnp.sum(jnp.where(v, probe_rewards, 0), axis=-1), n)
    centered = jnp.where(v, probe_rewards - mean[:, None], 0)
    var = safe_div(jnp.sum(centered * centered, axis=-1), n)
    big = jnp.finfo(probe_rewards.dtype).max
    all_equal = jnp.max(jnp.where(v, probe_rewards, -big), -1) <= jnp.min(jnp.where(v, probe_rewards, big), -1)
    var = jnp.where(all_equal, 0.0, var)
    keep = (var > 0) & (mean < lambda_diff) & (n >= 2)
    return keep, mean, var
