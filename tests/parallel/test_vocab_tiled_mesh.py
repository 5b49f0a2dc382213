"""`logprob_impl="vocab_tiled"` on a mesh whose `tensor` axis shards the LM head and the embedding
along the vocabulary (8 simulated CPU devices): the same log-probs, entropies and parameter
gradients as the chunked head on one device (the tiles' dynamic slices gather the head along
the vocabulary inside the jitted step; the results do not depend on it)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from rlvr.models import Transformer, fused_head
from rlvr.models.scoring import token_logprobs
from rlvr.parallel import batch_sharding, make_mesh, shard_model
from tests.models.helpers import tiny_config

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")

V = 200  # 4 tiles of 64 columns, the last partial; divisible by the tensor axis (2 and 4)


def _run(model, impl, put, toks, pos, mask, w):
    graphdef, state = nnx.split(model)

    def loss(st):
        lp, ent = token_logprobs(nnx.merge(graphdef, st), put(toks), positions=put(pos),
                                 attention_mask=put(mask), temperature=0.9, start=2, impl=impl)
        return jnp.sum(lp * w) - 0.1 * jnp.sum(ent * w), (lp, ent)

    (_, (lp, ent)), g = jax.jit(jax.value_and_grad(loss, has_aux=True))(state)
    return lp, ent, g


@pytest.mark.parametrize("tied,axes", [(False, dict(data=2, fsdp=2, tensor=2)),
                                       (True, dict(data=2, tensor=4))])
def test_vocab_tiled_on_a_vocabulary_sharded_head_matches_one_device(tied, axes, monkeypatch):
    monkeypatch.setattr(fused_head, "DEFAULT_TILE", 64)
    monkeypatch.setattr(fused_head, "DEFAULT_ROW_BLOCK", 7)   # several row blocks, the last padded
    calls, real = [], fused_head.head_logprobs_entropy
    monkeypatch.setattr(fused_head, "head_logprobs_entropy",
                        lambda *a, **kw: calls.append(kw["impl"]) or real(*a, **kw))
    mesh = make_mesh(**axes)
    cfg = tiny_config(vocab_size=V, tie_word_embeddings=tied)
    sharded = shard_model(Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
    head = sharded.lm_head_kernel()
    assert head.sharding.spec[1] == "tensor", head.sharding.spec  # split along the vocabulary
    rs = np.random.RandomState(0)
    toks = rs.randint(0, V, (8, 11)).astype(np.int32)
    mask = np.ones_like(toks, bool)
    mask[::3, :4] = False
    pos = np.where(mask, np.cumsum(mask, 1) - 1, 0).astype(np.int32)
    w = jnp.asarray(rs.randn(8, 11), jnp.float32)

    ref = _run(Transformer(cfg, rngs=nnx.Rngs(0)), "chunked", jnp.asarray, toks, pos, mask, w)
    assert calls == []
    with jax.set_mesh(mesh):
        got = _run(sharded, "vocab_tiled", lambda x: jax.device_put(x, batch_sharding(mesh)),
                   toks, pos, mask, w)
    assert calls == ["vocab_tiled"]
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(ref[0]), atol=1e-5)
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(ref[1]), atol=1e-5)
    assert float(np.abs(np.asarray(ref[0])).max()) > 1.0
    grads = zip(nnx.to_flat_state(got[2]), nnx.to_flat_state(ref[2]), strict=True)
    for (path, a), (_, b) in grads:
        np.testing.assert_allclose(np.asarray(a[...]), np.asarray(b[...]), atol=2e-5, rtol=1e-5,
                                   err_msg=str(path))
    name = ("model", "embed_tokens") if tied else ("lm_head", "kernel")
    assert float(jnp.abs(dict(nnx.to_flat_state(got[2]))[name][...]).max()) > 1e-3
