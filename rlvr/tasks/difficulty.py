"""Difficulty knobs of the procedural task generators: one resolver for presets and knob dicts."""

from __future__ import annotations

from typing import Any, Mapping, TypeVar

D = TypeVar("D")


def resolve_difficulty(difficulty: Any, presets: Mapping[str, D], cls: type) -> D:
    """None → presets["easy"]; a preset name; a mapping of knobs (→ `cls(**knobs)`); or a `cls`.

    Raises ValueError naming the presets for an unknown name or an unsupported type.
    """
    if difficulty is None:
        return presets["easy"]
    if isinstance(difficulty, cls):
        return difficulty
    if isinstance(difficulty, str):
        if difficulty not in presets:
            raise ValueError(f"difficulty must be one of {tuple(presets)} or knobs, got {difficulty!r}")
        return presets[difficulty]
    if isinstance(difficulty, Mapping):
        return cls(**difficulty)
    raise ValueError(f"difficulty must be None, a preset name, a mapping or {cls.__name__}, "
                     f"got {difficulty!r}")
