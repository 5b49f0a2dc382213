"""(2 data x 2 fsdp x 2 tensor) mesh on 8 simulated CPU devices: same logits, log-probs,
gradients and samples as one device; partition rules cover every parameter and the KV cache."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import AxisType, PartitionSpec as P

from rlvr.models import Transformer, ValueModel
from rlvr.models.scoring import token_logprobs
from rlvr.parallel import (batch_sharding, kv_cache_sharding, logical_to_spec, make_mesh,
                           param_specs, shard_model)
from rlvr.rollout.sampler import SamplingParams, pad_prompts, sample
from tests.models.helpers import tiny_config

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")


@pytest.fixture(scope="module")
def mesh():
    return make_mesh(data=2, fsdp=2, tensor=2)


def test_make_mesh_and_rules(mesh):
    assert dict(mesh.shape) == {"data": 2, "fsdp": 2, "tensor": 2}
    assert all(t == AxisType.Auto for t in mesh.axis_types)
    with pytest.raises(ValueError, match="exceeds"):
        make_mesh(data=16)
    with pytest.raises(ValueError, match="fsdp"):
        make_mesh(fsdp=0)
    model = Transformer(tiny_config(tie_word_embeddings=False), rngs=nnx.Rngs(0))
    specs = dict(nnx.to_flat_state(param_specs(model, mesh)))
    flat = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
    assert set(specs) == set(flat)  # every parameter has a spec
    layer = ("model", "layers", 0)
    assert specs[layer + ("self_attn", "q_proj", "kernel")] == P("fsdp", "tensor")
    assert specs[layer + ("self_attn", "q_proj", "bias")] == P("tensor")
    assert specs[layer + ("self_attn", "o_proj", "kernel")] == P("tensor", "fsdp")
    assert specs[layer + ("mlp", "down_proj", "kernel")] == P("tensor", "fsdp")
    assert specs[layer + ("input_layernorm", "scale")] == P(None)
    assert specs[("model", "embed_tokens")] == P("tensor", "fsdp")
    assert specs[("lm_head", "kernel")] == P("fsdp", "tensor")
    # a dimension the mesh axis does not divide stays replicated
    assert logical_to_spec(("embed", "kv_heads"), (5, 3), mesh) == P(None, None)
    assert logical_to_spec(("embed", "kv_heads"), (6, 3), mesh) == P("fsdp", None)
    assert kv_cache_sharding(mesh).spec == P(("data", "fsdp"), None, "tensor", None)
    with pytest.raises(ValueError, match="'bogus'"):
        logical_to_spec(("bogus",), (4,), mesh)
    vspecs = dict(nnx.to_flat_state(param_specs(ValueModel(tiny_config(), rngs=nnx.Rngs(0)), mesh)))
    assert vspecs[("value_head", "kernel")] == P("fsdp", None)


def test_sharded_forward_logprobs_grads_and_sampler_match_one_device(mesh):
    cfg = tiny_config()
    ref_model = Transformer(cfg, rngs=nnx.Rngs(0))
    sharded = shard_model(Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
    kernel = sharded.model.layers[0].mlp.up_proj.kernel[...]
    assert kernel.sharding.spec == P("fsdp", "tensor")
    assert len(kernel.addressable_shards) == 8

    rs = np.random.RandomState(0)
    toks = rs.randint(0, cfg.vocab_size, (8, 12)).astype(np.int32)
    mask = np.ones_like(toks, bool)
    mask[::3, :4] = False
    pos = np.where(mask, np.cumsum(mask, 1) - 1, 0).astype(np.int32)
    w = rs.randn(8, 12).astype(np.float32)

    def run(model, put):
        graphdef, state = nnx.split(model)

        def loss(st, t, p, m):
            lp, ent = token_logprobs(nnx.merge(graphdef, st), t, positions=p, attention_mask=m,
                                     chunk_size=5)
            return jnp.sum(lp * w) - 0.01 * jnp.sum(ent), lp

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
    # gradients keep the parameter shardings
    g_kernel = got[2]["model"]["layers"][0]["mlp"]["up_proj"]["kernel"][...]
    assert g_kernel.sharding.is_equivalent_to(kernel.sharding, 2)

    prompts, pmask = pad_prompts([[1, 4, 5], [1, 7], [1, 8, 9, 10], [1, 3]] * 2, pad_id=0)
    params = SamplingParams(temperature=0.9, max_new_tokens=6, stop_token_ids=(2,))
    keys = jax.random.split(jax.random.key(5), 8)
    ref_s = sample(ref_model, prompts, pmask, keys, params, pad_id=0)
    with jax.set_mesh(mesh):
        bs = batch_sharding(mesh)
        got_s = sample(sharded, jax.device_put(prompts, bs), jax.device_put(pmask, bs),
                       keys, params, pad_id=0,
                       cache_sharding=kv_cache_sharding(mesh, cfg, 8))
    np.testing.assert_array_equal(np.asarray(got_s.tokens), np.asarray(ref_s.tokens))
    np.testing.assert_allclose(np.asarray(got_s.behavior_logprobs),
                               np.asarray(ref_s.behavior_logprobs), atol=1e-5)
