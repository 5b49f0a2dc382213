"""Private helpers shared by the rlvr.core modules (validation and masked reductions).

Nothing here is public API; import the public functions from their modules instead.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np


def concrete_value(x):
    """Returns `x` as a numpy value when it is known at trace time, else None (a tracer)."""
    if isinstance(x, jax.core.Tracer):
        return None
    try:
        return np.asarray(x)
    except Exception:  # pragma: no cover - exotic array types
        return None


def check_same_shape(fn: str, **arrays) -> None:
    """Raises ValueError naming the fields when the given arrays do not share one shape."""
    items = [(k, v) for k, v in arrays.items() if v is not None]
    ref_name, ref = items[0]
    for name, x in items[1:]:
        if jnp.shape(x) != jnp.shape(ref):
            raise ValueError(
                f"{fn}: `{name}` must have the shape of `{ref_name}` {jnp.shape(ref)}, "
                f"got {jnp.shape(x)}"
            )


def check_ndim(fn: str, name: str, x, ndim: int, what: str) -> None:
    if jnp.ndim(x) != ndim:
        raise ValueError(f"{fn}: `{name}` must be {what}, got shape {jnp.shape(x)}")


def check_choice(fn: str, name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{fn}: unknown {name} {value!r}; allowed: {tuple(allowed)}")


def check_range(fn: str, name: str, value, lo=None, hi=None, lo_open=False, hi_open=False) -> None:
    """Checks a (possibly traced) hyper-parameter when it is concrete; tracers pass through."""
    v = concrete_value(value)
    if v is None:
        return
    if v.size != 1:
        raise ValueError(f"{fn}: `{name}` must be a scalar, got shape {v.shape}")
    v = float(v)
    bad = (
        not np.isfinite(v)
        or (lo is not None and (v <= lo if lo_open else v < lo))
        or (hi is not None and (v >= hi if hi_open else v > hi))
    )
    if bad:
        lb = "(" if lo_open else "["
        rb = ")" if hi_open else "]"
        interval = f"{lb}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}{rb}"
        raise ValueError(f"{fn}: `{name}` must lie in {interval}, got {v}")


def valid_or_ones(valid, shape):
    if valid is None:
        return jnp.ones(shape, bool)
    return jnp.asarray(valid).astype(bool)


def safe_div(num, den):
    """num / den where den != 0, else 0; gradient-safe (no NaN from the untaken branch)."""
    nonzero = den != 0
    return jnp.where(nonzero, num / jnp.where(nonzero, den, 1), 0)


def safe_sqrt(x):
    """sqrt(x) for x > 0, 0 otherwise; gradient-safe at 0."""
    pos = x > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1)), 0)


def masked_sum(x, mask, axis=None):
    return jnp.sum(jnp.where(mask, x, 0), axis=axis)


def masked_mean(x, mask, axis=None):
    """Mean of x over mask (bool or 0/1), 0 where the mask is empty."""
    m = jnp.asarray(mask).astype(bool)
    return safe_div(masked_sum(x, m, axis), jnp.sum(m, axis=axis).astype(jnp.result_type(x, jnp.float32)))
