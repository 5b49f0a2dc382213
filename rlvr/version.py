"""The code version: what a cache key needs beside the config (experiments, SFT warm starts).

`code_version()` is a short sha256 over the source of every module of the `rlvr` package (file
paths and contents), so a cached result computed by other code is never reused.
"""

from __future__ import annotations

import functools
import hashlib
import os

__version__ = "0.1.0"


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    root = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                h.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()[:16]
