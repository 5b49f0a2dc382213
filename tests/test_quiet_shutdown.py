"""xdist workers end without the KeyboardInterrupt traceback execnet's SIGINT used to cause in
JAX's gc callback (tests/_quiet_shutdown.py)."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A worker that keeps a heap large enough that pytest's five cleanup collections after its last
# test outlast execnet's 5 s of patience (as the suite's workers do on a busy machine), JAX loaded.
SLOW_CLEANUP_TEST = textwrap.dedent("""\
    import jax.numpy as jnp

    HEAP = []


    def test_one():
        HEAP.extend([i] for i in range(5_000_000))
        assert int(jnp.ones(3).sum()) == 3
    """)


def test_quiet_worker_shutdown_ignores_sigint_and_removes_jax_gc_callback():
    import jax  # noqa: F401  (registers the callback)
    from jax._src import lib

    from tests._quiet_shutdown import quiet_worker_shutdown

    before = signal.getsignal(signal.SIGINT)
    callbacks = list(gc.callbacks)
    assert lib._xla_gc_callback in callbacks
    try:
        quiet_worker_shutdown()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert lib._xla_gc_callback not in gc.callbacks
        assert [c for c in callbacks if c is not lib._xla_gc_callback] == gc.callbacks
    finally:
        signal.signal(signal.SIGINT, before)
        gc.callbacks[:] = callbacks


def test_quiet_worker_shutdown_only_in_workers():
    """The controller (no workerinput) keeps its SIGINT handler: Ctrl-C stops the session."""
    from tests._quiet_shutdown import pytest_sessionfinish

    class Session:
        class config:  # noqa: N801
            pass

    before = signal.getsignal(signal.SIGINT)
    pytest_sessionfinish(Session())
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.slow
def test_slow_worker_cleanup_ends_without_keyboard_interrupt(tmp_path):
    """Without the plugin this prints "Exception ignored in: <function _xla_gc_callback>" and a
    KeyboardInterrupt traceback (a PytestUnraisableExceptionWarning) after "1 passed"."""
    (tmp_path / "test_one.py").write_text(SLOW_CLEANUP_TEST)
    env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "1",
                        "-p", "tests._quiet_shutdown", "--rootdir", str(tmp_path), str(tmp_path)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout[-2000:] + p.stderr[-3000:]
    assert "KeyboardInterrupt" not in p.stdout + p.stderr, p.stderr[-3000:]
