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
