"""The warm-start copying diagnosis: token kinds of checkout actions, their alignment with the SFT
loss, and the report from a block's folders."""

import json
import os

import pytest

from experiments.study import copying, shop_local
from tests.experiments.blocks import assert_nothing_written


def test_token_kinds_of_each_action():
    assert copying.token_kinds("get b\n") == ["other"] * 4 + ["item letter, basket 1", "other"]
    assert copying.token_kinds("add b1\n", basket=2) == (["other"] * 4 + ["item letter, baskets 2-3",
                                                                          "quantity", "other"])
    assert copying.token_kinds("pay 13\n") == ["other"] * 4 + ["payment amount"] * 2 + ["other"]
    assert copying.token_kinds("pay 7+5\n") == ["other"] * 4 + ["payment amount"] * 3 + ["other"]


def test_kinds_cover_exactly_the_tokens_sft_trains_on():
    """Kinds sit on the tokens the SFT loss covers (the actions), None elsewhere, and the baskets
    advance at each payment."""
    from experiments.study import arms
    from rlvr.tasks.shop import generate
    from rlvr.train.setup import build_kit_checked, build_tokenizer
    from rlvr.train.sft import demo_stream

    c = arms.base_config("grpo", 0, shop_local.local_scale("quick", "local"))
    kit = build_kit_checked(c)
    tok = build_tokenizer(c, kit)
    tasks = generate(4, split="eval", seed=1, difficulty=shop_local.LOCAL_DIFFICULTY)
    ids, kinds = copying.demo_rows(tasks, tok)
    for t, row, k in zip(tasks, ids, kinds):
        want, mask = demo_stream(kit, t, tok)
        assert row == want and [x is not None for x in k] == [m > 0 for m in mask]
        firsts = sum(x == "item letter, basket 1" for x in k)
        assert 2 * 3 <= firsts <= 2 * 5 and sum(x == "item letter, baskets 2-3" for x in k) >= 2 * 6


def test_report_reads_the_blocks_folders_and_names_missing_ones(tmp_path):
    from experiments.study import arms, runner
    from rlvr.models.hf import save_pretrained
    from rlvr.train.setup import build_kit_checked, build_policy, build_tokenizer

    sc = shop_local.local_scale("quick", "local")
    c = arms.base_config("grpo", 0, sc)
    tok = build_tokenizer(c, build_kit_checked(c))
    cache = tmp_path / "cache"
    save_pretrained(build_policy(c, tok.vocab_size), str(cache / "warm" / "r1"))
    (cache / "warm" / "r1" / "warm.json").write_text("{}")
    rnd = {"warm_start": "r1", "round": 1, "recipe": "curriculum", "sft_steps": 60}
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "block.json").write_text(json.dumps({"settings": {}, "premise": {"warm0": {"rounds": [rnd]}}}))
    assert copying.main(["--quick", "--cache", str(cache), "--records", str(rec),
                         "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "copying_quick_local.md").read_text()
    # the curriculum stage was never computed here: named, not recomputed
    assert "| warm0 | curriculum stage (one basket) | not in the cache |" in md
    row = [ln for ln in md.splitlines() if ln.startswith("| warm0 | curriculum round 1")]
    assert len(row) == 1 and "n/a" not in row[0]
    got = json.loads((tmp_path / "out" / "copying_quick_local.json").read_text())
    assert got[1]["nll_by_kind"]["item letter, basket 1"]["nll"] > 1.0  # a random init guesses
    key = runner.content_key(shop_local.curriculum_spec(c, 0))
    assert got[0]["folder"] == key and got[0]["nll_by_kind"] is None
    assert not os.path.exists(cache / "warm" / key)
    with pytest.raises(SystemExit, match="no block"):
        copying.main(["--quick", "--records", str(tmp_path / "none")])


def test_report_adds_each_finished_runs_final_policy_and_names_missing_ones(tmp_path):
    from experiments.study import arms
    from experiments.study.records import write_record
    from rlvr.models.hf import save_pretrained
    from rlvr.train.setup import build_kit_checked, build_policy, build_tokenizer

    sc = shop_local.local_scale("quick", "local")
    c = arms.base_config("grpo", 0, sc)
    tok = build_tokenizer(c, build_kit_checked(c))
    rec, work = tmp_path / "rec", tmp_path / "work"
    rec.mkdir()
    (rec / "block.json").write_text(json.dumps({"settings": {}, "premise": {"warm0": {"rounds": []}}}))
    rows = [{"step": 0, "eval/success": 0.0}, {"step": 7, "eval/success": 0.0}]
    write_record(shop_local.record_path(str(rec), "pivotrl", shop_local.BlockSeeds(0, 1)),
                 {"key": "k_pivot", "label": "local/pivotrl/w0s1", "rows": rows})
    write_record(shop_local.record_path(str(rec), "grpo", shop_local.BlockSeeds(0, 1)),
                 {"key": "k_grpo", "label": "local/grpo/w0s1", "rows": rows})
    save_pretrained(build_policy(c, tok.vocab_size), str(work / "k_pivot" / "export"))
    (work / "k_pivot" / "export" / "rlvr_export.json").write_text("{}")
    assert copying.main(["--quick", "--records", str(rec), "--workdir", str(work),
                         "--out", str(tmp_path / "out")]) == 0
    got = json.loads((tmp_path / "out" / "copying_quick_local.json").read_text())
    # runs in (warm start, RL seed, arm) order: GRPO first; its export is missing, so named
    assert [(g["stage"], g["folder"]) for g in got] == [
        ("grpo w0s1 after RL (7 steps)", "k_grpo"), ("pivotrl w0s1 after RL (7 steps)", "k_pivot")]
    assert got[0]["nll_by_kind"] is None
    assert got[1]["nll_by_kind"]["payment amount"]["nll"] > 1.0  # a random init
    md = (tmp_path / "out" / "copying_quick_local.md").read_text()
    assert "| warm0 | grpo w0s1 after RL (7 steps) | not in the cache |" in md
    assert "†" not in md
    # on a machine without the PivotRL run's export its row is read back from the last numbers
    # file, marked; the GRPO run's, never computed, stays named; with nothing computed here at
    # all the committed report is left as it is
    import shutil

    from experiments.study import block_files

    (work / "k_other" / "export").mkdir(parents=True)  # another policy, computed here
    write_record(shop_local.record_path(str(rec), "grpo", shop_local.BlockSeeds(0, 2)),
                 {"key": "k_other", "label": "local/grpo/w0s2", "rows": rows})
    save_pretrained(build_policy(c, tok.vocab_size), str(work / "k_other" / "export"))
    (work / "k_other" / "export" / "rlvr_export.json").write_text("{}")
    shutil.rmtree(work / "k_pivot" / "export")
    assert copying.main(["--quick", "--records", str(rec), "--workdir", str(work),
                         "--out", str(tmp_path / "out")]) == 0
    again = json.loads((tmp_path / "out" / "copying_quick_local.json").read_text())
    assert again[:2] == got and again[2]["folder"] == "k_other"
    md = (tmp_path / "out" / "copying_quick_local.md").read_text()
    assert "| warm0 | pivotrl w0s1 after RL (7 steps) † |" in md and block_files.READ_BACK_NOTE in md
    assert "| warm0 | grpo w0s1 after RL (7 steps) | not in the cache |" in md
    shutil.rmtree(work / "k_other" / "export")
    with pytest.raises(SystemExit, match="none of the block's 3 policies"):
        copying.main(["--quick", "--records", str(rec), "--workdir", str(work),
                      "--out", str(tmp_path / "out")])
    assert json.loads((tmp_path / "out" / "copying_quick_local.json").read_text()) == again


def test_with_no_policy_found_nothing_is_written(tmp_path):
    """A fresh clone has neither the study cache nor the runs' exports: the script exits naming
    them and leaves the committed report as it is."""
    assert_nothing_written(copying.main, tmp_path, "grpo", "none of the block's 1 policies is in --cache")
