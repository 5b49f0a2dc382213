"""Stress check of the verification pool: many mixed verifications through the process pool.

    python benchmarks/verify_pool_stress.py [--n 10000] [--workers 2] [--timeout 0.2]
        [--out benchmarks/results/verify_pool_stress_cpu.md]

Candidates, a fixed shuffled mix: honest (the verifier passes them), failing (fails them),
hanging (the verifier sleeps far past the pool's timeout) and crashing (`os._exit` inside the
worker). The verifier itself is cheap, so the run measures the pool: dispatch, timeouts, worker
kills and restarts. Checked: every job gets exactly one verdict and it is its own (pass/fail
verdicts name their job); honest → pass, failing → fail, hanging → env_error with
timeout_class "verifier_service", crashing → env_error with fault "infrastructure", each after
its retries; timeouts, crashes, retries and worker restarts counted exactly; resident memory of
the parent and of every worker sampled through the run (from /proc). Prints the tables and
writes them to --out.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rlvr.records.task import TaskSpec  # noqa: E402
from rlvr.verifiers.base import Verifier  # noqa: E402
from rlvr.verifiers.pool import VerificationPool  # noqa: E402
from rlvr.records.verdict import Verdict  # noqa: E402

KINDS = ("honest", "failing", "hanging", "crashing")


class StressVerifier(Verifier):
    """Behaviour chosen by the output "<kind>:<job>"; pass/fail verdicts name their job."""

    version = "stress/1"

    def __init__(self, hang_s: float = 30.0):
        self.hang_s = hang_s

    def _verify(self, task, output):
        kind, _, job = output.partition(":")
        if kind == "hanging":
            time.sleep(self.hang_s)
        if kind == "crashing":
            os._exit(1)
        return Verdict("pass" if kind == "honest" else "fail", evidence={"job": int(job)})


def _rss_mb(pid) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


def make_jobs(n: int, hang_frac: float, crash_frac: float, seed: int) -> list[str]:
    n_hang, n_crash = round(n * hang_frac), round(n * crash_frac)
    n_honest = (n - n_hang - n_crash + 1) // 2
    kinds = (["hanging"] * n_hang + ["crashing"] * n_crash + ["honest"] * n_honest
             + ["failing"] * (n - n_hang - n_crash - n_honest))
    random.Random(seed).shuffle(kinds)
    return [f"{k}:{i}" for i, k in enumerate(kinds)]


def run_stress(n: int = 10_000, *, workers: int = 2, timeout_s: float = 0.2,
               hang_frac: float = 0.025, crash_frac: float = 0.025, retries: int = 1,
               batch: int = 500, seed: int = 0, sample_every_s: float = 0.25,
               executor: str = "process") -> dict:
    """Runs the stress mix; returns {"checks": [(name, expected, observed, ok)], "rss": {...},
    "batches_per_s": [...], "wall_s", "stats", "settings"}."""
    jobs = make_jobs(n, hang_frac, crash_frac, seed)
    task = TaskSpec(task_id="stress", prompt="", task_type="text")
    samples = {"parent": [], "workers": []}
    stop = threading.Event()
    per_batch = []
    returned, misplaced = [0], [0]
    got = {k: 0 for k in KINDS}
    classes = {"pass": 0, "fail": 0, "env_error": 0}

    def tally(start, chunk, vs):
        returned[0] += len(vs)
        for v in vs:
            key = "env_error" if v.trial == "env_error" else v.decision
            if key in classes:
                classes[key] += 1
        for i, (j, v) in enumerate(zip(chunk, vs), start=start):
            kind = j.split(":")[0]
            if kind in ("honest", "failing") and v.evidence.get("job") != i:
                misplaced[0] += 1
            got[kind] += {"honest": v.trial == "valid" and v.decision == "pass",
                          "failing": v.trial == "valid" and v.decision == "fail",
                          "hanging": v.trial == "env_error"
                          and v.evidence.get("timeout_class") == "verifier_service",
                          "crashing": v.trial == "env_error"
                          and v.evidence.get("fault") == "infrastructure"}[kind]

    with VerificationPool(StressVerifier(hang_s=max(30.0, 100 * timeout_s)), num_workers=workers,
                          timeout_s=timeout_s, max_env_retries=retries,
                          executor=executor) as pool:
        pool.verify_batch([task] * workers, [f"honest:{-1 - i}" for i in range(workers)])  # warm
        warm = pool.stats()

        def sampler():
            while not stop.is_set():
                p = _rss_mb(os.getpid())
                if p is not None:
                    samples["parent"].append(p)
                for pid in pool.executor.worker_pids():
                    w = _rss_mb(pid)
                    if w is not None:
                        samples["workers"].append(w)
                stop.wait(sample_every_s)

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            chunk = jobs[start:start + batch]
            tb = time.perf_counter()
            vs = pool.verify_batch([task] * len(chunk), chunk)
            per_batch.append(len(chunk) / (time.perf_counter() - tb))
            tally(start, chunk, vs)  # verdicts are checked and dropped: memory is the pool's
        wall = time.perf_counter() - t0
        stop.set()
        th.join()
        end = pool.stats()
    s = {k: (end[k] - warm[k]) if isinstance(end[k], (int, float)) else end[k] for k in end}
    s["timeouts"] = {c: end["timeouts"][c] - warm["timeouts"][c] for c in end["timeouts"]}

    count = {k: sum(j.startswith(k + ":") for j in jobs) for k in KINDS}
    attempts = 1 + retries
    bad = count["hanging"] + count["crashing"]
    checks = [
        ("verdicts returned (one per job)", n, returned[0]),
        ("pass/fail verdicts that name their own job", count["honest"] + count["failing"],
         count["honest"] + count["failing"] - misplaced[0]),
        ("honest → pass", count["honest"], got["honest"]),
        ("failing → fail", count["failing"], got["failing"]),
        ("hanging → env_error (verifier_service timeout)", count["hanging"], got["hanging"]),
        ("crashing → env_error (infrastructure)", count["crashing"], got["crashing"]),
        ("verifier_service timeouts counted (with retries)", count["hanging"] * attempts,
         s["timeouts"]["verifier_service"]),
        ("worker crashes counted (with retries)", count["crashing"] * attempts,
         s["worker_crashes"]),
        ("retries", bad * retries, s["retries"]),
        ("worker restarts", bad * attempts, s["worker_restarts"]),
        ("env_error verdicts (masked)", bad, s["env_error"]),
        ("pool's verdict count", n, s["verdicts"]),
        (f"pass + fail + env_error ({classes['pass']} + {classes['fail']} + "
         f"{classes['env_error']})", n, sum(classes.values())),
    ]
    return {"checks": [(name, exp, obs, exp == obs) for name, exp, obs in checks],
            "rss": samples, "batches_per_s": per_batch, "wall_s": wall, "stats": s,
            "settings": dict(n=n, workers=workers, timeout_s=timeout_s, hang_frac=hang_frac,
                             crash_frac=crash_frac, retries=retries, batch=batch, seed=seed,
                             counts=count)}


def format_report(r: dict) -> str:
    st = r["settings"]
    c = st["counts"]
    lines = [f"# Verification pool stress (CPU: {os.cpu_count()} cores, {platform.machine()}, "
             f"Python {platform.python_version()})", "",
             f"`python benchmarks/verify_pool_stress.py --n {st['n']} --workers {st['workers']} "
             f"--timeout {st['timeout_s']}` — process executor, {st['workers']} workers, "
             f"timeout {st['timeout_s']} s, {st['retries']} retry per env_error, batches of "
             f"{st['batch']}. Mix: {c['honest']} honest, {c['failing']} failing, "
             f"{c['hanging']} hanging (sleep far past the timeout), {c['crashing']} crashing "
             f"(`os._exit` in the worker). Load average at the end (1 min): "
             f"{os.getloadavg()[0]:.1f} — the machine is shared.", "",
             "| check | expected | observed | ok |", "|---|---:|---:|:-:|"]
    for name, exp, obs, ok in r["checks"]:
        lines.append(f"| {name} | {exp} | {obs} | {'yes' if ok else 'NO'} |")
    lines += ["", "Resident memory (MiB), sampled every 0.25 s through the run "
              "(workers: every live worker at each sample; restarted workers are new processes):",
              "", "| process | samples | first | min | median | max | last | last − first |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in ("parent", "workers"):
        xs = r["rss"][name]
        if xs:
            lines.append(f"| {name} | {len(xs)} | {xs[0]:.1f} | {min(xs):.1f} | "
                         f"{statistics.median(xs):.1f} | {max(xs):.1f} | {xs[-1]:.1f} | "
                         f"{xs[-1] - xs[0]:+.1f} |")
    b = r["batches_per_s"]
    lines += ["", "| batches | verdicts/s per batch: min | median | max | total wall s |",
              "|---:|---:|---:|---:|---:|",
              f"| {len(b)} | {min(b):.0f} | {statistics.median(b):.0f} | {max(b):.0f} | "
              f"{r['wall_s']:.1f} |"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=0.2)
    ap.add_argument("--hang-frac", type=float, default=0.025)
    ap.add_argument("--crash-frac", type=float, default=0.025)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "results", "verify_pool_stress_cpu.md"))
    a = ap.parse_args(argv)
    r = run_stress(a.n, workers=a.workers, timeout_s=a.timeout, hang_frac=a.hang_frac,
                   crash_frac=a.crash_frac, batch=a.batch)
    report = format_report(r)
    print(report)
    if a.out:
        with open(a.out, "w") as f:
            f.write(report)
    return 0 if all(ok for *_, ok in r["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
