"""Warm-start success with canonical vs diverse demonstrations (docs/algorithms.md §6).

Diverse demonstrations (`kv_agent.demonstrations(style="diverse")`: per-episode seeded key order
and answer form) carry more entropy per action than the canonical oracle, so the same SFT budget
may leave the warm policy weaker. This measures held-out success after SFT (the default
configs/pivotrl.py settings; 32 eval tasks × 2 samples, T = 1) for both styles: runs of the
training loop with `train.num_steps = 0` (warm start and the before-RL evaluation only).

    python experiments/demo_style_check.py --seeds 3
"""

import time

import common  # noqa: F401
from common import base_pivot_config, cache_note, mean_std, parse, run_arms, table, write_report

STYLES = ("canonical", "diverse")


def main():
    args = parse(__doc__)
    t0 = time.time()
    import numpy as np

    def make(style):
        def f(seed):
            c = base_pivot_config(seed)
            c.task.kwargs.demo_style = style
            c.train.num_steps = 0
            return c
        return f

    res = run_arms("demo_style", [(s, make(s)) for s in STYLES], args.seeds, args.workdir)
    succ = {s: np.array([r["before"]["eval/success"] for r in res[s]]) for s in STYLES}
    rows = [[s, str(seed), f"{succ[s][seed]:.3f}"] for s in STYLES for seed in range(args.seeds)]
    body = table(rows, ["demo style", "seed", "held-out success after SFT"])
    body += "\n\n" + table([[s, mean_std(v)] for s, v in succ.items()], ["demo style", "success (mean ± std)"])
    d = succ["diverse"] - succ["canonical"]
    body += (f"\n\nSeed-paired difference diverse − canonical: {d.mean():+.3f} (min {d.min():+.3f}, "
             f"max {d.max():+.3f}; {int((d > 0).sum())} of {len(d)} seeds higher with diverse "
             f"demonstrations).\n\n" + cache_note(res) + "\n")
    write_report("demo_style", "Warm-start success: canonical vs diverse demonstrations", body,
                 {"config": base_pivot_config(0).to_dict()}, t0, res)


if __name__ == "__main__":
    main()
