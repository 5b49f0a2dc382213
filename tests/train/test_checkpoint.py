"""Checkpoints survive faults: a damaged newest checkpoint is reported in one line (step, path,
what failed) and the run falls back to the newest one that loads; a process killed during a
save leaves the previous checkpoint usable."""

import glob
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr.train.checkpoint import CheckpointError, Checkpointer

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _state(v):
    return {"w": jnp.full((4096,), float(v)), "opt": {"m": jnp.arange(64.0) + v}, "step": jnp.int32(v)}


def _three_checkpoints(d):
    ck = Checkpointer(str(d), max_to_keep=5)
    for s in (1, 2, 3):
        ck.save(s, _state(s), {"pos": s})
    return ck


def _assert_state(state, v):
    np.testing.assert_array_equal(np.asarray(state["w"]), np.full((4096,), float(v)))
    assert int(state["step"]) == v


def _biggest_array_file(step_dir):
    files = [f for f in glob.glob(f"{step_dir}/state/**/d/*", recursive=True) if os.path.isfile(f)]
    return max(files, key=os.path.getsize)


def test_truncated_array_file_falls_back_with_a_one_line_report(tmp_path):
    ck = _three_checkpoints(tmp_path)
    f = _biggest_array_file(tmp_path / "3")
    with open(f, "r+b") as fh:
        fh.truncate(os.path.getsize(f) // 2)
    state, host, step, problems = ck.restore_latest(_state(0))
    assert step == 2 and host == {"pos": 2}
    _assert_state(state, 2)
    assert len(problems) == 1
    p = problems[0]
    assert "\n" not in p and len(p) < 600, p  # one line, not a TensorStore dump
    assert "step 3" in p and str(tmp_path / "3") in p and "state arrays" in p
    assert "TensorStore(" not in p
    # the unreadable step is set aside: it no longer counts, and step 3 can be saved again
    assert ck.latest_step() == 2 and (tmp_path / "3").exists() is False
    assert glob.glob(str(tmp_path / "3.unreadable-*"))
    ck.save(3, _state(30), {"pos": 30})
    assert ck.restore_latest(_state(0))[2:] == (3, [])
    ck.close()


def test_corrupt_host_metadata_names_file_and_step(tmp_path):
    ck = _three_checkpoints(tmp_path)
    (tmp_path / "3" / "host" / "metadata").write_text('{"pos": ')
    with pytest.raises(CheckpointError) as e:  # a direct restore says where, too
        ck.restore(_state(0), 3)
    assert "step 3" in str(e.value) and "host/metadata" in str(e.value)
    assert "JSONDecodeError" in str(e.value)
    state, host, step, problems = ck.restore_latest(_state(0))
    assert step == 2 and host == {"pos": 2}
    _assert_state(state, 2)
    assert len(problems) == 1 and "step 3" in problems[0] and str(tmp_path / "3") in problems[0]
    assert "host/metadata" in problems[0] and "JSONDecodeError" in problems[0]
    ck.close()


def test_no_loadable_checkpoint_stops_with_every_report(tmp_path):
    ck = Checkpointer(str(tmp_path), max_to_keep=5)
    ck.save(1, _state(1), {"pos": 1})
    ck.save(2, _state(2), {"pos": 2})
    (tmp_path / "2" / "host" / "metadata").write_text("not json")
    f = _biggest_array_file(tmp_path / "1")
    with open(f, "r+b") as fh:
        fh.truncate(10)
    with pytest.raises(CheckpointError) as e:
        ck.restore_latest(_state(0))
    msg = str(e.value)
    assert "step 2" in msg and "step 1" in msg and "can be loaded" in msg
    assert (tmp_path / "2").exists()  # nothing is moved when nothing loads
    ck.close()
    empty = Checkpointer(str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError):
        empty.restore_latest(_state(0))
    empty.close()


SAVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    import jax.numpy as jnp, numpy as np
    from rlvr.train.checkpoint import Checkpointer
    ck = Checkpointer({d!r}, max_to_keep=5)
    ck.save(1, {{"w": jnp.full((16,), 1.0)}}, {{"pos": 1}})
    big = jnp.asarray(np.random.default_rng(0).standard_normal(24_000_000, dtype=np.float32))
    print("saving", flush=True)
    ck.save(2, {{"w": big}}, {{"pos": 2}})
    print("saved", flush=True)
""")


def test_kill_during_save_leaves_previous_checkpoint(tmp_path):
    d = tmp_path / "ck"
    proc = subprocess.Popen([sys.executable, "-c", SAVER.format(root=str(ROOT), d=str(d))],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "saving"
        deadline = time.monotonic() + 120
        while not glob.glob(str(d / "2.orbax-checkpoint-tmp*")):  # the save is under way
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (d / "2").exists(), "the save finished before the kill: use a larger state"
    assert glob.glob(str(d / "2.orbax-checkpoint-tmp*"))  # the unfinished write is left behind
    ck = Checkpointer(str(d))
    assert ck.latest_step() == 1
    state, host, step, problems = ck.restore_latest({"w": jnp.zeros((16,))})
    assert (step, host, problems) == (1, {"pos": 1}, [])
    np.testing.assert_array_equal(np.asarray(state["w"]), np.ones(16))
    ck.wait()
    assert not glob.glob(str(d / "2.orbax-checkpoint-tmp*"))  # cleaned up on open
    ck.save(2, {"w": jnp.full((16,), 2.0)}, {"pos": 2})  # the step can be written again
    assert ck.restore_latest({"w": jnp.zeros((16,))})[1:3] == ({"pos": 2}, 2)
    ck.close()
