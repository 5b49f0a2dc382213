"""The suite's own settings (pyproject.toml addopts): a test whose worker process crashes runs
once more in a fresh worker; a test that fails is not rerun."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

CASES = '''
import ctypes, pathlib
HERE = pathlib.Path(__file__).parent

def _count(name):
    p = HERE / name
    p.write_text(p.read_text() + "x" if p.exists() else "x")
    return len(p.read_text())

def test_crashes_its_worker_once():
    if _count("crash") == 1:
        ctypes.string_at(0)  # a segfault: the worker process dies

def test_fails():
    _count("fail")
    assert False
'''


def test_a_crashed_worker_test_reruns_once_and_a_failing_test_never(tmp_path):
    (tmp_path / "test_cases.py").write_text(CASES)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-c", str(ROOT / "pyproject.toml"),
                        "--rootdir", str(tmp_path), "-n", "2", str(tmp_path / "test_cases.py")],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    tail = r.stdout[-2000:]
    assert "1 failed, 1 passed, 1 rerun" in tail, tail
    assert "FAILED test_cases.py::test_fails" in tail, tail
    assert (tmp_path / "crash").read_text() == "xx"  # crashed, then ran again and passed
    assert (tmp_path / "fail").read_text() == "x"  # failed once, not rerun
