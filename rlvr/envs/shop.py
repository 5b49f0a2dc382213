"""`ShopEnv`: a multi-turn checkout tool environment with hidden prices and tool latency.

docs/verifiers.md §2, docs/algorithms.md §6, docs/architecture.md §4 (turn states, functional acceptance), docs/algorithms.md §7
(tool calls of varying duration: a group barrier waits for the slowest), docs/algorithms.md §6 (a continuation
from a pivot sees the pivot's exact state).

A task is an order of n items with quantities, e.g. the prompt ``"b2 d1 g3\\n"`` (2 of b, 1 of
d, 3 of g). Prices are hidden (digits 1-9); the policy acts one line at a time:

  ========================  ==================  ==============================================
  action                    observation         effect on the authoritative state
  ========================  ==================  ==============================================
  ``get x``                 ``=7``              price of x read (``!none``: not sold here)
  ``add xq``                ``ok``              q units of x put in the cart (``add b2``)
  ``pay <expr>``            ``ok``              payment of the expression's value; episode ends
  anything else             ``!bad``            nothing but the turn counter (policy failure)
  ========================  ==================  ==============================================

An episode needs 2n + 1 actions (n reads, n adds, one payment; any order of the reads and adds
works) and has `extra_turns` spare turns. Almost every turn is easy (copy an item and quantity
from the prompt, skip what was done); the payment is *decisive*: its value must equal
Σ qty × price over the order, computed from prices seen only in earlier observations, and a
wrong value fails the episode. ``<expr>`` is an integer or a sum of integers (``44``,
``14+27+3``), evaluated by `rlvr.envs.kv_store.eval_expr` (no ``eval``). ``pay`` answers ``ok``
whatever the value: only the authoritative state proves the goal (docs/verifiers.md §2).

An ``add`` that is not exactly one requested line (an item not ordered, a wrong quantity, an item
already in the cart) is a **minefield** event: the customer's cart is wrong and the episode fails.

Tool latency (docs/algorithms.md §7): each call takes L = latency_s · min(latency_cap, u^(-1/α)) seconds,
a Pareto(α) draw scaled by `latency_s` (0 = no latency), with u a counter-based uniform of
(seed, turn, action) — seeded, so a restored snapshot and a group sharing the environment seed
(common random numbers, docs/architecture.md §4) replay the same latencies for the same calls. The call returns its
observation at once but the environment is *busy* until the call's deadline: the next `step`,
`state`, `snapshot` or `state_hash` waits (sleeps on the host) until then. The agent loop steps
every active episode of a batch one after another and then reads their snapshots, so the calls of
one turn run concurrently, as against a tool server, and a batch turn takes as long as its
slowest call — the barrier whose cost single-rollout asynchronous training avoids.

Every step produces an event applied by the pure `apply_event`; the state carries the event log,
so a verifier can replay it from the initial snapshot (V_transition, docs/verifiers.md §2) and check goal,
invariant and minefield predicates (docs/verifiers.md §2). Every text uses only characters of `ALPHABET`.

**The "local" variant** (state field ``"variant": "local"``, version `LOCAL_ENV_VERSION`; states
without the field are today's variant, unchanged, version `ENV_VERSION`). In today's variant the
payment needs prices scattered over earlier observations, so its success depends on an earlier,
functionally equivalent layout choice (all reads first vs read-add pairs) that no turn-level
verifier sees. The local variant makes the decisive turn depend only on the observation right
before it: an ``add xq`` is correct only if x's price was read before (otherwise it is a
minefield event), and it answers ``ok S`` with S the running cart subtotal Σ qty × price over the
cart. In any trajectory the functional verifier accepts, every read precedes its add and no read
follows the last add (a re-read or a read of an unordered item is rejected), so the turn before a
correct payment is the last add and its observation restates the order total: ``pay S`` copied
from the last observation is the decisive action (`local_pay_from_observation`).

**Several baskets per episode** (local variant only; state field ``"baskets"``, version
`LOCAL_BASKETS_ENV_VERSION`; a one-basket state has no such field and is unchanged, version
`LOCAL_ENV_VERSION`). The episode checks out the baskets one after another at the same shop
(same prices): the prompt is the first basket's order; a ``pay`` that is not the last basket's
records the payment in ``"payments"`` (its value, the basket's total and whether it was right:
the value equals the total and the cart held exactly the order) and opens the next basket —
``order``, ``total``, ``read`` and ``cart`` become the next basket's, empty — and answers
``ok`` followed by the next order's line (``"ok\nb1 d1 g1\n"``). Prices must be read again in
each basket, so every basket's decisive payment depends only on the observation right before
it. The episode succeeds when every basket was paid right (`all_paid_right`).
"""

from __future__ import annotations

import copy
import re
import time
from typing import Any, Mapping, Optional

from rlvr.envs.base import Environment, SnapshotError, StepResult, derive_seed, hash_state
from rlvr.envs.kv_store import eval_expr
from rlvr.records.task import TaskSpec

ENV_NAME = "shop"
ENV_VERSION = "shop/1"
LOCAL_ENV_VERSION = "shop-local/1"
LOCAL_BASKETS_ENV_VERSION = "shop-local-baskets/1"
MAX_BASKETS = 9
VARIANTS = ("control", "local")
ITEMS = "abcdefgh"
TOOLS = ("get", "add", "pay")
MAX_QTY = 9

OBS_BAD = "!bad\n"
OBS_NONE = "!none\n"
OBS_OK = "ok\n"

# Every character a prompt, action or observation of this environment may contain.
ALPHABET: str = "".join(sorted(set(ITEMS + "0123456789+-=!\n " + "getaddpay" + "ok" + "badnone")))

_GET_RE = re.compile(r"^get ([a-z])$")
_ADD_RE = re.compile(r"^add ([a-z])([0-9])$")
_PAY_RE = re.compile(r"^pay (.+)$")
_STATE_FIELDS = ("prices", "order", "total", "max_turns", "turn", "read", "cart", "paid",
                 "events", "done", "stop_reason")


# ---------------------------------------------------------------------------------------------
# Pure helpers: parsing, rendering, transitions.


def parse_action(action: str) -> Optional[tuple[str, Any]]:
    """(tool, argument) of a one-line action, or None if malformed: ("get", "b"),
    ("add", ("b", 2)), ("pay", "14+27"). One trailing newline is allowed."""
    if not isinstance(action, str):
        return None
    line = action[:-1] if action.endswith("\n") else action
    if "\n" in line:
        return None
    m = _GET_RE.match(line)
    if m:
        return "get", m.group(1)
    m = _ADD_RE.match(line)
    if m:
        return "add", (m.group(1), int(m.group(2)))
    m = _PAY_RE.match(line)
    if m:
        return "pay", m.group(1)
    return None


def render_order(order) -> str:
    """Prompt text of an order [[item, qty], ...]: [["b", 2], ["d", 1]] → "b2 d1\\n"."""
    return " ".join(f"{k}{q}" for k, q in order) + "\n"


def order_total(order, prices: Mapping[str, int]) -> int:
    """Σ qty × price over the order (the reference answer)."""
    return sum(int(q) * int(prices[k]) for k, q in order)


def variant_of(state: Mapping[str, Any]) -> str:
    """"local" for a local-variant state, "control" for today's (no ``variant`` field)."""
    return "local" if state.get("variant") == "local" else "control"


def is_multi_basket(state: Mapping[str, Any]) -> bool:
    """True for a state of several baskets (the ``"baskets"`` field; module docstring)."""
    return "baskets" in state


def version_of(state: Mapping[str, Any]) -> str:
    """The environment version string of a state's variant (cached verdicts key on it)."""
    if variant_of(state) != "local":
        return ENV_VERSION
    return LOCAL_BASKETS_ENV_VERSION if is_multi_basket(state) else LOCAL_ENV_VERSION


def _check_order(order, prices) -> list:
    order = [[str(k), int(q)] for k, q in order]
    if not order:
        raise ValueError("order: must name at least one item")
    for k, q in order:
        if k not in prices or not 1 <= q <= MAX_QTY:
            raise ValueError(f"order: each line must be [item sold here, qty 1-{MAX_QTY}], got {[k, q]}")
    if len({k for k, _ in order}) != len(order):
        raise ValueError(f"order: items must be distinct, got {order}")
    return order


def initial_state(prices: Mapping[str, int], order, max_turns: int,
                  variant: str = "control", baskets=None) -> dict:
    """The authoritative state at turn 0 (plain JSON types). `variant` "control" (today's; the
    state has no ``variant`` field, so its hash is unchanged) or "local" (module docstring).
    `baskets`: None (one basket, `order`) or the orders of every basket in turn (local variant,
    2 to `MAX_BASKETS` of them; `order` must be the first)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    prices = {str(k): int(v) for k, v in sorted(prices.items())}
    for k, v in prices.items():
        if k not in ITEMS or not 1 <= v <= 9:
            raise ValueError(f"prices: items must be in {ITEMS!r} and prices 1-9, got {k!r}: {v!r}")
    order = _check_order(order, prices)
    if baskets is not None:
        if variant != "local":
            raise ValueError(f"baskets: several baskets exist in the local variant only, got variant {variant!r}")
        if not 2 <= len(baskets) <= MAX_BASKETS:
            raise ValueError(f"baskets: must hold 2 to {MAX_BASKETS} orders, got {len(baskets)}")
        baskets = [_check_order(b, prices) for b in baskets]
        if baskets[0] != order:
            raise ValueError("baskets: the first basket must be `order`")
    need = sum(2 * len(b) + 1 for b in (baskets or [order]))
    if not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < need:
        raise ValueError(f"max_turns must be an int >= Σ(2n+1) = {need}, got {max_turns!r}")
    state = {
        "prices": prices,            # hidden prices of every item sold here
        "order": order,              # [[item, qty], ...] the customer's order
        "total": order_total(order, prices),
        "max_turns": max_turns,
        "turn": 0,                   # actions taken
        "read": [],                  # distinct items whose price was read, in order
        "cart": {},                  # item -> qty added
        "paid": None,                # {"expr": str, "value": int} after `pay`
        "events": [],                # the authoritative event log
        "done": False,
        "stop_reason": None,         # "eos" (paid) | "max_turns"
    }
    if variant == "local":
        state["variant"] = "local"
    if baskets is not None:
        state["baskets"] = [{"order": b, "total": order_total(b, prices)} for b in baskets]
        state["basket"] = 0          # index of the basket being checked out
        state["payments"] = []       # earlier baskets' payments: {expr, value, total, right}
    return state


def make_task_snapshot(state: Mapping[str, Any]) -> dict:
    """The `TaskSpec.environment_snapshot` record of an initial state (name, version, state and
    its sha256, the expected hash of docs/architecture.md §4)."""
    return {"env": ENV_NAME, "env_version": version_of(state), "state": copy.deepcopy(dict(state)),
            "sha256": hash_state(state)}


def validate_state(state: Any) -> None:
    """Raise ValueError naming the field if `state` is not a well-formed shop state."""
    if not isinstance(state, Mapping):
        raise ValueError(f"shop state must be a mapping, got {type(state).__name__}")
    missing = [f for f in _STATE_FIELDS if f not in state]
    if missing:
        raise ValueError(f"shop state: missing fields {missing}")
    for f in ("prices", "cart"):
        if not isinstance(state[f], Mapping):
            raise ValueError(f"shop state.{f} must be a mapping item → int")
    if not isinstance(state["order"], list) or not state["order"]:
        raise ValueError("shop state.order must be a non-empty list of [item, qty]")
    for f in ("total", "max_turns", "turn"):
        if not isinstance(state[f], int) or isinstance(state[f], bool):
            raise ValueError(f"shop state.{f} must be an int, got {state[f]!r}")
    if "variant" in state and state["variant"] != "local":
        raise ValueError(f"shop state.variant must be 'local' (or absent: control), got {state['variant']!r}")
    if is_multi_basket(state):
        if state.get("variant") != "local":
            raise ValueError("shop state.baskets: several baskets exist in the local variant only")
        for f, kind in (("baskets", list), ("basket", int), ("payments", list)):
            if not isinstance(state.get(f), kind) or isinstance(state.get(f), bool):
                raise ValueError(f"shop state.{f} must be a {kind.__name__} in a several-basket state")
        if not 0 <= state["basket"] < len(state["baskets"]) or len(state["payments"]) != state["basket"]:
            raise ValueError(f"shop state.basket {state['basket']} does not match its "
                             f"{len(state['baskets'])} baskets and {len(state['payments'])} payments")


def add_is_correct(state: Mapping[str, Any], item: str, qty: int) -> bool:
    """True iff ``add {item}{qty}`` puts exactly one requested line, not yet in the cart (and,
    in the local variant, whose price was read before)."""
    want = dict((k, q) for k, q in state["order"])
    ok = item in want and item not in state["cart"] and qty == want[item]
    if variant_of(state) == "local":
        ok = ok and item in state["read"]
    return ok


def cart_subtotal(state: Mapping[str, Any]) -> int:
    """Σ qty × price over the cart (what a local-variant ``add`` answers)."""
    return sum(int(q) * int(state["prices"][k]) for k, q in state["cart"].items()
               if k in state["prices"])


def cart_complete(state: Mapping[str, Any]) -> bool:
    """True iff the cart holds exactly the order."""
    return dict(state["cart"]) == {k: q for k, q in state["order"]}


def all_paid_right(state: Mapping[str, Any]) -> bool:
    """Every earlier basket's payment was right (True for a one-basket state)."""
    return all(p["right"] for p in state.get("payments", []))


def observation_of(event: Mapping[str, Any]) -> str:
    """The observation text an event produces."""
    tool = event["tool"]
    if tool == "get":
        return f"={event['price']}\n" if event["result"] == "price" else OBS_NONE
    if tool == "add" and "subtotal" in event:
        return f"ok {event['subtotal']}\n"
    if tool == "pay" and "next_order" in event:
        return OBS_OK + event["next_order"]
    if tool in ("add", "pay"):
        return OBS_OK
    return OBS_BAD


def make_event(state: Mapping[str, Any], action: str) -> dict:
    """The event that `action` causes in `state` (pure; does not change `state`)."""
    line = action[:-1] if action.endswith("\n") else action
    turn = state["turn"]
    parsed = parse_action(action)
    if parsed is None:
        return {"turn": turn, "tool": "invalid", "text": line[:64]}
    tool, arg = parsed
    if tool == "get":
        if arg in state["prices"]:
            return {"turn": turn, "tool": "get", "item": arg, "result": "price",
                    "price": state["prices"][arg]}
        return {"turn": turn, "tool": "get", "item": arg, "result": "none"}
    if tool == "add":
        item, qty = arg
        ok = add_is_correct(state, item, qty)
        event = {"turn": turn, "tool": "add", "item": item, "qty": qty, "correct": ok,
                 "minefield": not ok}
        if variant_of(state) == "local":
            cart = dict(state["cart"])
            cart[item] = int(cart.get(item, 0)) + qty
            event["subtotal"] = cart_subtotal({"cart": cart, "prices": state["prices"]})
        return event
    value = eval_expr(arg)
    if value is None:
        return {"turn": turn, "tool": "invalid", "text": line[:64]}
    event = {"turn": turn, "tool": "pay", "expr": arg, "value": value}
    if is_multi_basket(state):
        event["right"] = value == state["total"] and cart_complete(state)
        nxt = state["basket"] + 1
        if nxt < len(state["baskets"]):
            event["next_order"] = render_order(state["baskets"][nxt]["order"])
    return event


def apply_event(state: Mapping[str, Any], event: Mapping[str, Any]) -> dict:
    """s_{t+1} = transition(s_t, event) (pure: returns a new state; docs/architecture.md §2)."""
    if state["done"]:
        raise RuntimeError("apply_event: the episode is already done")
    s = copy.deepcopy(dict(state))
    event = copy.deepcopy(dict(event))
    if event.get("turn") != s["turn"]:
        raise ValueError(f"event turn {event.get('turn')!r} does not match state turn {s['turn']}")
    tool = event["tool"]
    if tool == "get":
        if event["result"] == "price" and event["item"] not in s["read"]:
            s["read"].append(event["item"])
    elif tool == "add":
        s["cart"][event["item"]] = int(s["cart"].get(event["item"], 0)) + int(event["qty"])
    elif tool == "pay" and "next_order" in event:  # an earlier basket: the next one opens
        s["payments"].append({"expr": event["expr"], "value": event["value"],
                              "total": s["total"], "right": bool(event["right"])})
        s["basket"] += 1
        nxt = s["baskets"][s["basket"]]
        s["order"], s["total"] = copy.deepcopy(nxt["order"]), nxt["total"]
        s["read"], s["cart"] = [], {}
    elif tool == "pay":
        s["paid"] = {"expr": event["expr"], "value": event["value"]}
        s["done"], s["stop_reason"] = True, "eos"
    elif tool != "invalid":
        raise ValueError(f"event.tool must be one of get/add/pay/invalid, got {tool!r}")
    s["turn"] += 1
    s["events"].append(event)
    if not s["done"] and s["turn"] >= s["max_turns"]:
        s["done"], s["stop_reason"] = True, "max_turns"
    return s


def oracle_action(state: Mapping[str, Any]) -> str:
    """The canonical next action (newline-terminated): read the order's prices in order, then
    add its lines in order, then pay the total (``pay 44``)."""
    for k, _ in state["order"]:
        if k not in state["read"]:
            return f"get {k}\n"
    for k, q in state["order"]:
        if k not in state["cart"]:
            return f"add {k}{q}\n"
    return f"pay {state['total']}\n"


def local_pay_from_observation(observation: str) -> Optional[str]:
    """The decisive action of the local variant computed from the last observation alone:
    ``"ok 21\n"`` → ``"pay 21\n"`` (None if the observation restates no subtotal)."""
    m = re.match(r"^ok ([0-9]+)\n?$", observation or "")
    return None if m is None else f"pay {m.group(1)}\n"


def latency_draw(seed: int, turn: int, action: str, alpha: float, cap: float) -> float:
    """min(cap, u^(-1/α)) with u the counter-based uniform of (seed, turn, action): a Pareto(α)
    multiplier ≥ 1 (heavy-tailed for small α)."""
    u = (derive_seed("latency", seed, turn, action) + 1) / float((1 << 63) + 1)
    return min(float(cap), u ** (-1.0 / float(alpha)))


# ---------------------------------------------------------------------------------------------


class ShopEnv(Environment):
    """Checkout tool environment with hidden prices (see module docstring).

    Args:
      latency_s: scale of the simulated tool latency in seconds (0 = none).
      latency_alpha: Pareto tail index α (> 1: finite mean α/(α−1) · latency_s before the cap).
      latency_cap: largest latency multiplier.
    """

    name = ENV_NAME
    version = ENV_VERSION

    def __init__(self, *, latency_s: float = 0.0, latency_alpha: float = 1.5,
                 latency_cap: float = 30.0):
        super().__init__()
        if not (isinstance(latency_s, (int, float)) and latency_s >= 0.0):
            raise ValueError(f"latency_s must be a number >= 0, got {latency_s!r}")
        if not (isinstance(latency_alpha, (int, float)) and latency_alpha > 0.0):
            raise ValueError(f"latency_alpha must be a number > 0, got {latency_alpha!r}")
        if not (isinstance(latency_cap, (int, float)) and latency_cap >= 1.0):
            raise ValueError(f"latency_cap must be a number >= 1, got {latency_cap!r}")
        self.latency_s = float(latency_s)
        self.latency_alpha = float(latency_alpha)
        self.latency_cap = float(latency_cap)
        self._state: Optional[dict] = None
        self._busy_until = 0.0
        self.last_latency_s = 0.0   # the latency of the latest call (seconds)
        self.total_latency_s = 0.0  # sum over this environment's calls (seconds)

    # -- latency -------------------------------------------------------------------------------
    @property
    def busy_until(self) -> float:
        """Monotonic time at which the latest tool call completes (the environment is busy
        until then; 0 or past: ready)."""
        return self._busy_until

    def _wait(self) -> None:
        """Sleeps until the latest tool call has finished (no-op without latency)."""
        left = self._busy_until - time.monotonic()
        if left > 0:
            time.sleep(left)

    def call_latency(self, turn: int, action: str) -> float:
        """Seconds the call `action` at `turn` takes (0 without latency)."""
        if self.latency_s == 0.0:
            return 0.0
        return self.latency_s * latency_draw(self._seed, turn, action, self.latency_alpha,
                                             self.latency_cap)

    # -- protocol ------------------------------------------------------------------------------
    def reset(self, task: TaskSpec, *, seed: int) -> str:
        if not isinstance(task, TaskSpec):
            raise ValueError(f"reset expects a TaskSpec, got {type(task).__name__}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"seed must be an int, got {seed!r}")
        snap = task.environment_snapshot
        if not isinstance(snap, Mapping):
            raise ValueError(f"task {task.task_id}: environment_snapshot must be a mapping, got {snap!r}")
        for f in ("env", "env_version", "state", "sha256"):
            if f not in snap:
                raise ValueError(f"task {task.task_id}: environment_snapshot lacks field {f!r}")
        state = copy.deepcopy(dict(snap["state"]))
        validate_state(state)
        if (snap["env"], snap["env_version"]) != (self.name, version_of(state)):
            raise ValueError(
                f"task {task.task_id}: environment_snapshot is for {snap['env']}/{snap['env_version']}, "
                f"this environment is {self.name}/{version_of(state)}")
        self._wait()
        self._load(state, seed)
        self._check_reset_integrity(snap["sha256"])
        if state["turn"] != 0 or state["events"] or state["done"]:
            raise ValueError(f"task {task.task_id}: environment_snapshot.state is not an initial state")
        prompt = render_order(state["order"])
        if task.prompt != prompt:
            raise ValueError(f"task {task.task_id}: prompt {task.prompt!r} does not match the "
                             f"environment's order {prompt!r}")
        return prompt

    def step(self, action: str) -> StepResult:
        if self._state is None:
            raise RuntimeError("step() before reset()")
        self._wait()
        if self._state["done"]:
            raise RuntimeError("step() after the episode is done; reset() or restore() first")
        if not isinstance(action, str):
            raise ValueError(f"action must be a string, got {type(action).__name__}")
        latency = self.call_latency(self._state["turn"], action)
        event = make_event(self._state, action)
        self._state = apply_event(self._state, event)
        self.last_latency_s = latency
        self.total_latency_s += latency
        self._busy_until = time.monotonic() + latency
        info = {"turn": self._state["turn"], "stop_reason": self._state["stop_reason"],
                "valid_action": event["tool"] in TOOLS, "latency_s": latency}
        return StepResult(observation=observation_of(event), done=self._state["done"], info=info,
                          event=copy.deepcopy(event))

    def state(self) -> dict:
        if self._state is None:
            raise RuntimeError("state() before reset()")
        self._wait()
        return copy.deepcopy(self._state)

    def restore(self, snapshot) -> None:
        """Base restore; the snapshot's version picks the variant (control or local), and the
        restored state must be of that variant."""
        want = getattr(snapshot, "env_version", None)
        if want in (ENV_VERSION, LOCAL_ENV_VERSION, LOCAL_BASKETS_ENV_VERSION):
            self.version = want
        super().restore(snapshot)
        if self.version != want:
            raise SnapshotError(f"snapshot says version {want}, its state is of version {self.version}")

    def _load(self, state: dict, seed: int) -> None:
        validate_state(state)
        self.version = version_of(state)
        self._state = state
        self._seed = int(seed)
        self._busy_until = 0.0

    # -- conveniences --------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return bool(self._state is not None and self._state["done"])


__all__ = ["ALPHABET", "ENV_NAME", "ENV_VERSION", "ITEMS", "LOCAL_BASKETS_ENV_VERSION",
           "LOCAL_ENV_VERSION", "MAX_BASKETS", "VARIANTS", "all_paid_right", "is_multi_basket",
           "cart_subtotal", "local_pay_from_observation", "variant_of", "version_of", "ShopEnv", "add_is_correct",
           "apply_event", "cart_complete", "initial_state", "latency_draw", "make_event",
           "make_task_snapshot", "observation_of", "oracle_action", "order_total",
           "parse_action", "render_order", "validate_state"]
