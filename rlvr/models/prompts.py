"""How a task's prompt becomes the token ids the policy reads, and which ids end its answer.

One `PromptRenderer` serves every engine (single-turn samples, multi-turn episode starts, SFT
demonstrations), so a prompt is tokenised the same way for sampling, training and evaluation:

  * plain (`chat_template=False`): `[bos] + encode(prompt + suffix)`; the bos is left out for a
    Hugging Face tokenizer that has none (Qwen's). The character tokenizer always has one, so a
    char run reads exactly `[bos] + encode(prompt)`.
  * chat (`chat_template=True`, Hugging Face tokenizers only): the tokenizer's own chat template
    renders `[system] + user(prompt + suffix)` with the assistant turn opened
    (`add_generation_prompt=True`).

`suffix` is "\\n" + `instruction` when an instruction is set (e.g. "Put your final answer within
\\boxed{}."), else empty.

Stop tokens (`stop_ids`): the tokenizer's eos and, with a chat template, the template's
end-of-turn token (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>` ...), found by rendering a
one-turn conversation and reading the first token after the assistant's text, plus the ids a
`generation_config.json` in the tokenizer's folder lists as eos. A demonstration ends with
`end_id`: the end-of-turn token under a chat template, else eos.
"""

from __future__ import annotations

import json
import os

_SENTINEL = "RLVRSENTINELANSWER"


def end_of_turn_ids(hf_tokenizer) -> tuple[int, ...]:
    """The special token(s) a chat template writes right after an assistant message (empty when
    the template ends a turn with plain text or renders no assistant turn)."""
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": _SENTINEL}]
    try:
        text = hf_tokenizer.apply_chat_template(messages, tokenize=False)
    except Exception:  # noqa: BLE001 — a template that refuses this conversation has no answer
        return ()
    at = text.rfind(_SENTINEL)
    if at < 0:
        return ()
    tail = hf_tokenizer.encode(text[at + len(_SENTINEL):], add_special_tokens=False)
    special = set(hf_tokenizer.all_special_ids) | {
        i for i, t in getattr(hf_tokenizer, "added_tokens_decoder", {}).items()
        if getattr(t, "special", False)}
    return (int(tail[0]),) if tail and tail[0] in special else ()


def generation_config_eos(path: str) -> tuple[int, ...]:
    """eos ids listed by `generation_config.json` in `path` (none when there is no such file)."""
    fn = os.path.join(path, "generation_config.json")
    if not path or not os.path.exists(fn):
        return ()
    with open(fn) as f:
        eos = json.load(f).get("eos_token_id")
    if eos is None:
        return ()
    return tuple(int(e) for e in (eos if isinstance(eos, list) else [eos]))


class PromptRenderer:
    """Token ids of a prompt, and the stop / end ids of an answer (module docstring).

    Args:
      tokenizer: an `rlvr.models.tokenizer` tokenizer (CharTokenizer or HFTokenizer).
      chat_template: render with the tokenizer's chat template (HFTokenizer only).
      system_prompt: the system message under a chat template ("" = none).
      instruction: text appended to every prompt on its own line ("" = none).
    """

    def __init__(self, tokenizer, *, chat_template: bool = False, system_prompt: str = "",
                 instruction: str = ""):
        self.tokenizer = tokenizer
        self.chat_template = bool(chat_template)
        self.system_prompt, self.instruction = system_prompt, instruction
        hf = getattr(tokenizer, "tok", None)
        eot: tuple = ()
        if self.chat_template:
            if hf is None or not getattr(hf, "chat_template", None):
                raise ValueError("PromptRenderer: chat_template=True needs a Hugging Face "
                                 "tokenizer with a chat template (tokenizer_config.json "
                                 "'chat_template' or chat_template.jinja)")
            eot = end_of_turn_ids(hf)
        if system_prompt and not self.chat_template:
            raise ValueError("PromptRenderer: system_prompt needs chat_template=True")
        extra = generation_config_eos(getattr(tokenizer, "path", "")) if hf is not None else ()
        stops = [tokenizer.eos_id]
        for i in eot + extra:
            if i not in stops:
                stops.append(i)
        self.stop_ids = tuple(int(i) for i in stops)
        self.end_id = int(eot[0]) if eot else int(tokenizer.eos_id)
        self.add_bos = bool(getattr(tokenizer, "add_bos", True))

    def user_text(self, prompt: str) -> str:
        return prompt + ("\n" + self.instruction if self.instruction else "")

    def messages(self, prompt: str) -> list[dict]:
        out = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return out + [{"role": "user", "content": self.user_text(prompt)}]

    def encode(self, prompt: str) -> list[int]:
        """The prompt's token ids (module docstring)."""
        if self.chat_template:
            return self.tokenizer.apply_chat_template(self.messages(prompt),
                                                      add_generation_prompt=True)
        ids = list(self.tokenizer.encode(self.user_text(prompt)))
        return ([self.tokenizer.bos_id] if self.add_bos else []) + ids

    def describe(self) -> dict:
        """JSON description (written next to an exported model)."""
        return {"chat_template": self.chat_template, "system_prompt": self.system_prompt,
                "instruction": self.instruction, "add_bos": self.add_bos and not self.chat_template,
                "stop_ids": list(self.stop_ids), "end_id": self.end_id}


def renderer_from_config(tokenizer_config, tokenizer) -> PromptRenderer:
    """The renderer of `config.tokenizer` (chat template fields read only for kind 'hf')."""
    if tokenizer_config.kind != "hf":
        return PromptRenderer(tokenizer)
    chat = tokenizer_config.chat_template
    return PromptRenderer(tokenizer, chat_template=chat,
                          system_prompt=tokenizer_config.system_prompt if chat else "",
                          instruction=tokenizer_config.instruction)
