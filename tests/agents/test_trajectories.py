"""Trajectory files (JSONL / Parquet), replay check, pivots, the functional turn verifier."""
import json

import pytest

from rlvr.agents import kv_tools, trajectories
from rlvr.agents.tools import ToolCall, ToolSet, Tool
from rlvr.agents.trajectories import TrajectoryFileError, load_trajectories, pivots
from rlvr.agents.turn_verifier import verify_call

SHIPPED = trajectories.__file__.replace("trajectories.py", "data/kv_trajectories.jsonl")


def _records():
    with open(SHIPPED) as f:
        return [json.loads(line) for line in f]


def test_shipped_file_replays_and_every_assistant_turn_is_a_pivot():
    trajs = load_trajectories(SHIPPED)
    ps, bad = pivots(trajs, kv_tools.ENVIRONMENT)
    assert bad == []
    n_assistant = sum(m["role"] == "assistant" for t in trajs for m in t.messages)
    assert len(ps) == n_assistant == 6 * 4
    last = [p for p in ps if p.record == 1][-1]
    assert last.state["submitted"] is not None           # state rebuilt by replay
    first = [p for p in ps if p.record == 1][0]
    assert first.state["read"] == [] and first.prefix[-1]["role"] == "user"


def test_parquet_with_same_columns_loads_the_same(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    recs = _records()
    table = pa.table({k: [json.dumps(r[k]) for r in recs] for k in ("messages", "tools",
                                                                    "snapshot")})
    path = str(tmp_path / "t.parquet")
    pq.write_table(table, path)
    a, b = load_trajectories(path), load_trajectories(SHIPPED)
    assert [t.messages for t in a] == [t.messages for t in b]
    assert [t.snapshot for t in a] == [t.snapshot for t in b]


def test_replay_mismatch_is_reported_with_record_and_turn_and_excluded(tmp_path):
    recs = _records()
    recs[1]["messages"][3]["content"] = '{"key":"x","value":99}'   # first tool result edited
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ps, bad = pivots(load_trajectories(str(path)), kv_tools.ENVIRONMENT)
    assert len(bad) == 1 and bad[0].record == 2 and bad[0].turn == 2
    assert bad[0].recorded == '{"key":"x","value":99}'
    assert {p.record for p in ps} == {1, 3, 4, 5, 6}


@pytest.mark.parametrize("line,match", [
    ("{not json", "line 2: not valid JSON"),
    ('{"tools": []}', "line 2: missing field 'messages'"),
    ('{"messages": [{"role": "robot", "content": ""}]}', r"line 2: messages\[0\].role"),
    ('{"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "get", '
     '"arguments": "{bad"}}]}]}', "line 2: tool call arguments are not valid JSON"),
])
def test_bad_records_are_named_by_line(tmp_path, line, match):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(_records()[0]) + "\n" + line + "\n")
    with pytest.raises(TrajectoryFileError, match=match):
        load_trajectories(str(path))


TS = ToolSet((Tool("move", "", {"type": "object", "properties": {
    "x": {"type": "number"}, "n": {"type": "integer", "default": 1},
    "fast": {"type": "boolean", "default": False}}, "required": ["x"]}, lambda s, **a: "ok"),))


def test_functional_turn_verifier_equivalences_and_exact_ablation():
    ref = ToolCall("move", {"x": 0.5, "n": 1})
    same = ToolCall("move", {"fast": "false", "x": "0.5000000001"})   # coercion, default, tol
    assert verify_call(same, ref, TS).status == "pass"
    assert verify_call(same, ref, TS, mode="exact").status == "fail"
    assert verify_call(ToolCall("move", {"x": 0.6}), ref, TS).status == "fail"
    assert verify_call(ToolCall("stop", {"x": 0.5}), ref, TS).status == "fail"
    assert verify_call(None, ref, TS).status == "fail"
    assert verify_call(ToolCall("move", {"x": 9}), ref, TS,
                       predicate=lambda p, r: p.arguments["x"] > 1).status == "pass"


def test_turn_verifier_check_that_cannot_run_is_env_error():
    ref = ToolCall("move", {"x": 1})
    v = verify_call(ref, ref, TS, predicate=lambda p, r: 1 / 0)
    assert v.status == "env_error" and "ZeroDivisionError" in v.reason
    assert verify_call(ref, ToolCall("fly", {}), TS).status == "env_error"
    with pytest.raises(ValueError, match="mode must be one of functional, exact"):
        verify_call(ref, ref, TS, mode="fuzzy")


def test_verify_turn_scores_generated_text_against_a_pivot_target():
    from rlvr.agents.turn_verifier import verify_turn
    ps, _ = pivots(load_trajectories(SHIPPED)[:1], kv_tools.ENVIRONMENT)
    call_pivot, reply_pivot = ps[0], ps[-1]
    key = call_pivot.target["tool_calls"][0]["function"]["arguments"]["key"]
    other = "h" if key != "h" else "g"
    ts = kv_tools.TOOLSET
    good = '<tool_call>{"arguments": {"key": "%s"}, "name": "get"}</tool_call>' % key
    assert verify_turn(good, call_pivot.target, ts, "hermes").status == "pass"
    bad = '<tool_call>{"name": "get", "arguments": {"key": "%s"}}</tool_call>' % other
    assert verify_turn(bad, call_pivot.target, ts, "hermes").status == "fail"
    assert verify_turn(good + good, call_pivot.target, ts, "hermes").status == "fail"
    assert verify_turn("<tool_call>{x</tool_call>", call_pivot.target, ts, "hermes").status == "fail"
    assert verify_turn("done", reply_pivot.target, ts, "hermes").status == "env_error"
    same = lambda a, b: a.strip() == b.strip()
    assert verify_turn(reply_pivot.target["content"], reply_pivot.target, ts, "hermes",
                       answer_predicate=same).status == "pass"
