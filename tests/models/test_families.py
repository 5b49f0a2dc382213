"""Qwen3, Mistral, Gemma 2 / 3 and the MoE families (Qwen3-MoE, Mixtral) against transformers:
logit parity, left padding, greedy decode through the KV cache, export round trip, bf16."""

import json
import os

import jax
import numpy as np
import pytest

from rlvr.models import from_pretrained, save_pretrained
from tests.models.helpers import (FAMILIES, TINY_HF, build_family_checkpoint, jit_forward,
                                  jit_logprobs, np_log_softmax, torch_logits)


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    torch_model = build_family_checkpoint(path, request.param)
    return request.param, str(path), torch_model, from_pretrained(str(path))


def _tokens(b=2, t=24, seed=0):
    return np.random.RandomState(seed).randint(0, 128, (b, t)).astype(np.int32)


def test_logit_parity_fp32(family):
    arch, _, torch_model, model = family
    assert model.config.architecture == arch
    toks = _tokens()
    ours = np.asarray(jit_forward(model, toks))
    ref = torch_logits(torch_model, toks)
    assert ours.shape == ref.shape and ours.dtype == np.float32
    err = np.abs(ours - ref).max()
    assert err <= 1e-4, err


def test_left_padding_parity_and_scoring(family):
    """A left-padded row equals transformers on its real part; the chunked scorer (soft-capped
    for Gemma 2) gives the log-softmax of those logits."""
    _, _, torch_model, model = family
    toks = _tokens(2, 20, seed=1)
    mask = np.ones_like(toks, bool)
    mask[0, :5] = False
    pos = np.where(mask, np.cumsum(mask, 1) - 1, 0)
    ours = np.asarray(jit_forward(model, toks, pos, mask))
    ref = torch_logits(torch_model, toks[:1, 5:])
    assert np.abs(ours[0, 5:] - ref[0]).max() <= 1e-4
    lp, _ = jit_logprobs(model, toks, pos, mask, chunk=7)
    want = np.take_along_axis(np_log_softmax(ref[0, :-1]), toks[0, 6:, None], -1)[:, 0]
    np.testing.assert_allclose(np.asarray(lp)[0, 6:], want, atol=1e-4)


def test_greedy_decode_equals_transformers_generate(family):
    """Our sampler (KV cache, sliding-window masks, soft-capped logits) decodes greedily the
    tokens transformers' generate does with a static cache, past the sliding window."""
    import torch

    from rlvr.rollout.sampler import SamplingParams, pad_prompts, sample

    _, _, torch_model, model = family
    prompts = [[5, 9, 17, 3, 44, 8], [7, 21, 30]]
    n = 12  # 6 + 12 tokens > the window of 8
    toks, mask = pad_prompts(prompts, 0)
    out = sample(model, toks, mask, jax.random.key(0),
                 SamplingParams(greedy=True, max_new_tokens=n), pad_id=0)
    for i, p in enumerate(prompts):
        with torch.no_grad():
            ref = torch_model.generate(torch.tensor([p]), max_new_tokens=n, do_sample=False,
                                       cache_implementation="static", eos_token_id=None,
                                       pad_token_id=0)
        assert np.asarray(out.tokens[i, -n:]).tolist() == ref[0, len(p):].tolist()


def test_export_roundtrip_transformers(family, tmp_path):
    from transformers import AutoModelForCausalLM

    arch, _, torch_model, model = family
    save_pretrained(model, str(tmp_path / "out"))
    reloaded = AutoModelForCausalLM.from_pretrained(str(tmp_path / "out")).eval()
    assert type(reloaded).__name__ == type(torch_model).__name__
    toks = _tokens(seed=2)
    np.testing.assert_allclose(torch_logits(reloaded, toks), torch_logits(torch_model, toks),
                               atol=1e-5)
    again = from_pretrained(str(tmp_path / "out"))
    assert again.config == model.config


def test_sharded_bf16_checkpoint(family, tmp_path):
    """A two-shard bf16 checkpoint loads; bf16 compute is at most twice as far from the fp32
    reference as transformers' own bf16 forward (both errors printed: run with -s to see)."""
    import torch
    from safetensors.torch import load_file, save_file

    arch, path, torch_model, _ = family
    tensors = load_file(os.path.join(path, "model.safetensors"))
    names = sorted(tensors)
    weight_map = {}
    for j, part in enumerate((names[: len(names) // 2], names[len(names) // 2:])):
        fn = f"model-0000{j + 1}-of-00002.safetensors"
        save_file({n: tensors[n].to(torch.bfloat16) for n in part}, str(tmp_path / fn),
                  metadata={"format": "pt"})
        weight_map.update({n: fn for n in part})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (tmp_path / "config.json").write_text(open(os.path.join(path, "config.json")).read())
    toks = _tokens(seed=3)
    ref = torch_logits(torch_model, toks)
    out16 = np.asarray(jit_forward(from_pretrained(str(tmp_path), dtype="bfloat16"), toks))
    with torch.no_grad():
        torch16 = torch_model.to(torch.bfloat16)(torch.tensor(toks.astype(np.int64))).logits
        torch_model.to(torch.float32)
    torch_err = np.abs(torch16.float().numpy() - ref).max()
    err = np.abs(out16 - ref).max()
    print(f"{arch}: bf16 max |logit error| ours {err:.4f}, transformers {torch_err:.4f} "
          f"(max |logit| {np.abs(ref).max():.2f})")
    assert out16.dtype == np.float32 and err <= 2 * torch_err


def _hf_config(family, **patch):
    import transformers as tf

    cls = {"qwen3": tf.Qwen3Config, "gemma3_text": tf.Gemma3TextConfig,
           "mixtral": tf.MixtralConfig, "mistral": tf.MistralConfig,
           "qwen3_moe": tf.Qwen3MoeConfig, "gemma2": tf.Gemma2Config}[family]
    d = cls(**dict(TINY_HF, head_dim=16)).to_dict()
    d.update(patch)
    return d


@pytest.mark.parametrize("family, patch, field", [
    ("qwen3", {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}},
     "rope_type"),
    ("qwen3", {"use_sliding_window": True}, "use_sliding_window"),
    ("qwen3_moe", {"use_sliding_window": True}, "use_sliding_window"),
    ("gemma3_text", {"model_type": "gemma3", "vision_config": {"hidden_size": 8}},
     "vision_config"),
    ("gemma3_text", {"use_bidirectional_attention": True}, "use_bidirectional_attention"),
    ("gemma3_text", {"rope_parameters": {
        "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}},
     "sliding_attention.rope_type"),
    ("gemma2", {"hidden_activation": "relu"}, "hidden_activation"),
    ("mixtral", {"router_jitter_noise": 0.1}, "router_jitter_noise"),
    ("mistral", {"hidden_act": "gelu"}, "hidden_act"),
])
def test_unsupported_configs_are_refused_naming_the_field(family, patch, field):
    from rlvr.models import ModelConfig

    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf(_hf_config(family, **patch))


def test_config_fields_per_family():
    """The family switches come from config.json: Qwen3 tied or not, Gemma 3's old-style
    rope keys (rope_local_base_freq, sliding_window_pattern), Qwen3-MoE's sparse layers."""
    from rlvr.models import ModelConfig

    q = ModelConfig.from_hf(_hf_config("qwen3", tie_word_embeddings=True))
    assert q.qk_norm and q.tie_word_embeddings and not q.attention_bias and q.sliding_window is None
    old = _hf_config("gemma3_text", num_hidden_layers=7, rope_theta=1e6, rope_local_base_freq=1e4,
                     sliding_window_pattern=3,
                     rope_scaling={"rope_type": "linear", "factor": 8.0})
    for k in ("rope_parameters", "layer_types"):
        old.pop(k)
    g = ModelConfig.from_hf(old)
    assert [g.is_sliding(i) for i in range(7)] == [True, True, False, True, True, False, True]
    assert g.local_rope_theta == 1e4 and g.rope_theta == 1e6 and g.rope_type == "linear"
    assert g.norm_unit_offset and g.sandwich_norms and g.scale_embeddings and g.qk_norm
    m = ModelConfig.from_hf(_hf_config("qwen3_moe", num_hidden_layers=4, decoder_sparse_step=2,
                                       mlp_only_layers=[3], num_experts=16))
    assert [m.is_moe(i) for i in range(4)] == [False, True, False, False]
    assert m.num_active_params() < m.num_params()
    mis = ModelConfig.from_hf(_hf_config("mistral", sliding_window=32))
    assert mis.sliding_window == 32 and all(mis.is_sliding(i) for i in range(mis.num_layers))
    assert ModelConfig.from_hf(mis.to_hf()) == mis == ModelConfig.from_hf(
        json.loads(json.dumps(mis.to_hf())))


@pytest.mark.parametrize("family", ["mistral", "gemma2", "gemma3_text", "qwen3_moe"])
def test_lengths_layout_equals_mask_layout(family):
    """The lengths layout (fused-kernel path: per-row lengths, `local_window_size` for sliding
    layers, the soft-capped path's own length mask, router logits moved back to their tokens)
    gives the mask layout's logits on real tokens and the same load-balancing loss."""
    import dataclasses

    import jax.numpy as jnp
    from flax import nnx

    from rlvr.models import Transformer
    from tests.models.helpers import tiny_family_config

    cfg = dataclasses.replace(tiny_family_config(family, 64), sliding_window=4)
    toks = np.random.RandomState(0).randint(3, 64, (3, 14)).astype(np.int32)
    mask = np.zeros_like(toks, bool)
    mask[0, 3:], mask[1, :9], mask[2] = True, True, True
    pos = np.where(mask, np.cumsum(mask, 1) - 1, 0).astype(np.int32)
    out = {}
    for layout in ("mask", "lengths"):
        model = Transformer(dataclasses.replace(cfg, attention_layout=layout), rngs=nnx.Rngs(0))
        out[layout] = (np.asarray(jit_forward(model, toks, pos, mask)),
                       float(model.router_aux_loss(jnp.asarray(toks), positions=jnp.asarray(pos),
                                                   attention_mask=jnp.asarray(mask))[1]))
    np.testing.assert_allclose(out["lengths"][0][mask], out["mask"][0][mask], atol=1e-5)
    np.testing.assert_allclose(out["lengths"][1], out["mask"][1], rtol=1e-6)


@pytest.mark.parametrize("family", ["mistral", "gemma2", "gemma3_text", "mixtral"])
def test_kv_cache_with_per_row_slots_equals_full_forward(family):
    """Decoding through the KV cache with one start slot per row (the multi-turn session's
    layout: rows at different lengths) gives the full forward's logits, with a window of 4
    that the 6 decoded tokens slide past."""
    import dataclasses

    import jax.numpy as jnp
    from flax import nnx

    from rlvr.models import KVCache, Transformer
    from tests.models.helpers import tiny_family_config

    cfg = dataclasses.replace(tiny_family_config(family, 64), sliding_window=4)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    rs = np.random.RandomState(0)
    lens = np.array([5, 3])
    n, s = 6, 12
    toks = rs.randint(3, 64, (2, s)).astype(np.int32)
    full = np.asarray(jit_forward(model, toks))  # each row alone is causal: compare per row
    cache = KVCache.init(cfg, 2, s)
    kv_mask = np.zeros((2, s), bool)
    for b in range(2):
        kv_mask[b, :lens[b]] = True
    prompt = np.where(kv_mask[:, :5], toks[:, :5], 0)
    pos = np.broadcast_to(np.arange(5), (2, 5)).astype(np.int32)
    _, cache = model.forward_cached(jnp.asarray(prompt), jnp.asarray(pos), jnp.asarray(kv_mask),
                                    cache, jnp.zeros((2,), jnp.int32))
    for i in range(n):
        idx = lens + i
        kv_mask[np.arange(2), idx] = True
        h, cache = model.forward_cached(jnp.asarray(toks[np.arange(2), idx][:, None]),
                                        jnp.asarray(idx[:, None].astype(np.int32)),
                                        jnp.asarray(kv_mask), cache, jnp.asarray(idx, jnp.int32))
        got = np.asarray(model.project(h[:, 0]))
        np.testing.assert_allclose(got, full[np.arange(2), idx], atol=1e-5)
