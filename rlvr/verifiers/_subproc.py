"""Persistent helper processes with a hard per-call time limit that holds from any thread.

`signal.alarm`-based timeouts (math-verify's) only work on the main thread of the main
interpreter. Here the work runs in a child process; the caller waits on a pipe with a deadline
and, past it, kills the child. Used by MathVerifier (`HelperPool`) and by the verification
pool's process workers (`start_process` / `kill_process`).

`HelperPool` starts its helpers as fresh interpreters (`python -c …`, the parent's `sys.path`)
that import only the module of the function they run, never the caller's main module. So a
script without an `if __name__ == "__main__":` guard, or code piped in on stdin, works as it
would with fork: multiprocessing's spawn would re-run such a script in every helper (or fail to
find `<stdin>`). The function must therefore live in an importable module, not in `__main__`;
`HelperPool` says so when it does not.

The pool keeps a spare helper started and idle: a call that times out kills its helper, and the
next call takes the spare instead of waiting for a fresh interpreter to import its libraries;
the replacement starts in the background. A helper dies with its parent, even in the middle of
a long computation (see `_watch_parent`).
"""

from __future__ import annotations

import atexit
import collections
import multiprocessing as mp
import multiprocessing.spawn
import os
import socket
import subprocess
import sys
import threading
import time
import weakref
from multiprocessing.connection import Connection
from typing import Any, Callable, Deque, Optional


class HelperTimeout(Exception):
    """The call ran past its deadline; the helper was killed."""


class HelperDied(Exception):
    """The helper process died (or could not start) before answering."""


def _serve(conn, fn, warmup):
    if warmup is not None:
        try:
            warmup()
        except Exception as e:  # noqa: BLE001
            conn.send(("start_error", f"warmup raised {type(e).__name__}: {e}"))
            return
    conn.send(("ready", None))
    while True:
        try:
            req = conn.recv()
        except (EOFError, OSError):
            return
        try:
            conn.send(("ok", fn(req)))
        except Exception as e:  # noqa: BLE001
            conn.send(("error", f"{type(e).__name__}: {e}"))


def _watch_parent(conn, life_fd: int) -> None:
    """Forks a watcher that SIGKILLs this helper once the parent is gone (the write end of the
    `life_fd` pipe, held only by the parent, closes): a helper busy in C code (a huge sympy
    power) holds the GIL and could not notice by itself. The watcher leaves with the helper."""
    import select
    import signal

    helper = os.getpid()
    if os.fork() != 0:
        os.close(life_fd)
        return
    try:
        os.close(conn.fileno())  # the helper's death must still close the call pipe
        while os.getppid() == helper:
            ready, _, _ = select.select([life_fd], [], [], 1.0)
            if ready:
                os.kill(helper, signal.SIGKILL)
                break
    finally:
        os._exit(0)


def _child_main(conn, life_fd: int) -> None:
    """Entry of a HelperPool child: receives (fn, warmup) by reference, then serves."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _watch_parent(conn, life_fd)
    try:
        fn, warmup = conn.recv()
    except Exception as e:  # noqa: BLE001
        conn.send(("start_error", f"could not load the helper function: "
                                  f"{type(e).__name__}: {e}"))
        return
    _serve(conn, fn, warmup)


# The child's first message is its sys.path, set before anything else is imported.
_BOOT = ("import sys\n"
         "from multiprocessing.connection import Connection\n"
         "c = Connection(int(sys.argv[1]))\n"
         "sys.path[:] = c.recv()\n"
         "from rlvr.verifiers._subproc import _child_main\n"
         "_child_main(c, int(sys.argv[2]))\n")


def start_process(ctx, target, args, *, start_timeout_s: float, name=None):
    """Starts `target(child_conn, *args)` in a daemon process; waits for its "ready" message.

    The child's first message must be a tuple whose first item is "ready".
    Returns (proc, conn, ready): ready is False if none came within `start_timeout_s` or the
    child died first (the caller then kills it and raises its own error).
    """
    conn, child = ctx.Pipe()
    proc = ctx.Process(target=target, args=(child, *args), daemon=True, name=name)
    proc.start()
    child.close()
    try:
        ready = bool(conn.poll(start_timeout_s)) and conn.recv()[0] == "ready"
    except (EOFError, OSError):
        ready = False
    return proc, conn, ready


def kill_process(proc, conn, join_s: float = 1.0) -> None:
    """Kills a worker process and closes its pipe; never raises."""
    try:
        proc.kill()
        proc.join(join_s)
    except Exception:  # noqa: BLE001
        pass
    try:
        conn.close()
    except Exception:  # noqa: BLE001
        pass


_LIVE: "weakref.WeakSet[_Helper]" = weakref.WeakSet()


@atexit.register
def _kill_live_helpers():
    for h in list(_LIVE):
        h.kill()


class _Helper:
    """One helper interpreter with a pipe; see the module docstring."""

    def __init__(self, fn, warmup, start_timeout_s: float):
        parent_sock, child_sock = socket.socketpair()
        child_fd = child_sock.fileno()
        life_r, self._life_w = os.pipe()  # the parent holds the write end until it exits
        try:
            self.proc = subprocess.Popen(
                [mp.spawn.get_executable(), "-c", _BOOT, str(child_fd), str(life_r)],
                pass_fds=(child_fd, life_r), stdin=subprocess.DEVNULL)
        except BaseException:
            os.close(self._life_w)
            parent_sock.close()
            raise
        finally:
            child_sock.close()
            os.close(life_r)
        self.conn = Connection(parent_sock.detach())
        _LIVE.add(self)
        try:
            self.conn.send(list(sys.path))
            self.conn.send((fn, warmup))
            if not self.conn.poll(start_timeout_s):
                raise HelperDied(f"helper did not start within {start_timeout_s}s")
            status, detail = self.conn.recv()
        except (EOFError, OSError) as e:
            self.kill()
            raise HelperDied(f"helper process died while starting (exit code "
                             f"{self.proc.poll()}); its stderr has the cause") from e
        except BaseException:
            self.kill()
            raise
        if status != "ready":
            self.kill()
            raise HelperDied(f"helper did not start: {detail}")

    def call(self, req: Any, timeout_s: float) -> Any:
        """fn(req) in the helper. HelperTimeout past `timeout_s` (the helper is killed),
        HelperDied if it dies, RuntimeError if fn raised (the helper stays usable)."""
        try:
            self.conn.send(req)
            if not self.conn.poll(timeout_s):
                self.kill()
                raise HelperTimeout(f"no answer within {timeout_s}s")
            status, value = self.conn.recv()
        except (EOFError, OSError) as e:
            self.kill()
            raise HelperDied(f"helper process died: {e!r}") from e
        if status == "error":
            raise RuntimeError(value)
        return value

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self):
        """Kills the process (SIGKILL, does not wait on the work) and closes the pipe."""
        try:
            self.proc.kill()
            self.proc.wait(1.0)
        except Exception:  # noqa: BLE001
            pass
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001
            pass
        life_w, self._life_w = self._life_w, -1  # close the fd once: its number gets reused
        if life_w >= 0:
            try:
                os.close(life_w)
            except OSError:
                pass


class HelperPool:
    """Persistent helper processes running `fn(request)`, thread-safe.

    At most `max_helpers` calls run at once; besides the busy helpers the pool keeps `spares`
    started, idle ones (so at most max_helpers + spares processes), starting replacements in
    background threads. `fn` and `warmup` must be module-level functions of an importable
    module (not `__main__`): the helpers import them by name.
    """

    def __init__(self, fn: Callable[[Any], Any], *, warmup: Optional[Callable[[], None]] = None,
                 max_helpers: int = 2, spares: int = 1, start_timeout_s: float = 60.0):
        for name, f in (("fn", fn), ("warmup", warmup)):
            if f is not None and getattr(f, "__module__", None) in ("__main__", "__mp_main__"):
                raise ValueError(
                    f"HelperPool.{name} {getattr(f, '__qualname__', f)!r} is defined in the main "
                    f"script; helper processes do not run the main script, so define it in an "
                    f"importable module")
        if max_helpers < 1:
            raise ValueError(f"HelperPool.max_helpers must be >= 1, got {max_helpers!r}")
        if spares < 0:
            raise ValueError(f"HelperPool.spares must be >= 0, got {spares!r}")
        self.fn = fn
        self.warmup = warmup
        self.max_helpers = max_helpers
        self.spares = spares
        self.start_timeout_s = start_timeout_s
        self._busy = threading.BoundedSemaphore(max_helpers)
        self._cond = threading.Condition()
        self._idle: Deque[_Helper] = collections.deque()
        self._count = 0  # helpers started or starting, not yet discarded
        self._starting = 0
        self._waiting = 0
        self._failures = 0
        self._last_error = ""
        self._closed = False

    # -- starting helpers (in background threads) --------------------------------------------
    def _replenish_locked(self) -> None:
        want = self._waiting + self.spares
        while (not self._closed and len(self._idle) + self._starting < want
               and self._count < self.max_helpers + self.spares):
            self._count += 1
            self._starting += 1
            threading.Thread(target=self._start_one, daemon=True,
                             name="rlvr-helper-start").start()

    def _start_one(self) -> None:
        try:
            h: Optional[_Helper] = _Helper(self.fn, self.warmup, self.start_timeout_s)
            err = ""
        except Exception as e:  # noqa: BLE001
            h, err = None, (str(e) if isinstance(e, HelperDied)
                            else f"could not start helper: {e!r}")
        with self._cond:
            self._starting -= 1
            if h is None or self._closed:
                self._count -= 1
                if h is None:
                    self._failures += 1
                    self._last_error = err
            else:
                self._idle.append(h)
            self._cond.notify_all()
        if h is not None and self._closed:
            h.kill()

    @property
    def idle_count(self) -> int:
        """Helpers started and idle now."""
        with self._cond:
            return len(self._idle)

    def warm(self, timeout_s: Optional[float] = None) -> None:
        """Starts the pool's helpers and waits until one is ready (HelperDied if none could
        start), so that the first call does not wait for an interpreter to start."""
        h = self._acquire(self.start_timeout_s if timeout_s is None else timeout_s)
        self._release(h)

    def _acquire(self, start_timeout_s: float) -> _Helper:
        deadline = time.monotonic() + start_timeout_s
        with self._cond:
            if self._closed:
                raise HelperDied("the helper pool is closed")
            failures0 = self._failures
            self._waiting += 1
            try:
                while True:
                    while self._idle:
                        h = self._idle.pop()
                        if h.alive():
                            return h
                        self._count -= 1
                        h.kill()
                    if self._failures != failures0:
                        raise HelperDied(self._last_error)
                    self._replenish_locked()
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise HelperDied(f"no helper started or became free within "
                                         f"{start_timeout_s}s")
                    self._cond.wait(remaining)
            finally:
                self._waiting -= 1
                self._replenish_locked()

    def _release(self, h: _Helper) -> None:
        with self._cond:
            if not self._closed:
                self._idle.append(h)
                self._cond.notify_all()
                return
        h.kill()

    def _discard(self, h: _Helper) -> None:
        h.kill()
        with self._cond:
            self._count -= 1
            self._replenish_locked()
            self._cond.notify_all()

    # -- calls ------------------------------------------------------------------------------
    def call(self, req: Any, timeout_s: float, *, start_timeout_s: Optional[float] = None) -> Any:
        """fn(req) in a helper, at most `timeout_s` seconds from when the request is sent
        (HelperTimeout, the helper killed). Waiting for a free or starting helper is bounded
        by `start_timeout_s` (HelperDied past it); with a spare warm it is only a hand-over."""
        wait_s = self.start_timeout_s if start_timeout_s is None else start_timeout_s
        if not self._busy.acquire(timeout=wait_s):
            raise HelperDied(f"no helper became free within {wait_s}s")
        try:
            helper = self._acquire(wait_s)
            try:
                out = helper.call(req, timeout_s)
            except RuntimeError:
                self._release(helper)  # fn raised; the helper itself is fine
                raise
            except BaseException:
                self._discard(helper)
                raise
            self._release(helper)
            return out
        finally:
            self._busy.release()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    def close(self):
        """Kills the idle helpers; busy and starting ones are killed when they come back."""
        with self._cond:
            self._closed = True
            idle, self._idle = list(self._idle), collections.deque()
            self._count -= len(idle)
            self._cond.notify_all()
        for h in idle:
            h.kill()
