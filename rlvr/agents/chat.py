"""Conversations rendered by a checkpoint's chat template, per-turn token diffs and
assistant-token masks.

The conversation (system, user task, assistant turns with tool calls, `tool` messages) is
rendered by `tokenizer.apply_chat_template(messages, tools=tools, ...)`. A multi-turn rollout
keeps its KV cache across turns, so each turn may only *append* tokens: for successive renders
r_k = render(messages[:n_k], add_generation_prompt=True) we require r_k to be a token prefix of
r_{k+1}, and the tokens appended at turn k+1 are exactly r_{k+1}[len(r_k):]. A template that
violates this (e.g. one that drops earlier reasoning) is refused with `TemplatePrefixError`.

Loss mask: for the assistant message m_j following prefix P,
    span_j = render(P + [m_j])[len(render(P, add_generation_prompt=True)):]
and the tokens the policy generated are span_j up to and including the first end-of-turn token
(what follows it, e.g. a newline, is template text). mask[t] = 1 iff token t is such a token.
Host-side code.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any, Mapping, Sequence

import numpy as np


class TemplatePrefixError(ValueError):
    """The chat template's render of a conversation is not a token prefix of the render of its
    continuation, so per-turn token appends (KV reuse) are impossible."""


def normalize_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict]:
    """A copy of OpenAI-style messages with every tool call's `arguments` decoded to a dict (the
    form Qwen- and Llama-style templates serialize with `tojson`)."""
    out = []
    for m in messages:
        m = copy.deepcopy(dict(m))
        if m.get("content") is None:
            m["content"] = ""
        calls = m.get("tool_calls")
        if calls:
            norm = []
            for c in calls:
                c = dict(c)
                f = dict(c.get("function", c))
                if isinstance(f.get("arguments"), str):
                    f["arguments"] = json.loads(f["arguments"])
                c["function"] = f
                c.setdefault("type", "function")
                norm.append(c)
            m["tool_calls"] = norm
        out.append(m)
    return out


def render_ids(tokenizer, messages, tools=None, *, add_generation_prompt: bool) -> list[int]:
    """Token ids of the template's render (no extra special tokens added)."""
    text = tokenizer.apply_chat_template(normalize_messages(messages), tools=tools or None,
                                         tokenize=False,
                                         add_generation_prompt=add_generation_prompt)
    return list(tokenizer.encode(text, add_special_tokens=False))


def end_of_turn_id(tokenizer) -> int:
    """The end-of-turn token: <|im_end|> (Qwen), <|eot_id|> (Llama 3), else eos."""
    vocab = tokenizer.get_vocab()
    for t in ("<|im_end|>", "<|eot_id|>", "<|eom_id|>"):
        if t in vocab:
            return vocab[t]
    if tokenizer.eos_token_id is None:
        raise ValueError("chat template: the tokenizer has no end-of-turn or eos token")
    return int(tokenizer.eos_token_id)


def appended_tokens(prev: Sequence[int], new: Sequence[int], *, where: str = "") -> list[int]:
    """new[len(prev):], after checking that `prev` is a prefix of `new` (TemplatePrefixError
    names the first differing position)."""
    n = len(prev)
    if len(new) < n or list(new[:n]) != list(prev):
        k = next((i for i, (a, b) in enumerate(zip(prev, new)) if a != b), min(n, len(new)))
        raise TemplatePrefixError(
            f"chat template{(' (' + where + ')') if where else ''}: the render of the "
            f"conversation so far is not a prefix of the render after the next turn (first "
            f"difference at token {k}); per-turn token appends are impossible with this "
            f"template")
    return list(new[n:])


@dataclasses.dataclass(frozen=True)
class RenderedConversation:
    """A rendered conversation: `ids` [T] and `assistant_mask` [T] (1 on tokens the policy
    generated in assistant turns), `turn_spans` ((start, end) of each assistant turn's generated
    tokens)."""
    ids: np.ndarray
    assistant_mask: np.ndarray
    turn_spans: tuple[tuple[int, int], ...]


def render_with_mask(tokenizer, messages, tools=None) -> RenderedConversation:
    """Renders `messages` and marks the assistant-generated tokens (module docstring), checking
    the prefix property at every assistant turn."""
    messages = normalize_messages(messages)
    eot = end_of_turn_id(tokenizer)
    full = render_ids(tokenizer, messages, tools, add_generation_prompt=False)
    mask = np.zeros(len(full), np.int32)
    spans = []
    for j, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        head = render_ids(tokenizer, messages[:j], tools, add_generation_prompt=True)
        upto = render_ids(tokenizer, messages[:j + 1], tools, add_generation_prompt=False)
        span = appended_tokens(head, upto, where=f"assistant message {j}")
        appended_tokens(upto, full, where=f"after assistant message {j}")
        n = span.index(eot) + 1 if eot in span else len(span)
        mask[len(head):len(head) + n] = 1
        spans.append((len(head), len(head) + n))
    return RenderedConversation(np.asarray(full, np.int32), mask, tuple(spans))


class IncrementalRenderer:
    """Per-turn token appends for a growing conversation (KV reuse across turns).

    `start(messages)` returns the prompt ids; after the policy's turn and the tool results,
    `extend(generated_ids, new_messages)` returns the tokens to append: the template's render of
    the assistant turn and tool messages beyond what the policy generated, checking both that
    the generated tokens are what the template renders for that turn and the prefix property.
    """

    def __init__(self, tokenizer, tools=None):
        self.tokenizer = tokenizer
        self.tools = tools
        self.messages: list[dict] = []
        self.ids: list[int] = []

    def start(self, messages) -> list[int]:
        self.messages = normalize_messages(messages)
        self.ids = render_ids(self.tokenizer, self.messages, self.tools, add_generation_prompt=True)
        return list(self.ids)

    def extend(self, generated: Sequence[int], new_messages) -> list[int]:
        """`generated`: the policy's tokens of the last turn (up to end-of-turn);
        `new_messages`: the assistant message those tokens parse to plus the tool messages.
        Returns the template tokens to append after `generated`."""
        messages = self.messages + normalize_messages(new_messages)
        new = render_ids(self.tokenizer, messages, self.tools, add_generation_prompt=True)
        tail = appended_tokens(self.ids, new, where=f"turn {len(self.messages)}")
        if list(tail[:len(generated)]) != list(generated):
            raise TemplatePrefixError(
                "chat template: the template's render of the assistant turn differs from the "
                "tokens the policy generated; per-turn token appends are impossible")
        self.messages, self.ids = messages, new
        return list(tail[len(generated):])
