"""Stopping a run on SIGTERM / SIGINT without losing it (schedulers, preemptible VMs, Ctrl-C).

`StopSignals().install()` replaces the SIGTERM and SIGINT handlers (main thread only) with one
that records the first signal and puts both signals back to their default action, so a second
signal ends the process at once (the OS kills it, whatever it is doing). The loop asks
`agreed_stop(stop, num_processes)` at every step boundary: multi-host, the processes allgather
their flags, so every process stops at the same step even when the signal reached only some of
them. The loop then saves a checkpoint at the step reached, writes that step's metrics, closes
its writers and raises `Preempted`: a `SystemExit` whose status is 128 + the signal number (143
for SIGTERM, 130 for SIGINT, as a shell reports a process ended by that signal), which a
scheduler or wrapper can read as "stopped, resumable". Relaunching the same command resumes
from that checkpoint.
"""

from __future__ import annotations

import signal
import threading
from typing import Optional

import numpy as np

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(SystemExit):
    """The run stopped on a signal after saving a checkpoint at `step` (exit status
    128 + signum)."""

    def __init__(self, signum: int, step: int, workdir: str):
        super().__init__(128 + int(signum))
        self.signum, self.step, self.workdir = int(signum), int(step), workdir

    def __str__(self) -> str:
        return (f"stopped by {signal.Signals(self.signum).name} at step {self.step}; the checkpoint "
                f"of step {self.step} is saved in {self.workdir}: relaunch the same command to "
                f"resume (exit status {self.code})")


class StopSignals:
    """Records the first SIGTERM / SIGINT (module docstring). `install()` / `restore()`;
    outside the main thread it installs nothing (signals go to the main thread only)."""

    def __init__(self):
        self.signum: Optional[int] = None
        self._previous: dict = {}

    def install(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.signum is None:
            self.signum = signum
        for s in SIGNALS:  # a second signal takes the default action: the process ends at once
            signal.signal(s, signal.SIG_DFL)

    def restore(self) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        self._previous = {}


def agreed_stop(stop: StopSignals, num_processes: int = 1) -> Optional[int]:
    """The signal to stop on now, or None. Multi-host (a collective: every process calls it at the
    same step boundary): any process's signal stops them all at this step."""
    local = int(stop.signum or 0)
    if num_processes == 1:
        return local or None
    from jax.experimental import multihost_utils

    flags = np.asarray(multihost_utils.process_allgather(np.array([local], np.int32))).reshape(-1)
    hit = [int(f) for f in flags if f]
    return hit[0] if hit else None
