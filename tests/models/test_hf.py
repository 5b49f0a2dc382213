"""HF import/export: logit parity with transformers (PyTorch), round trips, bad checkpoints."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

from rlvr.models import from_pretrained, save_pretrained
from tests.models.helpers import build_hf_checkpoint, jit_forward, torch_logits


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def checkpoint(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    model = build_hf_checkpoint(path, request.param)
    return request.param, str(path), model, from_pretrained(str(path))


def _tokens(b=2, t=24, seed=0):
    return np.random.RandomState(seed).randint(0, 128, (b, t)).astype(np.int32)


def test_logit_parity_fp32(checkpoint):
    arch, path, torch_model, model = checkpoint
    assert model.config.architecture == arch
    assert model.config.tie_word_embeddings == (arch == "qwen2")
    assert model.config.attention_bias == (arch == "qwen2")
    # 24 tokens > original_max_position_embeddings=16: exercises llama3 rope scaling.
    toks = _tokens()
    ours = np.asarray(jit_forward(model, toks))
    ref = torch_logits(torch_model, toks)
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    assert np.abs(ours - ref).max() <= 1e-4


def test_left_padding_parity(checkpoint):
    """Left-padded batch with attention_mask + positions matches transformers' padded forward."""
    _, path, torch_model, model = checkpoint
    toks = _tokens(2, 12, seed=1)
    mask = np.ones_like(toks, bool)
    mask[0, :5] = False
    pos = np.where(mask, np.cumsum(mask, 1) - 1, 0)
    ours = np.asarray(jit_forward(model, toks, pos, mask))
    ref = torch_logits(torch_model, toks[:1, 5:])  # the real part alone
    assert np.abs(ours[0, 5:] - ref[0]).max() <= 1e-4


def test_export_roundtrip_transformers(checkpoint, tmp_path):
    from transformers import AutoModelForCausalLM

    arch, path, torch_model, model = checkpoint
    out = tmp_path / "export"
    save_pretrained(model, str(out))
    assert {"config.json", "model.safetensors"} <= set(os.listdir(out))
    reloaded = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    assert type(reloaded).__name__ == type(torch_model).__name__
    toks = _tokens(seed=2)
    np.testing.assert_allclose(torch_logits(reloaded, toks), torch_logits(torch_model, toks),
                               atol=1e-6)
    again = from_pretrained(str(out))
    np.testing.assert_allclose(np.asarray(jit_forward(again, toks)),
                               np.asarray(jit_forward(model, toks)), atol=1e-6)


def test_sharded_index_and_bf16(checkpoint, tmp_path):
    """A sharded checkpoint (index.json + 2 shards, bf16 tensors) loads; bf16 compute ≈ fp32."""
    import torch
    from safetensors.torch import load_file, save_file

    _, path, torch_model, _ = checkpoint
    tensors = load_file(os.path.join(path, "model.safetensors"))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    weight_map = {}
    for fn, part in shards.items():
        save_file({n: tensors[n].to(torch.bfloat16) for n in part}, str(tmp_path / fn),
                  metadata={"format": "pt"})
        weight_map.update({n: fn for n in part})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (tmp_path / "config.json").write_text(open(os.path.join(path, "config.json")).read())
    toks = _tokens(seed=3)
    ref = torch_logits(torch_model, toks)
    m32 = from_pretrained(str(tmp_path))  # bf16 weights, fp32 compute
    assert np.abs(np.asarray(jit_forward(m32, toks)) - ref).max() < 0.05
    m16 = from_pretrained(str(tmp_path), dtype="bfloat16")
    assert m16.model.embed_tokens[...].dtype == jnp.bfloat16
    out16 = np.asarray(jit_forward(m16, toks))
    assert out16.dtype == np.float32
    assert np.abs(out16 - ref).max() < 0.1


def _copy_ckpt(path, dst, drop=None, reshape=None, config_patch=None):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(os.path.join(path, "model.safetensors"))
    if drop:
        del tensors[drop]
    if reshape:
        tensors[reshape] = np.zeros((3, 5), np.float32)
    os.makedirs(dst, exist_ok=True)
    save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    cfg = json.load(open(os.path.join(path, "config.json")))
    cfg.update(config_patch or {})
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"))
    return str(dst)


def test_bad_checkpoints_name_the_problem(checkpoint, tmp_path):
    _, path, _, _ = checkpoint
    t = "model.layers.1.mlp.up_proj.weight"
    with pytest.raises(ValueError, match="missing tensor 'model.layers.1.mlp.up_proj.weight'"):
        from_pretrained(_copy_ckpt(path, tmp_path / "a", drop=t))
    with pytest.raises(ValueError, match=r"'model.layers.1.mlp.up_proj.weight' has shape \(3, 5\)"):
        from_pretrained(_copy_ckpt(path, tmp_path / "b", reshape=t))
    with pytest.raises(ValueError, match="model_type 'gpt2'"):
        from_pretrained(_copy_ckpt(path, tmp_path / "c", config_patch={
            "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ValueError, match="num_key_value_heads|num_kv_heads"):
        from_pretrained(_copy_ckpt(path, tmp_path / "d", config_patch={"num_key_value_heads": 3}))
    with pytest.raises(ValueError, match="no model.safetensors"):
        os.makedirs(tmp_path / "e")
        (tmp_path / "e" / "config.json").write_text(open(os.path.join(path, "config.json")).read())
        from_pretrained(str(tmp_path / "e"))


def test_test_checkpoint_with_an_embedding_padded_past_the_tokenizer(tmp_path):
    """rlvr.testing.build_checkpoint(model_vocab_size=...) gives a model with more embedding rows
    than tokenizer ids (as Qwen2.5 pads its vocabulary); ids past the tokenizer decode to
    nothing, and a size below the tokenizer's is refused by name."""
    from rlvr.models.tokenizer import HFTokenizer
    from rlvr.testing import build_checkpoint

    path = build_checkpoint(str(tmp_path / "padded"), saver="rlvr", model_vocab_size=3000)
    model = from_pretrained(path)
    tok = HFTokenizer(path)
    assert model.config.vocab_size == 3000
    with open(os.path.join(path, "config.json")) as f:
        assert json.load(f)["vocab_size"] == 3000
    assert tok.vocab_size < 3000 and tok.decode([2999]) == ""
    with pytest.raises(ValueError, match="model_vocab_size"):
        build_checkpoint(str(tmp_path / "small"), saver="rlvr", model_vocab_size=10)
