"""The study's modelled wall-clock grid: every fixed cell and arm, and the reported wall-clock
ratio is the measured token ratio over the modelled throughput ratio."""

import json

from experiments.study import wallclock


def test_grid_table_and_ratio_identity(tmp_path):
    prof = dict(prompt_tokens=[20, 30, 25], sampled_tokens=[10, 40, 20], tool_calls=[1, 4, 2],
                max_staleness=2, source="test")
    profiles = {"grpo": dict(prof, group_size=2, prompts_per_step=2),
                "sao": dict(prof, group_size=1, prompts_per_step=4)}
    (tmp_path / "p.json").write_text(json.dumps(profiles))
    (tmp_path / "sao.json").write_text(json.dumps({"ratios": {"tokens_ratio": [0.5, 0.25, 1.0]}}))
    table = wallclock.main(["--profiles", str(tmp_path / "p.json"), "--token-ratios",
                            str(tmp_path / "sao.json"), "--steps", "2", "--out", str(tmp_path)])
    rows = [r for r in table.splitlines() if r.startswith("| ") and r[2].isdigit()]
    assert len(rows) == 3 * 3 * 2 * 2
    out = json.loads((tmp_path / "wallclock.json").read_text())
    assert out["token_ratios"]["sao"] == [2.0, 1.0, 4.0]  # GRPO ÷ SAO inverted
    for cell, row in zip(out["cells"], rows):
        assert cell["arms"]["grpo_sync"]["throughput_ratio"] == 1.0
        thr = cell["arms"]["sao"]["throughput_ratio"]
        assert f"{2.0 / thr:.2f} [{1.0 / thr:.2f}, {4.0 / thr:.2f}]" in row
    # a heavier tail never speeds up the synchronous arm's modelled clock
    by = {(c["latency_x"], c["tail"], c["slots"], c["topology"]): c for c in out["cells"]}
    for (lx, tail, slots, topo), c in by.items():
        if tail == 1.2:
            light = by[(lx, 2.5, slots, topo)]["arms"]["grpo_sync"]["modelled_s"]
            assert c["arms"]["grpo_sync"]["modelled_s"] >= light


def test_profiles_from_run_records(tmp_path):
    def rec(g, p, turns, tokens):
        return {"config": {"algorithm.group_size": g, "sampling.prompts_per_step": p,
                           "rollout.max_staleness": 2},
                "rows": [{"step": 0, "cost/turns": 0.0},
                         {"step": 2, "cost/turns": turns, "cost/sampled_tokens": tokens,
                          "cost/prompt_tokens": 10.0 * turns}]}

    paths = []
    for name, r in (("g", rec(4, 2, 16 * 3, 16 * 30)), ("s", rec(1, 8, 16 * 5, 16 * 20))):
        paths.append(str(tmp_path / f"{name}.json"))
        (tmp_path / f"{name}.json").write_text(json.dumps(r))
    got = wallclock.record_profiles(paths)
    assert got["grpo"].sampled_tokens == (30,) and got["grpo"].tool_calls == (2,)
    assert got["sao"].tool_calls == (4,) and got["sao"].prompt_tokens == (10,)
    assert got["sao"].group_size == 1 and got["grpo"].prompts_per_step == 2
