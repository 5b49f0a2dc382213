"""README's "Add an environment" example trains its environment with PivotRL and SAO through
launch.py: the README's kit module and config file, at a tiny size."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}")
    end = text.index("\n## ", start + 1)
    return text[start:end]


@pytest.fixture(scope="module")
def counter_module(tmp_path_factory):
    text = _section((ROOT / "README.md").read_text(encoding="utf-8"), "Add an environment")
    kit_code = re.search(r"^```python\n(.*?)^```", text, re.S | re.M).group(1)
    config_code = re.search(r"`configs/my_counter\.py`:\n\n```\n(.*?)^```", text, re.S | re.M).group(1)
    d = tmp_path_factory.mktemp("counter")
    (d / "my_counter.py").write_text(kit_code)
    (d / "my_counter_config.py").write_text(config_code)
    return d


# slow: the default suite runs both of the section's launch commands verbatim, at a tiny size
# (tests/test_readme_commands.py); these longer runs also check what each run wrote
@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["pivotrl", "sao"])
def test_readme_environment_trains_through_launch(counter_module, tmp_path, algorithm):
    wd = tmp_path / "wd"
    cmd = [sys.executable, "launch.py", f"--config={counter_module / 'my_counter_config.py'}:{algorithm}",
           f"--workdir={wd}", "--config.train.num_steps=2", "--config.train.sft_steps=20",
           "--config.eval.num_tasks=4", "--config.eval.every=2", "--config.train.progress=False",
           "--config.logging.plot=False", "--config.checkpoint.every=-1"]
    if algorithm == "sao":
        cmd += ["--config.sampling.prompts_per_step=4", "--config.rollout.producer_batch=4",
                "--config.algorithm.critic_warmup_steps=1"]
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(counter_module), str(ROOT)]))
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(x) for x in open(wd / "metrics.jsonl")]
    assert [row["step"] for row in rows if "policy/loss" in row] == [1, 2]
    assert all(row["verify/env_error_rate"] == 0.0 for row in rows if "verify/env_error_rate" in row)
    if algorithm == "pivotrl":
        assert json.load(open(wd / "pivots.json"))["candidates"]
    else:
        assert "queue/gets" in rows[-1]
