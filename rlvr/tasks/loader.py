"""JSONL task files: one TaskSpec record per line (docs/architecture.md §3).

`load_jsonl` validates every record and, if anything is wrong, raises ONE `TaskFileError` that
lists every bad line with its 1-based line number and field. Nothing is silently dropped:
invalid JSON, NaN/Infinity literals, unknown fields, missing or mistyped fields and duplicate
task_ids are all errors. Blank (whitespace-only) lines carry no record and are skipped.

A line longer than `MAX_RECORD_BYTES` is an error found before the line is decoded or parsed
(and never tokenised later): a record that long cannot be a prompt any model.max_seq_len of
these runs holds, and a stray multi-megabyte line would otherwise cost minutes and gigabytes
of tokenising before the prompt-length check. The file kits take another bound as
`task.kwargs.max_record_bytes`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Iterable, Union

from rlvr.records.task import TaskSpec, TaskSpecError, validate_record

PathLike = Union[str, os.PathLike]

# Longest JSONL line / Parquet row (bytes of text) read as a record: 1 MiB, about 250k tokens of
# English, far beyond any model.max_seq_len; tokenising that much takes about a second.
MAX_RECORD_BYTES = 1 << 20
# TaskFileError's message lists this many problems (all of them stay in `.errors`).
MAX_LISTED = 50


@dataclasses.dataclass(frozen=True)
class LineError:
    """One problem in a task file: 1-based `line`, the `field` at fault and a message.
    `whole_file`: a problem of the file, not of one record (no records, a missing column);
    its `line` is 0."""

    line: int
    field: str
    message: str
    whole_file: bool = False

    def __str__(self):
        if self.whole_file:
            return f"file: {self.field}: {self.message}"
        return f"line {self.line}: {self.field}: {self.message}"


class TaskFileError(ValueError):
    """A task file has bad records. `errors` lists every LineError; `path` names the file;
    `unit` says what the numbers count: "line" (JSONL, 1-based) or "row" (Parquet, 0-based).
    The message lists file-wide problems first, then the first `MAX_LISTED` record problems."""

    def __init__(self, path: PathLike, errors: Iterable[LineError], unit: str = "line"):
        self.path = os.fspath(path)
        self.errors = list(errors)
        self.unit = unit
        whole = [e for e in self.errors if e.whole_file]
        records = [e for e in self.errors if not e.whole_file]
        bad_lines = sorted({e.line for e in records})
        parts = []
        if whole:
            parts.append(f"{len(whole)} problem(s) with the whole file")
        if bad_lines:
            shown = bad_lines[:MAX_LISTED]
            more = f" and {len(bad_lines) - len(shown)} more" if len(bad_lines) > len(shown) else ""
            parts.append(f"{len(bad_lines)} bad {unit}(s) {shown}{more}")
        lines = [f"  {e}" for e in whole]
        lines += [f"  {e}" if unit == "line" else f"  row {e.line}: {e.field}: {e.message}"
                  for e in records[:MAX_LISTED]]
        if len(records) > MAX_LISTED:
            lines.append(f"  ... {len(records) - MAX_LISTED} more problem(s) not shown")
        super().__init__(f"{self.path}: " + "; ".join(parts) + "\n" + "\n".join(lines))


def too_long(size: int, limit: int, unit: str = "line") -> str:
    """The message of a record over the length bound."""
    return (f"{unit} is {size:,} bytes, over the {limit:,}-byte limit on one record (refused "
            f"unread; rlvr.tasks.loader.MAX_RECORD_BYTES, or task.kwargs.max_record_bytes)")


def _reject_constant(name: str):
    raise ValueError(f"{name} is not allowed (only finite numbers)")


def _raw_lines(f, limit: int):
    """(1-based line number, line bytes without the newline, or None when the line is longer
    than `limit`, its length); an over-long line is skipped in chunks, never held whole."""
    lineno = 0
    while True:
        raw = f.readline(limit + 2)  # room for the newline and one byte past the limit
        if not raw:
            return
        lineno += 1
        ended = raw.endswith(b"\n")
        body = raw[:-1] if ended else raw
        if len(body) <= limit:
            yield lineno, body, len(body)
            continue
        size = len(body)
        while not ended:
            chunk = f.readline(1 << 20)
            if not chunk:
                break
            ended = chunk.endswith(b"\n")
            size += len(chunk) - (1 if ended else 0)
        yield lineno, None, size


def read_json_lines(path: PathLike, max_record_bytes: int = MAX_RECORD_BYTES
                    ) -> tuple[list[tuple[int, Any]], list[LineError]]:
    """(rows, errors) of a JSONL file: rows are (1-based line number, parsed value); blank lines
    are skipped; a line longer than `max_record_bytes` (checked first, module docstring), not
    UTF-8 or not JSON (NaN / Infinity included) is an error."""
    check_record_bound(max_record_bytes)
    rows, errors = [], []
    with open(path, "rb") as f:
        for lineno, raw, size in _raw_lines(f, max_record_bytes):
            if raw is None:
                errors.append(LineError(lineno, "<length>", too_long(size, max_record_bytes)))
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                errors.append(LineError(lineno, "<encoding>", f"not UTF-8: {e}"))
                continue
            if not text.strip():
                continue
            try:
                rows.append((lineno, json.loads(text, parse_constant=_reject_constant)))
            except ValueError as e:  # json.JSONDecodeError is a ValueError
                errors.append(LineError(lineno, "<json>", f"invalid JSON: {e}"))
    return rows, errors


def check_record_bound(max_record_bytes) -> int:
    """Validates a `max_record_bytes` argument (an int >= 1)."""
    if not isinstance(max_record_bytes, int) or isinstance(max_record_bytes, bool) \
            or max_record_bytes < 1:
        raise ValueError(f"max_record_bytes must be an int >= 1, got {max_record_bytes!r}")
    return max_record_bytes


def load_jsonl(path: PathLike, max_record_bytes: int = MAX_RECORD_BYTES) -> list[TaskSpec]:
    """Reads and validates a JSONL task file.

    Args:
      path: file with one JSON object per line, fields as in `rlvr.records.task.FIELDS`.
      max_record_bytes: longest line read (module docstring).
    Returns:
      the TaskSpecs in file order.
    Raises:
      TaskFileError: listing every bad line (line number, field, message), including duplicate
        task_ids (pointing at the first occurrence), over-long lines and a file with no records
        at all.
      FileNotFoundError: when the file does not exist.
    """
    return [t for _, t in load_jsonl_numbered(path, max_record_bytes)]


def load_jsonl_numbered(path: PathLike, max_record_bytes: int = MAX_RECORD_BYTES
                        ) -> list[tuple[int, TaskSpec]]:
    """`load_jsonl` with each task's 1-based line number: [(line, TaskSpec)]."""
    tasks: list[tuple[int, TaskSpec]] = []
    first_line_of: dict[str, int] = {}
    rows, errors = read_json_lines(path, max_record_bytes)
    for lineno, record in rows:
        problems = validate_record(record)
        if problems:
            errors.extend(LineError(lineno, field, msg) for field, msg in problems)
            continue
        try:
            task = TaskSpec.from_json(record)
        except (TaskSpecError, ValueError) as e:  # __post_init__ checks, belt and braces
            errors.append(LineError(lineno, "<record>", str(e)))
            continue
        if task.task_id in first_line_of:
            errors.append(LineError(
                lineno, "task_id",
                f"duplicate task_id {task.task_id!r} (first on line {first_line_of[task.task_id]})"))
            continue
        first_line_of[task.task_id] = lineno
        tasks.append((lineno, task))
    if not tasks and not errors:
        errors.append(LineError(0, "<file>", "no records (the file is empty)", whole_file=True))
    if errors:
        raise TaskFileError(path, errors)
    return tasks


def write_jsonl(tasks: Iterable[TaskSpec], path: PathLike) -> None:
    """Writes tasks as JSONL (one `TaskSpec.to_json()` object per line, UTF-8, in the given order).

    Raises TaskSpecError for a task that is not JSON data and ValueError for duplicate task_ids,
    before anything is written, so `load_jsonl(path)` always reads back what was written.
    """
    lines = []
    seen: set[str] = set()
    for task in tasks:
        if task.task_id in seen:
            raise ValueError(f"write_jsonl: duplicate task_id {task.task_id!r}")
        seen.add(task.task_id)
        lines.append(json.dumps(task.to_json(), ensure_ascii=False, allow_nan=False))
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
