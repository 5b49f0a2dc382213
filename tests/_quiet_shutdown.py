"""An xdist worker ends without a KeyboardInterrupt traceback (a pytest plugin; tests/conftest.py
uses its hook).

When the last worker reports its session finished, the controller tells every worker to exit, and
execnet (xdist's transport) gives a worker 5 s to be done: then it sends the worker a SIGINT. A
worker is not done when it reports: pytest's cleanup then runs five full garbage collections (to
report unraisable exceptions), which take seconds on the heap of a worker that ran JAX,
transformers and torch tests on a busy machine. Python runs the SIGINT's handler at the first
Python code after the collection in progress, which is the gc callback JAX registers
(`jax._src.lib._xla_gc_callback`, asking XLA to free the buffers of collected arrays); an exception
in a gc callback cannot propagate, so Python prints "Exception ignored in gc callback
<function _xla_gc_callback ...>" and a KeyboardInterrupt traceback at the end of a green session.

After a worker's last test (its `pytest_sessionfinish`, which runs before it reports), the worker
ignores SIGINT: its cleanup ends normally (execnet ends a worker still busy 10 s later itself), and
a user's Ctrl-C still stops the session, through the controller. JAX's callback is removed as well:
no device work is left to free memory for, and it is where an interrupt would surface.
"""

from __future__ import annotations

import gc
import signal
import sys
import threading


def quiet_worker_shutdown() -> None:
    """Ignores SIGINT from now on and removes JAX's gc callback when JAX is loaded."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    lib = sys.modules.get("jax._src.lib")
    callback = getattr(lib, "_xla_gc_callback", None)
    while callback is not None and callback in gc.callbacks:
        gc.callbacks.remove(callback)


def pytest_sessionfinish(session) -> None:
    if hasattr(session.config, "workerinput"):  # an xdist worker, not the controller
        quiet_worker_shutdown()
