"""Math final-answer verifier on `math-verify` (docs/verifiers.md §2).

Pipeline for one output:
  1. length cap: an output longer than `max_output_chars` fails (bounded time, no parsing).
  2. reasoning blocks (`<think>…</think>`) are removed: an answer that appears only in the
     reasoning is not an answer.
  3. the final slot is located, in this order: the last `<answer>…</answer>` (a `\\boxed{}`
     inside it wins), else the outermost `\\boxed{}` / `\\fbox{}` answers (a box inside a box is
     part of it), else the text after the last "answer:" / "answer is" marker on its line, else
     (if `allow_plain_number`) a last line that is just a number. No slot → fail
     (components["format"] = 0). After the last box, a later final-answer statement whose value
     is a number or inline math ("… \\boxed{42}. The correct answer is 43.") is an answer too.
  4. every answer, and the gold, is normalised (`normalize_answer`, policy below); repeated
     identical answers count once.
  5. traps rejected before any symbolic work: NaN, and infinities unless the gold has one; an
     answer longer than `max_answer_chars`.
  6. equivalence with math-verify, gold parsed first (its README's advice), with
     `parsing_timeout=None, timeout_seconds=None`: the time limit is ours — steps 2-7 all run
     in a persistent helper process killed after `timeout_s` (works from threads and
     processes), and every extraction and normalisation step is linear in the output's length.
     A verifier timeout is decision "unknown" with evidence timeout_class "verifier_service".
  7. several answers (`boxed_policy`):
     * several distinct boxes whose list ("2, 3") equals a gold that is a set of two or more
       values ("2, 3", "\\{2, 3\\}", "x=2, x=3") pass under "reject_conflicting" and
       "reject_multiple": "\\boxed{2} and \\boxed{3}" answers "find all roots". Sets are
       unordered ("\\boxed{3} and \\boxed{2}" passes too); an ordered gold (a pair "(2, 3)", an
       interval) needs one box that writes it.
     * otherwise "reject_conflicting" (default) passes only if every box is equivalent to the
       gold — hedging "\\boxed{1} or \\boxed{2}" fails; "reject_multiple" fails any output with
       more than one distinct box; "last" grades the last one only.
     * a later final-answer statement (step 3): under "reject_conflicting" and
       "reject_multiple" conflicting answers fail — it must be equivalent to the gold as well as
       the box; under "last" the last stated final answer wins, so it alone is graded.

Normalisation policy (`normalize_answer`, applied before math-verify parses anything):
  * boxes: `\\boxed{…}` / `\\fbox{…}` wrappers inside an answer are dropped, keeping the
    contents (`\\boxed{\\boxed{42}}` is 42).
  * spacing: `\\,` `\\;` `\\:` `\\>` `\\ ` `~` `\\quad` `\\qquad` and non-breaking / thin spaces
    are spaces, `\\!` is nothing; digit groups of three after spaces are one number, the
    thousands-separator reading: `1\\,000`, `1 000`, `1\\!000` are 1000 (not 1·0). `{,}` is a
    comma; `1,000` and `1,000,000` are math-verify's thousands separators.
  * currency: `\\$`, `€`, `£`, `¥` are dropped; an odd number of `$` are currency signs
    (dropped); one `$…$` around the whole answer is dropped; `$…$` spans amid words are kept for
    math-verify to find ("the result is $5$"). "dollars" goes with the unit words below.
  * percent: "25 percent" / "25 per cent" is `25\\%`; math-verify grades `50\\%` (or `50%`)
    equal to a gold of 50, 50\\% or 0.5, and 50 or 0.5 equal to a gold of 50\\% — the sign may
    be written or not — while a bare 50 is not a gold of 0.5.
  * scientific notation: a number written `3e3`, `1.5E-3` is 3·10^3, 1.5·10^-3 (never
    3·e·3); `3 x 10^3` is `3\\times 10^3`; `×`, `·` are `\\times`, `\\cdot`; `−` is `-`.
  * text wrappers: `\\text`, `\\textrm`, `\\textbf`, `\\mathrm`, `\\mathbf`, `\\mbox` … around a
    lone sign are that sign (`\\text{-}5` is -5), around a number with words are the number
    (`\\text{5 cm}` is 5), around LaTeX commands are their contents, graded as math
    (`\\text{(\\frac{1}{2})+1}` is 3/2, where math-verify alone reads 1/2), empty ones are a
    space; other text is left to math-verify, which drops a `\\text{ cm}` unit after a number
    and reads `2 \\text{ and } 3` as a set.
  * unit words: a whole answer that is a number (or a fraction) followed only by words of two
    or more letters is that number: "18 dollars", "12 apples", "5 cm^2" are 18, 12, 5 — unless
    a word is maths or changes the value (pi, sin, log, mod, and, or, million, dozen, half,
    squared, …: "2 million" is not 2). Single letters stay ("5 m" is 5·m in plain text; write
    `5\\text{ m}`). The same holds inside a text wrapper (`\\text{3 thousand}` is not 3).
  * a trailing full stop is dropped.

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


def _boxed_spans(text: str) -> List[Tuple[int, int, str]]:
    """(content_start, close_end, content) of every outermost `\\boxed{…}` / `\\fbox{…}` with
    balanced braces, left to right (an unclosed one is skipped and encloses nothing; a closed
    box inside a closed box is part of the outer one's content). One pass with a stack of open
    braces, then one pass over the closed boxes sorted by start: O(n log n)."""
    stack: List[int] = []  # for each open brace: the content start if it opens a box, else -1
    closed: List[Tuple[int, int, str]] = []
    for m in _BOX_OR_BRACE.finditer(text):
        tok = m.group()
        if tok == "}":
            if stack:
                start = stack.pop()
                if start >= 0:
                    closed.append((start, m.end(), text[start:m.start()].strip()))
        else:
            stack.append(m.end() if len(tok) > 1 else -1)
    closed.sort(key=lambda x: x[0])
    found: List[Tuple[int, int, str]] = []
    for box in closed:  # balanced spans nest or are disjoint
        if not found or box[0] >= found[-1][1]:
            found.append(box)
    return found


def find_boxed(text: str) -> List[str]:
    """Contents of every outermost `\\boxed{…}` / `\\fbox{…}` with balanced braces, in order
    (linear time). `\\boxed{\\boxed{42}}` is one answer, `\\boxed{42}` once unwrapped by
    `normalize_answer`."""
    return [c for _, _, c in _boxed_spans(text)]


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


def _extract(text: str, *, allow_plain_number: bool = True,
             reasoning_tags: Sequence[str] = ("think",)) -> Tuple[List[str], str, Optional[str]]:
    """(answers, slot, later): `extract_final_answers` plus, for the boxed slot, the value of a
    final-answer statement after the last box ("… \\boxed{42}. The correct answer is 43." →
    "43"), or None. Only a value that is clearly one counts there: inline math (`$…$`,
    `\\(…\\)`) or a number, so "this answer is correct" is not an answer."""
    text = strip_reasoning(text, reasoning_tags)
    tags = [b for b in _blocks(text, "<answer>", "</answer>") if b[2] is not None]
    if tags:
        inner = text[tags[-1][1]:tags[-1][2]]
        boxed = find_boxed(inner)
        return (boxed, "answer_tag", None) if boxed else ([inner.strip()], "answer_tag", None)
    spans = _boxed_spans(text)
    if spans:
        after = text[spans[-1][1]:]
        markers = list(_ANSWER_MARKER.finditer(after))
        later = None
        if markers:
            m = _LATER_VALUE.match(after, markers[-1].end())
            if m:
                later = m.group(1).strip()
        return [c for _, _, c in spans], "boxed", later
    markers = list(_ANSWER_MARKER.finditer(text))
    if markers:
        rest = text[markers[-1].end():].strip().splitlines()
        ans = rest[0].strip() if rest else ""
        ans = ans.rstrip(".").strip()
        if ans.startswith("$") and ans.endswith("$") and len(ans) > 1:
            ans = ans.strip("$").strip()
        if ans:
            return [ans], "marker", None
    if allow_plain_number:
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        if lines:
            m = _PLAIN_NUMBER_LINE.match(lines[-1])
            if m:
                return [m.group(1)], "plain_number", None
    return [], "none", None


def extract_final_answers(text: str, *, allow_plain_number: bool = True,
                          reasoning_tags: Sequence[str] = ("think",)) -> Tuple[List[str], str]:
    """Candidate final answers and the slot they came from (linear time in len(text)).

    Returns (answers, slot) with slot ∈ {"answer_tag", "boxed", "marker", "plain_number",
    "none"}; `answers` has more than one element only for several boxed answers. The answers
    are as written; `normalize_answer` prepares one for parsing.
    """
    answers, slot, _ = _extract(text, allow_plain_number=allow_plain_number,
                                reasoning_tags=reasoning_tags)
    return answers, slot


# ---- answer normalisation (the policy is in the module docstring) -----------------------------
_NUM = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+"
_NUM_OR_FRAC = r"(?:" + _NUM + r"|[-+]?\d+\s*/\s*\d+|[-+]?\\[dt]?frac\{\d+\}\{\d+\})"
_LATER_VALUE = re.compile(
    r"\s*:?\s*(\$[^$\n]{1,200}\$|\\\((?:(?!\\\)).){1,200}\\\)|\\?\$?\s*" + _NUM_OR_FRAC
    + r"(?:\s*[eE][-+]?\d+)?(?:\s*\\?%)?)")
_UNICODE = {"\u2212": "-", "\u2013": "-", "\u00d7": "\\times ", "\u00b7": "\\cdot ",
            "\u22c5": "\\cdot ", "\u00a0": " ", "\u2009": " ", "\u202f": " ", "\u2007": " ",
            "\u20ac": "", "\u00a3": "", "\u00a5": ""}
_UNICODE_RE = re.compile("|".join(map(re.escape, _UNICODE)))
_SPACING = re.compile(r"\\\\|\\(?:[,;:>! ]|(?:q?quad|enspace|thinspace|medspace|thickspace|"
                      r"negthinspace)(?![a-zA-Z]))|~")
_TEXT_CMD = re.compile(r"\\(?:text(?:rm|normal|bf|it|sf|tt|up)?|math(?:rm|bf|it|sf|tt|normal)|"
                       r"boldsymbol|bm|mbox)\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
_SIGNS = {"-": "-", "+": "+", "\u2212": "-", "\u2013": "-"}
_NUM_WITH_TEXT_UNITS = re.compile(r"\s*(" + _NUM_OR_FRAC + r")\s*(?:[A-Za-z]+(?![A-Za-z])\.?\s*)*")
_PERCENT_WORD = re.compile(r"(?<=\d)\s*(?:percent|per\s+cent)(?![A-Za-z])", re.IGNORECASE)
_SCI = re.compile(r"(?<![\w.\\])(\d+(?:\.\d+)?)[eE]([-+]?\d+)(?![\w.])")
_TIMES_TEN = re.compile(r"(?<=\d)\s*[xX]\s*(?=10\s*\^)")
_DIGIT_GROUPS = re.compile(r"(?<![\d.])\d{1,3}(?: {1,2}\d{3})+(?![\d])")
_UNIT_WORDS = re.compile(r"\s*(" + _NUM_OR_FRAC + r"(?:\s*\\%)?)\s*((?:[A-Za-z]{2,}(?![A-Za-z])\.?"
                         r"(?:\^\{?\d\}?)?\s*)+)")
# words after a number that are maths or change its value: never dropped as units
_KEEP_WORDS = frozenset(
    "pi sin cos tan cot sec csc log ln lg exp sqrt arcsin arccos arctan sinh cosh tanh mod and "
    "or to nan inf infinity infty hundred hundreds thousand thousands million millions billion "
    "billions trillion trillions dozen dozens half halves third thirds quarter quarters fourth "
    "fourths fifth fifths tenth tenths squared cubed factorial times plus minus over".split())


def _droppable_units(words: str) -> bool:
    return not any(w.strip(".").split("^")[0].lower() in _KEEP_WORDS for w in words.split())


def _unbox(s: str) -> str:
    """Removes `\\boxed{` / `\\fbox{` wrappers (keeping their contents) in one pass."""
    out, pos, stack = [], 0, []
    for m in _BOX_OR_BRACE.finditer(s):
        tok = m.group()
        if tok == "}":
            if stack and stack.pop():
                out.append(s[pos:m.start()])
                pos = m.end()
        else:
            is_box = len(tok) > 1
            stack.append(is_box)
            if is_box:
                out.append(s[pos:m.start()])
                pos = m.end()
    out.append(s[pos:])
    return "".join(out)


def _text_cmd(m) -> str:
    content = m.group(1).strip()
    if not content:
        return " "
    if content in _SIGNS:
        return _SIGNS[content]
    if "\\" in content:  # LaTeX commands inside: math in a text wrapper, graded as math
        return content
    num = _NUM_WITH_TEXT_UNITS.fullmatch(content)
    if num and _droppable_units(content[num.end(1):]):
        return num.group(1)
    return m.group()


def _unit_words(s: str) -> str:
    m = _UNIT_WORDS.fullmatch(s)
    if m and _droppable_units(m.group(2)):
        return m.group(1)
    return s


def normalize_answer(s: str) -> str:
    """An answer (or gold) as written → the LaTeX handed to math-verify. Each step is one
    regex pass (linear time); the policy of each is in the module docstring."""
    s = _unbox(str(s))
    s = _UNICODE_RE.sub(lambda m: _UNICODE[m.group()], s)
    s = _dollars(s.replace("\\$", ""))
    s = s.replace("{,}", ",")
    s = _SPACING.sub(lambda m: m.group() if m.group() == "\\\\" else (
        "" if m.group() in ("\\!", "\\negthinspace") else " "), s)
    for _ in range(3):  # \text{\textbf{5}} and the like
        s2 = _TEXT_CMD.sub(_text_cmd, s)
        if s2 == s:
            break
        s = s2
    s = _PERCENT_WORD.sub(r"\\%", s)
    s = _SCI.sub(r"\1\\times10^{\2}", s)
    s = _TIMES_TEN.sub(r"\\times ", s)
    s = _DIGIT_GROUPS.sub(lambda m: m.group().replace(" ", ""), s)
    s = _unit_words(s.strip())
    s = s.strip()
    if s.endswith(".") and not s.endswith(".."):
        s = s[:-1].rstrip()
    return s


def _dollars(s: str) -> str:
    """Unescaped `$`: an odd number are currency signs (removed); one `$…$` span around the
    whole answer is removed; math spans amid words ("the result is $5$") are kept for
    math-verify to find."""
    n = s.count("$")
    if n % 2:
        return s.replace("$", "")
    t = s.strip()
    if n == 2 and t.startswith("$") and t.endswith("$"):
        return t[1:-1]
    return s


def _as_latex(s: str) -> str:
    return s if "$" in s else "\\boxed{" + s + "}"


def _warmup():
    """Imports math-verify and runs one check, so that the lazy imports of a first parse
    (sympy's printers, the LaTeX grammar) happen before a helper counts as ready."""
    _check({"output": "\\boxed{\\frac{1}{2}} The answer is 0.5", "gold": "0.5",
            "allow_plain_number": True, "reasoning_tags": ("think",), "max_answer_chars": 512,
            "boxed_policy": "reject_conflicting", "float_rounding": 6, "numeric_precision": 15,
            "strict": True})


class _Grader:
    """math-verify equivalence against one gold (parsed once)."""

    def __init__(self, gold: str, float_rounding, numeric_precision, strict):
        logging.getLogger("math_verify").setLevel(logging.ERROR)
        from math_verify import parse, verify
        import sympy

        self._parse, self._verify, self._sympy = parse, verify, sympy
        self.kw = dict(float_rounding=float_rounding, numeric_precision=numeric_precision,
                       strict=strict, timeout_seconds=None)
        self.gold = parse(_as_latex(gold), parsing_timeout=None)
        g0 = self.gold[0] if self.gold else None
        # a set of two or more values ("2, 3", "\{2, 3\}", "x=2, x=3"): order does not matter
        self.multi_valued = isinstance(g0, sympy.FiniteSet) and len(g0) >= 2
        self.reprs: List[Optional[str]] = []

    @property
    def gold_repr(self) -> Optional[str]:
        return str(self.gold[0])[:200] if self.gold else None

    def __call__(self, ans: str) -> bool:
        parsed = self._parse(_as_latex(ans), parsing_timeout=None)
        self.reprs.append(str(parsed[0])[:200] if parsed else None)
        sympy = self._sympy
        if any(isinstance(p, sympy.Basic) and (p.has(sympy.nan) or p == sympy.nan)
               for p in parsed):
            return False
        return bool(parsed) and bool(self.gold) and bool(
            self._verify(self.gold, parsed, **self.kw))


def _check(req: dict) -> dict:
    """Steps 2-6 of the pipeline for one output: extraction, normalisation, traps, equivalence.
    Runs in the helper process, so the time limit covers all of it (or inline for
    isolation="none").

    Returns {"ev": evidence, "fail": (reason, format)} for an early fail, else {"ev",
    "passed", "reason", "gold_repr"}.
    """
    raw, slot, later = _extract(req["output"], allow_plain_number=req["allow_plain_number"],
                                reasoning_tags=req["reasoning_tags"])
    if not raw:
        return {"ev": {}, "fail": ("no_final_answer", 0.0)}
    ev = {"slot": slot, "extracted": [a[:200] for a in raw]}
    if later is not None:
        ev["later_statement"] = later[:200]
    if any(not a for a in raw):
        return {"ev": ev, "fail": ("empty_answer", 0.0)}
    if any(len(a) > req["max_answer_chars"] for a in raw):
        return {"ev": ev, "fail": ("answer_too_long", 1.0)}
    policy = req["boxed_policy"]
    boxes = list(dict.fromkeys(normalize_answer(a) for a in raw))  # distinct, in order
    later_n = normalize_answer(later) if later is not None else None
    if later_n is not None and policy != "last" and later_n in boxes and len(boxes) == 1:
        later_n = None  # "\boxed{42} … the answer is 42": one answer stated twice
    ev["normalized"] = [a[:200] for a in boxes] + ([later_n[:200]] if later_n else [])
    if any(not a for a in boxes):
        return {"ev": ev, "fail": ("empty_answer", 0.0)}
    if policy == "last":
        boxes, graded_later = [later_n if later_n else boxes[-1]], None
    else:
        graded_later = later_n
    checked = boxes + ([graded_later] if graded_later else [])
    if any(_NAN.search(a) for a in checked):
        return {"ev": ev, "fail": ("nan_answer", 1.0)}
    if not _INF.search(req["gold"]) and any(_INF.search(a) for a in checked):
        return {"ev": ev, "fail": ("infinite_answer", 1.0)}
    grade = _Grader(normalize_answer(req["gold"]), req["float_rounding"],
                    req["numeric_precision"], req["strict"])
    if len(boxes) == 1:
        boxes_ok, reason = grade(boxes[0]), "not_equivalent"
    else:
        # several distinct boxes: one list answer when the gold is a set of values ("\boxed{2}
        # and \boxed{3}" for "2, 3"); otherwise every box must be right (reject_conflicting)
        # or the output fails (reject_multiple)
        boxes_ok = grade.multi_valued and grade(", ".join(boxes))
        ev["boxes_as_list"] = bool(boxes_ok)
        if not boxes_ok and policy == "reject_multiple":
            return {"ev": ev, "fail": ("multiple_boxed", 1.0)}
        if not boxes_ok:
            per_box = [grade(b) for b in boxes]
            boxes_ok = all(per_box)
            reason = "conflicting_boxed" if any(per_box) else "not_equivalent"
    passed = boxes_ok
    if boxes_ok and graded_later:
        passed = grade(graded_later)
        reason = "later_answer_differs"
    ev["parsed"] = grade.reprs
    return {"ev": ev, "passed": bool(passed), "reason": None if passed else reason,
            "gold_repr": grade.gold_repr}


class MathVerifier(Verifier):
    """Final-answer math verifier (docs/verifiers.md §2). See the module docstring for the pipeline.

    Args:
      boxed_policy: one of BOXED_POLICIES.
      max_output_chars: longer outputs fail without parsing.
      max_answer_chars: longer extracted answers fail.
      timeout_s: wall limit of one check (extraction to equivalence), counted from when the
        request reaches a helper process, from any thread; past it the helper is killed, the
        verdict is "unknown", and a spare helper kept warm answers the next call.
      isolation: "process" (helper process, default) or "none" (inline; only for callers that
        bound time themselves, e.g. inside a VerificationPool process worker).
      float_rounding, numeric_precision, strict: passed to math_verify.verify.
      allow_plain_number: accept a last line that is only a number as the final slot.
      max_helpers: checks that may run at once (threads); one more helper is kept as a spare.

    Helper processes are fresh interpreters that import this module, never the caller's main
    script, so scripts without an `if __name__ == "__main__":` guard and code read from stdin
    work. The first call waits for a helper to start (seconds; bounded at 60 s); `warm()`
    starts them ahead.
    """

    version = "math-2"

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

    def _helpers(self) -> HelperPool:
        if self._pool is None:
            self._pool = HelperPool(_check, warmup=_warmup, max_helpers=self.max_helpers)
        return self._pool

    def warm(self) -> None:
        """Starts the helper processes and waits until one is ready (no-op inline)."""
        if self.isolation == "process":
            self._helpers().warm()

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
            try:
                out = self._helpers().call(req, self.timeout_s)
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
        ev["gold_parsed"] = out["gold_repr"]
        if out["gold_repr"] is None:
            raise ValueError(f"MathVerifier: gold {gold!r} of task {task.task_id!r} did not parse")
        if out["passed"]:
            return Verdict(decision="pass", components={"correct": 1.0, "format": 1.0},
                           evidence=ev, verifier_version=self.version)
        return self._fail(out["reason"], 1.0, **ev)
