"""The failure breakdown of study_failures: each failed checkout episode gets the cause its final
state shows, rejected non-final turns are counted, and the payment is scored once the cart is
complete — on episodes played by hand through the real environment and verifiers."""

import dataclasses

import pytest

from experiments.study_failures import episode_breakdown, failure_cause
from rlvr.envs.shop import ShopEnv, oracle_action
from rlvr.tasks.shop import kit as shop_kit


@dataclasses.dataclass
class Played:
    env: ShopEnv
    actions: list
    snapshots: list

    @property
    def num_turns(self):
        return len(self.actions)


def play(task, script):
    """Plays `script` (a list of action texts, or None for the oracle's next action) until the
    environment is done."""
    env = ShopEnv()
    env.reset(task, seed=0)
    out = Played(env, [], [])
    for a in script:
        if env.state()["done"]:
            break
        a = oracle_action(env.state()) if a is None else a
        out.snapshots.append(env.snapshot())
        out.actions.append(a)
        env.step(a)
    return out


@pytest.fixture(scope="module")
def setting():
    k = shop_kit("small")
    task = k.source.heldout(1, seed=0)[0]
    return k, task


def test_each_failed_episode_gets_the_cause_its_final_state_shows(setting):
    k, task = setting
    state = task.environment_snapshot["state"]
    n_lines, total = len(state["order"]), state["total"]
    first_item = state["order"][0][0]
    oracle = [None] * (2 * n_lines + 1)
    reads = [None] * n_lines
    episodes = [
        play(task, oracle),                                              # success
        play(task, reads + [f"pay {total}\n"]),                         # cart empty: paid early
        play(task, [None] * (2 * n_lines) + [f"pay {total + 1}\n"]),    # cart complete, wrong total
        play(task, reads + [f"add {first_item}9\n"] + [None] * 8),      # a wrong cart line
        play(task, [f"get {first_item}\n"] * 3),                        # no payment, two re-reads
    ]
    b = episode_breakdown(episodes, [task] * len(episodes), k)
    assert b["success"] == pytest.approx(1 / 5)
    assert b["causes"] == pytest.approx({"wrong_line": 1 / 5, "paid_early": 1 / 5, "wrong_total": 1 / 5,
                                         "no_payment": 1 / 5, "other": 0.0})
    # rejected non-final turns: the two repeated reads of the last episode
    assert b["wasted_turns"] == pytest.approx(2 / 5)
    # payments made with the cart complete: the oracle's (right) and the wrong total
    assert b["pay_after_complete_cart"] == pytest.approx(1 / 2)
    assert b["payments_seen"] == pytest.approx(2 / 5)


def test_a_wrong_cart_line_is_the_cause_even_when_the_payment_is_right():
    ev = {"minefield_events": [{"tool": "add"}], "paid": {"value": 10}, "total": 10}
    assert failure_cause(ev, cart_complete=True) == "wrong_line"
    assert failure_cause({"paid": None, "total": 10}, cart_complete=False) == "no_payment"
    assert failure_cause({"paid": {"value": 10}, "total": 10}, cart_complete=False) == "paid_early"
    assert failure_cause({"paid": {"value": 9}, "total": 10}, cart_complete=True) == "wrong_total"
