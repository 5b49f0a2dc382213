"""Difficulty check: held-out success of the SFT warm-started tiny policy.

The multi-turn KV task must be hard enough that the warm-started policy succeeds "sometimes, not
always" (target 0.15-0.6). Measures sampled success (T = 1, 32 held-out tasks × 2 samples,
episodes through the environment + outcome verifier) after several SFT step counts, for each
difficulty preset: each cell is a run of the training loop with `train.num_steps = 0` (warm start
and the before-RL evaluation only).

    python experiments/difficulty_check.py --seeds 1
"""

import time

import common  # noqa: F401
from common import base_pivot_config, cache_note, mean_std, parse, run_arms, table, write_report

TARGET = (0.15, 0.6)
GRID = [(d, s) for d in ("easy", "medium") for s in (50, 100, 150, 250)]


def main():
    args = parse(__doc__)
    t0 = time.time()

    def make(difficulty, sft_steps):
        def f(seed):
            c = base_pivot_config(seed)
            c.task.kwargs.difficulty = difficulty
            c.train.sft_steps = sft_steps
            c.train.num_steps = 0
            return c
        return f

    res = run_arms("difficulty", [(f"{d} / {s} SFT steps", make(d, s)) for d, s in GRID],
                   args.seeds, args.workdir)
    rows, inside = [], []
    for (d, s), (arm, runs) in zip(GRID, res.items()):
        succ = [r["before"]["eval/success"] for r in runs]
        turns = [r["before"].get("eval/turns", float("nan")) for r in runs]
        rows.append([d, str(s), mean_std(succ), mean_std(turns)])
        if all(TARGET[0] <= x <= TARGET[1] for x in succ):
            inside.append(f"{d} with {s} SFT steps")
    body = table(rows, ["difficulty", "SFT steps", "held-out success (mean ± std over seeds)",
                        "turns / episode"])
    c = base_pivot_config(0)
    default = f"{c.task.kwargs.difficulty} with {c.train.sft_steps} SFT steps"
    body += (f"\n\nCells whose success lies in the target band {TARGET} for every seed: "
             f"{', '.join(inside) or 'none'}. The configs' default ({default}) is "
             f"{'inside' if default in inside else 'outside'} the band.\n\n" + cache_note(res) + "\n")
    write_report("difficulty", "Difficulty check: success of the warm-started policy", body,
                 {"grid": GRID, "target": TARGET}, t0, res)


if __name__ == "__main__":
    main()
