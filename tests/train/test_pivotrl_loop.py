"""A tiny PivotRL run completes through launch.py and writes metrics + the kept pivot set."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow  # ~60 s; PivotRL through launch.py also runs in test_readme_environment
def test_tiny_pivotrl_through_launch(tmp_path):
    wd = tmp_path / "wd"
    cmd = [sys.executable, "launch.py", "--config=configs/pivotrl.py", f"--workdir={wd}",
           "--config.train.num_steps=2", "--config.train.sft_steps=2", "--config.eval.num_tasks=2",
           "--config.eval.samples_per_task=1", "--config.eval.pass_k=(1,)", "--config.eval.every=2",
           "--config.task.pool_size=3", "--config.train.sft_pool=8", "--config.pivot.selection=all",
           "--config.train.progress=False"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(x) for x in open(wd / "metrics.jsonl")]
    assert any("eval/success" in row for row in rows)
    assert all(v == v for row in rows for v in row.values() if isinstance(v, float))
    pivots = json.load(open(wd / "pivots.json"))
    assert pivots["selection"] == "all" and all(c["kept"] for c in pivots["candidates"])
    assert rows[0]["pivot/candidates"] == len(pivots["candidates"]) > 0
