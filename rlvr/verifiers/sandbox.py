"""Process sandbox for candidate programs (SPEC R2.3, seed 002 §3.2, §9.2).

One run = one fresh process tree:
  * fresh working directory (mode 0700, owned by the run's uid) holding only solution.py;
  * a private directory (root-only, outside the candidate's reach) holding the tests file, its
    sha256 taken before the run and checked after it, and the captured stdout / stderr;
  * when the parent is root: a fresh, otherwise unused uid/gid per run (no named user needed), so
    file permissions separate candidate and verifier, RLIMIT_NPROC counts only this run, and
    every process of the run — even ones that escaped the process group with setsid — is found
    and killed by uid afterwards;
  * own mount namespace with fresh tmpfs over /tmp, /var/tmp, /dev/shm (where allowed), so
    files written outside the working directory never reach the host;
  * own pid namespace (where allowed): the run's processes see only each other, and when the
    namespace's init exits the kernel kills and reaps whatever the candidate left behind;
  * own network namespace (`unshare(CLONE_NEWNET)`, loopback down) where the kernel allows it,
    otherwise an audit hook that refuses socket creation (weaker: evidence says which);
  * RLIMIT_CPU / AS / FSIZE / NPROC / NOFILE / CORE, a wall-clock limit that kills the whole
    process group, PR_SET_NO_NEW_PRIVS, an environment with no inherited variables;
  * results come back over a pipe inherited by the parent-owned harness (never stdout), framed
    as JSON lines; a "ready" line marks the moment the candidate's code starts, so a failure
    before it is a sandbox fault (env_error) and a failure after it is the candidate's (fail).

Without root (no fresh uid, no namespaces) the sandbox degrades and says so in
`SandboxResult.isolation`: sockets are refused by an audit hook only (bypassable with ctypes),
files the candidate can reach under the shared uid are not protected (the hash check still
catches a rewritten tests file), RLIMIT_NPROC is the user's current count + max_processes, and
processes that escape the process group with setsid are not found afterwards. Train on
untrusted code only where `isolation` reads netns / private_tmp / pidns.

`run_sandboxed` returns a `SandboxResult`; the CodeVerifier turns it into a Verdict.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, List, Mapping, Optional, Sequence

HARNESS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sandbox_harness.py")
SANDBOX_STATUSES = ("ok", "timeout", "crashed", "sandbox_error")
MODES = ("function", "stdio")


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run.

    Attributes:
      cpu_s: RLIMIT_CPU seconds (SIGXCPU, then SIGKILL one second later).
      wall_s: wall-clock seconds from the "ready" line; past it the process group is killed.
      memory_mb: RLIMIT_AS in MiB.
      max_processes: RLIMIT_NPROC (per-run uid, so it bounds this run's process tree).
      max_file_mb: RLIMIT_FSIZE in MiB (also caps captured stdout/stderr).
      max_open_files: RLIMIT_NOFILE.
      startup_s: allowance for interpreter start before "ready"; missing it is an env_error.
      max_result_bytes: bytes of result-channel data kept (the rest is drained and dropped).
    """

    cpu_s: float = 2.0
    wall_s: float = 2.0
    memory_mb: int = 512
    max_processes: int = 16
    max_file_mb: float = 8.0
    max_open_files: int = 64
    startup_s: float = 10.0
    max_result_bytes: int = 4 << 20

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"SandboxLimits.{f.name} must be a number > 0, got {v!r}")
        if self.cpu_s < 1:
            raise ValueError(f"SandboxLimits.cpu_s must be ≥ 1 (RLIMIT_CPU has 1 s resolution), "
                             f"got {self.cpu_s}")


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    """Outcome of one sandboxed run.

    Attributes:
      status: "ok" (harness reached the end), "timeout" (wall or CPU limit: the candidate's),
        "crashed" (candidate code ended the process early: exception, exit, signal, memory),
        "sandbox_error" (the sandbox itself failed: an env_error, not the candidate's fault).
      compiled: solution.py compiled (None if the run never got that far).
      load_error: exception while defining the entry point (function mode), else None.
      results: function mode: one dict per call index, {"ok": bool, "value"|"error": ...};
        a call with no result line (process ended first) is absent.
      returncode: exit code (negative: killed by that signal).
      stdout, stderr: captured output (truncated to 64 KiB each for evidence; stdio mode's
        answer is `stdout_full`).
      wall_s, cpu_s, max_rss_mb: measured usage of the whole run.
      tests_intact: the tests file's sha256 after the run equals the one before.
      tests: the tests read back from the private file after the hash check.
      isolation: {"net": "netns"|"audit", "fs": "private_tmp"|"shared", "pid": "pidns"|"shared",
        "uid": int,
        "python": path}.
      blocked: events refused by the sandbox (e.g. socket creation).
      error: text of a sandbox error.
    """

    status: str
    compiled: Optional[bool] = None
    load_error: Optional[str] = None
    results: Mapping[int, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    returncode: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    stdout_full: str = ""
    wall_s: float = 0.0
    cpu_s: float = 0.0
    max_rss_mb: float = 0.0
    tests_intact: bool = True
    tests: Any = None
    isolation: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    blocked: Sequence[str] = ()
    error: Optional[str] = None
    timed_out: bool = False


def _world_executable(path: str) -> bool:
    path = os.path.realpath(path)
    parts = path.split(os.sep)
    for i in range(2, len(parts) + 1):
        p = os.sep.join(parts[:i]) or os.sep
        try:
            st = os.stat(p)
        except OSError:
            return False
        if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IXOTH:
            return False
    return bool(os.stat(path).st_mode & stat.S_IXOTH)


_PYTHON_CACHE: dict = {}


def sandbox_python(drop_privileges: bool) -> str:
    """An interpreter an unprivileged uid can run and import the standard library with.

    sys.executable when its tree is world-accessible, else /usr/bin/python3 (e.g. a pyenv
    interpreter under a 0700 /root). Without a privilege drop, sys.executable.
    """
    if not drop_privileges:
        return sys.executable
    if "py" not in _PYTHON_CACHE:
        stdlib = os.path.dirname(os.__file__)
        if _world_executable(sys.executable) and _world_executable(os.path.join(stdlib, "os.py")):
            _PYTHON_CACHE["py"] = sys.executable
        else:
            for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
                if os.path.exists(cand) and _world_executable(cand):
                    _PYTHON_CACHE["py"] = cand
                    break
            else:
                _PYTHON_CACHE["py"] = None
    return _PYTHON_CACHE["py"]


def _uid_pids(uid: int) -> List[int]:
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                for line in f:
                    if line.startswith("State:") and line.split()[1] in ("Z", "X"):
                        break  # zombie: already dead, nothing to kill
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(name))
                        break
        except (OSError, ValueError, IndexError):
            continue
    return pids


def _kill_run(pgid: int, uid: Optional[int]):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if uid is None:
        return
    for _ in range(100):
        pids = _uid_pids(uid)
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.002)


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 16), b""):
            h.update(b)
    return h.hexdigest()


_UID_LOCK = threading.Lock()
_UIDS_IN_USE: set = set()


def _fresh_uid() -> int:
    with _UID_LOCK:
        while True:
            uid = random.SystemRandom().randrange(200_000, 2_000_000_000)
            if uid not in _UIDS_IN_USE and not _uid_pids(uid):
                _UIDS_IN_USE.add(uid)
                return uid


def _read_capped(path: str, cap: int) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(cap).decode("utf-8", "replace")
    except OSError:
        return ""


def run_sandboxed(source: str, *, mode: str = "function", entry_point: Optional[str] = None,
                  calls: Sequence[Any] = (), stdin: str = "", tests: Any = None,
                  limits: SandboxLimits = SandboxLimits(), drop_privileges: Optional[bool] = None,
                  use_netns: bool = True, private_tmp: bool = True) -> SandboxResult:
    """Runs `source` as solution.py in a fresh sandbox.

    Args:
      source: candidate program text.
      mode: "function" (call `entry_point(*args, **kwargs)` for each (args, kwargs) in `calls`)
        or "stdio" (run as __main__ with `stdin`; the answer is stdout).
      tests: JSON data stored in the private tests file and hash-checked after the run (the
        verifier grades against the copy read back, never against anything the sandbox saw).
      limits: SandboxLimits.
      drop_privileges: run the candidate under a fresh uid (default: when the parent is root).
      use_netns: try a private network namespace (else the audit-hook socket block only).
      private_tmp: try a private mount namespace with fresh tmpfs over /tmp, /var/tmp, /dev/shm.
    """
    if mode not in MODES:
        raise ValueError(f"run_sandboxed: mode must be one of {MODES}, got {mode!r}")
    if mode == "function" and not (isinstance(entry_point, str) and entry_point.isidentifier()):
        raise ValueError(f"run_sandboxed: entry_point must be an identifier, got {entry_point!r}")
    if drop_privileges is None:
        drop_privileges = os.geteuid() == 0
    python = sandbox_python(drop_privileges)
    if python is None:
        return SandboxResult(status="sandbox_error", error="no interpreter usable by a dropped uid")
    uid = _fresh_uid() if drop_privileges else None
    work = priv = None
    t0 = time.monotonic()
    try:
        work = tempfile.mkdtemp(prefix="rlvr-sbx-")
        priv = tempfile.mkdtemp(prefix="rlvr-priv-")
        os.chmod(priv, 0o700)
        sol = os.path.join(work, "solution.py")
        with open(sol, "w", encoding="utf-8") as f:
            f.write(source)
        tests_path = os.path.join(priv, "tests.json")
        with open(tests_path, "w") as f:
            json.dump(tests, f)
        os.chmod(tests_path, 0o600)
        tests_hash = _sha256(tests_path)
        if uid is not None:
            os.chown(work, uid, uid)
            os.chown(sol, uid, uid)
        os.chmod(work, 0o700)
        out_path, err_path = os.path.join(priv, "stdout"), os.path.join(priv, "stderr")
        in_path = os.path.join(priv, "stdin")
        with open(in_path, "w", encoding="utf-8") as f:
            f.write(stdin if mode == "stdio" else "")
        ctrl = {"mode": mode, "entry_point": entry_point, "workdir": work, "uid": uid,
                "gid": uid, "netns": bool(use_netns), "private_tmp": bool(private_tmp),
                "calls": [list(c) for c in calls] if mode == "function" else [],
                "limits": {"cpu_s": limits.cpu_s, "memory_mb": limits.memory_mb,
                           "max_file_mb": limits.max_file_mb,
                           "max_open_files": limits.max_open_files,
                           "max_processes": limits.max_processes}}
        ctrl_r, ctrl_w = os.pipe()
        res_r, res_w = os.pipe()
        env = {"PATH": "/usr/bin:/bin", "HOME": work, "TMPDIR": work, "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8"}
        try:
            with open(in_path, "rb") as fin, open(out_path, "wb") as fout, \
                    open(err_path, "wb") as ferr:
                proc = subprocess.Popen(
                    [python, "-I", "-S", "-B", HARNESS_PATH, str(ctrl_r), str(res_w)],
                    stdin=fin, stdout=fout, stderr=ferr, pass_fds=(ctrl_r, res_w), cwd=work,
                    env=env, start_new_session=True, close_fds=True)
        except OSError as e:
            for fd in (ctrl_r, ctrl_w, res_r, res_w):
                os.close(fd)
            return SandboxResult(status="sandbox_error", error=f"spawn failed: {e!r}")
        os.close(ctrl_r)
        os.close(res_w)

        # result channel reader (drains so that a chatty candidate never blocks on a full pipe)
        lines: List[dict] = []
        ready = threading.Event()
        buf_state = {"bytes": 0}

        def reader():
            buf = b""
            while True:
                try:
                    b = os.read(res_r, 1 << 16)
                except OSError:
                    break
                if not b:
                    break
                if buf_state["bytes"] > limits.max_result_bytes:
                    continue
                buf_state["bytes"] += len(b)
                buf += b
                *complete, buf = buf.split(b"\n")
                for ln in complete:
                    try:
                        msg = json.loads(ln)
                    except ValueError:
                        msg = {"kind": "garbage"}
                    if not isinstance(msg, dict):
                        msg = {"kind": "garbage"}
                    lines.append(msg)
                    if msg.get("kind") in ("ready", "sandbox_error"):
                        ready.set()
            ready.set()
            os.close(res_r)

        rt = threading.Thread(target=reader, daemon=True)
        rt.start()
        waited = {}

        def waiter():
            _, status, ru = os.wait4(proc.pid, 0)
            waited["status"], waited["ru"] = status, ru

        wt = threading.Thread(target=waiter, daemon=True)
        wt.start()
        def send_ctrl():  # in a thread: a child that never reads must not block us
            try:
                _write_all(ctrl_w, json.dumps(ctrl).encode())
            except OSError:
                pass
            finally:
                os.close(ctrl_w)

        threading.Thread(target=send_ctrl, daemon=True).start()

        timed_out = startup_timeout = False
        if not ready.wait(limits.startup_s):
            startup_timeout = True
        else:
            t_ready = time.monotonic()
            wt.join(max(0.0, limits.wall_s - (time.monotonic() - t_ready)))
            timed_out = wt.is_alive()
        _kill_run(proc.pid, uid)
        wt.join(5.0)
        rt.join(2.0)
        wall = time.monotonic() - t0
        status_code = waited.get("status")
        ru = waited.get("ru")
        rc = os.waitstatus_to_exitcode(status_code) if status_code is not None else None
        if rc is not None and rc > 128:  # the harness re-raises the candidate's signal as 128+sig
            rc = -(rc - 128)
        proc.returncode = rc if rc is not None else -9
        cpu = (ru.ru_utime + ru.ru_stime) if ru is not None else 0.0
        rss = (ru.ru_maxrss / 1024.0) if ru is not None else 0.0

        intact = os.path.exists(tests_path) and _sha256(tests_path) == tests_hash
        tests_back = None
        if intact:
            with open(tests_path) as f:
                tests_back = json.load(f)
        out_full = _read_capped(out_path, int(limits.max_file_mb * (1 << 20)))
        common = dict(stdout=out_full[:65536], stderr=_read_capped(err_path, 65536),
                      stdout_full=out_full if mode == "stdio" else "", returncode=rc,
                      wall_s=wall, cpu_s=cpu, max_rss_mb=rss, tests_intact=intact,
                      tests=tests_back)

        kinds = [m.get("kind") for m in lines]
        ready_msgs = [m for m in lines if m.get("kind") == "ready"]
        if "ready" not in kinds:
            err = next((m.get("error") for m in lines if m.get("kind") == "sandbox_error"), None)
            if startup_timeout:
                err = f"harness not ready within {limits.startup_s}s"
            return SandboxResult(status="sandbox_error", error=err or f"harness exited rc={rc}",
                                 **common)
        first_ready = kinds.index("ready")
        after = lines[first_ready + 1:]
        iso = {"net": ready_msgs[0].get("net"), "fs": ready_msgs[0].get("fs"),
               "pid": ready_msgs[0].get("pid"),
               "uid": ready_msgs[0].get("uid"),
               "python": python}
        blocked = tuple(m.get("event", "?") for m in after if m.get("kind") == "blocked")
        compiled = None
        if any(m.get("kind") == "compile_error" for m in after):
            compiled = False
        elif any(m.get("kind") == "compiled" for m in after):
            compiled = True
        load_error = next((m.get("error", "") for m in after if m.get("kind") == "load_error"),
                          None)
        results: dict = {}
        dup = set()
        for m in after:
            if m.get("kind") == "result" and isinstance(m.get("i"), int):
                if m["i"] in results:
                    dup.add(m["i"])
                results[m["i"]] = {k: v for k, v in m.items() if k in ("ok", "value", "error")}
        for i in dup:  # two answers for one call: not trusted
            results[i] = {"ok": False, "error": "duplicate result"}
        cpu_exceeded = rc is not None and rc in (-signal.SIGXCPU, -signal.SIGKILL) and \
            cpu >= limits.cpu_s - 0.05
        if timed_out or cpu_exceeded:
            status = "timeout"
        elif mode == "function":
            status = "ok" if (kinds[-1:] == ["done"] or compiled is False or load_error) \
                and rc == 0 else "crashed"
        else:
            status = "ok" if rc == 0 and compiled else ("crashed" if compiled is not False else "ok")
        return SandboxResult(status=status, compiled=compiled, load_error=load_error,
                             results=results, isolation=iso, blocked=blocked,
                             timed_out=status == "timeout", **common)
    except Exception as e:  # noqa: BLE001 — any fault of ours is a sandbox fault
        return SandboxResult(status="sandbox_error", error=f"{type(e).__name__}: {e}"[:500])
    finally:
        if uid is not None:
            with _UID_LOCK:
                _UIDS_IN_USE.discard(uid)
        for d in (work, priv):
            if d:
                shutil.rmtree(d, ignore_errors=True)


def _write_all(fd: int, data: bytes):
    while data:
        n = os.write(fd, data)
        data = data[n:]
