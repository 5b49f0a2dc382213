"""Default verifier per task type: which verifier checks a task when nothing more specific is
known (no `public_metadata["source"]` with a verifier of its own, no verifier passed in).

    code       → CodeVerifier (rlvr.verifiers.code; needs the bubblewrap sandbox)
    math       → MathVerifier (rlvr.verifiers.math)
    structured → StructuredVerifier (rlvr.verifiers.structured)

"agent" and "text" tasks have no default: their checks depend on the environment or on the
task's own rules, so the caller must give a verifier.
"""

from __future__ import annotations

import importlib
from typing import Any

DEFAULT_VERIFIERS = {
    "code": ("rlvr.verifiers.code", "CodeVerifier"),
    "math": ("rlvr.verifiers.math", "MathVerifier"),
    "structured": ("rlvr.verifiers.structured", "StructuredVerifier"),
}


def default_verifier_class(task_type: str) -> type:
    """The verifier class for `task_type`; ValueError naming the types that have one."""
    if task_type not in DEFAULT_VERIFIERS:
        raise ValueError(f"no default verifier for task_type {task_type!r}; task types with one: "
                         f"{', '.join(DEFAULT_VERIFIERS)} (give a verifier for the others)")
    module, name = DEFAULT_VERIFIERS[task_type]
    return getattr(importlib.import_module(module), name)


def default_verifier_for_task_type(task_type: str, **kwargs: Any):
    """A new default verifier for `task_type` (kwargs go to its constructor)."""
    return default_verifier_class(task_type)(**kwargs)
