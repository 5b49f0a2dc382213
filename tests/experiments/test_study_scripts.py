"""Every study script runs end to end with --quick into a temporary folder, writes its result
files from the numbers (with code version and cache provenance), and a second invocation takes
every run from the cache (keyed by code version + config) and regenerates the same files."""

import copy
import json
import os

import pytest

from experiments import study_all
from experiments.study import arms, report, runner
from rlvr.version import code_version

SCRIPTS = ("testbed", "calibrate", "lr", "pivot", "failures", "sao", "summary")


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
        if name not in ("summary", "testbed"):
            assert f"Computed on (CPU, jaxlib; a run repeats bit for bit only on the same kind): " \
                   f"{runner.machine()}." in text, name
        with open(os.path.join(out, f"study_{name}.json")) as f:
            json.load(f)
    for name in ("testbed", "calibrate", "lr", "pivot", "failures", "sao"):
        assert os.path.exists(os.path.join(out, f"study_{name}.png")), name
    with open(os.path.join(out, "study_lr.json")) as f:
        chosen = json.load(f)["chosen"]
    assert set(chosen) == {"grpo", "pivotrl", "sao", "reinforce"}
    with open(os.path.join(out, "study_pivot.md")) as f:
        first = f.read()
    assert "0 from the cache" in first and "Target 1" in first and "Target 2" in first
    assert "Learning rates from study_lr.json (quick scale)" in first
    with open(os.path.join(out, "study_sao.md")) as f:
        assert "Target 3" in f.read()
    # again: every run comes from the cache, the files are regenerated
    study_all.main(args + ["--skip", "study_testbed,study_calibrate"])
    with open(os.path.join(out, "study_pivot.md")) as f:
        again = f.read()
    assert "0 computed now" in again and "From the cache:" in again
    with open(os.path.join(out, "study_summary.md")) as f:
        summary = f.read()
    assert "GRPO ÷ PivotRL rollout tokens to ℓ" in summary and "primary" in summary and "CPU-hours" in summary
    assert "Where the pivot arms' final policies fail (study_failures)" in summary
    with open(os.path.join(out, "study_failures.json")) as f:
        failures = json.load(f)
    # every arm of the pivot study and the warm start, per seed; causes and success sum to 1
    assert set(failures["per_arm"]) == {"warm", "grpo", "pivotrl", "pivot_variance", "pivot_random",
                                        "pivot_all", "pivot_exact", "two_stage"}
    for arm, seeds in failures["per_arm"].items():
        for b in seeds.values():
            assert b["success"] + sum(b["causes"].values()) == pytest.approx(1.0), arm
    with open(os.path.join(out, "study_sao.json")) as f:
        sao = json.load(f)
    assert sao["code_version"] == code_version() and sao["run_code_versions"] == [code_version()]
    assert sao["compute"]["runs"] > 0 and sao["compute"]["cpu_h"] > 0  # the cached runs' compute
    # the warm starts the runs started from, with their measured seconds (quick: one per seed)
    warm = {runner.content_key(runner.warm_spec(arms.base_config("grpo", s, arms.scale("quick")), s))
            for s in (0, 1)}
    assert set(sao["warm_compute"]) == warm and len(warm) == 2
    assert all(w["wall_s"] > 0 and w["cpu_s"] > 0 for w in sao["warm_compute"].values())
    assert "runs' code version" in summary and "Compute of the runs behind these results" in summary


def test_learning_rates_swept_at_another_scale_are_not_used(tmp_path):
    """A sweep's chosen rates apply only to runs at the scale it was swept at."""
    import argparse

    from experiments.study import report

    with open(tmp_path / "study_lr.json", "w") as f:
        json.dump({"scale": "session", "chosen": {"grpo": 3e-4, "pivotrl": 3e-4, "sao": 3e-4,
                                                  "reinforce": 3e-4}}, f)
    def ctx(scale):
        return argparse.Namespace(out=str(tmp_path), args=argparse.Namespace(quick=False, scale=scale))
    same = report.chosen_lrs(ctx("session"), lambda m: 1e-4)
    assert same["lr"]["grpo"] == 3e-4 and same["source"] == "study_lr.json (session scale)"
    other = report.chosen_lrs(ctx("full"), lambda m: 1e-4)
    assert other["lr"] == {m: 1e-4 for m in ("grpo", "pivotrl", "sao", "reinforce")}
    assert "'session', not 'full'" in other["source"]


def test_summary_reads_code_version_and_compute_of_results_written_before_the_json_recorded_them(
        tmp_path):
    import argparse

    with open(tmp_path / "study_sao.json", "w") as f:
        json.dump({"ratios": {}}, f)
    with open(tmp_path / "study_sao.md", "w") as f:
        f.write("Code version (`rlvr.version.code_version()`): `aaaa`; runs computed with: "
                "`eac1f7e0cad09af0`, `0123abcd`\n\nRuns: 15 (0 computed now, 15 from the cache)\n\n"
                "Compute of these runs (summed over the invocations that computed them): "
                "0.69 wall-hours, 0.61 CPU-hours (process CPU time).\n")
    got = study_all._load(argparse.Namespace(out=str(tmp_path)), "sao")
    assert got["run_code_versions"] == ["eac1f7e0cad09af0", "0123abcd"]
    assert got["compute"] == {"runs": 15, "wall_h": 0.69, "cpu_h": 0.61}
    with open(tmp_path / "study_pivot.json", "w") as f:
        json.dump({"run_code_versions": ["ffff"]}, f)
    assert study_all._load(argparse.Namespace(out=str(tmp_path)), "pivot")["run_code_versions"] == ["ffff"]


def test_summary_counts_a_run_shared_by_two_result_files_once():
    """study_pivot and study_sao share their GRPO runs: the summary's total counts each run once,
    and adds the total of a file that predates per-run records (saying so)."""
    grpo = {"label": "grpo/seed0", "wall_s": 3600.0, "cpu_s": 7200.0}
    pivot = {"compute": {"runs": 2, "wall_h": 1.5, "cpu_h": 2.5},
             "run_compute": {"k_grpo": grpo, "k_piv": {"label": "pivotrl/seed0", "wall_s": 1800.0,
                                                       "cpu_s": 1800.0}}}
    sao = {"compute": {"runs": 2, "wall_h": 2.0, "cpu_h": 3.0},
           "run_compute": {"k_grpo": grpo, "k_sao": {"label": "sao/seed0", "wall_s": 3600.0,
                                                     "cpu_s": 3600.0}}}
    got = study_all.distinct_compute([pivot, sao])
    assert got == {"runs": 3, "wall_h": 2.5, "cpu_h": 3.5, "overlap_unknown": False}
    older = {"compute": {"runs": 4, "wall_h": 0.25, "cpu_h": 0.5}}
    got = study_all.distinct_compute([pivot, sao, older])
    assert got == {"runs": 7, "wall_h": 2.75, "cpu_h": 4.0, "overlap_unknown": True}


def test_summary_counts_a_config_run_again_as_a_second_run():
    """A config run again (same key, its own measured seconds: GRPO rerun in place beside SAO while
    another result file keeps the first run) is compute spent twice, so the total counts both."""
    first = {"compute": {"runs": 1, "wall_h": 1.0, "cpu_h": 2.0},
             "run_compute": {"k_grpo": {"label": "grpo/seed0", "wall_s": 3600.0, "cpu_s": 7200.0}}}
    again = {"compute": {"runs": 1, "wall_h": 0.5, "cpu_h": 1.0},
             "run_compute": {"k_grpo": {"label": "grpo/seed0", "wall_s": 1800.0, "cpu_s": 3600.0}}}
    got = study_all.distinct_compute([first, again, first])
    assert got == {"runs": 2, "wall_h": 1.5, "cpu_h": 3.0, "overlap_unknown": False}


def test_long_scale_takes_the_session_warm_start_and_learning_rates(tmp_path, monkeypatch):
    """The long preset changes budgets and evaluation spacing only: its warm-start key (model,
    tokenizer, task and SFT settings) equals the session's, and it runs at the rates the
    session-scale sweep chose, read from the default results folder."""
    import argparse

    from experiments.study import arms, report, runner

    long, session = arms.scale("long"), arms.scale("session")
    assert long["budget"]["grpo"] > session["budget"]["grpo"]
    assert long["budget"]["pivot"] > session["budget"]["pivot"]

    assert (runner.warm_spec(arms.base_config("grpo", 0, long), 0)
            == runner.warm_spec(arms.base_config("grpo", 0, session), 0))
    for method in arms.METHODS:
        a = arms.base_config(method, 1, long)
        b = arms.base_config(method, 1, session)
        assert runner.config_dict(a) == runner.config_dict(b), method
    monkeypatch.setattr(report, "RESULTS", str(tmp_path))
    with open(tmp_path / "study_lr.json", "w") as f:
        json.dump({"scale": "session", "chosen": {"grpo": 3e-4, "pivotrl": 3e-5, "sao": 1e-4,
                                                  "reinforce": 1e-4}}, f)
    ctx = argparse.Namespace(out=str(tmp_path / "long"), sc=long,
                             args=argparse.Namespace(quick=False, scale="long", out=""))
    got = report.chosen_lrs(ctx, lambda m: 1.0)
    assert got["lr"]["pivotrl"] == 3e-5 and got["source"] == "study_lr.json (session scale)"
    # written elsewhere (--out without a sweep of its own): still the session sweep's rates
    elsewhere = argparse.Namespace(out=str(tmp_path / "elsewhere"), sc=long,
                                   args=argparse.Namespace(quick=False, scale="long", out="elsewhere"))
    assert report.chosen_lrs(elsewhere, lambda m: 1.0)["lr"]["pivotrl"] == 3e-5


def test_long512_scale_differs_from_long_only_in_held_out_size():
    """Every arm's config at the long512 preset equals the long preset's except the number of
    held-out episodes (512, the full plan's), the warm start is the same, and its results own
    their README block."""
    from experiments.study import arms, report, runner

    long, long512 = arms.scale("long"), arms.scale("long512")
    assert long512["eval_tasks"] == 512 == arms.scale("full")["eval_tasks"]
    assert long["eval_tasks"] == 256
    assert (runner.warm_spec(arms.base_config("grpo", 0, long512), 0)
            == runner.warm_spec(arms.base_config("grpo", 0, long), 0))
    for name in ("grpo", "sao", "reinforce", "pivotrl", "sao_unfrozen"):
        a = runner.config_dict(arms.arm_config(name, 2, long512, warm="/w", lr=1e-4))
        b = runner.config_dict(arms.arm_config(name, 2, long, warm="/w", lr=1e-4))
        differing = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
        assert differing == {"eval.num_tasks"}, (name, differing)
        assert a["eval.num_tasks"] == 512
    begin, end = report.readme_markers(os.path.join(report.RESULTS, long512["results_subdir"]))
    with open(os.path.join(os.path.dirname(report.RESULTS), "README.md")) as f:
        readme = f.read()
    assert begin in readme and end in readme


def test_each_results_folder_owns_one_readme_block():
    from experiments.study import report

    assert report.readme_markers(report.RESULTS)[0] == "<!-- study summary: begin (written by study_all.py) -->"
    begin, end = report.readme_markers(os.path.join(report.RESULTS, "long"))
    assert begin == "<!-- study summary long: begin (written by study_all.py) -->"
    assert end == "<!-- study summary long: end -->"
    with open(os.path.join(os.path.dirname(report.RESULTS), "README.md")) as f:
        readme = f.read()
    assert begin in readme and end in readme  # the block the long scale's summary rewrites
    assert report.readme_markers("/tmp/elsewhere") is None
    assert report.readme_markers(os.path.join(report.RESULTS, "a", "b")) is None


def test_committed_compute_counts_shared_and_copied_runs_once(tmp_path):
    """The README's total: a run recorded by files in two folders counts once, a file copied into
    another folder (no per-run records) counts once, the earlier scripts' wall seconds are added,
    and the block lands between its markers."""
    from experiments.study import report

    def dump(path, numbers):
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(numbers))

    run = lambda s: {"label": "x", "wall_s": s, "cpu_s": 2 * s}  # noqa: E731
    older = {"compute": {"runs": 4, "wall_h": 1.0, "cpu_h": 1.5}, "run_code_versions": ["aaaa"]}
    dump(tmp_path / "study_pivot.json", older)
    dump(tmp_path / "copy" / "study_pivot.json", older)
    dump(tmp_path / "a" / "study_sao.json", {"compute": {"runs": 2, "wall_h": 2.0, "cpu_h": 4.0},
                                             "run_compute": {"k1": run(3600.0), "k2": run(3600.0)}})
    dump(tmp_path / "b" / "study_sao.json", {"compute": {"runs": 2, "wall_h": 2.0, "cpu_h": 4.0},
                                             "run_compute": {"k2": run(3600.0), "k3": run(7200.0)}})
    dump(tmp_path / "b" / "study_summary.json", {"compute": {"runs": 9, "wall_h": 9.0, "cpu_h": 9.0}})
    (tmp_path / "pivot_vs_grpo.md").write_text("# x\n\nCompute: 1800 s of training runs (3 runs) on the CPU.\n")
    (tmp_path / ".study_cache").mkdir()
    dump(tmp_path / ".study_cache" / "study_sao.json", {"compute": {"runs": 5, "wall_h": 5.0, "cpu_h": 5.0}})

    got = study_all.committed_compute(str(tmp_path))
    assert got["study"] == {"runs": 7, "wall_h": 5.0, "cpu_h": 9.5, "overlap_unknown": True}
    assert got["earlier"] == {"files": 1, "runs": 3, "wall_h": 0.5}
    assert sorted(got["folders"]) == [".", "a", "b", "copy"]
    assert got["folders"]["b"]["runs"] == 2

    readme = tmp_path / "README.md"
    readme.write_text("head\n<!-- compute total: begin (written by study_all.py) -->\nSTALE BLOCK\n"
                      "<!-- compute total: end -->\ntail\n")
    report.replace_readme_block("compute total", study_all.compute_block(got), str(readme))
    text = readme.read_text()
    assert "STALE BLOCK" not in text and text.startswith("head\n") and text.endswith("tail\n")
    assert "the study 7 runs, 5.00 wall-hours, 9.50 CPU-hours" in text
    assert "In all 5.50 wall-hours" in text
    readme.write_text("no markers\n")
    with pytest.raises(SystemExit, match="markers"):
        report.replace_readme_block("compute total", "x", str(readme))


def test_committed_compute_adds_what_earlier_versions_of_result_files_recorded(tmp_path):
    """A result file rerun in place keeps its first runs in the git history: the total adds them
    (once, however many versions repeat them), and counts each recorded warm start once; outside
    a repository the block says the history was not read."""
    import subprocess

    def git(*argv):
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t",
                        *argv], check=True, capture_output=True)

    results = tmp_path / "experiments" / "results"
    (results / "a").mkdir(parents=True)
    path = results / "a" / "study_sao.json"
    run = lambda s: {"label": "grpo/seed0", "wall_s": s, "cpu_s": 2 * s}  # noqa: E731
    warm = {"w1": {"wall_s": 360.0, "cpu_s": 720.0}}

    def version(runs, message):
        path.write_text(json.dumps({"compute": {"runs": len(runs), "wall_h": 0.0, "cpu_h": 0.0},
                                    "run_compute": runs, "warm_compute": warm, "reading": message}))
        git("add", "-A")
        git("commit", "-q", "-m", message)

    git("init", "-q")
    version({"k1": run(3600.0), "k2": run(1800.0)}, "first runs")
    version({"k1": run(3600.0), "k2": run(1800.0)}, "regenerated from the cache")
    version({"k1": run(3600.0), "k2": run(900.0)}, "k2 rerun in place")
    (results / "b").mkdir()
    (results / "b" / "study_pivot.json").write_text(json.dumps(  # not committed yet, no warm record
        {"compute": {"runs": 1, "wall_h": 1.0, "cpu_h": 1.0},
         "run_compute": {"k3": {"label": "x", "wall_s": 3600.0, "cpu_s": 3600.0}}}))

    got = study_all.committed_compute(str(results))
    assert got["study"] == {"runs": 3, "wall_h": 2.25, "cpu_h": 3.5, "overlap_unknown": False}
    assert got["replaced"] == {"runs": 1, "wall_h": 0.5, "cpu_h": 1.0}
    assert got["warm"] == {"warm_starts": 1, "wall_h": 0.1, "cpu_h": 0.2, "unrecorded": 1}
    block = study_all.compute_block(got)
    assert "do not (reruns in place, runs at earlier code versions; read from the git history): " \
           "1 runs, 0.50 wall-hours, 1.00 CPU-hours" in block
    assert "SFT warm starts the result files record: 1, 0.10 wall-hours" in block
    assert "(1 current result file with runs predate these records" in block
    assert "In all 2.85 wall-hours" in block and "(4.70 CPU-hours" in block

    none = study_all.committed_compute(str(results), history=False)
    assert none["replaced"] is None and none["warm"]["warm_starts"] == 1
    assert "no git history of the result files here" in study_all.compute_block(none)
    assert study_all.committed_versions(str(tmp_path / "nowhere")) is None


def test_committed_compute_adds_the_per_run_records_and_the_blocks_warm_starts(tmp_path):
    """The per-run records count once each, by folder, with every warm start a block records (a
    warm start never trained, NaN seconds, adds nothing); the block names them and "In all" adds
    them to the result files' total."""
    from experiments.study import records as rec_io
    from experiments.study import shop_local

    results, records = tmp_path / "results", tmp_path / "records"
    results.mkdir()
    rec = lambda key, s: {"key": key, "label": key, "wall_s": s, "cpu_s": 2 * s,  # noqa: E731
                          "rows": [{"step": 0}]}
    rec_io.write_record(str(records / "wallclock_x" / "grpo_sync.s0.jsonl.gz"), rec("a", 3600.0))
    rec_io.write_record(str(records / "wallclock_x" / "sao.s0.jsonl.gz"), rec("b", 1800.0))
    rec_io.write_record(str(records / "shop_local_full_local" / "grpo.w0s0.jsonl.gz"), rec("c", 7200.0))
    warm = {"wall_s": 900.0, "cpu_s": 1800.0}
    shop_local.write_block_meta(str(records / "shop_local_full_local"), {"scale": "full"},
                                {"warm0": warm, "warm1": {"wall_s": float("nan"), "cpu_s": 0.0}})
    got = study_all.committed_compute(str(results), history=False, records=str(records))["records"]
    assert got["runs"] == 3 and got["wall_h"] == 3.5 and got["cpu_h"] == 7.0
    assert got["folders"]["wallclock_x"] == {"runs": 2, "wall_h": 1.5, "cpu_h": 3.0}
    assert got["warm"] == {"warm_starts": 1, "wall_h": 0.25, "cpu_h": 0.5}
    block = study_all.compute_block(study_all.committed_compute(str(results), history=False,
                                                                records=str(records)))
    assert "the per-run records" in block and "3 runs, 3.50 wall-hours, 7.00 CPU-hours" in block
    assert "`study/records/wallclock_x/` 2 runs, 1.50 wall-hours" in block
    assert "In all 3.75 wall-hours" in block and "(7.50 CPU-hours" in block
    assert "per-run records" not in study_all.compute_block(
        study_all.committed_compute(str(results), history=False))


def test_pivot_reading_names_arms_that_peaked_above_their_final_success():
    from experiments import study_pivot

    best = {"pivotrl": [0.27, 0.26], "pivot_exact": [0.56, 0.58]}
    final = {"pivotrl": [0.26, 0.26], "pivot_exact": [0.12, 0.54]}
    text = study_pivot.peak_reading(best, final, ["pivotrl", "pivot_exact"])
    assert "pivot_exact best 0.570 vs final 0.330" in text
    assert "0.56 → 0.12" in text
    assert "pivotrl" not in text
    assert study_pivot.peak_reading({"pivotrl": [0.27]}, {"pivotrl": [0.26]}, ["pivotrl"]) == ""


def test_an_arm_keeps_its_colour_across_plot_panels():
    from experiments.study import report

    panels = [("a", "x", [("grpo", None, None), ("pivotrl", None, None)], None),
              ("b", "x", [("pivot_all", None, None), ("pivotrl", None, None)], None)]
    colours = report.label_colours(panels, ["c0", "c1", "c2"])
    assert colours == {"grpo": "c0", "pivotrl": "c1", "pivot_all": "c2"}


def test_sao_reading_says_when_grpo_and_sao_runs_were_not_back_to_back():
    from experiments import study_sao
    from experiments.study import stats

    def rec(start, logged_s=600.0):
        return {"rows": [{"time": start}, {"time": start + logged_s}]}

    grpo = {0: rec(0.0), 1: rec(0.0)}  # each run logs for 600 s unless told
    # back to back (also after a run that lasted hours), overlapping, in either order
    assert study_sao.gap_hours(grpo, {0: rec(600.0), 1: rec(300.0)}) == pytest.approx([0.0, 0.0])
    assert study_sao.gap_hours({0: rec(0.0, 3 * 3600.0)}, {0: rec(3 * 3600.0 + 60.0)}) == pytest.approx([60.0 / 3600.0])
    assert study_sao.gap_hours({0: rec(5 * 3600.0)}, {0: rec(0.0)}) == pytest.approx([(5 * 3600.0 - 600.0) / 3600.0])
    gaps = study_sao.gap_hours(grpo, {0: rec(3 * 3600.0 + 600.0), 1: rec(9 * 3600.0 + 600.0)})
    assert gaps == pytest.approx([3.0, 9.0])

    n = {"wall_ratio": stats.paired_ratio([1.0, 1.2], [2.0, 2.1])}
    diffs = {k: stats.paired_diff([0.6, 0.6], [0.5, 0.52]) for k in (
        "sao-reinforce", "sao-sao_naive_gae", "sao-sao_k1", "sao-sao_pretrain_none", "sao-sao_unfrozen")}
    reached = {"sao": 2, "grpo": 2}
    apart = study_sao.reading(n, diffs, reached, 2, gaps)
    assert "not made back to back" in apart and "3.0–9.0 h after the earlier ended" in apart
    assert "not made back to back" not in study_sao.reading(n, diffs, reached, 2, [0.25, 0.5])


def test_provenance_names_each_machine_the_runs_were_computed_on(tmp_path):
    """Runs computed on two kinds of CPU are both named; a record older than the field says so."""
    import argparse

    ctx = report.Ctx(name="sao", args=argparse.Namespace(), sc={}, out=str(tmp_path),
                     cache=str(tmp_path / "cache"), workdir=str(tmp_path), seeds=(0,), started=0.0)
    ctx.records = [{"key": "a", "code_version": "v", "machine": "CPU B, 2 CPUs, jaxlib 0.10.2"},
                   {"key": "b", "code_version": "v", "machine": "CPU A, 2 CPUs, jaxlib 0.10.2"},
                   {"key": "c", "code_version": "v", "machine": "CPU A, 2 CPUs, jaxlib 0.10.2"},
                   {"key": "d", "code_version": "v"}]
    text = report.provenance(ctx)
    assert ("Computed on (CPU, jaxlib; a run repeats bit for bit only on the same kind): "
            "CPU A, 2 CPUs, jaxlib 0.10.2; CPU B, 2 CPUs, jaxlib 0.10.2; not recorded.") in text
    from importlib import metadata

    assert runner.machine().endswith(f", {os.cpu_count()} CPUs, jaxlib {metadata.version('jaxlib')}")
    # pinned to fewer CPUs (XLA's thread pool follows the affinity): the record says so
    import unittest.mock

    with unittest.mock.patch.object(runner, "usable_cpus", return_value=1):
        assert runner.machine().endswith(f", {os.cpu_count()} CPUs (1 usable), jaxlib "
                                         f"{metadata.version('jaxlib')}")


def test_counts_read_singular_for_one():
    assert report.count(1, "seed") == "1 seed"
    assert report.count(3, "seed") == "3 seeds"
    assert report.count(0, "run") == "0 runs"


@pytest.mark.parametrize("name,method,chosen", [("long512_lr", "pivotrl", 3e-5),
                                                 ("long512_lr_sao", "sao", 1e-4),
                                                 ("long512_lr_rm", "reinforce", 5e-5)])
def test_lr_check_scales_change_only_the_sweep_of_long512(name, method, chosen):
    """An lr-check preset's arms equal long512's at a given rate (same warm start, testbed,
    held-out set and main budgets); its sweep runs at those main budgets, the checked method over
    rates either side of the rate chosen before it (by the session sweep, or by long512_lr_sao's
    sweep for the running-mean arm); it runs study_lr only and its results own a README block."""
    from experiments.study import arms, runner

    base, lr = arms.scale("long512"), arms.scale(name)
    assert (runner.warm_spec(arms.base_config("grpo", 0, lr), 0)
            == runner.warm_spec(arms.base_config("grpo", 0, base), 0))
    for arm in ("grpo", "pivotrl", "sao", "reinforce"):
        a = runner.config_dict(arms.arm_config(arm, 0, lr, warm="/w", lr=3e-5))
        b = runner.config_dict(arms.arm_config(arm, 0, base, warm="/w", lr=3e-5))
        assert a == b, arm
    assert lr["lr_budget"] == base["budget"] != base["lr_budget"]
    assert min(lr["lr_grid"][method]) < chosen < max(lr["lr_grid"][method])
    assert lr["lr_check"] and lr["lr_scale"] == name == lr["results_subdir"]
    assert set(study_all.STEPS) - set(lr["skip_steps"]) == {"study_lr"}
    begin, end = report.readme_markers(os.path.join(report.RESULTS, lr["results_subdir"]))
    with open(os.path.join(os.path.dirname(report.RESULTS), "README.md")) as f:
        readme = f.read()
    assert begin in readme and end in readme


def test_lr_sweep_runs_the_methods_arms_names():
    from experiments import study_lr

    assert study_lr.swept_methods(None) == ["grpo", "pivotrl", "sao", "reinforce"]
    assert study_lr.swept_methods(frozenset({"pivotrl", "grpo"})) == ["grpo", "pivotrl"]
    with pytest.raises(SystemExit, match="names none of the swept methods"):
        study_lr.swept_methods(frozenset({"pivot_all"}))


def test_lr_sweep_tables_cost_to_grpo_level_and_reads_which_rates_reach_it():
    """ℓ = 0.9 × the mean of the chosen GRPO run's last three evaluations; a run reaching it is
    costed (tokens and wall-clock) by linear interpolation, one that never does at its last
    evaluation, marked not reached; the reading gives GRPO ÷ the method's chosen-rate run."""
    import argparse

    from experiments import study_lr

    def run(success, tokens):
        return {"curve": {"success": success, "tokens": tokens, "wall_s": [t / 10 for t in tokens]}}

    numbers = {"chosen": {"grpo": 1e-4, "pivotrl": 3e-5},
               "runs": {"grpo/0.0001": run([0.1, 0.5, 0.6, 0.7], [0, 100, 200, 300]),
                        "pivotrl/1e-05": run([0.1, 0.3], [50, 150]),
                        "pivotrl/3e-05": run([0.1, 0.2, 0.6], [50, 100, 150])}}
    got = study_lr._cost_to_level(numbers)
    assert got["end"] == pytest.approx(0.6) and got["level"] == pytest.approx(0.54)
    assert got["tokens"]["grpo/0.0001"] == (pytest.approx(100 + 0.4 * 100), True)
    assert got["tokens"]["pivotrl/1e-05"] == (150.0, False)
    assert got["tokens"]["pivotrl/3e-05"] == (pytest.approx(100 + 0.85 * 50), True)
    assert got["wall"]["pivotrl/3e-05"] == (pytest.approx(14.25), True)
    assert got["wall"]["pivotrl/1e-05"] == (15.0, False)
    numbers.update(level=got["level"], tokens_to_level=got["tokens"], wall_to_level=got["wall"])
    ctx = argparse.Namespace(sc={"lr_grid": {"grpo": (1e-4,), "pivotrl": (1e-5, 3e-5, 1e-4)}})
    numbers["runs"] = {k: {**v, "clip_frac": 0.0} for k, v in numbers["runs"].items()}
    text = " ".join(study_lr._reading(numbers, ctx))
    assert "grpo: 0.0001 (one rate, not swept)" in text
    assert "pivotrl reaches ℓ (0.540) within its budget at rate(s) 3e-05." in text
    assert ("GRPO ÷ pivotrl at its chosen rate, to ℓ on seed 0: 0.98× in rollout tokens, "
            "0.98× in training wall-clock.") in text
    assert study_lr._ratio_text(got["tokens"], "grpo/0.0001", "pivotrl/1e-05") == "< 0.93×"
    assert study_lr._cost_to_level({"chosen": {"pivotrl": 3e-5}, "runs": {}}) == {}


def _committed(block: str, name: str) -> dict:
    """A committed result file's json, `experiments/results/<block>/<name>.json`."""
    with open(os.path.join(report.RESULTS, block, f"{name}.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("block", ["long512_lr", "long512_lr_sao", "long512_lr_rm"])
def test_committed_lr_check_grpo_run_repeats_the_back_to_back_blocks_seed0_run(block):
    """The README's claim: the same config on the same kind of CPU, warm start recomputed in
    another sitting, gives the same evaluations at the same token counts."""
    lr = _committed(block, "study_lr")["runs"]["grpo/0.0001"]["curve"]
    b2b = _committed("long512_b2b", "study_sao")["curves"]["grpo"]["0"]
    assert lr["success"] == b2b["success"] and lr["tokens"] == b2b["tokens"]


def test_committed_lr_check_blocks_repeat_their_synchronous_and_fixed_runs_only():
    """The README's claim for long512_lr_rm against long512_lr_sao: the GRPO run and the
    running-mean run at 1e-4 repeat bit for bit; the SAO run and the running-mean run at 5e-5
    (asynchronous collector, another sitting) do not."""

    def runs(block):
        return {k: (v["curve"]["success"], v["curve"]["tokens"])
                for k, v in _committed(block, "study_lr")["runs"].items()}

    rm, sao = runs("long512_lr_rm"), runs("long512_lr_sao")
    assert rm["grpo/0.0001"] == sao["grpo/0.0001"]
    assert rm["reinforce/0.0001"] == sao["reinforce/0.0001"]
    assert rm["sao/0.0001"] != sao["sao/0.0001"]
    assert rm["reinforce/5e-05"] != sao["reinforce/5e-05"]


@pytest.mark.parametrize("block, block_arms", [
    ("long512_lr_sao", ("grpo", "reinforce", "sao", "sao_k1", "sao_naive_gae", "sao_pretrain_none",
                        "sao_unfrozen")),
    ("long512_lr_rm", ("grpo", "reinforce", "sao"))])
def test_committed_lr_check_sao_blocks_have_five_seeds_computed_at_one_code_version(block, block_arms):
    """The README's claim for the SAO rate-check blocks: five seeds per arm, every run at one code
    version, seed 0's GRPO run the sweep's."""
    sao, lr = _committed(block, "study_sao"), _committed(block, "study_lr")
    assert {arm: sorted(seeds) for arm, seeds in sao["curves"].items()} == {
        arm: ["0", "1", "2", "3", "4"] for arm in block_arms}
    assert sao["run_code_versions"] == lr["run_code_versions"] == ["67d4489e195e224b"]
    assert sao["curves"]["grpo"]["0"] == lr["runs"]["grpo/0.0001"]["curve"]


def test_a_cached_run_carries_the_callers_label(tmp_path):
    """Provenance names runs by the caller's label (the sweep's names carry the rate), also when
    the record comes from the cache with the label it was first run under."""
    from experiments.study import arms

    config = arms.arm_config("grpo", 0, arms.scale("quick"), warm="/w", lr=1e-4)
    key = runner.run_key(runner.with_batch_bucket(config, 32), 32)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / f"{key}.json").write_text(json.dumps({"key": key, "label": "grpo/seed0"}))
    got = runner.run_config(config, workdir_root=str(tmp_path / "work"), cache=str(tmp_path),
                            label="grpo/seed0/lr0.0001")
    assert got["from_cache"] and got["label"] == "grpo/seed0/lr0.0001"
    assert runner.run_config(config, workdir_root=str(tmp_path / "work"), cache=str(tmp_path))["label"] == "grpo/seed0"


def test_a_run_saves_its_spent_time_after_the_probe_and_each_evaluation(tmp_path, monkeypatch):
    """A run killed without clean-up (SIGKILL, a lost machine) keeps its invocation's time and
    probe wall-clock up to its last evaluation: the study_spent file is written during the run,
    not only when the invocation ends."""
    import rlvr.train.loop as loop
    import rlvr.train.setup as setup
    from experiments.study import arms

    class Part:
        def prepare(self, ref_params, restored=None):
            return None

        def evaluate(self, params):
            return {"eval/success": 0.5}

    class Run:
        collector, evaluator = Part(), Part()

        def close(self):
            pass

    seen = []

    def train(r):
        r.collector.prepare(None)
        seen.append(json.loads(spent.read_text()))
        r.evaluator.evaluate(None)
        seen.append(json.loads(spent.read_text()))
        raise RuntimeError("killed")

    monkeypatch.setattr(setup, "build_run", lambda config, wd: Run())
    monkeypatch.setattr(loop, "train", train)
    config = arms.arm_config("grpo", 0, arms.scale("quick"), warm="/w", lr=1e-4)
    key = runner.run_key(runner.with_batch_bucket(config, 32), 32, str(tmp_path))
    spent = tmp_path / "work" / key / "study_spent.json"
    with pytest.raises(RuntimeError, match="killed"):
        runner.run_config(config, workdir_root=str(tmp_path / "work"), cache=str(tmp_path))
    assert [s["invocations"] for s in seen] == [1, 1]
    assert "probe_wall_s" in seen[0] and seen[0]["wall_s"] >= 0.0
    assert seen[1]["wall_s"] >= seen[0]["wall_s"] and seen[1]["cpu_s"] >= seen[0]["cpu_s"]


def test_a_cached_run_is_found_after_its_cache_moved(tmp_path):
    """A run key holds paths inside the cache relative to it, so a cache moved with its repository
    (or read from another work tree) still hits, and the record's exported policy is where the
    cache lies now; a record written under the older absolute-path key is found too, and filed
    again under its portable key, so it also hits once its cache has moved."""
    import shutil

    from experiments.study import arms

    def config(cache):
        return runner.with_batch_bucket(arms.arm_config("grpo", 0, arms.scale("quick"),
                                                        warm=str(cache / "warm" / "w0"), lr=1e-4), 32)

    first, moved = tmp_path / "a" / ".study_cache", tmp_path / "b" / ".study_cache"
    key = runner.run_key(config(first), 32, str(first))
    assert key == runner.run_key(config(moved), 32, str(moved))
    assert key != runner.run_key(config(first), 32)  # the absolute-path key differs
    assert runner.portable_config(config(first), str(first))["model.init_from"] == "<cache>/warm/w0"
    (first / "runs").mkdir(parents=True)
    (first / "models" / key).mkdir(parents=True)
    (first / "models" / key / "config.json").write_text("{}")
    (first / "runs" / f"{key}.json").write_text(json.dumps(
        {"key": key, "label": "grpo/seed0", "model": str(first / "models" / key)}))
    shutil.move(str(first.parent), str(moved.parent))

    got = runner.run_config(config(moved), workdir_root=str(tmp_path / "work"), cache=str(moved),
                            export=True)
    assert got["from_cache"] and got["key"] == key and got["model"] == str(moved / "models" / key)

    legacy = tmp_path / "c" / ".study_cache"
    old_key = runner.run_key(config(legacy), 32)
    (legacy / "runs").mkdir(parents=True)
    (legacy / "models" / old_key).mkdir(parents=True)
    (legacy / "models" / old_key / "config.json").write_text("{}")
    (legacy / "runs" / f"{old_key}.json").write_text(json.dumps(
        {"key": old_key, "label": "x", "model": str(legacy / "models" / old_key)}))
    got = runner.run_config(config(legacy), workdir_root=str(tmp_path / "work"), cache=str(legacy),
                            export=True)
    assert got["from_cache"] and got["key"] == old_key
    # ... and filed again under its portable key, so it hits after its cache moved too
    new_key = runner.run_key(config(legacy), 32, str(legacy))
    assert (legacy / "runs" / f"{new_key}.json").exists()
    moved_legacy = tmp_path / "d" / ".study_cache"
    shutil.move(str(legacy.parent), str(moved_legacy.parent))
    assert runner.run_key(config(moved_legacy), 32) != old_key
    got = runner.run_config(config(moved_legacy), workdir_root=str(tmp_path / "work"),
                            cache=str(moved_legacy), export=True)
    assert got["from_cache"] and got["key"] == old_key
    assert got["model"] == str(moved_legacy / "models" / new_key)
    assert json.loads((moved_legacy / "models" / new_key / "config.json").read_text()) == {}


def test_costs_to_level_print_a_lower_bound_when_the_level_was_not_reached():
    from experiments.study import stats

    assert stats.fmt_costs([(108733.4, True), (300148.0, False)]) == "108733, >300148"


def test_warm_start_key_names_the_lm_head_it_trains_with():
    # the warm start trains through train.logprob_impl's LM head; another head is another start
    c = arms.base_config("grpo", 0, arms.scale("quick"))
    other = copy.deepcopy(c)
    other.train.logprob_impl = "vocab_tiled"
    assert runner.warm_spec(c, 0)["logprob_impl"] == c.train.logprob_impl
    assert runner.content_key(runner.warm_spec(c, 0)) != runner.content_key(runner.warm_spec(other, 0))
