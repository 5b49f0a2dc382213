"""Sample logs (samples.jsonl, eval_samples.jsonl) write any model output: a lone surrogate in
the text or the verdict evidence, non-ASCII text, NaN and numpy values all give valid UTF-8 JSON
lines that read back to the same strings."""

import json

import numpy as np

from rlvr.train.samples import dumps_record, write_jsonl_rows, write_samples

LONE = "bad \ud800 half, \udfff other half"


def test_a_lone_surrogate_writes_and_reads_back_unchanged(tmp_path):
    row = {"output": LONE, "evidence": {"extracted": "\ud83d", "note": "été ✓"},
           "reward": float("nan"), "tokens": np.int32(7), "score": np.float32(0.5),
           "mask": np.array([True, False])}
    path = tmp_path / "eval_samples.jsonl"
    assert write_jsonl_rows(str(path), [row, {"output": "plain"}]) == 2
    raw = path.read_bytes()
    raw.decode("utf-8")  # strict: the file is valid UTF-8
    assert "été ✓".encode() in raw  # non-ASCII text stays readable
    back = [json.loads(line) for line in raw.decode("utf-8").splitlines()]
    assert back[0]["output"] == LONE and back[0]["evidence"]["extracted"] == "\ud83d"
    assert back[0]["reward"] == "nan" and back[0]["tokens"] == 7 and back[0]["score"] == 0.5
    assert back[0]["mask"] == [True, False] and back[1] == {"output": "plain"}
    # a backslash before the surrogate stays a backslash
    assert json.loads(dumps_record({"t": "a\\\ud800"}))["t"] == "a\\\ud800"


def test_write_jsonl_rows_appends_or_replaces(tmp_path):
    path = str(tmp_path / "s.jsonl")
    write_jsonl_rows(path, [{"a": 1}])
    write_jsonl_rows(path, [{"a": 2}], append=True)
    assert [json.loads(x)["a"] for x in open(path, encoding="utf-8")] == [1, 2]
    write_jsonl_rows(path, [{"a": 3}])
    assert [json.loads(x)["a"] for x in open(path, encoding="utf-8")] == [3]


class _Sample:
    def __init__(self, i, reward):
        self.reward = reward
        self._json = {"task_id": f"t{i}", "output": f"{i} {LONE}", "reward": reward,
                      "evidence": {"raw": LONE}}

    def to_json(self):
        return dict(self._json)


class _Collected:
    def __init__(self, n):
        self.samples = [_Sample(i, float(i)) for i in range(n)]


def test_write_samples_logs_outputs_with_lone_surrogates(tmp_path):
    path = str(tmp_path / "samples.jsonl")
    assert write_samples(path, 3, _Collected(6), n=4, seed=0) == 4
    rows = [json.loads(x) for x in open(path, encoding="utf-8")]
    assert [r["selected"] for r in rows] == ["top_reward"] * 2 + ["random"] * 2
    assert [r["task_id"] for r in rows[:2]] == ["t5", "t4"]
    assert all(r["step"] == 3 and r["evidence"]["raw"] == LONE for r in rows)
