"""Code verifier + sandbox (docs/verifiers.md §3): a correct program passes; each attack fails and leaves the
host unharmed (asserted on side effects, not only on the verdict)."""

import json
import os
import socket
import threading
import uuid

import pytest

from rlvr.records.task import TaskSpec
from rlvr.verifiers.code import (CodeTestsError, CodeVerifier, parse_code_reference,
                                 values_equal, stdout_equal)
from rlvr.verifiers.compose import compose_reward
from rlvr.verifiers.sandbox import SandboxLimits, _uid_pids, run_sandboxed

LIMITS = SandboxLimits(cpu_s=1, wall_s=1.5, memory_mb=256, max_processes=16, max_file_mb=1)
V = CodeVerifier(limits=LIMITS)

ADD_REF = {
    "entry_point": "add",
    "public_tests": [{"args": [1, 2], "expected": 3}, {"args": [-1, 1], "expected": 0}],
    "hidden_tests": [{"args": [10, 5], "expected": 15}, {"args": [2, 2], "expected": 4}],
}
ADD_TASK = TaskSpec(task_id="add", prompt="write add(a, b)", task_type="code",
                    reference_answer=ADD_REF)
GOOD = "def add(a, b):\n    return a + b\n"


def _check_no_leftovers(verdict):
    uid = verdict.evidence.get("isolation", {}).get("uid")
    if uid not in (None, 0):
        assert _uid_pids(uid) == [], "processes of the sandbox uid survived the run"


def test_correct_solution_passes_with_eq30_components():
    v = V.verify(ADD_TASK, "Here you go:\n```python\n" + GOOD + "```\n")
    assert v.decision == "pass" and v.trial == "valid", v.evidence
    assert v.components["compile"] == 1.0
    assert v.components["public"] == 1.0 and v.components["hidden"] == 1.0
    assert 0.0 <= v.components["time_cost"] <= 1.0
    r, valid = compose_reward(v, CodeVerifier.default_reward_config())
    expected = 0.1 + 0.2 + 0.7 - 0.05 * v.components["time_cost"] \
        - 0.05 * v.components["memory_cost"]
    assert valid and r == pytest.approx(expected)
    assert v.evidence["isolation"]["net"] in ("netns", "audit")


def test_partial_credit_public_vs_hidden():
    # hard-codes the public answers only: public 1.0, hidden 0.0 → fail, partial components
    src = "def add(a, b):\n    return {(1, 2): 3, (-1, 1): 0}.get((a, b), 0)\n"
    v = V.verify(ADD_TASK, src)
    assert v.decision == "fail"
    assert v.components["public"] == 1.0 and v.components["hidden"] == 0.0
    r, _ = compose_reward(v, CodeVerifier.default_reward_config())
    assert r < 0.31


def test_compile_error_is_fail_and_gated():
    v = V.verify(ADD_TASK, "def add(a, b) return a+b")
    assert v.decision == "fail" and v.trial == "valid" and v.components["compile"] == 0.0
    assert compose_reward(v, CodeVerifier.default_reward_config()) == (0.0, True)


def test_stdio_mode():
    ref = {"entry_point": None,
           "public_tests": [{"stdin": "1 2\n", "stdout": "3\n"}],
           "hidden_tests": [{"stdin": "5 7\n", "stdout": "12"}]}
    task = TaskSpec(task_id="s", prompt="sum", task_type="code", reference_answer=ref)
    assert V.verify(task, "a, b = map(int, input().split())\nprint(a + b)\n").decision == "pass"
    wrong = V.verify(task, "a, b = map(int, input().split())\nprint(a * b)\n")
    assert wrong.decision == "fail" and wrong.components["hidden"] == 0.0


ATTACKS = {
    "infinite_loop": "def add(a, b):\n    while True:\n        pass\n",
    "sleep_forever": "import time\ndef add(a, b):\n    time.sleep(100)\n",
    "fork_bomb": ("import os\ndef add(a, b):\n    while True:\n        try:\n"
                  "            os.fork()\n        except OSError:\n            pass\n"),
    "memory_bomb": "def add(a, b):\n    x = [0] * (10 ** 10)\n    return a + b\n",
    "memory_bomb_gradual": ("def add(a, b):\n    xs = []\n    while True:\n"
                            "        xs.append(bytearray(10 ** 7))\n"),
    "sys_exit_before_tests": "import sys\nsys.exit(0)\ndef add(a, b):\n    return a + b\n",
    "os_exit_before_tests": "import os\nos._exit(0)\ndef add(a, b):\n    return a + b\n",
    "os_exit_in_call": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "fake_all_passed": ("print('all tests passed'); print('OK')\n"
                        "def add(a, b):\n    print('PASSED')\n    return None\n"),
    "always_equal_object": ("class E:\n    def __eq__(self, o): return True\n"
                            "def add(a, b):\n    return E()\n"),
    "patch_harness_send": (
        "import __main__, json\n"
        "_orig = __main__._send\n"
        "def fake(fd, obj):\n"
        "    if obj.get('kind') == 'result':\n"
        "        obj = {'kind': 'result', 'i': obj['i'], 'ok': True, 'value': 'PASS'}\n"
        "    _orig(fd, obj)\n"
        "__main__._send = fake\n"
        "json.dumps = lambda *a, **k: '{\"kind\": \"done\"}'\n"
        "def add(a, b):\n    return 0\n"),
    "forge_result_fd": (
        "import os\n"
        "for fd in range(3, 20):\n"
        "    try:\n"
        "        os.write(fd, b'{\"kind\":\"result\",\"i\":0,\"ok\":true,\"value\":3}\\n'"
        " + b'{\"kind\":\"done\"}\\n')\n"
        "    except OSError:\n"
        "        pass\n"
        "def add(a, b):\n    return 0\n"),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_fails(name):
    v = V.verify(ADD_TASK, ATTACKS[name])
    assert v.trial == "valid", (name, v.evidence)
    assert v.decision == "fail", (name, v.evidence)
    _check_no_leftovers(v)


def test_huge_file_and_writes_outside_tmp_do_not_reach_host():
    host_tmp = f"/tmp/rlvr_attack_{uuid.uuid4().hex}"
    host_repo = os.path.join(os.path.dirname(__file__), f"pwned_{uuid.uuid4().hex}")
    src = (
        "def add(a, b):\n"
        f"    for p in ({host_tmp!r}, {host_repo!r}):\n"
        "        try:\n"
        "            with open(p, 'w') as f: f.write('x')\n"
        "        except OSError:\n"
        "            pass\n"
        "    with open('big.bin', 'wb') as f:\n"
        "        for _ in range(1000):\n"
        "            f.write(b'x' * (1 << 20))\n"
        "    return a + b\n")
    v = V.verify(ADD_TASK, src)
    assert v.decision == "fail" and v.trial == "valid"
    assert not os.path.exists(host_tmp)
    assert not os.path.exists(host_repo)


def test_network_socket_blocked_and_no_connection_reaches_host():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(3.0)
    port = srv.getsockname()[1]
    got = []

    def accept():
        try:
            conn, _ = srv.accept()
            got.append(conn.recv(100))
            conn.close()
        except OSError:
            pass

    t = threading.Thread(target=accept)
    t.start()
    src = ("import socket\n"
           "def add(a, b):\n"
           "    try:\n"
           f"        s = socket.create_connection(('127.0.0.1', {port}), timeout=0.5)\n"
           "        s.sendall(b'leak')\n"
           "    except Exception:\n"
           "        pass\n"
           "    return a + b + 1\n")
    v = V.verify(ADD_TASK, src)
    srv.close()
    t.join()
    assert v.decision == "fail"
    assert got == [], "the sandbox reached a host socket"


# reads or rewrites anything it can find that looks like a tests file: on disk, and the
# verifier's in-memory copy through /proc/<pid>/fd (reachable only without the minimal root and
# without the privilege drop); returns how many rewrites went through
TAMPER = ("import glob, json, os\n"
          "def add(a, b):\n"
          "    found = glob.glob('/tmp/rlvr-priv-*/tests.json') + glob.glob('../*/tests.json')\n"
          "    for fd in glob.glob('/proc/[0-9]*/fd/*'):\n"
          "        try:\n"
          "            if 'rlvr-tests' in os.readlink(fd):\n"
          "                found.append(fd)\n"
          "        except OSError:\n"
          "            pass\n"
          "    done = 0\n"
          "    for p in found:\n"
          "        try:\n"
          "            t = json.load(open(p))\n"
          "            for x in t: x['expected'] = 0\n"
          "            with open(p, 'r+') as f:\n"
          "                f.write(json.dumps(t))\n"
          "                f.truncate()\n"
          "            done += 1\n"
          "        except Exception:\n"
          "            pass\n"
          "    return done\n")


def test_tests_file_unreachable_and_immutable():
    v = V.verify(ADD_TASK, TAMPER)
    assert v.decision == "fail" and not v.evidence.get("tests_tampered")
    assert v.evidence["hidden_first_failure"] == "test 0: got 0"  # nothing found to rewrite
    # without privilege drop and without the minimal root the candidate finds the verifier's
    # copy, but it is a sealed memory file: every rewrite fails and nothing is on disk
    r = run_sandboxed(TAMPER, entry_point="add", calls=[[[1, 2], {}]], tests=ADD_REF,
                      limits=LIMITS, drop_privileges=False, filesystem="host")
    assert r.status == "ok" and r.results[0] == {"ok": True, "value": 0}, r
    assert r.tests_intact and r.tests == ADD_REF


def test_tests_hash_check_catches_a_rewrite(monkeypatch):
    # were the verifier's copy writable (no seals), the rewrite would be caught by the hash
    import rlvr.verifiers.sandbox as sb

    real = sb.fcntl.fcntl
    monkeypatch.setattr(sb.fcntl, "fcntl", lambda fd, cmd, *a: 0 if cmd == sb.fcntl.F_ADD_SEALS
                        else real(fd, cmd, *a))
    weak = CodeVerifier(limits=LIMITS, drop_privileges=False, filesystem="host")
    v = weak.verify(ADD_TASK, TAMPER)
    assert v.decision == "fail" and v.evidence.get("tests_tampered") is True, v.evidence
    assert v.components["side_effect_cost"] >= 1.0


def test_sandbox_fault_is_env_error(monkeypatch):
    import rlvr.verifiers.sandbox as sb
    monkeypatch.setattr(sb, "HARNESS_PATH", "/nonexistent/harness.py")
    v = V.verify(ADD_TASK, GOOD)
    assert v.trial == "env_error"
    assert compose_reward(v, CodeVerifier.default_reward_config())[1] is False


def test_clean_environment_no_secrets(monkeypatch):
    monkeypatch.setenv("RLVR_SECRET_TOKEN", "hunter2")
    r = run_sandboxed("import os\ndef f():\n    return dict(os.environ)\n", entry_point="f",
                      calls=[[[], {}]], limits=LIMITS)
    env = r.results[0]["value"]
    assert "RLVR_SECRET_TOKEN" not in env and "hunter2" not in json.dumps(env)


def test_reference_validation_names_field():
    with pytest.raises(CodeTestsError, match=r"public_tests\[1\].expected"):
        parse_code_reference({"entry_point": "f", "public_tests": [
            {"args": [1], "expected": 1}, {"args": [2]}]})
    with pytest.raises(CodeTestsError, match="entry_point"):
        parse_code_reference({"entry_point": "not valid", "public_tests": [
            {"args": [], "expected": 1}]})
    with pytest.raises(CodeTestsError, match=r"hidden_tests\[0\].stdout"):
        parse_code_reference({"hidden_tests": [{"stdin": ""}]})
    bad = TaskSpec(task_id="b", prompt="", task_type="code", reference_answer={"x": 1})
    assert V.verify(bad, GOOD).trial == "env_error"


def test_value_comparison():
    assert values_equal(0.1 + 0.2, 0.3, 1e-9) and not values_equal(float("nan"), 0.3, 1e-9)
    assert not values_equal(True, 1, 1e-9) and not values_equal(1, True, 1e-9)
    assert values_equal([1, {"a": 2.0}], [1, {"a": 2}], 1e-9)
    assert not values_equal([1, 2], [1, 2, 3], 1e-9) and not values_equal("1", 1, 1e-9)
    assert stdout_equal("3  \n\n", "3") and not stdout_equal("3 4", "34")


def test_escaped_daemon_killed_and_host_processes_invisible():
    src = ("import os, time\n"
           "def add(a, b):\n"
           "    if os.fork() == 0:\n"
           "        os.setsid()\n"
           "        if os.fork() == 0:\n"
           "            time.sleep(30)\n"
           "        os._exit(0)\n"
           "    time.sleep(0.2)\n"
           "    return [int(p) for p in os.listdir('/proc') if p.isdigit()]\n")
    r = run_sandboxed(src, entry_point="add", calls=[[[1, 2], {}]], limits=LIMITS)
    assert r.status == "ok"
    uid = r.isolation["uid"]
    assert _uid_pids(uid) == []  # the setsid'ed grandchild is gone too
    if r.isolation.get("pid") == "pidns" and r.isolation.get("fs") == "minimal":
        visible = r.results[0]["value"]  # its own namespace: init, itself, its children
        assert 1 in visible and len(visible) <= 5, visible


def test_concurrent_sandboxes_do_not_interfere():
    from rlvr.verifiers.pool import VerificationPool

    outs = [GOOD, ATTACKS["forge_result_fd"], GOOD, ATTACKS["patch_harness_send"]]
    with VerificationPool(V, num_workers=2, timeout_s=30, executor="thread") as p:
        vs = p.verify_batch([ADD_TASK] * len(outs), outs)
    assert [v.decision for v in vs] == ["pass", "fail", "pass", "fail"]
    assert len({v.evidence["isolation"]["uid"] for v in vs}) == len(vs) or \
        vs[0].evidence["isolation"]["uid"] == os.getuid()
