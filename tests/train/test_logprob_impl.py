"""`train.logprob_impl`: the vocab-tiled LM head + log-softmax + entropy gives the chunked path's
learner step (loss, metrics, gradients) and the same 2-step training run."""

import jax
import numpy as np
import optax
import pytest

from rlvr.train.metrics import read_metrics
from tests.algorithms.helpers import assert_same_step, build
from tests.train.test_length_buckets import long_tailed_batch
from tests.train.tiny import run_tiny, tiny_config


def _step(impl, **over):
    algo, state = build("grpo", optimizer=optax.sgd(1.0), logprob_impl=impl, **over)
    new, metrics = jax.jit(algo.train_step)(state, long_tailed_batch())
    delta = jax.tree.map(lambda a, b: np.asarray(a) - np.asarray(b), new.params, state.params)
    return delta, metrics


@pytest.mark.parametrize("over", [
    dict(num_microbatches=2, entropy_coef=0.01, temperature=0.8),
    dict(num_minibatches=2, completion_columns=24, recompute_old_logprobs=True),
])
def test_vocab_tiled_learner_step_equals_the_chunked_one(over):
    assert_same_step(_step("vocab_tiled", **over), _step("chunked", **over), rtol=2e-5, atol=2e-6)


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
