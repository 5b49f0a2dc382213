"""Which turns the local block's PivotRL runs train on: their pivots by kind of action.

    python experiments/study/pivot_kinds.py            # the full block's PivotRL runs
    python experiments/study/pivot_kinds.py --quick    # the quick block's
    python experiments/study/pivot_kinds.py --records experiments/study/records/shop_local_full_standard
                                                       # the control's (one basket)

A PivotRL arm probes every turn of its pool's demonstrations (`pivot.m` samples each, judged by
the turn verifier) and trains only on the turns it keeps (`pivot.selection`: mixed outcomes,
mean below `pivot.lambda_diff`). Each run's selection is in its work folder
(`<workdir>/<run key>/pivots.json`, written by the loop; a run that re-profiles keeps its last),
and stored with its record (`block_files`: a selection made at the start and lost is recomputed
on the stored warm start and checked against the record). This report reads it and names each
probed turn by the demonstration's action there (`get`, `add` or `pay`; a turn taken from the
policy's own rollouts is "rollout"): per kind, how many turns were candidates, how many kept,
and the probe's mean success. A run whose selection is found nowhere keeps its row from this
report's previous numbers file (marked †, filed under the same run key), else is named; with
none found nothing is written.
Writes results/shop_local/pivots_<scale>_<difficulty>.md/.json.
"""

from __future__ import annotations

import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

KINDS = ("get", "add", "pay", "rollout")


def demo_action_kinds(candidates: list, difficulty: str, demo_style: str) -> list[str]:
    """The kind (`KINDS`) of each probed turn: the keyword of the demonstration's action at its
    turn index, "rollout" for a turn from the policy's rollouts. A candidate's task is
    regenerated from its id (`shop-<split>-<difficulty>-<seed>-<index>`, `rlvr.tasks.shop.generate`)."""
    from rlvr.tasks.shop import demonstrations, generate

    wanted = collections.defaultdict(int)  # (split, seed) -> tasks needed
    for c in candidates:
        if c["source"] == "demo":
            head, seed, index = c["task_id"].rsplit("-", 2)
            split = head.split("-")[1]
            wanted[(split, int(seed))] = max(wanted[(split, int(seed))], int(index) + 1)
    tasks = {t.task_id: t for (split, seed), n in wanted.items()
             for t in generate(n, split=split, seed=seed, difficulty=difficulty)}
    demos, out = {}, []
    for c in candidates:
        if c["source"] != "demo":
            out.append("rollout")
            continue
        if c["task_id"] not in tasks:
            raise ValueError(f"pivot candidate {c['key']!r}: task {c['task_id']!r} is not one that "
                             f"shop.generate(difficulty={difficulty!r}) makes")
        if c["task_id"] not in demos:
            demos[c["task_id"]] = demonstrations(tasks[c["task_id"]], style=demo_style)
        out.append(demos[c["task_id"]][c["turn_index"]].action.split(" ", 1)[0].strip())
    return out


def _kind_order(kind: str) -> int:
    return KINDS.index(kind) if kind in KINDS else len(KINDS)


def by_kind(candidates: list, kinds: list) -> dict:
    """{kind: {"candidates", "kept", "probe_success"}} over the candidates (`kinds` as
    `demo_action_kinds` gives them); probe_success is NaN for a selection that probes nothing
    (`pivot.selection="all"` keeps every turn)."""
    out = {}
    for k in sorted(set(kinds), key=_kind_order):
        mine = [c for c, kc in zip(candidates, kinds) if kc == k]
        probed = [float(c["mean"]) for c in mine if "mean" in c]
        out[k] = {"candidates": len(mine), "kept": sum(bool(c["kept"]) for c in mine),
                  "probe_success": sum(probed) / len(probed) if probed else float("nan")}
    return out


def report(rows: list, scale: str, command: str, difficulty: str = "local") -> str:
    """The report's markdown from [(arm, run label, `by_kind` or None, whether the row was read
    back from the last numbers file)] of the block on checkout variant `difficulty`: a row read
    back is marked †."""
    from experiments.study.block_files import READ_BACK_NOTE
    from experiments.study.report import table
    from experiments.study.shop_local import fmt_num

    whose = "the local block's" if difficulty == "local" else f"the `{difficulty}` block's"
    lines = [f"# Which turns {whose} PivotRL runs train on (scale `{scale}`)",
             "Each run's candidate turns by the demonstration's action there: candidates, turns kept "
             "as pivots (the only turns the run trains on), and the probe's mean success. Regenerate: "
             f"`{command}`."]
    if any(carried for *_, carried in rows):
        lines.append(READ_BACK_NOTE)
    lines.append("")
    body = []
    for arm, label, got, carried in rows:
        if got is None:
            body.append([arm, label, "selection not found", "", "", ""])
            continue
        for k, v in sorted(got.items(), key=lambda kv: _kind_order(kv[0])):  # read back: sorted by name
            body.append([arm, label + (" †" if carried else ""), k, v["candidates"], v["kept"],
                         fmt_num(v["probe_success"], missing="not probed")])
    lines.append(table(["arm", "run", "action", "candidate turns", "kept as pivots", "probe success"],
                       body))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from experiments.study import block_files, shop_local

    o = shop_local.open_block(__doc__.splitlines()[0], argv)
    a, scale, block, records = o.args, o.scale, o.block, o.records
    name = shop_local.diagnostic_name("pivots", scale, block)
    before = block_files.previous_rows(a.out, name, by=("arm", "run"), having="by_kind")
    rows, keys, computed = [], [], []
    for r in block.runs:
        if r.arm == "grpo":
            continue
        found = shop_local.block_selection(block, r, records, a.cache, a.workdir)
        got, carried = None, False
        old = before.get((r.arm, r.seeds.label))
        if found is not None:
            kw = r.record["config"]["task.kwargs"]
            got = by_kind(found["candidates"], demo_action_kinds(found["candidates"], kw["difficulty"],
                                                                 kw["demo_style"]))
        elif old is not None and old.get("key", r.record["key"]) == r.record["key"]:
            got, carried = old["by_kind"], True  # not on this machine: the last numbers file's
        computed.append(found is not None)
        rows.append((r.arm, r.seeds.label, got, carried))
        keys.append(r.record["key"])
    shop_local.exit_when_none_found(computed, f"PivotRL runs has its selection in --workdir {a.workdir}, "
                                              f"in {records} or its warm start in --cache {a.cache}")
    md = report(rows, scale, shop_local.reader_command("pivot_kinds.py", scale, block),
                shop_local.block_difficulty(block))
    shop_local.write_md_json(a.out, name, md,
                             [{"arm": arm, "run": label, "key": key, "by_kind": got}
                              for (arm, label, got, _), key in zip(rows, keys)])
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
