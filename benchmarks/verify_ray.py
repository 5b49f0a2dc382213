"""Verification on Ray actors against the process pool, and a stress run through Ray.

    python benchmarks/verify_ray.py [--n 2000] [--stress 10000] [--workers 2] [--repeats 3]
        [--hang-frac 0.025] [--crash-frac 0.025]   (--n 0: the stress run only)

Throughput: verdicts/s of the same batch of arithmetic answers (IntegerAnswerVerifier) with
executor "process" and executor "ray" (a local Ray instance on this machine), min / median / max
over --repeats batches after a warm-up batch; the two executors' verdicts are checked equal.
Stress: benchmarks/verify_pool_stress.py's mix (honest, failing, hanging, crashing candidates)
through executor "ray", every check of that script (nothing lost, each verdict its own job,
timeouts and crashes counted) printed as a table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rlvr.records.task import TaskSpec  # noqa: E402
from rlvr.verifiers.arithmetic import IntegerAnswerVerifier  # noqa: E402
from rlvr.verifiers.pool import VerificationPool  # noqa: E402


def throughput(executor: str, n: int, workers: int, repeats: int):
    tasks = [TaskSpec(f"a{i}", "x=", "math", reference_answer=i) for i in range(n)]
    outs = [str(i if i % 3 else i + 1) for i in range(n)]
    rates = []
    with VerificationPool(IntegerAnswerVerifier(), num_workers=workers, executor=executor) as p:
        p.verify_batch(tasks[:workers], outs[:workers])  # workers up
        for _ in range(repeats):
            t0 = time.perf_counter()
            vs = p.verify_batch(tasks, outs)
            rates.append(n / (time.perf_counter() - t0))
    return rates, [v.to_dict() for v in vs]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--stress", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=0.5)
    ap.add_argument("--hang-frac", type=float, default=0.025)
    ap.add_argument("--crash-frac", type=float, default=0.025)
    a = ap.parse_args(argv)
    import ray

    # address="local": our own instance, never one another program left running on this host
    ray.init(address="local", include_dashboard=False, log_to_driver=False, num_cpus=a.workers,
             object_store_memory=100 * 1024 * 1024)
    try:
        ok = True
        if a.n:  # --n 0: the stress run only
            res = {ex: throughput(ex, a.n, a.workers, a.repeats) for ex in ("process", "ray")}
            same = res["process"][1] == res["ray"][1]
            print(f"| executor | verdicts/s min | median | max |  ({a.n} verdicts, "
                  f"{a.workers} workers)")
            print("|---|---|---|---|")
            for ex, (r, _) in res.items():
                print(f"| {ex} | {min(r):.0f} | {statistics.median(r):.0f} | {max(r):.0f} |")
            print(f"verdicts equal: {same}")
            ok = same
        if a.stress:
            from benchmarks.verify_pool_stress import run_stress

            st = run_stress(a.stress, workers=a.workers, timeout_s=a.timeout, executor="ray",
                            hang_frac=a.hang_frac, crash_frac=a.crash_frac)
            c = st["settings"]["counts"]
            print(f"\nstress through ray: {a.stress} verdicts in {st['wall_s']:.1f} s "
                  f"({c['honest']} honest, {c['failing']} failing, {c['hanging']} hanging, "
                  f"{c['crashing']} crashing; load average {os.getloadavg()[0]:.1f})")
            print("| check | expected | observed | ok |\n|---|---|---|---|")
            for name, exp, obs, good in st["checks"]:
                print(f"| {name} | {exp} | {obs} | {good} |")
                ok = ok and good
            b = st["batches_per_s"]
            print(f"batches verdicts/s min {min(b):.0f} median {statistics.median(b):.0f} "
                  f"max {max(b):.0f}")
    finally:
        ray.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
