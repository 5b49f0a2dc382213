"""Ablation 4 (issue 6): SAO vs full-trajectory GRPO; Skip-Observation GAE vs naive token GAE;
critic updates 1 vs 2; value pre-training vs cold critic.

Every arm starts from the same warm-start per seed and stops at the same rollout budget (action
tokens generated, value pre-training rollouts included). The SAO reference arm is configs/sao.py
(skip-observation GAE, 2 critic updates per policy update, value pre-training); each other SAO
arm changes one knob.

    python experiments/sao_ablations.py --seeds 3
"""

import time

import common  # noqa: F401
from common import (base_grpo_config, base_sao_config, before, final, mean_std, parse, run_arms,
                    success_curves, table, write_report)


def main():
    args = parse(__doc__)
    t0 = time.time()
    budget = int(5000 * args.scale)
    from rlvr.train import agent_grpo_loop, sao_loop

    def sao(**kw):
        def f(seed):
            c = base_sao_config(seed)
            c.train.num_steps = 500
            c.eval.every = 4
            c.sao.token_budget = budget
            for k, v in kw.items():
                c.sao[k] = v
            return c
        return f

    def grpo(seed):
        c = base_grpo_config(seed)
        c.train.num_steps = 500
        c.eval.every = 3
        c.grpo.token_budget = budget
        return c

    arms = [("SAO (skip-obs, 2 critic, pretrain)", sao_loop, sao()),
            ("GRPO full-trajectory", agent_grpo_loop, grpo),
            ("SAO naive token GAE", sao_loop, sao(skip_observations=False)),
            ("SAO 1 critic update", sao_loop, sao(critic_updates=1)),
            ("SAO cold critic", sao_loop, sao(value_pretrain_steps=0))]
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
                     mean_std(final(runs, "rollout_tokens")), mean_std([r["step"] for r in runs]),
                     mean_std([r["last"].get("critic/explained_variance", float("nan")) for r in runs]),
                     mean_std([r["last"].get("queue/dropped_stale", 0.0) for r in runs])])
    body = table(rows, ["arm", "success after SFT", "final success", "gain", "rollout tokens",
                        "policy steps", "critic explained var (last)", "stale dropped"])
    body += f"\n\nEqual rollout budget: {budget} action tokens per run.\n"
    write_report("sao_ablations", "SAO ablations", body,
                 {"budget_tokens": budget, "sao": base_sao_config(0).sao.to_dict(),
                  "grpo": base_grpo_config(0).grpo.to_dict()}, t0)


if __name__ == "__main__":
    main()
