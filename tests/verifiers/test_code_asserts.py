"""Assertion test code (asserts mode, the HumanEval / MBPP layout) in the code verifier: Python's
own `==`, per-assert partial credit, and the attacks of an adversarial candidate on the tests,
the harness and the result channel (each in a real sandbox)."""

import pytest

from rlvr.records.code_tests import CodeTestsError, parse_code_reference, split_assert_units
from rlvr.records.task import TaskSpec
from rlvr.verifiers.code import CodeVerifier
from rlvr.verifiers.sandbox import SandboxLimits

LIMITS = SandboxLimits(cpu_s=1, wall_s=2, memory_mb=256, max_processes=16, max_file_mb=1)
V = CodeVerifier(limits=LIMITS)
CHECK = ("import math\n\nMETADATA = {'author': 'x'}\n\n"
         "def check(candidate):\n"
         "    assert candidate(1, 2) == 3\n"
         "    assert math.isclose(candidate(0.1, 0.2), 0.3)\n"
         "    for i in range(3):\n"
         "        assert candidate(i, i) == 2 * i\n"
         "    assert candidate(-1, 1) == False\n")
TASK = TaskSpec(task_id="add", prompt="write add(a, b)", task_type="code",
                reference_answer={"entry_point": "add", "test_code": CHECK})
GOOD = "def add(a, b):\n    return a + b\n"


def _verify(src, task=TASK):
    return V.verify(task, src)


def test_split_counts_each_top_level_assert_and_keeps_setup():
    setup, units, name = split_assert_units(CHECK + "\ncheck(add)\n", "t")
    assert name == "candidate" and "METADATA" in setup and "check(add)" not in setup
    assert [c for _, c in units] == [True, True, True, True]  # the loop is one unit
    _, units, _ = split_assert_units("x = 2\nassert f(1) == x\nassert f(2) == 4\n", "t")
    assert [c for _, c in units] == [False, True, True]
    with pytest.raises(CodeTestsError, match="reference_answer.test_code .*no assert"):
        parse_code_reference({"entry_point": "f", "test_code": "def check(c):\n    pass\n"})
    with pytest.raises(CodeTestsError, match="reference_answer.entry_point"):
        parse_code_reference({"test_code": "assert 1\n"})


def test_correct_solution_passes_with_python_equality():
    # 0 == False under Python's ==: the last assert passes for a + b
    v = _verify(GOOD)
    assert v.decision == "pass", v.evidence
    assert v.components["hidden"] == 1.0 and v.evidence["hidden_passed"] == "4/4"


def test_partial_credit_counts_asserts():
    v = _verify("def add(a, b):\n    return a + b if a >= 0 else 99\n")
    assert v.decision == "fail" and v.evidence["hidden_passed"] == "3/4"
    assert v.components["hidden"] == pytest.approx(0.75)


def test_plain_asserts_call_the_entry_point_by_name_with_setup_code():
    task = TaskSpec(task_id="m", prompt="p", task_type="code", reference_answer={
        "entry_point": "rev", "setup_code": "X = 'ab'",
        "test_code": "assert rev(X) == 'ba'\nassert rev('') == ''\n"})
    assert _verify("def rev(s):\n    return s[::-1]\n", task).decision == "pass"
    assert _verify("def rev(s):\n    return s\n", task).evidence["hidden_passed"] == "1/2"


ATTACKS = {
    "always_equal_object": ("class A:\n    def __eq__(self, o): return True\n"
                            "    def __bool__(self): return True\n"
                            "def add(a, b):\n    return A()\n"),
    "int_subclass_equal": ("class I(int):\n    def __eq__(self, o): return True\n"
                           "def add(a, b):\n    return I(0)\n"),
    "list_holding_always_equal": ("class A:\n    def __eq__(self, o): return True\n"
                                  "def add(a, b):\n    return [A()]\n"),
    "patched_math_isclose_and_builtins": (
        "import math, builtins\nmath.isclose = lambda *a, **k: True\n"
        "builtins.range = lambda n: []\ndef add(a, b):\n    return 7\n"),
    "assertion_error_patched": ("import builtins\nbuiltins.AssertionError = type('E', (), {})\n"
                                "def add(a, b):\n    return 7\n"),
    "exit_zero_early": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "sys_exit_early": "import sys\ndef add(a, b):\n    sys.exit(0)\n",
    "forged_results": (
        "import os\ndef add(a, b):\n"
        "    for i in range(8):\n"
        "        for fd in range(3, 20):\n"
        "            try: os.write(fd, b'{\"kind\":\"result\",\"i\":%d,\"ok\":true}\\n' % i)\n"
        "            except OSError: pass\n"
        "    os.write(1, b'')\n    return 7\n"),
    "frame_walk_for_key": (
        "import sys\ndef add(a, b):\n    f = sys._getframe(1)\n    return f.f_globals\n"),
    "traceback_frame_walk": (
        "def add(a, b):\n    try:\n        raise ValueError\n    except ValueError as e:\n"
        "        return e.__traceback__.tb_frame.f_back.f_locals\n"),
    "gc_search_for_tests": (
        "import gc\ndef add(a, b):\n"
        "    return [o for o in gc.get_objects() if isinstance(o, str) and 'candidate' in o]\n"),
    "stall": "import time\ndef add(a, b):\n    time.sleep(100)\n",
    "harness_send_patched": ("import __main__\n__main__._send = lambda fd, obj: None\n"
                             "def add(a, b):\n    return 7\n"),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_never_passes(name):
    v = _verify(ATTACKS[name])
    assert v.decision == "fail", (name, v.evidence)
    assert v.components["hidden"] == 0.0, (name, v.evidence)


def test_introspection_is_reported_as_a_side_effect():
    v = _verify(ATTACKS["frame_walk_for_key"])
    assert any(b.startswith("introspection.") for b in v.evidence.get("blocked", [])), v.evidence


def test_reading_the_check_source_from_disk_finds_nothing():
    src = ("import os\ndef add(a, b):\n"
           "    mark = 'zq' + 'hidden-marker'\n"
           "    for top in ('/sandbox', '/tmp', '/proc/self', '/dev/shm'):\n"
           "     for root, _, files in os.walk(top):\n"
           "        for f in files:\n"
           "            try:\n"
           "                if mark.encode() in open(os.path.join(root, f), 'rb').read(1 << 16):\n"
           "                    return 'FOUND'\n"
           "            except Exception: pass\n"
           "    return a + b\n")
    task = TaskSpec(task_id="a", prompt="p", task_type="code", reference_answer={
        "entry_point": "add",
        "test_code": "def check(candidate):\n    assert candidate(1, 2) == 3, 'zqhidden-marker'\n"})
    v = V.verify(task, src)
    assert v.decision == "pass", v.evidence  # the walk never found the tests (else 'FOUND')


LATE_LOOKUP = TaskSpec(task_id="late", prompt="p", task_type="code", reference_answer={
    "entry_point": "add",
    "test_code": "import math\ndef check(candidate):\n"
                 "    assert candidate(1, 2) == 3 and all(math.isclose(candidate(1, 2), 99)\n"
                 "                                        for _ in range(3))\n"})
CONCURRENT = {
    "thread_patches_while_asserts_run": (
        "import math, threading, time\n"
        "def loop():\n    while True:\n        math.isclose = lambda *a, **k: True\n"
        "        time.sleep(0.001)\n"
        "threading.Thread(target=loop, daemon=True).start()\n"
        "def add(a, b):\n    time.sleep(0.02)\n    return 3\n"),
    "patch_during_the_call": (
        "import math\ndef add(a, b):\n    math.isclose = lambda *a, **k: True\n    return 3\n"),
}


@pytest.mark.parametrize("name", sorted(CONCURRENT))
def test_candidate_code_running_beside_the_asserts_cannot_fake_them(name):
    # the assert looks math.isclose up after the candidate returned: a patch made during the
    # call, or by a thread of the candidate's, would be read then
    v = V.verify(LATE_LOOKUP, CONCURRENT[name])
    assert v.decision == "fail" and v.components["hidden"] == 0.0, (name, v.evidence)


TYPES_CHECK = "def check(candidate):\n    assert candidate(3) == [3, 'RED', 'T', 4]\n"
TYPES_SRC = (
    "import collections, enum, typing\n"
    "def f(x):\n"
    "    P = collections.namedtuple('P', 'a b')\n"  # run-time factories that name the new
    "    Color = enum.Enum('Color', 'RED GREEN')\n"  # type's module from the caller's frame
    "    T = typing.TypeVar('T')\n"
    "    N = typing.NamedTuple('N', [('v', int)])\n"
    "    UserId = typing.NewType('UserId', int)\n"
    "    class Shape(enum.Enum):\n"
    "        SQUARE = 4\n"
    "    p = P(x, UserId(1))\n"
    "    return [p.a, Color(1).name, T.__name__, N(Shape.SQUARE.value).v]\n")


def test_namedtuple_enum_and_typevar_created_at_run_time_work():
    task = TaskSpec(task_id="types", prompt="p", task_type="code",
                    reference_answer={"entry_point": "f", "test_code": TYPES_CHECK})
    v = _verify(TYPES_SRC, task)
    assert v.decision == "pass", v.evidence


def test_the_named_types_hold_no_frame_to_reach_the_tests():
    """The factories still give no way to a frame: reading one through them is refused."""
    task = TaskSpec(task_id="types", prompt="p", task_type="code",
                    reference_answer={"entry_point": "f", "test_code": TYPES_CHECK})
    src = ("import sys, collections\n"
           "def f(x):\n"
           "    collections.namedtuple('P', 'a')\n"
           "    return sys._getframe(1).f_locals\n")
    v = _verify(src, task)
    assert v.decision == "fail" and v.components["hidden"] == 0.0, v.evidence
