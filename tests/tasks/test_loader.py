"""TaskSpec JSON and the JSONL loader (docs/architecture.md §3): every bad line reported with its field."""

import json

import pytest

from rlvr.tasks import arithmetic, countdown
from rlvr.tasks.loader import TaskFileError, load_jsonl, write_jsonl
from rlvr.records.task import FIELDS, TaskSpec, TaskSpecError

GOOD = {"task_id": "t1", "prompt": "1+1=", "task_type": "math", "reference_answer": 2}


def full_task():
    return TaskSpec(
        task_id="full", prompt="p", task_type="agent", reference_answer={"goal": [1, 2]},
        public_metadata={"tools": ["a"]}, hidden_verifier_id="hv1",
        environment_snapshot={"kv": {"x": 1}}, resource_limits={"time_s": 2, "memory_mb": 256},
        reward_config={"correct": 1.0}, random_seed=42)


def test_to_json_has_every_field_and_round_trips():
    t = full_task()
    record = t.to_json()
    assert tuple(record) == FIELDS
    assert TaskSpec.from_json(json.loads(json.dumps(record))) == t


def test_to_json_refuses_non_json_values():
    with pytest.raises(TaskSpecError, match="reference_answer"):
        TaskSpec("a", "p", "math", reference_answer=float("nan")).to_json()
    with pytest.raises(TaskSpecError, match="public_metadata"):
        TaskSpec("a", "p", "math", public_metadata={"s": {1, 2}}).to_json()


def test_from_json_lists_every_problem():
    with pytest.raises(TaskSpecError) as e:
        TaskSpec.from_json({"task_id": 3, "task_type": "poem", "extra": 1, "random_seed": 1.5})
    fields = {f for f, _ in e.value.errors}
    assert fields == {"task_id", "prompt", "task_type", "extra", "random_seed"}


def test_round_trip_file(tmp_path):
    tasks = ([full_task()] + arithmetic.generate(10, seed=1, difficulty="medium")
             + countdown.generate(10, seed=1, difficulty="hard"))
    path = tmp_path / "tasks.jsonl"
    write_jsonl(tasks, path)
    assert load_jsonl(path) == tasks


def test_write_refuses_duplicates(tmp_path):
    t = full_task()
    with pytest.raises(ValueError, match="duplicate"):
        write_jsonl([t, t], tmp_path / "x.jsonl")


def test_malformed_file_reports_every_bad_line_with_field(tmp_path):
    lines = [
        json.dumps(GOOD),                                                  # 1 ok
        "{not json",                                                       # 2 json
        json.dumps({**GOOD, "task_id": "t3", "reference_anwser": 1}),      # 3 unknown field
        json.dumps({"task_id": "t4", "prompt": "x"}),                      # 4 missing task_type
        json.dumps({**GOOD, "task_id": "t5", "random_seed": "7"}),         # 5 wrong type
        "",                                                                # 6 blank: no record
        json.dumps({**GOOD}),                                              # 7 duplicate t1
        '{"task_id": "t8", "prompt": "x", "task_type": "math", "reference_answer": NaN}',  # 8
        json.dumps([1, 2]),                                                # 9 not an object
        json.dumps({**GOOD, "task_id": "t10", "resource_limits": {"time_s": -1}}),  # 10
        json.dumps({**GOOD, "task_id": "t11"}),                            # 11 ok
        json.dumps({**GOOD, "task_id": "t12", "task_type": "poem", "hidden_verifier_id": 5}),  # 12
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TaskFileError) as e:
        load_jsonl(path)
    got = {(err.line, err.field) for err in e.value.errors}
    assert got == {
        (2, "<json>"), (3, "reference_anwser"), (4, "task_type"), (5, "random_seed"),
        (7, "task_id"), (8, "<json>"), (9, "<record>"), (10, "resource_limits"),
        (12, "task_type"), (12, "hidden_verifier_id"),
    }
    msg = str(e.value)
    for line in (2, 3, 4, 5, 7, 8, 9, 10, 12):
        assert f"line {line}:" in msg
    assert "first on line 1" in msg


def test_bad_utf8_and_empty_file(tmp_path):
    p = tmp_path / "enc.jsonl"
    p.write_bytes(json.dumps(GOOD).encode() + b"\n\xff\xfe\n")
    with pytest.raises(TaskFileError) as e:
        load_jsonl(p)
    assert [(x.line, x.field) for x in e.value.errors] == [(2, "<encoding>")]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    with pytest.raises(TaskFileError, match="no records"):
        load_jsonl(empty)


CODE = {"task_id": "c1", "prompt": "write add(a, b)", "task_type": "code",
        "reference_answer": {"entry_point": "add",
                             "public_tests": [{"args": [1, 2], "expected": 3}],
                             "hidden_tests": [{"args": [2, 2], "expected": 4}]}}


def _code(task_id, **ref):
    return {**CODE, "task_id": task_id, "reference_answer": {**CODE["reference_answer"], **ref}}


def test_code_task_tests_checked_at_load_with_line_and_field(tmp_path):
    lines = [
        json.dumps(CODE),                                                             # 1 ok
        json.dumps(_code("c2", public_tests=[{"args": 1, "expected": 3}])),           # 2
        json.dumps(_code("c3", hidden_tests=[{"args": [1]}])),                        # 3
        json.dumps({**CODE, "task_id": "c4", "reference_answer": None}),              # 4
        json.dumps(_code("c5", entry_point=None, public_tests=[{"stdin": "1"}],
                         hidden_tests=[])),                                           # 5
        json.dumps(_code("c6", public_tests=[], hidden_tests=[])),                    # 6
        json.dumps(_code("c7", float_tol=2)),                                         # 7
        json.dumps(_code("c8", public_tests=[{"args": [1], "kwargs": [], "expected": 1}])),  # 8
        json.dumps({**CODE, "task_id": "c9", "task_type": "math", "reference_answer": 3}),  # 9 ok
    ]
    path = tmp_path / "code.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TaskFileError) as e:
        load_jsonl(path)
    got = {(err.line, err.field) for err in e.value.errors}
    assert got == {
        (2, "reference_answer.public_tests[0].args"),
        (3, "reference_answer.hidden_tests[0].expected"),
        (4, "reference_answer"),
        (5, "reference_answer.public_tests[0].stdout"),
        (6, "reference_answer"),
        (7, "reference_answer.float_tol"),
        (8, "reference_answer.public_tests[0].kwargs"),
    }
    msg = str(e.value)
    assert "line 2: reference_answer.public_tests[0].args: must be a list, got 1" in msg
    with pytest.raises(TaskSpecError, match=r"public_tests\[0\]\.args"):
        TaskSpec.from_json(json.loads(lines[1]))
    good = tmp_path / "good.jsonl"
    good.write_text(lines[0] + "\n" + lines[-1] + "\n")
    assert [t.task_id for t in load_jsonl(good)] == ["c1", "c9"]
