"""Multi-host with plain jax.distributed: 2 processes × 2 CPU devices on localhost (gloo) give the
same training metrics as one process with 4 devices (docs/architecture.md (B.1), §8) — the same
global batch — for each collector: groups (single-turn GRPO, full-trajectory GRPO on the multi-turn
agent kit) and pivots (PivotRL). A fast one-step variant of each collector runs in the default
suite; the two-step runs are slow."""

import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from rlvr.train.metrics import read_metrics
from tests._xla_flags import flags_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEYS = ("reward/mean", "policy/pg_loss", "policy/entropy", "policy/grad_norm", "length/mean",
        "groups/mixed_frac",  # learner (device) metrics over the global batch
        "verify/pass_rate", "verify/masked_count", "sampling/unique_ratio")  # host metrics, gathered


def _env(devices):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
               XLA_FLAGS=flags_for(devices))
    env.pop("JAX_NUM_CPU_DEVICES", None)
    return env


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _check(p, name):
    out, err = p.communicate(timeout=300) if isinstance(p, subprocess.Popen) else (p.stdout, p.stderr)
    assert p.returncode == 0, f"{name} failed:\n{err[-3000:]}"
    return out


def _two_vs_one(tmp_path, kind, steps):
    cmd = [sys.executable, "-m", "tests.train.multihost_worker", f"{kind}:{steps}"]
    ref = subprocess.run(cmd + [str(tmp_path / "single")], cwd=ROOT, env=_env(4), capture_output=True,
                         text=True, timeout=300)
    assert "DEVICES 4 PROCESSES 1" in _check(ref, "single-process run")
    port = str(_free_port())
    procs = [subprocess.Popen(cmd + [str(tmp_path / "multi"), port, str(i), "2"], cwd=ROOT, env=_env(2),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        outs = [_check(p, f"process {i}") for i, p in enumerate(procs)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all("DEVICES 4 PROCESSES 2" in o for o in outs)
    single = {r["step"]: r for r in read_metrics(str(tmp_path / "single"))}
    multi = {r["step"]: r for r in read_metrics(str(tmp_path / "multi"))}
    keys = KEYS + (("pivot/num_kept", "pivot/hinted_fraction") if kind == "pivot" else ())
    assert sorted(single) == sorted(multi) and set(range(1, steps + 1)) <= set(single)
    for step in range(1, steps + 1):
        for k in keys:
            np.testing.assert_allclose(multi[step][k], single[step][k], rtol=1e-4, atol=1e-5,
                                       err_msg=f"step {step} {k}")


@pytest.mark.slow  # three processes with their own compiles, ~100 s on 2 cores
@pytest.mark.parametrize("kind", ["text", "agent", "pivot"])
def test_two_processes_match_one_process(tmp_path, kind):
    _two_vs_one(tmp_path, kind, steps=2)


# groups in the default suite; pivots (~60 s on 2 cores) with the slow tests
@pytest.mark.parametrize("kind", ["text", pytest.param("pivot", marks=pytest.mark.slow)])
def test_two_processes_match_one_process_one_step(tmp_path, kind):
    _two_vs_one(tmp_path, kind, steps=1)
