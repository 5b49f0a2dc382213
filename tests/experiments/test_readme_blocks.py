"""experiments/README.md's generated local-block and modelled wall-clock blocks: read from the
committed records and result file, and the committed README holds what they write."""

import json
import os

from experiments import study_all
from experiments.study import report


def _block(tag):
    begin, end = report._markers(tag)
    with open(os.path.join(os.path.dirname(report.RESULTS), "README.md")) as f:
        text = f.read()
    return text[text.index(begin) + len(begin):text.index(end)].strip()


def test_committed_readme_blocks_are_what_from_results_writes():
    assert _block("local block") == study_all.local_block_text().strip()
    assert _block("modelled wall-clock") == study_all.wallclock_text().strip()
    with open(os.path.join(os.path.dirname(report.RESULTS), "README.md")) as f:
        assert "results/wallclock/wallclock.md" in f.read()


def test_local_block_has_a_row_per_records_folder_and_labels_quick_blocks(tmp_path):
    text = study_all.local_block_text()
    rows = [r for r in text.splitlines() if r.startswith("| `study/records/shop_local_")]
    names = sorted(n for n in os.listdir(study_all.STUDY_RECORDS) if n.startswith("shop_local_"))
    assert len(rows) == len(names) >= 1
    quick = [r for r in rows if "_quick_" in r]
    assert quick and all("pipeline check" in r for r in quick)
    assert study_all.local_block_text(str(tmp_path)).startswith("No local block")


def test_wallclock_block_ranges_over_the_grid_and_says_where_each_ratio_comes_from(tmp_path):
    cells = [{"arms": {"grpo_sync": {"throughput_ratio": 1.0},
                       "grpo_async": {"throughput_ratio": t},
                       "sao": {"throughput_ratio": 2 * t}}} for t in (1.5, 2.0, 3.0)]
    d = {"arms": ["grpo_sync", "grpo_async", "sao"], "steps": 4, "cells": cells,
         "token_ratios": {"grpo_sync": [1, 1, 1], "sao": [3.0, 2.0, 4.0]},
         "token_ratio_sources": {"sao": "a study_sao.json", "grpo_async": "no ratio: why"},
         "arm_runs": None}
    path = tmp_path / "wallclock.json"
    path.write_text(json.dumps(d))
    text = study_all.wallclock_text(str(path))
    row = {r.split(" | ")[0]: r for r in text.splitlines() if r.startswith("| GRPO-async") or r.startswith("| SAO")}
    assert "1.50 – 3.00 (median 2.00)" in row["| GRPO-async"] and "not measured" in row["| GRPO-async"]
    assert "no ratio: why" in row["| GRPO-async"]
    # SAO: wall-clock = token ratio ÷ throughput ratio, over 3, 4, 6
    assert "3.00 – 6.00 (median 4.00)" in row["| SAO"] and "0.50 – 1.00 (median 0.75)" in row["| SAO"]
    assert "a study_sao.json" in row["| SAO"]
    assert study_all.wallclock_text(str(tmp_path / "none.json")).startswith("The modelled wall-clock grid has not run")
    # a token ratio that is a bound (a SAO run never reached ℓ) marks every number drawn from it
    path.write_text(json.dumps(dict(d, token_ratio_bounds={"sao": "at least"})))
    sao = [r for r in study_all.wallclock_text(str(path)).splitlines() if r.startswith("| SAO")][0]
    assert "≥0.50 – ≥1.00 (median ≥0.75)" in sao and "| ≥3.00 |" in sao


def test_wallclock_block_names_the_scale_of_the_arms_runs(tmp_path):
    """The arms' own runs are labelled with the scale their records folder names (a quick scale
    as a pipeline check), not a fixed one."""
    runs = {"level": 0.4, "compute": {"runs": 2}, "seeds": [0],
            "arms": {"grpo_sync": {"seeds": [0], "reached": [True], "tokens": [10.0],
                                   "modelled_s": [2.0], "throughput_ratio": [1.0, 1.0, 1.0]}}}
    d = {"arms": ["grpo_sync"], "steps": 4, "cells": [], "token_ratios": {}}
    path = tmp_path / "wallclock.json"
    line = lambda: [x for x in study_all.wallclock_text(str(path)).splitlines()  # noqa: E731
                    if x.startswith("The wall-clock arms' own runs")][0]
    for scale, says in (("long512", "scale `long512`; records `experiments/study/records/wallclock_long512`"),
                        ("wallclock_quick", "scale `wallclock_quick`: a pipeline check, not a reading")):
        path.write_text(json.dumps(dict(d, arm_runs=dict(
            runs, scale=scale, records=f"experiments/study/records/wallclock_{scale.split('_')[-1]}"))))
        assert says in line()
        assert ("quick" in line()) == ("quick" in scale)
    path.write_text(json.dumps(dict(d, arm_runs=runs)))  # a file that predates the scale's record
    assert "scale not recorded in the result file" in line()
