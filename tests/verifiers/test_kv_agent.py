"""KV agent verifiers: outcome over authoritative state (docs/verifiers.md §2), per-turn functional
acceptance (docs/algorithms.md §6) vs exact match to the demonstration."""

import copy
import dataclasses
import itertools

import pytest

from rlvr.envs.base import EnvSnapshot, canonical_json, hash_state
from rlvr.envs.kv_store import KVStoreEnv
from rlvr.tasks.kv_agent import DIFFICULTIES, demonstrations, generate, render_episode
from rlvr.verifiers.kv_agent import (
    ExactMatchTurnVerifier,
    KVFunctionalVerifier,
    KVOutcomeVerifier,
)

OUTCOME = KVOutcomeVerifier()
FUNCTIONAL = KVFunctionalVerifier()
EXACT = ExactMatchTurnVerifier()


def play(task, actions, fault_prob=0.0, seed=None):
    env = KVStoreEnv(fault_prob=fault_prob)
    env.reset(task, seed=task.random_seed if seed is None else seed)
    for a in actions:
        if env.done:
            break
        env.step(a)
    return env


@pytest.fixture(scope="module")
def task():
    # a medium task with 3 query keys
    return next(t for t in generate(20, split="train", seed=11, difficulty="medium")
                if t.public_metadata["n_query"] == 3)


def test_demonstrations_pass_for_every_generated_task():
    n = 0
    for split, d in itertools.product(("train", "eval", "unseen"), DIFFICULTIES):
        for t in generate(40, split=split, seed=5, difficulty=d):
            for form in ("value", "expr"):
                env = play(t, [x.action for x in demonstrations(t, answer_form=form)])
                v = OUTCOME.verify_env(t, env)
                assert v.passed, (t.task_id, form, v)
                assert v.components["goal"] == 1 and v.components["minefield"] == 0
                n += 1
    assert n == 720


def test_minefield_event_fails_an_otherwise_correct_episode(task):
    demo = [x.action for x in demonstrations(task)]
    regs = task.environment_snapshot["state"]["registers"]
    distractor = next(k for k in regs if k not in task.prompt)
    roomy = {**task.environment_snapshot["state"], "max_turns": 10}  # room for one extra turn
    task2 = dataclasses.replace(task, environment_snapshot={
        **task.environment_snapshot, "state": roomy, "sha256": hash_state(roomy)})
    assert OUTCOME.verify_env(task2, play(task2, demo)).passed
    env = play(task2, [f"del {distractor}"] + demo)
    v = OUTCOME.verify_env(task2, env)
    assert env.state()["submitted"]["value"] == task.reference_answer  # the goal itself is met
    assert v.decision == "fail" and v.components["goal"] == 1 and v.components["minefield"] == 1
    assert v.evidence["minefield_events"][0]["key"] == distractor


def test_tool_success_message_is_not_proof(task):
    # "ok" for a wrong answer: the observation says success, the state says otherwise
    wrong = task.reference_answer + 1
    env = KVStoreEnv()
    env.reset(task, seed=0)
    assert env.step(f"ans {wrong}").observation == "ok\n"
    v = OUTCOME.verify_env(task, env)
    assert v.decision == "fail" and v.components["goal"] == 0

    # a transcript claiming success, but no submission ever reached the state
    env = play(task, ["get a", "get b", "get c", "get d", "get e"])
    claimed = task.prompt + f"ans {task.reference_answer}\nok\n"
    assert f"ans {task.reference_answer}" in claimed
    v = OUTCOME.verify_env(task, env)
    assert v.decision == "fail" and env.state()["submitted"] is None

    # a final state that claims the submission without the event that makes it (forged state)
    env = play(task, [x.action for x in demonstrations(task)[:-1]])
    forged = env.state()
    forged["submitted"] = {"expr": str(task.reference_answer), "value": task.reference_answer}
    forged["done"], forged["stop_reason"] = True, "eos"
    v = OUTCOME.verify_state(task, forged)
    assert v.decision == "fail" and v.components["goal"] == 1 and v.components["transition"] == 0

    # an event log that was edited after the fact (a register value rewritten)
    env = play(task, [x.action for x in demonstrations(task)])
    edited = env.state()
    k = edited["events"][0]["key"]
    edited["registers"][k] = (edited["registers"][k] + 1) % 10
    v = OUTCOME.verify_state(task, edited)
    assert v.decision == "fail" and v.evidence["invariant_violations"]


def test_env_fault_is_env_error_never_fail(task):
    demo = [x.action for x in demonstrations(task)]
    seen = 0
    for seed in range(30):
        env = play(task, demo, fault_prob=0.3, seed=seed)
        v = OUTCOME.verify_env(task, env)
        if any(e["tool"] == "fault" for e in env.state()["events"]):
            assert v.is_env_error and not v.passed and v.decision == "unknown"
            assert v.evidence["timeout_class"] == "tool_call"
            seen += 1
        else:
            assert v.passed
    assert 0 < seen < 30
    # a corrupt task (snapshot edited, stale hash) is a system fault, not a policy failure
    snap = copy.deepcopy(dict(task.environment_snapshot))
    snap["state"]["registers"] = {k: 0 for k in snap["state"]["registers"]}
    v = OUTCOME.verify(dataclasses.replace(task, environment_snapshot=snap),
                       canonical_json(play(task, demo).state()))
    assert v.is_env_error


def reference_accepts(state, action):
    """Independent acceptance rule, written from the task definition."""
    need = [k for _, k in state["query"] if k not in state["read"] and k in state["registers"]]
    if action.startswith("get ") and len(action) == 5:
        return action[4] in need
    if action.startswith("ans "):
        body = action[4:]
        if not body or any(c not in "0123456789+-" for c in body) or "++" in body or "--" in body \
                or "+-" in body or "-+" in body or body[-1] in "+-":
            return False
        terms = body.replace("-", "+-").split("+")
        if any(t.lstrip("-").startswith("0") and len(t.lstrip("-")) > 1 for t in terms if t):
            return False
        return sum(int(t) for t in terms if t) == state["goal"]
    return False


def candidate_actions(state):
    regs = state["registers"]
    goal = state["goal"]
    vals = [regs.get(k, 0) for _, k in state["query"]]
    out = [f"get {k}" for k in "abcdefghz"] + [f"del {k}" for k in "abcdefgh"]
    out += [f"ans {v}" for v in range(goal - 3, goal + 4)]
    out += ["ans " + "+".join(str(v) for v in p) for p in itertools.permutations(vals)]
    out += [f"ans {goal + 10}-10", f"ans 0+{goal}" if goal >= 0 else f"ans 0{goal}",
            f"ans {goal}+", "ans", "get", "xyz", f"ans  {goal}", f"ANS {goal}"]
    return out


def test_functional_verifier_accepts_exactly_the_functionally_correct_actions(task):
    tasks = generate(8, split="eval", seed=2, difficulty="hard") + [task]
    n_acc = 0
    for t in tasks:
        for turn in demonstrations(t):
            state = turn.state_before.state()
            for a in candidate_actions(state):
                got = FUNCTIONAL.accepts(turn.state_before, a)
                assert got == reference_accepts(state, a), (t.prompt, state["read"], a)
                n_acc += got
            # the demonstration's own action and all its equivalent forms
            assert FUNCTIONAL.accepts(turn.state_before, turn.action)
            assert turn.state_before.state() == state  # verification never mutates the snapshot
    assert n_acc > 0


def test_functional_verifier_any_order_and_equivalent_answers():
    t = next(x for x in generate(30, split="train", seed=0, difficulty="medium")
             if x.public_metadata["n_query"] == 3)
    turns = demonstrations(t)
    keys = [a.action[4] for a in turns[:-1]]
    s0 = turns[0].state_before
    assert all(FUNCTIONAL.accepts(s0, f"get {k}\n") for k in keys)  # any needed key first
    regs = t.environment_snapshot["state"]["registers"]
    v = [regs[k] for k in keys]
    last = turns[-1].state_before
    for form in [f"ans {t.reference_answer}", f"ans {v[0]}+{v[1]}+{v[2]}",
                 f"ans {v[2]}+{v[1]}+{v[0]}"]:
        assert FUNCTIONAL.accepts(last, form) and FUNCTIONAL.accepts(last, form + "\n")
        assert FUNCTIONAL.verify_turn(last, form).components == {"accepted": 1.0}
    # after reading keys[0], reading it again is not progress
    assert not FUNCTIONAL.accepts(turns[1].state_before, f"get {keys[0]}")
    assert not FUNCTIONAL.accepts(last, f"ans {t.reference_answer + 1}")
    assert not FUNCTIONAL.accepts(s0, f"del {keys[0]}")


def test_functional_verifier_env_error_on_bad_snapshot(task):
    turns = demonstrations(task)
    foreign = dataclasses.replace(turns[0].state_before, env_name="other_env")
    v = FUNCTIONAL.verify_turn(foreign, "get a")
    assert v.is_env_error
    env = play(task, [x.action for x in turns])
    v = FUNCTIONAL.verify_turn(env.snapshot(), "get a")  # terminal state: nothing to judge
    assert v.is_env_error


def test_exact_match_accepts_only_the_demonstration_text(task):
    for t in [task] + generate(5, split="eval", seed=4, difficulty="hard"):
        for turn in demonstrations(t):
            state = turn.state_before.state()
            accepted = [a for a in candidate_actions(state) if EXACT.accepts(turn.state_before, a)]
            assert accepted == [turn.action[:-1]]
            assert EXACT.accepts(turn.state_before, turn.action)
            assert EXACT.accepts(turn.state_before, "get q", demo_action="get q\n")
    # functionally equivalent but textually different: functional yes, exact no
    last = demonstrations(task)[-1].state_before
    regs = task.environment_snapshot["state"]["registers"]
    expr = "ans " + "+".join(str(regs[k]) for k in task.prompt[:-2].split("+"))
    assert FUNCTIONAL.accepts(last, expr) and not EXACT.accepts(last, expr)


def test_outcome_verifier_plugs_into_the_agent_loop_and_cache_shape(task):
    env = play(task, [x.action for x in demonstrations(task)])

    class Episode:  # the agent loop's Episode carries .task and .env
        pass

    e = Episode()
    e.task, e.env = task, env
    v = OUTCOME.verify_episode(e)
    assert v.passed and v.verifier_version == OUTCOME.version
    assert OUTCOME.verify(task, canonical_json(env.state())) == v
    assert OUTCOME.verify(task, 3).decision == "fail"  # a non-string output never raises
    assert render_episode(task, demonstrations(task)).startswith(task.prompt)
    assert isinstance(demonstrations(task)[0].state_before, EnvSnapshot)
