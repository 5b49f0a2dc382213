"""How every benchmark script ends: its table printed, and written to `--out` when one is given."""

from __future__ import annotations

import os
from typing import Optional


def emit(text: str, out: Optional[str] = None) -> str:
    """Prints `text`; with `out`, also writes it there (its folder made, one final newline).
    Returns `text`."""
    print(text)
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            f.write(text if text.endswith("\n") else text + "\n")
    return text
