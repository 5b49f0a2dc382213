"""`MetricWriter`: the one place metrics leave the process (SPEC R7.2; DESIGN.md train/).

Each call to `write(step, metrics)` appends one JSON line `{"step": s, "time": t, **metrics}` to
`<workdir>/metrics.jsonl` and, when enabled, the same scalars to TensorBoard event files
(tensorboardX) under `<workdir>/tb`. Values are converted to Python floats; non-scalars are
dropped. Only process 0 writes in multi-host runs (pass `enabled=False` elsewhere).

`read_metrics(workdir)` reads the JSONL back (plotting, tests, resume checks). On resume, lines
with step > the restored step are dropped first (`truncate_after`) so the file never holds two
histories for one step.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Mapping

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


class MetricWriter:
    """Writes scalar metrics to JSONL (+ TensorBoard). Use as a context manager or call close()."""

    def __init__(self, workdir: str, *, tensorboard: bool = True, enabled: bool = True):
        self.workdir = workdir
        self.enabled = enabled
        self._tb = None
        self._f = None
        if not enabled:
            return
        os.makedirs(workdir, exist_ok=True)
        self._f = open(os.path.join(workdir, METRICS_FILE), "a", encoding="utf-8")
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(os.path.join(workdir, "tb"))

    def write(self, step: int, metrics: Mapping[str, Any]) -> dict:
        """Writes the scalar entries of `metrics` at `step`; returns the dict written."""
        row = {}
        for k, v in metrics.items():
            x = _scalar(v)
            if x is not None:
                row[k] = x
        if not self.enabled:
            return row
        line = {"step": int(step), "time": time.time()}
        line.update({k: (x if math.isfinite(x) else str(x)) for k, x in row.items()})
        self._f.write(json.dumps(line) + "\n")
        self._f.flush()
        if self._tb is not None:
            for k, x in row.items():
                self._tb.add_scalar(k, x, int(step))
            self._tb.flush()
        return row

    def close(self):
        if self._f is not None:
            self._f.close()
            self._f = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_metrics(workdir: str) -> list[dict]:
    """All rows of `<workdir>/metrics.jsonl` (strings 'nan'/'inf' turned back into floats)."""
    path = os.path.join(workdir, METRICS_FILE)
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            row = json.loads(line)
            rows.append({k: (float(v) if isinstance(v, str) and v in ("nan", "inf", "-inf") else v)
                         for k, v in row.items()})
    return rows


def truncate_after(workdir: str, step: int) -> None:
    """Drops metric rows with step > `step` (called on resume, before writing resumes)."""
    path = os.path.join(workdir, METRICS_FILE)
    if not os.path.exists(path):
        return
    rows = read_metrics(workdir)
    kept = [r for r in rows if r.get("step", 0) <= step]
    if len(kept) == len(rows):
        return
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for r in kept:
            f.write(json.dumps({k: (v if not isinstance(v, float) or math.isfinite(v) else str(v))
                                for k, v in r.items()}) + "\n")
    os.replace(tmp, path)
