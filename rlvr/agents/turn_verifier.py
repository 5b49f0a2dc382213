"""A functional verifier for one tool-call turn: does the predicted call do what the reference
call does?

mode "functional": same tool name and equivalent arguments under the tool's JSON schema —
both argument objects are completed with the schema's `default`s, values are coerced to the
declared type ("3" ≡ 3 for integer/number, "true" ≡ true for boolean), key order is ignored and
numbers match within |a - b| <= atol + rtol·|b|. A user `predicate(pred, ref) -> bool` replaces
the argument comparison. mode "exact": same name and identical arguments (the ablation).
A check that cannot run (the reference tool is not in the tool set, the predicate raises) is
`env_error`: the trial is masked, not scored. Host-side code.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, Optional

from rlvr.agents.tools import ToolCall, ToolSet

MODES = ("functional", "exact")


@dataclasses.dataclass(frozen=True)
class TurnVerdict:
    """`status`: "pass" | "fail" | "env_error"; `reward` 1.0 / 0.0 (0.0 and masked on
    env_error); `reason` says why."""
    status: str
    reward: float
    reason: str = ""


def _coerce(value: Any, schema: Mapping[str, Any]) -> Any:
    typ = schema.get("type")
    try:
        if typ == "integer" and isinstance(value, str):
            return int(value.strip())
        if typ == "number" and isinstance(value, str):
            return float(value.strip())
        if typ == "boolean" and isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if typ == "string" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        if typ == "object" and isinstance(value, Mapping):
            return canonical_arguments(value, schema)
        if typ == "array" and isinstance(value, list) and isinstance(schema.get("items"), Mapping):
            return [_coerce(v, schema["items"]) for v in value]
    except ValueError:
        return value
    return value


def canonical_arguments(args: Mapping[str, Any], schema: Mapping[str, Any]) -> dict:
    """Arguments completed with schema defaults and coerced to the declared property types."""
    props = schema.get("properties", {}) or {}
    out = {k: _coerce(v, props.get(k, {})) for k, v in dict(args).items()}
    for k, p in props.items():
        if k not in out and isinstance(p, Mapping) and "default" in p:
            out[k] = p["default"]
    return out


def _equal(a: Any, b: Any, rtol: float, atol: float) -> bool:
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return math.isclose(float(a), float(b), rel_tol=0.0, abs_tol=atol + rtol * abs(float(b)))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_equal(a[k], b[k], rtol, atol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y, rtol, atol) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def verify_call(pred: Optional[ToolCall], ref: ToolCall, toolset: ToolSet, *,
                mode: str = "functional", rtol: float = 1e-6, atol: float = 1e-9,
                predicate: Optional[Callable[[ToolCall, ToolCall], bool]] = None) -> TurnVerdict:
    """Verdict for predicted call `pred` (None: the turn made no parseable call) against the
    recorded `ref`."""
    if mode not in MODES:
        raise ValueError(f"turn verifier mode must be one of {', '.join(MODES)}; got {mode!r}")
    tool = toolset.get(ref.name)
    if tool is None:
        return TurnVerdict("env_error", 0.0, f"reference tool {ref.name!r} not in the tool set")
    if pred is None:
        return TurnVerdict("fail", 0.0, "no tool call")
    if pred.name != ref.name:
        return TurnVerdict("fail", 0.0, f"tool {pred.name!r} != {ref.name!r}")
    if mode == "exact":
        ok = dict(pred.arguments) == dict(ref.arguments)
        return TurnVerdict("pass" if ok else "fail", float(ok), "" if ok else "arguments differ")
    if predicate is not None:
        try:
            ok = bool(predicate(pred, ref))
        except Exception as e:  # the user's check could not run: masked, not a policy failure
            return TurnVerdict("env_error", 0.0, f"predicate raised {type(e).__name__}: {e}")
        return TurnVerdict("pass" if ok else "fail", float(ok), "" if ok else "predicate false")
    a = canonical_arguments(pred.arguments, tool.parameters)
    b = canonical_arguments(ref.arguments, tool.parameters)
    if tool.schema_errors(a):
        return TurnVerdict("fail", 0.0, "predicted arguments violate the schema")
    ok = _equal(a, b, rtol, atol)
    return TurnVerdict("pass" if ok else "fail", float(ok), "" if ok else "arguments differ")


def verify_turn(text: str, target: Mapping[str, Any], toolset: ToolSet, fmt: str, *,
                mode: str = "functional", answer_predicate: Optional[Callable[[str, str], bool]]
                = None, **kw) -> TurnVerdict:
    """Verdict for one generated assistant turn `text` (format `fmt`) against a recorded target
    message (a pivot's target). A target with tool calls passes iff the turn parses without
    errors into the same number of calls, each passing `verify_call` against its counterpart
    in order. A target without tool calls (a final reply) is checked by
    `answer_predicate(text, target_content)`; without one the check cannot run (env_error)."""
    from rlvr.agents import parsers  # noqa: PLC0415 (parsers imports tools, as this does)

    turn = parsers.parse(text, fmt)
    refs = [ToolCall((c.get("function", c))["name"], (c.get("function", c)).get("arguments") or {})
            for c in (target.get("tool_calls") or ())]
    if not refs:
        if answer_predicate is None:
            return TurnVerdict("env_error", 0.0, "reply turn without an answer predicate")
        if turn.calls or turn.errors:
            return TurnVerdict("fail", 0.0, "tool call where the reference replies")
        try:
            ok = bool(answer_predicate(turn.content, str(target.get("content") or "")))
        except Exception as e:  # the user's check could not run: masked
            return TurnVerdict("env_error", 0.0, f"answer predicate raised {type(e).__name__}: {e}")
        return TurnVerdict("pass" if ok else "fail", float(ok), "" if ok else "predicate false")
    if turn.errors:
        return TurnVerdict("fail", 0.0, f"malformed tool call: {turn.errors[0].message}")
    if len(turn.calls) != len(refs):
        return TurnVerdict("fail", 0.0, f"{len(turn.calls)} calls, reference has {len(refs)}")
    for p, r in zip(turn.calls, refs):
        v = verify_call(p, r, toolset, mode=mode, **kw)
        if v.status != "pass":
            return v
    return TurnVerdict("pass", 1.0)
