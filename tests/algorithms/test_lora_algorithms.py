"""Every algorithm trains a LoRA policy: only the adapters move, the optimiser state covers only
them, and the KL reference is the base with the adapters off (no reference copy)."""

import dataclasses

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from rlvr.algorithms import AlgorithmSettings, get_algorithm
from rlvr.core.kl import init_kl_controller
from rlvr.models import Transformer, ValueModel
from rlvr.models import lora as L
from rlvr.records.state import create_train_state, split_model
from tests.algorithms.helpers import fixed_batch, tiny_config

ALGORITHMS = ["grpo", "rloo", "reinforce", "ppo", "pivotrl", "sao"]


def build_lora(name, *, quantize="none", dropout=0.0, kl_mode="loss", lr=5e-2, num_microbatches=1):
    policy = Transformer(tiny_config(), rngs=nnx.Rngs(0))
    lora = L.apply_lora(policy, L.LoRAConfig(rank=2, quantize=quantize, dropout=dropout))
    graphdef, params, rest = split_model(policy)
    settings = dataclasses.replace(AlgorithmSettings(name=name, group_size=2, kl_mode=kl_mode),
                                   num_microbatches=num_microbatches)
    opt = optax.adam(lr)
    kw = dict(policy_graphdef=graphdef, policy_rest=rest, optimizer=opt, lora=lora)
    cls = get_algorithm(name)
    critic_params = critic_opt = None
    if cls.uses_critic:
        critic = ValueModel.from_policy(policy, rngs=nnx.Rngs(1))
        cg, critic_params, cr = split_model(critic)
        critic_opt = optax.adam(lr)
        kw.update(critic_graphdef=cg, critic_rest=cr, critic_optimizer=critic_opt)
    algo = cls(settings, **kw)
    state = create_train_state(params, opt, seed=0, critic_params=critic_params,
                               critic_optimizer=critic_opt, kl_controller=init_kl_controller(0.1),
                               extras=algo.init_extras(), trainable=lora.trainable)
    return algo, state, lora


@pytest.mark.parametrize("name", ALGORITHMS)
def test_only_adapters_train_and_kl_uses_the_base(name):
    algo, state, lora = build_lora(name, quantize="int8" if name in ("ppo", "pivotrl") else "none")
    assert state.ref_params is None
    adapters0, base0 = nnx.split_state(state.params, nnx.LoRAParam, ...)
    # the optimiser state holds moments of the adapters only
    n_adapter = sum(x.size for x in jax.tree.leaves(adapters0))
    n_opt = sum(x.size for x in jax.tree.leaves(state.opt_state) if x.ndim > 0)
    assert n_opt == 2 * n_adapter
    step = jax.jit(algo.train_step)
    batch = fixed_batch()
    state, m1 = step(state, batch)
    assert float(m1["kl/token_mean"]) == 0.0  # adapters start at B = 0: policy == base
    state, m2 = step(state, batch)
    assert float(m2["kl/token_mean"]) > 0.0  # the reference stayed the base
    adapters, base = nnx.split_state(state.params, nnx.LoRAParam, ...)
    for a, b in zip(jax.tree.leaves(base0), jax.tree.leaves(base)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    moved = [np.abs(np.asarray(a) - np.asarray(b)).max()
             for a, b in zip(jax.tree.leaves(adapters0), jax.tree.leaves(adapters))]
    assert min(moved) > 0
    # the reference log-probs are the base model's, computed without any stored copy
    ref = lora.model_of(lora.reference_params(state.params))
    base_model = lora.model_of(nnx.merge_state(jax.tree.map(np.zeros_like, adapters), base))
    np.testing.assert_array_equal(np.asarray(ref(batch.tokens)), np.asarray(base_model(batch.tokens)))


def test_accumulation_stays_exact_with_adapters():
    """Two micro-batches give the one-batch LoRA update (the trainable split is exact)."""
    outs = []
    for n in (1, 2):
        algo, state, _ = build_lora("grpo", num_microbatches=n)
        state, _ = jax.jit(algo.train_step)(state, fixed_batch())
        outs.append(nnx.split_state(state.params, nnx.LoRAParam, ...)[0])
    for a, b in zip(jax.tree.leaves(outs[0]), jax.tree.leaves(outs[1])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_dropout_changes_the_update_and_is_seeded():
    def runner(dropout):
        algo, state0, _ = build_lora("grpo", dropout=dropout, kl_mode="none")
        step = jax.jit(algo.train_step)

        def adapters_after(seed):
            state, _ = step(state0.replace(rng=jax.random.PRNGKey(seed)), fixed_batch())
            return jax.tree.leaves(nnx.split_state(state.params, nnx.LoRAParam, ...)[0])
        return adapters_after

    plain, drop = runner(0.0)(0), runner(0.3)
    first, again, other = drop(0), drop(0), drop(1)
    diff = lambda xs, ys: max(np.abs(np.asarray(x) - np.asarray(y)).max() for x, y in zip(xs, ys))
    assert diff(plain, first) > 1e-6
    assert diff(first, again) == 0.0
    assert diff(first, other) > 1e-6
