"""Prompt rendering (rlvr.models.prompts) and Hugging Face export (rlvr.models.export): the char
path gives exactly [bos] + prompt, chat templates render as transformers does and stop on the
template's end-of-turn token, and an exported folder reloads in transformers with equal logits."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr.models import ModelConfig, Transformer, from_pretrained
from rlvr.models.export import char_tokenizer_hf, export_hf
from rlvr.models.prompts import PromptRenderer, end_of_turn_ids
from rlvr.models.tokenizer import CharTokenizer, HFTokenizer
from rlvr.tasks.kit import get_kit
from rlvr.train.sft import demo_stream


def test_char_renderer_is_bos_plus_prompt():
    kit = get_kit("arithmetic", difficulty="easy")
    tok = CharTokenizer(kit.alphabet)
    r = PromptRenderer(tok)
    for t in kit.source.sample(20, 0):
        assert r.encode(t.prompt) == [tok.bos_id] + tok.encode(t.prompt)
        ids, mask = demo_stream(kit, t, tok)
        demo = tok.encode(kit.demonstration(t)) + [tok.eos_id]
        assert ids == [tok.bos_id] + tok.encode(t.prompt) + demo
        assert mask == [0.0] * (len(t.prompt) + 1) + [1.0] * len(demo)
    assert r.stop_ids == (tok.eos_id,) and r.end_id == tok.eos_id
    with pytest.raises(ValueError, match="chat_template=True needs a Hugging Face"):
        PromptRenderer(tok, chat_template=True)


def test_chat_template_rendering_and_end_of_turn(tiny_hf_checkpoint):
    tok = HFTokenizer(tiny_hf_checkpoint)
    hf = tok.tok
    eot, eos = hf.convert_tokens_to_ids("<|im_end|>"), hf.convert_tokens_to_ids("<|endoftext|>")
    assert tok.eos_id == eos and not tok.add_bos and eot != eos
    assert end_of_turn_ids(hf) == (eot,)
    r = PromptRenderer(tok, chat_template=True, system_prompt="Be brief.", instruction="Box it.")
    want = hf.apply_chat_template([{"role": "system", "content": "Be brief."},
                                   {"role": "user", "content": "2+3?\nBox it."}],
                                  add_generation_prompt=True, tokenize=False)
    assert hf.decode(r.encode("2+3?")) == want
    assert want.endswith("<|im_start|>assistant\n")
    assert set(r.stop_ids) == {eos, eot} and r.end_id == eot
    plain = PromptRenderer(tok, instruction="Box it.")
    assert plain.encode("2+3?") == tok.encode("2+3?\nBox it.")  # no bos: the tokenizer has none
    with pytest.raises(ValueError, match="system_prompt needs chat_template"):
        PromptRenderer(tok, system_prompt="x")
    # SFT demonstrations under a chat template end with the end-of-turn token
    kit = get_kit("gsm8k:builtin")
    task = kit.source.tasks[0]
    ids, mask = demo_stream(kit, task, tok, r)
    prompt = r.encode(task.prompt)
    assert ids[:len(prompt)] == prompt and ids[-1] == eot and mask[-1] == 1.0
    assert sum(mask) == len(ids) - len(prompt)


def _logits(model, ids):
    x = jnp.asarray(ids)[None]
    return np.asarray(model(x, positions=jnp.arange(x.shape[1])[None],
                            attention_mask=jnp.ones(x.shape, bool)))[0]


def test_char_export_loads_in_transformers_with_equal_logits(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = CharTokenizer("0123456789+-*= \n")
    # char runs build Llama-architecture policies (rlvr.train.setup.build_policy)
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64,
                      num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, architecture="llama",
                      max_position_embeddings=64)
    model = Transformer(cfg, rngs=nnx.Rngs(3))
    path = export_hf(model, tok, PromptRenderer(tok), str(tmp_path / "export"))
    hf_tok = AutoTokenizer.from_pretrained(path)
    text = "12+7 = 19\n"
    assert hf_tok(text)["input_ids"] == [tok.bos_id] + tok.encode(text)
    assert hf_tok.decode(tok.encode(text)) == text
    with pytest.raises(Exception, match="UNK"):
        hf_tok("12x")  # out of the alphabet, as CharTokenizer
    assert char_tokenizer_hf(tok).decode([tok.bos_id] + tok.encode("3*4"), skip_special_tokens=True) == "3*4"
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = [tok.bos_id] + tok.encode(text)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits.numpy()[0]
    assert np.abs(_logits(model, ids) - ref).max() < 1e-4
    meta = json.load(open(os.path.join(path, "rlvr_export.json")))
    assert meta["tokenizer"]["kind"] == "char" and meta["tokenizer"]["alphabet"] == tok.alphabet
    assert json.load(open(os.path.join(path, "generation_config.json")))["eos_token_id"] == [tok.eos_id]


def test_hf_export_keeps_tokenizer_template_and_stop_ids(tmp_path, tiny_hf_checkpoint):
    from transformers import AutoTokenizer

    tok = HFTokenizer(tiny_hf_checkpoint)
    r = PromptRenderer(tok, chat_template=True)
    model = from_pretrained(tiny_hf_checkpoint)
    path = export_hf(model, tok, r, str(tmp_path / "export"))
    back = AutoTokenizer.from_pretrained(path)
    msgs = [{"role": "user", "content": "hi"}]
    assert back.apply_chat_template(msgs, tokenize=False) == tok.tok.apply_chat_template(msgs, tokenize=False)
    gen = json.load(open(os.path.join(path, "generation_config.json")))
    assert gen["eos_token_id"] == list(r.stop_ids)
    again = from_pretrained(path)
    ids = r.encode("What is 1+1?")
    np.testing.assert_array_equal(_logits(again, ids), _logits(model, ids))
    # re-exporting replaces the folder as a whole
    export_hf(model, tok, r, path)
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p or ".old-" in p]
