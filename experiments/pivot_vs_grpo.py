"""PivotRL vs full-trajectory GRPO at equal rollout budget.

Both arms start from the same SFT warm start per seed and stop once they have generated
`budget` sampled tokens (`train.token_budget`; PivotRL's probe cost included; turns and tokens
counted the same way, the loop's `cost/*` metrics). Reports success vs rollout tokens (plot) and final
success / tokens spent (table). Seed 000's claim: same final success for a fraction of the cost.

    python experiments/pivot_vs_grpo.py --seeds 3
"""

import time

import common  # noqa: F401  (sets sys.path / JAX_PLATFORMS)
from common import (base_grpo_config, base_pivot_config, before, cache_note, final, mean_std, parse,
                    run_arms, success_curves, table, write_report)


def main():
    args = parse(__doc__)
    t0 = time.time()
    budget = int(6000 * args.scale)
    def pivot(seed):
        c = base_pivot_config(seed)
        c.train.num_steps = 500
        c.train.token_budget = budget
        c.eval.every = 8
        return c

    def grpo(seed):
        c = base_grpo_config(seed)
        c.train.num_steps = 500
        c.train.token_budget = budget
        c.eval.every = 3
        return c

    res = run_arms("pivot_vs_grpo", [("pivotrl", pivot), ("grpo_full", grpo)], args.seeds, args.workdir)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6, 4))
    success_curves(ax, res)
    ax.set_title(f"PivotRL vs full-trajectory GRPO ({args.seeds} seeds, mean ± std)")
    fig.tight_layout()
    fig.savefig(common.os.path.join(common.RESULTS, "pivot_vs_grpo.png"), dpi=120)

    def at_half(runs):
        out = []
        for r in runs:
            h = r["history"]
            out.append(np.interp(budget / 2, [p.get("cost/sampled_tokens", 0.0) for p in h],
                                 [p["eval/success"] for p in h]))
        return out

    rows = []
    for arm, runs in res.items():
        rows.append([arm, mean_std(before(runs)), mean_std(at_half(runs)), mean_std(final(runs)),
                     mean_std(final(runs, "cost/sampled_tokens")), mean_std(final(runs, "cost/turns")),
                     mean_std([r["step"] for r in runs]),
                     mean_std([r.get("pivot_stats", {}).get("pivot/probe_tokens", 0) for r in runs])])
    body = table(rows, ["arm", "success after SFT", f"success at {budget // 2} tokens",
                        "final success", "rollout tokens spent", "rollout turns", "RL steps",
                        "probe tokens (incl.)"])
    p_final, g_final = np.mean(final(res["pivotrl"])), np.mean(final(res["grpo_full"]))
    body += (f"\n\nEqual rollout budget: {budget} sampled tokens per run (probe included). Mean final success PivotRL "
             f"{p_final:.3f} vs GRPO {g_final:.3f} (difference {p_final - g_final:+.3f}); spread is "
             f"the std over {args.seeds} seeds (evaluation: 32 held-out tasks × 2 samples).\n\n"
             + cache_note(res) + "\n")
    settings = {"budget_tokens": budget, "pivotrl": base_pivot_config(0).to_dict(),
                "grpo_full": base_grpo_config(0).to_dict()}
    write_report("pivot_vs_grpo", "PivotRL vs full-trajectory GRPO at equal rollout budget", body,
                 settings, t0, res)


if __name__ == "__main__":
    main()
