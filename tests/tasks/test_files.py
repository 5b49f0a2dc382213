"""Dataset-file kits (rlvr.tasks.files): GSM8K / MATH / code / structured records from JSONL
and Parquet, every bad record reported with its number, explicit splits, the right verifier
per family, and the shipped builtin sets (correct answers pass, files regenerate exactly)."""

import json

import pytest

from rlvr.tasks import builtin, files
from rlvr.tasks.kit import get_kit
from rlvr.tasks.loader import TaskFileError


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return str(path)


def write_parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return str(path)


GSM = [{"question": "Ann has 3 apples and buys 4. How many?", "answer": "3+4=<<3+4=7>>7\n#### 7"},
       {"question": "Tom had 10 pens and lost 2. How many are left?", "answer": "10-2=8\n#### 8"}]


def test_gsm8k_jsonl_and_parquet_give_the_same_tasks(tmp_path):
    a = files.FileSource("gsm8k", write_jsonl(tmp_path / "g.jsonl", GSM))
    b = files.FileSource("gsm8k", write_parquet(tmp_path / "g.parquet", GSM))
    assert a.tasks == b.tasks
    t = a.tasks[0]
    assert (t.task_type, t.reference_answer, t.prompt) == ("math", "7", GSM[0]["question"])
    assert t.public_metadata["split"] == "train"
    kit = get_kit(f"gsm8k:{tmp_path / 'g.jsonl'}")
    demo = kit.demonstration(t)
    assert "<<" not in demo and demo.endswith("\\boxed{7}.")
    assert type(kit.verifier).__name__ == "MathVerifier"


def test_gsm8k_reports_every_bad_record_with_its_line(tmp_path):
    rows = [GSM[0], "{not json", {"question": "q"}, {"question": "q2", "answer": "no marker"},
            {"question": "q3", "answer": "#### 5", "split": "dev"}, GSM[0], GSM[1]]
    with pytest.raises(TaskFileError) as e:
        files.FileSource("gsm8k", write_jsonl(tmp_path / "bad.jsonl", rows))
    got = {(x.line, x.field) for x in e.value.errors}
    assert got == {(2, "<json>"), (3, "answer"), (4, "answer"), (5, "split"), (6, "task_id")}
    assert "5 bad line(s) [2, 3, 4, 5, 6]" in str(e.value)


def test_parquet_errors_name_rows(tmp_path):
    rows = [GSM[0], {"question": "", "answer": "#### 1"}, {"question": "x", "answer": "#### ?"}]
    with pytest.raises(TaskFileError) as e:
        files.FileSource("gsm8k", write_parquet(tmp_path / "bad.parquet", rows))
    assert e.value.unit == "row" and {x.line for x in e.value.errors} == {1, 2}
    assert "row 1: question" in str(e.value) and "row 2: answer" in str(e.value)


def test_math_records_take_the_last_boxed_answer(tmp_path):
    rows = [{"problem": "1/2+1/4?", "solution": "We get \\boxed{\\frac{1}{2}}... no: \\boxed{\\frac34}",
             "level": "Level 1", "split": "eval"},
            {"problem": "p", "solution": "no box here"}]
    with pytest.raises(TaskFileError) as e:
        files.FileSource("math", write_jsonl(tmp_path / "m.jsonl", rows))
    assert [(x.line, x.field) for x in e.value.errors] == [(2, "solution")]
    src = files.FileSource("math", write_jsonl(tmp_path / "m2.jsonl", rows[:1]))
    t = src.eval_set("eval")[0]
    assert t.reference_answer == "\\frac34" and t.public_metadata["level"] == "Level 1"


def test_splits_are_explicit(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", GSM)
    src = files.FileSource("gsm8k", train)
    with pytest.raises(ValueError, match="eval_path"):
        src.eval_set("eval")
    test = write_jsonl(tmp_path / "test.jsonl", [
        {"question": "Sue has 2 cats and gets 1 more. How many?", "answer": "#### 3"}])
    src = files.FileSource("gsm8k", train, eval_path=test)
    assert src.counts() == {"eval": 1, "train": 2}
    assert {t.task_id for t in src.sample(10, 0)} == {t.task_id for t in src.tasks[:2]}
    # a train record repeated in the eval file is a leak, reported at its line there
    leak = write_jsonl(tmp_path / "leak.jsonl", [GSM[1]])
    with pytest.raises(TaskFileError, match="duplicate"):
        files.FileSource("gsm8k", train, eval_path=leak)
    # a record in the eval file that names another split is refused
    other = write_jsonl(tmp_path / "other.jsonl", [{**GSM[0], "question": "x?", "split": "train"}])
    with pytest.raises(TaskFileError, match="split"):
        files.FileSource("gsm8k", train, eval_path=other)


def test_code_and_structured_families_check_task_type(tmp_path):
    code = builtin.code_tasks()[0].to_json()
    structured = builtin.structured_tasks()[0].to_json()
    path = write_jsonl(tmp_path / "c.jsonl", [code, structured])
    with pytest.raises(TaskFileError) as e:
        files.FileSource("code", path)
    assert [(x.line, x.field) for x in e.value.errors] == [(2, "task_type")]
    bad_tests = dict(code, task_id="bad", reference_answer={"entry_point": "f", "public_tests": [{}]})
    with pytest.raises(TaskFileError, match="public_tests"):
        files.FileSource("code", write_jsonl(tmp_path / "c2.jsonl", [bad_tests]))


@pytest.mark.parametrize("family,verifier", [("gsm8k", "MathVerifier"), ("math", "MathVerifier"),
                                             ("code", "CodeVerifier"),
                                             ("structured", "StructuredVerifier")])
def test_builtin_kits(family, verifier):
    kit = get_kit(f"{family}:builtin")
    assert type(kit.verifier).__name__ == verifier
    assert kit.alphabet is None and not kit.multi_turn
    counts = kit.source.counts()
    assert set(counts) == {"train", "eval"} and counts["eval"] >= 8


def test_builtin_answers_pass_and_wrong_answers_fail():
    for family in ("gsm8k", "math"):
        kit = get_kit(f"{family}:builtin")
        for t in kit.source.tasks[::10]:
            demo = kit.demonstration(t)
            assert kit.verifier.verify(t, demo).passed, (t.task_id, demo)
            assert kit.hidden_verifier.verify(t, demo).passed
            assert not kit.verifier.verify(t, "The answer is \\boxed{123456789}.").passed
    kit = get_kit("structured:builtin")
    for t in kit.source.tasks:
        assert kit.verifier.verify(t, json.dumps(t.reference_answer["expected"])).passed
        wrong = dict(t.reference_answer["expected"], **{next(iter(t.reference_answer["expected"])): 0})
        assert not kit.verifier.verify(t, json.dumps(wrong)).passed


def test_builtin_code_solutions_pass_in_the_sandbox_and_hidden_tests_count():
    kit = get_kit("code:builtin")
    solutions = builtin.code_solutions()
    tasks = kit.source.tasks
    assert len(tasks) == 32 and all(len(t.reference_answer["hidden_tests"]) == 4 for t in tasks)
    for t in tasks[::4]:
        v = kit.verifier.verify(t, f"```python\n{solutions[t.task_id]}```")
        assert v.passed and v.components["hidden"] == 1.0, (t.task_id, v.evidence)
    add = next(t for t in tasks if t.task_id == "code-add")
    # passes the public tests only: fails on the hidden ones
    cheat = "def add(a, b):\n    return {(1, 2): 3, (-4, 4): 0}[(a, b)]\n"
    v = kit.verifier.verify(add, cheat)
    assert not v.passed and v.components["public"] == 1.0 and v.components["hidden"] == 0.0


def test_builtin_files_regenerate_exactly():
    for name, text in builtin.expected_files().items():
        with open(files.builtin_path(name), encoding="utf-8") as f:
            assert f.read() == text, f"{name} drifted: run python -m rlvr.tasks.builtin"


def test_char_tokenizer_refused_for_file_kits(tmp_path):
    from configs import base
    from rlvr.train.config import ConfigError
    from rlvr.train.setup import build_tokenizer

    c = base.get_config()
    c.task.names = ("gsm8k:builtin",)
    with pytest.raises(ConfigError, match="tokenizer.kind='char'.*has none"):
        build_tokenizer(c, get_kit("gsm8k:builtin"))
