"""Tools from functions + JSON schema, the kv tool environment, Hermes / Llama 3 parsers."""
import pytest

from rlvr.agents import kv_tools, parsers
from rlvr.agents.tools import Tool, ToolCall, ToolSet
from rlvr.envs import kv_store


def _state():
    s0 = kv_store.initial_state({"a": 3, "b": 4}, [["+", "a"], ["-", "b"]], 8)
    return kv_tools.reset(kv_store.make_task_snapshot(s0))


def test_toolset_from_openai_specs_executes_and_rejects_schema_violations():
    specs = kv_tools.TOOLSET.specs()
    ts = ToolSet.from_openai(specs, {t.name: t.fn for t in kv_tools.TOOLSET.tools})
    assert ts.names == ("get", "delete", "answer")
    st = _state()
    assert ts.execute(st, ToolCall("get", {"key": "a"})).content == '{"key":"a","value":3}'
    bad = ts.execute(st, ToolCall("answer", {"value": "x"}))
    assert not bad.ok and bad.error_kind == "schema" and st["submitted"] is None
    unknown = ts.execute(st, ToolCall("put", {}))
    assert not unknown.ok and unknown.error_kind == "unknown_tool" and "get" in unknown.content
    with pytest.raises(ValueError, match="no function given for tool 'get'"):
        ToolSet.from_openai(specs, {})


def test_tool_rejects_non_object_schema():
    with pytest.raises(ValueError, match="type 'object'"):
        Tool("f", "", {"type": "string"}, lambda s: 0)


def test_kv_tool_environment_outcome_checks_final_state():
    st = _state()
    kv_tools.TOOLSET.execute(st, ToolCall("answer", {"value": -1}))
    assert kv_tools.outcome(st)
    st = _state()
    kv_tools.TOOLSET.execute(st, ToolCall("delete", {"key": "b"}))
    kv_tools.TOOLSET.execute(st, ToolCall("answer", {"value": -1}))
    assert not kv_tools.outcome(st)          # a deleted register is a minefield event


def test_hermes_parser_calls_and_malformed_blocks():
    text = ('thinking<tool_call>\n{"name": "get", "arguments": {"key": "a"}}\n</tool_call>\n'
            '<tool_call>{"name": "get", "arguments": {bad}</tool_call><tool_call>{"name": "x"')
    turn = parsers.parse_hermes(text)
    assert turn.content == "thinking"
    assert turn.calls == (ToolCall("get", {"key": "a"}),)
    assert len(turn.errors) == 2
    assert "not valid JSON" in turn.errors[0].message and "unterminated" in turn.errors[1].message


def test_llama3_parser_json_form():
    turn = parsers.parse_llama3('<|python_tag|>{"name": "get", "parameters": {"key": "b"}}; '
                                '{"name": "answer", "parameters": {"value": 1}}')
    assert turn.calls == (ToolCall("get", {"key": "b"}), ToolCall("answer", {"value": 1}))
    assert parsers.parse_llama3("The answer is 1.").calls == ()
    assert parsers.parse_llama3('{"name": "get", "parameters": [1]}').errors


def test_format_detected_from_template_or_config():
    from rlvr.agents import qwen_tools_template
    assert parsers.format_for_template(qwen_tools_template()) == "hermes"
    assert parsers.format_for_template("{{ 'ipython' }}") == "llama3"
    assert parsers.format_for_template("", "llama3") == "llama3"
    with pytest.raises(ValueError, match="tool_call_format must be one of"):
        parsers.format_for_template("", "xml")
    with pytest.raises(ValueError, match="set it to one of"):
        parsers.format_for_template("{{ messages }}")


def test_malformed_calls_become_error_observations_not_drops():
    st = _state()
    turn = parsers.parse_hermes('<tool_call>{"name": "get", "arguments": {"key": "q"}}'
                                '</tool_call><tool_call>nope</tool_call>')
    outs = parsers.execute_turn(kv_tools.TOOLSET, st, turn)
    assert [o.error_kind for o in outs] == ["schema", "parse"]
    assert all(o.content.startswith("error:") for o in outs)


def test_shop_tool_environment_uses_the_checkout_transition():
    from rlvr.agents import shop_tools
    from rlvr.envs import shop

    s0 = shop.initial_state({"a": 2, "b": 5}, [["a", 3], ["b", 1]], 8)
    ts = shop_tools.TOOLSET

    def run(calls):
        st = shop_tools.reset(shop.make_task_snapshot(s0))
        outs = [ts.execute(st, ToolCall(n, a)) for n, a in calls]
        return st, outs

    good = [("get_price", {"item": "a"}), ("get_price", {"item": "b"}),
            ("add_to_cart", {"item": "a", "quantity": 3}),
            ("add_to_cart", {"item": "b", "quantity": 1}), ("pay", {"amount": 11})]
    st, outs = run(good)
    assert outs[0].content == '{"item":"a","price":2}' and shop_tools.outcome(st)
    assert [e["tool"] for e in st["events"]] == ["get", "get", "add", "add", "pay"]
    st, _ = run(good[:2] + [("add_to_cart", {"item": "a", "quantity": 2})] + good[3:])
    assert not shop_tools.outcome(st)                       # a wrong add is a minefield event
    st, outs = run([("get_price", {"item": "c"}), ("pay", {"amount": 11}),
                    ("pay", {"amount": 11})])
    assert outs[0].error_kind == "tool_error" and outs[2].error_kind == "tool_error"
    assert not shop_tools.outcome(st)
