"""The readings-by-block table: read from result files, one row per claim and block where both
arms ran, and the committed README block matches the committed result files."""

import json
import math
import os

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
    import shutil

    from experiments import study_all

    readme = os.path.join(os.path.dirname(report.RESULTS), "README.md")
    begin, end = report._markers("primary endpoints")
    with open(readme) as f:
        text = f.read()
    readings = claims.read(report.RESULTS)
    assert text[text.index(begin) + len(begin):text.index(end)].strip() == claims.primary_text(readings).strip()
    copy = str(tmp_path / "README.md")
    shutil.copy(readme, copy)
    for block in claims.blocks(report.RESULTS):
        study_all.refresh_summary_table(block, [r for r in readings if r.block == block], readme=copy)
    with open(copy) as f:
        assert f.read() == text
