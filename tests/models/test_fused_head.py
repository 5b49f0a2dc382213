"""The vocab-tiled LM head + log-softmax + entropy (`rlvr.models.fused_head`, `impl` of
`rlvr.models.scoring.logprobs_from_hidden`) against today's chunked path: values, gradients in the
hidden states and the LM head (entropy's included), masks and `start`, a vocabulary that is not a
multiple of the tile, bf16 inputs, soft cap and temperature; the Pallas kernel (interpreted)
(forward and backward, both layouts) against the XLA path; and no [rows, V] logits in the differentiated program."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr.models import fused_head, scoring

B, T, D, V = 3, 13, 24, 203  # V = 3 tiles of 64 + 11 columns


def _inputs(seed=0, dtype=jnp.float32):
    rs = np.random.RandomState(seed)
    hidden = jnp.asarray(rs.randn(B, T, D), dtype)
    head = jnp.asarray(0.4 * rs.randn(D, V), dtype)
    tokens = jnp.asarray(rs.randint(0, V, (B, T)), jnp.int32)
    mask = np.ones((B, T), bool)
    mask[1, :4] = False   # left padding
    mask[2, 9:] = False   # right padding
    g = jnp.asarray(rs.randn(2, B, T), jnp.float32)  # cotangents of (logprobs, entropy)
    return hidden, head, tokens, jnp.asarray(mask), g


def _score(impl, hidden, head, tokens, mask, **kw):
    return scoring.logprobs_from_hidden(hidden, head, tokens, mask, impl=impl, **kw)


def _run(impl, hidden, head, tokens, mask, g, **kw):
    """((logprobs, entropy), (d hidden, d head)) of Σ g0·logprobs + Σ g1·entropy."""
    def f(h, w):
        lp, ent = _score(impl, h, w, tokens, mask, **kw)
        return jnp.sum(g[0] * lp) + jnp.sum(g[1] * ent), (lp, ent)
    (_, out), grads = jax.jit(jax.value_and_grad(f, argnums=(0, 1), has_aux=True))(hidden, head)
    return out, grads


@pytest.mark.parametrize("kw", [
    dict(),
    dict(temperature=0.7, start=5),
    dict(logit_softcap=2.5, temperature=1.3),
])
def test_vocab_tiled_matches_chunked_values_and_gradients(kw, monkeypatch):
    monkeypatch.setattr(fused_head, "DEFAULT_TILE", 64)       # V = 203: 4 tiles, the last partial
    monkeypatch.setattr(fused_head, "DEFAULT_ROW_BLOCK", 7)   # several row blocks, the last padded
    hidden, head, tokens, mask, g = _inputs()
    (lp, ent), (dh, dw) = _run("vocab_tiled", hidden, head, tokens, mask, g, **kw)
    (rlp, rent), (rdh, rdw) = _run("chunked", hidden, head, tokens, mask, g, chunk_size=4, **kw)
    np.testing.assert_allclose(np.asarray(lp), np.asarray(rlp), atol=1e-5)
    np.testing.assert_allclose(np.asarray(ent), np.asarray(rent), atol=1e-5)
    assert np.all(np.asarray(lp)[~np.asarray(mask)] == 0) and np.all(np.asarray(lp)[:, 0] == 0)
    assert float(jnp.max(jnp.abs(rdw))) > 0.1
    np.testing.assert_allclose(np.asarray(dh), np.asarray(rdh), atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(dw), np.asarray(rdw), atol=2e-5, rtol=1e-5)


def test_entropy_gradient_matches_autodiff_of_the_definition():
    """The custom backward's ∂H/∂z = −p (z − E_p[z]) against jax.grad of −Σ p log p."""
    rs = np.random.RandomState(3)
    h = jnp.asarray(rs.randn(9, D), jnp.float32)
    w = jnp.asarray(0.5 * rs.randn(D, V), jnp.float32)
    tg = jnp.asarray(rs.randint(0, V, 9))
    gw = jnp.asarray(rs.randn(9), jnp.float32)

    def direct(h, w):
        logp = jax.nn.log_softmax(h @ w, axis=-1)
        return jnp.sum(gw * -jnp.sum(jnp.exp(logp) * logp, axis=-1))

    def tiled(h, w):
        return jnp.sum(gw * fused_head.head_logprobs_entropy(h, w, tg, tile=50, row_block=4)[1])

    np.testing.assert_allclose(float(tiled(h, w)), float(direct(h, w)), rtol=1e-5)
    for a, b in zip(jax.grad(tiled, (0, 1))(h, w), jax.grad(direct, (0, 1))(h, w)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("tile,row_block", [(512, 1024), (203, 39), (1, 5)])
def test_tile_and_row_block_sizes_do_not_change_the_result(tile, row_block):
    """One tile wider than V, a tile equal to V, single-column tiles (V tiles)."""
    hidden, head, tokens, mask, g = _inputs(seed=1)
    h, tg = hidden.reshape(B * T, D), tokens.reshape(B * T)
    ref = fused_head.head_logprobs_entropy(h, head, tg, tile=64, row_block=8)
    got = jax.jit(lambda h, w: fused_head.head_logprobs_entropy(
        h, w, tg, tile=tile, row_block=row_block))(h, head)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_bf16_inputs_match_the_chunked_path():
    hidden, head, tokens, mask, g = _inputs(seed=2, dtype=jnp.bfloat16)
    kw = dict(dtype=jnp.bfloat16)
    (lp, ent), (dh, dw) = _run("vocab_tiled", hidden, head, tokens, mask, g, **kw)
    (rlp, rent), (rdh, rdw) = _run("chunked", hidden, head, tokens, mask, g, **kw)
    assert dh.dtype == jnp.bfloat16 and dw.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(lp), np.asarray(rlp), atol=1e-4)
    np.testing.assert_allclose(np.asarray(ent), np.asarray(rent), atol=1e-4)
    for a, b in ((dh, rdh), (dw, rdw)):  # bf16 gradients: a bf16 rounding apart
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        np.testing.assert_allclose(a, b, atol=2e-2 * np.abs(b).max(), rtol=2e-2)


@pytest.mark.parametrize("layout", ["grid", "loop"])
@pytest.mark.parametrize("cap", [None, 3.0])
def test_pallas_backward_interpreted_matches_the_xla_backward(layout, cap):
    rs = np.random.RandomState(8)
    n = 37
    h = jnp.asarray(rs.randn(n, D), jnp.float32)
    w = jnp.asarray(0.5 * rs.randn(D, V), jnp.float32)
    tg = jnp.asarray(rs.randint(0, V, n), jnp.int32)
    g_lp, g_ent = (jnp.asarray(x, jnp.float32) for x in rs.randn(2, n))
    spec = fused_head.HeadSpec(temperature=0.8, logit_softcap=cap, tile=64, row_block=16)
    _, _, lse, ez = fused_head._forward(h, w, tg, spec)
    ref = fused_head._rows_backward(h, w, tg, lse, ez, g_lp, g_ent, jnp.zeros(w.shape), spec)
    got = fused_head.pallas_backward(
        h, w, tg, lse, ez, g_lp, g_ent,
        fused_head.HeadSpec(temperature=0.8, logit_softcap=cap, impl="pallas", interpret=True),
        layout=layout)
    assert float(jnp.max(jnp.abs(ref[1]))) > 1.0
    for a, b in zip(got, ref):  # dh, dW
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("layout", ["grid", "loop"])
@pytest.mark.parametrize("cap", [None, 3.0])
def test_pallas_kernel_interpreted_matches_the_xla_path(layout, cap):
    rs = np.random.RandomState(5)
    n = 37  # not a multiple of the kernel's row block
    h = jnp.asarray(rs.randn(n, D), jnp.float32)
    w = jnp.asarray(0.5 * rs.randn(D, V), jnp.float32)
    tg = jnp.asarray(rs.randint(0, V, n), jnp.int32)
    spec = fused_head.HeadSpec(temperature=0.8, logit_softcap=cap, impl="pallas", interpret=True)
    got = fused_head.pallas_forward(h, w, tg, spec, layout=layout)
    ref = fused_head._forward(h, w, tg, fused_head.HeadSpec(temperature=0.8, logit_softcap=cap,
                                                             tile=64))
    for a, b in zip(got, ref):  # logp, entropy, log Z, E_p[z]
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_pallas_impl_through_scoring_matches_chunked_with_gradients():
    hidden, head, tokens, mask, g = _inputs(seed=6)
    (lp, ent), (dh, dw) = _run("pallas", hidden, head, tokens, mask, g, interpret=True,
                               temperature=0.9, start=3)
    (rlp, rent), (rdh, rdw) = _run("chunked", hidden, head, tokens, mask, g, temperature=0.9,
                                   start=3)
    for a, b in ((lp, rlp), (ent, rent), (dh, rdh), (dw, rdw)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, rtol=1e-5)


def _largest_intermediate(jaxpr) -> int:
    """Elements of the largest value any equation (nested jaxprs included) produces."""
    best = 0
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            best = max(best, int(np.prod(getattr(v.aval, "shape", ()))))
        for p in eqn.params.values():
            for sub in p if isinstance(p, (tuple, list)) else (p,):
                if hasattr(sub, "eqns"):  # a Jaxpr
                    best = max(best, _largest_intermediate(sub))
                elif hasattr(getattr(sub, "jaxpr", None), "eqns"):  # a ClosedJaxpr
                    best = max(best, _largest_intermediate(sub.jaxpr))
    return best


@pytest.mark.parametrize("impl", ["vocab_tiled", "pallas"])
def test_no_rows_by_vocab_logits_in_the_forward_and_backward(impl, monkeypatch):
    """The differentiated program's largest value is below [rows, V] (the XLA path holds
    [row block, tile] logits, the Pallas kernels [128, 512] blocks, both dW [D, V]), where the
    chunked path holds [rows, chunk, V] blocks."""
    monkeypatch.setattr(fused_head, "DEFAULT_TILE", 64)
    monkeypatch.setattr(fused_head, "DEFAULT_ROW_BLOCK", 16)
    n, v = 160, 1000
    rs = np.random.RandomState(7)
    h = jnp.asarray(rs.randn(1, n + 1, D), jnp.float32)
    w = jnp.asarray(rs.randn(D, v), jnp.float32)
    toks = jnp.asarray(rs.randint(0, v, (1, n + 1)), jnp.int32)
    mask = jnp.ones((1, n + 1), bool)

    def loss(impl):
        return lambda h, w: sum(jnp.sum(x) for x in scoring.logprobs_from_hidden(
            h, w, toks, mask, impl=impl, interpret=True))

    tiled = _largest_intermediate(jax.make_jaxpr(jax.grad(loss(impl), (0, 1)))(h, w).jaxpr)
    chunked = _largest_intermediate(jax.make_jaxpr(jax.grad(loss("chunked"), (0, 1)))(h, w).jaxpr)
    assert chunked >= n * v
    assert tiled < n * v // 2


def test_impls_are_checked_where_they_enter():
    hidden, head, tokens, mask, _ = _inputs()
    with pytest.raises(ValueError, match=r"logprob_impl must be one of \('chunked', 'vocab_tiled', 'pallas'\)"):
        _score("fused", hidden, head, tokens, mask)
    if jax.default_backend() == "cpu":
        with pytest.raises(ValueError, match="'pallas' needs a GPU or TPU backend.*'vocab_tiled'"):
            _score("pallas", hidden, head, tokens, mask)
    with pytest.raises(ValueError, match="static .*temperature"):
        jax.jit(lambda t: _score("vocab_tiled", hidden, head, tokens, mask, temperature=t))(1.0)
    with pytest.raises(ValueError, match="logit_softcap must be > 0"):
        _score("vocab_tiled", hidden, head, tokens, mask, logit_softcap=-1.0)


def test_logprob_impl_is_validated_in_settings_and_config():
    from configs import base
    from rlvr.algorithms import AlgorithmSettings
    from rlvr.train.config import ConfigError, validate_config

    with pytest.raises(ValueError, match="logprob_impl must be one of"):
        AlgorithmSettings(logprob_impl="fused")
    assert AlgorithmSettings(logprob_impl="vocab_tiled").logprob_impl == "vocab_tiled"
    c = base.get_config()
    c.train.logprob_impl = "fused"
    with pytest.raises(ConfigError, match=r"train.logprob_impl must be one of \('chunked', "
                                          r"'vocab_tiled', 'pallas'\)"):
        validate_config(c)
    c.train.logprob_impl = "pallas"
    if jax.default_backend() == "cpu":
        with pytest.raises(ConfigError, match="train.logprob_impl 'pallas' needs a GPU or TPU "
                                              "backend.*'chunked', 'vocab_tiled'"):
            validate_config(c)
    c.train.logprob_impl = "vocab_tiled"
    validate_config(c)
