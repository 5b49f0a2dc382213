"""token_logprobs (alignment, chunking, temperature, masks, grads) and the value model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr.models import Transformer, ValueModel
from rlvr.models import scoring
from rlvr.models.scoring import default_chunk_size, token_logprobs_from_state
from rlvr.models.value import trainable_filter
from tests.models.helpers import jit_forward, jit_logprobs, np_log_softmax, tiny_config


@pytest.fixture(scope="module")
def model():
    return Transformer(tiny_config(), rngs=nnx.Rngs(0))


def _reference(model, toks, mask, pos, temperature):
    """Independent reference: full logits, numpy log-softmax, explicit loop over t."""
    logits = np.asarray(jit_forward(model, toks, pos, mask), np.float64) / temperature
    logp = np_log_softmax(logits)
    b, t = toks.shape
    lp, ent = np.zeros((b, t)), np.zeros((b, t))
    for i in range(b):
        for j in range(1, t):
            if mask[i, j] and mask[i, :j].any():
                lp[i, j] = logp[i, j - 1, toks[i, j]]
                ent[i, j] = -(np.exp(logp[i, j - 1]) * logp[i, j - 1]).sum()
    return lp, ent


@pytest.mark.parametrize("chunk", [None, 4])
def test_token_logprobs_matches_reference(model, chunk):
    rs = np.random.RandomState(0)
    toks = rs.randint(0, 48, (3, 11)).astype(np.int32)
    mask = np.ones_like(toks, bool)
    mask[1, :4] = False   # left padding
    mask[2, 8:] = False   # right padding
    pos = np.where(mask, np.cumsum(mask, 1) - 1, 0)
    lp, ent = jit_logprobs(model, toks, pos, mask, temperature=0.7, chunk=chunk)
    ref_lp, ref_ent = _reference(model, toks, mask, pos, 0.7)
    np.testing.assert_allclose(np.asarray(lp), ref_lp, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ent), ref_ent, atol=1e-5)
    assert np.all(np.asarray(lp)[:, 0] == 0) and np.all(np.asarray(lp)[1, :5] == 0)
    assert np.all(np.asarray(lp)[2, 8:] == 0)


def test_default_chunk_keeps_a_logits_block_under_its_element_budget():
    assert default_chunk_size(8, 512, 767) == 256          # small vocabulary: 256 positions
    assert default_chunk_size(4, 512, 10) == 10            # never more than the positions
    assert default_chunk_size(32, 151_936, 767) == 55      # a learner micro-batch at Qwen's vocab
    assert default_chunk_size(512, 151_936, 767) == 3      # a whole rollout batch: 3 positions
    assert default_chunk_size(4096, 151_936, 767) == 1     # never fewer than one
    for b, v in ((32, 151_936), (512, 151_936), (8, 512)):
        c = default_chunk_size(b, v, 767)
        assert b * c * v <= scoring.MAX_BLOCK_LOGITS or c == 1
    with pytest.raises(ValueError, match="chunk_size must be positive"):
        scoring.logprobs_from_hidden(jnp.zeros((1, 4, 8)), jnp.zeros((8, 16)),
                                     jnp.zeros((1, 4), jnp.int32), jnp.ones((1, 4), bool),
                                     chunk_size=0)


def test_budget_limited_default_chunk_gives_the_same_logprobs(model, monkeypatch):
    """A batch too large for 256-position blocks is scored in smaller ones, same values."""
    rs = np.random.RandomState(4)
    toks = rs.randint(0, 48, (3, 11)).astype(np.int32)
    mask = np.ones_like(toks, bool)
    pos = np.where(mask, np.cumsum(mask, 1) - 1, 0)
    full, full_ent = jit_logprobs(model, toks, pos, mask, temperature=1.0, chunk=None)
    vocab = model.lm_head_kernel().shape[-1]
    monkeypatch.setattr(scoring, "MAX_BLOCK_LOGITS", 3 * 2 * vocab)  # 2 positions per block
    assert default_chunk_size(3, vocab, 10) == 2
    score = lambda t: scoring.token_logprobs(model, t, positions=pos, attention_mask=mask)  # noqa: E731
    assert "length=5" in str(jax.make_jaxpr(score)(toks))  # 10 positions in 5 blocks of 2
    small, small_ent = jax.jit(score)(toks)
    np.testing.assert_allclose(np.asarray(small), np.asarray(full), atol=1e-6)
    np.testing.assert_allclose(np.asarray(small_ent), np.asarray(full_ent), atol=1e-6)


def test_grad_through_split_merge_chunked_equals_unchunked(model):
    graphdef, state = nnx.split(model)
    toks = jnp.asarray(np.random.RandomState(1).randint(0, 48, (2, 10)), jnp.int32)
    weights = jnp.asarray(np.random.RandomState(2).randn(2, 10), jnp.float32)

    def loss(st, chunk):
        lp, ent = token_logprobs_from_state(graphdef, st, toks, chunk_size=chunk)
        return jnp.sum(lp * weights) + 0.1 * jnp.sum(ent)

    loss = jax.jit(loss, static_argnums=1)
    g3 = jax.jit(jax.grad(loss), static_argnums=1)(state, 3)
    gfull = jax.jit(jax.grad(loss), static_argnums=1)(state, None)
    diffs = jax.tree.leaves(jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), g3, gfull))
    assert max(diffs) < 1e-5
    norms = jax.tree.leaves(jax.tree.map(lambda a: float(jnp.abs(a).max()), g3))
    assert min(norms) > 0  # every parameter gets gradient (lm head tied? no: untied here)
    # finite-difference check on one scalar direction
    eps = 1e-3
    d = jax.tree.map(lambda a: jnp.asarray(np.random.RandomState(3).randn(*a.shape), a.dtype), state)
    plus = jax.tree.map(lambda a, b: a + eps * b, state, d)
    minus = jax.tree.map(lambda a, b: a - eps * b, state, d)
    fd = (loss(plus, None) - loss(minus, None)) / (2 * eps)
    an = sum(jnp.sum(a * b) for a, b in zip(jax.tree.leaves(gfull), jax.tree.leaves(d)))
    assert abs(float(fd) - float(an)) < 2e-2 * max(1.0, abs(float(an)))


def test_value_model_from_policy_and_frozen_filter(model):
    value = ValueModel.from_policy(model, rngs=nnx.Rngs(1))
    toks = jnp.asarray(np.random.RandomState(4).randint(0, 48, (2, 7)), jnp.int32)
    np.testing.assert_array_equal(np.asarray(value.hidden_states(toks)),
                                  np.asarray(model.hidden_states(toks)))
    v = value(toks)
    assert v.shape == (2, 7) and v.dtype == jnp.float32
    # copies, not aliases: changing the policy leaves the critic alone
    before = np.asarray(value.model.embed_tokens[...]).copy()
    model_copy = nnx.clone(model)
    model_copy.model.embed_tokens[...] = model_copy.model.embed_tokens[...] + 1.0
    np.testing.assert_array_equal(np.asarray(value.model.embed_tokens[...]), before)

    frozen = nnx.state(value, trainable_filter(True))
    paths = ["/".join(map(str, p)) for p, _ in nnx.to_flat_state(frozen)]
    assert paths and all(("/mlp/" in p) or p.startswith("value_head") for p in paths)
    assert any("gate_proj" in p for p in paths) and any("value_head" in p for p in paths)
    assert not any("self_attn" in p or "norm" in p or "embed" in p for p in paths)
    n_all = len(nnx.to_flat_state(nnx.state(value, trainable_filter(False))))
    assert n_all == len(nnx.to_flat_state(nnx.state(value, nnx.Param)))

    # grads w.r.t. the trainable subset only (docs/algorithms.md §7): attention untouched by an update
    graphdef, train, rest = nnx.split(value, trainable_filter(True), ...)

    def loss(tr):
        return jnp.mean((nnx.merge(graphdef, tr, rest)(toks) - 1.0) ** 2)

    g = jax.grad(loss)(train)
    assert jax.tree.structure(g) == jax.tree.structure(train)
    assert float(jnp.abs(g["value_head"]["bias"][...]).max()) > 0
