"""Where the local block's policies fail: one outcome per basket of every held-out episode.

    python experiments/study/local_failures.py             # the full block's runs
    python experiments/study/local_failures.py --quick     # the quick block's

For each (warm start, RL seed) of the block with a finished run, the warm start (the policy at
step 0, the run's `model.init_from`) and each run's final policy (`<workdir>/<run key>/export`)
are sampled on that seed's held-out evaluation (`common.sample_evaluation`: the evaluator's
tasks and sampling keys, so the final policy's episodes are the ones the run's last evaluation
scored). Each basket of each episode gets one outcome (`basket_outcomes`, replaying the
episode's event log from the task's initial state): paid right; the cart right and a wrong
amount paid (the decisive turn failed); a wrong item in the cart when paid (an add copied the
wrong order line); a line missing or a wrong quantity; not paid when the episode ended; or not
reached (it ended in an earlier basket). Per episode also: success (the outcome verifier, as the
evaluation judges it), wrong adds (minefield events), invalid actions, turns, and how it ended
(`ENDS`: the last basket paid, or the rollout's stop reason: the policy's end of sequence, the
sequence length, the turn limit). Breakdowns are cached under `<cache>/local_failures/` by code version,
the run config and the policy's weights.

The decisive turn on demonstration states (`demo_state_success`): the same policies sampled
`DEMO_M` times at the demonstration states of two sets, each judged by the functional turn
verifier: the seed's PivotRL run's kept pivots (from its `pivots.json`: the states it trains on)
and the payment states of `DEMO_HELD_OUT_TASKS` held-out tasks (the evaluation's first). Whether PivotRL's training on its pivots carries over to
payments it never trained on reads from the warm start → final change on each set, sampled with
one key per seed.

A policy not in the cache or work folders is read back from this report's previous numbers
file (marked †; `block_files.previous_rows`), else named; with none found (a fresh clone)
nothing is written. The seed's kept pivots come from its PivotRL run's selection wherever it is
(`shop_local.block_selection`); a selection found nowhere is named, not read as empty. Writes
results/shop_local/failures_<scale>_<difficulty>.md/.json.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Mapping, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

OUTCOMES = ("paid right", "cart right, wrong amount", "wrong item in the cart",
            "line missing or wrong quantity", "not paid when the episode ended", "not reached")
# how an episode ended: the environment's last payment, else the rollout's stop reason
ENDS = {"paid": "paid the last basket", "eos": "the policy stopped (end of sequence)",
        "max_length": "sequence length reached", "max_turns": "turn limit", "timeout": "timeout",
        "env_error": "environment error"}
BREAKDOWN_VERSION = "local_failures/3"
DEMO_VERSION = "local_failures/demo_states/2"
DEMO_M = 4
DEMO_HELD_OUT_TASKS = 64
STATE_SETS = ("kept pivots", "held-out payments")


def basket_outcomes(initial: Mapping, events: Sequence[Mapping]) -> list[str]:
    """One `OUTCOMES` entry per basket of an episode that started in checkout state `initial`
    (a task's `environment_snapshot["state"]`; one basket when it has no "baskets" field) and
    logged `events` (its final state's "events"). A payment is judged on the state right before
    it: right when the cart holds exactly the basket's order and the amount is its total (the
    environment's own rule for a right payment)."""
    from rlvr.envs.shop import apply_event

    n = len(initial.get("baskets", [None]))
    out, s = [], dict(initial)
    for e in events:
        if e.get("tool") == "pay":
            cart, order = {k: int(q) for k, q in s["cart"].items()}, {k: int(q) for k, q in s["order"]}
            if cart == order:
                out.append(OUTCOMES[0] if e.get("value") == s["total"] else OUTCOMES[1])
            elif set(cart) - set(order):
                out.append(OUTCOMES[2])
            else:
                out.append(OUTCOMES[3])
        s = apply_event(s, e)
    if len(out) < n:
        out.append(OUTCOMES[4])
    return out + [OUTCOMES[5]] * (n - len(out))


def episode_facts(task, final: Mapping, verdict, stop_reason: str) -> dict:
    """One judged episode: success (`verdict`, the outcome verifier's), basket outcomes, wrong
    adds, invalid actions, turns and how it ended (an `ENDS` key; `stop_reason` is the
    rollout's)."""
    from rlvr.verifiers.shop import is_minefield

    events = final["events"]
    return {"success": verdict.decision == "pass",
            "baskets": basket_outcomes(task.environment_snapshot["state"], events),
            "wrong_adds": sum(is_minefield(e) for e in events),
            "invalid": sum(e.get("tool") == "invalid" for e in events),
            "turns": int(final["turn"]),
            # the environment ends an episode on the last payment or at its turn limit (the
            # rollout then says "eos" too); otherwise the rollout's reason stands
            "end": {"eos": "paid", "max_turns": "max_turns"}.get(final.get("stop_reason"), stop_reason)}


def summarize(facts: list) -> dict:
    """Shares and means over `episode_facts` of one policy: success, each basket's outcome
    shares, wrong adds / invalid actions / turns per episode, the share of each way it ended."""
    n = max(len(facts), 1)
    baskets = max((len(f["baskets"]) for f in facts), default=0)
    return {"episodes": len(facts), "success": sum(f["success"] for f in facts) / n,
            "by_basket": [{o: sum(f["baskets"][b] == o for f in facts) / n for o in OUTCOMES}
                          for b in range(baskets)],
            "wrong_adds": float(np.mean([f["wrong_adds"] for f in facts])) if facts else 0.0,
            "invalid": float(np.mean([f["invalid"] for f in facts])) if facts else 0.0,
            "turns": float(np.mean([f["turns"] for f in facts])) if facts else 0.0,
            "ends": {k: sum(f["end"] == k for f in facts) / n for k in ENDS}}


def decisive_share(shares: Mapping) -> float | None:
    """P(paid right | cart right when paying) from one basket's outcome shares (None when no
    payment was made with the cart right)."""
    cart_right = shares[OUTCOMES[0]] + shares[OUTCOMES[1]]
    return shares[OUTCOMES[0]] / cart_right if cart_right else None


def policy_breakdown(config, folder: str, cache: str, workdir: str) -> dict:
    """`summarize` of the policy in `folder` sampled on `config`'s held-out evaluation, cached
    under `<cache>/local_failures/` by code version, the portable config and the weights."""
    from experiments.study.common import cached_on_policy, sample_evaluation
    from rlvr.verifiers.shop import ShopOutcomeVerifier

    def compute(r):
        episodes, rows = sample_evaluation(r, r.init_params)
        outcome = ShopOutcomeVerifier()
        return summarize([episode_facts(task, e.env.state(), outcome.verify(task, r.kit.episode_output(e.env)),
                                        e.stop_reason) for e, task in zip(episodes, rows)])

    return cached_on_policy(config, folder, cache=cache, workdir=workdir, name="local_failures",
                            version=BREAKDOWN_VERSION, compute=compute)[0]


def demo_state_success(config, folder: str, kept: frozenset | None, cache: str, workdir: str,
                       m: int = DEMO_M) -> dict:
    """{set: {"success": mean functional turn reward, "states": n}} for each of `STATE_SETS`:
    the policy in `folder` sampled m times at each demonstration state whose candidate key is in
    `kept` (of `config`'s task pool) and at the payment states of the first
    `DEMO_HELD_OUT_TASKS` held-out tasks; the key is the config seed's, the
    same for every policy of a seed. `kept` None (the seed's selection was not found): that set
    is None, not sampled. Cached under `<cache>/local_failures/`."""
    import jax

    from experiments.study.common import cached_on_policy, sample_demo_turns
    from rlvr.verifiers.shop import turn_kind

    pay = lambda cand: turn_kind(cand.reference_action) == "pay"  # noqa: E731
    selections = ((lambda cand: cand.key in kept, None), (pay, "held-out"))

    def compute(r):
        out = {}
        for name, (select, tasks) in zip(STATE_SETS, selections):
            if name == STATE_SETS[0] and kept is None:
                out[name] = None
                continue
            tasks = list(r.evaluator.tasks)[:DEMO_HELD_OUT_TASKS] if tasks else None
            cands, rewards, _ = sample_demo_turns(r, r.init_params, m, jax.random.PRNGKey(4000 + config.seed),
                                                  select=select, tasks=tasks)
            out[name] = {"success": float(rewards.mean()) if cands else None, "states": len(cands)}
        return out

    return cached_on_policy(config, folder, cache=cache, workdir=workdir, name="local_failures",
                            version=DEMO_VERSION, compute=compute,
                            extra=(None if kept is None else sorted(kept), m))[0]


def kept_pivots(block, records: str, cache: str, workdir: str) -> dict:
    """{BlockSeeds: frozenset of kept candidate keys, or None where the selection was not found}
    of each seed's PivotRL run (`shop_local.block_selection`: its work folder's pivots.json, the
    copy stored with the records, or recomputed on its warm start); a seed with no PivotRL run
    has none."""
    from experiments.study import shop_local

    out = {}
    for r in block.runs:
        if r.arm == "pivotrl":
            found = shop_local.block_selection(block, r, records, cache, workdir)
            out[r.seeds] = (None if found is None else
                            frozenset(c["key"] for c in found["candidates"] if c["kept"]))
    return out


@dataclasses.dataclass(frozen=True)
class Policy:
    """One policy of the block the report reads.

    Attributes:
      seeds: the (warm start, RL seed) `shop_local.BlockSeeds` whose held-out set samples it.
      label: "warm start (step 0)" or "<arm> after RL (<steps> steps)".
      arm: the arm whose config samples its evaluation (the warm start: its seed's first run's).
      folder: its Hugging Face folder (the warm start in the cache, a run's `<key>/export`).
      last_evaluation: the success its run's record logged last (None for a warm start).
    """

    seeds: object
    label: str
    arm: str
    folder: str
    last_evaluation: float | None


def policies(block, cache: str, workdir: str) -> list:
    """Every `Policy` of the block: per (warm start, RL seed) with a run, its warm start, then
    each run's final policy."""
    out, seen = [], set()
    for r in block.runs:
        if r.seeds not in seen:
            seen.add(r.seeds)
            start = r.record["config"].get("model.init_from", "")
            out.append(Policy(r.seeds, "warm start (step 0)", r.arm,
                              os.path.join(cache, "warm", os.path.basename(start)), None))
        rows = [x for x in r.record["rows"] if "eval/success" in x]
        steps = max((int(x["step"]) for x in r.record["rows"]), default=0)
        out.append(Policy(r.seeds, f"{r.arm} after RL ({steps} steps)", r.arm,
                          os.path.join(workdir, r.record["key"], "export"),
                          float(rows[-1]["eval/success"]) if rows else None))
    return out


def report(rows: list, scale: str, command: str) -> str:
    """The report's markdown from [(Policy, breakdown or None, demonstration states or None,
    whether the row was read back from the last numbers file)]: a row read back is marked †."""
    from experiments.study.report import table
    from experiments.study.shop_local import fmt_num

    lines = [f"# Where the local block's policies fail (scale `{scale}`)",
             "Each (warm start, RL seed)'s held-out evaluation, sampled again with the warm start and "
             "with each run's final policy (the episodes the run's evaluations score). Success is the "
             "outcome verifier's (every basket paid right, no wrong add); \"last evaluation\" is the "
             "success the run's record logged at its last evaluation, the same episodes. Regenerate: "
             f"`{command}`."]
    if any(carried for *_, carried in rows):
        from experiments.study.block_files import READ_BACK_NOTE

        lines.append(READ_BACK_NOTE)
    lines += ["", "## Per episode"]
    label = lambda p, carried: p.label + (" †" if carried else "")  # noqa: E731
    body = []
    for p, got, _, carried in rows:
        if got is None:
            body.append([p.seeds.label, p.label, "not in the cache", "", "", "", "", "", ""])
            continue
        body.append([p.seeds.label, label(p, carried), got["episodes"], fmt_num(got["success"]),
                     fmt_num(p.last_evaluation, missing="—"), f"{got['wrong_adds']:.2f}",
                     f"{got['invalid']:.2f}", f"{got['turns']:.1f}",
                     ", ".join(f"{ENDS[k]} {v:.3f}" for k, v in got["ends"].items() if v)])
    lines.append(table(["run", "policy", "episodes", "success", "last evaluation", "wrong adds per episode",
                        "invalid actions per episode", "turns", "how episodes ended"], body))
    lines += ["", "## Per basket: share of episodes with each outcome",
              "The last column is the decisive turn alone: of the payments made with the cart "
              "right, the share paid the right amount."]
    body = []
    for p, got, _, carried in rows:
        for b, shares in enumerate(got["by_basket"] if got else []):
            body.append([p.seeds.label, label(p, carried), b + 1] + [fmt_num(shares[o]) for o in OUTCOMES]
                        + [fmt_num(decisive_share(shares), missing="—")])
    lines.append(table(["run", "policy", "basket", *OUTCOMES, "paid right when the cart was right"], body))
    lines += ["", "## The decisive turn on demonstration states",
              f"Functional success of {DEMO_M} samples at each state (states in brackets): the seed's "
              "PivotRL run's kept pivots (the states it trains on; any action kind) and the payment "
              f"states of {DEMO_HELD_OUT_TASKS} held-out tasks. "
              "One sampling key per seed, so a seed's policies are compared on the same draws."]
    body = [[p.seeds.label, label(p, carried)] + [
        "not in the cache" if demo is None else "selection not found" if demo[k] is None else
        f"{fmt_num(demo[k]['success'], missing='—')} ({demo[k]['states']})" for k in STATE_SETS]
        for p, _, demo, carried in rows]
    lines.append(table(["run", "policy", *STATE_SETS], body))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from experiments.study import block_files, shop_local

    o = shop_local.open_block(__doc__.splitlines()[0], argv)
    a, scale, block, records = o.args, o.scale, o.block, o.records
    sc = shop_local.local_scale(scale, "local")
    lrs = block.settings.get("learning_rates") or shop_local.declared_learning_rates(scale)
    kept = kept_pivots(block, records, a.cache, a.workdir)
    name = shop_local.diagnostic_name("failures", scale, block)
    before = block_files.previous_rows(a.out, name, by=("run", "policy"), having="breakdown")
    rows, computed = [], []
    for p in policies(block, a.cache, a.workdir):
        got = demo = None
        carried = False
        old = before.get((p.seeds.label, p.label))  # its row in the last numbers file
        key = block_files.folder_key(p.folder)
        if os.path.exists(os.path.join(p.folder, "model.safetensors")):
            method = "grpo" if p.arm == "grpo" else "pivotrl"
            c = shop_local.arm_config(p.arm, p.seeds.seed, sc, warm=p.folder, lr=lrs[method])
            got = policy_breakdown(c, p.folder, a.cache, a.workdir)
            # every policy of a seed on the PivotRL run's pool and pivots
            pc = shop_local.arm_config("pivotrl", p.seeds.seed, sc, warm=p.folder, lr=lrs["pivotrl"])
            demo = demo_state_success(pc, p.folder, kept.get(p.seeds, frozenset()), a.cache, a.workdir)
        elif old is not None and old.get("folder", key) == key:
            got, demo, carried = old["breakdown"], old["demo_states"], True  # the last file's
        computed.append(got is not None and not carried)
        print(f"{p.seeds.label} {p.label}: " + (
            f"success {got['success']:.3f}{' (read back)' if carried else ''}; " + ", ".join(
                f"{k} {None if v is None or v['success'] is None else round(v['success'], 3)}"
                for k, v in (demo or {}).items()) if got else f"{p.folder} is not in the cache"),
              flush=True)
        rows.append((p, got, demo, carried))
    shop_local.exit_when_none_found(computed, f"policies is in --cache {a.cache} or --workdir {a.workdir}")
    md = report(rows, scale, shop_local.reader_command("local_failures.py", scale, block))
    shop_local.write_md_json(a.out, name, md,
                             [{"run": p.seeds.label, "policy": p.label,
                               "folder": block_files.folder_key(p.folder),
                               "last_evaluation": p.last_evaluation, "breakdown": got,
                               "demo_states": demo} for p, got, demo, _ in rows])
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
