"""Agent verifier (docs/verifiers.md §2): authoritative state, not tool messages; hard violations fail."""

import json

from rlvr.records.task import TaskSpec
from rlvr.verifiers.agent import (AgentPredicates, AgentVerifier, Goal, Invariant, Minefield,
                                  PolicyRule, ResponseCheck, Transition)

TASK = TaskSpec(task_id="pay", prompt="pay invoice 7 (100) from checking", task_type="agent",
                reference_answer={"goal_state": {"invoices.7.paid": True},
                                  "forbidden_events": [{"tool": "delete_account"}],
                                  "unchanged": ["savings"]})


def balance_non_negative(s):
    return s["checking"] >= 0


def money_conserved(prev, ev, nxt):
    return prev["checking"] - nxt["checking"] == sum(
        inv["amount"] for k, inv in nxt["invoices"].items()
        if inv["paid"] and not prev["invoices"][k]["paid"])


PRED = AgentPredicates(
    invariants=[Invariant("balance_non_negative", balance_non_negative)],
    minefields=[Minefield("wrong_payee", lambda e: e.get("tool") == "pay"
                          and e.get("args", {}).get("payee") not in ("acme",))],
    policy=[PolicyRule("confirmed", lambda e: e.get("tool") != "pay"
                       or e.get("args", {}).get("confirmed") is True)],
    transitions=[Transition("money_conserved", money_conserved)],
    responses=[ResponseCheck("no_false_claim", lambda s, r: s["invoices"]["7"]["paid"]
                             or "paid" not in r.lower())],
)
V = AgentVerifier(PRED)


def state(checking=500, paid=False, savings=1000):
    return {"checking": checking, "savings": savings,
            "invoices": {"7": {"amount": 100, "paid": paid}}}


PAY = {"tool": "pay", "args": {"invoice": 7, "payee": "acme", "confirmed": True},
       "result": {"status": "success"}}


def test_successful_episode_passes():
    v = V.verify_trajectory(TASK, [state(), state(400, True)], [PAY], "Invoice 7 is paid.")
    assert v.decision == "pass", v.evidence
    assert v.components["goal"] == 1.0 and v.components["minefield_hits"] == 0.0


def test_tool_success_message_without_state_change_fails():
    v = V.verify_trajectory(TASK, [state(), state()], [PAY], "Done! Invoice 7 is paid.")
    assert v.decision == "fail"
    assert v.evidence["goal_failed"] == ["goal_state"]
    assert "no_false_claim" in v.evidence["response_failed"]


def test_minefield_event_fails_an_otherwise_successful_episode():
    bad = {"tool": "pay", "args": {"invoice": 7, "payee": "mallory", "confirmed": True}}
    states = [state(), state(400), state(300, True)]
    v = V.verify_trajectory(TASK, states, [bad, PAY], "Invoice 7 is paid.")
    assert v.components["goal"] == 1.0  # final state is fine …
    assert v.decision == "fail" and v.evidence["reason"] == "hard_violation"
    assert v.components["minefield_hits"] == 1.0
    # the JSON minefield from the task works too
    v2 = V.verify_trajectory(TASK, [state(), state(400, True), state(400, True)],
                             [PAY, {"tool": "delete_account"}], "paid")
    assert v2.decision == "fail" and v2.evidence["minefield_hits"] == ["forbidden_event[0]@1"]


def test_invariant_violated_mid_episode_fails_despite_final_success():
    states = [state(), state(-50), state(400, True)]
    v = V.verify_trajectory(TASK, states, [{"tool": "noop"}, PAY], "paid")
    assert v.decision == "fail" and "balance_non_negative@1" in v.evidence["invariant_violations"]
    # "unchanged" from the task: savings must never move
    v2 = V.verify_trajectory(TASK, [state(), state(400, True, savings=900)], [PAY], "paid")
    assert v2.decision == "fail" and v2.evidence["invariant_violations"] == ["unchanged:savings@1"]


def test_policy_and_transition_layers():
    unconfirmed = {"tool": "pay", "args": {"invoice": 7, "payee": "acme"}}
    v = V.verify_trajectory(TASK, [state(), state(400, True)], [unconfirmed], "paid")
    assert v.decision == "fail" and v.components["policy"] == 0.0
    # money vanished beyond the invoice amount: illegal transition
    v2 = V.verify_trajectory(TASK, [state(), state(350, True)], [PAY], "paid")
    assert v2.decision == "fail" and v2.components["transition"] == 0.0


def test_predicate_error_is_unsafe_and_verify_json_record():
    pred = AgentPredicates(goals=[Goal("g", lambda s: s["missing_key"])])
    t = TaskSpec(task_id="x", prompt="", task_type="agent")
    v = AgentVerifier(pred).verify_trajectory(t, [{}], [], "")
    assert v.decision == "fail" and v.evidence["predicate_errors"]
    rec = json.dumps({"states": [state(), state(400, True)], "events": [PAY],
                      "final_response": "paid"})
    assert V.verify(TASK, rec).decision == "pass"
    assert V.verify(TASK, "not json").trial == "env_error"
    assert AgentVerifier().verify_trajectory(t, [{}], [], "").decision == "unknown"
