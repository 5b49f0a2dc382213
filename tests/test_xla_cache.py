"""Compilation-cache folders of killed test sessions are removed; live sessions' are kept."""

import os
import subprocess
import sys

from tests._xla_cache import PREFIX, remove_stale_cache_dirs


def test_stale_cache_dirs_of_dead_processes_are_removed_and_live_ones_kept(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid now names no running process (a killed session's)
    dead = tmp_path / f"{PREFIX}{gone.pid}-abc"
    live = tmp_path / f"{PREFIX}{os.getpid()}-def"
    unnamed = tmp_path / f"{PREFIX}xyz"
    for d in (dead, live, unnamed):
        d.mkdir()
        (d / "entry").write_text("x")
    assert remove_stale_cache_dirs(str(tmp_path)) == [str(dead)]
    assert not dead.exists() and live.exists() and unnamed.exists()
