"""Evaluation and training-monitoring numbers (docs/algorithms.md (A.21), docs/architecture.md §7, docs/algorithms.md (A.22)).

- `pass_at_k`: the unbiased estimator 1 − C(n−c, k)/C(n, k) (docs/algorithms.md (A.21)), computed as
  1 − Π_{j=0}^{k−1} (1 − c/(n−j)) in log space (log1p / expm1): O(k) work, stable for large n,
  no factorials, vectorised over n and c.
- `group_outcome_fractions`: all-correct / all-wrong / mixed group fractions (docs/architecture.md §7).
- Closed-form probabilities for docs/algorithms.md (A.22): all-wrong (1−p)^G, all-correct p^G,
  chained success p^K (docs/algorithms.md (A.22)), at-least-one success 1 − (1−p)^G.
"""

from __future__ import annotations

import chex
import jax.numpy as jnp
import numpy as np

from rlvr.core._util import check_ndim, check_same_shape, concrete_value, safe_div, valid_or_ones

__all__ = [
    "pass_at_k",
    "group_outcome_fractions",
    "prob_all_wrong",
    "prob_all_correct",
    "prob_any_success",
    "prob_chain_success",
]


def pass_at_k(n, c, k: int):
    """Unbiased pass@k estimator (docs/algorithms.md (A.21)), vectorised over problems.

    pass@k = 1 − C(n−c, k)/C(n, k) = 1 − Π_{j=0}^{k−1} (1 − c/(n−j)); 1 when n − c < k.

    Args:
      n: int [...] samples per problem (n ≥ k).
      c: int [...] correct samples per problem (0 ≤ c ≤ n); broadcastable with n.
      k: Python int ≥ 1 (static).

    Returns:
      float32 [...] per-problem estimates (average them for the benchmark score).

    Raises:
      ValueError for k < 1, or (when n and c are concrete) c outside [0, n] or n < k.
    """
    fn = "pass_at_k"
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise ValueError(f"{fn}: `k` must be a Python int >= 1, got {k!r}")
    n_c, c_c = concrete_value(n), concrete_value(c)
    if n_c is not None and c_c is not None:
        if np.any(c_c < 0) or np.any(c_c > n_c):
            raise ValueError(f"{fn}: need 0 <= c <= n, got n={n_c}, c={c_c}")
        if np.any(n_c < k):
            raise ValueError(f"{fn}: need n >= k = {k}, got n={n_c}")
    n = jnp.asarray(n, jnp.float32)
    c = jnp.asarray(c, jnp.float32)
    n, c = jnp.broadcast_arrays(n, c)
    j = jnp.arange(k, dtype=jnp.float32)
    denom = n[..., None] - j  # n - j, j < k
    frac = safe_div(c[..., None], denom)
    # (n−c−j)/(n−j) = 1 − c/(n−j) ≤ 0 exactly when n − c ≤ j: then C(n−c, k) = 0.
    alive = (n - c)[..., None] > j
    log_terms = jnp.where(alive, jnp.log1p(-jnp.where(alive, frac, 0.0)), 0.0)
    any_dead = jnp.any(~alive, axis=-1)
    log_ratio = jnp.sum(log_terms, axis=-1)
    return jnp.where(any_dead, 1.0, jnp.maximum(-jnp.expm1(log_ratio), 0.0))


def group_outcome_fractions(rewards, valid=None, success_threshold=0.5):
    """All-correct / all-wrong / mixed group fractions (docs/architecture.md §7; docs/algorithms.md (A.22)).

    A valid sample succeeds iff reward ≥ success_threshold. Groups with no valid sample count
    as "empty" and are left out of the three fractions' denominator.

    Args:
      rewards: float [num_groups, group_size].
      valid: optional bool, same shape.
      success_threshold: float.

    Returns:
      dict of float32 scalars: "all_correct", "all_wrong", "mixed" (summing to 1 when any
      group is non-empty, else all 0) and "empty" (fraction of all groups with no valid sample).
    """
    fn = "group_outcome_fractions"
    rewards = jnp.asarray(rewards)
    check_ndim(fn, "rewards", rewards, 2, "[num_groups, group_size]")
    if valid is not None:
        check_same_shape(fn, rewards=rewards, valid=valid)
    v = valid_or_ones(valid, rewards.shape)
    chex.assert_rank([rewards, v], 2)
    success = (rewards >= success_threshold) & v
    failure = (rewards < success_threshold) & v
    nonempty = jnp.any(v, axis=-1)
    all_correct = nonempty & ~jnp.any(failure, axis=-1)
    all_wrong = nonempty & ~jnp.any(success, axis=-1)
    mixed = nonempty & ~all_correct & ~all_wrong
    n_ne = jnp.sum(nonempty).astype(jnp.float32)
    frac = lambda x: safe_div(jnp.sum(x).astype(jnp.float32), n_ne)  # noqa: E731
    return {
        "all_correct": frac(all_correct),
        "all_wrong": frac(all_wrong),
        "mixed": frac(mixed),
        "empty": jnp.mean((~nonempty).astype(jnp.float32)),
    }


def _prob_args(fn, p, g, gname):
    pc, gc = concrete_value(p), concrete_value(g)
    if pc is not None and (np.any(pc < 0) or np.any(pc > 1)):
        raise ValueError(f"{fn}: `p` must lie in [0, 1], got {pc}")
    if gc is not None and np.any(gc < 0):
        raise ValueError(f"{fn}: `{gname}` must be >= 0, got {gc}")
    return jnp.asarray(p, jnp.float32), jnp.asarray(g, jnp.float32)


def prob_all_wrong(p, G):
    """(1 − p)^G: probability that a group of G samples has no success (docs/algorithms.md (A.22))."""
    p, g = _prob_args("prob_all_wrong", p, G, "G")
    return jnp.power(1 - p, g)


def prob_all_correct(p, G):
    """p^G: probability that all G samples of a group succeed (docs/algorithms.md (A.22))."""
    p, g = _prob_args("prob_all_correct", p, G, "G")
    return jnp.power(p, g)


def prob_any_success(p, G):
    """1 − (1 − p)^G: probability of at least one success among G samples (docs/algorithms.md (A.22))."""
    p, g = _prob_args("prob_any_success", p, G, "G")
    return -jnp.expm1(g * jnp.log1p(-p))


def prob_chain_success(p, K):
    """p^K: success probability of K chained steps each succeeding w.p. p (docs/algorithms.md (A.22))."""
    p, k = _prob_args("prob_chain_success", p, K, "K")
    return jnp.power(p, k)
