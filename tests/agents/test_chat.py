"""Rendering with the tool chat template: assistant-token masks and per-turn appends."""
import json

import pytest

from rlvr.agents import chat, kv_tools
from rlvr.agents.trajectories import load_trajectories
from rlvr.agents import trajectories

SHIPPED = trajectories.__file__.replace("trajectories.py", "data/kv_trajectories.jsonl")


def _conv():
    t = load_trajectories(SHIPPED)[0]
    return list(t.messages), list(t.tools)


def test_assistant_mask_matches_template_text_token_by_token(chat_tokenizer):
    tok = chat_tokenizer
    messages, tools = _conv()
    r = chat.render_with_mask(tok, messages, tools)
    text = tok.apply_chat_template(chat.normalize_messages(messages), tools=tools, tokenize=False)
    assert tok.decode(r.ids) == text
    assistants = [m for m in messages if m["role"] == "assistant"]
    assert len(r.turn_spans) == len(assistants)
    eot = chat.end_of_turn_id(tok)
    for (a, b), m in zip(r.turn_spans, assistants):
        assert r.ids[b - 1] == eot
        gen = tok.decode(r.ids[a:b - 1])
        if m.get("tool_calls"):
            f = m["tool_calls"][0]["function"]
            assert gen == ('<tool_call>\n{"name": "' + f["name"] + '", "arguments": '
                           + json.dumps(f["arguments"]) + '}\n</tool_call>')
        else:
            assert gen == m["content"]
    # every token outside the spans is template / prompt / tool text: mask 0
    inside = set(i for a, b in r.turn_spans for i in range(a, b))
    assert all(r.assistant_mask[i] == (1 if i in inside else 0) for i in range(len(r.ids)))
    assert tok.decode(r.ids[r.assistant_mask == 0]).count("<tool_response>") == 3


def test_incremental_appends_are_render_differences(chat_tokenizer):
    tok = chat_tokenizer
    messages, tools = _conv()
    inc = chat.IncrementalRenderer(tok, tools)
    ids = inc.start(messages[:2])
    j = 2
    while j < len(messages):
        k = j + 1
        while k < len(messages) and messages[k]["role"] == "tool":
            k += 1
        full = chat.render_ids(tok, messages[:k], tools, add_generation_prompt=True)
        head = chat.render_ids(tok, messages[:j], tools, add_generation_prompt=True)
        upto = chat.render_ids(tok, messages[:j + 1], tools, add_generation_prompt=False)
        eot = chat.end_of_turn_id(tok)
        gen = upto[len(head):]
        gen = gen[:gen.index(eot) + 1]
        ids = ids + gen + inc.extend(gen, messages[j:k])
        assert ids == full
        j = k


def test_template_that_rewrites_history_is_refused(chat_tokenizer):
    tok = chat_tokenizer
    old = tok.chat_template
    # a template that shows only the last message: not prefix-preserving
    tok.chat_template = ("{{ messages[-1]['role'] + ': ' + (messages[-1]['content'] or '') }}"
                         "<|im_end|>{% if add_generation_prompt %}assistant:{% endif %}")
    try:
        messages, tools = _conv()
        with pytest.raises(chat.TemplatePrefixError, match="not a prefix"):
            chat.render_with_mask(tok, messages, tools)
    finally:
        tok.chat_template = old
