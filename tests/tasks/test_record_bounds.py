"""Dataset files fail early and say things once: a record over the length bound is refused
(with its file and line / row) before it is parsed, converted or tokenised, and a Parquet file
that lacks a required column is one error naming the column and the rows it affects."""

import json

import pytest

from rlvr.tasks import files
from rlvr.tasks.kit import get_kit
from rlvr.tasks.loader import (MAX_LISTED, MAX_RECORD_BYTES, LineError, TaskFileError,
                               load_jsonl, read_json_lines)
from rlvr.tasks.registry import JsonlSource
from tests.tasks.test_files import write_jsonl, write_parquet

GSM = [{"question": "Ann has 3 apples and buys 4. How many?", "answer": "3+4=7\n#### 7"},
       {"question": "Tom had 10 pens and lost 2. How many are left?", "answer": "10-2=8\n#### 8"}]
HUGE = "How many apples? " * (2 * MAX_RECORD_BYTES // 17)  # ~2 MiB


def test_an_over_long_jsonl_line_is_refused_with_its_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", [GSM[0], {"question": HUGE, "answer": "#### 3"},
                                               GSM[1], "{not json"])
    with pytest.raises(TaskFileError) as e:
        files.FileSource("gsm8k", path)
    assert e.value.path == path
    assert [(x.line, x.field) for x in e.value.errors] == [(2, "<length>"), (4, "<json>")]
    msg = str(e.value)
    assert f"{path}: 2 bad line(s) [2, 4]" in msg
    assert f"over the {MAX_RECORD_BYTES:,}-byte limit" in msg and "max_record_bytes" in msg
    # the same bound for docs/architecture.md §3 files (jsonl: kit, load_jsonl)
    r65 = {"task_id": "t", "prompt": HUGE, "task_type": "math", "reference_answer": 1}
    with pytest.raises(TaskFileError, match="line 1: <length>"):
        load_jsonl(write_jsonl(tmp_path / "r.jsonl", [r65]))


def test_the_length_is_checked_without_reading_the_line_whole(tmp_path):
    """The bound is checked on the raw bytes: an over-long line that is not even UTF-8 or JSON
    is reported for its length only, and the lines after it are read normally."""
    path = tmp_path / "raw.jsonl"
    path.write_bytes(json.dumps(GSM[0]).encode() + b"\n" + b"\xff" * (3 * MAX_RECORD_BYTES + 5)
                     + b"\n" + json.dumps(GSM[1]).encode())
    rows, errors = read_json_lines(path)
    assert [n for n, _ in rows] == [1, 3]
    assert errors == [LineError(2, "<length>", errors[0].message)]
    assert f"{3 * MAX_RECORD_BYTES + 5:,} bytes" in errors[0].message
    # a line of exactly the bound is read
    exact = json.dumps({"question": "x" * 10, "answer": "#### 1"})
    rows, errors = read_json_lines(write_jsonl(tmp_path / "e.jsonl", [exact]), len(exact))
    assert len(rows) == 1 and not errors
    rows, errors = read_json_lines(write_jsonl(tmp_path / "e.jsonl", [exact]), len(exact) - 1)
    assert not rows and [e.field for e in errors] == ["<length>"]


def test_an_over_long_parquet_row_is_refused_with_its_row(tmp_path):
    path = write_parquet(tmp_path / "g.parquet", [GSM[0], {"question": HUGE, "answer": "#### 3"},
                                                  GSM[1]])
    with pytest.raises(TaskFileError) as e:
        files.FileSource("gsm8k", path)
    assert e.value.unit == "row" and [(x.line, x.field) for x in e.value.errors] == [(1, "<length>")]
    assert "row 1: <length>: row is" in str(e.value)


def test_the_bound_is_a_kit_argument(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", [GSM[0], {"question": HUGE, "answer": "#### 3"}])
    kit = get_kit(f"gsm8k:{path}", max_record_bytes=4 * MAX_RECORD_BYTES)
    assert len(kit.source.tasks) == 2
    with pytest.raises(TaskFileError, match="over the 50-byte limit"):
        get_kit(f"gsm8k:{write_jsonl(tmp_path / 's.jsonl', GSM)}", max_record_bytes=50)
    with pytest.raises(TaskFileError, match="line 2: <length>"):
        JsonlSource(write_jsonl(tmp_path / "j.jsonl", [
            {"task_id": "a", "prompt": "p", "task_type": "math", "reference_answer": 1},
            {"task_id": "b", "prompt": "p" * 200, "task_type": "math", "reference_answer": 1}]),
            max_record_bytes=100)
    for bad in (0, -1, 1.5, True, "1"):
        with pytest.raises(ValueError, match="max_record_bytes must be an int >= 1"):
            get_kit(f"gsm8k:{path}", max_record_bytes=bad)


def test_a_missing_parquet_column_is_said_once(tmp_path):
    rows = [{"question": f"Q{i}: 1+{i}?", "text": "x"} for i in range(30)]
    path = write_parquet(tmp_path / "q.parquet", rows)
    with pytest.raises(TaskFileError) as e:
        files.FileSource("gsm8k", path)
    assert len(e.value.errors) == 1
    err = e.value.errors[0]
    assert err.whole_file and err.field == "answer"
    assert "column 'answer' is missing from the file (30 of 30 rows affected" in err.message
    msg = str(e.value)
    assert msg.startswith(f"{path}: 1 problem(s) with the whole file")
    assert msg.count("is missing from the file") == 1 and "row 0" not in msg and "['question', 'text']" in msg
    # a column that is present but empty in some rows is still reported per row
    rows = [GSM[0], {"question": "Q?", "answer": None}]
    with pytest.raises(TaskFileError) as e:
        files.FileSource("gsm8k", write_parquet(tmp_path / "n.parquet", rows))
    assert [(x.line, x.field, x.whole_file) for x in e.value.errors] == [(1, "answer", False)]
    # MATH: both columns missing, other problems of the same rows still listed
    rows = [{"question": "q", "split": "dev"}, {"question": "r", "split": "train"}]
    with pytest.raises(TaskFileError) as e:
        files.FileSource("math", write_parquet(tmp_path / "m.parquet", rows))
    got = sorted((x.line, x.field, x.whole_file) for x in e.value.errors)
    assert got == [(0, "problem", True), (0, "solution", True), (0, "split", False)]


def test_a_file_with_many_bad_records_lists_the_first_ones(tmp_path):
    n = MAX_LISTED + 30
    path = write_jsonl(tmp_path / "bad.jsonl", [{"question": f"q{i}", "answer": "no"}
                                                 for i in range(n)])
    with pytest.raises(TaskFileError) as e:
        files.FileSource("gsm8k", path)
    assert len(e.value.errors) == n
    msg = str(e.value)
    assert f"{n} bad line(s)" in msg and "and 30 more" in msg
    assert f"line {MAX_LISTED}: answer" in msg and f"line {MAX_LISTED + 1}: answer" not in msg
    assert "30 more problem(s) not shown" in msg
