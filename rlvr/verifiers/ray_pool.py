"""Ray executor for the verification pool: verifier workers as Ray actors.

`RayExecutor` implements the pool's `Executor` interface, so `VerificationPool(...,
executor="ray")` keeps everything else of the pool unchanged: per-call time limits, env_error
retries, masking by compose_reward, the reward cache and the counters of `stats()`.

  * `num_workers` actors, each holding an unpickled copy of the verifier and running one call at
    a time; actors are placed with Ray's "SPREAD" strategy, so a multi-node cluster spreads them
    across nodes.
  * back-pressure: at most one call per actor is in flight; the rest of a batch waits on the
    driver, never in Ray's queues.
  * per-call limit: `timeout_s + slack_s` from the moment the call was handed to a ready actor
    (the slack covers Ray's round trip). A call past it is reported as "timeout" (→ env_error of
    class "verifier_service") and its actor is killed and replaced, so a hung verifier never
    holds a slot.
  * actor loss (the worker process dies, its node goes away: `RayActorError`) is reported as
    "crash" (→ env_error, fault "infrastructure"); the actor is replaced and the pool retries the
    item on the next round, on another actor, up to `max_env_retries` times.

Ray is an optional dependency: `pip install "rlvr[ray]"`.
"""

from __future__ import annotations

import pickle
import time
from typing import Dict, List, Optional, Sequence, Tuple

from rlvr.records.task import TaskSpec
from rlvr.verifiers.pool import Executor, Outcome, _call_verifier

MISSING_RAY = 'reward.executor="ray" needs the ray package: pip install "rlvr[ray]"'


def import_ray():
    """The `ray` module, or ImportError with the install command when it is missing."""
    try:
        import ray  # noqa: PLC0415
    except ImportError as e:
        raise ImportError(MISSING_RAY) from e
    return ray


class _VerifierActor:
    """Body of one Ray actor: unpickles the verifier once and answers calls one at a time."""

    def __init__(self, verifier_blob: bytes):
        self.verifier = pickle.loads(verifier_blob)

    def ready(self) -> int:
        import os  # noqa: PLC0415

        return os.getpid()

    def verify(self, task, output):
        out = _call_verifier(self.verifier, task, output)
        return out.kind, (out.verdict.to_dict() if out.verdict is not None else out.detail)


class RayExecutor(Executor):
    """Runs verifier calls on `num_workers` Ray actors (see the module docstring).

    Args:
      num_workers: actors (each runs one call at a time).
      address: Ray cluster to join: "local" starts a Ray instance on this machine (unless this
        process is already connected to one), "auto" joins the cluster started on this machine
        with `ray start`, "ray://host:10001" or "host:6379" an existing cluster.
      num_cpus: CPUs Ray reserves per actor.
      slack_s: added to the pool's per-call limit for Ray's round trip.
      start_timeout_s: how long a new actor may take to become ready before its slot fails the
        call as an "environment_init" error.
    """

    def __init__(self, num_workers: int = 2, *, address: str = "local", num_cpus: float = 1.0,
                 slack_s: float = 1.0, start_timeout_s: float = 120.0):
        if not isinstance(address, str) or not address:
            raise ValueError(f"RayExecutor.address must be 'local', 'auto' or a cluster address, "
                             f"got {address!r}")
        self.num_workers = num_workers
        self.address = address
        self.num_cpus = num_cpus
        self.slack_s = slack_s
        self.start_timeout_s = start_timeout_s
        self._ray = None
        self._cls = None
        self._blob_ref = None
        self._actors: List[Optional[object]] = []
        self._pids: List[Optional[int]] = []
        self._started_ray = False

    def start(self, verifier):
        ray = import_ray()
        super().start(verifier)
        self._ray = ray
        if not ray.is_initialized():
            kw = {} if self.address == "local" else {"address": self.address}
            ray.init(include_dashboard=False, log_to_driver=False, **kw)
            self._started_ray = True
        self._cls = ray.remote(_VerifierActor)
        self._blob_ref = ray.put(pickle.dumps(verifier))
        self._actors = [None] * self.num_workers
        self._pids = [None] * self.num_workers

    def _new_actor(self, slot: int):
        a = self._cls.options(num_cpus=self.num_cpus, scheduling_strategy="SPREAD",
                              max_restarts=0, max_task_retries=0).remote(self._blob_ref)
        self._pids[slot] = self._ray.get(a.ready.remote(), timeout=self.start_timeout_s)
        self._actors[slot] = a
        return a

    def _drop(self, slot: int):
        a = self._actors[slot]
        self._actors[slot] = None
        self._pids[slot] = None
        if a is not None:
            try:
                self._ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 — already gone
                pass
        self.restarts += 1

    def worker_pids(self) -> List[int]:
        """Process ids of the live actors (on their nodes)."""
        return [p for p in self._pids if p is not None]

    def run(self, jobs: Sequence[Tuple[TaskSpec, str]], timeout_s: float) -> List[Outcome]:
        ray = self._ray
        from ray.exceptions import GetTimeoutError, RayActorError  # noqa: PLC0415

        out: List[Optional[Outcome]] = [None] * len(jobs)
        todo = list(range(len(jobs)))[::-1]
        idle = list(range(self.num_workers))[::-1]
        pending: Dict[object, Tuple[int, int, float]] = {}  # ref -> (job, slot, t0)
        limit = timeout_s + self.slack_s
        while todo or pending:
            while todo and idle:  # back-pressure: one call per actor
                slot, i = idle.pop(), todo.pop()
                try:
                    a = self._actors[slot] or self._new_actor(slot)
                except (GetTimeoutError, RayActorError, Exception) as e:  # noqa: BLE001
                    self._drop(slot)
                    out[i] = Outcome("error", detail=f"environment_init: {type(e).__name__}: {e}"[:300])
                    idle.append(slot)
                    continue
                pending[a.verify.remote(*jobs[i])] = (i, slot, time.monotonic())
            if not pending:
                continue
            now = time.monotonic()
            wait_s = max(0.0, min(t0 + limit for _, _, t0 in pending.values()) - now)
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=min(wait_s, 0.5))
            for ref in ready:
                i, slot, t0 = pending.pop(ref)
                dt = time.monotonic() - t0
                try:
                    kind, payload = ray.get(ref)
                except RayActorError as e:
                    self._drop(slot)
                    out[i] = Outcome("crash", detail=f"actor died: {type(e).__name__}"[:300],
                                     seconds=dt)
                except Exception as e:  # noqa: BLE001 — the call could not be delivered
                    out[i] = Outcome("error", detail=f"{type(e).__name__}: {e}"[:300], seconds=dt)
                else:
                    from rlvr.records.verdict import Verdict  # noqa: PLC0415

                    out[i] = (Outcome("ok", Verdict.from_dict(payload), seconds=dt)
                              if kind == "ok" else Outcome("error", detail=str(payload), seconds=dt))
                idle.append(slot)
            now = time.monotonic()
            for ref, (i, slot, t0) in list(pending.items()):
                if now - t0 > limit:
                    del pending[ref]
                    self._drop(slot)  # kills the hung call with its actor
                    out[i] = Outcome("timeout", detail=f"> {timeout_s}s", seconds=now - t0)
                    idle.append(slot)
        return out

    def close(self):
        if self._ray is None:
            return
        for slot, a in enumerate(self._actors):
            if a is not None:
                try:
                    self._ray.kill(a, no_restart=True)
                except Exception:  # noqa: BLE001
                    pass
        self._actors = [None] * self.num_workers
        self._pids = [None] * self.num_workers
        if self._started_ray:
            self._ray.shutdown()
            self._started_ray = False
