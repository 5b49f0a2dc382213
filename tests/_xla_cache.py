"""The test session's persistent XLA compilation cache folder: made per session, named by the
process that owns it, so a later session can remove the folders of sessions that were killed
before they could remove their own."""

import glob
import os
import re
import shutil
import tempfile

PREFIX = "rlvr-tests-xla-cache-"


def make_cache_dir() -> str:
    """A fresh folder `<tmp>/rlvr-tests-xla-cache-<pid>-<random>` for this process's session."""
    return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")


def remove_stale_cache_dirs(tmp: str | None = None) -> list[str]:
    """Removes the cache folders whose owning process no longer runs; returns their paths.

    Folders of live processes (a concurrent session) and folders not named by a process id are
    kept.
    """
    removed = []
    for path in glob.glob(os.path.join(tmp or tempfile.gettempdir(), PREFIX + "*")):
        m = re.fullmatch(re.escape(PREFIX) + r"(\d+)-.*", os.path.basename(path))
        if m is None:
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except (PermissionError, OverflowError):
            pass
    return removed
