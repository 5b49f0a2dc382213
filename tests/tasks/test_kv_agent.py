"""KV agent task generator: schema, difficulty knobs, splits, demonstrations, text layout."""

import itertools

import pytest

from rlvr.envs.base import hash_state
from rlvr.envs.kv_store import KEYS, KVStoreEnv
from rlvr.tasks.kv_agent import (
    DIFFICULTIES,
    KVDifficulty,
    demonstrations,
    generate,
    is_unseen_keyset,
    render_episode,
    task_split,
)
from rlvr.records.task import TaskSpec

SPLITS = ("train", "eval", "unseen")


def parse_prompt(prompt):
    """Independent reading of the prompt: [(sign, key)] from e.g. 'f+a-c?\\n'."""
    assert prompt.endswith("?\n")
    body, out, sign = prompt[:-2], [], "+"
    for ch in body:
        if ch in "+-":
            sign = ch
        else:
            out.append((sign, ch))
            sign = "+"
    return out


@pytest.fixture(scope="module")
def tasks():
    return {(s, d): generate(60, split=s, seed=3, difficulty=d) for s in SPLITS for d in DIFFICULTIES}


def test_schema_reference_answer_and_determinism(tasks):
    for (split, dname), ts in tasks.items():
        assert len(ts) == 60 and len({t.task_id for t in ts}) == 60
        d = DIFFICULTIES[dname]
        for t in ts:
            assert isinstance(t, TaskSpec) and t.task_type == "agent"
            regs = t.environment_snapshot["state"]["registers"]
            q = parse_prompt(t.prompt)
            assert t.reference_answer == sum((1 if s == "+" else -1) * regs[k] for s, k in q)
            assert d.min_query <= len(q) <= d.max_query or (split == "unseen" and len(q) == 2)
            assert len(regs) == len(q) + d.n_distractors and all(0 <= v <= 9 for v in regs.values())
            assert t.resource_limits["max_turns"] == len(q) + 1 + d.extra_turns
            assert d.allow_minus or "-" not in t.prompt
            assert t.public_metadata["split"] == split
            assert t.environment_snapshot["sha256"] == hash_state(t.environment_snapshot["state"])
            assert TaskSpec.from_json(t.to_json()) == t  # JSONL round trip
    assert generate(5, split="train", seed=3, difficulty="hard") == tasks[("train", "hard")][:5]
    assert generate(5, split="train", seed=4, difficulty="hard") != tasks[("train", "hard")][:5]
    assert any("-" in t.prompt for t in tasks[("train", "hard")])


def test_splits_are_disjoint(tasks):
    content = {s: set() for s in SPLITS}
    for (split, _), ts in tasks.items():
        for t in ts:
            st = t.environment_snapshot["state"]
            assert task_split(st["registers"], st["query"]) == split
            keyset = frozenset(k for _, k in st["query"])
            assert is_unseen_keyset(keyset) == (split == "unseen")
            content[split].add((t.prompt, tuple(sorted(st["registers"].items()))))
    for a, b in itertools.combinations(SPLITS, 2):
        assert not content[a] & content[b]
    # unseen key sets exist for every query size it serves, and never in train
    for n in (2, 3, 4):
        assert any(is_unseen_keyset(c) for c in itertools.combinations(KEYS, n))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="split"):
        generate(1, split="test")
    with pytest.raises(ValueError, match="difficulty"):
        generate(1, difficulty="insane")
    with pytest.raises(ValueError, match="n_distractors"):
        KVDifficulty(min_query=4, max_query=4, n_distractors=5)
    with pytest.raises(ValueError, match="min_query"):
        KVDifficulty(min_query=3, max_query=2)
    custom = KVDifficulty(min_query=1, max_query=1, n_distractors=0, extra_turns=0)
    t = generate(3, seed=0, difficulty=custom)
    assert all(len(parse_prompt(x.prompt)) == 1 and x.resource_limits["max_turns"] == 2 for x in t)


def test_demonstrations_are_optimal_and_states_exact(tasks):
    for ts in tasks.values():
        for t in ts[:20]:
            turns = demonstrations(t)
            q = parse_prompt(t.prompt)
            assert [x.action for x in turns] == [f"get {k}\n" for _, k in q] + [f"ans {t.reference_answer}\n"]
            regs = t.environment_snapshot["state"]["registers"]
            assert [x.observation for x in turns] == [f"={regs[k]}\n" for _, k in q] + ["ok\n"]
            assert turns[0].state_before.state_hash == t.environment_snapshot["sha256"]
            env = KVStoreEnv()
            for x in turns:  # every recorded state is the state the action really met
                env.restore(x.state_before)
                assert env.state()["turn"] == turns.index(x)
            expr = demonstrations(t, answer_form="expr")[-1].action
            terms = "".join((s if (i or s == "-") else "") + str(regs[k]) for i, (s, k) in enumerate(q))
            assert expr == f"ans {terms}\n"


def test_diverse_demonstrations_vary_in_form_but_are_functionally_equivalent():
    """style="diverse": per task a seeded choice of read order and answer form (value, or the
    signed sum of the read values in any term order); one fixed trajectory per task."""
    ts = generate(150, seed=3, difficulty="medium") + generate(50, seed=3, difficulty="hard")
    orders, forms, term_orders = set(), set(), set()
    for t in ts:
        turns = demonstrations(t, style="diverse")
        assert [x.action for x in turns] == [x.action for x in demonstrations(t, style="diverse")]
        q = parse_prompt(t.prompt)
        regs = t.environment_snapshot["state"]["registers"]
        gets, ans = [x.action for x in turns[:-1]], turns[-1].action
        assert sorted(gets) == sorted(f"get {k}\n" for _, k in q)  # every needed key once
        orders.add(gets == [f"get {k}\n" for _, k in q])
        assert ans.startswith("ans ") and ans.endswith("\n")
        body = ans[4:-1]
        # independent evaluation of the submitted expression: its value is the goal
        val, num, sign = 0, "", 1
        for ch in body + "+":
            if ch in "+-":
                if num:
                    val += sign * int(num)
                num, sign = "", (1 if ch == "+" else -1)
            else:
                num += ch
        assert val == t.reference_answer
        if len(q) >= 2:
            is_expr = body != str(t.reference_answer)
            forms.add(is_expr)
            if is_expr:
                canon = "".join((s if (i or s == "-") else "") + str(regs[k]) for i, (s, k) in enumerate(q))
                term_orders.add(body == canon)
        env = KVStoreEnv(fault_prob=0.0)
        for i, x in enumerate(turns):  # recorded states are the states the actions met
            assert x.state_before.state_hash == (t.environment_snapshot["sha256"] if i == 0
                                                 else env.state_hash())
            if i == 0:
                env.restore(x.state_before)
            env.step(x.action)
        assert env.state()["submitted"]["value"] == t.reference_answer
    assert orders == {True, False} and forms == {True, False} and term_orders == {True, False}
    with pytest.raises(ValueError, match="style"):
        demonstrations(ts[0], style="random")


def test_render_episode_layout():
    t = generate(1, split="train", seed=0, difficulty="easy")[0]
    turns = demonstrations(t)
    text = render_episode(t, turns)
    assert text == t.prompt + "".join(x.action + x.observation for x in turns)
    lines = text.split("\n")
    assert lines[-1] == "" and lines[0] + "\n" == t.prompt
    assert lines[1:-1:2] == [x.action[:-1] for x in turns]
    assert lines[2:-1:2] == [x.observation[:-1] for x in turns]
    assert render_episode(t, []) == t.prompt
