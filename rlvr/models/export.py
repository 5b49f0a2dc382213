"""Export a policy as a Hugging Face folder that transformers loads as it is.

`export_hf(model, tokenizer, renderer, path)` writes

    config.json, model.safetensors   `rlvr.models.save_pretrained` (the family's layout), with
                                     the tokenizer's bos / eos / pad ids
    generation_config.json           eos_token_id = every stop id of the run (eos and the chat
                                     template's end-of-turn token), pad_token_id
    tokenizer files                  a Hugging Face tokenizer: the run's own (with its chat
                                     template) or, for a character-level run, an equivalent
                                     `tokenizers` WordLevel tokenizer over the alphabet
                                     (`char_tokenizer_hf`): same ids, "<bos>" added in front
                                     like the run's prompts, decode joins characters
    rlvr_export.json                 how the run rendered prompts (plain / chat template, system
                                     prompt, instruction, stop ids) and where the weights came from

so `AutoModelForCausalLM.from_pretrained(path)` and `AutoTokenizer.from_pretrained(path)` give
the trained policy (same logits) and its tokenizer. The folder is written next to `path` and
renamed into place, so an interrupted export never leaves a half-written folder behind.
"""

from __future__ import annotations

import json
import os
import shutil
import time

from rlvr.models.hf import save_pretrained
from rlvr.models.tokenizer import CharTokenizer, HFTokenizer


def char_tokenizer_hf(tok: CharTokenizer):
    """A `transformers.PreTrainedTokenizerFast` with exactly the ids of `tok`: one token per
    character (WordLevel), "<bos>" prepended when encoding with special tokens, decoding joins
    the characters. An out-of-alphabet character raises, as in CharTokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {name: i for i, name in enumerate(CharTokenizer.SPECIALS)}
    vocab.update({ch: i + len(CharTokenizer.SPECIALS) for i, ch in enumerate(tok.alphabet)})
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))  # not in vocab: encoding raises
    raw.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    raw.decoder = decoders.Fuse()
    raw.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", CharTokenizer.BOS)])
    return PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", bos_token="<bos>",
                                   eos_token="<eos>")


def export_hf(model, tokenizer, renderer, path: str, *, metadata: dict | None = None) -> str:
    """Writes the Hugging Face folder of `model` (an `rlvr.models.Transformer`) with its
    tokenizer to `path` (module docstring); returns `path`."""
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = f"{path}.tmp-{time.time_ns()}"
    save_pretrained(model, tmp)
    if isinstance(tokenizer, HFTokenizer):
        hf_tok = tokenizer.tok
        tok_info = {"kind": "hf", "source": tokenizer.path}
    elif isinstance(tokenizer, CharTokenizer):
        hf_tok = char_tokenizer_hf(tokenizer)
        tok_info = {"kind": "char", "alphabet": tokenizer.alphabet,
                    "note": "character-level tokenizer as a WordLevel tokenizers model: one id "
                            "per character, <pad>=0 <bos>=1 <eos>=2; encoding adds <bos> in front "
                            "as the run's prompts had. AutoTokenizer loads it as it is for Llama "
                            "models (the char runs' architecture); for a qwen2 model transformers "
                            "substitutes its Qwen2 BPE class: load it with "
                            "PreTrainedTokenizerFast.from_pretrained instead"}
    else:
        raise ValueError(f"export_hf: cannot export a tokenizer of type {type(tokenizer).__name__}")
    hf_tok.save_pretrained(tmp)
    ids = {"bos_token_id": tokenizer.bos_id if getattr(tokenizer, "add_bos", True) else None,
           "eos_token_id": tokenizer.eos_id, "pad_token_id": tokenizer.pad_id}
    cfg_path = os.path.join(tmp, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg.update({k: v for k, v in ids.items() if v is not None})
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    gen = {"eos_token_id": list(renderer.stop_ids), "pad_token_id": tokenizer.pad_id}
    if ids["bos_token_id"] is not None:
        gen["bos_token_id"] = ids["bos_token_id"]
    with open(os.path.join(tmp, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
    with open(os.path.join(tmp, "rlvr_export.json"), "w") as f:
        json.dump({"tokenizer": tok_info, "prompt": renderer.describe(), **(metadata or {})}, f,
                  indent=2)
    if os.path.exists(path):
        old = f"{path}.old-{time.time_ns()}"
        os.rename(path, old)
        os.rename(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, path)
    return path
