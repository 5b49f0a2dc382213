"""A tiny PivotRL run completes through launch.py and writes metrics + the kept pivot set."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_tiny_pivotrl_through_launch(tmp_path):
    wd = tmp_path / "wd"
    cmd = [sys.executable, "launch.py", "--config=configs/pivotrl.py", f"--workdir={wd}",
           "--config.train.num_steps=2", "--config.train.sft_steps=2", "--config.eval.num_tasks=2",
           "--config.eval.samples_per_task=1", "--config.eval.every=2", "--config.pivot.num_tasks=3",
           "--config.pivot.sft_tasks=8", "--config.pivot.lambda_diff=1.0",
           "--config.pivot.selection=all", "--config.train.progress=False"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    files = os.listdir(wd)
    jsonl = [f for f in files if f.endswith(".jsonl")]
    assert jsonl, files
    rows = [json.loads(x) for x in open(wd / jsonl[0])]
    assert any("eval/success" in row for row in rows)
    assert all(v == v for row in rows for v in row.values() if isinstance(v, float))
