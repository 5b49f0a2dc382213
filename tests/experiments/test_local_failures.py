"""Where the local block's policies fail (experiments/study/local_failures.py): each basket's
outcome on episodes played by hand through the real three-basket environment, how an episode
ended, the summary, and the report from a block's folders."""

import json
import os

import pytest

from experiments.study import local_failures as lf
from rlvr.envs.shop import ShopEnv, oracle_action
from rlvr.tasks.shop import generate
from tests.experiments.blocks import assert_nothing_written, one_run_block


def play(task, choose, limit=200):
    """The final state of an episode where `choose(state)` gives each action (None: stop)."""
    env = ShopEnv()
    env.reset(task, seed=0)
    for _ in range(limit):
        s = env.state()
        a = None if s["done"] else choose(s)
        if a is None:
            break
        env.step(a)
    return env.state()


def in_basket(basket, action):
    """The oracle's choice, with `action(state)` in basket `basket` where it returns one."""
    def choose(s):
        return (s["basket"] == basket and action(s)) or oracle_action(s)
    return choose


@pytest.fixture(scope="module")
def task():
    return generate(1, split="eval", seed=1, difficulty="local3")[0]


def test_each_basket_gets_the_outcome_its_payment_shows(task):
    initial = task.environment_snapshot["state"]
    outcomes = lambda final: lf.basket_outcomes(initial, final["events"])  # noqa: E731
    paid_wrong = lambda s: oracle_action(s).startswith("pay") and f"pay {s['total'] + 1}\n"  # noqa: E731
    unordered = lambda s: next(f"add {k}1\n" for k in s["prices"] if k not in dict(s["order"]))  # noqa: E731

    def wrong_item(s):  # adds an unordered item in place of its first add
        return not s["cart"] and oracle_action(s).startswith("add") and unordered(s)

    def early(s):  # pays once half the cart is in
        return len(s["cart"]) * 2 >= len(s["order"]) and s["cart"] and f"pay {s['total']}\n"

    right = play(task, oracle_action)
    assert outcomes(right) == ["paid right"] * 3
    final = play(task, in_basket(0, paid_wrong))
    assert outcomes(final) == ["cart right, wrong amount", "paid right", "paid right"]
    # the environment's own record of the earlier baskets agrees
    assert [p["right"] for p in final["payments"]] == [False, True]
    assert outcomes(play(task, in_basket(1, wrong_item)))[:2] == ["paid right", "wrong item in the cart"]
    assert outcomes(play(task, in_basket(2, early))) == ["paid right", "paid right",
                                                         "line missing or wrong quantity"]
    # stopped in basket 2: it was not paid and basket 3 was never opened
    stop = play(task, lambda s: None if s["basket"] == 1 and s["read"] else oracle_action(s))
    assert outcomes(stop) == ["paid right", "not paid when the episode ended", "not reached"]


def test_an_episode_ends_by_its_last_payment_or_the_turn_limit_else_by_the_rollouts_reason(task):
    from rlvr.verifiers.shop import ShopOutcomeVerifier

    def facts(final, stop_reason):
        return lf.episode_facts(task, final, ShopOutcomeVerifier().verify_state(task, final), stop_reason)

    right = facts(play(task, oracle_action), "eos")  # the rollout says eos for the environment's end
    assert right["success"] and right["end"] == "paid" and right["wrong_adds"] == 0
    rereads = play(task, lambda s: f"get {s['order'][0][0]}\n")  # re-reads until the turn limit
    limit = facts(rereads, "eos")
    assert not limit["success"] and limit["end"] == "max_turns" and limit["turns"] == rereads["max_turns"]
    assert limit["baskets"] == ["not paid when the episode ended", "not reached", "not reached"]
    cut = facts(play(task, lambda s: None if s["turn"] == 3 else oracle_action(s)), "max_length")
    assert cut["end"] == "max_length" and cut["turns"] == 3 and not cut["success"]
    s = lf.summarize([right, limit, cut])
    assert s["success"] == pytest.approx(1 / 3)
    assert s["ends"] == pytest.approx({**{k: 0.0 for k in lf.ENDS}, "paid": 1 / 3, "max_turns": 1 / 3,
                                       "max_length": 1 / 3})
    assert s["by_basket"][0] == pytest.approx({**{o: 0.0 for o in lf.OUTCOMES}, "paid right": 1 / 3,
                                               "not paid when the episode ended": 2 / 3})
    assert s["by_basket"][2]["not reached"] == pytest.approx(2 / 3)
    assert lf.decisive_share(s["by_basket"][0]) == 1.0
    none_right = {**{o: 0.0 for o in lf.OUTCOMES}, "not reached": 1.0}
    assert lf.decisive_share(none_right) is None  # no payment with the cart right
    assert lf.decisive_share({**s["by_basket"][0], "cart right, wrong amount": 1 / 3}) == pytest.approx(0.5)


def test_kept_pivots_are_read_from_each_pivotrl_runs_selection(tmp_path):
    from experiments.study import shop_local

    folder = tmp_path / "rec"
    one_run_block(str(folder), "pivotrl")
    (tmp_path / "work" / "k0").mkdir(parents=True)
    (tmp_path / "work" / "k0" / "pivots.json").write_text(json.dumps({"candidates": [
        {"key": "t/demo/3/abc", "kept": True}, {"key": "t/demo/4/abd", "kept": False}]}))
    block = shop_local.load_block(str(folder))
    cache = str(tmp_path / "cache")
    assert lf.kept_pivots(block, str(folder), cache, str(tmp_path / "work")) == {
        shop_local.BlockSeeds(0, 0): frozenset({"t/demo/3/abc"})}
    # found nowhere (no work folder, none stored, no warm start to recompute it on): named as
    # not found, not read as a selection that kept nothing
    assert lf.kept_pivots(block, str(folder), cache, str(tmp_path / "elsewhere")) == {
        shop_local.BlockSeeds(0, 0): None}
    # the copy stored with the records is read where the work folder is gone
    from experiments.study import block_files

    assert block_files.store_selection(str(folder), "pivotrl", "w0s0", str(tmp_path / "work" / "k0"))
    assert lf.kept_pivots(block, str(folder), cache, str(tmp_path / "elsewhere")) == {
        shop_local.BlockSeeds(0, 0): frozenset({"t/demo/3/abc"})}


def test_with_no_policy_found_nothing_is_written(tmp_path):
    """A fresh clone has neither the study cache nor the runs' exports: the script exits naming
    them (the warm start and the final policy) and leaves the committed report as it is."""
    assert_nothing_written(lf.main, tmp_path, "pivotrl", "none of the block's 2 policies is in --cache")


def test_report_samples_each_seeds_warm_start_and_final_policies_and_caches_them(tmp_path, monkeypatch):
    from experiments.study import arms, shop_local
    from experiments.study.records import write_record
    from rlvr.models.hf import save_pretrained
    from rlvr.train import setup
    from rlvr.train.setup import build_kit_checked, build_policy, build_tokenizer

    sc = shop_local.local_scale("quick", "local")
    c = arms.base_config("grpo", 0, sc)
    tok = build_tokenizer(c, build_kit_checked(c))
    cache, work = tmp_path / "cache", tmp_path / "work"
    save_pretrained(build_policy(c, tok.vocab_size), str(cache / "warm" / "w"))
    save_pretrained(build_policy(c, tok.vocab_size), str(work / "k_pivot" / "export"))
    rec = tmp_path / "rec"
    shop_local.write_block_meta(str(rec), {"scale": "quick", "difficulty": "local",
                                           "learning_rates": shop_local.declared_learning_rates("quick")}, {})
    for arm, key in (("grpo", "k_grpo"), ("pivotrl", "k_pivot")):
        write_record(shop_local.record_path(str(rec), arm, shop_local.BlockSeeds(0, 0)), {
            "key": key, "config": {"model.init_from": "/elsewhere/warm/w"},
            "rows": [{"step": 0, "eval/success": 0.5}, {"step": 7, "eval/success": 0.25}]})
    argv = ["--quick", "--records", str(rec), "--cache", str(cache), "--workdir", str(work),
            "--out", str(tmp_path / "out")]
    assert lf.main(argv) == 0
    got = json.loads((tmp_path / "out" / "failures_quick_local.json").read_text())
    # the warm start is found in --cache by its folder's name; the GRPO run's export is missing
    assert [(g["run"], g["policy"], g["last_evaluation"], g["breakdown"] is None) for g in got] == [
        ("w0s0", "warm start (step 0)", None, False), ("w0s0", "grpo after RL (7 steps)", 0.25, True),
        ("w0s0", "pivotrl after RL (7 steps)", 0.25, False)]
    b = got[0]["breakdown"]
    assert b["episodes"] == sc["eval_tasks"] and len(b["by_basket"]) == 3
    for shares in b["by_basket"]:
        assert sum(shares.values()) == pytest.approx(1.0)
    assert sum(b["ends"].values()) == pytest.approx(1.0)
    # the demonstration states: the PivotRL run's selection is found nowhere (no work folder,
    # none stored, and the record's key is not one its arm's config gives, so it is not
    # recomputed): named, not sampled; the held-out payment states are the evaluation's tasks',
    # three baskets each
    demo = got[0]["demo_states"]
    assert demo["kept pivots"] is None
    assert demo["held-out payments"]["states"] == 3 * min(sc["eval_tasks"], lf.DEMO_HELD_OUT_TASKS)
    assert got[1]["demo_states"] is None
    md = (tmp_path / "out" / "failures_quick_local.md").read_text()
    assert "| w0s0 | grpo after RL (7 steps) | not in the cache |" in md
    assert "| w0s0 | warm start (step 0) | selection not found |" in md
    assert "†" not in md  # nothing read back: no earlier numbers file
    # a second reading comes from the cache: nothing is sampled again
    monkeypatch.setattr(setup, "build_run", lambda *a, **k: pytest.fail("sampled again"))
    assert lf.main(argv) == 0
    assert json.loads((tmp_path / "out" / "failures_quick_local.json").read_text()) == got
    assert os.listdir(cache / "local_failures")
    # on a machine without a policy's folder its row is read back from the last numbers file,
    # marked, with the same numbers; a row filed under another folder key is not
    import shutil

    from experiments.study import block_files

    shutil.rmtree(work / "k_pivot" / "export")
    assert lf.main(argv) == 0
    assert json.loads((tmp_path / "out" / "failures_quick_local.json").read_text()) == got
    md = (tmp_path / "out" / "failures_quick_local.md").read_text()
    assert f"| w0s0 | pivotrl after RL (7 steps) † | {sc['eval_tasks']} |" in md
    assert block_files.READ_BACK_NOTE in md and "| w0s0 | warm start (step 0) |" in md
    numbers = tmp_path / "out" / "failures_quick_local.json"
    numbers.write_text(json.dumps([{**g, "folder": "another"} if g["folder"] == "k_pivot" else g for g in got]))
    assert lf.main(argv) == 0
    assert json.loads(numbers.read_text())[2]["breakdown"] is None
