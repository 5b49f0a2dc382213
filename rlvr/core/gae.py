"""Generalised Advantage Estimation with Skip-Observation (docs/algorithms.md (A.6), (A.5)).

A row is a token stream [prompt, a_0, o_0, a_1, o_1, ...]; `loss_mask` is 1 on policy tokens
only. Token rewards live on policy tokens (typically the terminal reward on the last policy token,
plus optional per-token penalties such as KL, docs/algorithms.md (A.14)).

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
maps, depth O(log T) (fast on GPU/TPU, but each of its O(log T) levels is a few slice / pad /
concatenate ops on a pair of arrays, so it compiles to thousands of HLO instructions);
`method="blocked"` solves both recurrences in closed form with a handful of cumulative ops (below).
`method="auto"` picks by `jax.default_backend()` at trace time: "scan" on CPU, "blocked" on GPU
and "associative" elsewhere (TPU). On one H200 at [1024, 8192] (`benchmarks/core_ops.py`,
median of 10 calls) "blocked" took 0.55 ms with skip-observation steps and 0.59 ms without,
"associative" 0.66 / 0.68 ms and "scan" 130 / 143 ms; "blocked" also compiles to ~4x fewer
optimised-HLO instructions (273 vs 1143). On TPU no form has been timed, so "auto" keeps the
log-depth "associative" there.

Blocked form (`method="blocked"`). Both coefficients take few values, so neither recurrence needs
a general scan:
  - x: since 1 − m_t is 0 or 1, x_{t+1} is the value at the first step index s > t (bootstrap when
    there is none): a reverse cumulative min of `where(m, t, T)` and one gather.
  - y: the coefficient is c = γλ on steps and 1 elsewhere, so with n_t = number of steps at
    indices ≥ t, y_t = Σ_{s ≥ t} c^{n_t − n_s} m_s δ_s = c^{n_t} Σ_{s ≥ t} c^{−n_s} m_s δ_s:
    a reverse cumsum of rescaled TD errors. c^{−n} overflows float32 for long rows, so the time
    axis is cut into blocks of C tokens ([B, T] → [B, T/C, C], T padded with non-steps) and n is
    counted within a block (n ≤ C); C is the largest power of two (≤ 256, ≤ T) with
    c^{−C} ≤ 2^64, so |c^{−n} δ| ≤ 2^64 |δ| and a block sum overflows float32 (~2^128) only for
    |δ| > 2^56; the rounding error stays that of summing Σ c^{n_t − n_s}|δ_s| (each product
    c^{n_t}·c^{−n_s} ≤ 1), as in the other forms.
    Blocks are joined exactly: with E_j = steps after block j and tot_k = the block-k sum of
    rescaled terms, the carry into block j is Z_j = Σ_{k > j} c^{E_j − E_k} tot_k, a masked
    [T/C, T/C] product per row whose exponents are ≥ 0 (no overflow), and
    y_t = c^{n_t} (within-block cumsum_t + Z_j).
The cumulative ops run over C (and T/C) only; XLA lowers them to a short tree of reduce-windows,
so the whole method is ~20-35 fused ops with no loop. The cross-block product costs
(T/C)² per row, so "blocked" falls back to "associative" when T/C would exceed 256 (c = γλ so
small that C < T/256), and whenever γ or λ is traced (C must be known at trace time); c = 0
needs no recurrence (advantages = TD errors) and c = 1 no rescaling.
"""

from __future__ import annotations

import math
import numbers

import chex
import jax
import jax.numpy as jnp

from rlvr.core._util import check_choice, check_ndim, check_range, check_same_shape, concrete_value

__all__ = ["gae", "GAE_METHODS"]

GAE_METHODS = ("auto", "scan", "associative", "blocked")

# "blocked": rescaling factors c^{-n} within a block stay ≤ 2^_MAX_SCALE_LOG2 (float32 max is
# ~2^128); blocks are at most _MAX_BLOCK tokens; at most _MAX_BLOCKS blocks per row.
_MAX_SCALE_LOG2 = 64
_MAX_BLOCK = 256
_MAX_BLOCKS = 256


def _resolve_method(method: str) -> str:
    if method == "auto":
        return {"cpu": "scan", "gpu": "blocked"}.get(jax.default_backend(), "associative")
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
    # Same combine as the forward scan of x_t = a_t x_{t-1} + b_t (docs/architecture.md §8: associative_scan with
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


def _max_safe_block(c: float) -> float:
    """Longest block with c^{-block} ≤ 2^_MAX_SCALE_LOG2 (inf when c is 0 or 1: no rescaling)."""
    if c <= 0.0 or c >= 1.0:
        return math.inf
    return math.floor(_MAX_SCALE_LOG2 / -math.log2(c))


def _blocked_plan(fn, gamma, lam, length: int, block_size):
    """(c = γλ, block length C) for "blocked", or None to fall back to "associative".

    Falls back when γ or λ is traced, when c^{-1} alone exceeds the rescaling bound, or (automatic
    C only) when T/C would exceed _MAX_BLOCKS. Raises when an explicit `block_size` is unsafe.
    """
    g, l = concrete_value(gamma), concrete_value(lam)
    if g is None or l is None:
        return None
    c = float(g) * float(l)
    limit = _max_safe_block(c)
    if block_size is not None:
        if block_size > limit:
            raise ValueError(
                f"{fn}: `block_size` must be at most {limit} for gamma*lam={c!r} (so that "
                f"(gamma*lam)^-block_size ≤ 2^{_MAX_SCALE_LOG2}), got {block_size}")
        return c, block_size
    cap = min(limit, _MAX_BLOCK, 1 << max(0, (length - 1).bit_length()))  # no longer than T
    if length < 1 or cap < 1:
        return None
    block = 1 << int(math.log2(cap))
    if -(-length // block) > _MAX_BLOCKS:
        return None
    return c, block


def _gae_blocked(rewards, values, m, bootstrap, gamma, c: float, block: int):
    """Closed-form GAE on [B, T/C, C] blocks (module docstring); c = γλ and C = block concrete."""
    b, t = values.shape
    nb = -(-t // block)
    tp = nb * block
    if tp != t:  # pad with non-steps
        pad = ((0, 0), (0, tp - t))
        rewards, values, m = jnp.pad(rewards, pad), jnp.pad(values, pad), jnp.pad(m, pad)
    mf = m.astype(values.dtype)

    # Index of the first step strictly after t (tp: none, i.e. the bootstrap): the step indices
    # shifted left by one, reverse cummin within blocks, then across blocks.
    idx = jnp.where(m, jnp.arange(tp, dtype=jnp.int32), tp)
    idx = jnp.concatenate([idx[:, 1:], jnp.full((b, 1), tp, jnp.int32)], axis=1)
    first = jax.lax.cummin(idx.reshape(b, nb, block), axis=2, reverse=True)
    later = jnp.concatenate([first[:, 1:, 0], jnp.full((b, 1), tp, jnp.int32)], axis=1)
    later = jax.lax.cummin(later, axis=1, reverse=True)  # first step in blocks after j
    nxt = jnp.minimum(first, later[:, :, None]).reshape(b, tp)
    next_v = jnp.take_along_axis(jnp.concatenate([values, bootstrap[:, None]], axis=1), nxt, axis=1)
    delta = mf * (rewards + gamma * next_v - values)
    if c == 0.0:  # no recurrence: Â = δ
        return delta[:, :t]

    log_c = math.log(c)
    m3 = mf.reshape(b, nb, block)
    n = jax.lax.cumsum(m3, axis=2, reverse=True)  # steps at ≥ t within the block, ≤ C
    after = jax.lax.cumsum(n[:, :, 0], axis=1, reverse=True) - n[:, :, 0]  # E_j: steps after j
    acc = jax.lax.cumsum(delta.reshape(b, nb, block) * jnp.exp(-log_c * n), axis=2, reverse=True)
    total = acc[:, :, 0]  # [B, nb]
    j = jnp.arange(nb)
    expo = jnp.maximum(after[:, :, None] - after[:, None, :], 0)  # E_j − E_k ≥ 0 where k > j
    decay = jnp.where(j[None, :] > j[:, None], jnp.exp(log_c * expo), 0)  # [B, nb, nb]
    carry = jnp.sum(decay * total[:, None, :], axis=-1)  # Z_j
    y = jnp.exp(log_c * n) * (acc + carry[:, :, None])
    return (m3 * y).reshape(b, tp)[:, :t]


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
    block_size=None,
):
    """(Skip-Observation) GAE advantages and returns (docs/algorithms.md (A.6), (A.5)).

    Args:
      rewards: float [B, T] token rewards, on policy tokens (aligned with RolloutBatch.tokens).
      values: float [B, T] critic values V(s_t) at each token.
      loss_mask: [B, T] 0/1 (or bool); 1 on policy tokens.
      gamma: discount γ in [0, 1].
      lam: GAE λ in [0, 1].
      skip_observations: True → Skip-Observation GAE; False → observations are ordinary steps.
      bootstrap_value: optional float scalar or [B]: the value after the last step (default 0,
        a terminal state; pass V of the next state for a truncated rollout).
      method: "auto" | "scan" | "associative" | "blocked" (see module docstring). "blocked"
        needs γ and λ known at trace time (Python or numpy scalars, or concrete arrays); with a
        traced γ or λ (block_size then unused), or γλ too small for blocks of ≥ T/256 tokens, it
        runs "associative".
      block_size: optional int ≥ 1, method="blocked" only: the block length C (default: the
        largest power of two ≤ 256, ≤ T, with (γλ)^-C ≤ 2^64). Larger values than that bound
        are rejected; tune it per accelerator with `benchmarks/core_ops.py`.

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
    if block_size is not None:
        if method != "blocked":
            raise ValueError(f"{fn}: `block_size` applies to method='blocked' only, got method={method!r}")
        if isinstance(block_size, bool) or not isinstance(block_size, numbers.Integral) or block_size < 1:
            raise ValueError(f"{fn}: `block_size` must be an int ≥ 1, got {block_size!r}")
        block_size = int(block_size)
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
    resolved = _resolve_method(method)
    plan = _blocked_plan(fn, gamma, lam, values.shape[1], block_size) if resolved == "blocked" else None
    gamma = jnp.asarray(gamma, dtype)
    lam = jnp.asarray(lam, dtype)
    if resolved == "scan":
        adv = _gae_scan(rewards, values, m, bootstrap, gamma, lam)
    elif plan is not None:
        adv = _gae_blocked(rewards, values, m, bootstrap, gamma, *plan)
    else:
        adv = _gae_associative(rewards, values, m, bootstrap, gamma, lam)
    policy = loss_mask > 0
    advantages = jnp.where(policy, adv, 0)
    returns = jnp.where(policy, adv + values, 0)
    return advantages, returns
