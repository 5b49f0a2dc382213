"""Tools as Python functions with JSON-schema parameters, and tool environments.

A `Tool` is a function `fn(state, **arguments) -> result` together with its name, description
and JSON-schema `parameters` (the OpenAI "function" form). The function may mutate `state` (a
plain-JSON dict); its return value (any JSON value) is the tool result the agent sees as a `tool`
message. A `ToolEnvironment` is a `ToolSet` plus a reset from a task snapshot and an outcome check
over the final state.

Host-side code: nothing here runs under jit.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any, Callable, Mapping, Optional, Sequence

import jsonschema

from rlvr.envs.base import canonical_json


class ToolError(Exception):
    """Raised by a tool function for a bad request the agent should see (e.g. unknown key):
    the message becomes the tool result, prefixed with "error: "."""


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One parsed tool call: tool `name` and `arguments` (a JSON object)."""
    name: str
    arguments: Mapping[str, Any]

    def to_message(self, call_id: str = "") -> dict:
        """The OpenAI `tool_calls` item of this call (arguments as a JSON string)."""
        item = {"type": "function",
                "function": {"name": self.name, "arguments": json.dumps(dict(self.arguments))}}
        if call_id:
            item["id"] = call_id
        return item


@dataclasses.dataclass(frozen=True)
class ToolOutcome:
    """The result of executing one call: `content` (text of the `tool` message) and `ok`
    (False when the call was rejected: unknown tool, schema violation, ToolError)."""
    content: str
    ok: bool
    error_kind: str = ""          # "" | "unknown_tool" | "schema" | "tool_error"


@dataclasses.dataclass(frozen=True)
class Tool:
    """A tool: `fn(state, **arguments)` with JSON-schema `parameters`."""
    name: str
    description: str
    parameters: Mapping[str, Any]
    fn: Callable[..., Any]

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Tool.name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.parameters, Mapping) or self.parameters.get("type") != "object":
            raise ValueError(f"Tool {self.name!r}: parameters must be a JSON schema with "
                             f"type 'object', got {self.parameters!r}")
        jsonschema.Draft202012Validator.check_schema(dict(self.parameters))
        if not callable(self.fn):
            raise ValueError(f"Tool {self.name!r}: fn must be callable")

    def spec(self) -> dict:
        """The OpenAI-style `tools` list item of this tool."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": copy.deepcopy(dict(self.parameters))}}

    def schema_errors(self, arguments: Any) -> list[str]:
        """Messages of every JSON-schema violation of `arguments` (empty when valid)."""
        validator = jsonschema.Draft202012Validator(dict(self.parameters))
        return sorted(e.message for e in validator.iter_errors(arguments))


def tool(name: str, description: str, parameters: Mapping[str, Any]):
    """Decorator form: `@tool("get", "Read a key", {...})` turns `fn(state, **args)` into a Tool."""
    def wrap(fn):
        return Tool(name=name, description=description, parameters=parameters, fn=fn)
    return wrap


@dataclasses.dataclass(frozen=True)
class ToolSet:
    """An ordered set of tools with distinct names."""
    tools: tuple[Tool, ...]

    def __post_init__(self):
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ValueError(f"ToolSet: tool names must be distinct, got {names}")

    @classmethod
    def from_openai(cls, specs: Sequence[Mapping[str, Any]],
                    functions: Mapping[str, Callable[..., Any]]) -> "ToolSet":
        """A ToolSet from an OpenAI-style `tools` list and a name → function mapping; every
        listed tool needs a function."""
        tools = []
        for spec in specs:
            f = spec.get("function", spec)
            name = f.get("name")
            if name not in functions:
                raise ValueError(f"ToolSet.from_openai: no function given for tool {name!r} "
                                 f"(functions: {sorted(functions)})")
            tools.append(Tool(name=name, description=f.get("description", ""),
                              parameters=f.get("parameters", {"type": "object", "properties": {}}),
                              fn=functions[name]))
        return cls(tuple(tools))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tools)

    def get(self, name: str) -> Optional[Tool]:
        for t in self.tools:
            if t.name == name:
                return t
        return None

    def specs(self) -> list[dict]:
        """The OpenAI-style `tools` list (what `apply_chat_template(..., tools=...)` takes)."""
        return [t.spec() for t in self.tools]

    def check(self, call: ToolCall) -> Optional[ToolOutcome]:
        """The rejection of a call (unknown tool / schema violation) or None when it may run."""
        t = self.get(call.name)
        if t is None:
            return ToolOutcome(f"error: unknown tool {call.name!r}; available: "
                               f"{', '.join(self.names)}", ok=False, error_kind="unknown_tool")
        errors = t.schema_errors(dict(call.arguments) if isinstance(call.arguments, Mapping)
                                 else call.arguments)
        if errors:
            return ToolOutcome(f"error: invalid arguments for {call.name}: {'; '.join(errors)}",
                               ok=False, error_kind="schema")
        return None

    def execute(self, state: dict, call: ToolCall) -> ToolOutcome:
        """Runs `call` on `state` (mutated in place). Calls rejected before running (unknown
        tool, schema violation) leave `state` unchanged; those and a `ToolError` raised by the
        function (after whatever state change the function made) return an error outcome the
        agent sees."""
        rejected = self.check(call)
        if rejected is not None:
            return rejected
        try:
            result = self.get(call.name).fn(state, **dict(call.arguments))
        except ToolError as e:
            return ToolOutcome(f"error: {e}", ok=False, error_kind="tool_error")
        return ToolOutcome(result if isinstance(result, str) else canonical_json(result), ok=True)


@dataclasses.dataclass(frozen=True)
class ToolEnvironment:
    """A tool environment: `toolset`, `reset(snapshot) -> state` and `outcome(state) -> bool`.

    `reset` must return a fresh plain-JSON state (the same for the same snapshot): replaying
    recorded calls from it must reproduce recorded tool results. `reply_check(state, text) ->
    bool` (optional) judges the agent's closing text reply (a turn without tool calls) in the
    tool state it is written in — PivotRL's functional turn reward of a final reply turn;
    without one that reward is the recorded reply's text up to case and whitespace.
    """
    name: str
    toolset: ToolSet
    reset: Callable[[Mapping[str, Any]], dict]
    outcome: Callable[[Mapping[str, Any]], bool]
    system_prompt: str = ""
    reply_check: Optional[Callable[[Mapping[str, Any], str], bool]] = None
