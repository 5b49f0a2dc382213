"""Process sandbox for candidate programs (SPEC R2.3, seed 002 §3.2, §9.2).

One run = one fresh process tree inside bubblewrap (`bwrap`, Debian package `bubblewrap`;
install it with `python -m rlvr.verifiers.sandbox --install`):
  * file system: a minimal read-only root built from nothing: the interpreter at
    /python/bin/pythonX.Y, its standard library at /python/lib/pythonX.Y (site-packages hidden
    by an empty read-only tmpfs), the shared libraries they link (found with `ldd`, bound
    one file at a time: at their host paths when they live in the loader's default
    directories, else under /python/lib with LD_LIBRARY_PATH, e.g. a pyenv build's shared
    libpython) and nothing else of the host: no project
    checkout, no dataset files, no home directories, no /etc. The candidate's own empty,
    writable working directory is /sandbox (a fresh host directory, mode 0700, holding only
    solution.py); /tmp and /dev/shm are fresh size-capped tmpfs; /dev is bwrap's minimal one
    (null, zero, full, random, urandom, tty, pts); /proc shows the run's pid namespace only
    (its supervisor, pid 1, and the candidate's processes);
  * own pid, network (loopback only), IPC, UTS and cgroup namespaces; `--die-with-parent`
    and `--new-session`; when the pid namespace's init exits the kernel kills whatever the
    candidate left behind;
  * a private directory (root-only, never mounted into the sandbox) holding the tests file,
    its sha256 taken before the run and checked after it, and the captured stdout / stderr;
  * when the parent is root: bwrap keeps only CAP_SETUID / CAP_SETGID for the harness, which
    drops to a fresh, otherwise unused uid/gid per run (no named user needed) before any
    candidate code exists, losing every capability; RLIMIT_NPROC counts only this run, and
    every process of the run is found and killed by uid afterwards;
  * RLIMIT_CPU / AS / FSIZE / NPROC / NOFILE / CORE, a wall-clock limit that kills the whole
    process group, PR_SET_NO_NEW_PRIVS, an environment with no inherited variables, an audit
    hook that refuses socket creation (a second line behind the network namespace);
  * results come back over a pipe inherited by the harness (never stdout), framed as JSON
    lines; a "ready" line marks the moment the candidate's code starts, so a failure before
    it is a sandbox fault (env_error) and a failure after it is the candidate's (fail).

Without root, bwrap runs unprivileged in a new user namespace (`--unshare-user
--disable-userns`; the kernel must allow unprivileged user namespaces): the file-system view,
the namespaces, the rlimits and the hash check hold as above, but there is no fresh uid: the
candidate runs as the caller's uid (it still sees no host file outside the minimal root),
RLIMIT_NPROC is the caller's current process count + max_processes, and leftover processes
are ended by the pid namespace, not by a uid sweep.

When bwrap is missing or cannot start a sandbox, `CodeVerifier` raises `SandboxUnavailable`
at construction (a start-up error naming the install command: training on code tasks
without a sandbox is a configuration error, not a stream of masked samples). Should bwrap
vanish afterwards, each run is a sandbox fault (an env_error whose message names the
install command).

`filesystem="host"` runs without bwrap (the candidate sees the host file system; only the
rlimits, the fresh uid, the audit hook and the hash check hold): for trusted code and for
testing those layers alone, never for policy outputs.

`run_sandboxed` returns a `SandboxResult`; the CodeVerifier turns it into a Verdict.
"""

from __future__ import annotations

import argparse
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
import sysconfig
import tempfile
import threading
import time
from typing import Any, List, Mapping, Optional, Sequence, Tuple

HARNESS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sandbox_harness.py")
SANDBOX_STATUSES = ("ok", "timeout", "crashed", "sandbox_error")
MODES = ("function", "stdio")
FILESYSTEMS = ("minimal", "host")
INSTALL_COMMAND = "python -m rlvr.verifiers.sandbox --install"
SANDBOX_WORKDIR = "/sandbox"   # the candidate's working directory inside the sandbox
SANDBOX_PREFIX = "/python"     # where the interpreter and its standard library appear


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot start a sandbox on this machine."""


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run.

    Attributes:
      cpu_s: RLIMIT_CPU seconds (SIGXCPU, then SIGKILL one second later).
      wall_s: wall-clock seconds from the "ready" line; past it the process group is killed.
      memory_mb: RLIMIT_AS in MiB.
      max_processes: RLIMIT_NPROC (per-run uid, so it bounds this run's process tree).
      max_file_mb: RLIMIT_FSIZE in MiB (also caps captured stdout/stderr); /tmp and /dev/shm
        hold at most 2·max_file_mb + 1 MiB each.
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
      isolation: {"fs": "minimal"|"host", "net": "netns"|"audit", "pid": "pidns"|"shared",
        "uid": int (the candidate's uid as it saw it), "python": interpreter path}.
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


# ------------------------------------------------------------------ the minimal root (bwrap)
def bwrap_path() -> Optional[str]:
    """Path of the `bwrap` executable, or None when bubblewrap is not installed."""
    return shutil.which("bwrap") or next(
        (p for p in ("/usr/bin/bwrap", "/usr/local/bin/bwrap") if os.access(p, os.X_OK)), None)


@dataclasses.dataclass(frozen=True)
class MinimalRoot:
    """The read-only part of the sandbox's file system for one interpreter.

    Attributes:
      python: the interpreter's path inside the sandbox.
      host_python: the host interpreter it is (realpath).
      args: bwrap arguments that build the read-only root (binds, symlinks, hidden dirs).
      env: variables the interpreter needs inside (LD_LIBRARY_PATH when it links a library
        of its own prefix, e.g. a shared libpython).
    """

    python: str
    host_python: str
    args: Tuple[str, ...]
    env: Tuple[Tuple[str, str], ...] = ()


def _ldd_paths(files: Sequence[str]) -> List[Tuple[str, str]]:
    """(name, path) of the shared libraries `files` link; name is the soname they ask for, or
    "" for the program interpreter (ld.so), which must keep its host path."""
    try:
        out = subprocess.run(["ldd", *files], capture_output=True, text=True, timeout=60,
                             env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"}).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in out.splitlines():
        line = line.strip()
        if line.endswith(":"):  # "file:" header when ldd lists several files
            continue
        name, p = line.split("=>", 1) if "=>" in line else ("", line)
        p = p.strip().split(" (", 1)[0].strip()
        if p.startswith("/") and os.path.exists(p):
            found.append((name.strip(), p))
    return found


def _default_lib_dirs(libc: Optional[str]) -> set:
    """Directories the dynamic loader searches without /etc/ld.so.cache (realpaths)."""
    arch = sysconfig.get_config_var("MULTIARCH") or ""
    dirs = ["/lib", "/usr/lib", "/lib64", "/usr/lib64"]
    if arch:
        dirs += [f"/lib/{arch}", f"/usr/lib/{arch}"]
    out = {os.path.realpath(d) for d in dirs if os.path.isdir(d)}
    if libc:
        out.add(os.path.dirname(os.path.realpath(libc)))
    return out


class _RootBuilder:
    """Collects bwrap ops that make host paths resolve inside the sandbox exactly as on the
    host (symlinks along the way are recreated; only the named files are bound)."""

    def __init__(self):
        self.ops: List[Tuple[str, ...]] = []
        self._seen: set = set()
        self._dirs: set = {"/"}

    def _parents(self, dest: str):
        """Creates dest's missing parent directories as 0755 (bwrap would make them 0700)."""
        parent = os.path.dirname(dest)
        if parent not in self._dirs:
            self._parents(parent)
            self._dirs.add(parent)
            self.ops.append(("--perms", "0755", "--dir", parent))

    def expose(self, path: str, _hops: int = 0):
        if _hops > 40:
            raise SandboxUnavailable(f"too many symlinks resolving {path}")
        parts = [p for p in path.split("/") if p]
        cur = ""
        for i, part in enumerate(parts):
            cur += "/" + part
            if os.path.islink(cur):
                target = os.readlink(cur)
                if cur not in self._seen:
                    self._seen.add(cur)
                    self._parents(cur)
                    self.ops.append(("--symlink", target, cur))
                resolved = os.path.normpath(os.path.join(os.path.dirname(cur), target))
                rest = "/".join(parts[i + 1:])
                return self.expose(resolved + ("/" + rest if rest else ""), _hops + 1)
        self.bind(path, path)

    def bind(self, src: str, dest: str):
        if dest not in self._seen:
            self._seen.add(dest)
            self._parents(dest)
            self.ops.append(("--ro-bind", src, dest))

    def hide(self, dest: str):
        """An empty read-only directory over `dest`."""
        self.ops.append(("--perms", "0555", "--size", "4096", "--tmpfs", dest))
        self.ops.append(("--remount-ro", dest))


_ROOT_LOCK = threading.Lock()
_ROOT_CACHE: dict = {}


def minimal_root() -> MinimalRoot:
    """The MinimalRoot of the running interpreter (computed once per process).

    Inside the sandbox the interpreter is /python/bin/pythonX.Y and its standard library
    /python/<platlibdir>/pythonX.Y (Python finds its prefix from the executable's location);
    system libraries keep their host paths.
    """
    with _ROOT_LOCK:
        if "root" in _ROOT_CACHE:
            return _ROOT_CACHE["root"]
        exe = os.path.realpath(sys.executable)
        ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
        stdlib = os.path.realpath(os.path.dirname(os.__file__))
        dynload = next((os.path.realpath(p) for p in sys.path if p.endswith("lib-dynload")
                        and os.path.isdir(p)), None)
        libdir = f"{SANDBOX_PREFIX}/{sys.platlibdir}"
        b = _RootBuilder()
        b.bind(exe, f"{SANDBOX_PREFIX}/bin/{ver}")
        b.bind(stdlib, f"{libdir}/{ver}")
        if dynload and not dynload.startswith(stdlib + os.sep):
            b.bind(dynload, f"{libdir}/{ver}/lib-dynload")
        for sub in ("site-packages", "dist-packages"):
            if os.path.isdir(os.path.join(stdlib, sub)):
                b.hide(f"{libdir}/{ver}/{sub}")
        ext = [os.path.join(dynload, f) for f in sorted(os.listdir(dynload))
               if f.endswith(".so")] if dynload else []
        libs = _ldd_paths([exe, *ext])
        if not libs:
            raise SandboxUnavailable(f"`ldd {exe}` found no libraries (is ldd installed?)")
        libc = next((p for n, p in libs if n.startswith("libc.so")), None)
        system = _default_lib_dirs(libc)
        if libc:  # loaded on demand by glibc (thread cancellation, backtraces)
            gcc_s = os.path.join(os.path.dirname(os.path.realpath(libc)), "libgcc_s.so.1")
            if os.path.exists(gcc_s):
                libs.append(("libgcc_s.so.1", gcc_s))
        own_libs = False
        for name, p in dict.fromkeys(libs):
            if name and os.path.dirname(os.path.realpath(p)) not in system:
                # outside the loader's default directories (e.g. a shared libpython of a
                # pyenv or /usr/local build): found through LD_LIBRARY_PATH instead
                b.bind(os.path.realpath(p), f"{SANDBOX_PREFIX}/lib/{name}")
                own_libs = True
            else:
                b.expose(p)
        args = tuple(a for op in b.ops for a in op)
        env = (("LD_LIBRARY_PATH", f"{SANDBOX_PREFIX}/lib"),) if own_libs else ()
        root = MinimalRoot(python=f"{SANDBOX_PREFIX}/bin/{ver}", host_python=exe, args=args,
                           env=env)
        _ROOT_CACHE["root"] = root
        return root


def _bwrap_command(bwrap: str, root: MinimalRoot, work: str, limits: SandboxLimits, *,
                   drop_privileges: bool, use_netns: bool) -> List[str]:
    tmp_bytes = str(int((2 * limits.max_file_mb + 1) * (1 << 20)))
    cmd = [bwrap, *root.args,
           "--proc", "/proc", "--dev", "/dev",
           "--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/tmp",
           "--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/dev/shm",
           "--bind", work, SANDBOX_WORKDIR, "--chdir", SANDBOX_WORKDIR,
           "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try",
           "--die-with-parent", "--new-session", "--as-pid-1"]
    if use_netns:
        cmd.append("--unshare-net")
    if os.geteuid() == 0:
        if drop_privileges:  # the harness needs these to drop to the run's uid (and loses them)
            cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        cmd += ["--unshare-user", "--disable-userns"]
    for k, v in root.env:
        cmd += ["--setenv", k, v]
    return cmd


# ------------------------------------------------------------------ host-mode interpreter
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


def sandbox_python(drop_privileges: bool) -> Optional[str]:
    """filesystem="host": an interpreter an unprivileged uid can run and import the standard
    library with. sys.executable when its tree is world-accessible, else /usr/bin/python3 (e.g.
    a pyenv interpreter under a 0700 /root). Without a privilege drop, sys.executable."""
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


# ------------------------------------------------------------------ process bookkeeping
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


def _own_process_count() -> int:
    uid, n = os.getuid(), 0
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and os.stat(f"/proc/{name}").st_uid == uid:
                n += 1
        except OSError:
            pass
    return n


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


def _missing_bwrap_message() -> str:
    return (f"bubblewrap (bwrap) is not installed; the code sandbox needs it. Install it with "
            f"`{INSTALL_COMMAND}` (as root; runs apt-get install -y bubblewrap)")


# ------------------------------------------------------------------ one run
def run_sandboxed(source: str, *, mode: str = "function", entry_point: Optional[str] = None,
                  calls: Sequence[Any] = (), stdin: str = "", tests: Any = None,
                  limits: SandboxLimits = SandboxLimits(), drop_privileges: Optional[bool] = None,
                  use_netns: bool = True, filesystem: str = "minimal") -> SandboxResult:
    """Runs `source` as solution.py in a fresh sandbox.

    Args:
      source: candidate program text.
      mode: "function" (call `entry_point(*args, **kwargs)` for each (args, kwargs) in `calls`)
        or "stdio" (run as __main__ with `stdin`; the answer is stdout).
      tests: JSON data stored in the private tests file and hash-checked after the run (the
        verifier grades against the copy read back, never against anything the sandbox saw).
      limits: SandboxLimits.
      drop_privileges: run the candidate under a fresh uid (default: when the parent is root).
      use_netns: own network namespace (loopback only); False shares the host's network and
        leaves the audit hook as the only block.
      filesystem: "minimal" (bwrap's minimal read-only root, see the module docstring) or
        "host" (no bwrap: the host's file system; trusted code and tests only).
    """
    if mode not in MODES:
        raise ValueError(f"run_sandboxed: mode must be one of {MODES}, got {mode!r}")
    if mode == "function" and not (isinstance(entry_point, str) and entry_point.isidentifier()):
        raise ValueError(f"run_sandboxed: entry_point must be an identifier, got {entry_point!r}")
    if filesystem not in FILESYSTEMS:
        raise ValueError(f"run_sandboxed: filesystem must be one of {FILESYSTEMS}, got "
                         f"{filesystem!r}")
    if drop_privileges is None:
        drop_privileges = os.geteuid() == 0
    minimal = filesystem == "minimal"
    if minimal:
        bwrap = bwrap_path()
        if bwrap is None:
            return SandboxResult(status="sandbox_error", error=_missing_bwrap_message())
        try:
            root = minimal_root()
        except SandboxUnavailable as e:
            return SandboxResult(status="sandbox_error", error=str(e))
        python = root.python
    else:
        python = sandbox_python(drop_privileges)
        if python is None:
            return SandboxResult(status="sandbox_error",
                                 error="no interpreter usable by a dropped uid")
    uid = _fresh_uid() if drop_privileges else None
    work = priv = None
    t0 = time.monotonic()
    try:
        with open(HARNESS_PATH, encoding="utf-8") as f:
            harness = f.read()
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
        iso = {"fs": "minimal" if minimal else "host",
               "net": "netns" if minimal and use_netns else "audit",
               "pid": "pidns" if minimal else "shared"}
        ctrl = {"mode": mode, "entry_point": entry_point,
                "workdir": SANDBOX_WORKDIR if minimal else work, "uid": uid, "gid": uid,
                "isolation": iso,
                "nproc_base": _own_process_count() if uid is None and os.getuid() != 0 else 0,
                "calls": [list(c) for c in calls] if mode == "function" else [],
                "limits": {"cpu_s": limits.cpu_s, "memory_mb": limits.memory_mb,
                           "max_file_mb": limits.max_file_mb,
                           "max_open_files": limits.max_open_files,
                           "max_processes": limits.max_processes}}
        ctrl_r, ctrl_w = os.pipe()
        res_r, res_w = os.pipe()
        env = {"PATH": "/usr/bin:/bin", "HOME": SANDBOX_WORKDIR if minimal else work,
               "TMPDIR": "/tmp" if minimal else work, "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8"}
        argv = [python, "-I", "-S", "-B", "-c", harness, str(ctrl_r), str(res_w)]
        if minimal:
            argv = _bwrap_command(bwrap, root, work, limits, drop_privileges=uid is not None,
                                  use_netns=use_netns) + argv
        try:
            with open(in_path, "rb") as fin, open(out_path, "wb") as fout, \
                    open(err_path, "wb") as ferr:
                proc = subprocess.Popen(argv, stdin=fin, stdout=fout, stderr=ferr,
                                        pass_fds=(ctrl_r, res_w), cwd=work, env=env,
                                        start_new_session=True, close_fds=True)
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
        if rc is not None and rc > 128:  # harness and bwrap report a signal as 128+sig
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
            if err is None and minimal:
                err = (f"sandbox did not start (rc={rc}): "
                       f"{_read_capped(err_path, 2000).strip()[-500:]}")
            return SandboxResult(status="sandbox_error", error=err or f"harness exited rc={rc}",
                                 **common)
        first_ready = kinds.index("ready")
        after = lines[first_ready + 1:]
        iso = {**iso, "uid": ready_msgs[0].get("uid"), "python": python}
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


# ------------------------------------------------------------------ availability and set-up
_CHECKED: dict = {}
_CHECK_LOCK = threading.Lock()


def require_sandbox(*, drop_privileges: Optional[bool] = None, use_netns: bool = True) -> dict:
    """Checks once per process (and setting) that a minimal-root sandbox runs a trivial
    program; returns its isolation dict. Raises SandboxUnavailable naming the install command
    when bwrap is missing, or bwrap's own error when it cannot start a sandbox here."""
    if bwrap_path() is None:
        raise SandboxUnavailable(_missing_bwrap_message())
    key = (drop_privileges, use_netns)
    with _CHECK_LOCK:
        if key not in _CHECKED:
            r = run_sandboxed("def f():\n    return 1\n", entry_point="f", calls=[[[], {}]],
                              limits=SandboxLimits(), drop_privileges=drop_privileges,
                              use_netns=use_netns)
            if r.status != "ok" or r.results.get(0, {}).get("value") != 1:
                raise SandboxUnavailable(
                    f"bubblewrap is installed ({bwrap_path()}) but cannot run a sandbox here: "
                    f"{r.error or r.status} {r.stderr.strip()[-300:]}".strip())
            _CHECKED[key] = dict(r.isolation)
        return dict(_CHECKED[key])


def install(*, log=print) -> int:
    """Installs bubblewrap with apt-get when it is missing and this process is root, then
    checks that a sandbox runs. Returns a process exit code (0 = the sandbox works)."""
    found = bwrap_path()
    if found:
        log(f"bubblewrap already installed: {found}")
    else:
        if os.geteuid() != 0:
            log("bubblewrap (bwrap) is missing and this is not root: run as root, or "
                "`sudo apt-get install -y bubblewrap`")
            return 1
        if shutil.which("apt-get") is None:
            log("bubblewrap (bwrap) is missing and apt-get is not available: install the "
                "`bubblewrap` package with this system's package manager")
            return 1
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "bubblewrap"]):
            log("running: " + " ".join(cmd))
            done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
            if done.returncode != 0:
                log(f"`{' '.join(cmd)}` failed (exit {done.returncode}): "
                    f"{done.stderr.strip()[-500:]}")
                return 1
        found = bwrap_path()
        if not found:
            log("apt-get finished but bwrap is still not on PATH")
            return 1
        log(f"installed bubblewrap: {found}")
    try:
        version = subprocess.run([found, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout.strip()
        iso = require_sandbox()
    except (SandboxUnavailable, OSError, subprocess.SubprocessError) as e:
        log(f"sandbox check failed: {e}")
        return 1
    log(f"sandbox check: ok ({version}; isolation {iso})")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rlvr.verifiers.sandbox",
                                 description="Set up and check the code sandbox (bubblewrap).")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--install", action="store_true",
                   help="install bubblewrap with apt-get if missing (needs root), then check")
    g.add_argument("--check", action="store_true", help="check that a sandbox runs")
    args = ap.parse_args(argv)
    if args.install:
        return install()
    try:
        print(f"sandbox check: ok (isolation {require_sandbox()})")
        return 0
    except SandboxUnavailable as e:
        print(f"sandbox check failed: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
