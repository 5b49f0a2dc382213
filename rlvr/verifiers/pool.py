"""Verification pool: many verdicts in parallel, honest about its own failures (docs/verifiers.md (V.1),
docs/verifiers.md §4, docs/architecture.md §1, §4).

`VerificationPool(verifier, num_workers=, timeout_s=, max_env_retries=, cache=, executor=)`
  * runs `verifier.verify` behind a small `Executor` interface: "process" (default; worker
    processes that are killed and replaced on timeout or crash), "thread", or "inline" (one
    call at a time on a watchdog thread). A cluster engine (e.g. Ray) plugs in by implementing
    `Executor.run`; nothing else changes.
  * per-call timeout, enforced by every executor: a call that runs past `timeout_s` is a
    "verifier_service" timeout (docs/architecture.md §4) → env_error; a worker that dies mid-call → env_error
    ("infrastructure"). "process" kills the call; "thread" and "inline" abandon it (a Python
    thread cannot be killed) and carry on with a fresh thread, so no verifier call can stall a
    training step by more than `timeout_s`. The training loop's default, `reward.executor =
    "inline"` (configs/base.py), therefore keeps the step bounded without the cost of worker
    processes; choose "process" for verifiers that may hang for good or burn CPU, and "ray"
    (rlvr.verifiers.ray_pool, optional dependency) to run the workers as actors on a Ray
    cluster at `ray_address`.
  * env_error verdicts (from the verifier itself, a timeout or a crash) are retried up to
    `max_env_retries` times, then returned as env_error — compose_reward masks them (valid
    False); they never become reward 0.
  * reward cache (docs/verifiers.md §4): looked up before and filled after verification, keyed with the
    environment version, verifier version and reward-config hash.
  * `stats()`: verdicts/s, decisions, env_error count, retries, timeouts by class, worker
    restarts, cache hits/misses.
"""

from __future__ import annotations

import abc
import ast
import collections
import dataclasses
import multiprocessing as mp
import pickle
import os
import queue
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from rlvr.records.task import TaskSpec
from rlvr.verifiers._subproc import kill_process, start_process
from rlvr.verifiers.cache import RewardCache, cache_key
from rlvr.records.verdict import TIMEOUT_CLASSES, Verdict, env_error

EXECUTORS = ("process", "thread", "inline", "ray")
__all__ = ["VerificationPool", "Executor", "InlineExecutor", "ThreadExecutor", "ProcessExecutor",
           "Outcome", "TIMEOUT_CLASSES", "EXECUTORS"]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """Result of one call on an executor: kind "ok" (verdict set), "timeout", "crash" (the
    worker died) or "error" (the call raised / could not be delivered)."""
    kind: str
    verdict: Optional[Verdict] = None
    detail: str = ""
    seconds: float = 0.0


class Executor(abc.ABC):
    """Runs verifier calls. `run(jobs, timeout_s)` → one Outcome per (task, output) job, in
    order. Implementations must not raise for a failing job."""

    restarts = 0

    def start(self, verifier) -> None:
        self.verifier = verifier

    @abc.abstractmethod
    def run(self, jobs: Sequence[Tuple[TaskSpec, str]], timeout_s: float) -> List[Outcome]: ...

    def close(self) -> None:
        pass


def _call_verifier(verifier, task, output) -> Outcome:
    t0 = time.monotonic()
    try:
        v = verifier.verify(task, output)
        return Outcome("ok", v, seconds=time.monotonic() - t0)
    except Exception as e:  # noqa: BLE001
        return Outcome("error", detail=f"{type(e).__name__}: {e}"[:300],
                       seconds=time.monotonic() - t0)


class _WatchdogThread:
    """One daemon thread that runs calls handed to it; the caller waits for each with a
    deadline. A daemon thread never holds up interpreter exit, even if a call never returns."""

    def __init__(self):
        self._jobs: "queue.SimpleQueue" = queue.SimpleQueue()
        threading.Thread(target=self._loop, daemon=True, name="rlvr-verify-watchdog").start()

    def _loop(self):
        while True:
            item = self._jobs.get()
            if item is None:
                return
            fn, args, box = item
            try:
                box.put(fn(*args))
            except BaseException as e:  # noqa: BLE001 — e.g. SystemExit from a verifier
                box.put(Outcome("error", detail=f"{type(e).__name__}: {e}"[:300]))

    def call(self, fn, args, timeout_s: float):
        """fn(*args) on the thread; raises queue.Empty when no answer came within timeout_s."""
        box: "queue.SimpleQueue" = queue.SimpleQueue()
        self._jobs.put((fn, args, box))
        return box.get(timeout=timeout_s)

    def retire(self):
        """The thread ends after its current call (if that ever returns)."""
        self._jobs.put(None)


class InlineExecutor(Executor):
    """One call at a time, in order, each bounded by `timeout_s`: the call runs on a watchdog
    thread while the caller waits with a deadline. A call past it is reported as "timeout"
    (an env_error of class "verifier_service", retried then masked by the pool) and abandoned:
    a Python thread cannot be killed, so it runs on in the background while a fresh thread
    takes the next call (counted in `restarts`). Verifiers therefore must tolerate a second
    call while an abandoned one is still running; for verifiers that can hang for good or
    burn CPU, use "process", whose workers are killed."""

    def __init__(self):
        self._watchdog: Optional[_WatchdogThread] = None

    def run(self, jobs, timeout_s):
        out = []
        for t, o in jobs:
            if self._watchdog is None:
                self._watchdog = _WatchdogThread()
            t0 = time.monotonic()
            try:
                out.append(self._watchdog.call(_call_verifier, (self.verifier, t, o), timeout_s))
            except queue.Empty:
                out.append(Outcome("timeout", detail=f"> {timeout_s}s",
                                   seconds=time.monotonic() - t0))
                self._watchdog.retire()
                self._watchdog = None
                self.restarts += 1
        return out

    def close(self):
        if self._watchdog is not None:
            self._watchdog.retire()
            self._watchdog = None


class ThreadExecutor(Executor):
    """A thread pool. A call past its timeout is reported as "timeout" and abandoned (a Python
    thread cannot be killed): use it with verifiers that bound their own time (MathVerifier's
    helper processes, CodeVerifier's sandbox)."""

    def __init__(self, num_workers: int = 2):
        self.num_workers = num_workers
        self._tp = None

    def start(self, verifier):
        super().start(verifier)
        from concurrent.futures import ThreadPoolExecutor

        self._tp = ThreadPoolExecutor(self.num_workers, thread_name_prefix="rlvr-verify")

    def run(self, jobs, timeout_s):
        started: Dict[int, float] = {}

        def job(i, t, o):
            started[i] = time.monotonic()
            return _call_verifier(self.verifier, t, o)

        futs = [self._tp.submit(job, i, t, o) for i, (t, o) in enumerate(jobs)]
        out: List[Optional[Outcome]] = [None] * len(jobs)
        while any(o is None for o in out):
            now = time.monotonic()
            for i, f in enumerate(futs):
                if out[i] is not None:
                    continue
                if f.done():
                    out[i] = f.result()
                elif i in started and now - started[i] > timeout_s:
                    out[i] = Outcome("timeout", detail=f"> {timeout_s}s", seconds=now - started[i])
                    if f.cancel() is False:  # running: abandoned; replace the pool's capacity
                        self.restarts += 1
                        self._tp.shutdown(wait=False)
                        from concurrent.futures import ThreadPoolExecutor

                        rest = [k for k in range(len(jobs)) if out[k] is None and k not in started]
                        self._tp = ThreadPoolExecutor(self.num_workers,
                                                      thread_name_prefix="rlvr-verify")
                        for k in rest:
                            futs[k].cancel()
                            futs[k] = self._tp.submit(job, k, *jobs[k])
            time.sleep(0.001)
        return out

    def close(self):
        if self._tp is not None:
            self._tp.shutdown(wait=False, cancel_futures=True)


def _worker_main(conn, verifier_blob):
    verifier = pickle.loads(verifier_blob)
    conn.send(("ready", None, None))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        job_id, task, output = msg
        out = _call_verifier(verifier, task, output)
        conn.send((job_id, out.kind, (out.verdict.to_dict() if out.verdict else out.detail)))


class _Worker:
    def __init__(self, ctx, blob, start_timeout_s):
        self.proc, self.conn, ready = start_process(ctx, _worker_main, (blob,),
                                                    start_timeout_s=start_timeout_s,
                                                    name="rlvr-verify-worker")
        if not ready:
            self.kill()
            raise RuntimeError(f"verifier worker not ready (or died) within {start_timeout_s}s")

    @property
    def pid(self):
        return self.proc.pid

    def kill(self):
        kill_process(self.proc, self.conn, 2.0)


def spawn_main_problem(start_method: str) -> str:
    """Why worker processes of `start_method` cannot start from this program, or "".

    The spawn start method re-runs the program's main file in every worker (as `__mp_main__`).
    Code piped in on stdin (`python - < script.py`) has no file to re-run, and a main file whose
    top level has no `if __name__ == "__main__":` guard would build the pool again inside each
    worker, which multiprocessing refuses: every verdict would become an env_error. Interactive
    sessions, notebooks and `python -c` have no main file and are fine.
    """
    if start_method != "spawn":
        return ""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path:
        return ""
    fix = ("add the guard and put the script's work under it, or use "
           "executor='thread' (reward.executor in a config)")
    if path == "<stdin>":
        return ("verifier worker processes (start method 'spawn') cannot start from code read on "
                "stdin: save it as a file with an `if __name__ == \"__main__\":` guard, or use "
                "executor='thread' (reward.executor in a config)")
    if not path.endswith(".py") or not os.path.isfile(path):
        return ""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return ""
    guarded = any(isinstance(n, ast.If) and "__name__" in ast.unparse(n.test) for n in tree.body)
    if guarded:
        return ""
    return (f"verifier worker processes (start method 'spawn') re-run the main script {path}, "
            f"which has no `if __name__ == \"__main__\":` guard, so each worker would build the "
            f"pool again and fail: {fix}")


class ProcessExecutor(Executor):
    """`num_workers` persistent worker processes (each holds an unpickled copy of the
    verifier). One dispatcher thread per worker sends a job, waits up to timeout_s, and on
    timeout or worker death kills the worker, reports the outcome and starts a fresh one."""

    def __init__(self, num_workers: int = 2, *, mp_context: str = "spawn",
                 start_timeout_s: float = 120.0):
        self.num_workers = num_workers
        self._ctx = mp.get_context(mp_context)
        self.start_timeout_s = start_timeout_s
        self._workers: List[Optional[_Worker]] = []
        self._blob = None
        self._lock = threading.Lock()

    def start(self, verifier):
        problem = spawn_main_problem(self._ctx.get_start_method())
        if problem:
            raise RuntimeError(problem)
        super().start(verifier)
        self._blob = pickle.dumps(verifier)
        self._workers = [None] * self.num_workers

    def worker_pids(self) -> List[int]:
        return [w.pid for w in self._workers if w is not None]

    def _ensure(self, slot: int) -> _Worker:
        w = self._workers[slot]
        if w is None or not w.proc.is_alive():
            if w is not None:
                w.kill()
                with self._lock:
                    self.restarts += 1
            w = _Worker(self._ctx, self._blob, self.start_timeout_s)
            self._workers[slot] = w
        return w

    def run(self, jobs, timeout_s):
        out: List[Optional[Outcome]] = [None] * len(jobs)
        q: "queue.Queue[int]" = queue.Queue()
        for i in range(len(jobs)):
            q.put(i)

        def dispatch(slot):
            while True:
                try:
                    i = q.get_nowait()
                except queue.Empty:
                    return
                try:
                    w = self._ensure(slot)
                except Exception as e:  # noqa: BLE001
                    out[i] = Outcome("error", detail=f"environment_init: {e}")
                    continue
                t0 = time.monotonic()
                try:
                    w.conn.send((i, jobs[i][0], jobs[i][1]))
                    if not w.conn.poll(timeout_s):
                        w.kill()
                        self._workers[slot] = None
                        with self._lock:
                            self.restarts += 1
                        out[i] = Outcome("timeout", detail=f"> {timeout_s}s",
                                         seconds=time.monotonic() - t0)
                        continue
                    _, kind, payload = w.conn.recv()
                except (EOFError, OSError, BrokenPipeError) as e:
                    w.kill()
                    self._workers[slot] = None
                    with self._lock:
                        self.restarts += 1
                    out[i] = Outcome("crash", detail=f"worker died: {e!r}",
                                     seconds=time.monotonic() - t0)
                    continue
                dt = time.monotonic() - t0
                out[i] = Outcome("ok", Verdict.from_dict(payload), seconds=dt) if kind == "ok" \
                    else Outcome("error", detail=str(payload), seconds=dt)

        threads = [threading.Thread(target=dispatch, args=(s,), daemon=True)
                   for s in range(min(self.num_workers, len(jobs)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    def close(self):
        for w in self._workers:
            if w is not None:
                try:
                    w.conn.send(None)
                except Exception:  # noqa: BLE001
                    pass
                w.kill()
        self._workers = [None] * self.num_workers


class VerificationPool:
    """Parallel verification with timeouts, retries, masking, caching and counters.

    Args:
      verifier: any object with `version` and `verify(task, output) -> Verdict` (picklable for
        the process executor).
      num_workers: parallel calls.
      timeout_s: per-call wall limit ("verifier_service" timeout past it).
      max_env_retries: re-verifications of an env_error sample before it stays env_error.
      cache: optional RewardCache.
      executor: "process" | "thread" | "inline" | "ray", or an Executor instance.
      ray_address: the Ray cluster of executor "ray" ("local", "auto" or an address).
      env_version, reward_config_hash: the other parts of the cache key (docs/verifiers.md §4).
    """

    def __init__(self, verifier, *, num_workers: int = 2, timeout_s: float = 30.0,
                 max_env_retries: int = 2, cache: Optional[RewardCache] = None,
                 executor: Any = "process", env_version: str = "0",
                 reward_config_hash: str = "", mp_context: str = "spawn",
                 ray_address: str = "local"):
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"VerificationPool.num_workers must be an int ≥ 1, got {num_workers!r}")
        if not timeout_s > 0:
            raise ValueError(f"VerificationPool.timeout_s must be > 0, got {timeout_s!r}")
        if not isinstance(max_env_retries, int) or max_env_retries < 0:
            raise ValueError(f"VerificationPool.max_env_retries must be an int ≥ 0, got "
                             f"{max_env_retries!r}")
        if isinstance(executor, str):
            if executor not in EXECUTORS:
                raise ValueError(f"VerificationPool.executor must be one of {EXECUTORS} or an "
                                 f"Executor, got {executor!r}")
            if executor == "ray":
                from rlvr.verifiers.ray_pool import RayExecutor  # optional dependency

                executor = RayExecutor(num_workers, address=ray_address)
            else:
                executor = {"process": lambda: ProcessExecutor(num_workers, mp_context=mp_context),
                            "thread": lambda: ThreadExecutor(num_workers),
                            "inline": InlineExecutor}[executor]()
        self.verifier = verifier
        self.version = getattr(verifier, "version", "0")
        self.timeout_s = float(timeout_s)
        self.max_env_retries = max_env_retries
        self.cache = cache
        self.env_version = env_version
        self.reward_config_hash = reward_config_hash
        self.executor = executor
        self.executor.start(verifier)
        self._counts = collections.Counter()
        self._timeouts = collections.Counter({c: 0 for c in TIMEOUT_CLASSES})
        self._busy_s = 0.0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.executor.close()

    def _outcome_verdict(self, o: Outcome) -> Verdict:
        if o.kind == "ok":
            return o.verdict
        if o.kind == "timeout":
            return env_error(f"verifier call timed out ({o.detail})", verifier_version=self.version,
                             timeout_class="verifier_service")
        if o.kind == "crash":
            return env_error(f"verifier worker crashed: {o.detail}", verifier_version=self.version,
                             timeout_class=None, fault="infrastructure")
        tc = "environment_init" if o.detail.startswith("environment_init") else None
        return env_error(f"verifier call failed: {o.detail}", verifier_version=self.version,
                         timeout_class=tc)

    def verify_batch(self, tasks: Sequence[TaskSpec], outputs: Sequence[str]) -> List[Verdict]:
        """One verdict per (task, output); env_errors retried then returned as env_error."""
        if len(tasks) != len(outputs):
            raise ValueError(f"verify_batch: {len(tasks)} tasks but {len(outputs)} outputs")
        t0 = time.monotonic()
        verdicts: List[Optional[Verdict]] = [None] * len(tasks)
        keys = [None] * len(tasks)
        if self.cache is not None:
            for i, (t, o) in enumerate(zip(tasks, outputs)):
                keys[i] = cache_key(t, o, env_version=self.env_version,
                                    verifier_version=self.version,
                                    reward_config_hash=self.reward_config_hash)
                hit = self.cache.get_by_key(keys[i])
                if hit is not None:
                    verdicts[i] = hit
                    self._counts["cache_hits"] += 1
        todo = [i for i, v in enumerate(verdicts) if v is None]
        attempt = 0
        while todo:
            outcomes = self.executor.run([(tasks[i], outputs[i]) for i in todo], self.timeout_s)
            retry = []
            for i, o in zip(todo, outcomes):
                if o.kind == "crash":
                    self._counts["worker_crashes"] += 1
                v = self._outcome_verdict(o)
                tc = v.evidence.get("timeout_class")
                if tc in self._timeouts:
                    self._timeouts[tc] += 1
                if v.trial == "env_error":
                    self._counts["env_error_events"] += 1
                    if attempt < self.max_env_retries:
                        retry.append(i)
                        continue
                verdicts[i] = v.with_evidence(attempts=attempt + 1) if attempt else v
            self._counts["retries"] += len(retry)
            todo, attempt = retry, attempt + 1
        for i, v in enumerate(verdicts):
            self._counts["verdicts"] += 1
            self._counts["env_error" if v.trial == "env_error" else v.decision] += 1
            if self.cache is not None and keys[i] is not None:
                self.cache.put_by_key(keys[i], v)
        self._busy_s += time.monotonic() - t0
        return verdicts

    def stats(self) -> dict:
        """Throughput and failure counters since construction."""
        c = self._counts
        out = {
            "verdicts": c["verdicts"], "pass": c["pass"], "fail": c["fail"],
            "unknown": c["unknown"], "env_error": c["env_error"],
            "env_error_events": c["env_error_events"], "retries": c["retries"],
            "worker_crashes": c["worker_crashes"],
            "worker_restarts": getattr(self.executor, "restarts", 0),
            "timeouts": dict(self._timeouts), "busy_s": self._busy_s,
            "verdicts_per_s": c["verdicts"] / self._busy_s if self._busy_s > 0 else 0.0,
            "cache_hits": c["cache_hits"],
        }
        if self.cache is not None:
            out["cache"] = self.cache.stats()
        return out
