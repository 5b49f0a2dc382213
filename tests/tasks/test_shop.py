"""The checkout kit: task generation and splits, episode length, diverse demonstrations that the
outcome and functional verifiers accept, the decisive turn, the verifiers' accept/reject sets
(functional vs exact match, docs/algorithms.md §6), outcome judged on authoritative state (docs/verifiers.md §2)."""

import dataclasses
import json

import pytest

from rlvr.envs.base import canonical_json
from rlvr.envs.shop import ShopEnv
from rlvr.tasks.kit import build_kit, get_kit, registered_kits, turn_task
from rlvr.tasks.shop import (
    DIFFICULTIES,
    PATTERNS,
    ShopDifficulty,
    decisive_turn,
    demonstrations,
    generate,
    render_episode,
)
from rlvr.verifiers.shop import (ShopExactMatchVerifier, ShopFunctionalVerifier,
                                 ShopOutcomeVerifier, turn_kind)


def run(task, actions, **env_kw):
    env = ShopEnv(**env_kw)
    env.reset(task, seed=task.random_seed)
    for a in actions:
        if env.done:
            break
        env.step(a)
    return env


def test_generation_is_deterministic_distinct_and_split():
    a = generate(50, split="train", seed=3)
    assert [t.prompt for t in a] == [t.prompt for t in generate(50, split="train", seed=3)]
    assert len({canonical_json(t.environment_snapshot["state"]) for t in a}) == 50
    ev = generate(50, split="eval", seed=3)
    train_states = {canonical_json(t.environment_snapshot["state"]) for t in generate(400, split="train", seed=0)}
    assert not train_states & {canonical_json(t.environment_snapshot["state"]) for t in ev}
    d = DIFFICULTIES["standard"]
    for t in a:
        n = t.public_metadata["n_items"]
        assert d.min_items <= n <= d.max_items and t.resource_limits["max_turns"] == 2 * n + 2
        assert t.reference_answer == t.environment_snapshot["state"]["total"]
    with pytest.raises(ValueError, match="difficulty"):
        generate(1, difficulty="extreme")
    with pytest.raises(ValueError, match="max_qty"):
        ShopDifficulty(max_qty=0)


def test_demonstrations_are_diverse_and_judged_correct():
    kit = get_kit("shop")
    outcome, functional = kit.verifier, kit.turn_verifiers["functional"]
    tasks = kit.source.sample(60, seed=0)
    patterns, pay_forms, lengths = set(), set(), []
    for t in tasks:
        turns = kit.demonstration(t)
        lengths.append(len(turns))
        assert decisive_turn(turns) == len(turns) - 1  # the payment ends every demonstration
        env = run(t, [x.action for x in turns])
        assert outcome.verify(t, kit.episode_output(env)).passed
        for x in turns:  # every demonstration action is functionally acceptable at its state
            assert functional.accepts(x.state_before, x.action)
        kinds = [turn_kind(x.action) for x in turns[:-1]]
        patterns.add("reads_first" if kinds[0] == "get" and kinds[1] == "get" else "pairs")
        pay_forms.add("+" in turns[-1].action)
        subtotals = "+".join(str(q * t.environment_snapshot["state"]["prices"][k])
                             for k, q in t.environment_snapshot["state"]["order"])
        assert turns[-1].action in (f"pay {t.reference_answer}\n", f"pay {subtotals}\n")
        assert render_episode(t, turns) == t.prompt + "".join(x.action + x.observation for x in turns)
    assert patterns == set(PATTERNS) and pay_forms == {True, False}
    assert min(lengths) == 7 and max(lengths) == 11
    canon = demonstrations(tasks[0], style="canonical")
    assert [x.action for x in canon][0] == f"get {tasks[0].environment_snapshot['state']['order'][0][0]}\n"


def test_outcome_verifier_reads_state_not_tool_messages():
    t = generate(1, seed=1)[0]
    kit = get_kit("shop")
    s = t.environment_snapshot["state"]
    order, total = s["order"], s["total"]
    good = [f"get {k}\n" for k, _ in order] + [f"add {k}{q}\n" for k, q in order]
    v = ShopOutcomeVerifier()
    assert v.verify(t, kit.episode_output(run(t, good + [f"pay {total}\n"]))).passed
    wrong = run(t, good + [f"pay {total + 1}\n"])  # the tool still says "ok"
    assert not v.verify(t, kit.episode_output(wrong)).passed
    k, q = order[0]
    mine = run(t, [f"add {k}{q % 9 + 1}\n"] + good + [f"pay {total}\n"])
    verdict = v.verify(t, kit.episode_output(mine))
    # the wrong line, then the right line of an item already in the cart: two wrong adds
    assert not verdict.passed and verdict.components["minefield"] == 2.0
    early = run(t, [f"pay {total}\n"])  # right value, empty cart
    assert not v.verify(t, kit.episode_output(early)).passed
    forged = json.loads(kit.episode_output(run(t, good)))
    forged["paid"] = {"expr": str(total), "value": total}
    forged["done"] = True
    verdict = v.verify(t, canonical_json(forged))
    assert not verdict.passed and verdict.components["transition"] == 0.0
    corrupt = dataclasses.replace(t, environment_snapshot={**t.environment_snapshot, "sha256": "0" * 64})
    assert v.verify(corrupt, kit.episode_output(run(t, good))).trial == "env_error"


def test_functional_accepts_equivalent_actions_exact_only_the_demonstration():
    t = generate(1, seed=2)[0]
    s = t.environment_snapshot["state"]
    order, prices, total = s["order"], s["prices"], s["total"]
    f, x = ShopFunctionalVerifier(), ShopExactMatchVerifier()
    env = run(t, [])
    snap = env.snapshot()
    (k0, q0), (k1, q1) = order[0], order[1]
    distractor = next(k for k in prices if k not in {k for k, _ in order})
    for a in (f"get {k0}", f"get {k1}", f"add {k1}{q1}"):
        assert f.accepts(snap, a), a
    for a in (f"get {distractor}", f"add {k0}{q0 % 9 + 1}", f"add {distractor}1", f"pay {total}",
              "get", "hello"):
        assert not f.accepts(snap, a), a
    assert x.accepts(snap, f"get {k0}", f"get {k0}\n") and not x.accepts(snap, f"get {k1}", f"get {k0}\n")
    env = run(t, [f"get {k0}\n"])
    assert not f.accepts(env.snapshot(), f"get {k0}")  # already read
    full = run(t, [f"get {k}\n" for k, _ in order] + [f"add {k}{q}\n" for k, q in order])
    snap = full.snapshot()
    subtotals = [q * prices[k] for k, q in order]
    for a in (f"pay {total}", "pay " + "+".join(map(str, subtotals)),
              "pay " + "+".join(map(str, subtotals[::-1]))):
        assert f.accepts(snap, a), a
    assert not f.accepts(snap, f"pay {total - 1}") and not f.accepts(snap, f"get {k0}")
    assert x.accepts(snap, f"pay {total}", f"pay {total}\n")
    assert not x.accepts(snap, "pay " + "+".join(map(str, subtotals)), f"pay {total}\n")
    # through the Verifier interface: a turn task carries the snapshot and the demo action
    tt = turn_task(t, snapshot=snap, turn_index=len(order) * 2, reference_action=f"pay {total}\n",
                   key="k")
    assert f.verify(tt, f"pay {total}").passed and x.verify(tt, f"pay {total}").passed
    assert f.verify(tt, "pay " + "+".join(map(str, subtotals))).passed
    assert not x.verify(tt, "pay " + "+".join(map(str, subtotals))).passed
    bad = dataclasses.replace(tt, environment_snapshot={**tt.environment_snapshot, "state_hash": "0" * 64})
    assert f.verify(bad, f"pay {total}").trial == "env_error"
    done = run(t, [f"pay {total}\n"])
    assert f.verify_turn(done.snapshot(), "get a").trial == "env_error"


def test_kit_registration_and_kwargs():
    assert "shop" in registered_kits()
    kit = build_kit(["shop"], [1.0], {"difficulty": "small", "latency_s": 0.01})
    assert kit.multi_turn and set(kit.turn_verifiers) == {"functional", "exact"}
    env = kit.env_factory()
    assert env.latency_s == 0.01 and kit.environment_version() == "shop/1"
    assert all(t.public_metadata["n_items"] <= 3 for t in kit.source.heldout(20, seed=0))
    with pytest.raises(ValueError, match="demo_style"):
        get_kit("shop", demo_style="fancy")
    with pytest.raises(ValueError, match="latency_s"):
        get_kit("shop", latency_s=-1.0)
