"""Attacks of an adversarial policy on the code verifier (docs/verifiers.md §3), each in real bubblewrap
sandboxes: stalling after the harness has reported, privileged system calls and namespaces,
flooding the working directory, and the hidden tests on the host's disk."""

import dataclasses
import errno
import json
import os
import pathlib
import platform
import shutil
import subprocess
import tempfile
import threading
import uuid

import pytest

import rlvr.verifiers.sandbox as sb
from rlvr.records.task import TaskSpec
from rlvr.verifiers.code import CodeVerifier
from rlvr.verifiers.sandbox import SandboxLimits, SandboxResult, run_sandboxed

LIMITS = SandboxLimits(cpu_s=1, wall_s=1.5, memory_mb=256, max_processes=16, max_file_mb=1)
V = CodeVerifier(limits=LIMITS)
REF = {"entry_point": "add",
       "public_tests": [{"args": [1, 2], "expected": 3}, {"args": [-1, 1], "expected": 0}],
       "hidden_tests": [{"args": [10, 5], "expected": 15}, {"args": [2, 2], "expected": 4}]}
TASK = TaskSpec(task_id="add", prompt="write add(a, b)", task_type="code", reference_answer=REF)
# right on the public inputs only: a pass needs the hidden run
PUBLIC_ONLY = "def add(a, b):\n    return {(1, 2): 3, (-1, 1): 0}.get((a, b), -99)\n"


# ------------------------------------------------------------------ stalling after the report
STALLS = {
    # the harness's own exit, patched from the candidate's module: the run never ends
    "harness_exit_patched": "import __main__, time\n__main__._exit = lambda code: time.sleep(100)\n",
    "os_exit_patched": "import os, time\nos._exit = lambda code: time.sleep(100)\n",
    "both_exits_patched": ("import __main__, os, time\nos._exit = lambda code: time.sleep(100)\n"
                           "__main__._exit = os._exit\n"),
}


@pytest.mark.parametrize("name", sorted(STALLS))
def test_stall_after_reporting_public_answers_fails(name):
    v = V.verify(TASK, STALLS[name] + PUBLIC_ONLY)
    assert v.trial == "valid" and v.decision == "fail", v.evidence
    assert v.components["hidden"] == 0.0, v.evidence


def test_stall_after_reporting_fails_even_with_every_answer_right():
    # right answers on both splits, then a run that ends only by the wall clock: a limit hit
    v = V.verify(TASK, STALLS["both_exits_patched"] + "def add(a, b):\n    return a + b\n")
    assert v.trial == "valid" and v.decision == "fail", v.evidence
    assert v.evidence["reason"] == "public_timeout" and v.evidence["public_limit"] == ["wall"]
    assert v.evidence["public_passed"] == "2/2"  # sent, but not counted
    assert v.components["public"] == 0.0 and v.components["hidden"] == 0.0


def test_output_past_the_file_size_limit_fails_despite_right_answers():
    # ignores SIGXFSZ, fills stdout up to the limit, then answers right
    src = ("import signal, sys\n"
           "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
           "def add(a, b):\n"
           "    try:\n"
           "        while True:\n"
           "            sys.stdout.write('x' * 65536)\n"
           "            sys.stdout.flush()\n"
           "    except OSError:\n"
           "        pass\n"
           "    return a + b\n")
    v = V.verify(TASK, src)
    assert v.trial == "valid" and v.decision == "fail", v.evidence
    assert v.evidence["public_limit"] == ["output"] and v.evidence["public_passed"] == "2/2"
    assert v.components["public"] == 0.0


def _fake_runs(monkeypatch, by_split):
    """CodeVerifier._run answering from `by_split[split]` (a SandboxResult) without a sandbox."""
    def run(self, source, ref, tests, limits):
        split = "public" if tests == ref.public_tests else "hidden"
        return [by_split[split]]

    monkeypatch.setattr(CodeVerifier, "_run", run)


def _ok(tests, results, **kw):
    return SandboxResult(status=kw.pop("status", "ok"), compiled=True, results=results,
                         returncode=0, tests=[dict(t) for t in tests], isolation={"fs": "minimal"},
                         **kw)


ALL_RIGHT = {"public": {0: {"ok": True, "value": 3}, 1: {"ok": True, "value": 0}},
             "hidden": {0: {"ok": True, "value": 15}, 1: {"ok": True, "value": 4}}}


def test_verdict_passes_only_on_complete_clean_runs(monkeypatch):
    good = {s: _ok(REF[f"{s}_tests"], ALL_RIGHT[s]) for s in ("public", "hidden")}
    _fake_runs(monkeypatch, good)
    assert V.verify(TASK, "x").decision == "pass"  # the fakes are graded as real runs
    bad = {
        "hidden result missing": {**good, "hidden": _ok(REF["hidden_tests"],
                                                        {0: ALL_RIGHT["hidden"][0]})},
        "hidden results empty": {**good, "hidden": _ok(REF["hidden_tests"], {})},
        "tests read back short": {**good, "hidden": dataclasses.replace(
            good["hidden"], tests=[dict(REF["hidden_tests"][0])])},
        "public timeout": {**good, "public": _ok(REF["public_tests"], ALL_RIGHT["public"],
                                                 status="timeout", limit="wall")},
        "hidden timeout": {**good, "hidden": _ok(REF["hidden_tests"], ALL_RIGHT["hidden"],
                                                 status="timeout", limit="cpu")},
        "hidden crashed": {**good, "hidden": _ok(REF["hidden_tests"], ALL_RIGHT["hidden"],
                                                 status="crashed")},
        "output limit": {**good, "hidden": _ok(REF["hidden_tests"], ALL_RIGHT["hidden"],
                                               limit="output")},
        "refused syscall": {**good, "public": _ok(REF["public_tests"], ALL_RIGHT["public"],
                                                  blocked=("syscall.unshare",))},
    }
    for why, runs in bad.items():
        _fake_runs(monkeypatch, runs)
        v = V.verify(TASK, "x")
        assert (v.trial, v.decision) == ("valid", "fail"), (why, v.evidence)


def test_a_missing_hidden_run_is_never_a_pass(monkeypatch):
    good = _ok(REF["public_tests"], ALL_RIGHT["public"])
    monkeypatch.setattr(CodeVerifier, "_run", lambda self, source, ref, tests, limits:
                        [good] if tests == ref.public_tests else [])
    v = V.verify(TASK, "x")
    assert v.trial == "env_error" and v.decision != "pass", v


def test_empty_hidden_tests_pass_on_the_public_run(monkeypatch):
    task = TaskSpec(task_id="p", prompt="", task_type="code",
                    reference_answer={**REF, "hidden_tests": []})
    v = V.verify(task, "def add(a, b):\n    return a + b\n")
    assert v.decision == "pass" and v.components["hidden"] == 1.0, v.evidence
    sleepy = V.verify(task, STALLS["both_exits_patched"] + "def add(a, b):\n    return a + b\n")
    assert sleepy.decision == "fail", sleepy.evidence


# ------------------------------------------------------------------ privileged system calls
# numbers of the calls per architecture (asm/unistd.h); arguments chosen so that the kernel
# itself would answer something other than EPERM (a bad pointer, fd or flag, an unknown pid),
# which tells the seccomp filter's answer apart from the kernel's own checks
_NR = {"x86_64": dict(unshare=272, setns=308, mount=165, umount2=166, pivot_root=155, ptrace=101,
                      bpf=321, perf_event_open=298, userfaultfd=323, io_uring_setup=425,
                      add_key=248, request_key=249, keyctl=250, kexec_load=246, init_module=175,
                      finit_module=313, clone=56, clone3=435, process_vm_readv=310,
                      open_tree=428, fsopen=430),
       "aarch64": dict(unshare=97, setns=268, mount=40, umount2=39, pivot_root=41, ptrace=117,
                       bpf=280, perf_event_open=241, userfaultfd=282, io_uring_setup=425,
                       add_key=217, request_key=218, keyctl=219, kexec_load=104, init_module=105,
                       finit_module=273, clone=220, clone3=435, process_vm_readv=270,
                       open_tree=428, fsopen=430)}
CLONE_NEWUSER, CLONE_NEWNS, SIGCHLD = 0x10000000, 0x00020000, 17
CALLS = {  # name: (arguments, the kernel's own answer without the filter, or None if EPERM)
    "setns": ((-1, 0), "EBADF"),
    "mount": ((1, 0, 0, 0, 0), "EFAULT"),
    "umount2": ((0, 0x80000000), "EINVAL"),
    "pivot_root": ((1, 1), None),
    "ptrace": ((0x4206, 999999999, 0, 0), "ESRCH"),          # PTRACE_SEIZE of no process
    "bpf": ((-1, 0, 0), None),
    "perf_event_open": ((0, 0, -1, -1, 0), "EFAULT"),
    "userfaultfd": ((0x11,), "EINVAL"),                      # user-mode-only + a bad flag
    "io_uring_setup": ((0, 0), None),
    "add_key": ((0, 0, 0, 0, 0), "EFAULT"),
    "request_key": ((0, 0, 0, 0), "EFAULT"),
    "keyctl": ((-1, 0, 0, 0, 0), None),
    "kexec_load": ((0, 0, 0, 0xFFFFFFFF), None),
    "init_module": ((0, 0, 0), None),
    "finit_module": ((-1, 0, 0), None),
    "process_vm_readv": ((999999999, 0, 1, 0, 1, 0), None),
    "open_tree": ((-1, 0, 0), "EFAULT"),
    "fsopen": ((0, 0), None),
    "unshare": ((CLONE_NEWUSER,), None),                     # succeeds without the filter
    "clone": ((CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0), None),  # a forked child in a new userns
}
RAW_CALLS = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    f"NR = {_NR.get(platform.machine(), {})!r}\n"
    f"CALLS = {{k: v[0] for k, v in {CALLS!r}.items()}}\n"
    "def f():\n"
    "    out = {}\n"
    "    for name, args in CALLS.items():\n"
    "        ctypes.set_errno(0)\n"
    "        rc = libc.syscall(NR[name], *[ctypes.c_long(a) for a in args])\n"
    "        if rc == 0 and name == 'clone':\n"
    "            os._exit(0)  # the child of a clone that went through\n"
    "        out[name] = [rc, ctypes.get_errno()]\n"
    "    ctypes.set_errno(0)\n"
    "    out['clone3'] = [libc.syscall(NR['clone3'], ctypes.c_long(0), ctypes.c_long(0)),\n"
    "                     ctypes.get_errno()]\n"
    "    return out\n")


def _errnos(result):
    assert result.status == "ok" and result.results[0]["ok"], result
    return {k: (rc, errno.errorcode.get(e)) for k, (rc, e) in result.results[0]["value"].items()}


@pytest.mark.skipif(platform.machine() not in _NR, reason="syscall numbers for x86_64/aarch64")
@pytest.mark.parametrize("drop_privileges", [True, False])
def test_privileged_system_calls_are_refused_by_the_filter(drop_privileges):
    got = _errnos(run_sandboxed(RAW_CALLS, entry_point="f", calls=[[[], {}]], limits=LIMITS,
                                drop_privileges=drop_privileges))
    assert got.pop("clone3") == (-1, "ENOSYS")  # the C library falls back to clone
    assert got == {name: (-1, "EPERM") for name in CALLS}, got


@pytest.mark.skipif(platform.machine() not in _NR, reason="syscall numbers for x86_64/aarch64")
def test_same_calls_reach_the_kernel_without_the_filter():
    # the host-mode run has no seccomp filter: the kernel's own answers differ from EPERM, so
    # the EPERMs above are the filter's doing
    got = _errnos(run_sandboxed(RAW_CALLS, entry_point="f", calls=[[[], {}]], limits=LIMITS,
                                filesystem="host"))
    for name, (_, kernel) in CALLS.items():
        if kernel is not None:
            assert got[name] == (-1, kernel), (name, got[name])
    assert got["clone3"][1] != "ENOSYS"


ESCAPE = ("import ctypes\n"
          "libc = ctypes.CDLL(None, use_errno=True)\n"
          "def add(a, b):\n"
          f"    u = libc.unshare({CLONE_NEWUSER | CLONE_NEWNS})\n"
          "    eu = ctypes.get_errno()\n"
          "    m = libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)\n"
          "    em = ctypes.get_errno()\n"
          "    # both through: full capabilities in its own namespaces, a mount done\n"
          "    return a + b if u == m == 0 else [eu, em]\n")


@pytest.mark.parametrize("drop_privileges", [True, False])
def test_new_user_namespace_and_mount_refused_and_reported(drop_privileges):
    r = run_sandboxed(ESCAPE, entry_point="add", calls=[[[1, 2], {}]], limits=LIMITS,
                      drop_privileges=drop_privileges)
    assert r.status == "ok" and r.results[0] == {"ok": True, "value": [errno.EPERM] * 2}, \
        r.results
    assert "syscall.unshare" in r.blocked and "syscall.mount" in r.blocked, r.blocked
    v = CodeVerifier(limits=LIMITS, drop_privileges=drop_privileges).verify(TASK, ESCAPE)
    assert v.trial == "valid" and v.decision == "fail", v.evidence
    assert "syscall.unshare" in v.evidence["blocked"] and v.components["side_effect_cost"] >= 2


def test_refused_call_looked_up_fails_even_with_right_answers():
    src = ("import ctypes\n"
           "def add(a, b):\n"
           "    ctypes.CDLL(None, use_errno=True).ptrace(0, 0, 0, 0)  # PTRACE_TRACEME\n"
           "    return a + b\n")
    v = V.verify(TASK, src)
    assert v.trial == "valid" and v.decision == "fail", v.evidence
    assert v.evidence["reason"] == "refused_syscall" and "syscall.ptrace" in v.evidence["blocked"]
    assert v.components["public"] == 1.0 and v.components["hidden"] == 1.0


@pytest.mark.parametrize("drop_privileges", [True, False])
def test_candidate_holds_no_capability_and_runs_under_the_filter(drop_privileges):
    src = ("import threading, subprocess, sys\n"
           "def f():\n"
           "    st = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n"
           "    box = []\n"
           "    t = threading.Thread(target=lambda: box.append(1))\n"
           "    t.start(); t.join()\n"
           "    p = subprocess.run([sys.executable, '-c', 'print(7)'], capture_output=True)\n"
           "    return {k: st[k].strip() for k in ('CapPrm', 'CapEff', 'CapAmb', 'Seccomp',\n"
           "                                      'NoNewPrivs')} | {'thread': box,\n"
           "                                                        'child': p.stdout.decode().strip()}\n")
    r = run_sandboxed(src, entry_point="f", calls=[[[], {}]], limits=LIMITS,
                      drop_privileges=drop_privileges)
    assert r.status == "ok" and r.results[0]["ok"], (r.results, r.stderr[-500:])
    got = r.results[0]["value"]
    assert got["CapPrm"] == got["CapEff"] == got["CapAmb"] == "0000000000000000", got
    assert got["Seccomp"] == "2" and got["NoNewPrivs"] == "1", got
    assert got["thread"] == [1] and got["child"] == "7"  # threads and processes still work
    assert r.isolation["seccomp"] is True


def test_unprivileged_path_also_disables_user_namespaces(monkeypatch):
    # a caller without root gets bwrap's own user namespace with further ones disabled, the
    # same filter and no capabilities
    monkeypatch.setattr(sb.os, "geteuid", lambda: 1000)
    cmd = sb._bwrap_command("/usr/bin/bwrap", sb.minimal_root(), LIMITS, source_fd=5,
                            seccomp_fd=6, drop_privileges=False, use_netns=True)
    joined = " ".join(cmd)
    assert "--unshare-user --disable-userns" in joined and "--seccomp 6" in joined
    assert "--cap-drop ALL" in joined and "--cap-add" not in joined


def test_seccomp_program_covers_the_refused_calls():
    prog, refused = sb.seccomp_program()
    assert len(prog) % 8 == 0 and len(prog) // 8 > len(refused)  # sock_filter instructions
    for name in ("unshare", "setns", "mount", "umount2", "pivot_root", "ptrace", "bpf", "keyctl",
                 "add_key", "request_key", "perf_event_open", "userfaultfd", "io_uring_setup",
                 "kexec_load", "init_module", "finit_module", "open_tree", "fsopen"):
        assert name in refused.values(), name
    if platform.machine() in _NR:
        assert refused[_NR[platform.machine()]["unshare"]] == "unshare"


# ------------------------------------------------------------------ the working directory
FLOOD = ("import os\n"
         "def add(a, b):\n"
         "    i = 0\n"
         "    while True:\n"
         "        try:\n"
         "            os.mkdir('d%d' % i)\n"
         "        except OSError:\n"
         "            pass\n"
         "        i += 1\n")


def test_work_dir_is_a_size_capped_tmpfs_of_the_run():
    src = ("import os\n"
           "def f():\n"
           "    fs = [l.split() for l in open('/proc/self/mountinfo')]\n"
           "    mine = [l[l.index('-') + 1] for l in fs if l[4] == '/sandbox']\n"
           "    st = os.statvfs('.')\n"
           "    return [mine, st.f_blocks * st.f_frsize]\n")
    r = run_sandboxed(src, entry_point="f", calls=[[[], {}]], limits=LIMITS)
    fstypes, size = r.results[0]["value"]
    assert fstypes[-1:] == ["tmpfs"], fstypes
    assert size <= int((2 * LIMITS.max_file_mb + 1) * (1 << 20)), size


def _files_holding(marker: bytes, top: str):
    hits = []
    for root, dirs, files in os.walk(top):
        if root.count(os.sep) - top.count(os.sep) >= 3:
            dirs[:] = []
        for n in files:
            p = os.path.join(root, n)
            try:
                if os.path.getsize(p) < (1 << 20) and marker in open(p, "rb").read():
                    hits.append(p)
            except OSError:
                pass
    return hits


@pytest.mark.parametrize("attack", ["flood", "sleep"])
def test_hidden_tests_never_on_the_host_disk(attack):
    marker = "hidden-" + uuid.uuid4().hex
    ref = {**REF, "hidden_tests": [{"args": [10, 5], "expected": 15},
                                   {"args": [marker, ""], "expected": marker}]}
    task = TaskSpec(task_id="h", prompt="", task_type="code", reference_answer=ref)
    src = (FLOOD if attack == "flood" else "import time\ndef add(a, b):\n    time.sleep(100)\n")
    src = src.replace("def add(a, b):\n", "def add(a, b):\n    if a in (1, -1):\n"
                      "        return a + b\n", 1)  # public right: the hidden run starts
    top = tempfile.gettempdir()
    seen, stop = [], threading.Event()

    def watch():  # looks for the hidden tests on disk while the runs are in flight
        while not stop.is_set():
            seen.extend(_files_holding(marker.encode(), top))
            stop.wait(0.05)

    t = threading.Thread(target=watch)
    t.start()
    try:
        v = V.verify(task, src)
    finally:
        stop.set()
        t.join()
    assert v.trial == "valid" and v.decision == "fail", v.evidence
    assert v.evidence["hidden_status"] == ["timeout"], v.evidence
    assert seen == [] and _files_holding(marker.encode(), top) == []


def test_directory_flood_is_the_candidates_fail():
    v = V.verify(TASK, FLOOD)
    assert v.trial == "valid" and v.decision == "fail", v.evidence
    assert v.evidence["reason"] == "public_timeout", v.evidence
    assert v.evidence["public_limit"] in (["wall"], ["cpu"])


NONROOT = '''
import json, sys
sys.path.insert(0, {checkout!r})
from rlvr.verifiers.sandbox import SandboxLimits, run_sandboxed
src = {src!r}
r = run_sandboxed(src, entry_point="f", calls=[[[], {{}}]], limits=SandboxLimits())
print(json.dumps([r.status, r.error, r.results.get(0), list(r.blocked)]))
'''


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/python3")
                    or not shutil.which("setpriv"), reason="needs root, setpriv, /usr/bin/python3")
def test_unprivileged_caller_sandbox_refuses_namespaces_and_mounts():
    # the same checks from a caller without root (uid 65534): bwrap's own user namespace
    checkout = str(pathlib.Path(__file__).resolve().parents[2])
    src = ("import ctypes, os\n"
           "libc = ctypes.CDLL(None, use_errno=True)\n"
           "def f():\n"
           "    st = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n"
           "    u = libc.unshare(0x10000000)\n"
           "    eu = ctypes.get_errno()\n"
           "    m = libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)\n"
           "    em = ctypes.get_errno()\n"
           "    return [os.getuid(), st['CapEff'].strip(), st['Seccomp'].strip(), u, eu, m, em]\n")
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        "/usr/bin/python3", "-I", "-c",
                        NONROOT.format(checkout=checkout, src=src)],
                       capture_output=True, text=True, timeout=120, cwd="/")
    if p.returncode != 0 and "Permission denied" in p.stderr:
        pytest.skip(f"the checkout is not readable by uid 65534: {p.stderr[-200:]}")
    status, error, result, blocked = json.loads(p.stdout.strip().splitlines()[-1])
    if status == "sandbox_error":
        pytest.skip(f"no unprivileged bubblewrap here: {error}")
    assert status == "ok" and result["ok"], (result, p.stderr[-500:])
    assert result["value"] == [65534, "0000000000000000", "2", -1, errno.EPERM, -1, errno.EPERM]
    assert "syscall.unshare" in blocked and "syscall.mount" in blocked


# ------------------------------------------------------------------ network through libc
def _libc_connect(port: int) -> str:
    """A candidate that opens a TCP connection to 127.0.0.1:port through libc (bypassing
    Python's socket module and its audit hook) and returns 0 on success, else errno."""
    return ("import ctypes, struct\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "def add(a, b):\n"
            "    fd = libc.socket(2, 1, 0)\n"  # AF_INET, SOCK_STREAM
            "    if fd < 0:\n"
            "        return ['socket', ctypes.get_errno()]\n"
            f"    addr = struct.pack('!HH4s8x', 2, {port}, bytes([127, 0, 0, 1]))\n"
            "    addr = struct.pack('=H', 2) + addr[2:]\n"  # sa_family in host byte order
            "    buf = ctypes.create_string_buffer(addr, len(addr))\n"
            "    rc = libc.connect(fd, buf, len(addr))\n"
            "    return ['connect', 0 if rc == 0 else ctypes.get_errno()]\n")


@pytest.mark.parametrize("drop_privileges", [True, False])
def test_libc_connect_cannot_reach_a_host_listener(drop_privileges):
    import socket

    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    try:
        # the same candidate outside the sandbox does connect (the probe is real)
        ns = {}
        exec(_libc_connect(port), ns)
        assert ns["add"](1, 2) == ["connect", 0]
        srv.accept()[0].close()
        r = run_sandboxed(_libc_connect(port), entry_point="add", calls=[[[1, 2], {}]],
                          limits=LIMITS, drop_privileges=drop_privileges)
        assert r.status == "ok" and r.results[0]["ok"], r
        what, err = r.results[0]["value"]
        assert err != 0, r.results  # refused or unreachable inside its own network namespace
        with pytest.raises(OSError):  # and nothing arrived at the host's listener
            srv.accept()
    finally:
        srv.close()


@pytest.mark.parametrize("sig,status,limit", [("SIGXCPU", "timeout", "cpu"),
                                              ("SIGTERM", "crashed", None)])
def test_a_run_ended_by_rlimit_cpus_signal_is_the_cpu_limit_whatever_cpu_was_measured(
        sig, status, limit):
    # SIGXCPU is what RLIMIT_CPU sends; under load the rusage of a killed run can read below the
    # limit, and the run must still read as a CPU timeout, not a crash (both fail the split)
    src = f"import os, signal\ndef f():\n    os.kill(os.getpid(), signal.{sig})\n"
    r = run_sandboxed(src, entry_point="f", calls=[[[], {}]], limits=LIMITS)
    assert r.cpu_s < LIMITS.cpu_s - 0.05, r  # the measured time alone would not say "cpu"
    assert (r.status, r.limit) == (status, limit), r
