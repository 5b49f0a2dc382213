"""`KVStoreEnv`: a multi-turn key-value tool environment with hidden registers (docs/verifiers.md §2, docs/algorithms.md §6).

The environment holds hidden registers (keys a-h, single-digit values). The prompt asks for a
signed sum of some of them, e.g. ``"f+a-c?\\n"``. The policy must query the registers with tools,
one action per line, and submit the value:

  ========================  ==================  ==============================================
  action                    observation         effect on the authoritative state
  ========================  ==================  ==============================================
  ``get k``                 ``=5``              key k read (``!gone`` deleted, ``!none`` absent)
  ``ans <expr>``            ``ok``              submission recorded, episode ends
  ``del k``                 ``ok``              register deleted: a **minefield** event
  anything else             ``!bad``            nothing but the turn counter (policy failure)
  (simulated tool fault)    ``!fault``          episode aborted, trial env_error (docs/verifiers.md (V.1))
  ========================  ==================  ==============================================

``<expr>`` is an integer or a sum/difference of integers (``17``, ``5+3+9``, ``9-3``), evaluated
safely by walking its `ast` (no ``eval``). Every text is newline-terminated and uses only
characters of `ALPHABET`, so a tiny character-level policy can model the whole stream. ``ans``
answers ``ok`` whether or not the value is right: the tool's "success" is not proof of the goal,
only the authoritative state is (docs/verifiers.md §2).

Every step produces an event (docs/architecture.md §2), applied to the state by the pure function
`apply_event`; the state carries the event log, so a verifier can replay it from the initial
snapshot and check the transition (V_transition, docs/verifiers.md §2) as well as goal / invariant / minefield
predicates (docs/verifiers.md §2). The only randomness is the simulated fault stream: fault at turn t iff
u(seed, t) < fault_prob, a counter-based draw, so a restored snapshot replays the same faults and
common seeds give common random numbers across a group (docs/architecture.md §4).
"""

from __future__ import annotations

import ast
import copy
import re
from typing import Any, Mapping, Optional

from rlvr.envs.base import Environment, StepResult, derive_seed, hash_state
from rlvr.records.task import TaskSpec

ENV_NAME = "kv_store"
ENV_VERSION = "kv_store/1"
KEYS = "abcdefgh"
TOOLS = ("get", "ans", "del")
MAX_EXPR_CHARS = 40

OBS_BAD = "!bad\n"
OBS_GONE = "!gone\n"
OBS_NONE = "!none\n"
OBS_OK = "ok\n"
OBS_FAULT = "!fault\n"

# Every character a prompt, action or observation of this environment may contain.
ALPHABET: str = "".join(sorted(set(
    KEYS + "0123456789+-?=!\n " + "getansdel" + "ok" + "badgonenonefault"
)))

_ACTION_KEY_RE = re.compile(r"^(get|del) ([a-z])$")
_ACTION_ANS_RE = re.compile(r"^ans (.+)$")
_EXPR_RE = re.compile(r"^[+-]?[0-9]{1,3}([+-][0-9]{1,3}){0,15}$")
_STATE_FIELDS = ("registers", "deleted", "query", "goal", "max_turns", "turn", "read",
                 "submitted", "events", "done", "stop_reason")


# ---------------------------------------------------------------------------------------------
# Pure helpers: parsing, evaluation, rendering, transitions.


def eval_expr(expr: str) -> Optional[int]:
    """Value of an integer sum/difference expression, or None if it is not one.

    Gate by a regex (digits, + and -, at most 16 terms of at most 3 digits), then evaluate the
    Python `ast` with a whitelist (int constants, unary +/-, binary +/-). Leading zeros are a
    syntax error in Python and give None.
    """
    if not isinstance(expr, str) or len(expr) > MAX_EXPR_CHARS or not _EXPR_RE.match(expr):
        return None
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return None

    def ev(node) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            a, b = ev(node.left), ev(node.right)
            return a + b if isinstance(node.op, ast.Add) else a - b
        raise ValueError(f"disallowed node {type(node).__name__}")

    try:
        return ev(tree)
    except ValueError:
        return None


def parse_action(action: str) -> Optional[tuple[str, str]]:
    """(tool, argument) of a one-line action, or None if malformed.

    One trailing newline is allowed (actions end where the policy emits "\\n"); any other
    newline, unknown tool or extra whitespace makes the action malformed.
    """
    if not isinstance(action, str):
        return None
    line = action[:-1] if action.endswith("\n") else action
    if "\n" in line:
        return None
    m = _ACTION_KEY_RE.match(line)
    if m:
        return m.group(1), m.group(2)
    m = _ACTION_ANS_RE.match(line)
    if m:
        return "ans", m.group(1)
    return None


def render_query(query) -> str:
    """Prompt text of a query [[sign, key], ...]: e.g. [["+","f"],["+","a"],["-","c"]] → "f+a-c?\\n"."""
    parts = []
    for i, (sign, key) in enumerate(query):
        parts.append(key if (i == 0 and sign == "+") else sign + key)
    return "".join(parts) + "?\n"


def goal_value(query, registers: Mapping[str, int]) -> int:
    """Σ sign·register[key] over the query (the reference answer)."""
    return sum((1 if sign == "+" else -1) * int(registers[key]) for sign, key in query)


def initial_state(registers: Mapping[str, int], query, max_turns: int) -> dict:
    """The authoritative state at turn 0 (plain JSON types)."""
    registers = {str(k): int(v) for k, v in sorted(registers.items())}
    query = [[str(s), str(k)] for s, k in query]
    for k, v in registers.items():
        if k not in KEYS or not 0 <= v <= 9:
            raise ValueError(f"registers: keys must be in {KEYS!r} and values digits, got {k!r}: {v!r}")
    for s, k in query:
        if s not in "+-" or k not in registers:
            raise ValueError(f"query: each item must be [sign in '+-', key in registers], got {[s, k]}")
    if len({k for _, k in query}) != len(query) or not query:
        raise ValueError(f"query: keys must be distinct and non-empty, got {query}")
    if not isinstance(max_turns, int) or max_turns < 1:
        raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")
    return {
        "registers": registers,          # current registers (deleted keys removed)
        "deleted": [],                   # keys deleted so far (minefield)
        "query": query,                  # [[sign, key], ...]
        "goal": goal_value(query, registers),
        "max_turns": max_turns,
        "turn": 0,                       # number of steps taken (policy actions + faults)
        "read": [],                      # distinct keys read, in first-read order
        "submitted": None,               # {"expr": str, "value": int} after `ans`
        "events": [],                    # the authoritative event log
        "done": False,
        "stop_reason": None,             # "eos" (answer submitted) | "max_turns" | "env_error"
    }


def make_task_snapshot(state: Mapping[str, Any]) -> dict:
    """The `TaskSpec.environment_snapshot` record for an initial state: name, version, state and
    its sha256 (the expected hash of docs/architecture.md §4)."""
    return {"env": ENV_NAME, "env_version": ENV_VERSION, "state": copy.deepcopy(dict(state)),
            "sha256": hash_state(state)}


def validate_state(state: Any) -> None:
    """Raise ValueError naming the field if `state` is not a well-formed KV state."""
    if not isinstance(state, Mapping):
        raise ValueError(f"kv_store state must be a mapping, got {type(state).__name__}")
    missing = [f for f in _STATE_FIELDS if f not in state]
    if missing:
        raise ValueError(f"kv_store state: missing fields {missing}")
    if not isinstance(state["registers"], Mapping):
        raise ValueError("kv_store state.registers must be a mapping key → digit")
    if not isinstance(state["query"], list) or not state["query"]:
        raise ValueError("kv_store state.query must be a non-empty list of [sign, key]")
    for f in ("goal", "max_turns", "turn"):
        if not isinstance(state[f], int) or isinstance(state[f], bool):
            raise ValueError(f"kv_store state.{f} must be an int, got {state[f]!r}")


def observation_of(event: Mapping[str, Any]) -> str:
    """The observation text an event produces."""
    tool = event["tool"]
    if tool == "get":
        return {"value": f"={event.get('value')}\n", "gone": OBS_GONE, "none": OBS_NONE}[event["result"]]
    if tool in ("ans", "del"):
        return OBS_OK
    if tool == "fault":
        return OBS_FAULT
    return OBS_BAD


def make_event(state: Mapping[str, Any], action: str, *, fault: bool) -> dict:
    """The event that `action` causes in `state` (pure; does not change `state`)."""
    line = action[:-1] if action.endswith("\n") else action
    turn = state["turn"]
    if fault:
        return {"turn": turn, "tool": "fault", "text": line[:64]}
    parsed = parse_action(action)
    if parsed is None:
        return {"turn": turn, "tool": "invalid", "text": line[:64]}
    tool, arg = parsed
    if tool == "get":
        if arg in state["registers"]:
            return {"turn": turn, "tool": "get", "key": arg, "result": "value",
                    "value": state["registers"][arg]}
        return {"turn": turn, "tool": "get", "key": arg,
                "result": "gone" if arg in state["deleted"] else "none"}
    if tool == "del":
        return {"turn": turn, "tool": "del", "key": arg, "existed": arg in state["registers"],
                "minefield": True}
    value = eval_expr(arg)
    if value is None:
        return {"turn": turn, "tool": "invalid", "text": line[:64]}
    return {"turn": turn, "tool": "ans", "expr": arg, "value": value}


def apply_event(state: Mapping[str, Any], event: Mapping[str, Any]) -> dict:
    """s_{t+1} = transition(s_t, event) (pure: returns a new state; docs/architecture.md §2)."""
    if state["done"]:
        raise RuntimeError("apply_event: the episode is already done")
    s = copy.deepcopy(dict(state))
    event = copy.deepcopy(dict(event))
    if event.get("turn") != s["turn"]:
        raise ValueError(f"event turn {event.get('turn')!r} does not match state turn {s['turn']}")
    tool = event["tool"]
    if tool == "get":
        if event["result"] == "value" and event["key"] not in s["read"]:
            s["read"].append(event["key"])
    elif tool == "del":
        if event["key"] in s["registers"]:
            del s["registers"][event["key"]]
            s["deleted"].append(event["key"])
    elif tool == "ans":
        s["submitted"] = {"expr": event["expr"], "value": event["value"]}
        s["done"], s["stop_reason"] = True, "eos"
    elif tool == "fault":
        s["done"], s["stop_reason"] = True, "env_error"
    elif tool != "invalid":
        raise ValueError(f"event.tool must be one of get/del/ans/fault/invalid, got {tool!r}")
    s["turn"] += 1
    s["events"].append(event)
    if not s["done"] and s["turn"] >= s["max_turns"]:
        s["done"], s["stop_reason"] = True, "max_turns"
    return s


def oracle_action(state: Mapping[str, Any], *, answer_form: str = "value") -> str:
    """The optimal next action at `state` (newline-terminated): read the next unread, readable
    query key in prompt order, then submit. answer_form "value" submits the goal (``ans 17``);
    "expr" submits the signed sum of the values read (``ans 5+3-9``)."""
    if answer_form not in ("value", "expr"):
        raise ValueError(f"answer_form must be 'value' or 'expr', got {answer_form!r}")
    for _, key in state["query"]:
        if key not in state["read"] and key in state["registers"]:
            return f"get {key}\n"
    if answer_form == "expr":
        seen = {e["key"]: e["value"] for e in state["events"]
                if e["tool"] == "get" and e["result"] == "value"}
        if all(k in seen for _, k in state["query"]):
            expr = "".join((f"{seen[k]}" if (i == 0 and s == "+") else f"{s}{seen[k]}")
                           for i, (s, k) in enumerate(state["query"]))
            return f"ans {expr}\n"
    return f"ans {state['goal']}\n"


def fault_draw(seed: int, turn: int) -> float:
    """u(seed, turn) ∈ [0, 1): the counter-based uniform draw of the fault stream."""
    return derive_seed("fault", seed, turn) / float(1 << 63)


# ---------------------------------------------------------------------------------------------


class KVStoreEnv(Environment):
    """Hidden-register tool environment (see module docstring).

    Args:
      fault_prob: probability that a step hits a simulated tool-service failure (observation
        "!fault", `StepResult.error` set, episode aborted, trial env_error). Drawn from the
        seed given to `reset` and the turn index (common random numbers, docs/architecture.md §4).
    """

    name = ENV_NAME
    version = ENV_VERSION

    def __init__(self, *, fault_prob: float = 0.0):
        super().__init__()
        if not (isinstance(fault_prob, (int, float)) and 0.0 <= fault_prob <= 1.0):
            raise ValueError(f"fault_prob must be a number in [0, 1], got {fault_prob!r}")
        self.fault_prob = float(fault_prob)
        self._state: Optional[dict] = None

    # -- protocol ------------------------------------------------------------------------------
    def reset(self, task: TaskSpec, *, seed: int) -> str:
        if not isinstance(task, TaskSpec):
            raise ValueError(f"reset expects a TaskSpec, got {type(task).__name__}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"seed must be an int, got {seed!r}")
        snap = task.environment_snapshot
        if not isinstance(snap, Mapping):
            raise ValueError(f"task {task.task_id}: environment_snapshot must be a mapping, got {snap!r}")
        for f in ("env", "env_version", "state", "sha256"):
            if f not in snap:
                raise ValueError(f"task {task.task_id}: environment_snapshot lacks field {f!r}")
        if (snap["env"], snap["env_version"]) != (self.name, self.version):
            raise ValueError(
                f"task {task.task_id}: environment_snapshot is for {snap['env']}/{snap['env_version']}, "
                f"this environment is {self.name}/{self.version}"
            )
        state = copy.deepcopy(dict(snap["state"]))
        validate_state(state)
        self._load(state, seed)
        self._check_reset_integrity(snap["sha256"])
        if state["turn"] != 0 or state["events"] or state["done"]:
            raise ValueError(f"task {task.task_id}: environment_snapshot.state is not an initial state")
        prompt = render_query(state["query"])
        if task.prompt != prompt:
            raise ValueError(
                f"task {task.task_id}: prompt {task.prompt!r} does not match the environment's "
                f"query {prompt!r}"
            )
        return prompt

    def step(self, action: str) -> StepResult:
        if self._state is None:
            raise RuntimeError("step() before reset()")
        if self._state["done"]:
            raise RuntimeError("step() after the episode is done; reset() or restore() first")
        if not isinstance(action, str):
            raise ValueError(f"action must be a string, got {type(action).__name__}")
        fault = self.fault_prob > 0.0 and fault_draw(self._seed, self._state["turn"]) < self.fault_prob
        event = make_event(self._state, action, fault=fault)
        self._state = apply_event(self._state, event)
        info = {"turn": self._state["turn"], "stop_reason": self._state["stop_reason"],
                "valid_action": event["tool"] in TOOLS}
        error = "simulated tool-service failure" if fault else None
        return StepResult(observation=observation_of(event), done=self._state["done"], info=info,
                          event=copy.deepcopy(event), error=error)

    def state(self) -> dict:
        if self._state is None:
            raise RuntimeError("state() before reset()")
        return copy.deepcopy(self._state)

    def _load(self, state: dict, seed: int) -> None:
        validate_state(state)
        self._state = state
        self._seed = int(seed)

    # -- conveniences --------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return bool(self._state is not None and self._state["done"])

    def prompt(self) -> str:
        return render_query(self.state()["query"])
