"""The local checkout variant (the decisive payment is computable from the last observation) and
its control (today's variant) unchanged bit for bit: tasks, demonstrations and verifier outputs."""

import hashlib

import pytest

from rlvr.envs.base import EnvSnapshot, SnapshotError, canonical_json
from rlvr.envs.shop import (
    ENV_VERSION,
    LOCAL_ENV_VERSION,
    ShopEnv,
    initial_state,
    local_pay_from_observation,
    make_task_snapshot,
    render_order,
)
from rlvr.records.task import TaskSpec
from rlvr.tasks.shop import ShopDifficulty, demonstrations, generate
from rlvr.verifiers.shop import ShopFunctionalVerifier, ShopOutcomeVerifier

# sha256 of tasks, demonstrations and verifier outputs of each control preset, recorded before
# the local variant existed: the control must not move.
CONTROL_FINGERPRINTS = {
    "small": "b678c79582089342d6dda4bda77bcbce8aecf5d15a03fd5ad9348ae8e9253be9",
    "standard": "d9f78709dcf5777a578efd51cecbcd04f1028cd63854882c9457da779fe3037f",
    "hard": "959aea75a79025a2d3db3661229cce94395f22e450dfad17c6c2c594a1ed1545",
}


def fingerprint(preset, n=6):
    h = hashlib.sha256()
    fv, ov = ShopFunctionalVerifier(), ShopOutcomeVerifier()
    for split in ("train", "eval"):
        for t in generate(n, split=split, seed=3, difficulty=preset):
            h.update(canonical_json(t.to_dict() if hasattr(t, "to_dict") else t.__dict__).encode())
            for style in ("diverse", "canonical"):
                turns = demonstrations(t, style=style)
                for tr in turns:
                    h.update((tr.action + tr.observation + tr.state_before.state_hash).encode())
                    v = fv.verify_turn(tr.state_before, tr.action)
                    w = fv.verify_turn(tr.state_before, "pay 1\n")
                    h.update(repr((v.decision, v.components, v.evidence, v.verifier_version,
                                   w.decision, w.evidence)).encode())
                env = ShopEnv()
                env.restore(turns[-1].state_before)
                env.step(turns[-1].action)
                o = ov.verify_state(t, env.state())
                h.update(repr((o.decision, o.components, o.verifier_version,
                               turns[-1].state_before.env_version)).encode())
    return h.hexdigest()


@pytest.mark.parametrize("preset", sorted(CONTROL_FINGERPRINTS))
def test_control_unchanged_bit_for_bit(preset):
    assert fingerprint(preset) == CONTROL_FINGERPRINTS[preset]


def test_local_tasks_differ_and_carry_their_version():
    local = generate(20, split="train", seed=0, difficulty="local")
    control = generate(20, split="train", seed=0, difficulty="standard")
    assert all(t.environment_snapshot["env_version"] == LOCAL_ENV_VERSION for t in local)
    assert all(t.environment_snapshot["env_version"] == ENV_VERSION for t in control)
    assert "variant" not in control[0].environment_snapshot["state"]
    assert [t.prompt for t in local] != [t.prompt for t in control]
    with pytest.raises(ValueError, match="variant"):
        ShopDifficulty(variant="global")


@pytest.mark.parametrize("style", ["diverse", "canonical"])
def test_local_demonstrations_succeed_and_every_turn_is_accepted(style):
    fv, ov = ShopFunctionalVerifier(), ShopOutcomeVerifier()
    patterns = set()
    for t in generate(30, split="train", seed=1, difficulty="local"):
        turns = demonstrations(t, style=style)
        assert all(fv.accepts(tr.state_before, tr.action) for tr in turns)
        assert all(tr.state_before.env_version == LOCAL_ENV_VERSION for tr in turns)
        env = ShopEnv()
        env.restore(turns[-1].state_before)
        env.step(turns[-1].action)
        assert ov.verify_state(t, env.state()).passed
        patterns.add(turns[1].action.startswith("add"))
    assert patterns == ({True, False} if style == "diverse" else {False})


def test_decisive_action_computable_from_last_observation():
    """At every demonstration's decisive turn, ``pay`` with the number of the observation right
    before it (and nothing else) is accepted; in the control it is not (the last observation
    is ``ok``)."""
    fv = ShopFunctionalVerifier()
    for preset, expect in (("local", True), ("standard", False)):
        for t in generate(30, split="eval", seed=2, difficulty=preset):
            for style in ("diverse", "canonical"):
                turns = demonstrations(t, style=style)
                pay = local_pay_from_observation(turns[-2].observation)
                if expect:
                    assert pay is not None and fv.accepts(turns[-1].state_before, pay)
                else:
                    assert pay is None


def test_local_add_needs_its_read_and_answers_the_subtotal():
    state = initial_state({"a": 4, "b": 7, "c": 2}, [["b", 2], ["a", 1]], 6, variant="local")
    task = TaskSpec(task_id="l0", prompt=render_order(state["order"]), task_type="agent",
                    reference_answer=state["total"], environment_snapshot=make_task_snapshot(state),
                    random_seed=0)
    env = ShopEnv()
    env.reset(task, seed=0)
    assert env.version == LOCAL_ENV_VERSION
    r = env.step("add a1")                      # not read yet: a minefield in the local variant
    assert r.event["minefield"] and r.observation == "ok 4\n"
    env.reset(task, seed=0)
    assert [env.step(a).observation for a in ("get b", "add b2", "get a", "add a1")] == \
        ["=7\n", "ok 14\n", "=4\n", "ok 18\n"]
    snap = env.snapshot()
    assert snap.env_version == LOCAL_ENV_VERSION
    control = ShopEnv()
    control.restore(snap)                       # the snapshot's version picks the variant
    assert control.version == LOCAL_ENV_VERSION and control.step("pay 18").done
    forged = EnvSnapshot(snap.env_name, ENV_VERSION, snap.seed, snap.state_json, snap.state_hash)
    with pytest.raises(SnapshotError):
        ShopEnv().restore(forged)


def test_tool_twin_restates_the_subtotal_only_in_the_local_variant():
    from rlvr.agents import shop_tools

    for variant, want in (("local", {"subtotal": 14}), ("control", "ok")):
        state = shop_tools.reset(make_task_snapshot(
            initial_state({"a": 4, "b": 7}, [["b", 2]], 4, variant=variant)))
        shop_tools._get_price(state, "b")
        assert shop_tools._add_to_cart(state, "b", 2) == want
        shop_tools._pay(state, 14)
        assert shop_tools.outcome(state)


# sha256 (`fingerprint`) of the one-basket local variant, recorded before several baskets
# existed: `ShopDifficulty.baskets` = 1 must keep shop-local/1 bit for bit.
LOCAL_FINGERPRINT = "e9705af1d0a34ab45107776eb2ad9ef1533ed84429dad60da4494caca021e044"


def test_one_basket_local_variant_unchanged_bit_for_bit():
    assert fingerprint("local") == LOCAL_FINGERPRINT


def test_three_basket_tasks_carry_their_version_and_about_27_turns():
    from rlvr.envs.shop import LOCAL_BASKETS_ENV_VERSION
    from rlvr.tasks.shop import decisive_turns

    tasks = generate(30, split="train", seed=0, difficulty="local3")
    assert all(t.environment_snapshot["env_version"] == LOCAL_BASKETS_ENV_VERSION for t in tasks)
    assert all(len(t.reference_answer) == 3 for t in tasks)
    lengths = []
    for t in tasks:
        turns = demonstrations(t)
        assert len(decisive_turns(turns)) == 3 and decisive_turns(turns)[-1] == len(turns) - 1
        lengths.append(len(turns))
    assert 21 <= min(lengths) and max(lengths) <= 33 and 24 <= sum(lengths) / len(lengths) <= 30
    with pytest.raises(ValueError, match="baskets"):
        ShopDifficulty(baskets=3)                      # the control has one basket
    with pytest.raises(ValueError, match="baskets"):
        ShopDifficulty(variant="local", baskets=0)


@pytest.mark.parametrize("style", ["diverse", "canonical"])
def test_every_basket_payment_is_computable_from_the_observation_before_it(style):
    """At each basket's payment of the 3-basket demonstrations, ``pay S`` with S from the
    observation right before it is accepted and S + 1 is not; every turn is accepted and the
    episode passes; both layouts occur within the baskets."""
    from rlvr.tasks.shop import decisive_turns

    fv, ov = ShopFunctionalVerifier(), ShopOutcomeVerifier()
    layouts = set()
    for t in generate(20, split="eval", seed=2, difficulty="local3"):
        turns = demonstrations(t, style=style)
        assert all(fv.accepts(tr.state_before, tr.action) for tr in turns)
        for i in decisive_turns(turns):
            pay = local_pay_from_observation(turns[i - 1].observation)
            assert pay is not None and fv.accepts(turns[i].state_before, pay)
            wrong = f"pay {int(pay.split()[1]) + 1}\n"
            assert not fv.accepts(turns[i].state_before, wrong)
            start = max([j + 1 for j in decisive_turns(turns) if j < i], default=0)
            kinds = [tr.action.split()[0] for tr in turns[start:i]]
            layouts.add(kinds.index("add") > max(k for k, x in enumerate(kinds) if x == "get"))
        env = ShopEnv()
        env.restore(turns[-1].state_before)
        env.step(turns[-1].action)
        assert ov.verify_state(t, env.state()).passed
    assert layouts == ({True, False} if style == "diverse" else {True})  # True: reads first


def _three_baskets():
    state = initial_state({"a": 4, "b": 7, "c": 2}, [["b", 2], ["a", 1]], 20, variant="local",
                          baskets=[[["b", 2], ["a", 1]], [["c", 3]], [["a", 2], ["c", 1]]])
    return state, TaskSpec(task_id="m0", prompt=render_order(state["order"]), task_type="agent",
                           reference_answer=[18, 6, 10], environment_snapshot=make_task_snapshot(state),
                           random_seed=0)


def test_a_paid_basket_opens_the_next_whose_prices_are_read_again():
    from rlvr.envs.shop import LOCAL_BASKETS_ENV_VERSION

    state, task = _three_baskets()
    env = ShopEnv()
    env.reset(task, seed=0)
    assert env.version == LOCAL_BASKETS_ENV_VERSION
    obs = [env.step(a).observation for a in ("get b", "add b2", "get a", "add a1", "pay 18")]
    assert obs == ["=7\n", "ok 14\n", "=4\n", "ok 18\n", "ok\nc3\n"]
    s = env.state()
    assert s["basket"] == 1 and s["order"] == [["c", 3]] and s["read"] == [] and s["cart"] == {}
    assert s["payments"] == [{"expr": "18", "value": 18, "total": 18, "right": True}] and not s["done"]
    assert env.step("add c3").event["minefield"]       # c's price not read in this basket
    # a snapshot of a later basket restores under its version; another version is refused
    snap = env.snapshot()
    other = ShopEnv()
    other.restore(snap)
    assert other.version == LOCAL_BASKETS_ENV_VERSION and other.state()["basket"] == 1
    with pytest.raises(SnapshotError):
        ShopEnv().restore(EnvSnapshot(snap.env_name, LOCAL_ENV_VERSION, snap.seed, snap.state_json,
                                      snap.state_hash))


@pytest.mark.parametrize("first_pay, passed", [("pay 18", True), ("pay 17", False)])
def test_outcome_needs_every_basket_paid_right_and_turns_are_judged_per_basket(first_pay, passed):
    state, task = _three_baskets()
    fv, ov = ShopFunctionalVerifier(), ShopOutcomeVerifier()
    env = ShopEnv()
    env.reset(task, seed=0)
    plan = ["get b", "add b2", "get a", "add a1", first_pay, "get c", "add c3", "pay 6",
            "get a", "add a2", "get c", "add c1", "pay 10"]
    accepted = []
    for a in plan:
        accepted.append(fv.accepts(env.snapshot(), a))
        env.step(a)
    assert env.done
    # the later baskets' payments are right whatever the first one was (judged on their basket)
    assert accepted == [True] * 4 + [passed] + [True] * 8
    v = ov.verify_state(task, env.state())
    assert v.passed == passed and v.components["transition"] == 1.0
    assert [p["right"] for p in v.evidence["payments"]] == [passed, True]


def test_several_baskets_only_in_the_local_variant_and_not_in_the_tool_twin():
    from rlvr.agents import shop_tools

    with pytest.raises(ValueError, match="local variant"):
        initial_state({"a": 4}, [["a", 1]], 9, baskets=[[["a", 1]], [["a", 1]]])
    state, task = _three_baskets()
    with pytest.raises(ValueError, match="one basket"):
        shop_tools.reset(task.environment_snapshot)
