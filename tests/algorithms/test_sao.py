"""SAO pieces: observation tokens get no advantage and no policy gradient (R1.1, R3.4, R5.3)."""

import jax
import jax.numpy as jnp
import numpy as np

from rlvr.algorithms.sao import sao_advantages, sao_policy_loss, terminal_token_rewards


def _stream():
    # prompt(2) a0(3) o(2) a1(2) o(3) a2(2) pad(2): 1 = policy token
    lm = np.array([[0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0],
                   [0, 1, 1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0]], np.float32)
    return lm


def test_terminal_reward_on_last_policy_token():
    lm = _stream()
    tr = np.asarray(terminal_token_rewards(jnp.array([1.0, 2.0]), lm))
    assert tr[0, 13] == 1.0 and tr[1, 9] == 2.0 and tr.sum() == 3.0


def test_skip_observation_advantages_match_numpy_reference():
    lm = _stream()
    rng = np.random.default_rng(0)
    values = rng.normal(size=lm.shape).astype(np.float32)
    rewards = np.array([1.0, 0.0], np.float32)
    gamma, lam = 0.9, 0.8
    adv, ret = sao_advantages(rewards, values, lm, gamma=gamma, lam=lam, normalize=False)
    adv = np.asarray(adv)
    ref = np.zeros_like(values)
    for b in range(2):
        idx = np.nonzero(lm[b])[0]
        a_next, v_next = 0.0, 0.0
        for j in reversed(range(len(idx))):
            t = idx[j]
            r = rewards[b] if j == len(idx) - 1 else 0.0
            delta = r + gamma * v_next - values[b, t]
            a_next = delta + gamma * lam * a_next
            v_next = values[b, t]
            ref[b, t] = a_next
    np.testing.assert_allclose(adv, ref, rtol=1e-5, atol=1e-6)
    assert np.all(adv[lm == 0] == 0)


def test_observation_tokens_get_no_policy_gradient():
    lm = _stream()
    rng = np.random.default_rng(1)
    values = rng.normal(size=lm.shape).astype(np.float32)
    behavior = rng.normal(scale=0.1, size=lm.shape).astype(np.float32) * lm
    for skip in (True, False):
        adv, _ = sao_advantages(jnp.array([1.0, 0.0]), values, lm, skip_observations=skip)
        assert np.all(np.asarray(adv)[lm == 0] == 0)

        def f(lp):
            return sao_policy_loss(lp, behavior, adv, lm, clip_low=0.5, clip_high=0.5,
                                   weights=jnp.array([1.0, 0.5]))[0]

        lp = jnp.asarray(behavior + 0.01 * rng.normal(size=lm.shape).astype(np.float32))
        g = np.asarray(jax.grad(f)(lp))
        assert np.all(g[lm == 0] == 0)
        assert np.any(g[lm == 1] != 0)


def test_staleness_weight_scales_loss_linearly():
    lm = _stream()
    adv = jnp.asarray(lm)
    lp = jnp.zeros(lm.shape)
    l1, _ = sao_policy_loss(lp, lp, adv, lm, weights=jnp.array([1.0, 1.0]))
    l2, _ = sao_policy_loss(lp, lp, adv, lm, weights=jnp.array([0.5, 0.5]))
    np.testing.assert_allclose(float(l2), 0.5 * float(l1), rtol=1e-6)
