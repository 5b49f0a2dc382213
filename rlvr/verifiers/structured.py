"""Structured-output verifier: parse gate → JSON Schema → cross-field constraints → semantic
check (docs/verifiers.md §2).

Schema-valid is necessary, not sufficient (docs/verifiers.md §2): a JSON object with the right shape can
still hold a wrong id or amount, so the decision is `pass` only when the semantic check passes
too. Format is rewarded far below correctness (docs/verifiers.md §2: R = R_semantic + λ_f R_format, λ_f ≪ 1;
`default_reward_config()`), and parse / hard constraints are gates (docs/verifiers.md §2), not penalties.

`task.reference_answer` (all optional, JSON):
    {"schema": {...JSON Schema...},          # else the verifier's schema
     "expected": {...},                      # semantic gold: every listed field (recursively)
                                             #   must equal the output's; extra fields allowed
     "constraints": [{"kind": "le", "left": "start", "right": "end"},
                     {"kind": "sum_equals", "items": "lines", "field": "amount",
                      "total": "total"},
                     {"kind": "eq" | "lt" | "ne", "left": path, "right": path}]}
Paths are dotted ("order.total"; list indices as numbers). The verifier may add named Python
constraints and a semantic function `semantic(obj, task) -> bool | None` (None = cannot
decide → decision "unknown", kept apart from fail).

Components: parse, schema, constraints, semantic, format (= parse ∧ schema), all 0/1.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping, Optional, Tuple

import jsonschema

from rlvr.records.task import TaskSpec
from rlvr.verifiers.base import Verifier
from rlvr.verifiers.compose import RewardConfig
from rlvr.records.verdict import Verdict

CONSTRAINT_KINDS = ("le", "lt", "eq", "ne", "sum_equals")
_MISSING = object()


def get_path(obj: Any, path: str) -> Any:
    """Value at dotted `path` in obj, or _MISSING."""
    cur = obj
    for part in str(path).split(".") if path else []:
        if isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.lstrip("-").isdigit() and -len(cur) <= int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return _MISSING
    return cur


def _num(x):
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def check_constraint(obj: Any, c: Mapping[str, Any]) -> Tuple[bool, str]:
    """Evaluates one declarative constraint; returns (ok, description)."""
    kind = c.get("kind")
    if kind not in CONSTRAINT_KINDS:
        raise ValueError(f"constraint kind must be one of {CONSTRAINT_KINDS}, got {kind!r}")
    if kind == "sum_equals":
        items, total = get_path(obj, c["items"]), get_path(obj, c["total"])
        if not isinstance(items, list) or _num(total) is None:
            return False, f"sum_equals: {c['items']} / {c['total']} missing"
        vals = [_num(get_path(it, c["field"])) for it in items]
        if any(v is None for v in vals):
            return False, f"sum_equals: non-numeric {c['field']}"
        tol = float(c.get("tol", 1e-9))
        return abs(sum(vals) - total) <= tol * max(1.0, abs(total)), \
            f"sum({c['items']}.{c['field']}) == {c['total']}"
    a, b = get_path(obj, c["left"]), get_path(obj, c["right"])
    desc = f"{c['left']} {kind} {c['right']}"
    if a is _MISSING or b is _MISSING:
        return False, desc + " (missing)"
    try:
        ok = {"le": lambda: a <= b, "lt": lambda: a < b, "eq": lambda: a == b,
              "ne": lambda: a != b}[kind]()
    except TypeError:
        return False, desc + " (incomparable)"
    return bool(ok), desc


def subset_equal(expected: Any, got: Any) -> bool:
    """Every field of `expected` (recursively for objects) equals the one in `got`."""
    if isinstance(expected, Mapping):
        return isinstance(got, Mapping) and all(
            k in got and subset_equal(v, got[k]) for k, v in expected.items())
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(expected) is type(got) and expected == got
    if isinstance(expected, list):
        return isinstance(got, list) and len(got) == len(expected) and all(
            subset_equal(e, g) for e, g in zip(expected, got))
    return expected == got


def _no_constants(name):
    raise ValueError(f"{name} is not valid JSON")


class StructuredVerifier(Verifier):
    """Structured-output verifier (docs/verifiers.md §2).

    Args:
      schema: default JSON Schema (a task's reference_answer["schema"] overrides it).
      constraints: named Python constraints name → fn(obj, task) -> bool (hard: a gate).
      semantic: fn(obj, task) -> bool | None; defaults to the "expected" subset match, and to
        "unknown" when the task has no "expected" and no semantic function is given.
      max_output_chars: longer outputs fail the parse gate.
      extract: "fenced" (last ```json block if any, else the whole output) or "strict".
    """

    version = "structured-1"

    def __init__(self, schema: Optional[Mapping[str, Any]] = None, *,
                 constraints: Mapping[str, Callable[[Any, TaskSpec], bool]] = None,
                 semantic: Optional[Callable[[Any, TaskSpec], Optional[bool]]] = None,
                 max_output_chars: int = 100_000, extract: str = "fenced"):
        if extract not in ("fenced", "strict"):
            raise ValueError(f"StructuredVerifier.extract must be 'fenced' or 'strict', got "
                             f"{extract!r}")
        if schema is not None:
            jsonschema.Draft202012Validator.check_schema(schema)
        self.schema = schema
        self.constraints = dict(constraints or {})
        self.semantic = semantic
        self.max_output_chars = max_output_chars
        self.extract = extract

    @staticmethod
    def default_reward_config(format_weight: float = 0.05) -> RewardConfig:
        """docs/verifiers.md §2: R = R_semantic + λ_f R_format with λ_f = 0.05 ≪ 1; parse and hard
        constraints gate the reward to 0."""
        return RewardConfig(kind="weighted", weights={"semantic": 1.0, "format": format_weight},
                            gates=("parse", "constraints"))

    def _parse(self, output: str):
        text = output.strip()
        if self.extract == "fenced" and "```" in text:
            blocks = re.findall(r"```(?:json)?[^\n]*\n(.*?)```", text, re.DOTALL)
            if blocks:
                text = blocks[-1].strip()
        return json.loads(text, parse_constant=_no_constants)

    def _verify(self, task: TaskSpec, output: str) -> Verdict:
        ref = task.reference_answer if isinstance(task.reference_answer, Mapping) else {}
        comps = {"parse": 0.0, "schema": 0.0, "constraints": 0.0, "semantic": 0.0,
                 "format": 0.0}
        ev: dict = {}

        def verdict(decision):
            return Verdict(decision=decision, components=comps, evidence=ev,
                           verifier_version=self.version)

        if len(output) > self.max_output_chars:
            ev["reason"] = "output_too_long"
            return verdict("fail")
        try:  # 1. parse gate (docs/verifiers.md §2)
            obj = self._parse(output)
        except (ValueError, RecursionError) as e:
            ev.update(reason="parse_error", error=str(e)[:200])
            return verdict("fail")
        comps["parse"] = 1.0
        schema = ref.get("schema", self.schema)  # 2. schema
        if schema is not None:
            validator = jsonschema.Draft202012Validator(
                schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
            errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.path))
            if errors:
                ev.update(reason="schema_error", schema_errors=[
                    f"{'/'.join(map(str, e.path)) or '<root>'}: {e.message}"[:200]
                    for e in errors[:5]])
                return verdict("fail")
        comps["schema"] = 1.0
        comps["format"] = 1.0
        failed = []  # 3. cross-field constraints (hard)
        for c in ref.get("constraints", []):
            ok, desc = check_constraint(obj, c)
            if not ok:
                failed.append(desc)
        for name, fn in self.constraints.items():
            if not fn(obj, task):
                failed.append(name)
        if failed:
            ev.update(reason="constraint_violated", violated=failed)
            return verdict("fail")
        comps["constraints"] = 1.0
        if self.semantic is not None:  # 4. semantic
            sem = self.semantic(obj, task)
        elif "expected" in ref:
            sem = subset_equal(ref["expected"], obj)
        else:
            sem = None
        if sem is None:
            ev["reason"] = "no_semantic_check"
            return verdict("unknown")
        if not sem:
            ev["reason"] = "semantically_wrong"
            return verdict("fail")
        comps["semantic"] = 1.0
        return verdict("pass")
