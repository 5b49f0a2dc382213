"""Sandbox harness: the trusted first half of a sandboxed run (see rlvr/verifiers/sandbox.py).

Started as `python -I -S _sandbox_harness.py CTRL_FD RESULT_FD` by the parent, with the
privileges of the parent. Before any candidate code exists in this process it:
  1. reads the control message (JSON) from CTRL_FD and closes it;
  2. enters new network (no interfaces but a down loopback), mount (fresh tmpfs over /tmp …)
     and pid namespaces where the kernel allows; without a network namespace the audit hook
     that refuses socket creation is the only network block;
  3. (pid namespace) forks the namespace's init, which forks the candidate process; in it:
     sets PR_SET_NO_NEW_PRIVS, resource limits (CPU, address space, file size, processes,
     open files, core dumps), and drops to the per-run uid/gid when one is given;
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


def _send(fd, obj):
    data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _private_tmp(libc, size_mb):
    """New mount namespace; fresh tmpfs over the world-writable directories, so nothing the
    candidate writes outside its working directory reaches the host (and the private tests
    directory under /tmp is not even visible). The working directory stays reachable as cwd."""
    if libc.unshare(0x00020000) != 0:  # CLONE_NEWNS
        return False
    if libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None) != 0:  # MS_REC | MS_PRIVATE
        return False
    opts = f"size={int(size_mb)}m,mode=1777".encode()
    ok = True
    for d in (b"/tmp", b"/var/tmp", b"/dev/shm", b"/run/lock"):
        if os.path.isdir(d):
            ok = libc.mount(b"tmpfs", d, b"tmpfs", 0x2 | 0x4, opts) == 0 and ok  # NOSUID|NODEV
    return ok


def _namespaces(ctrl):
    """Network, mount and pid namespaces (best effort; each needs CAP_SYS_ADMIN)."""
    net, fs, pid = "audit", "shared", "shared"
    lim = ctrl["limits"]
    os.chdir(ctrl["workdir"])
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if ctrl.get("netns", True) and libc.unshare(0x40000000) == 0:  # CLONE_NEWNET
            net = "netns"
        if ctrl.get("private_tmp", True) and _private_tmp(libc, 2 * lim["max_file_mb"] + 1):
            fs = "private_tmp"
        if ctrl.get("pidns", True) and libc.unshare(0x20000000) == 0:  # CLONE_NEWPID
            pid = "pidns"  # applies to the children forked from now on
    except Exception:  # noqa: BLE001
        libc = None
    return libc, net, fs, pid


def _mount_proc(libc):
    """In the new pid namespace: a /proc that shows only this namespace's processes."""
    try:
        return libc.mount(b"proc", b"/proc", b"proc", 0x2 | 0x4 | 0x8, None) == 0
    except Exception:  # noqa: BLE001
        return False


def _confine(ctrl, res_fd, libc):
    """Limits, privilege drop and the socket audit hook of the candidate process."""
    lim = ctrl["limits"]
    if libc is not None:
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
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
        os.setuid(int(uid))
        # per-uid count: this run's uid is unique, so the limit is this run's process tree
        resource.setrlimit(resource.RLIMIT_NPROC, (int(lim["max_processes"]),) * 2)
    elif os.getuid() != 0:
        # shared uid: allow what the user already runs plus max_processes (root ignores it)
        mine = 0
        for name in os.listdir("/proc"):
            try:
                if name.isdigit() and os.stat(f"/proc/{name}").st_uid == os.getuid():
                    mine += 1
            except OSError:
                pass
        resource.setrlimit(resource.RLIMIT_NPROC, (mine + int(lim["max_processes"]),) * 2)
    blocked_events = ("socket.__new__", "socket.connect", "socket.bind", "socket.sendto",
                      "socket.getaddrinfo")

    def hook(event, args):
        if event in blocked_events:
            try:
                _send(res_fd, {"kind": "blocked", "event": event})
            except OSError:
                pass
            raise PermissionError(f"sandbox: {event} is not allowed")

    sys.addaudithook(hook)


def _jsonable(value):
    json.dumps(value, allow_nan=True)  # raises TypeError / ValueError if not plain JSON data
    return value


def _wait_status(pid):
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            return 0


def _exit_like(status):
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


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
        libc, net, fs, pidns = _namespaces(ctrl)
        if pidns == "pidns":
            # this process (outside) waits for the namespace's init; the init waits for the
            # candidate. When the init exits the kernel kills and reaps everything left in the
            # namespace: no escaped daemons, no zombies.
            init = os.fork()
            if init:
                os.close(res_fd)
                _exit_like(_wait_status(init))
            if fs == "private_tmp":
                _mount_proc(libc)
            cand = os.fork()
            if cand:
                os.close(res_fd)
                _exit_like(_wait_status(cand))
        _confine(ctrl, res_fd, libc)
    except Exception as e:  # noqa: BLE001 — sandbox fault, reported as such
        _send(res_fd, {"kind": "sandbox_error", "error": f"{type(e).__name__}: {e}"})
        os._exit(3)
    _send(res_fd, {"kind": "ready", "net": net, "fs": fs, "pid": pidns, "uid": os.getuid()})

    # ---- candidate territory from here on -------------------------------------------------
    try:
        with open("solution.py", "rb") as f:
            src = f.read()
        code = compile(src, "solution.py", "exec")
    except BaseException as e:  # noqa: BLE001
        _send(res_fd, {"kind": "compile_error", "error": f"{type(e).__name__}: {e}"[:500]})
        os._exit(0)
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
        os._exit(code_rc)

    ns = {"__name__": "solution", "__file__": "solution.py", "__builtins__": __builtins__}
    try:
        exec(code, ns)
        fn = ns.get(ctrl["entry_point"])
        if not callable(fn):
            raise NameError(f"entry point {ctrl['entry_point']!r} is not a defined function")
    except BaseException as e:  # noqa: BLE001
        _send(res_fd, {"kind": "load_error", "error": f"{type(e).__name__}: {e}"[:500]})
        os._exit(0)
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
    os._exit(0)


if __name__ == "__main__":
    main()
