"""Verification pool (docs/verifiers.md (V.1), docs/architecture.md §4): timeouts classified, env_error retried then masked, a killed
worker never yields a reward, counters, cache."""

import os
import signal
import threading
import time

import pytest

from rlvr.records.task import TaskSpec
from rlvr.verifiers.base import Verifier
from rlvr.verifiers.cache import RewardCache
from rlvr.verifiers.compose import RewardConfig, compose_rewards
from rlvr.verifiers.pool import TIMEOUT_CLASSES, VerificationPool
from rlvr.records.verdict import Verdict, env_error


class ScriptedVerifier(Verifier):
    """Behaviour chosen by the output text (module-level: picklable for worker processes)."""

    version = "scripted-1"

    def _verify(self, task, output):
        if output == "pass":
            return Verdict("pass")
        if output.startswith("sleep:"):
            time.sleep(float(output.split(":")[1]))
            return Verdict("pass")
        if output == "hang":
            time.sleep(60)
        if output == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        if output.startswith("die_once:"):
            marker = output.split(":", 1)[1]
            if not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            return Verdict("pass")
        if output == "env_error":
            return env_error("tool service down")
        if output == "raise":
            raise RuntimeError("verifier bug")
        return Verdict("fail")


T = TaskSpec(task_id="t", prompt="", task_type="text")


@pytest.fixture(scope="module")
def ppool():
    with VerificationPool(ScriptedVerifier(), num_workers=2, timeout_s=1.0,
                          max_env_retries=1, executor="process") as p:
        yield p


def test_process_pool_mixed_batch(ppool, tmp_path):
    outs = ["pass", "fail", "env_error", "hang", "die", f"die_once:{tmp_path}/m", "raise", "pass"]
    vs = ppool.verify_batch([T] * len(outs), outs)
    assert [v.decision for v in vs[:2]] == ["pass", "fail"]
    assert vs[2].trial == "env_error" and vs[2].evidence["attempts"] == 2
    assert vs[3].trial == "env_error" and vs[3].evidence["timeout_class"] == "verifier_service"
    assert vs[4].trial == "env_error" and vs[4].evidence["fault"] == "infrastructure"
    assert vs[5].decision == "pass" and vs[5].evidence["attempts"] == 2  # crashed, retried, ok
    assert vs[6].trial == "env_error"
    assert vs[7].decision == "pass"
    rewards, valid = compose_rewards(vs, RewardConfig())
    assert list(valid) == [True, True, False, False, False, True, False, True]
    s = ppool.stats()
    assert s["verdicts"] == 8 and s["env_error"] == 4 and s["pass"] == 3
    assert s["timeouts"]["verifier_service"] == 2  # "hang", first try and retry
    assert s["worker_crashes"] == 3 and s["worker_restarts"] >= 4
    assert s["retries"] == 5 and s["verdicts_per_s"] > 0
    assert set(s["timeouts"]) == set(TIMEOUT_CLASSES)


def test_kill_worker_mid_run_is_env_error_then_retried():
    with VerificationPool(ScriptedVerifier(), num_workers=2, timeout_s=20.0,
                          max_env_retries=2, executor="process") as p:
        p.verify_batch([T] * 2, ["sleep:0.2", "sleep:0.2"])  # both workers started and warm
        killed = []

        def killer():
            time.sleep(0.3)
            for pid in p.executor.worker_pids():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

        th = threading.Thread(target=killer)
        th.start()
        vs = p.verify_batch([T] * 2, ["sleep:1.5", "sleep:1.5"])
        th.join()
        s = p.stats()
    assert len(killed) == 2
    assert s["worker_crashes"] == 2 and s["env_error_events"] == 2 and s["retries"] == 2
    # the crashed attempt never produced a verdict; the retry on a fresh worker did
    assert all(v.decision == "pass" and v.evidence.get("attempts") == 2 for v in vs)


def test_killed_worker_never_rewarded_without_retries():
    with VerificationPool(ScriptedVerifier(), num_workers=1, timeout_s=5.0, max_env_retries=0,
                          executor="process") as p:
        v, = p.verify_batch([T], ["die"])
    assert v.trial == "env_error"
    assert compose_rewards([v], RewardConfig())[1].tolist() == [False]


def test_thread_and_inline_executors_and_cache():
    cache = RewardCache()
    with VerificationPool(ScriptedVerifier(), num_workers=2, timeout_s=0.3, max_env_retries=0,
                          executor="thread", cache=cache, reward_config_hash="h") as p:
        vs = p.verify_batch([T] * 3, ["pass", "sleep:1.0", "fail"])
        assert [v.decision for v in vs] == ["pass", "unknown", "fail"]
        assert vs[1].trial == "env_error"
        vs2 = p.verify_batch([T] * 2, ["pass", "fail"])
        assert [v.decision for v in vs2] == ["pass", "fail"]
        assert p.stats()["cache_hits"] == 2 and cache.hits == 2
    with VerificationPool(ScriptedVerifier(), executor="inline", max_env_retries=2) as p:
        v, = p.verify_batch([T], ["env_error"])
        assert v.trial == "env_error" and v.evidence["attempts"] == 3
        assert p.stats()["retries"] == 2


def test_pool_argument_validation():
    with pytest.raises(ValueError, match="executor"):
        VerificationPool(ScriptedVerifier(), executor="cluster")
    with pytest.raises(ValueError, match="num_workers"):
        VerificationPool(ScriptedVerifier(), num_workers=0)
    with pytest.raises(ValueError, match="outputs"):
        VerificationPool(ScriptedVerifier(), executor="inline").verify_batch([T], [])


class HangingVerifier(Verifier):
    """"hang" sleeps `hang_s` and then marks itself finished; anything else passes at once."""

    version = "hanging-1"

    def __init__(self, hang_s):
        self.hang_s = hang_s
        self.finished = threading.Event()

    def _verify(self, task, output):
        if output == "hang":
            time.sleep(self.hang_s)
            self.finished.set()
        return Verdict("pass")


def test_inline_executor_enforces_the_timeout():
    from configs.base import get_config

    assert get_config().reward.executor == "inline"  # the training loop's default
    v = HangingVerifier(hang_s=15.0)
    with VerificationPool(v, executor="inline", timeout_s=0.3, max_env_retries=1) as p:
        vs = p.verify_batch([T] * 3, ["ok", "hang", "ok"])
        # returned while the hung call is still sleeping: the step was not stalled by it
        assert not v.finished.is_set()
        s = p.stats()
    assert [x.decision for x in (vs[0], vs[2])] == ["pass", "pass"]
    assert vs[1].trial == "env_error" and vs[1].evidence["timeout_class"] == "verifier_service"
    assert vs[1].evidence["attempts"] == 2  # retried once, then masked
    assert compose_rewards(vs, RewardConfig())[1].tolist() == [True, False, True]
    assert s["timeouts"]["verifier_service"] == 2 and s["env_error"] == 1
    assert s["retries"] == 1 and s["worker_restarts"] == 2


def test_inline_executor_keeps_order_and_survives_base_exceptions():
    class Exits(Verifier):
        version = "exits-1"

        def _verify(self, task, output):
            if output == "exit":
                raise SystemExit(3)
            return Verdict("pass" if output == "pass" else "fail")

    with VerificationPool(Exits(), executor="inline", timeout_s=5.0, max_env_retries=0) as p:
        vs = p.verify_batch([T] * 4, ["pass", "exit", "fail", "pass"])
    assert [v.decision for v in vs] == ["pass", "unknown", "fail", "pass"]
    assert vs[1].trial == "env_error" and "SystemExit" in vs[1].evidence["reason"]
    assert p.stats()["timeouts"]["verifier_service"] == 0


_SCRIPT = """
from rlvr.records.task import TaskSpec
from rlvr.verifiers.arithmetic import IntegerAnswerVerifier
from rlvr.verifiers.pool import VerificationPool
{body}
"""
_WORK = """pool = VerificationPool(IntegerAnswerVerifier(), num_workers=1, timeout_s=30.0)
v = pool.verify_batch([TaskSpec(task_id="t", prompt="1+1=", task_type="text", reference_answer=2)], ["2"])[0]
print("DECISION", v.decision, v.trial)
pool.close()
"""


@pytest.mark.parametrize("how", ["file_unguarded", "stdin", "file_guarded"])
def test_process_pool_says_when_the_main_script_cannot_start_workers(tmp_path, how):
    """An unguarded main script or code on stdin cannot start spawned workers: the pool says so
    at construction instead of turning every verdict into an env_error; a guarded script works."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if how == "file_guarded":
        body = "if __name__ == '__main__':\n" + "".join("    " + ln + "\n" for ln in _WORK.splitlines())
    else:
        body = _WORK
    src = _SCRIPT.format(body=body)
    env = dict(os.environ, PYTHONPATH=root, JAX_PLATFORMS="cpu")
    if how == "stdin":
        r = subprocess.run([sys.executable, "-"], input=src, capture_output=True, text=True,
                           cwd=tmp_path, env=env, timeout=120)
    else:
        script = tmp_path / "script.py"
        script.write_text(src)
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           cwd=tmp_path, env=env, timeout=120)
    if how == "file_guarded":
        assert r.returncode == 0, r.stderr[-2000:]
        assert "DECISION pass valid" in r.stdout
    else:
        assert r.returncode != 0
        assert "executor='thread'" in r.stderr and "DECISION" not in r.stdout
        assert ("stdin" if how == "stdin" else "guard") in r.stderr
