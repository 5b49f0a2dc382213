"""The multi-turn checkout task on `ShopEnv`: long episodes, one decisive turn, tool latency.

docs/verifiers.md §2, docs/algorithms.md §6, docs/architecture.md §3, §4 (PivotRL: most turns of a demonstration are easy,
a few decide the outcome), docs/algorithms.md §7 (tool calls of varying duration).

A task is an order such as ``"b2 d1 g3\\n"``; the policy reads the hidden prices (``get b``),
fills the cart (``add b2``) and pays the total (``pay 44``): 2n + 1 actions for n items, 7-11
with the "standard" difficulty (3-5 items), plus `extra_turns` spare turns. The reads and adds
copy an item (and quantity) from the prompt; the payment needs Σ qty × price over prices seen
only in earlier observations and is where episodes fail (`decisive_turn`).

  * splits: "train", "eval" and "unseen" are disjoint by content (`rlvr.tasks.splits`: a hash
    of the prices and the order decides; generation keeps only the asked split's tasks);
  * `demonstrations(task, style=...)`: ONE recorded oracle trajectory per task with the exact
    environment snapshot before each action (PivotRL candidate states). Style "diverse"
    (default): a per-task seeded pattern — all reads then all adds, or read-add pairs (items in
    prompt order) — and a payment written as the total (``pay 21``) or as the line subtotals in
    prompt order (``pay 7+5+9``): functionally equivalent forms (docs/algorithms.md §6). With quantities 1 (the
    "standard" difficulty) the subtotal form copies the prices read, the total needs their sum:
    a policy that sometimes picks the total is sometimes wrong at the decisive turn. Style
    "canonical": reads first, ``pay <total>``;
  * `render_episode(task, turns)`: prompt, then action + observation per turn (what the agent
    loop tokenises).

Difficulty "local" (`ShopDifficulty.variant`): the same orders with each ``add`` after its read
answering the running subtotal (``ok 21``), so the payment copies the last observation and its
success cannot depend on the earlier layout; its demonstrations always pay the total. The other
presets are its control and do not change. Difficulty "local3": three local baskets per episode
(`ShopDifficulty.baskets`; ~27 turns, three decisive payments, each computable from the
observation right before it).

Kit kwargs (`task.kwargs`): difficulty, demo_style, latency_s, latency_alpha, latency_cap (the
environment's simulated tool latency; see `rlvr.envs.shop`).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Sequence, Union

from rlvr.envs.base import Turn, derive_seed
from rlvr.envs.shop import (
    ALPHABET,
    ITEMS,
    MAX_BASKETS,
    MAX_QTY,
    VARIANTS,
    ShopEnv,
    initial_state,
    make_task_snapshot,
    oracle_action,
    parse_action,
    render_order,
)
from rlvr.records.task import TaskSpec
from rlvr.tasks.splits import check_split, draw_distinct


@dataclasses.dataclass(frozen=True)
class ShopDifficulty:
    """Difficulty knobs of the checkout task.

    Attributes:
      min_items, max_items: order lines, drawn uniformly in [min, max] (2n + 1 actions).
      max_qty: quantities are drawn in [1, max_qty] (1: the payment is a plain sum of prices).
      n_distractors: items sold here but not ordered (their prices are never needed).
      extra_turns: spare turns beyond the 2n + 1 needed.
      variant: "control" (today's checkout: the payment needs prices from earlier observations)
        or "local" (`rlvr.envs.shop`: each ``add`` must follow its read and answers the running
        subtotal, so the payment is ``pay S`` with S copied from the observation right before
        it). Kept out of the repr, so the control's task seeds and contents do not move.
      baskets: baskets checked out one after another in an episode (local variant only; 1 keeps
        the one-basket tasks bit for bit, version ``shop-local/1``; more: version
        ``shop-local-baskets/1``, each basket of [min_items, max_items] items of the shop's
        priced items, drawn anew per basket). Kept out of the repr like `variant`.
    """

    min_items: int = 3
    max_items: int = 5
    max_qty: int = 3
    n_distractors: int = 2
    extra_turns: int = 1
    variant: str = dataclasses.field(default="control", repr=False)
    baskets: int = dataclasses.field(default=1, repr=False)

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ValueError(f"ShopDifficulty.variant must be one of {VARIANTS}, got {self.variant!r}")
        if (not isinstance(self.baskets, int) or isinstance(self.baskets, bool)
                or not 1 <= self.baskets <= MAX_BASKETS):
            raise ValueError(f"ShopDifficulty.baskets must be an int in [1, {MAX_BASKETS}], got {self.baskets!r}")
        if self.baskets > 1 and self.variant != "local":
            raise ValueError(f"ShopDifficulty.baskets={self.baskets}: several baskets need variant 'local', "
                             f"got {self.variant!r}")
        if not (1 <= self.min_items <= self.max_items):
            raise ValueError(f"ShopDifficulty needs 1 <= min_items <= max_items, got "
                             f"{self.min_items}, {self.max_items}")
        if self.max_items + self.n_distractors > len(ITEMS) or self.n_distractors < 0:
            raise ValueError(f"ShopDifficulty: max_items + n_distractors must be <= {len(ITEMS)} "
                             f"and n_distractors >= 0, got {self.max_items} + {self.n_distractors}")
        if not 1 <= self.max_qty <= MAX_QTY:
            raise ValueError(f"ShopDifficulty.max_qty must be in [1, {MAX_QTY}], got {self.max_qty}")
        if self.extra_turns < 0:
            raise ValueError(f"ShopDifficulty.extra_turns must be >= 0, got {self.extra_turns}")

    @property
    def max_turns(self) -> int:
        """The longest episode: baskets · (2 · max_items + 1) + extra_turns actions."""
        return self.baskets * (2 * self.max_items + 1) + self.extra_turns


DIFFICULTIES = {
    "small": ShopDifficulty(min_items=2, max_items=3, max_qty=2, n_distractors=2, extra_turns=1),
    "standard": ShopDifficulty(min_items=3, max_items=5, max_qty=1, n_distractors=2, extra_turns=1),
    "hard": ShopDifficulty(min_items=4, max_items=6, max_qty=3, n_distractors=2, extra_turns=0),
    # The local variant at the standard knobs: the testbed where PivotRL's premise holds (the
    # decisive payment is computable from the last observation); "standard" is its control.
    "local": ShopDifficulty(min_items=3, max_items=5, max_qty=1, n_distractors=2, extra_turns=1,
                            variant="local"),
    # Three local baskets per episode (21-33 turns, about 27): a full trajectory is about 20×
    # one decisive turn's text, the regime PivotRL's turn-level training is meant for.
    "local3": ShopDifficulty(min_items=3, max_items=5, max_qty=1, n_distractors=2, extra_turns=1,
                             variant="local", baskets=3),
}


def as_difficulty(difficulty: Union[str, ShopDifficulty]) -> tuple[str, ShopDifficulty]:
    """(name, knobs) of a preset name or a ShopDifficulty (ValueError naming the presets)."""
    if isinstance(difficulty, ShopDifficulty):
        return "custom", difficulty
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty must be one of {sorted(DIFFICULTIES)} or a ShopDifficulty, "
                         f"got {difficulty!r}")
    return difficulty, DIFFICULTIES[difficulty]


def _content_key(prices, order) -> str:
    return "shop/task:" + repr((sorted(prices.items()), [list(x) for x in order]))


def _baskets_key(prices, baskets) -> str:
    return "shop/task:" + repr((sorted(prices.items()), [[list(x) for x in b] for b in baskets]))


def generate(n: int, *, split: str = "train", seed: int = 0,
             difficulty: Union[str, ShopDifficulty] = "standard") -> list[TaskSpec]:
    """`n` distinct checkout tasks of a split (deterministic in (split, seed, difficulty)).

    TaskSpecs with task_type "agent", prompt the order text, reference_answer the total,
    environment_snapshot the initial state (with its docs/architecture.md §4 hash), resource_limits
    {"max_turns"}, public_metadata (n_items, decisive turn index among the oracle's, ...) and
    random_seed the environment seed (common across a group, docs/architecture.md §4).
    """
    check_split(split)
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    name, d = as_difficulty(difficulty)
    key = (repr(d),) if d.variant == "control" else (repr(d), d.variant)
    if d.baskets > 1:
        key = key + ("baskets", d.baskets)
    rng = random.Random(derive_seed("shop", split, seed, name, *key))

    def draw():
        k = rng.randint(d.min_items, d.max_items)
        items = rng.sample(ITEMS, k + d.n_distractors)
        prices = {i: rng.randint(1, 9) for i in items}
        order = [[i, rng.randint(1, d.max_qty)] for i in items[:k]]
        return prices, order

    def draw_baskets():
        items = rng.sample(ITEMS, d.max_items + d.n_distractors)
        prices = {i: rng.randint(1, 9) for i in items}
        baskets = []
        for _ in range(d.baskets):
            k = rng.randint(d.min_items, d.max_items)
            baskets.append([[i, rng.randint(1, d.max_qty)] for i in rng.sample(items, k)])
        return prices, baskets

    if d.baskets > 1:
        found = [(p, b[0], b) for p, b in draw_distinct(n, split, draw_baskets,
                                                        lambda x: _baskets_key(*x))]
    else:
        found = [(p, o, None) for p, o in draw_distinct(n, split, draw, lambda x: _content_key(*x))]
    tasks = []
    for i, (prices, order, baskets) in enumerate(found):
        max_turns = sum(2 * len(b) + 1 for b in (baskets or [order])) + d.extra_turns
        state = initial_state(prices, order, max_turns, variant=d.variant, baskets=baskets)
        tasks.append(TaskSpec(
            task_id=f"shop-{split}-{name}-{seed}-{i}",
            prompt=render_order(state["order"]),
            task_type="agent",
            reference_answer=(state["total"] if baskets is None
                              else [b["total"] for b in state["baskets"]]),
            public_metadata={"difficulty": name, "n_items": len(order), "max_turns": max_turns,
                             "tools": list(("get", "add", "pay")), "split": split,
                             "decisive": "pay",
                             **({"variant": "local"} if d.variant == "local" else {}),
                             **({"baskets": len(baskets),
                                 "n_items_per_basket": [len(b) for b in baskets]}
                                if baskets else {})},
            hidden_verifier_id=None,
            environment_snapshot=make_task_snapshot(state),
            resource_limits={"max_turns": max_turns},
            reward_config={},
            random_seed=derive_seed("shop_env", split, seed, i),
        ))
    return tasks


# ------------------------------------------------------------------------------ demonstrations
DEMO_STYLES = ("canonical", "diverse")
PATTERNS = ("reads_first", "pairs")


def demo_rng(task: TaskSpec) -> random.Random:
    """The per-task RNG of diverse demonstrations (same recorded trajectory in every process)."""
    return random.Random(derive_seed("shop_demo", task.task_id, task.random_seed))


def _diverse_plan(state, rng: random.Random) -> list[str]:
    order = [list(x) for x in state["order"]]
    pattern = rng.choice(PATTERNS)
    gets = [f"get {k}\n" for k, _ in order]
    puts = [f"add {k}{q}\n" for k, q in order]
    if pattern == "reads_first":
        plan = gets + puts
    else:
        plan = [a for k, q in order for a in (f"get {k}\n", f"add {k}{q}\n")]
    if rng.random() < 0.5 or state.get("variant") == "local":
        # local variant: the total is the subtotal the last add answered
        plan.append(f"pay {state['total']}\n")
    else:
        plan.append("pay " + "+".join(str(q * state["prices"][k]) for k, q in order) + "\n")
    return plan


def demonstrations(task: TaskSpec, *, style: str = "diverse") -> list[Turn]:
    """The recorded oracle trajectory of `task` (module docstring): one `Turn` per action with
    the exact environment snapshot before it. No latency."""
    if style not in DEMO_STYLES:
        raise ValueError(f"style must be one of {DEMO_STYLES}, got {style!r}")
    env = ShopEnv()
    env.reset(task, seed=task.random_seed)
    rng = demo_rng(task)
    plan = iter(_diverse_plan(env.state(), rng)) if style == "diverse" else None
    turns = []
    while not env.done:
        before = env.snapshot()
        action = oracle_action(env.state()) if plan is None else next(plan)
        result = env.step(action)
        turns.append(Turn(action=action, observation=result.observation, state_before=before))
        if plan is not None and "next_order" in result.event:  # the next basket: its own plan
            plan = iter(_diverse_plan(env.state(), rng))
    return turns


def decisive_turn(turns: Sequence[Turn]) -> int:
    """Index of the (first) payment, the decisive turn, in a trajectory, or -1 if it has none."""
    found = decisive_turns(turns)
    return found[0] if found else -1


def decisive_turns(turns: Sequence[Turn]) -> list[int]:
    """Indices of every payment in a trajectory (one per basket)."""
    return [i for i, t in enumerate(turns)
            if (p := parse_action(t.action)) is not None and p[0] == "pay"]


def render_episode(task: TaskSpec, turns: Sequence[Turn]) -> str:
    """The exact text the agent loop tokenises: prompt, then action + observation per turn."""
    return task.prompt + "".join(t.action + t.observation for t in turns)


# ------------------------------------------------------------------------------------ the kit
@dataclasses.dataclass(frozen=True)
class ShopSource:
    """Checkout tasks at one difficulty: `sample` draws the train split, `heldout` the fixed
    eval set, `eval_set` any split."""

    difficulty: Union[str, ShopDifficulty] = "standard"

    def __post_init__(self):
        as_difficulty(self.difficulty)  # raises naming the presets

    name = "shop"
    alphabet = ALPHABET

    def sample(self, n: int, seed) -> list[TaskSpec]:
        return generate(n, split="train", seed=seed, difficulty=self.difficulty)

    def eval_set(self, split: str = "eval", n=None, seed: int = 0) -> list[TaskSpec]:
        return generate(100 if n is None else n, split=split, seed=seed, difficulty=self.difficulty)

    def heldout(self, n: int, seed: int) -> list[TaskSpec]:
        return generate(n, split="eval", seed=seed, difficulty=self.difficulty)


def kit(difficulty: Union[str, ShopDifficulty] = "standard", demo_style: str = "diverse",
        latency_s: float = 0.0, latency_alpha: float = 1.5, latency_cap: float = 30.0):
    """The checkout task kit (`task.names = ("shop",)`; `task.kwargs` = these arguments).

    difficulty: "small" | "standard" | "hard" or a ShopDifficulty; demo_style: `DEMO_STYLES`;
    latency_s / latency_alpha / latency_cap: simulated tool latency of the rollout and
    evaluation environments (`rlvr.envs.shop.ShopEnv`; the turn verifiers judge without it).
    """
    from rlvr.tasks.kit import TaskKit
    from rlvr.verifiers.shop import (ShopExactMatchVerifier, ShopFunctionalVerifier,
                                     ShopOutcomeVerifier)

    if demo_style not in DEMO_STYLES:
        raise ValueError(f"demo_style must be one of {DEMO_STYLES}, got {demo_style!r}")
    ShopEnv(latency_s=latency_s, latency_alpha=latency_alpha, latency_cap=latency_cap)  # validates
    lat = dict(latency_s=float(latency_s), latency_alpha=float(latency_alpha),
               latency_cap=float(latency_cap))
    return TaskKit(
        name="shop", source=ShopSource(difficulty), verifier=ShopOutcomeVerifier(),
        demonstration=lambda task: demonstrations(task, style=demo_style),
        alphabet=ALPHABET, env_factory=lambda: ShopEnv(**lat),
        turn_verifiers={"functional": ShopFunctionalVerifier(), "exact": ShopExactMatchVerifier()},
        render_episode=render_episode, action_terminator="\n")


def _register():
    from rlvr.tasks.kit import register_kit

    register_kit("shop", kit)


_register()

__all__ = ["DEMO_STYLES", "DIFFICULTIES", "PATTERNS", "ShopDifficulty", "ShopSource", "Turn",
           "as_difficulty", "decisive_turn", "decisive_turns", "demo_rng", "demonstrations", "generate", "kit",
           "render_episode"]
