"""ModelConfig validation / HF round trip, and tokenizers."""

import numpy as np
import pytest

from rlvr.models import ModelConfig
from rlvr.models.tokenizer import CharTokenizer, HFTokenizer, Tokenizer, load_tokenizer
from tests.models.helpers import tiny_config


@pytest.mark.parametrize("field,value,match", [
    ("num_kv_heads", 3, "num_kv_heads"),
    ("hidden_size", 0, "ModelConfig.hidden_size"),
    ("dtype", "float16", "ModelConfig.dtype"),
    ("param_dtype", "int8", "ModelConfig.param_dtype"),
    ("architecture", "gpt2", "ModelConfig.architecture"),
    ("head_dim", 7, "ModelConfig.head_dim"),
    ("rope_scaling", {"rope_type": "yarn", "factor": 2.0}, "rope_scaling.rope_type"),
    ("rope_scaling", {"rope_type": "llama3", "factor": 2.0}, "rope_scaling.low_freq_factor"),
])
def test_bad_config_names_field(field, value, match):
    with pytest.raises(ValueError, match=match):
        tiny_config(**{field: value})


def test_hf_roundtrip_and_hash():
    cfg = tiny_config(architecture="llama", attention_bias=False, rope_theta=5e5,
                      rope_scaling={"rope_type": "linear", "factor": 2.0},
                      tie_word_embeddings=True, max_position_embeddings=64)
    back = ModelConfig.from_hf(cfg.to_hf())
    assert back == cfg
    assert hash(back) == hash(cfg)  # dict field does not break hashing (static jit arg)
    # transformers-4 style keys (rope_theta / rope_scaling with "type") are read too.
    legacy = dict(cfg.to_hf())
    del legacy["rope_parameters"]
    legacy.update(rope_theta=5e5, rope_scaling={"type": "linear", "factor": 2.0})
    assert ModelConfig.from_hf(legacy) == cfg
    with pytest.raises(ValueError, match="'hidden_size'"):
        ModelConfig.from_hf({k: v for k, v in cfg.to_hf().items() if k != "hidden_size"})


def test_transformers_reads_our_config():
    from transformers import AutoConfig, Qwen2Config

    cfg = tiny_config(rope_theta=1234.0)
    hf = AutoConfig.for_model(**cfg.to_hf())
    assert isinstance(hf, Qwen2Config)
    assert hf.num_key_value_heads == 2 and hf.rope_parameters["rope_theta"] == 1234.0


def test_char_tokenizer():
    tok = CharTokenizer("0123456789+=")
    assert isinstance(tok, Tokenizer)
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.vocab_size) == (0, 1, 2, 15)
    ids = tok.encode("12+3=15")
    assert ids == [4, 5, 13, 6, 14, 4, 8]
    assert tok.decode([1] + ids + [2, 7, 7]) == "12+3=15"  # bos dropped, stops at eos
    with pytest.raises(ValueError, match="'x'"):
        tok.encode("1x")
    with pytest.raises(ValueError, match="repeats"):
        CharTokenizer("aa")
    assert load_tokenizer("char:ab").encode("ba") == [4, 3]


def test_hf_tokenizer_local_folder(tmp_path):
    from tokenizers import Tokenizer as RawTokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "hello": 4, "world": 5, "1": 6, "+": 7}
    raw = RawTokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", bos_token="<s>",
                            eos_token="</s>", unk_token="<unk>").save_pretrained(str(tmp_path))
    tok = load_tokenizer(str(tmp_path))
    assert isinstance(tok, HFTokenizer) and isinstance(tok, Tokenizer)
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.vocab_size) == (0, 1, 2, 8)
    assert tok.encode("hello world 1 + 1") == [4, 5, 6, 7, 6]
    assert tok.decode([4, 5, 2]) == "hello world"
    with pytest.raises(ValueError, match="not a local folder"):
        HFTokenizer(str(tmp_path / "nope"))


def test_dtype_arguments_accept_jax_and_numpy_dtypes(tmp_path):
    import jax.numpy as jnp

    from rlvr.models import ModelConfig, Transformer, from_pretrained, save_pretrained

    kw = dict(vocab_size=16, hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2,
              num_kv_heads=2, head_dim=8, max_position_embeddings=16)
    by_name = ModelConfig(**kw, dtype="bfloat16", param_dtype="float32")
    by_dtype = ModelConfig(**kw, dtype=jnp.bfloat16, param_dtype=np.float32)
    assert by_dtype == by_name and by_dtype.dtype == "bfloat16"
    with pytest.raises(ValueError, match="ModelConfig.dtype must be one of"):
        ModelConfig(**kw, dtype=jnp.int8)
    save_pretrained(Transformer(ModelConfig(**kw), rngs=__import__("flax").nnx.Rngs(0)), str(tmp_path))
    model = from_pretrained(str(tmp_path), dtype=jnp.bfloat16)
    assert model.config.dtype == "bfloat16" and model.config.param_dtype == "bfloat16"
