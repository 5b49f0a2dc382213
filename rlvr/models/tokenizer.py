"""Tokenizers behind one interface (host side; never inside jit).

`CharTokenizer` serves the procedural tasks (ids: <pad>=0, <bos>=1, <eos>=2, then one id per
alphabet character); `HFTokenizer` wraps `transformers.AutoTokenizer` loaded from a local
folder; `load_tokenizer(spec)` picks one from a spec string or dict.
"""

from __future__ import annotations

import os
from typing import Protocol, Sequence, runtime_checkable


@runtime_checkable
class Tokenizer(Protocol):
    vocab_size: int
    pad_id: int
    eos_id: int
    bos_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class CharTokenizer:
    """Character-level tokenizer over a fixed alphabet.

    encode never adds specials (add them explicitly: `[tok.bos_id] + tok.encode(s)`);
    decode drops pad/bos and stops at the first eos.
    """

    PAD, BOS, EOS = 0, 1, 2
    SPECIALS = ("<pad>", "<bos>", "<eos>")

    def __init__(self, alphabet: str):
        if not isinstance(alphabet, str) or not alphabet:
            raise ValueError("CharTokenizer.alphabet must be a non-empty string")
        if len(set(alphabet)) != len(alphabet):
            dup = next(ch for i, ch in enumerate(alphabet) if ch in alphabet[:i])
            raise ValueError(f"CharTokenizer.alphabet repeats the character {dup!r}")
        self.alphabet = alphabet
        self._to_id = {ch: i + len(self.SPECIALS) for i, ch in enumerate(alphabet)}
        self.vocab_size = len(alphabet) + len(self.SPECIALS)
        self.pad_id, self.bos_id, self.eos_id = self.PAD, self.BOS, self.EOS

    def encode(self, text: str) -> list[int]:
        out = []
        for ch in text:
            i = self._to_id.get(ch)
            if i is None:
                raise ValueError(f"CharTokenizer: character {ch!r} is not in the alphabet")
            out.append(i)
        return out

    def decode(self, ids: Sequence[int]) -> str:
        chars = []
        for i in ids:
            i = int(i)
            if i == self.EOS:
                break
            if i in (self.PAD, self.BOS):
                continue
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"CharTokenizer: id {i} is outside [0, {self.vocab_size})")
            chars.append(self.alphabet[i - len(self.SPECIALS)])
        return "".join(chars)


# Files that hold a Hugging Face tokenizer's vocabulary (one is needed): the fast tokenizer's
# tokenizer.json, or a slow tokenizer's vocabulary (BPE vocab.json + merges.txt, WordPiece
# vocab.txt, SentencePiece models, Mistral's tekken.json).
VOCABULARY_FILES = ("tokenizer.json", "vocab.json", "vocab.txt", "tokenizer.model", "spiece.model",
                    "sentencepiece.bpe.model", "tekken.json")


def _check_tokenizer_folder(path: str) -> None:
    """Refuses a folder with no tokenizer vocabulary (e.g. a checkpoint copied without its
    tokenizer files), which transformers would load as an empty tokenizer."""
    present = sorted(os.listdir(path))
    if any(f in present for f in VOCABULARY_FILES):
        return
    shown = ", ".join(present[:20]) + (f", ... ({len(present)} files)" if len(present) > 20 else "")
    raise ValueError(
        f"tokenizer folder {path!r} has no tokenizer files: it needs tokenizer.json (with "
        f"tokenizer_config.json) or a vocabulary ({', '.join(VOCABULARY_FILES[1:])}); it holds "
        f"{shown or 'nothing'}. Copy the checkpoint's tokenizer files into it, or point to the "
        f"folder that has them")


class HFTokenizer:
    """`transformers.AutoTokenizer` from a local folder, exposed through `Tokenizer`.

    A tokenizer without a bos token (Qwen's) reports its eos as `bos_id` and `add_bos = False`
    (prompts get no leading bos, `rlvr.models.prompts`); without a pad token, pad is eos. A
    folder without tokenizer files (`VOCABULARY_FILES`) or whose tokenizer has fewer than two
    tokens is refused with ValueError naming the folder.
    """

    def __init__(self, path: str):
        if not os.path.isdir(path):
            raise ValueError(f"HFTokenizer path {path!r} is not a local folder")
        _check_tokenizer_folder(path)
        from transformers import AutoTokenizer

        self.path = path
        self.tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.vocab_size = len(self.tok)
        if self.vocab_size < 2:
            raise ValueError(f"tokenizer at {path!r} has a vocabulary of {self.vocab_size} "
                             f"token(s); its tokenizer files ({', '.join(VOCABULARY_FILES)}) are "
                             f"empty or unreadable")
        eos = self.tok.eos_token_id
        pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else eos
        bos = self.tok.bos_token_id if self.tok.bos_token_id is not None else eos
        if eos is None:
            raise ValueError(f"tokenizer at {path!r} defines no eos_token")
        self.pad_id, self.eos_id, self.bos_id = int(pad), int(eos), int(bos)
        self.add_bos = self.tok.bos_token_id is not None

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=True)

    def apply_chat_template(self, messages, add_generation_prompt=True) -> list[int]:
        out = self.tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                           tokenize=True)
        if isinstance(out, dict) or hasattr(out, "keys"):
            out = out["input_ids"]
        return list(out)


def load_tokenizer(spec) -> Tokenizer:
    """spec: a Tokenizer (returned as is); "char:<alphabet>"; {"kind": "char", "alphabet": ...};
    {"kind": "hf", "path": ...}; or a path to a local HF tokenizer folder."""
    if isinstance(spec, (CharTokenizer, HFTokenizer)):
        return spec
    if isinstance(spec, dict):
        kind = spec.get("kind")
        if kind == "char":
            return CharTokenizer(spec["alphabet"])
        if kind == "hf":
            return HFTokenizer(spec["path"])
        raise ValueError(f"tokenizer spec kind must be 'char' or 'hf', got {kind!r}")
    if isinstance(spec, str):
        if spec.startswith("char:"):
            return CharTokenizer(spec[len("char:"):])
        if os.path.isdir(spec):
            return HFTokenizer(spec)
        raise ValueError(f"tokenizer spec {spec!r} is neither 'char:<alphabet>' nor a local folder")
    raise ValueError(f"tokenizer spec must be a str, dict or Tokenizer, got {type(spec).__name__}")
