"""Every study script runs end to end with --quick into a temporary folder, writes its result
files from the numbers (with code version and cache provenance), and a second invocation takes
every run from the cache (keyed by code version + config) and regenerates the same files."""

import json
import os

import pytest

from experiments import study_all
from rlvr.version import code_version

SCRIPTS = ("testbed", "calibrate", "lr", "pivot", "sao", "summary")


@pytest.mark.slow
def test_every_study_script_runs_quick_and_reruns_from_the_cache(tmp_path):
    out, wd = str(tmp_path / "results"), str(tmp_path / "work")
    args = ["--quick", "--seeds", "2", "--out", out, "--workdir", wd]
    study_all.main(args)
    for name in SCRIPTS:
        md = os.path.join(out, f"study_{name}.md")
        assert os.path.exists(md), name
        with open(md) as f:
            text = f.read()
        assert f"`{code_version()}`" in text and "## Provenance" in text, name
        with open(os.path.join(out, f"study_{name}.json")) as f:
            json.load(f)
    for name in ("testbed", "calibrate", "lr", "pivot", "sao"):
        assert os.path.exists(os.path.join(out, f"study_{name}.png")), name
    with open(os.path.join(out, "study_lr.json")) as f:
        chosen = json.load(f)["chosen"]
    assert set(chosen) == {"grpo", "pivotrl", "sao", "reinforce"}
    with open(os.path.join(out, "study_pivot.md")) as f:
        first = f.read()
    assert "0 from the cache" in first and "Target 1" in first and "Target 2" in first
    with open(os.path.join(out, "study_sao.md")) as f:
        assert "Target 3" in f.read()
    # again: every run comes from the cache, the files are regenerated
    study_all.main(args + ["--skip", "study_testbed,study_calibrate"])
    with open(os.path.join(out, "study_pivot.md")) as f:
        again = f.read()
    assert "0 computed now" in again and "From the cache:" in again
    with open(os.path.join(out, "study_summary.md")) as f:
        summary = f.read()
    assert "PivotRL reaches GRPO's plateau" in summary and "CPU-hours" in summary
