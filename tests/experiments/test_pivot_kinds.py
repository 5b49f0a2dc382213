"""The local block's pivots by kind of action (experiments/study/pivot_kinds.py)."""

import math

import pytest

from experiments.study import pivot_kinds
from rlvr.tasks.shop import demonstrations, generate
from tests.experiments.blocks import assert_nothing_written


def _candidates():
    tasks = generate(3, split="train", seed=11, difficulty="local3")
    out = []
    for t in tasks[1:]:  # the pool need not start at index 0
        for i, turn in enumerate(demonstrations(t, style="diverse")):
            out.append({"key": f"{t.task_id}/demo/{i}", "task_id": t.task_id, "turn_index": i,
                        "source": "demo", "mean": 1.0 if turn.action.startswith("pay") else 0.5,
                        "kept": turn.action.startswith("pay")})
    out.append({"key": "r/0", "task_id": tasks[0].task_id, "turn_index": 0, "source": "rollout",
                "mean": 0.25, "kept": True})
    return tasks, out


def test_each_candidate_is_named_by_the_demonstrations_action_at_its_turn():
    tasks, cands = _candidates()
    kinds = pivot_kinds.demo_action_kinds(cands, "local3", "diverse")
    want = [t.action.split(" ")[0] for task in tasks[1:] for t in demonstrations(task, style="diverse")]
    assert kinds == want + ["rollout"]
    got = pivot_kinds.by_kind(cands, kinds)
    assert list(got) == ["get", "add", "pay", "rollout"]
    assert got["pay"] == {"candidates": 6, "kept": 6, "probe_success": 1.0}  # 3 baskets × 2 tasks
    assert got["get"]["kept"] == 0 and got["get"]["probe_success"] == 0.5
    assert got["rollout"] == {"candidates": 1, "kept": 1, "probe_success": 0.25}


def test_a_selection_that_probes_nothing_reads_not_probed_and_an_unknown_task_is_refused(tmp_path):
    _, cands = _candidates()
    unprobed = [{k: v for k, v in c.items() if k != "mean"} for c in cands]
    kinds = pivot_kinds.demo_action_kinds(unprobed, "local3", "diverse")
    assert math.isnan(pivot_kinds.by_kind(unprobed, kinds)["pay"]["probe_success"])
    text = pivot_kinds.report([("pivot_all_equal", "w0s0", pivot_kinds.by_kind(unprobed, kinds), False),
                               ("pivotrl", "w0s1", None, False)], "full",
                              "python experiments/study/pivot_kinds.py")
    assert "| pivot_all_equal | w0s0 | pay | 6 | 6 | not probed |" in text
    assert "| pivotrl | w0s1 | selection not found |" in text
    # a task id the generator does not make (another difficulty) is named, not guessed
    with pytest.raises(ValueError, match="is not one that"):
        pivot_kinds.demo_action_kinds(cands[:1], "standard", "diverse")


def test_with_no_selection_found_nothing_is_written(tmp_path):
    """With no selection found (no work folder, none stored, no warm start to recompute it on)
    the script exits naming where it looked and leaves the committed report as it is."""
    assert_nothing_written(pivot_kinds.main, tmp_path, "pivotrl",
                           "none of the block's 1 PivotRL runs has its selection")


def test_a_run_whose_selection_is_not_here_is_read_back_from_the_last_numbers_file(tmp_path):
    """A stored selection is read on a fresh machine; a run whose selection is found nowhere
    keeps its row from the last numbers file, marked †, when it is filed under the same run
    key, and is named as not found when not."""
    import json
    import os

    from experiments.study import block_files, shop_local
    from experiments.study.records import write_record

    rec, out = tmp_path / "rec", tmp_path / "out"
    shop_local.write_block_meta(str(rec), {"scale": "full", "difficulty": "local"}, {})
    cfg = {"task.kwargs": {"difficulty": "local3", "demo_style": "diverse"}}
    _, cands = _candidates()
    for rl in (0, 1):
        write_record(shop_local.record_path(str(rec), "pivotrl", shop_local.BlockSeeds(0, rl)),
                     {"key": f"k{rl}", "config": cfg, "rows": [{"step": 0}]})
        block_files.write_selection(block_files.selection_path(str(rec), "pivotrl", f"w0s{rl}"),
                                    {"candidates": cands[rl:]})
    argv = ["--records", str(rec), "--cache", str(tmp_path / "cache"), "--workdir",
            str(tmp_path / "work"), "--out", str(out)]
    assert pivot_kinds.main(argv) == 0
    got = json.loads((out / "pivots_full_local.json").read_text())
    assert [(g["run"], g["key"]) for g in got] == [("w0s0", "k0"), ("w0s1", "k1")]
    assert got[0]["by_kind"] != got[1]["by_kind"]
    os.remove(block_files.selection_path(str(rec), "pivotrl", "w0s1"))
    assert pivot_kinds.main(argv) == 0
    assert json.loads((out / "pivots_full_local.json").read_text()) == got
    md = (out / "pivots_full_local.md").read_text()
    assert "| pivotrl | w0s1 † | pay |" in md and block_files.READ_BACK_NOTE in md
    # in the report's order of kinds, as computed, not the numbers file's sorted keys
    assert md.index("| w0s1 † | get |") < md.index("| w0s1 † | add |") < md.index("| w0s1 † | pay |")
    assert "| pivotrl | w0s0 | pay |" in md
    # filed under another key (another run): not read back
    (out / "pivots_full_local.json").write_text(json.dumps([got[0], {**got[1], "key": "other"}]))
    assert pivot_kinds.main(argv) == 0
    assert "| pivotrl | w0s1 | selection not found |" in (out / "pivots_full_local.md").read_text()
