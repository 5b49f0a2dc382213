"""`logprob_impl="vocab_tiled"` on a mesh whose `tensor` axis shards the LM head and the embedding
along the vocabulary (8 simulated CPU devices). Given the mesh (explicitly, as the learner passes
it, or by an enclosing `jax.set_mesh`) the head runs vocabulary-parallel: each tensor shard scans
its own V / tensor columns and the shards combine their statistics with pmax / psum; the
log-probs, entropies and every parameter gradient equal the chunked head's on one device, and the
compiled step never gathers the head along the vocabulary. Without a mesh the one-program path
runs (XLA gathers the head; the values are the same)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from rlvr.models import Transformer, fused_head
from rlvr.models.scoring import token_logprobs
from rlvr.parallel import batch_sharding, make_mesh, shard_model
from tests.models.helpers import tiny_config

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")

V = 200  # a tensor shard's 100 (tensor = 2) or 50 (tensor = 4) columns: tiles of 64, the last partial


def _data():
    rs = np.random.RandomState(0)
    toks = rs.randint(0, V, (8, 11)).astype(np.int32)
    mask = np.ones_like(toks, bool)
    mask[::3, :4] = False
    pos = np.where(mask, np.cumsum(mask, 1) - 1, 0).astype(np.int32)
    w = jnp.asarray(rs.randn(8, 11), jnp.float32)
    return toks, pos, mask, w


def _loss_fn(model, impl, put, toks, pos, mask, w, mesh=None):
    graphdef, state = nnx.split(model)

    def loss(st):
        lp, ent = token_logprobs(nnx.merge(graphdef, st), put(toks), positions=put(pos),
                                 attention_mask=put(mask), temperature=0.9, start=2, impl=impl,
                                 mesh=mesh)
        return jnp.sum(lp * w) - 0.1 * jnp.sum(ent * w), (lp, ent)

    return jax.jit(jax.value_and_grad(loss, has_aux=True)), state


def _run(*args, **kw):
    f, state = _loss_fn(*args, **kw)
    (_, (lp, ent)), g = f(state)
    return lp, ent, g


def _small_tiles(monkeypatch):
    monkeypatch.setattr(fused_head, "DEFAULT_TILE", 64)
    monkeypatch.setattr(fused_head, "DEFAULT_ROW_BLOCK", 7)   # several row blocks, the last padded


def _record_paths(monkeypatch):
    """Records which head ran: "one" (one program over the vocabulary) or "vocab" (parallel)."""
    calls = []
    one, vocab = fused_head._head, fused_head._head_vp
    monkeypatch.setattr(fused_head, "_head", lambda *a: calls.append("one") or one(*a))
    monkeypatch.setattr(fused_head, "_head_vp", lambda *a: calls.append("vocab") or vocab(*a))
    return calls


@pytest.mark.parametrize("tied,axes,how", [
    (False, dict(data=2, fsdp=2, tensor=2), "explicit"),   # as the learner: mesh=, no context
    (True, dict(data=2, tensor=4), "context"),             # inside jax.set_mesh(mesh)
    (False, dict(data=2, fsdp=2, tensor=2), "none"),       # no mesh: one program, head gathered
])
def test_vocab_tiled_on_a_vocabulary_sharded_head_matches_one_device(tied, axes, how, monkeypatch):
    _small_tiles(monkeypatch)
    calls = _record_paths(monkeypatch)
    mesh = make_mesh(**axes)
    cfg = tiny_config(vocab_size=V, tie_word_embeddings=tied)
    sharded = shard_model(Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
    head = sharded.lm_head_kernel()
    assert head.sharding.spec[1] == "tensor", head.sharding.spec  # split along the vocabulary
    toks, pos, mask, w = _data()
    shard_cols = V // mesh.shape["tensor"]
    # every vocabulary shard owns some scored target
    assert set(np.unique(toks[:, 2:] // shard_cols)) == set(range(mesh.shape["tensor"]))

    ref = _run(Transformer(cfg, rngs=nnx.Rngs(0)), "chunked", jnp.asarray, toks, pos, mask, w)
    assert calls == []
    put = lambda x: jax.device_put(x, batch_sharding(mesh))  # noqa: E731
    if how == "context":
        with jax.set_mesh(mesh):
            got = _run(sharded, "vocab_tiled", put, toks, pos, mask, w)
    else:
        got = _run(sharded, "vocab_tiled", put, toks, pos, mask, w,
                   mesh=mesh if how == "explicit" else None)
    assert calls == (["one"] if how == "none" else ["vocab"])
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(ref[0]), atol=1e-5)
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(ref[1]), atol=1e-5)
    assert float(np.abs(np.asarray(ref[0])).max()) > 1.0
    grads = zip(nnx.to_flat_state(got[2]), nnx.to_flat_state(ref[2]), strict=True)
    for (path, a), (_, b) in grads:
        np.testing.assert_allclose(np.asarray(a[...]), np.asarray(b[...]), atol=2e-5, rtol=1e-5,
                                   err_msg=str(path))
    name = ("model", "embed_tokens") if tied else ("lm_head", "kernel")
    g_head = dict(nnx.to_flat_state(got[2]))[name][...]
    assert float(jnp.abs(g_head).max()) > 1e-3
    if how != "none":  # the head's gradient comes out split like the head
        param = dict(nnx.to_flat_state(nnx.state(sharded)))[name][...]
        assert g_head.sharding.spec == param.sharding.spec, (g_head.sharding, param.sharding)


@pytest.mark.parametrize("n_rows", [24, 13])  # rows split over (data, fsdp) / replicated
def test_vocab_parallel_head_alone_matches_one_program(n_rows, monkeypatch):
    """The head function itself with a soft cap and a temperature: values and (h, W) gradients of
    the vocabulary-parallel path equal the one-program path's, dW split fsdp × tensor like W;
    rows that do not divide over the data axes are computed on every device."""
    calls = _record_paths(monkeypatch)
    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    layout = fused_head.vocab_parallel(mesh, n_rows, V, hidden=16)
    split = n_rows % 4 == 0  # rows over (data, fsdp), W's rows and dW over fsdp
    assert (layout.rows, layout.hidden_axis) == ((("data", "fsdp"), "fsdp") if split else ((), None))
    rs = np.random.RandomState(1)
    h = jnp.asarray(rs.randn(n_rows, 16), jnp.float32)
    w = jnp.asarray(rs.randn(16, V) * 0.5, jnp.float32)
    tg = jnp.asarray(rs.randint(0, V, n_rows), jnp.int32)
    g = jnp.asarray(rs.randn(2, n_rows), jnp.float32)

    def loss(h, w, mesh):
        lp, ent = fused_head.head_logprobs_entropy(h, w, tg, temperature=0.9, logit_softcap=5.0,
                                                   tile=64, row_block=5, mesh=mesh)
        return jnp.sum(lp * g[0]) + jnp.sum(ent * g[1]), (lp, ent)

    f = jax.value_and_grad(loss, (0, 1), has_aux=True)
    ref = jax.jit(f, static_argnums=2)(h, w, None)
    rows = P(("data", "fsdp"), None) if n_rows % 4 == 0 else P()
    got = jax.jit(f, static_argnums=2)(jax.device_put(h, NamedSharding(mesh, rows)),
                                       jax.device_put(w, NamedSharding(mesh, P("fsdp", "tensor"))),
                                       mesh)
    assert calls == ["one", "vocab"]
    if split:
        assert got[1][1].sharding.spec == P("fsdp", "tensor"), got[1][1].sharding
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(ref), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, rtol=1e-5)


def _gathered_shapes(hlo: str):
    """The result shapes ([dims] tuples) of every all-gather in a compiled module's text."""
    out = []
    for line in hlo.splitlines():
        m = re.search(r"=\s*(.*?)\s+all-gather(?:-start)?\(", line)
        if m:
            out += [tuple(int(d) for d in dims.split(",") if d)
                    for dims in re.findall(r"\[([\d,]*)\]", m.group(1))]
    return out


def test_vocab_parallel_step_never_gathers_the_head_along_the_vocabulary(monkeypatch):
    """The compiled value-and-grad of a 2×2×2-mesh model (untied head [D, V] split fsdp × tensor,
    no active mesh): with the mesh given, no all-gather yields anything V wide (the head is
    gathered over fsdp only, to [D, V / tensor]); without it, the one-program path gathers the
    head along the vocabulary (what this check tells apart)."""
    _small_tiles(monkeypatch)
    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    cfg = tiny_config(vocab_size=V)
    sharded = shard_model(Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
    d = cfg.hidden_size
    toks, pos, mask, w = _data()
    put = lambda x: jax.device_put(x, batch_sharding(mesh))  # noqa: E731
    hlo = {}
    for key, m in (("vocab", mesh), ("one", None)):
        f, state = _loss_fn(sharded, "vocab_tiled", put, toks, pos, mask, w, mesh=m)
        hlo[key] = _gathered_shapes(f.lower(state).compile().as_text())
    assert [s for s in hlo["one"] if V in s], hlo["one"]
    assert not [s for s in hlo["vocab"] if V in s], hlo["vocab"]
    assert (d, V // 2) in hlo["vocab"], hlo["vocab"]


def test_learner_step_on_a_tensor_mesh_runs_the_vocabulary_parallel_head(monkeypatch):
    """The learner step as a run compiles it (`jit_step` with explicit state and batch shardings,
    no active mesh; the algorithm holds the run's mesh as `build_algorithm` gives it, micro-batches
    and the π_old pass included): the vocabulary-parallel head runs, and the parameter update and
    metrics equal the chunked step's on one device."""
    import dataclasses

    import optax

    from rlvr.algorithms import AlgorithmSettings, get_algorithm
    from rlvr.learner import jit_step
    from rlvr.parallel import param_shardings
    from rlvr.records.state import create_train_state, split_model
    from tests.algorithms.helpers import assert_same_step
    from tests.train.test_length_buckets import long_tailed_batch

    _small_tiles(monkeypatch)
    calls = _record_paths(monkeypatch)
    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    batch = long_tailed_batch()
    toks = np.random.RandomState(2).randint(0, V, batch.tokens.shape)
    batch = dataclasses.replace(batch, tokens=np.where(batch.attention_mask, toks, 0).astype(np.int32))
    settings = AlgorithmSettings(name="grpo", group_size=2, num_microbatches=2, entropy_coef=0.01,
                                 num_minibatches=2, recompute_old_logprobs=True)

    def step(impl, on_mesh):
        model = Transformer(tiny_config(vocab_size=V, max_position_embeddings=64),
                            rngs=nnx.Rngs(0))
        graphdef, params, rest = split_model(model)
        opt = optax.sgd(1.0)
        algo = get_algorithm("grpo")(dataclasses.replace(settings, logprob_impl=impl),
                                     policy_graphdef=graphdef, policy_rest=rest, optimizer=opt,
                                     mesh=mesh if on_mesh else None)
        state = create_train_state(params, opt, seed=0)
        if not on_mesh:
            new, metrics = jax.jit(algo.train_step)(state, batch)
        else:
            replicated = NamedSharding(mesh, P())
            sharding = dataclasses.replace(jax.tree.map(lambda _: replicated, state),
                                           params=param_shardings(params, mesh))
            new, metrics = jit_step(algo.train_step, state_sharding=sharding,
                                    batch_sharding=batch_sharding(mesh, 1), donate=False)(
                jax.device_put(state, sharding), batch)
        return jax.tree.map(lambda a, b: np.asarray(a) - np.asarray(b), new.params, params), metrics

    want = step("chunked", False)
    assert calls == []
    got = step("vocab_tiled", True)
    assert calls and set(calls) == {"vocab"}, calls
    assert_same_step(got, want, rtol=2e-5, atol=2e-6)



def test_a_run_gives_its_mesh_to_the_learner_and_the_sft_loss(monkeypatch):
    """`build_algorithm` hands the run's mesh to the algorithm (the learner's scoring reads it),
    and the SFT warm start's loss on that mesh runs the vocabulary-parallel head with the chunked
    loss and gradient of one device."""
    from rlvr.records.batch import TrainingBatch
    from rlvr.train.setup import build_algorithm
    from rlvr.train.sft import sft_loss
    from tests.train.tiny import tiny_config as tiny_run_config

    _small_tiles(monkeypatch)
    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    cfg = tiny_config(vocab_size=V)
    algo = build_algorithm(tiny_run_config(train__logprob_impl="vocab_tiled"),
                           Transformer(cfg, rngs=nnx.Rngs(0)), mesh)[0]
    assert algo.mesh is mesh

    calls = _record_paths(monkeypatch)
    toks, pos, mask, _ = _data()
    mb = TrainingBatch(tokens=jnp.asarray(toks), attention_mask=jnp.asarray(mask),
                       positions=jnp.asarray(pos), loss_mask=jnp.asarray(mask, jnp.float32),
                       valid=jnp.ones((toks.shape[0],), bool))
    aux = {"num_tokens": jnp.float32(mask.sum())}

    def value_and_grad(model, impl, m):
        graphdef, state = nnx.split(model)
        f = lambda st: sft_loss(nnx.merge(graphdef, st), mb, aux, impl=impl, mesh=m)[0]  # noqa: E731
        return jax.jit(jax.value_and_grad(f))(state)

    want = value_and_grad(Transformer(cfg, rngs=nnx.Rngs(0)), "chunked", None)
    got = value_and_grad(shard_model(Transformer(cfg, rngs=nnx.Rngs(0)), mesh), "vocab_tiled", mesh)
    assert calls == ["vocab"]
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, rtol=1e-5)
