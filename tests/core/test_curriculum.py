"""rlvr.core.curriculum task weights (docs/algorithms.md (A.20))."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr.core.curriculum import (
    difficulty_buckets,
    learning_progress_weights,
    mixture_weights,
    variance_weights,
)


def test_variance_weights_eq41():
    p = np.array([0.0, 0.1, 0.5, 0.9, 1.0], np.float32)
    for alpha in (0.5, 1.0, 2.0):
        w = np.asarray(variance_weights(p, alpha=alpha, floor=0.0))
        ref = (p * (1 - p)) ** alpha
        np.testing.assert_allclose(w, ref / ref.sum(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(variance_weights(p, alpha=0.0), np.full(5, 0.2), rtol=1e-6)
    w = np.asarray(variance_weights(p, alpha=1.0, floor=1e-3))
    assert w[0] > 0 and w[4] > 0 and w[0] < 1e-2 * w[2]  # tiny but non-zero
    np.testing.assert_allclose(w[0] / w[2], 1e-3, rtol=1e-5)  # floor relative to p = 0.5
    np.testing.assert_allclose(w.sum(), 1.0, rtol=1e-6)
    np.testing.assert_allclose(variance_weights(np.ones(3), alpha=1.0, floor=0.0), np.full(3, 1 / 3))
    g = jax.grad(lambda q: variance_weights(q, alpha=0.5, floor=0.0)[2])(jnp.asarray(p))
    assert np.all(np.isfinite(g))


def test_learning_progress_weights_eq42():
    now = np.array([0.5, 0.4, 0.2, 1.0, 0.3], np.float32)
    before = np.array([0.3, 0.4, 0.4, 0.6, 0.2], np.float32)
    w = np.asarray(learning_progress_weights(now, before, floor=0.0))
    np.testing.assert_allclose(w, np.array([0.2, 0, 0, 0, 0.1]) / 0.3, rtol=1e-5, atol=1e-7)  # saturated task 3 out
    w = np.asarray(learning_progress_weights(now, before, absolute=True, floor=0.0))
    np.testing.assert_allclose(w, np.array([0.2, 0, 0.2, 0, 0.1]) / 0.5, rtol=1e-5, atol=1e-7)
    w = np.asarray(learning_progress_weights(now, now, floor=1e-3))
    np.testing.assert_allclose(w, np.full(5, 0.2), rtol=1e-6)
    with pytest.raises(ValueError, match="previous_success_rate"):
        learning_progress_weights(now, now[:3])


def test_mixture_weights_eq43():
    p = np.array([0.9, 0.95, 0.5, 0.4, 0.6, 0.1, 0.5], np.float32)
    ood = np.array([0, 0, 0, 0, 0, 0, 1], bool)
    ids = difficulty_buckets(p, thresholds=(0.2, 0.8), ood=ood)
    np.testing.assert_array_equal(ids, [0, 0, 1, 1, 1, 2, 3])
    lam = (0.2, 0.5, 0.2, 0.1)
    w = np.asarray(mixture_weights(p, proportions=lam, ood=ood))
    for b, mass in enumerate(lam):
        np.testing.assert_allclose(w[np.asarray(ids) == b].sum(), mass, rtol=1e-6)
    np.testing.assert_allclose(w[:2], [0.1, 0.1], rtol=1e-6)  # uniform within a bucket
    # Within-bucket weights and an empty bucket (no OOD task): its 0.1 is shared out.
    within = variance_weights(p, alpha=1.0)
    w = np.asarray(jax.jit(lambda q, v: mixture_weights(q, proportions=lam, within=v))(p, within))
    ids = np.asarray(difficulty_buckets(p))
    np.testing.assert_allclose(w.sum(), 1.0, rtol=1e-6)
    np.testing.assert_allclose(w[ids == 1].sum(), 0.5 / 0.9, rtol=1e-5)
    med = ids == 1
    np.testing.assert_allclose(w[med] / w[med].sum(), np.asarray(within)[med] / np.asarray(within)[med].sum(), rtol=1e-5)
    # All requested mass on empty buckets → uniform over tasks.
    np.testing.assert_allclose(mixture_weights(np.full(4, 0.5), proportions=(1, 0, 0, 0)), np.full(4, 0.25))
    with pytest.raises(ValueError, match="proportions"):
        mixture_weights(p, proportions=(1, 0, 0))
    with pytest.raises(ValueError, match="proportions"):
        mixture_weights(p, proportions=(1, -1, 0, 1))
    with pytest.raises(ValueError, match="thresholds"):
        difficulty_buckets(p, thresholds=(0.8, 0.2))


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="alpha"):
        variance_weights(np.full(3, 0.5), alpha=-1.0)
    with pytest.raises(ValueError, match="num_tasks"):
        variance_weights(np.full((2, 3), 0.5))


def test_jit_vmap_grad_all_weights():
    p = jnp.asarray([0.1, 0.5, 0.7, 0.95], jnp.float32)
    prev = jnp.asarray([0.0, 0.5, 0.4, 0.9], jnp.float32)
    fns = [
        lambda q: variance_weights(q, alpha=1.0),
        lambda q: learning_progress_weights(q, prev),
        lambda q: mixture_weights(q, within=variance_weights(q, alpha=1.0)),
        lambda q: difficulty_buckets(q).astype(jnp.float32),
    ]

    @jax.jit
    def run(q):
        return [(f(q), jax.vmap(f)(jnp.stack([q, q])), jax.grad(lambda y: jnp.sum(f(y) * jnp.arange(4.0)))(q))
                for f in fns]

    for (w, batched, g), f in zip(run(p), fns):
        np.testing.assert_allclose(w, f(p), rtol=1e-6)
        np.testing.assert_allclose(batched[1], w, rtol=1e-6)
        assert np.all(np.isfinite(g))
