"""Mixture-of-experts: routing and dispatch against a dense reference, the load-balancing loss,
and expert parallelism (an 8-device simulated mesh with an expert axis equals one device)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from rlvr.models import ModelConfig, Transformer
from rlvr.models.scoring import token_logprobs
from rlvr.models.transformer import load_balancing_loss, moe_dispatch, route


def _moe_config(**kw):
    base = dict(vocab_size=48, hidden_size=32, intermediate_size=40, num_layers=2, num_heads=4,
                num_kv_heads=2, head_dim=8, architecture="qwen3_moe", qk_norm=True,
                num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                norm_topk_prob=True, mlp_only_layers=(1,))
    base.update(kw)
    return ModelConfig(**base)


@pytest.mark.parametrize("normalize", [False, True])
def test_dispatch_equals_dense_mixture(normalize):
    """y[n] = Σ_j w[n, j] · expert_{e[n, j]}(x[n]), computed expert by expert over all tokens."""
    rs = np.random.RandomState(0)
    n, d, f, e, k = 13, 8, 6, 5, 2
    x = rs.randn(n, d).astype(np.float32)
    logits = rs.randn(n, e).astype(np.float32)
    wg, wu = rs.randn(e, d, f).astype(np.float32), rs.randn(e, d, f).astype(np.float32)
    wd = rs.randn(e, f, d).astype(np.float32)
    w, idx = route(jnp.asarray(logits), k, normalize)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    top = np.argsort(-p, axis=-1)[:, :k]
    np.testing.assert_array_equal(np.asarray(idx), top)
    wt = np.take_along_axis(p, top, -1)
    if normalize:
        wt = wt / wt.sum(-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(w), wt, rtol=1e-6)
    got = moe_dispatch(jnp.asarray(x), w, idx, wg, wu, wd, act="silu", dtype=jnp.float32)
    want = np.zeros((n, d), np.float32)
    for t in range(n):
        for j in range(k):
            ex = top[t, j]
            g = x[t] @ wg[ex]
            h = g / (1 + np.exp(-g)) * (x[t] @ wu[ex])
            want[t] += wt[t, j] * (h @ wd[ex])
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-4)


def test_load_balancing_loss_reference():
    """E · Σ f·P equals transformers' formula on random logits with padding excluded, and 1
    for a router that is uniform and spreads the tokens evenly."""
    rs = np.random.RandomState(1)
    l, b, t, e, k = 2, 3, 5, 4, 2
    logits = rs.randn(l, b, t, e).astype(np.float32)
    mask = np.ones((b, t), bool)
    mask[0, :2] = False
    got = float(load_balancing_loss(jnp.asarray(logits), jnp.asarray(mask), k))
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    real = np.broadcast_to(mask, (l, b, t))
    pr = p[real]  # [N, E]
    top = np.argsort(-pr, -1)[:, :k]
    onehot = np.eye(e)[top]  # [N, k, E]
    want = e * np.sum(onehot.mean(0) * pr.mean(0)[None])
    np.testing.assert_allclose(got, want, rtol=1e-5)
    # a router that spreads tokens evenly with uniform probabilities scores exactly 1
    even = np.zeros((1, 1, 4, 4), np.float32)
    assert abs(float(load_balancing_loss(jnp.asarray(even), jnp.ones((1, 4), bool), 1)) - 1) < 1e-6


def test_router_aux_loss_of_the_model_and_its_gradient():
    model = Transformer(_moe_config(), rngs=nnx.Rngs(0))
    toks = jnp.asarray(np.random.RandomState(0).randint(0, 48, (2, 9)), jnp.int32)
    hidden, aux = model.router_aux_loss(toks)
    np.testing.assert_allclose(np.asarray(hidden), np.asarray(model.hidden_states(toks)), atol=1e-6)
    assert float(aux) >= 1.0 - 1e-5  # E·Σ f·P >= 1 (equality only when perfectly balanced)
    graphdef, state = nnx.split(model)
    g = jax.grad(lambda st: nnx.merge(graphdef, st).router_aux_loss(toks)[1])(state)
    router_g = g["model"]["layers"][0]["mlp"]["gate"]["kernel"][...]
    assert float(jnp.abs(router_g).max()) > 0  # the loss trains the router
    dense = Transformer(_moe_config(num_experts=0, architecture="qwen3"), rngs=nnx.Rngs(0))
    assert float(dense.router_aux_loss(toks)[1]) == 0.0


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
def test_expert_parallel_mesh_equals_one_device():
    """(data 1, fsdp 2, tensor 1, expert 4) on 8 simulated devices: the expert kernels are split
    over the expert axis; logits, log-probs, gradients (aux loss included) and greedy samples
    equal one device's."""
    from rlvr.parallel import batch_sharding, kv_cache_sharding, make_mesh, shard_model
    from rlvr.rollout.sampler import SamplingParams, pad_prompts, sample

    cfg = _moe_config()
    mesh = make_mesh(fsdp=2, expert=4)
    assert dict(mesh.shape) == {"data": 1, "fsdp": 2, "tensor": 1, "expert": 4}
    ref_model = Transformer(cfg, rngs=nnx.Rngs(0))
    sharded = shard_model(Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
    up = sharded.model.layers[0].mlp.up_proj[...]
    assert up.sharding.spec == P("expert", "fsdp", "tensor")
    assert up.addressable_shards[0].data.shape == (1, 16, 24)
    rs = np.random.RandomState(0)
    toks = rs.randint(0, 48, (8, 10)).astype(np.int32)
    mask = np.ones_like(toks, bool)
    mask[::3, :3] = False
    pos = np.where(mask, np.cumsum(mask, 1) - 1, 0).astype(np.int32)
    w = rs.randn(8, 10).astype(np.float32)

    def run(model, put):
        graphdef, state = nnx.split(model)

        def loss(st, t, p, m):
            mdl = nnx.merge(graphdef, st)
            lp, _ = token_logprobs(mdl, t, positions=p, attention_mask=m)
            aux = mdl.router_aux_loss(t, positions=p, attention_mask=m)[1]
            return jnp.sum(lp * w) + 0.1 * aux, lp

        @jax.jit
        def fwd_and_grad(st, t, p, m):
            logits = nnx.merge(graphdef, st)(t, positions=p, attention_mask=m)
            (_, lp), g = jax.value_and_grad(loss, has_aux=True)(st, t, p, m)
            return logits, lp, g

        return fwd_and_grad(state, put(toks), put(pos), put(mask))

    ref = run(ref_model, jnp.asarray)
    with jax.set_mesh(mesh):
        got = run(sharded, lambda x: jax.device_put(x, batch_sharding(mesh)))
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(ref[0]), atol=1e-5)
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(ref[1]), atol=1e-5)
    diffs = jax.tree.leaves(jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), got[2], ref[2]))
    assert max(diffs) < 1e-5

    prompts, pmask = pad_prompts([[1, 4, 5], [1, 7], [1, 8, 9, 10], [1, 3]] * 2, pad_id=0)
    params = SamplingParams(greedy=True, max_new_tokens=5)
    keys = jax.random.split(jax.random.key(5), 8)
    ref_s = sample(ref_model, prompts, pmask, keys, params, pad_id=0)
    with jax.set_mesh(mesh):
        bs = batch_sharding(mesh)
        got_s = sample(sharded, jax.device_put(prompts, bs), jax.device_put(pmask, bs), keys,
                       params, pad_id=0, cache_sharding=kv_cache_sharding(mesh, cfg, 8))
    np.testing.assert_array_equal(np.asarray(got_s.tokens), np.asarray(ref_s.tokens))


def test_logprobs_with_router_loss_under_remat():
    """token_logprobs(with_router_loss=True): the same value and gradients with rematerialised
    blocks (the learner's memory setting) as without."""
    toks = jnp.asarray(np.random.RandomState(0).randint(0, 48, (2, 9)), jnp.int32)
    res = []
    for remat in (False, True):
        graphdef, state = nnx.split(Transformer(_moe_config(), rngs=nnx.Rngs(0), remat=remat))

        def loss(st):
            lp, _, aux = token_logprobs(nnx.merge(graphdef, st), toks, with_router_loss=True)
            return jnp.sum(lp) + aux

        res.append(jax.jit(jax.value_and_grad(loss))(state))
    np.testing.assert_allclose(float(res[1][0]), float(res[0][0]), rtol=1e-6)
    diffs = jax.tree.leaves(jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), res[0][1],
                                         res[1][1]))
    assert max(diffs) < 1e-5
