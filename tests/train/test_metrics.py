"""MetricWriter resume (docs/architecture.md §7 metrics survive restarts): rows a killed run wrote after its last
checkpoint are dropped, nothing written after a resume is lost, TensorBoard discards the same
steps, and any number of resumes leaves exactly one row per step."""

import json
import os
import struct

import numpy as np
import pytest

from rlvr.train.metrics import METRICS_FILE, MetricWriter, read_metrics


def _steps(workdir):
    return [r["step"] for r in read_metrics(workdir)]


def _run(workdir, steps, *, resume_step, tag, tensorboard=False, kill_after=None):
    """Writes metric rows for `steps` (value = tag*1000 + step); kill_after: stop without
    closing after that step, like a killed process."""
    w = MetricWriter(str(workdir), resume_step=resume_step, tensorboard=tensorboard)
    for s in steps:
        w.write(s, {"x": tag * 1000 + s, "arr": np.ones(3)})
        if kill_after is not None and s == kill_after:
            return w
    w.close()
    return w


def test_several_resumes_leave_one_row_per_step(tmp_path):
    # run 1: steps 0..7, checkpoints every 2; killed after step 7 → resume from 6
    _run(tmp_path, range(0, 8), resume_step=-1, tag=1, kill_after=7)
    # run 2: resumes at 6 (drops 7), reaches 11, killed → last checkpoint 10
    w2 = _run(tmp_path, range(7, 12), resume_step=6, tag=2, kill_after=11)
    assert w2.dropped_rows == 1
    # run 3: resumes at 10 (drops 11), killed before writing anything new
    _run(tmp_path, [], resume_step=10, tag=3)
    # run 4: resumes at 10 again, finishes at 15
    _run(tmp_path, range(11, 16), resume_step=10, tag=4)
    rows = read_metrics(tmp_path)
    assert _steps(tmp_path) == list(range(16))  # one row per step, in order
    want = {s: 1000 + s for s in range(0, 7)} | {s: 2000 + s for s in range(7, 11)} | \
        {s: 4000 + s for s in range(11, 16)}
    assert {r["step"]: r["x"] for r in rows} == want
    assert all("arr" not in r for r in rows)  # non-scalars dropped


def test_writes_after_resume_are_not_lost(tmp_path):
    # the failure this guards against: a writer whose appends went to a replaced (deleted) file
    _run(tmp_path, range(0, 41), resume_step=-1, tag=1)
    w = MetricWriter(str(tmp_path), resume_step=10, tensorboard=False)
    assert w.dropped_rows == 30 and _steps(tmp_path) == list(range(11))
    for s in range(11, 41):
        w.write(s, {"x": s})
    w.close()
    assert _steps(tmp_path) == list(range(41))


def test_resume_keeps_a_complete_last_row_and_drops_a_torn_one(tmp_path):
    _run(tmp_path, range(0, 5), resume_step=-1, tag=1)
    path = os.path.join(tmp_path, METRICS_FILE)
    with open(path, "a") as f:
        f.write('{"step": 5, "time": 1.0, "x": 5}')  # complete JSON, newline not yet written
    assert _steps(tmp_path) == list(range(6))
    with open(path, "a") as f:
        f.write('\n{"step": 6, "ti')  # cut mid-write by a kill
    assert _steps(tmp_path) == list(range(7))[:6]  # the torn row is skipped by the reader
    w = MetricWriter(str(tmp_path), resume_step=5, tensorboard=False)
    w.write(6, {"x": 6})
    w.close()
    assert _steps(tmp_path) == list(range(7))
    assert open(path).read().endswith("\n")


def test_fresh_start_discards_an_earlier_attempt_and_none_appends(tmp_path):
    _run(tmp_path, range(0, 3), resume_step=-1, tag=1)
    _run(tmp_path, range(0, 2), resume_step=-1, tag=2)
    assert [r["x"] for r in read_metrics(tmp_path)] == [2000, 2001]
    _run(tmp_path, [2], resume_step=None, tag=3)
    assert [r["x"] for r in read_metrics(tmp_path)] == [2000, 2001, 3002]


def test_corrupt_middle_row_is_reported_with_its_line(tmp_path):
    _run(tmp_path, range(0, 3), resume_step=-1, tag=1)
    path = os.path.join(tmp_path, METRICS_FILE)
    lines = open(path).read().splitlines()
    lines[1] = "garbage"
    open(path, "w").write("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl: line 2 "):
        MetricWriter(str(tmp_path), resume_step=1, tensorboard=False)


@pytest.mark.parametrize("bad", [-2, 1.5, True, "3"])
def test_resume_step_validated(tmp_path, bad):
    with pytest.raises(ValueError, match="resume_step"):
        MetricWriter(str(tmp_path), resume_step=bad)


def _tb_events(tb_dir):
    """(file, event) for every event in tb_dir's event files, in TensorBoard's file order."""
    from tensorboardX.proto import event_pb2

    out = []
    for name in sorted(os.listdir(tb_dir)):
        with open(os.path.join(tb_dir, name), "rb") as f:
            data = f.read()
        pos = 0
        while pos + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            ev = event_pb2.Event()
            ev.ParseFromString(data[pos + 12:pos + 12 + length])
            out.append((name, ev))
            pos += 12 + length + 4
    return out


def _tb_scalars_as_tensorboard_shows_them(tb_dir, tag):
    """TensorBoard's rule: a SessionLog START at step p discards earlier events with step ≥ p."""
    from tensorboardX.proto import event_pb2

    shown = []
    for _, ev in _tb_events(tb_dir):
        if ev.HasField("session_log") and ev.session_log.status == event_pb2.SessionLog.START:
            shown = [(s, v) for s, v in shown if s < ev.step]
        for val in ev.summary.value:
            if val.tag == tag:
                shown.append((ev.step, val.simple_value))
    return shown


def test_tensorboard_events_after_the_resume_step_are_purged(tmp_path):
    # killed after step 7 without close or flush: every written step must already be on disk
    _run(tmp_path, range(1, 8), resume_step=-1, tag=1, tensorboard=True, kill_after=7)
    _run(tmp_path, range(5, 9), resume_step=4, tag=2, tensorboard=True)
    # the resumed writer's file starts with the purge marker at step 5
    starts = [ev.step for _, ev in _tb_events(tmp_path / "tb") if ev.HasField("session_log")]
    assert 5 in starts
    shown = _tb_scalars_as_tensorboard_shows_them(tmp_path / "tb", "x")
    assert [s for s, _ in shown] == list(range(1, 9))
    assert [v for _, v in shown] == [1001, 1002, 1003, 1004, 2005, 2006, 2007, 2008]


def test_rows_are_json_lines_with_step_and_time(tmp_path):
    with MetricWriter(str(tmp_path), tensorboard=False) as w:
        w.write(3, {"a": np.float32(0.5), "b": float("nan")})
    line = json.loads(open(tmp_path / METRICS_FILE).read())
    assert line["step"] == 3 and "time" in line and line["a"] == 0.5 and line["b"] == "nan"
    assert np.isnan(read_metrics(tmp_path)[0]["b"])
