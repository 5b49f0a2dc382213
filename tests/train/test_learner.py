"""Learner: exact gradient accumulation, non-finite skip, epochs × minibatches, donation."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from rlvr.learner import make_optimizer, make_update, map_row_chunks
from rlvr.records.batch import TrainingBatch
from rlvr.records.state import create_train_state, split_model


class Toy(nnx.Module):
    def __init__(self, vocab=7, d=5, *, rngs):
        self.emb = nnx.Embed(vocab, d, rngs=rngs)
        self.out = nnx.Linear(d, vocab, rngs=rngs)

    def __call__(self, tokens):
        return self.out(self.emb(tokens))


def nll_loss(model, batch, aux):
    """Token-mean NLL, normalised by the minibatch-wide token count (exact under accumulation)."""
    logits = model(batch.tokens[:, :-1])
    lp = jnp.take_along_axis(jax.nn.log_softmax(logits), batch.tokens[:, 1:, None], -1)[..., 0]
    m = batch.loss_mask[:, 1:] * batch.valid[:, None]
    loss = -jnp.sum(lp * m) / aux["num_tokens"]
    big = 1e9
    return loss, {"nll": loss, "tokens": jnp.sum(m) / aux["num_tokens"],
                  "logp_max": jnp.max(jnp.where(m > 0, lp, -big)),
                  "logp_min": jnp.min(jnp.where(m > 0, lp, big))}


def make_batch(b=8, t=6, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 7, (b, t)).astype(np.int32)
    lengths = rng.integers(1, t, (b,))
    mask = (np.arange(t)[None] >= t - lengths[:, None]).astype(np.float32)  # ragged lengths
    return TrainingBatch(tokens=jnp.asarray(tokens), loss_mask=jnp.asarray(mask),
                         valid=jnp.ones((b,), bool))


def setup(opt=None, **kw):
    graphdef, params, rest = split_model(Toy(rngs=nnx.Rngs(0)))
    opt = opt or optax.sgd(0.5)
    state = create_train_state(params, opt, seed=0)
    update = make_update(graphdef, nll_loss, opt, rest=rest, **kw)
    return graphdef, rest, state, update


def test_accumulation_is_exact_token_mean():
    batch = make_batch()
    _, _, s1, up1 = setup(num_microbatches=1)
    _, _, s4, up4 = setup(num_microbatches=4)
    key = jax.random.PRNGKey(0)
    n1, m1 = jax.jit(up1)(s1, batch, {}, key)
    n4, m4 = jax.jit(up4)(s4, batch, {}, key)
    for a, b in zip(jax.tree.leaves(n1.params), jax.tree.leaves(n4.params)):
        np.testing.assert_allclose(a, b, atol=1e-6)
    np.testing.assert_allclose(m1["loss"], m4["loss"], rtol=1e-6)
    np.testing.assert_allclose(m4["tokens"], 1.0, rtol=1e-6)
    # *_max / *_min metrics are the minibatch max / min (not a sum of micro-batch extremes).
    np.testing.assert_allclose(m4["logp_max"], m1["logp_max"], rtol=1e-6)
    np.testing.assert_allclose(m4["logp_min"], m1["logp_min"], rtol=1e-6)
    assert float(m1["logp_min"]) < float(m1["logp_max"]) < 0.0

    # Independent reference: numpy-free full-batch gradient step with jax.grad of a plain token-mean.
    graphdef, rest, s0, _ = setup()

    def plain(p):
        model = nnx.merge(graphdef, p, rest)
        logits = model(batch.tokens[:, :-1])
        lp = jnp.take_along_axis(jax.nn.log_softmax(logits), batch.tokens[:, 1:, None], -1)[..., 0]
        m = batch.loss_mask[:, 1:]
        return -jnp.sum(lp * m) / jnp.sum(m)

    g = jax.grad(plain)(s0.params)
    ref = jax.tree.map(lambda p, gg: p - 0.5 * gg, s0.params, g)
    for a, b in zip(jax.tree.leaves(ref), jax.tree.leaves(n4.params)):
        np.testing.assert_allclose(a, b, atol=1e-6)

    # A mean of micro-means would differ on ragged lengths: the test can tell them apart.
    def micro_means(p):
        parts = []
        for i in range(4):
            sl = slice(2 * i, 2 * i + 2)
            model = nnx.merge(graphdef, p, rest)
            logits = model(batch.tokens[sl, :-1])
            lp = jnp.take_along_axis(jax.nn.log_softmax(logits), batch.tokens[sl, 1:, None], -1)[..., 0]
            m = batch.loss_mask[sl, 1:]
            parts.append(-jnp.sum(lp * m) / jnp.sum(m))
        return sum(parts) / 4

    g2 = jax.grad(micro_means)(s0.params)
    diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g2)))
    assert diff > 1e-4


def test_non_finite_update_is_skipped_and_counted():
    batch = make_batch()
    opt = make_optimizer(1e-2, name="adamw", max_grad_norm=1.0)

    def bad_loss(model, mb, aux):
        loss, m = nll_loss(model, mb, aux)
        return loss * aux["scale"], m

    graphdef, params, rest = split_model(Toy(rngs=nnx.Rngs(0)))
    state = create_train_state(params, opt, seed=0)
    update = jax.jit(make_update(graphdef, bad_loss, opt, rest=rest, num_minibatches=2, epochs=2))
    new, metrics = update(state, batch, {"scale": jnp.float32(jnp.nan)}, jax.random.PRNGKey(1))
    assert float(metrics["skipped"]) == 4.0
    assert float(metrics["num_updates"]) == 4.0
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(new.params)):
        np.testing.assert_array_equal(a, b)
    # opt state untouched too (Adam count not advanced)
    for a, b in zip(jax.tree.leaves(state.opt_state), jax.tree.leaves(new.opt_state)):
        np.testing.assert_array_equal(a, b)
    good, metrics = update(state, batch, {"scale": jnp.float32(1.0)}, jax.random.PRNGKey(1))
    assert float(metrics["skipped"]) == 0.0
    assert np.isfinite(float(metrics["grad_norm"]))
    assert any(float(jnp.max(jnp.abs(a - b))) > 0 for a, b in
               zip(jax.tree.leaves(state.params), jax.tree.leaves(good.params)))


def test_epochs_minibatches_reduce_loss_with_donation():
    batch = make_batch(seed=3)
    opt = optax.adam(3e-2)
    graphdef, params, rest = split_model(Toy(rngs=nnx.Rngs(1)))
    state = create_train_state(params, opt, seed=0)
    update = make_update(graphdef, nll_loss, opt, rest=rest, epochs=3, num_minibatches=2)
    step = jax.jit(lambda s, b: update(s, b, {}, jax.random.PRNGKey(0)), donate_argnums=0)
    losses = []
    for _ in range(4):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    assert losses[-1] < losses[0]
    assert float(metrics["num_updates"]) == 6


def test_map_row_chunks_runs_chunks_in_turn_and_rejoins_the_rows():
    x = {"a": jnp.arange(24.0).reshape(6, 4), "b": jnp.arange(6)}
    fn = lambda t: {"s": t["a"].sum(-1) * t["b"], "r": t["a"][:, ::-1]}  # noqa: E731
    want = fn(x)
    for n in (1, 2, 3, 6):
        got = map_row_chunks(fn, x, n)
        for k in want:
            np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(want[k]))
    assert "length=3" in str(jax.make_jaxpr(lambda t: map_row_chunks(fn, t, 3))(x))
    with pytest.raises(ValueError, match="not divisible by 4"):
        map_row_chunks(fn, x, 4)


def test_non_finite_update_from_finite_grads_is_skipped_and_counted():
    """Finite loss and gradients, but a learning-rate schedule that turns infinite from the
    second optimiser step: that update (and every later one, the count staying put) is
    discarded and counted, the first one is applied."""
    batch = make_batch()
    opt = optax.sgd(lambda count: jnp.where(count >= 1, jnp.inf, 0.1))
    graphdef, params, rest = split_model(Toy(rngs=nnx.Rngs(0)))
    state = create_train_state(params, opt, seed=0)
    update = jax.jit(make_update(graphdef, nll_loss, opt, rest=rest, num_minibatches=2,
                                 shuffle=False))
    new, metrics = update(state, batch, {}, jax.random.PRNGKey(1))
    assert np.isfinite(float(metrics["grad_norm"])) and np.isfinite(float(metrics["loss"]))
    assert float(metrics["skipped"]) == 1.0 and float(metrics["num_updates"]) == 2.0
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(new.params))
    # exactly the first minibatch's step was applied
    first = jax.tree.map(lambda v: v[:4], batch)
    one = jax.jit(make_update(graphdef, nll_loss, optax.sgd(0.1), rest=rest))
    want, _ = one(create_train_state(params, optax.sgd(0.1), seed=0), first, {}, jax.random.PRNGKey(1))
    for a, b in zip(jax.tree.leaves(want.params), jax.tree.leaves(new.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    again, metrics = update(new, batch, {}, jax.random.PRNGKey(2))
    assert float(metrics["skipped"]) == 2.0
    for a, b in zip(jax.tree.leaves(new.params), jax.tree.leaves(again.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
