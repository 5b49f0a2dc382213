"""What a warm start has learned to copy, and what RL changed: NLL by kind of action token on
held-out demonstrations of the local block's testbed.

    python experiments/study/copying.py                 # the full block's warm starts and runs
    python experiments/study/copying.py --quick         # the quick block's

Every action token of a demonstration (`rlvr.tasks.shop.demonstrations`, the text SFT trains on)
gets a kind (`token_kinds`): the item letter of a read or an add (a copy of the basket's order
line; in the first basket, and in the later ones, which follow other baskets' orders), the
quantity, the payment's amount (on the local variant a copy of the subtotal the last
observation answered: the decisive turn), and the rest (the action's keyword, spaces, newlines).
For each warm-start folder the report gives the mean NLL of each kind, and the fraction of its
tokens the policy puts below half probability (NLL > ln 2). A policy that copies the order has
item-letter NLL near 0; one that guesses among the shop's 8 items, near ln 8 ≈ 2.08.

The folders are the SFT rounds that block.json lists (found in the study cache by their keys),
each warm start's curriculum stage, and the final policy of each run whose record the block holds
(exported by the training loop to `<workdir>/<run key>/export`): the payment amount's NLL before
and after RL shows whether an arm learned the decisive turn, which episode success (all three
payments right) shows only once it is mostly right. A folder missing from the cache is read back
from this report's previous numbers file (marked †; `block_files.previous_rows`), else named, not
recomputed (`shop_local.py` computes them); with none found (a fresh clone) nothing is written.
The warm starts the block stores with its records (`block_files`) are restored into the cache.
Writes
results/shop_local/copying_<scale>_<difficulty>.md/.json.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

KINDS = ("item letter, basket 1", "item letter, baskets 2-3", "quantity", "payment amount", "other")
EVAL_TASKS = 128
EVAL_SEED = 777  # the held-out draw of this diagnosis (`shop.generate`, split "eval")


def token_kinds(action: str, basket: int = 0) -> list[str]:
    """The kind (`KINDS`) of each character of one checkout action (``get b``, ``add b1``,
    ``pay 13``, each with its newline) of basket `basket` (0-based)."""
    word = action.split(" ", 1)[0]
    out = []
    for j, _ in enumerate(action):
        if word in ("get", "add") and j == 4:
            out.append("item letter, basket 1" if basket == 0 else "item letter, baskets 2-3")
        elif word == "add" and j == 5:
            out.append("quantity")
        elif word == "pay" and 4 <= j < len(action.rstrip("\n")):
            out.append("payment amount")
        else:
            out.append("other")
    return out


def demo_rows(tasks, tokenizer) -> tuple[list, list]:
    """(token ids, kinds) per task: [bos] + prompt + (action + observation) per demonstration turn;
    kind None on every token the SFT loss does not cover (prompt, observations)."""
    from rlvr.tasks.shop import demonstrations

    ids_rows, kind_rows = [], []
    for t in tasks:
        ids = [tokenizer.bos_id] + tokenizer.encode(t.prompt)
        kinds = [None] * len(ids)
        basket = 0
        for turn in demonstrations(t):
            a, o = tokenizer.encode(turn.action), tokenizer.encode(turn.observation)
            if len(a) != len(turn.action):
                raise ValueError(f"token_kinds needs one token per character; {turn.action!r} "
                                 f"has {len(a)} tokens")
            ids += a + o
            kinds += token_kinds(turn.action, basket) + [None] * len(o)
            basket += turn.action.startswith("pay ")
        ids_rows.append(ids)
        kind_rows.append(kinds)
    return ids_rows, kind_rows


def nll_by_kind(folder: str, tasks, batch: int = 32) -> dict:
    """{kind: {"nll": mean NLL, "above_ln2": fraction with NLL > ln 2, "tokens": n}} of the policy
    saved in `folder` (a Hugging Face folder) on `tasks`' demonstrations."""
    import jax
    import jax.numpy as jnp

    from rlvr.models.hf import from_pretrained
    from rlvr.models.tokenizer import CharTokenizer
    from rlvr.tasks.shop import ALPHABET

    model = from_pretrained(folder)
    ids_rows, kind_rows = demo_rows(tasks, CharTokenizer(ALPHABET))
    length = max(map(len, ids_rows))
    forward = jax.jit(lambda x, m: jax.nn.log_softmax(model(x, attention_mask=m), -1))
    got = {k: [] for k in KINDS}
    for s in range(0, len(ids_rows), batch):
        rows = ids_rows[s:s + batch]
        x = np.zeros((len(rows), length), np.int32)
        m = np.zeros((len(rows), length), bool)
        for i, r in enumerate(rows):
            x[i, :len(r)], m[i, :len(r)] = r, True
        lp = np.asarray(forward(jnp.asarray(x), jnp.asarray(m)))
        for i, r in enumerate(rows):
            for p, kind in enumerate(kind_rows[s + i]):
                if kind is not None:
                    got[kind].append(-float(lp[i, p - 1, r[p]]))
    return {k: {"nll": float(np.mean(v)), "above_ln2": float(np.mean(np.array(v) > math.log(2))),
                "tokens": len(v)} for k, v in got.items() if v}


def warm_folders(premise: dict, cache: str, scale: str) -> list:
    """[(warm start, stage label, folder)] of the block: each warm start's curriculum stage (when
    its rounds use one), then its SFT rounds in block.json's order."""
    from experiments.study import arms, runner, shop_local

    sc = shop_local.local_scale(scale, "local")
    out = []
    for w, entry in sorted(premise.items()):
        seed = int(w[len("warm"):])
        rounds = entry.get("rounds", [])
        if any(r["recipe"] == "curriculum" for r in rounds):
            spec = shop_local.curriculum_spec(arms.base_config("grpo", seed, sc), seed)
            out.append((w, "curriculum stage (one basket)",
                        os.path.join(cache, "warm", runner.content_key(spec))))
        out += [(w, f"{r['recipe']} round {r['round']} ({r['sft_steps']} steps on the testbed)",
                 os.path.join(cache, "warm", r["warm_start"])) for r in rounds]
    return out


def run_folders(block, workdir: str) -> list:
    """[(warm start, label, folder)] of the block's finished runs (`shop_local.load_block`'s runs,
    in warm start, RL seed, arm order): each run's final policy, `<workdir>/<key>/export`."""
    return [(f"warm{r.seeds.warm}",
             f"{r.arm} {r.seeds.label} after RL "
             f"({max((int(x['step']) for x in r.record['rows']), default=0)} steps)",
             os.path.join(workdir, r.record["key"], "export")) for r in block.runs]


def _present(folder: str) -> bool:
    """A warm start (warm.json) or a run's export (rlvr_export.json) written whole."""
    return any(os.path.exists(os.path.join(folder, f)) for f in ("warm.json", "rlvr_export.json"))


def report(rows: list, scale: str, command: str) -> str:
    """The report's markdown from [(warm start, policy label, folder, NLL by kind or None, whether
    the row was read back from the last numbers file)]: a row read back is marked †."""
    from experiments.study.report import table

    lines = [f"# What the local block's policies copy (scale `{scale}`)",
             f"Mean NLL per action token by kind on the demonstrations of {EVAL_TASKS} held-out "
             f"3-basket tasks (split \"eval\", seed {EVAL_SEED}); in brackets the fraction of those "
             "tokens given under half probability. A guess among the shop's 8 items is ln 8 ≈ 2.08 "
             f"nats per item letter. Regenerate: `{command}`."]
    if any(carried for *_, carried in rows):
        from experiments.study.block_files import READ_BACK_NOTE

        lines.append(READ_BACK_NOTE)
    lines.append("")
    body = []
    for w, stage, folder, got, carried in rows:
        if got is None:
            body.append([w, stage] + ["not in the cache"] * len(KINDS))
        else:
            body.append([w, stage + (" †" if carried else "")] + [f"{got[k]['nll']:.3f} ({got[k]['above_ln2']:.2f})" if k in got else "n/a"
                                      for k in KINDS])
    lines.append(table(["warm start", "policy", *KINDS], body))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from experiments.study import block_files, shop_local
    from rlvr.tasks.shop import generate

    o = shop_local.open_block(__doc__.splitlines()[0], argv)
    a, scale, block = o.args, o.scale, o.block
    tasks = generate(EVAL_TASKS, split="eval", seed=EVAL_SEED, difficulty=shop_local.LOCAL_DIFFICULTY)
    name = shop_local.diagnostic_name("copying", scale, block)
    before = block_files.previous_rows(a.out, name, by=("warm_start", "folder"), having="nll_by_kind")
    rows, computed = [], []
    for w, stage, wf in warm_folders(block.premise, a.cache, scale) + run_folders(block, a.workdir):
        got = nll_by_kind(wf, tasks) if _present(wf) else None
        computed.append(got is not None)
        old = before.get((w, block_files.folder_key(wf)))  # its row in the last numbers file
        carried = got is None and old is not None
        got = old["nll_by_kind"] if carried else got
        print(f"{w} {stage}: " + (", ".join(f"{k} {v['nll']:.3f}" for k, v in got.items())
                                  + (" (read back)" if carried else "")
                                  if got else f"{wf} is not in the cache"), flush=True)
        rows.append((w, stage, wf, got, carried))
    shop_local.exit_when_none_found(computed, f"policies is in --cache {a.cache} or --workdir {a.workdir}")
    md = report(rows, scale, shop_local.reader_command("copying.py", scale, block))
    shop_local.write_md_json(a.out, name, md,
                             [{"warm_start": w, "stage": s, "folder": block_files.folder_key(wf), "nll_by_kind": g}
                              for w, s, wf, g, _ in rows])
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
