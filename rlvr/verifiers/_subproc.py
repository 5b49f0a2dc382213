"""A persistent helper process with a hard per-call time limit that works from any thread.

`signal.alarm`-based timeouts (math-verify's) only work on the main thread of the main
interpreter. Here the work runs in a child process; the caller waits on a pipe with a deadline
and, past it, kills the child (a fresh one is started on the next call). Used by MathVerifier.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import threading
from typing import Any, Callable


class HelperTimeout(Exception):
    """The call ran past its deadline; the helper was killed."""


class HelperDied(Exception):
    """The helper process died (or could not start) before answering."""


def _serve(conn, fn, warmup):
    if warmup is not None:
        warmup()
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


class _Helper:
    def __init__(self, ctx, fn, warmup, start_timeout_s):
        self.proc, self.conn, ready = start_process(ctx, _serve, (fn, warmup),
                                                    start_timeout_s=start_timeout_s)
        if not ready:
            self.kill()
            raise HelperDied(f"helper did not start within {start_timeout_s}s")

    def call(self, req: Any, timeout_s: float) -> Any:
        try:
            self.conn.send(req)
            if not self.conn.poll(timeout_s):
                self.kill()
                raise HelperTimeout(f"no answer within {timeout_s}s")
            status, value = self.conn.recv()
        except (EOFError, OSError, BrokenPipeError) as e:
            self.kill()
            raise HelperDied(f"helper process died: {e!r}") from e
        if status == "error":
            raise RuntimeError(value)
        return value

    def alive(self) -> bool:
        return self.proc.is_alive()

    def kill(self):
        kill_process(self.proc, self.conn, 1.0)


class HelperPool:
    """Up to `max_helpers` persistent helper processes running `fn(request)`.

    `fn` must be a picklable module-level function. Thread-safe: concurrent callers each take
    an idle helper (starting one if fewer than `max_helpers` exist), else wait for one.
    """

    def __init__(self, fn: Callable[[Any], Any], *, warmup: Callable[[], None] | None = None,
                 max_helpers: int = 2, start_method: str = "spawn"):
        self.fn = fn
        self.warmup = warmup
        self.max_helpers = max_helpers
        self._ctx = mp.get_context(start_method)
        self._idle: "queue.LifoQueue[_Helper]" = queue.LifoQueue()
        self._count = 0
        self._lock = threading.Lock()

    def call(self, req: Any, timeout_s: float, *, start_timeout_s: float = 60.0) -> Any:
        helper = self._acquire(start_timeout_s)
        try:
            out = helper.call(req, timeout_s)
        except BaseException:
            with self._lock:
                self._count -= 1
            helper.kill()
            raise
        self._idle.put(helper)
        return out

    def _acquire(self, start_timeout_s: float) -> _Helper:
        while True:
            try:
                h = self._idle.get_nowait()
            except queue.Empty:
                h = None
            if h is not None:
                if h.alive():
                    return h
                with self._lock:
                    self._count -= 1
                continue
            with self._lock:
                can_start = self._count < self.max_helpers
                if can_start:
                    self._count += 1
            if can_start:
                try:
                    return _Helper(self._ctx, self.fn, self.warmup, start_timeout_s)
                except HelperDied:
                    with self._lock:
                        self._count -= 1
                    raise
                except Exception as e:  # noqa: BLE001
                    with self._lock:
                        self._count -= 1
                    raise HelperDied(f"could not start helper: {e!r}") from e
            try:
                h = self._idle.get(timeout=start_timeout_s)
            except queue.Empty as e:
                raise HelperDied("no helper became free") from e
            if h.alive():
                return h
            with self._lock:
                self._count -= 1

    def close(self):
        while True:
            try:
                h = self._idle.get_nowait()
            except queue.Empty:
                break
            h.kill()
            with self._lock:
                self._count -= 1
