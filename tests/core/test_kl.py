"""rlvr.core.kl: estimators, reward penalty, controllers, and the docs/algorithms.md (A.16) KL-regularised optimum."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr.core.kl import (
    KLControllerState,
    init_kl_controller,
    kl_estimate,
    kl_penalty_rewards,
    update_kl_controller,
)
from rlvr.core.losses import ppo_token_loss


def _dists(seed, n=7):
    rng = np.random.default_rng(seed)
    logp = rng.normal(size=n)
    logq = rng.normal(size=n)
    logp = logp - np.log(np.sum(np.exp(logp)))
    logq = logq - np.log(np.sum(np.exp(logq)))
    return logp.astype(np.float32), logq.astype(np.float32)


def test_estimators_formulas_and_exact_expectations():
    logp, logq = _dists(0)
    for kind, ref in (
        ("k1", logp - logq),
        ("k2", 0.5 * (logq - logp) ** 2),
        ("k3", np.exp(logq - logp) - 1 - (logq - logp)),
    ):
        np.testing.assert_allclose(kl_estimate(logp, logq, kind), ref, rtol=1e-5, atol=1e-6)
    # k1 and k3 are unbiased: E_{a~π}[k(a)] = KL(π‖π_ref) exactly on an enumerable action set.
    p = np.exp(logp.astype(np.float64))
    kl_true = np.sum(p * (logp - logq))
    for kind in ("k1", "k3"):
        np.testing.assert_allclose(np.sum(p * np.asarray(kl_estimate(logp, logq, kind))), kl_true, rtol=1e-4)
    assert np.all(np.asarray(kl_estimate(logp, logq, "k2")) >= 0)
    assert np.all(np.asarray(kl_estimate(logp, logq, "k3")) >= -1e-7)
    # Mask zeroes the estimate and keeps garbage out.
    mask = np.array([1, 0, 1, 0, 1, 1, 0], np.float32)
    garbage = np.where(mask > 0, logq, 1e4).astype(np.float32)
    out = kl_estimate(logp, garbage, "k3", loss_mask=mask)
    assert np.all(np.isfinite(out)) and np.all(np.asarray(out)[mask == 0] == 0)


def test_kl_penalty_rewards_token_and_sequence_forms():
    rng = np.random.default_rng(1)
    lp = rng.normal(size=(2, 5)).astype(np.float32)
    ref = rng.normal(size=(2, 5)).astype(np.float32)
    m = np.array([[0, 1, 1, 0, 1], [0, 0, 0, 0, 0]], np.float32)
    tok = np.zeros((2, 5), np.float32)
    tok[0, 4] = 1.0
    out = kl_penalty_rewards(tok, lp, ref, m, beta=0.1, kind="k1")
    np.testing.assert_allclose(out, tok - 0.1 * (lp - ref) * m, rtol=1e-6, atol=1e-7)
    seq = kl_penalty_rewards(np.array([1.0, 0.0]), lp, ref, m, beta=0.1, kind="k1")
    np.testing.assert_allclose(seq, [1.0 - 0.1 * np.sum((lp - ref)[0] * m[0]), 0.0], rtol=1e-6)


def test_controllers_fixed_and_adaptive_eq23():
    fixed = init_kl_controller(0.05)
    assert not fixed.adaptive
    assert update_kl_controller(fixed, 10.0, 256) is fixed
    st = init_kl_controller(0.1, target=6.0, horizon=1000)
    assert isinstance(st, KLControllerState) and st.adaptive
    up = update_kl_controller(st, 8.0, 100)
    np.testing.assert_allclose(up.coef, 0.1 * np.exp(0.1 * (8.0 - 6.0)), rtol=1e-6)
    down = update_kl_controller(st, 4.0, 100)
    assert float(down.coef) < 0.1 < float(up.coef)
    # A pytree: jit and grad through the update.
    jitted = jax.jit(update_kl_controller)(st, jnp.float32(8.0), 100)
    np.testing.assert_allclose(jitted.coef, up.coef, rtol=1e-6)
    g = jax.grad(lambda k: update_kl_controller(st, k, 100).coef)(8.0)
    np.testing.assert_allclose(g, float(up.coef) * 0.1, rtol=1e-5)
    leaves = jax.tree_util.tree_leaves(st)
    assert len(leaves) == 3  # `adaptive` is static


def test_bad_inputs_raise():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="kind"):
        kl_estimate(x, x, "k4")
    with pytest.raises(ValueError, match="ref_logprobs"):
        kl_estimate(x, np.zeros((2, 4)), "k1")
    with pytest.raises(ValueError, match="kind"):
        kl_penalty_rewards(x, x, x, x, beta=0.1, kind="kl")
    with pytest.raises(ValueError, match="beta"):
        kl_penalty_rewards(x, x, x, x, beta=-0.1)
    with pytest.raises(ValueError, match="rewards"):
        kl_penalty_rewards(np.zeros(3), x, x, x, beta=0.1)
    with pytest.raises(ValueError, match="target"):
        init_kl_controller(0.1, target=-1.0)
    with pytest.raises(ValueError, match="horizon"):
        init_kl_controller(0.1, target=1.0, horizon=0)


# ---- docs/algorithms.md (A.16): π* ∝ π_ref exp(R/β) is the optimum of E[R] − β KL(π‖π_ref) ----

def _optimum(logq, R, beta):
    w = np.exp(logq.astype(np.float64)) * np.exp(R / beta)
    return w / w.sum()


@pytest.mark.parametrize("beta", [0.5, 2.0])
def test_kl_regularised_optimum_direct_objective(beta):
    _, logq = _dists(3, n=6)
    R = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0], np.float32)  # acceptable set {0, 2, 3}

    def objective(theta):
        logp = jax.nn.log_softmax(theta)
        p = jnp.exp(logp)
        return jnp.sum(p * (R - beta * kl_estimate(logp, logq, "k1")))

    @jax.jit
    def ascend(theta):
        return jax.lax.fori_loop(0, 3000, lambda i, th: th + 1.0 * jax.grad(objective)(th), theta)

    pi = np.asarray(jax.nn.softmax(ascend(jnp.zeros(6))))
    star = _optimum(logq, R, beta)
    np.testing.assert_allclose(pi, star, atol=1e-4)
    # Inside the acceptable set the probabilities keep π_ref's ratios; the set's mass grows.
    q = np.exp(logq)
    np.testing.assert_allclose(pi[2] / pi[0], q[2] / q[0], rtol=1e-3)
    assert pi[[0, 2, 3]].sum() > q[[0, 2, 3]].sum()


def test_kl_regularised_optimum_via_reward_penalty_and_ppo_loss():
    """On-policy iterations of the library pipeline (kl_penalty_rewards → ppo_token_loss) reach π*."""
    beta = 0.5
    _, logq = _dists(4, n=5)
    R = np.array([0.3, 1.0, 0.0, 0.7, 0.1], np.float32)  # graded rewards
    A = R.shape[0]
    mask = jnp.ones((A, 1))

    def step(_, theta):
        logp_old = jax.lax.stop_gradient(jax.nn.log_softmax(theta))
        adv = kl_penalty_rewards(jnp.asarray(R), logp_old[:, None], jnp.asarray(logq)[:, None], mask,
                                 beta=beta, kind="k1")
        weight = A * jnp.exp(logp_old)  # exact expectation over the enumerable actions

        def loss(th):
            logp = jax.nn.log_softmax(th)[:, None]
            return ppo_token_loss(logp, logp_old[:, None], adv * weight, mask)[0]

        return theta - 1.0 * jax.grad(loss)(theta)

    theta = jax.jit(lambda th: jax.lax.fori_loop(0, 3000, step, th))(jnp.zeros(A))
    np.testing.assert_allclose(np.asarray(jax.nn.softmax(theta)), _optimum(logq, R, beta), atol=1e-4)
