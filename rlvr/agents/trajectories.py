"""Agent trajectories from a file: JSONL or Parquet with OpenAI-style messages.

Each record (one JSONL line, or one Parquet row with the same columns) has
  * `messages`: [{"role": "system"|"user"|"assistant"|"tool", "content": ..., "tool_calls": [...]}]
    with assistant `tool_calls` items {"id"?, "type": "function", "function": {"name",
    "arguments" (JSON string or object)}} and the results as `tool` messages, in call order;
  * optional `tools` (an OpenAI-style tools list) and `snapshot` (the task's environment
    snapshot the recorded calls start from).
Parquet columns holding nested values may be stored as JSON strings.

`load_trajectories` returns `Trajectory` records; a bad record raises `TrajectoryFileError`
naming the file and line (row). `replay` re-executes the recorded calls from the snapshot and
compares each result with the recorded `tool` message; `pivots` turns every assistant turn of a
consistent trajectory into a `Pivot` (candidate state for PivotRL-style local rollouts, and an
SFT target). Host-side code.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from typing import Any, Mapping, Optional, Sequence

from rlvr.agents.chat import normalize_messages
from rlvr.agents.tools import ToolCall, ToolEnvironment

ROLES = ("system", "user", "assistant", "tool")


class TrajectoryFileError(ValueError):
    """A record of a trajectories file is malformed; the message names file and line."""


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """One recorded conversation: `record` (1-based line / row number), normalized `messages`
    (tool-call arguments as dicts), `tools` (list or None), `snapshot` (dict or None)."""
    record: int
    messages: tuple[Mapping[str, Any], ...]
    tools: Optional[tuple[Mapping[str, Any], ...]]
    snapshot: Optional[Mapping[str, Any]]


@dataclasses.dataclass(frozen=True)
class ReplayMismatch:
    """A recorded tool result that replay does not reproduce (record + assistant turn)."""
    record: int
    turn: int               # index of the assistant message in `messages`
    call: str
    recorded: str
    replayed: str


@dataclasses.dataclass(frozen=True)
class Pivot:
    """An assistant turn of a consistent trajectory: the conversation `prefix` before it, the
    environment `state` at that point (rebuilt by replay), and the recorded `target` message."""
    record: int
    turn: int
    prefix: tuple[Mapping[str, Any], ...]
    state: Mapping[str, Any]
    target: Mapping[str, Any]


def _maybe_json(value, what, where):
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise TrajectoryFileError(f"{where}: {what} is a string but not valid JSON: {e}")
    if hasattr(value, "tolist"):
        value = value.tolist()
    return value


def parse_record(obj: Any, where: str, record: int) -> Trajectory:
    """Validates one record (see module docstring) into a Trajectory."""
    if not isinstance(obj, Mapping):
        raise TrajectoryFileError(f"{where}: a record must be a JSON object")
    if "messages" not in obj:
        raise TrajectoryFileError(f"{where}: missing field 'messages'")
    messages = _maybe_json(obj["messages"], "messages", where)
    if not isinstance(messages, list) or not messages:
        raise TrajectoryFileError(f"{where}: messages must be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or m.get("role") not in ROLES:
            raise TrajectoryFileError(f"{where}: messages[{i}].role must be one of "
                                      f"{', '.join(ROLES)}")
        if m.get("tool_calls"):
            if m["role"] != "assistant":
                raise TrajectoryFileError(f"{where}: messages[{i}] has tool_calls but role "
                                          f"{m['role']!r}")
            for c in m["tool_calls"]:
                f = c.get("function", c) if isinstance(c, Mapping) else None
                if not isinstance(f, Mapping) or not isinstance(f.get("name"), str):
                    raise TrajectoryFileError(f"{where}: messages[{i}].tool_calls items need "
                                              f"function.name")
    try:
        messages = normalize_messages(messages)
    except json.JSONDecodeError as e:
        raise TrajectoryFileError(f"{where}: tool call arguments are not valid JSON: {e}")
    tools = _maybe_json(obj.get("tools"), "tools", where)
    if tools is not None and not isinstance(tools, list):
        raise TrajectoryFileError(f"{where}: tools must be a list")
    snapshot = _maybe_json(obj.get("snapshot"), "snapshot", where)
    if snapshot is not None and not isinstance(snapshot, Mapping):
        raise TrajectoryFileError(f"{where}: snapshot must be an object")
    return Trajectory(record, tuple(messages), tuple(tools) if tools else None,
                      dict(snapshot) if snapshot is not None else None)


def load_trajectories(path: str) -> list[Trajectory]:
    """Reads a .jsonl or .parquet trajectories file (module docstring)."""
    if not os.path.exists(path):
        raise TrajectoryFileError(f"trajectories file {path!r} does not exist")
    out = []
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq
        rows = pq.read_table(path).to_pylist()
        for i, row in enumerate(rows, 1):
            out.append(parse_record(row, f"{path}: row {i}", i))
    elif path.endswith(".jsonl"):
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise TrajectoryFileError(f"{path}: line {i}: not valid JSON: {e}")
                out.append(parse_record(obj, f"{path}: line {i}", i))
    else:
        raise TrajectoryFileError(f"trajectories file {path!r}: the name must end in .jsonl "
                                  f"or .parquet")
    return out


def _tool_call(c: Mapping[str, Any]) -> ToolCall:
    f = c.get("function", c)
    return ToolCall(f["name"], f.get("arguments") or {})


def replay(traj: Trajectory, env: ToolEnvironment
           ) -> tuple[Optional[ReplayMismatch], list[Mapping[str, Any]]]:
    """Replays the recorded calls from `env.reset(traj.snapshot)`. Returns (first mismatch or
    None, the state before each message) — states[j] is the state when message j is produced."""
    state = env.reset(traj.snapshot or {})
    states: list[Mapping[str, Any]] = []
    pending: list[tuple[int, ToolCall, str]] = []
    for j, m in enumerate(traj.messages):
        states.append(copy.deepcopy(state))
        if m["role"] == "assistant":
            pending = []
            for c in m.get("tool_calls") or ():
                call = _tool_call(c)
                pending.append((j, call, env.toolset.execute(state, call).content))
        elif m["role"] == "tool":
            if not pending:
                return ReplayMismatch(traj.record, j, "", str(m.get("content")),
                                      "<no pending tool call>"), states
            turn, call, got = pending.pop(0)
            recorded = str(m.get("content", ""))
            if recorded.strip() != got.strip():
                return ReplayMismatch(traj.record, turn, f"{call.name}({json.dumps(dict(call.arguments))})",
                                      recorded, got), states
    return None, states


def pivots(trajs: Sequence[Trajectory], env: ToolEnvironment
           ) -> tuple[list[Pivot], list[ReplayMismatch]]:
    """Every assistant turn of every trajectory whose replay matches becomes a Pivot; the
    mismatching trajectories are excluded and reported."""
    out, bad = [], []
    for t in trajs:
        mismatch, states = replay(t, env)
        if mismatch is not None:
            bad.append(mismatch)
            continue
        for j, m in enumerate(t.messages):
            if m["role"] == "assistant":
                out.append(Pivot(t.record, j, tuple(t.messages[:j]), states[j], m))
    return out, bad
