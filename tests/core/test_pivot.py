"""rlvr.core.pivot.pivot_filter (docs/algorithms.md (A.17), (A.18))."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr.core.pivot import pivot_filter


def ref_pivot(r, valid, lam):
    keep, mean, var = [], [], []
    for s in range(r.shape[0]):
        vals = [float(r[s, i]) for i in range(r.shape[1]) if valid[s, i]]
        mu = sum(vals) / len(vals) if vals else 0.0
        v = sum((x - mu) ** 2 for x in vals) / len(vals) if vals else 0.0
        if vals and max(vals) == min(vals):
            v = 0.0
        keep.append(len(vals) >= 2 and v > 0 and mu < lam)
        mean.append(mu)
        var.append(v)
    return np.array(keep), np.array(mean), np.array(var)


def test_worked_example_r44():
    # m = 4, λ_diff = 0.5: 甲 all 1, 乙 [1,0,0,0], 丙 all 0 → only 乙 kept, σ̂² = 0.1875 (docs/algorithms.md §6).
    r = np.array([[1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0]], np.float32)
    keep, mean, var = pivot_filter(r, lambda_diff=0.5)
    np.testing.assert_array_equal(keep, [False, True, False])
    np.testing.assert_allclose(mean, [1.0, 0.25, 0.0])
    assert float(var[1]) == 0.1875 and float(var[0]) == 0.0 and float(var[2]) == 0.0
    # Binary rewards: σ̂² = μ̂(1 − μ̂).
    np.testing.assert_allclose(var, np.asarray(mean) * (1 - np.asarray(mean)), atol=1e-7)


def test_threshold_is_strict_and_matches_reference_sweep():
    r = np.array([[1, 1, 0, 0]], np.float32)  # μ̂ = 0.5
    assert not bool(pivot_filter(r, lambda_diff=0.5)[0][0])
    assert bool(pivot_filter(r, lambda_diff=0.51)[0][0])
    assert bool(pivot_filter(np.array([[1, 1, 1, 0]], np.float32), lambda_diff=1.0)[0][0])
    f = jax.jit(lambda r, v, lam: pivot_filter(r, lambda_diff=lam, valid=v))
    for seed in range(20):
        rng = np.random.default_rng(seed)
        r = (rng.integers(0, 2, (8, 6)) if seed % 2 else rng.random((8, 6)).round(1)).astype(np.float32)
        valid = rng.random((8, 6)) < 0.7
        valid[0] = False
        valid[1] = [True] + [False] * 5  # a single valid probe: dropped
        lam = float(rng.choice([0.3, 0.5, 1.0]))
        keep, mean, var = f(r, valid, lam)
        rk, rm, rv = ref_pivot(r, valid, lam)
        np.testing.assert_array_equal(keep, rk)
        np.testing.assert_allclose(mean, rm, atol=1e-6)
        np.testing.assert_allclose(var, rv, atol=1e-6)


def test_vmap_grad_no_nan():
    r = jnp.asarray(np.random.default_rng(0).random((2, 3, 4)), jnp.float32)
    keep, mean, var = jax.vmap(lambda x: pivot_filter(x, lambda_diff=0.9))(r)
    assert keep.shape == (2, 3)
    g = jax.grad(lambda x: jnp.sum(pivot_filter(x, lambda_diff=0.9, valid=jnp.zeros((3, 4), bool))[2]))(r[0])
    assert np.all(np.isfinite(g))
    g = jax.grad(lambda x: jnp.sum(pivot_filter(x, lambda_diff=0.9)[2]))(r[0])
    assert np.all(np.isfinite(g)) and np.any(g != 0)


def test_bad_inputs_raise():
    r = np.zeros((3, 4), np.float32)
    for lam in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="lambda_diff"):
            pivot_filter(r, lambda_diff=lam)
    with pytest.raises(ValueError, match="m > 1"):
        pivot_filter(np.zeros((3, 1)), lambda_diff=0.5)
    with pytest.raises(ValueError, match="valid"):
        pivot_filter(r, lambda_diff=0.5, valid=np.ones((3, 5), bool))
    with pytest.raises(ValueError, match="num_states, m"):
        pivot_filter(np.zeros(4), lambda_diff=0.5)
