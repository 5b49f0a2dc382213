"""Exact gradient accumulation for the agent losses (issue 6): with the learner's minibatch-wide
aux denominators, the sum over micro-batches of loss and gradient equals the whole-minibatch
value; observation tokens (loss_mask 0) get exactly zero gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr.algorithms.pivotrl import pivotrl_objective
from rlvr.algorithms.sao import sao_policy_loss, sao_value_loss
from rlvr.train.agent_grpo_loop import agent_grpo_loss
from rlvr.train.learner import batch_denominators


def _data(b=6, t=10, seed=0):
    rng = np.random.default_rng(seed)
    lm = (rng.random((b, t)) < 0.5).astype(np.float32)
    lm[:, 0] = 0.0  # a prompt token
    lm[1] = 0.0     # a row without action tokens
    lm[2, 3] = 1.0
    valid = np.ones(b, bool)
    valid[4] = False
    old = rng.normal(-1.0, 0.3, (b, t)).astype(np.float32)
    lp = (old + rng.normal(0, 0.1, (b, t))).astype(np.float32)
    ref = (old + rng.normal(0, 0.1, (b, t))).astype(np.float32)
    return lp, old, ref, lm, valid, rng


def _split_sum(f, args, lm, valid, n=2):
    """Σ over n micro-batches of f(*args_chunk, aux) with the full-batch denominators."""
    aux = batch_denominators({"loss_mask": jnp.asarray(lm), "valid": jnp.asarray(valid)})
    b = lm.shape[0]
    k = b // n
    return sum(f(*[a[i * k:(i + 1) * k] for a in args], aux) for i in range(n))


@pytest.mark.parametrize("n", [2, 3])
def test_pivotrl_objective_exact_accumulation(n):
    lp, old, ref, lm, valid, rng = _data()
    adv = rng.normal(size=lm.shape[0]).astype(np.float32)

    def f(lp_, old_, ref_, adv_, lm_, valid_, aux=None):
        return pivotrl_objective(lp_, old_, adv_, lm_, clip_eps=0.2, ref_logprobs=ref_,
                                 kl_coef=0.1, valid=valid_, aux=aux)[0]

    args = (lp, old, ref, adv, lm, valid)
    full, gfull = jax.value_and_grad(f)(*args)
    lm_valid = lm * valid[:, None]
    acc = _split_sum(lambda *a: f(*a[:-1], aux=a[-1]), args, lm_valid, valid, n)
    np.testing.assert_allclose(float(acc), float(full), rtol=1e-5, atol=1e-6)
    # gradient of the concatenation of micro-batch losses == full-batch gradient
    aux = batch_denominators({"loss_mask": jnp.asarray(lm_valid), "valid": jnp.asarray(valid)})
    k = lm.shape[0] // n

    def acc_loss(lp_):
        return sum(f(lp_[i * k:(i + 1) * k], *[a[i * k:(i + 1) * k] for a in args[1:]], aux=aux)
                   for i in range(n))

    np.testing.assert_allclose(np.asarray(jax.grad(acc_loss)(lp)), np.asarray(gfull), rtol=1e-5, atol=1e-6)
    assert np.all(np.asarray(gfull)[lm == 0] == 0)  # observation/prompt tokens: no gradient
    assert np.all(np.asarray(gfull)[~valid] == 0)


@pytest.mark.parametrize("which", ["sao_policy", "sao_value", "agent_grpo"])
def test_token_losses_exact_accumulation(which):
    lp, old, ref, lm, valid, rng = _data(seed=1)
    lm = lm * valid[:, None]  # loops zero the loss mask of invalid rows
    adv_t = (rng.normal(size=lm.shape) * lm).astype(np.float32)
    adv_s = rng.normal(size=lm.shape[0]).astype(np.float32)
    w = rng.uniform(0.5, 1.0, lm.shape[0]).astype(np.float32)

    if which == "sao_policy":
        def f(x, aux=None, sl=slice(None)):
            return sao_policy_loss(x, old[sl], adv_t[sl], lm[sl], weights=w[sl], entropy=-x,
                                   entropy_coef=0.01, aux=aux)[0]
    elif which == "sao_value":
        def f(x, aux=None, sl=slice(None)):
            return sao_value_loss(x, old[sl], ref[sl], lm[sl], clip_eps=0.2, aux=aux)[0]
    else:
        def f(x, aux=None, sl=slice(None)):
            return agent_grpo_loss(x, old[sl], adv_s[sl], lm[sl], clip_eps=0.2, ref_logprobs=ref[sl],
                                   kl_coef=0.05, aux=aux)[0]

    full, gfull = jax.value_and_grad(f)(lp)
    aux = batch_denominators({"loss_mask": jnp.asarray(lm), "valid": jnp.asarray(valid)})

    def acc(x):
        return f(x[:3], aux, slice(0, 3)) + f(x[3:], aux, slice(3, None))

    v, g = jax.value_and_grad(acc)(lp)
    np.testing.assert_allclose(float(v), float(full), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(g), np.asarray(gfull), rtol=1e-5, atol=1e-6)
    assert np.all(np.asarray(gfull)[lm == 0] == 0)  # observation tokens: no policy gradient
    assert np.any(np.asarray(gfull)[lm > 0] != 0)
