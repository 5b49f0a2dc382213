"""rlvr.core.metrics: pass@k, group outcome fractions, docs/algorithms.md (A.22) numbers (docs/algorithms.md (A.21), docs/architecture.md §7)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr.core.metrics import (
    group_outcome_fractions,
    pass_at_k,
    prob_all_correct,
    prob_all_wrong,
    prob_any_success,
    prob_chain_success,
)


_jpass = jax.jit(pass_at_k, static_argnums=2)


def ref_pass_at_k(n, c, k):
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def test_pass_at_k_matches_exact_binomials():
    cases = [(n, c, k) for n in (1, 2, 5, 10, 37) for c in range(0, n + 1, max(1, n // 6)) for k in (1, 2, 5, 10) if k <= n]
    n, c, k = zip(*cases)
    for kk in sorted(set(k)):
        idx = [i for i, x in enumerate(k) if x == kk]
        out = _jpass(np.array([n[i] for i in idx]), np.array([c[i] for i in idx]), kk)
        ref = [ref_pass_at_k(n[i], c[i], kk) for i in idx]
        np.testing.assert_allclose(out, ref, rtol=2e-6, atol=1e-7)
    # pass@1 = c/n; c = 0 → 0 exactly; n − c < k → 1 exactly.
    np.testing.assert_allclose(pass_at_k(np.array([10, 7]), np.array([3, 7]), 1), [0.3, 1.0], rtol=1e-6)
    assert float(pass_at_k(10, 0, 5)) == 0.0
    assert float(pass_at_k(10, 6, 5)) == 1.0


def test_pass_at_k_stable_for_large_n():
    # Factorials overflow; the product form stays accurate (compared in exact integer arithmetic).
    for n, c, k in [(2000, 1, 1), (5000, 3, 100), (100000, 17, 50), (1000, 999, 1000), (1000, 1, 999)]:
        ref = 1 - math.comb(n - c, k) / math.comb(n, k)
        np.testing.assert_allclose(_jpass(n, c, k), ref, rtol=1e-5)
    out = jax.jit(lambda n, c: pass_at_k(n, c, 100))(jnp.array([5000, 5000]), jnp.array([0, 3]))
    assert np.all(np.isfinite(out))
    g = jax.grad(lambda c: jnp.sum(pass_at_k(20.0, c, 3)))(jnp.array(4.0))
    assert np.isfinite(g) and g > 0
    batched = jax.vmap(lambda c: pass_at_k(10, c, 2))(jnp.arange(11))
    np.testing.assert_allclose(batched, [ref_pass_at_k(10, c, 2) for c in range(11)], rtol=1e-5, atol=1e-7)


def test_pass_at_k_bad_inputs():
    with pytest.raises(ValueError, match="k"):
        pass_at_k(10, 2, 0)
    with pytest.raises(ValueError, match="n >= k"):
        pass_at_k(4, 2, 5)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(4, 5, 1)


def test_group_outcome_fractions():
    r = np.array([[1, 1, 1], [0, 0, 0], [1, 0, 1], [1, 0, 0], [1, 1, 0]], np.float32)
    valid = np.array([[1, 1, 1], [1, 1, 1], [1, 0, 1], [1, 1, 1], [0, 0, 0]], bool)
    out = group_outcome_fractions(r, valid, success_threshold=0.5)
    # row 2 is all-correct once its invalid 0 is excluded; row 4 is empty.
    np.testing.assert_allclose([out["all_correct"], out["all_wrong"], out["mixed"], out["empty"]],
                               [0.5, 0.25, 0.25, 0.2])
    none = group_outcome_fractions(r, np.zeros_like(valid))
    assert all(np.isfinite(float(v)) for v in none.values()) and float(none["empty"]) == 1.0
    jitted = jax.jit(group_outcome_fractions)(r, valid)
    np.testing.assert_allclose(jitted["mixed"], 0.25)
    with pytest.raises(ValueError, match="valid"):
        group_outcome_fractions(r, np.ones((5, 2), bool))


def test_r8_numbers():
    # docs/algorithms.md (A.22): p = 0.7, K = 10 → p^K ≈ 2.8 %.
    chain = float(prob_chain_success(0.7, 10))
    np.testing.assert_allclose(chain, 0.7**10, rtol=1e-6)
    assert round(100 * chain, 1) == 2.8
    # docs/algorithms.md (A.22), 59 for a few (p, G).
    for p, G in [(0.7, 10), (0.1, 8), (0.5, 4), (0.01, 64)]:
        np.testing.assert_allclose(prob_all_wrong(p, G), (1 - p) ** G, rtol=1e-5)
        np.testing.assert_allclose(prob_all_correct(p, G), p**G, rtol=1e-5, atol=1e-30)
        np.testing.assert_allclose(prob_any_success(p, G), 1 - (1 - p) ** G, rtol=1e-5)
    # Consistency with the simulation view: P(all wrong) + P(any success) = 1.
    p = jnp.linspace(0.0, 1.0, 11)
    np.testing.assert_allclose(prob_all_wrong(p, 8) + prob_any_success(p, 8), 1.0, atol=1e-6)
    np.testing.assert_allclose(prob_any_success(1e-6, 4), 4e-6, rtol=1e-4)  # no cancellation
    with pytest.raises(ValueError, match="p"):
        prob_all_wrong(1.5, 4)
    with pytest.raises(ValueError, match="G"):
        prob_any_success(0.5, -1)


def test_jit_vmap_grad_probabilities_and_fractions():
    fns = [lambda p: prob_all_wrong(p, 8), lambda p: prob_all_correct(p, 8),
           lambda p: prob_any_success(p, 8), lambda p: prob_chain_success(p, 10)]

    @jax.jit
    def run(p):
        return [(jax.vmap(f)(p), jax.vmap(jax.grad(f))(p)) for f in fns]

    p = jnp.asarray([0.1, 0.5, 0.7])
    for (val, grad), f in zip(run(p), fns):
        np.testing.assert_allclose(val, [float(f(float(x))) for x in p], rtol=1e-5)
        assert np.all(np.isfinite(grad))
    r = jnp.asarray(np.random.default_rng(0).integers(0, 2, (3, 4, 5)), jnp.float32)
    out = jax.vmap(group_outcome_fractions)(r)
    np.testing.assert_allclose(out["all_correct"] + out["all_wrong"] + out["mixed"], 1.0, rtol=1e-6)
