"""Procedural arithmetic tasks: prompt "12+7*3=", completion "33" (docs/architecture.md §3).

Integer operands, binary operators from {+, -, *} with the usual precedence (no parentheses, no
division, so every answer is an integer), answer = the canonical decimal integer, checked by
`rlvr.verifiers.arithmetic.IntegerAnswerVerifier`. Prompts and answers are short and use only
`ALPHABET`, so a tiny character-level model can learn them on a CPU.

Difficulty knobs (`ArithmeticDifficulty`): number of operands, digits per operand, operator set.
Presets "easy" / "medium" / "hard" give the fixed mixture of seed docs/algorithms.md (A.20).
Splits (train / eval / unseen) never share an instance: see `rlvr.tasks.splits`.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Union

from rlvr.tasks import splits
from rlvr.tasks.difficulty import resolve_difficulty as _resolve
from rlvr.records.task import TaskSpec
from rlvr.verifiers.arithmetic import IntegerAnswerVerifier
from rlvr.verifiers.countdown import safe_eval

NAME = "arithmetic"
OPERATORS = "+-*"
ALPHABET = "0123456789+-*="  # every character of every prompt and answer
MAX_DIGITS = 6


@dataclasses.dataclass(frozen=True)
class ArithmeticDifficulty:
    """Difficulty knobs. Ranges are inclusive (lo, hi); an int n means (n, n).

    Attributes:
      num_operands: how many operands (>= 2).
      num_digits: digits per operand, drawn per operand (1 digit includes 0).
      operators: non-empty subset of "+-*".
    """

    num_operands: tuple[int, int] = (2, 2)
    num_digits: tuple[int, int] = (1, 1)
    operators: str = "+-"

    def __post_init__(self):
        object.__setattr__(self, "num_operands", splits.int_range("num_operands", self.num_operands, 2, 16))
        object.__setattr__(self, "num_digits", splits.int_range("num_digits", self.num_digits, 1, MAX_DIGITS))
        if (not isinstance(self.operators, str) or not self.operators
                or not set(self.operators) <= set(OPERATORS)):
            raise ValueError(f"operators must be a non-empty subset of {OPERATORS!r}, got {self.operators!r}")
        object.__setattr__(self, "operators", "".join(sorted(set(self.operators), key=OPERATORS.index)))

    def to_json(self) -> dict:
        return {"num_operands": list(self.num_operands), "num_digits": list(self.num_digits),
                "operators": self.operators}


DIFFICULTIES = {
    "easy": ArithmeticDifficulty(num_operands=2, num_digits=1, operators="+-*"),
    "medium": ArithmeticDifficulty(num_operands=(2, 3), num_digits=(1, 2), operators="+-*"),
    "hard": ArithmeticDifficulty(num_operands=(3, 4), num_digits=(2, 3), operators="+-*"),
}
DifficultyLike = Union[None, str, Mapping, ArithmeticDifficulty]


def resolve_difficulty(difficulty: DifficultyLike) -> ArithmeticDifficulty:
    """None → "easy"; a preset name; a mapping of knobs; or a ArithmeticDifficulty."""
    return _resolve(difficulty, DIFFICULTIES, ArithmeticDifficulty)


def _draw_prompt(rng, d: ArithmeticDifficulty) -> str:
    k = int(rng.integers(d.num_operands[0], d.num_operands[1] + 1))
    parts = []
    for i in range(k):
        digits = int(rng.integers(d.num_digits[0], d.num_digits[1] + 1))
        lo = 0 if digits == 1 else 10 ** (digits - 1)
        parts.append(str(int(rng.integers(lo, 10**digits))))
        if i < k - 1:
            parts.append(d.operators[int(rng.integers(len(d.operators)))])
    return "".join(parts) + "="


def answer_of(prompt: str) -> int:
    """The integer value of a prompt "<expression>=" (exact, via the whitelisted evaluator)."""
    value = safe_eval(prompt[:-1], OPERATORS)
    assert value.denominator == 1
    return int(value)


def generate(n: int, *, split: str = "train", seed: splits.SeedLike = 0,
             difficulty: DifficultyLike = None, allow_fewer: bool = False) -> list[TaskSpec]:
    """Generates `n` distinct arithmetic tasks of one split, deterministically per seed.

    Args:
      n: number of tasks.
      split: "train" | "eval" | "unseen"; disjoint instance sets (rlvr.tasks.splits).
      seed: int (or numpy Generator, consumed once).
      difficulty: preset name, knob mapping or ArithmeticDifficulty (default "easy").
      allow_fewer: when the split has fewer than n distinct instances at this difficulty,
        return those found instead of raising ValueError.
    Returns:
      TaskSpecs with task_type "math", reference_answer the int answer,
      public_metadata {"source", "split", "difficulty"}.
    """
    splits.check_split(split)
    d = resolve_difficulty(difficulty)
    seed = splits.seed_int(seed)
    rng = splits.make_rng(seed, NAME, split)
    prompts = splits.draw_distinct(n, split, lambda: _draw_prompt(rng, d), key=lambda p: p,
                                     allow_fewer=allow_fewer)
    meta = {"source": NAME, "split": split, "difficulty": d.to_json()}
    return [
        TaskSpec(
            task_id=f"{NAME}-{splits.content_hash(p)[:16]}",
            prompt=p,
            task_type="math",
            reference_answer=answer_of(p),
            public_metadata=dict(meta),
            random_seed=seed,
        )
        for p in prompts
    ]


def demonstration(task: TaskSpec) -> str:
    """The oracle completion (without EOS) for an arithmetic task: its canonical answer."""
    ref = task.reference_answer
    if not isinstance(ref, int) or isinstance(ref, bool):
        raise ValueError(f"task {task.task_id!r} is not an arithmetic task (reference_answer {ref!r})")
    return str(ref)


def verifier(max_chars: int = 1000) -> IntegerAnswerVerifier:
    return IntegerAnswerVerifier(max_chars=max_chars)


__all__ = ["ALPHABET", "ArithmeticDifficulty", "DIFFICULTIES", "generate", "demonstration",
           "verifier", "answer_of", "resolve_difficulty"]
