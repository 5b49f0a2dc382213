"""SAO vs full-trajectory GRPO; Skip-Observation GAE vs naive token GAE; critic updates 1 vs 2;
value pre-training (critic warm-up) vs cold critic.

Every arm starts from the same warm start per seed and stops at the same rollout budget (sampled
tokens, critic warm-up rollouts included). The SAO reference arm is configs/sao.py
(skip-observation GAE, 2 critic updates per policy update, 5 critic warm-up steps); each other
SAO arm changes one knob.

    python experiments/sao_ablations.py --seeds 3
"""

import time

import common  # noqa: F401
from common import (base_grpo_config, base_sao_config, before, cache_note, final, mean_std, parse,
                    run_arms, success_curves, table, write_report)


def main():
    args = parse(__doc__)
    t0 = time.time()
    budget = int(5000 * args.scale)
    def sao(**kw):
        def f(seed):
            c = base_sao_config(seed)
            c.train.num_steps = 500
            c.eval.every = 4
            c.train.token_budget = budget
            for k, v in kw.items():
                c.algorithm[k] = v
            return c
        return f

    def grpo(seed):
        c = base_grpo_config(seed)
        c.train.num_steps = 500
        c.eval.every = 3
        c.train.token_budget = budget
        return c

    arms = [("SAO (skip-obs, 2 critic, warm-up)", sao()),
            ("GRPO full-trajectory", grpo),
            ("SAO naive token GAE", sao(skip_observations=False)),
            ("SAO 1 critic update", sao(critic_updates=1)),
            ("SAO cold critic", sao(critic_warmup_steps=0))]
    res = run_arms("sao_ablations", arms, args.seeds, args.workdir)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    success_curves(ax, res)
    ax.set_title(f"SAO ablations ({args.seeds} seeds, mean ± std)")
    fig.tight_layout()
    fig.savefig(common.os.path.join(common.RESULTS, "sao_ablations.png"), dpi=120)
    import numpy as np

    rows = []
    for a, runs in res.items():
        rows.append([a, mean_std(before(runs)), mean_std(final(runs)),
                     mean_std(np.asarray(final(runs)) - np.asarray(before(runs))),
                     mean_std(final(runs, "cost/sampled_tokens")), mean_std([r["step"] for r in runs]),
                     mean_std([r["last"].get("critic/explained_variance", float("nan")) for r in runs]),
                     mean_std([r["last"].get("queue/dropped_stale", 0.0) for r in runs])])
    body = table(rows, ["arm", "success after SFT", "final success", "gain", "rollout tokens",
                        "policy steps", "critic explained var (last)", "stale dropped"])
    body += f"\n\nEqual rollout budget: {budget} sampled tokens per run.\n\n" + cache_note(res) + "\n"
    write_report("sao_ablations", "SAO ablations", body,
                 {"budget_tokens": budget, "sao": base_sao_config(0).to_dict(),
                  "grpo": base_grpo_config(0).to_dict()}, t0, res)


if __name__ == "__main__":
    main()
