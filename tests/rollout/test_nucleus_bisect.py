"""The sort-free top-p threshold (`nucleus_threshold_bisect`) against the full-sort reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr.rollout.sampler import SamplingParams, filter_logits_by_sort, nucleus_threshold_bisect


def _bisect_filter(logits, params):
    z = logits / params.temperature
    t = nucleus_threshold_bisect(z, params.top_p)
    return jnp.where(z < t, jnp.finfo(z.dtype).min, z)


@pytest.mark.parametrize("top_p, temperature", [(0.1, 1.0), (0.5, 0.7), (0.9, 1.0),
                                                (0.95, 1.3), (0.999, 1.0)])
def test_same_support_and_tokens_as_the_sort(top_p, temperature):
    key = jax.random.key(0)
    logits = jax.random.normal(key, (64, 300)) * 4
    logits = logits.at[:8, :40].set(jnp.round(logits[:8, :40]))  # ties in some rows
    params = SamplingParams(max_new_tokens=1, temperature=temperature, top_p=top_p)
    ref = filter_logits_by_sort(logits, params)
    got = _bisect_filter(logits, params)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))
    keys = jax.random.split(jax.random.key(1), 64)
    draw = jax.vmap(jax.random.categorical)
    np.testing.assert_array_equal(np.asarray(draw(keys, got)), np.asarray(draw(keys, ref)))


def test_sampled_distribution_is_the_nucleus_on_a_small_vocabulary():
    logits = jnp.log(jnp.asarray([0.4, 0.25, 0.15, 0.1, 0.06, 0.04]))
    params = SamplingParams(max_new_tokens=1, top_p=0.75)  # keeps 0.4, 0.25, 0.15 (0.65 < 0.75)
    z = _bisect_filter(logits[None], params)[0]
    n = 40000
    toks = jax.random.categorical(jax.random.key(2), z, shape=(n,))
    freq = np.bincount(np.asarray(toks), minlength=6) / n
    expected = np.asarray([0.4, 0.25, 0.15, 0, 0, 0]) / 0.8
    np.testing.assert_allclose(freq, expected, atol=0.01)
