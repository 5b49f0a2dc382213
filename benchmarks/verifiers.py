"""Verification throughput on this machine: verdicts/s for math and code with 1 and 2 workers.

    python benchmarks/verifiers.py [--math N] [--code N] [--out benchmarks/results/verifiers_cpu.md]

Math: MathVerifier (math-verify) inside a process VerificationPool (the pool's per-call timeout
bounds time, so the verifier runs inline in each worker). Code: CodeVerifier, every sample two
sandboxed processes (public + hidden tests), the pool's workers launching sandboxes in parallel.
Worker start-up is excluded (a warm-up batch runs first). Outputs are a fixed mix of right and
wrong answers. Prints a markdown table and writes it to --out.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rlvr.records.task import TaskSpec  # noqa: E402
from rlvr.verifiers.code import CodeVerifier  # noqa: E402
from rlvr.verifiers.math import MathVerifier  # noqa: E402
from rlvr.verifiers.pool import VerificationPool  # noqa: E402
from rlvr.verifiers.sandbox import SandboxLimits  # noqa: E402

def math_case(i):
    """(gold, output) for sample i: 8 templates, every sample distinct (no parse-cache hits)."""
    a = i // 8 + 1
    return [
        (f"{a}/{a + 1}", f"Thus \\boxed{{\\frac{{{2 * a}}}{{{2 * a + 2}}}}}"),
        (f"\\{{{a},{a + 1},{a + 2}\\}}", f"\\boxed{{\\{{{a + 2},{a},{a + 1}\\}}}}"),
        (f"(0,{a}]", f"\\boxed{{(0,{a})}}"),
        (f"x^2+{2 * a}x+{a * a}", f"\\boxed{{(x+{a})^2}}"),
        (f"{a}", f"The answer is {a + 1}."),
        (f"\\frac{{{a}\\sqrt{{2}}}}{{2}}", f"\\boxed{{\\frac{{{a}}}{{\\sqrt{{2}}}}}}"),
        (f"{a}", f"\\boxed{{{a}}} or \\boxed{{{a + 1}}}"),
        (f"{a}\\%", f"\\boxed{{{a / 100}}}"),
    ][i % 8]


CODE_REF = {"entry_point": "solve",
            "public_tests": [{"args": [[3, 1, 2]], "expected": [1, 2, 3]},
                             {"args": [[]], "expected": []}],
            "hidden_tests": [{"args": [[5, -1, 5, 0]], "expected": [-1, 0, 5, 5]},
                             {"args": [list(range(50, 0, -1))], "expected": list(range(1, 51))}]}
CODE_OUTPUTS = [
    "def solve(xs):\n    return sorted(xs)\n",
    "def solve(xs):\n    return xs\n",
    "def solve(xs):\n    return sorted(set(xs))\n",
    "def solve(xs) return xs\n",
]


def bench(verifier, tasks, outputs, workers, executor="process"):
    with VerificationPool(verifier, num_workers=workers, timeout_s=30.0, executor=executor) as p:
        p.verify_batch(tasks[: 2 * workers], outputs[: 2 * workers])  # warm-up: start workers
        t0 = time.perf_counter()
        vs = p.verify_batch(tasks, outputs)
        dt = time.perf_counter() - t0
    passed = sum(v.decision == "pass" for v in vs) / len(vs)
    env = sum(v.trial == "env_error" for v in vs)
    return dt, len(vs) / dt, passed, env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--math", type=int, default=160)
    ap.add_argument("--code", type=int, default=40)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "results", "verifiers_cpu.md"))
    args = ap.parse_args()
    rows = []
    mt = [TaskSpec(task_id=f"m{i}", prompt="", task_type="math",
                   reference_answer=math_case(i)[0]) for i in range(args.math)]
    mo = [math_case(i)[1] for i in range(args.math)]
    ct = [TaskSpec(task_id=f"c{i}", prompt="", task_type="code", reference_answer=CODE_REF)
          for i in range(args.code)]
    co = [CODE_OUTPUTS[i % len(CODE_OUTPUTS)] for i in range(args.code)]
    code_v = CodeVerifier(limits=SandboxLimits(cpu_s=2, wall_s=5, memory_mb=512))
    for workers in (1, 2):
        dt, vps, pr, env = bench(MathVerifier(isolation="none"), mt, mo, workers)
        rows.append(("math", "process", workers, len(mt), dt, vps, pr, env))
        dt, vps, pr, env = bench(code_v, ct, co, workers)
        rows.append(("code", "process", workers, len(ct), dt, vps, pr, env))
    lines = [
        f"# Verifier throughput (CPU: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()})",
        "",
        "`python benchmarks/verifiers.py` — warm workers, mixed right/wrong outputs (math: 8 templates, "
        "every sample distinct; code: 4 programs repeated); code = 2 sandboxed processes per sample "
        "(public + hidden tests). Load average at the end of the run (1 min): "
        f"{os.getloadavg()[0]:.1f} — the machine is shared, treat the numbers as ±30 %.",
        "",
        "| verifier | executor | workers | samples | seconds | verdicts/s | pass rate | env_error |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, ex, w, n, dt, vps, pr, env in rows:
        lines.append(f"| {name} | {ex} | {w} | {n} | {dt:.2f} | {vps:.1f} | {pr:.2f} | {env} |")
    table = "\n".join(lines) + "\n"
    print(table)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(table)


if __name__ == "__main__":
    main()
