"""Math final-answer verifier on `math-verify` (SPEC R2.2, seed 002 §3.1, eq.27-28).

Pipeline for one output:
  1. length cap: an output longer than `max_output_chars` fails (bounded time, no parsing).
  2. reasoning blocks (`<think>…</think>`) are removed: an answer that appears only in the
     reasoning is not an answer.
  3. the final slot is located, in this order: the last `<answer>…</answer>` (a `\\boxed{}`
     inside it wins), else the `\\boxed{}` / `\\fbox{}` answers, else the text after the last
     "answer:" / "answer is" marker on its line, else (if `allow_plain_number`) a last line that
     is just a number. No slot → fail (components["format"] = 0).
  4. traps rejected before any symbolic work: NaN, and infinities unless the gold has one; an
     answer longer than `max_answer_chars`.
  5. equivalence with math-verify, gold parsed first (its README's advice), with
     `parsing_timeout=None, timeout_seconds=None`: the time limit is ours — steps 2-6 all run
     in a persistent helper process killed after `timeout_s` (works from threads and
     processes), and every extraction step is linear in the output's length. A verifier
     timeout is decision "unknown" with evidence timeout_class "verifier_service".
  6. several boxed answers (`boxed_policy`): "reject_conflicting" (default) passes only if every
     boxed answer is equivalent to the gold — hedging "\\boxed{1} or \\boxed{2}" fails;
     "reject_multiple" fails any output with more than one; "last" grades the last one only.

`task.reference_answer` is the gold: a string (LaTeX or plain) or a number.
Components: {"correct": 0/1, "format": 0/1}.
"""

from __future__ import annotations

import logging
import math as _pymath
import re
from typing import List, Optional, Sequence, Tuple

from rlvr.records.task import TaskSpec
from rlvr.verifiers._subproc import HelperDied, HelperPool, HelperTimeout
from rlvr.verifiers.base import Verifier
from rlvr.records.verdict import Verdict, env_error

BOXED_POLICIES = ("reject_conflicting", "reject_multiple", "last")
ISOLATIONS = ("process", "none")

_NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?"
_PLAIN_NUMBER_LINE = re.compile(
    r"^\s*(?:\$\s*)?(?:\\\(\s*)?(" + _NUMBER + r"|" + r"[-+]?\d+\s*/\s*\d+" + r")\s*(?:\\\))?"
    r"(?:\s*\$)?\s*\.?\s*$")
_ANSWER_MARKER = re.compile(r"(?:final\s+answer|answer)\s*(?:is|:|=)\s*:?", re.IGNORECASE)
_NAN = re.compile(r"(?<![a-zA-Z])nan(?![a-zA-Z])|\\mathrm\{nan\}|not\s+a\s+number",
                  re.IGNORECASE)
_INF = re.compile(r"\\infty|\\infin|(?<![a-zA-Z\\])inf(?:inity)?(?![a-zA-Z])|∞", re.IGNORECASE)


_BOX_OR_BRACE = re.compile(r"\\(?:boxed|fbox)\s*\{|[{}]")


def find_boxed(text: str) -> List[str]:
    """Contents of every `\\boxed{…}` / `\\fbox{…}` with balanced braces, in order of their
    start (an unclosed one is skipped). One pass with a stack of open braces: linear time."""
    stack: List[int] = []  # for each open brace: the content start if it opens a box, else -1
    found: List[Tuple[int, str]] = []
    for m in _BOX_OR_BRACE.finditer(text):
        tok = m.group()
        if tok == "}":
            if stack:
                start = stack.pop()
                if start >= 0:
                    found.append((start, text[start:m.start()].strip()))
        else:
            stack.append(m.end() if len(tok) > 1 else -1)
    found.sort(key=lambda x: x[0])
    return [c for _, c in found]


def _blocks(text: str, open_tag: str, close_tag: str):
    """(open_start, content_start, content_end, close_end) of each `<tag>…</tag>` block, left to
    right without overlap, each open tag paired with the first close tag after it (as the
    regex `<tag>.*?</tag>` would, but in linear time); an open tag with no close tag after it
    ends the list, reported as (open_start, content_start, None, None)."""
    opens = [m.span() for m in re.finditer(re.escape(open_tag), text, re.IGNORECASE)]
    closes = [m.span() for m in re.finditer(re.escape(close_tag), text, re.IGNORECASE)]
    out, ci, pos = [], 0, 0
    for o_start, o_end in opens:
        if o_start < pos:
            continue
        while ci < len(closes) and closes[ci][0] < o_end:
            ci += 1
        if ci == len(closes):
            out.append((o_start, o_end, None, None))
            break
        out.append((o_start, o_end, closes[ci][0], closes[ci][1]))
        pos = closes[ci][1]
    return out


def strip_reasoning(text: str, tags: Sequence[str] = ("think",)) -> str:
    """Removes `<tag>…</tag>` blocks; an unclosed reasoning block swallows the rest (nothing
    after it is a final slot). Linear time."""
    for tag in tags:
        pieces, pos = [], 0
        for o_start, _, _, c_end in _blocks(text, f"<{tag}>", f"</{tag}>"):
            pieces.append(text[pos:o_start])
            pieces.append(" ")
            pos = len(text) if c_end is None else c_end
        pieces.append(text[pos:])
        text = "".join(pieces)
    return text


def extract_final_answers(text: str, *, allow_plain_number: bool = True,
                          reasoning_tags: Sequence[str] = ("think",)) -> Tuple[List[str], str]:
    """Candidate final answers and the slot they came from (linear time in len(text)).

    Returns (answers, slot) with slot ∈ {"answer_tag", "boxed", "marker", "plain_number",
    "none"}; `answers` has more than one element only for several boxed answers.
    """
    text = strip_reasoning(text, reasoning_tags)
    tags = [b for b in _blocks(text, "<answer>", "</answer>") if b[2] is not None]
    if tags:
        inner = text[tags[-1][1]:tags[-1][2]]
        boxed = find_boxed(inner)
        return (boxed, "answer_tag") if boxed else ([inner.strip()], "answer_tag")
    boxed = find_boxed(text)
    if boxed:
        return boxed, "boxed"
    markers = list(_ANSWER_MARKER.finditer(text))
    if markers:
        rest = text[markers[-1].end():].strip().splitlines()
        ans = rest[0].strip() if rest else ""
        ans = ans.rstrip(".").strip()
        if ans.startswith("$") and ans.endswith("$") and len(ans) > 1:
            ans = ans.strip("$").strip()
        if ans:
            return [ans], "marker"
    if allow_plain_number:
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        if lines:
            m = _PLAIN_NUMBER_LINE.match(lines[-1])
            if m:
                return [m.group(1)], "plain_number"
    return [], "none"


def _as_latex(s: str) -> str:
    s = str(s).strip()
    if "\\boxed" in s or "$" in s:
        return s
    return "\\boxed{" + s + "}"


def _warmup():
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    import math_verify  # noqa: F401


def _equivalence(gold, answers, float_rounding, numeric_precision, strict):
    """→ (list[bool], gold_repr, [answer_repr]) with math-verify."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    from math_verify import parse, verify
    import sympy

    gold_parsed = parse(_as_latex(gold), parsing_timeout=None)
    results, reprs = [], []
    for ans in answers:
        parsed = parse(_as_latex(ans), parsing_timeout=None)
        bad = False
        for p in parsed:
            if isinstance(p, sympy.Basic) and (p.has(sympy.nan) or p == sympy.nan):
                bad = True
        ok = (not bad) and bool(parsed) and bool(gold_parsed) and verify(
            gold_parsed, parsed, float_rounding=float_rounding,
            numeric_precision=numeric_precision, strict=strict, timeout_seconds=None)
        results.append(bool(ok))
        reprs.append(str(parsed[0])[:200] if parsed else None)
    return results, (str(gold_parsed[0])[:200] if gold_parsed else None), reprs


def _check(req: dict) -> dict:
    """Steps 2-6 of the pipeline for one output: extraction, traps, equivalence. Runs in the
    helper process, so the time limit covers all of it (or inline for isolation="none").

    Returns {"ev": evidence, "fail": (reason, format) } for an early fail, else {"ev",
    "results", "gold_repr", "reprs"}.
    """
    answers, slot = extract_final_answers(req["output"],
                                          allow_plain_number=req["allow_plain_number"],
                                          reasoning_tags=req["reasoning_tags"])
    if not answers:
        return {"ev": {}, "fail": ("no_final_answer", 0.0)}
    ev = {"slot": slot, "extracted": [a[:200] for a in answers]}
    if any(not a for a in answers):
        return {"ev": ev, "fail": ("empty_answer", 0.0)}
    if any(len(a) > req["max_answer_chars"] for a in answers):
        return {"ev": ev, "fail": ("answer_too_long", 1.0)}
    if len(answers) > 1 and req["boxed_policy"] == "reject_multiple":
        return {"ev": ev, "fail": ("multiple_boxed", 1.0)}
    if req["boxed_policy"] == "last":
        answers = answers[-1:]
    if any(_NAN.search(a) for a in answers):
        return {"ev": ev, "fail": ("nan_answer", 1.0)}
    if not _INF.search(req["gold"]) and any(_INF.search(a) for a in answers):
        return {"ev": ev, "fail": ("infinite_answer", 1.0)}
    results, gold_repr, reprs = _equivalence(req["gold"], answers, req["float_rounding"],
                                             req["numeric_precision"], req["strict"])
    return {"ev": ev, "results": results, "gold_repr": gold_repr, "reprs": reprs}


class MathVerifier(Verifier):
    """Final-answer math verifier (R2.2). See the module docstring for the pipeline.

    Args:
      boxed_policy: one of BOXED_POLICIES.
      max_output_chars: longer outputs fail without parsing.
      max_answer_chars: longer extracted answers fail.
      timeout_s: wall limit of one equivalence check (helper process killed past it).
      isolation: "process" (helper process, default) or "none" (inline; only for callers that
        bound time themselves, e.g. inside a VerificationPool process worker).
      float_rounding, numeric_precision, strict: passed to math_verify.verify.
      allow_plain_number: accept a last line that is only a number as the final slot.
      max_helpers: helper processes shared by concurrent threads.
    """

    version = "math-1"

    def __init__(self, *, boxed_policy: str = "reject_conflicting",
                 max_output_chars: int = 32_000, max_answer_chars: int = 512,
                 timeout_s: float = 5.0, isolation: str = "process", float_rounding: int = 6,
                 numeric_precision: int = 15, strict: bool = True,
                 allow_plain_number: bool = True, reasoning_tags: Sequence[str] = ("think",),
                 max_helpers: int = 2):
        if boxed_policy not in BOXED_POLICIES:
            raise ValueError(f"MathVerifier.boxed_policy must be one of {BOXED_POLICIES}, got "
                             f"{boxed_policy!r}")
        if isolation not in ISOLATIONS:
            raise ValueError(f"MathVerifier.isolation must be one of {ISOLATIONS}, got "
                             f"{isolation!r}")
        if not timeout_s > 0:
            raise ValueError(f"MathVerifier.timeout_s must be > 0, got {timeout_s!r}")
        self.boxed_policy = boxed_policy
        self.max_output_chars = int(max_output_chars)
        self.max_answer_chars = int(max_answer_chars)
        self.timeout_s = float(timeout_s)
        self.isolation = isolation
        self.float_rounding = float_rounding
        self.numeric_precision = numeric_precision
        self.strict = strict
        self.allow_plain_number = allow_plain_number
        self.reasoning_tags = tuple(reasoning_tags)
        self.max_helpers = max_helpers
        self._pool: Optional[HelperPool] = None

    # helper processes are per-process state: not pickled
    def __getstate__(self):
        d = dict(self.__dict__)
        d["_pool"] = None
        return d

    def close(self):
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def _fail(self, reason: str, fmt: float, **ev) -> Verdict:
        return Verdict(decision="fail", components={"correct": 0.0, "format": fmt},
                       evidence={"reason": reason, **ev}, verifier_version=self.version)

    def _verify(self, task: TaskSpec, output: str) -> Verdict:
        gold = task.reference_answer
        if isinstance(gold, bool) or not isinstance(gold, (str, int, float)) or (
                isinstance(gold, float) and not _pymath.isfinite(gold)):
            raise ValueError(f"MathVerifier: task {task.task_id!r} reference_answer must be a "
                             f"string or finite number, got {gold!r}")
        gold = str(gold)
        if len(output) > self.max_output_chars:
            return self._fail("output_too_long", 0.0, chars=len(output))
        req = {"output": output, "gold": gold, "allow_plain_number": self.allow_plain_number,
               "reasoning_tags": self.reasoning_tags, "max_answer_chars": self.max_answer_chars,
               "boxed_policy": self.boxed_policy, "float_rounding": self.float_rounding,
               "numeric_precision": self.numeric_precision, "strict": self.strict}
        if self.isolation == "none":
            out = _check(req)
        else:
            if self._pool is None:
                self._pool = HelperPool(_check, warmup=_warmup, max_helpers=self.max_helpers)
            try:
                out = self._pool.call(req, self.timeout_s)
            except HelperTimeout:
                return Verdict(decision="unknown", components={"format": 1.0},
                               evidence={"reason": "verifier_timeout",
                                         "timeout_class": "verifier_service",
                                         "timeout_s": self.timeout_s},
                               verifier_version=self.version)
            except HelperDied as e:
                return env_error(f"math helper died: {e}", verifier_version=self.version,
                                 timeout_class="environment_init" if "start" in str(e) else None)
        ev = out["ev"]
        if "fail" in out:
            reason, fmt = out["fail"]
            return self._fail(reason, fmt, **ev)
        results, gold_repr, reprs = out["results"], out["gold_repr"], out["reprs"]
        ev.update(parsed=reprs, gold_parsed=gold_repr, per_answer=results)
        if gold_repr is None:
            raise ValueError(f"MathVerifier: gold {gold!r} of task {task.task_id!r} did not parse")
        if all(results):
            return Verdict(decision="pass", components={"correct": 1.0, "format": 1.0},
                           evidence=ev, verifier_version=self.version)
        reason = "conflicting_boxed" if any(results) else "not_equivalent"
        return self._fail(reason, 1.0, **ev)
