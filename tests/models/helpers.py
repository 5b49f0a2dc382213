"""Tiny random Hugging Face checkpoints and configs shared by the model/sampler/mesh tests."""

import numpy as np

from rlvr.models import ModelConfig

TINY_HF = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)


def tiny_config(**kw) -> ModelConfig:
    base = dict(vocab_size=48, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                num_kv_heads=2, head_dim=8, architecture="qwen2", attention_bias=True)
    base.update(kw)
    return ModelConfig(**base)


def build_hf_checkpoint(path, arch: str, seed: int = 0):
    """Builds a tiny random HF Llama or Qwen2 model, perturbs every tensor (biases and norm
    scales included, so they are really tested), saves it to `path`; returns the torch model."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    if arch == "llama":
        cfg = LlamaConfig(**TINY_HF, rope_theta=5000.0,
                          rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 16})
        model = LlamaForCausalLM(cfg)
    else:
        cfg = Qwen2Config(**TINY_HF, tie_word_embeddings=True)
        model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))
    model.eval()
    model.save_pretrained(str(path))
    return model


def torch_logits(model, tokens, attention_mask=None):
    import torch

    with torch.no_grad():
        kw = {}
        if attention_mask is not None:
            kw["attention_mask"] = torch.tensor(np.asarray(attention_mask).astype(np.int64))
        return model(torch.tensor(np.asarray(tokens).astype(np.int64)), **kw).logits.numpy()


def np_log_softmax(x):
    x = np.asarray(x, np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def _jitted():
    import functools

    import jax
    from flax import nnx

    from rlvr.models.scoring import token_logprobs

    @functools.partial(jax.jit, static_argnums=0)
    def fwd(graphdef, state, tokens, positions, mask):
        return nnx.merge(graphdef, state)(tokens, positions=positions, attention_mask=mask)

    @functools.partial(jax.jit, static_argnums=(0, 5, 6))
    def lps(graphdef, state, tokens, positions, mask, temperature, chunk):
        return token_logprobs(nnx.merge(graphdef, state), tokens, positions=positions,
                              attention_mask=mask, temperature=temperature, chunk_size=chunk)

    return fwd, lps


_FWD, _LPS = None, None


def _defaults(tokens, positions, mask):
    import jax.numpy as jnp

    tokens = jnp.asarray(tokens, jnp.int32)
    b, t = tokens.shape
    mask = jnp.ones((b, t), bool) if mask is None else jnp.asarray(mask).astype(bool)
    if positions is None:
        positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    return tokens, jnp.asarray(positions, jnp.int32), mask


def jit_forward(model, tokens, positions=None, mask=None):
    """model(tokens, ...) under one cached jit (tests call it many times)."""
    global _FWD, _LPS
    from flax import nnx

    if _FWD is None:
        _FWD, _LPS = _jitted()
    graphdef, state = nnx.split(model)
    return _FWD(graphdef, state, *_defaults(tokens, positions, mask))


def jit_logprobs(model, tokens, positions=None, mask=None, temperature=1.0, chunk=None):
    global _FWD, _LPS
    from flax import nnx

    if _FWD is None:
        _FWD, _LPS = _jitted()
    graphdef, state = nnx.split(model)
    return _LPS(graphdef, state, *_defaults(tokens, positions, mask), float(temperature), chunk)


# Tiny configs of the newer families: every feature switched on and exercised by 24-token
# inputs (sliding windows of 8, soft-caps small enough that tanh bends, linear RoPE scaling on
# Gemma 3's global layers with its own local base, dense + MoE layers mixed in Qwen3-MoE).
FAMILIES = ("qwen3", "mistral", "gemma2", "gemma3_text", "qwen3_moe", "mixtral")


def build_family_checkpoint(path, family: str, seed: int = 0):
    """Builds a tiny random transformers model of `family` (perturbed like
    `build_hf_checkpoint`), saves it to `path`; returns the torch model."""
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    hf = dict(TINY_HF, head_dim=16)
    if family == "qwen3":
        model = tf.Qwen3ForCausalLM(tf.Qwen3Config(**hf, tie_word_embeddings=False))
    elif family == "mistral":
        model = tf.MistralForCausalLM(tf.MistralConfig(**hf, sliding_window=8))
    elif family == "gemma2":
        model = tf.Gemma2ForCausalLM(tf.Gemma2Config(
            **hf, query_pre_attn_scalar=24, sliding_window=8, attn_logit_softcapping=0.5,
            final_logit_softcapping=1.5, attn_implementation="eager"))
    elif family == "gemma3_text":
        hf["num_hidden_layers"] = 3
        model = tf.Gemma3ForCausalLM(tf.Gemma3TextConfig(
            **hf, query_pre_attn_scalar=24, sliding_window=8,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 4.0,
                                                "rope_theta": 100000.0},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 1000.0}},
            attn_implementation="eager"))
    elif family == "qwen3_moe":
        model = tf.Qwen3MoeForCausalLM(tf.Qwen3MoeConfig(
            **hf, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
            norm_topk_prob=True, mlp_only_layers=[1]))
    elif family == "mixtral":
        hf.pop("head_dim")
        model = tf.MixtralForCausalLM(tf.MixtralConfig(**hf, num_local_experts=4,
                                                       num_experts_per_tok=2))
    else:
        raise ValueError(family)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith("gate.weight") or "router" in name:
                p.copy_(0.5 * torch.randn_like(p))  # routing that differs between tokens
            else:
                p.copy_(0.08 * torch.randn_like(p))
    model.eval()
    model.save_pretrained(str(path))
    return model


# Each family's chat template in miniature (its turn markers and end-of-turn token).
CHAT_TEMPLATES = {
    "chatml": dict(
        specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>"), eos="<|endoftext|>", bos=None,
        template="{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
                 "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}"
                 "{{ '<|im_start|>assistant\\n' }}{% endif %}"),
    "gemma": dict(
        specials=("<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"), eos="<eos>",
        bos="<bos>",
        template="{{ bos_token }}{% for m in messages %}{% set role = 'model' if m['role'] == "
                 "'assistant' else m['role'] %}{{ '<start_of_turn>' + role + '\\n' + "
                 "m['content'] + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}"
                 "{{ '<start_of_turn>model\\n' }}{% endif %}"),
    "mistral": dict(
        specials=("<unk>", "<s>", "</s>", "[INST]", "[/INST]"), eos="</s>", bos="<s>",
        template="{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
                 "{{ '[INST] ' + m['content'] + ' [/INST]' }}{% else %}{{ m['content'] + "
                 "eos_token }}{% endif %}{% endfor %}"),
}
FAMILY_TEMPLATE = {"qwen3": "chatml", "qwen3_moe": "chatml", "gemma2": "gemma",
                   "gemma3_text": "gemma", "mistral": "mistral", "mixtral": "mistral"}


def tiny_family_config(family: str, vocab_size: int) -> ModelConfig:
    """A small random `ModelConfig` of `family` (all its features on) for end-to-end runs."""
    base = dict(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_layers=2,
                num_heads=4, num_kv_heads=2, head_dim=8, max_position_embeddings=1024,
                architecture=family)
    gemma = dict(norm_unit_offset=True, sandwich_norms=True, scale_embeddings=True,
                 hidden_act="gelu_pytorch_tanh", query_pre_attn_scalar=8, sliding_window=16,
                 layer_types=("sliding_attention", "full_attention"), tie_word_embeddings=True)
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
               router_aux_loss_coef=0.01)
    extra = {"qwen3": dict(qk_norm=True),
             "mistral": dict(sliding_window=16),
             "gemma2": dict(gemma, attn_logit_softcapping=20.0, final_logit_softcapping=10.0),
             "gemma3_text": dict(gemma, qk_norm=True, local_rope_theta=1000.0),
             "qwen3_moe": dict(moe, qk_norm=True, norm_topk_prob=True),
             "mixtral": dict(moe, norm_topk_prob=True, intermediate_size=32)}[family]
    return ModelConfig(**{**base, **extra})


def build_family_run_checkpoint(path, family: str, seed: int = 0) -> str:
    """A tiny "user checkpoint" of `family` (no torch): a BPE tokenizer trained offline with the
    family's chat template in miniature, and a random model saved by rlvr.models."""
    import json
    import os

    from flax import nnx
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from rlvr.models import Transformer, save_pretrained
    from rlvr.testing import default_corpus

    t = CHAT_TEMPLATES[FAMILY_TEMPLATE[family]]
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.train_from_iterator(default_corpus(), trainers.BpeTrainer(
        vocab_size=1024, special_tokens=list(t["specials"]), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    named = {"eos_token": t["eos"], "pad_token": t["specials"][0]}
    if t["bos"]:
        named["bos_token"] = t["bos"]
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, **named, additional_special_tokens=[
        s for s in t["specials"] if s not in named.values()])
    tok.chat_template = t["template"]
    os.makedirs(path, exist_ok=True)
    tok.save_pretrained(str(path))
    save_pretrained(Transformer(tiny_family_config(family, len(tok)), rngs=nnx.Rngs(seed)),
                    str(path))
    eos = tok.convert_tokens_to_ids(t["eos"])
    with open(os.path.join(str(path), "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": eos, "pad_token_id": tok.convert_tokens_to_ids(
            t["specials"][0])}, f)
    return str(path)
