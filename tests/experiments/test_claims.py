"""The readings-by-block table: read from result files, one row per claim and block where both
arms ran, and the committed README block matches the committed result files."""

import json
import math
import os
import shutil

import pytest

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
        # GRPO reached ℓ in every seed, SAO only in the first: seeds 2 and 3 give upper bounds
        "wall_to_level": {"grpo": [[40.0, True], [30.0, True], [50.0, True]],
                          "sao": [[100.0, True], [100.0, False], [100.0, False]]}})
    _write(str(tmp_path / "b" / "study_pivot.json"), {
        "run_code_versions": ["bbbb"],
        "final": {"grpo": [0.6, 0.6], "pivotrl": [0.5, 0.55], "pivot_all": [0.52, 0.5]},
        "tokens_to_level": {"grpo": [[200.0, True], [300.0, True]],
                            "pivotrl": [[100.0, True], [100.0, True]]}})
    assert claims.blocks(str(tmp_path)) == [".", "b"]
    got = {(r.claim.measure, r.claim.arms, r.block): r for r in claims.read(str(tmp_path))}
    assert set(got) == {("tokens_to_level", ("grpo", "pivotrl"), "b"),
                        ("final", ("pivotrl", "pivot_all"), "b"),
                        ("wall_to_level", ("grpo", "sao"), "."),
                        ("final", ("sao", "reinforce"), ".")}  # arms that never ran: no row
    wall = got["wall_to_level", ("grpo", "sao"), "."]
    assert wall.per_seed == ((0.4, stats.EXACT), (0.3, stats.AT_MOST), (0.5, stats.AT_MOST))
    assert wall.bound == stats.AT_MOST and wall.reached == (3, 1) and wall.run_code_versions == ("aaaa",)
    assert wall.holm_p == 1.0  # a bound has no test: it counts as p = 1 in the block's family
    assert claims.verdict(wall).startswith("FAILS (even the upper bound lies below no effect")
    diff = got["final", ("sao", "reinforce"), "."]
    assert diff.seeds == 2 and diff.left_out == 1 and diff.reached is None and diff.holm_p is None
    assert [v for v, _ in diff.per_seed] == pytest.approx([0.2, 0.2])
    tokens = got["tokens_to_level", ("grpo", "pivotrl"), "b"]  # ratios 2 and 3, both exact
    p, lo, hi = tokens.ci
    half = 12.7062 * (math.log(3) - math.log(2)) / 2
    assert p == pytest.approx(math.sqrt(6)) and lo == pytest.approx(math.sqrt(6) * math.exp(-half), rel=1e-3)
    assert tokens.holm_p == pytest.approx(tokens.t.p_value)  # the only primary endpoint of block b
    assert claims.verdict(tokens).startswith("UNRESOLVED (Holm-adjusted p")
    assert claims.allows(got["final", ("pivotrl", "pivot_all"), "b"]) == \
        f"{stats.paired_diff([0.5, 0.55], [0.52, 0.5])[2]:+.3f}"
    text = claims.block_text(claims.read(str(tmp_path)))
    lines = text.splitlines()
    assert len(lines) == 2 + 4
    first = [c.strip() for c in lines[2].strip("|").split("|")]  # CLAIMS order: claim 1 first
    assert first[:5] == [claims.CLAIMS[0].label, "primary", "`results/b/`",
                         "2 (reached ℓ: grpo 2, pivotrl 2)", "2.00, 3.00"]
    assert claims.block_text([]) == "No study_pivot or study_sao result files yet."


def test_primary_endpoints_are_holm_adjusted_together_within_a_block(tmp_path):
    ratios = lambda num: [[n, True] for n in num]  # noqa: E731
    _write(str(tmp_path / "study_pivot.json"), {
        "run_code_versions": ["a"], "final": {},
        "tokens_to_level": {"grpo": ratios([300.0, 320.0, 290.0]), "pivotrl": ratios([100.0, 100.0, 100.0])}})
    _write(str(tmp_path / "study_sao.json"), {
        "run_code_versions": ["a"], "final": {},
        "wall_to_level": {"grpo": ratios([100.0, 130.0, 90.0]), "sao": ratios([100.0, 100.0, 100.0])}})
    prim = [r for r in claims.read(str(tmp_path)) if r.claim.primary]
    assert len(prim) == 2
    assert [r.holm_p for r in prim] == pytest.approx(stats.holm([r.t.p_value for r in prim]))
    assert prim[0].holm_p < 0.05 and claims.verdict(prim[0]).startswith("HOLDS at Holm-adjusted p")
    assert claims.verdict(prim[1]).startswith("UNRESOLVED (Holm-adjusted p")


def test_a_primary_endpoint_no_arm_reached_is_reported_not_measurable(tmp_path):
    """Neither arm reached ℓ in any seed: the primary endpoint still gets its row (not
    measurable, every seed left out), never silently dropped from the table."""
    _write(str(tmp_path / "study_pivot.json"), {
        "run_code_versions": ["a"], "final": {},
        "tokens_to_level": {"grpo": [[100.0, False], [90.0, False]],
                            "pivotrl": [[80.0, False], [70.0, False]]}})
    prim = [r for r in claims.read(str(tmp_path)) if r.claim.primary]
    assert len(prim) == 1
    r = prim[0]
    assert r.seeds == 0 and r.left_out == 2 and r.reached == (0, 0) and r.bound == stats.UNKNOWN
    assert claims.verdict(r).startswith("not measurable")
    assert claims.CLAIMS[0].label in claims.summary_text([r])
    assert claims.CLAIMS[0].label in claims.primary_text([r])


def test_every_claim_names_a_measure_the_study_scripts_write():
    """A claim's measure and arms exist in a committed result file of its script (no dead rows)."""
    seen = {}
    for b in claims.blocks(report.RESULTS):
        for s in claims.SCRIPTS:
            p = os.path.join(report.RESULTS, b, f"study_{s}.json")
            if os.path.exists(p):
                with open(p) as f:
                    d = json.load(f)
                for m, per_arm in d.items():
                    if m == "final" or m.endswith("_to_level"):
                        seen.setdefault((s, m), set()).update(per_arm)
    for c in claims.CLAIMS:
        assert set(c.arms) <= seen[c.script, c.measure], c
        assert math.isfinite(c.null)


def test_committed_readme_block_matches_the_committed_result_files():
    begin, end = report._markers("readings by block")
    with open(os.path.join(os.path.dirname(report.RESULTS), "README.md")) as f:
        readme = f.read()
    block = readme[readme.index(begin) + len(begin):readme.index(end)].strip()
    assert block == claims.block_text(claims.read(report.RESULTS)).strip()


def test_committed_primary_endpoints_and_summary_tables_match_the_result_files(tmp_path):
    """The README's opening table and every folder's summary table are what --from-results writes."""

    from experiments import study_all

    readme = os.path.join(os.path.dirname(report.RESULTS), "README.md")
    begin, end = report._markers("primary endpoints")
    with open(readme) as f:
        text = f.read()
    readings = claims.read(report.RESULTS)
    block = text[text.index(begin) + len(begin):text.index(end)].strip()
    assert block == claims.primary_block_text(claims.regime_endpoints(study_all.STUDY_RECORDS),
                                              readings,
                                              claims.wallclock_level_sweep(study_all.STUDY_RECORDS)).strip()
    assert block.startswith("Each claim in the regime it is made for:")
    assert claims.primary_text(readings) in block  # the first design's rows, below
    copy = str(tmp_path / "README.md")
    shutil.copy(readme, copy)
    for block in claims.blocks(report.RESULTS):
        study_all.refresh_summary_table(block, [r for r in readings if r.block == block], readme=copy)
    with open(copy) as f:
        assert f.read() == text


# ----------------------------------------------------------------------------- each claim in its regime
def _run(success, cost, key, *, x="cost/turns"):
    """A stored run record: an evaluation at every step from 0 with its cumulative cost `x`."""
    rows = [{"step": i, "time/step_s": 1.0, "eval/success": s, x: c, "cost/sampled_tokens": 10.0 * c}
            for i, (s, c) in enumerate(zip(success, cost))]
    return {"key": key, "code_version": "cv1", "config": {"algorithm.group_size": 4}, "rows": rows}


def _local_block(records, pivot_step_turns, *, scale="full", grpo_only=()):
    """A local block at `scale`: GRPO reaches 0.9 (0.9 × its plateau 1.0) at 180 turns in every
    run; PivotRL at 0.9 × its step's turns, so the run's ratio is 200 ÷ that step's turns. The
    runs' (warm start, RL seed) in the block's order (`shop_local.block_seeds`: (0, 0), (0, 1),
    (0, 2), (1, 0), …); `grpo_only`: further runs with GRPO alone (no pair)."""
    from experiments.study import records as rec_io
    from experiments.study import shop_local

    folder = os.path.join(records, f"shop_local_{scale}_local")
    shop_local.write_block_meta(folder, {"scale": scale, "difficulty": "local", "level": 0.9,
                                         "learning_rates": {"grpo": 1e-4, "pivotrl": 3e-5}}, {})
    seeds = shop_local.block_seeds(shop_local.local_scale(scale, "local"))
    for bs, k in zip(seeds, pivot_step_turns):
        rec_io.write_record(shop_local.record_path(folder, "grpo", bs),
                            _run([0.0, 0.5, 1.0, 1.0, 1.0], [0, 100, 200, 300, 400], f"g{bs.label}"))
        rec_io.write_record(shop_local.record_path(folder, "pivotrl", bs),
                            _run([0.0, 1.0, 1.0, 1.0, 1.0], [0, k, 2 * k, 3 * k, 4 * k], f"p{bs.label}"))
    for bs in grpo_only:
        rec_io.write_record(shop_local.record_path(folder, "grpo", bs),
                            _run([0.0, 0.5, 1.0, 1.0, 1.0], [0, 1, 2, 3, 4], f"g{bs.label}"))
    return folder


def _wallclock_arms(records, sao_step_s, *, scale="long512", sao_never=()):
    """Wall-clock arm records for seeds 0 … n−1: GRPO-sync reaches ℓ = 0.45 (0.9 × its end
    success 0.5) at 17.5 modelled s in every seed; SAO at 0.875 × its step's modelled seconds, so
    the seed's ratio is 20 ÷ that step's seconds; a seed in `sao_never` never reaches ℓ (its last
    cost, 3 steps)."""
    from experiments.study import records as rec_io
    from experiments.study import wallclock

    folder = os.path.join(records, f"wallclock_{scale}")
    for seed, m in enumerate(sao_step_s):
        rec_io.write_record(os.path.join(folder, wallclock.record_name("grpo_sync", seed)),
                            _run([0.1, 0.3, 0.5, 0.5, 0.5], [0, 10, 20, 30, 40], f"g{seed}",
                                 x="time/modelled_s"))
        succ = [0.1, 0.2, 0.3, 0.4] if seed in sao_never else [0.1, 0.5, 0.5, 0.5]
        rec_io.write_record(os.path.join(folder, wallclock.record_name("sao", seed)),
                            _run(succ, [0, m, 2 * m, 3 * m], f"s{seed}", x="time/modelled_s"))
    return folder


def _row(text, number):
    """The cells of the table row of claim `number` ("1." or "3.")."""
    rows = [r for r in text.splitlines() if r.startswith(f"| {number} ")]
    assert len(rows) == 1, text
    return [c.strip() for c in rows[0].strip("|").split(" | ")]


def test_local_block_at_full_scale_gives_claim_1_paired_over_runs_with_holm_p(tmp_path):
    """Claim 1 from a complete local block at the full scale: per (warm start, RL seed) run
    GRPO's ÷ PivotRL's training turns to the level, paired by seeds, its geometric mean and paired
    t-interval, and a Holm p over the two endpoints with claim 3 not yet run (p = 1)."""
    _local_block(str(tmp_path), [100, 50, 40, 100, 50, 40])
    ends = claims.regime_endpoints(str(tmp_path))
    r = ends[0].reading
    assert ends[0].claim is claims.LOCAL_CLAIM and ends[1].reading is None and not ends[0].incomplete
    assert [v for v, _ in r.per_seed] == pytest.approx([2.0, 4.0, 5.0] * 2)
    assert r.bound == stats.EXACT and r.reached == (6, 6)
    assert r.ci == pytest.approx(stats.paired_ratio([2.0, 4.0, 5.0] * 2, [1.0] * 6))
    assert r.holm_p == pytest.approx(min(1.0, 2 * r.t.p_value))  # Holm over two, claim 3 at p = 1
    cells = _row(claims.regime_text(ends), "1.")
    assert "`study/records/shop_local_full_local/`" in cells[1] and "`full`" in cells[1]
    assert cells[2] == "6 (warm start, RL seed) runs (reached ℓ: grpo 6, pivotrl 6)"
    assert cells[3] == "2.00, 4.00, 5.00, 2.00, 4.00, 5.00"
    assert cells[4] == stats.fmt_ci(*r.ci, digits=2, unit="×")
    assert cells[5] == f"{r.holm_p:.3f}"
    assert cells[6] == claims.verdict(r) and cells[6].startswith("HOLDS at Holm-adjusted p")


def test_an_incomplete_local_block_shows_its_reading_so_far_with_no_verdict_or_test(tmp_path):
    """A block with fewer paired runs than it declares (here 2 of 6, and a GRPO run with no
    PivotRL twin, left out) shows the reading so far, gives no verdict, and counts as p = 1 in
    the Holm adjustment of claim 3."""
    from experiments.study import shop_local

    _wallclock_arms(str(tmp_path), [10.0, 5.0, 8.0])
    _local_block(str(tmp_path), [100, 50], grpo_only=[shop_local.BlockSeeds(0, 2)])
    ends = claims.regime_endpoints(str(tmp_path))
    one, three = (e.reading for e in ends)
    assert [v for v, _ in one.per_seed] == pytest.approx([2.0, 4.0]) and one.holm_p is None
    assert ends[0].incomplete.startswith("block incomplete: 2 of its 6 declared")
    assert three.holm_p == pytest.approx(stats.holm([three.t.p_value, 1.0])[0])
    cells = _row(claims.regime_text(ends), "1.")
    assert cells[3] == "2.00, 4.00" and cells[5] == "— (incomplete: counts as p = 1)"
    assert cells[6].startswith("no verdict yet (block incomplete: 2 of its 6 declared")
    assert "HOLDS" not in cells[6] and "FAILS" not in cells[6]


def test_a_block_at_another_learning_rate_is_an_exploratory_row_and_never_claim_one(tmp_path):
    """A block at another PivotRL learning rate gets its own README row, labelled exploratory,
    naming the runs it shares with the declared block; claim 1 reads the declared block only."""
    from experiments import study_all
    from experiments.study import records as rec_io
    from experiments.study import shop_local

    declared = _local_block(str(tmp_path), [100])
    before = claims.local_endpoint(str(tmp_path))
    folder = str(tmp_path / "shop_local_full_local_pivotrl_lr1e-05")
    shop_local.write_block_meta(folder, {"scale": "full", "difficulty": "local", "level": 0.9,
                                         "learning_rates": {"grpo": 1e-4, "pivotrl": 1e-5}}, {})
    bs = shop_local.BlockSeeds(0, 0)
    shutil.copy(shop_local.record_path(declared, "grpo", bs), shop_local.record_path(folder, "grpo", bs))
    rec_io.write_record(shop_local.record_path(folder, "pivotrl", bs),
                        _run([0.0, 1.0, 1.0, 1.0, 1.0], [0, 10, 20, 30, 40], "p-lr"))
    rows = {r.split(" | ")[0]: r for r in study_all.local_block_text(str(tmp_path)).splitlines()
            if r.startswith("| `study/records/")}
    assert rows["| `study/records/shop_local_full_local_pivotrl_lr1e-05/`"].endswith(
        "exploratory: pivotrl learning rate 1e-05 (declared 3e-05); 1 of its runs are the declared "
        "block's (the same config, read back from the cache; their wall-hours are counted in both rows) |")
    assert "exploratory" not in rows["| `study/records/shop_local_full_local/`"]
    after = claims.local_endpoint(str(tmp_path))
    assert after.reading == before.reading and after.reading is not None


def test_a_pair_where_neither_arm_learned_shows_no_turns_rather_than_nan(tmp_path):
    """Both arms flat at 0: the pair is "unknown", and the block's report and README row print
    its turns to ℓ as "—", not as nan."""
    from experiments import study_all
    from experiments.study import records as rec_io
    from experiments.study import shop_local

    folder = _local_block(str(tmp_path), [])
    for arm in ("grpo", "pivotrl"):
        rec_io.write_record(shop_local.record_path(folder, arm, shop_local.BlockSeeds(0, 0)),
                            _run([0.0] * 5, [0, 100, 200, 300, 400], f"{arm}-flat"))
    text, _ = shop_local.block_report(shop_local.load_block(folder))
    row = [r for r in study_all.local_block_text(str(tmp_path)).splitlines()
           if r.startswith("| `study/records/shop_local_full_")]
    assert "—/— (unknown; ℓ n/a, learned: neither)" in text
    assert len(row) == 1 and "| —/— (unknown) |" in row[0]
    assert "nan" not in text.lower() and "nan" not in row[0].lower()
    # a full-scale block also lists its runs under the table, one row each
    runs = [r for r in study_all.local_block_text(str(tmp_path)).splitlines()
            if r.startswith(("| grpo |", "| pivotrl |"))]
    assert runs == ["| grpo | w0s0 | 0.000 → 0.000 (0.000) | 4 | 400 | 0 | — | n/a → n/a | n/a |",
                    "| pivotrl | w0s0 | 0.000 → 0.000 (0.000) | 4 | 400 | 0 | — | n/a → n/a | n/a |"]


def test_quick_records_only_give_not_yet_run_rows_without_a_number(tmp_path):
    """With only the quick pipeline checks committed, each row says it has not run at the study
    scale, names what is committed and the command, and shows no number."""
    import re

    from experiments import study_all

    for name in ("shop_local_quick_local", "wallclock_quick"):
        shutil.copytree(os.path.join(study_all.STUDY_RECORDS, name), str(tmp_path / name))
    ends = claims.regime_endpoints(str(tmp_path))
    assert [e.reading for e in ends] == [None, None]
    text = claims.regime_text(ends)
    one, three = _row(text, "1."), _row(text, "3.")
    assert one[6] == ("not yet run at the study scale: committed `study/records/shop_local_quick_local/` "
                      "(quick scale: a pipeline check, not a reading) — `python experiments/study/shop_local.py`")
    assert three[6].startswith("not yet run at the study scale: committed `study/records/wallclock_quick/` "
                               "(quick scale: a pipeline check, not a reading) — `python -m "
                               "experiments.study.wallclock --run-arms --scale long512")
    for cells in (one, three):
        assert cells[3:6] == ["—", "—", "—"]
        assert not re.search(r"\d", cells[2])
    assert not re.search(r"\d", one[6])
    # a quick block is never read as the full scale's, even under the full scale's folder name
    folder = _local_block(str(tmp_path / "x"), [100, 50, 40], scale="quick")
    shutil.move(folder, str(tmp_path / "x" / "shop_local_full_local"))
    with pytest.raises(ValueError, match="settings.scale is 'quick'"):
        claims.local_endpoint(str(tmp_path / "x"))


def test_wallclock_arms_give_claim_3_paired_over_seeds_and_holm_adjust_with_claim_1(tmp_path):
    """Claim 3 from the wall-clock arms at long512: per seed GRPO-sync's ÷ SAO's modelled seconds
    to ℓ (> 1: SAO sooner), its interval, and Holm over the two endpoints when both ran."""
    _wallclock_arms(str(tmp_path), [10.0, 5.0, 8.0])
    _local_block(str(tmp_path), [100, 50, 40, 100, 50, 40])  # complete: all 6 declared runs
    ends = claims.regime_endpoints(str(tmp_path))
    one, three = (e.reading for e in ends)
    assert three.claim is claims.WALLCLOCK_CLAIM
    assert [v for v, _ in three.per_seed] == pytest.approx([2.0, 4.0, 2.5])
    assert three.ci == pytest.approx(stats.paired_ratio([2.0, 4.0, 2.5], [1.0, 1.0, 1.0]))
    assert [one.holm_p, three.holm_p] == pytest.approx(stats.holm([one.t.p_value, three.t.p_value]))
    text = claims.regime_text(ends)
    cells = _row(text, "3.")
    assert "`study/records/wallclock_long512/`" in cells[1] and "ℓ = 0.9 × GRPO-sync's mean end success = 0.450" in cells[1]
    assert cells[2] == "3 seeds (reached ℓ: grpo_sync 3, sao 3)"
    assert cells[3] == "2.00, 4.00, 2.50"
    assert cells[4] == stats.fmt_ci(*three.ci, digits=2, unit="×") and cells[5] == f"{three.holm_p:.3f}"
    assert _row(text, "1.")[5] == f"{one.holm_p:.3f}"


def test_a_censored_wallclock_seed_makes_claim_3_a_bound(tmp_path):
    """A seed whose SAO run never reached ℓ gives an upper bound (GRPO-sync's cost ÷ SAO's last
    cost), and the reading is that bound, with no Holm test of its own."""
    _wallclock_arms(str(tmp_path), [10.0, 5.0, 10.0], sao_never={2})
    ends = claims.regime_endpoints(str(tmp_path))
    r = ends[1].reading
    assert [v for v, _ in r.per_seed] == pytest.approx([2.0, 4.0, 17.5 / 30.0])
    assert [k for _, k in r.per_seed] == [stats.EXACT, stats.EXACT, stats.AT_MOST]
    assert r.bound == stats.AT_MOST and r.reached == (3, 2)
    cells = _row(claims.regime_text(ends), "3.")
    assert cells[3] == "2.00, 4.00, ≤0.58"
    assert cells[4].startswith("at most ") and cells[5] == "n/a (a bound)"
    assert cells[6] == claims.verdict(r) and cells[6].startswith("UNRESOLVED (censored seeds")


def test_claim_3_at_fixed_levels_reads_each_level_from_the_same_seeds(tmp_path):
    """The exploratory sweep reads claim 3 at each fixed level from the same paired seeds: a run
    that reaches the level gives its interpolated cost, one that never does makes that seed a
    bound at that level only; the registered reading is unchanged, and a level that is not a
    success rate is refused."""
    from experiments.study import wallclock

    _wallclock_arms(str(tmp_path), [10.0, 5.0, 10.0], sao_never={2})
    sweep = claims.wallclock_level_sweep(str(tmp_path), levels=(0.2, 0.5))
    (l1, low), (l2, high) = sweep
    assert (l1, l2) == (0.2, 0.5)
    # GRPO-sync reaches 0.2 at 5 s and 0.5 at 20 s; SAO at 0.25 m and m (seed 2: at m, then never)
    assert [v for v, _ in low.per_seed] == pytest.approx([2.0, 4.0, 0.5])
    assert low.bound == stats.EXACT and low.reached == (3, 3)
    assert [v for v, _ in high.per_seed] == pytest.approx([2.0, 4.0, 20.0 / 30.0])
    assert [k for _, k in high.per_seed] == [stats.EXACT, stats.EXACT, stats.AT_MOST]
    assert high.bound == stats.AT_MOST and high.reached == (3, 2)
    text = claims.level_sweep_text(sweep)
    rows = [[c.strip() for c in r.strip("|").split(" | ")] for r in text.splitlines()[2:]]
    assert rows[0][:3] == ["0.2", "3 (reached: grpo_sync 3, sao 3)", "2.00, 4.00, 0.50"]
    assert rows[1][2] == "2.00, 4.00, ≤0.67" and rows[1][3].startswith("at most ")
    registered = claims.regime_endpoints(str(tmp_path))[1].reading
    assert [v for v, _ in registered.per_seed] == pytest.approx([2.0, 4.0, 17.5 / 30.0])
    block = claims.primary_block_text(claims.regime_endpoints(str(tmp_path)), [], sweep)
    assert block.index("| 3. GRPO-sync") < block.index(text) < block.index("The first design")
    assert "Claim 3 at fixed" not in claims.primary_block_text(claims.regime_endpoints(str(tmp_path)), [])
    recs = wallclock.load_arm_records(os.path.join(str(tmp_path), "wallclock_long512"))
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="level must be a success rate"):
            wallclock.measured_ratios(recs, level=bad)
    assert claims.wallclock_level_sweep(str(tmp_path / "none")) == []


def test_one_censored_seed_is_a_bound_with_no_interval_and_no_verdict(tmp_path):
    """One seed whose SAO run never reached ℓ: its bound is shown alone, without a 95 % interval
    (one value has none), and the verdict is no test, not a failure or a success."""
    _wallclock_arms(str(tmp_path), [10.0], sao_never={0})
    r = claims.regime_endpoints(str(tmp_path))[1].reading
    assert r.t.n == 1 and r.bound == stats.AT_MOST
    cells = _row(claims.regime_text(claims.regime_endpoints(str(tmp_path))), "3.")
    assert cells[3] == "≤0.58"
    assert cells[4] == "at most 0.58× (one seed: no interval)" and "[" not in cells[4]
    assert cells[6] == "no test (one seed: at most its value, with no interval)"
    assert claims.allows(r) == "n/a"


def test_claim_3_row_states_the_system_model_as_its_file_does(tmp_path):
    """The row reads M from the file: its parameters, placeholders where the file records no
    calibration, and what measured it where it does (machine, device, date, command)."""
    with open(claims.SYSTEM_MODEL) as f:
        m = json.load(f)
    m.pop("calibration", None)
    m["decode_s_per_token"] = 0.125
    path = tmp_path / "m.json"
    path.write_text(json.dumps(m))
    note = claims.system_model_note(str(path))
    assert "decode 0.125 s/token" in note and "placeholders until measured" in note
    m["calibration"] = {"machine": "x86_64, 2 CPUs", "device": "gpu (H100) × 1", "jax": "0.1",
                        "date": "2026-12-05 20:00 UTC", "command": "python -m x", "scale": "s",
                        "code_version": "abc"}
    path.write_text(json.dumps(m))
    note = claims.wallclock_endpoint(str(tmp_path), str(path)).regime
    assert "decode 0.125 s/token" in note
    assert ("calibrated: measured on x86_64, 2 CPUs, device gpu (H100) × 1, jax 0.1, 2026-12-05 "
            "20:00 UTC, by `python -m x` (code abc)") in note
    assert "placeholders" not in note


def test_primary_block_opens_with_the_regimes_and_keeps_the_first_designs_rows(tmp_path):
    _write(str(tmp_path / "results" / "long" / "study_sao.json"), {
        "run_code_versions": ["a"], "final": {},
        "wall_to_level": {"grpo": [[100.0, True], [130.0, True]], "sao": [[100.0, True], [100.0, True]]}})
    readings = claims.read(str(tmp_path / "results"))
    text = claims.primary_block_text(claims.regime_endpoints(str(tmp_path / "records")), readings)
    regime, first = text.index("| 1. GRPO ÷ PivotRL training turns"), text.index("The first design")
    assert regime < first and text.index("| 3. GRPO-sync ÷ SAO modelled wall-clock") < first
    assert text.endswith(claims.primary_text(readings))
    assert f"| {claims.CLAIMS[7].label} | `results/long/` | 2 (reached ℓ: grpo 2, sao 2) | 1.00, 1.30 |" \
        in text[first:]


def test_arms_without_a_common_seed_give_not_yet_run_rows_naming_what_ran(tmp_path):
    """Records of one arm only (GRPO-sync at long512 without SAO; GRPO without PivotRL in the local
    block) read as not yet run, naming the runs that exist, never as a censored reading."""
    import os

    from experiments.study import shop_local

    folder = _wallclock_arms(str(tmp_path), [10.0])
    os.remove(os.path.join(folder, "sao.s0.jsonl.gz"))
    _local_block(str(tmp_path), [100], grpo_only=[shop_local.BlockSeeds(0, 2)])
    block = os.path.join(str(tmp_path), "shop_local_full_local")
    for name in os.listdir(block):
        if name.startswith("pivotrl"):
            os.remove(os.path.join(block, name))
    ends = claims.regime_endpoints(str(tmp_path))
    assert [e.reading for e in ends] == [None, None]
    text = claims.regime_text(ends)
    three, one = _row(text, "3."), _row(text, "1.")
    assert three[6].startswith("not yet run at the study scale: no seed has both arms (committed "
                               "runs: grpo_sync seeds [0]") and "--arms grpo_sync,sao" in three[6]
    assert one[6].startswith("not yet run at the study scale: no (warm start, RL seed) run has "
                             "both arms (committed: grpo 2 runs; pivotrl 0 runs)")
    for cells in (one, three):
        assert cells[3:6] == ["—", "—", "—"]


def test_a_full_block_whose_warm_starts_fail_their_check_says_so_and_shows_no_number(tmp_path):
    """The committed full-scale block with no runs: claim 1's row and the README's local-block row
    name the warm start whose check failed, with no reading."""

    from experiments import study_all
    from experiments.study import shop_local

    folder = tmp_path / "shop_local_full_local"
    bad = {"pay_right": {"reads_first": float("nan"), "interleaved": float("nan")},
           "payments": {"reads_first": 0, "interleaved": 0}, "difference": float("nan"),
           "tolerance": 0.05, "agree": False, "sft_nll": 0.45, "wall_s": 10.0, "cpu_s": 20.0}
    good = {**bad, "pay_right": {"reads_first": 0.9, "interleaved": 0.88}, "difference": 0.02,
            "payments": {"reads_first": 40, "interleaved": 35}, "agree": True}
    shop_local.write_block_meta(str(folder), {"scale": "full", "difficulty": "local", "level": 0.9,
                                              "learning_rates": {"grpo": 1e-4, "pivotrl": 3e-5}},
                                {"warm0": bad, "warm1": good})
    end = claims.local_endpoint(str(tmp_path))
    assert end.reading is None
    assert "the warm-start check fails on warm0 (" in end.not_run and "warm1" not in end.not_run
    row = [r for r in study_all.local_block_text(str(tmp_path)).splitlines() if "_full_" in r]
    assert len(row) == 1 and "| 0 |" in row[0]
    assert row[0].endswith("| no runs yet at scale `full`; the warm-start check fails on warm0: "
                           "their runs do not start |")
    shutil.rmtree(folder)
