"""Functional per-turn reward (docs/algorithms.md §6) vs exact match to the demonstration (PivotRL).

Both arms run PivotRL with the same warm-start, probe and training budget; only the turn scorer
differs (probe + training reward): `functional` accepts every action that is functionally
correct at the state (any needed key, any sum expression of the right value), `exact` only the
demonstration's text. Held-out success is always judged by the outcome verifier.

    python experiments/functional_vs_exact.py --seeds 3

Demonstrations follow `task.kwargs.demo_style` (default "diverse": per task a seeded read order and
answer form, one recorded trajectory per task); the exact-match scorer compares with that one
recorded demonstration action.
"""

import time

import common  # noqa: F401
from common import (base_pivot_config, before, cache_note, final, mean_std, parse, run_arms, table,
                    write_report)


def main():
    args = parse(__doc__)
    t0 = time.time()
    steps = max(2, int(24 * args.scale))
    def make(kind):
        def f(seed):
            c = base_pivot_config(seed)
            c.train.num_steps = steps
            c.eval.every = steps
            c.pivot.reward = kind
            return c
        return f

    res = run_arms("functional_vs_exact", [("functional", make("functional")),
                                           ("exact match", make("exact"))], args.seeds, args.workdir)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(5, 4))
    names = list(res)
    for i, a in enumerate(names):
        b, f = np.asarray(before(res[a])), np.asarray(final(res[a]))
        ax.errorbar([i - 0.1, i + 0.1], [b.mean(), f.mean()], yerr=[b.std(), f.std()], fmt="o-", capsize=4,
                    label=a)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("held-out success (SFT → after RL)")
    ax.legend()
    ax.set_title(f"Functional vs exact-match reward ({args.seeds} seeds)")
    fig.tight_layout()
    fig.savefig(common.os.path.join(common.RESULTS, "functional_vs_exact.png"), dpi=120)
    rows = []
    for a in names:
        runs = res[a]
        ps = [r["pivot_stats"] for r in runs]
        rows.append([a, mean_std([p["pivot/kept_fraction"] for p in ps]),
                     mean_std([p["pivot/mean_mu"] for p in ps]), mean_std(before(runs)),
                     mean_std(final(runs)), mean_std(np.asarray(final(runs)) - np.asarray(before(runs))),
                     mean_std([r["last"].get("reward/mean", 0.0) for r in runs])])
    body = table(rows, ["turn reward", "kept fraction", "probe mean μ̂", "success after SFT",
                        "final success", "gain", "local reward (last step)"])
    # how often do the two scorers disagree on the same probe samples? (pivots.json of both arms)
    import json
    import os

    diff = tot = func_ok = diff_cand = ncand = 0
    seeds_used = []
    for seed in range(args.seeds):
        # the functional arm may have run (identical config) as pivot_selection's filter arm
        fa = [os.path.join(args.workdir, "functional_vs_exact", "functional", f"seed{seed}", "pivots.json"),
              os.path.join(args.workdir, "pivot_selection", "sigma2>0_&_mu<lambda", f"seed{seed}", "pivots.json")]
        fb = os.path.join(args.workdir, "functional_vs_exact", "exact_match", f"seed{seed}", "pivots.json")
        fa = [f for f in fa if os.path.exists(f)]
        if not fa or not os.path.exists(fb):
            continue
        pa, pb = json.load(open(fa[0])), json.load(open(fb))
        seeds_used.append(seed)
        ncand += len(pa["candidates"])
        for x, y in zip(pa["candidates"], pb["candidates"]):
            d = sum(u != v for u, v in zip(x["rewards"], y["rewards"]))
            diff += d
            tot += len(x["rewards"])
            func_ok += sum(x["rewards"])
            diff_cand += d > 0
    body += (f"\n\nProbe samples (π_ref, m per candidate) on which the two scorers disagree: {diff} of {tot} "
             f"({100.0 * diff / max(tot, 1):.1f}%; {diff} of the {func_ok:.0f} functionally correct "
             f"samples = {100.0 * diff / max(func_ok, 1):.1f}% are not the recorded demonstration's text); "
             f"candidates with at least one disagreement: {diff_cand} of {ncand} (seeds {seeds_used}). "
             "The probe samples are the same in both arms (same keys), so this is the scorers' "
             "disagreement rate on the warm policy's own actions.\n\n" + cache_note(res) + "\n")
    write_report("functional_vs_exact", "Functional vs exact-match turn reward (PivotRL)", body,
                 {"steps": steps, "config": base_pivot_config(0).to_dict()}, t0, res)


if __name__ == "__main__":
    main()
