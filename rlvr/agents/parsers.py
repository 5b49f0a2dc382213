"""Tool calls parsed from a model's own output format.

Formats:
  * "hermes" (Hermes / Qwen2.5): ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``,
    any number per turn, optionally after free text.
  * "llama3" (Llama 3.1-3.3 JSON tool calling): the whole turn (after an optional
    ``<|python_tag|>``) is ``{"name": ..., "parameters": {...}}`` (or "arguments"); several calls
    may be separated by ``;``.

A parse never raises: malformed calls come back as `ParseError` records (the agent is shown an
error observation and a metric counts them). Host-side code.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Optional

from rlvr.agents.tools import ToolCall, ToolOutcome, ToolSet

FORMATS = ("hermes", "llama3")

_HERMES_RE = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class ParseError:
    """A malformed call: `message` says why, `text` is the offending text."""
    message: str
    text: str


@dataclasses.dataclass(frozen=True)
class ParsedTurn:
    """One assistant turn: free `content`, well-formed `calls`, malformed `errors`."""
    content: str
    calls: tuple[ToolCall, ...]
    errors: tuple[ParseError, ...]


def _call_from_obj(obj: Any, text: str, args_keys: tuple[str, ...]) -> ToolCall | ParseError:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ParseError("tool call must be a JSON object with a string 'name'", text)
    args = None
    for k in args_keys:
        if k in obj:
            args = obj[k]
            break
    if args is None:
        args = {}
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError as e:
            return ParseError(f"arguments are not valid JSON: {e}", text)
    if not isinstance(args, dict):
        return ParseError("arguments must be a JSON object", text)
    return ToolCall(obj["name"], args)


def parse_hermes(text: str) -> ParsedTurn:
    """Parses ``<tool_call>{json}</tool_call>`` blocks; `content` is the text before the first."""
    calls, errors = [], []
    first = text.find("<tool_call>")
    content = text if first < 0 else text[:first]
    for m in _HERMES_RE.finditer(text):
        body = m.group(1).strip()
        if not m.group(2):
            errors.append(ParseError("unterminated <tool_call> (no </tool_call>)", m.group(0)))
            continue
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as e:
            errors.append(ParseError(f"tool call is not valid JSON: {e}", body))
            continue
        r = _call_from_obj(obj, body, ("arguments", "parameters"))
        (errors if isinstance(r, ParseError) else calls).append(r)
    return ParsedTurn(content.strip(), tuple(calls), tuple(errors))


def parse_llama3(text: str) -> ParsedTurn:
    """Parses the Llama 3.x JSON form; a turn that does not start with ``{`` (after an optional
    ``<|python_tag|>``) is plain content with no calls."""
    body = text.strip()
    if body.startswith("<|python_tag|>"):
        body = body[len("<|python_tag|>"):].strip()
    if not body.startswith("{"):
        return ParsedTurn(text.strip(), (), ())
    calls, errors = [], []
    decoder = json.JSONDecoder()
    pos = 0
    while pos < len(body):
        try:
            obj, end = decoder.raw_decode(body, pos)
        except json.JSONDecodeError as e:
            errors.append(ParseError(f"tool call is not valid JSON: {e}", body[pos:]))
            break
        r = _call_from_obj(obj, body[pos:end], ("parameters", "arguments"))
        (errors if isinstance(r, ParseError) else calls).append(r)
        rest = body[end:].lstrip()
        if rest.startswith(";"):
            rest = rest[1:].lstrip()
        elif rest:
            errors.append(ParseError("text after a tool call", rest))
            break
        pos = len(body) - len(rest)
    return ParsedTurn("", tuple(calls), tuple(errors))


PARSERS = {"hermes": parse_hermes, "llama3": parse_llama3}


def format_for_template(chat_template: Optional[str], configured: str = "auto") -> str:
    """The tool-call format: `configured` when not "auto", else detected from the template
    ("<tool_call>" → hermes; "<|python_tag|>" or "ipython" → llama3)."""
    if configured != "auto":
        if configured not in FORMATS:
            raise ValueError(f"tool_call_format must be one of auto, {', '.join(FORMATS)}; "
                             f"got {configured!r}")
        return configured
    template = chat_template or ""
    if "<tool_call>" in template:
        return "hermes"
    if "<|python_tag|>" in template or "ipython" in template:
        return "llama3"
    raise ValueError("tool_call_format: the chat template shows neither the Hermes/Qwen "
                     "<tool_call> form nor the Llama 3 ipython form; set it to one of "
                     f"{', '.join(FORMATS)}")


def parse(text: str, fmt: str) -> ParsedTurn:
    """Parses one assistant turn's text in format `fmt`."""
    if fmt not in PARSERS:
        raise ValueError(f"tool_call_format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    return PARSERS[fmt](text)


def error_outcome(err: ParseError) -> ToolOutcome:
    """The observation the agent sees for a malformed call."""
    return ToolOutcome(f"error: malformed tool call: {err.message}", ok=False,
                       error_kind="parse")


def execute_turn(toolset: ToolSet, state: dict, turn: ParsedTurn) -> list[ToolOutcome]:
    """Executes the well-formed calls of a turn in order and appends one error outcome per
    malformed call; every outcome becomes one `tool` message."""
    outs = [toolset.execute(state, c) for c in turn.calls]
    outs += [error_outcome(e) for e in turn.errors]
    return outs
