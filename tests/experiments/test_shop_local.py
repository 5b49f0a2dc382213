"""The local checkout block: a config selecting the local variant trains one step; the block's
arms differ from their bases in what their names say; the primary endpoint reads training turns."""

import dataclasses
import hashlib
import json
import math
import os

import pytest

from experiments.study import shop_local, stats
from rlvr.train.metrics import read_metrics
from tests.train.tiny import run_tiny, tiny_agent_config


def test_local_variant_config_trains_one_step(tmp_path):
    c = tiny_agent_config("shop_pivotrl", train__num_steps=1, eval__every=1)
    c.task.kwargs.difficulty = "local"
    c.pivot.selection = "all"
    r, result = run_tiny(c, tmp_path)
    assert all(t.environment_snapshot["env_version"] == "shop-local/1" for t in r.collector.pool)
    rows = read_metrics(str(tmp_path))
    assert any(row.get("step") == 1 for row in rows) and result is not None


@pytest.mark.slow
def test_three_basket_variant_config_trains_one_step(tmp_path):
    c = tiny_agent_config("shop_grpo", train__num_steps=1, eval__every=1)
    c.task.kwargs.difficulty = "local3"
    c.model.max_seq_len = shop_local.LOCAL_SEQ_LEN
    c.rollout.max_turns = shop_local.LOCAL_MAX_TURNS
    r, result = run_tiny(c, tmp_path)
    assert all(t.environment_snapshot["env_version"] == "shop-local-baskets/1" for t in r.evaluator.tasks)
    rows = read_metrics(str(tmp_path))
    assert any(row.get("step") == 1 for row in rows) and result is not None


def test_block_sequence_length_fits_a_full_three_basket_demonstration():
    """The block's max_seq_len holds the longest demonstration (measured: 402 tokens) with
    room for longer policy actions, and is not far above it; its turn limit holds the longest
    episode."""
    from experiments.study import arms
    from rlvr.tasks.shop import DIFFICULTIES, demonstrations, generate, render_episode
    from rlvr.train.setup import build_kit_checked, build_tokenizer

    sc = shop_local.local_scale("full", "local")
    c = arms.base_config("grpo", 0, sc)
    tok = build_tokenizer(c, build_kit_checked(c))
    longest = max(len(tok.encode(render_episode(t, demonstrations(t))))
                  for t in generate(300, split="train", seed=0, difficulty="local3"))
    assert 360 <= longest <= c.model.max_seq_len <= 1.3 * longest
    assert c.rollout.max_turns == DIFFICULTIES["local3"].max_turns == 34
    assert shop_local.local_scale("quick", "local")["model"]["max_seq_len"] == shop_local.LOCAL_SEQ_LEN


def test_block_arms():
    sc = shop_local.local_scale("full", "local")
    assert sc["difficulty"] == "local3" and sc["eval_tasks"] == 512
    assert len(sc["warm_seeds"]) * len(sc["rl_seeds"]) == 6
    cfg = {n: shop_local.arm_config(n, 0, sc, warm="/w", lr=3e-5) for n in shop_local.ARM_NAMES}
    steps = round(sc["budget"]["pivot"] / sc["tokens_per_step"]["pivotrl"])
    assert cfg["pivot_all_equal"].pivot.selection == "all"
    for n in ("pivotrl", "pivot_all_equal", "pivot_exact", "pivot_rollout"):  # equal training samples
        assert cfg[n].train.num_steps == steps == 600 and cfg[n].train.token_budget == 0
    assert cfg["grpo"].train.token_budget == 900_000
    assert cfg["pivot_exact"].pivot.reward == "exact"
    assert cfg["pivot_rollout"].pivot.candidates == "demo+rollout" and cfg["pivot_rollout"].pivot.reprofile_every > 0
    assert cfg["pivotrl"].pivot.candidates == "demo"
    # early-dense evaluations: 10 in the first tenth of the planned steps, then every eval.every
    assert (cfg["pivotrl"].eval.dense_steps, cfg["pivotrl"].eval.dense_every) == (60, 6)
    assert (cfg["grpo"].eval.dense_steps, cfg["grpo"].eval.dense_every) == (15, 1)
    assert all(c.eval.dense_every < c.eval.every for c in cfg.values())
    from rlvr.train.config import validate_config

    validate_config(cfg["pivotrl"])
    assert shop_local.local_scale("full", "standard")["difficulty"] == "standard"


def test_every_block_arm_and_the_control_keep_kv_caches_across_turns():
    from rlvr.train.config import validate_config

    for difficulty in ("local", "standard"):
        sc = shop_local.local_scale("full", difficulty)
        for n in shop_local.ARM_NAMES:
            c = shop_local.arm_config(n, 0, sc, warm="/w", lr=3e-5)
            assert c.rollout.kv_reuse, (difficulty, n)
            validate_config(c)


def _rec(turns, success):
    return {"rows": [{"step": i, "eval/success": s, "cost/turns": t, "cost/sampled_tokens": t}
                     for i, (t, s) in enumerate(zip(turns, success))]}


def test_primary_endpoint_ratio_of_turns():
    # plateaus 0.8 (GRPO) and 0.9 (PivotRL): level 0.72, crossed (linear interpolation) at
    # 200 + 200 · 0.42 / 0.5 = 368 GRPO turns and 100 · 0.72 / 0.9 = 80 PivotRL turns
    g = _rec([0, 200, 400, 600, 800], [0.0, 0.3, 0.8, 0.8, 0.8])
    p = _rec([0, 100, 200, 300, 400], [0.0, 0.9, 0.9, 0.9, 0.9])
    ep = shop_local.primary_endpoint([g, g], [p, p])
    assert math.isclose(ep.ratio, 368 / 80, rel_tol=1e-6)
    assert math.isclose(ep.per_run[0][0], 368, rel_tol=1e-6) and ep.per_run[0][2] == "exact"
    never = _rec([0, 100, 200, 300, 400], [0.0, 0.1, 0.1, 0.1, 0.1])  # lower plateau 0.1
    assert shop_local.primary_endpoint([g], [never]).per_run[0][2] == "exact"



def test_an_arm_that_does_not_learn_gives_a_bound_at_the_other_arms_level():
    """GRPO flat at its start (no successful episode to learn from): the level is 0.9 × PivotRL's
    plateau, GRPO never reaches it, and GRPO ÷ PivotRL is "at least" its total over PivotRL's
    turns to the level, not a ratio of two zero costs at the start."""
    flat = _rec([0, 200, 400, 600, 800], [0.0, 0.0, 0.02, 0.0, 0.01])  # plateau 0.01 < 0 + MIN_GAIN
    p = _rec([0, 100, 200, 300, 400], [0.0, 0.9, 0.9, 0.9, 0.9])
    assert shop_local.endpoint_level(*(stats.curve(r, one_time="exclude") for r in (flat, p))) == (
        pytest.approx(0.81), "pivotrl")
    ep = shop_local.primary_endpoint([flat], [p])
    assert ep.per_run[0][2] == "at least" and ep.levels[0][1] == "pivotrl"
    assert math.isclose(ep.per_run[0][0], 800) and math.isclose(ep.per_run[0][1], 90, rel_tol=1e-6)
    # and the other way round: PivotRL flat, GRPO learned: "at most"
    g = _rec([0, 200, 400, 600, 800], [0.0, 0.3, 0.8, 0.8, 0.8])
    assert shop_local.primary_endpoint([g], [flat]).per_run[0][2] == "at most"
    # neither learned: no level, no ratio
    ep = shop_local.primary_endpoint([flat], [flat])
    assert ep.levels[0][1] == "neither" and math.isnan(ep.levels[0][0])
    assert ep.per_run[0][2] == "unknown" and math.isnan(ep.ratio)
    # learning is measured from the start: a pair starting at 0.3 that ends at 0.33 did not learn
    up = _rec([0, 100, 200, 300, 400], [0.3, 0.32, 0.33, 0.33, 0.33])
    assert shop_local.primary_endpoint([up], [up]).levels[0][1] == "neither"


def test_endpoint_text_marks_a_bound_and_gives_one_pair_no_interval():
    """One pair whose PivotRL run never reached ℓ: "at most" its ratio, with no interval (not a
    degenerate [x, x]); two exact pairs: the geometric mean with its t-interval; no pair: n/a."""
    g = _rec([0, 200, 400, 600, 800], [0.0, 0.3, 0.8, 0.8, 0.8])
    flat = _rec([0, 100, 200, 300, 400], [0.0, 0.0, 0.02, 0.0, 0.01])
    p = _rec([0, 100, 200, 300, 400], [0.0, 0.9, 0.9, 0.9, 0.9])
    ep = shop_local.primary_endpoint([g, flat], [flat, flat])  # the second pair: neither learned
    assert (ep.pairs, ep.kind) == (1, "at most")
    text = shop_local.endpoint_text(ep.ratio, ep.lo, ep.hi, ep.pairs, ep.kind)
    assert text == f"at most {ep.ratio:.3f}× (one pair: no interval)" and "[" not in text
    ep = shop_local.primary_endpoint([g, g], [p, p])
    assert (ep.pairs, ep.kind) == (2, "exact")
    assert shop_local.endpoint_text(ep.ratio, ep.lo, ep.hi, ep.pairs, ep.kind) == "4.600× [4.600, 4.600]"
    ep = shop_local.primary_endpoint([flat], [flat])
    assert shop_local.endpoint_text(ep.ratio, ep.lo, ep.hi, ep.pairs, ep.kind) == "n/a"


def test_block_pairs_the_endpoints_runs_by_seeds_not_by_position():
    # GRPO's run of seeds (0, 0) is missing: its PivotRL twin is left out, and (0, 1) pairs with (0, 1)
    g = _rec([0, 200, 400, 600, 800], [0.0, 0.3, 0.8, 0.8, 0.8])
    p = _rec([0, 100, 200, 300, 400], [0.0, 0.9, 0.9, 0.9, 0.9])
    slow = _rec([0, 400, 800, 1200, 1600], [0.0, 0.9, 0.9, 0.9, 0.9])
    S = shop_local.BlockSeeds
    runs = (shop_local.BlockRun("pivotrl", S(0, 0), slow), shop_local.BlockRun("grpo", S(0, 1), g),
            shop_local.BlockRun("pivotrl", S(0, 1), p))
    block = shop_local.Block(settings={"difficulty": "local3", "scale": "full", "level": 0.9,
                                       "learning_rates": {"grpo": 1e-4}}, premise={}, runs=runs)
    grpo, piv = block.paired("grpo", "pivotrl")
    assert grpo == [g] and piv == [p]
    ep = shop_local.block_report(block)[1]["primary_endpoint"]
    assert len(ep["per_run"]) == 1 and math.isclose(ep["ratio"], 368 / 80, rel_tol=1e-6)

def test_seeds_vary_the_warm_start_and_the_held_out_set_and_key():
    """Two runs of the block differ in warm start (warm index) and in held-out set and key (run
    seed), and both enter the cache keys; the same seeds give the same configs and keys."""
    from experiments.study import arms, runner

    sc = shop_local.local_scale("full", "local")
    seeds = shop_local.block_seeds(sc)
    assert len(seeds) == 6 and len({b.seed for b in seeds}) == 6
    assert len({b.eval_seed for b in seeds}) == 6
    cfgs = [shop_local.arm_config("grpo", b.seed, sc, warm=f"/w{b.warm}", lr=1e-4) for b in seeds]
    assert [c.eval.seed for c in cfgs] == [b.eval_seed for b in seeds]
    assert len({runner.run_key(c, 32) for c in cfgs}) == 6
    # the arms of one seed share its held-out set (paired comparisons)
    assert shop_local.arm_config("pivotrl", seeds[1].seed, sc, warm="/w0", lr=3e-5).eval.seed == seeds[1].eval_seed
    # warm starts: the SFT seed is the warm index, and it keys the warm-start cache
    specs = {w: runner.warm_spec(arms.base_config("grpo", w, sc), w) for w in sc["warm_seeds"]}
    assert specs[0]["seed"] != specs[1]["seed"]
    assert runner.content_key(specs[0]) != runner.content_key(specs[1])
    # reproducible: the same seed gives the same eval seed, config and keys
    again = shop_local.arm_config("grpo", seeds[0].seed, sc, warm="/w0", lr=1e-4)
    assert runner.run_key(again, 32) == runner.run_key(cfgs[0], 32)
    assert arms.eval_seed(seeds[0].seed) == seeds[0].eval_seed
    assert runner.content_key(runner.warm_spec(arms.base_config("grpo", 0, sc), 0)) == \
        runner.content_key(specs[0])


def test_scales_without_seed_eval_keep_one_held_out_set():
    from experiments.study import arms

    sc = arms.scale("long512")
    assert not sc.get("seed_eval")
    assert {arms.base_config("grpo", s, sc).eval.seed for s in (0, 1, 2)} == {arms.SHARED_EVAL_SEED}
    with pytest.raises(ValueError, match="warm"):
        shop_local.BlockSeeds(-1, 0)


def _block_rec(turns, success, *, probe_turns=0.0, probe_tokens=0.0, probe_wall_s=None, seed=0):
    """A run record whose step-0 row carries a one-time cost (the loop charges it to the first
    step, so every later cumulative cost includes it)."""
    rows = []
    for i, (t, s) in enumerate(zip(turns, success)):
        row = {"step": i, "eval/success": s, "cost/turns": t + probe_turns,
               "cost/sampled_tokens": 10.0 * t + probe_tokens, "cost/prompt_tokens": 0.0,
               "time/step_s": 0.5, "time": 1.7e9 + i, "length/mean": 3.0}
        if i == 0:
            row.update({"cost/turns": probe_turns, "cost/sampled_tokens": probe_tokens,
                        "pivot/probe_turns": probe_turns, "pivot/probe_tokens": probe_tokens})
        rows.append(row)
    rec = {"key": f"k{seed}", "label": "x", "code_version": "abc", "config": {"eval.seed": seed},
           "rows": rows, "result": {"history": rows, "step": len(rows) - 1}, "wall_s": 36.0,
           "cpu_s": 72.0, "model": "/tmp/m", "from_cache": False}
    if probe_wall_s is not None:
        rec["probe_wall_s"] = probe_wall_s
    return rec


def _write_block(folder):
    from experiments.study.records import write_record

    g = [0, 200, 400, 600, 800]
    prem = {"pay_right": {"reads_first": 1.0, "interleaved": 0.98}, "payments": {"reads_first": 50,
            "interleaved": 40}, "difference": 0.02, "tolerance": 0.05, "agree": True}
    shop_local.write_block_meta(str(folder), {"scale": "quick", "difficulty": "local",
                                              "learning_rates": shop_local.declared_learning_rates("quick"),
                                              "level": 0.9}, {"warm0": prem})
    for rl in (0, 1):
        bs = shop_local.BlockSeeds(0, rl)
        recs = {"grpo": _block_rec(g, [0.0, 0.3, 0.8, 0.8, 0.8], seed=rl)}
        for arm in shop_local.ARM_NAMES[1:]:
            recs[arm] = _block_rec([0, 100, 200, 300, 400], [0.0, 0.9, 0.9, 0.9, 0.85 + 0.05 * rl],
                                   probe_turns=500.0, probe_tokens=3000.0, probe_wall_s=12.0, seed=rl)
        for arm, rec in recs.items():
            write_record(shop_local.record_path(str(folder), arm, bs), rec)


def test_report_prints_the_probe_as_a_one_time_cost_outside_the_training_turns(tmp_path):
    _write_block(tmp_path)
    md, numbers = shop_local.block_report(shop_local.load_block(str(tmp_path)))
    line = [x for x in md.splitlines() if x.startswith("- one-time cost, `pivotrl`")]
    assert line == ["- one-time cost, `pivotrl` (mean over 2 runs): 3000 rollout tokens, 500 turns, "
                    "0 prompt tokens, 12.0 s wall-clock"]
    assert not any(x.startswith("- one-time cost, `grpo`") for x in md.splitlines())
    # the endpoint counts training turns only: 80 PivotRL turns to the level, not 580
    per_run = numbers["primary_endpoint"]["per_run"]
    assert [round(p) for _, p, _ in per_run] == [80, 80]
    assert numbers["runs"]["pivotrl/w0s0"]["training_turns"] == 400
    assert numbers["runs"]["pivotrl/w0s0"]["one_time_turns"] == 500
    assert "| pivotrl | w0s0 | 0 | 0.000 | 0.850 | 0.883 | 4 | 400 | 4000 | 5 | 500 |" in md


def test_the_probe_wall_clock_is_the_mean_of_the_runs_that_recorded_it(tmp_path):
    """A run whose probing invocation was killed before it saved its times has no probe wall-clock;
    the mean is over the runs that have one and the line says so, instead of none at all."""
    from experiments.study.records import read_record, write_record

    _write_block(tmp_path)
    path = shop_local.record_path(str(tmp_path), "pivotrl", shop_local.BlockSeeds(0, 1))
    rec = read_record(path)
    del rec["probe_wall_s"]
    write_record(path, rec)
    md, numbers = shop_local.block_report(shop_local.load_block(str(tmp_path)))
    line = [x for x in md.splitlines() if x.startswith("- one-time cost, `pivotrl`")]
    assert line == ["- one-time cost, `pivotrl` (mean over 2 runs; wall-clock over the 1 that recorded "
                    "it): 3000 rollout tokens, 500 turns, 0 prompt tokens, 12.0 s wall-clock"]
    assert numbers["one_time_cost"]["pivotrl"]["wall_s_runs"] == 1
    assert numbers["one_time_cost"]["pivotrl"]["runs"] == 2


def test_an_exploratory_difference_over_one_pair_has_no_interval(tmp_path):
    """One paired run gives a difference but no spread: the report prints the point and says so,
    not a zero-width interval."""
    import os

    _write_block(tmp_path)
    os.remove(shop_local.record_path(str(tmp_path), "pivot_exact", shop_local.BlockSeeds(0, 1)))
    md, numbers = shop_local.block_report(shop_local.load_block(str(tmp_path)))
    row = [x for x in md.splitlines() if x.startswith("| pivot_exact − pivotrl")]
    assert row == ["| pivot_exact − pivotrl | +0.000 | +0.000 (one pair: no interval) |"]
    assert numbers["exploratory"]["pivot_exact"]["per_run"] == [0.0]


def test_run_numbers_read_start_steps_reward_tenths_and_wall_hours():
    """A run's row: success at step 0, its last step, the mean training reward over its first and
    last tenth of steps (a tenth of 20 rows is 2), and its wall-hours."""
    rec = _block_rec([0, 100, 200, 300, 400], [0.1, 0.2, 0.3, 0.4, 0.5])
    rec["rows"] = rec["rows"] + [{"step": 4 + i, "reward/mean": float(i), "cost/turns": 400.0}
                                 for i in range(1, 21)]
    rec["wall_s"] = 5400.0
    r = shop_local.run_numbers(rec)
    assert r["start_success"] == 0.1 and r["final_success"] == 0.5 and r["steps"] == 24
    assert r["reward_first"] == 1.5 and r["reward_last"] == 19.5 and r["wall_h"] == 1.5
    assert shop_local.pivots_text(r) == "—"  # no pivot selection: a GRPO run
    rec["rows"][0].update({"pivot/kept": 3.0, "pivot/candidates": 10.0})
    assert shop_local.pivots_text(shop_local.run_numbers(rec)) == "3 / 10"
    # a run with no step-0 evaluation has no start
    rec["rows"] = [x for x in rec["rows"] if x["step"] != 0]
    assert math.isnan(shop_local.run_numbers(rec)["start_success"])


def test_report_regenerates_from_the_compressed_records(tmp_path):
    """The report is a function of the stored records: written twice, the files are the same bytes;
    the command line's --from-records writes the same tables as the run-time report."""
    _write_block(tmp_path / "a")
    _write_block(tmp_path / "b")
    for name in sorted(p.name for p in (tmp_path / "a").iterdir()):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    block = shop_local.load_block(str(tmp_path / "a"))
    assert len(block.runs) == 10 and block.runs[0].arm == "grpo"
    md, _ = shop_local.write_report(block, str(tmp_path / "out"))
    assert shop_local.main(["--quick", "--from-records", "--records", str(tmp_path / "b"),
                            "--out", str(tmp_path / "out2")]) == 0
    assert open(md).read() == (tmp_path / "out2" / "shop_local_quick_local.md").read_text()


def test_stored_record_keeps_curves_and_drops_the_rest():
    from experiments.study import records, stats

    rec = _block_rec([0, 100, 200], [0.0, 0.5, 0.7], probe_turns=5.0, probe_tokens=9.0, probe_wall_s=1.0)
    back = records.stored(rec)
    assert "model" not in back and "history" not in back["result"] and back["probe_wall_s"] == 1.0
    assert all("time" not in r and "length/mean" not in r for r in back["rows"])
    for k in ("turns", "tokens", "success", "wall_s"):
        assert list(stats.curve(back)[k]) == list(stats.curve(rec)[k])
    assert stats.one_time_cost(back) == stats.one_time_cost(rec)


def test_read_header_is_the_stored_record_without_its_rows(tmp_path):
    import gzip

    from experiments.study import records

    path = str(tmp_path / "r.jsonl.gz")
    records.write_record(path, _block_rec([0, 100], [0.0, 0.5]))
    whole = records.read_record(path)
    assert records.read_header(path) == {k: v for k, v in whole.items() if k != "rows"}
    (tmp_path / "empty.jsonl.gz").write_bytes(gzip.compress(b""))
    with pytest.raises(ValueError, match="empty record file"):
        records.read_header(str(tmp_path / "empty.jsonl.gz"))


def test_committed_quick_report_regenerates_from_the_committed_records():
    """experiments/results/shop_local/shop_local_quick_local.md (the --quick pipeline check) is
    what the report makes of the committed records under experiments/study/records/."""
    import os

    from experiments.study.report import ROOT

    folder = shop_local.records_folder("quick", "local")
    md, numbers = shop_local.block_report(shop_local.load_block(folder))
    committed = os.path.join(ROOT, "experiments", "results", "shop_local", "shop_local_quick_local.md")
    assert md == open(committed).read()
    assert len(numbers["runs"]) == len(shop_local.ARM_NAMES)


def test_a_sitting_runs_the_named_subset_in_the_blocks_order_and_refuses_undeclared_values():
    sc = shop_local.local_scale("full", "local")
    everything = shop_local.Sitting.parse(sc, "", "", "")
    assert everything == shop_local.Sitting((0, 1), (0, 1, 2), shop_local.ARM_NAMES)
    one = shop_local.Sitting.parse(sc, "1", "2,0", "pivotrl, grpo")
    assert one == shop_local.Sitting((1,), (0, 2), ("grpo", "pivotrl"))
    for flags, name in ((("7", "", ""), "--warm-seeds"), (("", "3", ""), "--rl-seeds"),
                        (("", "", "sao"), "--arms"), (("x", "", ""), "--warm-seeds"),
                        (("", ",", ""), "--rl-seeds")):
        with pytest.raises(ValueError, match=name):
            shop_local.Sitting.parse(sc, *flags)
    with pytest.raises(SystemExit, match="--arms"):
        shop_local.main(["--arms", "grpo,nope", "--records", "/nonexistent/never/written"])


def test_a_later_sitting_keeps_the_premise_checks_and_refuses_other_settings(tmp_path):
    _write_block(tmp_path)
    settings = shop_local.load_block(str(tmp_path)).settings
    assert set(shop_local.block_premise(str(tmp_path), settings)) == {"warm0"}
    assert shop_local.block_premise(str(tmp_path / "none"), settings) == {}
    with pytest.raises(SystemExit, match="learning_rates"):
        shop_local.block_premise(str(tmp_path), {**settings, "learning_rates": {"grpo": 1e-4, "pivotrl": 3e-6}})


def test_a_sitting_refuses_a_block_computed_with_another_code_version_and_its_report_still_reads(
        tmp_path, monkeypatch):
    from experiments.study import runner
    from rlvr.version import code_version

    _write_block(tmp_path / "records")  # its records say code version "abc"
    monkeypatch.setattr(runner, "run_config", lambda *a, **k: pytest.fail("a run started"))
    argv = ["--quick", "--records", str(tmp_path / "records"), "--out", str(tmp_path / "out"),
            "--cache", str(tmp_path / "cache"), "--workdir", str(tmp_path / "work")]
    with pytest.raises(SystemExit, match=f"code version abc and this checkout's is {code_version()}"):
        shop_local.main(argv)
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()
    assert shop_local.block_version_error(str(tmp_path / "records"), "abc") is None
    assert shop_local.block_version_error(str(tmp_path / "none"), "abc") is None  # a new block
    assert shop_local.main(argv + ["--from-records"]) == 0


def test_another_pivotrl_learning_rate_is_an_exploratory_block_with_its_own_folder_and_report(
        tmp_path, monkeypatch):
    from experiments.study import block_files, premise, runner

    declared = shop_local.declared_learning_rates("full")
    assert shop_local.block_name("full", "local") == "shop_local_full_local"
    assert shop_local.block_name("full", "local", {**declared, "pivotrl": 3e-5}) == "shop_local_full_local"
    assert shop_local.records_folder("full", "local", {**declared, "pivotrl": 1e-5}).endswith(
        "/records/shop_local_full_local_pivotrl_lr1e-05")
    for bad in ("0", "nan", "-1e-5", "2"):
        with pytest.raises(SystemExit, match="--pivotrl-lr must be a learning rate in"):
            shop_local.main([f"--pivotrl-lr={bad}", "--from-records"])
    # a sitting at another PivotRL rate: its runs get that rate, the declared block is untouched
    got = []
    (tmp_path / "warm").mkdir()
    (tmp_path / "warm" / "warm.json").write_text(json.dumps({"sft_nll": 0.5, "wall_s": 60.0, "cpu_s": 90.0}))
    (tmp_path / "warm" / "model.safetensors").write_bytes(b"weights")
    monkeypatch.setattr(shop_local, "warm_round_folder", lambda *a, **k: str(tmp_path / "warm"))
    monkeypatch.setattr(shop_local, "curriculum_folder", lambda *a, **k: str(tmp_path / "warm"))
    monkeypatch.setattr(premise, "warm_start_premise", lambda c, wd, **k: _premise(0.9, 0.88))
    monkeypatch.setattr(block_files, "store_warm", lambda records, folder: None)  # not a real folder
    monkeypatch.setattr(runner, "run_config", lambda c, **k: got.append(
        (k["label"], c.optimizer.learning_rate)) or _block_rec([0, 100], [0.1, 0.2]))
    monkeypatch.setattr(shop_local, "records_folder", lambda scale, difficulty, lrs=None: str(
        tmp_path / "records" / shop_local.block_name(scale, difficulty, lrs)))
    with pytest.raises(SystemExit, match="shop_local_full_local_pivotrl_lr1e-05/block.json: no block here"):
        shop_local.main(["--pivotrl-lr", "1e-5", "--from-records", "--out", str(tmp_path / "none")])
    shop_local.main(["--warm-seeds", "1", "--rl-seeds", "0", "--arms", "grpo,pivotrl", "--pivotrl-lr",
                     "1e-5", "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"),
                     "--workdir", str(tmp_path / "work")])
    assert got == [("local/grpo/w1s0", 1e-4), ("local/pivotrl/w1s0", 1e-5)]
    assert os.listdir(tmp_path / "records") == ["shop_local_full_local_pivotrl_lr1e-05"]
    assert sorted(os.listdir(tmp_path / "out")) == ["shop_local_full_local_pivotrl_lr1e-05.json",
                                                     "shop_local_full_local_pivotrl_lr1e-05.md"]
    md = (tmp_path / "out" / "shop_local_full_local_pivotrl_lr1e-05.md").read_text()
    assert md.splitlines()[0] == ("# Local checkout block: difficulty `local`, scale `full` (exploratory: "
                                  "pivotrl learning rate 1e-05 (declared 3e-05))")
    assert "## Endpoint (exploratory: the primary endpoint is read on the declared block)" in md
    assert "## Primary endpoint" not in md
    # and so do its diagnostics (copying.py, pivot_kinds.py)
    block = shop_local.load_block(str(tmp_path / "records" / "shop_local_full_local_pivotrl_lr1e-05"))
    assert shop_local.diagnostic_name("pivots", "full", block) == "pivots_full_local_pivotrl_lr1e-05"
    assert shop_local.reader_command("copying.py", "full", block) == (
        "python experiments/study/copying.py --records "
        "experiments/study/records/shop_local_full_local_pivotrl_lr1e-05")
    declared = shop_local.load_block(str(tmp_path / "records" / "shop_local_full_local_pivotrl_lr1e-05"))
    declared = dataclasses.replace(declared, settings={**declared.settings, "learning_rates": {
        "grpo": 1e-4, "pivotrl": 3e-5}})
    assert shop_local.reader_command("copying.py", "full", declared) == "python experiments/study/copying.py"
    # the control (difficulty "standard") gets its own report names and command
    control = dataclasses.replace(declared, settings={**declared.settings, "difficulty": "standard"})
    assert shop_local.diagnostic_name("pivots", "full", control) == "pivots_full_standard"
    assert shop_local.reader_command("pivot_kinds.py", "full", control) == (
        "python experiments/study/pivot_kinds.py --records experiments/study/records/shop_local_full_standard")
    # the declared block's report keeps its name and heading
    _write_block(tmp_path / "declared")
    md, _ = shop_local.write_report(shop_local.load_block(str(tmp_path / "declared")), str(tmp_path / "out2"))
    assert md.endswith("/shop_local_quick_local.md") and "## Primary endpoint" in open(md).read()


def _premise(reads_first, interleaved, n_rf=40, n_il=40):
    from experiments.study.premise import PremiseResult

    d = reads_first - interleaved
    return PremiseResult(pay_right={"reads_first": reads_first, "interleaved": interleaved},
                         payments={"reads_first": n_rf, "interleaved": n_il}, difference=d,
                         tolerance=0.05, agree=abs(d) <= 0.05)


def test_warm_start_check_needs_testable_payments_and_on_the_testbed_the_premise():
    check = shop_local.warm_start_check
    assert check("local", _premise(0.9, 0.88)) == ""
    assert "premise fails" in check("local", _premise(0.9, 0.5))
    assert check("standard", _premise(0.9, 0.5)) == ""  # the control runs where the premise fails
    few = check("standard", _premise(0.9, 0.9, n_rf=3, n_il=40))
    assert "reads_first 3" in few and "interleaved" not in few.split("(")[1]
    assert "too few" in check("local", _premise(float("nan"), float("nan"), 0, 0))
    with pytest.raises(ValueError, match="difficulty"):
        check("local3", _premise(0.9, 0.9))


@pytest.mark.parametrize("passing_round", [None, 2])
def test_runs_start_only_from_a_warm_start_that_passes_the_check(tmp_path, monkeypatch, passing_round):
    """At the study scale a warm start is SFT'd in rounds until it passes the check, at most
    SFT_ROUNDS: its runs start from the first passing round; if none passes no run starts and the
    exit code is 1. block.json and the report keep every round's check and SFT NLL, another
    recipe's rounds included."""
    import dataclasses
    import json

    from experiments.study import block_files, premise, runner

    def folder(name, info):
        f = tmp_path / name
        f.mkdir(exist_ok=True)
        (f / "warm.json").write_text(json.dumps(info))
        (f / "model.safetensors").write_bytes(name.encode())  # its weights
        return str(f)

    def round_folder(config, seed, cache, rnd, recipe="scratch", **k):
        assert recipe == "curriculum"  # the three-basket testbed's recipe
        return folder(f"warm_r{rnd}", {"sft_nll": 0.5 / rnd, "wall_s": 60.0, "cpu_s": 90.0})

    started, stored = [], []
    monkeypatch.setattr(block_files, "store_warm", lambda records, f: stored.append((records, f)))
    monkeypatch.setattr(shop_local, "warm_round_folder", round_folder)
    monkeypatch.setattr(shop_local, "curriculum_folder", lambda *a, **k: folder(
        "curriculum", {"sft_nll": 0.1, "wall_s": 30.0, "cpu_s": 40.0}))
    # a round of another recipe, checked earlier: it stays in block.json and the report
    scratch = {**dataclasses.asdict(_premise(float("nan"), float("nan"), 0, 0)), "warm_start": "old",
               "round": 1, "recipe": "scratch", "sft_steps": 1000, "curriculum_steps": 0,
               "sft_nll": 0.45, "wall_s": 100.0, "cpu_s": 150.0}
    shop_local.write_block_meta(str(tmp_path / "rec"), {
        "scale": "full", "difficulty": "local", "learning_rates": {"grpo": 1e-4, "pivotrl": 3e-5},
        "level": shop_local.LEVEL}, {"warm0": shop_local.warm_entry([scratch])})
    monkeypatch.setattr(premise, "warm_start_premise", lambda c, wd, **k: (
        _premise(0.9, 0.88) if c.model.init_from.endswith(f"warm_r{passing_round}")
        else _premise(float("nan"), float("nan"), 0, 0)))
    from rlvr.version import code_version

    monkeypatch.setattr(runner, "run_config", lambda c, **k: started.append(  # this checkout's runs
        (k["label"], c.model.init_from)) or {**_block_rec([0, 100], [0.1, 0.2]), "code_version": code_version()})
    argv = ["--warm-seeds", "0", "--rl-seeds", "0", "--arms", "grpo", "--records", str(tmp_path / "rec"),
            "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"),
            "--workdir", str(tmp_path / "work")]
    rc = shop_local.main(argv)
    entry = json.loads((tmp_path / "rec" / "block.json").read_text())["premise"]["warm0"]
    rounds = passing_round or shop_local.SFT_ROUNDS
    assert [(r["recipe"], r["round"]) for r in entry["rounds"]] == [("scratch", 1)] + [
        ("curriculum", r) for r in range(1, rounds + 1)]
    assert entry["recipe"] == "curriculum" and entry["curriculum_steps"] == 1000
    # the curriculum stage's compute is in round 1's, every recipe's in the warm start's
    assert entry["rounds"][1]["wall_s"] == 90.0 and entry["rounds"][1]["cpu_s"] == 130.0
    assert entry["sft_nll"] == 0.5 / rounds and entry["wall_s"] == 100.0 + 30.0 + 60.0 * rounds
    md = (tmp_path / "out" / "shop_local_full_local.md").read_text()
    assert md.count("| warm0 | ") == 2 + rounds  # the premise row and one row per round
    assert md.count("| warm0 | curriculum | ") == rounds and "| 1000 (+ 1000 one-basket) |" in md
    if passing_round:
        assert rc == 0 and started == [("local/grpo/w0s0", str(tmp_path / "warm_r2"))]
        assert "| passes |" in md
        # the passing round is stored with the block's records (a sitting elsewhere starts from it)
        assert stored == [(str(tmp_path / "rec"), str(tmp_path / "warm_r2"))]
    else:
        assert rc == 1 and started == [] and stored == []
        assert "fails: the warm start's payments with the cart complete are too few" in md
    # a later sitting reads each round's own check back instead of checking again, and starts
    # its runs from the same passing round
    monkeypatch.setattr(premise, "warm_start_premise", lambda *a, **k: pytest.fail("checked again"))
    started.clear()
    assert shop_local.main(argv) == rc
    assert started == ([("local/grpo/w0s0", str(tmp_path / "warm_r2"))] if passing_round else [])
    # a warm start trained again (same key, other weights: another machine or thread count) is
    # refused before any run starts from it; so is one whose SFT NLL differs where the block's
    # entry records no weights hash (blocks written before it did)
    meta = json.loads((tmp_path / "rec" / "block.json").read_text())
    first = next(r for r in meta["premise"]["warm0"]["rounds"] if r["warm_start"] == "warm_r1")
    assert first["weights_sha256"] == hashlib.sha256(b"warm_r1").hexdigest()
    first["weights_sha256"] = hashlib.sha256(b"trained elsewhere").hexdigest()
    (tmp_path / "rec" / "block.json").write_text(json.dumps(meta))
    started.clear()
    with pytest.raises(SystemExit, match="warm start 0 .* is not the one the block's runs started "
                                         "from: its weights' sha256 is"):
        shop_local.main(argv)
    assert started == []
    del first["weights_sha256"]
    first["sft_nll"] = 0.49
    (tmp_path / "rec" / "block.json").write_text(json.dumps(meta))
    with pytest.raises(SystemExit, match="its SFT NLL is 0.5, the block's 0.49"):
        shop_local.main(argv)
    assert started == []


def test_an_sft_round_continues_the_last_rounds_parameters_and_is_cached(tmp_path, monkeypatch):
    import json
    import os

    import jax
    import numpy as np
    from safetensors.numpy import load_file

    from experiments.study import arms
    from rlvr.train import sft

    c = arms.base_config("grpo", 0, shop_local.local_scale("quick", "local"))
    c.train.sft_steps = 2
    logs = []
    r1 = shop_local.warm_round_folder(c, 0, str(tmp_path), 1, log=logs.append)
    given, real = [], sft.warm_start
    monkeypatch.setattr(sft, "warm_start", lambda params, *a, **k: given.append(
        (sorted(np.asarray(x).ravel()[0] for x in jax.tree.leaves(params)), k["seed"])) or real(params, *a, **k))
    r2 = shop_local.warm_round_folder(c, 0, str(tmp_path), 2, log=logs.append)
    # round 2 starts from round 1's saved parameters, with its own demonstration draws
    saved = sorted(v.ravel()[0] for v in load_file(os.path.join(r1, "model.safetensors")).values())
    assert len(given) == 1 and given[0][1] == 200_000
    np.testing.assert_allclose(given[0][0], saved, rtol=1e-6)
    assert r1 != r2 and len(logs) == 2
    assert shop_local.warm_round_folder(c, 0, str(tmp_path), 2, log=logs.append) == r2 and len(logs) == 2
    w1, w2 = (load_file(os.path.join(f, "model.safetensors")) for f in (r1, r2))
    assert w1.keys() == w2.keys() and any(not np.array_equal(w1[k], w2[k]) for k in w1)
    info = json.load(open(os.path.join(r2, "warm.json")))
    assert info["spec"]["round"] == 2 and np.isfinite(info["sft_nll"]) and info["wall_s"] > 0
    with pytest.raises(ValueError, match="rnd"):
        shop_local.warm_round_folder(c, 0, str(tmp_path), 0)


def test_curriculum_round_one_continues_a_one_basket_stage(tmp_path, monkeypatch):
    """Recipe "curriculum": the stage trains the random init on one-basket episodes of the same
    variant in CURRICULUM_SEQ_LEN-token rows; round 1 continues its saved parameters on the
    testbed's own episodes and rows, under its own cache key (not the "scratch" round 1's)."""
    import os

    import jax
    import numpy as np
    from safetensors.numpy import load_file

    from experiments.study import arms
    from rlvr.train import sft

    sc = shop_local.local_scale("quick", "local")
    assert shop_local.warm_recipe(sc) == "curriculum"
    assert shop_local.warm_recipe(shop_local.local_scale("quick", "standard")) == "scratch"
    c = arms.base_config("grpo", 0, sc)
    c.train.sft_steps = 2
    given, real = [], sft.warm_start
    monkeypatch.setattr(sft, "warm_start", lambda params, *a, **k: given.append(
        (sorted(np.asarray(x).ravel()[0] for x in jax.tree.leaves(params)), k["kit"].source.difficulty,
         k["length"], k["seed"])) or real(params, *a, **k))
    r1 = shop_local.warm_round_folder(c, 0, str(tmp_path), 1, recipe="curriculum", log=print)
    stage = shop_local.curriculum_folder(c, 0, str(tmp_path))
    assert [g[1:] for g in given] == [(shop_local.CURRICULUM_DIFFICULTY, shop_local.CURRICULUM_SEQ_LEN, 0),
                                      ("local3", shop_local.LOCAL_SEQ_LEN, 100_000)]
    saved = sorted(v.ravel()[0] for v in load_file(os.path.join(stage, "model.safetensors")).values())
    np.testing.assert_allclose(given[1][0], saved, rtol=1e-6)
    assert r1 != shop_local.warm_round_folder(c, 0, str(tmp_path), 1, recipe="scratch") and len(given) == 3
    with pytest.raises(ValueError, match="recipe"):
        shop_local.warm_round_folder(c, 0, str(tmp_path), 1, recipe="bogus")


def test_curriculum_stage_is_one_basket_of_the_testbed_and_fits_its_rows():
    """The curriculum difficulty is the testbed's knobs with one basket, and its longest
    demonstration (measured: 134 tokens) fits CURRICULUM_SEQ_LEN, not far below it."""
    import dataclasses

    from rlvr.models.tokenizer import CharTokenizer
    from rlvr.tasks.shop import ALPHABET, DIFFICULTIES, demonstrations, generate, render_episode

    assert DIFFICULTIES[shop_local.CURRICULUM_DIFFICULTY] == dataclasses.replace(
        DIFFICULTIES[shop_local.LOCAL_DIFFICULTY], baskets=1)
    assert DIFFICULTIES[shop_local.CURRICULUM_DIFFICULTY].baskets == 1
    tok = CharTokenizer(ALPHABET)
    longest = max(len(tok.encode(render_episode(t, demonstrations(t)))) + 1  # + bos
                  for t in generate(1000, split="train", seed=0, difficulty=shop_local.CURRICULUM_DIFFICULTY))
    assert 120 <= longest <= shop_local.CURRICULUM_SEQ_LEN <= 1.3 * longest


def test_a_sitting_writes_its_warm_starts_entry_without_dropping_anothers(tmp_path):
    """Two sittings on different warm starts of one block: each one's premise entry survives the
    other's write, though each read block.json before the other wrote."""
    _write_block(tmp_path)
    settings = shop_local.load_block(str(tmp_path)).settings
    first = shop_local.block_premise(str(tmp_path), settings)  # both sittings start here
    entry = dict(first["warm0"], difference=0.01)
    shop_local.update_block_premise(str(tmp_path), settings, "warm1", entry)
    shop_local.update_block_premise(str(tmp_path), settings, "warm0", first["warm0"])
    assert set(shop_local.block_premise(str(tmp_path), settings)) == {"warm0", "warm1"}
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_a_sitting_on_another_machine_starts_from_the_stored_warm_start_and_stores_selections(
        tmp_path, monkeypatch):
    """A warm start stored with the block's records is restored into a cache that lacks it and
    its runs start from it without training it again; a PivotRL-family run's selection is stored
    with its record."""
    import json

    from experiments.study import arms, block_files, premise, runner
    from tests.experiments.blocks import warm_folder

    sc = shop_local.local_scale("quick", "local")
    wc = arms.base_config("grpo", 0, sc)
    spec = {**runner.warm_spec(wc, 0), "round": 1, "recipe": shop_local.warm_recipe(sc)}
    key = runner.content_key(spec)
    rec = tmp_path / "rec"
    block_files.store_warm(str(rec), warm_folder(tmp_path / "first" / key, spec))
    monkeypatch.setattr(runner, "sft_to_folder", lambda *a, **k: pytest.fail("trained again"))
    monkeypatch.setattr(premise, "warm_start_premise", lambda c, wd, **k: _premise(0.9, 0.88))
    from rlvr.version import code_version

    started = []

    def run_config(c, workdir_root, **k):
        started.append((k["label"], c.model.init_from))
        os.makedirs(os.path.join(workdir_root, f"k_{len(started)}"))
        with open(os.path.join(workdir_root, f"k_{len(started)}", "pivots.json"), "w") as f:
            json.dump({"selection": "all", "candidates": []}, f)
        return {**_block_rec([0, 100], [0.1, 0.2]), "key": f"k_{len(started)}", "code_version": code_version()}

    monkeypatch.setattr(runner, "run_config", run_config)
    cache = tmp_path / "cache"
    assert shop_local.main(["--quick", "--arms", "grpo,pivotrl", "--records", str(rec), "--out",
                            str(tmp_path / "out"), "--cache", str(cache), "--workdir",
                            str(tmp_path / "work")]) == 0
    assert started == [("local/grpo/w0s0", str(cache / "warm" / key)),
                       ("local/pivotrl/w0s0", str(cache / "warm" / key))]
    assert (cache / "warm" / key / "model.safetensors").exists()
    assert sorted(p for p in os.listdir(rec) if p.endswith(".pivots.json.gz")) == ["pivotrl.w0s0.pivots.json.gz"]
    assert block_files.read_selection(str(rec / "pivotrl.w0s0.pivots.json.gz"))["selection"] == "all"
