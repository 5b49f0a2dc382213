"""reasoning-gym generators as TaskSpecs (docs/architecture.md §3, §4).

`generate("chain_sum", n, split=..., seed=..., **config)` draws entries from
`reasoning_gym.create_dataset(generator, size=, seed=, **config)` and wraps each as a TaskSpec:

  prompt            = entry["question"]
  task_type         = "text" (the generator's own scorer decides, not the math verifier)
  reference_answer  = {"generator", "config", "answer", "metadata"} — all that the generator's
                      `score_answer` needs (rlvr.verifiers.reasoning_gym.ReasoningGymVerifier)
  public_metadata   = {"source": "reasoning_gym:<generator>", "split", "generator"}

The entry's metadata is normalised to plain JSON at creation (tuples → lists), so a task written
to JSONL and read back scores exactly as the original. Splits are disjoint by question text
(rlvr.tasks.splits). reasoning-gym is imported lazily (it takes ~1 s).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from rlvr.tasks import splits
from rlvr.records.task import TaskSpec

PREFIX = "reasoning_gym"
_CHUNK = 64


def generator_names() -> tuple[str, ...]:
    """All reasoning-gym generator names."""
    from reasoning_gym.factory import DATASETS

    return tuple(sorted(DATASETS))


def check_generator(generator: str) -> str:
    names = generator_names()
    if generator not in names:
        raise ValueError(f"unknown reasoning-gym generator {generator!r}; allowed: {', '.join(names)}")
    return generator


def source_name(generator: str) -> str:
    return f"{PREFIX}:{generator}"


def _plain_json(value: Any, generator: str, what: str) -> Any:
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise ValueError(f"reasoning-gym generator {generator!r}: entry {what} is not JSON data ({e}); "
                         "this generator cannot be stored as TaskSpecs") from None


def generate(generator: str, n: int, *, split: str = "train", seed: splits.SeedLike = 0,
             **config: Any) -> list[TaskSpec]:
    """Draws `n` distinct tasks of one split from a reasoning-gym generator.

    Args:
      generator: reasoning-gym dataset name, e.g. "basic_arithmetic", "chain_sum".
      n: number of tasks.
      split: "train" | "eval" | "unseen" (disjoint by question text).
      seed: int (or numpy Generator, consumed once); deterministic per seed.
      **config: the generator's config knobs (difficulty), e.g. min_terms=2, max_terms=3.
    """
    import reasoning_gym

    check_generator(generator)
    splits.check_split(split)
    seed = splits.seed_int(seed)
    config = _plain_json(dict(config), generator, "config")
    rng = splits.make_rng(seed, PREFIX, generator, split)

    def entries():
        while True:  # chunks from widely spaced seeds (entry i of seed s is entry i-1 of s+1)
            chunk_seed = int(rng.integers(0, 2**62))
            yield from reasoning_gym.create_dataset(generator, size=_CHUNK, seed=chunk_seed, **config)

    stream = entries()
    picked = splits.draw_distinct(n, split, lambda: next(stream), key=lambda e: e["question"])
    name = source_name(generator)
    return [
        TaskSpec(
            task_id=f"rg-{generator}-{splits.content_hash(e['question'])[:16]}",
            prompt=e["question"],
            task_type="text",
            reference_answer={
                "generator": generator,
                "config": config,
                "answer": _plain_json(e["answer"], generator, "answer"),
                "metadata": _plain_json(e.get("metadata", {}), generator, "metadata"),
            },
            public_metadata={"source": name, "split": split, "generator": generator},
            random_seed=seed,
        )
        for e in picked
    ]


def demonstration(task: TaskSpec) -> str:
    """The generator's oracle answer (reasoning-gym's `entry["answer"]`) as the completion."""
    ref = task.reference_answer
    if not isinstance(ref, Mapping) or not isinstance(ref.get("answer"), str):
        raise ValueError(f"task {task.task_id!r} has no string reasoning-gym oracle answer")
    return ref["answer"]


def verifier(**kwargs):
    from rlvr.verifiers.reasoning_gym import ReasoningGymVerifier

    return ReasoningGymVerifier(**kwargs)
