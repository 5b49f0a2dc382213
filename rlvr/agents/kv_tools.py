"""The built-in key-value environment as a tool environment (tools `get`, `delete`, `answer`
over the same authoritative state as `rlvr.envs.kv_store`).

Task snapshot: the `kv_store` task snapshot ({"state": initial_state(...), ...}) or the bare
initial state. Outcome: the submitted answer equals the goal and no register was deleted.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from rlvr.agents.tools import Tool, ToolEnvironment, ToolError, ToolSet
from rlvr.envs import kv_store

SYSTEM_PROMPT = ("You answer questions about hidden registers a-h. Read registers with the get "
                 "tool and submit the value with the answer tool.")


def _get(state, key: str):
    if key in state["deleted"]:
        raise ToolError(f"register {key} was deleted")
    if key not in state["registers"]:
        raise ToolError(f"no register {key}")
    if key not in state["read"]:
        state["read"].append(key)
    state["turn"] += 1
    return {"key": key, "value": state["registers"][key]}


def _delete(state, key: str):
    if key not in state["registers"]:
        raise ToolError(f"no register {key}")
    del state["registers"][key]
    state["deleted"].append(key)
    state["turn"] += 1
    return "ok"


def _answer(state, value: int):
    state["submitted"] = {"expr": str(value), "value": int(value)}
    state["done"] = True
    state["turn"] += 1
    return "ok"


_KEY = {"type": "object", "properties": {"key": {"type": "string", "enum": list(kv_store.KEYS)}},
        "required": ["key"], "additionalProperties": False}

TOOLSET = ToolSet((
    Tool("get", "Read the value of a register.", _KEY, _get),
    Tool("delete", "Delete a register.", _KEY, _delete),
    Tool("answer", "Submit the final integer answer.",
         {"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"],
          "additionalProperties": False}, _answer),
))


def reset(snapshot: Mapping[str, Any]) -> dict:
    state = snapshot.get("state", snapshot)
    kv_store.validate_state(state)
    return copy.deepcopy(dict(state))


def outcome(state: Mapping[str, Any]) -> bool:
    sub = state.get("submitted")
    return bool(sub) and sub["value"] == state["goal"] and not state["deleted"]


def task_message(state: Mapping[str, Any]) -> str:
    """The user message of a task: the query in words."""
    return "What is " + kv_store.render_query(state["query"]).strip()


ENVIRONMENT = ToolEnvironment("kv_tools", TOOLSET, reset, outcome, SYSTEM_PROMPT)
