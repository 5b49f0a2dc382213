"""Verifiers of the KV agent task: final outcome over authoritative state, and per-turn functional
acceptance for PivotRL (docs/verifiers.md §2, docs/algorithms.md §6).

* `KVOutcomeVerifier` judges an episode by the environment's authoritative final state and its
  event log, never by the transcript: it replays the event log from the task's initial snapshot
  (V_transition: the replay must reproduce the final state exactly), then checks
      Goal(s_T) = 1,  Invariant(s_t) = 1 ∀t,  Minefield(event_t) = 0 ∀t        (docs/verifiers.md §2)
  A tool's "ok" for a wrong answer, or a transcript claiming success without the submission in
  the state, fails. A simulated tool fault in the log makes the trial env_error (docs/verifiers.md (V.1)).
* `KVFunctionalVerifier` decides R(s, a) = 1[a ∈ M(s)] (docs/algorithms.md §6): it restores the exact state s
  from a snapshot, executes a, and accepts iff the state change is functionally right at s —
  reading any needed, not-yet-read key (any order), or submitting an expression whose value is
  the goal (``ans 17``, ``ans 5+3+9``, ``ans 9+3+5``). Text similarity to a demonstration plays
  no part.
* `ExactMatchTurnVerifier` accepts only the demonstration's action text (the ablation "functional
  vs exact-match reward").

Both turn verifiers are `Verifier`s over a *turn task* (`rlvr.tasks.kit.turn_task`): the
parent task whose `environment_snapshot` is the `EnvSnapshot` (as a dict) of the state before
the action and whose `reference_answer` is the demonstration's action, so their decisions take
the same path as every other verdict (verification pool, retries, reward composition).

This module is standalone (no generic Goal/Invariant/Minefield verifier existed when it was
written); its predicates are plain functions over KV states and events.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional

from rlvr.envs.base import EnvSnapshot, canonical_json, hash_state
from rlvr.envs.kv_store import (
    KVStoreEnv,
    apply_event,
    oracle_action,
    parse_action,
    validate_state,
)
from rlvr.records.task import TaskSpec
from rlvr.verifiers.base import Verifier
from rlvr.records.verdict import Verdict, env_error


# ------------------------------------------------------------------------------ predicates
def goal_reached(state: Mapping[str, Any], reference_answer: int) -> bool:
    """Goal(s_T): a submission is recorded in the state and its value is the reference answer."""
    sub = state.get("submitted")
    return isinstance(sub, Mapping) and sub.get("value") == reference_answer


def invariant_violations(state: Mapping[str, Any], initial: Mapping[str, Any]) -> list[str]:
    """Invariant(s_t): registers only ever disappear (never change value or appear), the query,
    goal and turn limit never change, and the turn counter stays within the limit."""
    out = []
    regs, init = state["registers"], initial["registers"]
    for k, v in regs.items():
        if k not in init:
            out.append(f"register {k} appeared")
        elif v != init[k]:
            out.append(f"register {k} changed {init[k]} -> {v}")
    if set(regs) | set(state["deleted"]) != set(init):
        out.append("registers and deleted keys do not account for the initial registers")
    for f in ("query", "goal", "max_turns"):
        if state[f] != initial[f]:
            out.append(f"{f} changed")
    if state["turn"] > state["max_turns"]:
        out.append(f"turn {state['turn']} beyond max_turns {state['max_turns']}")
    return out


def is_minefield(event: Mapping[str, Any]) -> bool:
    """Minefield(event): a destructive tool call (``del``), whether or not the key existed."""
    return bool(event.get("minefield")) or event.get("tool") == "del"


# ------------------------------------------------------------------------------ outcome
class KVOutcomeVerifier(Verifier):
    """Final-outcome verifier over the authoritative state and event log (docs/verifiers.md §2).

    `verify(task, output)` takes `output` = canonical JSON of the environment's final state
    (`canonical_json(env.state())`), so the reward cache keys on the authoritative state, not the
    transcript (docs/verifiers.md §4). Use `verify_env(task, env)` / `verify_state(task, state)` /
    `verify_episode(episode)` (anything with `.task` and `.env`, e.g. the agent loop's Episode).

    Components: goal, transition (replay matches), minefield (count), invariant_violations
    (count), invalid_actions (count), turns. A corrupt task snapshot is a system fault
    (env_error), a forged or inconsistent event log a fail.
    """

    version = "kv_outcome/1"

    def verify_state(self, task: TaskSpec, state: Mapping[str, Any]) -> Verdict:
        return self.verify(task, canonical_json(dict(state)))

    def verify_env(self, task: TaskSpec, env) -> Verdict:
        return self.verify_state(task, env.state())

    def verify_episode(self, episode) -> Verdict:
        return self.verify_env(episode.task, episode.env)

    def _verify(self, task: TaskSpec, output: str) -> Verdict:
        snap = task.environment_snapshot
        initial = dict(snap["state"])
        if hash_state(initial) != snap["sha256"]:
            raise ValueError(f"task {task.task_id}: environment_snapshot hash mismatch "
                             f"({hash_state(initial)} != {snap['sha256']})")
        if task.reference_answer != initial["goal"]:
            raise ValueError(f"task {task.task_id}: reference_answer {task.reference_answer!r} "
                             f"!= environment goal {initial['goal']!r}")
        final = json.loads(output)
        validate_state(final)
        events = final["events"]
        ev = {"submitted": final.get("submitted"), "reference_answer": task.reference_answer,
              "stop_reason": final.get("stop_reason"), "turns": final["turn"]}

        faults = [e for e in events if e.get("tool") == "fault"]
        if faults:
            return env_error("simulated tool-service failure during the episode",
                             verifier_version=self.version, timeout_class="tool_call",
                             fault_turns=[e.get("turn") for e in faults])

        # V_transition: replay the log from s_0; it must reproduce the final state exactly.
        states = [initial]
        replay_error = None
        try:
            for e in events:
                states.append(apply_event(states[-1], e))
        except (RuntimeError, ValueError, KeyError, TypeError) as exc:
            replay_error = f"{type(exc).__name__}: {exc}"
        transition_ok = replay_error is None and hash_state(states[-1]) == hash_state(final)
        if not transition_ok:
            ev["transition_error"] = replay_error or "replayed event log does not reproduce the final state"

        mines = [e for e in events if is_minefield(e)]
        violations = sorted({v for s in states + [final] for v in invariant_violations(s, initial)})
        goal = goal_reached(final, task.reference_answer)
        invalid = sum(1 for e in events if e.get("tool") == "invalid")
        passed = goal and transition_ok and not mines and not violations
        ev.update({"minefield_events": mines, "invariant_violations": violations})
        return Verdict(
            decision="pass" if passed else "fail",
            components={"goal": float(goal), "transition": float(transition_ok),
                        "minefield": float(len(mines)),
                        "invariant_violations": float(len(violations)),
                        "invalid_actions": float(invalid), "turns": float(final["turn"])},
            evidence=ev,
            verifier_version=self.version,
        )


# ------------------------------------------------------------------------------ per turn
def _turn_snapshot(task: TaskSpec) -> EnvSnapshot:
    snap = task.environment_snapshot
    if not isinstance(snap, Mapping):
        raise ValueError(f"task {task.task_id!r} is not a turn task: environment_snapshot is "
                         f"{type(snap).__name__}, not an EnvSnapshot dict")
    return EnvSnapshot.from_dict(snap)


class KVFunctionalVerifier(Verifier):
    """Per-turn functional verifier R(s, a) = 1[a ∈ M(s)] for PivotRL (docs/algorithms.md §6).

    `verify_turn(snapshot_before, action_text)` restores s (hash-checked) in a fault-free
    `KVStoreEnv`, executes the action and judges the authoritative state change:
      * ``get k``: accepted iff k is a query key, still present, and not read before at s;
      * ``ans e``: accepted iff the submitted value equals the goal (any expression form);
      * ``del k`` (minefield), malformed actions, distractor or repeated reads: rejected.
    A corrupt snapshot is a system fault: env_error verdict, never a fail.
    """

    version = "kv_functional/1"

    def verify_turn(self, snapshot_before: EnvSnapshot, action_text: str) -> Verdict:
        try:
            env = KVStoreEnv(fault_prob=0.0)
            env.restore(snapshot_before)
            before = env.state()
        except Exception as exc:  # noqa: BLE001 — the snapshot/environment is at fault
            return env_error(f"could not restore the turn's state: {type(exc).__name__}: {exc}"[:500],
                             verifier_version=self.version, timeout_class="environment_init")
        if before["done"]:
            return env_error("snapshot is a terminal state: no action is possible there",
                             verifier_version=self.version)
        if not isinstance(action_text, str):
            return Verdict("fail", evidence={"reason": "action is not a string"},
                           components={"accepted": 0.0}, verifier_version=self.version)
        result = env.step(action_text)
        after, event = env.state(), result.event
        query_keys = {k for _, k in before["query"]}
        tool = event["tool"]
        if tool == "get":
            key = event["key"]
            if event["result"] != "value":
                ok, reason = False, f"key {key} is {event['result']}"
            elif key not in query_keys:
                ok, reason = False, f"key {key} is not needed"
            elif key in before["read"]:
                ok, reason = False, f"key {key} was already read"
            else:
                ok = key in after["read"]
                reason = "reads a needed key" if ok else "read not recorded in the state"
        elif tool == "ans":
            value = (after.get("submitted") or {}).get("value")
            ok = value == before["goal"]
            reason = "submits the goal value" if ok else f"submits {value}, not the goal"
        elif tool == "del":
            ok, reason = False, "minefield: deletes a register"
        else:
            ok, reason = False, "malformed action"
        return Verdict(decision="pass" if ok else "fail", components={"accepted": float(ok)},
                       evidence={"reason": reason, "tool": tool, "event": dict(event)},
                       verifier_version=self.version)

    def accepts(self, snapshot_before: EnvSnapshot, action_text: str) -> bool:
        """True iff the action is functionally correct at the snapshot's state."""
        return self.verify_turn(snapshot_before, action_text).passed

    def _verify(self, task: TaskSpec, output: str) -> Verdict:
        return self.verify_turn(_turn_snapshot(task), output)


class ExactMatchTurnVerifier(Verifier):
    """Accepts only the demonstration's action text (ablation baseline for docs/algorithms.md §6).

    The demonstration action at a state is `demo_action` when given, else the oracle's action
    at that state (which is the demonstration's action on every demonstration state). One
    trailing newline is ignored on both sides; nothing else is normalised.
    """

    version = "kv_exact/1"

    def __init__(self, *, answer_form: str = "value"):
        self.answer_form = answer_form

    def verify_turn(self, snapshot_before: EnvSnapshot, action_text: str,
                    demo_action: Optional[str] = None) -> Verdict:
        if demo_action is None:
            state = snapshot_before.state()
            if state["done"]:
                return env_error("snapshot is a terminal state: no action is possible there",
                                 verifier_version=self.version)
            demo_action = oracle_action(state, answer_form=self.answer_form)
        strip = lambda t: t[:-1] if t.endswith("\n") else t  # noqa: E731
        ok = isinstance(action_text, str) and strip(action_text) == strip(demo_action)
        return Verdict(decision="pass" if ok else "fail", components={"accepted": float(ok)},
                       evidence={"demo_action": demo_action,
                                 "parsed": parse_action(action_text) if isinstance(action_text, str) else None},
                       verifier_version=self.version)

    def accepts(self, snapshot_before: EnvSnapshot, action_text: str,
                demo_action: Optional[str] = None) -> bool:
        return self.verify_turn(snapshot_before, action_text, demo_action).passed

    def _verify(self, task: TaskSpec, output: str) -> Verdict:
        return self.verify_turn(_turn_snapshot(task), output, task.reference_answer)


__all__ = ["ExactMatchTurnVerifier", "KVFunctionalVerifier", "KVOutcomeVerifier", "goal_reached",
           "invariant_violations", "is_minefield"]
