"""The study's measures: curves from metric rows (wall-clock with the asynchronous correction),
cost to a success level (interpolated, censored), success at a budget, seed-paired Student-t
intervals, Holm's correction and the verdicts written from them."""

import math

import numpy as np
import pytest

from experiments.study import stats


def rec(evals, steps, asynchronous=False):
    """evals: {step: (success, tokens)}; steps: {step: step seconds}."""
    rows = [{"step": s, "time/step_s": v} for s, v in steps.items()]
    for s, (succ, tok) in evals.items():
        row = next((r for r in rows if r["step"] == s), None)
        if row is None:
            row = {"step": s}
            rows.append(row)
        row.update({"eval/success": succ, "cost/sampled_tokens": tok, "cost/prompt_tokens": 2 * tok})
    return {"rows": rows}


def test_curve_orders_evaluations_and_accumulates_step_time():
    r = rec({0: (0.1, 0), 2: (0.3, 200), 4: (0.5, 400)}, {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0})
    c = stats.curve(r)
    assert c["step"].tolist() == [0, 2, 4]
    assert c["wall_s"].tolist() == [0.0, 3.0, 10.0]
    assert c["prompt_tokens"].tolist() == [0, 400, 800]
    assert np.isnan(c["turns"]).all()  # rows without cost/turns


def test_curve_reads_the_modelled_clock_at_evaluation_steps():
    r = rec({0: (0.1, 0), 2: (0.3, 200), 4: (0.5, 400)}, {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0})
    for row, t in zip(sorted(r["rows"], key=lambda x: x["step"])[1:], (10.0, 25.0, 31.0, 70.0)):
        row["time/modelled_s"] = t  # steps 1..4: the virtual time at each step's end
    c = stats.curve(r)
    assert c["modelled_s"].tolist() == [0.0, 25.0, 70.0]
    assert c["wall_s"].tolist() == [0.0, 3.0, 10.0]  # the measured clock untouched
    assert stats.cost_to(c, 0.4, "modelled_s") == (47.5, True)
    real = stats.curve(rec({0: (0.1, 0), 2: (0.3, 200)}, {1: 1.0, 2: 2.0}))
    assert np.isnan(real["modelled_s"]).all() and len(real["modelled_s"]) == 2


def test_curve_reads_rollout_turns_and_shift_moves_them():
    r = {"rows": [{"step": 0, "eval/success": 0.1, "cost/turns": 0},
                  {"step": 2, "time/step_s": 1.0, "eval/success": 0.3, "cost/turns": 40}]}
    c = stats.curve(r)
    assert c["turns"].tolist() == [0.0, 40.0]
    assert stats.shift(c, turns=5.0)["turns"].tolist() == [5.0, 45.0]
    assert stats.cost_to(c, 0.2, "turns") == (pytest.approx(20.0), True)


def test_a_record_whose_counters_dropped_the_probe_after_step_0_reads_as_one_that_kept_it():
    def probe_rec(carried):
        rows = [{"step": 0, "eval/success": 0.1, "cost/sampled_tokens": 900.0,
                 "cost/prompt_tokens": 5000.0, "cost/turns": 100.0}]
        for s in (1, 2):  # 10 tokens, 20 prompt tokens, 2 turns a step
            base = (900.0, 5000.0, 100.0) if carried else (0.0, 0.0, 0.0)
            rows.append({"step": s, "time/step_s": 1.0, "cost/sampled_tokens": base[0] + 10 * s,
                         "cost/prompt_tokens": base[1] + 20 * s, "cost/turns": base[2] + 2 * s})
        rows[-1]["eval/success"] = 0.3
        return {"rows": rows}

    kept, dropped = probe_rec(True), probe_rec(False)
    assert stats.carries_one_time_cost(kept) and not stats.carries_one_time_cost(dropped)
    assert stats.carries_one_time_cost({"rows": [{"step": 0, "cost/sampled_tokens": 0.0},
                                                 {"step": 1, "cost/sampled_tokens": 5.0}]})
    for one_time in ("include", "exclude"):
        a, b = stats.curve(kept, one_time=one_time), stats.curve(dropped, one_time=one_time)
        for k in ("tokens", "prompt_tokens", "turns"):
            assert a[k].tolist() == b[k].tolist(), (one_time, k)
    assert stats.curve(dropped, one_time="exclude")["turns"].tolist() == [0.0, 4.0]
    assert stats.curve(dropped)["tokens"].tolist() == [900.0, 920.0]


def test_async_correction_charges_steps_after_an_evaluation_the_median():
    # the step right after the evaluation at step 2 found its batch ready (0.1 s)
    steps = {1: 2.0, 2: 2.0, 3: 0.1, 4: 2.0, 5: 2.0}
    r = rec({0: (0.0, 0), 2: (0.2, 2), 5: (0.4, 5)}, steps)
    plain = stats.curve(r)
    fixed = stats.curve(r, async_lag=0)
    assert plain["wall_s"][-1] == fixed["wall_s"][-1] == pytest.approx(8.1)
    lagged = stats.curve(r, async_lag=1)  # steps 3 and 4 (and 1, 2 after the step-0 eval)
    assert lagged["wall_s"][-1] == pytest.approx(10.0)


def test_cost_to_level_interpolates_and_censors():
    c = {"success": np.array([0.1, 0.3, 0.7, 0.9]), "tokens": np.array([0.0, 100.0, 200.0, 300.0])}
    assert stats.cost_to(c, 0.5) == (pytest.approx(150.0), True)
    assert stats.cost_to(c, 0.05) == (0.0, True)
    assert stats.cost_to(c, 0.95) == (300.0, False)


def test_at_budget_admits_the_final_overshooting_evaluation():
    c = {"success": np.array([0.1, 0.5, 0.6, 0.8]), "tokens": np.array([0.0, 500.0, 1000.0, 1030.0])}
    assert stats.at_budget(c, 1000.0) == 0.8
    assert stats.at_budget(c, 1000.0, tol=0.0) == 0.6
    assert stats.at_budget(c, 1000.0, last=2) == pytest.approx(0.7)
    assert math.isnan(stats.at_budget(c, -1.0))


def test_t_interval_and_paired_measures_match_hand_computed_values():
    # mean 2.5, s = 1.2910, se = 0.6455, t_{3, 0.975} = 3.1824 → half-width 2.0542
    p, lo, hi = stats.t_interval([1.0, 2.0, 3.0, 4.0])
    assert p == 2.5 and lo == pytest.approx(0.4457, abs=1e-4) and hi == pytest.approx(4.5543, abs=1e-4)
    assert stats.t_interval([2.0]) == (2.0, 2.0, 2.0)
    assert all(math.isnan(v) for v in stats.t_interval([]))
    # the interval over 3 seeds is wider than their min-max (a percentile bootstrap's limit)
    p, lo, hi = stats.t_interval([0.1, 0.2, 0.3])
    assert lo < 0.1 and hi > 0.3
    d = stats.paired_diff([0.8, 0.7, 0.9], [0.5, 0.5, 0.6])  # differences 0.3, 0.2, 0.3
    assert d[0] == pytest.approx(0.2667, abs=1e-4)
    # s = 0.05774, se = 0.03333, t_{2, 0.975} = 4.3027 → half-width 0.14342
    assert d[1] == pytest.approx(0.12325, abs=1e-4) and d[2] == pytest.approx(0.41009, abs=1e-4)
    r = stats.paired_ratio([400.0, 900.0], [100.0, 100.0])  # log 4, log 9: geometric mean 6
    assert r[0] == pytest.approx(6.0)
    half = 12.7062 * (math.log(9) - math.log(4)) / 2  # t_{1, 0.975} · s/√2, s/√2 = |Δlog| / 2
    assert r[1] == pytest.approx(6.0 * math.exp(-half), rel=1e-3) and r[2] == pytest.approx(6.0 * math.exp(half), rel=1e-3)


def test_t_reading_p_value_is_the_two_sided_one_sample_t_test():
    # values 1, 2, 3 against 0: t = 2 / (1/√3) = 3.4641 with 2 d.f. → p = 0.0742
    r = stats.t_reading([1.0, 2.0, 3.0])
    assert r.n == 3 and r.p_value == pytest.approx(0.0742, abs=1e-4)
    assert stats.t_reading([1.0, 2.0, 3.0], null=2.0).p_value == pytest.approx(1.0)
    assert math.isnan(stats.t_reading([1.0, 1.0]).p_value)  # no spread: no test


def test_holm_adjusts_step_down_and_keeps_input_order():
    # sorted 0.01, 0.03, 0.04 → 3·0.01, max(0.03, 2·0.03), max(0.06, 1·0.04)
    assert stats.holm([0.04, 0.01, 0.03]) == pytest.approx([0.06, 0.03, 0.06])
    assert stats.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    assert stats.holm([0.01, float("nan")]) == pytest.approx([0.02, 1.0])  # NaN counts as 1


def test_censored_ratio_kinds():
    assert stats.censored_ratio_kind(True, True) == stats.EXACT
    assert stats.censored_ratio_kind(True, False) == stats.AT_MOST   # denominator's cost is larger
    assert stats.censored_ratio_kind(False, True) == stats.AT_LEAST
    assert stats.censored_ratio_kind(False, False) == stats.UNKNOWN


@pytest.mark.parametrize("ci, target, expected", [
    ((4.0, 3.2, 5.0), 3.0, "HOLDS"),
    ((2.0, 1.5, 2.5), 3.0, "direction holds, the paper's effect size is ruled out"),
    ((2.5, 1.2, 4.0), 3.0, "direction holds (interval excludes no effect); effect size not resolved"),
    ((0.5, 0.3, 0.8), 3.0, "FAILS (the interval excludes no effect in the opposite direction)"),
    ((1.5, 0.8, 2.5), 3.0, "FAILS to show"),
    ((2.0, 0.8, 4.0), 3.0, "UNRESOLVED"),
])
def test_verdicts_against_null_and_effect_size(ci, target, expected):
    assert stats.verdict(*ci, null=1.0, target=target).startswith(expected)


def test_verdicts_without_effect_size():
    assert stats.verdict(0.1, 0.02, 0.2, null=0.0).startswith("HOLDS")
    assert stats.verdict(-0.1, -0.2, -0.02, null=0.0).startswith("FAILS")
    assert stats.verdict(0.1, -0.02, 0.2, null=0.0).startswith("UNRESOLVED")
    assert stats.verdict(0.1, 0.1, 0.1, null=0.0).startswith("no interval")


def test_best_at_budget_reads_the_same_evaluations_as_at_budget():
    c = {"tokens": np.array([0.0, 50.0, 100.0, 104.0, 160.0]), "success": np.array([0.1, 0.4, 0.3, 0.2, 0.9])}
    assert stats.best_at_budget(c, 100.0) == 0.4  # 104 is within the 5 % tolerance, 160 is not
    assert stats.at_budget(c, 100.0) == 0.2
    assert stats.best_at_budget(c, 160.0) == 0.9
    assert math.isnan(stats.best_at_budget(c, -1.0))
