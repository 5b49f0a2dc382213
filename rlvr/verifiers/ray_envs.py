"""Environment workers as Ray actors (`rollout.env_executor="ray"`).

The agent loop keeps calling `reset / step / state / snapshot / restore / state_hash` on an
environment object; `RayEnvFactory` hands it a `RayEnvironment`, a proxy whose environment lives
in one of `num_workers` Ray actors (`_EnvHost`, placed with Ray's "SPREAD" strategy so a cluster
spreads them across nodes). Each host keeps many environments (one per episode, by id) and runs
calls concurrently (`max_concurrency`), so one environment waiting for its tool call's latency
holds no other; a proxy reports the call's latency as `busy_until`, as a local environment
does, so the continuous scheduler can step the others meanwhile.

Faults are the environment's, never the policy's: a call past `call_timeout_s` (its host is
killed and replaced: a hung tool holds no slot) or a lost host (the worker process or its node
dies: `RayActorError`) makes `step` return a `StepResult` with `error` set — the episode ends as
env_error, masked and retried like any environment fault — and makes the other calls raise
`EnvironmentLost`, which the agent loop and the judge also turn into env_error. Hosts start
lazily and are replaced on loss.

Ray is an optional dependency: `pip install "rlvr[ray]"`.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, List, Optional

from rlvr.envs.base import StepResult
from rlvr.records.faults import EnvironmentLost
from rlvr.verifiers.ray_pool import import_ray


class _EnvHost:
    """Body of one Ray actor: environments made by the factory, by id."""

    def __init__(self, factory_blob: bytes):
        from ray import cloudpickle  # noqa: PLC0415

        self.factory = cloudpickle.loads(factory_blob)
        self.envs: dict = {}

    def ready(self) -> int:
        import os  # noqa: PLC0415

        return os.getpid()

    def live(self) -> int:
        """How many environments this host keeps."""
        return len(self.envs)

    def call(self, eid: int, method: str, args: tuple, kwargs: dict):
        if method in ("reset", "restore"):
            self.envs[eid] = self.factory()
        if method == "close":
            self.envs.pop(eid, None)
            return None
        return getattr(self.envs[eid], method)(*args, **kwargs)


class RayEnvFactory:
    """`make_env` for the agent loop: each call returns a `RayEnvironment` on one of
    `num_workers` host actors (round robin). See the module docstring."""

    def __init__(self, factory: Callable[[], Any], *, num_workers: int = 2,
                 address: str = "local", num_cpus: float = 1.0, call_timeout_s: float = 60.0,
                 max_concurrency: int = 64, start_timeout_s: float = 120.0):
        self.factory, self.num_workers, self.address = factory, int(num_workers), address
        self.num_cpus, self.call_timeout_s = num_cpus, float(call_timeout_s)
        self.max_concurrency, self.start_timeout_s = int(max_concurrency), start_timeout_s
        self._lock = threading.Lock()
        self._hosts: List[Optional[Any]] = [None] * self.num_workers
        self._pids: List[Optional[int]] = [None] * self.num_workers
        self._ids = itertools.count()
        self._next = itertools.count()
        self._ray = self._cls = self._blob = None
        local = factory()  # the environment's name and version, without starting Ray
        self.name, self.version = getattr(local, "name", "environment"), getattr(local, "version", "0")
        self.restarts = 0

    def _start(self):
        ray = import_ray()
        if not ray.is_initialized():
            kw = {} if self.address == "local" else {"address": self.address}
            ray.init(include_dashboard=False, log_to_driver=False, **kw)
        from ray import cloudpickle  # noqa: PLC0415

        self._ray = ray
        self._cls = ray.remote(_EnvHost)
        self._blob = ray.put(cloudpickle.dumps(self.factory))

    def host(self, slot: int):
        """The live host actor of `slot` (started on first use or after a loss)."""
        with self._lock:
            if self._ray is None:
                self._start()
            if self._hosts[slot] is None:
                a = self._cls.options(num_cpus=self.num_cpus, scheduling_strategy="SPREAD",
                                      max_restarts=0, max_task_retries=0,
                                      max_concurrency=self.max_concurrency).remote(self._blob)
                pid = self._ray.get(a.ready.remote(), timeout=self.start_timeout_s)
                self._hosts[slot], self._pids[slot] = a, pid
            return self._hosts[slot]

    def lost(self, slot: int, host) -> None:
        """Drops `host` from `slot` (killing it) unless it was already replaced."""
        with self._lock:
            if self._hosts[slot] is not host:
                return
            self._hosts[slot], self._pids[slot] = None, None
            self.restarts += 1
        try:
            self._ray.kill(host, no_restart=True)
        except Exception:  # noqa: BLE001 — already gone
            pass

    def worker_pids(self) -> List[int]:
        return [p for p in self._pids if p is not None]

    def __call__(self) -> "RayEnvironment":
        return RayEnvironment(self, next(self._next) % self.num_workers, next(self._ids))

    def close(self) -> None:
        for slot, h in enumerate(self._hosts):
            if h is not None:
                self.lost(slot, h)


class RayEnvironment:
    """One environment living in a host actor (module docstring)."""

    def __init__(self, pool: RayEnvFactory, slot: int, eid: int):
        self._pool, self._slot, self._eid = pool, slot, eid
        self._host = None
        self.busy_until = 0.0
        self.name, self.version = pool.name, pool.version

    def _call(self, method: str, *args, **kwargs):
        import time  # noqa: PLC0415

        from ray.exceptions import GetTimeoutError, RayActorError  # noqa: PLC0415

        pool = self._pool
        if method in ("reset", "restore"):
            try:
                self._host = pool.host(self._slot)
            except Exception as e:  # noqa: BLE001 — the worker could not start
                raise EnvironmentLost(f"environment worker did not start: {type(e).__name__}: "
                                      f"{e}"[:300]) from e
        host = self._host
        if host is None:
            raise EnvironmentLost(f"{method}() before reset() or restore()")
        ref = host.call.remote(self._eid, method, args, kwargs)
        wait = self.call_wait()
        try:
            out = pool._ray.get(ref, timeout=pool.call_timeout_s + wait)
        except GetTimeoutError as e:
            pool.lost(self._slot, host)
            self._host = None
            raise EnvironmentLost(f"environment call {method}() took more than "
                                  f"{pool.call_timeout_s} s; its worker was replaced") from e
        except RayActorError as e:
            pool.lost(self._slot, host)
            self._host = None
            raise EnvironmentLost(f"environment worker lost during {method}(): "
                                  f"{type(e).__name__}") from e
        if method == "step":
            lat = float((out.info or {}).get("latency_s", 0.0) or 0.0)
            self.busy_until = time.monotonic() + lat if lat else 0.0
        return out

    def call_wait(self) -> float:
        """Seconds a call may first wait for the environment's last tool call to finish."""
        import time  # noqa: PLC0415

        return max(0.0, self.busy_until - time.monotonic())

    def reset(self, task, *, seed: int):
        return self._call("reset", task, seed=seed)

    def restore(self, snapshot) -> None:
        self._call("restore", snapshot)

    def step(self, action: str) -> StepResult:
        try:
            return self._call("step", action)
        except EnvironmentLost as e:
            return StepResult(observation="", done=True, error=str(e))

    def state(self) -> dict:
        return self._call("state")

    def snapshot(self):
        return self._call("snapshot")

    def state_hash(self) -> str:
        return self._call("state_hash")

    def close(self) -> None:
        """Frees the environment in its host (fire and forget)."""
        host, self._host = self._host, None
        if host is not None:
            try:
                host.call.remote(self._eid, "close", (), {})
            except Exception:  # noqa: BLE001 — the host is gone, and the environment with it
                pass

    def __del__(self):  # an episode's environment is dropped with its episode: free the host's copy
        self.close()
