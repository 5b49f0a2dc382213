"""Tiny models and a fixed rollout batch shared by the algorithm tests."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from rlvr.algorithms import AlgorithmSettings, get_algorithm
from rlvr.core.kl import init_kl_controller
from rlvr.models import ModelConfig, Transformer, ValueModel
from rlvr.records.batch import RolloutBatch
from rlvr.records.state import create_train_state, split_model

VOCAB = 11


def tiny_config():
    return ModelConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_layers=1,
                       num_heads=2, num_kv_heads=2, head_dim=8, max_position_embeddings=32)


def fixed_batch(b=8, t=10, prompt=3, seed=0, rewards=None):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(3, VOCAB, (b, t)).astype(np.int32)
    lengths = rng.integers(2, t - prompt + 1, (b,))
    attn = np.arange(t)[None] < (prompt + lengths)[:, None]
    loss_mask = (np.arange(t)[None] >= prompt) & attn
    tokens = np.where(attn, tokens, 0)
    if rewards is None:
        rewards = rng.integers(0, 2, (b,)).astype(np.float32)
        rewards[:2] = [1, 0]  # at least one mixed group
    behav = np.where(loss_mask, -rng.uniform(1.5, 3.0, (b, t)), 0).astype(np.float32)
    return RolloutBatch.create(tokens=tokens, loss_mask=loss_mask.astype(np.float32),
                               behavior_logprobs=behav, rewards=rewards, attention_mask=attn)


def build(name, *, lr=1e-2, kl_mode="none", kl_coef=0.0, seed=0, optimizer=None,
          critic_optimizer=None, remat=False, **overrides):
    cfg = tiny_config()
    policy = Transformer(cfg, rngs=nnx.Rngs(seed), remat=remat)
    graphdef, params, rest = split_model(policy)
    settings = dataclasses.replace(AlgorithmSettings(name=name, group_size=2, kl_mode=kl_mode),
                                   **overrides)
    opt = optimizer or optax.adam(lr)
    kw = dict(policy_graphdef=graphdef, policy_rest=rest, optimizer=opt)
    critic_params = None
    critic_opt = None
    cls = get_algorithm(name)
    if cls.uses_critic:
        critic = ValueModel.from_policy(policy, rngs=nnx.Rngs(seed + 1))
        cg, critic_params, cr = split_model(critic)
        critic_opt = critic_optimizer or optax.adam(lr)
        kw.update(critic_graphdef=cg, critic_rest=cr, critic_optimizer=critic_opt)
    algo = cls(settings, **kw)
    ctrl = init_kl_controller(kl_coef) if kl_mode != "none" else None
    state = create_train_state(params, opt, seed=seed, ref_params=params if kl_mode != "none" else None,
                               critic_params=critic_params, critic_optimizer=critic_opt,
                               kl_controller=ctrl, extras=algo.init_extras())
    return algo, state


def assert_same_step(got, want, *, rtol: float, atol: float) -> None:
    """Two learner steps agree: every leaf of their (params or gradients, metrics) pairs
    within rtol/atol, the same metric names, and a non-zero gradient (nothing vacuous)."""
    (got_tree, got_m), (want_tree, want_m) = got, want
    for a, b in zip(jax.tree.leaves(got_tree), jax.tree.leaves(want_tree), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)
    assert set(got_m) == set(want_m)
    for key in want_m:
        np.testing.assert_allclose(float(got_m[key]), float(want_m[key]), rtol=rtol, atol=atol,
                                   err_msg=key)
    assert float(want_m["policy/grad_norm"]) > 0
