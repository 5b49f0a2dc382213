"""Procedural countdown tasks: prompt "3,7,25:68=", completion "25*3-7" (docs/architecture.md §3).

Given numbers and a target, write one expression that uses each given number at most once
(operators from the task's set, parentheses allowed) and evaluates exactly to the target;
checked by `rlvr.verifiers.countdown.CountdownVerifier` (whitelisted `ast`, never `eval`).

Every generated task is solvable: the target is the value of a random expression tree over all
the given numbers whose intermediate results are positive integers (classic countdown rules);
that expression, printed with the fewest parentheses, is the task's demonstration and is kept
in `reference_answer["solution"]` (never in the prompt or the public metadata).

Difficulty knobs (`CountdownDifficulty`): how many numbers, their maximum, operator set, the
largest target. Presets "easy" / "medium" / "hard". Splits never share an instance: the content
key is (sorted numbers, target), so a reordering of the same numbers is the same instance.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Union

from rlvr.tasks import splits
from rlvr.tasks.difficulty import resolve_difficulty as _resolve
from rlvr.records.task import TaskSpec
from rlvr.verifiers.countdown import ALL_OPERATORS, CountdownVerifier

NAME = "countdown"
ALPHABET = "0123456789+-*/(),:="  # every character of every prompt and answer
_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


@dataclasses.dataclass(frozen=True)
class CountdownDifficulty:
    """Difficulty knobs.

    Attributes:
      num_numbers: how many numbers are given, int or inclusive (lo, hi), 2..8.
      max_number: numbers are drawn uniformly from 1..max_number (2..1000).
      operators: non-empty subset of "+-*/".
      max_target: targets lie in 1..max_target.
    """

    num_numbers: tuple[int, int] = (3, 3)
    max_number: int = 10
    operators: str = "+-*"
    max_target: int = 100

    def __post_init__(self):
        object.__setattr__(self, "num_numbers", splits.int_range("num_numbers", self.num_numbers, 2, 8))
        for name, lo, hi in (("max_number", 2, 1000), ("max_target", 1, 10**6)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise ValueError(f"{name} must be an int in [{lo}, {hi}], got {v!r}")
        if (not isinstance(self.operators, str) or not self.operators
                or not set(self.operators) <= set(ALL_OPERATORS)):
            raise ValueError(f"operators must be a non-empty subset of {ALL_OPERATORS!r}, got {self.operators!r}")
        object.__setattr__(self, "operators",
                           "".join(sorted(set(self.operators), key=ALL_OPERATORS.index)))

    def to_json(self) -> dict:
        return {"num_numbers": list(self.num_numbers), "max_number": self.max_number,
                "operators": self.operators, "max_target": self.max_target}


DIFFICULTIES = {
    "easy": CountdownDifficulty(num_numbers=2, max_number=20, operators="+-*", max_target=400),
    "medium": CountdownDifficulty(num_numbers=3, max_number=20, operators="+-*", max_target=200),
    "hard": CountdownDifficulty(num_numbers=4, max_number=50, operators="+-*/", max_target=1000),
}
DifficultyLike = Union[None, str, Mapping, CountdownDifficulty]


def resolve_difficulty(difficulty: DifficultyLike) -> CountdownDifficulty:
    """None → "easy"; a preset name; a mapping of knobs; or a CountdownDifficulty."""
    return _resolve(difficulty, DIFFICULTIES, CountdownDifficulty)


def _apply(op: str, a: int, b: int):
    """Classic countdown step: the result must be a positive integer, else None."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b if a > b else None
    if op == "*":
        return a * b
    return a // b if b and a % b == 0 else None


def _build(rng, nums: list[int], ops: str):
    """Random expression tree over `nums` (in order) → (tree, value) or None.

    A tree is an int leaf or a tuple (op, left, right)."""
    if len(nums) == 1:
        return nums[0], nums[0]
    cut = int(rng.integers(1, len(nums)))
    left, right = _build(rng, nums[:cut], ops), _build(rng, nums[cut:], ops)
    if left is None or right is None:
        return None
    for i in rng.permutation(len(ops)):
        value = _apply(ops[i], left[1], right[1])
        if value is not None and value > 0:
            return (ops[i], left[0], right[0]), value
    return None


def to_text(tree) -> str:
    """Prints an expression tree with the fewest parentheses (exact-arithmetic semantics)."""
    if isinstance(tree, int):
        return str(tree)
    op, left, right = tree
    lt, rt = to_text(left), to_text(right)
    if not isinstance(left, int) and _PREC[left[0]] < _PREC[op]:
        lt = f"({lt})"
    if not isinstance(right, int) and (
            _PREC[right[0]] < _PREC[op] or (_PREC[right[0]] == _PREC[op] and op in "-/")):
        rt = f"({rt})"
    return f"{lt}{op}{rt}"


def _draw(rng, d: CountdownDifficulty, max_tries: int = 10_000):
    for _ in range(max_tries):
        k = int(rng.integers(d.num_numbers[0], d.num_numbers[1] + 1))
        numbers = [int(x) for x in rng.integers(1, d.max_number + 1, size=k)]
        built = _build(rng, [numbers[i] for i in rng.permutation(k)], d.operators)
        if built is not None and 1 <= built[1] <= d.max_target:
            return numbers, built[1], to_text(built[0])
    raise ValueError(f"difficulty {d} produced no solvable instance in {max_tries} tries")


def _key(item) -> str:
    numbers, target, _ = item
    return f"{NAME}:{','.join(map(str, sorted(numbers)))}:{target}"


def generate(n: int, *, split: str = "train", seed: splits.SeedLike = 0,
             difficulty: DifficultyLike = None, allow_fewer: bool = False) -> list[TaskSpec]:
    """Generates `n` distinct, solvable countdown tasks of one split, deterministically per seed.

    Returns TaskSpecs with task_type "math", reference_answer
    {"numbers", "target", "operators", "solution"}, public_metadata {"source", "split",
    "difficulty"}. `allow_fewer` as in `arithmetic.generate`.
    """
    splits.check_split(split)
    d = resolve_difficulty(difficulty)
    seed = splits.seed_int(seed)
    rng = splits.make_rng(seed, NAME, split)
    items = splits.draw_distinct(n, split, lambda: _draw(rng, d), key=_key, allow_fewer=allow_fewer)
    meta = {"source": NAME, "split": split, "difficulty": d.to_json()}
    return [
        TaskSpec(
            task_id=f"{NAME}-{splits.content_hash(_key(item))[:16]}",
            prompt=f"{','.join(map(str, numbers))}:{target}=",
            task_type="math",
            reference_answer={"numbers": numbers, "target": target, "operators": d.operators,
                              "solution": solution},
            public_metadata=dict(meta),
            random_seed=seed,
        )
        for item in items
        for numbers, target, solution in [item]
    ]


def demonstration(task: TaskSpec) -> str:
    """The oracle completion (without EOS): the generating expression."""
    ref = task.reference_answer
    if not isinstance(ref, Mapping) or not isinstance(ref.get("solution"), str):
        raise ValueError(f"task {task.task_id!r} has no countdown solution in reference_answer")
    return ref["solution"]


def verifier(max_chars: int = 200) -> CountdownVerifier:
    return CountdownVerifier(max_chars=max_chars)


__all__ = ["ALPHABET", "CountdownDifficulty", "DIFFICULTIES", "generate", "demonstration",
           "verifier", "to_text", "resolve_difficulty"]
