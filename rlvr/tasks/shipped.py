"""Small JSONL task files shipped in `rlvr/tasks/data/` (examples and fixed eval sets).

The procedural files are exactly the generators' output for the settings in `GENERATED`, so a
test can check they never drift; rebuild them with `python -m rlvr.tasks.shipped`.
`examples.jsonl` is hand-written: it shows every docs/architecture.md §3 field in use.
"""

from __future__ import annotations

import os

from rlvr.tasks import arithmetic, countdown
from rlvr.tasks.loader import load_jsonl, write_jsonl
from rlvr.records.task import TaskSpec

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

# file name → (generator module, generate() keyword arguments)
GENERATED = {
    "arithmetic_easy_eval.jsonl": (arithmetic, dict(n=20, split="eval", seed=0, difficulty="easy")),
    "countdown_easy_eval.jsonl": (countdown, dict(n=20, split="eval", seed=0, difficulty="easy")),
}


def path(name: str) -> str:
    """Absolute path of a shipped file; ValueError listing the files for an unknown name."""
    names = sorted(os.listdir(DATA_DIR))
    if name not in names:
        raise ValueError(f"no shipped task file {name!r}; available: {names}")
    return os.path.join(DATA_DIR, name)


def load(name: str) -> list[TaskSpec]:
    return load_jsonl(path(name))


def expected(name: str) -> list[TaskSpec]:
    """What a GENERATED file must contain."""
    module, kwargs = GENERATED[name]
    kwargs = dict(kwargs)
    n = kwargs.pop("n")
    return module.generate(n, **kwargs)


def regenerate() -> None:
    for name in GENERATED:
        write_jsonl(expected(name), os.path.join(DATA_DIR, name))


if __name__ == "__main__":
    regenerate()
    print(f"wrote {sorted(GENERATED)} to {DATA_DIR}")
