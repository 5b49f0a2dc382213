"""Bounded, version-aware sample queue between rollout and learner (docs/algorithms.md §7, (A.19), docs/architecture.md §1).

SAO (docs/algorithms.md §7) trains each finished rollout on arrival: a rollout thread `put`s samples,
the learner `get`s them in arrival order. The queue gives the three controls
docs/architecture.md §1 asks of an asynchronous pipeline:

  * back-pressure: `put` blocks while `maxsize` samples wait, so a fast producer cannot let the
    queue grow without bound (and go stale);
  * a staleness bound on the policy-version lag `lag = current_version - sample.policy_version`
    (the sample's behaviour policy vs the learner's current policy, docs/algorithms.md (A.19)): a sample with
    `lag > max_staleness` is never handed to the learner — it is dropped and counted;
  * optional down-weighting inside the bound: `weight = staleness_decay ** lag` (1.0 = off),
    counted when < 1.

Metrics (`stats()`): queue depth, puts, gets, dropped_stale, downweighted, mean lag of yielded
samples, and the producer/consumer wait times (the time split of docs/architecture.md §1).

Host-side only (threads); nothing here runs inside jit.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from typing import Any, Optional


@dataclasses.dataclass(frozen=True)
class QueuedSample:
    """One sample as the learner receives it.

    Attributes:
      payload: whatever the producer put (e.g. one episode's arrays + SampleMeta).
      policy_version: the version of the policy that generated it (docs/architecture.md §3).
      lag: learner version at `get` minus `policy_version` (>= 0, <= max_staleness).
      weight: `staleness_decay ** lag`; the learner multiplies this sample's loss by it.
      enqueued_at: `time.monotonic()` at `put` (sample age = now - enqueued_at).
    """

    payload: Any
    policy_version: int
    lag: int
    weight: float
    enqueued_at: float


class QueueClosed(Exception):
    """Raised by `get` when the queue is closed and empty."""


class SampleQueue:
    """Thread-safe FIFO with back-pressure and a policy-version staleness bound.

    Args:
      maxsize: most samples waiting at once (>= 1); `put` blocks beyond it.
      max_staleness: largest allowed policy-version lag (>= 0); older samples are dropped.
      staleness_decay: in (0, 1]; a yielded sample with lag l gets weight decay**l.
    """

    def __init__(self, maxsize: int, max_staleness: int, staleness_decay: float = 1.0):
        if not isinstance(maxsize, int) or maxsize < 1:
            raise ValueError(f"SampleQueue.maxsize must be an int >= 1, got {maxsize!r}")
        if not isinstance(max_staleness, int) or max_staleness < 0:
            raise ValueError(f"SampleQueue.max_staleness must be an int >= 0, got {max_staleness!r}")
        if not 0.0 < float(staleness_decay) <= 1.0:
            raise ValueError(f"SampleQueue.staleness_decay must be in (0, 1], got {staleness_decay!r}")
        self.maxsize = maxsize
        self.max_staleness = max_staleness
        self.staleness_decay = float(staleness_decay)
        self._items: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self._puts = 0
        self._gets = 0
        self._dropped_stale = 0
        self._downweighted = 0
        self._lag_sum = 0
        self._put_wait_s = 0.0
        self._get_wait_s = 0.0
        self._max_depth = 0

    # -- producer side -------------------------------------------------------------------------
    def put(self, payload: Any, policy_version: int, timeout: Optional[float] = None) -> bool:
        """Appends a sample; blocks while the queue is full (back-pressure).

        Returns False (sample not queued) if the queue was closed or `timeout` passed.
        """
        t0 = time.monotonic()
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self._closed or len(self._items) < self.maxsize, timeout=timeout
            )
            self._put_wait_s += time.monotonic() - t0
            if self._closed or not ok:
                return False
            self._items.append((payload, int(policy_version), time.monotonic()))
            self._puts += 1
            self._max_depth = max(self._max_depth, len(self._items))
            self._cond.notify_all()
            return True

    def close(self) -> None:
        """No more puts; waiting producers return False, `get` drains then raises QueueClosed."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- consumer side -------------------------------------------------------------------------
    def get(self, current_version: int, timeout: Optional[float] = None) -> Optional[QueuedSample]:
        """Next sample in arrival order whose lag <= max_staleness (stale ones dropped, counted).

        Returns None on timeout; raises QueueClosed when closed and drained.
        """
        t0 = time.monotonic()
        deadline = None if timeout is None else t0 + timeout
        with self._cond:
            try:
                while True:
                    while self._items:
                        payload, version, at = self._items.popleft()
                        self._cond.notify_all()  # room for a blocked producer
                        lag = int(current_version) - version
                        if lag > self.max_staleness:
                            self._dropped_stale += 1
                            continue
                        lag = max(lag, 0)
                        weight = self.staleness_decay**lag
                        if weight < 1.0:
                            self._downweighted += 1
                        self._gets += 1
                        self._lag_sum += lag
                        return QueuedSample(payload, version, lag, weight, at)
                    if self._closed:
                        raise QueueClosed("SampleQueue is closed and empty")
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return None
                    self._cond.wait(remaining)
            finally:
                self._get_wait_s += time.monotonic() - t0

    def get_batch(
        self, n: int, current_version: int, timeout: Optional[float] = None
    ) -> list[QueuedSample]:
        """Up to n samples in arrival order (fewer on timeout or when closed and drained)."""
        out: list[QueuedSample] = []
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(out) < n:
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                s = self.get(current_version, timeout=remaining)
            except QueueClosed:
                break
            if s is None:
                break
            out.append(s)
        return out

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def stats(self) -> dict[str, float]:
        """Counters for the metrics writer (queue depth, staleness, time split)."""
        with self._cond:
            return {
                "queue/depth": float(len(self._items)),
                "queue/max_depth": float(self._max_depth),
                "queue/puts": float(self._puts),
                "queue/gets": float(self._gets),
                "queue/dropped_stale": float(self._dropped_stale),
                "queue/downweighted": float(self._downweighted),
                "queue/mean_lag": self._lag_sum / max(self._gets, 1),
                "queue/put_wait_s": self._put_wait_s,
                "queue/get_wait_s": self._get_wait_s,
            }
