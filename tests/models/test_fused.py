"""Fused q/k/v and gate/up kernels (`ModelConfig.fused_projections`): the layouts, the same
function as the separate kernels (logits, greedy tokens, GRPO gradients) for Llama-, Qwen2-,
Gemma- and MoE-style configs, exact Hugging Face round trips, LoRA on fused kernels, the config
field, and tensor-parallel sharding that keeps each shard's heads whole (8 simulated devices)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr.models import ModelConfig, Transformer, from_pretrained, save_pretrained
from rlvr.models.fused import (fuse_gate_up, fuse_model, fuse_qkv, split_gate_up, split_qkv,
                               unfuse_model)
from rlvr.models.hf import read_tensors
from tests.models.helpers import build_hf_checkpoint, tiny_config, torch_logits

BASE = dict(vocab_size=48, hidden_size=32, intermediate_size=40, num_layers=2, num_heads=4,
            num_kv_heads=2, head_dim=8, max_position_embeddings=64)
FAMILIES = {
    "llama": dict(BASE, architecture="llama"),
    "mha": dict(BASE, architecture="llama", num_kv_heads=4),  # one query head per kv head
    "qwen2": dict(BASE, architecture="qwen2", attention_bias=True, tie_word_embeddings=True),
    # Gemma: qk norms, (1 + w) norms, sandwich norms, GeGLU, soft-capping, a sliding layer with
    # its own RoPE base
    "gemma": dict(BASE, architecture="gemma3_text", qk_norm=True, norm_unit_offset=True,
                  sandwich_norms=True, hidden_act="gelu_pytorch_tanh", scale_embeddings=True,
                  query_pre_attn_scalar=16.0, attn_logit_softcapping=20.0,
                  final_logit_softcapping=30.0, sliding_window=3,
                  layer_types=("sliding_attention", "full_attention"), local_rope_theta=100.0),
    # layer 0 dense (fused gate/up), layer 1 a mixture of experts (experts stay unfused)
    "moe": dict(BASE, architecture="qwen3_moe", qk_norm=True, num_experts=4,
                num_experts_per_tok=2, moe_intermediate_size=16, mlp_only_layers=(0,)),
}


def _pair(family, seed=0):
    """(separate-kernel model, the same weights fused)."""
    model = Transformer(ModelConfig(**FAMILIES[family]), rngs=nnx.Rngs(seed))
    if FAMILIES[family].get("attention_bias"):  # zero-initialised: make the biases count
        for block in model.model.layers:
            for name in ("q_proj", "k_proj", "v_proj"):
                lin = getattr(block.self_attn, name)
                lin.bias.set_value(0.1 * jax.random.normal(jax.random.key(hash(name) % 97),
                                                           lin.bias.shape))
    return model, fuse_model(model)


def _batch(b=3, t=9, vocab=48, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, vocab, (b, t)).astype(np.int32)
    mask = np.ones((b, t), bool)
    mask[1, :3] = False  # a left-padded row
    mask[2, 7:] = False  # a right-padded row
    return tokens, mask


def test_layouts_group_per_kv_head_and_round_trip_exactly():
    """Column block g of the fused q/k/v holds query heads gG..gG+G-1, then key g, then value g;
    gate/up interleave; the splits invert the fusions exactly (kernels and biases)."""
    cfg = ModelConfig(**BASE)  # N 4, K 2, H 8: G = 2
    h, g = cfg.head_dim, 2
    q = np.arange(3 * 32).reshape(3, 32) + 1000  # [D 3, N·H]
    k = np.arange(3 * 16).reshape(3, 16) + 2000
    v = np.arange(3 * 16).reshape(3, 16) + 3000
    w = np.asarray(fuse_qkv(q, k, v, cfg))
    assert w.shape == (3, 2 * (g + 2) * h)
    for grp in range(2):
        block = w[:, grp * (g + 2) * h:(grp + 1) * (g + 2) * h]
        np.testing.assert_array_equal(block[:, :g * h], q[:, grp * g * h:(grp + 1) * g * h])
        np.testing.assert_array_equal(block[:, g * h:(g + 1) * h], k[:, grp * h:(grp + 1) * h])
        np.testing.assert_array_equal(block[:, (g + 1) * h:], v[:, grp * h:(grp + 1) * h])
    for got, want in zip(split_qkv(w, cfg), (q, k, v)):
        np.testing.assert_array_equal(np.asarray(got), want)
    bias = np.asarray(fuse_qkv(q[0], k[0], v[0], cfg))  # 1-D bias: same layout
    np.testing.assert_array_equal(bias, w[0])
    gate, up = np.arange(12).reshape(3, 4), np.arange(12).reshape(3, 4) + 100
    gu = np.asarray(fuse_gate_up(gate, up))
    np.testing.assert_array_equal(gu[:, 0::2], gate)
    np.testing.assert_array_equal(gu[:, 1::2], up)
    for got, want in zip(split_gate_up(gu), (gate, up)):
        np.testing.assert_array_equal(np.asarray(got), want)


def test_fused_parameters_replace_the_separate_ones():
    _, fused = _pair("moe")
    attn, dense, moe = fused.model.layers[0].self_attn, fused.model.layers[0].mlp, \
        fused.model.layers[1].mlp
    assert attn.q_proj is None and attn.qkv_proj.kernel.shape == (32, 2 * 4 * 8)
    assert tuple(attn.qkv_proj.kernel.logical_axes) == ("embed", "kv_heads")
    assert dense.gate_proj is None and dense.gate_up_proj.kernel.shape == (32, 80)
    assert tuple(dense.gate_up_proj.kernel.logical_axes) == ("embed", "mlp")
    assert moe.gate_proj.shape == (4, 32, 16)  # experts unfused
    n = lambda m: sum(x.size for x in jax.tree.leaves(nnx.state(m, nnx.Param)))  # noqa: E731
    assert n(fused) == n(unfuse_model(fused)) == fused.config.num_params()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fused_model_equals_separate_kernels(family):
    """Same weights: logits and token log-probs within 1e-5 (f32), on padded rows too; the
    KV-cache path (prefill + one cached step) agrees as well; unfusing gives back every
    parameter exactly."""
    from rlvr.models.scoring import token_logprobs

    ref, fused = _pair(family)
    tokens, mask = _batch()
    a = np.asarray(ref(tokens, attention_mask=mask))
    b = np.asarray(fused(tokens, attention_mask=mask))
    np.testing.assert_allclose(b, a, atol=1e-5, rtol=0)
    lp_a, _ = token_logprobs(ref, tokens, attention_mask=mask)
    lp_b, _ = token_logprobs(fused, tokens, attention_mask=mask)
    np.testing.assert_allclose(np.asarray(lp_b), np.asarray(lp_a), atol=1e-5, rtol=0)
    from rlvr.models.transformer import KVCache

    pos = np.broadcast_to(np.arange(9, dtype=np.int32), (3, 9))
    outs = []
    for m in (ref, fused):
        cache = KVCache.init(m.config, 3, 12)
        kv = np.zeros((3, 12), bool)
        kv[:, :10] = True
        h, cache = m.forward_cached(jnp.asarray(tokens), pos, kv, cache, 0)
        h2, _ = m.forward_cached(jnp.asarray(tokens[:, :1]), pos[:, :1] + 9, kv, cache, 9)
        outs.append((np.asarray(h), np.asarray(h2)))
    for x, y in zip(*outs):
        np.testing.assert_allclose(y, x, atol=1e-5, rtol=0)
    back = dict(nnx.to_flat_state(nnx.state(unfuse_model(fused))))
    for path, var in nnx.to_flat_state(nnx.state(ref)):
        np.testing.assert_array_equal(np.asarray(back[path].get_value()), np.asarray(var.get_value()))


@pytest.mark.parametrize("family", ["qwen2", "gemma"])
def test_fused_greedy_samples_the_same_tokens(family):
    from rlvr.rollout.sampler import SamplingParams, pad_prompts, sample

    ref, fused = _pair(family)
    tokens, mask = pad_prompts([[1, 5, 9], [1, 7], [2, 3, 4, 5]], pad_id=0)
    sp = SamplingParams(max_new_tokens=6, greedy=True)
    key = jax.random.key(0)
    a = sample(ref, tokens, mask, key, sp, pad_id=0, num_samples=2)
    b = sample(fused, tokens, mask, key, sp, pad_id=0, num_samples=2)
    np.testing.assert_array_equal(np.asarray(b.tokens), np.asarray(a.tokens))
    np.testing.assert_allclose(np.asarray(b.behavior_logprobs), np.asarray(a.behavior_logprobs),
                               atol=1e-5, rtol=0)


def _grpo_grads(model):
    import optax

    from rlvr.algorithms import AlgorithmSettings, get_algorithm
    from rlvr.learner import accumulate_gradients, batch_denominators
    from rlvr.records.batch import TrainingBatch
    from rlvr.records.state import split_model

    graphdef, params, rest = split_model(model)
    algo = get_algorithm("grpo")(AlgorithmSettings(name="grpo", group_size=2),
                                 policy_graphdef=graphdef, policy_rest=rest,
                                 optimizer=optax.adam(1e-3))
    tokens, mask = _batch(b=4, t=8, seed=1)
    rng = np.random.default_rng(2)
    loss_mask = (mask & (np.arange(8)[None] >= 3)).astype(np.float32)
    mb = TrainingBatch(tokens=tokens, attention_mask=mask,
                       positions=np.maximum(np.cumsum(mask, 1) - 1, 0).astype(np.int32),
                       loss_mask=loss_mask, valid=np.ones(4, bool),
                       behavior_logprobs=(-rng.uniform(1, 3, (4, 8)) * loss_mask).astype(np.float32),
                       advantages=np.array([1.0, -1.0, 0.5, -0.5], np.float32))
    aux = {"kl_coef": jnp.zeros((), jnp.float32), **batch_denominators(mb)}
    loss, grads, _ = accumulate_gradients(graphdef, rest, algo.policy_loss, params, mb, aux, 1)
    return float(loss), graphdef, grads, rest


@pytest.mark.parametrize("family", ["llama", "qwen2", "moe"])
def test_fused_grpo_gradients_equal_after_splitting(family):
    """The GRPO loss and its gradient: the fused kernels' gradients, split back into the
    separate layout (a permutation of columns), equal the separate kernels' gradients."""
    ref, fused = _pair(family)
    loss_a, _, grads_a, _ = _grpo_grads(ref)
    loss_b, graphdef, grads_b, rest = _grpo_grads(fused)
    assert abs(loss_a - loss_b) < 1e-6
    mapped = dict(nnx.to_flat_state(nnx.state(unfuse_model(nnx.merge(graphdef, grads_b, rest)),
                                              nnx.Param)))
    flat_a = list(nnx.to_flat_state(grads_a))
    assert len(flat_a) == len(mapped)
    total = 0.0
    for path, g in flat_a:
        np.testing.assert_allclose(np.asarray(mapped[path].get_value()), np.asarray(g.get_value()),
                                   atol=1e-6, rtol=1e-5, err_msg=str(path))
        total += float(jnp.sum(jnp.abs(g.get_value())))
    assert total > 0


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_hf_checkpoint_loads_fused_and_saves_the_same_tensors(tmp_path, arch):
    """A transformers checkpoint (separate q/k/v — with Qwen2's biases — and gate/up) loads into
    the fused layout with transformers' logits, and save_pretrained writes back every tensor
    bit for bit."""
    torch_model = build_hf_checkpoint(tmp_path / "hf", arch)
    model = from_pretrained(str(tmp_path / "hf"), fused_projections=True)
    assert model.config.fused_projections
    assert model.model.layers[0].self_attn.qkv_proj is not None
    assert (model.model.layers[0].self_attn.qkv_proj.bias is not None) == (arch == "qwen2")
    tokens = np.random.default_rng(0).integers(1, 128, (2, 7))
    np.testing.assert_allclose(np.asarray(model(tokens)), torch_logits(torch_model, tokens),
                               atol=2e-4, rtol=0)
    save_pretrained(model, str(tmp_path / "out"))
    orig = read_tensors([str(tmp_path / "hf" / "model.safetensors")])
    back = read_tensors([str(tmp_path / "out" / "model.safetensors")])
    assert set(back) == set(orig) - {k for k in orig if k.endswith("rotary_emb.inv_freq")}
    for name in back:
        np.testing.assert_array_equal(np.asarray(back[name]), np.asarray(orig[name]), err_msg=name)
    import json

    with open(tmp_path / "out" / "config.json") as f:
        assert "fused_projections" not in json.load(f)


def _random_adapters(model, seed=0):
    """Non-zero B matrices (B starts at zero, so the adapters would do nothing)."""
    from rlvr.models.lora import Adapter

    key = jax.random.key(seed)
    for i, (_, module) in enumerate(nnx.iter_modules(model)):
        if isinstance(module, Adapter):
            b = module.lora_b
            b.set_value(0.05 * jax.random.normal(jax.random.fold_in(key, i), b.shape))


def test_lora_on_fused_kernels_exports_to_the_separate_layout(tmp_path):
    """Targets covering q/k/v and gate/up: one adapter per fused kernel; its PEFT export (the
    members share A, B split by columns) loads into the separate-kernel model with the same
    logits, and merging then unfusing equals merging the separate model."""
    from rlvr.models.lora import LoRAConfig, apply_lora, load_adapters, merge, save_adapters

    base, fused = _pair("qwen2")
    lc = LoRAConfig(rank=4, targets=("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"))
    apply_lora(fused, lc)
    attn = fused.model.layers[0].self_attn
    assert attn.qkv_proj.lora is not None and attn.o_proj.lora is None
    _random_adapters(fused)
    save_adapters(fused, str(tmp_path / "ad"))
    apply_lora(base, lc)
    load_adapters(base, str(tmp_path / "ad"))
    tokens, mask = _batch()
    want = np.asarray(fused(tokens, attention_mask=mask))
    np.testing.assert_allclose(np.asarray(base(tokens, attention_mask=mask)), want, atol=1e-5,
                               rtol=0)
    merged = unfuse_model(merge(fused))
    np.testing.assert_allclose(np.asarray(merged(tokens, attention_mask=mask)), want, atol=1e-5,
                               rtol=0)
    # and back into a fused model: the shared A is recovered, B fused again
    _, fused2 = _pair("qwen2")
    apply_lora(fused2, lc)
    load_adapters(fused2, str(tmp_path / "ad"))
    np.testing.assert_allclose(np.asarray(fused2(tokens, attention_mask=mask)), want, atol=1e-5,
                               rtol=0)


def test_lora_adapters_with_different_a_do_not_load_into_a_fused_model(tmp_path):
    from rlvr.models.lora import LoRAConfig, apply_lora, load_adapters, save_adapters

    base, fused = _pair("llama")
    lc = LoRAConfig(rank=2, targets=("q_proj", "k_proj", "v_proj"))
    apply_lora(base, lc)  # separate adapters: three different A
    save_adapters(base, str(tmp_path / "ad"))
    apply_lora(fused, lc)
    with pytest.raises(ValueError, match="different lora_A.*fused_projections=False"):
        load_adapters(fused, str(tmp_path / "ad"))


@pytest.mark.parametrize("targets", [("q_proj",), ("q_proj", "k_proj", "o_proj"),
                                     ("o_proj", "gate_proj")])
def test_lora_targets_that_split_a_fused_kernel_are_refused(targets):
    from rlvr.models.lora import LoRAConfig, apply_lora

    _, fused = _pair("llama")
    with pytest.raises(ValueError, match=r"split the fused kernel .*model\.lora\.targets"):
        apply_lora(fused, LoRAConfig(rank=2, targets=targets))


def test_config_field_builds_a_fused_policy_and_refuses_split_lora_targets():
    from configs import base
    from rlvr.train.config import ConfigError, validate_config
    from rlvr.train.setup import build_policy

    c = base.get_config()
    c.model.fused_projections = True
    validate_config(c)
    policy = build_policy(c, 32)
    assert policy.config.fused_projections
    assert policy.model.layers[0].mlp.gate_up_proj is not None
    c.model.lora.rank = 4
    c.model.lora.targets = ("q_proj", "v_proj")
    with pytest.raises(ConfigError, match=r"model\.lora\.targets.*split the fused kernel qkv_proj"):
        validate_config(c)
    c.model.fused_projections = False
    validate_config(c)


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
def test_tensor_sharded_fused_model_keeps_groups_whole_and_equals_unfused():
    """(2 data × 2 fsdp × 2 tensor), K = 2 kv heads: the fused kernels split over `tensor` so
    shard 0 holds exactly kv group 0 (its query heads, key, value) and gate/up pairs
    0..F/2-1; the sharded fused model's logits and greedy tokens equal the unsharded separate
    model's."""
    from rlvr.parallel import generation_sharding, make_mesh, shard_model
    from rlvr.rollout.sampler import SamplingParams, pad_prompts, sample

    cfg = tiny_config(fused_projections=False, intermediate_size=64)
    ref = Transformer(cfg, rngs=nnx.Rngs(1))
    fused = fuse_model(ref)
    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    shard_model(fused, mesh)
    attn = fused.model.layers[0].self_attn
    kernel = attn.qkv_proj.kernel.get_value()
    assert kernel.sharding.spec == jax.sharding.PartitionSpec("fsdp", "tensor")
    g, h = cfg.num_heads // cfg.num_kv_heads, cfg.head_dim
    a = ref.model.layers[0].self_attn
    want0 = np.concatenate([np.asarray(a.q_proj.kernel[...])[:, :g * h],
                            np.asarray(a.k_proj.kernel[...])[:, :h],
                            np.asarray(a.v_proj.kernel[...])[:, :h]], axis=1)
    for shard in kernel.addressable_shards:
        rows, cols = shard.index
        if cols.start == 0:
            np.testing.assert_array_equal(np.asarray(shard.data), want0[rows])
    gu = fused.model.layers[0].mlp.gate_up_proj.kernel.get_value()
    m = ref.model.layers[0].mlp
    for shard in gu.addressable_shards:
        rows, cols = shard.index
        if cols.start == 0:
            np.testing.assert_array_equal(np.asarray(shard.data)[:, 0::2],
                                          np.asarray(m.gate_proj.kernel[...])[rows, :32])
            np.testing.assert_array_equal(np.asarray(shard.data)[:, 1::2],
                                          np.asarray(m.up_proj.kernel[...])[rows, :32])
    tokens, mask = _batch(b=4, t=9)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda t, mk: fused(t, attention_mask=mk))(
        tokens, mask)), np.asarray(ref(tokens, attention_mask=mask)), atol=1e-5, rtol=0)
    prompts, pmask = pad_prompts([[1, 4, 5], [1, 7], [1, 8, 9, 10], [2, 3]], pad_id=0)
    sp = SamplingParams(max_new_tokens=5, greedy=True)
    key = jax.random.key(0)
    want = sample(ref, prompts, pmask, key, sp, pad_id=0)
    got = sample(fused, prompts, pmask, key, sp, pad_id=0, sharding=generation_sharding(mesh))
    np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(want.tokens))


def test_fused_projections_must_be_a_bool():
    with pytest.raises(ValueError, match="ModelConfig.fused_projections must be True or False"):
        ModelConfig(**dict(BASE, fused_projections="yes"))
    assert dataclasses.replace(ModelConfig(**BASE), fused_projections=True).fused_projections


def test_fused_decode_step_compiles_to_fewer_matmuls():
    """The compiled decode step (benchmarks/compiled_cost.py's program) of a fused model has
    3 fewer dot instructions per layer (q/k/v 3 -> 1, gate/up 2 -> 1) and the same FLOPs."""
    from benchmarks.compiled_cost import SHAPES, analyse, decode_program
    from rlvr.rollout.sampler import SamplingParams

    counts = {}
    for fused in (False, True):
        shape = dict(SHAPES["small"], model=dict(SHAPES["small"]["model"],
                                                 fused_projections=fused))
        sp = SamplingParams(max_new_tokens=shape["decode_new"], greedy=True)
        counts[fused] = analyse(*decode_program(shape, sp))
    layers = SHAPES["small"]["model"]["num_layers"]
    assert counts[True]["dots"] == counts[False]["dots"] - 3 * layers
    assert counts[True]["flops"] == pytest.approx(counts[False]["flops"], rel=1e-3)
