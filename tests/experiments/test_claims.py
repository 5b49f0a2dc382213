"""The readings-by-block table: read from result files, one row per claim and block where both
arms ran, and the committed README block matches the committed result files."""

import json
import math
import os

from experiments.study import claims, report, stats

NAN = float("nan")


def _write(path, payload):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f)


def test_readings_come_from_each_blocks_files_where_both_arms_ran(tmp_path):
    _write(str(tmp_path / "study_sao.json"), {
        "run_code_versions": ["aaaa"],
        "final": {"grpo": [0.6, 0.5, 0.7], "sao": [0.5, 0.4, NAN], "reinforce": [0.3, 0.2, 0.1]},
        "reached": {"grpo": 3, "sao": 1},
        "ratios": {"wall_ratio": [0.4, 0.3, 0.5]},
        "diffs": {"sao-reinforce": [0.15, 0.1, 0.2], "sao-sao_k1": [NAN, NAN, NAN]}})
    _write(str(tmp_path / "b" / "study_pivot.json"), {
        "run_code_versions": ["bbbb"],
        "final": {"grpo": [0.6, 0.6], "pivotrl": [0.5, 0.55], "pivot_all": [0.52, 0.5]},
        "reached": {"grpo": 2, "pivotrl": 2},
        "ratios": {"tokens_ratio": [2.0, 1.5, 3.5]},
        "diffs": {"filter_minus_all": [-0.01, -0.03, 0.04]}})
    assert claims.blocks(str(tmp_path)) == [".", "b"]
    got = {(r.claim.key, r.block): r for r in claims.read(str(tmp_path))}
    assert set(got) == {("tokens_ratio", "b"), ("filter_minus_all", "b"), ("wall_ratio", "."),
                        ("sao-reinforce", ".")}  # sao-sao_k1 never ran: no row
    wall = got["wall_ratio", "."]
    assert wall.seeds == 2 and wall.reached == (3, 1) and wall.run_code_versions == ("aaaa",)
    assert got["sao-reinforce", "."].seeds == 2 and got["sao-reinforce", "."].reached is None
    assert claims.allows(got["filter_minus_all", "b"]) == "+0.040"
    assert claims.allows(wall) == "0.50×"
    text = claims.block_text(claims.read(str(tmp_path)))
    lines = text.splitlines()
    assert len(lines) == 2 + 4
    first = [c.strip() for c in lines[2].strip("|").split("|")]  # CLAIMS order: target 1 first
    assert first[:4] == ["1. GRPO ÷ PivotRL rollout tokens to ℓ (paper: ≥ 3×)", "`results/b/`",
                         "2 (reached ℓ: grpo 2, pivotrl 2)", "2.00× [1.50, 3.50]"]
    assert first[4] == stats.verdict(2.0, 1.5, 3.5, null=1.0, target=3.0) and first[5] == "3.50×"
    assert claims.block_text([]) == "No study_pivot or study_sao result files yet."


def test_every_claim_names_a_measure_the_study_scripts_write():
    """A claim's key and arms exist in a committed result file of its script (no dead rows)."""
    seen = {}
    for b in claims.blocks(report.RESULTS):
        for s in claims.SCRIPTS:
            p = os.path.join(report.RESULTS, b, f"study_{s}.json")
            if os.path.exists(p):
                with open(p) as f:
                    d = json.load(f)
                for g in ("ratios", "diffs"):
                    seen.setdefault((s, g), set()).update(d.get(g, {}))
                seen.setdefault((s, "final"), set()).update(d.get("final", {}))
    for c in claims.CLAIMS:
        assert c.key in seen[c.script, c.group], c
        assert set(c.arms) <= seen[c.script, "final"], c
        assert math.isfinite(c.null)


def test_committed_readme_block_matches_the_committed_result_files():
    begin, end = report._markers("readings by block")
    with open(os.path.join(os.path.dirname(report.RESULTS), "README.md")) as f:
        readme = f.read()
    block = readme[readme.index(begin) + len(begin):readme.index(end)].strip()
    assert block == claims.block_text(claims.read(report.RESULTS)).strip()
