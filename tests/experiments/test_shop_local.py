"""The local checkout block: a config selecting the local variant trains one step; the block's
arms differ from their bases in what their names say; the primary endpoint reads training turns."""

import math

from experiments.study import shop_local
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


def test_block_arms():
    sc = shop_local.local_scale("full", "local")
    assert sc["difficulty"] == "local" and sc["eval_tasks"] == 512
    assert len(sc["warm_seeds"]) * len(sc["rl_seeds"]) == 6
    cfg = {n: shop_local.arm_config(n, 0, sc, warm="/w", lr=3e-5) for n in shop_local.ARM_NAMES}
    steps = round(sc["budget"]["pivot"] / sc["tokens_per_step"]["pivotrl"])
    assert cfg["pivot_all_equal"].pivot.selection == "all"
    assert cfg["pivot_all_equal"].train.num_steps == steps and cfg["pivot_all_equal"].train.token_budget == 0
    assert cfg["pivot_exact"].pivot.reward == "exact"
    assert cfg["pivot_rollout"].pivot.candidates == "demo+rollout" and cfg["pivot_rollout"].pivot.reprofile_every > 0
    assert cfg["pivotrl"].pivot.candidates == "demo"
    assert shop_local.local_scale("full", "standard")["difficulty"] == "standard"


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
