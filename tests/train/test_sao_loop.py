"""A tiny SAO run completes through launch.py: queue metrics, critic and policy losses, finite."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_tiny_sao_through_launch(tmp_path):
    wd = tmp_path / "wd"
    cmd = [sys.executable, "launch.py", "--config=configs/sao.py", f"--workdir={wd}",
           "--config.train.num_steps=3", "--config.train.sft_steps=2", "--config.eval.num_tasks=2",
           "--config.eval.samples_per_task=1", "--config.eval.every=3", "--config.sao.num_tasks=8",
           "--config.sao.sft_tasks=8", "--config.sao.rollout_batch=4", "--config.sao.learn_batch=4",
           "--config.sao.queue_size=4", "--config.sao.max_staleness=1",
           "--config.sao.value_pretrain_steps=1", "--config.sao.freeze_attention=True",
           "--config.train.progress=False"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    jsonl = [f for f in os.listdir(wd) if f.endswith(".jsonl")]
    rows = [json.loads(x) for x in open(wd / jsonl[0])]
    steps = [row for row in rows if "queue/depth" in row]
    assert len(steps) == 3
    for row in steps:
        assert row["sample/mean_lag"] <= 1
        assert all(v == v for v in row.values() if isinstance(v, float))
    assert "critic/value_loss" in steps[-1] and "eval/success" in steps[-1]
