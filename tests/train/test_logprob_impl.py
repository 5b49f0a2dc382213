"""`train.logprob_impl`: the vocab-tiled LM head + log-softmax + entropy gives the chunked path's
learner step (loss, metrics, gradients) and the same 2-step training run; the SFT warm start
runs the configured head too (its loss and gradient, and a 2-step warm start's logged losses)."""

import jax
import numpy as np
import pytest

from rlvr.train.metrics import read_metrics
from tests.algorithms.helpers import assert_same_step
from tests.train.test_length_buckets import step_delta
from tests.train.tiny import run_tiny, tiny_config


@pytest.mark.parametrize("over", [
    dict(num_microbatches=2, entropy_coef=0.01, temperature=0.8),
    dict(num_minibatches=2, completion_columns=24, recompute_old_logprobs=True),
])
def test_vocab_tiled_learner_step_equals_the_chunked_one(over):
    assert_same_step(step_delta(logprob_impl="vocab_tiled", **over),
                     step_delta(logprob_impl="chunked", **over), rtol=2e-5, atol=2e-6)


def test_two_step_run_with_vocab_tiled_gives_the_chunked_losses(tmp_path):
    losses = {}
    for impl in ("chunked", "vocab_tiled"):
        c = tiny_config(train__num_steps=2, train__sft_steps=0, eval__every=0, eval__num_tasks=2,
                        checkpoint__every=-1, train__logprob_impl=impl)
        run, _ = run_tiny(c, tmp_path / impl)
        assert run.algorithm.settings.logprob_impl == impl
        rows = [r for r in read_metrics(tmp_path / impl) if "policy/loss" in r]
        losses[impl] = [(r["step"], r["policy/loss"], r["policy/entropy"]) for r in rows]
    assert len(losses["chunked"]) == 2
    np.testing.assert_allclose(np.asarray(losses["vocab_tiled"]), np.asarray(losses["chunked"]),
                               rtol=1e-4, atol=1e-6)


def test_router_loss_path_scores_alike_with_vocab_tiled():
    """A mixture-of-experts policy's loss (`with_router_loss`) takes the same implementation."""
    from flax import nnx

    from rlvr.models import Transformer
    from rlvr.models.scoring import token_logprobs
    from tests.models.test_moe import _moe_config

    model = Transformer(_moe_config(), rngs=nnx.Rngs(0))
    toks = np.random.RandomState(0).randint(0, 48, (2, 9)).astype(np.int32)
    out = {impl: token_logprobs(model, toks, with_router_loss=True, temperature=0.9, start=3,
                                impl=impl) for impl in ("chunked", "vocab_tiled")}
    assert float(np.abs(np.asarray(out["chunked"][0])).max()) > 0
    for a, b in zip(out["vocab_tiled"], out["chunked"], strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def _counting(monkeypatch):
    """Counts the calls (traces) of the vocab-tiled head; returns the counter list."""
    from rlvr.models import fused_head

    calls, real = [], fused_head.head_logprobs_entropy

    def spy(*a, **kw):
        calls.append(kw.get("impl"))
        return real(*a, **kw)

    monkeypatch.setattr(fused_head, "head_logprobs_entropy", spy)
    return calls


def test_sft_loss_and_gradient_with_vocab_tiled_equal_the_chunked_ones(monkeypatch):
    """`sft_loss` runs the configured head: vocab_tiled (several vocabulary tiles, the last
    partial, several row blocks) gives the chunked loss and parameter gradients."""
    from flax import nnx

    from rlvr.learner import batch_denominators
    from rlvr.models import Transformer, fused_head
    from rlvr.train.sft import sft_batch, sft_loss
    from tests.models.helpers import tiny_config as model_config

    monkeypatch.setattr(fused_head, "DEFAULT_TILE", 64)      # V = 203: 4 tiles, the last partial
    monkeypatch.setattr(fused_head, "DEFAULT_ROW_BLOCK", 7)
    calls = _counting(monkeypatch)
    graphdef, params = nnx.split(Transformer(model_config(vocab_size=203), rngs=nnx.Rngs(0)))
    rs = np.random.RandomState(1)
    streams = [(list(rs.randint(1, 203, n)), [0.0] * 3 + [1.0] * (n - 3)) for n in (9, 12, 6)]
    mb = sft_batch(streams, 12, 0)
    aux = batch_denominators(mb)

    def loss_and_grad(impl):
        def f(p):
            return sft_loss(nnx.merge(graphdef, p), mb, aux, impl=impl)
        return jax.jit(jax.value_and_grad(f, has_aux=True))(params)

    (got, got_m), got_g = loss_and_grad("vocab_tiled")
    assert calls == ["vocab_tiled"]
    (want, want_m), want_g = loss_and_grad("chunked")
    assert calls == ["vocab_tiled"]
    np.testing.assert_allclose(float(got), float(want), atol=1e-5)
    np.testing.assert_allclose(float(got_m["nll"]), float(want_m["nll"]), atol=1e-5)
    assert float(want) > 1.0
    leaves = jax.tree.leaves(want_g)
    assert max(float(np.abs(np.asarray(g)).max()) for g in leaves) > 1e-3
    for a, b in zip(jax.tree.leaves(got_g), leaves, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, rtol=1e-5)


def test_two_step_sft_warm_start_with_vocab_tiled_logs_the_chunked_losses(tmp_path, monkeypatch):
    """The loop's warm start runs `train.logprob_impl` (the vocab-tiled head is traced) and logs
    the chunked path's SFT losses at both steps (the second after one update)."""
    from rlvr.train import loop
    from rlvr.train.config import validate_config
    from rlvr.train.setup import build_run

    calls = _counting(monkeypatch)
    logged, real = {}, loop.warm_start

    def logging_warm_start(*a, **kw):
        rows = logged.setdefault(kw["logprob_impl"], [])
        return real(*a, **kw, log_fn=lambda i, m: rows.append((i, float(m["sft/nll"]))))

    monkeypatch.setattr(loop, "warm_start", logging_warm_start)
    nll = {}
    for impl in ("chunked", "vocab_tiled"):
        c = tiny_config(train__sft_steps=2, eval__num_tasks=0, checkpoint__every=-1,
                        train__logprob_impl=impl)
        validate_config(c)
        r = build_run(c, str(tmp_path / impl))
        try:
            calls.clear()
            _, m = loop._sft(r, None)
        finally:
            r.close()
        nll[impl] = m["sft/nll"]
        assert set(calls) == ({"vocab_tiled"} if impl == "vocab_tiled" else set()), impl
    assert [i for i, _ in logged["chunked"]] == [0, 1]
    assert logged["chunked"][0][1] != logged["chunked"][1][1]
    np.testing.assert_allclose(np.asarray(logged["vocab_tiled"]), np.asarray(logged["chunked"]),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(nll["vocab_tiled"], nll["chunked"], rtol=1e-5, atol=1e-6)
