"""The sandbox's file-system view (docs/verifiers.md §3: no host files): a candidate sees a minimal read-only
root (interpreter, standard library, the libraries they link), its own empty working directory
and tmpfs — never the checkout, dataset files, home directories or other processes. Also the
set-up entry point that installs bubblewrap, and what happens without it."""

import json
import os
import pathlib
import uuid

import pytest

import rlvr.verifiers.sandbox as sb
from rlvr.records.task import TaskSpec
from rlvr.verifiers.code import CodeVerifier
from rlvr.verifiers.sandbox import (INSTALL_COMMAND, SandboxLimits, SandboxUnavailable,
                                    minimal_root, run_sandboxed)

LIMITS = SandboxLimits(cpu_s=2, wall_s=5, memory_mb=256, max_processes=16, max_file_mb=1)
CHECKOUT = pathlib.Path(__file__).resolve().parents[2]
SECRET = "expected-answer-" + uuid.uuid4().hex


def _call(src, **kw):
    r = run_sandboxed(src, entry_point="f", calls=[[[], {}]], limits=LIMITS, **kw)
    assert r.status == "ok" and 0 in r.results, (r.status, r.error, r.stderr[-500:])
    assert r.results[0]["ok"], r.results[0]
    return r, r.results[0]["value"]


@pytest.fixture
def planted():
    """World-readable (0644) files outside the temp directories: in the checkout, in the home
    directory and next to the shipped task files (a user's task JSONL with hidden answers)."""
    name = f".rlvr_planted_{uuid.uuid4().hex}"
    places = [CHECKOUT / name, CHECKOUT / "rlvr" / "tasks" / "data" / (name + ".jsonl"),
              pathlib.Path.home() / name]
    made = []
    for p in places:
        try:
            p.write_text(json.dumps({"task_id": "t", "reference_answer": SECRET}) + "\n")
            os.chmod(p, 0o644)
            made.append(p)
        except OSError:
            pass
    assert len(made) >= 2
    yield made
    for p in made:
        p.unlink()


def test_candidate_cannot_open_world_readable_host_files(planted):
    shipped = CHECKOUT / "rlvr" / "tasks" / "data" / "examples.jsonl"
    targets = [str(p) for p in planted] + [str(CHECKOUT / "README.md"), str(shipped),
                                           "/etc/passwd", "/etc/hostname"]
    src = ("def f():\n"
           "    got = {}\n"
           f"    for p in {targets!r}:\n"
           "        try:\n"
           "            got[p] = open(p).read()\n"
           "        except OSError as e:\n"
           "            got[p] = type(e).__name__\n"
           "    return got\n")
    for p in planted:  # the host itself can read them
        assert SECRET in p.read_text()
    r, got = _call(src)
    assert r.isolation["fs"] == "minimal"
    assert set(got) == set(targets)
    assert all(v == "FileNotFoundError" for v in got.values()), got
    assert SECRET not in json.dumps(got)


def test_code_verifier_reward_not_reachable_through_a_task_file(planted):
    # the candidate "solves" the task by reading the hidden answer from the user's task file
    task_file = str(planted[1])
    task = TaskSpec(task_id="leak", prompt="return the hidden answer", task_type="code",
                    reference_answer={"entry_point": "f",
                                      "hidden_tests": [{"args": [], "expected": SECRET}]})
    src = ("import json\n"
           "def f():\n"
           f"    return json.loads(open({task_file!r}).readline())['reference_answer']\n")
    weak = CodeVerifier(limits=LIMITS, filesystem="host", drop_privileges=False)
    assert weak.verify(task, src).decision == "pass"  # the hole the minimal root closes
    v = CodeVerifier(limits=LIMITS).verify(task, src)
    assert v.trial == "valid" and v.decision == "fail", v.evidence
    assert "FileNotFoundError" in v.evidence["hidden_first_failure"]


def test_root_holds_only_the_interpreter_its_libraries_and_the_run_dirs():
    src = ("import os\n"
           "def f():\n"
           "    files = []\n"
           "    for d in ('/usr', '/python', '/lib', '/lib64', '/sandbox', '/tmp', '/dev/shm'):\n"
           "        for root, dirs, names in os.walk(d):\n"
           "            files += [os.path.join(root, n) for n in names]\n"
           "    return {'top': sorted(os.listdir('/')), 'files': files,\n"
           "            'dev': sorted(os.listdir('/dev')), 'cwd': os.getcwd()}\n")
    r, got = _call(src)
    assert set(got["top"]) <= {"dev", "lib", "lib64", "proc", "python", "sandbox", "tmp", "usr",
                               "bin"}, got["top"]
    for host_dir in ("etc", "home", "root", "var", "opt", "srv", "mnt", "run", "sys", "work",
                     CHECKOUT.parts[1]):
        if host_dir not in ("usr", "lib", "lib64", "tmp"):
            assert host_dir not in got["top"], host_dir
    assert got["cwd"] == sb.SANDBOX_WORKDIR
    files = got["files"]
    ver = os.path.basename(minimal_root().python)
    stdlib = f"{sb.SANDBOX_PREFIX}/lib/{ver}/"
    others = [f for f in files if not f.startswith(stdlib) and f != minimal_root().python]
    # outside the standard library: shared libraries only, and the candidate's own program
    assert all(".so" in os.path.basename(f) for f in others
               if f != f"{sb.SANDBOX_WORKDIR}/solution.py"), others
    assert f"{sb.SANDBOX_WORKDIR}/solution.py" in files
    assert not [f for f in files if "site-packages" in f or "dist-packages" in f]
    assert f"{stdlib}os.py" in files  # the standard library is there
    assert set(got["dev"]) <= {"console", "core", "fd", "full", "null", "ptmx", "pts", "random",
                               "shm", "stderr", "stdin", "stdout", "tty", "urandom", "zero"}


def test_checkout_is_not_in_the_sandbox():
    # names only the checkout has (README.md would also match the stdlib's test data)
    ours = {"_sandbox_harness.py", "test_sandbox_fs.py", "examples.jsonl", "pyproject.toml",
            "requirements-test.txt", "BENCHMARKS.md"}
    src = ("import os\n"
           "def f():\n"
           "    names = set()\n"
           "    for top in os.listdir('/'):\n"
           "        if top in ('proc', 'dev'):\n"
           "            continue\n"
           "        for root, dirs, files in os.walk('/' + top):\n"
           "            names.update(files)\n"
           f"    found = [n for n in {sorted(ours)!r} if n in names]\n"
           f"    return found + [os.path.exists({str(CHECKOUT)!r})]\n")
    _, got = _call(src)
    assert got == [False]


def test_other_processes_invisible_and_work_dir_private():
    src = ("import os\n"
           "def f():\n"
           "    pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
           "    cmd = open('/proc/1/cmdline', 'rb').read().split(b'\\0')[0].decode()\n"
           "    open('scratch.txt', 'w').write('x')\n"
           "    return [pids, cmd, sorted(os.listdir('.'))]\n")
    r, (pids, cmd, listing) = _call(src)
    assert pids == [1, 2], pids  # the run's supervisor and the candidate, nothing of the host
    assert cmd == minimal_root().python
    assert listing == ["scratch.txt", "solution.py"]
    assert r.isolation["pid"] == "pidns"


def test_writes_outside_the_work_dir_fail_or_vanish():
    src = ("def f():\n"
           "    out = {}\n"
           "    for p in ('/python/x', '/usr/x', '/x', '/lib64/x'):\n"
           "        try:\n"
           "            open(p, 'w').write('x')\n"
           "            out[p] = 'written'\n"
           "        except OSError as e:\n"
           "            out[p] = type(e).__name__\n"
           "    return out\n")
    _, got = _call(src)
    assert "written" not in got.values(), got


# ------------------------------------------------------------------ without bubblewrap
def test_missing_bwrap_is_a_startup_error_then_an_env_error(monkeypatch):
    good = CodeVerifier(limits=LIMITS)  # built while bwrap is there
    monkeypatch.setattr(sb, "bwrap_path", lambda: None)
    with pytest.raises(SandboxUnavailable, match=INSTALL_COMMAND.replace(".", r"\.")):
        CodeVerifier(limits=LIMITS)
    r = run_sandboxed("def f():\n    return 1\n", entry_point="f", calls=[[[], {}]])
    assert r.status == "sandbox_error" and INSTALL_COMMAND in r.error
    task = TaskSpec(task_id="a", prompt="", task_type="code", reference_answer={
        "entry_point": "f", "public_tests": [{"args": [], "expected": 1}]})
    v = good.verify(task, "def f():\n    return 1\n")
    assert v.trial == "env_error" and INSTALL_COMMAND in v.evidence["reason"]


def test_installer_runs_apt_when_missing_and_root(monkeypatch):
    calls, log = [], []
    state = {"installed": False}

    class Done:
        returncode, stderr, stdout = 0, "", "bubblewrap 0.8.0"

    def fake_run(cmd, **kw):
        calls.append(cmd)
        if cmd[:2] == ["apt-get", "install"]:
            state["installed"] = True
        return Done()

    monkeypatch.setattr(sb, "bwrap_path", lambda: "/usr/bin/bwrap" if state["installed"] else None)
    monkeypatch.setattr(sb.os, "geteuid", lambda: 0)
    monkeypatch.setattr(sb.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(sb.subprocess, "run", fake_run)
    monkeypatch.setattr(sb, "require_sandbox", lambda: {"fs": "minimal"})
    assert sb.install(log=log.append) == 0
    assert calls[:2] == [["apt-get", "update"], ["apt-get", "install", "-y", "bubblewrap"]]
    assert any("installed bubblewrap" in m for m in log) and any("check: ok" in m for m in log)

    calls.clear(), log.clear()
    assert sb.install(log=log.append) == 0  # second time: nothing to install
    assert not [c for c in calls if c[0] == "apt-get"]
    assert any("already installed" in m for m in log)


def test_installer_adds_libseccomp_when_missing(monkeypatch):
    calls, log = [], []

    class Done:
        returncode, stderr, stdout = 0, "", "bubblewrap 0.8.0"

    monkeypatch.setattr(sb, "bwrap_path", lambda: "/usr/bin/bwrap")
    monkeypatch.setattr(sb, "_has_libseccomp", lambda: False)
    monkeypatch.setattr(sb.os, "geteuid", lambda: 0)
    monkeypatch.setattr(sb.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(sb.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or Done())
    monkeypatch.setattr(sb, "require_sandbox", lambda: {"fs": "minimal"})
    assert sb.install(log=log.append) == 0
    assert ["apt-get", "install", "-y", "libseccomp2"] in calls


def test_installer_without_root_says_what_to_do(monkeypatch):
    log = []
    monkeypatch.setattr(sb, "bwrap_path", lambda: None)
    monkeypatch.setattr(sb.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(sb.subprocess, "run", lambda *a, **k: pytest.fail("must not run apt"))
    assert sb.install(log=log.append) == 1
    assert "apt-get install -y bubblewrap" in log[0] and "root" in log[0]


def test_check_entry_point_reports_the_isolation(capsys):
    assert sb.main(["--check"]) == 0
    assert "sandbox check: ok" in capsys.readouterr().out
