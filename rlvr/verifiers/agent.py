"""Agent verifier over an environment's authoritative state trajectory (docs/verifiers.md §2,
docs/architecture.md §2).

    V_agent = V_policy ∧ V_transition ∧ V_goal ∧ V_response                       (docs/verifiers.md §2)
    Goal(s_T) = 1,  Invariant(s_t) = 1 ∀t,  Minefield(s_t) = 0 ∀t                 (docs/verifiers.md §2)

Inputs are the environment's own states s_0 … s_T (dicts, read from the backend, never from
what a tool *said*), the events (tool calls with their returned messages; events[t] led from
s_t to s_{t+1} when len(events) == len(states) − 1) and the final response. A tool returning
"success" proves nothing: the goal is read from s_T. A hard invariant violation or a minefield
event fails the episode whatever the final state — final success does not cancel a wrong
payment on the way.

Predicates are plain callables (module-level functions if the verifier must be pickled into a
process pool). A predicate that raises is read as the unsafe outcome (goal not met, invariant
violated, mine hit, rule broken) and named in the evidence.

JSON predicates from `task.reference_answer` (all optional) are added to the verifier's:
    {"goal_state": {"path.in.state": value, ...},        # Goal: s_T has these values
     "forbidden_events": [{"tool": "delete"}, ...],      # Minefield: an event matching a pattern
     "unchanged": ["path", ...],                         # Invariant: equals its s_0 value ∀t
     "response_contains": ["text", ...]}                 # ResponseCheck on the final response

`verify(task, output)` takes the trajectory as JSON {"states": [...], "events": [...],
"final_response": "..."}; a malformed record is the environment's fault (env_error).
Components: policy, transition, goal, response ∈ {0,1}; invariant_violations, minefield_hits,
soft_violations, steps (counts).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, List, Mapping, Sequence, Union

from rlvr.records.task import TaskSpec
from rlvr.verifiers.base import Verifier
from rlvr.verifiers.structured import _MISSING, get_path, subset_equal
from rlvr.records.verdict import Verdict


@dataclasses.dataclass(frozen=True)
class Goal:
    """fn(final_state) -> bool: the task's goal holds in s_T."""
    name: str
    fn: Callable[[Mapping[str, Any]], bool]


@dataclasses.dataclass(frozen=True)
class Invariant:
    """fn(state) -> bool must hold for every s_t. hard=False only counts (soft_violations)."""
    name: str
    fn: Callable[[Mapping[str, Any]], bool]
    hard: bool = True


@dataclasses.dataclass(frozen=True)
class Minefield:
    """fn(x) -> bool is True when a mine is hit; x is each event (on="event") or each state
    (on="state"). Any hit is a hard failure."""
    name: str
    fn: Callable[[Any], bool]
    on: str = "event"

    def __post_init__(self):
        if self.on not in ("event", "state"):
            raise ValueError(f"Minefield.on must be 'event' or 'state', got {self.on!r}")


@dataclasses.dataclass(frozen=True)
class PolicyRule:
    """fn(event) -> bool: the action was allowed (permissions, confirmations; V_policy)."""
    name: str
    fn: Callable[[Mapping[str, Any]], bool]


@dataclasses.dataclass(frozen=True)
class Transition:
    """fn(s_t, event_t, s_{t+1}) -> bool: the state change is legal (V_transition)."""
    name: str
    fn: Callable[[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]], bool]


@dataclasses.dataclass(frozen=True)
class ResponseCheck:
    """fn(final_state, final_response) -> bool: the response is faithful (V_response)."""
    name: str
    fn: Callable[[Mapping[str, Any], str], bool]


@dataclasses.dataclass(frozen=True)
class AgentPredicates:
    goals: Sequence[Goal] = ()
    invariants: Sequence[Invariant] = ()
    minefields: Sequence[Minefield] = ()
    policy: Sequence[PolicyRule] = ()
    transitions: Sequence[Transition] = ()
    responses: Sequence[ResponseCheck] = ()

    def merged(self, other: "AgentPredicates") -> "AgentPredicates":
        return AgentPredicates(*(tuple(getattr(self, f.name)) + tuple(getattr(other, f.name))
                                 for f in dataclasses.fields(self)))


def _call(fn, *args):
    try:
        return bool(fn(*args)), None
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {e}"[:200]


def _event_matches(event: Any, pattern: Mapping[str, Any]) -> bool:
    return isinstance(event, Mapping) and subset_equal(pattern, event)


def predicates_from_reference(ref: Any) -> AgentPredicates:
    """JSON predicates of a task's reference_answer (see module docstring)."""
    if not isinstance(ref, Mapping):
        return AgentPredicates()
    goals, mines, invs, resp = [], [], [], []
    if "goal_state" in ref:
        want = dict(ref["goal_state"])
        goals.append(Goal("goal_state", lambda s, w=want: all(
            (v := get_path(s, p)) is not _MISSING and subset_equal(w[p], v) for p in w)))
    for i, pat in enumerate(ref.get("forbidden_events", [])):
        mines.append(Minefield(f"forbidden_event[{i}]", lambda e, p=pat: _event_matches(e, p)))
    for i, text in enumerate(ref.get("response_contains", [])):
        resp.append(ResponseCheck(f"response_contains[{i}]",
                                  lambda st, r, t=text: t.lower() in (r or "").lower()))
    return AgentPredicates(goals=goals, invariants=invs, minefields=mines, responses=resp)


class AgentVerifier(Verifier):
    """Verifies an agent episode from authoritative states (docs/verifiers.md §2).

    Args:
      predicates: AgentPredicates, or a function task → AgentPredicates for task-specific ones.
      require_goal: with no goal predicate at all, the decision is "unknown" (nothing to check)
        instead of trivially passing.
    """

    version = "agent-1"

    def __init__(self, predicates: Union[AgentPredicates,
                                         Callable[[TaskSpec], AgentPredicates], None] = None, *,
                 require_goal: bool = True):
        self.predicates = predicates if predicates is not None else AgentPredicates()
        self.require_goal = require_goal

    def _predicates(self, task: TaskSpec) -> AgentPredicates:
        p = self.predicates(task) if callable(self.predicates) else self.predicates
        return p.merged(predicates_from_reference(task.reference_answer))

    def _verify(self, task: TaskSpec, output: str) -> Verdict:
        rec = json.loads(output)
        if not isinstance(rec, Mapping) or not isinstance(rec.get("states"), list):
            raise ValueError("agent trajectory must be a JSON object with a 'states' list")
        return self.verify_trajectory(task, rec["states"], rec.get("events", []),
                                      rec.get("final_response", ""))

    def verify_trajectory(self, task: TaskSpec, states: Sequence[Mapping[str, Any]],
                          events: Sequence[Mapping[str, Any]], final_response: str) -> Verdict:
        """Verdict for one episode. `states` = [s_0, …, s_T] (T ≥ 0) from the environment's
        backend; `events` = tool calls / results in order; `final_response` = last message."""
        if not states:
            raise ValueError("verify_trajectory: states must hold at least s_0")
        p = self._predicates(task)
        ref = task.reference_answer if isinstance(task.reference_answer, Mapping) else {}
        ev: dict = {}
        errors: List[str] = []
        final = states[-1]

        # V_policy: every action allowed
        policy_bad = []
        for t, e in enumerate(events):
            for rule in p.policy:
                ok, err = _call(rule.fn, e)
                if err:
                    errors.append(f"policy {rule.name}@{t}: {err}")
                if not ok:
                    policy_bad.append(f"{rule.name}@{t}")
        # V_transition: each step legal (needs events aligned with states)
        trans_bad, aligned = [], len(events) == len(states) - 1
        if p.transitions and not aligned:
            trans_bad.append(f"events ({len(events)}) not aligned with states ({len(states)})")
        elif p.transitions:
            for t, e in enumerate(events):
                for tr in p.transitions:
                    ok, err = _call(tr.fn, states[t], e, states[t + 1])
                    if err:
                        errors.append(f"transition {tr.name}@{t}: {err}")
                    if not ok:
                        trans_bad.append(f"{tr.name}@{t}")
        # Invariants on every state; minefields on every event / state
        hard_viol, soft_viol = [], []
        unchanged = list(ref.get("unchanged", []))
        for t, s in enumerate(states):
            for inv in p.invariants:
                ok, err = _call(inv.fn, s)
                if err:
                    errors.append(f"invariant {inv.name}@{t}: {err}")
                if not ok:
                    (hard_viol if inv.hard else soft_viol).append(f"{inv.name}@{t}")
            for path in unchanged:
                if get_path(s, path) != get_path(states[0], path):
                    hard_viol.append(f"unchanged:{path}@{t}")
        mines = []
        for m in p.minefields:
            xs = events if m.on == "event" else states
            for t, x in enumerate(xs):
                hit, err = _call(m.fn, x)
                if err:
                    errors.append(f"minefield {m.name}@{t}: {err}")
                if hit is None or hit:
                    mines.append(f"{m.name}@{t}")
        # V_goal on the authoritative final state
        goal_bad = []
        for g in p.goals:
            ok, err = _call(g.fn, final)
            if err:
                errors.append(f"goal {g.name}: {err}")
            if not ok:
                goal_bad.append(g.name)
        # V_response
        resp_bad = []
        for rc in p.responses:
            ok, err = _call(rc.fn, final, final_response)
            if err:
                errors.append(f"response {rc.name}: {err}")
            if not ok:
                resp_bad.append(rc.name)

        comps = {"policy": float(not policy_bad), "transition": float(not trans_bad),
                 "goal": float(not goal_bad and bool(p.goals)),
                 "response": float(not resp_bad),
                 "invariant_violations": float(len(hard_viol)),
                 "minefield_hits": float(len(mines)), "soft_violations": float(len(soft_viol)),
                 "steps": float(len(events))}
        for key, val in (("policy_violations", policy_bad), ("transition_violations", trans_bad),
                         ("invariant_violations", hard_viol), ("minefield_hits", mines),
                         ("goal_failed", goal_bad), ("response_failed", resp_bad),
                         ("soft_violations", soft_viol), ("predicate_errors", errors)):
            if val:
                ev[key] = val[:20]
        if not p.goals and self.require_goal:
            ev["reason"] = "no_goal_predicate"
            return Verdict(decision="unknown", components=comps, evidence=ev,
                           verifier_version=self.version)
        hard_fail = bool(hard_viol or mines)
        ok = not (policy_bad or trans_bad or goal_bad or resp_bad or hard_fail)
        if hard_fail:
            ev["reason"] = "hard_violation"
        elif not ok:
            ev["reason"] = next(k for k, v in (("policy", policy_bad), ("transition", trans_bad),
                                               ("goal", goal_bad), ("response", resp_bad)) if v)
        return Verdict(decision="pass" if ok else "fail", components=comps, evidence=ev,
                       verifier_version=self.version)
