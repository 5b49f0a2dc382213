"""The lengths layout of the full-sequence forward equals the dense-mask layout.

`attention_layout="lengths"` moves each row's real tokens to its start and runs causal attention
with per-row lengths (what a fused kernel runs without a [B, 1, T, T] mask); logits and
gradients on real tokens must equal the mask layout's, rows with a gap in their real tokens must
come out NaN instead of silently wrong, and "auto" must pick lengths only for cuDNN.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr.models import ModelConfig, Transformer
from rlvr.models.transformer import contiguous_layout
from tests.models.helpers import tiny_config


def _batch(seed=0, b=4, t=12):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(3, 48, (b, t)).astype(np.int32)  # tiny_config: 48 tokens
    # left padding, right padding, both, none
    spans = [(3, 12), (0, 7), (2, 9), (0, 12)][:b]
    mask = np.zeros((b, t), bool)
    for i, (lo, hi) in enumerate(spans):
        mask[i, lo:hi] = True
    positions = np.where(mask, np.cumsum(mask, axis=1) - 1, 0).astype(np.int32)
    return jnp.asarray(tokens), jnp.asarray(positions), jnp.asarray(mask)


def _models(remat=False):
    cfg = tiny_config()
    out = {}
    for layout in ("mask", "lengths"):
        c = dataclasses.replace(cfg, attention_layout=layout)
        out[layout] = Transformer(c, rngs=nnx.Rngs(0), remat=remat)
    return out


@pytest.mark.parametrize("remat", [False, True])
def test_lengths_layout_equals_mask_layout_on_real_tokens(remat):
    tokens, positions, mask = _batch()
    models = _models(remat)
    logits = {k: np.asarray(jax.jit(lambda m, tk, p, a: m(tk, positions=p, attention_mask=a))(
        m, tokens, positions, mask)) for k, m in models.items()}
    m = np.asarray(mask)
    np.testing.assert_allclose(logits["lengths"][m], logits["mask"][m], rtol=1e-5, atol=1e-5)
    assert np.all(np.isfinite(logits["lengths"]))

    def loss(model):
        lp = jax.nn.log_softmax(model(tokens, positions=positions, attention_mask=mask), -1)
        nxt = jnp.take_along_axis(lp[:, :-1], tokens[:, 1:, None], -1)[..., 0]
        pair = mask[:, :-1] & mask[:, 1:]
        return -jnp.sum(jnp.where(pair, nxt, 0.0))

    grads = {k: jax.tree.leaves(nnx.state(nnx.grad(loss)(mm), nnx.Param)) for k, mm in models.items()}
    for a, b in zip(grads["lengths"], grads["mask"]):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


def test_a_row_with_a_gap_is_nan_and_an_empty_row_is_finite():
    tokens, positions, mask = _batch()
    gap = np.asarray(mask).copy()
    gap[0, 6] = False          # row 0: real tokens 3..5 and 7..11
    gap[1, :] = False          # row 1: no real token
    logits = np.asarray(_models()["lengths"](tokens, positions=positions, attention_mask=jnp.asarray(gap)))
    assert np.all(np.isnan(logits[0]))
    assert np.all(np.isfinite(logits[1:]))
    _, _, lengths, contiguous = contiguous_layout(jnp.asarray(gap))
    np.testing.assert_array_equal(np.asarray(contiguous), [False, True, True, True])
    np.testing.assert_array_equal(np.asarray(lengths), [8, 1, 7, 12])


def test_contiguous_layout_moves_real_tokens_to_the_start_and_back():
    tokens, _, mask = _batch()
    gather, scatter, lengths, _ = contiguous_layout(mask)
    moved = np.asarray(jnp.take_along_axis(tokens, gather, axis=1))
    for row, (t, m, n) in enumerate(zip(np.asarray(tokens), np.asarray(mask), np.asarray(lengths))):
        np.testing.assert_array_equal(moved[row, :n], t[m])
    np.testing.assert_array_equal(np.asarray(jnp.take_along_axis(jnp.asarray(moved), scatter, axis=1)),
                                  np.asarray(tokens))


def test_auto_layout_is_lengths_only_for_cudnn_and_bad_values_are_named():
    cfg = tiny_config()
    assert not Transformer(cfg, rngs=nnx.Rngs(0)).model.lengths_layout
    cudnn = dataclasses.replace(cfg, attention_impl="cudnn")
    assert Transformer(cudnn, rngs=nnx.Rngs(0)).model.lengths_layout
    masked = dataclasses.replace(cudnn, attention_layout="mask")
    assert not Transformer(masked, rngs=nnx.Rngs(0)).model.lengths_layout
    with pytest.raises(ValueError, match="ModelConfig.attention_layout"):
        ModelConfig(**{**dataclasses.asdict(cfg), "attention_layout": "dense"})
