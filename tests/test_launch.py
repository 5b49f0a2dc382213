"""End-to-end smoke test of launch.py with the quickstart config at a tiny size."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_launch_quickstart_tiny(tmp_path):
    over = ["--config.model.num_layers=1", "--config.model.d_model=16", "--config.model.num_heads=2",
            "--config.model.num_kv_heads=2", "--config.model.d_ff=32", "--config.train.num_steps=2",
            "--config.train.sft_steps=2", "--config.sampling.prompts_per_step=2",
            "--config.eval.num_tasks=4", "--config.eval.every=1", "--config.checkpoint.every=1",
            "--config.train.progress=False"]
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
    cmd = [sys.executable, "launch.py", "--config=configs/quickstart.py", f"--workdir={tmp_path}"] + over
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "| success |" in p.stdout
    rows = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
    assert {r["step"] for r in rows} >= {0, 1, 2}
    last = [r for r in rows if r["step"] == 2][-1]
    for k in ("reward/mean", "policy/pg_loss", "kl/coef" if False else "policy/entropy", "eval/success",
              "time/generate_s", "time/verify_s", "time/learn_s", "throughput/tokens_per_s",
              "groups/mixed_frac", "length/mean"):
        assert k in last, k
    assert (tmp_path / "curves.png").exists() and (tmp_path / "before_after.md").exists()
    assert os.path.isdir(tmp_path / "tb")
    # unknown override fails at start, naming the key
    bad = subprocess.run(cmd[:4] + ["--config.algorithm.clip_hihg=0.3"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "clip_hihg" in bad.stderr
