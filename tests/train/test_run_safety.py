"""Runs that survive SIGTERM and shared workdirs: the stop signal saves the reached step, one run
per workdir (lock), each launch's config kept, resumes that would change the run refused, no
launch silently deletes an earlier run, and the progress bar shows phases and ends where the
run did."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from rlvr.train import loop
from rlvr.train.metrics import read_metrics
from rlvr.train.preempt import StopSignals
from rlvr.train.workdir import WorkdirBusy, WorkdirError, WorkdirLock
from tests.train.tiny import run_tiny, tiny_config
from tests._xla_flags import flags_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags_for(1), PYTHONPATH=ROOT)


def _quick(**over):
    """A tiny run without warm start, evaluation or export: a few seconds per launch."""
    kw = dict(train__num_steps=2, train__sft_steps=0, eval__num_tasks=0, checkpoint__every=1,
              checkpoint__export=False)
    kw.update(over)
    seed = kw.pop("seed", 0)
    c = tiny_config(**kw)
    c.seed = seed
    return c


def _steps(workdir):
    return [r["step"] for r in read_metrics(str(workdir))]


def _checkpoints(workdir):
    d = os.path.join(workdir, "checkpoints")
    return sorted(int(s) for s in os.listdir(d) if s.isdigit()) if os.path.isdir(d) else []


# ------------------------------------------------------------------------------ signals
def test_sigterm_saves_the_reached_step_and_a_relaunch_resumes_from_it(tmp_path):
    """A real launch.py run gets SIGTERM once it has logged a step: it exits with status 143
    after saving a checkpoint at the step it reached (periodic ones are far apart) with the
    metrics file complete up to it; relaunching the same command resumes from that step."""
    cfg = tmp_path / "tiny_run.py"
    cfg.write_text("from tests.train.tiny import tiny_config\n\n\ndef get_config():\n"
                   "    return tiny_config(train__num_steps=500, train__sft_steps=0, eval__num_tasks=0,\n"
                   "                       checkpoint__every=400, checkpoint__export=False)\n")
    wd = tmp_path / "run"
    cmd = [sys.executable, "launch.py", f"--config={cfg}", f"--workdir={wd}"]
    p = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        deadline = time.monotonic() + 300
        while not any(s >= 1 for s in _steps(wd)):
            assert p.poll() is None, p.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no step logged in 300 s"
            time.sleep(0.2)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, err[-3000:]
    m = re.search(r"stopped by SIGTERM at step (\d+)", err)
    assert m, err[-3000:]
    reached = int(m.group(1))
    assert 1 <= reached < 400
    assert reached in _checkpoints(wd)           # saved at the step reached, not only at 0
    assert _steps(wd) == list(range(reached + 1))  # one row per step, up to the reached one
    assert not (wd / "result.json").exists()     # stopped, not finished
    again = subprocess.run(cmd + [f"--config.train.num_steps={reached + 1}"], cwd=ROOT, env=ENV,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resumed from step {reached}" in again.stderr
    assert _steps(wd) == list(range(reached + 2))
    assert json.loads((wd / "result.json").read_text())["step"] == reached + 1
    assert (wd / "config.1.json").exists() and (wd / "config.2.json").exists()


def test_first_signal_is_recorded_and_a_second_takes_the_default_action():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    stop = StopSignals().install()
    try:
        assert stop.signum is None
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the handler runs in the main thread at the next bytecode
        assert stop.signum == signal.SIGTERM
        # both signals are back to the default action: another one ends the process at once
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        assert signal.getsignal(signal.SIGINT) == signal.SIG_DFL
    finally:
        stop.restore()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


# ------------------------------------------------------------------------------ the lock
_HOLD = """
import sys, time
from rlvr.train.workdir import WorkdirLock
WorkdirLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_a_second_launch_in_a_held_workdir_fails_naming_the_holder_and_a_dead_holder_does_not_block(tmp_path):
    wd = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(wd)], cwd=ROOT, env=ENV,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with pytest.raises(WorkdirBusy) as e:
            loop.run(_quick(), str(wd))
        msg = str(e.value)
        assert f"pid {holder.pid} on host {socket.gethostname()} since 20" in msg, msg
        assert str(wd) in msg and "another --workdir" in msg
        assert not (wd / "config.json").exists() and not (wd / "metrics.jsonl").exists()
        assert time.monotonic() - t0 < 60  # refused before building the run (no compile)
    finally:
        holder.kill()
        holder.wait()
    # the holder died without releasing: its lock file stays, naming it, but the OS released the
    # flock, so the next launch takes the workdir over
    assert str(holder.pid) in (wd / ".lock").read_text()
    run_tiny(_quick(train__num_steps=1), wd)
    assert _steps(wd) == [0, 1]
    with WorkdirLock(str(wd)):  # released at the end of the run
        pass


# ------------------------------------------------------------------------------ configs
def test_each_launch_keeps_its_config_and_a_resume_may_not_change_the_run(tmp_path, capfd):
    wd = tmp_path / "run"
    run_tiny(_quick(train__num_steps=1), wd)
    assert json.loads((wd / "config.1.json").read_text())["train"]["num_steps"] == 1
    # run-neutral changes (total steps, logging) resume freely
    run_tiny(_quick(train__num_steps=2, logging__every=2), wd)
    assert "resumed from step 1" in capfd.readouterr().err
    launch2 = (wd / "config.2.json").read_text()
    assert json.loads(launch2)["train"]["num_steps"] == 2
    assert (wd / "config.json").read_text() == launch2
    # a changed seed and learning rate are refused, each named with its old and new value, and
    # nothing in the workdir changes
    lr = _quick().optimizer.learning_rate
    with pytest.raises(WorkdirError) as e:
        run_tiny(_quick(train__num_steps=3, seed=1, optimizer__learning_rate=lr * 10), wd)
    msg = str(e.value)
    assert "seed: 0 -> 1" in msg
    assert f"optimizer.learning_rate: {lr!r} -> {lr * 10!r}" in msg
    assert "train.num_steps" not in msg and "step 2" in msg and "allow_changes" in msg
    assert not (wd / "config.3.json").exists() and (wd / "config.json").read_text() == launch2
    assert _checkpoints(wd)[-1] == 2 and _steps(wd) == [0, 1, 2]
    # named in checkpoint.allow_changes (a field, a section), the changes are accepted
    run_tiny(_quick(train__num_steps=3, seed=1, optimizer__learning_rate=lr * 10,
                    checkpoint__allow_changes=("seed", "optimizer")), wd)
    assert _steps(wd) == [0, 1, 2, 3]
    assert json.loads((wd / "config.3.json").read_text())["seed"] == 1
    # the next resume compares with the accepted config (kept in the checkpoint)
    run_tiny(_quick(train__num_steps=4, seed=1, optimizer__learning_rate=lr * 10), wd)
    assert _steps(wd) == [0, 1, 2, 3, 4]
    for p in wd.glob("config*.json"):  # the checkpoint itself knows the config it was trained with
        p.unlink()
    with pytest.raises(WorkdirError, match="seed: 1 -> 2"):
        run_tiny(_quick(train__num_steps=5, seed=2, optimizer__learning_rate=lr * 10), wd)


def test_cosine_schedule_makes_the_step_count_part_of_the_run(tmp_path):
    wd = tmp_path / "run"
    run_tiny(_quick(train__num_steps=1, optimizer__schedule="cosine"), wd)
    with pytest.raises(WorkdirError, match=r"train.num_steps: 1 -> 2"):
        run_tiny(_quick(train__num_steps=2, optimizer__schedule="cosine"), wd)


def test_starting_over_a_used_workdir_needs_overwrite(tmp_path):
    wd = tmp_path / "run"
    run_tiny(_quick(train__num_steps=2), wd)
    # resume=False would delete it silently; checkpoints off would too
    for over in (dict(checkpoint__resume=False), dict(checkpoint__every=-1)):
        with pytest.raises(WorkdirError) as e:
            run_tiny(_quick(train__num_steps=1, **over), wd)
        assert str(wd) in str(e.value) and "checkpoint.overwrite=True" in str(e.value)
        assert _steps(wd) == [0, 1, 2] and _checkpoints(wd) == [1, 2]
    run_tiny(_quick(train__num_steps=1, checkpoint__resume=False, checkpoint__overwrite=True), wd)
    assert _steps(wd) == [0, 1] and _checkpoints(wd) == [0, 1]
    assert sorted(p.name for p in wd.glob("config.*.json")) == ["config.1.json", "config.2.json"]


# ------------------------------------------------------------------------------ progress bar
def test_progress_bar_shows_phases_and_ends_full_on_an_early_stop(tmp_path, monkeypatch):
    bars = []

    class Recording(loop.tqdm):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.phases = []
            bars.append(self)

        def set_postfix_str(self, s="", refresh=True):
            self.phases.append(s)
            super().set_postfix_str(s, refresh)

    monkeypatch.setattr(loop, "tqdm", Recording)
    # the token budget stops the run after its first step of four; evaluation at the end
    run_tiny(_quick(train__num_steps=4, train__progress=True, train__token_budget=1,
                    eval__num_tasks=2, eval__every=0), tmp_path / "run")
    (bar,) = bars
    assert bar.phases[0] == "compiling" and "evaluating" in bar.phases
    assert bar.n == bar.total == 1


@pytest.mark.slow  # two processes with their own compiles, minutes on 2 shared cores
def test_multi_host_processes_stop_at_the_same_step_when_one_gets_the_signal(tmp_path):
    """2 processes (jax.distributed on localhost): SIGTERM reaches process 1 only; both stop at
    the same step, save its checkpoint together and exit 143."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    wd = tmp_path / "run"
    env = dict(ENV, XLA_FLAGS=flags_for(2))
    procs = [subprocess.Popen([sys.executable, "-m", "tests.train.preempt_worker", str(wd), port,
                               str(i), "2"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        deadline = time.monotonic() + 480
        while not any(s >= 1 for s in _steps(wd)):
            for p in procs:
                assert p.poll() is None, p.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no step logged in 480 s"
            time.sleep(0.2)
        procs[1].send_signal(signal.SIGTERM)
        errs = [p.communicate(timeout=300)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [143, 143], errs[0][-2000:] + errs[1][-2000:]
    m = re.search(r"stopped by SIGTERM at step (\d+)", errs[0])  # process 0 reports it
    assert m, errs[0][-3000:]
    reached = int(m.group(1))
    assert reached in _checkpoints(wd) and _steps(wd) == list(range(reached + 1))
