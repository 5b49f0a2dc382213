"""`MetricWriter`: the one place metrics leave the process (docs/architecture.md §7, §5).

Each call to `write(step, metrics)` appends one JSON line `{"step": s, "time": t, **metrics}` to
`<workdir>/metrics.jsonl` and, when enabled, the same scalars to TensorBoard event files
(tensorboardX) under `<workdir>/tb`. Values are converted to Python floats; non-scalars are
dropped. Only process 0 writes in multi-host runs (pass `enabled=False` elsewhere).

Resuming is the writer's job: `MetricWriter(workdir, resume_step=s)` first drops every row with
step > s (rows a killed run wrote after its last checkpoint; the file is rewritten to a temporary
file and atomically renamed over the old one) and tells TensorBoard to discard events after s
(a TensorBoard SessionLog START at step s + 1, as tensorboardX's `purge_step` writes), then
appends. Resuming any number of times leaves one history:
one row per written step. Each write opens the file by name (append mode), so no write can land
in a file that has been replaced. A last line that is not complete JSON (a write cut by a crash)
is dropped on resume and skipped by `read_metrics`. TensorBoard events are written synchronously
(tensorboardX's `EventsWriter`, not its background-thread `SummaryWriter`): when `write` returns,
the step's events are in the file, so a kill loses no step TensorBoard should keep.

`read_metrics(workdir)` reads the JSONL back (plotting, tests, resume checks).
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Mapping, Optional

import numpy as np

METRICS_FILE = "metrics.jsonl"


def _scalar(v: Any):
    try:
        a = np.asarray(v)
    except Exception:  # noqa: BLE001 - anything non-numeric is skipped
        return None
    if a.size != 1 or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        return None
    x = float(a.reshape(()))
    return x


def _parses(line) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


def _drop_rows_after(path: str, step: int) -> int:
    """Rewrites `path` without the rows whose step > `step` (and without a torn last line);
    returns the number of rows dropped. Kept lines are copied byte for byte."""
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    last = lines.pop()  # text after the last newline
    kept, dropped = [], 0
    if last.strip():
        if _parses(last):
            lines.append(last)
        else:  # a write cut short
            dropped += 1
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row_step = json.loads(line)["step"]
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: line {lineno} is not a metrics row ({e}); fix or remove "
                             "it before resuming") from e
        if row_step <= step:
            kept.append(line)
        else:
            dropped += 1
    if dropped:
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"".join(line + b"\n" for line in kept))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    return dropped


class MetricWriter:
    """Writes scalar metrics to JSONL (+ TensorBoard). Use as a context manager or call close().

    Args:
      workdir: run directory (metrics.jsonl and tb/ live there).
      tensorboard: also write TensorBoard events.
      enabled: False on every process but 0 (nothing is written).
      resume_step: the step the run continues from (its restored checkpoint): rows and
        TensorBoard events with a larger step are discarded before anything is written; -1
        when a run starts from scratch (every earlier row is discarded); None keeps what is
        there and appends.
    """

    def __init__(self, workdir: str, *, tensorboard: bool = True, enabled: bool = True,
                 resume_step: Optional[int] = None):
        if resume_step is not None and (isinstance(resume_step, bool) or
                                        not isinstance(resume_step, (int, np.integer)) or
                                        resume_step < -1):
            raise ValueError(f"MetricWriter.resume_step must be None or an int ≥ -1, got "
                             f"{resume_step!r}")
        self.workdir = workdir
        self.enabled = enabled
        self.path = os.path.join(workdir, METRICS_FILE)
        self.dropped_rows = 0
        self._tb = None
        self._open = enabled
        if not enabled:
            return
        os.makedirs(workdir, exist_ok=True)
        if resume_step is not None:
            self.dropped_rows = _drop_rows_after(self.path, int(resume_step))
        if tensorboard:
            from tensorboardX.event_file_writer import EventsWriter
            from tensorboardX.proto.event_pb2 import Event, SessionLog

            tb_dir = os.path.join(workdir, "tb")
            os.makedirs(tb_dir, exist_ok=True)
            # event files are named by the second; a suffix in nanoseconds keeps a writer opened
            # within the same second (a quick relaunch) from overwriting the previous file, and
            # keeps the files in creation order for TensorBoard
            self._tb = EventsWriter(os.path.join(tb_dir, "events"),
                                    filename_suffix=f".{time.time_ns()}")
            if resume_step is not None:
                # TensorBoard hides every earlier event with step ≥ the START's step
                self._tb.write_event(Event(wall_time=time.time(), step=int(resume_step) + 1,
                                           session_log=SessionLog(status=SessionLog.START)))
            self._tb.flush()

    def write(self, step: int, metrics: Mapping[str, Any]) -> dict:
        """Writes the scalar entries of `metrics` at `step`; returns the dict written."""
        row = {}
        for k, v in metrics.items():
            x = _scalar(v)
            if x is not None:
                row[k] = x
        if not self.enabled:
            return row
        if not self._open:
            raise ValueError(f"MetricWriter({self.workdir!r}) is closed")
        line = {"step": int(step), "time": time.time()}
        line.update({k: (x if math.isfinite(x) else str(x)) for k, x in row.items()})
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
        if self._tb is not None:
            from tensorboardX.proto.event_pb2 import Event
            from tensorboardX.summary import scalar

            for k, x in row.items():
                self._tb.write_event(Event(wall_time=time.time(), step=int(step),
                                           summary=scalar(k, x)))
            self._tb.flush()
        return row

    def close(self):
        self._open = False
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_metrics(workdir: str) -> list[dict]:
    """All rows of `<workdir>/metrics.jsonl` (strings 'nan'/'inf' turned back into floats). A
    last line that is not complete JSON (being written, or cut by a crash) is skipped."""
    path = os.path.join(workdir, METRICS_FILE)
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    if not _parses(lines[-1]):
        lines.pop()  # "" after the final newline, or an unfinished line
    for line in lines:
        line = line.strip()
        if not line:
            continue
        row = json.loads(line)
        rows.append({k: (float(v) if isinstance(v, str) and v in ("nan", "inf", "-inf") else v)
                     for k, v in row.items()})
    return rows
