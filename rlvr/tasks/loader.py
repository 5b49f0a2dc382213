"""JSONL task files: one TaskSpec record per line (SPEC R6.5, seed 002 §4.1).

`load_jsonl` validates every record and, if anything is wrong, raises ONE `TaskFileError` that
lists every bad line with its 1-based line number and field. Nothing is silently dropped:
invalid JSON, NaN/Infinity literals, unknown fields, missing or mistyped fields and duplicate
task_ids are all errors. Blank (whitespace-only) lines carry no record and are skipped.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Iterable, Union

from rlvr.records.task import TaskSpec, TaskSpecError, validate_record

PathLike = Union[str, os.PathLike]


@dataclasses.dataclass(frozen=True)
class LineError:
    """One problem in a task file: 1-based `line`, the `field` at fault and a message."""

    line: int
    field: str
    message: str

    def __str__(self):
        return f"line {self.line}: {self.field}: {self.message}"


class TaskFileError(ValueError):
    """A task file has bad records. `errors` lists every LineError; `path` names the file;
    `unit` says what the numbers count: "line" (JSONL, 1-based) or "row" (Parquet, 0-based)."""

    def __init__(self, path: PathLike, errors: Iterable[LineError], unit: str = "line"):
        self.path = os.fspath(path)
        self.errors = list(errors)
        self.unit = unit
        bad_lines = sorted({e.line for e in self.errors})
        head = f"{self.path}: {len(bad_lines)} bad {unit}(s) {bad_lines}"
        lines = [f"  {e}" if unit == "line" else f"  row {e.line}: {e.field}: {e.message}"
                 for e in self.errors]
        super().__init__(head + "\n" + "\n".join(lines))


def _reject_constant(name: str):
    raise ValueError(f"{name} is not allowed (only finite numbers)")


def read_json_lines(path: PathLike) -> tuple[list[tuple[int, Any]], list[LineError]]:
    """(rows, errors) of a JSONL file: rows are (1-based line number, parsed value); blank lines
    are skipped; a line that is not UTF-8 or not JSON (NaN / Infinity included) is an error."""
    rows, errors = [], []
    with open(path, "rb") as f:
        raw_lines = f.read().split(b"\n")
    for lineno, raw in enumerate(raw_lines, start=1):
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


def load_jsonl(path: PathLike) -> list[TaskSpec]:
    """Reads and validates a JSONL task file.

    Args:
      path: file with one JSON object per line, fields as in `rlvr.records.task.FIELDS`.
    Returns:
      the TaskSpecs in file order.
    Raises:
      TaskFileError: listing every bad line (line number, field, message), including duplicate
        task_ids (pointing at the first occurrence) and a file with no records at all.
      FileNotFoundError: when the file does not exist.
    """
    tasks: list[TaskSpec] = []
    first_line_of: dict[str, int] = {}
    rows, errors = read_json_lines(path)
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
        tasks.append(task)
    if not tasks and not errors:
        errors.append(LineError(0, "<file>", "no records (the file is empty)"))
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
