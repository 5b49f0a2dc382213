"""Compressed per-run records: what a block's tables are regenerated from, committed with them.

A run record (`runner.run_config`'s dict) is stored as gzip-compressed JSON lines
(`<folder>/<name>.jsonl.gz`): the first line is the record without its metrics rows (key, label,
code version, config, result without its history, wall / CPU seconds, probe seconds, machine),
each further line one metrics row. Rows are compacted (`compact_row`): an evaluation row (or the
step-0 row) keeps every `eval/`, `cost/` and `pivot/` metric, every row keeps the step, its cost,
its step time, the modelled clock's time (`time/modelled_s`, runs under the modelled clock) and
a few training readings (`ROW_KEYS`), and floats keep 6 significant digits.
The file is byte-for-byte a function of the record (sorted keys, no gzip time stamp), so
writing it again changes nothing in git.

A block reads its tables only through `read_record` (the run-time report included), so tables
regenerated from the committed records equal the committed tables.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from typing import Any

SUFFIX = ".jsonl.gz"
# kept in every row (the curves' cost and wall-clock axes, a few training readings)
ROW_KEYS = ("step", "time/step_s", "time/modelled_s", "reward/mean", "policy/clip_frac",
            "policy/masked_frac", "policy/version")
# kept in an evaluation row and in the step-0 row (PivotRL's selection statistics and probe)
FULL_PREFIXES = ("eval/", "cost/", "pivot/")
HEADER_DROP = ("rows", "model", "from_cache", "finished")


def _round(v: Any) -> Any:
    if isinstance(v, float):
        return v if not math.isfinite(v) or v == 0.0 else float(f"{v:.6g}")
    if isinstance(v, list):
        return [_round(x) for x in v]
    if isinstance(v, dict):
        return {k: _round(x) for k, x in v.items()}
    return v


def compact_row(row: dict) -> dict:
    """The stored part of a metrics row (module docstring)."""
    full = row.get("step") == 0 or "eval/success" in row
    return {k: _round(v) for k, v in row.items()
            if k in ROW_KEYS or k.startswith("cost/") or (full and k.startswith(FULL_PREFIXES))}


def compact_header(rec: dict) -> dict:
    """The stored record without its rows (module docstring)."""
    head = {k: v for k, v in rec.items() if k not in HEADER_DROP}
    if isinstance(head.get("result"), dict):
        head["result"] = {k: v for k, v in head["result"].items() if k != "history"}
    return _round(head)


def encode(rec: dict) -> bytes:
    """The compressed bytes of a record (deterministic)."""
    lines = [compact_header(rec)] + [compact_row(r) for r in sorted(rec.get("rows", []),
                                                                   key=lambda r: r["step"])]
    text = "".join(json.dumps(x, sort_keys=True, default=float, allow_nan=True) + "\n" for x in lines)
    return gzip.compress(text.encode(), compresslevel=9, mtime=0)


def write_record(path: str, rec: dict) -> int:
    """Writes `rec` to `path` (`.jsonl.gz`) atomically; returns the bytes written."""
    if not path.endswith(SUFFIX):
        raise ValueError(f"a record's path must end with {SUFFIX!r}, got {path!r}")
    data = encode(rec)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return len(data)


def read_record(path: str) -> dict:
    """The record stored at `path`: its header fields and `rows` (compacted)."""
    with gzip.open(path, "rt") as f:
        lines = [json.loads(x) for x in f if x.strip()]
    if not lines:
        raise ValueError(f"{path}: empty record file")
    return {**lines[0], "rows": lines[1:]}


def read_header(path: str) -> dict:
    """The header of the record stored at `path` (its first line: key, wall / CPU seconds, …),
    without reading its rows."""
    with gzip.open(path, "rt") as f:
        line = f.readline()
    if not line.strip():
        raise ValueError(f"{path}: empty record file")
    return json.loads(line)


def stored(rec: dict) -> dict:
    """`rec` as reading its stored file gives it back (without writing a file)."""
    text = gzip.decompress(encode(rec)).decode()
    lines = [json.loads(x) for x in text.splitlines() if x.strip()]
    return {**lines[0], "rows": lines[1:]}
