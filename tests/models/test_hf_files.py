"""A damaged checkpoint folder is refused at load with its path: a truncated or corrupt
safetensors file, and a folder without tokenizer files (which transformers would load as an
empty tokenizer, failing much later)."""

import json
import os
import shutil

import pytest

from rlvr.models.tokenizer import HFTokenizer, load_tokenizer

from tests.models.helpers import tiny_config


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from flax import nnx

    from rlvr.models import Transformer, save_pretrained

    path = str(tmp_path_factory.mktemp("ckpt") / "model")
    save_pretrained(Transformer(tiny_config(), rngs=nnx.Rngs(0)), path)
    return path


def _copy(src, dst):
    shutil.copytree(src, dst)
    return str(dst), os.path.join(str(dst), "model.safetensors")


@pytest.mark.parametrize("keep", ["half", "5 bytes"])
def test_a_truncated_safetensors_file_is_named(checkpoint, tmp_path, keep):
    from rlvr.models import from_pretrained

    path, fn = _copy(checkpoint, tmp_path / "t")
    size = os.path.getsize(fn)
    with open(fn, "r+b") as f:
        f.truncate(size // 2 if keep == "half" else 5)
    with pytest.raises(ValueError) as e:
        from_pretrained(path)
    msg = str(e.value)
    assert fn in msg and "truncated or corrupt" in msg


def test_a_corrupt_safetensors_header_is_named(checkpoint, tmp_path):
    from rlvr.models import from_pretrained

    path, fn = _copy(checkpoint, tmp_path / "c")
    data = bytearray(open(fn, "rb").read())
    data[8:16] = b"\xff" * 8  # the JSON header starts with garbage
    open(fn, "wb").write(bytes(data))
    with pytest.raises(ValueError, match="truncated or corrupt") as e:
        from_pretrained(path)
    assert fn in str(e.value)
    assert from_pretrained(checkpoint).config.num_layers == 2  # the intact folder loads


def test_a_checkpoint_without_tokenizer_files_is_refused_naming_them(checkpoint):
    assert sorted(os.listdir(checkpoint)) == ["config.json", "model.safetensors"]
    for load in (HFTokenizer, load_tokenizer, lambda p: load_tokenizer({"kind": "hf", "path": p})):
        with pytest.raises(ValueError) as e:
            load(checkpoint)
        msg = str(e.value)
        assert checkpoint in msg and "no tokenizer files" in msg
        assert "tokenizer.json" in msg and "tokenizer_config.json" in msg and "vocab.json" in msg
        assert "config.json, model.safetensors" in msg  # what the folder holds instead


def test_a_tokenizer_with_a_one_token_vocabulary_is_refused(tmp_path):
    from tokenizers import Tokenizer as RawTokenizer, models
    from transformers import PreTrainedTokenizerFast

    raw = RawTokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>",
                            eos_token="<unk>").save_pretrained(str(tmp_path))
    assert json.load(open(tmp_path / "tokenizer.json"))["model"]["vocab"] == {"<unk>": 0}
    with pytest.raises(ValueError, match="vocabulary of 1 token") as e:
        HFTokenizer(str(tmp_path))
    assert str(tmp_path) in str(e.value)


def test_truncated_or_missing_adapter_file_is_named(tmp_path):
    from flax import nnx

    from rlvr.models import lora as L
    from rlvr.models.transformer import Transformer
    from tests.algorithms.helpers import tiny_config

    def adapted():
        m = Transformer(tiny_config(), rngs=nnx.Rngs(0))
        L.apply_lora(m, L.LoRAConfig(rank=2, alpha=4.0, targets=("q_proj", "v_proj")))
        return m

    folder = tmp_path / "adapters"
    L.save_adapters(adapted(), str(folder), base_model_name_or_path="base")
    L.load_adapters(adapted(), str(folder))  # the intact file loads
    f = folder / "adapter_model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"adapter_model.safetensors .*truncated or corrupt"):
        L.load_adapters(adapted(), str(folder))
    f.unlink()
    with pytest.raises(ValueError, match=r"no adapter_model.safetensors"):
        L.load_adapters(adapted(), str(folder))
