"""Code verifier: candidate programs against public and hidden tests in the sandbox
(docs/verifiers.md §3, §2).

`task.reference_answer` is the tests record whose format `rlvr.records.code_tests` documents
(validated by `parse_code_reference` — also when a task file is loaded — errors raise
`CodeTestsError` naming the field).

A test may carry "weight" (default 1) for docs/architecture.md §4. Public and hidden tests run in *separate*
sandbox processes (the hidden run starts after the public one has exited), and expected
outputs never enter a sandbox: the harness sends back the candidate's values, the verifier
compares them with the copy of the tests it reads back after the hash check.

Decision: pass iff the program compiles, the public and the hidden tests all ran to completion
(empty hidden tests excepted) and all passed, the tests file is intact and no system call the
sandbox refuses was tried. A run that hits a limit (wall clock, CPU, output or result size) or
does not end cleanly (crash, exit, signal, memory blow-up) fails its split whatever results it
sent first (the split's component is 0), and no hidden run follows a public one that did: a
*fail* (the policy's fault); a
sandbox fault is an env_error (docs/verifiers.md (V.1)). Components (docs/verifiers.md §2, raw, composed later by
compose.RewardConfig; `default_reward_config()` gives the docs/verifiers.md §2 weights):
    compile ∈ {0,1}, public ∈ [0,1], hidden ∈ [0,1] (weighted pass fractions, docs/architecture.md §4),
    time_cost = CPU seconds / cpu limit, memory_cost = peak RSS / memory limit (both ≤ 1),
    side_effect_cost = number of refused actions (sockets, refused system calls …) + 1 if the
    tests were tampered with.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, List, Optional

# CodeTestsError and parse_code_reference stay importable from here (rlvr.verifiers exports them)
from rlvr.records.code_tests import CodeReference, CodeTestsError, parse_code_reference  # noqa: F401
from rlvr.records.task import TaskSpec
from rlvr.verifiers.base import Verifier
from rlvr.verifiers.compose import RewardConfig
from rlvr.verifiers.sandbox import (FILESYSTEMS, SandboxLimits, SandboxResult, require_sandbox,
                                    run_sandboxed)
from rlvr.records.verdict import Verdict, env_error


def values_equal(got: Any, expected: Any, tol: float) -> bool:
    """Strict structural equality of JSON values; floats within tol·max(1,|expected|); no NaN;
    bool is not int."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        if isinstance(expected, float) or isinstance(got, float):
            g, e = float(got), float(expected)
            if math.isnan(g) or math.isnan(e):
                return False
            if math.isinf(g) or math.isinf(e):
                return g == e
            return abs(g - e) <= tol * max(1.0, abs(e))
        return got == expected
    if isinstance(expected, list):
        return isinstance(got, list) and len(got) == len(expected) and all(
            values_equal(g, e, tol) for g, e in zip(got, expected))
    if isinstance(expected, dict):
        return isinstance(got, dict) and set(got) == set(expected) and all(
            values_equal(got[k], expected[k], tol) for k in expected)
    return type(got) is type(expected) and got == expected


def stdout_equal(got: str, expected: str) -> bool:
    """Same lines after stripping trailing whitespace of each line and trailing blank lines."""
    norm = lambda s: [ln.rstrip() for ln in s.rstrip().splitlines()]  # noqa: E731
    return norm(got) == norm(expected)


def stdout_tokens_equal(got: str, expected: str, tol: Optional[float] = None) -> bool:
    """Same whitespace-separated tokens. With `tol`, a token pair that both parse as finite
    numbers is equal when |g - e| ≤ tol·max(1, |e|) (absolute below 1, relative above); other
    tokens compare as text."""
    g, e = got.split(), expected.split()
    if len(g) != len(e):
        return False
    for a, b in zip(g, e):
        if a == b:
            continue
        if tol is None:
            return False
        try:
            x, y = float(a), float(b)
        except ValueError:
            return False
        if not (math.isfinite(x) and math.isfinite(y)) or abs(x - y) > tol * max(1.0, abs(y)):
            return False
    return True


CHECKER_FAILED_EXIT = 3  # a checker's exit status for its own failure (testlib's "FAIL")


class CheckerFault(Exception):
    """A task's checker program could not judge an output for a reason of its own (see
    `CodeVerifier._checker_accepts`): the verdict is env_error, masked."""


class CodeVerifier(Verifier):
    """Runs a program against public and hidden tests in the sandbox (docs/verifiers.md §3).

    Args:
      limits: SandboxLimits for each sandboxed run; a task's `resource_limits` may lower
        "time_s" (cpu and wall) and "memory_mb".
      max_source_chars: longer programs fail without running.
      strip_markdown: take the last ```python fenced block of the output if there is one.
      drop_privileges, use_netns, filesystem: passed to run_sandboxed (defaults: root → fresh
        uid; own network namespace; bwrap's minimal read-only root).

    Raises:
      SandboxUnavailable (rlvr.verifiers.sandbox) at construction when filesystem="minimal" and
        bubblewrap is missing or cannot start a sandbox here; the message names the install
        command (`python -m rlvr.verifiers.sandbox --install`).
    """

    version = "code-4"

    def __init__(self, *, limits: SandboxLimits = SandboxLimits(), max_source_chars: int = 64_000,
                 strip_markdown: bool = True, drop_privileges: Optional[bool] = None,
                 use_netns: bool = True, filesystem: str = "minimal"):
        if filesystem not in FILESYSTEMS:
            raise ValueError(f"CodeVerifier.filesystem must be one of {FILESYSTEMS}, got "
                             f"{filesystem!r}")
        if filesystem == "minimal":
            require_sandbox(drop_privileges=drop_privileges, use_netns=use_netns)
        self.limits = limits
        self.max_source_chars = int(max_source_chars)
        self.strip_markdown = strip_markdown
        self.drop_privileges = drop_privileges
        self.use_netns = use_netns
        self.filesystem = filesystem

    @staticmethod
    def default_reward_config() -> RewardConfig:
        """docs/verifiers.md §2: w_c = 0.1, w_p = 0.2, w_h = 0.7, λ_t = λ_m = 0.05, λ_s = 0.5 (side effects
        saturated at 1, docs/architecture.md §4), gated on compile."""
        return RewardConfig(kind="weighted",
                            weights={"compile": 0.1, "public": 0.2, "hidden": 0.7,
                                     "time_cost": -0.05, "memory_cost": -0.05,
                                     "side_effect_cost": -0.5},
                            scale={"side_effect_cost": 1.0}, clip=(-1.0, 1.0), gates=("compile",))

    def _task_limits(self, task: TaskSpec) -> SandboxLimits:
        lim = self.limits
        rl = task.resource_limits or {}
        if "time_s" in rl:
            t = float(rl["time_s"])
            lim = dataclasses.replace(lim, cpu_s=max(1.0, min(lim.cpu_s, t)),
                                      wall_s=min(lim.wall_s, t))
        if "memory_mb" in rl:
            lim = dataclasses.replace(lim, memory_mb=min(lim.memory_mb, int(rl["memory_mb"])))
        return lim

    def extract_program(self, output: str) -> str:
        if self.strip_markdown and "```" in output:
            import re

            blocks = re.findall(r"```(?:python|py|python3)?[^\n]*\n(.*?)```", output, re.DOTALL)
            if blocks:
                return blocks[-1]
        return output

    def _run(self, source: str, ref: CodeReference, tests, limits) -> List[SandboxResult]:
        if ref.mode == "asserts":
            units = ref.public_units if tests is ref.public_tests else ref.hidden_units
            return [run_sandboxed(source, mode="asserts", entry_point=ref.entry_point,
                                  units=units, setup=ref.setup_code,
                                  candidate_name=ref.candidate_name,
                                  tests=[list(u) for u in units], limits=limits,
                                  drop_privileges=self.drop_privileges, use_netns=self.use_netns,
                                  filesystem=self.filesystem)]
        if ref.mode == "function":
            calls = [[t.get("args", []), t.get("kwargs", {})] for t in tests]
            return [run_sandboxed(source, mode="function", entry_point=ref.entry_point,
                                  calls=calls, tests=list(tests), limits=limits,
                                  drop_privileges=self.drop_privileges, use_netns=self.use_netns,
                                  filesystem=self.filesystem)]
        return [run_sandboxed(source, mode="stdio", stdin=t["stdin"], tests=[t], limits=limits,
                              drop_privileges=self.drop_privileges, use_netns=self.use_netns,
                              filesystem=self.filesystem)
                for t in tests]

    def _checker_accepts(self, ref: CodeReference, test, actual: str, limits) -> bool:
        """Runs the task's checker program in the sandbox on {"input", "expected", "actual"}
        (JSON on stdin): exit status 0 accepts.

        What the candidate's output can cause counts against the candidate: any other exit
        status, an exception or a checker time-out rejects, so output crafted to break a checker
        never escapes its failure. What happens whatever the output is the environment's fault
        (`CheckerFault`, the verdict becomes env_error): the sandbox could not run the checker,
        the checker does not compile, or it reports its own failure with exit status
        `CHECKER_FAILED_EXIT` (3, testlib's "FAIL")."""
        import json

        r = run_sandboxed(ref.checker, mode="stdio", stdin=json.dumps(
            {"input": test["stdin"], "expected": test["stdout"], "actual": actual}),
            tests=[], limits=limits, drop_privileges=self.drop_privileges,
            use_netns=self.use_netns, filesystem=self.filesystem)
        if r.status == "sandbox_error":
            raise CheckerFault(f"the checker's sandbox failed: {r.error}")
        if r.compiled is False:
            raise CheckerFault("the checker program does not compile: " + r.stderr[-300:])
        if r.returncode == CHECKER_FAILED_EXIT and r.limit is None and not r.timed_out:
            raise CheckerFault(f"the checker reported its own failure (exit status "
                               f"{CHECKER_FAILED_EXIT}): " + r.stderr[-300:])
        return r.status == "ok" and bool(r.compiled) and r.returncode == 0

    def _grade(self, runs: List[SandboxResult], ref: CodeReference, n: int, limits=None):
        """→ (passed flags [n], first failure note, tests_back) using the read-back tests."""
        passed, notes, tests_back = [False] * n, [], []
        if ref.mode == "asserts":
            r = runs[0]
            for i in range(n):
                res = r.results.get(i)
                if res is None:
                    notes.append(f"assert {i}: no result ({r.status})")
                elif res.get("ok") is True:
                    passed[i] = True
                else:
                    notes.append(f"assert {i}: failed")
        elif ref.mode == "function":
            r = runs[0]
            tests_back = r.tests or []
            for i in range(min(n, len(tests_back))):
                res = r.results.get(i)
                if res is None:
                    notes.append(f"test {i}: no result ({r.status})")
                elif not res.get("ok"):
                    notes.append(f"test {i}: {res.get('error')}")
                elif values_equal(res.get("value"), tests_back[i]["expected"], ref.float_tol):
                    passed[i] = True
                else:
                    notes.append(f"test {i}: got {str(res.get('value'))[:80]}")
        else:
            for i, r in enumerate(runs):
                tb = (r.tests or [None])[0]
                tests_back.append(tb)
                if tb is None:
                    notes.append(f"test {i}: tests file unreadable")
                elif r.status != "ok" or r.returncode != 0 or not r.compiled:
                    notes.append(f"test {i}: {r.status} rc={r.returncode}")
                elif ref.stdout_compare == "checker":
                    if self._checker_accepts(ref, tb, r.stdout_full, limits or self.limits):
                        passed[i] = True
                    else:
                        notes.append(f"test {i}: checker rejected {r.stdout_full[:80]!r}")
                elif (stdout_equal(r.stdout_full, tb["stdout"]) if ref.stdout_compare == "lines"
                      else stdout_tokens_equal(r.stdout_full, tb["stdout"],
                                               ref.float_tol if ref.stdout_compare == "float"
                                               else None)):
                    passed[i] = True
                else:
                    notes.append(f"test {i}: wrong output {r.stdout_full[:80]!r}")
        return passed, notes[:1]

    def _verify(self, task: TaskSpec, output: str) -> Verdict:
        ref = parse_code_reference(task.reference_answer)
        source = self.extract_program(output)
        limits = self._task_limits(task)
        if len(source) > self.max_source_chars:
            return Verdict(decision="fail", components={"compile": 0.0, "public": 0.0,
                                                        "hidden": 0.0},
                           evidence={"reason": "source_too_long", "chars": len(source)},
                           verifier_version=self.version)
        comps = {"compile": 0.0, "public": 0.0, "hidden": 0.0, "time_cost": 0.0,
                 "memory_cost": 0.0, "side_effect_cost": 0.0}
        ev: dict = {}
        cpu = rss = 0.0
        all_pass = True
        graded = set()  # splits whose tests all ran to completion within the limits and passed
        for split, tests in (("public", ref.public_tests), ("hidden", ref.hidden_tests)):
            if not tests:
                comps[split] = 1.0
                graded.add(split)
                continue
            runs = self._run(source, ref, tests, limits)
            want = len(tests) if ref.mode == "stdio" else 1
            if len(runs) != want:  # our fault, never a pass
                return env_error(f"{split} tests: {len(runs)} sandbox runs came back, expected "
                                 f"{want}", verifier_version=self.version)
            faults = [r for r in runs if r.status == "sandbox_error"]
            if faults:
                return env_error(f"sandbox fault in {split} run: {faults[0].error}",
                                 verifier_version=self.version,
                                 timeout_class="environment_init"
                                 if "not ready" in str(faults[0].error) else None)
            compiled = all(r.compiled for r in runs)
            ev.setdefault("isolation", dict(runs[0].isolation))
            cpu = max(cpu, max(r.cpu_s for r in runs))
            rss = max(rss, max(r.max_rss_mb for r in runs))
            blocked = [b for r in runs for b in r.blocked]
            tampered = not all(r.tests_intact for r in runs)
            comps["side_effect_cost"] += len(blocked) + (1.0 if tampered else 0.0)
            if blocked:
                ev.setdefault("blocked", []).extend(blocked)
            if tampered:
                ev["tests_tampered"] = True
                all_pass = False
                ev.setdefault("reason", "tests_tampered")
                break
            if not compiled:
                comps["compile"] = 0.0
                all_pass = False
                ev["reason"] = "compile_error"
                ev["stderr"] = runs[0].stderr[-500:]
                break
            comps["compile"] = 1.0
            load_err = next((r.load_error for r in runs if r.load_error), None)
            if load_err:
                all_pass = False
                ev["reason"] = "load_error"
                ev["load_error"] = load_err
                break
            try:
                passed, notes = self._grade(runs, ref, len(tests), limits)
            except CheckerFault as e:  # not the candidate's fault
                return env_error(f"{split} tests: {e}", verifier_version=self.version)
            w = [float(t.get("weight", 1.0)) for t in tests]
            comps[split] = (sum(wi for wi, p in zip(w, passed) if p) / sum(w)) if sum(w) else \
                float(all(passed))
            statuses = sorted({r.status for r in runs})
            ev[f"{split}_passed"] = f"{sum(passed)}/{len(passed)}"
            ev[f"{split}_status"] = statuses
            limits_hit = sorted({r.limit for r in runs if r.limit})
            if limits_hit:
                ev[f"{split}_limit"] = limits_hit
            if "timeout" in statuses:
                ev["timeout_class"] = "candidate_program"
            refused = [b for b in blocked if b.startswith("syscall.")]
            if refused:  # tried a system call the sandbox refuses: never a pass
                all_pass = False
                ev.setdefault("reason", "refused_syscall")
            if statuses != ["ok"] or limits_hit:
                # a run that hit a limit or did not end cleanly fails its split, whatever
                # results it sent before (they are kept as evidence only); no further split runs
                all_pass = False
                comps[split] = 0.0
                bad = [st for st in statuses if st != "ok"]
                ev.setdefault("reason", f"{split}_{bad[-1] if bad else 'limit'}")
                break
            if not all(passed):
                all_pass = False
                ev.setdefault("reason", f"{split}_tests_failed")
                ev[f"{split}_first_failure"] = notes[0] if notes else ""
                continue
            graded.add(split)
        # pass needs every split's tests to have run in full and passed (the hidden tests
        # included: a verdict never passes on the public run alone)
        all_pass = all_pass and graded == {"public", "hidden"}
        comps["time_cost"] = min(cpu / limits.cpu_s, 1.0)
        comps["memory_cost"] = min(rss / limits.memory_mb, 1.0)
        ev["cpu_s"], ev["max_rss_mb"] = round(cpu, 4), round(rss, 2)
        return Verdict(decision="pass" if all_pass else "fail", components=comps, evidence=ev,
                       verifier_version=self.version)
