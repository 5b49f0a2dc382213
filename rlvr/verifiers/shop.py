"""Verifiers of the checkout task: final outcome over authoritative state, per-turn functional
acceptance for PivotRL, and the exact-match ablation (docs/verifiers.md §2, docs/algorithms.md §6;
docs/algorithms.md §6).

* `ShopOutcomeVerifier` judges an episode by the environment's final state and event log, never
  by the transcript: the log replayed from the task's initial snapshot must reproduce the final
  state (V_transition), then
      Goal(s_T): a payment is recorded, its value is the order total and the cart holds exactly
                 the order;
      Invariant(s_t) ∀t: prices, order, total and turn limit never change, turn ≤ max_turns;
      Minefield(event_t) = 0 ∀t: no ``add`` of a line that is not exactly one requested line.
  A tool's "ok" for a wrong payment fails. Several baskets (local variant): the goal is every
  basket paid its total with its cart complete; the invariants hold the prices, the baskets and
  the turn limit, and the current basket's order and total.
* `ShopFunctionalVerifier` decides R(s, a) = 1[a ∈ M(s)] (docs/algorithms.md §6): it restores the exact state s
  (hash-checked) in a latency-free `ShopEnv`, executes a and accepts iff the state change is
  functionally right at s — reading the price of an ordered item not read yet, adding an ordered
  line not in the cart with its quantity (any order of reads and adds), or paying the order total
  (as ``44``, ``14+27+3`` or any sum of that value) once the cart holds exactly the order (with
  several baskets: the current basket's order and total, whatever earlier baskets were paid).
  Similarity to the demonstration's text plays no part.
* `ShopExactMatchVerifier` accepts only the demonstration's action text (ablation).

The turn verifiers judge a *turn task* (`rlvr.tasks.kit.turn_task`): environment_snapshot = the
`EnvSnapshot` dict of the state before the action, reference_answer = the demonstration's action.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional

from rlvr.envs.base import EnvSnapshot, canonical_json, hash_state
from rlvr.envs.shop import (
    ShopEnv,
    all_paid_right,
    apply_event,
    cart_complete,
    is_multi_basket,
    oracle_action,
    parse_action,
    validate_state,
)
from rlvr.records.task import TaskSpec
from rlvr.records.verdict import Verdict, env_error
from rlvr.verifiers.base import Verifier


# ------------------------------------------------------------------------------ predicates
def goal_reached(state: Mapping[str, Any], total: int) -> bool:
    """Goal(s_T): a payment of `total` is recorded and the cart holds exactly the order."""
    paid = state.get("paid")
    return isinstance(paid, Mapping) and paid.get("value") == total and cart_complete(state)


def invariant_violations(state: Mapping[str, Any], initial: Mapping[str, Any]) -> list[str]:
    """Invariant(s_t): prices, order, total and the turn limit never change; turn ≤ max_turns.
    Several baskets: prices, the baskets and the turn limit never change, and order and total
    are the current basket's."""
    if is_multi_basket(initial):
        out = [f"{f} changed" for f in ("prices", "baskets", "max_turns") if state.get(f) != initial[f]]
        b = state.get("basket", -1)
        cur = initial["baskets"][b] if 0 <= b < len(initial["baskets"]) else None
        if cur is None or state["order"] != cur["order"] or state["total"] != cur["total"]:
            out.append("order or total is not the current basket's")
    else:
        out = [f"{f} changed" for f in ("prices", "order", "total", "max_turns") if state[f] != initial[f]]
    if state["turn"] > state["max_turns"]:
        out.append(f"turn {state['turn']} beyond max_turns {state['max_turns']}")
    return out


def is_minefield(event: Mapping[str, Any]) -> bool:
    """Minefield(event): an ``add`` that is not exactly one requested line."""
    return event.get("tool") == "add" and not event.get("correct", False)


# ------------------------------------------------------------------------------ outcome
class ShopOutcomeVerifier(Verifier):
    """Final-outcome verifier over the authoritative state and event log (docs/verifiers.md §2).

    `verify(task, output)` takes `output` = canonical JSON of the final state (what
    `TaskKit.episode_output` gives), so the reward cache keys on the state, not the transcript.
    Components: goal, transition, minefield (count), invariant_violations (count),
    invalid_actions (count), turns. A corrupt task snapshot is a system fault (env_error).
    """

    version = "shop_outcome/1"

    def verify_state(self, task: TaskSpec, state: Mapping[str, Any]) -> Verdict:
        return self.verify(task, canonical_json(dict(state)))

    def _verify(self, task: TaskSpec, output: str) -> Verdict:
        snap = task.environment_snapshot
        initial = dict(snap["state"])
        if hash_state(initial) != snap["sha256"]:
            raise ValueError(f"task {task.task_id}: environment_snapshot hash mismatch")
        multi = is_multi_basket(initial)
        want = [b["total"] for b in initial["baskets"]] if multi else initial["total"]
        if task.reference_answer != want:
            raise ValueError(f"task {task.task_id}: reference_answer {task.reference_answer!r} "
                             f"!= order total {want!r}")
        final = json.loads(output)
        validate_state(final)
        events = final["events"]
        ev = {"paid": final.get("paid"), "total": initial["total"], "cart": final.get("cart"),
              "stop_reason": final.get("stop_reason"), "turns": final["turn"]}
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
        if multi:  # every basket paid right, the last one ending the episode
            goal = (all_paid_right(final) and final.get("basket") == len(initial["baskets"]) - 1
                    and goal_reached(final, initial["baskets"][-1]["total"]))
            ev["payments"] = final.get("payments")
        else:
            goal = goal_reached(final, initial["total"])
        invalid = sum(1 for e in events if e.get("tool") == "invalid")
        passed = goal and transition_ok and not mines and not violations
        ev.update({"minefield_events": mines, "invariant_violations": violations})
        return Verdict(
            decision="pass" if passed else "fail",
            components={"goal": float(goal), "transition": float(transition_ok),
                        "minefield": float(len(mines)),
                        "invariant_violations": float(len(violations)),
                        "invalid_actions": float(invalid), "turns": float(final["turn"])},
            evidence=ev, verifier_version=self.version)


# ------------------------------------------------------------------------------ per turn
def _turn_snapshot(task: TaskSpec) -> EnvSnapshot:
    snap = task.environment_snapshot
    if not isinstance(snap, Mapping):
        raise ValueError(f"task {task.task_id!r} is not a turn task: environment_snapshot is "
                         f"{type(snap).__name__}, not an EnvSnapshot dict")
    return EnvSnapshot.from_dict(snap)


def turn_kind(action: str) -> str:
    """"get" | "add" | "pay" | "invalid": the tool of an action text (turn statistics)."""
    p = parse_action(action)
    return "invalid" if p is None else p[0]


class ShopFunctionalVerifier(Verifier):
    """Per-turn functional verifier R(s, a) = 1[a ∈ M(s)] for PivotRL (module docstring).

    `verify_turn(snapshot_before, action_text)`; a corrupt snapshot or a terminal state is a
    system fault (env_error), never a fail. Component "accepted"; evidence: reason, tool.
    """

    version = "shop_functional/1"

    def verify_turn(self, snapshot_before: EnvSnapshot, action_text: str) -> Verdict:
        try:
            env = ShopEnv()
            env.restore(snapshot_before)
            before = env.state()
        except Exception as exc:  # noqa: BLE001 — the snapshot/environment is at fault
            return env_error(f"could not restore the turn's state: {type(exc).__name__}: {exc}"[:500],
                             verifier_version=self.version, timeout_class="environment_init")
        if before["done"]:
            return env_error("snapshot is a terminal state: no action is possible there",
                             verifier_version=self.version)
        result = env.step(action_text)
        after, event = env.state(), result.event
        ordered = {k for k, _ in before["order"]}
        tool = event["tool"]
        if tool == "get":
            item = event["item"]
            if event["result"] != "price":
                ok, reason = False, f"item {item} is not sold here"
            elif item not in ordered:
                ok, reason = False, f"item {item} is not ordered"
            elif item in before["read"]:
                ok, reason = False, f"price of {item} was already read"
            else:
                ok, reason = item in after["read"], "reads a needed price"
        elif tool == "add":
            ok = bool(event["correct"])
            reason = "adds an ordered line" if ok else "minefield: wrong cart line"
        elif tool == "pay" and is_multi_basket(before):
            # judged on the basket it pays alone (an earlier basket's payment plays no part)
            ok = bool(event["right"])
            reason = ("pays the total" if ok else
                      "pays before the cart is complete" if not cart_complete(before) else
                      f"pays {event['value']}, not the total")
        elif tool == "pay":
            ok = goal_reached(after, before["total"])
            reason = ("pays the total" if ok else
                      "pays before the cart is complete" if not cart_complete(after) else
                      f"pays {event['value']}, not the total")
        else:
            ok, reason = False, "malformed action"
        return Verdict(decision="pass" if ok else "fail", components={"accepted": float(ok)},
                       evidence={"reason": reason, "tool": tool}, verifier_version=self.version)

    def accepts(self, snapshot_before: EnvSnapshot, action_text: str) -> bool:
        return self.verify_turn(snapshot_before, action_text).passed

    def _verify(self, task: TaskSpec, output: str) -> Verdict:
        return self.verify_turn(_turn_snapshot(task), output)


class ShopExactMatchVerifier(Verifier):
    """Accepts only the demonstration's action text (the ablation of docs/algorithms.md §6).

    The demonstration's action is the turn task's reference_answer when given, else the
    canonical oracle's action at the state. One trailing newline is ignored on both sides.
    """

    version = "shop_exact/1"

    def verify_turn(self, snapshot_before: EnvSnapshot, action_text: str,
                    demo_action: Optional[str] = None) -> Verdict:
        state = snapshot_before.state()
        if state["done"]:
            return env_error("snapshot is a terminal state: no action is possible there",
                             verifier_version=self.version)
        if demo_action is None:
            demo_action = oracle_action(state)
        strip = lambda t: t[:-1] if t.endswith("\n") else t  # noqa: E731
        ok = strip(action_text) == strip(demo_action)
        return Verdict(decision="pass" if ok else "fail", components={"accepted": float(ok)},
                       evidence={"demo_action": demo_action}, verifier_version=self.version)

    def accepts(self, snapshot_before: EnvSnapshot, action_text: str,
                demo_action: Optional[str] = None) -> bool:
        return self.verify_turn(snapshot_before, action_text, demo_action).passed

    def _verify(self, task: TaskSpec, output: str) -> Verdict:
        return self.verify_turn(_turn_snapshot(task), output, task.reference_answer)


__all__ = ["ShopExactMatchVerifier", "ShopFunctionalVerifier", "ShopOutcomeVerifier",
           "goal_reached", "invariant_violations", "is_minefield", "turn_kind"]
