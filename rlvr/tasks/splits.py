"""Train / eval / unseen splits for generated tasks (docs/architecture.md §4, §3: "training may use
controlled randomisation; evaluation reports both a fixed seed set and an unseen seed set").

A generator's seed decides which instances it draws; the *split* decides which instances it may
draw at all. Every instance has a content key (e.g. the prompt, or the sorted numbers and the
target); a stable hash of the key puts it into one of 100 buckets, and each split owns a fixed,
disjoint range of buckets. So no eval or unseen instance can ever appear in training, whatever
seeds are used, and the same holds between eval and unseen.
"""

from __future__ import annotations

import hashlib
from typing import Union

import numpy as np

# bucket ranges [lo, hi) out of 100
SPLITS = {"train": (0, 80), "eval": (80, 90), "unseen": (90, 100)}
SeedLike = Union[int, np.random.Generator]


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {tuple(SPLITS)}, got {split!r}")
    return split


def content_hash(key: str) -> str:
    """A stable (process- and platform-independent) hex digest of an instance's content key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def split_of(key: str) -> str:
    """The split that owns an instance with content key `key`."""
    bucket = int(content_hash(key)[:8], 16) % 100
    for name, (lo, hi) in SPLITS.items():
        if lo <= bucket < hi:
            return name
    raise AssertionError("bucket ranges must cover 0..99")


def make_rng(seed: SeedLike, *salt: str) -> np.random.Generator:
    """A numpy Generator from an int seed (mixed with string salts such as generator and split
    names), or a fresh int drawn from a given Generator. Deterministic per (seed, salt)."""
    if isinstance(seed, np.random.Generator):
        seed = int(seed.integers(0, 2**63 - 1))
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int or a numpy Generator, got {seed!r}")
    salt_ints = [int(content_hash(s)[:8], 16) for s in salt]
    return np.random.default_rng(np.random.SeedSequence([int(seed) % 2**63, *salt_ints]))


def seed_int(seed: SeedLike) -> int:
    """The int that names a seed in task ids/metadata (a Generator is consumed once)."""
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(0, 2**31 - 1))
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int or a numpy Generator, got {seed!r}")
    return int(seed)


def int_range(name: str, value, lo_min: int, hi_max: int) -> tuple[int, int]:
    """Validates an inclusive (lo, hi) knob; an int n means (n, n)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    ok = (isinstance(value, (tuple, list)) and len(value) == 2
          and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
          and lo_min <= value[0] <= value[1] <= hi_max)
    if not ok:
        raise ValueError(
            f"{name} must be an int or (lo, hi) with {lo_min} <= lo <= hi <= {hi_max}, got {value!r}")
    return (int(value[0]), int(value[1]))


def draw_distinct(n: int, split: str, draw, key, max_attempts: int | None = None,
                  allow_fewer: bool = False) -> list:
    """Draws `n` instances with distinct content keys, all owned by `split`.

    Args:
      n: how many instances.
      split: "train" | "eval" | "unseen".
      draw: () -> instance, a random draw (from a seeded rng, so the result is deterministic).
      key: instance -> str, its content key.
      max_attempts: draws allowed before giving up (default 200 * n + 1000).
      allow_fewer: return what was found instead of raising (still deterministic).
    Raises:
      ValueError when the instance space of the split is too small for `n` distinct instances
      (unless allow_fewer).
    """
    check_split(split)
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an int >= 0, got {n!r}")
    max_attempts = 200 * n + 1000 if max_attempts is None else max_attempts
    seen: set[str] = set()
    out = []
    for _ in range(max_attempts):
        if len(out) == n:
            break
        item = draw()
        k = key(item)
        if k in seen or split_of(k) != split:
            continue
        seen.add(k)
        out.append(item)
    if len(out) < n and not allow_fewer:
        raise ValueError(
            f"only {len(out)} distinct {split!r} instances found in {max_attempts} draws, {n} asked: "
            "the difficulty setting has too few distinct instances for this split")
    return out
