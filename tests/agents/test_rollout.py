"""A tool-agent episode in the chat format: token stream by appends, masks, malformed calls."""
import numpy as np

from rlvr.agents import chat, kv_tools, trajectories
from rlvr.agents.rollout import run_episode, sft_examples
from rlvr.agents.trajectories import load_trajectories

SHIPPED = trajectories.__file__.replace("trajectories.py", "data/kv_trajectories.jsonl")


def _scripted(turns):
    it = iter(turns)
    return lambda ids: next(it)


def test_scripted_episode_equals_the_recorded_render_token_by_token(chat_tokenizer):
    tok = chat_tokenizer
    t = load_trajectories(SHIPPED)[2]
    ref = chat.render_with_mask(tok, list(t.messages), list(t.tools))
    turns = [list(ref.ids[a:b]) for a, b in ref.turn_spans]
    ep = run_episode(_scripted(turns), tok, kv_tools.ENVIRONMENT, t.snapshot,
                     t.messages[1]["content"])
    assert ep.success and ep.stop_reason == "answer" and ep.turns == 4
    assert ep.calls == 3 and ep.malformed == 0 and ep.rejected == 0
    np.testing.assert_array_equal(ep.ids, ref.ids)
    np.testing.assert_array_equal(ep.loss_mask, ref.assistant_mask)


def test_malformed_and_rejected_calls_are_observed_and_counted(chat_tokenizer):
    tok = chat_tokenizer
    t = load_trajectories(SHIPPED)[0]
    eot = chat.end_of_turn_id(tok)
    enc = lambda s: tok.encode(s, add_special_tokens=False) + [eot]
    turns = [enc("<tool_call>\n{bad json}\n</tool_call>"),
             enc('<tool_call>\n{"name": "get", "arguments": {"key": "zz"}}\n</tool_call>'),
             enc("I give up.")]
    ep = run_episode(_scripted(turns), tok, kv_tools.ENVIRONMENT, t.snapshot, "q")
    assert ep.malformed == 1 and ep.rejected == 1 and ep.calls == 1 and not ep.success
    tool_msgs = [m["content"] for m in ep.messages if m["role"] == "tool"]
    assert tool_msgs[0].startswith("error: malformed tool call")
    assert tool_msgs[1].startswith("error: invalid arguments for get")
    assert int(ep.loss_mask.sum()) == sum(len(x) for x in turns)
    assert tok.decode(ep.ids[ep.loss_mask == 1]) == tok.decode(sum(turns, []))


def test_sft_examples_mask_only_assistant_tokens(chat_tokenizer):
    ex = sft_examples(load_trajectories(SHIPPED)[:2], chat_tokenizer)
    assert len(ex) == 2
    for r in ex:
        assert 0 < r.assistant_mask.sum() < len(r.ids) / 2
