"""Pivot selection — all turns / random turns vs σ̂² > 0 vs σ̂² > 0 ∧ μ̂ < λ_diff.

Same warm start per seed, same number of RL steps for every arm (`prompts_per_step` states × K
fresh samples per step); `random` keeps the same fraction of candidates as a reference (0.3). The
probe cost (m samples per candidate) is charged to the filtered arms' rollout budget.

    python experiments/pivot_selection.py --seeds 3
"""

import time

import common  # noqa: F401
from common import (base_pivot_config, before, cache_note, final, mean_std, parse, run_arms, table,
                    write_report)

ARMS = [("all turns", "all"), ("random turns", "random"), ("sigma2>0", "variance"),
        ("sigma2>0 & mu<lambda", "filter")]


def main():
    args = parse(__doc__)
    t0 = time.time()
    steps = max(2, int(24 * args.scale))
    def make(sel):
        def f(seed):
            c = base_pivot_config(seed)
            c.train.num_steps = steps
            c.eval.every = steps
            c.pivot.selection = sel
            return c
        return f

    res = run_arms("pivot_selection", [(a, make(s)) for a, s in ARMS], args.seeds, args.workdir)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6, 4))
    names = list(res)
    gain = [np.asarray(final(res[a])) - np.asarray(before(res[a])) for a in names]
    ax.bar(range(len(names)), [g.mean() for g in gain], yerr=[g.std() for g in gain], capsize=4)
    ax.set_xticks(range(len(names)), names, rotation=15)
    ax.set_ylabel(f"success gain after {steps} RL steps")
    ax.axhline(0, color="k", lw=0.5)
    ax.set_title(f"Pivot selection ({args.seeds} seeds, mean ± std)")
    fig.tight_layout()
    fig.savefig(common.os.path.join(common.RESULTS, "pivot_selection.png"), dpi=120)
    rows = []
    for a in names:
        runs = res[a]
        ps = [r["pivot_stats"] for r in runs]
        rows.append([a, mean_std([p.get("pivot/kept_fraction", 1.0) for p in ps]),
                     mean_std(before(runs)), mean_std(final(runs)),
                     mean_std(np.asarray(final(runs)) - np.asarray(before(runs))),
                     mean_std([r["last"].get("reward/mean", 0.0) for r in runs]),
                     mean_std(final(runs, "cost/sampled_tokens"))])
    body = table(rows, ["selection", "kept fraction", "success after SFT", "final success",
                        "gain", "local reward (last step)", "rollout tokens (probe incl.)"])
    ps0 = res["sigma2>0 & mu<lambda"][0]["pivot_stats"]
    body += ("\n\nProbe statistics (seed 0, filter arm): " + ", ".join(
        f"{k.split('/')[1]}={v:.3f}" for k, v in ps0.items() if isinstance(v, float)) + "\n\n"
             + cache_note(res) + "\n")
    c = base_pivot_config(0)
    write_report("pivot_selection", "Pivot selection ablation (PivotRL)", body,
                 {"steps": steps, "config": c.to_dict()}, t0, res)


if __name__ == "__main__":
    main()
