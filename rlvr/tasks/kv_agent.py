"""The multi-turn verifiable agent task on `KVStoreEnv` (docs/verifiers.md §2, docs/algorithms.md §6, docs/architecture.md §3, §4).

A task asks for a signed sum of hidden registers (``"f+a-c?\\n"``); the policy reads registers
with ``get k`` and submits with ``ans <expr>``. Tasks are procedural, with difficulty knobs (how
many keys the query names, how many distractor registers exist, how many spare turns the policy
gets, whether differences appear) and seed splits:

  * "train" and "eval": disjoint by content (`rlvr.tasks.splits.split_of` on the task's registers
    and query decides; generation rejects tasks of another split), separate seed streams;
  * "unseen": queries over key *sets* (of size ≥ 2) that train and eval never use (the key sets
    that `split_of` puts in its "unseen" buckets) — an OOD split for generalisation to new key
    combinations (docs/architecture.md §3, fixed and unseen seed sets).

The text layout (what the agent loop tokenises) is `render_episode`: the prompt, then for each
turn the action text followed by the observation text, all newline-terminated.

`demonstrations(task)` runs the oracle and records each turn's action, observation and the exact
environment snapshot before the action: the PivotRL candidate states (docs/algorithms.md §6).
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Sequence, Union

from rlvr.envs.base import Turn, derive_seed
from rlvr.envs.kv_store import (
    ALPHABET,
    KEYS,
    KVStoreEnv,
    initial_state,
    make_task_snapshot,
    oracle_action,
    render_query,
)
from rlvr.records.task import TaskSpec
from rlvr.tasks.splits import check_split, split_of


@dataclasses.dataclass(frozen=True)
class KVDifficulty:
    """Difficulty knobs of the KV agent task.

    Attributes:
      min_query, max_query: number of keys in the query, drawn uniformly in [min, max].
      n_distractors: registers that exist but are not in the query.
      extra_turns: spare turns beyond the optimal n_query + 1 (max_turns = n_query + 1 + extra).
      allow_minus: whether query terms may be subtracted ("a-c").
    """

    min_query: int = 2
    max_query: int = 3
    n_distractors: int = 3
    extra_turns: int = 1
    allow_minus: bool = False

    def __post_init__(self):
        if not (1 <= self.min_query <= self.max_query):
            raise ValueError(f"KVDifficulty needs 1 <= min_query <= max_query, got "
                             f"{self.min_query}, {self.max_query}")
        if self.max_query + self.n_distractors > len(KEYS) or self.n_distractors < 0:
            raise ValueError(f"KVDifficulty: max_query + n_distractors must be <= {len(KEYS)} and "
                             f"n_distractors >= 0, got {self.max_query} + {self.n_distractors}")
        if self.extra_turns < 0:
            raise ValueError(f"KVDifficulty.extra_turns must be >= 0, got {self.extra_turns}")


DIFFICULTIES = {
    "easy": KVDifficulty(min_query=1, max_query=2, n_distractors=2, extra_turns=2),
    "medium": KVDifficulty(min_query=2, max_query=3, n_distractors=3, extra_turns=1),
    "hard": KVDifficulty(min_query=3, max_query=4, n_distractors=4, extra_turns=0, allow_minus=True),
}


def _as_difficulty(difficulty: Union[str, KVDifficulty]) -> tuple[str, KVDifficulty]:
    if isinstance(difficulty, KVDifficulty):
        return "custom", difficulty
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty must be one of {sorted(DIFFICULTIES)} or a KVDifficulty, "
                         f"got {difficulty!r}")
    return difficulty, DIFFICULTIES[difficulty]


def is_unseen_keyset(keys) -> bool:
    """True for the query key sets reserved for the "unseen" split (size ≥ 2, ~1/10 of them)."""
    keys = "".join(sorted(keys))
    return len(keys) >= 2 and split_of("kv_agent/keyset:" + keys) == "unseen"


def task_split(registers, query) -> str:
    """The split that owns a task: "unseen" for held-out key sets, else "eval" or "train" by a
    content hash (a content hash landing in the unseen buckets counts as train)."""
    if is_unseen_keyset(k for _, k in query):
        return "unseen"
    content = repr((sorted(dict(registers).items()), [list(q) for q in query]))
    return "eval" if split_of("kv_agent/task:" + content) == "eval" else "train"


def _sample_task(rng: random.Random, d: KVDifficulty, split: str):
    n_query = rng.randint(d.min_query, d.max_query)
    if split == "unseen" and d.max_query >= 2:
        n_query = max(n_query, 2)  # unseen key sets exist only for size ≥ 2
        sets = [c for c in itertools.combinations(KEYS, n_query) if is_unseen_keyset(c)]
        qkeys = list(rng.choice(sets))
        rng.shuffle(qkeys)
    else:
        qkeys = rng.sample(KEYS, n_query)
    others = [k for k in KEYS if k not in qkeys]
    keys = qkeys + rng.sample(others, d.n_distractors)
    registers = {k: rng.randint(0, 9) for k in keys}
    query = [["+" if (i == 0 or not d.allow_minus or rng.random() < 0.5) else "-", k]
             for i, k in enumerate(qkeys)]
    return registers, query, n_query + 1 + d.extra_turns


def generate(n: int, *, split: str = "train", seed: int = 0,
             difficulty: Union[str, KVDifficulty] = "medium") -> list[TaskSpec]:
    """`n` KV agent tasks of a split (deterministic in (split, seed, difficulty)).

    Returns TaskSpecs with task_type "agent", prompt the query text, reference_answer the goal
    value, environment_snapshot the initial registers (with its docs/architecture.md §4 hash), resource_limits
    {"max_turns"}, and random_seed the environment seed (common across a group, docs/architecture.md §4).
    """
    check_split(split)
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    name, d = _as_difficulty(difficulty)
    if split == "unseen" and d.max_query < 2:
        raise ValueError("the unseen split needs difficulty.max_query >= 2 (held-out key sets)")
    rng = random.Random(derive_seed("kv_agent", split, seed, name, repr(d)))
    tasks = []
    while len(tasks) < n:
        registers, query, max_turns = _sample_task(rng, d, split)
        if task_split(registers, query) != split:
            continue
        state = initial_state(registers, query, max_turns)
        i = len(tasks)
        tasks.append(TaskSpec(
            task_id=f"kv-{split}-{name}-{seed}-{i}",
            prompt=render_query(state["query"]),
            task_type="agent",
            reference_answer=state["goal"],
            public_metadata={"difficulty": name, "n_query": len(query), "max_turns": max_turns,
                             "tools": ["get", "ans", "del"], "split": split},
            hidden_verifier_id=None,
            environment_snapshot=make_task_snapshot(state),
            resource_limits={"max_turns": max_turns},
            reward_config={},
            random_seed=derive_seed("kv_agent_env", split, seed, i),
        ))
    return tasks


DEMO_STYLES = ("canonical", "diverse")


def demo_rng(task: TaskSpec) -> random.Random:
    """The per-episode RNG of diverse demonstrations: seeded by the task (id + env seed), so a
    task's one recorded demonstration is the same in every process and call."""
    return random.Random(derive_seed("kv_agent_demo", task.task_id, task.random_seed))


def _diverse_actions(state, rng: random.Random):
    """Actions of one diverse demonstration from the initial state: the needed keys in a random
    order, then ``ans`` as the goal value or as the signed sum of the values read, terms in a
    random order (e.g. ``ans 17``, ``ans 9+5+3``, ``ans -3+5``)."""
    keys = [k for _, k in state["query"]]
    order = rng.sample(keys, len(keys))
    actions = [f"get {k}\n" for k in order]
    if rng.random() < 0.5:
        return actions, None
    terms = list(state["query"])
    rng.shuffle(terms)
    return actions, terms


def _expr_text(terms, values) -> str:
    return "".join((f"{values[k]}" if (i == 0 and s == "+") else f"{s}{values[k]}")
                   for i, (s, k) in enumerate(terms))


def demonstrations(task: TaskSpec, *, answer_form: str = "value",
                   style: str = "canonical") -> list[Turn]:
    """The oracle trajectory of `task`: one `Turn` per action, with the exact state before it.

    style "canonical": the oracle reads the query keys in prompt order, then submits (``ans 17``,
    or with answer_form="expr" the signed sum of the values read, ``ans 5+3+9``).
    style "diverse" (docs/algorithms.md §6: real demonstrations vary in form while functionally
    equivalent): per episode, a seeded RNG (`demo_rng(task)`) draws the order of the ``get``
    actions among the needed keys and the answer form — the value (``ans 17``) or the signed sum
    of the values read with its terms in any order (``ans 9+5+3``); `answer_form` is ignored.
    Each style gives ONE trajectory per task (what a dataset records). Faults are off.
    """
    if style not in DEMO_STYLES:
        raise ValueError(f"style must be one of {DEMO_STYLES}, got {style!r}")
    env = KVStoreEnv(fault_prob=0.0)
    env.reset(task, seed=task.random_seed)
    plan = None
    if style == "diverse":
        gets, terms = _diverse_actions(env.state(), demo_rng(task))
        plan = iter(gets)
    turns = []
    while not env.done:
        before = env.snapshot()
        if plan is None:
            action = oracle_action(env.state(), answer_form=answer_form)
        else:
            action = next(plan, None)
            if action is None:
                st = env.state()
                if terms is None:
                    action = f"ans {st['goal']}\n"
                else:
                    seen = {e["key"]: e["value"] for e in st["events"]
                            if e["tool"] == "get" and e["result"] == "value"}
                    action = f"ans {_expr_text(terms, seen)}\n"
        result = env.step(action)
        turns.append(Turn(action=action, observation=result.observation, state_before=before))
    return turns


def render_episode(task: TaskSpec, turns: Sequence[Turn]) -> str:
    """The exact text the agent loop tokenises: prompt, then action + observation per turn."""
    return task.prompt + "".join(t.action + t.observation for t in turns)


# ------------------------------------------------------------------------------------ the kit
@dataclasses.dataclass(frozen=True)
class KVSource:
    """KV agent tasks at one difficulty: `sample` draws the train split, `heldout` the fixed
    eval set (distinct tasks of the eval split), `eval_set` any split."""

    difficulty: Union[str, KVDifficulty] = "medium"

    def __post_init__(self):
        _as_difficulty(self.difficulty)  # raises naming the allowed difficulties

    name = "kv_agent"
    alphabet = ALPHABET

    def sample(self, n: int, seed) -> list[TaskSpec]:
        return generate(n, split="train", seed=seed, difficulty=self.difficulty)

    def eval_set(self, split: str = "eval", n=None, seed: int = 0) -> list[TaskSpec]:
        return generate(100 if n is None else n, split=split, seed=seed, difficulty=self.difficulty)

    def heldout(self, n: int, seed: int) -> list[TaskSpec]:
        return generate(n, split="eval", seed=seed, difficulty=self.difficulty)


def kit(difficulty: Union[str, KVDifficulty] = "medium", demo_style: str = "canonical",
        fault_prob: float = 0.0):
    """The KV agent task kit (`task.names = ("kv_agent",)`; `task.kwargs` = these arguments).

    difficulty: "easy" | "medium" | "hard" or a KVDifficulty; demo_style: the demonstrations'
    style (`DEMO_STYLES`); fault_prob: probability of a simulated tool fault per step (faults are
    env_errors: retried, then masked).
    """
    from rlvr.tasks.kit import TaskKit
    from rlvr.verifiers.kv_agent import (ExactMatchTurnVerifier, KVFunctionalVerifier,
                                         KVOutcomeVerifier)

    if demo_style not in DEMO_STYLES:
        raise ValueError(f"demo_style must be one of {DEMO_STYLES}, got {demo_style!r}")
    if not (isinstance(fault_prob, (int, float)) and 0.0 <= fault_prob < 1.0):
        raise ValueError(f"fault_prob must be in [0, 1), got {fault_prob!r}")
    return TaskKit(
        name="kv_agent", source=KVSource(difficulty), verifier=KVOutcomeVerifier(),
        demonstration=lambda task: demonstrations(task, style=demo_style),
        alphabet=ALPHABET, env_factory=lambda: KVStoreEnv(fault_prob=float(fault_prob)),
        turn_verifiers={"functional": KVFunctionalVerifier(), "exact": ExactMatchTurnVerifier()},
        render_episode=render_episode, action_terminator="\n")


def _register():
    from rlvr.tasks.kit import register_kit

    register_kit("kv_agent", kit)


_register()

__all__ = ["DEMO_STYLES", "KVSource", "kit", "DIFFICULTIES", "KVDifficulty", "Turn", "demo_rng", "demonstrations", "generate",
           "is_unseen_keyset", "render_episode", "task_split"]
