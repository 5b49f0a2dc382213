"""Generation sharded over 8 simulated devices: the sampler's batch (prompts, keys, per-row state,
KV cache) split over the mesh's batch axes gives the tokens and behaviour log-probs of the
one-device run, greedy and sampled with the same keys, for single-turn groups and multi-turn
episodes; the outputs really are spread over the devices."""

import jax
import numpy as np
import pytest
from flax import nnx

from rlvr.models import Transformer
from rlvr.parallel import generation_sharding, make_mesh, shard_model
from rlvr.rollout.sampler import SamplingParams, pad_prompts, sample
from tests.models.helpers import tiny_config
from tests.rollout.test_agent_loop import _assert_same_episodes, _echo_run, echo_model  # noqa: F401

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")

PROMPTS = [[1, 4, 5], [1, 7], [1, 8, 9, 10]]  # 3 prompts: padded to the mesh's batch shards


def _model():
    return Transformer(tiny_config(), rngs=nnx.Rngs(0))


def _assert_same(ref, got):
    for name in ("tokens", "attention_mask", "positions", "loss_mask", "lengths", "truncated"):
        np.testing.assert_array_equal(np.asarray(getattr(got, name)), np.asarray(getattr(ref, name)),
                                      err_msg=name)
    np.testing.assert_allclose(np.asarray(got.behavior_logprobs), np.asarray(ref.behavior_logprobs),
                               atol=1e-5, rtol=0)


@pytest.mark.parametrize("greedy", [True, False])
def test_data_sharded_groups_equal_one_device(greedy):
    """8 data shards, 3 prompts × 2 samples (padded to 8 prompts, padding dropped): the same rows
    as the unsharded call; 8 prompts fill the mesh and the output lives on all 8 devices, split on
    the batch dimension."""
    model = _model()
    tokens, mask = pad_prompts(PROMPTS, pad_id=0)
    params = SamplingParams(max_new_tokens=6, greedy=greedy, temperature=1.0)
    key = jax.random.PRNGKey(3)
    gs = generation_sharding(make_mesh(data=8))
    ref = sample(model, tokens, mask, key, params, pad_id=0, num_samples=2)
    got = sample(model, tokens, mask, key, params, pad_id=0, num_samples=2, sharding=gs)
    assert got.tokens.shape == ref.tokens.shape == (6, tokens.shape[1] + 6)
    _assert_same(ref, got)
    if not greedy:  # the draws differ between rows: the key of each row is kept, not repeated
        assert len({tuple(r) for r in np.asarray(ref.tokens)}) > 1
    full, fmask = pad_prompts((PROMPTS * 3)[:8], pad_id=0)
    out = sample(model, full, fmask, key, params, pad_id=0, sharding=gs)
    sh = out.tokens.sharding
    assert len(sh.device_set) == 8 and not sh.is_fully_replicated
    assert sh.shard_shape(out.tokens.shape)[0] == 1  # one row per device
    _assert_same(sample(model, full, fmask, key, params, pad_id=0), out)


def test_fsdp_tensor_sharded_model_generates_the_one_device_tokens():
    """(2 data × 2 fsdp × 2 tensor): parameters sharded as the learner shards them, the batch over
    data × fsdp (4 shards; 3 prompts padded to 4), the KV heads over tensor: greedy tokens equal
    the one-device run, log-probs within 1e-5."""
    ref_model = _model()
    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    gs = generation_sharding(mesh)
    assert gs.shards == 4 and gs.padded_rows(3) == 4
    sharded = shard_model(_model(), mesh)
    tokens, mask = pad_prompts(PROMPTS, pad_id=0)
    params = SamplingParams(max_new_tokens=6, greedy=True)
    key = jax.random.PRNGKey(0)
    _assert_same(sample(ref_model, tokens, mask, key, params, pad_id=0),
                 sample(sharded, tokens, mask, key, params, pad_id=0, sharding=gs))


@pytest.mark.parametrize("greedy", [True, False])
def test_sharded_multi_turn_episodes_equal_one_device(echo_model, greedy):  # noqa: F811
    """Multi-turn episodes (each turn's sampler call split over 8 data shards): the same token
    streams, stop reasons, snapshots and log-probs as on one device."""
    gs = generation_sharding(make_mesh(data=8))
    ref = _echo_run(echo_model, greedy=greedy)
    got = _echo_run(echo_model, greedy=greedy, sharding=gs)
    assert sum(e.num_turns for e in ref.episodes) > len(ref.episodes)  # really multi-turn
    _assert_same_episodes(ref, got)


def test_replicate_locally_spreads_a_replicated_copy_over_every_local_device():
    """Parameters replicated on a mesh of 4 devices become one copy replicated over all 8 local
    devices (the multi-host sampling copy), values unchanged."""
    from jax.sharding import NamedSharding, PartitionSpec as P

    from rlvr.parallel import local_mesh, replicate_locally

    x = jax.device_put(np.arange(12.0).reshape(3, 4),
                       NamedSharding(make_mesh(data=4, devices=jax.devices()[:4]), P()))
    (y,) = jax.tree.leaves(replicate_locally({"w": x}))
    assert y.sharding.is_fully_replicated and y.sharding.mesh == local_mesh()
    assert len(y.sharding.device_set) == 8
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x))


@pytest.mark.parametrize("greedy", [True, False])
def test_sharded_kv_reuse_episodes_equal_one_device(echo_model, greedy):  # noqa: F811
    """Multi-turn episodes with cross-turn KV caches, the session split over 8 data shards: the
    same token streams, stop reasons and log-probs as the one-device session."""
    gs = generation_sharding(make_mesh(data=8))
    ref = _echo_run(echo_model, greedy=greedy, kv_reuse=True)
    got = _echo_run(echo_model, greedy=greedy, kv_reuse=True, sharding=gs)
    assert sum(e.num_turns for e in ref.episodes) > len(ref.episodes)  # really multi-turn
    _assert_same_episodes(ref, got)


def test_sharded_kv_session_keeps_its_cache_split_over_the_mesh():
    """A session on 8 data shards: 3 episodes get 8 rows (one per device), the cross-turn cache
    is split on its row dimension across turns, including after an episode ends and the rows
    are gathered; the actions equal the unsharded session's."""
    from rlvr.rollout.session import KVSession

    model = _model()
    gs = generation_sharding(make_mesh(data=8))
    params = SamplingParams(max_new_tokens=4, greedy=True)
    ref = KVSession(model, max_tokens=32, pad_id=0)
    got = KVSession(model, max_tokens=32, pad_id=0, sharding=gs)
    streams = {0: [1, 4, 5], 1: [1, 7], 2: [1, 8, 9, 10]}
    for turn, ids in enumerate(([0, 1, 2], [0, 2])):
        keys = jax.random.split(jax.random.key(turn), len(ids))
        a = ref.turn(ids, [streams[i] for i in ids], keys, params)
        b = got.turn(ids, [streams[i] for i in ids], keys, params)
        assert a.action_ids == b.action_ids
        np.testing.assert_allclose(b.logprobs[0], a.logprobs[0], atol=1e-5)
        cache = got.cache.k[0]
        assert cache.shape[0] == 8 and len(cache.sharding.device_set) == 8
        assert cache.sharding.shard_shape(cache.shape)[0] == 1
        for i, act in zip(ids, a.action_ids):
            streams[i] = streams[i] + act + [3]


def test_compacted_decode_sharded_equals_uncompacted(monkeypatch):
    """Compaction over 8 data shards: 15 prompts × 2 samples (padded to 16 prompts) with per-row
    budgets; the batch shrinks to a multiple of 8 rows with at least 2 per shard (32 -> 16)
    and stays split over the mesh; the rows equal the sharded uncompacted loop bitwise and the
    one-device loop (log-probs within 1e-5). Sampled (top-p) only: the gathered rows' keys
    must follow them; sharded greedy decoding is `test_data_sharded_groups_equal_one_device`'s."""
    from rlvr.rollout import sampler as smp

    sizes = []
    real = smp._gather_rows

    def spy(carry, index, pad, **kw):
        sizes.append(int(index.shape[0]))
        out = real(carry, index, pad, **kw)
        assert len(out.out_tok.sharding.device_set) == 8
        return out

    monkeypatch.setattr(smp, "_gather_rows", spy)
    model = _model()
    prompts = [[1] + [2 + (i * 7 + j) % 40 for j in range(1 + i % 4)] for i in range(15)]
    tokens, mask = pad_prompts(prompts, pad_id=0)
    budgets = np.tile(np.array([1, 12, 3, 2, 5, 2, 12, 4, 11, 1]), 3)
    params = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.95)
    gs = generation_sharding(make_mesh(data=8))
    kw = dict(pad_id=0, num_samples=2, decode_segments=3, max_new_tokens_per_row=budgets)
    key = jax.random.PRNGKey(5)
    ref = sample(model, tokens, mask, key, params, **kw)
    seg = sample(model, tokens, mask, key, params, sharding=gs, **kw)
    got = sample(model, tokens, mask, key, params, sharding=gs, compact_finished=True, **kw)
    assert sizes == [16]
    np.testing.assert_array_equal(np.asarray(got.lengths), budgets)
    for name in ("tokens", "attention_mask", "positions", "loss_mask", "lengths", "truncated",
                 "behavior_logprobs"):
        np.testing.assert_array_equal(np.asarray(getattr(got, name)),
                                      np.asarray(getattr(seg, name)), err_msg=name)
    _assert_same(ref, got)
