"""Process sandbox for candidate programs (docs/verifiers.md §3, §2).

One run = one fresh process tree inside bubblewrap (`bwrap`, Debian package `bubblewrap`;
install it with `python -m rlvr.verifiers.sandbox --install`):
  * file system: a minimal read-only root built from nothing: the interpreter at
    /python/bin/pythonX.Y, its standard library at /python/lib/pythonX.Y (site-packages hidden
    by an empty read-only tmpfs), the shared libraries they link (found with `ldd`, bound
    one file at a time: at their host paths when they live in the loader's default
    directories, else under /python/lib with LD_LIBRARY_PATH, e.g. a pyenv build's shared
    libpython) and nothing else of the host: no project
    checkout, no dataset files, no home directories, no /etc. The candidate's writable
    working directory /sandbox, like /tmp and /dev/shm, is a fresh tmpfs of the run's own
    mount namespace capped at 2·max_file_mb + 1 MiB (it starts with solution.py only): nothing
    the candidate writes reaches the host's disk, no host-side clean-up follows the run (a
    candidate that floods it with directories is stopped by its time limits, and the kernel
    frees it all when the run's last process ends), and its size never depends on the host;
    /dev is bwrap's minimal one (null, zero, full, random, urandom, tty, pts); /proc shows the
    run's pid namespace only (its supervisor, pid 1, and the candidate's processes);
  * own pid, network (loopback only), IPC, UTS and cgroup namespaces; `--die-with-parent`
    and `--new-session`; when the pid namespace's init exits the kernel kills whatever the
    candidate left behind;
  * the tests, the stdin and the captured stdout / stderr are memory files of the calling
    process (memfd), never files on a disk: the tests file is sealed read-only, is not
    inherited by the sandbox, and its sha256 is taken before the run and checked after it;
    nothing of a run stays behind when the process ends, however it ends;
  * a seccomp filter (built with libseccomp, loaded by `bwrap --seccomp FD` before the
    harness starts, so it binds every process of the run) answers EPERM to the calls in
    REFUSED_SYSCALLS: unshare, setns, mount and the new mount API, umount2, pivot_root,
    chroot, ptrace, process_vm_readv/writev, kcmp, add_key, request_key, keyctl, bpf,
    perf_event_open, userfaultfd, io_uring_*, (f)init_module, delete_module, kexec_*,
    swapon/off, reboot, syslog, acct, quotactl, open_by_handle_at, fanotify_init, iopl/ioperm,
    clock and host-name setters, and to `clone` with any namespace flag and ioctl(TIOCSTI);
    `clone3` answers ENOSYS (the C library then uses clone); a call of another architecture's
    ABI kills the process. The harness reports the candidate's look-ups of those calls' C
    wrappers as refused actions ("syscall.<name>"), and the CodeVerifier never passes them;
  * no capabilities: bwrap runs with `--cap-drop ALL`; when the parent is root and drops
    privileges it keeps only CAP_SETUID / CAP_SETGID for the harness, which drops to a fresh,
    otherwise unused uid/gid per run (no named user needed) before any candidate code exists,
    losing them; RLIMIT_NPROC counts only this run, and every process of the run is found and
    killed by uid afterwards;
  * RLIMIT_CPU / AS / FSIZE / NPROC / NOFILE / CORE, a wall-clock limit that kills the whole
    process group, PR_SET_NO_NEW_PRIVS, an environment with no inherited variables, an audit
    hook that refuses socket creation (a second line behind the network namespace);
  * results come back over a pipe inherited by the harness (never stdout), framed as JSON
    lines; a "ready" line marks the moment the candidate's code starts, so a failure before
    it is a sandbox fault (env_error) and a failure after it is the candidate's (fail);
  * a run that hits a limit says which (`SandboxResult.limit`: "wall", "cpu", "file_size",
    "output" or "result_channel") and is never "ok": "timeout" for wall and CPU, "crashed"
    otherwise, whatever results it sent before.

Without root, bwrap runs unprivileged in a new user namespace (`--unshare-user
--disable-userns`, so the candidate can make no further one; the kernel must allow
unprivileged user namespaces): the file-system view, the namespaces, the seccomp filter, the
empty capability set, the rlimits and the hash check hold as above, but there is no fresh uid:
the
candidate runs as the caller's uid (it still sees no host file outside the minimal root),
RLIMIT_NPROC is the caller's current process count + max_processes, and leftover processes
are ended by the pid namespace, not by a uid sweep.

When bwrap is missing or cannot start a sandbox, `CodeVerifier` raises `SandboxUnavailable`
at construction (a start-up error naming the install command: training on code tasks
without a sandbox is a configuration error, not a stream of masked samples). Should bwrap
vanish afterwards, each run is a sandbox fault (an env_error whose message names the
install command).

`filesystem="host"` runs without bwrap (the candidate sees the host file system and works in a
host temporary directory; only the rlimits, the fresh uid, the audit hook and the sealed tests
hold, no seccomp filter): for trusted code and for testing those layers alone, never for policy
outputs.

`run_sandboxed` returns a `SandboxResult`; the CodeVerifier turns it into a Verdict.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import hashlib
import json
import os
import random
import secrets
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
MODES = ("function", "stdio", "asserts")
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
      max_file_mb: RLIMIT_FSIZE in MiB (also caps captured stdout/stderr); /sandbox, /tmp and
        /dev/shm hold at most 2·max_file_mb + 1 MiB each.
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
      status: "ok" (harness reached the end within every limit), "timeout" (wall or CPU
        limit: the candidate's), "crashed" (candidate code ended the process early: exception,
        exit, signal, memory; or another limit was hit),
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
      tests: the tests read back from the sealed memory file after the hash check.
      isolation: {"fs": "minimal"|"host", "net": "netns"|"audit", "pid": "pidns"|"shared",
        "seccomp": bool, "uid": int (the candidate's uid as it saw it), "python": interpreter
        path}.
      blocked: events refused by the sandbox (e.g. "socket.__new__", "syscall.unshare").
      error: text of a sandbox error.
      timed_out: status == "timeout".
      limit: the limit the run hit ("wall", "cpu", "file_size", "output" — stdout past
        max_file_mb —, "result_channel" — results past max_result_bytes), else None; a run
        with a limit is never "ok".
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
    limit: Optional[str] = None


# ------------------------------------------------------------------ refused system calls
# Refused with EPERM inside every minimal-root sandbox (a seccomp filter bubblewrap loads with
# `--seccomp FD` just before it starts the harness): namespaces and mounts (a new user namespace
# would hand the candidate a full capability set inside it), tracing other processes, kernel
# keyrings, eBPF, perf, userfaultfd, io_uring, kernel modules, kexec, swap, reboot, clocks and
# host names. `clone` is refused only with a namespace flag; `clone3` answers ENOSYS (its flags
# sit in memory a filter cannot read, and the C library falls back to `clone`). Other calls are
# allowed; calls of another architecture's ABI (e.g. 32-bit x86) kill the process.
REFUSED_SYSCALLS = (
    "unshare", "setns", "mount", "umount", "umount2", "pivot_root", "chroot", "mount_setattr",
    "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "add_key", "request_key", "keyctl", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "swapon", "swapoff", "reboot", "syslog", "acct", "quotactl", "quotactl_fd",
    "open_by_handle_at", "name_to_handle_at", "fanotify_init", "lookup_dcookie", "uselib",
    "nfsservctl", "iopl", "ioperm", "vm86", "vm86old", "settimeofday", "clock_settime",
    "clock_adjtime", "adjtimex", "sethostname", "setdomainname")
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (linux/sched.h)
NAMESPACE_CLONE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000,
                         0x20000000, 0x40000000)
_TIOCSTI = 0x5412  # ioctl that pushes characters into the terminal's input
_SECCOMP_LOCK = threading.Lock()
_SECCOMP_CACHE: dict = {}


def seccomp_program() -> Tuple[bytes, Mapping[int, str]]:
    """The sandbox's seccomp filter as a classic-BPF program (the bytes `bwrap --seccomp FD`
    reads) for this machine's architecture, and {syscall number: name} of REFUSED_SYSCALLS that
    exist here. Built once per process with libseccomp (`libseccomp.so.2`, Debian package
    `libseccomp2`) through ctypes; raises SandboxUnavailable when the library is missing."""
    with _SECCOMP_LOCK:
        if "prog" in _SECCOMP_CACHE:
            return _SECCOMP_CACHE["prog"]
        import ctypes
        import ctypes.util

        name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
        try:
            lib = ctypes.CDLL(name, use_errno=True)
        except OSError as e:
            raise SandboxUnavailable(
                f"libseccomp is missing ({e}); the code sandbox needs it for its system-call "
                f"filter. Install it with `{INSTALL_COMMAND}` (as root; apt-get install -y "
                f"libseccomp2)") from e

        class ArgCmp(ctypes.Structure):  # struct scmp_arg_cmp
            _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                        ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]

        lib.seccomp_init.restype = ctypes.c_void_p
        lib.seccomp_init.argtypes = [ctypes.c_uint32]
        lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                               ctypes.c_uint, ctypes.POINTER(ArgCmp)]
        lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
        lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.seccomp_release.argtypes = [ctypes.c_void_p]
        allow, masked_eq = 0x7FFF0000, 7            # SCMP_ACT_ALLOW, SCMP_CMP_MASKED_EQ
        errno_ = lambda e: 0x00050000 | e  # noqa: E731 — SCMP_ACT_ERRNO(e)
        ctx = lib.seccomp_init(allow)
        if not ctx:
            raise SandboxUnavailable("seccomp_init failed")
        try:
            def rule(action: int, call: str, *cmps: Tuple[int, int, int]) -> Optional[int]:
                nr = lib.seccomp_syscall_resolve_name(call.encode())
                if nr < 0:  # not a system call of this architecture
                    return None
                arr = (ArgCmp * max(1, len(cmps)))(*[ArgCmp(a, masked_eq, m, v)
                                                      for a, m, v in cmps])
                rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), arr)
                if rc < 0:
                    raise SandboxUnavailable(f"seccomp rule for {call} failed: {os.strerror(-rc)}")
                return nr

            refused = {}
            for call in REFUSED_SYSCALLS:
                nr = rule(errno_(1), call)                                   # EPERM
                if nr is not None:
                    refused[nr] = call
            for flag in NAMESPACE_CLONE_FLAGS:
                rule(errno_(1), "clone", (0, flag, flag))
            rule(errno_(38), "clone3")                                       # ENOSYS
            rule(errno_(1), "ioctl", (1, 0xFFFFFFFF, _TIOCSTI))
            fd = os.memfd_create("rlvr-seccomp", os.MFD_CLOEXEC)
            try:
                rc = lib.seccomp_export_bpf(ctx, fd)
                if rc < 0:
                    raise SandboxUnavailable(f"seccomp_export_bpf failed: {os.strerror(-rc)}")
                prog = os.pread(fd, 1 << 20, 0)
            finally:
                os.close(fd)
        finally:
            lib.seccomp_release(ctx)
        if not prog or len(prog) % 8:
            raise SandboxUnavailable(f"libseccomp exported a malformed filter ({len(prog)} bytes)")
        _SECCOMP_CACHE["prog"] = (prog, refused)
        return _SECCOMP_CACHE["prog"]


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


def _bwrap_command(bwrap: str, root: MinimalRoot, limits: SandboxLimits, *, source_fd: int,
                   seccomp_fd: int, drop_privileges: bool, use_netns: bool) -> List[str]:
    """bwrap's arguments for one run. The working directory is a size-capped tmpfs of the
    run's own mount namespace holding solution.py (copied from `source_fd`): nothing the
    candidate writes touches the host's disk, and the kernel frees it when the run ends."""
    tmp_bytes = str(int((2 * limits.max_file_mb + 1) * (1 << 20)))
    cmd = [bwrap, *root.args,
           "--proc", "/proc", "--dev", "/dev",
           "--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/tmp",
           "--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/dev/shm",
           "--perms", "1777", "--size", tmp_bytes, "--tmpfs", SANDBOX_WORKDIR,
           "--perms", "0644", "--file", str(source_fd), f"{SANDBOX_WORKDIR}/solution.py",
           "--chdir", SANDBOX_WORKDIR,
           "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try",
           "--die-with-parent", "--new-session", "--as-pid-1",
           "--seccomp", str(seccomp_fd)]
    if use_netns:
        cmd.append("--unshare-net")
    # no capability survives into the sandbox except, when a root parent's harness drops to
    # the run's uid, the two it needs for that (and loses with the uid change); further
    # namespaces are refused by the seccomp filter (and, without root, by --disable-userns)
    cmd += ["--cap-drop", "ALL"]
    if os.geteuid() != 0:
        cmd += ["--unshare-user", "--disable-userns"]
    elif drop_privileges:
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
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


_UID_LOCK = threading.Lock()
_UIDS_IN_USE: set = set()


def _fresh_uid() -> int:
    with _UID_LOCK:
        while True:
            uid = random.SystemRandom().randrange(200_000, 2_000_000_000)
            if uid not in _UIDS_IN_USE and not _uid_pids(uid):
                _UIDS_IN_USE.add(uid)
                return uid


def _missing_bwrap_message() -> str:
    return (f"bubblewrap (bwrap) is not installed; the code sandbox needs it. Install it with "
            f"`{INSTALL_COMMAND}` (as root; runs apt-get install -y bubblewrap)")


# ------------------------------------------------------------------ one run
def run_sandboxed(source: str, *, mode: str = "function", entry_point: Optional[str] = None,
                  calls: Sequence[Any] = (), stdin: str = "", tests: Any = None,
                  units: Sequence[Any] = (), setup: str = "", candidate_name: str = "candidate",
                  limits: SandboxLimits = SandboxLimits(), drop_privileges: Optional[bool] = None,
                  use_netns: bool = True, filesystem: str = "minimal") -> SandboxResult:
    """Runs `source` as solution.py in a fresh sandbox.

    Args:
      source: candidate program text.
      mode: "function" (call `entry_point(*args, **kwargs)` for each (args, kwargs) in `calls`)
        or "stdio" (run as __main__ with `stdin`; the answer is stdout) or "asserts" (run
        assertion test `units` against the loaded program, see _sandbox_harness.py).
      units: asserts mode: [[source, counted], ...] test code units, run in order; the harness
        reports each counted unit under a per-run random key the candidate cannot read, and
        result messages without that key are ignored. setup: test code run before the
        program is loaded; candidate_name: the name the units call the entry point by.
      tests: JSON data stored in a sealed memory file and hash-checked after the run (the
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
    if mode in ("function", "asserts") and not (isinstance(entry_point, str) and entry_point.isidentifier()):
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
    if minimal:
        try:
            seccomp, refused = seccomp_program()
        except SandboxUnavailable as e:
            return SandboxResult(status="sandbox_error", error=str(e))
    uid = _fresh_uid() if drop_privileges else None
    work = None
    fds: List[int] = []  # memfds of this run: closed at the end, so nothing stays behind

    def memfd(name: str, data: bytes = b"", seal: bool = False) -> int:
        fd = os.memfd_create(f"rlvr-{name}", os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING
                                                                if seal else 0))
        fds.append(fd)
        _write_all(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
        if seal:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW
                        | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
        return fd

    t0 = time.monotonic()
    try:
        with open(HARNESS_PATH, encoding="utf-8") as f:
            harness = f.read()
        # the tests never touch a disk: a sealed memory file of this process, not inherited by
        # the sandbox, hash-checked after the run and read back for grading
        tests_fd = memfd("tests", json.dumps(tests).encode(), seal=True)
        tests_hash = hashlib.sha256(os.pread(tests_fd, 1 << 30, 0)).hexdigest()
        out_fd, err_fd = memfd("stdout"), memfd("stderr")
        in_fd = memfd("stdin", (stdin if mode == "stdio" else "").encode())
        if minimal:
            source_fd = memfd("source", source.encode())
            seccomp_fd = memfd("seccomp", seccomp)
            os.set_inheritable(source_fd, True)
            os.set_inheritable(seccomp_fd, True)
        else:  # trusted code only: a host directory, removed after the run
            work = tempfile.mkdtemp(prefix="rlvr-sbx-")
            sol = os.path.join(work, "solution.py")
            with open(sol, "w", encoding="utf-8") as f:
                f.write(source)
            if uid is not None:
                os.chown(work, uid, uid)
                os.chown(sol, uid, uid)
            os.chmod(work, 0o700)
        iso = {"fs": "minimal" if minimal else "host",
               "net": "netns" if minimal and use_netns else "audit",
               "pid": "pidns" if minimal else "shared",
               "seccomp": minimal}
        run_key = secrets.token_hex(16)  # asserts mode: only results carrying it count
        ctrl = {"mode": mode, "entry_point": entry_point,
                "workdir": SANDBOX_WORKDIR if minimal else work, "uid": uid, "gid": uid,
                "isolation": iso,
                "nproc_base": _own_process_count() if uid is None and os.getuid() != 0 else 0,
                "calls": [list(c) for c in calls] if mode == "function" else [],
                "units": [list(u) for u in units] if mode == "asserts" else [],
                "key": run_key, "setup": setup if mode == "asserts" else "",
                "candidate": candidate_name,
                "refused": {str(k): v for k, v in refused.items()} if minimal else {},
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
        pass_fds = [ctrl_r, res_w]
        if minimal:
            argv = _bwrap_command(bwrap, root, limits, source_fd=source_fd,
                                  seccomp_fd=seccomp_fd, drop_privileges=uid is not None,
                                  use_netns=use_netns) + argv
            pass_fds += [source_fd, seccomp_fd]
        try:
            proc = subprocess.Popen(argv, stdin=in_fd, stdout=out_fd, stderr=err_fd,
                                    pass_fds=pass_fds, cwd=work or "/", env=env,
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
        buf_state = {"bytes": 0, "overflow": False}

        def reader():
            buf = b""
            while True:
                try:
                    b = os.read(res_r, 1 << 16)
                except OSError:
                    break
                if not b:
                    break
                if buf_state["bytes"] + len(b) > limits.max_result_bytes:
                    buf_state["overflow"] = True
                if buf_state["overflow"]:
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
        wall = time.monotonic() - t0  # the run's time, without what ending it takes
        _kill_run(proc.pid, uid)
        wt.join(30.0)  # the kernel frees the run's namespaces and tmpfs before bwrap is reaped
        rt.join(2.0)
        status_code = waited.get("status")
        ru = waited.get("ru")
        rc = os.waitstatus_to_exitcode(status_code) if status_code is not None else None
        if rc is not None and rc > 128:  # harness and bwrap report a signal as 128+sig
            rc = -(rc - 128)
        proc.returncode = rc if rc is not None else -9
        cpu = (ru.ru_utime + ru.ru_stime) if ru is not None else 0.0
        rss = (ru.ru_maxrss / 1024.0) if ru is not None else 0.0

        tests_raw = os.pread(tests_fd, 1 << 30, 0)
        intact = hashlib.sha256(tests_raw).hexdigest() == tests_hash
        tests_back = json.loads(tests_raw) if intact else None
        out_cap = int(limits.max_file_mb * (1 << 20))
        out_bytes = os.pread(out_fd, out_cap + 1, 0)
        out_full = out_bytes[:out_cap].decode("utf-8", "replace")
        common = dict(stdout=out_full[:65536],
                      stderr=os.pread(err_fd, 65536, 0).decode("utf-8", "replace"),
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
                       f"{common['stderr'][:2000].strip()[-500:]}")
            return SandboxResult(status="sandbox_error", error=err or f"harness exited rc={rc}",
                                 **common)
        first_ready = kinds.index("ready")
        after = lines[first_ready + 1:]
        iso = {**iso, "uid": ready_msgs[0].get("uid"), "python": python}
        blocked = tuple(str(m.get("event", "?"))[:100] for m in after
                        if m.get("kind") == "blocked")
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
            if m.get("kind") == "result" and isinstance(m.get("i"), int) and (
                    mode != "asserts" or m.get("key") == run_key):
                if m["i"] in results:
                    dup.add(m["i"])
                results[m["i"]] = {k: v for k, v in m.items() if k in ("ok", "value", "error")}
        for i in dup:  # two answers for one call: not trusted
            results[i] = {"ok": False, "error": "duplicate result"}
        # SIGXCPU is RLIMIT_CPU's own signal: the CPU limit, whatever rusage measured (the
        # harness's time can reach it before the accounting of a killed namespace does); a
        # SIGKILL counts as the CPU limit's hard stop only with the CPU time to show for it
        cpu_exceeded = rc == -signal.SIGXCPU or (rc == -signal.SIGKILL and
                                                 cpu >= limits.cpu_s - 0.05)
        limit = None
        if timed_out:
            limit = "wall"
        elif cpu_exceeded:
            limit = "cpu"
        elif rc == -signal.SIGXFSZ:
            limit = "file_size"
        elif len(out_bytes) >= out_cap:  # the file-size limit stops stdout at the cap
            limit = "output"
        elif buf_state["overflow"]:
            limit = "result_channel"
        if limit in ("wall", "cpu"):
            status = "timeout"
        elif limit is not None:
            status = "crashed"
        elif mode == "function":
            status = "ok" if (kinds[-1:] == ["done"] or compiled is False or load_error) \
                and rc == 0 else "crashed"
        else:
            status = "ok" if rc == 0 and compiled else ("crashed" if compiled is not False else "ok")
        return SandboxResult(status=status, compiled=compiled, load_error=load_error,
                             results=results, isolation=iso, blocked=blocked, limit=limit,
                             timed_out=status == "timeout", **common)
    except Exception as e:  # noqa: BLE001 — any fault of ours is a sandbox fault
        return SandboxResult(status="sandbox_error", error=f"{type(e).__name__}: {e}"[:500])
    finally:
        if uid is not None:
            with _UID_LOCK:
                _UIDS_IN_USE.discard(uid)
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        if work:
            shutil.rmtree(work, ignore_errors=True)


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


def _has_libseccomp() -> bool:
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2")
        return True
    except OSError:
        return False


def install(*, log=print) -> int:
    """Installs bubblewrap (and libseccomp, for the system-call filter) with apt-get when
    missing and this process is root, then checks that a sandbox runs. Returns a process exit
    code (0 = the sandbox works)."""
    found = bwrap_path()
    missing = []
    if found:
        log(f"bubblewrap already installed: {found}")
    else:
        missing.append("bubblewrap")
    if not _has_libseccomp():
        missing.append("libseccomp2")
    if missing:
        names = " ".join(missing)
        if os.geteuid() != 0:
            log(f"{names} missing and this is not root: run as root, or "
                f"`sudo apt-get install -y {names}`")
            return 1
        if shutil.which("apt-get") is None:
            log(f"{names} missing and apt-get is not available: install the package(s) "
                f"`{names}` with this system's package manager")
            return 1
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", *missing]):
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
        log(f"installed {names}: {found}")
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
