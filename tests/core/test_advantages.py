"""rlvr.core.advantages against numpy loops (docs/algorithms.md (A.2), (A.3)-(A.4), (A.18))."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rlvr.core.advantages import (
    grpo_advantages,
    reinforce_advantages,
    rloo_advantages,
    update_running_baseline,
)
from tests.core._gen import group_rewards


def ref_grpo(r, valid, scale, eps):
    out = np.zeros_like(r, dtype=np.float64)
    for g in range(r.shape[0]):
        vals = [float(r[g, i]) for i in range(r.shape[1]) if valid[g, i]]
        if not vals or max(vals) == min(vals):
            continue
        mu = sum(vals) / len(vals)
        sd = (sum((x - mu) ** 2 for x in vals) / len(vals)) ** 0.5
        for i in range(r.shape[1]):
            if valid[g, i]:
                out[g, i] = (r[g, i] - mu) / (sd + eps) if scale else r[g, i] - mu
    return out


def ref_rloo(r, valid):
    out = np.zeros_like(r, dtype=np.float64)
    for g in range(r.shape[0]):
        idx = [i for i in range(r.shape[1]) if valid[g, i]]
        if len(idx) < 2:
            continue
        for i in idx:
            others = [float(r[g, j]) for j in idx if j != i]
            out[g, i] = r[g, i] - sum(others) / len(others)
    return out


@functools.partial(jax.jit, static_argnums=2)
def _jboth(r, valid, scale):
    return grpo_advantages(r, valid, scale_by_std=scale, eps=1e-6), rloo_advantages(r, valid)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), binary=st.booleans(), scale=st.booleans(),
       shape=st.sampled_from([(6, 4), (3, 8), (5, 1)]))
def test_grpo_and_rloo_match_reference(seed, binary, scale, shape):
    rng = np.random.default_rng(seed)
    r, valid = group_rewards(rng, *shape, binary=binary)
    adv, rloo = _jboth(r, valid, scale)
    np.testing.assert_allclose(adv, ref_grpo(r, valid, scale, 1e-6), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rloo, ref_rloo(r, valid), rtol=1e-5, atol=1e-5)


def test_all_equal_groups_and_invalid_groups_are_exactly_zero():
    r = np.array([[0.1, 0.1, 0.1], [0.7, 0.7, 0.7], [1.0, 0.0, 1.0], [3.0, 1.0, 2.0]], np.float32)
    valid = np.array([[1, 1, 1], [1, 1, 1], [1, 0, 1], [0, 0, 0]], bool)
    for adv in (grpo_advantages(r, valid), grpo_advantages(r, valid, scale_by_std=False),
                rloo_advantages(r, valid)):
        adv = np.asarray(adv)
        assert np.all(adv == 0.0), adv  # row 2: valid rewards all equal (1, 1); row 3: all invalid


def test_grpo_worked_example_r44():
    # docs/algorithms.md (A.18): training rewards [1, 1, 0, 0] → Â = [1, 1, −1, −1] (δ ignored).
    adv = grpo_advantages(np.array([[1.0, 1.0, 0.0, 0.0]]), eps=0.0)
    np.testing.assert_array_equal(adv, [[1.0, 1.0, -1.0, -1.0]])


def test_rloo_known_values_and_singletons():
    adv = rloo_advantages(np.array([[1.0, 0.0, 0.0, 0.0], [5.0, 1.0, 0.0, 0.0]]),
                          np.array([[1, 1, 1, 1], [1, 0, 0, 0]], bool))
    np.testing.assert_allclose(adv, [[1.0, -1 / 3, -1 / 3, -1 / 3], [0, 0, 0, 0]], rtol=1e-6)


def test_reinforce_and_running_baseline():
    r = np.array([1.0, 0.0, 1.0, 1.0], np.float32)
    valid = np.array([1, 1, 0, 1], bool)
    np.testing.assert_allclose(reinforce_advantages(r, 0.25, valid), [0.75, -0.25, 0, 0.75])
    np.testing.assert_allclose(reinforce_advantages(r.reshape(2, 2), np.array([[0.5], [1.0]])),
                               [[0.5, -0.5], [0.0, 0.0]])
    b = update_running_baseline(0.5, r, valid, decay=0.9)
    np.testing.assert_allclose(b, 0.9 * 0.5 + 0.1 * (2 / 3), rtol=1e-6)
    # No valid reward: unchanged.
    np.testing.assert_allclose(update_running_baseline(0.5, r, np.zeros(4, bool), decay=0.9), 0.5)
    with pytest.raises(ValueError, match="baseline"):
        reinforce_advantages(r, np.zeros(3), valid)
    with pytest.raises(ValueError, match="decay"):
        update_running_baseline(0.5, r, valid, decay=1.5)


def test_jit_vmap_grad_and_no_nan():
    rng = np.random.default_rng(0)
    r, valid = group_rewards(rng, 4, 5, binary=False)
    none = np.zeros_like(valid)
    fns = (lambda x: grpo_advantages(x, valid), lambda x: rloo_advantages(x, valid),
           lambda x: reinforce_advantages(x, 0.3, valid), lambda x: grpo_advantages(x, none))

    @jax.jit
    def run(x):
        return [(f(x), jax.grad(lambda y: jnp.sum(f(y) ** 2))(x), jax.vmap(f)(jnp.stack([x, x + 1])))
                for f in fns]

    for (out, g, stacked), f in zip(run(jnp.asarray(r)), fns):
        np.testing.assert_allclose(out, f(r), rtol=1e-5, atol=1e-6)
        assert np.all(np.isfinite(g))
        np.testing.assert_allclose(stacked[1], f(r + 1), rtol=1e-5, atol=1e-6)
    g = jax.jit(jax.grad(lambda b: update_running_baseline(b, r[0], valid[0], 0.9)))(0.2)
    np.testing.assert_allclose(g, 0.9)
    # Fully invalid input: zeros, no NaN.
    assert np.all(np.asarray(grpo_advantages(r, none)) == 0)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="valid"):
        grpo_advantages(np.zeros((2, 4)), np.ones((2, 3), bool))
    with pytest.raises(ValueError, match="num_groups, group_size"):
        grpo_advantages(np.zeros(4))
    with pytest.raises(ValueError, match="valid"):
        rloo_advantages(np.zeros((2, 4)), np.ones((4, 2), bool))
    with pytest.raises(ValueError, match="eps"):
        grpo_advantages(np.zeros((2, 4)), eps=-1.0)
