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

    armed = []
    if ctrl.get("mode") == "asserts":
        # the assertion tests and the run's result key live in the harness's frames: once the
        # harness arms it (right before the candidate's code runs), every way from candidate
        # code to another frame or to raw memory is refused
        introspection = {"sys._getframe", "sys._current_frames", "sys.settrace",
                         "sys.setprofile", "gc.get_objects", "gc.get_referrers",
                         "gc.get_referents", "object.__getattr__", "ctypes.cdata",
                         "ctypes.cdata/buffer", "ctypes.string_at", "ctypes.wstring_at",
                         "ctypes.dlopen", "sys.monitoring.register_callback",
                         "_thread.start_new_thread"}

        def hook(event, args, _inner=hook):
            if armed and (event in introspection or (event == "open" and args and isinstance(
                    args[0], str) and args[0].startswith("/proc/") and args[0].endswith("mem"))):
                report("introspection." + event)
                raise PermissionError(f"sandbox: {event} is not allowed")
            _inner(event, args)

    sys.addaudithook(hook)
    return lambda: armed.append(True)


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


_VALUE_TYPES = (int, float, bool, str, bytes, complex, type(None))
_CONTAINER_TYPES = (list, tuple, set, frozenset, dict)


# imported before the introspection block is armed: these modules read their caller's frame
# while they are being imported (typing, enum, collections …); candidate code then finds them
# in sys.modules. Their run-time factories that would read a caller's frame to name the new
# type's module (namedtuple, the functional Enum API, TypeVar / NewType / NamedTuple) are given
# the candidate's module name instead (`_name_types_without_frames`).
_PRELOAD = ("typing", "collections", "enum", "dataclasses", "re", "functools", "itertools",
            "math", "heapq", "string", "bisect", "statistics", "fractions", "decimal", "hashlib",
            "copy", "operator", "random", "array", "datetime", "json", "cmath")


def _name_types_without_frames(module: str) -> None:
    """Asserts mode: the stdlib factories that look up their caller's module through
    `sys._getframe` (refused once the introspection block is armed) take `module` instead, so a
    candidate can create a namedtuple, an Enum or a TypeVar at run time; no frame is reachable
    through them. Applied before the module snapshot, so `restore` keeps it."""
    import collections
    import enum
    import typing

    namedtuple = collections.namedtuple

    def named_tuple(typename, field_names, *, rename=False, defaults=None, module=None):
        return namedtuple(typename, field_names, rename=rename, defaults=defaults,
                          module=module if module is not None else module_name)

    module_name = module
    collections.namedtuple = named_tuple
    create = enum.EnumType._create_

    def _create_(cls, class_name, names, *, module=None, **kw):
        return create(cls, class_name, names, module=module if module is not None else module_name,
                      **kw)

    enum.EnumType._create_ = _create_
    if hasattr(typing, "_caller"):  # TypeVar, ParamSpec, NewType, NamedTuple('P', [...])
        typing._caller = lambda depth=1, default="__main__": module_name


def _run_asserts(ctrl, res_fd, code, arm):
    """Asserts mode. Everything the run relies on is bound here before the candidate's code
    runs: the result key, the sender, a copy of the builtins, `exec`, the module dictionaries.
    The test units run in their own globals with that builtins copy, and every value a
    candidate's callable returns must be built from builtin value types only (recursively for
    containers) — a candidate-defined type could answer `==` or `bool()` with anything."""
    import builtins
    import types

    key = ctrl["key"].encode()
    write, exec_, type_, id_ = _write, exec, type, id
    base_exc, ok_types, containers = BaseException, frozenset(_VALUE_TYPES), frozenset(
        _CONTAINER_TYPES)
    dict_t, list_t, callable_, object_setattr = dict, list, callable, object.__setattr__
    dict_update, dict_items, exit_ = dict.update, dict.items, _exit
    units = [(compile(src, "<check>", "exec"), bool(counted)) for src, counted in ctrl["units"]]
    clean_builtins = dict(builtins.__dict__)
    builtins_snap = dict(clean_builtins)
    g = {"__builtins__": clean_builtins, "__name__": "__check__"}
    try:
        exec_(compile(ctrl.get("setup") or "", "<setup>", "exec"), g)
    except BaseException as e:  # noqa: BLE001 — the task's fault, reported as a load error
        _send(res_fd, {"kind": "load_error", "error": f"test setup: {type(e).__name__}: {e}"[:500]})
        _exit(0)
    for name in _PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass
    _name_types_without_frames("solution")
    sys_modules = sys.modules
    mod_snap = [(m, type_(m), dict_t(m.__dict__)) for m in list_t(sys_modules.values())
                if type_(m) is types.ModuleType]
    sys_snap = dict_t(sys_modules)

    def restore():
        dict_update(sys_modules, sys_snap)
        for m, t, d in mod_snap:
            if type_(m) is not t:
                object_setattr(m, "__class__", t)
            dict_update(m.__dict__, d)

    def send(i, ok):
        data = b'{"kind":"result","i":%d,"ok":%s,"key":"%s"}\n' % (i, b"true" if ok else b"false",
                                                                    key)
        while data:
            data = data[write(res_fd, data):]

    def plain(value):
        stack, seen = [value], set()
        while stack:
            v = stack.pop()
            t = type_(v)
            if t in ok_types:
                continue
            if t not in containers:
                return False
            if id_(v) in seen:
                continue
            seen.add(id_(v))
            if t is dict_t:
                for k, x in dict_items(v):
                    stack.append(k)
                    stack.append(x)
            else:
                stack.extend(v)
        return True

    import signal

    set_handler, set_timer, dfl = signal.signal, signal.setitimer, signal.SIG_DFL
    timers = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)
    signals = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]

    def quiet():
        # no candidate code may run again once its call has returned: timers off, handlers
        # back to the default (a signal then ends the run, which fails it)
        for t in timers:
            set_timer(t, 0)
        for sig in signals:
            try:
                set_handler(sig, dfl)
            except (OSError, ValueError):
                pass

    def guard(fn):
        def call(*args, **kwargs):
            try:
                value = fn(*args, **kwargs)
            finally:
                quiet()
                restore()  # what the call patched is undone before the assert reads it
            if not plain(value):
                raise TypeError("candidate returned a value that is not built from builtin types")
            return value
        return call

    ns = {"__name__": "solution", "__file__": "solution.py", "__builtins__": __builtins__}
    if ctrl.get("uid") is not None:
        # the run's own uid: with one process allowed, the candidate can start no thread and
        # no process, so no code of its runs beside the asserts
        resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
    arm()
    try:
        exec_(code, ns)
        fn = ns.get(ctrl["entry_point"])
        if not callable_(fn):
            raise NameError(f"entry point {ctrl['entry_point']!r} is not a defined function")
    except BaseException as e:  # noqa: BLE001
        _send(res_fd, {"kind": "load_error", "error": f"{type(e).__name__}: {e}"[:500]})
        _exit(0)
    for name, v in dict_items(dict_t(ns)):
        if name not in g and not name.startswith("__"):
            g[name] = guard(v) if callable_(v) else v
    g[ctrl.get("candidate") or "candidate"] = guard(fn)
    g[ctrl["entry_point"]] = guard(fn)
    i = 0
    for unit, counted in units:
        restore()
        dict_update(clean_builtins, builtins_snap)
        try:
            exec_(unit, g)
            ok = True
        except base_exc:  # noqa: BLE001 — any exception fails the unit
            ok = False
        if counted:
            send(i, ok)
            i += 1
        elif not ok:
            break
    data = b'{"kind":"done"}\n'
    while data:
        data = data[write(res_fd, data):]
    exit_(0)


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
        arm = _confine(ctrl, res_fd)
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

    if ctrl["mode"] == "asserts":
        _run_asserts(ctrl, res_fd, code, arm)

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
