"""Structured-output verifier (docs/verifiers.md §2): gates in order, schema-valid but wrong fails, format ≪
correctness."""

import json

import pytest

from rlvr.records.task import TaskSpec
from rlvr.verifiers.compose import compose_reward
from rlvr.verifiers.structured import StructuredVerifier

SCHEMA = {
    "type": "object",
    "required": ["order_id", "lines", "total", "start", "end"],
    "properties": {
        "order_id": {"type": "string", "pattern": "^ORD-[0-9]+$"},
        "lines": {"type": "array", "items": {
            "type": "object", "required": ["sku", "amount"],
            "properties": {"sku": {"type": "string"}, "amount": {"type": "number"}}}},
        "total": {"type": "number"},
        "start": {"type": "integer"}, "end": {"type": "integer"},
    },
    "additionalProperties": False,
}
REF = {"schema": SCHEMA,
       "expected": {"order_id": "ORD-17", "total": 30},
       "constraints": [{"kind": "sum_equals", "items": "lines", "field": "amount",
                        "total": "total"},
                       {"kind": "le", "left": "start", "right": "end"}]}
TASK = TaskSpec(task_id="s", prompt="extract the order", task_type="structured",
                reference_answer=REF)
GOOD = {"order_id": "ORD-17", "lines": [{"sku": "a", "amount": 10}, {"sku": "b", "amount": 20}],
        "total": 30, "start": 1, "end": 3}
V = StructuredVerifier()
CFG = StructuredVerifier.default_reward_config()


def test_correct_passes():
    v = V.verify(TASK, "```json\n" + json.dumps(GOOD) + "\n```")
    assert v.decision == "pass"
    assert compose_reward(v, CFG) == (pytest.approx(1.05), True)


@pytest.mark.parametrize("output,reason,comp", [
    ("{'order_id': 'ORD-17'}", "parse_error", "parse"),
    ('{"order_id": "ORD-17", "total": NaN}', "parse_error", "parse"),
    (json.dumps({**GOOD, "order_id": 17}), "schema_error", "schema"),
    (json.dumps({**GOOD, "extra": 1}), "schema_error", "schema"),
    (json.dumps({**GOOD, "total": 31}), "constraint_violated", "constraints"),
    (json.dumps({**GOOD, "start": 5}), "constraint_violated", "constraints"),
])
def test_each_gate(output, reason, comp):
    v = V.verify(TASK, output)
    assert v.decision == "fail" and v.evidence["reason"] == reason
    assert v.components[comp] == 0.0
    assert compose_reward(v, CFG) == (0.0, True)  # gates zero the reward


def test_schema_valid_but_semantically_wrong_fails_and_earns_little():
    wrong = {**GOOD, "order_id": "ORD-18"}  # valid shape, constraints hold, wrong id
    v = V.verify(TASK, json.dumps(wrong))
    assert v.decision == "fail" and v.evidence["reason"] == "semantically_wrong"
    assert v.components["format"] == 1.0 and v.components["semantic"] == 0.0
    r_wrong, _ = compose_reward(v, CFG)
    r_right, _ = compose_reward(V.verify(TASK, json.dumps(GOOD)), CFG)
    assert 0 < r_wrong <= 0.05 * r_right  # format weight ≪ correctness (docs/verifiers.md §2)


def test_python_constraints_semantic_and_unknown():
    sv = StructuredVerifier(SCHEMA, constraints={"positive": lambda o, t: o["total"] > 0},
                            semantic=lambda o, t: None if o["order_id"] == "ORD-0" else True)
    t = TaskSpec(task_id="s2", prompt="", task_type="structured")
    assert sv.verify(t, json.dumps(GOOD)).decision == "pass"
    assert sv.verify(t, json.dumps({**GOOD, "total": -5, "lines": [
        {"sku": "a", "amount": -5}]})).evidence["violated"] == ["positive"]
    assert sv.verify(t, json.dumps({**GOOD, "order_id": "ORD-0"})).decision == "unknown"
    # no semantic check available at all → unknown, never a silent pass
    assert StructuredVerifier(SCHEMA).verify(t, json.dumps(GOOD)).decision == "unknown"
