"""Exact gradient accumulation for every policy objective and the value loss: with the learner's
minibatch-wide aux denominators, the sum over micro-batches of loss and gradient equals the
whole-minibatch value; observation / prompt tokens (loss_mask 0) and invalid rows get exactly
zero gradient."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr.records.batch import TrainingBatch
from rlvr.learner import batch_denominators
from tests.algorithms.helpers import build


def _data(b=6, t=10, seed=0):
    rng = np.random.default_rng(seed)
    lm = (rng.random((b, t)) < 0.5).astype(np.float32)
    lm[:, 0] = 0.0  # a prompt token
    lm[1] = 0.0     # a row without action tokens
    lm[2, 3] = 1.0
    valid = np.ones(b, bool)
    valid[4] = False
    lm = lm * valid[:, None]  # the learner folds `valid` into the loss mask
    old = rng.normal(-1.0, 0.3, (b, t)).astype(np.float32)
    lp = (old + rng.normal(0, 0.1, (b, t))).astype(np.float32)
    ref = (old + rng.normal(0, 0.1, (b, t))).astype(np.float32)
    return lp, old, ref, lm, valid, rng


CASES = {  # algorithm, policy objective, settings
    "clip + kl loss + entropy": ("grpo", dict(kl_mode="loss", entropy_coef=0.01, dual_clip=3.0)),
    "trust_region (SAO)": ("sao", dict(entropy_coef=0.01)),
    "sequence_clip + kl (PivotRL)": ("pivotrl", dict(kl_mode="loss")),
    "clip, seq-mean-token-sum": ("grpo", dict(aggregation="seq-mean-token-sum")),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("n", [2, 3])
def test_policy_objective_exact_accumulation(case, n):
    name, over = CASES[case]
    algo, _ = build(name, kl_coef=0.1 if over.get("kl_mode") else 0.0, **over)
    lp, old, ref, lm, valid, rng = _data()
    b = lm.shape[0]
    adv = (rng.normal(size=(b, lm.shape[1])) * lm).astype(np.float32) if name == "sao" else \
        rng.normal(size=b).astype(np.float32)
    ent = rng.uniform(0.5, 2.0, lm.shape).astype(np.float32)
    mb = TrainingBatch(loss_mask=lm, valid=valid, old_logprobs=old, advantages=adv, ref_logprobs=ref)

    def f(x, sl=slice(None), aux=None):
        part = jax.tree.map(lambda v: v[sl], mb)
        aux = dict(aux or batch_denominators(TrainingBatch(loss_mask=jnp.asarray(part.loss_mask),
                                                           valid=jnp.asarray(part.valid))), kl_coef=0.1)
        return algo.policy_objective(x[sl], ent[sl], part, aux)[0]

    full, gfull = jax.value_and_grad(f)(lp)
    aux = batch_denominators(TrainingBatch(loss_mask=jnp.asarray(lm), valid=jnp.asarray(valid)))
    k = b // n

    def acc(x):
        return sum(f(x, slice(i * k, (i + 1) * k), aux) for i in range(n))

    v, g = jax.value_and_grad(acc)(lp)
    np.testing.assert_allclose(float(v), float(full), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(g), np.asarray(gfull), rtol=1e-5, atol=1e-6)
    assert np.all(np.asarray(gfull)[lm == 0] == 0)  # observation / prompt tokens: no gradient
    assert np.all(np.asarray(gfull)[~valid] == 0)
    assert np.any(np.asarray(gfull)[lm > 0] != 0)


def test_value_objective_exact_accumulation():
    algo, _ = build("ppo", value_clip=0.2, value_coef=0.5)
    _, old, ref, lm, valid, rng = _data(seed=1)
    values = (old + rng.normal(0, 0.3, old.shape)).astype(np.float32)
    mb = TrainingBatch(loss_mask=lm, old_values=old, returns=ref)

    def f(x, sl=slice(None), aux=None):
        part = jax.tree.map(lambda v: v[sl], mb)
        aux = aux or batch_denominators(TrainingBatch(loss_mask=jnp.asarray(part.loss_mask),
                                                      valid=jnp.asarray(valid[sl])))
        return algo.critic_objective(x[sl], part, aux)[0]

    full, gfull = jax.value_and_grad(f)(values)
    aux = batch_denominators(TrainingBatch(loss_mask=jnp.asarray(lm), valid=jnp.asarray(valid)))
    v, g = jax.value_and_grad(lambda x: f(x, slice(0, 3), aux) + f(x, slice(3, None), aux))(values)
    np.testing.assert_allclose(float(v), float(full), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(g), np.asarray(gfull), rtol=1e-5, atol=1e-6)
    assert np.all(np.asarray(gfull)[lm == 0] == 0)
