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
                            str(tmp_path / "sao.json"), "--steps", "2", "--out", str(tmp_path),
                            "--arm-records", ""])
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
    # a folder of compressed records (the wall-clock arms' own) reads the same
    from experiments.study import records

    for name, path in (("grpo_sync.s0", paths[0]), ("sao.s0", paths[1])):
        records.write_record(str(tmp_path / "arms" / f"{name}{records.SUFFIX}"),
                             json.loads(open(path).read()))
    again = wallclock.record_profiles([str(tmp_path / "arms")])
    assert again["grpo"].sampled_tokens == (30,) and again["sao"].tool_calls == (4,)


def _arm_record(succ, tokens, modelled):
    """A stored wall-clock arm record: an evaluation at every step from 0, with its costs."""
    rows = [{"step": i, "time/step_s": 1.0, "eval/success": v, "cost/sampled_tokens": t,
             "time/modelled_s": m} for i, (v, t, m) in enumerate(zip(succ, tokens, modelled))]
    return {"key": "k", "config": {"algorithm.group_size": 4}, "rows": rows}


def test_arm_records_fill_the_not_measured_cells(tmp_path):
    from experiments.study import records

    folder = tmp_path / "wallclock_quick"  # the folder names the runs' scale
    runs = {"grpo_sync": ([0.1, 0.3, 0.5, 0.5, 0.5], [0, 100, 200, 300, 400], [0, 10, 20, 30, 40]),
            "grpo_async": ([0.1, 0.5, 0.5, 0.5], [0, 90, 180, 270], [0, 5, 10, 15]),
            "sao_sync": ([0.1, 0.2, 0.3, 0.4], [0, 100, 200, 300], [0, 10, 20, 30])}
    for mode, r in runs.items():
        records.write_record(str(folder / wallclock.record_name(mode, 0)), _arm_record(*r))
    m = wallclock.measured_ratios(wallclock.load_arm_records(str(folder)))
    assert m["level"] == 0.45  # 0.9 × GRPO-sync's end success
    # GRPO-sync reaches 0.45 at 175 tokens / 17.5 s; GRPO-async at 78.75 tokens / 4.375 s
    assert abs(m["arms"]["grpo_async"]["tokens"][0] - 78.75) < 1e-9
    assert abs(m["arms"]["grpo_async"]["tokens_ratio"][0] - 78.75 / 175.0) < 1e-9
    assert abs(m["arms"]["grpo_async"]["modelled_ratio"][0] - 4.375 / 17.5) < 1e-9
    assert m["arms"]["sao_sync"]["reached"] == [False]  # its last cost: a bound
    prof = dict(prompt_tokens=[20, 30], sampled_tokens=[10, 40], tool_calls=[1, 4],
                max_staleness=2, source="test")
    (tmp_path / "p.json").write_text(json.dumps({
        "grpo": dict(prof, group_size=2, prompts_per_step=2),
        "sao": dict(prof, group_size=1, prompts_per_step=4)}))
    table = wallclock.main(["--profiles", str(tmp_path / "p.json"), "--token-ratios", "",
                            "--steps", "2", "--out", str(tmp_path / "out"),
                            "--arm-records", str(folder)])
    rows = [r for r in table.splitlines() if r.startswith("| ") and r[2].isdigit()]
    assert rows and all("not measured" in r for r in rows)  # SAO: neither run nor given
    assert all(r.count("not measured") == 1 for r in rows)  # GRPO-async and SAO-sync filled
    assert "GRPO-async 0.45 (from runs under the modelled clock (scale `wallclock_quick`)" in table
    assert "at least: a run never reached ℓ" in table  # SAO-sync's never reached ℓ
    sao_sync = [r.split(" | ")[-1] for r in rows]  # its wall-clock ratio, the last column
    assert all(c.startswith("≥") for c in sao_sync), sao_sync
    assert "## The arms' runs under the modelled clock (scale `wallclock_quick`" in table
    # the runs' own table marks the same bounds: SAO-sync's token and wall-clock ratios (columns
    # 6 and 7) are lower bounds, GRPO-async's (which reached ℓ) exact
    runs_rows = {r.split(" | ")[0]: r.split(" | ") for r in table.split("## The arms' runs")[1].splitlines()
                 if r.startswith("| ")}
    assert runs_rows["| SAO-sync"][5].startswith("≥") and runs_rows["| SAO-sync"][6].startswith("≥")
    assert runs_rows["| GRPO-async"][5] == "0.45" and runs_rows["| GRPO-async"][6] == "0.25"
    out = json.loads((tmp_path / "out" / "wallclock.json").read_text())
    assert set(out["token_ratios"]) == {"grpo_sync", "grpo_async", "sao_sync"}
    assert out["token_ratio_bounds"] == {"sao_sync": "at least"}
    assert out["arm_runs"]["scale"] == "wallclock_quick" and out["arm_runs"]["records"].endswith("wallclock_quick")


def test_a_seed_neither_run_reached_is_left_out_of_the_cost_ratios(tmp_path):
    """Seed 1: GRPO-sync and SAO both end below ℓ, so their cost ratio is unknown: it is left
    out of the token and wall-clock ratios (not read as the ratio of two last costs), named in
    the ratio's source, and the ratio of the other two seeds is exact."""
    from experiments.study import records

    folder = tmp_path / "wallclock_long512"
    grpo = {0: [0.1, 0.5, 0.5, 0.5], 1: [0.1, 0.2, 0.2, 0.2], 2: [0.1, 0.5, 0.5, 0.5]}
    sao = {0: [0.1, 0.1, 0.5, 0.5], 1: [0.1, 0.1, 0.1, 0.1], 2: [0.1, 0.1, 0.1, 0.5]}
    for seed in range(3):
        records.write_record(str(folder / wallclock.record_name("grpo_sync", seed)),
                             _arm_record(grpo[seed], [0, 100, 200, 300], [0, 10, 20, 30]))
        records.write_record(str(folder / wallclock.record_name("sao", seed)),
                             _arm_record(sao[seed], [0, 100, 200, 300], [0, 10, 20, 30]))
    m = wallclock.measured_ratios(wallclock.load_arm_records(str(folder)))
    level = m["level"]  # 0.9 × mean(0.5, 0.2, 0.5) = 0.36: seed 1 never reaches it in either arm
    assert abs(level - 0.36) < 1e-9
    v = m["arms"]["sao"]
    assert v["reached"] == [True, False, True] and v["ratio_seeds"] == [0, 2]
    # between evaluations success is linear in tokens: GRPO-sync reaches 0.36 at 65 tokens, SAO
    # at 165 (seed 0) and 265 (seed 2)
    expect = ((165 / 65) * (265 / 65)) ** 0.5
    assert abs(v["tokens_ratio"][0] - expect) < 1e-9
    ratios, sources, bounds = wallclock.token_ratios("", str(folder))
    assert abs(ratios["sao"][0] - expect) < 1e-9 and "sao" not in bounds
    assert "(2 seeds; 1 left out: neither run reached ℓ)" in sources["sao"]


def test_ratio_bound_follows_which_runs_fell_short_of_the_level():
    assert wallclock.ratio_bound([True, True], [True, True]) == ""
    assert wallclock.ratio_bound([True, False], [True, True]) == "at least"
    assert wallclock.ratio_bound([True, True], [False, True]) == "at most"
    assert wallclock.ratio_bound([False, True], [True, False]) == "unknown"


def test_arm_records_scale_is_the_one_their_folder_names():
    assert wallclock.records_scale("/x/wallclock_long512") == "long512"
    assert wallclock.records_scale("/x/wallclock_quick/") == "wallclock_quick"  # itself a scale
    assert wallclock.records_scale("/x/arms") == "" and wallclock.records_scale("/x/wallclock_nope") == ""
    assert wallclock.scale_words("/x/arms") == "scale not named by the folder"


def test_run_arms_runs_the_chosen_arms_only_and_refuses_unknown_ones(tmp_path, monkeypatch):
    import pytest

    from experiments.study import records, runner

    ran = []
    monkeypatch.setattr(runner, "warm_folder", lambda *a, **k: str(tmp_path / "warm"))
    monkeypatch.setattr(runner, "run_config",
                        lambda c, **k: ran.append(k["label"]) or {"label": k["label"]})
    monkeypatch.setattr(records, "write_record", lambda path, rec: None)
    out = wallclock.run_arms(str(tmp_path), scale="quick", seeds=(0, 1), cache=str(tmp_path),
                             workdir=str(tmp_path), modes=("sao", "grpo_sync"), log=lambda *a: None)
    assert sorted(out) == ["grpo_sync", "sao"] and sorted(out["sao"]) == [0, 1]
    assert len(ran) == 4 and ran[0].endswith("seed0") and ran[2].endswith("seed1")
    with pytest.raises(ValueError, match="not wall-clock arms"):
        wallclock.run_arms(str(tmp_path), scale="quick", cache=str(tmp_path),
                           workdir=str(tmp_path), modes=("grpo_sync", "bogus"))


def test_first_seed_picks_the_seeds_a_later_sitting_runs(monkeypatch):
    """--first-seed k --seeds n runs seeds k … k + n − 1 (the seeds run before are not run
    again); no seeds or a negative first seed is refused before anything runs."""
    import pytest

    class Ran(Exception):
        pass

    def fake_run_arms(folder, *, seeds, **kw):
        raise Ran(seeds)

    monkeypatch.setattr(wallclock, "run_arms", fake_run_arms)
    with pytest.raises(Ran) as ran:
        wallclock.main(["--run-arms", "--first-seed", "3", "--seeds", "2"])
    assert ran.value.args[0] == (3, 4)
    with pytest.raises(Ran) as ran:
        wallclock.main(["--run-arms", "--seeds", "3"])
    assert ran.value.args[0] == (0, 1, 2)
    for bad in (["--seeds", "0"], ["--first-seed", "-1"]):
        with pytest.raises(SystemExit, match="--seeds must be"):
            wallclock.main(["--run-arms"] + bad)
