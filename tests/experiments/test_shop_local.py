"""The local checkout block: a config selecting the local variant trains one step; the block's
arms differ from their bases in what their names say; the primary endpoint reads training turns."""

import math

import pytest

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
