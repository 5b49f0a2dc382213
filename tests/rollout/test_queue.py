"""SampleQueue: arrival order, back-pressure, staleness bound (docs/algorithms.md §7, (A.19), docs/architecture.md §1)."""

import threading

import numpy as np
import pytest

from rlvr.rollout.queue import QueueClosed, SampleQueue


def test_fifo_and_staleness_drop_matches_reference():
    q = SampleQueue(maxsize=100, max_staleness=2)
    versions = [0, 0, 1, 3, 2, 5, 5, 4]
    for i, v in enumerate(versions):
        assert q.put(i, policy_version=v)
    # reference: keep lag = 5 - v <= 2, arrival order
    expect = [i for i, v in enumerate(versions) if 5 - v <= 2]
    got = [q.get(current_version=5, timeout=0) for _ in range(len(expect))]
    assert [s.payload for s in got] == expect
    assert all(s.lag <= 2 for s in got)
    assert q.get(current_version=5, timeout=0) is None
    st = q.stats()
    assert st["queue/dropped_stale"] == len(versions) - len(expect)
    assert st["queue/gets"] == len(expect)


def test_downweight_inside_bound():
    q = SampleQueue(maxsize=10, max_staleness=3, staleness_decay=0.5)
    for v in (4, 3, 2, 1):
        q.put(v, policy_version=v)
    got = q.get_batch(10, current_version=4, timeout=0)
    assert [s.weight for s in got] == [1.0, 0.5, 0.25, 0.125]
    assert q.stats()["queue/downweighted"] == 3


def test_back_pressure_blocks_when_full():
    q = SampleQueue(maxsize=2, max_staleness=0)
    assert q.put("a", 0) and q.put("b", 0)
    assert not q.put("c", 0, timeout=0.05)  # full: producer is held back
    assert q.get(0).payload == "a"
    assert q.put("c", 0, timeout=0.05)
    assert len(q) == 2


def test_threaded_producer_never_yields_older_than_bound():
    bound = 1
    q = SampleQueue(maxsize=3, max_staleness=bound)
    version = {"v": 0}
    lock = threading.Lock()
    rng = np.random.default_rng(0)
    lags = rng.integers(0, 4, size=200)

    def producer():
        for i in range(200):
            with lock:
                v = version["v"]
            # some samples come from an old policy (simulated slow rollouts)
            if not q.put(i, policy_version=max(v - int(lags[i]), 0)):
                return
        q.close()

    t = threading.Thread(target=producer)
    t.start()
    seen = []
    try:
        while True:
            with lock:
                cur = version["v"]
            s = q.get(cur, timeout=5)
            assert s is not None
            assert cur - s.policy_version <= bound
            seen.append(s.payload)
            with lock:
                version["v"] += 1  # one learner step per sample
    except QueueClosed:
        pass
    t.join()
    assert seen == sorted(seen)  # arrival order
    st = q.stats()
    assert st["queue/gets"] + st["queue/dropped_stale"] == 200
    assert st["queue/dropped_stale"] > 0
    assert st["queue/max_depth"] <= 3


@pytest.mark.parametrize("kw", [dict(maxsize=0, max_staleness=1), dict(maxsize=1, max_staleness=-1),
                                dict(maxsize=1, max_staleness=1, staleness_decay=0.0)])
def test_bad_args_named(kw):
    with pytest.raises(ValueError, match="SampleQueue"):
        SampleQueue(**kw)
