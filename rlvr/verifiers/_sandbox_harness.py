"""Sandbox harness: the trusted first half of a sandboxed run (see rlvr/verifiers/sandbox.py).

Started as `python -I -S -B -c <this file> CTRL_FD RESULT_FD` by the parent — inside bwrap's
minimal root and namespaces, or directly for filesystem="host". Before any candidate code
exists in this process it:
  1. reads the control message (JSON) from CTRL_FD and closes it;
  2. changes to the working directory and forks: the parent stays as the run's supervisor
     (inside bwrap it is pid 1 of the pid namespace): it waits for the candidate, reaps
     orphans and exits like the candidate (128 + signal for a signal);
  3. in the child: sets PR_SET_NO_NEW_PRIVS, resource limits (CPU, address space, file size,
     processes, open files, core dumps), drops to the per-run uid/gid when one is given and
     installs the audit hook that refuses socket creation and reports look-ups of the C
     library's wrappers of system calls the sandbox's seccomp filter refuses (ctrl["refused"];
     the kernel answers those calls with EPERM; the hook sends {"kind": "blocked", "event":
     "syscall.<name>"}; a raw syscall(NR, ...) is refused all the same, unreported);
  4. writes {"kind": "ready"} to RESULT_FD — everything after this line is the candidate's doing.
Then it loads solution.py from the working directory and either calls the entry point on each
test input (function mode; every result is written as one JSON line to RESULT_FD — expected
outputs never enter this process) or runs it as __main__ on stdin (stdio mode).

Standard library only; never imports the rlvr package.
"""

import json
import os
import resource
import sys

# bound before any candidate code exists, so that patching os._exit, os.write or json.dumps
# does not change the harness's own steps (the verdict does not rely on it: a run that does
# not end within its limits fails whatever results it sent)
_exit = os._exit
_write = os.write
_dumps = json.dumps


def _send(fd, obj):
    data = (_dumps(obj, separators=(",", ":")) + "\n").encode()
    while data:
        n = _write(fd, data)
        data = data[n:]


def _confine(ctrl, res_fd):
    """Limits, privilege drop and the socket audit hook of the candidate process."""
    lim = ctrl["limits"]
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    except Exception:  # noqa: BLE001 — bwrap sets it too; without ctypes we go on
        pass
    mb = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (int(lim["cpu_s"]), int(lim["cpu_s"]) + 1))
    resource.setrlimit(resource.RLIMIT_AS, (int(lim["memory_mb"]) * mb,) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(lim["max_file_mb"] * mb),) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(lim["max_open_files"]),) * 2)
    uid = ctrl.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setgid(int(ctrl["gid"]))
        os.setuid(int(uid))  # from root to a fresh uid: every capability is gone
        # per-uid count: this run's uid is unique, so the limit is this run's process tree
        resource.setrlimit(resource.RLIMIT_NPROC, (int(lim["max_processes"]),) * 2)
    elif os.getuid() != 0:
        # shared uid: allow what the user already runs (counted by the parent on the host)
        # plus max_processes (root ignores the limit)
        resource.setrlimit(resource.RLIMIT_NPROC,
                           (int(ctrl.get("nproc_base", 0)) + int(lim["max_processes"]),) * 2)
    blocked_events = ("socket.__new__", "socket.connect", "socket.bind", "socket.sendto",
                      "socket.getaddrinfo")
    refused = set((ctrl.get("refused") or {}).values())
    reported = set()

    def report(event):
        try:
            _send(res_fd, {"kind": "blocked", "event": event})
        except OSError:
            pass

    def hook(event, args):
        if event in blocked_events:
            report(event)
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event in ("ctypes.dlsym", "ctypes.dlsym/handle") and len(args) > 1:
            # the candidate looks up the C library's wrapper of a system call the seccomp
            # filter refuses (the kernel will answer EPERM): recorded once per name
            name = args[1]
            if isinstance(name, str) and name in refused and name not in reported:
                reported.add(name)
                report("syscall." + name)
        elif event in ("os.unshare", "os.setns") and event not in reported:
            reported.add(event)
            report("syscall." + event[3:])

    sys.addaudithook(hook)


def _jsonable(value):
    json.dumps(value, allow_nan=True)  # raises TypeError / ValueError if not plain JSON data
    return value


def _wait_for(pid):
    """Waits for `pid`, reaping every other child on the way (as the namespace's pid 1, the
    candidate's orphans come here); returns pid's wait status."""
    while True:
        try:
            done, status = os.wait()
        except ChildProcessError:
            return 0
        if done == pid:
            return status


def _exit_like(status):
    if os.WIFSIGNALED(status):
        _exit(128 + os.WTERMSIG(status))
    _exit(os.waitstatus_to_exitcode(status) & 0xFF)


def main():
    ctrl_fd, res_fd = int(sys.argv[1]), int(sys.argv[2])
    chunks = []
    while True:
        b = os.read(ctrl_fd, 1 << 16)
        if not b:
            break
        chunks.append(b)
    os.close(ctrl_fd)
    ctrl = json.loads(b"".join(chunks))
    try:
        os.chdir(ctrl["workdir"])
        cand = os.fork()
        if cand:
            # supervisor (pid 1 of the run's pid namespace inside bwrap): waits for the
            # candidate and exits like it; its exit makes the kernel end whatever is left in
            # the namespace, and its parent's wait4 accounts the candidate's CPU and memory.
            os.close(res_fd)
            try:
                import ctypes

                ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no ptrace attach
            except Exception:  # noqa: BLE001
                pass
            _exit_like(_wait_for(cand))
        _confine(ctrl, res_fd)
    except Exception as e:  # noqa: BLE001 — sandbox fault, reported as such
        _send(res_fd, {"kind": "sandbox_error", "error": f"{type(e).__name__}: {e}"})
        _exit(3)
    _send(res_fd, {"kind": "ready", "uid": os.getuid()})

    # ---- candidate territory from here on -------------------------------------------------
    try:
        with open("solution.py", "rb") as f:
            src = f.read()
        code = compile(src, "solution.py", "exec")
    except BaseException as e:  # noqa: BLE001
        _send(res_fd, {"kind": "compile_error", "error": f"{type(e).__name__}: {e}"[:500]})
        _exit(0)
    _send(res_fd, {"kind": "compiled"})
    if ctrl["mode"] == "stdio":
        os.close(res_fd)
        ns = {"__name__": "__main__", "__file__": "solution.py", "__builtins__": __builtins__}
        code_rc = 0
        try:
            exec(code, ns)
        except SystemExit as e:
            code_rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            code_rc = 1
        try:
            sys.stdout.flush()
        except BaseException:  # noqa: BLE001
            code_rc = code_rc or 1
        _exit(code_rc)

    ns = {"__name__": "solution", "__file__": "solution.py", "__builtins__": __builtins__}
    try:
        exec(code, ns)
        fn = ns.get(ctrl["entry_point"])
        if not callable(fn):
            raise NameError(f"entry point {ctrl['entry_point']!r} is not a defined function")
    except BaseException as e:  # noqa: BLE001
        _send(res_fd, {"kind": "load_error", "error": f"{type(e).__name__}: {e}"[:500]})
        _exit(0)
    for i, (args, kwargs) in enumerate(ctrl["calls"]):
        try:
            value = fn(*args, **kwargs)
            msg = {"kind": "result", "i": i, "ok": True, "value": _jsonable(value)}
        except BaseException as e:  # noqa: BLE001
            msg = {"kind": "result", "i": i, "ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
        try:
            _send(res_fd, msg)
        except (TypeError, ValueError) as e:
            _send(res_fd, {"kind": "result", "i": i, "ok": False, "error": f"unserialisable: {e}"[:300]})
    _send(res_fd, {"kind": "done"})
    _exit(0)


if __name__ == "__main__":
    main()
