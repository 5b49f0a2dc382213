"""The built-in checkout environment as a tool environment: tools `get_price`, `add_to_cart`,
`pay` over the authoritative state of `rlvr.envs.shop`, each call applied through that module's
pure transition (`make_event` / `apply_event`), so the event log is the same as the text
protocol's. Task snapshot: the `shop` task snapshot or the bare initial state. Outcome: the cart
holds exactly the order, no wrong add happened, and the payment equals the total.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from rlvr.agents.tools import Tool, ToolEnvironment, ToolError, ToolSet
from rlvr.envs import shop

SYSTEM_PROMPT = ("You are a checkout assistant. Look up the price of each ordered item, add "
                 "each order line to the cart once, then pay the total.")


def _step(state: dict, action: str) -> dict:
    if state["done"]:
        raise ToolError("the checkout is finished")
    event = shop.make_event(state, action)
    new = shop.apply_event(state, event)
    state.clear()
    state.update(new)
    return event


def _get_price(state, item: str):
    event = _step(state, f"get {item}")
    if event["result"] != "price":
        raise ToolError(f"item {item} is not sold here")
    return {"item": item, "price": event["price"]}


def _add_to_cart(state, item: str, quantity: int):
    event = _step(state, f"add {item}{quantity}")
    # the local variant restates the running cart subtotal (the payment's amount after the last add)
    return {"subtotal": event["subtotal"]} if "subtotal" in event else "ok"


def _pay(state, amount: int):
    _step(state, f"pay {amount}")
    return "ok"


_ITEM = {"type": "string", "enum": list(shop.ITEMS)}
TOOLSET = ToolSet((
    Tool("get_price", "Look up the price of an item.",
         {"type": "object", "properties": {"item": _ITEM}, "required": ["item"],
          "additionalProperties": False}, _get_price),
    Tool("add_to_cart", "Add a quantity of an item to the cart.",
         {"type": "object", "properties": {"item": _ITEM, "quantity": {
             "type": "integer", "minimum": 1, "maximum": shop.MAX_QTY}},
          "required": ["item", "quantity"], "additionalProperties": False}, _add_to_cart),
    Tool("pay", "Pay an amount; ends the checkout.",
         {"type": "object", "properties": {"amount": {"type": "integer", "minimum": 0}},
          "required": ["amount"], "additionalProperties": False}, _pay),
))


def reset(snapshot: Mapping[str, Any]) -> dict:
    state = snapshot.get("state", snapshot)
    shop.validate_state(state)
    if shop.is_multi_basket(state):
        raise ValueError("shop_tools: one basket per task (a several-basket checkout is a text-protocol task)")
    return copy.deepcopy(dict(state))


def outcome(state: Mapping[str, Any]) -> bool:
    paid = state.get("paid")
    wrong_add = any(e.get("tool") == "add" and e.get("minefield") for e in state["events"])
    return (bool(paid) and paid["value"] == state["total"] and shop.cart_complete(state)
            and not wrong_add)


def task_message(state: Mapping[str, Any]) -> str:
    """The user message of a task: the order in words."""
    return "Please check out: " + ", ".join(f"{q} of {k}" for k, q in state["order"]) + "."


ENVIRONMENT = ToolEnvironment("shop_tools", TOOLSET, reset, outcome, SYSTEM_PROMPT)
