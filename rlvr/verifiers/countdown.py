"""`CountdownVerifier`: an arithmetic expression over given numbers must hit a target
(docs/verifiers.md (V.1), §2 — parser special values and exception branches are classic
reward hacks, so the parser is a whitelist).

Task: `reference_answer = {"numbers": [3, 7, 25], "target": 68, "operators": "+-*"}` (operators
optional, default "+-*/"). The completion, stripped of surrounding whitespace, must be one
expression built only from

  * integer literals, each one of the given numbers, each given number used at most once
    (a number given twice may be used twice);
  * binary operators from the task's operator set and parentheses.

Evaluation is exact (`fractions.Fraction`) over a whitelisted `ast` tree — never `eval`. Unary
minus, powers, names, calls, floats, underscores in literals ("2_5"), leading zeros, "=" and
any other character fail the format gate. Division by zero fails. Intermediate values may be
fractions (the value of the expression is what counts).

Components: {"correct": 0/1, "format": 0/1}; "format" = the expression is well formed and uses
allowed numbers/operators; "correct" = additionally its value equals the target. The decision
is "pass" iff correct. A malformed reference_answer is the task's fault: `_verify` raises and
the `Verifier` base class reports an env_error.
"""

from __future__ import annotations

import ast
import collections
from fractions import Fraction
from typing import Iterable, Optional

from rlvr.verifiers.base import Verifier
from rlvr.records.verdict import Verdict

ALL_OPERATORS = "+-*/"
_AST_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_CHARS = frozenset("0123456789+-*/() ")


class ExpressionError(ValueError):
    """The text is not a whitelisted arithmetic expression (message says why)."""


MAX_DEPTH = 64  # nesting levels of a countdown expression; real answers use < 10


def parse_expression(text: str, operators: str = ALL_OPERATORS, max_chars: int = 200) -> ast.AST:
    """Parses `text` into a whitelisted ast tree of int literals and binary `operators`.

    Raises ExpressionError (never anything else) for anything outside the grammar.
    """
    if len(text) > max_chars:
        raise ExpressionError(f"too long ({len(text)} > {max_chars} chars)")
    bad = sorted(set(text) - _CHARS)
    if bad:
        raise ExpressionError(f"characters not allowed: {''.join(bad)[:20]!r}")
    if not text.strip():
        raise ExpressionError("empty")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise ExpressionError(f"syntax error: {type(e).__name__}") from None

    # Iterative walk with an explicit depth bound: the verdict must not depend on the
    # interpreter's recursion limit (other libraries raise it), and `evaluate` recurses.
    stack = [(tree.body, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ExpressionError(f"expression nested too deeply (> {MAX_DEPTH} levels)")
        if isinstance(node, ast.BinOp):
            op = _AST_OPS.get(type(node.op))
            if op is None or op not in operators:
                raise ExpressionError(f"operator {type(node.op).__name__} not allowed")
            stack.append((node.left, depth + 1))
            stack.append((node.right, depth + 1))
        elif isinstance(node, ast.Constant):
            if type(node.value) is not int:
                raise ExpressionError(f"literal {node.value!r} is not an integer")
        else:
            raise ExpressionError(f"{type(node).__name__} not allowed")
    return tree.body


def literals(node: ast.AST) -> list[int]:
    """The integer literals of a parsed expression, left to right."""
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant)]


def evaluate(node: ast.AST) -> Fraction:
    """Exact value of a parsed expression. Raises ZeroDivisionError on division by zero."""
    if isinstance(node, ast.Constant):
        return Fraction(node.value)
    left, right = evaluate(node.left), evaluate(node.right)
    op = _AST_OPS[type(node.op)]
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    return left / right


def safe_eval(text: str, operators: str = ALL_OPERATORS, max_chars: int = 200) -> Fraction:
    """Parses and evaluates an arithmetic expression without `eval` (exact, whitelisted)."""
    return evaluate(parse_expression(text, operators, max_chars))


def uses_at_most_once(used: Iterable[int], numbers: Iterable[int]) -> Optional[int]:
    """Returns a literal used more often than it is given (or not given at all), else None."""
    have = collections.Counter(numbers)
    for value, count in collections.Counter(used).items():
        if count > have.get(value, 0):
            return value
    return None


class CountdownVerifier(Verifier):
    """Verifier for countdown tasks (see module docstring).

    Args:
      max_chars: completions longer than this fail unparsed (bounded time).
    """

    version = "countdown/1"

    def __init__(self, max_chars: int = 200):
        if not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"CountdownVerifier.max_chars must be an int >= 1, got {max_chars!r}")
        self.max_chars = max_chars

    @staticmethod
    def _reference(task):
        ref = task.reference_answer
        ok = (isinstance(ref, dict) and isinstance(ref.get("numbers"), list)
              and all(type(n) is int for n in ref["numbers"]) and type(ref.get("target")) is int
              and set(ref.get("operators", ALL_OPERATORS)) <= set(ALL_OPERATORS))
        if not ok:
            raise ValueError(
                f"CountdownVerifier: task {task.task_id!r} reference_answer must be "
                f'{{"numbers": [int, ...], "target": int, "operators": subset of {ALL_OPERATORS!r}}}, '
                f"got {ref!r}")
        return ref["numbers"], ref["target"], ref.get("operators", ALL_OPERATORS)

    def _verify(self, task, output: str) -> Verdict:
        numbers, target, operators = self._reference(task)
        try:
            tree = parse_expression(output, operators, self.max_chars)
        except ExpressionError as e:
            return self.binary_verdict(False, False, reason="malformed", detail=str(e),
                                 expression=output.strip()[:64])
        expression = output.strip()
        reused = uses_at_most_once(literals(tree), numbers)
        if reused is not None:
            return self.binary_verdict(False, False, reason="number_not_available", number=reused,
                                 expression=expression)
        try:
            value = evaluate(tree)
        except ZeroDivisionError:
            return self.binary_verdict(False, True, reason="division_by_zero", expression=expression)
        correct = value == target
        return self.binary_verdict(correct, True, reason="correct" if correct else "wrong_value",
                             value=str(value), expression=expression)
